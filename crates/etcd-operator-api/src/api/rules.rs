//! CEL validation rules shared by the kinds: names, durations, quantities,
//! object-store names. Each rule carries a message a person can act on; the
//! API server prints it after the field's path when it refuses a spec.
//!
//! Regular expressions are RE2 (CEL's `matches`); they are written without
//! backslashes (`[.]` rather than `\.`) so that the same text reads the same
//! in Rust, in CEL string literals and in the generated YAML.

use kube::core::{Message, Rule};

/// The longest `metadata.name` of an `EtcdCluster`, and so the longest
/// `clusterName` a backup may name.
///
/// Every object the operator derives from the name must be valid (see
/// `addressing`):
///
/// | derived name | limit | room left for the cluster name |
/// | --- | --- | --- |
/// | client Service `<name>-client` | DNS-1035 label, 63 | **56** |
/// | peer Service `<name>-peer` (also the Pods' `subdomain`) | DNS-1035 label, 63 | 58 |
/// | member Pod hostname `<name>-<ordinal>` (ordinal 0 to 8) | DNS-1123 label, 63 | 61 |
/// | PVC `data-<name>-<ordinal>` | DNS-1123 subdomain, 253 (63 kept) | 56 |
/// | label `durable-etcd.io/cluster: <name>` | label value, 63 | 63 |
/// | PodDisruptionBudget `<name>` | DNS-1123 subdomain, 253 | 253 |
/// | restore Pod `<name>-restore` | DNS-1123 subdomain, 253 | 245 |
///
/// The client Service decides: 56. Because Service names are DNS-1035
/// labels, the name must also start with a letter and hold no dots.
pub const MAX_CLUSTER_NAME: usize = 56;

