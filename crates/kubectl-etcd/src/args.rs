//! The command line: `kubectl etcd <subcommand> ...`, with kubectl's own
//! connection flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Operate durable etcd clusters through the Kubernetes API, as kubectl
/// would: the same kubeconfig, context, namespace and permissions.
#[derive(Parser, Debug)]
#[command(name = "kubectl-etcd", bin_name = "kubectl etcd", version)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,

    #[command(subcommand)]
    pub command: Command,
}

/// Where the API server is and which namespace to use: kubectl's flags.
#[derive(Args, Debug, Clone, Default)]
pub struct Connection {
    /// Namespace of the cluster (default: the context's namespace, else
    /// `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,

    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// Path of the kubeconfig file (default: `KUBECONFIG`, else
    /// `~/.kube/config`).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// One screen about a cluster: members, conditions, backups, TLS and
    /// any approval it needs.
    Status {
        /// The `EtcdCluster`.
        cluster: String,
        /// `text` (default) or `json` (a stable document of the same facts).
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },

    /// Approve the restore a cluster waits for after a majority's data was
    /// lost (`spec.recovery.approved*`), after showing what is kept and lost.
    ApproveRecovery(ApproveArgs),

    /// Backups of a cluster.
    #[command(subcommand)]
    Backup(BackupCommand),

    /// Create a new cluster from the backups of another
    /// (`spec.bootstrap.fromBackup`).
    Restore(RestoreArgs),

    /// Stop every action of the operator on a cluster (`spec.paused`).
    Pause {
        /// The `EtcdCluster`.
        cluster: String,
    },

    /// Let the operator act on a paused cluster again.
    Resume {
        /// The `EtcdCluster`.
        cluster: String,
    },

    /// Issue every certificate of a TLS cluster again now (annotation
    /// `durable-etcd.io/renew-certificates`).
    RenewCertificates {
        /// The `EtcdCluster`.
        cluster: String,
    },

    /// Replace the CA of a TLS cluster, member by member (annotation
    /// `durable-etcd.io/rotate-ca`).
    RotateCa {
        /// The `EtcdCluster`.
        cluster: String,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// The `EtcdCluster`.
    pub cluster: String,

    /// Approve without asking (needed when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,

    /// Restore from this survivor instead of the one the operator names as
    /// newest (when some survivors cannot be read); e.g. `main-2`.
    #[arg(long)]
    pub survivor: Option<String>,

    /// The revision of `--survivor` to approve (default: the revision its
    /// status last reported).
    #[arg(long, requires = "survivor")]
    pub revision: Option<i64>,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Subcommand, Debug)]
pub enum BackupCommand {
    /// Take a full backup now (creates an `EtcdBackup`).
    Now(BackupNowArgs),
}

#[derive(Args, Debug)]
pub struct BackupNowArgs {
    /// The `EtcdCluster` to back up.
    pub cluster: String,

    /// Name of the `EtcdBackup` (default: `<cluster>-<UTC time>`).
    #[arg(long)]
    pub name: Option<String>,

    #[command(flatten)]
    pub to: DestinationArgs,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// Name of the new `EtcdCluster`.
    pub new_cluster: String,

    /// The cluster whose backups to restore (it may be gone).
    #[arg(long)]
    pub from_cluster: String,

    /// Namespace of that cluster (default: the new cluster's).
    #[arg(long)]
    pub from_namespace: Option<String>,

    /// The full backup to start from (`full-<time>-r<revision>`; default:
    /// the newest).
    #[arg(long)]
    pub backup_name: Option<String>,

    /// Replay incremental segments up to this revision (default: all).
    #[arg(long)]
    pub revision: Option<i64>,

    /// Voting members of the new cluster (default: the old cluster's, else 3).
    #[arg(long)]
    pub replicas: Option<i32>,

    #[command(flatten)]
    pub from: DestinationArgs,

    #[command(flatten)]
    pub wait: WaitArgs,
}

/// Where backups are: a schedule's destination, or one given by flags.
#[derive(Args, Debug, Default, Clone)]
pub struct DestinationArgs {
    /// Use the destination of this `EtcdBackupSchedule` (same namespace).
    #[arg(long, visible_alias = "from-schedule", conflicts_with_all = ["pvc", "s3_bucket", "gcs_bucket", "azure_container", "local_path"])]
    pub schedule: Option<String>,

    /// A PersistentVolumeClaim (in the namespace) holding the backups.
    #[arg(long)]
    pub pvc: Option<String>,

    /// An S3 (or S3-compatible) bucket.
    #[arg(long)]
    pub s3_bucket: Option<String>,

    /// A Google Cloud Storage bucket.
    #[arg(long)]
    pub gcs_bucket: Option<String>,

    /// An Azure Blob Storage container (with `--azure-account`).
    #[arg(long, requires = "azure_account")]
    pub azure_container: Option<String>,

    /// The Azure storage account of `--azure-container`.
    #[arg(long)]
    pub azure_account: Option<String>,

    /// A directory on the operator's own filesystem.
    #[arg(long)]
    pub local_path: Option<String>,

    /// Key prefix (a directory inside the claim for `--pvc`).
    #[arg(long)]
    pub prefix: Option<String>,

    /// Endpoint URL of the object store (S3-compatible, GCS or Azure).
    #[arg(long)]
    pub endpoint: Option<String>,

    /// S3 region.
    #[arg(long)]
    pub region: Option<String>,

    /// Address S3 buckets as `endpoint/bucket`.
    #[arg(long)]
    pub force_path_style: bool,

    /// Secret holding the object store's credentials.
    #[arg(long)]
    pub credentials_secret: Option<String>,

    /// Secret holding the encryption key (client-side encryption).
    #[arg(long)]
    pub encryption_secret: Option<String>,

    /// Key of that Secret (default `encryptionKey`).
    #[arg(long, requires = "encryption_secret")]
    pub encryption_key: Option<String>,
}

#[derive(Args, Debug, Clone, Copy)]
pub struct WaitArgs {
    /// Wait for the outcome, showing progress.
    #[arg(long)]
    pub wait: bool,

    /// How long `--wait` waits, e.g. `90s`, `10m`.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `90s`, `10m`, `1h` or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration such as 90s, 10m or 1h"))?;
    let seconds = match unit {
        "s" => value,
        "m" => value * 60,
        "h" => value * 3600,
        _ => return Err(format!("`{text}`: the unit must be s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn kubectl_flags_go_anywhere() {
        let cli = Cli::try_parse_from([
            "kubectl-etcd",
            "status",
            "main",
            "-n",
            "prod",
            "-o",
            "json",
            "--context",
            "east",
        ])
        .expect("parses");
        assert_eq!(cli.connection.namespace.as_deref(), Some("prod"));
        assert_eq!(cli.connection.context.as_deref(), Some("east"));
        assert!(matches!(
            cli.command,
            Command::Status {
                output: Output::Json,
                ..
            }
        ));
    }

    #[test]
    fn a_schedule_excludes_destination_flags() {
        let both = Cli::try_parse_from([
            "kubectl-etcd",
            "backup",
            "now",
            "main",
            "--from-schedule",
            "hourly",
            "--pvc",
            "b",
        ]);
        assert!(both.is_err());
    }
}
