//! The certificates of a TLS cluster, made to exist before each pass
//! observes it: the CA (generated once), and the server, peer, user-client
//! and operator certificates, each issued when missing and issued again in
//! place when [`crate::tls::renewal_of`] says so (past two-thirds of its
//! life, expired, missing a name, or not signed by the CA). etcd reads its
//! certificate files at every handshake and the kubelet refreshes mounted
//! Secrets, so a renewed leaf is picked up without a restart. A new value
//! of the cluster's annotation [`RENEW_CERTIFICATES_ANNOTATION`] renews
//! every leaf at once; the CA Secret records the value done. The CA
//! Secret also holds the CAs of a rotation in progress ([`CaSet`]): leaves
//! come from its signer and carry its trust bundle; each rotation step
//! ([`advance_ca_rotation`]) is an action the planner takes once every
//! member runs the last one. Returns what the operator connects with and
//! what the planner and status need.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};

use super::delete::delete_unless_gone;
use super::missing_ca::{CaHistory, MissingCa, signs_of_an_earlier_ca};
use crate::addressing::{MemberAddressing, ca_secret_name, is_reserved_common_name};
use crate::api::identity::CLUSTER_LABEL;
use crate::api::{
    CA_ROTATED_FOR_ANNOTATION, CA_ROTATION_ASKED_FOR_ANNOTATION, CA_ROTATION_FOR_ANNOTATION,
    CaRotationStatus, CertificateStatus, EtcdCluster, NAMED_CLIENT_CERTIFICATES_ANNOTATION,
    RENEW_CERTIFICATES_ANNOTATION, RENEWED_FOR_ANNOTATION, ROTATE_CA_ANNOTATION, TlsStatus,
};
use crate::controller_kit::Category;
use crate::etcd::ClientTls;
use crate::planner::TlsObservation;
use crate::resources::tls::{
    CA_KEY, CA_PRIVATE_KEY, CERT_KEY, INCOMING_CA_KEY, INCOMING_CA_PRIVATE_KEY, KEY_KEY,
    RETIRING_CA_KEY, TlsRole, ca_secret, certificate_names, leaf_secret, leaf_secret_name,
    server_name,
};
use crate::tls::{
    AUTOMATIC_REQUEST_PREFIX, CaRotationStep, CaSet, CertificateAuthority, LeafRequest,
    RenewalDecision, RenewalPolicy, RotationError, TlsError, automatic_request, read_certificate,
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
    /// A cert-manager `Certificate` could not be applied, listed or
    /// deleted (404 on apply: cert-manager's CRDs are not installed).
    #[error("{what} cert-manager Certificate {name}: {source}")]
    CertManager {
        /// What was done.
        what: &'static str,
        /// The Certificate (or the selector listed).
        name: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// A Secret the operator's connections need does not exist yet.
    #[error("{0}")]
    Missing(String),
    /// The CA Secret is missing from a cluster that has a CA: no new CA is
    /// generated and no certificate is written; a person must restore it
    /// (see [`MissingCa`]'s message).
    #[error("{0}")]
    CaSecretMissing(Box<MissingCa>),
    /// An object under a name the cluster's certificates need exists but
    /// belongs to something else (another cluster, an application): it is
    /// never overwritten, adopted or used (rule 14).
    #[error(
        "{kind} {name} exists but does not belong to this cluster (no controller reference to it); the operator will not overwrite or use it: rename or delete it, or rename the client certificate that needs this name"
    )]
    NameTaken {
        /// Its kind.
        kind: &'static str,
        /// Its name.
        name: String,
    },
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
            Self::Secret { source, .. } | Self::CertManager { source, .. } => {
                Category::of_kube(source)
            }
            Self::Missing(_) => Category::Transient,
            // Looked at again soon: a restored Secret is no change to the
            // cluster object (Secrets are not watched).
            Self::CaSecretMissing(_) | Self::NameTaken { .. } => Category::Refused,
            Self::Certificate { .. } => Category::InvalidSpec,
        }
    }

    /// The reason of the `Degraded` condition and the Warning Event that
    /// report this error on the cluster.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::CaSecretMissing(_) => CA_SECRET_MISSING_REASON,
            Self::NameTaken { .. } => NAME_TAKEN_REASON,
            _ => CERTIFICATES_FAILED_REASON,
        }
    }
}

