//! End to end on the lab: a cluster's NetworkPolicy, enforced by the lab
//! (its services process programs the policy into the router's nft
//! forward hook; see docs/lab.md), so what is refused here is refused by
//! dropped packets, not by etcd.
//!
//! The operator runs as `deploy/` installs it, in a Pod of its own
//! namespace (the harness's operator, which runs on the host, is stopped):
//! its connections to the members are judged like any Pod's. A TLS
//! cluster names one other namespace in `spec.networkPolicy.clientsFrom`.
//! It becomes Available (the operator reaches the client port through the
//! policy), and then, from prober Pods holding the cluster's client
//! certificate:
//!
//! - in the cluster's namespace: the client port opens, at a member and at
//!   the client Service's ClusterIP; the peer port does not (only members
//!   reach it); the metrics port opens;
//! - in the namespace `clientsFrom` names: the client port opens, a write
//!   through the client Service goes through and is read back from the
//!   cluster's namespace; the peer port does not open;
//! - in any other namespace: the client and peer ports of every member and
//!   the client Service time out (dropped), a write fails, while the
//!   metrics port opens (open to all by default: the prober's packets do
//!   reach the members).
//!
//! The lab's client namespace (`etcd-lab exec`, outside the Pod network)
//! is dropped too, until `clientsFrom` names its address in an `ipBlock`.
//! Then `clientsFrom` is emptied: the named namespace and the address are
//! refused within seconds; `enabled: false` deletes the policy and every
//! namespace gets in. The cluster stays Available throughout.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::installed_operator::InstalledOperator;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::prober::{Prober, Reach, reach_from_client_namespace};

const CLUSTER: &str = "guarded";
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
const METRICS_PORT: u16 = 2381;
/// The subnet of the lab's client namespace.
const CLIENT_SUBNET: &str = "10.244.250.0/24";

