//! What a container runs with: its environment (from ConfigMaps, Secrets,
//! the pod and the `kubernetes` Service), its mounts, user and command, as
//! the runner's [`ContainerSpec`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use etcd_lab_common::IoContext;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Service};
use kube::Api;

use super::Worker;
use super::error::ConfigError;
use crate::container::{BindMount, ContainerSpec, DEFAULT_PATH};
use crate::image::ResolvedImage;
use crate::pod::dns::pod_hostname;
use crate::pod::env::{EnvInputs, KeyedObjects, container_env, expand, referenced_objects};

impl Worker {
    /// The runner's spec of `container` run from `image`.
    pub(super) async fn container_spec(
        &self,
        container: &Container,
        image: &ResolvedImage,
    ) -> Result<ContainerSpec, ConfigError> {
        let sandbox = self.sandbox.as_ref().ok_or(ConfigError::NoSandbox)?;
        let objects = self.keyed_objects(container).await;
        let kubernetes_service = self.kubernetes_service().await;
        let hostname = pod_hostname(&self.pod);
        let inputs = EnvInputs {
            pod: &self.pod,
            pod_ip: sandbox.ip,
            host_ip: self.ctx.config.node_ip,
            hostname: &hostname,
            kubernetes_service,
            objects: &objects,
        };
        let env = image
            .config
            .merge_env(container_env(container, &inputs)?, DEFAULT_PATH);
        let pod_sc = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref());
        let sc = container.security_context.as_ref();
        let to_u32 = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        // The image's USER where the pod sets none, as a runtime does.
        let (image_uid, image_gid) = image.config.uid_gid();
        let uid = to_u32(
            sc.and_then(|s| s.run_as_user)
                .or(pod_sc.and_then(|s| s.run_as_user)),
        )
        .or(image_uid);
        let gid = to_u32(
            sc.and_then(|s| s.run_as_group)
                .or(pod_sc.and_then(|s| s.run_as_group)),
        )
        .or(image_gid);
        let mut groups: Vec<u32> = pod_sc
            .and_then(|s| s.supplemental_groups.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|g| u32::try_from(g).ok())
            .collect();
        if let Some(fs) = to_u32(pod_sc.and_then(|s| s.fs_group)) {
            groups.push(fs);
        }
        let mut mounts = Vec::new();
        for m in container.volume_mounts.iter().flatten() {
            let base = self
                .volumes
                .paths
                .get(&m.name)
                .ok_or_else(|| ConfigError::UndefinedVolume(m.name.clone()))?;
            let source = match m.sub_path.as_deref() {
                Some(sub) if !sub.is_empty() => {
                    let p = base.join(sub);
                    std::fs::create_dir_all(&p)
                        .context(|| format!("create subPath {}", p.display()))?;
                    p
                }
                _ => base.clone(),
            };
            mounts.push(BindMount {
                source,
                target: PathBuf::from(&m.mount_path),
                read_only: m.read_only.unwrap_or(false),
            });
        }
        let vars: BTreeMap<String, String> = env.iter().cloned().collect();
        let argv = image.config.argv(
            container.command.as_deref().unwrap_or_default(),
            container.args.as_deref().unwrap_or_default(),
        );
        let argv: Vec<String> = argv.iter().map(|a| expand(a, &vars)).collect();
        if argv.is_empty() {
            return Err(ConfigError::NoCommand);
        }
        Ok(ContainerSpec {
            netns: sandbox.netns.clone(),
            hostname: Some(hostname),
            root_dir: self.dir.join("rootfs").join(&container.name),
            cgroup: Some(self.ctx.cgroups.container(&self.uid, &container.name)),
            hosts_file: sandbox.hosts_file.clone(),
            resolv_conf: sandbox.resolv_conf.clone(),
            image_files: image.files.clone(),
            image_root: image.root.clone(),
            read_only_root: sc.and_then(|s| s.read_only_root_filesystem) == Some(true),
            mounts,
            argv,
            env,
            working_dir: container
                .working_dir
                .clone()
                .or_else(|| image.config.working_dir.clone())
                .map(PathBuf::from),
            uid,
            gid,
            supplementary_groups: groups,
        })
    }

    /// Address and port of the `kubernetes` Service, for
    /// `KUBERNETES_SERVICE_HOST` and `_PORT`.
    async fn kubernetes_service(&self) -> Option<(String, i32)> {
        let svc = Api::<Service>::namespaced(self.ctx.client.clone(), "default")
            .get_opt("kubernetes")
            .await
            .ok()
            .flatten()?;
        let spec = svc.spec?;
        let ip = spec.cluster_ip?;
        let port = spec.ports?.first()?.port;
        Some((ip, port))
    }

    /// The ConfigMaps and Secrets `container` takes variables from; missing
    /// ones are left out (the environment says whether that is an error).
    async fn keyed_objects(&self, container: &Container) -> KeyedObjects {
        let ns = self
            .pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let (cms, secrets) = referenced_objects(&[container]);
        let mut out = KeyedObjects::default();
        for name in cms {
            if let Ok(Some(cm)) = Api::<ConfigMap>::namespaced(self.ctx.client.clone(), &ns)
                .get_opt(&name)
                .await
            {
                out.config_maps.insert(name, cm.data.unwrap_or_default());
            }
        }
        for name in secrets {
            if let Ok(Some(s)) = Api::<Secret>::namespaced(self.ctx.client.clone(), &ns)
                .get_opt(&name)
                .await
            {
                let data = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect();
                out.secrets.insert(name, data);
            }
        }
        out
    }
}