/// The reason of `Degraded` while the certificates of a TLS cluster cannot
/// be issued or stored (the pass stops before it observes: nothing is
/// created without them).
pub const CERTIFICATES_FAILED_REASON: &str = "CertificatesFailed";

/// The reason of `Degraded` while the CA Secret of a cluster that has a CA
/// is missing ([`MissingCa`]).
pub const CA_SECRET_MISSING_REASON: &str = "CaSecretMissing";

/// The reason of `Degraded` while a name the certificates need is taken by
/// an object the cluster does not own.
pub const NAME_TAKEN_REASON: &str = "NameTaken";

/// Whether `cluster` owns `object`: the object names the cluster (its UID)
/// as its controller. An object under one of the cluster's names without
/// that reference is someone else's (rule 14).
pub(super) fn owned_by(object: &impl kube::Resource, cluster: &EtcdCluster) -> bool {
    cluster
        .metadata
        .uid
        .as_deref()
        .is_some_and(|uid| crate::controller_kit::ownership::controlled_by(object, uid))
}

/// `Err(NameTaken)` when `object` exists under a name of `cluster` but is
/// not the cluster's.
pub(super) fn refuse_unowned<K: kube::Resource>(
    object: Option<&K>,
    cluster: &EtcdCluster,
    kind: &'static str,
    name: &str,
) -> Result<(), TlsMaterialError> {
    match object {
        Some(o) if !owned_by(o, cluster) => Err(TlsMaterialError::NameTaken {
            kind,
            name: name.to_string(),
        }),
        _ => Ok(()),
    }
}

/// What a TLS cluster's pass connects with and knows.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    /// The operator's client TLS.
    pub client: Arc<ClientTls>,
    /// The certificates and the CA rotation, for the planner and status.
    pub observation: TlsObservation,
}

