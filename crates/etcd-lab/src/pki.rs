//! The lab's certificates: one CA signs the API server's serving certificate,
//! every client certificate (admin, controllers, nodes, the API server's
//! kubelet client) and the kubelets' serving certificates. The
//! service-account signing key pair lives beside them.
//!
//! Files are created once and reused by later `up`s, so kubeconfigs handed
//! out stay valid while the state directory lives.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use etcd_lab_common::IoContext;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, date_time_ymd,
};

use crate::error::{LabError, Result};

/// Addresses and names the API server's serving certificate is valid for.
pub const APISERVER_IPS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 0, 1),
    Ipv4Addr::new(10, 244, 0, 1),
    Ipv4Addr::new(10, 96, 0, 1),
];
pub const APISERVER_NAMES: [&str; 5] = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// A certificate and its key on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The lab's PKI directory.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

/// Who a client certificate names.
#[derive(Debug, Clone, Copy)]
pub struct ClientIdentity<'a> {
    pub common_name: &'a str,
    pub organization: Option<&'a str>,
}

impl Pki {
    /// Opens `dir`, creating the CA, API server, service-account and
    /// control-plane client credentials that are missing.
    pub fn ensure(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir.join("nodes"))
            .context(|| format!("create {}", dir.display()))?;
        let pki = Self {
            dir: dir.to_owned(),
        };
        if !pki.ca().cert.is_file() || !pki.ca().key.is_file() {
            pki.create_ca()?;
        }
        let ca = pki.issuer()?;
        pki.ensure_cert(&ca, &pki.apiserver(), "kube-apiserver", |params| {
            params.subject_alt_names = APISERVER_IPS
                .iter()
                .map(|ip| SanType::IpAddress(IpAddr::V4(*ip)))
                .chain(APISERVER_NAMES.iter().filter_map(|n| dns_san(n)))
                .collect();
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        })?;
        if !pki.service_account_key().is_file() || !pki.service_account_pub().is_file() {
            let key = KeyPair::generate().map_err(cert_error("service-account"))?;
            write_file(
                &pki.service_account_key(),
                key.serialize_pem().as_bytes(),
                0o600,
            )?;
            write_file(
                &pki.service_account_pub(),
                key.public_key_pem().as_bytes(),
                0o644,
            )?;
        }
        for (name, identity) in [
            (
                "admin",
                ClientIdentity {
                    common_name: "etcd-lab-admin",
                    organization: Some("system:masters"),
                },
            ),
            (
                "controller-manager",
                ClientIdentity {
                    common_name: "system:kube-controller-manager",
                    organization: None,
                },
            ),
            (
                "scheduler",
                ClientIdentity {
                    common_name: "system:kube-scheduler",
                    organization: None,
                },
            ),
            (
                "apiserver-kubelet-client",
                ClientIdentity {
                    common_name: "kube-apiserver-kubelet-client",
                    organization: Some("system:masters"),
                },
            ),
        ] {
            pki.ensure_client(&ca, &pki.client(name), identity)?;
        }
        Ok(pki)
    }

    /// Creates the credentials of node `node` with InternalIP `ip` if missing:
    /// its client certificate (`system:node:NODE` in `system:nodes`) and its
    /// kubelet serving certificate.
    pub fn ensure_node(&self, node: &str, ip: Ipv4Addr) -> Result<()> {
        let ca = self.issuer()?;
        let common_name = format!("system:node:{node}");
        self.ensure_client(
            &ca,
            &self.node_client(node),
            ClientIdentity {
                common_name: &common_name,
                organization: Some("system:nodes"),
            },
        )?;
        self.ensure_cert(&ca, &self.kubelet_serving(node), &common_name, |params| {
            params.subject_alt_names = [SanType::IpAddress(IpAddr::V4(ip))]
                .into_iter()
                .chain(dns_san(node))
                .collect();
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn ca(&self) -> CertFiles {
        self.pair("ca")
    }
    pub fn apiserver(&self) -> CertFiles {
        self.pair("apiserver")
    }
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    pub fn service_account_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }
    /// A control-plane client: `admin`, `controller-manager`, `scheduler`,
    /// `apiserver-kubelet-client`.
    pub fn client(&self, name: &str) -> CertFiles {
        self.pair(name)
    }
    pub fn node_client(&self, node: &str) -> CertFiles {
        self.pair(&format!("nodes/{node}"))
    }
    pub fn kubelet_serving(&self, node: &str) -> CertFiles {
        self.pair(&format!("nodes/{node}-kubelet"))
    }

    fn pair(&self, name: &str) -> CertFiles {
        CertFiles {
            cert: self.dir.join(format!("{name}.crt")),
            key: self.dir.join(format!("{name}.key")),
        }
    }

    fn create_ca(&self) -> Result<()> {
        let key = KeyPair::generate().map_err(cert_error("ca"))?;
        let cert = ca_params().self_signed(&key).map_err(cert_error("ca"))?;
        let files = self.ca();
        write_file(&files.key, key.serialize_pem().as_bytes(), 0o600)?;
        write_file(&files.cert, cert.pem().as_bytes(), 0o644)
    }

    fn issuer(&self) -> Result<Issuer<'static, KeyPair>> {
        let path = self.ca().key;
        let pem = std::fs::read_to_string(&path).context(|| format!("read {}", path.display()))?;
        let key = KeyPair::from_pem(&pem).map_err(cert_error("ca"))?;
        Ok(Issuer::new(ca_params(), key))
    }

    fn ensure_client(
        &self,
        ca: &Issuer<'_, KeyPair>,
        files: &CertFiles,
        identity: ClientIdentity<'_>,
    ) -> Result<()> {
        self.ensure_cert(ca, files, identity.common_name, |params| {
            if let Some(org) = identity.organization {
                params
                    .distinguished_name
                    .push(DnType::OrganizationName, org);
            }
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        })
    }

    fn ensure_cert(
        &self,
        ca: &Issuer<'_, KeyPair>,
        files: &CertFiles,
        common_name: &str,
        customize: impl FnOnce(&mut CertificateParams),
    ) -> Result<()> {
        if files.cert.is_file() && files.key.is_file() {
            return Ok(());
        }
        let name = files.cert.display().to_string();
        let mut params = leaf_params(common_name);
        customize(&mut params);
        let key = KeyPair::generate().map_err(cert_error(&name))?;
        let cert = params.signed_by(&key, ca).map_err(cert_error(&name))?;
        write_file(&files.key, key.serialize_pem().as_bytes(), 0o600)?;
        write_file(&files.cert, cert.pem().as_bytes(), 0o644)
    }
}

