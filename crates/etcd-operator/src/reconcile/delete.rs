//! Deleting an object by name, optionally only the one of a given UID,
//! where "already gone" counts as done. Shared by every reconcile step
//! that deletes, so it sits below all of them.

use kube::api::{Api, DeleteParams, Preconditions};
use serde::de::DeserializeOwned;

/// Deletes `name`, only the object of `uid` when one is given (a newer
/// object of that name stays); `true` when it was deleted now, `false`
/// when it was already gone. `grace_seconds` as `DeleteParams` take it.
pub(crate) async fn delete_unless_gone<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<String>,
    grace_seconds: Option<u32>,
) -> Result<bool, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        grace_period_seconds: grace_seconds,
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(source),
    }
}