/// Makes the certificates of `cluster` from the built-in issuer exist and
/// current (those of cert-manager: `cert_manager::ensure`); returns the
/// operator's client TLS and what the planner and status need, or `None`
/// unless the members are to serve TLS (`tls`).
pub async fn ensure(
    client: &Client,
    cluster: &EtcdCluster,
    cluster_domain: &str,
    tls: bool,
) -> Result<Option<TlsMaterial>, TlsMaterialError> {
    if !tls {
        return Ok(None);
    }
    let addressing = tls_addressing(cluster, cluster_domain);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &addressing.namespace);
    let ca_secret = ca_secret_name(&addressing.cluster);
    let (cas, records) = ensure_ca(&secrets, cluster).await?;
    let certificate = |source| TlsMaterialError::Certificate {
        what: format!("authorities in Secret {ca_secret}"),
        source,
    };
    let bundle = cas.trust_bundle().map_err(certificate)?;
    let revision = cas.revision().map_err(certificate)?;
    let requested = |annotation: &str| {
        cluster
            .annotations()
            .get(annotation)
            .filter(|value| !value.is_empty())
            .cloned()
    };
    let renew_request = requested(RENEW_CERTIFICATES_ANNOTATION);
    let renew_all = renew_request.is_some() && renew_request != records.renewed_for;
    let named = named_client_certificates(cluster);
    let mut operator = None;
    let mut certificates = Vec::new();
    for role in TlsRole::every(named.iter().cloned()) {
        let leaf = LeafContext {
            secrets: &secrets,
            cluster,
            addressing: &addressing,
            signer: &cas.signer,
            bundle: &bundle,
        };
        let (cert_pem, key_pem) = ensure_leaf(&leaf, &role, renew_all).await?;
        if let Some(status) =
            certificate_status(&leaf_secret_name(&addressing.cluster, &role), &cert_pem)
        {
            certificates.push(status);
        }
        if role == TlsRole::Operator {
            operator = Some((cert_pem, key_pem));
        }
    }
    if records.named_clients != named {
        forget_named_clients(&secrets, cluster, &records.named_clients, &named).await?;
        let recorded = named.join(",");
        let value = Some(recorded.as_str()).filter(|v| !v.is_empty());
        annotate(
            &secrets,
            &ca_secret,
            NAMED_CLIENT_CERTIFICATES_ANNOTATION,
            value,
        )
        .await?;
    }
    let renewed_for = match renew_request {
        Some(value) if renew_all => {
            annotate(&secrets, &ca_secret, RENEWED_FOR_ANNOTATION, Some(&value)).await?;
            tracing::info!(secret = %ca_secret, request = %value, "every certificate renewed as asked");
            Some(value)
        }
        _ => records.renewed_for.clone(),
    };
    let rotation = match cas.step_in_progress() {
        Some(step) => Some((step, records.rotation_for.unwrap_or_default())),
        None => requested(ROTATE_CA_ANNOTATION)
            .filter(|value| !records.rotation_taken_for(value))
            .or_else(|| automatic_rotation(cluster, &cas))
            .map(|value| (CaRotationStep::TrustNewCa, value)),
    };
    let status = TlsStatus {
        issuer: "BuiltIn".to_string(),
        ca_not_after: Some(time(cas.signer.facts().not_after)),
        certificates,
        renewed_for,
        ca_rotation: rotation.as_ref().map(|(step, value)| CaRotationStatus {
            requested_for: value.clone(),
            next_step: Some(*step),
            message: format!(
                "next: {} (once every member runs what the last step asked for)",
                step.describe()
            ),
        }),
        ca_rotated_for: records.rotated_for,
    };
    let (cert_pem, key_pem) = operator.unwrap_or_default();
    let client = operator_tls(&addressing, bundle, cert_pem, key_pem);
    Ok(Some(TlsMaterial {
        client,
        observation: TlsObservation {
            status,
            revision,
            rotation,
        },
    }))
}

/// The request of a rotation the operator starts by itself: the CA is
/// past its renewal point and the cluster leaves rotations to the
/// operator (`spec.tls.builtIn.caRotation`).
fn automatic_rotation(cluster: &EtcdCluster, cas: &CaSet) -> Option<String> {
    let policy = cluster
        .spec
        .tls
        .as_ref()
        .map(|tls| tls.built_in.ca_rotation)
        .unwrap_or_default();
    if !policy.is_automatic() {
        return None;
    }
    automatic_request(cas.signer.facts(), Utc::now())
}

/// What `status.tls` lists of the certificate in Secret `secret`; `None`
/// when it cannot be read.
pub(super) fn certificate_status(secret: &str, cert_pem: &str) -> Option<CertificateStatus> {
    let facts = read_certificate(cert_pem).ok()?;
    Some(CertificateStatus {
        secret: secret.to_string(),
        serial: facts.serial,
        not_before: time(facts.not_before),
        not_after: time(facts.not_after),
    })
}