/// A DNS-1035 label (a Service name): lower-case letters, digits, `-`,
/// starting with a letter and ending with a letter or digit.
pub const DNS1035_LABEL: &str = "^[a-z]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 label (a namespace): as a DNS-1035 label, but it may start
/// with a digit.
pub const DNS1123_LABEL: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A DNS-1123 subdomain (most object names: Secrets, StorageClasses,
/// PriorityClasses): dot-separated DNS-1123 labels, at most 253 characters.
pub const DNS1123_SUBDOMAIN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A Go duration without a sign (`300s`, `1h30m`, `1.5m`, `0`).
pub const GO_DURATION: &str = "^(0|([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+)$";
/// A label key or annotation key: an optional DNS-1123 subdomain prefix and
/// `/`, then a name of 1 to 63 letters, digits, `-`, `_`, `.` that starts
/// and ends with a letter or digit.
pub const QUALIFIED_NAME: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label value: empty, or 1 to 63 letters, digits, `-`, `_`, `.` that
/// starts and ends with a letter or digit.
pub const LABEL_VALUE: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";

/// A rule with its message.
pub fn rule(expression: impl Into<String>, message: impl Into<String>) -> Rule {
    Rule::new(expression).message(Message::Message(message.into()))
}

/// An object-store destination that names its own `endpoint` names its
/// `credentialsSecret` too: the operator never sends its own credentials
/// (its environment, workload identity, a metadata server) to an endpoint
/// a spec names, where whoever runs it could keep them.
pub fn endpoint_needs_credentials(kind: &str) -> Rule {
    rule(
        "!has(self.endpoint) || has(self.credentialsSecret)",
        format!(
            "{kind}.endpoint needs {kind}.credentialsSecret: the operator never sends its own credentials (its environment, workload identity, a metadata server) to an endpoint a spec names"
        ),
    )
}

/// `metadata.name` of an `EtcdCluster`, or a `clusterName` naming one
/// (`expression` is the CEL path of the string): at most
/// [`MAX_CLUSTER_NAME`] characters.
pub fn cluster_name_length(expression: &str, what: &str) -> Rule {
    rule(
        format!("{expression}.size() <= {MAX_CLUSTER_NAME}"),
        format!(
            "{what} must be at most {MAX_CLUSTER_NAME} characters: the operator names the cluster's client Service <name>-client, which must fit in 63"
        ),
    )
}

/// `metadata.name` of an `EtcdCluster`, or a `clusterName` naming one: a
/// DNS-1035 label.
pub fn cluster_name_shape(expression: &str, what: &str) -> Rule {
    rule(
        format!("{expression}.matches('{DNS1035_LABEL}')"),
        format!(
            "{what} must start with a lower-case letter and hold only lower-case letters, digits and '-' (no dots, no '-' at the end): it names the Services <name>-client and <name>-peer"
        ),
    )
}

/// A string field holding a DNS-1123 subdomain (the name of a Secret,
/// StorageClass, PriorityClass).
pub fn subdomain(what: &str) -> Rule {
    rule(
        format!("self.size() <= 253 && self.matches('{DNS1123_SUBDOMAIN}')"),
        format!(
            "{what} must be an object name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters"
        ),
    )
}

/// A string field holding a Go duration of at least `min` (a CEL duration
/// literal such as `0s` or `1s`); `strict` makes the bound exclusive.
/// The shape is checked before `duration()` so that text such as `lots`
/// gets this message rather than an evaluation error.
pub fn go_duration(what: &str, min: &str, strict: bool, example: &str) -> Rule {
    let (op, kind) = match (min, strict) {
        ("0s", true) => (">", "a positive Go duration".to_string()),
        ("0s", false) => (">=", "a non-negative Go duration".to_string()),
        (_, true) => (">", format!("a Go duration longer than {min}")),
        (_, false) => (">=", format!("a Go duration of at least {min}")),
    };
    rule(
        format!("self.matches('{GO_DURATION}') && duration(self) {op} duration('{min}')"),
        format!("{what} must be {kind} such as {example} (units ns, us, ms, s, m, h; no sign)"),
    )
}

/// A string field holding an `http://` or `https://` URL with a host and
/// neither query nor fragment (an object store's endpoint).
pub fn endpoint_url(what: &str, example: &str) -> Rule {
    rule(
        "isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != '' && url(self).getQuery().size() == 0 && !self.contains('#')",
        format!(
            "{what} must be an http:// or https:// URL with a host and no query, such as {example}"
        ),
    )
}

/// A string field holding a key prefix inside a bucket or container.
pub fn object_prefix(what: &str) -> Rule {
    rule(
        "!self.split('/').exists(s, s == '.' || s == '..')",
        format!("{what} must not hold '.' or '..' segments"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addressing::restore_pod_name;
    use crate::addressing::{
        client_service_name, member_name, pdb_name, peer_service_name, pvc_name,
    };

    /// The longest name accepted gives derived names that are all valid;
    /// one more character makes the client Service name too long.
    #[test]
    fn the_longest_cluster_name_fits_every_derived_name() {
        let name = format!("a{}", "b".repeat(MAX_CLUSTER_NAME - 1));
        assert_eq!(client_service_name(&name).len(), 63);
        assert!(peer_service_name(&name).len() <= 63);
        assert!(member_name(&name, 8).len() <= 63);
        assert!(pvc_name(&name, 8).len() <= 63);
        assert!(pdb_name(&name).len() <= 63);
        assert!(restore_pod_name(&name).len() <= 253);
        let longer = format!("{name}c");
        assert_eq!(client_service_name(&longer).len(), 64);
    }

    #[test]
    fn expressions_need_no_escaping() {
        for pattern in [
            DNS1035_LABEL,
            DNS1123_LABEL,
            DNS1123_SUBDOMAIN,
            GO_DURATION,
            QUALIFIED_NAME,
            LABEL_VALUE,
        ] {
            assert!(
                !pattern.contains('\\') && !pattern.contains('\''),
                "{pattern}"
            );
        }
    }
}
