//! The backup store of a `persistentVolumeClaim` destination: what the
//! `backup-store` program, the objects the operator creates for it and the
//! clients of it (the operator's backups, retention and restore Pods) agree
//! on.
//!
//! A PersistentVolumeClaim cannot be mounted by the operator's own Pod (its
//! volumes are fixed when it is deployed) and is usually `ReadWriteOnce`,
//! so one Pod mounts it — the store, a Deployment of one replica running
//! `etcd-operator backup-store` from the operator's image — and everything
//! else reaches the files through it. It speaks the subset of the S3
//! protocol the operator's object-store client uses (path-style, one
//! bucket, [`STORE_BUCKET`]), so a volume is written, pruned and read
//! exactly like a bucket. Every object is a plain file on the volume at
//! its key's path: `kubectl cp` or any Pod mounting the claim can read a
//! backup without the store.
//!
//! Every request but [`HEALTH_PATH`] carries the token of the claim's
//! Secret ([`store_secret_name`], key [`TOKEN_KEY`]) in [`TOKEN_HEADER`];
//! the Secret also holds the in-cluster URL of the store ([`ENDPOINT_KEY`]),
//! so a restore Pod that mounts it has all it needs.

/// The store's port: beside etcd's (2379–2381) and the volume-usage
/// sidecar's (2383).
pub const STORE_PORT: u16 = 2384;

/// The one bucket the store serves; every key is a path on the volume.
pub const STORE_BUCKET: &str = "volume";

/// The request header that carries the token.
pub const TOKEN_HEADER: &str = "x-backup-store-token";

/// Answers `200 ok` without a token, for the readiness probe.
pub const HEALTH_PATH: &str = "/healthz";

/// Key of the token in the store's Secret.
pub const TOKEN_KEY: &str = "token";

/// Key of the store's in-cluster URL in its Secret.
pub const ENDPOINT_KEY: &str = "endpoint";

/// Where the store Pod mounts the claim.
pub const STORE_MOUNT_PATH: &str = "/backups";

/// Environment variable of the token in the store's container.
pub const TOKEN_ENV: &str = "BACKUP_STORE_TOKEN";

/// Name of the Deployment, Service and Secret of the store of `claim`.
pub fn store_name(claim: &str) -> String {
    // A Service name is a DNS label (63 characters at most); a claim name
    // may be a longer subdomain, so a long one is cut and told apart by a
    // digest of the whole name.
    const PREFIX: &str = "backup-store-";
    let name = format!("{PREFIX}{claim}");
    if name.len() <= 63 && !claim.contains('.') {
        return name;
    }
    let digest = short_digest(claim);
    let room = 63 - PREFIX.len() - 1 - digest.len();
    let cut: String = claim
        .chars()
        .take(room)
        .map(|c| if c == '.' { '-' } else { c })
        .collect();
    format!("{PREFIX}{}-{digest}", cut.trim_end_matches('-'))
}

/// The Secret holding the store's token and URL.
pub fn store_secret_name(claim: &str) -> String {
    store_name(claim)
}

/// The URL of the store of `claim` inside the Kubernetes cluster.
pub fn store_service_url(claim: &str, namespace: &str, cluster_domain: &str) -> String {
    format!(
        "http://{}.{namespace}.svc.{cluster_domain}:{STORE_PORT}",
        store_name(claim)
    )
}

fn short_digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(text.as_bytes());
    hex::encode(&digest[..4])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels_told_apart_by_the_whole_claim_name() {
        assert_eq!(store_name("backups"), "backup-store-backups");
        let long = "a".repeat(70);
        let other = format!("{}b", "a".repeat(69));
        let (a, b) = (store_name(&long), store_name(&other));
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        let dotted = store_name("team.backups");
        assert!(!dotted.contains('.') && dotted.len() <= 63, "{dotted}");
    }

    #[test]
    fn the_url_of_the_service() {
        assert_eq!(
            store_service_url("b", "ns", "cluster.local"),
            "http://backup-store-b.ns.svc.cluster.local:2384"
        );
    }
}