/// A certificate time as a status time.
pub(super) fn time(at: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(at.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Sets (or with `None` removes) one annotation of a Secret.
async fn annotate(
    secrets: &Api<Secret>,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<(), TlsMaterialError> {
    let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
    secrets
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| TlsMaterialError::Secret {
            what: "annotate",
            name: name.to_string(),
            source,
        })?;
    Ok(())
}

/// The addressing of a TLS cluster's members.
pub(super) fn tls_addressing(cluster: &EtcdCluster, cluster_domain: &str) -> MemberAddressing {
    MemberAddressing {
        cluster_domain: cluster_domain.to_string(),
        transport: crate::transport::Transport::Tls,
        ..MemberAddressing::new(cluster.name_any(), cluster.namespace().unwrap_or_default())
    }
}

/// The operator's client TLS: its certificate, the CA bundle, and the name
/// member certificates are checked against.
pub(super) fn operator_tls(
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

/// The names of `spec.tls.clientCertificates` the operator issues, in
/// spec order: every one but a reserved common name
/// ([`is_reserved_common_name`]), which the CRD refuses but an object
/// stored before that rule, or under an older CRD, may hold. Such a name
/// is never issued (a certificate named `<cluster>-peer` would join the
/// peer port), and a Secret issued for it earlier is deleted like that of
/// a name removed from the spec.
pub(super) fn named_client_certificates(cluster: &EtcdCluster) -> Vec<String> {
    let cluster_name = cluster.name_any();
    cluster
        .spec
        .tls
        .iter()
        .flat_map(|tls| tls.client_certificates.iter())
        .map(|named| named.name.clone())
        .filter(|name| {
            let reserved = is_reserved_common_name(&cluster_name, name);
            if reserved {
                tracing::warn!(
                    cluster = %cluster_name,
                    name = %name,
                    "not issuing a client certificate under a reserved common name"
                );
            }
            !reserved
        })
        .collect()
}

/// Deletes the Secret of every name `recorded` (issued earlier) that
/// `wanted` no longer holds, when it is this cluster's (labelled so; a
/// Secret someone else made under that name stays).
async fn forget_named_clients(
    secrets: &Api<Secret>,
    cluster: &EtcdCluster,
    recorded: &[String],
    wanted: &[String],
) -> Result<(), TlsMaterialError> {
    for name in recorded.iter().filter(|name| !wanted.contains(name)) {
        let secret_name =
            leaf_secret_name(&cluster.name_any(), &TlsRole::NamedClient(name.clone()));
        let Some(secret) = read(secrets, &secret_name).await? else {
            continue;
        };
        if secret.labels().get(CLUSTER_LABEL) != Some(&cluster.name_any()) {
            tracing::warn!(secret = %secret_name, "not deleting a client certificate Secret this cluster did not write");
            continue;
        }
        let deleted = delete_unless_gone(secrets, &secret_name, secret.metadata.uid, None)
            .await
            .map_err(|source| TlsMaterialError::Secret {
                what: "delete",
                name: secret_name.clone(),
                source,
            })?;
        if deleted {
            tracing::info!(secret = %secret_name, "client certificate no longer in spec.tls.clientCertificates: Secret deleted");
        }
    }
    Ok(())
}

/// What the CA Secret records besides the CAs.
#[derive(Debug, Default)]
struct CaRecords {
    /// The renewal request done.
    renewed_for: Option<String>,
    /// The CA rotation request in progress.
    rotation_for: Option<String>,
    /// The CA rotation request done.
    rotated_for: Option<String>,
    /// The last annotation value a rotation was started for.
    asked_for: Option<String>,
    /// The named client certificates issued.
    named_clients: Vec<String>,
}

impl CaRecords {
    /// Whether a rotation was already started for the annotation value
    /// `value` (done, or in progress).
    fn rotation_taken_for(&self, value: &str) -> bool {
        [&self.rotated_for, &self.asked_for, &self.rotation_for]
            .into_iter()
            .any(|record| record.as_deref() == Some(value))
    }

    fn of(secret: &Secret) -> Self {
        let annotation = |key: &str| secret.annotations().get(key).cloned();
        Self {
            renewed_for: annotation(RENEWED_FOR_ANNOTATION),
            rotation_for: annotation(CA_ROTATION_FOR_ANNOTATION),
            rotated_for: annotation(CA_ROTATED_FOR_ANNOTATION),
            asked_for: annotation(CA_ROTATION_ASKED_FOR_ANNOTATION),
            named_clients: annotation(NAMED_CLIENT_CERTIFICATES_ANNOTATION)
                .map(|names| {
                    names
                        .split(',')
                        .filter(|name| !name.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// The CAs a CA Secret holds.
fn ca_set_of(secret: &Secret) -> Result<CaSet, TlsError> {
    let signer =
        CertificateAuthority::from_pem(&text(secret, CA_KEY), &text(secret, CA_PRIVATE_KEY))?;
    let incoming = match text(secret, INCOMING_CA_KEY) {
        cert if cert.is_empty() => None,
        cert => Some(CertificateAuthority::from_pem(
            &cert,
            &text(secret, INCOMING_CA_PRIVATE_KEY),
        )?),
    };
    let retiring = Some(text(secret, RETIRING_CA_KEY)).filter(|cert| !cert.is_empty());
    Ok(CaSet {
        signer,
        incoming,
        retiring,
    })
}

/// The cluster's CAs, and what the CA Secret records. The first CA is
/// generated when the Secret is missing from a cluster that has never had
/// one; for one that has ([`signs_of_an_earlier_ca`]), the missing Secret
/// is an error and nothing is generated.
async fn ensure_ca(
    secrets: &Api<Secret>,
    cluster: &EtcdCluster,
) -> Result<(CaSet, CaRecords), TlsMaterialError> {
    let name = ca_secret_name(&cluster.name_any());
    let certificate = |source| TlsMaterialError::Certificate {
        what: format!("authority in Secret {name}"),
        source,
    };
    // A CA Secret made before the cluster is the person's chosen CA and is
    // used as it is (docs/security.md): it is never overwritten, only read,
    // and its rotation rewrites it in place.
    if let Some(secret) = read(secrets, &name).await? {
        return Ok((
            ca_set_of(&secret).map_err(certificate)?,
            CaRecords::of(&secret),
        ));
    }
    let history = CaHistory::of(cluster, leaves_with_ca(secrets, cluster).await?);
    if !signs_of_an_earlier_ca(&history).is_empty() {
        let secret = format!("{}/{name}", cluster.namespace().unwrap_or_default());
        return Err(TlsMaterialError::CaSecretMissing(Box::new(MissingCa::new(
            secret,
            cluster.name_any(),
            &history,
        ))));
    }
    let ca = new_ca(&cluster.name_any()).map_err(certificate)?;
    let secret = ca_secret(cluster, ca.cert_pem(), ca.key_pem());
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok((CaSet::of(ca), CaRecords::default())),
        // Another pass created it first: use that one.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let secret = read(secrets, &name).await?.unwrap_or_default();
            Ok((
                ca_set_of(&secret).map_err(certificate)?,
                CaRecords::of(&secret),
            ))
        }
        Err(source) => Err(TlsMaterialError::Secret {
            what: "create",
            name,
            source,
        }),
    }
}

/// The leaf Secrets of `cluster` that carry a CA bundle (`ca.crt`), by
/// name, with the bundle: read one by one (the operator may not list
/// Secrets) and owned by it (another cluster's Secret under one of its names
/// tells nothing of its CA).
async fn leaves_with_ca(
    secrets: &Api<Secret>,
    cluster: &EtcdCluster,
) -> Result<Vec<(String, String)>, TlsMaterialError> {
    let mut found = Vec::new();
    for role in TlsRole::every(named_client_certificates(cluster)) {
        let name = leaf_secret_name(&cluster.name_any(), &role);
        // Only the cluster's own: a Secret of that name another cluster
        // owns says nothing of this cluster's CA.
        if let Some(secret) = read(secrets, &name).await?
            && owned_by(&secret, cluster)
        {
            let bundle = text(&secret, CA_KEY);
            if !bundle.trim().is_empty() {
                found.push((name, bundle));
            }
        }
    }
    Ok(found)
}

/// A new CA for `cluster`, named with the moment it was made (CAs of one
/// cluster side by side during a rotation are told apart by name).
fn new_ca(cluster: &str) -> Result<CertificateAuthority, TlsError> {
    let now = Utc::now();
    CertificateAuthority::generate(
        &format!("{cluster} etcd CA {}", now.format("%Y-%m-%dT%H:%M:%SZ")),
        RenewalPolicy::CA.lifetime,
        now,
    )
}

/// Takes one step of the CA rotation of cluster `cluster` in `namespace`:
/// rewrites its CA Secret (the next pass issues and distributes what the
/// step changed). `request` is the annotation value carried out. Refused
/// when the Secret no longer holds the CAs the step starts from.
pub async fn advance_ca_rotation(
    client: &Client,
    namespace: &str,
    cluster: &str,
    step: CaRotationStep,
    request: &str,
) -> Result<String, TlsMaterialError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = ca_secret_name(cluster);
    let certificate = |source| TlsMaterialError::Certificate {
        what: format!("authorities in Secret {name}"),
        source,
    };
    let mut secret = read(&secrets, &name)
        .await?
        .ok_or_else(|| TlsMaterialError::Missing(format!("Secret {namespace}/{name} is gone")))?;
    let cas = ca_set_of(&secret).map_err(certificate)?;
    // A rotation the operator started by itself names the CA it replaces.
    let automatic = request == format!("{AUTOMATIC_REQUEST_PREFIX}{}", cas.signer.facts().serial);
    let advanced = cas
        .advance(step, || new_ca(cluster))
        .map_err(|error| match error {
            RotationError::Tls(source) => certificate(source),
            out_of_order => TlsMaterialError::Missing(out_of_order.to_string()),
        })?;
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
    };
    put(CA_KEY, advanced.signer.cert_pem());
    put(CA_PRIVATE_KEY, advanced.signer.key_pem());
    if let Some(incoming) = &advanced.incoming {
        put(INCOMING_CA_KEY, incoming.cert_pem());
        put(INCOMING_CA_PRIVATE_KEY, incoming.key_pem());
    }
    if let Some(retiring) = &advanced.retiring {
        put(RETIRING_CA_KEY, retiring);
    }
    secret.data = Some(data);
    record_rotation_step(
        secret.metadata.annotations.get_or_insert_default(),
        step,
        request,
        automatic,
    );
    // Replaced over the version read: a concurrent change makes this fail.
    secrets
        .replace(&name, &PostParams::default(), &secret)
        .await
        .map_err(|source| TlsMaterialError::Secret {
            what: "replace",
            name: name.clone(),
            source,
        })?;
    let signer = advanced
        .signer
        .facts()
        .common_name
        .clone()
        .unwrap_or_default();
    Ok(format!(
        "{} in Secret {name} (signing CA: {signer:?})",
        step.describe()
    ))
}

/// Records a CA rotation step in the CA Secret's annotations: the request
/// in progress, the person's last request taken (an automatic rotation
/// keeps it, so it never counts as new again) and the request done.
fn record_rotation_step(
    annotations: &mut BTreeMap<String, String>,
    step: CaRotationStep,
    request: &str,
    automatic: bool,
) {
    match step {
        CaRotationStep::TrustNewCa => {
            if automatic {
                // A CA Secret from before this record names the person's
                // last request only as the one done.
                if let Some(done) = annotations.get(CA_ROTATED_FOR_ANNOTATION).cloned()
                    && !annotations.contains_key(CA_ROTATION_ASKED_FOR_ANNOTATION)
                    && !done.starts_with(AUTOMATIC_REQUEST_PREFIX)
                {
                    annotations.insert(CA_ROTATION_ASKED_FOR_ANNOTATION.to_string(), done);
                }
            } else {
                annotations.insert(
                    CA_ROTATION_ASKED_FOR_ANNOTATION.to_string(),
                    request.to_string(),
                );
            }
            annotations.insert(CA_ROTATION_FOR_ANNOTATION.to_string(), request.to_string());
        }
        CaRotationStep::SignWithNewCa => {}
        CaRotationStep::RetireOldCa => {
            annotations.remove(CA_ROTATION_FOR_ANNOTATION);
            annotations.insert(CA_ROTATED_FOR_ANNOTATION.to_string(), request.to_string());
        }
    }
}

/// What issuing a leaf needs.
struct LeafContext<'a> {
    secrets: &'a Api<Secret>,
    cluster: &'a EtcdCluster,
    addressing: &'a MemberAddressing,
    signer: &'a CertificateAuthority,
    bundle: &'a str,
}

/// The certificate and key of `role`, issued when missing, due, not from
/// the signing CA, or `renew` (a renewal asked for); its Secret's CA
/// bundle kept equal to the trust bundle.
async fn ensure_leaf(
    leaf: &LeafContext<'_>,
    role: &TlsRole,
    renew: bool,
) -> Result<(String, String), TlsMaterialError> {
    let LeafContext {
        secrets,
        cluster,
        addressing,
        signer,
        bundle,
    } = *leaf;
    let name = leaf_secret_name(&cluster.name_any(), role);
    let names = certificate_names(addressing, role);
    let now = Utc::now();
    let existing = read(secrets, &name).await?;
    refuse_unowned(existing.as_ref(), cluster, "Secret", &name)?;
    let mut reissue = true;
    if let Some(secret) = &existing {
        let cert = text(secret, CERT_KEY);
        let decision = renewal_of(
            &cert,
            signer.cert_pem(),
            &RenewalPolicy::LEAF,
            &names.dns_names,
            &names.ip_addresses,
            now,
        );
        match decision {
            RenewalDecision::Keep { .. } if renew => {
                tracing::info!(secret = %name, "renewing: asked for by annotation {RENEW_CERTIFICATES_ANNOTATION}");
            }
            RenewalDecision::Keep { .. } if text(secret, CA_KEY) == bundle => {
                return Ok((cert, text(secret, KEY_KEY)));
            }
            RenewalDecision::Keep { .. } => {
                tracing::info!(secret = %name, "writing the current trust bundle beside the certificate");
                reissue = false;
            }
            RenewalDecision::Renew { reason } => {
                tracing::info!(secret = %name, %reason, "renewing certificate");
            }
        }
    }
    let (cert_pem, key_pem) = match (&existing, reissue) {
        (Some(secret), false) => (text(secret, CERT_KEY), text(secret, KEY_KEY)),
        _ => {
            let issued = signer
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
            (issued.cert_pem, issued.key_pem)
        }
    };
    let mut secret = leaf_secret(cluster, role, &cert_pem, &key_pem, bundle);
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
    Ok((cert_pem, key_pem))
}

pub(super) async fn read(
    secrets: &Api<Secret>,
    name: &str,
) -> Result<Option<Secret>, TlsMaterialError> {
    secrets
        .get_opt(name)
        .await
        .map_err(|source| TlsMaterialError::Secret {
            what: "read",
            name: name.to_string(),
            source,
        })
}

pub(super) fn text(secret: &Secret, key: &str) -> String {
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
    if !crate::api::transport_choice::recorded(cluster).clients_use_tls() {
        return Ok(None);
    }
    let addressing = tls_addressing(cluster, cluster_domain);
    let namespace = &addressing.namespace;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret_name = leaf_secret_name(&addressing.cluster, &TlsRole::Operator);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster_with_uid(name: &str, uid: &str) -> EtcdCluster {
        let mut cluster = EtcdCluster::new(name, crate::api::EtcdClusterSpec::default());
        cluster.metadata.namespace = Some("prod".into());
        cluster.metadata.uid = Some(uid.into());
        cluster
    }

    /// Cluster `main` with a client certificate named `db-peer` needs the
    /// Secret `main-client-db-peer-tls`, which is the peer Secret of a
    /// cluster `main-client-db` in the same namespace: that Secret (and any
    /// other object under one of its names that it does not own) is never
    /// overwritten or used; its own are.
    #[test]
    fn an_object_under_a_clusters_name_that_it_does_not_own_is_refused() {
        let main = cluster_with_uid("main", "uid-main");
        let other = cluster_with_uid("main-client-db", "uid-other");
        let needed = leaf_secret_name("main", &TlsRole::NamedClient("db-peer".into()));
        assert_eq!(needed, leaf_secret_name("main-client-db", &TlsRole::Peer));
        let others = leaf_secret(&other, &TlsRole::Peer, "cert", "key", "ca");
        assert!(matches!(
            refuse_unowned(Some(&others), &main, "Secret", &needed),
            Err(TlsMaterialError::NameTaken { kind: "Secret", .. })
        ));
        let applications = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(needed.clone()),
                ..Default::default()
            },
            ..Secret::default()
        };
        let refused = refuse_unowned(Some(&applications), &main, "Secret", &needed);
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains(&needed), "{message}");
        let own = leaf_secret(
            &main,
            &TlsRole::NamedClient("db-peer".into()),
            "cert",
            "key",
            "ca",
        );
        assert!(refuse_unowned(Some(&own), &main, "Secret", &needed).is_ok());
        assert!(refuse_unowned(None::<&Secret>, &main, "Secret", &needed).is_ok());
    }

    fn records(annotations: &BTreeMap<String, String>) -> CaRecords {
        let mut secret = Secret::default();
        secret.metadata.annotations = Some(annotations.clone());
        CaRecords::of(&secret)
    }

    fn rotate(annotations: &mut BTreeMap<String, String>, request: &str, automatic: bool) {
        for step in [
            CaRotationStep::TrustNewCa,
            CaRotationStep::SignWithNewCa,
            CaRotationStep::RetireOldCa,
        ] {
            record_rotation_step(annotations, step, request, automatic);
            assert!(records(annotations).rotation_taken_for(request));
        }
    }

    #[test]
    fn a_persons_request_stays_taken_through_later_automatic_rotations() {
        let mut annotations = BTreeMap::new();
        assert!(!records(&annotations).rotation_taken_for("2026-12"));
        rotate(&mut annotations, "2026-12", false);
        rotate(&mut annotations, "automatic-0a1b", true);
        let now = records(&annotations);
        assert_eq!(now.rotated_for.as_deref(), Some("automatic-0a1b"));
        assert!(now.rotation_taken_for("2026-12"), "not asked for again");
        assert!(!now.rotation_taken_for("2027-01"), "a new value is new");
        rotate(&mut annotations, "2027-01", false);
        assert!(records(&annotations).rotation_taken_for("2027-01"));
        assert!(!records(&annotations).rotation_taken_for("2026-12"));
    }

    /// A reserved name stored before admission refused it is never
    /// issued; the others are, in spec order.
    #[test]
    fn no_client_certificate_is_issued_under_a_reserved_common_name() {
        let mut cluster = EtcdCluster::new("main", crate::api::EtcdClusterSpec::default());
        cluster.spec.tls = Some(crate::api::TlsSpec {
            client_certificates: [
                "app",
                "main-peer",
                "root",
                "etcd-operator",
                "main-server",
                "main-client",
                "other-peer",
            ]
            .into_iter()
            .map(|name| crate::api::NamedClientCertificate {
                name: name.to_string(),
            })
            .collect(),
            ..crate::api::TlsSpec::default()
        });
        assert_eq!(named_client_certificates(&cluster), ["app", "other-peer"]);
    }

    #[test]
    fn a_ca_secret_from_before_the_record_keeps_its_request_done() {
        // Written by an operator that recorded only the request done.
        let mut annotations =
            BTreeMap::from([(CA_ROTATED_FOR_ANNOTATION.to_string(), "2025-06".to_string())]);
        rotate(&mut annotations, "automatic-0a1b", true);
        assert!(records(&annotations).rotation_taken_for("2025-06"));
    }
}
