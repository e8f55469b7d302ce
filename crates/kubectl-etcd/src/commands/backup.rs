//! `kubectl etcd backup now <cluster> --from-schedule S | <destination>`:
//! creates an `EtcdBackup`; `--wait` follows it to Succeeded or Failed.

use std::time::Instant;

use etcd_operator_api::api::{
    BackupDestination, BackupPhase, EtcdBackup, EtcdBackupSchedule, EtcdBackupSpec,
};
use kube::Api;
use kube::api::PostParams;

use super::{get_cluster, namespace_flag, now_to_the_second, wait::POLL};
use crate::args::{BackupNowArgs, DestinationArgs};
use crate::connect::Target;
use crate::destination::{self, Wanted};
use crate::error::{Failure, Subject, api_failure};
use crate::progress::Progress;

pub async fn run(target: &Target, args: &BackupNowArgs) -> Result<(), Failure> {
    let cluster = args.cluster.as_str();
    get_cluster(target, cluster).await?;
    let destination = resolve(target, &args.to, cluster).await?;
    let name = args.name.clone().unwrap_or_else(|| {
        format!(
            "{cluster}-{}",
            now_to_the_second().strftime("%Y%m%d-%H%M%S")
        )
    });
    let backup = EtcdBackup::new(
        &name,
        EtcdBackupSpec {
            cluster_name: cluster.to_string(),
            destination: destination.clone(),
        },
    );
    let backups: Api<EtcdBackup> = Api::namespaced(target.client.clone(), &target.namespace);
    let subject = Subject {
        resource: "etcdbackup",
        name: &name,
        namespace: &target.namespace,
    };
    backups
        .create(&PostParams::default(), &backup)
        .await
        .map_err(|e| api_failure(e, &subject))?;
    let ns = namespace_flag(target);
    println!(
        "created etcdbackup {name}: a full backup of {cluster} to {}\n  follow: kubectl get etcdbackup {name} {ns} -w",
        destination::describe(&destination)
    );
    if !args.wait.wait {
        return Ok(());
    }
    let deadline = Instant::now() + args.wait.timeout;
    let mut progress = Progress::new(3);
    loop {
        let status = backups
            .get(&name)
            .await
            .map_err(|e| api_failure(e, &subject))?
            .status
            .unwrap_or_default();
        let (step, what) = match status.phase {
            None => (0, "waiting for the operator".to_string()),
            Some(BackupPhase::Pending) => (
                1,
                format!(
                    "Pending (attempt {}){}",
                    status.attempts,
                    status
                        .error
                        .as_ref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ),
            ),
            Some(BackupPhase::Running) => (2, "Running: streaming and uploading".to_string()),
            Some(BackupPhase::Succeeded) => {
                progress.finish(&format!(
                    "{name} Succeeded: revision {}, {} stored at {}",
                    status
                        .revision
                        .map_or("unknown".to_string(), |r| r.to_string()),
                    status
                        .stored_bytes
                        .map_or("?".to_string(), crate::render::bytes),
                    status.location.as_deref().unwrap_or("unknown")
                ));
                return Ok(());
            }
            Some(BackupPhase::Failed) => {
                progress.finish(&format!("{name} Failed"));
                return Err(Failure::new(
                    format!(
                        "backup {name} failed: {}",
                        status.error.as_deref().unwrap_or("no error recorded")
                    ),
                    format!(
                        "`kubectl describe etcdbackup {name} {ns}` shows its events; fix the destination or the cluster and run `kubectl etcd backup now {cluster}` again"
                    ),
                ));
            }
        };
        progress.update(step, &format!("{name}: {what}"));
        if Instant::now() > deadline {
            return Err(Failure::new(
                format!(
                    "backup {name} has not finished after {:?}: {what}",
                    args.wait.timeout
                ),
                format!("it goes on without this command: kubectl get etcdbackup {name} {ns} -w"),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The destination the flags name: a schedule's (read through the API) or
/// one given in full; `cluster` names the cluster whose schedules are
/// suggested when none is given.
pub(super) async fn resolve(
    target: &Target,
    flags: &DestinationArgs,
    cluster: &str,
) -> Result<BackupDestination, Failure> {
    match destination::from_flags(flags)? {
        Wanted::Given(destination) => Ok(*destination),
        Wanted::Schedule(schedule) => {
            schedule_destination(target, &target.namespace, &schedule).await
        }
        Wanted::Unset => Err(Failure::new(
            "no destination given",
            format!(
                "name a schedule whose destination to use (--from-schedule; `kubectl get etcdbackupschedules -n {}` lists those of {cluster}) or give one (--pvc, --s3-bucket, --gcs-bucket, --azure-container, --local-path)",
                target.namespace
            ),
        )),
    }
}

/// The destination of schedule `name` in `namespace`.
pub(super) async fn schedule_destination(
    target: &Target,
    namespace: &str,
    name: &str,
) -> Result<BackupDestination, Failure> {
    let schedules: Api<EtcdBackupSchedule> = Api::namespaced(target.client.clone(), namespace);
    let schedule = schedules.get(name).await.map_err(|e| {
        api_failure(
            e,
            &Subject {
                resource: "etcdbackupschedule",
                name,
                namespace,
            },
        )
    })?;
    Ok(schedule.spec.destination)
}
