//! The certificates of a TLS cluster, made to exist before each pass
//! observes it: the CA (generated once), and the server, peer, user-client
//! and operator certificates, each issued when missing and issued again in
//! place when [`crate::tls::renewal_of`] says so (past two-thirds of its
//! life, expired, missing a name, or not signed by the CA). etcd reads its
//! certificate files at every handshake and the kubelet refreshes mounted
//! Secrets, so a renewed leaf is picked up without a restart. A new value
//! of the cluster's annotation [`RENEW_CERTIFICATES_ANNOTATION`] renews
//! every leaf at once; the CA Secret records the value done. Returns what
//! the operator connects with and what the status reports.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::addressing::{MemberAddressing, ca_secret_name};
use crate::api::{
    CertificateStatus, EtcdCluster, RENEW_CERTIFICATES_ANNOTATION, RENEWED_FOR_ANNOTATION,
    TlsStatus,
};
use crate::controller_kit::Category;
use crate::etcd::ClientTls;
use crate::resources::tls::{
    CA_KEY, CA_PRIVATE_KEY, CERT_KEY, KEY_KEY, TlsRole, ca_secret, certificate_names, leaf_secret,
    leaf_secret_name, server_name,
};
use crate::tls::{
    CertificateAuthority, LeafRequest, RenewalDecision, RenewalPolicy, TlsError, read_certificate,
    renewal_of,
};

/// The certificates could not be read, issued or stored.
#[derive(Debug, thiserror::Error)]
pub enum TlsMaterialError {
    /// A Secret could not be read or written.
    #[error("{what} Secret {name}: {source}")]
    Secret {
        /// What was done.
        what: &'static str,
        /// The Secret.
        name: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// A Secret the operator's connections need does not exist yet.
    #[error("{0}")]
    Missing(String),
    /// The CA in its Secret is unusable, or a certificate could not be
    /// issued. A person must look: the CA is never replaced by itself (every
    /// client that trusts it would be cut off).
    #[error("certificate {what}: {source}")]
    Certificate {
        /// Which certificate.
        what: String,
        /// Why.
        #[source]
        source: TlsError,
    },
}

impl TlsMaterialError {
    /// Category of the error.
    pub fn category(&self) -> Category {
        match self {
            Self::Secret { source, .. } => Category::of_kube(source),
            Self::Missing(_) => Category::Transient,
            Self::Certificate { .. } => Category::InvalidSpec,
        }
    }
}

/// What a TLS cluster's pass connects with and reports.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    /// The operator's client TLS.
    pub client: Arc<ClientTls>,
    /// The certificates, for `status.tls`.
    pub status: TlsStatus,
}

/// Makes the certificates of `cluster` exist and current; returns the
/// operator's client TLS and the certificates' status, or `None` for a
/// plaintext cluster.
pub async fn ensure(
    client: &Client,
    cluster: &EtcdCluster,
    cluster_domain: &str,
) -> Result<Option<TlsMaterial>, TlsMaterialError> {
    if !cluster.spec.tls_enabled() {
        return Ok(None);
    }
    let addressing = tls_addressing(cluster, cluster_domain);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &addressing.namespace);
    let (ca, renewed_for) = ensure_ca(&secrets, cluster).await?;
    let requested = cluster
        .annotations()
        .get(RENEW_CERTIFICATES_ANNOTATION)
        .filter(|value| !value.is_empty());
    let renew_all = requested.is_some_and(|value| Some(value) != renewed_for.as_ref());
    let mut operator = None;
    let mut certificates = Vec::new();
    for role in TlsRole::ALL {
        let (cert_pem, key_pem) =
            ensure_leaf(&secrets, cluster, &addressing, &ca, role, renew_all).await?;
        if let Ok(facts) = read_certificate(&cert_pem) {
            certificates.push(CertificateStatus {
                secret: leaf_secret_name(&addressing.cluster, role),
                serial: facts.serial,
                not_before: time(facts.not_before),
                not_after: time(facts.not_after),
            });
        }
        if role == TlsRole::Operator {
            operator = Some((cert_pem, key_pem));
        }
    }
    let renewed_for = match (renew_all, requested) {
        (true, Some(value)) => {
            record_renewal(&secrets, &ca_secret_name(&addressing.cluster), value).await?;
            Some(value.clone())
        }
        _ => renewed_for,
    };
    let status = TlsStatus {
        issuer: "BuiltIn".to_string(),
        ca_not_after: read_certificate(ca.cert_pem())
            .ok()
            .map(|facts| time(facts.not_after)),
        certificates,
        renewed_for,
    };
    let (cert_pem, key_pem) = operator.unwrap_or_default();
    let client = operator_tls(&addressing, ca.cert_pem().to_string(), cert_pem, key_pem);
    Ok(Some(TlsMaterial { client, status }))
}

