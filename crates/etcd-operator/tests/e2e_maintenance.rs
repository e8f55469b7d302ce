//! End to end on the lab: space and maintenance on a 3-member cluster.
//!
//! 1. NOSPACE for real: with a 16 MiB quota, one key rewritten with 256 KiB
//!    values until etcd refuses writes (`database space exceeded`). The
//!    operator compacts the history, defragments every member one at a time
//!    and disarms the alarm; writes are taken again, and the newest
//!    acknowledged value of every key is there.
//! 2. A member's volume filled from outside (`etcd-lab volume fill`),
//!    leaving 24 MiB: status reports the member's volume nearly full
//!    (`Degraded`, naming it) while the cluster keeps quorum and takes
//!    writes; emptied again, the warning goes.
//! 3. A scheduled defragmentation (`* * * * *`): at the next minute every
//!    member is defragmented once, one at a time, and the member that led
//!    when the round started is defragmented last, after leadership moved
//!    away from it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, StatusResponse};
use serde_json::json;
use test_kit::TestResult;
use test_kit::conditions::condition_true;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;
use test_kit::volume_fill::{fill_volume, unfill_volume};

const NAME: &str = "spacious";
const MI: usize = 1 << 20;

#[test]
fn space_is_recovered_reported_and_defragmented_member_by_member() {
    test_kit::e2e::run("maintenance", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        NAME,
        cluster_spec_with(
            3,
            "lab-network",
            json!({ "etcd": { "quotaBackendBytes": 16 * MI } }),
        ),
        Duration::from_secs(180),
    )
    .await?;
    nospace_is_recovered(h).await?;
    a_full_volume_is_reported(h).await?;
    a_scheduled_defrag_goes_member_by_member_leader_last(h).await?;
    Ok(())
}

async fn nospace_is_recovered(h: &mut Harness) -> TestResult {
    let mut etcd = h.etcd().await?;
    // Small keys written once, then one key rewritten until the quota is
    // reached: the history fills it, the keys themselves do not.
    let mut acknowledged: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..50 {
        let key = format!("/space/small/{i:03}");
        let value = format!("value-{i}");
        etcd.put(key.clone(), value.clone(), None).await?;
        acknowledged.insert(key, value);
    }
    let big = "/space/big".to_string();
    let started = Instant::now();
    let mut refused = None;
    // etcd applies the write that crosses the quota and then answers
    // NOSPACE: its value may be the key's newest one, though refused.
    let mut refused_value = String::new();
    for round in 0..400 {
        let value = format!("{round:06}-{}", "x".repeat(256 * 1024));
        match etcd.put(big.clone(), value.clone(), None).await {
            Ok(_) => {
                acknowledged.insert(big.clone(), value);
            }
            Err(error) => {
                refused = Some(error.to_string());
                refused_value = value;
                break;
            }
        }
    }
    let refused = refused.ok_or("400 writes of 256 KiB fit a 16 MiB quota")?;
    assert!(
        refused.contains("database space exceeded"),
        "writes are refused for space: {refused}"
    );
    eprintln!(
        "NOSPACE after {:?} ({} keys acknowledged): {refused}",
        started.elapsed(),
        acknowledged.len()
    );
    // The operator compacts, defragments and disarms; writes resume.
    let recovered = Instant::now();
    wait_for("writes to be taken again", Duration::from_secs(180), || {
        let mut etcd = etcd.clone();
        async move { Ok(etcd.put("/space/after", "ok", None).await.is_ok()) }
    })
    .await?;
    eprintln!("writes taken again {:?} after NOSPACE", recovered.elapsed());
    let events = h.events_about(NAME).await?;
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|e| e.reason.as_deref())
        .filter(|r| ["HistoryCompacted", "MemberDefragmented", "NoSpaceDisarmed"].contains(r))
        .collect();
    for reason in ["HistoryCompacted", "MemberDefragmented", "NoSpaceDisarmed"] {
        assert!(reasons.contains(&reason), "{reason} in {reasons:?}");
    }
    // Every acknowledged write: the newest value of every key.
    for (key, value) in &acknowledged {
        let got = etcd.get(key.clone(), None).await?;
        let stored = got
            .kvs()
            .first()
            .map(|kv| kv.value_str().map(str::to_string))
            .transpose()?;
        let newest = stored.as_deref() == Some(value.as_str());
        let crossing = *key == big && stored.as_deref() == Some(refused_value.as_str());
        assert!(
            newest || crossing,
            "{key}: the newest acknowledged value is lost ({:?} stored)",
            stored.map(|v| v.chars().take(16).collect::<String>())
        );
    }
    // The alarm is gone and status says so.
    let alarms = etcd
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await?;
    assert_eq!(alarms.alarms().len(), 0, "etcd reports no alarm");
    wait_for(
        "status to show no alarm",
        Duration::from_secs(60),
        || async {
            let status = h.status(NAME).await?;
            Ok(status.members.iter().all(|m| m.alarms.is_empty())
                && status
                    .maintenance
                    .as_ref()
                    .is_none_or(|m| m.space_recovery.is_none()))
        },
    )
    .await?;
    Ok(())
}

