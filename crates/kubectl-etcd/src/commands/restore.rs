//! `kubectl etcd restore <new-cluster> --from-cluster <cluster>
//! [--schedule S | destination]`: a new `EtcdCluster` whose first data is
//! the backups of another (`spec.bootstrap.fromBackup`), shaped like that
//! cluster when it still exists.

use etcd_operator_api::api::{BackupSource, BootstrapSpec, EtcdCluster, EtcdClusterSpec};
use kube::Api;
use kube::api::PostParams;

use super::backup::{resolve, schedule_destination};
use super::{cluster_subject, clusters, namespace_flag, wait};
use crate::args::RestoreArgs;
use crate::connect::Target;
use crate::destination::{self, Wanted};
use crate::error::{Failure, Subject, api_failure};

pub async fn run(target: &Target, args: &RestoreArgs) -> Result<(), Failure> {
    let from_namespace = args
        .from_namespace
        .clone()
        .unwrap_or_else(|| target.namespace.clone());
    let old_clusters: Api<EtcdCluster> = Api::namespaced(target.client.clone(), &from_namespace);
    let old = old_clusters
        .get_opt(&args.from_cluster)
        .await
        .map_err(|e| {
            api_failure(
                e,
                &Subject {
                    resource: "etcdcluster",
                    name: &args.from_cluster,
                    namespace: &from_namespace,
                },
            )
        })?;
    let destination = match (destination::from_flags(&args.from)?, &old) {
        (Wanted::Schedule(schedule), _) => {
            schedule_destination(target, &from_namespace, &schedule).await?
        }
        (Wanted::Unset, Some(old)) => {
            let schedules = old
                .status
                .as_ref()
                .and_then(|s| s.backup.as_ref())
                .map(|b| b.schedules.clone())
                .unwrap_or_default();
            match schedules.as_slice() {
                [only] => schedule_destination(target, &from_namespace, only).await?,
                _ => resolve(target, &args.from, &args.from_cluster).await?,
            }
        }
        _ => resolve(target, &args.from, &args.from_cluster).await?,
    };
    let spec = new_spec(
        old.as_ref(),
        args,
        &target.namespace,
        &from_namespace,
        destination.clone(),
    );
    let cluster = EtcdCluster::new(&args.new_cluster, spec.clone());
    clusters(target)
        .create(&PostParams::default(), &cluster)
        .await
        .map_err(|e| api_failure(e, &cluster_subject(target, &args.new_cluster)))?;
    let ns = namespace_flag(target);
    println!(
        "created etcdcluster {} ({} member{}, etcd {}) from the {} of {}/{} at {}{}\n  member 0 receives the backup and starts alone, the others join one at a time\n  follow: kubectl etcd status {} {ns}",
        args.new_cluster,
        spec.replicas,
        if spec.replicas == 1 { "" } else { "s" },
        spec.version,
        args.backup_name.as_ref().map_or(
            "backup reaching the newest revision".to_string(),
            |b| format!("full backup {b}")
        ),
        from_namespace,
        args.from_cluster,
        destination::describe(&destination),
        args.revision
            .map(|r| format!(", replayed up to revision {r}"))
            .unwrap_or_default(),
        args.new_cluster,
    );
    if args.wait.wait {
        wait::cluster_ready(target, &args.new_cluster, args.wait.timeout).await?;
    }
    Ok(())
}

/// The new cluster's spec: the old cluster's shape (release, storage,
/// Pods, tuning, TLS) when it exists, never its pause, recovery or
/// bootstrap; the backups as its bootstrap.
fn new_spec(
    old: Option<&EtcdCluster>,
    args: &RestoreArgs,
    namespace: &str,
    from_namespace: &str,
    destination: etcd_operator_api::api::BackupDestination,
) -> EtcdClusterSpec {
    let mut spec = old.map(|c| c.spec.clone()).unwrap_or_default();
    spec.paused = false;
    spec.recovery = Default::default();
    if let Some(replicas) = args.replicas {
        spec.replicas = replicas;
    }
    spec.bootstrap = Some(BootstrapSpec {
        from_backup: Some(BackupSource {
            destination,
            cluster_name: Some(args.from_cluster.clone()),
            namespace: (from_namespace != namespace).then(|| from_namespace.to_string()),
            backup_name: args.backup_name.clone(),
            revision: args.revision,
        }),
    });
    spec
}
