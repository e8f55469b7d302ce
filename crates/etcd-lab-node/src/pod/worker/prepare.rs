//! The pod's sandbox and volumes: prepared before the first container
//! starts; file volumes (service-account tokens expire, certificates are
//! renewed) refreshed while the pod runs.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::Worker;
use super::error::PrepareError;
use crate::pod::sandbox;
use crate::volume::{self, VolumeContext};

/// File volumes (Secrets, ConfigMaps, projected tokens) are written again
/// this often while the pod runs: the kubelet's default sync period, so a
/// renewed certificate in a Secret reaches running containers within a
/// minute, as on a real node.
const VOLUME_REFRESH: Duration = Duration::from_secs(60);

impl Worker {
    /// Records the attachable volumes the pod waits for, prepares its
    /// volumes and creates its sandbox; returns the pod's address.
    pub(super) async fn prepare(&mut self) -> Result<Ipv4Addr, PrepareError> {
        let attachable = volume::attachable_volumes(&self.volume_context(), &self.pod).await;
        self.ctx.set_volumes_in_use(&self.uid, attachable);
        let volumes = volume::prepare(&self.volume_context(), &self.pod).await?;
        self.ctx
            .set_volumes_in_use(&self.uid, volumes.in_use.clone());
        self.volumes = volumes;
        self.volumes_at = Some(Instant::now());
        let config = self.ctx.config.clone();
        let pod = self.pod.clone();
        let uid = self.uid.clone();
        let dir = self.dir.clone();
        let sandbox =
            tokio::task::spawn_blocking(move || sandbox::create(&config, &pod, &uid, &dir))
                .await??;
        tracing::info!(pod = %self.key, ip = %sandbox.ip, "sandbox ready");
        let ip = sandbox.ip;
        self.sandbox = Some(sandbox);
        Ok(ip)
    }

    /// Re-writes file volumes every [`VOLUME_REFRESH`] once they were prepared.
    pub(super) async fn refresh_volumes(&mut self) {
        if self.volumes_at.is_none_or(|t| t.elapsed() < VOLUME_REFRESH) {
            return;
        }
        match volume::refresh_files(&self.volume_context(), &self.pod).await {
            Ok(()) => self.volumes_at = Some(Instant::now()),
            Err(e) => tracing::warn!(pod = %self.key, "refreshing volumes: {e}"),
        }
    }

    fn volume_context(&self) -> VolumeContext<'_> {
        VolumeContext {
            client: &self.ctx.client,
            node_name: &self.ctx.config.node_name,
            pod_dir: &self.dir,
            lab_dir: &self.ctx.config.lab_dir,
            network_volumes_dir: &self.network_volumes_dir,
            ca_cert: &self.ctx.config.ca_cert,
        }
    }
}
