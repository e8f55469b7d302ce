//! The short chaos campaign of the README's test command: seed 98's first
//! fourteen steps, run as a user runs it: `etcd-chaos --seed 98 --steps
//! 14`. The operator killed; a node cut from the API server overlapped by
//! a pod kill; two of three nodes powered off overlapped by a pod kill,
//! during a backup; a member's volume wiped; a majority partition
//! overlapped by a pod deletion, during a rollout; another overlapped by a
//! pod kill; a pod kill; a third majority partition; the leader's node cut
//! from its peers; a member's volume full for 16 s; a frozen node; the
//! leader cut again, during a rollout; another volume full; a pod deletion
//! during a backup. It must find nothing, and its checks must have had
//! work: thousands of operations, watch events, every step injected, both
//! rollouts completed, both backups ended and at least one succeeded.
//! Needs root, the upstream binaries and `etcd-operator` beside
//! `etcd-chaos` (`cargo build --workspace --bins`).

use std::process::Command;

use serde_json::Value;

const SEED: &str = "98";
const STEPS: usize = 14;

#[test]
fn a_short_seeded_campaign_finds_nothing() {
    let binary = env!("CARGO_BIN_EXE_etcd-chaos");
    let out = std::env::temp_dir().join(format!("chaos-short-{}", std::process::id()));
    let status = Command::new(binary)
        .args(["--seed", SEED, "--steps", &STEPS.to_string(), "--out"])
        .arg(&out)
        .status()
        .expect("run etcd-chaos");
    let report_file = out.join(format!("seed-{SEED}")).join("report.json");
    let report: Value = serde_json::from_slice(
        &std::fs::read(&report_file)
            .unwrap_or_else(|e| panic!("{}: {e} (etcd-chaos {status})", report_file.display())),
    )
    .expect("report.json");
    let findings = report["findings"].as_array().expect("findings");
    assert!(
        findings.is_empty(),
        "findings: {}",
        serde_json::to_string_pretty(findings).unwrap_or_default()
    );
    assert!(status.success(), "etcd-chaos: {status}");

    let steps = report["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), STEPS, "every step ran");
    for step in steps {
        assert_eq!(step["injected"], true, "injected: {step}");
        assert!(step["recovery_ms"].is_u64(), "recovered: {step}");
    }
    let work: Vec<(&str, &str)> = steps
        .iter()
        .filter_map(|s| {
            let operation = s.get("operation")?;
            Some((operation["kind"].as_str()?, operation["result"].as_str()?))
        })
        .collect();
    assert_eq!(
        work.iter().filter(|(kind, _)| *kind == "rollout").count(),
        2,
        "rollouts: {work:?}"
    );
    assert_eq!(
        work.iter().filter(|(kind, _)| *kind == "backup").count(),
        2,
        "backups: {work:?}"
    );
    // A backup may fail while a majority is down (it says why); the one
    // hit by a pod deletion must succeed, covering the writes acknowledged
    // before it.
    assert!(
        work.iter().all(|w| matches!(
            w,
            ("rollout", "completed") | ("backup", "succeeded" | "failed")
        )),
        "operator work under faults: {work:?}"
    );
    assert!(work.contains(&("backup", "succeeded")), "{work:?}");
    let operations = &report["operations"];
    for (figure, at_least) in [
        ("checked", 2_000),
        ("acknowledged_writes", 1_000),
        ("acknowledged_reads", 500),
        ("watch_events", 500),
    ] {
        let value = operations[figure].as_u64().unwrap_or(0);
        assert!(value >= at_least, "{figure}: {value} < {at_least}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
