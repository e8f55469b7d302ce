//! End to end on the lab with the images users get: the operator installed
//! as `deploy/` installs it (its Deployment names
//! `ghcr.io/durable-etcd/etcd-operator:dev`) and a cluster on the default
//! etcd image (`gcr.io/etcd-development/etcd:v<version>`), both pulled by
//! the lab's nodes from the lab's registry, which holds the images of
//! `make image` (docs/images.md). The test fails when the lab runs without
//! images. Checked from outside each container, on its PID 1:
//!
//! - the operator's Pod reports the digest of the image `make image`
//!   wrote; its process is PID 1 of a PID namespace of its own, runs as
//!   65532, and is the image's `/usr/local/bin/etcd-operator`; in its root
//!   there is no shell, no C library and none of the node's devices, so
//!   nothing of the host is reachable;
//! - each member's init container `member-guard` ran from the operator's
//!   image and ended with 0; the `etcd` container ran the guard (its
//!   command) inside the etcd image, and its PID 1 is now that image's
//!   `/usr/local/bin/etcd`, in a root with no shell and no C library;
//! - a runbook's `kubectl exec <member> -c etcd -- etcdctl endpoint status`
//!   works with the image's etcdctl, and written keys read back.
//!
//! The durability scenarios (e2e_durability and the others) run on the
//! same images in `make test`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use test_kit::TestResult;
use test_kit::e2e::installed_operator::InstalledOperator;
use test_kit::e2e::{Harness, cluster_spec};

const CLUSTER: &str = "imaged";
const OPERATOR_IMAGE: &str = "ghcr.io/durable-etcd/etcd-operator:dev";
const GUARD_BINARY: &str = "/var/run/etcd-operator/etcd-operator";
/// Files that exist in a root holding a shell or the C library, or the
/// node's devices.
const HOST_ONLY: &[&str] = &[
    "bin/sh",
    "bin/bash",
    "usr/bin/sh",
    "lib64/ld-linux-x86-64.so.2",
    "lib/x86_64-linux-gnu/libc.so.6",
    "usr/lib/x86_64-linux-gnu/libc.so.6",
    // The node's devices: a container's /dev holds only the standard ones.
    "dev/loop-control",
    "dev/vda",
];

#[test]
fn the_operator_and_its_members_run_from_their_images() {
    test_kit::e2e::run("images", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    if h.lab.config().registry.is_none() {
        return Err("the lab runs without images: build them first (`IMAGE_PROFILE=debug make image`; make test does)".into());
    }
    let images = images_dir()?;
    h.stop_operator();
    let operator = InstalledOperator::install(
        &h.client,
        &format!("{}-operator", h.namespace),
        &h.namespace,
    )
    .await?;
    let outcome = checks(h, &images, &operator.namespace).await;
    if outcome.is_err() {
        eprintln!("the installed operator's log:\n{}", operator.logs().await);
        return outcome;
    }
    operator.uninstall().await
}

async fn checks(h: &Harness, images: &Path, operator_namespace: &str) -> TestResult {
    let operator_digest = digest_of(images, OPERATOR_IMAGE)?;
    let operator_pods: Api<Pod> = Api::namespaced(h.client.clone(), operator_namespace);
    let pod = operator_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=etcd-operator"))
        .await?
        .items
        .into_iter()
        .next()
        .ok_or("no operator Pod")?;
    let status = container_status(&pod, "operator", false)?;
    expect_image_id(
        &status,
        "ghcr.io/durable-etcd/etcd-operator",
        &operator_digest,
    )?;
    let init = init_process(&pod, "operator")?;
    expect_runs(&init, "usr/local/bin/etcd-operator")?;
    if uid_of(init.pid)? != 65532 {
        return Err(format!("the operator runs as uid {}, not 65532", uid_of(init.pid)?).into());
    }
    eprintln!(
        "operator: image {operator_digest}, PID 1 of its namespace (host pid {}), its image's root",
        init.pid
    );

    h.create_available(
        CLUSTER,
        cluster_spec(3, "lab-network"),
        Duration::from_secs(240),
    )
    .await?;
    h.write_keys("/images/", 100).await?;
    let cluster = h.status(CLUSTER).await?;
    let version = cluster
        .version
        .clone()
        .ok_or("the cluster's status names no version")?;
    let etcd_image = format!("gcr.io/etcd-development/etcd:v{version}");
    let etcd_digest = digest_of(images, &etcd_image)?;
    let mut members = 0;
    for pod in h.pods.list(&ListParams::default()).await?.items {
        if !pod.name_any().starts_with(CLUSTER) {
            continue;
        }
        let guard = container_status(&pod, "member-guard", true)?;
        expect_image_id(
            &guard,
            "ghcr.io/durable-etcd/etcd-operator",
            &operator_digest,
        )?;
        let exit = guard
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        if exit != Some(0) {
            return Err(format!("{}: member-guard ended with {exit:?}", pod.name_any()).into());
        }
        let etcd = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == "etcd"))
            .ok_or("no etcd container")?;
        if etcd.image.as_deref() != Some(etcd_image.as_str())
            || etcd
                .command
                .as_ref()
                .and_then(|c| c.first())
                .map(String::as_str)
                != Some(GUARD_BINARY)
        {
            return Err(format!(
                "{}: the etcd container runs {:?} from {:?}, expected the guard {GUARD_BINARY} in {etcd_image}",
                pod.name_any(),
                etcd.command,
                etcd.image
            )
            .into());
        }
        let status = container_status(&pod, "etcd", false)?;
        expect_image_id(&status, "gcr.io/etcd-development/etcd", &etcd_digest)?;
        let init = init_process(&pod, "etcd")?;
        expect_runs(&init, "usr/local/bin/etcd")?;
        members += 1;
    }
    if members != 3 {
        return Err(format!("{members} member Pods checked, expected 3").into());
    }
    eprintln!("members: the guard ran in {etcd_image} ({etcd_digest}) and started its etcd");

    let output = kubectl(
        h,
        &[
            "-n",
            &h.namespace,
            "exec",
            &format!("{CLUSTER}-0"),
            "-c",
            "etcd",
            "--",
            "etcdctl",
            "endpoint",
            "status",
            "-w",
            "table",
        ],
    )
    .await?;
    if !output.contains("127.0.0.1:2379") || !output.contains(&version) {
        return Err(format!("etcdctl endpoint status in the member printed:\n{output}").into());
    }
    eprintln!("kubectl exec {CLUSTER}-0 -c etcd -- etcdctl endpoint status:\n{output}");
    h.check_keys("/images/", 100).await
}

