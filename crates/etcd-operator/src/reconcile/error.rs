//! Errors of the reconcile pipeline: one enum per step, each error with a
//! [`Category`] (the controllers' shared categories) that decides the retry
//! policy, the metric label and whether an Event is warranted. The status
//! write's [`StatusError`] is the one every controller's writer returns.

pub use crate::controller_kit::{Category, StatusError};
use crate::etcd::{ErrorCategory as EtcdCategory, EtcdError};

/// Category of an etcd layer error.
fn of_etcd(error: &EtcdError) -> Category {
    match error.category() {
        EtcdCategory::Transient => Category::Transient,
        EtcdCategory::Unreachable => Category::Unreachable,
        EtcdCategory::Refused => Category::Refused,
        EtcdCategory::Invalid => Category::InvalidSpec,
    }
}

/// Reading the `EtcdCluster` itself at the start of a pass failed. Nothing
/// is acted on after this, and only this cluster is concerned.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The API server did not answer the read.
    #[error("cannot read EtcdCluster {cluster}: {source}")]
    Get {
        /// Cluster name.
        cluster: String,
        /// Cause.
        source: kube::Error,
    },
    /// The object does not decode into this operator's `EtcdCluster` type
    /// (a newer CRD version, a field of another type).
    #[error("this operator cannot read EtcdCluster {cluster} at {path}: {message}")]
    Unreadable {
        /// Cluster name.
        cluster: String,
        /// JSON path of the field at fault.
        path: String,
        /// What the decoder said.
        message: String,
    },
}

impl ReadError {
    /// Category of this error.
    pub fn category(&self) -> Category {
        match self {
            ReadError::Get { source, .. } => Category::of_kube(source),
            // Waits for a change to the object (or a newer operator).
            ReadError::Unreadable { .. } => Category::InvalidSpec,
        }
    }
}

/// Reading the current state failed. Nothing is acted on after this.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// The cluster object has no namespace (cluster-scoped by mistake).
    #[error("EtcdCluster {0} has no namespace")]
    NoNamespace(String),
    /// Listing a kind of child object failed.
    #[error("cannot list {kind} of cluster {cluster}: {source}")]
    List {
        /// Kind listed.
        kind: &'static str,
        /// Cluster name.
        cluster: String,
        /// Cause.
        source: kube::Error,
    },
    /// Reading a Node or PersistentVolume failed (other than not found,
    /// which is data).
    #[error("cannot read {kind} {name}: {source}")]
    Get {
        /// Kind read.
        kind: &'static str,
        /// Object name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
}

impl ObserveError {
    /// Category of this error.
    pub fn category(&self) -> Category {
        match self {
            ObserveError::NoNamespace(_) => Category::InvalidSpec,
            ObserveError::List { source, .. } | ObserveError::Get { source, .. } => {
                Category::of_kube(source)
            }
        }
    }
}

/// Taking the planned action failed.
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// Server-side apply of a child object failed.
    #[error("cannot apply {kind} {name}: {source}")]
    Apply {
        /// Kind applied.
        kind: &'static str,
        /// Object name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting an object failed.
    #[error("cannot delete {kind} {name}: {source}")]
    Delete {
        /// Kind deleted.
        kind: &'static str,
        /// Object name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
    /// A child object could not be built from the spec.
    #[error("cannot build {kind} {name}: {reason}")]
    Build {
        /// Kind built.
        kind: &'static str,
        /// Object name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A membership call to etcd failed.
    #[error("etcd {operation} failed: {source}")]
    Etcd {
        /// What was asked of etcd.
        operation: &'static str,
        /// Cause.
        source: EtcdError,
    },
    /// A step of a CA rotation failed.
    #[error("CA rotation: {0}")]
    CaRotation(#[from] super::tls_material::TlsMaterialError),
    /// A PersistentVolume to set aside is no longer bound to the member's
    /// claim: nothing was changed on it.
    #[error(
        "PersistentVolume {volume} is not bound to {claim} (bound to {bound_to}); it was left as it is"
    )]
    VolumeNotBound {
        /// The PersistentVolume.
        volume: String,
        /// The claim it was expected to be bound to.
        claim: String,
        /// What its claimRef names.
        bound_to: String,
    },
}

impl ActError {
    /// Category of this error.
    pub fn category(&self) -> Category {
        match self {
            ActError::Apply { source, .. } | ActError::Delete { source, .. } => {
                Category::of_kube(source)
            }
            ActError::Build { .. } => Category::InvalidSpec,
            ActError::VolumeNotBound { .. } => Category::Refused,
            ActError::Etcd { source, .. } => of_etcd(source),
            ActError::CaRotation(error) => error.category(),
        }
    }
}

/// A failed reconcile pass, by step.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the cluster object failed or it cannot be decoded; nothing
    /// was done.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Observing failed; nothing was done.
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// The one planned action failed.
    #[error(transparent)]
    Act(#[from] ActError),
    /// The status write failed.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The certificates of a TLS cluster could not be made current.
    #[error(transparent)]
    Tls(#[from] super::tls_material::TlsMaterialError),
    /// The pass panicked (a bug met on this cluster's objects). Only this
    /// cluster waits, for a change to its object.
    #[error("the reconcile pass panicked: {0}")]
    Panicked(String),
}

impl ReconcileError {
    /// The pipeline step that failed, as a metric label.
    pub fn step(&self) -> &'static str {
        match self {
            ReconcileError::Read(_) => "read",
            ReconcileError::Observe(_) => "observe",
            ReconcileError::Act(_) => "act",
            ReconcileError::Status(_) => "status",
            ReconcileError::Tls(_) => "tls",
            ReconcileError::Panicked(_) => "pass",
        }
    }

    /// Category of the error.
    pub fn category(&self) -> Category {
        match self {
            ReconcileError::Read(e) => e.category(),
            ReconcileError::Observe(e) => e.category(),
            ReconcileError::Act(e) => e.category(),
            ReconcileError::Status(e) => e.category(),
            ReconcileError::Tls(e) => e.category(),
            ReconcileError::Panicked(_) => Category::InvalidSpec,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::controller_kit::category::tests::api_error;
    use std::time::Duration;

    #[test]
    fn reconcile_error_names_its_step() {
        let error = ReconcileError::from(ObserveError::NoNamespace("main".into()));
        assert_eq!(error.step(), "observe");
        assert_eq!(error.category(), Category::InvalidSpec);
        let error = ReconcileError::from(StatusError::Patch {
            object: "main".into(),
            source: api_error(409),
        });
        assert_eq!(error.step(), "status");
        assert_eq!(error.category(), Category::Conflict);
    }

    #[test]
    fn one_unreadable_or_panicking_cluster_waits_for_a_change() {
        let error = ReconcileError::from(ReadError::Unreadable {
            cluster: "main".into(),
            path: "spec.storage.retentionPolicy".into(),
            message: "unknown variant `Archive`".into(),
        });
        assert_eq!(error.step(), "read");
        assert_eq!(error.category(), Category::InvalidSpec);
        assert_eq!(
            error.to_string(),
            "this operator cannot read EtcdCluster main at spec.storage.retentionPolicy: unknown variant `Archive`"
        );
        let error = ReconcileError::Panicked("index out of bounds".into());
        assert_eq!(error.category(), Category::InvalidSpec);
    }

    #[test]
    fn a_stale_status_write_is_a_conflict_retried_soon() {
        let error = ReconcileError::from(StatusError::Stale {
            object: "main".into(),
            resource_version: "41".into(),
        });
        assert_eq!(error.category(), Category::Conflict);
        assert!(error.category().retry_after() <= Duration::from_secs(1));
    }
}
