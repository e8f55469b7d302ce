//! The `etcd-lab` command.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use etcd_lab::upstream::Binaries;
use etcd_lab::{Lab, LabOptions, LabPaths};

/// A real Kubernetes control plane with process-backed nodes, storage and DNS
/// on one machine.
#[derive(Debug, Parser)]
#[command(name = "etcd-lab", version)]
struct Cli {
    /// State directory.
    #[arg(long, env = "ETCD_LAB_DIR", default_value = etcd_lab::paths::DEFAULT_LAB_DIR, global = true)]
    lab_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the lab (idempotent; cleans up after a crashed earlier run).
    Up {
        /// Number of nodes.
        #[arg(long, default_value_t = 3)]
        nodes: u8,
        /// Number of zones, assigned to nodes round robin.
        #[arg(long, default_value_t = 3)]
        zones: u8,
        /// kube-controller-manager `--node-monitor-grace-period` (default: upstream's).
        #[arg(long)]
        node_monitor_grace_period: Option<String>,
        /// Any other kube-controller-manager flag, as NAME=VALUE (repeatable).
        #[arg(long = "controller-manager-flag", value_name = "NAME=VALUE")]
        controller_manager_flags: Vec<String>,
        /// Seconds to wait for each component and for the nodes.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// The images of `make image` (a directory with images.tsv), served
        /// by the lab's registry; default $ETCD_LAB_IMAGES or target/images
        /// beside this binary's build. Without images pods run host files.
        #[arg(long)]
        images: Option<PathBuf>,
    },
    /// Stop everything and remove the lab's network, mounts and state.
    Down {
        /// Keep the state directory (certificates, backing etcd data, volumes).
        #[arg(long)]
        keep_data: bool,
    },
    /// Print the shell exports that make kubectl and etcdctl use the lab.
    Env,
    /// Show what runs and whether the nodes are Ready.
    Status,
    /// Run a command inside the lab network with cluster DNS.
    Exec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        command: Vec<OsString>,
    },
    /// Print a container's log.
    Logs {
        pod: String,
        #[arg(short, long, default_value = "default")]
        namespace: String,
        #[arg(short, long)]
        container: Option<String>,
    },
    /// Faults of a node: stop, start, reboot, freeze, thaw, partition, heal, delete, add.
    #[command(subcommand)]
    Node(NodeCommand),
    /// Faults of a volume: wipe, corrupt, fill, unfill.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Faults of a pod: kill.
    #[command(subcommand)]
    Pod(PodCommand),
    /// Stop or start the API server (running pods keep running).
    Apiserver {
        #[arg(value_parser = ["stop", "start"])]
        action: String,
    },
    /// Run a node agent (started by `up`).
    #[command(hide = true)]
    NodeAgent {
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the cluster services (started by `up`).
    #[command(hide = true)]
    Services {
        #[arg(long)]
        config: PathBuf,
    },
    /// Run one container process (spawned by a node agent).
    #[command(hide = true)]
    RunContainer {
        #[arg(long)]
        spec: PathBuf,
        /// The second step of an image's container: PID 1 of its own PID
        /// namespace (started by the first step, never by hand).
        #[arg(long, hide = true)]
        init: bool,
    },
}

#[derive(Debug, Subcommand)]
enum NodeCommand {
    /// Power loss: every process of the node is SIGKILLed; disks stay.
    Stop { name: String },
    /// Power back: the agent resumes and restarts the pods still bound to it.
    Start { name: String },
    /// Stop, then start.
    Reboot {
        name: String,
        /// How long the node stays down, e.g. `30s`, `2m`.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        down_for: Duration,
    },
    /// A hung machine: the node's processes are SIGSTOPped.
    Freeze { name: String },
    /// Resume a frozen node.
    Thaw { name: String },
    /// Drop the node's traffic: from its peers, the API server, or all.
    Partition {
        name: String,
        #[arg(long, default_value = "all", value_parser = ["peers", "apiserver", "all"])]
        from: String,
    },
    /// Remove every partition of the node.
    Heal { name: String },
    /// The machine is gone for good: processes, local volumes and Node object.
    Delete { name: String },
    /// Bring a new, empty node.
    Add {
        name: Option<String>,
        #[arg(long)]
        zone: Option<String>,
    },
    /// Set the `node.kubernetes.io/out-of-service` taint (after a non-graceful shutdown).
    TaintOutOfService { name: String },
}

