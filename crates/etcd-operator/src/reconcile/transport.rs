//! Which transport stage a cluster runs (see [`crate::transport`]), read
//! before a pass connects to etcd: the stage status recorded, else the
//! stages the member Pods' command lines say, else what the spec asks.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::error::ObserveError;
use super::watched::{Reads, label_selector};
use crate::api::EtcdCluster;
use crate::api::identity::{CLUSTER_LABEL, ORDINAL_LABEL};
use crate::api::transport_choice;
use crate::transport::{self, Intent, Transport};

/// What a pass knows of the transport before it reads the member list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportFacts {
    /// The stage the members run as far as the pass knows.
    pub running: Transport,
    /// What the spec asks, given that.
    pub intent: Intent,
}

impl Default for TransportFacts {
    fn default() -> Self {
        Self {
            running: Transport::Plaintext,
            intent: Intent {
                tls: false,
                refused: None,
            },
        }
    }
}

impl TransportFacts {
    /// The stage every member Pod must run: from the member list's peer
    /// URLs when the pass read it.
    pub fn desired(&self, etcd: &crate::etcd::ObservedEtcd) -> Transport {
        let urls = (!etcd.members.is_empty()).then(|| {
            etcd.members
                .iter()
                .flat_map(|m| m.peer_urls.iter().map(String::as_str))
        });
        transport::desired(&self.intent, self.running, urls)
    }
}

/// The facts of `cluster`: its recorded stage, or its member Pods' (one
/// list of Pods, only when status records none).
pub async fn facts(
    reads: Reads<'_>,
    cluster: &EtcdCluster,
) -> Result<TransportFacts, ObserveError> {
    let status = cluster.status.as_ref();
    let recorded = status.and_then(|s| s.transport);
    let pods = match recorded {
        Some(_) => Vec::new(),
        None => member_pod_stages(reads, cluster).await?,
    };
    let running = transport_choice::running(
        recorded,
        pods,
        cluster.spec.tls.as_ref(),
        transport_choice::bootstrapped(status),
    );
    Ok(TransportFacts {
        running,
        intent: transport_choice::intent(cluster.spec.tls.as_ref(), running),
    })
}

async fn member_pod_stages(
    reads: Reads<'_>,
    cluster: &EtcdCluster,
) -> Result<Vec<Transport>, ObserveError> {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let pods = reads
        .list::<Pod>(Some(&namespace), &label_selector(CLUSTER_LABEL, &name))
        .await
        .map_err(|source| ObserveError::List {
            kind: "pods",
            cluster: name.clone(),
            source,
        })?;
    Ok(pods
        .iter()
        .filter(|p| p.labels().contains_key(ORDINAL_LABEL))
        .filter_map(pod_stage)
        .collect())
}

/// The stage a member Pod runs, from its etcd container's command line.
pub fn pod_stage(pod: &Pod) -> Option<Transport> {
    let container = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "etcd")?;
    let args = container.args.iter().flatten().map(String::as_str);
    transport::of_etcd_args(args)
}