/// A certificate time as a status time.
fn time(at: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(at.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Records on the CA Secret that the renewal asked for by `value` is done.
async fn record_renewal(
    secrets: &Api<Secret>,
    name: &str,
    value: &str,
) -> Result<(), TlsMaterialError> {
    let patch = serde_json::json!({
        "metadata": { "annotations": { RENEWED_FOR_ANNOTATION: value } }
    });
    secrets
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| TlsMaterialError::Secret {
            what: "annotate",
            name: name.to_string(),
            source,
        })?;
    tracing::info!(secret = %name, request = %value, "every certificate renewed as asked");
    Ok(())
}

/// The addressing of a TLS cluster's members.
fn tls_addressing(cluster: &EtcdCluster, cluster_domain: &str) -> MemberAddressing {
    MemberAddressing {
        cluster_domain: cluster_domain.to_string(),
        tls: true,
        ..MemberAddressing::new(cluster.name_any(), cluster.namespace().unwrap_or_default())
    }
}

/// The operator's client TLS: its certificate, the CA bundle, and the name
/// member certificates are checked against.
fn operator_tls(
    addressing: &MemberAddressing,
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
) -> Arc<ClientTls> {
    Arc::new(ClientTls {
        ca_pem,
        cert_pem,
        key_pem,
        server_name: server_name(addressing),
    })
}

/// The cluster's CA, generated when missing, and the renewal request its
/// Secret records as done.
async fn ensure_ca(
    secrets: &Api<Secret>,
    cluster: &EtcdCluster,
) -> Result<(CertificateAuthority, Option<String>), TlsMaterialError> {
    let name = ca_secret_name(&cluster.name_any());
    let certificate = |source| TlsMaterialError::Certificate {
        what: format!("authority in Secret {name}"),
        source,
    };
    if let Some(secret) = read(secrets, &name).await? {
        let cert = text(&secret, CA_KEY);
        let key = text(&secret, CA_PRIVATE_KEY);
        let renewed_for = secret.annotations().get(RENEWED_FOR_ANNOTATION).cloned();
        return Ok((
            CertificateAuthority::from_pem(&cert, &key).map_err(certificate)?,
            renewed_for,
        ));
    }
    let ca = CertificateAuthority::generate(
        &format!("{} etcd CA", cluster.name_any()),
        RenewalPolicy::CA.lifetime,
        Utc::now(),
    )
    .map_err(certificate)?;
    let secret = ca_secret(cluster, ca.cert_pem(), ca.key_pem());
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok((ca, None)),
        // Another pass created it first: use that one.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let secret = read(secrets, &name).await?.unwrap_or_default();
            let renewed_for = secret.annotations().get(RENEWED_FOR_ANNOTATION).cloned();
            let ca = CertificateAuthority::from_pem(
                &text(&secret, CA_KEY),
                &text(&secret, CA_PRIVATE_KEY),
            )
            .map_err(certificate)?;
            Ok((ca, renewed_for))
        }
        Err(source) => Err(TlsMaterialError::Secret {
            what: "create",
            name,
            source,
        }),
    }
}

