//! Hand-written histories with known answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linearizability::{Call, History, Limits, Operation, Output, UnknownReason, Verdict, check};

fn read(value: Option<&str>) -> Output {
    Output::Read(value.map(str::to_owned))
}

fn done(client: u64, call: Call, invoked: u64, returned: u64, output: Output) -> Operation {
    Operation::returned(client, call, invoked, returned, output)
}

fn verdict(ops: Vec<Operation>) -> Verdict {
    check(&History::new(ops).unwrap(), &Limits::default())
}

fn assert_linearizable(ops: Vec<Operation>) {
    let verdict = verdict(ops);
    assert!(verdict.is_linearizable(), "{verdict}");
}

/// Asserts a violation on `key` whose witness is exactly `indices`.
fn assert_violation(ops: Vec<Operation>, key: &str, indices: &[usize]) {
    let verdict = verdict(ops);
    let anomaly = verdict.anomaly().unwrap_or_else(|| panic!("{verdict}"));
    assert_eq!(anomaly.key, key, "{anomaly}");
    assert_eq!(anomaly.indices(), indices, "{anomaly}");
    assert!(anomaly.fully_minimised);
    // The witness on its own fails too.
    assert!(
        check(&anomaly.witness(), &Limits::default())
            .anomaly()
            .is_some()
    );
}

#[test]
fn empty_history_is_linearizable() {
    assert_linearizable(vec![]);
}

#[test]
fn sequential_reads_see_the_latest_write() {
    assert_linearizable(vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        done(2, Call::put("k", "b"), 20, 30, Output::Ok),
        done(3, Call::get("k"), 40, 50, read(Some("b"))),
    ]);
}

#[test]
fn stale_read_after_completed_write_is_rejected() {
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            done(2, Call::put("k", "b"), 20, 30, Output::Ok),
            done(3, Call::get("k"), 40, 50, read(Some("a"))),
        ],
        "k",
        &[0, 1, 2],
    );
}

#[test]
fn read_concurrent_with_a_write_may_see_either_value() {
    for seen in ["a", "b"] {
        assert_linearizable(vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            done(2, Call::put("k", "b"), 20, 40, Output::Ok),
            done(3, Call::get("k"), 25, 35, read(Some(seen))),
        ]);
    }
}

#[test]
fn reads_cannot_go_back_in_time() {
    // Two sequential reads during one write: new then old is impossible.
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            done(2, Call::put("k", "b"), 20, 100, Output::Ok),
            done(3, Call::get("k"), 30, 40, read(Some("b"))),
            done(3, Call::get("k"), 50, 60, read(Some("a"))),
        ],
        "k",
        &[0, 1, 2, 3],
    );
}

#[test]
fn touching_intervals_are_concurrent() {
    assert_linearizable(vec![
        done(1, Call::get("k"), 0, 10, read(Some("a"))),
        done(2, Call::put("k", "a"), 10, 20, Output::Ok),
    ]);
    assert_violation(
        vec![
            done(1, Call::get("k"), 0, 9, read(Some("a"))),
            done(2, Call::put("k", "a"), 10, 20, Output::Ok),
        ],
        "k",
        &[0],
    );
}

#[test]
fn fresh_key_is_absent() {
    assert_linearizable(vec![done(1, Call::get("k"), 0, 1, read(None))]);
    assert_violation(
        vec![done(1, Call::get("k"), 0, 1, read(Some("x")))],
        "k",
        &[0],
    );
}

#[test]
fn value_never_written_is_rejected() {
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            done(2, Call::get("k"), 5, 15, read(Some("zzz"))),
        ],
        "k",
        &[1],
    );
}

#[test]
fn indeterminate_write_may_take_effect() {
    assert_linearizable(vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        Operation::indeterminate(2, Call::put("k", "b"), 20),
        // Long after the client gave up, the write shows up.
        done(3, Call::get("k"), 1_000, 1_010, read(Some("b"))),
    ]);
}

#[test]
fn indeterminate_write_may_never_take_effect() {
    assert_linearizable(vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        Operation::indeterminate(2, Call::put("k", "b"), 20),
        done(3, Call::get("k"), 1_000, 1_010, read(Some("a"))),
        done(3, Call::get("k"), 2_000, 2_010, read(Some("a"))),
    ]);
}

#[test]
fn indeterminate_write_cannot_act_before_its_invocation() {
    assert_violation(
        vec![
            done(1, Call::get("k"), 0, 10, read(Some("b"))),
            Operation::indeterminate(2, Call::put("k", "b"), 20),
        ],
        "k",
        &[0],
    );
}

#[test]
fn indeterminate_write_once_seen_cannot_be_undone() {
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            Operation::indeterminate(2, Call::put("k", "b"), 20),
            done(3, Call::get("k"), 30, 40, read(Some("b"))),
            done(3, Call::get("k"), 50, 60, read(Some("a"))),
        ],
        "k",
        &[0, 1, 2, 3],
    );
}

