//! The Node object, its Lease and its status heartbeat.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use crate::config::AgentConfig;
use crate::kubelet_api::{DECLARED_FEATURES, KUBELET_PORT};
use crate::node_context::NodeContext;

/// Lease renewal period.
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// Lease duration written into the Lease.
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// The status is written at least this often.
pub const STATUS_REPORT: Duration = Duration::from_secs(40);

/// Labels of the Node.
pub fn node_labels(config: &AgentConfig) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "kubernetes.io/hostname".to_owned(),
            config.node_name.clone(),
        ),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        (
            "kubernetes.io/arch".to_owned(),
            std::env::consts::ARCH
                .replace("x86_64", "amd64")
                .replace("aarch64", "arm64"),
        ),
        (
            "topology.kubernetes.io/zone".to_owned(),
            config.zone.clone(),
        ),
    ])
}

/// Annotations a kubelet sets when it registers. The attach-detach
/// controller only attaches volumes (creates VolumeAttachments) for nodes
/// that say their volumes are controller-managed.
pub fn node_annotations() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "volumes.kubernetes.io/controller-managed-attach-detach".to_owned(),
        "true".to_owned(),
    )])
}

/// Node status as the kubelet reports it.
pub fn node_status(
    config: &AgentConfig,
    volumes_in_use: Vec<String>,
    previous: Option<&NodeStatus>,
    now: Timestamp,
) -> NodeStatus {
    let capacity = BTreeMap::from([
        ("cpu".to_owned(), Quantity(config.capacity.cpu.clone())),
        (
            "memory".to_owned(),
            Quantity(config.capacity.memory.clone()),
        ),
        (
            "pods".to_owned(),
            Quantity(config.capacity.pods.to_string()),
        ),
        ("ephemeral-storage".to_owned(), Quantity("100Gi".into())),
    ]);
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        let old = previous
            .and_then(|p| p.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == type_));
        let last_transition_time = match old {
            Some(o) if o.status == status => o.last_transition_time.clone(),
            _ => Some(Time(now)),
        };
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time,
        }
    };
    let arch = std::env::consts::ARCH
        .replace("x86_64", "amd64")
        .replace("aarch64", "arm64");
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: config.node_ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: config.node_name.clone(),
            },
        ]),
        allocatable: Some(capacity.clone()),
        capacity: Some(capacity),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "etcd-lab node agent is posting ready status",
            ),
        ]),
        // What the kubelet API serves beyond the basics: with
        // ExtendWebSocketsToKubelet the API server proxies exec WebSockets
        // to it instead of translating them to SPDY.
        declared_features: Some(DECLARED_FEATURES.iter().map(|f| (*f).to_owned()).collect()),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: KUBELET_PORT }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: arch,
            boot_id: String::new(),
            container_runtime_version: "etcd-lab://0.1.0".into(),
            kernel_version: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            kube_proxy_version: String::new(),
            kubelet_version: "v1.37.0-etcd-lab".into(),
            machine_id: config.node_name.clone(),
            operating_system: "linux".into(),
            os_image: "etcd-lab".into(),
            system_uuid: config.node_name.clone(),
            ..Default::default()
        }),
        volumes_in_use: Some(volumes_in_use),
        ..Default::default()
    }
}

