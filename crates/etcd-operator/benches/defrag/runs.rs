//! The figures of one side (the operator, or etcdctl on etcd alone) over
//! its runs: the medians of what each run measured in the defragmentation's
//! window, and every run's own figures.

use serde_json::{Value, json};
use test_kit::figures::median;

/// The runs of one side done so far.
#[derive(Default)]
pub struct Runs {
    details: Vec<Value>,
}

impl Runs {
    pub fn push(&mut self, figures: Value) {
        self.details.push(figures);
    }

    /// Every run's value of `key`, and their median.
    fn column(&self, key: &str) -> Value {
        let samples: Vec<f64> = self
            .details
            .iter()
            .filter_map(|d| d[key].as_f64())
            .collect();
        json!({ "samples": samples, "median": median(&samples) })
    }

    /// Every run's value of `key` as it is (counts, lists).
    fn list(&self, key: &str) -> Vec<Value> {
        self.details.iter().map(|d| d[key].clone()).collect()
    }

    pub fn into_json(self, error: Option<String>) -> Value {
        let max_gap = self
            .details
            .iter()
            .filter_map(|d| d["longest_gap_s"].as_f64())
            .reduce(f64::max);
        let mut value = json!({
            "longest_gap_s": self.column("longest_gap_s"),
            "longest_gap_max_s": max_gap,
            "latency_p99_ms": self.column("latency_p99_ms"),
            "defrag_s": self.column("defrag_s"),
            "db_before_mib": self.column("db_before_mib"),
            "db_after_mib": self.column("db_after_mib"),
            "reclaimed_mib": self.column("reclaimed_mib"),
            "fragmented_percent_before": self.column("fragmented_percent_before"),
            "failed": self.list("failed"),
            "attempted": self.list("attempted"),
            "lost": self.list("lost"),
            "runs": self.details,
        });
        if let Some(error) = error {
            value["error"] = json!(error);
        }
        value
    }
}

/// The figures both sides record for one run: the load's figures within the
/// defragmentation's window (`window`, from `Record::window_figures`), the
/// window's length, the database before and after (sums over the members)
/// and what the load lost.
pub fn run_figures(
    window: Value,
    defrag_s: f64,
    before: &Value,
    after: &Value,
    lost: usize,
) -> Value {
    let mut figures = window;
    let size = |v: &Value| v["db_size_mib"].as_f64();
    figures["defrag_s"] = json!(test_kit::figures::round3(defrag_s));
    figures["db_before_mib"] = json!(size(before));
    figures["db_after_mib"] = json!(size(after));
    figures["reclaimed_mib"] = json!(
        size(before)
            .zip(size(after))
            .map(|(b, a)| test_kit::figures::round3(b - a))
    );
    figures["fragmented_percent_before"] = before["fragmented_percent"].clone();
    figures["sizes_before"] = before.clone();
    figures["sizes_after"] = after.clone();
    figures["lost"] = json!(lost);
    figures
}

/// One run's figures in a line for the log: `side` says which run it was.
pub fn summary_line(side: &str, figures: &Value) -> String {
    format!(
        "{side}; longest gap {} s, p99 {} ms, {} of {} requests failed {}; {} MiB -> {} MiB; {} lost",
        figures["longest_gap_s"],
        figures["latency_p99_ms"],
        figures["failed"],
        figures["attempted"],
        figures["failed_by_kind"],
        figures["db_before_mib"],
        figures["db_after_mib"],
        figures["lost"],
    )
}