/// The digest of the image `reference` in the images of `make image`.
fn digest_of(images: &Path, reference: &str) -> TestResult<String> {
    let listed = etcd_lab::registry::read_image_list(images)?
        .ok_or_else(|| format!("no {}/images.tsv", images.display()))?;
    let image = listed
        .iter()
        .find(|i| i.reference == reference)
        .ok_or_else(|| format!("{reference} is not among the built images"))?;
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(image.layout.join("index.json"))?)?;
    index["manifests"][0]["digest"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{}: no manifest digest", image.layout.display()).into())
}

fn images_dir() -> TestResult<PathBuf> {
    let etcd_lab = Path::new(env!("CARGO_BIN_EXE_etcd-operator")).with_file_name("etcd-lab");
    etcd_lab::registry::default_images_dir(&etcd_lab).ok_or_else(|| "no images directory".into())
}

fn container_status(pod: &Pod, name: &str, init: bool) -> TestResult<ContainerStatus> {
    let status = pod.status.as_ref().ok_or("a Pod without status")?;
    let list = if init {
        status.init_container_statuses.as_ref()
    } else {
        status.container_statuses.as_ref()
    };
    list.and_then(|l| l.iter().find(|s| s.name == name).cloned())
        .ok_or_else(|| format!("{}: no status of container {name}", pod.name_any()).into())
}

fn expect_image_id(status: &ContainerStatus, name: &str, digest: &str) -> TestResult {
    let expected = format!("{name}@{digest}");
    if status.image_id != expected {
        return Err(format!(
            "container {} reports imageID {:?}, expected {expected:?} (the image make image built)",
            status.name, status.image_id
        )
        .into());
    }
    Ok(())
}

/// PID 1 of a container's PID namespace, seen from the host.
struct InitProcess {
    pid: i32,
    root: PathBuf,
}

fn init_process(pod: &Pod, container: &str) -> TestResult<InitProcess> {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .ok_or("an unscheduled Pod")?;
    let uid = pod.uid().ok_or("a Pod without UID")?;
    let root = etcd_lab::cgroup::detect_root()?;
    let group = etcd_lab::cgroup::NodeCgroups::new(&root, &node).container(&uid, container);
    let procs = std::fs::read_to_string(group.join("cgroup.procs"))?;
    for pid in procs
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let nspid: Vec<&str> = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        if nspid.len() == 2 && nspid[1] == "1" {
            return Ok(InitProcess {
                pid,
                root: PathBuf::from(format!("/proc/{pid}/root")),
            });
        }
    }
    Err(format!(
        "{}/{container}: no process is PID 1 of a PID namespace of its own (cgroup {}: {procs:?})",
        pod.name_any(),
        group.display()
    )
    .into())
}

/// The process runs `binary` of its root, and its root has no shell and
/// no C library.
fn expect_runs(init: &InitProcess, binary: &str) -> TestResult {
    let running = std::fs::metadata(format!("/proc/{}/exe", init.pid))?;
    let in_root = std::fs::metadata(init.root.join(binary))?;
    if (running.dev(), running.ino()) != (in_root.dev(), in_root.ino()) {
        return Err(format!("pid {} does not run /{binary} of its root", init.pid).into());
    }
    for file in HOST_ONLY {
        if init.root.join(file).exists() {
            return Err(format!(
                "pid {}: /{file} is reachable in the container's root",
                init.pid
            )
            .into());
        }
    }
    Ok(())
}

fn uid_of(pid: i32) -> TestResult<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|u| u.parse().ok())
        .ok_or_else(|| format!("pid {pid}: no Uid line").into())
}

async fn kubectl(h: &Harness, args: &[&str]) -> TestResult<String> {
    let kubectl = etcd_lab::upstream::Binaries::locate()?.kube("kubectl");
    let output = tokio::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(h.lab.paths().kubeconfig())
        .args(args)
        .output()
        .await?;
    if !output.status.success() {
        return Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
