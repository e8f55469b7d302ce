//! The full backup a restore starts from when none is named: the one that
//! restores the newest data, not the one started last.
//!
//! Several writers share a cluster's folder: a continuous schedule's full
//! backup followed by its incremental segments, and a scheduled copy whose
//! full backups carry no segments. The full backup started last can be a
//! copy taken moments after the continuous chain's base: restoring it
//! alone would drop every write the chain's segments hold since. So each
//! full backup is weighed by its reach (the last revision its contiguous
//! segments restore, its own revision without segments) and the furthest
//! reach wins (rule 7: recovery uses the newest data).
//!
//! Revisions compare only within one etcd cluster: backups of an earlier
//! cluster of the same name (deleted and created again, or restored, which
//! starts a new cluster ID) are left out, the newest full backup's cluster
//! ID chooses.

use chrono::{DateTime, Utc};

use super::incremental::{linked_chain, named_reach, segment_metadata_paths};
use super::restore::list_backups;
use super::{BackupError, BackupMetadata, BackupStore};

/// A full backup and the last revision it restores with its segments.
#[derive(Debug, Clone, PartialEq)]
pub struct Reach<'a> {
    /// The full backup.
    pub backup: &'a BackupMetadata,
    /// The last revision it and its contiguous segments restore.
    pub last_revision: i64,
}

/// Which of two reaches a restore up to `wanted` (every revision when
/// `None`) prefers: the one restoring further (capped at `wanted`); at
/// equal reach the one with the newer full backup (less to replay), then
/// the one started last.
fn preference(reach: &Reach<'_>, wanted: Option<i64>) -> (i64, i64, DateTime<Utc>) {
    let cap = wanted.unwrap_or(i64::MAX);
    (
        reach.last_revision.min(cap),
        reach.backup.revision,
        reach.backup.started_at,
    )
}

/// The best of `reaches` for a restore up to `wanted`; ties in every
/// respect keep the first.
pub fn furthest<'a>(
    reaches: impl IntoIterator<Item = Reach<'a>>,
    wanted: Option<i64>,
) -> Option<Reach<'a>> {
    reaches.into_iter().fold(None, |best, reach| match best {
        Some(best) if preference(&best, wanted) >= preference(&reach, wanted) => Some(best),
        _ => Some(reach),
    })
}

/// The backups a restore chooses among: those of the etcd cluster the
/// newest full backup was taken of, at or before `wanted`. When every one
/// is after `wanted`, the oldest of them alone (the restore then refuses
/// the revision, naming it).
pub fn eligible(backups: &[BackupMetadata], wanted: Option<i64>) -> Vec<&BackupMetadata> {
    let Some(newest) = backups.iter().max_by_key(|b| b.started_at) else {
        return Vec::new();
    };
    let mut same_cluster: Vec<&BackupMetadata> = backups
        .iter()
        .filter(|b| b.cluster_id == newest.cluster_id)
        .collect();
    same_cluster.sort_by_key(|b| (b.revision, b.started_at));
    let within: Vec<&BackupMetadata> = same_cluster
        .iter()
        .copied()
        .filter(|b| wanted.is_none_or(|w| b.revision <= w))
        .collect();
    if within.is_empty() {
        same_cluster.truncate(1);
        return same_cluster;
    }
    within
}

/// The full backup that restores the newest data up to `wanted` (every
/// revision when `None`). Segments are weighed from their metadata; the
/// chosen chain is verified when it is fetched. Chains are linked only
/// while they can still win: their segments' names bound their reach.
pub async fn backup_for_restore(
    store: &BackupStore,
    wanted: Option<i64>,
) -> Result<BackupMetadata, BackupError> {
    let backups = list_backups(store).await?;
    let candidates = eligible(&backups, wanted);
    let mut bounded = Vec::with_capacity(candidates.len());
    for backup in candidates {
        let paths = segment_metadata_paths(store, &backup.name()).await?;
        let bound = named_reach(backup.revision, &paths).unwrap_or(i64::MAX);
        bounded.push((backup, paths, bound));
    }
    let cap = wanted.unwrap_or(i64::MAX);
    bounded.sort_by_key(|(_, _, bound)| std::cmp::Reverse((*bound).min(cap)));
    let mut best: Option<Reach<'_>> = None;
    for (backup, paths, bound) in bounded {
        if best
            .as_ref()
            .is_some_and(|best| bound.min(cap) < best.last_revision.min(cap))
        {
            break;
        }
        let last_revision = if paths.is_empty() {
            backup.revision
        } else {
            linked_chain(store, backup, paths).await?.last_revision
        };
        let reach = Reach {
            backup,
            last_revision,
        };
        best = furthest(best.into_iter().chain([reach]), wanted);
    }
    best.map(|best| best.backup.clone())
        .ok_or_else(|| BackupError::NotFound(store.url(store.folder())))
}

#[cfg(test)]
mod tests;
