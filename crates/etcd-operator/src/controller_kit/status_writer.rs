//! The status write every controller of this operator makes: one
//! server-side apply of the whole status on the status subresource, with
//! the controller's own field manager (a field the new status leaves out,
//! an error that is over, say, is removed, which a merge patch would keep).
//!
//! Before the write, conditions whose status did not change keep their
//! `lastTransitionTime` ([`super::conditions::keep_transition_times`]); a
//! status equal to the current one is not written at all, so a pass that
//! changes nothing but timestamps makes no API call.
//!
//! A write may be conditional on the resourceVersion the pass planned
//! from ([`Replaces::ReadAt`]): a status planned from an older object then
//! never replaces a newer one.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::category::Category;
use super::conditions::{WithConditions, keep_transition_times};

/// Writing a status failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The object changed since the pass read it (resourceVersion
    /// precondition): the status planned from the older object was not
    /// written, so it cannot overwrite a newer one. The next pass plans
    /// from the new object.
    #[error(
        "status of {object} not written: the object changed since it was read at resourceVersion {resource_version}"
    )]
    Stale {
        /// Object name.
        object: String,
        /// The resourceVersion the plan was made from.
        resource_version: String,
    },
    /// The status patch was refused or failed.
    #[error("cannot write status of {object}: {source}")]
    Patch {
        /// Object name.
        object: String,
        /// Cause.
        source: kube::Error,
    },
    /// The status could not be serialized.
    #[error("cannot serialize status of {object}: {source}")]
    Serialize {
        /// Object name.
        object: String,
        /// Cause.
        source: serde_json::Error,
    },
}

impl StatusError {
    /// Category of this error.
    pub fn category(&self) -> Category {
        match self {
            StatusError::Patch { source, .. } => Category::of_kube(source),
            // Re-read and plan again soon; no Event (this is not a fault).
            StatusError::Stale { .. } => Category::Conflict,
            StatusError::Serialize { .. } => Category::InvalidSpec,
        }
    }
}

/// Which status a write may replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaces<'a> {
    /// Whatever status the object has now: the controller is the only
    /// writer of this status.
    Any,
    /// Only the status of the object at this resourceVersion, the one the
    /// pass planned from; the API server refuses the write otherwise.
    ReadAt(&'a str),
}

/// Writes statuses with one field manager.
#[derive(Debug, Clone, Copy)]
pub struct StatusWriter {
    field_manager: &'static str,
}

impl StatusWriter {
    /// A writer applying as `field_manager`.
    pub const fn new(field_manager: &'static str) -> Self {
        Self { field_manager }
    }

    /// Writes `desired` as the status of object `name`, whose status is
    /// `current`: unchanged conditions keep their transition time, and an
    /// unchanged status is not written. Returns whether a write happened.
    pub async fn write<K, S>(
        &self,
        api: &Api<K>,
        name: &str,
        current: Option<&S>,
        mut desired: S,
        replaces: Replaces<'_>,
    ) -> Result<bool, StatusError>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        S: Serialize + PartialEq + WithConditions,
    {
        if let Some(current) = current {
            let conditions = std::mem::take(desired.conditions_mut());
            *desired.conditions_mut() = keep_transition_times(current.conditions(), conditions);
        }
        if !needs_write(current, &desired) {
            return Ok(false);
        }
        let body = apply_body::<K>(name, &desired, replaces)?;
        match api
            .patch_status(
                name,
                &PatchParams::apply(self.field_manager).force(),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => match replaces {
                Replaces::ReadAt(version) => Err(StatusError::Stale {
                    object: name.to_owned(),
                    resource_version: version.to_owned(),
                }),
                Replaces::Any => Err(StatusError::Patch {
                    object: name.to_owned(),
                    source: kube::Error::Api(status),
                }),
            },
            Err(source) => Err(StatusError::Patch {
                object: name.to_owned(),
                source,
            }),
        }
    }
}

/// Whether writing `desired` would change anything.
pub fn needs_write<S: PartialEq>(current: Option<&S>, desired: &S) -> bool {
    current != Some(desired)
}

/// The server-side apply body of a status write of a `K` named `name`:
/// the whole status, and with [`Replaces::ReadAt`] the resourceVersion as
/// a precondition (`force` settles field-manager conflicts only, never
/// this one).
pub fn apply_body<K>(
    name: &str,
    status: &impl Serialize,
    replaces: Replaces<'_>,
) -> Result<serde_json::Value, StatusError>
where
    K: Resource<DynamicType = ()>,
{
    let status = serde_json::to_value(status).map_err(|source| StatusError::Serialize {
        object: name.to_owned(),
        source,
    })?;
    let mut metadata = json!({ "name": name });
    if let Replaces::ReadAt(version) = replaces {
        metadata["resourceVersion"] = json!(version);
    }
    Ok(json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": metadata,
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_conditional_write_names_the_resource_version_it_replaces() {
        let status = json!({ "phase": "Running" });
        let body =
            apply_body::<ConfigMap>("main", &status, Replaces::ReadAt("41")).expect("a body");
        assert_eq!(body["metadata"]["resourceVersion"], "41");
        assert_eq!(body["metadata"]["name"], "main");
        assert_eq!(body["status"]["phase"], "Running");
        assert_eq!(body["kind"], "ConfigMap");

        let body = apply_body::<ConfigMap>("main", &status, Replaces::Any).expect("a body");
        assert_eq!(body["metadata"], json!({ "name": "main" }));
    }

    #[test]
    fn a_first_status_is_always_written_an_equal_one_never() {
        assert!(needs_write(None, &1));
        assert!(!needs_write(Some(&1), &1));
        assert!(needs_write(Some(&1), &2));
    }

    #[test]
    fn a_stale_write_is_a_conflict_retried_soon() {
        let error = StatusError::Stale {
            object: "main".into(),
            resource_version: "41".into(),
        };
        assert_eq!(error.category(), Category::Conflict);
        assert_eq!(
            error.to_string(),
            "status of main not written: the object changed since it was read at resourceVersion 41"
        );
    }
}
