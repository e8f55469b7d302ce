//! The cluster services process (`etcd-lab services`): storage provisioner
//! and attacher, cluster DNS, service proxy.

use std::path::Path;

use etcd_lab_services::ServicesConfig;

use crate::cgroup::LabCgroups;
use crate::error::{LabError, Result};
use crate::paths::LabPaths;
use crate::pki::write_file;
use crate::process::{self, ProcessSpec};

/// Process name, log and pid file name, and cgroup of the services process.
pub const NAME: &str = "services";

/// Writes its configuration and starts it in the host network namespace.
pub fn start(paths: &LabPaths, cgroups: &LabCgroups, etcd_lab_binary: &Path) -> Result<i32> {
    let config = ServicesConfig::new(paths.kubeconfig(), paths.root());
    let config_path = paths.configs().join("services.json");
    let text = serde_json::to_string_pretty(&config).map_err(|source| LabError::Json {
        path: config_path.clone(),
        source,
    })?;
    write_file(&config_path, text.as_bytes(), 0o644)?;
    let spec = ProcessSpec {
        name: NAME.to_owned(),
        program: etcd_lab_binary.to_owned(),
        args: vec!["services".into(), "--config".into(), config_path.into()],
        log: paths.log(NAME),
        pid_file: paths.pid_file(NAME),
        cgroup: NAME.to_owned(),
        netns: None,
        restart_on_exit: false,
    };
    process::spawn(&spec, cgroups)
}
