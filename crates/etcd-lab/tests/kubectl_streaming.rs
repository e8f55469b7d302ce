//! `kubectl exec` and `kubectl logs -f` with the real kubectl, through the
//! real API server, to the node agent's kubelet API: the Node declares
//! `ExtendWebSocketsToKubelet`, so the API server proxies kubectl's
//! WebSocket (`v5.channel.k8s.io`) to the node, which runs the command in
//! the container. Needs root and the upstream binaries.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use etcd_lab::Lab;
use etcd_lab::upstream::Binaries;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use test_kit::lab_test::LabTest;
use test_kit::poll::wait_until;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const LAB_DIR: &str = "/var/lib/etcd-lab-kubectl-streaming-test";
const POD: &str = "streamer";
/// Bounds every wait so that a broken stream fails the test instead of
/// hanging it (not a timing assertion).
const STREAM_TIMEOUT: Duration = Duration::from_secs(60);

/// `main` writes `started`, then `after-follow` once `/signal/go` exists,
/// then `stopping` and exits once `/signal/stop` exists (the files are
/// created with `kubectl exec` in the shared emptyDir; `main` waits a second
/// before it exits, so that the `kubectl exec` which created the file has
/// ended: a container's end kills every process still in it, as a runtime
/// does). `done` exits at once
/// and is not restarted: a container of the pod that is not running.
fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": POD},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "signal", "emptyDir": {}}],
            "containers": [
                {
                    "name": "main",
                    "image": "lab.local/host",
                    "command": ["sh", "-c",
                        "echo started; \
                         while [ ! -e /signal/go ]; do sleep 0.2; done; echo after-follow; \
                         while [ ! -e /signal/stop ]; do sleep 0.2; done; sleep 1; echo stopping"],
                    "volumeMounts": [{"name": "signal", "mountPath": "/signal"}]
                },
                {"name": "done", "image": "lab.local/host", "command": ["true"]}
            ]
        }
    }))
    .expect("pod")
}

#[test]
fn kubectl_exec_and_logs_follow_reach_the_container() {
    let test = LabTest::start(LAB_DIR, env!("CARGO_BIN_EXE_etcd-lab"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let lab = Lab::up(test.options()).await.expect("etcd-lab up");
        let client = lab.kube_client().await.expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        pods.create(&PostParams::default(), &pod())
            .await
            .expect("create pod");
        wait_until(
            "main running, done exited",
            Duration::from_secs(120),
            || {
                let pods = pods.clone();
                async move {
                    let pod = pods.get(POD).await.ok()?;
                    let statuses = pod.status?.container_statuses?;
                    let state = |name: &str| {
                        statuses
                            .iter()
                            .find(|s| s.name == name)
                            .and_then(|s| s.state.clone())
                    };
                    (state("main")?.running.is_some() && state("done")?.terminated.is_some())
                        .then_some(())
                }
            },
        )
        .await;
        let node_name = pods
            .get(POD)
            .await
            .expect("pod")
            .spec
            .and_then(|s| s.node_name)
            .expect("scheduled");
        let node = Api::<Node>::all(client)
            .get(&node_name)
            .await
            .expect("node");
        assert!(
            node.status
                .and_then(|s| s.declared_features)
                .unwrap_or_default()
                .contains(&"ExtendWebSocketsToKubelet".to_owned()),
            "{node_name} declares ExtendWebSocketsToKubelet"
        );

        let kubectl = Kubectl::new(&lab);
        check_exec(&kubectl).await;
        check_port_forward_is_refused(&kubectl).await;
        check_logs_follow(&kubectl).await;
    });
    drop(runtime);
    test.down_leaves_nothing();
}

