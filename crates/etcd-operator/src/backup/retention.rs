//! Retention of full backups by count and age. The newest backup is never
//! deleted, whatever the rules say.

use chrono::{DateTime, Utc};
use object_store::ObjectStoreExt;

use super::incremental::delete_chain;
use super::incremental::segment::base_name;
use super::metadata::BackupMetadata;
use super::restore::list_backups;
use super::{BackupError, BackupStore};

/// The backups to delete: beyond the `count` newest, or older than
/// `max_age`, never the newest one.
pub fn expired(
    backups: &[BackupMetadata],
    count: usize,
    max_age: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> Vec<&BackupMetadata> {
    let mut newest_first: Vec<&BackupMetadata> = backups.iter().collect();
    newest_first.sort_by_key(|b| std::cmp::Reverse(b.started_at));
    newest_first
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
        .collect()
}

/// What retention did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    /// Backups kept.
    pub kept: usize,
    /// Snapshot objects deleted.
    pub deleted: Vec<String>,
}

/// Applies retention to the store's backups. The metadata of a backup is
/// deleted before its snapshot, so a half-deleted backup is never listed;
/// then the chain of incremental segments after it.
pub async fn apply_retention(
    store: &BackupStore,
    count: usize,
    max_age: Option<std::time::Duration>,
    now: DateTime<Utc>,
) -> Result<RetentionOutcome, BackupError> {
    let backups = list_backups(store).await?;
    let doomed = expired(&backups, count, max_age, now);
    let mut deleted = Vec::with_capacity(doomed.len());
    for backup in &doomed {
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
    Ok(RetentionOutcome {
        kept: backups.len() - doomed.len(),
        deleted,
    })
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;

    fn backup(hours_ago: i64, now: DateTime<Utc>) -> BackupMetadata {
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
            object: format!("full-{hours_ago}.db.zst"),
            compression: "zstd".into(),
            encryption: None,
            stored_bytes: 1,
            stored_sha256: String::new(),
            started_at,
            completed_at: started_at,
        }
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
            ["full-4.db.zst", "full-5.db.zst"]
        );
    }

    #[test]
    fn deletes_by_age_but_never_the_newest() {
        let backups: Vec<_> = [30, 50, 70].iter().map(|h| backup(*h, now())).collect();
        let day = Some(std::time::Duration::from_secs(24 * 3600));
        assert_eq!(
            names(expired(&backups, 10, day, now())),
            ["full-50.db.zst", "full-70.db.zst"]
        );
    }

    #[test]
    fn nothing_to_delete_when_within_limits() {
        let backups: Vec<_> = [1, 2].iter().map(|h| backup(*h, now())).collect();
        assert!(expired(&backups, 2, None, now()).is_empty());
        assert!(expired(&[], 2, None, now()).is_empty());
    }
}
