//! Errors of the etcd layer, each with a category the reconciler acts on.

use std::time::Duration;

/// How the caller should react to an [`EtcdError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCategory {
    /// Worth retrying soon with backoff: a timeout, a leader election, a
    /// request that may or may not have been applied (re-observe first).
    Transient,
    /// No endpoint could be reached. Not a reason to change membership
    /// (durability rule 2): keep observing.
    Unreachable,
    /// etcd understood the request and said no (learner not caught up,
    /// unhealthy cluster, member not found...). Re-plan from a new
    /// observation; retrying the same request immediately will not help.
    Refused,
    /// The request can never succeed as given (bad endpoint URL, no
    /// endpoints). Wait for a spec change instead of hot-looping.
    Invalid,
}

/// An error of the etcd layer. Messages are one line and name the endpoint
/// or member involved.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("no etcd endpoints were given")]
    NoEndpoints,

    #[error("invalid etcd endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },

    #[error("etcd endpoint {endpoint} is unreachable during {operation}: {reason}")]
    Unreachable {
        endpoint: String,
        operation: &'static str,
        reason: String,
    },

    #[error("no etcd endpoint answered {operation} (tried {}): {last_error}", endpoints.join(", "))]
    AllUnreachable {
        operation: &'static str,
        endpoints: Vec<String>,
        last_error: String,
    },

    #[error(
        "{operation} on etcd endpoint {endpoint} timed out after {timeout:?}; it may or may not have been applied"
    )]
    Timeout {
        endpoint: String,
        operation: &'static str,
        timeout: Duration,
    },

    #[error("etcd endpoint {endpoint} has no leader ({operation})")]
    NoLeader {
        endpoint: String,
        operation: &'static str,
    },

    #[error("no reachable member knows a leader; cannot {operation}")]
    LeaderUnknown { operation: &'static str },

    #[error("learner {member_id:x} is not yet in sync with the leader; etcd refuses to promote it")]
    LearnerNotReady { member_id: u64 },

    #[error("member {member_id:x} is not a learner; nothing to promote")]
    NotALearner { member_id: u64 },

    #[error("member {member_id:x} is not a member of the cluster")]
    MemberNotFound { member_id: u64 },

    #[error(
        "etcd refuses to add a learner: the cluster already has the maximum number of learners"
    )]
    TooManyLearners,

    #[error("etcd refuses to add the member: peer URLs {} are already used by a member", peer_urls.join(","))]
    PeerUrlsExist { peer_urls: Vec<String> },

    #[error(
        "etcd refuses {operation}: the change would leave the cluster without a healthy quorum ({message})"
    )]
    UnsafeMembershipChange {
        operation: &'static str,
        message: String,
    },

    #[error("etcd refuses {operation}: target {member_id:x} {reason}")]
    LeadershipTransferRefused {
        operation: &'static str,
        member_id: u64,
        reason: String,
    },

    #[error("etcd refused {operation} at {endpoint}: {message}")]
    Refused {
        endpoint: String,
        operation: &'static str,
        message: String,
    },

    #[error("{operation} failed at etcd endpoint {endpoint}: {message}")]
    Request {
        endpoint: String,
        operation: &'static str,
        message: String,
    },
}

impl EtcdError {
    /// The category of this error: retry, wait, re-plan or give up.
    pub fn category(&self) -> ErrorCategory {
        match self {
            EtcdError::NoEndpoints | EtcdError::InvalidEndpoint { .. } => ErrorCategory::Invalid,
            EtcdError::Unreachable { .. } | EtcdError::AllUnreachable { .. } => {
                ErrorCategory::Unreachable
            }
            EtcdError::Timeout { .. }
            | EtcdError::NoLeader { .. }
            | EtcdError::LeaderUnknown { .. }
            | EtcdError::Request { .. } => ErrorCategory::Transient,
            EtcdError::LearnerNotReady { .. }
            | EtcdError::NotALearner { .. }
            | EtcdError::MemberNotFound { .. }
            | EtcdError::TooManyLearners
            | EtcdError::PeerUrlsExist { .. }
            | EtcdError::UnsafeMembershipChange { .. }
            | EtcdError::LeadershipTransferRefused { .. }
            | EtcdError::Refused { .. } => ErrorCategory::Refused,
        }
    }

