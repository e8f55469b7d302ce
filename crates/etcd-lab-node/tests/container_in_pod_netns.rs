//! Real namespaces, real mounts, a real process: a pod namespace made by the
//! network module, a container run by `run_container` with a bind volume;
//! a container holds no other volume of the node. Needs root; skipped
//! (passes without doing anything) otherwise.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use etcd_lab_node::container::{BindMount, ContainerSpec, run_container};
use etcd_lab_node::network;
use etcd_lab_node::volume::disk::{self, loop_device};

const SPEC_ENV: &str = "ETCD_LAB_NODE_TEST_SPEC";

/// Both network tests touch the shared router namespace.
static NETWORK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Not a test on its own: the body of the child process `run_in_pod` spawns
/// (the test binary re-executed with this test's name), playing `etcd-lab run-container`.
#[test]
fn container_child() {
    if let Ok(spec) = std::env::var(SPEC_ENV) {
        let err = run_container(Path::new(&spec));
        eprintln!("run_container failed: {err:?}");
        std::process::exit(127);
    }
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

#[test]
fn runs_container_in_pod_namespace_with_bind_volume() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _guard = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
    let router_existed = Path::new("/run/netns").join(network::ROUTER_NETNS).exists();
    if !router_existed {
        network::setup_router().expect("router");
    }
    let node_index = 249;
    network::setup_node("itest", node_index).expect("node");
    let uid = "abcdef12-0000-4000-8000-000000000001";
    let ip = Ipv4Addr::new(10, 244, node_index, 10);
    let netns = network::setup_pod(uid, node_index, ip).expect("pod netns");

    let dir = tempfile::tempdir().expect("tempdir");
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).expect("volume");
    std::os::unix::fs::chown(&volume, Some(1000), Some(1000)).expect("chown");
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{ip} itest-pod\n")).expect("hosts");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.244.0.1\n").expect("resolv");
    let spec = ContainerSpec {
        netns,
        hostname: Some("itest-pod".into()),
        root_dir: dir.path().join("root"),
        cgroup: None,
        hosts_file: hosts,
        resolv_conf: resolv,
        image_files: vec![],
        image_root: None,
        read_only_root: false,
        mounts: vec![BindMount {
            source: volume.clone(),
            target: "/data".into(),
            read_only: false,
        }],
        argv: vec![
            "sh".into(),
            "-c".into(),
            "hostname > /data/out; id -u >> /data/out; cat /etc/hosts >> /data/out; \
             ip -4 -o addr show dev eth0 >> /data/out; pwd >> /data/out; \
             touch /usr/should-fail 2>/dev/null || echo usr-read-only >> /data/out"
                .into(),
        ],
        env: vec![("PATH".into(), "/usr/bin:/bin:/usr/sbin:/sbin".into())],
        working_dir: Some("/data".into()),
        uid: Some(1000),
        gid: Some(1000),
        supplementary_groups: vec![],
    };
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, serde_json::to_string(&spec).expect("json")).expect("spec");
    let status = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "container_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SPEC_ENV, &spec_path)
        .status()
        .expect("spawn");

    let out = std::fs::read_to_string(volume.join("out")).unwrap_or_default();
    network::teardown_pod(uid);
    network::teardown_node("itest", node_index);
    if !router_existed {
        network::teardown_all().expect("teardown");
    }
    assert!(
        status.success(),
        "container exited with {status}; output: {out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"itest-pod"), "{out}");
    assert_eq!(lines.get(1), Some(&"1000"), "{out}");
    assert!(
        out.contains("10.244.0.1") || out.contains(&format!("{ip} itest-pod")),
        "{out}"
    );
    assert!(out.contains(&format!("inet {ip}/24")), "{out}");
    assert!(out.contains("/data\n"), "{out}");
    assert!(out.contains("usr-read-only"), "{out}");
}

