//! The tenant's control plane: a real `kube-apiserver` (the lab's pinned
//! binary) storing its objects in an `EtcdCluster` over mutual TLS, with a
//! client certificate the operator issued for it
//! (`spec.tls.clientCertificates: [{name: apiserver}]`), through the
//! cluster's client Service. As a hosted control plane's API servers often
//! do, it runs outside the Pod network: in the lab's client namespace
//! (`10.244.250.2`, with the lab's DNS), which the cluster's NetworkPolicy
//! lets in by an `ipBlock`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use etcd_lab_node::network::CLIENT_NETNS;
use etcd_lab_node::network::addressing::client_ip;
use k8s_openapi::api::core::v1::Secret;
use test_kit::TestResult;
use test_kit::e2e::Harness;
use test_kit::poll::wait_for;
use test_kit::tls_client::read_secret_material;

/// The name of its client certificate in the cluster's spec.
pub const CLIENT_NAME: &str = "apiserver";
/// Its secure port.
pub const PORT: u16 = 6443;

/// The tenant API server's flags: etcd at `cluster`'s client Service in
/// `namespace`, files (etcd client certificate, service-account keys,
/// its own serving certificate, the token of its one user) under `dir`.
/// That user may do everything (`AlwaysAllow`): the tenant API is reached
/// only inside the lab.
pub fn args(cluster: &str, namespace: &str, dir: &Path) -> Vec<String> {
    let file = |name: &str| dir.join(name).display().to_string();
    vec![
        format!("--etcd-servers=https://{cluster}-client.{namespace}.svc:2379"),
        format!("--etcd-cafile={}", file("etcd-ca.crt")),
        format!("--etcd-certfile={}", file("etcd-client.crt")),
        format!("--etcd-keyfile={}", file("etcd-client.key")),
        format!("--secure-port={PORT}"),
        format!("--bind-address={}", client_ip()),
        format!("--advertise-address={}", client_ip()),
        format!("--cert-dir={}", file("serving")),
        "--service-cluster-ip-range=10.200.0.0/24".into(),
        "--authorization-mode=AlwaysAllow".into(),
        format!("--token-auth-file={}", file("tokens.csv")),
        "--service-account-issuer=https://tenant.invalid".into(),
        format!("--service-account-key-file={}", file("sa.pub")),
        format!("--service-account-signing-key-file={}", file("sa.key")),
        "--profiling=false".into(),
    ]
}

/// The tenant API server's process (killed when dropped).
pub struct TenantApiServer {
    child: tokio::process::Child,
    token: String,
    /// Its log.
    pub log: PathBuf,
}

impl TenantApiServer {
    /// Writes its files under `dir` (the etcd client certificate from the
    /// cluster's Secret; a fresh ECDSA P-256 service-account key and a
    /// fresh token unless `dir` has them from an earlier start, so that
    /// clients keep working across a restart) and starts it in the lab's
    /// client namespace.
    pub async fn start(h: &Harness, cluster: &str, dir: &Path) -> TestResult<Self> {
        std::fs::create_dir_all(dir.join("serving"))?;
        let secret_name = format!("{cluster}-client-{CLIENT_NAME}-tls");
        let secrets: kube::Api<Secret> = kube::Api::namespaced(h.client.clone(), &h.namespace);
        wait_for(
            &format!("Secret {secret_name}"),
            Duration::from_secs(120),
            || async { Ok(secrets.get_opt(&secret_name).await?.is_some()) },
        )
        .await?;
        let material = read_secret_material(&secrets, &secret_name).await?;
        for (value, file) in [
            (&material.ca, "etcd-ca.crt"),
            (&material.cert, "etcd-client.crt"),
            (&material.key, "etcd-client.key"),
        ] {
            std::fs::write(dir.join(file), value)?;
        }
        let tokens = dir.join("tokens.csv");
        if !tokens.exists() {
            let key = rcgen::KeyPair::generate()?;
            let token = hex_of(&rand::random::<[u8; 32]>());
            std::fs::write(dir.join("sa.key"), key.serialize_pem())?;
            std::fs::write(dir.join("sa.pub"), key.public_key_pem())?;
            std::fs::write(
                &tokens,
                format!("{token},tenant-admin,tenant-admin,system:masters\n"),
            )?;
        }
        let token = std::fs::read_to_string(&tokens)?
            .split(',')
            .next()
            .unwrap_or_default()
            .to_owned();

        let binary = etcd_lab::upstream::Binaries::locate()?.kube("kube-apiserver");
        let log = dir.join(format!("kube-apiserver-{cluster}.log"));
        let out = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new("ip")
            .args(["netns", "exec", CLIENT_NETNS])
            .arg(binary)
            .args(args(cluster, &h.namespace, dir))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self { child, token, log })
    }

    /// Its address.
    pub fn url(&self) -> String {
        format!("https://{}:{PORT}", client_ip())
    }

    /// A client of it (its certificate is self-signed: not checked).
    pub fn client(&self) -> TestResult<kube::Client> {
        let mut config = kube::Config::new(self.url().parse()?);
        config.accept_invalid_certs = true;
        config.auth_info.token = Some(secrecy::SecretString::from(self.token.clone()));
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(10));
        config.write_timeout = Some(Duration::from_secs(10));
        Ok(kube::Client::try_from(config)?)
    }

    /// Waits until its `/readyz` answers `ok`.
    pub async fn wait_ready(&mut self, timeout: Duration) -> TestResult {
        let client = self.client()?;
        let started = std::time::Instant::now();
        let mut last = String::new();
        while started.elapsed() < timeout {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!(
                    "the tenant API server exited ({status}); its log: {}",
                    self.log.display()
                )
                .into());
            }
            let request = http::Request::get("/readyz").body(Vec::new())?;
            match client.request_text(request).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(body) => last = body,
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(format!(
            "the tenant API server is not ready after {timeout:?}: {last} (log: {})",
            self.log.display()
        )
        .into())
    }

    /// Stops it.
    pub async fn stop(mut self) {
        self.stop_in_place().await;
    }

    /// Stops it, keeping its files for a start again.
    pub async fn stop_in_place(&mut self) {
        let _ = self.child.kill().await;
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_stores_in_the_cluster_with_its_own_certificate() {
        let args = args("tenant-etcd", "ns", Path::new("/d"));
        assert!(args.contains(&"--etcd-servers=https://tenant-etcd-client.ns.svc:2379".into()));
        assert!(args.contains(&"--etcd-certfile=/d/etcd-client.crt".into()));
        assert!(args.contains(&"--etcd-keyfile=/d/etcd-client.key".into()));
        assert!(args.contains(&format!("--bind-address={}", client_ip())));
    }
}
