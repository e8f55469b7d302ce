//! The store of a `persistentVolumeClaim` backup destination: one
//! Deployment (one replica, `Recreate`, so a `ReadWriteOnce` claim is
//! never wanted by two Pods), the Service restore Pods reach it by, and
//! the Secret with its token and URL. All three are owned by the claim:
//! deleting the claim deletes its store, and nothing else does. See
//! [`crate::pod_contract::backup_store`] for the protocol.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, PersistentVolumeClaim,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    Secret, SecretKeySelector, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use super::objects::{ETCD_USER, container_security_context, pod_security_context};
use crate::api::MemberPodTemplate;
use crate::api::identity::{MANAGED_BY_LABEL, MANAGER};
use crate::pod_contract::backup_store::{
    ENDPOINT_KEY, HEALTH_PATH, STORE_MOUNT_PATH, STORE_PORT, TOKEN_ENV, TOKEN_KEY, store_name,
    store_secret_name,
};

/// The label naming the claim a store serves.
pub const CLAIM_LABEL: &str = "durable-etcd.io/backup-claim";
/// The store's container.
pub const STORE_CONTAINER: &str = "backup-store";
const NAME_LABEL: &str = "app.kubernetes.io/name";
const NAME: &str = "etcd-backup-store";

/// The labels that select the store Pod of `claim`.
pub fn store_selector(claim: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), NAME.to_string()),
        (CLAIM_LABEL.to_string(), label_value(claim)),
    ])
}

/// `claim` as a label value (63 characters at most): the store's name
/// tells long names apart.
fn label_value(claim: &str) -> String {
    if claim.len() <= 63 {
        claim.to_string()
    } else {
        store_name(claim)
            .trim_start_matches("backup-store-")
            .to_string()
    }
}

fn metadata(claim: &PersistentVolumeClaim, name: String) -> ObjectMeta {
    let mut labels = store_selector(&claim.name_any());
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGER.to_string());
    ObjectMeta {
        name: Some(name),
        namespace: claim.namespace(),
        labels: Some(labels),
        owner_references: owner(claim).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

/// The claim as owner (not controller: the claim's own controller stays
/// its controller), so garbage collection removes the store with it.
fn owner(claim: &PersistentVolumeClaim) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: PersistentVolumeClaim::api_version(&()).to_string(),
        kind: PersistentVolumeClaim::kind(&()).to_string(),
        name: claim.name_any(),
        uid: claim.uid()?,
        ..OwnerReference::default()
    })
}

/// The store's Secret: `token` and the in-cluster URL `endpoint`.
pub fn store_secret(claim: &PersistentVolumeClaim, token: &str, endpoint: &str) -> Secret {
    Secret {
        metadata: metadata(claim, store_secret_name(&claim.name_any())),
        string_data: Some(BTreeMap::from([
            (TOKEN_KEY.to_string(), token.to_string()),
            (ENDPOINT_KEY.to_string(), endpoint.to_string()),
        ])),
        ..Secret::default()
    }
}

