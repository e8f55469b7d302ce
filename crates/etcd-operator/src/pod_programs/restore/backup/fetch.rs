//! `fetch-backup`: the full backup chosen, checked within reach of the
//! wanted revision and against the room on the volume, downloaded and
//! verified with its incremental segments, and the choice recorded for
//! `replay`.

use std::collections::BTreeMap;
use std::path::Path;

use super::{FetchPlan, RestoreBackupError, read_key};
use crate::api::BackupSource;
use crate::backup::{
    BackupError, BackupMetadata, BackupStore, Credentials, backup_for_restore, download_backup,
    list_backups,
};
use crate::pod_programs::file_error::io;
use crate::pod_programs::install::install_self;
use crate::pod_programs::restore::room::{self, Footprint, available_bytes};
use crate::pod_programs::restore::{RestoreLayout, RestoreVolumeArgs};
use crate::pod_programs::volume_usage::measure::allocated_bytes;

/// `restore-volume fetch-backup`.
pub fn fetch(args: &RestoreVolumeArgs, layout: &RestoreLayout) -> Result<(), RestoreBackupError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime for", &layout.source_db))?;
    let plan = runtime.block_on(fetch_backup(args, layout))?;
    println!(
        "fetched backup {} of cluster {} (revision {}, {} incremental segments, restoring up to revision {}) from {}",
        plan.backup,
        plan.cluster_id,
        plan.base_revision,
        plan.segments,
        plan.target_revision,
        plan.location
    );
    Ok(())
}

