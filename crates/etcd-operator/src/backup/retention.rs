//! Retention of full backups by count and age, among the backups of one
//! writer only: schedules (and one-shot backups) sharing a destination and
//! a cluster's folder never delete each other's backups. A backup whose
//! writer is not recorded (taken before writers were recorded, or by
//! another tool) is never deleted: nothing says whose it is. The newest
//! backup of the writer is never deleted, whatever the rules say; nor is a
//! full backup whose chain the incremental watcher still needs (the chain
//! it extends, and the one it left until the new one reaches its end):
//! the recovery point it reports counts on that chain.

use chrono::{DateTime, Utc};
use object_store::ObjectStoreExt;

use super::incremental::delete_chain;
use super::incremental::segment::base_name;
use super::metadata::{BackupMetadata, BackupWriter};
use super::restore::list_backups;
use super::{BackupError, BackupStore};

/// How the backups of a folder stand towards one writer's retention.
#[derive(Debug, Default, PartialEq)]
pub struct Selection<'a> {
    /// The writer's backups to delete: beyond its `count` newest, or older
    /// than `max_age`, never its newest one.
    pub expired: Vec<&'a BackupMetadata>,
    /// The writer's backups kept.
    pub kept: usize,
    /// Kept only because the incremental watcher needs their chains:
    /// `count` or `max_age` would delete them. They are counted in `kept`.
    pub held: Vec<&'a BackupMetadata>,
    /// Backups of other writers, left alone.
    pub others: usize,
    /// Backups that record no writer, left alone.
    pub unattributed: usize,
}

/// Selects what `writer`'s retention deletes among `backups`; the full
/// backups named in `chains_in_use` (base names, see
/// [`crate::backup::incremental::IncrementalProgress::chains_in_use`]) are
/// kept with their chains whatever `count` and `max_age` say.
pub fn select<'a>(
    backups: &'a [BackupMetadata],
    writer: &BackupWriter,
    count: usize,
    max_age: Option<std::time::Duration>,
    chains_in_use: &[String],
    now: DateTime<Utc>,
) -> Selection<'a> {
    let mut selection = Selection::default();
    let mut own = Vec::new();
    for backup in backups {
        match &backup.written_by {
            Some(by) if by.is(writer) => own.push(backup),
            Some(_) => selection.others += 1,
            None => selection.unattributed += 1,
        }
    }
    own.sort_by_key(|b| std::cmp::Reverse(b.started_at));
    let total = own.len();
    let by_rules: Vec<&BackupMetadata> = own
        .into_iter()
        .enumerate()
        .filter(|(index, backup)| {
            if *index == 0 {
                return false;
            }
            let too_many = *index >= count.max(1);
            let too_old = max_age.is_some_and(|max| {
                now.signed_duration_since(backup.started_at)
                    .to_std()
                    .is_ok_and(|age| age > max)
            });
            too_many || too_old
        })
        .map(|(_, backup)| backup)
        .collect();
    (selection.held, selection.expired) = by_rules
        .into_iter()
        .partition(|backup| chains_in_use.contains(&base_name(backup)));
    selection.kept = total - selection.expired.len();
    selection
}

/// What retention did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Backups of the writer kept.
    pub kept: usize,
    /// Base names of the backups kept only because the incremental watcher
    /// needs their chains; retention is owed once it no longer does.
    pub held: Vec<String>,
    /// Snapshot objects deleted.
    pub deleted: Vec<String>,
    /// Backups of other writers in the folder, left alone.
    pub others: usize,
    /// Backups in the folder that record no writer, left alone.
    pub unattributed: usize,
}

