//! Leader election through a `coordination.k8s.io/v1` Lease, so that only
//! one operator replica acts on clusters at a time.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Name of the Lease the replicas compete for.
pub const LEASE_NAME: &str = "etcd-operator-leader";

/// Seconds a leader keeps the lease without renewing it: how long standby
/// replicas wait after a leader crashed (one that stops cleanly releases
/// the lease at once). The operator is not in the data path, so this
/// delays only its next step, never a client.
const LEASE_SECONDS: u64 = 30;
/// Seconds before expiry at which the leader renews: every 20 s, one read
/// and one write of the Lease, the operator's only requests while every
/// cluster is idle.
const RENEW_GRACE_SECONDS: u64 = 10;

/// Leader election failed.
#[derive(Debug, thiserror::Error)]
pub enum LeadershipError {
    /// The Lease could not be created or read.
    #[error("leader election on Lease {namespace}/{LEASE_NAME}: {source}")]
    Lease {
        /// Namespace of the Lease.
        namespace: String,
        /// Cause.
        source: LeaseManagerError,
    },
    /// The lease manager stopped.
    #[error("leader election stopped")]
    Stopped,
}

/// A running leader election. Dropping it stops renewing the lease.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Leadership {
    /// Starts competing for the lease in `namespace` as `identity`.
    pub async fn start(
        client: Client,
        namespace: &str,
        identity: &str,
    ) -> Result<Self, LeadershipError> {
        let manager = LeaseManagerBuilder::new(client, LEASE_NAME)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(LEASE_SECONDS)
            .with_grace(RENEW_GRACE_SECONDS)
            .build()
            .await
            .map_err(|source| LeadershipError::Lease {
                namespace: namespace.to_owned(),
                source,
            })?;
        let (state, task) = manager.watch().await;
        Ok(Self { state, task })
    }

    /// Waits until this replica holds the lease.
    pub async fn acquired(&mut self) -> Result<(), LeadershipError> {
        self.state
            .wait_for(|leader| *leader)
            .await
            .map_err(|_| LeadershipError::Stopped)?;
        Ok(())
    }

    /// Completes when this replica no longer holds the lease (or the
    /// election stopped).
    pub async fn lost(&mut self) {
        let _ = self.state.wait_for(|leader| !*leader).await;
    }

    /// Stops renewing and gives the lease up, with a bounded wait.
    pub async fn release(self) {
        drop(self.state);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}
