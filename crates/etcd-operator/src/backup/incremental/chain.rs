//! The chain of segments after a full backup: listing, linking in revision
//! order, and finding the first gap. A chain is used only up to its first
//! gap; what lies beyond cannot be replayed on top of the base.

use std::fmt;
use std::path::Path as FsPath;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;

use super::segment::{
    SEGMENT_METADATA_SUFFIX, SegmentMetadata, base_name, chain_folder, load_segment_bytes,
    object_path, read_segment_metadata, revisions_in_name,
};
use crate::backup::{BackupError, BackupErrorCategory, BackupMetadata, BackupStore};

/// Why a chain of segments cannot be continued or replayed further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapKind {
    /// Revisions are missing between two segments, or between the full
    /// backup and the first segment (a segment lost, or never written).
    Hole,
    /// A segment is unreadable: object missing, truncated, altered, or
    /// metadata that is not the chain's.
    Corrupt,
    /// etcd no longer has the history the watch must resume from.
    Compacted,
    /// The endpoints serve another etcd cluster than the full backup's
    /// (the cluster was restored or replaced).
    ClusterChanged,
}

impl GapKind {
    /// A short name for logs, Events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hole => "hole",
            Self::Corrupt => "corrupt",
            Self::Compacted => "compacted",
            Self::ClusterChanged => "cluster-changed",
        }
    }
}

/// A gap: every revision up to `after_revision` is in the chain, the next
/// one cannot be had from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainGap {
    /// What kind of gap.
    pub kind: GapKind,
    /// The last revision the chain holds before the gap.
    pub after_revision: i64,
    /// What is wrong, for status and Events.
    pub message: String,
}

impl fmt::Display for ChainGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "gap after revision {} ({}): {}",
            self.after_revision,
            self.kind.as_str(),
            self.message
        )
    }
}

/// The usable segments after a full backup.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentChain {
    /// Base name of the full backup.
    pub base: String,
    /// Revision of the full backup.
    pub base_revision: i64,
    /// The segments in revision order, each starting at or before the
    /// revision after the previous one's last (only up to the first gap).
    pub segments: Vec<SegmentMetadata>,
    /// Every revision from the full backup's up to this one can be
    /// restored (the full backup's own when there is no segment).
    pub last_revision: i64,
    /// The first gap, if any: segments beyond it are not listed.
    pub gap: Option<ChainGap>,
}

/// Lists, links and verifies the segments after `base`: every usable
/// segment is downloaded and checked (stored SHA-256, encoding, revisions)
/// but not kept. The chain stops at the first gap, which it reports.
pub async fn segment_chain(
    store: &BackupStore,
    base: &BackupMetadata,
) -> Result<SegmentChain, BackupError> {
    verified_chain(store, base, None).await
}

/// What [`fetch_segments`] copied.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedSegments {
    /// Segments copied.
    pub segments: usize,
    /// The last revision they reach (the full backup's when none).
    pub last_revision: i64,
    /// The gap the chain stops at, if any.
    pub gap: Option<ChainGap>,
}

/// Copies the usable segments after `base`, verified, into `dir` with the
/// layout they have in the cluster's folder, so that a
/// [`BackupStore`] over `dir` (empty folder) serves the same chain to
/// [`segment_chain`] and [`super::replay_segments`].
pub async fn fetch_segments(
    store: &BackupStore,
    base: &BackupMetadata,
    dir: &FsPath,
) -> Result<FetchedSegments, BackupError> {
    let chain = verified_chain(store, base, Some(dir)).await?;
    Ok(FetchedSegments {
        segments: chain.segments.len(),
        last_revision: chain.last_revision,
        gap: chain.gap,
    })
}

