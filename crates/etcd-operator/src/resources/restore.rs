//! The restore Pod: restores the survivor's data (or a backup) into a new
//! incarnation on one member's volume (see `planner::restore`, and the
//! `restore-volume` steps of the operator's binary, whose command lines and
//! files come from `pod_contract::restore_volume`). Every step can run
//! again:
//!
//! Every container runs one of the cluster's images, as its member Pods
//! do: the operator's steps the operator's image, the etcd and etcdutl
//! steps the cluster's etcd image ([`crate::api::EtcdClusterSpec::etcd_image`]:
//! `spec.image` when set), so a restore pulls from the registry the
//! members pull from (a mirror, an air-gapped cluster's).
//!
//! - from a survivor: `restore-volume prepare` (operator image: copy the
//!   survivor's data dir, WAL included, and install the operator binary for
//!   the next step), `restore-volume apply-wal` (etcd image: etcd with
//!   `--force-new-cluster` on loopback replays the copy's WAL and writes
//!   its snapshot);
//! - from a backup: `restore-volume fetch-backup` (operator image: download
//!   and verify the snapshot and its incremental segments, and install the
//!   operator binary), `restore-volume replay` (etcd image: with segments,
//!   `etcdutl snapshot restore` of the full backup, hash checked, into a
//!   scratch data dir, the segments replayed on it by a loopback-only etcd,
//!   then its snapshot; without, the full backup itself);
//! - then, for both, `etcdutl snapshot restore` of that snapshot (hash
//!   checked) with `--bump-revision` [`REVISION_BUMP`] `--mark-compacted`,
//!   so that no revision the old cluster served is served again with other
//!   content, and `restore-volume finish`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSpec, SecretVolumeSource, Volume, VolumeMount,
};
use kube::ResourceExt;

use super::objects::{DATA_MOUNT, ETCD_BINARY, GUARD_BINARY, GUARD_DIR, data_volume};
use crate::addressing::{MemberAddressing, member_name, restore_pod_name};
use crate::api::identity::{CLUSTER_LABEL, MANAGED_BY_LABEL, MANAGER};
use crate::api::{BackupSource, EtcdCluster};
use crate::pod_contract::restore_volume::{flag, flags};
use crate::pod_contract::{REVISION_BUMP, RestoreLayout, RestoreStep, TERMINATION_MESSAGE_POLICY};

/// Where the restore Pod mounts the backup destination's credentials Secret.
pub const CREDENTIALS_MOUNT: &str = "/var/run/backup-credentials";
/// Where the restore Pod mounts the Secret holding the backups' encryption
/// key.
pub const ENCRYPTION_MOUNT: &str = "/var/run/backup-encryption";

/// The label telling the restore Pod apart from member Pods.
pub const ROLE_LABEL: &str = "durable-etcd.io/role";

