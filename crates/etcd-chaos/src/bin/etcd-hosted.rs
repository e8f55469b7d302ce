//! `etcd-hosted`: the hosted control plane scenario on the lab. A tenant
//! `kube-apiserver` stores in an operator-managed etcd cluster over mutual
//! TLS; objects are created through it and watched by an informer while
//! etcd loses its majority and gets it back, loses a member's data, and is
//! upgraded. Needs root, the upstream binaries and `etcd-operator` beside
//! this program.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use etcd_chaos::hosted::scenario::{self, HostedReport};

fn main() -> ExitCode {
    let Some(operator) = std::env::current_exe()
        .ok()
        .map(|p| p.with_file_name("etcd-operator"))
        .filter(|p| p.is_file())
        .or_else(|| std::env::args_os().nth(1).map(PathBuf::from))
    else {
        eprintln!("etcd-hosted: no etcd-operator beside this program (or give its path)");
        return ExitCode::from(2);
    };
    let slot: Arc<Mutex<Option<HostedReport>>> = Arc::default();
    let filled = slot.clone();
    let outcome = test_kit::e2e::try_run("hosted", &operator, move |h| {
        Box::pin(async move {
            let report = scenario::run(h).await?;
            if let Ok(mut slot) = filled.lock() {
                *slot = Some(report);
            }
            Ok(())
        })
    });
    if let Err(error) = outcome {
        eprintln!("etcd-hosted: {error}");
        return ExitCode::FAILURE;
    }
    let Some(report) = slot.lock().ok().and_then(|mut s| s.take()) else {
        return ExitCode::FAILURE;
    };
    println!(
        "| phase | from the fault to objects acknowledged again | objects acknowledged before → after | listed after |"
    );
    println!("| --- | ---: | ---: | ---: |");
    for phase in &report.phases {
        println!(
            "| {} | {:.1} s | {} → {} | {} |",
            phase.name,
            phase.took.as_secs_f64(),
            phase.acknowledged.0,
            phase.acknowledged.1,
            phase.listed
        );
    }
    println!(
        "\n{} objects acknowledged by the tenant API server, every one listed at the end but those the restore could not hold ({} listed; {} creations failed or timed out, their outcome unknown). The informer listed {} times and met {} watch errors; it listed the restored cluster {:.1?} after the old API server stopped (its watch got 410 Gone) and its cache then equalled the list.",
        report.acknowledged,
        report.listed,
        report.failed,
        report.informer_relists,
        report.informer_errors,
        report.informer_relisted_after_move.unwrap_or_default()
    );
    println!(
        "Restored from a full backup reporting revision {}: every object written up to it is there, none acknowledged after the backup finished; of the {} written after that revision while the backup ran, {} are there (the reported revision is the member's just before the snapshot began, a lower bound of the snapshot's).",
        report.restored_revision, report.written_during_backup.0, report.written_during_backup.1
    );
    ExitCode::SUCCESS
}