/// The segment metadata objects at `paths` (in name = first revision
/// order): readable ones as `Ok`, unreadable ones as the error that makes
/// them corrupt ([`BackupErrorCategory::Corrupt`]); any other error ends
/// the reading.
async fn read_segments(
    store: &BackupStore,
    paths: Vec<Path>,
) -> Result<Vec<(Path, Result<SegmentMetadata, BackupError>)>, BackupError> {
    let mut listed = Vec::with_capacity(paths.len());
    for path in paths {
        let metadata = match read_segment_metadata(store, &path).await {
            Ok(metadata) => Ok(metadata),
            Err(error) if error.category() == BackupErrorCategory::Corrupt => Err(error),
            Err(error) => return Err(error),
        };
        listed.push((path, metadata));
    }
    Ok(listed)
}

/// The segment metadata objects of the chain after `base_name`, in name
/// (= first revision) order, listed without reading any of them.
pub async fn segment_metadata_paths(
    store: &BackupStore,
    base_name: &str,
) -> Result<Vec<Path>, BackupError> {
    let folder = object_path(store, &chain_folder(base_name));
    let mut paths: Vec<Path> = store
        .store()
        .list(Some(&folder))
        .map_ok(|meta| meta.location)
        .try_filter(|path| {
            let keep = path
                .filename()
                .is_some_and(|name| name.ends_with(SEGMENT_METADATA_SUFFIX));
            std::future::ready(keep)
        })
        .try_collect()
        .await?;
    paths.sort();
    Ok(paths)
}

/// The highest revision any listed segment of a chain can reach, from the
/// segments' names alone: an upper bound of the chain's
/// [`SegmentChain::last_revision`] (a hole or a corrupt segment can only
/// stop it earlier). `None` when a name does not state its revisions.
pub fn named_reach(base_revision: i64, paths: &[Path]) -> Option<i64> {
    paths.iter().try_fold(base_revision, |reach, path| {
        let (_, last) = revisions_in_name(path.filename()?)?;
        Some(reach.max(last))
    })
}

/// Links listed segments after a full backup at `base_revision` of
/// cluster `cluster_id`: the usable ones in order, the last contiguous
/// revision and the first gap. Pure; the content is not checked here.
///
/// A segment that ends at or before the chain's end is redundant (written
/// twice, e.g. by two operator replicas) and skipped; one that starts
/// before the chain's end but reaches beyond is used (replay skips the
/// revisions it already has).
pub fn link_segments(
    base: &str,
    base_revision: i64,
    cluster_id: &str,
    listed: Vec<(String, Result<SegmentMetadata, BackupError>)>,
) -> SegmentChain {
    let mut chain = SegmentChain {
        base: base.to_string(),
        base_revision,
        segments: Vec::new(),
        last_revision: base_revision,
        gap: None,
    };
    for (name, metadata) in listed {
        let after = chain.last_revision;
        let gap = |kind, message: String| {
            Some(ChainGap {
                kind,
                after_revision: after,
                message,
            })
        };
        let segment = match metadata {
            Ok(segment) => segment,
            Err(error) => {
                chain.gap = gap(GapKind::Corrupt, format!("{name}: {error}"));
                break;
            }
        };
        if segment.base_revision != base_revision || segment.cluster_id != cluster_id {
            chain.gap = gap(
                GapKind::Corrupt,
                format!(
                    "{name} belongs to cluster {} after revision {}, not to cluster {cluster_id} after revision {base_revision}",
                    segment.cluster_id, segment.base_revision
                ),
            );
            break;
        }
        if segment.first_revision > segment.last_revision {
            chain.gap = gap(
                GapKind::Corrupt,
                format!(
                    "{name} claims revisions {}..={}",
                    segment.first_revision, segment.last_revision
                ),
            );
            break;
        }
        if segment.last_revision <= after {
            continue;
        }
        if segment.first_revision > after + 1 {
            chain.gap = gap(
                GapKind::Hole,
                format!(
                    "revisions {}..={} are in no segment (the next one, {name}, starts at {})",
                    after + 1,
                    segment.first_revision - 1,
                    segment.first_revision
                ),
            );
            break;
        }
        chain.last_revision = segment.last_revision;
        chain.segments.push(segment);
    }
    chain
}

