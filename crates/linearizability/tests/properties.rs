//! Property tests: histories of real executions are accepted; one
//! impossible read makes them rejected; and on tiny arbitrary histories the
//! checker agrees with brute force.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    Fate, Mutation, PlannedOp, brute_force_linearizable, cases, make_read_impossible, simulate,
};
use linearizability::{Call, History, Limits, Operation, Output, Verdict, check};
use proptest::prelude::*;

fn planned_op(clients: usize, keys: usize) -> impl Strategy<Value = PlannedOp> {
    (
        0..clients,
        0..keys,
        0u8..4,
        0u64..30,
        1u64..80,
        0u16..=1000,
        prop_oneof![
            16 => Just(Fate::Answered),
            2 => Just(Fate::TimedOutApplied),
            1 => Just(Fate::TimedOutLost),
        ],
        any::<u8>(),
    )
        .prop_map(
            |(client, key, kind, think, duration, point, fate, choice)| PlannedOp {
                client,
                key,
                kind,
                think,
                duration,
                point,
                fate,
                choice,
            },
        )
}

/// Up to 6 clients over up to 3 keys, up to 80 operations.
fn plan() -> impl Strategy<Value = (usize, Vec<PlannedOp>)> {
    (2usize..=6, 1usize..=3).prop_flat_map(|(clients, keys)| {
        (
            Just(clients),
            prop::collection::vec(planned_op(clients, keys), 1..80),
        )
    })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::NeverWritten),
        Just(Mutation::Stale),
        Just(Mutation::FromTheFuture),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(300)))]

    #[test]
    fn real_executions_are_linearizable((clients, plan) in plan()) {
        let history = History::new(simulate(&plan, clients)).unwrap();
        let verdict = check(&history, &Limits::default());
        prop_assert_eq!(verdict, Verdict::Linearizable);
    }

    #[test]
    fn an_impossible_read_is_rejected(
        (clients, plan) in plan(),
        selector in any::<usize>(),
        wanted in mutation(),
    ) {
        let mut ops = simulate(&plan, clients);
        let Some((read, _used)) = make_read_impossible(&mut ops, selector, wanted) else {
            return Ok(());
        };
        let key = ops[read].key().to_owned();
        let history = History::new(ops).unwrap();
        let verdict = check(&history, &Limits::default());
        let Verdict::NotLinearizable(anomaly) = verdict else {
            return Err(TestCaseError::fail(format!("accepted: {verdict}")));
        };
        prop_assert_eq!(&anomaly.key, &key);
        // All other operations come from a real execution, so the witness
        // must contain the impossible read.
        prop_assert!(anomaly.indices().contains(&read), "{}", anomaly);
        prop_assert!(anomaly.fully_minimised);
        prop_assert!(check(&anomaly.witness(), &Limits::default()).anomaly().is_some());
        // Every witness operation is the recorded one, from the named key.
        for entry in &anomaly.operations {
            prop_assert_eq!(&entry.operation, &history.operations()[entry.index]);
            prop_assert_eq!(entry.operation.key(), key.as_str());
        }
    }
}

/// An arbitrary operation with made-up outputs: on `keys` keys and `values`
/// values, indeterminate with probability `timeouts` in 6.
fn arbitrary_operation(
    keys: &'static [&'static str],
    values: &'static [&'static str],
    timeouts: u8,
) -> impl Strategy<Value = Operation> {
    let key = prop::sample::select(keys);
    let value = prop::sample::select(values);
    let maybe_value = prop::option::of(value.clone());
    let call = prop_oneof![
        (key.clone(), value.clone()).prop_map(|(k, v)| Call::put(k, v)),
        key.clone().prop_map(Call::get),
        (key.clone(), maybe_value.clone(), value)
            .prop_map(|(k, e, n)| Call::compare_and_swap(k, e, n)),
        key.prop_map(Call::delete),
    ];
    (call, 0u64..12, 0u64..6, 0u8..6, maybe_value, any::<bool>()).prop_map(
        move |(call, invoked, length, mode, read, swapped)| {
            if mode < timeouts {
                return Operation::indeterminate(1, call, invoked);
            }
            let output = match &call {
                Call::Get { .. } => Output::Read(read.map(str::to_owned)),
                Call::CompareAndSwap { .. } => Output::Swapped(swapped),
                _ => Output::Ok,
            };
            Operation::returned(u64::from(mode), call, invoked, invoked + length, output)
        },
    )
}

/// Checks `ops` and compares with brute force.
fn compare_with_brute_force(ops: Vec<Operation>) -> Result<(), TestCaseError> {
    let expected = brute_force_linearizable(&ops);
    let history = History::new(ops).unwrap();
    let verdict = check(&history, &Limits::default());
    match &verdict {
        Verdict::Linearizable => prop_assert!(expected, "checker accepted"),
        Verdict::NotLinearizable(anomaly) => {
            prop_assert!(!expected, "checker rejected: {}", anomaly);
            let key_ops: Vec<Operation> = history
                .operations()
                .iter()
                .filter(|op| op.key() == anomaly.key)
                .cloned()
                .collect();
            prop_assert!(!brute_force_linearizable(&key_ops));
            prop_assert!(!brute_force_linearizable(anomaly.witness().operations()));
            prop_assert!(anomaly.fully_minimised);
        }
        Verdict::Unknown { .. } => prop_assert!(false, "unknown: {}", verdict),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(3000)))]

    /// Two keys, two values, few timeouts.
    #[test]
    fn agrees_with_brute_force(
        ops in prop::collection::vec(arbitrary_operation(&["x", "y"], &["a", "b"], 1), 0..8)
    ) {
        compare_with_brute_force(ops)?;
    }

    /// One key, three values, half the operations indeterminate.
    #[test]
    fn agrees_with_brute_force_under_many_timeouts(
        ops in prop::collection::vec(arbitrary_operation(&["x"], &["a", "b", "c"], 3), 0..9)
    ) {
        compare_with_brute_force(ops)?;
    }
}
