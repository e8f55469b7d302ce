//! Timing of campaign-sized histories. Ignored by default; run with
//! `cargo test --release --test performance -- --ignored --nocapture`.
//! `TIMEOUTS=<per mille>` changes the share of timed-out operations
//! (default 50, i.e. 5%).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use common::{Mutation, Rng, make_read_impossible, random_plan, simulate};
use linearizability::{History, Limits, Verdict, check};

/// Checks `history` five times and prints the median time.
fn timed_check(label: &str, history: &History) -> Verdict {
    let mut times = Vec::new();
    let mut verdict = Verdict::Linearizable;
    for _ in 0..5 {
        let start = Instant::now();
        verdict = check(history, &Limits::default());
        times.push(start.elapsed());
    }
    times.sort();
    let elapsed = times[times.len() / 2];
    let summary = match &verdict {
        Verdict::Linearizable => "linearizable".to_owned(),
        Verdict::NotLinearizable(a) => format!(
            "not linearizable on {:?}, witness of {} operations",
            a.key,
            a.operations.len()
        ),
        Verdict::Unknown { key, reason } => format!("unknown on {key:?}: {reason}"),
    };
    println!(
        "{label}: {} ops checked in {elapsed:.2?} (median of 5) -> {summary}",
        history.len()
    );
    verdict
}

fn run(count: usize, keys: usize, clients: usize) {
    let timeouts: u64 = std::env::var("TIMEOUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let mut rng = Rng(0x5EED + count as u64 + keys as u64);
    // Half of the timed-out operations still take effect.
    let plan = random_plan(&mut rng, count, keys, clients, timeouts);
    let mut ops = simulate(&plan, clients);
    let history = History::new(ops.clone()).unwrap();
    let label = format!("{count} ops, {keys} keys, {clients} clients");
    assert_eq!(timed_check(&label, &history), Verdict::Linearizable);

    let (read, _) = make_read_impossible(&mut ops, 12_345, Mutation::Stale).unwrap();
    let key = ops[read].key().to_owned();
    let mutated = History::new(ops).unwrap();
    let verdict = timed_check(&format!("{label}, one stale read"), &mutated);
    let anomaly = verdict.anomaly().expect("the stale read must be found");
    assert_eq!(anomaly.key, key);
    println!("{anomaly}");
}

#[test]
#[ignore = "timing; run in release mode"]
fn campaign_sized_history() {
    run(20_000, 200, 8);
}

#[test]
#[ignore = "timing; run in release mode"]
fn few_hot_keys() {
    run(20_000, 10, 8);
}
