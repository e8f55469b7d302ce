//! `etcd-chaos`: runs a seeded chaos campaign on the lab and writes its
//! report. Needs root, the upstream binaries and the workspace's binaries
//! (`etcd-operator` and `etcd-lab` beside this one).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use etcd_chaos::campaign::{self, CampaignOptions};
use etcd_chaos::report::Report;

/// A seeded chaos campaign against an operator-managed etcd cluster on the
/// lab, checked for linearizability.
#[derive(Parser, Debug)]
#[command(name = "etcd-chaos")]
struct Args {
    /// The seed (default: the time now; printed, so that a run reproduces).
    #[arg(long)]
    seed: Option<u64>,
    /// Steps to run (each one fault, some with a second overlapping it).
    #[arg(long, default_value_t = 500)]
    steps: usize,
    /// Members of the cluster.
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Storage class of its volumes (`lab-network` or `lab-local`).
    #[arg(long, default_value = "lab-network")]
    storage_class: String,
    /// Seconds a step may take to recover before the campaign stops.
    #[arg(long, default_value_t = 300)]
    recovery_budget: u64,
    /// Minutes after which no new step starts (the checks still run).
    #[arg(long)]
    time_limit_minutes: Option<u64>,
    /// Where the report goes (`<out>/seed-<seed>/report.{json,md}`).
    #[arg(long, default_value = "target/chaos")]
    out: PathBuf,
    /// A Markdown file whose section between `<!-- chaos-summary:begin -->`
    /// and `<!-- chaos-summary:end -->` gets the summary.
    #[arg(long)]
    summary: Option<PathBuf>,
    /// The operator binary (default: `etcd-operator` beside this program).
    #[arg(long)]
    operator: Option<PathBuf>,
    /// Print the schedule the seed names and exit (no lab needed).
    #[arg(long)]
    plan_only: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    if args.plan_only {
        for step in etcd_chaos::schedule::plan(seed, args.steps, args.members) {
            let under = step
                .during
                .map(|o| format!(" (during a {})", o.kind()))
                .unwrap_or_default();
            match &step.overlapping {
                Some(o) => println!(
                    "{:4} {}; {} ms in: {}{under}",
                    step.number, step.fault, o.after_ms, o.fault
                ),
                None => println!("{:4} {}{under}", step.number, step.fault),
            }
        }
        return ExitCode::SUCCESS;
    }
    let operator = match args.operator.clone().or_else(beside_this_program) {
        Some(path) => path,
        None => {
            eprintln!("etcd-chaos: no operator binary: pass --operator");
            return ExitCode::from(2);
        }
    };
    let mut options = CampaignOptions::new(seed, args.steps);
    options.members = args.members;
    options.storage_class = args.storage_class.clone();
    options.recovery_budget = Duration::from_secs(args.recovery_budget);
    options.time_limit = args.time_limit_minutes.map(|m| Duration::from_secs(m * 60));
    eprintln!(
        "etcd-chaos: seed {seed}, {} steps, {} members on {}",
        args.steps, args.members, args.storage_class
    );
    let slot: Arc<Mutex<Option<Report>>> = Arc::default();
    let filled = slot.clone();
    // One member per node, as the operator spreads them.
    let nodes = u8::try_from(args.members.max(3)).unwrap_or(u8::MAX);
    let outcome = test_kit::e2e::try_run_on_nodes("chaos", &operator, nodes, move |h| {
        Box::pin(async move {
            let report = campaign::run(h, &options).await?;
            let findings = report.findings.len();
            if let Ok(mut slot) = filled.lock() {
                *slot = Some(report);
            }
            // A campaign with findings keeps its lab, with its logs, for a
            // look at what happened.
            if findings > 0 {
                return Err(format!("{findings} findings").into());
            }
            Ok(())
        })
    });
    let Some(report) = slot.lock().ok().and_then(|mut s| s.take()) else {
        if let Err(error) = outcome {
            eprintln!("etcd-chaos: the campaign could not run: {error}");
        }
        return ExitCode::from(2);
    };
    match write(&report, &args.out, args.summary.as_deref()) {
        Ok(dir) => eprintln!("etcd-chaos: report in {}", dir.display()),
        Err(error) => {
            eprintln!("etcd-chaos: writing the report: {error}");
            return ExitCode::from(2);
        }
    }
    print!("{}", report.markdown());
    if report.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "etcd-chaos: {} findings; reproduce with --seed {seed} --steps {}",
            report.findings.len(),
            args.steps
        );
        ExitCode::FAILURE
    }
}

fn beside_this_program() -> Option<PathBuf> {
    let path = std::env::current_exe()
        .ok()?
        .with_file_name("etcd-operator");
    path.is_file().then_some(path)
}

/// Writes the report's files; returns their directory.
fn write(report: &Report, out: &Path, summary: Option<&Path>) -> std::io::Result<PathBuf> {
    let dir = out.join(format!("seed-{}", report.seed));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?,
    )?;
    std::fs::write(dir.join("report.md"), report.markdown())?;
    if let Some(file) = summary {
        let text = std::fs::read_to_string(file)?;
        let updated =
            etcd_chaos::report::replace_summary(&text, &report.markdown()).ok_or_else(|| {
                std::io::Error::other(format!("{} has no chaos-summary markers", file.display()))
            })?;
        std::fs::write(file, updated)?;
    }
    Ok(dir)
}
