//! `etcd-operator`: the controller (`run`), the CRD printer (`crd`), and
//! the programs it runs inside member and restore Pods (`member-guard`,
//! `restore-volume`, `volume-usage`; see `etcd_operator::pod_programs`).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use etcd_operator::pod_programs::{self, backup_store, member_guard, restore, volume_usage};
use etcd_operator::reconcile::{self, ControllerConfig, Leadership};
use etcd_operator::resources::network_policy::{DEFAULT_OPERATOR_NAMESPACE, OperatorPods};
use etcd_operator::telemetry::{self, Health, Metrics};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(name = "etcd-operator", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "ETCD_OPERATOR_LOG_FORMAT", global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (in-cluster config, or KUBECONFIG outside a cluster).
    Run(RunArgs),
    /// Print the CustomResourceDefinitions as YAML.
    Crd,
    /// Init container of every member pod: refuse to start etcd on data that
    /// belongs to another member or cluster (durability rule 1).
    MemberGuard(member_guard::MemberGuardArgs),
    /// Steps of the restore Pod around `etcdutl snapshot restore`, on the
    /// surviving member's volume (a restore into a new incarnation).
    RestoreVolume(restore::RestoreVolumeArgs),
    /// Sidecar of every member pod: serves how full the member's volume is
    /// (`GET /volume-usage`).
    VolumeUsage(volume_usage::VolumeUsageArgs),
    /// The Pod of a `persistentVolumeClaim` backup destination: serves the
    /// claim's files to the operator and restore Pods (S3 subset).
    BackupStore(backup_store::BackupStoreArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(
        long,
        default_value = "0.0.0.0:8080",
        env = "ETCD_OPERATOR_METRICS_ADDRESS"
    )]
    metrics_address: SocketAddr,
    /// Watch EtcdClusters in this namespace only (default: all namespaces).
    #[arg(long, env = "ETCD_OPERATOR_NAMESPACE")]
    namespace: Option<String>,
    /// Compete for a Lease so that one replica acts at a time.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "ETCD_OPERATOR_LEADER_ELECTION")]
    leader_election: bool,
    /// Namespace of the leader-election Lease (default: the client's
    /// namespace, i.e. the pod's own namespace in a cluster).
    #[arg(long, env = "ETCD_OPERATOR_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Identity in the Lease (default: the pod name, else the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// The operator's own image: member Pods run its `member-guard` as
    /// their init container.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = reconcile::DEFAULT_OPERATOR_IMAGE)]
    operator_image: String,
    /// DNS domain of the Kubernetes cluster, for the members' peer URLs.
    #[arg(
        long,
        env = "ETCD_OPERATOR_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    cluster_domain: String,
    /// Namespace of the operator's own Pods, which each cluster's
    /// NetworkPolicy lets reach the members' client port (default: the
    /// Pod's own namespace in a cluster, `etcd-operator-system` outside).
    #[arg(long, env = "ETCD_OPERATOR_POD_NAMESPACE")]
    operator_pod_namespace: Option<String>,
    /// Labels of the operator's own Pods, `key=value,...` (empty: every Pod
    /// of their namespace).
    #[arg(
        long,
        env = "ETCD_OPERATOR_POD_LABELS",
        default_value = "app.kubernetes.io/name=etcd-operator",
        value_parser = parse_labels
    )]
    operator_pod_labels: BTreeMap<String, String>,
}

/// `key=value,...` as labels.
fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
            _ => Err(format!("{pair:?} is not key=value")),
        })
        .collect()
}

/// The namespace of the Pod this process runs in, from its service
/// account; `None` outside a cluster.
fn own_pod_namespace() -> Option<String> {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|namespace| namespace.trim().to_owned())
        .filter(|namespace| !namespace.is_empty())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Run(args) => report(run_controller(args)),
        Command::Crd => report(print_crd()),
        Command::RestoreVolume(args) => pod_programs::run_restore_step(&args),
        Command::MemberGuard(args) => pod_programs::run_member_guard(args),
        Command::VolumeUsage(args) => pod_programs::run_volume_usage(args),
        Command::BackupStore(args) => pod_programs::run_backup_store(args),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_crd() -> anyhow::Result<()> {
    let yaml = etcd_operator::api::crds_yaml().context("render the CRDs")?;
    print!("{yaml}");
    Ok(())
}