#[derive(Debug, Subcommand)]
enum VolumeCommand {
    /// Empty the volume's data (a lost or replaced disk).
    Wipe {
        /// NAMESPACE/PVC
        claim: String,
    },
    /// Flip bytes in a file of the volume.
    Corrupt {
        /// NAMESPACE/PVC
        claim: String,
        /// Only files whose path contains this text.
        #[arg(long)]
        file: Option<String>,
    },
    /// A full disk: fill the filesystem with `.etcd-lab-fill` at its root
    /// until only `--leave` bytes are available to non-root writers
    /// (statvfs `f_bavail`, df's Available).
    Fill {
        /// NAMESPACE/PVC
        claim: String,
        /// Bytes left available, as a quantity (`0`, `8Mi`, `1G`).
        #[arg(long, default_value = "0", value_parser = parse_quantity)]
        leave: u64,
    },
    /// Remove the fill file of `volume fill`.
    Unfill {
        /// NAMESPACE/PVC
        claim: String,
    },
}

#[derive(Debug, Subcommand)]
enum PodCommand {
    /// SIGKILL a container's process (an OOM kill).
    Kill {
        /// NAMESPACE/POD
        pod: String,
        #[arg(short, long)]
        container: Option<String>,
    },
}

/// A duration on the command line that is not `<number>[ms|s|m|h]`.
#[derive(Debug, thiserror::Error)]
#[error("invalid duration {0:?} (use a number with ms, s, m or h)")]
struct InvalidDuration(String);

fn parse_duration(text: &str) -> Result<Duration, InvalidDuration> {
    let invalid = || InvalidDuration(text.to_owned());
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let value: u64 = number.parse().map_err(|_| invalid())?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(value)),
        "ms" => Ok(Duration::from_millis(value)),
        "m" => Ok(Duration::from_secs(value * 60)),
        "h" => Ok(Duration::from_secs(value * 3600)),
        _ => Err(invalid()),
    }
}

/// A storage quantity on the command line that is not one.
#[derive(Debug, thiserror::Error)]
#[error("invalid quantity {0:?} (use bytes or a Kubernetes quantity such as 8Mi)")]
struct InvalidQuantity(String);

fn parse_quantity(text: &str) -> Result<u64, InvalidQuantity> {
    let quantity = k8s_openapi::apimachinery::pkg::api::resource::Quantity(text.to_owned());
    etcd_lab_node::volume::size::storage_bytes(&quantity)
        .ok_or_else(|| InvalidQuantity(text.to_owned()))
}

fn split_namespaced(text: &str) -> anyhow::Result<(&str, &str)> {
    match text.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
            Ok((namespace, name))
        }
        _ => bail!("expected NAMESPACE/NAME, not {text:?}"),
    }
}

