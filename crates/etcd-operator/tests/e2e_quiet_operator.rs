//! End to end on the lab: an operator with nothing to change asks the API
//! server for nothing. Once a 3-member cluster is Available and its status
//! settled, the operator's passes over the next 45 s plan from its
//! watch-fed copies alone (`etcd_operator_reconcile_passes_total{reads=
//! "copies"}` grows: the cluster is still looked at, etcd still asked),
//! and not one plans from fresh reads (`reads="api"` stays where it was).
//! Then a member Pod deleted is a change: a pass reads fresh and the Pod
//! is created again.

use std::time::{Duration, Instant};

use kube::api::DeleteParams;
use test_kit::TestResult;
use test_kit::e2e::operator::metric_sum;
use test_kit::e2e::{Harness, cluster_spec};
use test_kit::poll::wait_for;

const NAME: &str = "quiet";
const PASSES: &str = "etcd_operator_reconcile_passes_total";
/// Long enough for more than one periodic pass (at most every 30 s when
/// nothing changes) and for every watch event of the cluster's creation to
/// have been seen.
const QUIET: Duration = Duration::from_secs(45);

#[test]
fn an_idle_operator_plans_from_its_copies_and_a_change_reads_fresh() {
    test_kit::e2e::run("quiet", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// The passes planned from copies and from fresh reads so far.
async fn passes(h: &Harness) -> TestResult<(f64, f64)> {
    let metrics = h.operator_metrics().await?;
    Ok((
        metric_sum(&metrics, PASSES, &["reads=\"copies\""]),
        metric_sum(&metrics, PASSES, &["reads=\"api\""]),
    ))
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        NAME,
        cluster_spec(3, "lab-network"),
        Duration::from_secs(180),
    )
    .await?;
    // Settled: a pass planned from the copies found nothing to change
    // after the last pass that read fresh (the last status writes of the
    // creation, Pods turning Ready, are behind). A stretch of time without
    // a fresh pass proves nothing: passes can be 30 s apart.
    let settling = Instant::now();
    let mut since_fresh = passes(h).await?;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = passes(h).await?;
        if now.1 != since_fresh.1 {
            since_fresh = now;
        } else if now.0 > since_fresh.0 {
            break;
        }
        if settling.elapsed() > Duration::from_secs(120) {
            return Err(format!("the operator never settled: {now:?}").into());
        }
    }
    let (copies_before, api_before) = passes(h).await?;
    tokio::time::sleep(QUIET).await;
    let (copies_after, api_after) = passes(h).await?;
    eprintln!(
        "in {QUIET:?} of quiet: {} passes from copies, {} from fresh reads",
        copies_after - copies_before,
        api_after - api_before
    );
    assert!(
        copies_after > copies_before,
        "no pass in {QUIET:?}: the cluster was not looked at"
    );
    assert_eq!(
        api_after, api_before,
        "a pass read the API server although nothing changed"
    );

    // A change: a member Pod deleted is seen and acted on through fresh
    // reads.
    let member = format!("{NAME}-2");
    let old_uid = h.pods.get(&member).await?.metadata.uid;
    h.pods.delete(&member, &DeleteParams::default()).await?;
    wait_for(
        "the member Pod to be created again",
        Duration::from_secs(60),
        || async {
            Ok(h.pods
                .get_opt(&member)
                .await?
                .is_some_and(|p| p.metadata.uid.is_some() && p.metadata.uid != old_uid))
        },
    )
    .await?;
    let (_, api_changed) = passes(h).await?;
    assert!(
        api_changed > api_after,
        "the Pod came back without a pass that read fresh"
    );
    h.wait_available(NAME, 3, Duration::from_secs(120)).await?;
    Ok(())
}
