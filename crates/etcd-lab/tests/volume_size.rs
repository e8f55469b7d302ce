//! Lab volumes are filesystems of the size their claim asks for, fill up at
//! that size, and grow the way Kubernetes' offline expansion grows them: a
//! grown claim gets a grown disk and volume at once and is marked
//! `FileSystemResizePending`; a running pod keeps the old size; a pod
//! started afterwards gets the grown filesystem, and the claim then reports
//! the new capacity. Both classes: `lab-network` (the second pod may run on
//! another node) and `lab-local`. Needs root and the upstream binaries.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_lab::Lab;
use etcd_lab_node::volume::disk::{self, ext4};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use test_kit::lab_test::{LabTest, delete_pod_and_wait};
use test_kit::poll::wait_until;

const LAB_DIR: &str = "/var/lib/etcd-lab-volume-size-test";
const NS: &str = "default";
const MIB: u64 = 1 << 20;
const CLASSES: [&str; 2] = ["lab-network", "lab-local"];

#[test]
fn volumes_have_their_size_fill_up_and_grow_offline() {
    let test = LabTest::start(LAB_DIR, env!("CARGO_BIN_EXE_etcd-lab"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let lab = Lab::up(test.options()).await.expect("etcd-lab up");
        let client = lab.kube_client().await.expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);

        // A 64Mi claim of each class, and a pod that fills it once.
        for class in CLASSES {
            create_claim(&claims, class, "64Mi").await;
            create_pod(&pods, &pod_name(class, 1), class, true).await;
        }
        for class in CLASSES {
            let pod = pod_name(class, 1);
            // The claim binds once the scheduler has placed its pod.
            wait_until(
                &format!("claim {class} bound"),
                Duration::from_secs(60),
                || async { lab.volume_dir(NS, class).await.ok().map(|_| ()) },
            )
            .await;
            let dir = lab.volume_dir(NS, class).await.expect("volume dir");
            let seen = seen_size(&dir, &pod).await;
            println!("{pod} sees {seen} bytes of 64Mi");
            assert!(
                in_size(seen, 64),
                "{pod}: df shows {seen} bytes, not a 64Mi filesystem"
            );
            assert_eq!(
                filesystem_bytes(&dir),
                64 * MIB,
                "{class}: the filesystem is 64Mi"
            );
            let full = std::fs::read_to_string(dir.join("fill.err")).expect("fill.err");
            assert!(
                full.contains("No space left on device"),
                "{class}: filling the volume ends in ENOSPC: {full}"
            );
            assert_eq!(claim_capacity(&claims, class).await, "64Mi");
        }

        // Grow both claims: the controller side is done at once.
        for class in CLASSES {
            let patch = json!({"spec": {"resources": {"requests": {"storage": "128Mi"}}}});
            claims
                .patch(class, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("grow the claim");
        }
        for class in CLASSES {
            wait_resize_pending(&client, &claims, class).await;
            let dir = lab.volume_dir(NS, class).await.expect("volume dir");
            let image = std::fs::metadata(disk::image_of(&dir)).expect("image");
            assert_eq!(image.len(), 128 * MIB, "{class}: the disk grew");
        }
        // The running pods keep the size they started with.
        tokio::time::sleep(Duration::from_secs(3)).await;
        for class in CLASSES {
            let dir = lab.volume_dir(NS, class).await.expect("volume dir");
            let pod = pod_name(class, 1);
            let seen = seen_size(&dir, &pod).await;
            assert!(in_size(seen, 64), "{pod} still sees 64Mi, not {seen} bytes");
            assert_eq!(
                filesystem_bytes(&dir),
                64 * MIB,
                "{class}: not grown while mounted"
            );
        }

        // Started again, a pod gets the grown filesystem with the data.
        for class in CLASSES {
            delete_pod_and_wait(&pods, &pod_name(class, 1)).await;
        }
        for class in CLASSES {
            create_pod(&pods, &pod_name(class, 2), class, false).await;
        }
        for class in CLASSES {
            let pod = pod_name(class, 2);
            let dir = lab.volume_dir(NS, class).await.expect("volume dir");
            let seen = seen_size(&dir, &pod).await;
            println!("{pod} sees {seen} bytes of 128Mi");
            assert!(
                in_size(seen, 128),
                "{pod}: df shows {seen} bytes, not 128Mi"
            );
            assert_eq!(
                filesystem_bytes(&dir),
                128 * MIB,
                "{class}: the filesystem grew"
            );
            let written = std::fs::read_to_string(dir.join("written-by")).expect("written-by");
            assert_eq!(
                written.lines().collect::<Vec<_>>(),
                [pod_name(class, 1), pod]
            );
            wait_until(
                &format!("{class}: the claim reports 128Mi"),
                Duration::from_secs(30),
                || async { resize_finished(&claims, class).await.then_some(()) },
            )
            .await;
        }

        // Deleted claims take their disks with them.
        let dirs: Vec<PathBuf> = {
            let mut dirs = Vec::new();
            for class in CLASSES {
                dirs.push(lab.volume_dir(NS, class).await.expect("volume dir"));
            }
            dirs
        };
        for class in CLASSES {
            delete_pod_and_wait(&pods, &pod_name(class, 2)).await;
            claims
                .delete(class, &DeleteParams::default())
                .await
                .expect("delete claim");
        }
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        wait_until("the volumes deleted", Duration::from_secs(60), || async {
            volumes
                .list(&Default::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        })
        .await;
        for dir in &dirs {
            assert!(!dir.exists(), "{} removed", dir.display());
            assert!(
                !disk::image_of(dir).exists(),
                "the disk of {} removed",
                dir.display()
            );
        }
        assert_eq!(
            etcd_lab::teardown::loop_devices_under(&test.lab_dir),
            Vec::<PathBuf>::new(),
            "no loop device left for deleted volumes"
        );
    });
    drop(runtime);
    test.down_leaves_nothing();
}

fn pod_name(class: &str, n: u32) -> String {
    format!("size-{}-{n}", class.trim_start_matches("lab-"))
}

/// A df figure of a filesystem of `mib` MiB: its total bytes less ext4's
/// own metadata (journal, inode tables: some 15% at these sizes).
fn in_size(seen: u64, mib: u64) -> bool {
    seen <= mib * MIB && seen * 10 >= mib * MIB * 8
}

/// The size of the volume's filesystem as its superblock says (every block).
fn filesystem_bytes(dir: &Path) -> u64 {
    ext4::read_superblock(&disk::image_of(dir))
        .expect("read superblock")
        .expect("an ext4 filesystem")
        .bytes()
}

/// A claim named after its class.
async fn create_claim(claims: &Api<PersistentVolumeClaim>, class: &str, size: &str) {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": class},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": size}}}
    }))
    .expect("claim");
    claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("create claim");
}