#[test]
fn only_the_namespaces_a_cluster_names_reach_its_members() {
    test_kit::e2e::run("network-policy", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.stop_operator();
    let started = Instant::now();
    let operator = InstalledOperator::install(
        &h.client,
        &format!("{}-operator", h.namespace),
        &h.namespace,
    )
    .await?;
    eprintln!(
        "operator installed from deploy/ in {} after {:?}",
        operator.namespace,
        started.elapsed()
    );
    let outcome = checks(h).await;
    if outcome.is_err() {
        eprintln!("the installed operator's log:\n{}", operator.logs().await);
        return outcome;
    }
    operator.uninstall().await
}

/// The namespaces of the scenario besides the harness's.
struct Namespaces {
    allowed: String,
    outside: String,
}

async fn checks(h: &Harness) -> TestResult {
    let namespaces = Namespaces {
        allowed: format!("{}-allowed", h.namespace),
        outside: format!("{}-outside", h.namespace),
    };
    let namespace_api: Api<Namespace> = Api::all(h.client.clone());
    for name in [&namespaces.allowed, &namespaces.outside] {
        namespace_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
    }

    let started = Instant::now();
    let spec = cluster_spec_with(
        3,
        "lab-network",
        json!({
            "tls": {"builtIn": {}},
            "networkPolicy": {"clientsFrom": [{"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": namespaces.allowed
            }}}]},
        }),
    );
    h.create_available(CLUSTER, spec, Duration::from_secs(300))
        .await?;
    eprintln!(
        "Available through the policy, managed from a Pod, after {:?}",
        started.elapsed()
    );
    the_policy_is_the_clusters(h).await?;

    let Probers {
        inside,
        allowed,
        outside,
    } = probers(h, &namespaces).await?;

    let members = h.member_ips(CLUSTER).await?;
    let member = members.first().ok_or("no member address")?.clone();
    let service = Api::<Service>::namespaced(h.client.clone(), &h.namespace)
        .get(&format!("{CLUSTER}-client"))
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .ok_or("the client Service has no ClusterIP")?;
    let url = format!(
        "https://{CLUSTER}-client.{}.svc.cluster.local:{CLIENT_PORT}",
        h.namespace
    );

    // Allowed: a new Pod's address reaches the rules a moment after it has
    // one, so the first "open" is waited for; a refusal is final.
    for prober in [&inside, &allowed] {
        becomes(prober, &member, CLIENT_PORT, Reach::Open).await?;
        expect(prober, &service, CLIENT_PORT, Reach::Open).await?;
        expect(prober, &member, PEER_PORT, Reach::TimedOut).await?;
    }
    expect(&inside, &member, METRICS_PORT, Reach::Open).await?;
    for address in &members {
        expect(&outside, address, CLIENT_PORT, Reach::TimedOut).await?;
        expect(&outside, address, PEER_PORT, Reach::TimedOut).await?;
    }
    expect(&outside, &service, CLIENT_PORT, Reach::TimedOut).await?;
    expect(&outside, &member, METRICS_PORT, Reach::Open).await?;

    allowed
        .put(&url, "network-policy/allowed", "written")
        .await?;
    let read = inside.get(&url, "network-policy/allowed").await?;
    if read != "written" {
        return Err(format!("read back {read:?} from the cluster's namespace").into());
    }
    match outside.put(&url, "network-policy/outside", "written").await {
        Err(error) => eprintln!("{}: write refused as expected: {error}", outside.id),
        Ok(()) => return Err(format!("{} wrote through the policy", outside.id).into()),
    }
    eprintln!("writes: {} through, {} refused", allowed.id, outside.id);

    // Outside the Pod network: only an ipBlock lets an address in.
    expect(&ClientNamespace, &member, CLIENT_PORT, Reach::TimedOut).await?;
    let allowed_namespace = json!({"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": namespaces.allowed
    }}});
    h.patch_spec(
        CLUSTER,
        json!({"networkPolicy": {"clientsFrom": [
            allowed_namespace,
            {"ipBlock": {"cidr": CLIENT_SUBNET}}
        ]}}),
    )
    .await?;
    becomes(&ClientNamespace, &member, CLIENT_PORT, Reach::Open).await?;
    expect(&ClientNamespace, &member, PEER_PORT, Reach::TimedOut).await?;

    // The operator follows spec changes and the lab follows the policy.
    let changed = Instant::now();
    h.patch_spec(CLUSTER, json!({"networkPolicy": {"clientsFrom": null}}))
        .await?;
    becomes(&allowed, &member, CLIENT_PORT, Reach::TimedOut).await?;
    eprintln!(
        "clientsFrom emptied: {} refused after {:?}",
        allowed.id,
        changed.elapsed()
    );
    expect(&ClientNamespace, &member, CLIENT_PORT, Reach::TimedOut).await?;
    let changed = Instant::now();
    h.patch_spec(CLUSTER, json!({"networkPolicy": {"enabled": false}}))
        .await?;
    becomes(&outside, &member, CLIENT_PORT, Reach::Open).await?;
    eprintln!(
        "policy disabled: {} reaches the client port after {:?}",
        outside.id,
        changed.elapsed()
    );
    let policies: Api<NetworkPolicy> = Api::namespaced(h.client.clone(), &h.namespace);
    if policies
        .get_opt(&format!("{CLUSTER}-members"))
        .await?
        .is_some()
    {
        return Err("the NetworkPolicy is still there with enabled: false".into());
    }
    h.wait_available(CLUSTER, 3, Duration::from_secs(60))
        .await?;

    for name in [&namespaces.allowed, &namespaces.outside] {
        namespace_api.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// A prober Pod in each namespace of the scenario.
struct Probers {
    inside: Prober,
    allowed: Prober,
    outside: Prober,
}

/// The probers, each with the cluster's client certificate (copied into
/// the other namespaces): what the network refuses, it refuses to a client
/// that etcd would accept.
async fn probers(h: &Harness, namespaces: &Namespaces) -> TestResult<Probers> {
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let client_secret = format!("{CLUSTER}-client-tls");
    let secret = secrets.get(&client_secret).await?;
    for namespace in [&namespaces.allowed, &namespaces.outside] {
        let copy: Secret = serde_json::from_value(json!({
            "metadata": {"name": client_secret},
            "data": secret.data,
        }))?;
        Api::<Secret>::namespaced(h.client.clone(), namespace)
            .create(&PostParams::default(), &copy)
            .await?;
    }
    let mounted = Some(client_secret.as_str());
    Ok(Probers {
        inside: Prober::start(&h.client, &h.namespace, "prober", mounted).await?,
        allowed: Prober::start(&h.client, &namespaces.allowed, "prober", mounted).await?,
        outside: Prober::start(&h.client, &namespaces.outside, "prober", mounted).await?,
    })
}

/// The NetworkPolicy `<cluster>-members` exists and the cluster owns it.
async fn the_policy_is_the_clusters(h: &Harness) -> TestResult {
    let cluster = h.clusters.get(CLUSTER).await?;
    let policy = Api::<NetworkPolicy>::namespaced(h.client.clone(), &h.namespace)
        .get(&format!("{CLUSTER}-members"))
        .await?;
    let owned = policy
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && Some(&r.uid) == cluster.meta().uid.as_ref());
    if !owned {
        return Err(format!("{} is not owned by the cluster", policy.name_any()).into());
    }
    Ok(())
}

/// Where connections come from.
trait Source {
    fn name(&self) -> String;
    async fn reach(&self, host: &str, port: u16) -> TestResult<Reach>;
}

impl Source for Prober {
    fn name(&self) -> String {
        self.id.clone()
    }
    async fn reach(&self, host: &str, port: u16) -> TestResult<Reach> {
        Prober::reach(self, host, port).await
    }
}

/// The lab's client namespace, outside the Pod network.
struct ClientNamespace;

impl Source for ClientNamespace {
    fn name(&self) -> String {
        format!("the client namespace ({CLIENT_SUBNET})")
    }
    async fn reach(&self, host: &str, port: u16) -> TestResult<Reach> {
        reach_from_client_namespace(host, port).await
    }
}

/// `prober` meets `expected` at `host:port` now.
async fn expect(prober: &impl Source, host: &str, port: u16, expected: Reach) -> TestResult {
    let got = prober.reach(host, port).await?;
    eprintln!("{} -> {host}:{port}: {got:?}", prober.name());
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "{} -> {host}:{port}: {got:?}, expected {expected:?}",
            prober.name()
        )
        .into())
    }
}

/// `prober` meets `expected` at `host:port` within 60 s.
async fn becomes(prober: &impl Source, host: &str, port: u16, expected: Reach) -> TestResult {
    let started = Instant::now();
    loop {
        let got = prober.reach(host, port).await?;
        if got == expected {
            eprintln!(
                "{} -> {host}:{port}: {got:?} after {:?}",
                prober.name(),
                started.elapsed()
            );
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "{} -> {host}:{port}: still {got:?} after {:?}, expected {expected:?}",
                prober.name(),
                started.elapsed()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