/// The certificate and key of `role`, issued when missing, due, or
/// `renew` (a renewal asked for).
async fn ensure_leaf(
    secrets: &Api<Secret>,
    cluster: &EtcdCluster,
    addressing: &MemberAddressing,
    ca: &CertificateAuthority,
    role: TlsRole,
    renew: bool,
) -> Result<(String, String), TlsMaterialError> {
    let name = leaf_secret_name(&cluster.name_any(), role);
    let names = certificate_names(addressing, role);
    let now = Utc::now();
    let existing = read(secrets, &name).await?;
    if let Some(secret) = &existing {
        let cert = text(secret, CERT_KEY);
        let trusted = text(secret, CA_KEY) == ca.cert_pem();
        let decision = renewal_of(
            &cert,
            ca.cert_pem(),
            &RenewalPolicy::LEAF,
            &names.dns_names,
            &names.ip_addresses,
            now,
        );
        match decision {
            RenewalDecision::Keep { .. } if renew => {
                tracing::info!(secret = %name, "renewing: asked for by annotation {RENEW_CERTIFICATES_ANNOTATION}");
            }
            RenewalDecision::Keep { .. } if trusted => return Ok((cert, text(secret, KEY_KEY))),
            RenewalDecision::Keep { .. } => {
                tracing::info!(secret = %name, "renewing: its CA bundle is not the current CA");
            }
            RenewalDecision::Renew { reason } => {
                tracing::info!(secret = %name, %reason, "renewing certificate");
            }
        }
    }
    let issued = ca
        .issue(
            &LeafRequest {
                common_name: names.common_name,
                dns_names: names.dns_names,
                ip_addresses: names.ip_addresses,
                usage: role.usage(),
                lifetime: RenewalPolicy::LEAF.lifetime,
            },
            now,
        )
        .map_err(|source| TlsMaterialError::Certificate {
            what: format!("{} in Secret {name}", role.as_str()),
            source,
        })?;
    let mut secret = leaf_secret(
        cluster,
        role,
        &issued.cert_pem,
        &issued.key_pem,
        ca.cert_pem(),
    );
    let written = match existing {
        None => secrets.create(&PostParams::default(), &secret).await,
        Some(old) => {
            secret.metadata.resource_version = old.metadata.resource_version;
            secrets
                .replace(&name, &PostParams::default(), &secret)
                .await
        }
    };
    written.map_err(|source| TlsMaterialError::Secret {
        what: "write",
        name,
        source,
    })?;
    Ok((issued.cert_pem, issued.key_pem))
}

async fn read(secrets: &Api<Secret>, name: &str) -> Result<Option<Secret>, TlsMaterialError> {
    secrets
        .get_opt(name)
        .await
        .map_err(|source| TlsMaterialError::Secret {
            what: "read",
            name: name.to_string(),
            source,
        })
}

fn text(secret: &Secret, key: &str) -> String {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|value| String::from_utf8_lossy(&value.0).into_owned())
        .unwrap_or_default()
}

/// The operator's client TLS for `cluster`, read from the Secrets the
/// cluster's reconciler keeps (for the backup controllers, which never
/// write them): `None` for a plaintext cluster; an error while they do
/// not exist yet.
pub async fn read_operator_tls(
    client: &Client,
    cluster: &EtcdCluster,
    cluster_domain: &str,
) -> Result<Option<Arc<ClientTls>>, TlsMaterialError> {
    if !cluster.spec.tls_enabled() {
        return Ok(None);
    }
    let addressing = tls_addressing(cluster, cluster_domain);
    let namespace = &addressing.namespace;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret_name = leaf_secret_name(&addressing.cluster, TlsRole::Operator);
    let secret = read(&secrets, &secret_name).await?.ok_or_else(|| {
        TlsMaterialError::Missing(format!(
            "Secret {namespace}/{secret_name} does not exist yet (the cluster's reconciler creates it)"
        ))
    })?;
    Ok(Some(operator_tls(
        &addressing,
        text(&secret, CA_KEY),
        text(&secret, CERT_KEY),
        text(&secret, KEY_KEY),
    )))
}