    /// A short, stable name of the error kind, for metrics labels and events.
    pub fn reason(&self) -> &'static str {
        match self {
            EtcdError::NoEndpoints => "NoEndpoints",
            EtcdError::InvalidEndpoint { .. } => "InvalidEndpoint",
            EtcdError::Unreachable { .. } => "Unreachable",
            EtcdError::AllUnreachable { .. } => "AllUnreachable",
            EtcdError::Timeout { .. } => "Timeout",
            EtcdError::NoLeader { .. } => "NoLeader",
            EtcdError::LeaderUnknown { .. } => "LeaderUnknown",
            EtcdError::LearnerNotReady { .. } => "LearnerNotReady",
            EtcdError::NotALearner { .. } => "NotALearner",
            EtcdError::MemberNotFound { .. } => "MemberNotFound",
            EtcdError::TooManyLearners => "TooManyLearners",
            EtcdError::PeerUrlsExist { .. } => "PeerUrlsExist",
            EtcdError::UnsafeMembershipChange { .. } => "UnsafeMembershipChange",
            EtcdError::LeadershipTransferRefused { .. } => "LeadershipTransferRefused",
            EtcdError::Refused { .. } => "Refused",
            EtcdError::Request { .. } => "Request",
        }
    }

    /// True when the endpoint could not be reached at all (as opposed to an
    /// answer from etcd). Endpoint selection skips to the next endpoint.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            EtcdError::Unreachable { .. } | EtcdError::AllUnreachable { .. }
        )
    }
}

/// What a request was about, to turn etcd's refusals into precise errors.
#[derive(Debug, Clone)]
pub(crate) enum RequestSubject {
    None,
    Member(u64),
    PeerUrls(Vec<String>),
}

/// Turns an error of the etcd client into an [`EtcdError`], reading etcd's
/// server error messages (stable strings of `etcdserver/api/v3rpc/rpctypes`).
pub(crate) fn classify(
    endpoint: &str,
    operation: &'static str,
    subject: RequestSubject,
    timeout: Duration,
    error: etcd_client::Error,
) -> EtcdError {
    let endpoint = endpoint.to_string();
    let status = match error {
        etcd_client::Error::GRpcStatus(status) => status,
        etcd_client::Error::InvalidUri(e) => {
            return EtcdError::InvalidEndpoint {
                endpoint,
                reason: e.to_string(),
            };
        }
        etcd_client::Error::InvalidArgs(reason) => {
            return EtcdError::InvalidEndpoint { endpoint, reason };
        }
        etcd_client::Error::TransportError(e) => {
            return EtcdError::Unreachable {
                endpoint,
                operation,
                reason: error_chain(&e),
            };
        }
        etcd_client::Error::IoError(e) => {
            return EtcdError::Unreachable {
                endpoint,
                operation,
                reason: e.to_string(),
            };
        }
        other => {
            return EtcdError::Request {
                endpoint,
                operation,
                message: other.to_string(),
            };
        }
    };
    // The channel's own deadline (tonic reports it as a cancelled request).
    if status.code() == tonic::Code::Cancelled && status.message() == "Timeout expired" {
        return EtcdError::Timeout {
            endpoint,
            operation,
            timeout,
        };
    }
    classify_status(
        endpoint,
        operation,
        subject,
        status.code(),
        status.message(),
        &error_chain(&status),
    )
}

