//! Kubeconfig files for the lab's clients. Certificates are referenced by
//! path, so the files stay small and readable; kubectl and kube-rs read them
//! as they are (JSON is valid YAML).

use std::path::Path;

use serde_json::json;

use crate::error::Result;
use crate::pki::{CertFiles, write_file};

/// The API server as seen from the host (and from node namespaces through the router).
pub const SERVER_LOCAL: &str = "https://127.0.0.1:6443";
/// The API server as seen from the lab network.
pub const SERVER_LAB: &str = "https://10.244.0.1:6443";

/// Writes a kubeconfig for `user` authenticating with a client certificate.
pub fn write(path: &Path, server: &str, ca: &Path, user: &str, client: &CertFiles) -> Result<()> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "etcd-lab",
            "cluster": {
                "server": server,
                "certificate-authority": ca,
            },
        }],
        "users": [{
            "name": user,
            "user": {
                "client-certificate": client.cert,
                "client-key": client.key,
            },
        }],
        "contexts": [{
            "name": "etcd-lab",
            "context": { "cluster": "etcd-lab", "user": user, "namespace": "default" },
        }],
        "current-context": "etcd-lab",
    });
    let text = serde_json::to_string_pretty(&config).map_err(|source| crate::LabError::Json {
        path: path.to_owned(),
        source,
    })?;
    write_file(path, text.as_bytes(), 0o600)
}
