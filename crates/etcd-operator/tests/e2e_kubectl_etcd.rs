//! End to end on the lab: the `kubectl etcd` plugin as a person types it,
//! with the lab's kubeconfig and `-n <namespace>`. `status` shows a
//! 3-member cluster healthy (text, and `-o json` parsed); `pause` and
//! `resume` flip `spec.paused`; `approve-recovery` refuses while there is
//! nothing to approve; `backup now --pvc --wait` takes a full backup onto a
//! claim. Then the volumes of two members are wiped (their etcd killed, as
//! in `e2e_restore_survivor`): `status` shows the approval needed,
//! `approve-recovery` without `--yes` refuses on a stdin that is no
//! terminal, with `--yes` it writes exactly the approval the
//! `MajorityDataLost` condition asks for, and the cluster comes back
//! Available with every key the survivor held. Meanwhile `restore --wait`
//! creates a new cluster from the backup, which holds every key too.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use etcd_operator::api::{BackupPhase, EtcdBackup};
use kube::Api;
use serde_json::Value;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec, etcd_at, key, value};
use test_kit::survivor::{approval, newest_survivor};

const NAME: &str = "plugin";
const PREFIX: &str = "/plugin/";
const KEYS: usize = 200;
/// The claim the backup goes to, the backup, and the cluster restored from it.
const CLAIM: &str = "etcd-backups";
const BACKUP: &str = "plugin-now";
const COPY: &str = "plugin-copy";