fn classify_status(
    endpoint: String,
    operation: &'static str,
    subject: RequestSubject,
    code: tonic::Code,
    message: &str,
    full_message: &str,
) -> EtcdError {
    let member_id = match &subject {
        RequestSubject::Member(id) => *id,
        _ => 0,
    };
    // etcd's refusals, by their server message.
    let refusal = message.trim_start_matches("etcdserver: ");
    match refusal {
        "can only promote a learner member which is in sync with leader" => {
            return EtcdError::LearnerNotReady { member_id };
        }
        "can only promote a learner member" => return EtcdError::NotALearner { member_id },
        "member not found" => return EtcdError::MemberNotFound { member_id },
        "too many learner members in cluster" => return EtcdError::TooManyLearners,
        "Peer URLs already exists" => {
            let peer_urls = match subject {
                RequestSubject::PeerUrls(urls) => urls,
                _ => Vec::new(),
            };
            return EtcdError::PeerUrlsExist { peer_urls };
        }
        "unhealthy cluster" | "re-configuration failed due to not enough started members" => {
            return EtcdError::UnsafeMembershipChange {
                operation,
                message: refusal.to_string(),
            };
        }
        // The target is not a member, or is a learner.
        "bad leader transferee" => {
            return EtcdError::LeadershipTransferRefused {
                operation,
                member_id,
                reason: refusal.to_string(),
            };
        }
        "no leader" => {
            return EtcdError::NoLeader {
                endpoint,
                operation,
            };
        }
        // Sent to a member that stopped being the leader meanwhile.
        "not leader" => {
            return EtcdError::Request {
                endpoint,
                operation,
                message: full_message.to_string(),
            };
        }
        _ => {}
    }
    use tonic::Code;
    match code {
        Code::Unavailable => {
            // The connection itself failed, or etcd is not serving yet.
            if message.contains("etcdserver:") {
                EtcdError::Request {
                    endpoint,
                    operation,
                    message: full_message.to_string(),
                }
            } else {
                EtcdError::Unreachable {
                    endpoint,
                    operation,
                    reason: full_message.to_string(),
                }
            }
        }
        Code::DeadlineExceeded | Code::Aborted | Code::ResourceExhausted | Code::Cancelled => {
            EtcdError::Request {
                endpoint,
                operation,
                message: full_message.to_string(),
            }
        }
        Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::OutOfRange => EtcdError::Refused {
            endpoint,
            operation,
            message: full_message.to_string(),
        },
        _ => EtcdError::Request {
            endpoint,
            operation,
            message: full_message.to_string(),
        },
    }
}

/// The message of an error and of its sources, on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> EtcdError {
        classify_status(
            "http://127.0.0.1:2379".into(),
            "test",
            RequestSubject::Member(0x1234),
            code,
            message,
            message,
        )
    }

    #[test]
    fn learner_not_in_sync_is_a_typed_refusal() {
        let error = status(
            tonic::Code::FailedPrecondition,
            "etcdserver: can only promote a learner member which is in sync with leader",
        );
        assert!(matches!(
            error,
            EtcdError::LearnerNotReady { member_id: 0x1234 }
        ));
        assert_eq!(error.category(), ErrorCategory::Refused);
    }

    #[test]
    fn unhealthy_cluster_is_an_unsafe_membership_change() {
        let error = status(tonic::Code::Unavailable, "etcdserver: unhealthy cluster");
        assert!(matches!(error, EtcdError::UnsafeMembershipChange { .. }));
        assert_eq!(error.category(), ErrorCategory::Refused);
    }

    #[test]
    fn connection_failures_are_unreachable() {
        let error = status(tonic::Code::Unavailable, "tcp connect error");
        assert!(error.is_unreachable());
        assert_eq!(error.category(), ErrorCategory::Unreachable);
    }

    #[test]
    fn etcd_being_busy_is_transient() {
        let error = status(tonic::Code::Unavailable, "etcdserver: leader changed");
        assert_eq!(error.category(), ErrorCategory::Transient);
        let error = status(tonic::Code::Unavailable, "etcdserver: no leader");
        assert!(matches!(error, EtcdError::NoLeader { .. }));
    }
}
