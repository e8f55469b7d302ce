//! Certificates from cert-manager (`spec.tls.certManager`): the operator
//! applies a `Certificate` per leaf, deletes those of client certificates
//! no longer named (with their Secrets), and reads the Secrets cert-manager
//! writes. cert-manager renews the leaves; the CA the members trust is the
//! `ca.crt` the issuer writes, so a change of it restarts the members one
//! at a time (it is the Pod template's TLS revision).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use sha2::{Digest as _, Sha256};

use super::FIELD_MANAGER;
use super::delete::delete_unless_gone;
use super::tls_material::{
    TlsMaterial, TlsMaterialError, certificate_status, named_client_certificates, operator_tls,
    read, refuse_unowned, text, tls_addressing,
};
use crate::api::identity::CLUSTER_LABEL;
use crate::api::{CertManagerIssuer, EtcdCluster, TlsStatus};
use crate::planner::TlsObservation;
use crate::resources::cert_manager::{ROLE_LABEL, certificate, certificate_resource};
use crate::resources::tls::{CA_KEY, CERT_KEY, KEY_KEY, TlsRole, leaf_secret_name};
use crate::tls::read_bundle;

/// `status.tls.issuer` of a cluster whose certificates cert-manager issues.
pub const ISSUER: &str = "CertManager";

/// Makes the `Certificate`s of `cluster` exist as its spec says and reads
/// what cert-manager issued; a Secret not issued yet is
/// [`TlsMaterialError::Missing`], naming the `Certificate`'s state.
pub async fn ensure(
    client: &Client,
    cluster: &EtcdCluster,
    cluster_domain: &str,
    issuer: &CertManagerIssuer,
) -> Result<TlsMaterial, TlsMaterialError> {
    let addressing = &tls_addressing(cluster, cluster_domain);
    let named = named_client_certificates(cluster);
    let namespace = &addressing.namespace;
    let certificates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &certificate_resource());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let roles = TlsRole::every(named);
    for role in &roles {
        let object = certificate(cluster, addressing, role, issuer);
        let name = object.name_any();
        let existing =
            certificates
                .get_opt(&name)
                .await
                .map_err(|source| TlsMaterialError::CertManager {
                    what: "read",
                    name: name.clone(),
                    source,
                })?;
        refuse_unowned(existing.as_ref(), cluster, "Certificate", &name)?;
        certificates
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(|source| TlsMaterialError::CertManager {
                what: "apply",
                name,
                source,
            })?;
    }
    forget_unnamed(&certificates, &secrets, cluster, &roles).await?;

    let mut leaves = Vec::new();
    for role in &roles {
        let name = leaf_secret_name(&addressing.cluster, role);
        let secret = read(&secrets, &name)
            .await?
            .filter(|secret| !text(secret, CERT_KEY).is_empty());
        let Some(secret) = secret else {
            return Err(TlsMaterialError::Missing(format!(
                "cert-manager has not issued Secret {namespace}/{name} yet: {}",
                readiness(&certificates, &name).await
            )));
        };
        leaves.push((role, name, secret));
    }
    let mut status = TlsStatus {
        issuer: ISSUER.to_string(),
        ..TlsStatus::default()
    };
    let mut trusted = BTreeSet::new();
    let mut operator = None;
    for (role, name, secret) in &leaves {
        let cert = text(secret, CERT_KEY);
        if let Some(certificate) = certificate_status(name, &cert) {
            status.certificates.push(certificate);
        }
        trusted.insert(text(secret, CA_KEY));
        if **role == TlsRole::Operator {
            operator = Some((cert, text(secret, KEY_KEY), text(secret, CA_KEY)));
        }
    }
    status.ca_not_after = trusted
        .iter()
        .filter_map(|bundle| read_bundle(bundle).ok())
        .flatten()
        .map(|facts| facts.not_after)
        .min()
        .map(super::tls_material::time);
    let (cert_pem, key_pem, ca_pem) = operator.unwrap_or_default();
    Ok(TlsMaterial {
        client: operator_tls(addressing, ca_pem, cert_pem, key_pem),
        observation: TlsObservation {
            status,
            revision: revision(&trusted),
            rotation: None,
        },
    })
}

/// What the members must have loaded: the CAs the issuer wrote, as 16 hex
/// digits (a leaf's renewal leaves it alone).
fn revision(trusted: &BTreeSet<String>) -> String {
    let mut digest = Sha256::new();
    for bundle in trusted {
        digest.update(bundle.trim().as_bytes());
        digest.update(b"\n--\n");
    }
    digest
        .finalize()
        .iter()
        .take(8)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The `Ready` condition of Certificate `name`, in words.
async fn readiness(certificates: &Api<DynamicObject>, name: &str) -> String {
    let object = match certificates.get_opt(name).await {
        Ok(Some(object)) => object,
        Ok(None) => return format!("Certificate {name} does not exist"),
        Err(error) => return format!("Certificate {name} unreadable: {error}"),
    };
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            format!(
                "Certificate {name} Ready={} ({}: {})",
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| {
            format!("Certificate {name} has no Ready condition yet (is cert-manager running?)")
        })
}

/// Deletes this cluster's `Certificate`s (and their Secrets) of roles no
/// longer wanted: client certificates whose names left the spec.
async fn forget_unnamed(
    certificates: &Api<DynamicObject>,
    secrets: &Api<Secret>,
    cluster: &EtcdCluster,
    wanted: &[TlsRole],
) -> Result<(), TlsMaterialError> {
    let wanted: BTreeSet<String> = wanted.iter().map(|r| r.as_str().into_owned()).collect();
    let selector = format!("{CLUSTER_LABEL}={},{ROLE_LABEL}", cluster.name_any());
    let listed = certificates
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| TlsMaterialError::CertManager {
            what: "list",
            name: selector.clone(),
            source,
        })?;
    for object in listed {
        let role = object.labels().get(ROLE_LABEL).cloned().unwrap_or_default();
        if wanted.contains(&role) {
            continue;
        }
        let name = object.name_any();
        let cert_error = |source| TlsMaterialError::CertManager {
            what: "delete",
            name: name.clone(),
            source,
        };
        delete_unless_gone(certificates, &name, object.metadata.uid.clone(), None)
            .await
            .map_err(cert_error)?;
        // cert-manager leaves the Secret of a deleted Certificate.
        if let Some(secret) = read(secrets, &name)
            .await?
            .filter(|s| s.labels().get(CLUSTER_LABEL) == Some(&cluster.name_any()))
        {
            delete_unless_gone(secrets, &name, secret.metadata.uid.clone(), None)
                .await
                .map_err(|source| TlsMaterialError::Secret {
                    what: "delete",
                    name: name.clone(),
                    source,
                })?;
        }
        tracing::info!(certificate = %name, "client certificate no longer named: Certificate and Secret deleted");
    }
    Ok(())
}
