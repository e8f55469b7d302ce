//! Waiting for a cluster to serve again with every member, with progress.

use std::time::{Duration, Instant};

use etcd_operator_api::api::ConditionType;

use super::get_cluster;
use crate::connect::Target;
use crate::error::Failure;
use crate::progress::Progress;

/// How often a wait reads the object again.
pub const POLL: Duration = Duration::from_secs(2);

/// Waits until cluster `name` is Available with every member ready and no
/// restore in progress, for its current spec.
pub async fn cluster_ready(target: &Target, name: &str, timeout: Duration) -> Result<(), Failure> {
    let deadline = Instant::now() + timeout;
    let mut progress: Option<Progress> = None;
    loop {
        let cluster = get_cluster(target, name).await?;
        let status = cluster.status.clone().unwrap_or_default();
        let replicas = u64::try_from(cluster.spec.replicas).unwrap_or(0);
        let ready = u64::try_from(status.ready_members).unwrap_or(0);
        let restoring = status.restore.as_ref().filter(|r| r.in_progress());
        let current = status.observed_generation == cluster.metadata.generation;
        let phase = status
            .phase
            .map_or("no status yet".to_string(), |p| format!("{p:?}"));
        let doing = restoring.map(|r| r.step.clone()).or_else(|| {
            status
                .condition(ConditionType::Progressing)
                .filter(|c| c.status == "True")
                .map(|c| c.message.clone())
        });
        let message = format!(
            "{name}: {phase}, {ready}/{replicas} ready{}",
            doing.map(|d| format!(": {d}")).unwrap_or_default()
        );
        let bar = progress.get_or_insert_with(|| Progress::new(replicas));
        bar.update(ready.min(replicas), &message);
        if current
            && restoring.is_none()
            && status.is_true(ConditionType::Available)
            && ready >= replicas
        {
            if let Some(bar) = progress.take() {
                bar.finish(&format!(
                    "{name} is Available with {ready}/{replicas} members"
                ));
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Failure::new(
                format!("{name} is not Available after {timeout:?}: {message}"),
                format!(
                    "`kubectl etcd status {name}` shows what the operator waits for; run with a longer --timeout to keep waiting"
                ),
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}
