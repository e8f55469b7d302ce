//! The probe loop of one run of an app container, its results sent to the
//! worker as inputs tagged with the run.

use std::net::Ipv4Addr;

use tokio::sync::mpsc;

use super::Worker;
use crate::pod::lifecycle::{ContainerRef, Input};
use crate::probe::{ExecTarget, ProbeTarget, run_probes};

impl Worker {
    /// Starts the probes of run `run` of `container` (replacing those of an
    /// earlier run).
    pub(super) fn run_probes(&mut self, container: ContainerRef, run: u64) {
        let (Some(spec), Some(process)) = (
            self.container(container).cloned(),
            self.processes.get(&container),
        ) else {
            return;
        };
        let runner_spec = process.spec.clone();
        let containers_dir = self.dir.join("containers");
        let target = ProbeTarget {
            pod_ip: self
                .sandbox
                .as_ref()
                .map_or(Ipv4Addr::UNSPECIFIED, |s| s.ip),
            exec: ExecTarget {
                lab_binary: self.ctx.config.etcd_lab_binary.clone(),
                spec: runner_spec,
                spec_path: containers_dir.join(format!("{}.probe.json", spec.name)),
            },
            container: spec,
        };
        let events = self.events_tx.clone();
        let (ptx, mut prx) = mpsc::channel(8);
        let handle = tokio::spawn(async move {
            let forward = async {
                while let Some(event) = prx.recv().await {
                    let input = Input::Probe {
                        container,
                        run,
                        event,
                    };
                    if events.send(input).await.is_err() {
                        break;
                    }
                }
            };
            tokio::join!(run_probes(target, ptx), forward);
        });
        if let Some(earlier) = self.probes.insert(container, handle) {
            earlier.abort();
        }
    }
}