/// The chain after `base` linked from the metadata objects at `paths` (its
/// [`segment_metadata_paths`]), no segment downloaded: what a restore can
/// expect of it before [`fetch_segments`] verifies it.
pub async fn linked_chain(
    store: &BackupStore,
    base: &BackupMetadata,
    paths: Vec<Path>,
) -> Result<SegmentChain, BackupError> {
    let listed = read_segments(store, paths)
        .await?
        .into_iter()
        .map(|(path, metadata)| (store.url(&path), metadata))
        .collect();
    Ok(link_segments(
        &base_name(base),
        base.revision,
        &base.cluster_id,
        listed,
    ))
}

async fn verified_chain(
    store: &BackupStore,
    base: &BackupMetadata,
    keep_in: Option<&FsPath>,
) -> Result<SegmentChain, BackupError> {
    let paths = segment_metadata_paths(store, &base_name(base)).await?;
    let linked = linked_chain(store, base, paths).await?;
    let mut chain = SegmentChain {
        segments: Vec::with_capacity(linked.segments.len()),
        last_revision: base.revision,
        gap: None,
        ..linked.clone()
    };
    for segment in linked.segments {
        match load_segment_bytes(store, &segment).await {
            Ok((stored, _contents)) => {
                if let Some(dir) = keep_in {
                    keep(dir, &segment, stored).await?;
                }
                chain.last_revision = segment.last_revision;
                chain.segments.push(segment);
            }
            Err(error) if error.category() == BackupErrorCategory::Corrupt => {
                chain.gap = Some(ChainGap {
                    kind: GapKind::Corrupt,
                    after_revision: chain.last_revision,
                    message: error.to_string(),
                });
                return Ok(chain);
            }
            Err(error) => return Err(error),
        }
    }
    chain.gap = linked.gap;
    Ok(chain)
}

/// Writes a verified segment and its metadata under `dir`.
async fn keep(dir: &FsPath, segment: &SegmentMetadata, stored: Bytes) -> Result<(), BackupError> {
    let object = dir.join(&segment.object);
    if let Some(parent) = object.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| BackupError::io(format!("create {}", parent.display()), e))?;
    }
    tokio::fs::write(&object, &stored)
        .await
        .map_err(|e| BackupError::io(format!("write {}", object.display()), e))?;
    let metadata = dir.join(segment.metadata_name());
    let json = serde_json::to_vec_pretty(segment).map_err(|source| BackupError::Metadata {
        location: metadata.display().to_string(),
        source,
    })?;
    tokio::fs::write(&metadata, json)
        .await
        .map_err(|e| BackupError::io(format!("write {}", metadata.display()), e))
}