async fn a_full_volume_is_reported(h: &mut Harness) -> TestResult {
    let claim = format!("data-{NAME}-2");
    let filled = fill_volume(&h.lab, &h.namespace, &claim, 24 * MI as u64).await?;
    eprintln!("filled {claim}: {filled:?}");
    let member = format!("{NAME}-2");
    let degraded = |status: &etcd_operator::api::EtcdClusterStatus| {
        status
            .condition(etcd_operator::api::ConditionType::Degraded)
            .filter(|c| c.status == "True")
            .map(|c| c.message.clone())
            .unwrap_or_default()
    };
    wait_for(
        "Degraded to name the nearly full volume",
        Duration::from_secs(90),
        || async {
            let message = degraded(&h.status(NAME).await?);
            Ok(message.contains(&member) && message.contains("volume is"))
        },
    )
    .await?;
    let status = h.status(NAME).await?;
    eprintln!("reported: {}", degraded(&status));
    assert!(condition_true(&status, "Available"), "quorum kept");
    let reported = status
        .members
        .iter()
        .find(|m| m.name == member)
        .and_then(|m| m.volume_available_bytes)
        .ok_or("the member's free space is in status")?;
    assert!(reported <= 32 * MI as i64, "{reported} bytes left reported");
    let mut etcd = h.etcd().await?;
    etcd.put("/space/while-full", "ok", None).await?;
    unfill_volume(&h.lab, &h.namespace, &claim).await?;
    wait_for("the warning to go", Duration::from_secs(90), || async {
        let status = h.status(NAME).await?;
        Ok(status
            .condition(etcd_operator::api::ConditionType::Degraded)
            .is_none_or(|c| c.status != "True"))
    })
    .await?;
    Ok(())
}

/// The members' statuses through their own endpoints, by name.
async fn statuses(h: &Harness) -> TestResult<BTreeMap<String, StatusResponse>> {
    let mut out = BTreeMap::new();
    let endpoints = h.endpoints().await?;
    for endpoint in endpoints {
        let mut client = Client::connect([endpoint.as_str()], None).await?;
        let status = client.status().await?;
        let id = status.header().map(|h| h.member_id()).unwrap_or_default();
        let members = client.member_list().await?;
        let name = members
            .members()
            .iter()
            .find(|m| m.id() == id)
            .map(|m| m.name().to_string())
            .unwrap_or_default();
        out.insert(name, status);
    }
    Ok(out)
}

async fn a_scheduled_defrag_goes_member_by_member_leader_last(h: &mut Harness) -> TestResult {
    // Give every member something to give back, so a defragmentation shows.
    let mut etcd = h.etcd().await?;
    for i in 0..20 {
        etcd.put("/space/churn", "y".repeat(128 * 1024 + i), None)
            .await?;
    }
    let revision = etcd
        .get("/space/churn", Some(GetOptions::new()))
        .await?
        .header()
        .map(|h| h.revision())
        .unwrap_or_default();
    etcd.compact(revision, None).await?;
    let before = statuses(h).await?;
    let leader_id = before
        .values()
        .next()
        .map(|s| s.leader())
        .ok_or("a member answers")?;
    let leader = before
        .iter()
        .find(|(_, s)| s.header().map(|h| h.member_id()) == Some(leader_id))
        .map(|(name, _)| name.clone())
        .ok_or("the leader answers")?;
    let moves_before = leader_moves(h).await?;
    let last_before = last_defrag(h).await?;
    h.patch_spec(
        NAME,
        json!({ "maintenance": { "defrag": { "schedule": "* * * * *" } } }),
    )
    .await?;
    // Status is polled faster than the operator's passes: the round's list
    // of members done grows one at a time (the pass that defragments a
    // member records it); should the round be over before a poll saw the
    // third, `lastDefrag` names it.
    let mut order: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let status = h.status(NAME).await?;
        let maintenance = status.maintenance.unwrap_or_default();
        if let Some(round) = &maintenance.defrag_round {
            for member in &round.defragmented {
                if !order.contains(member) {
                    order.push(member.clone());
                }
            }
        } else if order.len() == 2
            && let Some(last) = maintenance.last_defrag
            && Some(&last) != last_before.as_ref()
        {
            order.push(last.member.clone());
            break;
        }
        if order.len() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no scheduled round ended: {order:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("scheduled round: {order:?}, leader at the start {leader}");
    let mut members = order.clone();
    members.sort_unstable();
    members.dedup();
    assert_eq!(members.len(), 3, "each member once: {order:?}");
    assert_eq!(order[2], leader, "the leader last: {order:?}");
    assert!(
        leader_moves(h).await? > moves_before,
        "leadership moved away from {leader} first"
    );
    h.patch_spec(
        NAME,
        json!({ "maintenance": { "defrag": { "schedule": null } } }),
    )
    .await?;
    Ok(())
}

/// The last defragmentation status records.
async fn last_defrag(h: &Harness) -> TestResult<Option<etcd_operator::api::LastDefrag>> {
    Ok(h.status(NAME)
        .await?
        .maintenance
        .and_then(|m| m.last_defrag))
}

/// How many times the operator moved leadership (Events, each counted).
async fn leader_moves(h: &Harness) -> TestResult<i32> {
    Ok(h.events_about(NAME)
        .await?
        .iter()
        .filter(|e| e.reason.as_deref() == Some("LeaderMoved"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum())
}
