//! One module per subcommand; each reads the objects it needs through the
//! API, decides with the pure layers, writes, and prints what it did and
//! how to follow it.

mod approve;
mod backup;
mod certificates;
mod pause;
mod restore;
mod status;
mod wait;

use etcd_operator_api::api::EtcdCluster;
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::args::{BackupCommand, Cli, Command};
use crate::connect::{Target, connect};
use crate::error::{Failure, Subject, api_failure};

/// Runs the command the line names.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    let target = connect(&cli.connection).await?;
    match cli.command {
        Command::Status { cluster, output } => status::run(&target, &cluster, output).await,
        Command::ApproveRecovery(args) => approve::run(&target, &args).await,
        Command::Backup(BackupCommand::Now(args)) => backup::run(&target, &args).await,
        Command::Restore(args) => restore::run(&target, &args).await,
        Command::Pause { cluster } => pause::run(&target, &cluster, true).await,
        Command::Resume { cluster } => pause::run(&target, &cluster, false).await,
        Command::RenewCertificates { cluster } => {
            certificates::run(&target, &cluster, certificates::Request::Renew).await
        }
        Command::RotateCa { cluster } => {
            certificates::run(&target, &cluster, certificates::Request::RotateCa).await
        }
    }
}

/// The `EtcdCluster` API of the target namespace.
fn clusters(target: &Target) -> Api<EtcdCluster> {
    Api::namespaced(target.client.clone(), &target.namespace)
}

/// Reads cluster `name`, or fails saying how to find it.
async fn get_cluster(target: &Target, name: &str) -> Result<EtcdCluster, Failure> {
    clusters(target)
        .get(name)
        .await
        .map_err(|e| api_failure(e, &cluster_subject(target, name)))
}

fn cluster_subject<'a>(target: &'a Target, name: &'a str) -> Subject<'a> {
    Subject {
        resource: "etcdcluster",
        name,
        namespace: &target.namespace,
    }
}

/// `-n <namespace>` for the commands a person is told to run next.
fn namespace_flag(target: &Target) -> String {
    format!("-n {}", target.namespace)
}

/// Now, to the second: the value of a request annotation, and a name.
fn now_to_the_second() -> Timestamp {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}