/// Deletes the chain after the full backup `base_name`: every metadata
/// object first (so that no half-deleted segment is ever listed), then the
/// segment objects. Returns how many segments were deleted.
pub async fn delete_chain(store: &BackupStore, base_name: &str) -> Result<usize, BackupError> {
    let folder = object_path(store, &chain_folder(base_name));
    let mut paths: Vec<Path> = store
        .store()
        .list(Some(&folder))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await?;
    // Metadata objects first, then the segment objects.
    paths.sort_by_key(|path| {
        !path
            .filename()
            .is_some_and(|name| name.ends_with(SEGMENT_METADATA_SUFFIX))
    });
    let mut segments = 0;
    for path in paths {
        if path
            .filename()
            .is_some_and(|name| name.ends_with(SEGMENT_METADATA_SUFFIX))
        {
            segments += 1;
        }
        match store.store().delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::backup::incremental::segment::{SEGMENT_FORMAT, segment_object_name};

    fn segment(first: i64, last: i64) -> (String, Result<SegmentMetadata, BackupError>) {
        let object = segment_object_name("full-x-r9", first, last);
        (
            object.clone(),
            Ok(SegmentMetadata {
                format: SEGMENT_FORMAT,
                base: "full-x-r9".into(),
                base_revision: 9,
                cluster_id: "c1".into(),
                first_revision: first,
                last_revision: last,
                events: 1,
                object,
                compression: "zstd".into(),
                encryption: None,
                encoded_bytes: 1,
                stored_bytes: 1,
                stored_sha256: String::new(),
                opened_at: Utc::now(),
                closed_at: Utc::now(),
            }),
        )
    }

    fn link(listed: Vec<(String, Result<SegmentMetadata, BackupError>)>) -> SegmentChain {
        link_segments("full-x-r9", 9, "c1", listed)
    }

    fn firsts(chain: &SegmentChain) -> Vec<i64> {
        chain.segments.iter().map(|s| s.first_revision).collect()
    }

    #[test]
    fn contiguous_segments_make_one_chain() {
        let chain = link(vec![segment(10, 12), segment(13, 13), segment(14, 30)]);
        assert_eq!(firsts(&chain), [10, 13, 14]);
        assert_eq!(chain.last_revision, 30);
        assert_eq!(chain.gap, None);
        let empty = link(Vec::new());
        assert_eq!(empty.last_revision, 9);
        assert!(empty.segments.is_empty() && empty.gap.is_none());
    }

    #[test]
    fn a_chain_must_start_right_after_the_base() {
        let chain = link(vec![segment(11, 12)]);
        assert!(chain.segments.is_empty());
        assert_eq!(chain.last_revision, 9);
        let gap = chain.gap.expect("gap");
        assert_eq!(gap.kind, GapKind::Hole);
        assert_eq!(gap.after_revision, 9);
        assert!(gap.message.contains("revisions 10..=10"), "{gap}");
    }

    #[test]
    fn the_chain_stops_at_a_hole() {
        let chain = link(vec![segment(10, 12), segment(15, 20), segment(21, 22)]);
        assert_eq!(firsts(&chain), [10]);
        assert_eq!(chain.last_revision, 12);
        let gap = chain.gap.expect("gap");
        assert_eq!((gap.kind, gap.after_revision), (GapKind::Hole, 12));
        assert!(gap.message.contains("13..=14"), "{gap}");
    }

    #[test]
    fn redundant_and_overlapping_segments_are_harmless() {
        let chain = link(vec![
            segment(10, 12),
            segment(10, 12),
            segment(11, 15),
            segment(16, 16),
        ]);
        assert_eq!(firsts(&chain), [10, 11, 16]);
        assert_eq!(chain.last_revision, 16);
        assert_eq!(chain.gap, None);
    }

    #[test]
    fn unreadable_or_foreign_metadata_is_a_corrupt_gap() {
        let location = "incremental/full-x-r9/b.seg.json".to_string();
        let unreadable = BackupError::Metadata {
            location: location.clone(),
            source: serde_json::from_slice::<SegmentMetadata>(b"{\"format\": 1")
                .expect_err("cut short"),
        };
        let chain = link(vec![
            segment(10, 12),
            (location, Err(unreadable)),
            segment(13, 14),
        ]);
        assert_eq!(chain.last_revision, 12);
        let gap = chain.gap.expect("gap");
        assert_eq!(gap.kind, GapKind::Corrupt);
        assert!(gap.message.contains("b.seg.json"), "{gap}");
        assert!(gap.message.contains("is unreadable"), "{gap}");

        let (name, foreign) = segment(10, 12);
        let mut foreign = foreign.expect("metadata");
        foreign.cluster_id = "other".into();
        let chain = link(vec![(name, Ok(foreign))]);
        let gap = chain.gap.expect("gap");
        assert_eq!(gap.kind, GapKind::Corrupt);
        assert!(gap.message.contains("cluster other"), "{gap}");
    }
}