/// Applies `writer`'s retention to its backups in the store's folder,
/// keeping the full backups named in `chains_in_use` with their chains
/// (see [`select`]). The metadata of a backup is deleted before its
/// snapshot, so a half-deleted backup is never listed; then the chain of
/// incremental segments after it.
pub async fn apply_retention(
    store: &BackupStore,
    writer: &BackupWriter,
    count: usize,
    max_age: Option<std::time::Duration>,
    chains_in_use: &[String],
    now: DateTime<Utc>,
) -> Result<RetentionOutcome, BackupError> {
    let backups = list_backups(store).await?;
    let selection = select(&backups, writer, count, max_age, chains_in_use, now);
    let mut deleted = Vec::with_capacity(selection.expired.len());
    for backup in &selection.expired {
        store
            .store()
            .delete(&store.path(&backup.metadata_name()))
            .await?;
        let object = store.path(&backup.object);
        match store.store().delete(&object).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
        // The incremental segments after it cannot be restored without it.
        delete_chain(store, &base_name(backup)).await?;
        deleted.push(store.url(&object));
    }
    let held: Vec<String> = selection.held.iter().map(|b| base_name(b)).collect();
    if !held.is_empty() {
        tracing::info!(
            folder = %store.url(store.folder()),
            "retention of {writer} keeps {} while the incremental backup needs their chains",
            held.join(", ")
        );
    }
    if selection.unattributed > 0 {
        tracing::info!(
            folder = %store.url(store.folder()),
            "retention of {writer} leaves {} backups that record no writer; delete them by hand when they are no longer needed",
            selection.unattributed
        );
    }
    Ok(RetentionOutcome {
        kept: selection.kept,
        held,
        deleted,
        others: selection.others,
        unattributed: selection.unattributed,
    })
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;

    fn writer(name: &str) -> BackupWriter {
        BackupWriter {
            kind: "EtcdBackupSchedule".into(),
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    fn backup(hours_ago: i64, now: DateTime<Utc>) -> BackupMetadata {
        by(Some("nightly"), hours_ago, now)
    }

    fn by(name: Option<&str>, hours_ago: i64, now: DateTime<Utc>) -> BackupMetadata {
        let started_at = now - Duration::hours(hours_ago);
        BackupMetadata {
            format: 1,
            namespace: "ns".into(),
            cluster: "c".into(),
            cluster_id: "1".into(),
            member_id: "2".into(),
            revision: 100 - hours_ago,
            etcd_version: "3.6.0".into(),
            snapshot_bytes: 1,
            sha256: String::new(),
            object: format!("full-{hours_ago}-{}.db.zst", name.unwrap_or("unknown")),
            compression: "zstd".into(),
            encryption: None,
            stored_bytes: 1,
            stored_sha256: String::new(),
            started_at,
            completed_at: started_at,
            written_by: name.map(writer),
        }
    }

    fn expired(
        backups: &[BackupMetadata],
        count: usize,
        max_age: Option<std::time::Duration>,
        now: DateTime<Utc>,
    ) -> Vec<&BackupMetadata> {
        select(backups, &writer("nightly"), count, max_age, &[], now).expired
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0)
            .single()
            .expect("time")
    }

    fn names(expired: Vec<&BackupMetadata>) -> Vec<String> {
        let mut names: Vec<String> = expired.into_iter().map(|b| b.object.clone()).collect();
        names.sort();
        names
    }

    #[test]
    fn keeps_the_newest_count() {
        let backups: Vec<_> = [5, 1, 3, 2, 4].iter().map(|h| backup(*h, now())).collect();
        assert_eq!(
            names(expired(&backups, 3, None, now())),
            ["full-4-nightly.db.zst", "full-5-nightly.db.zst"]
        );
    }

    #[test]
    fn deletes_by_age_but_never_the_newest() {
        let backups: Vec<_> = [30, 50, 70].iter().map(|h| backup(*h, now())).collect();
        let day = Some(std::time::Duration::from_secs(24 * 3600));
        assert_eq!(
            names(expired(&backups, 10, day, now())),
            ["full-50-nightly.db.zst", "full-70-nightly.db.zst"]
        );
    }

    #[test]
    fn nothing_to_delete_when_within_limits() {
        let backups: Vec<_> = [1, 2].iter().map(|h| backup(*h, now())).collect();
        assert!(expired(&backups, 2, None, now()).is_empty());
        assert!(expired(&[], 2, None, now()).is_empty());
    }

    #[test]
    fn the_chains_the_watcher_needs_are_kept_beyond_count_and_max_age() {
        let backups: Vec<_> = [50, 30, 1].iter().map(|h| backup(*h, now())).collect();
        let in_use = [base_name(&backups[1]), base_name(&backups[0])];
        for (count, max_age) in [(1, None), (10, Some(std::time::Duration::from_secs(3600)))] {
            let selection = select(&backups, &writer("nightly"), count, max_age, &in_use, now());
            assert!(selection.expired.is_empty(), "{:?}", selection.expired);
            assert_eq!(
                names(selection.held),
                ["full-30-nightly.db.zst", "full-50-nightly.db.zst"]
            );
            assert_eq!(selection.kept, 3);
        }
        // Once the watcher needs only the newest chain, the older ones go.
        let in_use = [base_name(&backups[2])];
        let selection = select(&backups, &writer("nightly"), 1, None, &in_use, now());
        assert_eq!(
            names(selection.expired),
            ["full-30-nightly.db.zst", "full-50-nightly.db.zst"]
        );
        assert!(selection.held.is_empty());
    }

    #[test]
    fn a_writer_counts_and_deletes_only_its_own_backups() {
        // Two schedules on one folder, interleaved; the neighbour's are
        // newer, older, and more numerous.
        let backups: Vec<_> = [
            (Some("nightly"), 9),
            (Some("hourly"), 8),
            (Some("hourly"), 7),
            (Some("nightly"), 6),
            (Some("hourly"), 5),
            (None, 4),
            (Some("hourly"), 1),
        ]
        .iter()
        .map(|(name, hours)| by(*name, *hours, now()))
        .collect();
        let nightly = select(&backups, &writer("nightly"), 1, None, &[], now());
        assert_eq!(names(nightly.expired), ["full-9-nightly.db.zst"]);
        assert_eq!(
            (nightly.kept, nightly.others, nightly.unattributed),
            (1, 4, 1)
        );
        let hourly = select(&backups, &writer("hourly"), 1, None, &[], now());
        assert_eq!(
            names(hourly.expired),
            [
                "full-5-hourly.db.zst",
                "full-7-hourly.db.zst",
                "full-8-hourly.db.zst"
            ]
        );
        assert_eq!((hourly.kept, hourly.others, hourly.unattributed), (1, 2, 1));
    }

    #[test]
    fn backups_without_a_recorded_writer_are_never_deleted() {
        let backups: Vec<_> = [30, 50, 70]
            .iter()
            .map(|h| by(None, *h, now()))
            .chain([by(Some("nightly"), 1, now())])
            .collect();
        let day = Some(std::time::Duration::from_secs(24 * 3600));
        let selection = select(&backups, &writer("nightly"), 1, day, &[], now());
        assert!(selection.expired.is_empty(), "{:?}", selection.expired);
        assert_eq!((selection.kept, selection.unattributed), (1, 3));
    }

    #[test]
    fn a_one_shot_backup_of_the_same_name_is_another_writer() {
        let mut one_shot = by(Some("nightly"), 2, now());
        if let Some(writer) = one_shot.written_by.as_mut() {
            writer.kind = "EtcdBackup".into();
        }
        let backups = vec![one_shot, by(Some("nightly"), 1, now())];
        let selection = select(&backups, &writer("nightly"), 1, None, &[], now());
        assert!(selection.expired.is_empty());
        assert_eq!((selection.kept, selection.others), (1, 1));
    }

    #[test]
    fn a_schedule_created_again_under_its_name_prunes_its_predecessors_backups() {
        let backups: Vec<_> = [3, 2, 1].iter().map(|h| backup(*h, now())).collect();
        let recreated = BackupWriter {
            uid: "another-uid".into(),
            ..writer("nightly")
        };
        let selection = select(&backups, &recreated, 1, None, &[], now());
        assert_eq!(
            names(selection.expired),
            ["full-2-nightly.db.zst", "full-3-nightly.db.zst"]
        );
    }
}
