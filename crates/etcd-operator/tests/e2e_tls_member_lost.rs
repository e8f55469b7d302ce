//! End to end on the lab: a member's data is lost in the middle of turning
//! TLS on for a running 3-member plaintext cluster.
//!
//! TLS is turned on (`spec.tls.disabled` → `spec.tls: {builtIn: {}}`); once
//! the operator has moved a first peer URL to TLS (the member list then
//! holds peer URLs of two schemes and ports), the volume of a member whose
//! peer URL has not moved yet is wiped and its etcd killed. The member is
//! replaced: its join names every peer by the URL the member list holds
//! (not by the URL pattern of the stage), so etcd accepts it.
//!
//! Checked: the member is replaced by a new voter (same name, new member
//! ID, same cluster ID); the change then finishes (`status.transport` is
//! `Tls`, every member on the spec and ready, every peer URL
//! `https://…:2380`); every key written before is there.

use std::time::{Duration, Instant};

use etcd_operator::api::EtcdCluster;
use etcd_operator::transport::Transport;
use kube::Api;
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with, keys_under};
use test_kit::tls_client::{client_material, tls_client};

const CLUSTER: &str = "halfway";
const PREFIX: &str = "/halfway/";
const KEYS: usize = 300;

#[test]
fn a_member_lost_while_tls_is_turned_on_is_replaced_and_the_change_finishes() {
    test_kit::e2e::run(
        "tls-member-lost",
        env!("CARGO_BIN_EXE_etcd-operator"),
        |h| Box::pin(scenario(h)),
    );
}

/// Every peer URL of the member list, by member name.
async fn peer_urls(h: &Harness) -> TestResult<Vec<(String, String)>> {
    let mut client = h.etcd().await?;
    let members = client.member_list().await?;
    Ok(members
        .members()
        .iter()
        .flat_map(|m| {
            m.peer_urls()
                .iter()
                .map(|u| (m.name().to_owned(), u.clone()))
                .collect::<Vec<_>>()
        })
        .collect())
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        CLUSTER,
        cluster_spec_with(3, "lab-network", json!({ "tls": { "disabled": true } })),
        Duration::from_secs(180),
    )
    .await?;
    h.write_keys(PREFIX, KEYS).await?;
    let before = h.identity().await?;
    let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
    let transport = |c: &EtcdCluster| c.status.as_ref().and_then(|s| s.transport);

    h.patch_spec(
        CLUSTER,
        json!({ "tls": { "disabled": false, "builtIn": {} } }),
    )
    .await?;
    let started = Instant::now();

    // 1. Halfway: a first peer URL moved to TLS, the others not yet.
    let unmoved = loop {
        if let Ok(urls) = peer_urls(h).await {
            let moved = urls
                .iter()
                .filter(|(_, u)| u.starts_with("https://"))
                .count();
            let first_unmoved = urls.iter().find(|(_, u)| u.starts_with("http://"));
            if let (true, Some((name, _))) = (moved > 0, first_unmoved) {
                break name.clone();
            }
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err("no peer URL moved to TLS in 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let stage = transport(&clusters.get(CLUSTER).await?);
    eprintln!(
        "{:?}: peer URLs {:?}, stage {stage:?}; losing {unmoved}",
        started.elapsed(),
        peer_urls(h).await?
    );

    // 2. The volume of a member whose peer URL has not moved is lost.
    let claim = format!("data-{unmoved}");
    let dir = h.lab.volume_wipe(&h.namespace, &claim).await?;
    eprintln!("wiped {}", dir.display());
    h.lab.pod_kill(&h.namespace, &unmoved, Some("etcd")).await?;
    let old_id = before.id_of(&unmoved).ok_or("member before")?;

    // 3. The change finishes with the member replaced.
    let mut stages: Vec<Transport> = stage.into_iter().collect();
    loop {
        let cluster = clusters.get(CLUSTER).await?;
        if let Some(stage) = transport(&cluster)
            && stages.last() != Some(&stage)
        {
            eprintln!("{:?}: {stage:?}", started.elapsed());
            stages.push(stage);
        }
        let status = cluster.status.unwrap_or_default();
        if stages.last() == Some(&Transport::Tls)
            && status.updated_members == 3
            && status.ready_members == 3
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(1200) {
            return Err(format!("TLS was not on in 1200 s: stages {stages:?}, {status:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("TLS on in {:?}: {stages:?}", started.elapsed());
    h.wait_available(CLUSTER, 3, Duration::from_secs(180))
        .await?;

    let material = client_material(h, CLUSTER).await?;
    let mut secure = tls_client(
        h,
        CLUSTER,
        &material.ca,
        Some((&material.cert, &material.key)),
    )
    .await?;
    let list = secure.member_list().await?;
    let cluster_id = list.header().map(|h| h.cluster_id()).unwrap_or_default();
    assert_eq!(cluster_id, before.cluster_id, "the same cluster");
    let members = list.members();
    assert_eq!(members.len(), 3, "three members");
    assert!(members.iter().all(|m| !m.is_learner()), "three voters");
    let replaced = members
        .iter()
        .find(|m| m.name() == unmoved)
        .ok_or("the lost member's name is back")?;
    assert_ne!(replaced.id(), old_id, "a new member for the lost data");
    let urls: Vec<String> = members
        .iter()
        .flat_map(|m| m.peer_urls().to_vec())
        .collect();
    assert!(
        urls.iter()
            .all(|u| u.starts_with("https://") && u.ends_with(":2380")),
        "every peer URL serves TLS on 2380: {urls:?}"
    );
    let stored = keys_under(&mut secure, PREFIX).await?;
    let missing: Vec<usize> = (0..KEYS)
        .filter(|i| !stored.contains(&test_kit::e2e::key(PREFIX, *i)))
        .collect();
    assert!(missing.is_empty(), "keys lost: {missing:?}");
    Ok(())
}