fn run_controller(args: RunArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?
        .block_on(run(args))
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube_runtime::controller=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The API server's version, asked until it answers (1 s, doubling to
/// 10 s, between tries). An operator started while the API server is away
/// (restarting, cut off) waits for it instead of exiting and waiting out
/// its Pod's restart back-off; the chaos campaign met an operator started
/// during an API server outage that exited and never came back.
async fn wait_for_api_server(
    client: &kube::Client,
) -> k8s_openapi::apimachinery::pkg::version::Info {
    let mut pause = std::time::Duration::from_secs(1);
    loop {
        match client.apiserver_version().await {
            Ok(version) => return version,
            Err(error) => {
                tracing::warn!(%error, retry_in = ?pause, "the API server does not answer yet");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(10));
            }
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    let health = Health::default();
    let server = tokio::spawn(telemetry::serve(
        args.metrics_address,
        metrics.clone(),
        health.clone(),
    ));

    let client = kube::Client::try_default()
        .await
        .context("build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let version = wait_for_api_server(&client).await;
    tracing::info!(apiserver = %version.git_version, namespace = ?args.namespace, "connected");

    let config = ControllerConfig {
        namespace: args.namespace.clone(),
        operator_image: args.operator_image.clone(),
        cluster_domain: args.cluster_domain.clone(),
        operator_pods: OperatorPods {
            namespace: args
                .operator_pod_namespace
                .clone()
                .or_else(own_pod_namespace)
                .unwrap_or_else(|| DEFAULT_OPERATOR_NAMESPACE.to_owned()),
            labels: args.operator_pod_labels.clone(),
        },
        ..ControllerConfig::default()
    };
    tracing::info!(
        namespace = %config.operator_pods.namespace,
        labels = ?config.operator_pods.labels,
        "the clusters' NetworkPolicies let the operator's Pods in from there"
    );

    let mut leadership = if args.leader_election {
        let namespace = args
            .lease_namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let identity = args.identity.clone().unwrap_or_else(default_identity);
        let mut leadership = Leadership::start(client.clone(), &namespace, &identity)
            .await
            .context("start leader election")?;
        // A standby replica is ready: it serves its endpoints and takes over
        // when the leader goes away.
        health.set_ready(true);
        tracing::info!(%identity, lease_namespace = %namespace, "waiting for leadership");
        leadership.acquired().await.context("acquire leadership")?;
        tracing::info!(%identity, "leading");
        Some(leadership)
    } else {
        None
    };

    let store_settings = etcd_operator::backup::volume_store::VolumeStoreSettings {
        operator_image: args.operator_image.clone(),
        cluster_domain: args.cluster_domain.clone(),
    };
    let backups = etcd_operator::backup::controller::run(
        client.clone(),
        args.namespace.clone(),
        store_settings,
        metrics.clone(),
    );
    let controller = async {
        let (result, ()) = tokio::join!(
            reconcile::run(client, config, metrics, health.clone()),
            backups
        );
        result
    };
    let outcome = match leadership.as_mut() {
        Some(leadership) => tokio::select! {
            result = controller => result.map_err(anyhow::Error::from),
            () = leadership.lost() => Err(anyhow::anyhow!(
                "lost leadership: stopping so that only one replica acts"
            )),
            result = server => flatten_server(result),
        },
        None => tokio::select! {
            result = controller => result.map_err(anyhow::Error::from),
            result = server => flatten_server(result),
        },
    };
    health.set_ready(false);
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    outcome
}

fn flatten_server(
    result: Result<Result<(), telemetry::ServeError>, tokio::task::JoinError>,
) -> anyhow::Result<()> {
    match result {
        Ok(Ok(())) => Err(anyhow::anyhow!("metrics and health server stopped")),
        Ok(Err(error)) => Err(error.into()),
        Err(error) => Err(anyhow::Error::from(error).context("metrics and health server")),
    }
}

fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "etcd-operator".to_owned());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_labels_are_key_value_pairs() {
        assert_eq!(
            parse_labels("app.kubernetes.io/name=etcd-operator, tier=control"),
            Ok(BTreeMap::from([
                (
                    "app.kubernetes.io/name".to_owned(),
                    "etcd-operator".to_owned()
                ),
                ("tier".to_owned(), "control".to_owned()),
            ]))
        );
        assert_eq!(parse_labels(""), Ok(BTreeMap::new()));
        assert!(parse_labels("app").is_err());
        assert!(parse_labels("=x").is_err());
    }

    /// The chaos campaign's finding of 3 December 2026: an operator
    /// started while the API server was away exited at once. It must keep
    /// asking instead.
    #[tokio::test]
    async fn an_operator_started_before_the_api_server_keeps_waiting() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        drop(listener);
        let url = format!("http://127.0.0.1:{port}").parse().expect("url");
        let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
        let waited = tokio::time::timeout(
            std::time::Duration::from_secs(4),
            wait_for_api_server(&client),
        )
        .await;
        assert!(
            waited.is_err(),
            "returned without an API server: {waited:?}"
        );
    }
}
