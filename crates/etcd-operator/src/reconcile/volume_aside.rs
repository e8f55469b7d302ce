//! Setting a damaged member's volume aside (rule 15): its PersistentVolume
//! is reclaimed by `Retain` and says what was found, so that the member can
//! be rebuilt on a new volume while the damaged data stays for a person.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use super::error::ActError;

/// Sets `volume` aside while it is still bound to `claim` (in `namespace`):
/// reclaim policy `Retain`, `annotations` and `labels`. A volume bound
/// elsewhere is left as it is.
pub async fn set_volume_aside(
    client: &Client,
    namespace: &str,
    volume: &str,
    claim: &str,
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> Result<(), ActError> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let apply_error = |source| ActError::Apply {
        kind: "PersistentVolume",
        name: volume.to_owned(),
        source,
    };
    let current = api.get(volume).await.map_err(apply_error)?;
    let bound_to = current
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .map(|r| {
            (
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default(),
            )
        });
    if bound_to.as_ref() != Some(&(namespace.to_owned(), claim.to_owned())) {
        return Err(ActError::VolumeNotBound {
            volume: volume.to_owned(),
            claim: format!("{namespace}/{claim}"),
            bound_to: bound_to.map_or("nothing".to_owned(), |(ns, name)| format!("{ns}/{name}")),
        });
    }
    let patch = serde_json::json!({
        "metadata": { "annotations": annotations, "labels": labels },
        "spec": { "persistentVolumeReclaimPolicy": "Retain" },
    });
    api.patch(volume, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(apply_error)?;
    Ok(())
}