/// The restore Pod for the target member `ordinal` and the new
/// incarnation `token`: from that member's own db, or from `backup`. It
/// carries the cluster label (so the operator observes it) but not the
/// member labels (no Service or PodDisruptionBudget selects it).
pub fn restore_pod(
    cluster: &EtcdCluster,
    addressing: &MemberAddressing,
    operator_image: &str,
    ordinal: u32,
    token: &str,
    backup: Option<BackupSource>,
) -> Pod {
    let name = cluster.name_any();
    let member = member_name(&name, ordinal);
    let layout = RestoreLayout::new(std::path::Path::new(DATA_MOUNT), token);
    let mount = VolumeMount {
        name: "data".to_string(),
        mount_path: DATA_MOUNT.to_string(),
        ..VolumeMount::default()
    };
    // The member Pods' security: the user's pod-level context merged over
    // the defaults, every capability dropped in each container.
    let security = super::container_security_context();
    let tools_mount = VolumeMount {
        name: "tools".to_string(),
        mount_path: GUARD_DIR.to_string(),
        ..VolumeMount::default()
    };
    let credentials_mount = VolumeMount {
        name: "credentials".to_string(),
        mount_path: CREDENTIALS_MOUNT.to_string(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    let step_args = |step: RestoreStep| step.args(std::path::Path::new(DATA_MOUNT), token, &member);
    let step = |step: RestoreStep| Container {
        name: step.name().to_string(),
        image: Some(operator_image.to_string()),
        command: Some(vec!["/usr/local/bin/etcd-operator".to_string()]),
        args: Some(step_args(step)),
        termination_message_policy: Some(TERMINATION_MESSAGE_POLICY.to_string()),
        volume_mounts: Some(vec![mount.clone()]),
        security_context: Some(security.clone()),
        ..Container::default()
    };
    let peer_url = addressing.peer_url(ordinal);
    // `etcdutl snapshot restore` of the snapshot to restore (taken through
    // etcd's API, its hash checked) into the new incarnation's data dir,
    // with the revision bump.
    let restore = Container {
        name: "etcdutl".to_string(),
        image: Some(cluster.spec.etcd_image()),
        command: Some(vec!["/usr/local/bin/etcdutl".to_string()]),
        args: Some(vec![
            "snapshot".to_string(),
            "restore".to_string(),
            layout.source_db.display().to_string(),
            format!("--name={member}"),
            format!("--initial-cluster={member}={peer_url}"),
            format!("--initial-cluster-token={token}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--data-dir={}", layout.staging.display()),
            format!("--bump-revision={REVISION_BUMP}"),
            "--mark-compacted".to_string(),
        ]),
        termination_message_policy: Some(TERMINATION_MESSAGE_POLICY.to_string()),
        volume_mounts: Some(vec![mount.clone()]),
        security_context: Some(security.clone()),
        ..Container::default()
    };
    // A step of this binary in the etcd image (installed by the step
    // before it), which runs etcd on loopback on a scratch data dir.
    let etcd_step = |step: RestoreStep, extra: Vec<String>, extra_mounts: Vec<VolumeMount>| {
        let mut args = step_args(step);
        args.push(flag(flags::ETCD_BINARY, ETCD_BINARY));
        args.extend(extra);
        let mut mounts = vec![mount.clone(), tools_mount.clone()];
        mounts.extend(extra_mounts);
        Container {
            name: step.name().to_string(),
            image: Some(cluster.spec.etcd_image()),
            command: Some(vec![GUARD_BINARY.to_string()]),
            args: Some(args),
            termination_message_policy: Some(TERMINATION_MESSAGE_POLICY.to_string()),
            volume_mounts: Some(mounts),
            security_context: Some(security.clone()),
            ..Container::default()
        }
    };
    let mut volumes = vec![
        data_volume(&name, ordinal),
        Volume {
            name: "tools".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    ];
    let init_containers = match &backup {
        None => {
            let mut prepare = step(RestoreStep::Prepare);
            prepare
                .args
                .get_or_insert_with(Vec::new)
                .push(flag(flags::INSTALL_TO, GUARD_BINARY));
            prepare
                .volume_mounts
                .get_or_insert_with(Vec::new)
                .push(tools_mount.clone());
            vec![
                prepare,
                etcd_step(RestoreStep::ApplyWal, vec![], vec![]),
                restore,
            ]
        }
        Some(source) => {
            let own_namespace = cluster.namespace().unwrap_or_else(|| "default".to_string());
            let (namespace, backed_up) = source.folder_of(&own_namespace, &name);
            let mut fetch = step(RestoreStep::FetchBackup);
            let args = fetch.args.get_or_insert_with(Vec::new);
            args.push(flag(
                flags::SOURCE,
                serde_json::to_string(source).unwrap_or_default(),
            ));
            args.push(flag(flags::BACKUP_NAMESPACE, namespace));
            args.push(flag(flags::BACKUP_CLUSTER, backed_up));
            args.push(flag(flags::INSTALL_TO, GUARD_BINARY));
            let mounts = fetch.volume_mounts.get_or_insert_with(Vec::new);
            mounts.push(tools_mount.clone());
            if let Some(secret) = source.destination.credentials_secret() {
                args.push(flag(flags::CREDENTIALS_DIR, CREDENTIALS_MOUNT));
                mounts.push(credentials_mount.clone());
                volumes.push(Volume {
                    name: "credentials".to_string(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret.to_string()),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                });
            }
            // Both the fetch and the replay step read sealed objects.
            let key_file = source.destination.encryption.as_ref().map(|encryption| {
                (
                    flag(
                        flags::ENCRYPTION_KEY_FILE,
                        format!("{ENCRYPTION_MOUNT}/{}", encryption.key),
                    ),
                    VolumeMount {
                        name: "encryption".to_string(),
                        mount_path: ENCRYPTION_MOUNT.to_string(),
                        read_only: Some(true),
                        ..VolumeMount::default()
                    },
                )
            });
            if let Some((arg, key_mount)) = &key_file {
                args.push(arg.clone());
                mounts.push(key_mount.clone());
            }
            if let Some(encryption) = &source.destination.encryption {
                volumes.push(Volume {
                    name: "encryption".to_string(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(encryption.secret_name.clone()),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                });
            }
            // The fetched segments stay sealed on the volume.
            let (mut replay_args, replay_mounts) = key_file
                .map(|(arg, key_mount)| (vec![arg], vec![key_mount]))
                .unwrap_or_default();
            replay_args.push(flag(flags::PEER_URL, &peer_url));
            vec![
                fetch,
                etcd_step(RestoreStep::Replay, replay_args, replay_mounts),
                restore,
            ]
        }
    };
    let template = &cluster.spec.pod;
    Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(restore_pod_name(&name)),
            namespace: cluster.namespace(),
            labels: Some(BTreeMap::from([
                (CLUSTER_LABEL.to_string(), name.clone()),
                (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
                (ROLE_LABEL.to_string(), "restore".to_string()),
            ])),
            owner_references: kube::Resource::controller_owner_ref(cluster, &()).map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_string()),
            init_containers: Some(init_containers),
            containers: vec![step(RestoreStep::Finish)],
            volumes: Some(volumes),
            security_context: Some(super::pod_security_context(template)),
            node_selector: (!template.node_selector.is_empty())
                .then(|| template.node_selector.clone()),
            tolerations: (!template.tolerations.is_empty()).then(|| template.tolerations.clone()),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::identity::MemberIdentity;
    use crate::api::{EtcdClusterSpec, version};
    use crate::planner::Bootstrap;

    /// The images of every container, init containers included.
    fn images(pod: &Pod) -> Vec<String> {
        let spec = pod.spec.as_ref().expect("spec");
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| c.image.clone().expect("every container names its image"))
            .collect()
    }

    /// A restore Pod pulls only what the cluster's member Pods pull: its
    /// etcd and etcdutl steps run the cluster's etcd image (`spec.image`,
    /// a mirror in an air-gapped cluster), its other steps the operator's
    /// image. Both restores, with the image set and unset.
    #[test]
    fn a_restore_pod_runs_only_the_images_of_the_clusters_member_pods() {
        let mirror = "registry.example/mirror/etcd:v3.6.16";
        let operator = "registry.example/mirror/etcd-operator:1";
        let source: BackupSource = serde_json::from_value(serde_json::json!({
            "destination": { "s3": { "bucket": "b", "credentialsSecret": "s3" } },
        }))
        .expect("source");
        for image in [Some(mirror.to_string()), None] {
            let spec = EtcdClusterSpec {
                image: image.clone(),
                ..EtcdClusterSpec::default()
            };
            let mut cluster = EtcdCluster::new("main", spec);
            cluster.metadata.namespace = Some("ns".into());
            cluster.metadata.uid = Some("uid".into());
            let addressing = MemberAddressing::new("main", "ns");
            let member = crate::resources::member_pod(
                &cluster,
                &addressing,
                operator,
                0,
                &Bootstrap::New {
                    token: "main-x".to_string(),
                    initial_members: vec![0, 1, 2],
                },
                &MemberIdentity {
                    cluster_token: "main-x".to_string(),
                    cluster_id: None,
                    member_id: None,
                },
            );
            let member_images = images(&member);
            let etcd_image = image.unwrap_or_else(|| version::image(&cluster.spec.version));
            assert!(member_images.contains(&etcd_image), "{member_images:?}");
            for backup in [None, Some(source.clone())] {
                let from_backup = backup.is_some();
                let pod = restore_pod(&cluster, &addressing, operator, 0, "main-y", backup);
                let restore_images = images(&pod);
                assert!(
                    restore_images.iter().all(|i| member_images.contains(i)),
                    "restore (from a backup: {from_backup}) pulls {restore_images:?}, members {member_images:?}"
                );
                assert!(restore_images.contains(&etcd_image), "{restore_images:?}");
            }
        }
    }

    #[test]
    fn a_survivor_restore_applies_its_wal_and_bumps_the_revision() {
        let mut cluster = EtcdCluster::new("main", crate::api::EtcdClusterSpec::default());
        cluster.metadata.namespace = Some("ns".into());
        cluster.metadata.uid = Some("uid".into());
        let addressing = MemberAddressing::new("main", "ns");
        let pod = restore_pod(&cluster, &addressing, "op:1", 2, "main-x-r1", None);
        assert_eq!(pod.metadata.name.as_deref(), Some("main-restore"));
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let init = spec.init_containers.expect("init");
        let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["prepare", "apply-wal", "etcdutl"]);
        let args = |i: usize| init[i].args.clone().expect("args");
        assert!(args(0).contains(&format!("--install-to={GUARD_BINARY}")));
        assert_eq!(init[1].command, Some(vec![GUARD_BINARY.to_string()]));
        assert!(args(1).contains(&format!("--etcd-binary={ETCD_BINARY}")));
        let etcdutl = args(2);
        // A snapshot taken through etcd's API: its hash is checked.
        assert!(!etcdutl.contains(&"--skip-hash-check".to_string()));
        assert!(etcdutl.contains(&format!("--bump-revision={REVISION_BUMP}")));
        assert!(etcdutl.contains(&"--mark-compacted".to_string()));
        assert!(etcdutl.contains(&"--initial-cluster-token=main-x-r1".to_string()));
        assert!(etcdutl.contains(&"/var/lib/etcd/restore-main-x-r1.db".to_string()));
        assert!(etcdutl.contains(&"--data-dir=/var/lib/etcd/restore-main-x-r1".to_string()));
        let labels = pod.metadata.labels.expect("labels");
        assert!(!labels.contains_key(crate::api::identity::NAME_LABEL));
    }

    #[test]
    fn a_backup_restore_fetches_checks_the_hash_and_replays_with_the_key() {
        let mut cluster = EtcdCluster::new("main", crate::api::EtcdClusterSpec::default());
        cluster.metadata.namespace = Some("ns".into());
        cluster.metadata.uid = Some("uid".into());
        let addressing = MemberAddressing::new("main", "ns");
        let source: BackupSource = serde_json::from_value(serde_json::json!({
            "destination": {
                "s3": { "bucket": "b", "credentialsSecret": "s3" },
                "encryption": { "secretName": "backup-key" },
            },
            "clusterName": "old",
        }))
        .expect("source");
        let pod = restore_pod(&cluster, &addressing, "op:1", 0, "main-x", Some(source));
        let spec = pod.spec.expect("spec");
        let init = spec.init_containers.expect("init");
        let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["fetch-backup", "replay", "etcdutl"]);
        let args = |i: usize| init[i].args.clone().expect("args");
        let key = format!("--encryption-key-file={ENCRYPTION_MOUNT}/encryptionKey");
        assert!(args(0).contains(&key) && args(1).contains(&key));
        // The replay restores the full backup itself (only when there are
        // segments) with the member's peer URL; the bump comes after the
        // replay, on the replayed snapshot.
        assert!(args(1).contains(&format!("--peer-url={}", addressing.peer_url(0))));
        assert!(args(2).contains(&format!("--bump-revision={REVISION_BUMP}")));
        assert!(args(2).contains(&"--mark-compacted".to_string()));
        assert!(!args(2).contains(&"--skip-hash-check".to_string()));
        assert!(args(0).contains(&"--backup-namespace=ns".to_string()));
        assert!(args(0).contains(&"--backup-cluster=old".to_string()));
        assert!(args(0).contains(&format!("--credentials-dir={CREDENTIALS_MOUNT}")));
        let mounted = |i: usize, path: &str| {
            init[i]
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.mount_path == path)
        };
        assert!(mounted(0, ENCRYPTION_MOUNT) && mounted(1, ENCRYPTION_MOUNT));
        assert!(mounted(0, CREDENTIALS_MOUNT) && !mounted(1, CREDENTIALS_MOUNT));
        let volumes: Vec<String> = spec
            .volumes
            .expect("volumes")
            .into_iter()
            .map(|v| v.name)
            .collect();
        assert_eq!(volumes, ["data", "tools", "credentials", "encryption"]);
    }
}