/// The CA's parameters; the issuer is rebuilt from them and the stored key.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "etcd-lab-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = date_time_ymd(2024, 1, 1);
    params.not_after = date_time_ymd(2124, 1, 1);
    params
}

fn leaf_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = date_time_ymd(2024, 1, 1);
    params.not_after = date_time_ymd(2124, 1, 1);
    params
}

fn dns_san(name: &str) -> Option<SanType> {
    name.to_owned().try_into().ok().map(SanType::DnsName)
}

fn cert_error(name: &str) -> impl FnOnce(rcgen::Error) -> LabError + '_ {
    move |source| LabError::Certificate {
        name: name.to_owned(),
        source,
    }
}

/// Writes `bytes` to `path` (atomically, via a temporary file) with `mode`.
pub(crate) fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).context(|| format!("create {}", parent.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .context(|| format!("create {}", tmp.display()))?;
    file.write_all(bytes)
        .context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_everything_once_and_reuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path()).unwrap();
        pki.ensure_node("lab-node-1", Ipv4Addr::new(10, 244, 1, 2))
            .unwrap();
        for files in [
            pki.ca(),
            pki.apiserver(),
            pki.client("admin"),
            pki.client("controller-manager"),
            pki.client("scheduler"),
            pki.client("apiserver-kubelet-client"),
            pki.node_client("lab-node-1"),
            pki.kubelet_serving("lab-node-1"),
        ] {
            assert!(files.cert.is_file(), "{}", files.cert.display());
            assert!(files.key.is_file(), "{}", files.key.display());
        }
        let ca_before = std::fs::read(pki.ca().cert).unwrap();
        let again = Pki::ensure(dir.path()).unwrap();
        assert_eq!(std::fs::read(again.ca().cert).unwrap(), ca_before);
    }
}