/// The Service restore Pods reach the store by.
pub fn store_service(claim: &PersistentVolumeClaim) -> Service {
    let name = claim.name_any();
    Service {
        metadata: metadata(claim, store_name(&name)),
        spec: Some(ServiceSpec {
            selector: Some(store_selector(&name)),
            ports: Some(vec![ServicePort {
                name: Some("store".to_string()),
                port: i32::from(STORE_PORT),
                target_port: Some(IntOrString::Int(i32::from(STORE_PORT))),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The store's Deployment, running `etcd-operator backup-store` from
/// `operator_image` with the claim mounted at [`STORE_MOUNT_PATH`].
pub fn store_deployment(claim: &PersistentVolumeClaim, operator_image: &str) -> Deployment {
    let name = claim.name_any();
    let selector = store_selector(&name);
    let container = Container {
        name: STORE_CONTAINER.to_string(),
        image: Some(operator_image.to_string()),
        command: Some(vec!["etcd-operator".to_string()]),
        args: Some(vec!["backup-store".to_string()]),
        env: Some(vec![EnvVar {
            name: TOKEN_ENV.to_string(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: store_secret_name(&name),
                    key: TOKEN_KEY.to_string(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ports: Some(vec![ContainerPort {
            name: Some("store".to_string()),
            container_port: i32::from(STORE_PORT),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(HEALTH_PATH.to_string()),
                port: IntOrString::Int(i32::from(STORE_PORT)),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("10m".to_string())),
                ("memory".to_string(), Quantity("32Mi".to_string())),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("256Mi".to_string()),
            )])),
            ..ResourceRequirements::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "backups".to_string(),
            mount_path: STORE_MOUNT_PATH.to_string(),
            ..VolumeMount::default()
        }]),
        security_context: Some(container_security_context()),
        ..Container::default()
    };
    let mut pod_labels = selector.clone();
    pod_labels.insert(MANAGED_BY_LABEL.to_string(), MANAGER.to_string());
    Deployment {
        metadata: metadata(claim, store_name(&name)),
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_string()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(vec![Volume {
                        name: "backups".to_string(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: name.clone(),
                            read_only: Some(false),
                        }),
                        ..Volume::default()
                    }]),
                    security_context: Some(pod_security_context(&MemberPodTemplate::default())),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// The user the store runs as (and the group its files belong to).
pub const STORE_USER: i64 = ETCD_USER;

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("prod".to_string()),
                uid: Some("uid-1".to_string()),
                ..ObjectMeta::default()
            },
            ..PersistentVolumeClaim::default()
        }
    }

    #[test]
    fn the_store_mounts_the_claim_alone_and_is_owned_by_it() {
        let deployment = store_deployment(&claim("backups"), "example/etcd-operator:1");
        assert_eq!(
            deployment.metadata.name.as_deref(),
            Some("backup-store-backups")
        );
        let owners = deployment.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (owners[0].kind.as_str(), owners[0].uid.as_str()),
            ("PersistentVolumeClaim", "uid-1")
        );
        assert_eq!(owners[0].controller, None);
        let spec = deployment.spec;
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(
            spec.strategy.and_then(|s| s.type_).as_deref(),
            Some("Recreate"),
            "a ReadWriteOnce claim must never be wanted by two Pods"
        );
        let pod = spec.template.spec.unwrap_or_default();
        let container = &pod.containers[0];
        assert_eq!(
            container.args.as_deref(),
            Some(&["backup-store".to_string()][..])
        );
        assert!(container.readiness_probe.is_some());
        let env = container.env.clone().unwrap_or_default();
        let token = env[0]
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref());
        assert_eq!(token.map(|t| t.name.as_str()), Some("backup-store-backups"));
        let volume = &pod.volumes.unwrap_or_default()[0];
        assert_eq!(
            volume
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("backups")
        );
        let security = pod.security_context.unwrap_or_default();
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(security.fs_group, Some(STORE_USER));
    }

    #[test]
    fn the_service_selects_the_store_pod_and_the_secret_names_the_service() {
        let claim = claim("backups");
        let service = store_service(&claim);
        let selector = service.spec.and_then(|s| s.selector).unwrap_or_default();
        let deployment = store_deployment(&claim, "image");
        let pod_labels = deployment
            .spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .unwrap_or_default();
        assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
        let secret = store_secret(
            &claim,
            "t0k3n",
            "http://backup-store-backups.prod.svc.cluster.local:2384",
        );
        let data = secret.string_data.unwrap_or_default();
        assert_eq!(data.get(TOKEN_KEY).map(String::as_str), Some("t0k3n"));
        assert!(
            data.get(ENDPOINT_KEY)
                .is_some_and(|e| e.contains("backup-store-backups.prod.svc"))
        );
    }
}