#[test]
fn indeterminate_read_is_ignored() {
    assert_linearizable(vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        Operation::indeterminate(2, Call::get("k"), 20),
        done(3, Call::get("k"), 30, 40, read(Some("a"))),
    ]);
}

#[test]
fn compare_and_swap_semantics() {
    // Swaps when the value matches, then reads see the new value.
    assert_linearizable(vec![
        done(
            1,
            Call::compare_and_swap("k", None, "a"),
            0,
            10,
            Output::Swapped(true),
        ),
        done(
            1,
            Call::compare_and_swap("k", Some("a"), "b"),
            20,
            30,
            Output::Swapped(true),
        ),
        done(
            1,
            Call::compare_and_swap("k", Some("a"), "c"),
            40,
            50,
            Output::Swapped(false),
        ),
        done(2, Call::get("k"), 60, 70, read(Some("b"))),
    ]);
    // Cannot report a swap when the value differs...
    assert_violation(
        vec![
            done(1, Call::put("k", "x"), 0, 10, Output::Ok),
            done(
                2,
                Call::compare_and_swap("k", Some("a"), "b"),
                20,
                30,
                Output::Swapped(true),
            ),
        ],
        "k",
        // "a" was never written at all: the put of "x" is beside the point.
        &[1],
    );
    // ...nor a failure when it matches.
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            done(
                2,
                Call::compare_and_swap("k", Some("a"), "b"),
                20,
                30,
                Output::Swapped(false),
            ),
        ],
        "k",
        &[0, 1],
    );
    // A failed swap changes nothing.
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            done(
                2,
                Call::compare_and_swap("k", Some("z"), "b"),
                20,
                30,
                Output::Swapped(false),
            ),
            done(3, Call::get("k"), 40, 50, read(Some("b"))),
        ],
        "k",
        &[2],
    );
}

#[test]
fn indeterminate_compare_and_swap_may_or_may_not_apply() {
    for seen in ["a", "b"] {
        assert_linearizable(vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            Operation::indeterminate(2, Call::compare_and_swap("k", Some("a"), "b"), 20),
            done(3, Call::get("k"), 100, 110, read(Some(seen))),
        ]);
    }
    // But it cannot apply when its comparison fails ("z" is never there).
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            Operation::indeterminate(2, Call::compare_and_swap("k", Some("z"), "b"), 20),
            done(3, Call::get("k"), 100, 110, read(Some("b"))),
        ],
        "k",
        &[1, 2],
    );
}

#[test]
fn delete_then_get_is_absent() {
    assert_linearizable(vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        done(1, Call::delete("k"), 20, 30, Output::Ok),
        done(2, Call::get("k"), 40, 50, read(None)),
        done(
            2,
            Call::compare_and_swap("k", None, "b"),
            60,
            70,
            Output::Swapped(true),
        ),
    ]);
    assert_violation(
        vec![
            done(1, Call::put("k", "a"), 0, 10, Output::Ok),
            done(1, Call::delete("k"), 20, 30, Output::Ok),
            done(2, Call::get("k"), 40, 50, read(Some("a"))),
        ],
        "k",
        &[0, 1, 2],
    );
}

#[test]
fn keys_are_independent_and_the_anomaly_names_the_bad_one() {
    let ops = vec![
        done(1, Call::put("a", "1"), 0, 10, Output::Ok),
        done(2, Call::get("b"), 20, 30, read(None)),
        done(1, Call::put("c", "1"), 0, 10, Output::Ok),
        done(2, Call::put("c", "2"), 20, 30, Output::Ok),
        done(3, Call::get("c"), 40, 50, read(Some("1"))),
        done(3, Call::get("a"), 40, 50, read(Some("1"))),
    ];
    assert_violation(ops, "c", &[2, 3, 4]);
}

#[test]
fn witness_is_cut_and_shrunk() {
    // Noise before and after a stale read on one key.
    let mut ops = Vec::new();
    for i in 0..30u64 {
        ops.push(done(
            i % 4,
            Call::put("k", format!("w{i}")),
            i * 100,
            i * 100 + 150,
            Output::Ok,
        ));
        ops.push(done(
            4,
            Call::get("other"),
            i * 100,
            i * 100 + 10,
            read(None),
        ));
    }
    // The put of w5 [500, 650] precedes the put of w7 [700, 850], which
    // returned before this read was invoked.
    let stale = ops.len();
    ops.push(done(5, Call::get("k"), 900, 920, read(Some("w5"))));
    // A put still running at the read's return.
    let running = ops.len();
    ops.push(done(6, Call::put("k", "late"), 910, 5_000, Output::Ok));
    let verdict = verdict(ops);
    let anomaly = verdict.anomaly().unwrap();
    assert_eq!(anomaly.key, "k");
    assert!(anomaly.indices().contains(&stale));
    assert!(!anomaly.indices().contains(&running));
    assert!(anomaly.operations.len() <= 3, "{anomaly}");
    assert_eq!(anomaly.cut_at, Some(920));
    assert_eq!(anomaly.key_operation_count, 32);
}