#[test]
fn a_person_runs_the_cluster_and_approves_a_restore_with_kubectl_etcd() {
    test_kit::e2e::run("kubectl-etcd", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// The plugin built beside the operator (`cargo build --workspace`).
fn plugin() -> TestResult<PathBuf> {
    let path = Path::new(env!("CARGO_BIN_EXE_etcd-operator")).with_file_name("kubectl-etcd");
    if !path.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build -p kubectl-etcd`",
            path.display()
        )
        .into());
    }
    Ok(path)
}

/// What one run of the plugin printed.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// `kubectl etcd <args> -n <namespace>` with the lab's kubeconfig, stdin
/// not a terminal.
async fn kubectl_etcd(h: &Harness, args: &[&str]) -> TestResult<Run> {
    let output = tokio::process::Command::new(plugin()?)
        .args(args)
        .args(["-n", &h.namespace])
        .env("KUBECONFIG", h.lab.kubeconfig_path())
        .stdin(Stdio::null())
        .output()
        .await?;
    let run = Run {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    eprintln!(
        "$ kubectl etcd {} -> {}\n{}{}",
        args.join(" "),
        if run.ok { "ok" } else { "failed" },
        run.stdout,
        run.stderr
    );
    Ok(run)
}

async fn succeeds(h: &Harness, args: &[&str]) -> TestResult<String> {
    let run = kubectl_etcd(h, args).await?;
    if !run.ok {
        return Err(format!("kubectl etcd {} failed: {}", args.join(" "), run.stderr).into());
    }
    Ok(run.stdout)
}

/// Fails unless the run failed with an error that says what to do next.
fn refused(run: &Run, what: &str, says: &str) -> TestResult {
    if run.ok || !run.stderr.contains("next: ") || !run.stderr.contains(says) {
        return Err(format!(
            "{what}: expected a refusal saying {says:?} and a next step, got ok={} stderr {}",
            run.ok, run.stderr
        )
        .into());
    }
    Ok(())
}

async fn scenario(h: &mut Harness) -> TestResult {
    let started = Instant::now();
    h.available_with_keys(NAME, cluster_spec(3, "lab-network"), PREFIX, KEYS)
        .await?;

    // status, as text and as JSON.
    let text = succeeds(h, &["status", NAME]).await?;
    let healthy_rows = text.lines().filter(|l| l.contains(" healthy ")).count();
    if !text.contains("3/3 members ready") || healthy_rows != 3 {
        return Err(format!("status does not show 3 healthy members:\n{text}").into());
    }
    let report: Value = serde_json::from_str(&succeeds(h, &["status", NAME, "-o", "json"]).await?)?;
    let members = report["members"]
        .as_array()
        .ok_or("no members in the JSON")?;
    if members.len() != 3
        || !members.iter().all(|m| m["healthy"] == true)
        || members.iter().filter(|m| m["leader"] == true).count() != 1
        || report["readyMembers"] != 3
        || report["recovery"]["state"] != "None"
    {
        return Err(format!("the JSON status is not 3 healthy members: {report:#}").into());
    }

    // pause and resume flip spec.paused.
    succeeds(h, &["pause", NAME]).await?;
    if !h.clusters.get(NAME).await?.spec.paused {
        return Err("pause did not set spec.paused".into());
    }
    succeeds(h, &["resume", NAME]).await?;
    if h.clusters.get(NAME).await?.spec.paused {
        return Err("resume did not clear spec.paused".into());
    }

    // Nothing to approve on a healthy cluster.
    let run = kubectl_etcd(h, &["approve-recovery", NAME, "--yes"]).await?;
    refused(
        &run,
        "approve-recovery on a healthy cluster",
        "nothing to approve",
    )?;

    // A backup now, onto a claim.
    h.create_claim(CLAIM).await?;
    let out = succeeds(
        h,
        &[
            "backup",
            "now",
            NAME,
            "--pvc",
            CLAIM,
            "--name",
            BACKUP,
            "--wait",
            "--timeout",
            "3m",
        ],
    )
    .await?;
    let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    let backup = backups.get(BACKUP).await?.status.unwrap_or_default();
    if !out.contains(&format!("created etcdbackup {BACKUP}"))
        || backup.phase != Some(BackupPhase::Succeeded)
    {
        return Err(format!("backup now did not take a backup: {out} {backup:?}").into());
    }

    // A majority's data is lost.
    for ordinal in [1, 2] {
        let member = format!("{NAME}-{ordinal}");
        h.lab
            .volume_wipe(&h.namespace, &format!("data-{member}"))
            .await?;
        h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;
    }
    let message = h
        .wait_majority_data_lost(
            NAME,
            "the newest survivor and the approval it needs",
            Duration::from_secs(120),
            |m| newest_survivor(m).is_some() && approval(m).is_some(),
        )
        .await?;
    let asked = approval(&message).ok_or("no approval in the condition")?;
    let report: Value = serde_json::from_str(&succeeds(h, &["status", NAME, "-o", "json"]).await?)?;
    if report["recovery"]["state"] != "ApprovalNeeded"
        || report["recovery"]["approval"] != asked.recovery()
    {
        return Err(format!(
            "status does not show the approval the condition asks for ({:?}): {:#}",
            asked.recovery(),
            report["recovery"]
        )
        .into());
    }

    // Without --yes, nobody can confirm on a stdin that is no terminal.
    let run = kubectl_etcd(h, &["approve-recovery", NAME]).await?;
    refused(&run, "approve-recovery without --yes", "not a terminal")?;
    if h.clusters
        .get(NAME)
        .await?
        .spec
        .recovery
        .approved_survivor
        .is_some()
    {
        return Err("approve-recovery without --yes wrote an approval".into());
    }

    let approved = Instant::now();
    let out = succeeds(h, &["approve-recovery", NAME, "--yes"]).await?;
    let survivor = format!("{NAME}-0");
    if !out.contains(&format!(
        "restore from survivor {survivor} at revision {}",
        asked.revision
    )) || !out.contains(&format!("{NAME}-1, {NAME}-2"))
    {
        return Err(format!("approve-recovery does not show what it approves:\n{out}").into());
    }
    let recovery = h.clusters.get(NAME).await?.spec.recovery;
    if recovery.approved_incarnation.as_deref() != Some(asked.incarnation.as_str())
        || recovery.approved_survivor.as_deref() != Some(asked.survivor.as_str())
        || recovery.approved_revision != Some(asked.revision)
    {
        return Err(format!(
            "the approval written is not the one asked for: {recovery:?} vs {asked:?}"
        )
        .into());
    }

    // The restore in place, and a new cluster from the backup meanwhile.
    let h: &Harness = h;
    let restore = [
        "restore",
        COPY,
        "--from-cluster",
        NAME,
        "--pvc",
        CLAIM,
        "--replicas",
        "1",
        "--wait",
        "--timeout",
        "5m",
    ];
    let (in_place, copy) = tokio::join!(
        h.wait_available(NAME, 3, Duration::from_secs(300)),
        succeeds(h, &restore)
    );
    in_place?;
    eprintln!(
        "three voters again {:?} after the approval",
        approved.elapsed()
    );
    let copy = copy?;
    if !copy.contains(&format!("created etcdcluster {COPY}")) {
        return Err(format!("restore did not say what it created: {copy}").into());
    }
    let spec = h.clusters.get(COPY).await?.spec;
    let from = spec
        .bootstrap
        .and_then(|b| b.from_backup)
        .ok_or("the restored cluster has no spec.bootstrap.fromBackup")?;
    if from.cluster_name.as_deref() != Some(NAME)
        || from
            .destination
            .persistent_volume_claim
            .map(|c| c.claim_name)
            .as_deref()
            != Some(CLAIM)
    {
        return Err("the restored cluster does not name the backups of the claim".into());
    }
    check_keys_of(h, COPY).await?;
    let status = h.status(NAME).await?;
    if status.cluster_token.as_deref() == Some(asked.incarnation.as_str()) {
        return Err("the restore did not start a new incarnation".into());
    }
    check_keys_of(h, NAME).await?;
    let text = succeeds(h, &["status", NAME]).await?;
    if !text.contains("Recovery: no restore needed") {
        return Err(format!("status after the restore:\n{text}").into());
    }
    eprintln!("scenario took {:?}", started.elapsed());
    h.one_pod_per_member().await
}

/// Every key written is in cluster `cluster` (read from its own members:
/// the namespace also holds the claim's store and the other cluster).
async fn check_keys_of(h: &Harness, cluster: &str) -> TestResult {
    let endpoints = h
        .member_ips(cluster)
        .await?
        .iter()
        .map(|ip| format!("http://{ip}:2379"))
        .collect();
    let mut client = etcd_at(endpoints).await?;
    let found = client
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await?;
    for i in 0..KEYS {
        let held = found
            .kvs()
            .iter()
            .find(|kv| kv.key_str().ok() == Some(key(PREFIX, i).as_str()));
        if held.and_then(|kv| kv.value_str().ok()) != Some(value(i).as_str()) {
            return Err(format!("{cluster} lost {}", key(PREFIX, i)).into());
        }
    }
    eprintln!("{cluster} holds all {KEYS} keys");
    Ok(())
}