async fn check_exec(kubectl: &Kubectl) {
    // The command runs in the pod's UTS namespace: the pod's hostname.
    let hostname = kubectl
        .run(
            &[
                "exec",
                POD,
                "-c",
                "main",
                "--",
                "cat",
                "/proc/sys/kernel/hostname",
            ],
            None,
        )
        .await;
    assert_success(&hostname, "exec cat hostname");
    assert_eq!(
        String::from_utf8_lossy(&hostname.stdout),
        format!("{POD}\n")
    );

    // stdout and stderr apart, and the exit code kubectl exits with.
    let failing = kubectl
        .run(
            &[
                "exec",
                POD,
                "-c",
                "main",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
            None,
        )
        .await;
    assert_eq!(String::from_utf8_lossy(&failing.stdout), "out\n");
    let stderr = String::from_utf8_lossy(&failing.stderr);
    println!("kubectl exec -- sh -c '... exit 3': stderr {stderr:?}");
    assert!(stderr.starts_with("err\n"), "stderr: {stderr}");
    assert_eq!(failing.status.code(), Some(3), "stderr: {stderr}");

    // stdin, to its end.
    let echoed = kubectl
        .run(
            &["exec", "-i", POD, "-c", "main", "--", "cat"],
            Some(b"hi\n"),
        )
        .await;
    assert_success(&echoed, "exec -i cat");
    assert_eq!(String::from_utf8_lossy(&echoed.stdout), "hi\n");

    // A container the pod does not have: refused by the API server.
    let missing = kubectl
        .run(&["exec", POD, "-c", "missing", "--", "true"], None)
        .await;
    let stderr = String::from_utf8_lossy(&missing.stderr);
    println!("kubectl exec -c missing: {}", stderr.trim());
    assert!(!missing.status.success(), "exec into missing: {stderr}");
    assert!(
        stderr.contains("container missing is not valid for pod streamer"),
        "stderr: {stderr}"
    );

    // A container of the pod that is not running: the node agent answers
    // as a kubelet does.
    let exited = kubectl
        .run(&["exec", POD, "-c", "done", "--", "true"], None)
        .await;
    let stderr = String::from_utf8_lossy(&exited.stderr);
    println!("kubectl exec -c done: {}", stderr.trim());
    assert!(!exited.status.success(), "exec into done: {stderr}");
    assert!(
        stderr.contains(r#"container not found ("done")"#),
        "stderr: {stderr}"
    );
}

/// Port-forward is not served (it needs SPDY): kubectl says so.
async fn check_port_forward_is_refused(kubectl: &Kubectl) {
    let forward = kubectl
        .run(&["port-forward", &format!("pod/{POD}"), "18080:80"], None)
        .await;
    let stderr = String::from_utf8_lossy(&forward.stderr);
    println!("kubectl port-forward: {}", stderr.trim());
    assert!(!forward.status.success(), "port-forward: {stderr}");
    assert!(
        stderr.contains("port-forward (SPDY) is not served by etcd-lab's node agent"),
        "stderr: {stderr}"
    );
}

/// `kubectl logs -f` prints what the container writes after the follow
/// started, and ends when the container ends.
async fn check_logs_follow(kubectl: &Kubectl) {
    let mut follow = kubectl
        .command(&["logs", "-f", POD, "-c", "main"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl logs -f");
    let mut lines = BufReader::new(follow.stdout.take().expect("stdout")).lines();
    let mut next_line = async || {
        tokio::time::timeout(STREAM_TIMEOUT, lines.next_line())
            .await
            .expect("a line of kubectl logs -f in time")
            .expect("read kubectl logs -f")
    };
    assert_eq!(next_line().await.as_deref(), Some("started"));
    signal(kubectl, "go").await;
    assert_eq!(next_line().await.as_deref(), Some("after-follow"));
    signal(kubectl, "stop").await;
    assert_eq!(next_line().await.as_deref(), Some("stopping"));
    assert_eq!(
        next_line().await,
        None,
        "the follow ends with the container"
    );
    let status = tokio::time::timeout(STREAM_TIMEOUT, follow.wait())
        .await
        .expect("kubectl logs -f exits")
        .expect("wait");
    assert!(status.success(), "kubectl logs -f: {status}");
}

/// Creates `/signal/<name>` in the container with `kubectl exec`.
async fn signal(kubectl: &Kubectl, name: &str) {
    let path = format!("/signal/{name}");
    let touched = kubectl
        .run(&["exec", POD, "-c", "main", "--", "touch", &path], None)
        .await;
    assert_success(&touched, &format!("exec touch {path}"));
}

fn assert_success(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The lab's pinned kubectl with the lab's admin kubeconfig.
struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(lab: &Lab) -> Self {
        Self {
            binary: Binaries::locate()
                .expect("upstream binaries")
                .kube("kubectl"),
            kubeconfig: lab.kubeconfig_path(),
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .arg("--kubeconfig")
            .arg(Path::new(&self.kubeconfig))
            .args(args);
        command
    }

    /// Runs kubectl to its end, with `stdin` as its input (none when `None`).
    async fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut child = self
            .command(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run kubectl");
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input).await.expect("write kubectl's stdin");
            // Dropped: kubectl reads the end of its input.
        }
        tokio::time::timeout(STREAM_TIMEOUT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not end"))
            .expect("kubectl output")
    }
}