async fn fetch_backup(
    args: &RestoreVolumeArgs,
    layout: &RestoreLayout,
) -> Result<FetchPlan, RestoreBackupError> {
    let source: BackupSource = serde_json::from_str(
        args.source
            .as_deref()
            .ok_or(RestoreBackupError::MissingArgument("--source"))?,
    )
    .map_err(RestoreBackupError::Source)?;
    let namespace = args
        .backup_namespace
        .as_deref()
        .ok_or(RestoreBackupError::MissingArgument("--backup-namespace"))?;
    let cluster = args
        .backup_cluster
        .as_deref()
        .ok_or(RestoreBackupError::MissingArgument("--backup-cluster"))?;
    let credentials = match &args.credentials_dir {
        Some(dir) => read_credentials(dir)?,
        None => Credentials::new(),
    };
    let key = read_key(args.encryption_key_file.as_deref())?;
    let store = BackupStore::open(&source.destination, namespace, cluster, &credentials)?
        .with_encryption(key);
    let mut attempt = 1;
    loop {
        let base = choose_backup(&store, source.backup_name.as_deref(), source.revision).await?;
        match fetch_chosen(args, layout, &source, &store, &base).await {
            // The chosen backup, not one the user named, went away between
            // the listing and the download: retention removed it after a
            // newer one was written. The choice is made again.
            Err(e) if source.backup_name.is_none() && vanished(&e) && attempt < NEWEST_ATTEMPTS => {
                println!(
                    "backup {} went away while it was fetched ({e}); choosing again",
                    base_name(&base)
                );
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// How many times a backup is chosen when the chosen one goes away.
const NEWEST_ATTEMPTS: u32 = 3;

/// Whether `error` says an object of the chosen backup is not there.
fn vanished(error: &RestoreBackupError) -> bool {
    matches!(
        error,
        RestoreBackupError::Backup(BackupError::Store(object_store::Error::NotFound { .. }))
    )
}

/// Downloads `base` and its segments, within reach and room.
async fn fetch_chosen(
    args: &RestoreVolumeArgs,
    layout: &RestoreLayout,
    source: &BackupSource,
    store: &BackupStore,
    base: &BackupMetadata,
) -> Result<FetchPlan, RestoreBackupError> {
    let name = base_name(base);
    let target = source.revision.unwrap_or(i64::MAX);
    if target < base.revision {
        return Err(RestoreBackupError::RevisionBeforeBackup {
            wanted: target,
            backup: name,
            base: base.revision,
        });
    }
    // Scratch files of an earlier attempt go first: the room they hold is
    // the restore's.
    for stale in [&layout.segments, &layout.staging, &layout.base] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).map_err(io("removing", stale))?;
        }
    }
    for stale in [&layout.source_db, &layout.backup_db] {
        if stale.exists() {
            std::fs::remove_file(stale).map_err(io("removing", stale))?;
        }
    }
    let mut footprint = Footprint {
        snapshot_bytes: base.snapshot_bytes,
        segment_bytes: 0,
    };
    room::check(
        &args.volume,
        &name,
        footprint,
        available_bytes(&args.volume)?,
    )?;
    let fetched = crate::backup::incremental::fetch_segments(store, base, &layout.segments).await?;
    // The segments are on the volume now: what is free plus what they hold
    // must take the whole restore.
    footprint.segment_bytes = allocated_bytes(&layout.segments)?.unwrap_or(0);
    let available = available_bytes(&args.volume)?.saturating_add(footprint.segment_bytes);
    room::check(&args.volume, &name, footprint, available)?;
    if let Some(gap) = &fetched.gap {
        println!(
            "the incremental segments of {name} stop at revision {}: {}",
            fetched.last_revision, gap.message
        );
    }
    let reach = fetched.last_revision.max(base.revision);
    if source.revision.is_some_and(|wanted| wanted > reach) {
        return Err(RestoreBackupError::RevisionBeyondBackup {
            wanted: target,
            backup: name,
            reach,
        });
    }

    download_backup(store, base, &layout.backup_db).await?;
    let plan = FetchPlan {
        location: store.url(&store.path(&base.object)),
        backup: name,
        cluster_id: base.cluster_id.clone(),
        base_revision: base.revision,
        target_revision: target.min(reach),
        segments: fetched.segments,
        base: base.clone(),
    };
    let json = serde_json::to_vec_pretty(&plan).map_err(|source| RestoreBackupError::Plan {
        path: layout.plan.clone(),
        source,
    })?;
    let temporary = layout.plan.with_extension("tmp");
    std::fs::write(&temporary, json).map_err(io("writing", &temporary))?;
    std::fs::rename(&temporary, &layout.plan).map_err(io("renaming into", &layout.plan))?;
    if let Some(target) = &args.install_to {
        install_self(target).map_err(RestoreBackupError::Install)?;
    }
    Ok(plan)
}

/// The named full backup, else the one restoring the newest data up to
/// `wanted` ([`backup_for_restore`]).
async fn choose_backup(
    store: &BackupStore,
    name: Option<&str>,
    wanted: Option<i64>,
) -> Result<BackupMetadata, RestoreBackupError> {
    let Some(name) = name else {
        return Ok(backup_for_restore(store, wanted).await?);
    };
    list_backups(store)
        .await?
        .into_iter()
        .find(|b| base_name(b) == name)
        .ok_or_else(|| RestoreBackupError::NoSuchBackup {
            name: name.to_string(),
            folder: store.url(store.folder()),
        })
}

fn base_name(backup: &BackupMetadata) -> String {
    // `full-<time>-r<revision>`, also for encrypted (`.db.zst.enc`) objects.
    backup.name()
}

/// A mounted Secret: one file per key (dot-files are the kubelet's own).
fn read_credentials(dir: &Path) -> Result<Credentials, RestoreBackupError> {
    let mut credentials = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(io("reading", dir))? {
        let entry = entry.map_err(io("reading", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') || !path.is_file() {
            continue;
        }
        let value = std::fs::read_to_string(&path).map_err(io("reading", &path))?;
        credentials.insert(name, value.trim_end_matches('\n').to_string());
    }
    Ok(credentials)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_object_counts_as_a_backup_that_went_away() {
        let missing =
            RestoreBackupError::Backup(BackupError::Store(object_store::Error::NotFound {
                path: "etcd/ns/c/full-x-r1.db.zst".into(),
                source: "404".into(),
            }));
        assert!(vanished(&missing));
        let refused =
            RestoreBackupError::Backup(BackupError::Store(object_store::Error::PermissionDenied {
                path: "etcd/ns/c/full-x-r1.db.zst".into(),
                source: "403".into(),
            }));
        assert!(!vanished(&refused));
        let none = RestoreBackupError::Backup(BackupError::NotFound("etcd/ns/c".into()));
        assert!(!vanished(&none));
    }
}