/// A volume mounted on the node when a container starts (another pod's) is
/// not held by that container: once the node unmounts it, its loop device
/// is free (no mount left in any namespace) while the container still
/// runs, so the volume can be checked and grown offline.
#[test]
fn a_container_holds_no_other_volume_of_the_node() {
    let tools = Command::new("losetup").arg("-V").output().is_ok()
        && Command::new("mkfs.ext4").arg("-V").output().is_ok();
    if !is_root() || !tools {
        eprintln!("skipped: needs root, util-linux and e2fsprogs");
        return;
    }
    let _guard = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
    let router_existed = Path::new("/run/netns").join(network::ROUTER_NETNS).exists();
    if !router_existed {
        network::setup_router().expect("router");
    }
    let node_index = 247;
    network::setup_node("itest3", node_index).expect("node");
    let uid = "abcdef12-0000-4000-8000-000000000003";
    let ip = Ipv4Addr::new(10, 244, node_index, 10);
    let netns = network::setup_pod(uid, node_index, ip).expect("pod netns");

    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("network-volumes/other");
    disk::ensure_image(&other, 8 << 20).expect("image");
    let other_pod = dir.path().join("other-pod");
    disk::mount_for_pod(&other, &other_pod).expect("mount the other pod's volume");
    let image = disk::image_of(&other);
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).expect("volume");
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").expect("hosts");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.244.0.1\n").expect("resolv");
    let spec = ContainerSpec {
        netns,
        hostname: None,
        root_dir: dir.path().join("root"),
        cgroup: None,
        hosts_file: hosts,
        resolv_conf: resolv,
        image_files: vec![],
        image_root: None,
        read_only_root: false,
        mounts: vec![BindMount {
            source: volume.clone(),
            target: "/data".into(),
            read_only: false,
        }],
        argv: vec![
            "sh".into(),
            "-c".into(),
            "echo started > /data/out; while [ ! -e /data/stop ]; do sleep 0.1; done".into(),
        ],
        env: vec![("PATH".into(), "/usr/bin:/bin:/usr/sbin:/sbin".into())],
        working_dir: None,
        uid: None,
        gid: None,
        supplementary_groups: vec![],
    };
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, serde_json::to_string(&spec).expect("json")).expect("spec");
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "container_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SPEC_ENV, &spec_path)
        .spawn()
        .expect("spawn");
    let started = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        volume.join("out").exists()
    });
    // The node lets go of the other pod's volume while the container runs.
    disk::unmount_pod_volumes(&other_pod).expect("unmount the other pod's volume");
    let devices = loop_device::of_file(&image);
    std::fs::write(volume.join("stop"), "").expect("stop");
    let status = child.wait().expect("wait");
    let _ = disk::release_all_under(dir.path());
    network::teardown_pod(uid);
    network::teardown_node("itest3", node_index);
    if !router_existed {
        network::teardown_all().expect("teardown");
    }
    assert!(started, "the container started");
    assert!(status.success(), "container exited with {status}");
    assert!(
        devices.is_empty(),
        "the other volume's loop device is released, not held by the container: {devices:?}"
    );
}

#[test]
fn teardown_all_leaves_nothing() {
    let _guard = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
    if !is_root() || Path::new("/run/netns").join(network::ROUTER_NETNS).exists() {
        eprintln!("skipped: needs root and no running lab");
        return;
    }
    network::setup_router().expect("router");
    network::setup_node("itest2", 248).expect("node");
    network::setup_client("default.svc.cluster.local").expect("client");
    network::partition_node(248, network::PartitionKind::Peers).expect("partition");
    network::heal_node(248).expect("heal");
    network::teardown_all().expect("teardown");
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    assert!(!String::from_utf8_lossy(&list.stdout).contains("etcdlab-"));
    let links = Command::new("ip")
        .args(["link", "show", "etcdlab0"])
        .output()
        .expect("ip");
    assert!(!links.status.success());
    assert!(!Path::new("/etc/netns/etcdlab-client").exists());
}