#[test]
fn operation_running_at_the_cut_is_shown_as_such() {
    let ops = vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        // Returns late, so it is running when the read returns.
        done(
            2,
            Call::compare_and_swap("k", Some("a"), "b"),
            20,
            500,
            Output::Swapped(true),
        ),
        done(3, Call::get("k"), 30, 40, read(Some("b"))),
        done(3, Call::get("k"), 50, 60, read(Some("a"))),
    ];
    let verdict = verdict(ops);
    let anomaly = verdict.anomaly().unwrap();
    assert_eq!(anomaly.indices(), [0, 1, 2, 3]);
    assert_eq!(anomaly.cut_at, Some(60));
    assert!(anomaly.operations[1].pending_at_cut);
    assert!(anomaly.witness().operations()[1].is_indeterminate());
    let text = anomaly.to_string();
    assert!(
        text.contains(r#"#1 client 2 [20 .. 500] cas("k", expected "a", new "b") -> swapped  [running at the cut: treated as indeterminate]"#),
        "{text}"
    );
}

#[test]
fn anomaly_renders_each_operation() {
    let verdict = verdict(vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        done(2, Call::delete("k"), 20, 30, Output::Ok),
        done(3, Call::get("k"), 40, 50, read(Some("a"))),
    ]);
    let text = verdict.anomaly().unwrap().to_string();
    let expected_lines = [
        r#"key "k": no linearization exists for these operations (3 of the key's 3):"#,
        r#"  #0 client 1 [0 .. 10] put("k", "a") -> ok"#,
        r#"  #1 client 2 [20 .. 30] delete("k") -> ok"#,
        r#"  #2 client 3 [40 .. 50] get("k") -> "a""#,
    ];
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..4], expected_lines, "{text}");
    assert!(lines[4].starts_with("Times are nanoseconds"), "{text}");
    assert!(
        verdict
            .to_string()
            .starts_with("NOT linearizable: key \"k\"")
    );
}

/// Many concurrent writes and a read of a value none of them wrote: the
/// search must explore every order of the writes.
fn expensive_key(key: &str) -> Vec<Operation> {
    let mut ops: Vec<Operation> = (0..14)
        .map(|i| done(i, Call::put(key, format!("{i}")), 0, 100, Output::Ok))
        .collect();
    ops.push(done(99, Call::get(key), 0, 100, read(Some("nobody"))));
    ops
}

#[test]
fn search_stops_at_the_step_limit() {
    let mut ops = expensive_key("slow");
    ops.push(done(1, Call::put("fine", "x"), 0, 1, Output::Ok));
    let limits = Limits {
        max_steps_per_key: 1_000,
        ..Limits::default()
    };
    let verdict = check(&History::new(ops).unwrap(), &limits);
    assert_eq!(
        verdict,
        Verdict::Unknown {
            key: "slow".into(),
            reason: UnknownReason::StepLimit { steps: 1_000 }
        }
    );
}

#[test]
fn search_stops_at_the_memory_limit() {
    let limits = Limits {
        max_memo_bytes_per_key: 64 * 1024,
        ..Limits::default()
    };
    let verdict = check(&History::new(expensive_key("k")).unwrap(), &limits);
    assert!(
        matches!(&verdict, Verdict::Unknown { key, reason: UnknownReason::MemoryLimit { .. } } if key == "k"),
        "{verdict}"
    );
}

#[test]
fn a_definite_violation_beats_an_unknown_key() {
    let mut ops = expensive_key("a-slow");
    ops.push(done(1, Call::get("z-bad"), 0, 1, read(Some("ghost"))));
    let limits = Limits {
        max_steps_per_key: 1_000,
        ..Limits::default()
    };
    let verdict = check(&History::new(ops).unwrap(), &limits);
    assert_eq!(verdict.anomaly().map(|a| a.key.as_str()), Some("z-bad"));
}

#[test]
fn final_reads_in_the_history_catch_a_lost_write() {
    let ops = vec![
        done(1, Call::put("k", "a"), 0, 10, Output::Ok),
        done(2, Call::put("k", "b"), 20, 30, Output::Ok),
        Operation::indeterminate(3, Call::put("k", "c"), 25),
        // Final read, after everything: "b" or "c" are fine, "a" is not.
        done(9, Call::get("k"), 1_000, 1_010, read(Some("a"))),
    ];
    assert_violation(ops, "k", &[0, 1, 3]);
}
