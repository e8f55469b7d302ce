//! Failures as a person reads them: what went wrong, and what to do next.

use std::fmt;

/// What went wrong and the next step; every command fails with one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}\n  next: {next}")]
pub struct Failure {
    /// What went wrong, in one sentence.
    pub problem: String,
    /// What the person can do about it.
    pub next: String,
}

impl Failure {
    pub fn new(problem: impl Into<String>, next: impl Into<String>) -> Self {
        Self {
            problem: problem.into(),
            next: next.into(),
        }
    }
}

/// The object a request was about, for the messages of API errors.
#[derive(Debug, Clone)]
pub struct Subject<'a> {
    /// The resource, as kubectl names it: `etcdcluster`, `etcdbackup`...
    pub resource: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
}

impl fmt::Display for Subject<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} in namespace {}",
            self.resource, self.name, self.namespace
        )
    }
}

/// An API error about `subject`, with the next step for its kind.
pub fn api_failure(error: kube::Error, subject: &Subject<'_>) -> Failure {
    let kube::Error::Api(status) = &error else {
        return Failure::new(
            format!("cannot reach the Kubernetes API server: {error}"),
            "check KUBECONFIG, --kubeconfig and --context: `kubectl get etcdclusters` must work with the same settings",
        );
    };
    let plural = format!("{}s.durable-etcd.io", subject.resource);
    match status.code {
        404 if status.details.is_none()
            && status
                .message
                .contains("could not find the requested resource") =>
        {
            Failure::new(
                format!("the API server does not serve {plural}: {}", status.message),
                "install the operator's CRDs (`etcd-operator crd | kubectl apply -f -`, or deploy/crds/)",
            )
        }
        404 => Failure::new(
            format!("{subject} not found"),
            format!(
                "check the name and the namespace: `kubectl get {}s -n {}` lists them (pass -n/--namespace or --context for another)",
                subject.resource, subject.namespace
            ),
        ),
        401 | 403 => Failure::new(
            format!("not allowed: {}", status.message),
            format!(
                "ask for RBAC on {plural} in namespace {} (`kubectl auth can-i --list -n {}` shows what you may do), or use another --context",
                subject.namespace, subject.namespace
            ),
        ),
        409 if status.reason == "AlreadyExists" => Failure::new(
            format!("{subject} already exists"),
            "choose another name, or delete the existing one first if it is no longer needed",
        ),
        409 => Failure::new(
            format!(
                "{subject} changed while this command ran: {}",
                status.message
            ),
            "run the command again: it reads the object afresh and shows what it will do",
        ),
        400 | 422 => Failure::new(
            format!(
                "the API server refused the change to {subject}: {}",
                status.message
            ),
            "the message names the field and the rule (docs/admission.md lists them); correct the flags and run again",
        ),
        _ => Failure::new(
            format!(
                "the API server answered {} for {subject}: {}",
                status.code, status.message
            ),
            "run again; if it persists, check the API server (`kubectl get --raw /readyz`)",
        ),
    }
}