/// A pod that (when `fill`) fills the volume once, records its name in
/// `written-by`, then writes what `df` says of the volume every second to
/// `df-<pod>`.
async fn create_pod(pods: &Api<Pod>, name: &str, claim: &str, fill: bool) {
    let fill = if fill {
        "dd if=/dev/zero of=/data/fill bs=1M 2>/tmp/fill.err; rm -f /data/fill; cp /tmp/fill.err /data/fill.err; "
    } else {
        ""
    };
    let script = format!(
        "{fill}echo {name} >> /data/written-by; \
         while true; do df -P -B1 /data | tail -n 1 > /data/df-{name}.tmp; \
         mv /data/df-{name}.tmp /data/df-{name}; sleep 1; done"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main",
                "image": "lab.local/host",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        }
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// The total bytes `df` shows the pod for the volume (read through the
/// volume's directory on the host).
async fn seen_size(dir: &Path, pod: &str) -> u64 {
    let file = dir.join(format!("df-{pod}"));
    let mut size = 0;
    wait_until(
        &format!("{pod} reporting its volume's size"),
        Duration::from_secs(180),
        || {
            size = std::fs::read_to_string(&file)
                .ok()
                .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
                .unwrap_or_default();
            async move { (size > 0).then_some(()) }
        },
    )
    .await;
    size
}

async fn claim(claims: &Api<PersistentVolumeClaim>, name: &str) -> serde_json::Value {
    serde_json::to_value(claims.get(name).await.expect("claim")).expect("json")
}

async fn claim_capacity(claims: &Api<PersistentVolumeClaim>, name: &str) -> String {
    claim(claims, name).await["status"]["capacity"]["storage"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn has_condition(claim: &serde_json::Value, kind: &str) -> bool {
    claim["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind))
}

/// The volume is 128Mi and the claim waits for a pod to grow the filesystem.
async fn wait_resize_pending(
    client: &kube::Client,
    claims: &Api<PersistentVolumeClaim>,
    name: &str,
) {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    wait_until(
        &format!("{name}: volume grown, claim FileSystemResizePending"),
        Duration::from_secs(30),
        || async {
            let claim = claim(claims, name).await;
            let volume_name = claim["spec"]["volumeName"].as_str()?;
            let volume = serde_json::to_value(volumes.get(volume_name).await.ok()?).ok()?;
            let status = &claim["status"];
            (volume["spec"]["capacity"]["storage"] == "128Mi"
                && status["allocatedResources"]["storage"] == "128Mi"
                && status["allocatedResourceStatuses"]["storage"] == "NodeResizePending"
                && status["capacity"]["storage"] == "64Mi"
                && has_condition(&claim, "FileSystemResizePending"))
            .then_some(())
        },
    )
    .await;
}

/// The claim reports 128Mi and no resize is pending any more.
async fn resize_finished(claims: &Api<PersistentVolumeClaim>, name: &str) -> bool {
    let claim = claim(claims, name).await;
    claim["status"]["capacity"]["storage"] == "128Mi"
        && claim["status"]["allocatedResourceStatuses"]["storage"].is_null()
        && !has_condition(&claim, "FileSystemResizePending")
}
