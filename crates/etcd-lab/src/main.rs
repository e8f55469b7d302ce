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
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The container runner enters namespaces and execs: it must stay
    // single-threaded, so it runs before any runtime exists.
    if let Command::RunContainer { spec } = &cli.command {
        let never = etcd_lab_node::container::run_container(spec)
            .with_context(|| format!("run container {}", spec.display()))?;
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