async fn node_command(mut lab: Lab, command: NodeCommand) -> anyhow::Result<()> {
    match command {
        NodeCommand::Stop { name } => lab.node_stop(&name)?,
        NodeCommand::Start { name } => lab.node_start(&name)?,
        NodeCommand::Reboot { name, down_for } => lab.node_reboot(&name, down_for).await?,
        NodeCommand::Freeze { name } => lab.node_freeze(&name)?,
        NodeCommand::Thaw { name } => lab.node_thaw(&name)?,
        NodeCommand::Partition { name, from } => {
            lab.node_partition(&name, etcd_lab::faults::parse_partition(&from)?)?
        }
        NodeCommand::Heal { name } => lab.node_heal(&name)?,
        NodeCommand::Delete { name } => lab.node_delete(&name).await?,
        NodeCommand::Add { name, zone } => {
            let node = lab.node_add(name.as_deref(), zone.as_deref())?;
            println!("added {} (index {}, {})", node.name, node.index, node.zone);
        }
        NodeCommand::TaintOutOfService { name } => lab.node_taint_out_of_service(&name).await?,
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The container runner enters namespaces and execs: it must stay
    // single-threaded, so it runs before any runtime exists.
    if let Command::RunContainer { spec, init } = &cli.command {
        let run = if *init {
            etcd_lab_node::container::run_container_init
        } else {
            etcd_lab_node::container::run_container
        };
        let never = run(spec).with_context(|| format!("run container {}", spec.display()))?;
        match never {}
    }
    if let Command::Exec { command } = &cli.command {
        return Err(etcd_lab::exec::exec_in_lab(command).into());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube_client=off,hyper=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(run(cli))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let lab_dir = cli.lab_dir;
    match cli.command {
        Command::Up {
            nodes,
            zones,
            node_monitor_grace_period,
            controller_manager_flags,
            timeout,
            images,
        } => {
            let mut flags = BTreeMap::new();
            for pair in controller_manager_flags {
                let Some((name, value)) = pair.split_once('=') else {
                    bail!("--controller-manager-flag takes NAME=VALUE, not {pair:?}");
                };
                flags.insert(name.trim_start_matches('-').to_owned(), value.to_owned());
            }
            if let Some(period) = node_monitor_grace_period {
                flags.insert("node-monitor-grace-period".into(), period);
            }
            let started = Instant::now();
            let lab = Lab::up(LabOptions {
                nodes,
                zones,
                controller_manager_flags: flags,
                lab_dir: Some(lab_dir),
                etcd_lab_binary: None,
                ready_timeout: Duration::from_secs(timeout),
                images_dir: images,
            })
            .await?;
            if lab.was_already_up() {
                println!("the lab is already up and healthy");
            } else {
                println!(
                    "the lab is up: {} nodes Ready in {:.1}s",
                    lab.config().nodes.len(),
                    started.elapsed().as_secs_f64()
                );
            }
            println!("run: eval \"$(etcd-lab env)\"; kubectl get nodes");
        }
        Command::Down { keep_data } => {
            let paths = LabPaths::new(lab_dir);
            let cgroups = etcd_lab::cgroup::LabCgroups::detect()?;
            etcd_lab::teardown::down(&paths, &cgroups, keep_data)?;
            println!("the lab is down");
        }
        Command::Env => {
            let paths = LabPaths::new(lab_dir);
            let binaries = Binaries::locate()?;
            println!(
                "export KUBECONFIG={}",
                shell_quote(&paths.kubeconfig().to_string_lossy())
            );
            println!(
                "export PATH={}:{}:\"$PATH\"",
                shell_quote(&binaries.kubernetes.to_string_lossy()),
                shell_quote(&binaries.etcd_3_6.to_string_lossy())
            );
        }
        Command::Status => {
            let lab = Lab::open(Some(lab_dir))?;
            let status = lab.status().await;
            println!("{status}");
            if !status.is_healthy() {
                std::process::exit(1);
            }
        }
        Command::Logs {
            pod,
            namespace,
            container,
        } => {
            let lab = Lab::open(Some(lab_dir))?;
            let path =
                etcd_lab::logs::container_log(&lab, &namespace, &pod, container.as_deref()).await?;
            let mut file =
                std::fs::File::open(&path).with_context(|| format!("open {}", path.display()))?;
            std::io::copy(&mut file, &mut std::io::stdout().lock())?;
        }
        Command::Node(command) => node_command(Lab::open(Some(lab_dir))?, command).await?,
        Command::Volume(VolumeCommand::Wipe { claim }) => {
            let (namespace, name) = split_namespaced(&claim)?;
            let dir = Lab::open(Some(lab_dir))?
                .volume_wipe(namespace, name)
                .await?;
            println!("wiped {}", dir.display());
        }
        Command::Volume(VolumeCommand::Corrupt { claim, file }) => {
            let (namespace, name) = split_namespaced(&claim)?;
            let lab = Lab::open(Some(lab_dir))?;
            let path = lab.volume_corrupt(namespace, name, file.as_deref()).await?;
            println!("corrupted {}", path.display());
        }
        Command::Volume(VolumeCommand::Fill { claim, leave }) => {
            let (namespace, name) = split_namespaced(&claim)?;
            let lab = Lab::open(Some(lab_dir))?;
            println!("filled {}", lab.volume_fill(namespace, name, leave).await?);
        }
        Command::Volume(VolumeCommand::Unfill { claim }) => {
            let (namespace, name) = split_namespaced(&claim)?;
            let lab = Lab::open(Some(lab_dir))?;
            println!("unfilled {}", lab.volume_unfill(namespace, name).await?);
        }
        Command::Pod(PodCommand::Kill { pod, container }) => {
            let (namespace, name) = split_namespaced(&pod)?;
            let lab = Lab::open(Some(lab_dir))?;
            let killed = lab.pod_kill(namespace, name, container.as_deref()).await?;
            println!("killed {killed} process(es)");
        }
        Command::Apiserver { action } => {
            let lab = Lab::open(Some(lab_dir))?;
            if action == "stop" {
                lab.apiserver_stop()?;
            } else {
                lab.apiserver_start().await?;
            }
        }
        Command::NodeAgent { config } => {
            let config = etcd_lab_node::agent::AgentConfig::load(&config)?;
            etcd_lab_node::agent::run(config).await?;
        }
        Command::Services { config } => {
            let config = etcd_lab_services::ServicesConfig::from_file(&config)?;
            etcd_lab_services::run(config).await?;
        }
        Command::RunContainer { .. } | Command::Exec { .. } => {
            bail!("handled before the runtime starts")
        }
    }
    Ok(())
}

/// Single-quotes a value for POSIX shells.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}