/// Creates the Node if missing (as a kubelet registers itself) and returns its uid.
pub(crate) async fn register(ctx: &NodeContext) -> Result<String, kube::Error> {
    let api = Api::<Node>::all(ctx.client.clone());
    let name = &ctx.config.node_name;
    let node = match api.get_opt(name).await? {
        Some(n) => {
            let patch = serde_json::json!({ "metadata": {
                "labels": node_labels(&ctx.config),
                "annotations": node_annotations(),
            } });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap_or(n)
        }
        None => {
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(node_labels(&ctx.config)),
                    annotations: Some(node_annotations()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match api.create(&PostParams::default(), &node).await {
                Ok(n) => n,
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(name).await?,
                Err(e) => return Err(e),
            }
        }
    };
    tracing::info!(node = %name, "node registered");
    Ok(node.metadata.uid.unwrap_or_default())
}

async fn renew_lease(ctx: &NodeContext, node_uid: &str) -> Result<(), kube::Error> {
    let api = Api::<Lease>::namespaced(ctx.client.clone(), "kube-node-lease");
    let name = &ctx.config.node_name;
    let now = MicroTime(Timestamp::now());
    match api.get_opt(name).await? {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(name.clone());
            spec.lease_duration_seconds = Some(LEASE_DURATION_SECONDS);
            spec.renew_time = Some(now);
            api.replace(name, &PostParams::default(), &lease).await?;
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some("kube-node-lease".into()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: name.clone(),
                        uid: node_uid.to_owned(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.clone()),
                    lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

async fn update_status(ctx: &NodeContext) -> Result<(), kube::Error> {
    let api = Api::<Node>::all(ctx.client.clone());
    let name = &ctx.config.node_name;
    let current = api.get(name).await?;
    let status = node_status(
        &ctx.config,
        ctx.volumes_in_use(),
        current.status.as_ref(),
        Timestamp::now(),
    );
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Renews the Lease every 10 s and writes the status every 40 s or when
/// the volumes in use change. Re-registers the Node when it was deleted.
pub(crate) async fn heartbeat(ctx: Arc<NodeContext>) {
    let mut node_uid = String::new();
    let mut last_status: Option<Instant> = None;
    loop {
        if node_uid.is_empty() {
            match register(&ctx).await {
                Ok(uid) => node_uid = uid,
                Err(e) => tracing::warn!("node registration failed: {e}"),
            }
        }
        if !node_uid.is_empty() {
            if last_status.is_none_or(|t| t.elapsed() >= STATUS_REPORT) {
                match update_status(&ctx).await {
                    Ok(()) => last_status = Some(Instant::now()),
                    Err(kube::Error::Api(e)) if e.code == 404 => node_uid.clear(),
                    Err(e) => tracing::warn!("node status update failed: {e}"),
                }
            }
            if let Err(e) = renew_lease(&ctx, &node_uid).await {
                tracing::warn!("lease renewal failed: {e}");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(LEASE_RENEW) => {}
            _ = ctx.node_changed.notified() => { last_status = None; }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reports_address_port_and_keeps_transition_times() {
        let config: AgentConfig = serde_json::from_value(serde_json::json!({
            "nodeName": "n1", "nodeIndex": 1, "zone": "z1", "nodeIp": "10.244.1.2",
            "labDir": "/l", "kubeconfig": "/k", "kubeletCert": "/c", "kubeletKey": "/k",
            "caCert": "/ca", "etcdImages": {}, "etcdOperatorBinary": "/o", "etcdLabBinary": "/b"
        }))
        .expect("config");
        let t0 = Timestamp::UNIX_EPOCH;
        let s = node_status(&config, vec!["v".into()], None, t0);
        let addresses = s.addresses.clone().unwrap_or_default();
        assert_eq!(addresses[0].address, "10.244.1.2");
        assert_eq!(
            s.daemon_endpoints
                .as_ref()
                .and_then(|d| d.kubelet_endpoint.as_ref())
                .map(|e| e.port),
            Some(10250)
        );
        let t1 = Timestamp::from_second(60).expect("ts");
        let s2 = node_status(&config, vec![], Some(&s), t1);
        let ready = s2
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .expect("ready");
        assert_eq!(ready.last_transition_time, Some(Time(t0)));
        assert_eq!(ready.last_heartbeat_time, Some(Time(t1)));
        assert_eq!(node_labels(&config)["topology.kubernetes.io/zone"], "z1");
        assert_eq!(
            s.declared_features.as_deref(),
            Some(&["ExtendWebSocketsToKubelet".to_owned()][..])
        );
    }
}
