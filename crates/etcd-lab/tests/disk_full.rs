//! `volume fill` and `volume unfill` make a real full disk: filled while a
//! pod has the volume mounted, the pod's non-root writes fail with
//! `ENOSPC` and work again once unfilled; filled (leaving 8Mi) while no pod
//! has it, the next pod's `df` shows 8Mi available, and the mount made for
//! the fill is gone. Needs root and the upstream binaries.

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_lab::Lab;
use etcd_lab::disk_full::FILL_FILE;
use etcd_lab_node::volume::disk::mountinfo;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use test_kit::lab_test::{LabTest, delete_pod_and_wait};
use test_kit::volume_fill::{fill_volume, unfill_volume};

const LAB_DIR: &str = "/var/lib/etcd-lab-disk-full-test";
const NS: &str = "default";
const CLAIM: &str = "data";
const MIB: u64 = 1 << 20;
/// The user the pods run as: not root, as etcd in a member pod.
const USER: u32 = 65532;

#[test]
fn a_filled_volume_refuses_non_root_writes_until_unfilled() {
    let test = LabTest::start(LAB_DIR, env!("CARGO_BIN_EXE_etcd-lab"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let lab = Lab::up(test.options()).await.expect("etcd-lab up");
        let client = lab.kube_client().await.expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, NS);
        create_claim(&claims).await;

        // A pod appends 4 KiB to its volume every 200 ms and logs each try.
        create_pod(&pods, "writer", WRITER).await;
        let before = wait_for_line(&lab, "writer", |line| {
            line.starts_with("write ") && line.ends_with(" ok")
        })
        .await;
        assert!(
            log(&lab, "writer").await.contains(&format!("uid {USER}\n")),
            "the writer runs as {USER}"
        );
        println!("before the fill: {before}");

        // Mounted by the pod: filled through that mount, nothing left.
        let filled = fill_volume(&lab, NS, CLAIM, 0).await.expect("fill");
        println!("filled {filled}");
        assert_eq!(filled.available, 0, "{filled}");
        assert!(filled.allocated > 32 * MIB, "{filled}");
        let filled_at = last_try(&log(&lab, "writer").await);
        let full = wait_for_line(&lab, "writer", |line| {
            try_number(line).is_some_and(|n| n > filled_at + 1)
                && line.contains("No space left on device")
        })
        .await;
        println!("after the fill: {full}");
        // Every try begun after the fill failed, not only the one we saw.
        let tries = log(&lab, "writer").await;
        let succeeded: Vec<&str> = tries
            .lines()
            .filter(|line| try_number(line).is_some_and(|n| n > filled_at + 1))
            .filter(|line| line.ends_with(" ok"))
            .collect();
        assert!(succeeded.is_empty(), "writes on a full disk: {succeeded:?}");

        let unfilled = unfill_volume(&lab, NS, CLAIM).await.expect("unfill");
        println!("unfilled {unfilled}");
        assert!(unfilled.freed >= filled.allocated, "{unfilled}");
        assert!(unfilled.available > 32 * MIB, "{unfilled}");
        let unfilled_at = last_try(&log(&lab, "writer").await);
        let again = wait_for_line(&lab, "writer", |line| {
            try_number(line).is_some_and(|n| n > unfilled_at + 1) && line.ends_with(" ok")
        })
        .await;
        println!("after the unfill: {again}");

        // No pod: the volume is mounted for the fill and released after.
        delete_pod_and_wait(&pods, "writer").await;
        let dir = lab.volume_dir(NS, CLAIM).await.expect("volume dir");
        assert!(!mounted(&dir), "no pod, no mount");
        let cli = test.cli(&["volume", "fill", &format!("{NS}/{CLAIM}"), "--leave", "8Mi"]);
        let out = String::from_utf8_lossy(&cli.stdout);
        assert!(
            cli.status.success(),
            "volume fill: {out}{}",
            String::from_utf8_lossy(&cli.stderr)
        );
        println!("{}", out.trim());
        assert!(
            out.contains(FILL_FILE) && out.contains(&format!(" {} bytes available", 8 * MIB)),
            "volume fill reports the fill file and 8Mi left: {out}"
        );
        assert!(!mounted(&dir), "the fill's own mount is released");

        // The next pod sees what the fill left.
        create_pod(&pods, "reader", READER).await;
        let seen = wait_for_line(&lab, "reader", |line| line.starts_with("available ")).await;
        let seen: u64 = seen["available ".len()..].parse().expect("df figure");
        assert!(
            seen <= 8 * MIB && seen + MIB >= 8 * MIB,
            "the pod sees {seen} bytes available, not 8Mi"
        );
        let cli = test.cli(&["volume", "unfill", &format!("{NS}/{CLAIM}")]);
        assert!(
            cli.status.success(),
            "volume unfill: {}",
            String::from_utf8_lossy(&cli.stderr)
        );
        println!("{}", String::from_utf8_lossy(&cli.stdout).trim());
        assert!(!dir.join(FILL_FILE).exists(), "the fill file is gone");
    });
    drop(runtime);
    test.down_leaves_nothing();
}

/// Appends 4 KiB with fsync every 200 ms (appends only: a freed block
/// would make room for the next try); logs `write N ok` or
/// `write N failed: <dd's error>`.
const WRITER: &str = "echo \"uid $(id -u)\"; i=0; while true; do i=$((i+1)); \
    if dd if=/dev/zero of=/data/appended bs=4096 count=1 oflag=append conv=notrunc,fsync 2>/tmp/dd.err; \
    then echo \"write $i ok\"; else echo \"write $i failed: $(head -n 1 /tmp/dd.err)\"; fi; \
    sleep 0.2; done";

/// Logs what df shows available on the volume.
const READER: &str = "set -- $(df -P -B1 /data | tail -n 1); echo \"available $4\"; sleep 3600";

async fn create_claim(claims: &Api<PersistentVolumeClaim>) {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": CLAIM},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "lab-network",
                 "resources": {"requests": {"storage": "64Mi"}}}
    }))
    .expect("claim");
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("create claim");
}

async fn create_pod(pods: &Api<Pod>, name: &str, script: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsUser": USER, "runAsGroup": USER, "fsGroup": USER},
            "containers": [{
                "name": "main",
                "image": "lab.local/host",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": CLAIM}}]
        }
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// The pod's log so far (empty before it has one).
async fn log(lab: &Lab, pod: &str) -> String {
    match etcd_lab::logs::container_log(lab, NS, pod, None).await {
        Ok(path) => std::fs::read_to_string(path).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Waits for a line of the pod's log that `matches`; returns it.
async fn wait_for_line(lab: &Lab, pod: &str, matches: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let text = log(lab, pod).await;
        if let Some(line) = text.lines().find(|line| matches(line)) {
            return line.to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no awaited line in the log of {pod} after 90 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The number of a `write N ...` line.
fn try_number(line: &str) -> Option<u64> {
    line.strip_prefix("write ")?.split(' ').next()?.parse().ok()
}

/// The number of the last try logged (0 before the first).
fn last_try(log: &str) -> u64 {
    log.lines().filter_map(try_number).max().unwrap_or(0)
}

/// Whether the volume's own mount is in place.
fn mounted(dir: &Path) -> bool {
    mountinfo::at(&mountinfo::read().expect("mountinfo"), dir).is_some()
}
