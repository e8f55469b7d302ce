//! The lab an end-to-end test or bench runs on: a healthy lab that is up,
//! or one of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use etcd_lab::{Lab, LabOptions};

use crate::TestResult;

/// The node-monitor grace period of a lab of our own: nodes turn NotReady
/// 20 s after their last heartbeat instead of 50 s (shorter tests).
pub const NODE_MONITOR_GRACE: &str = "20s";

/// The nodes of a lab of our own unless a scenario asks for more.
pub const DEFAULT_NODES: u8 = 3;

/// A healthy lab that is up (the current one, or one left in `own_dir`)
/// with at least `nodes` nodes, or a new one of `nodes` nodes in
/// `own_dir`. Returns whether it is ours. The lab's nodes run the operator
/// binary found beside the `etcd-lab` binary, which must sit next to
/// `operator` (`cargo build -p etcd-lab -p etcd-operator`).
pub async fn reuse_or_start(own_dir: &str, operator: &Path, nodes: u8) -> TestResult<(Lab, bool)> {
    for dir in [None, Some(PathBuf::from(own_dir))] {
        if let Ok(lab) = Lab::open(dir)
            && lab.status().await.is_healthy()
        {
            let has = lab.config().nodes.len();
            if has < usize::from(nodes) {
                return Err(format!(
                    "the lab at {} has {has} nodes, this needs {nodes}: take it down first (`etcd-lab down`)",
                    lab.paths().root().display()
                )
                .into());
            }
            refuse_a_lab_with_an_installed_operator(&lab).await?;
            eprintln!("reusing the lab at {}", lab.paths().root().display());
            return Ok((lab, false));
        }
    }
    let etcd_lab = operator.with_file_name("etcd-lab");
    if !etcd_lab.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build -p etcd-lab`",
            etcd_lab.display()
        )
        .into());
    }
    let options = LabOptions {
        nodes,
        lab_dir: Some(PathBuf::from(own_dir)),
        etcd_lab_binary: Some(etcd_lab),
        controller_manager_flags: BTreeMap::from([(
            "node-monitor-grace-period".to_owned(),
            NODE_MONITOR_GRACE.to_owned(),
        )]),
        ..LabOptions::default()
    };
    let started = Instant::now();
    let lab = Lab::up(options).await?;
    eprintln!("lab up in {:?}", started.elapsed());
    Ok((lab, true))
}

/// The namespace `kubectl apply -k deploy/` installs the operator in.
const INSTALLED_OPERATOR_NAMESPACE: &str = "etcd-operator-system";

/// A lab that runs the operator as installed from `deploy/` (as `make demo`
/// leaves it) is not reused: that operator watches every namespace and
/// would act on the test's clusters beside the operator under test.
async fn refuse_a_lab_with_an_installed_operator(lab: &Lab) -> TestResult {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(lab.kube_client().await?);
    if namespaces
        .get_opt(INSTALLED_OPERATOR_NAMESPACE)
        .await?
        .is_some()
    {
        return Err(format!(
            "the lab at {} runs the operator installed from deploy/ (namespace {INSTALLED_OPERATOR_NAMESPACE}), which would act on the test's clusters too: take it down first (`etcd-lab down`)",
            lab.paths().root().display()
        )
        .into());
    }
    Ok(())
}
