//! The running watchers of the schedule controller: at most one per
//! `EtcdBackupSchedule`, keyed by namespace and name, with the fingerprint
//! of the settings it was started with (a change restarts it); and per
//! schedule the full backups its last retention kept only because the
//! watcher needed their chains (retention is owed once it does not).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::progress::IncrementalProgress;
use super::watcher::IncrementalHandle;
use crate::backup::BackupMetadata;

/// How long a stopped watcher may take to write the segment it holds.
pub const STOP_GRACE: Duration = Duration::from_secs(20);

/// Namespace and name of a schedule.
pub type ScheduleKey = (String, String);

struct Supervised {
    fingerprint: String,
    handle: IncrementalHandle,
}

/// The watchers of all schedules.
#[derive(Default)]
pub struct Supervisor {
    watchers: Mutex<HashMap<ScheduleKey, Supervised>>,
    /// Base names each schedule's last retention held for its watcher.
    /// Kept in memory only: after an operator restart they wait for the
    /// schedule's next retention.
    retention_held: Mutex<HashMap<ScheduleKey, Vec<String>>>,
}

impl Supervisor {
    /// The fingerprint of the schedule's watcher, when one runs.
    pub fn running(&self, key: &ScheduleKey) -> Option<String> {
        let watchers = self.watchers.lock().ok()?;
        watchers
            .get(key)
            .filter(|w| !w.handle.is_finished())
            .map(|w| w.fingerprint.clone())
    }

    /// Records a started watcher; returns the one it replaces, to stop.
    pub fn insert(
        &self,
        key: ScheduleKey,
        fingerprint: String,
        handle: IncrementalHandle,
    ) -> Option<IncrementalHandle> {
        let mut watchers = self.watchers.lock().ok()?;
        watchers
            .insert(
                key,
                Supervised {
                    fingerprint,
                    handle,
                },
            )
            .map(|old| old.handle)
    }

    /// Takes the schedule's watcher out, to stop it.
    pub fn remove(&self, key: &ScheduleKey) -> Option<IncrementalHandle> {
        self.watchers.lock().ok()?.remove(key).map(|w| w.handle)
    }

    /// Takes out the watchers whose schedule `keep` refuses.
    pub fn remove_unless(&self, keep: impl Fn(&ScheduleKey) -> bool) -> Vec<IncrementalHandle> {
        let Ok(mut watchers) = self.watchers.lock() else {
            return Vec::new();
        };
        let gone: Vec<ScheduleKey> = watchers.keys().filter(|k| !keep(k)).cloned().collect();
        gone.iter()
            .filter_map(|key| watchers.remove(key).map(|w| w.handle))
            .collect()
    }

    /// The progress of the schedule's watcher.
    pub fn progress(&self, key: &ScheduleKey) -> Option<IncrementalProgress> {
        let watchers = self.watchers.lock().ok()?;
        watchers.get(key).map(|w| w.handle.progress())
    }

    /// Tells the schedule's watcher about a new full backup.
    pub fn announce_base(&self, key: &ScheduleKey, base: BackupMetadata) {
        if let Ok(watchers) = self.watchers.lock()
            && let Some(watcher) = watchers.get(key)
        {
            watcher.handle.announce_base(base);
        }
    }

    /// Records the full backups the schedule's last retention kept only for
    /// its watcher (none: forgets the schedule).
    pub fn hold_for_retention(&self, key: &ScheduleKey, held: Vec<String>) {
        if let Ok(mut retention_held) = self.retention_held.lock() {
            if held.is_empty() {
                retention_held.remove(key);
            } else {
                retention_held.insert(key.clone(), held);
            }
        }
    }

    /// The full backups the schedule's last retention kept only for its
    /// watcher.
    pub fn held_for_retention(&self, key: &ScheduleKey) -> Vec<String> {
        self.retention_held
            .lock()
            .ok()
            .and_then(|held| held.get(key).cloned())
            .unwrap_or_default()
    }

    /// Stops every watcher (each writes the segment it holds).
    pub async fn stop_all(&self) {
        let handles = self.remove_unless(|_| false);
        futures::future::join_all(handles.into_iter().map(|h| h.stop(STOP_GRACE))).await;
    }
}
