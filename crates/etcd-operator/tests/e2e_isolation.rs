//! End to end on the lab: one `EtcdCluster` this operator cannot read never
//! stops the others.
//!
//! 1. A healthy one-member cluster becomes Available.
//! 2. The API server refuses a status apply carrying a resourceVersion that
//!    is no longer current, `force` or not: the precondition the operator's
//!    status writes carry (`reconcile/status.rs`) is kept by the server.
//! 3. The EtcdCluster CRD is replaced by a variant whose
//!    `spec.storage.retentionPolicy` accepts `Archive`, a value this
//!    operator's Rust type does not know, and an object with it is created.
//! 4. The operator restarts (a crash, an upgrade, a new leader): it lists
//!    every EtcdCluster anew. A typed list fails as a whole on the bad
//!    object, and then no cluster at all is reconciled.
//!    Before it starts again, the EtcdBackupSchedule CRD is replaced by a
//!    variant whose `spec.incremental.maxSegmentBytes` may be a string
//!    (`32Mi`), the EtcdBackup CRD by one whose `status.phase` may be
//!    `Archived`, and one object of each kind uses the new shape: typed
//!    lists of either kind fail as a whole.
//! 5. The healthy cluster's Pod is deleted: it is recreated, ready, and the
//!    cluster is Available again and serves writes, while the bad object gets a Warning Event
//!    `UnreadableSpec` naming the field, an `Unreadable` condition, and no
//!    Pod.
//! 6. A new EtcdBackup of the healthy cluster to a local directory
//!    succeeds; one of the unreadable cluster fails saying it cannot read
//!    that cluster; the bad schedule and the bad backup each get a Warning
//!    Event naming their field and an `Unreadable` condition.
//!
//! The CRDs and the bad objects are put back however the scenario ends.

use std::time::{Duration, Instant};

use etcd_operator::api::{BackupPhase, EtcdBackup, EtcdBackupSchedule, EtcdCluster};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::conditions::{pod_ready, untyped_condition};
use test_kit::e2e::{CRD_MANAGER, Harness, cluster_spec};
use test_kit::poll::wait_for;

const HEALTHY: &str = "healthy";
const BAD: &str = "unreadable";
/// A retention policy the CRD variant accepts and the operator does not know.
const UNKNOWN_POLICY: &str = "Archive";
/// A schedule of a newer CRD variant: the operator's type wants an integer.
const BAD_SCHEDULE: &str = "unreadable-schedule";
/// A backup whose status a newer operator wrote.
const BAD_BACKUP: &str = "unreadable-backup";

#[test]
fn an_unreadable_cluster_does_not_stop_the_others() {
    test_kit::e2e::run("isolation", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let started = Instant::now();
    h.create_available(
        HEALTHY,
        cluster_spec(1, "lab-network"),
        Duration::from_secs(180),
    )
    .await?;
    stale_status_is_refused(h).await?;

    let outcome = with_unreadable_cluster(h).await;
    let restored = restore(h).await;
    eprintln!("scenario: {:?}", started.elapsed());
    outcome?;
    restored
}

/// A status apply with a resourceVersion that is no longer current is
/// refused with 409, even with `force`, and nothing is written.
async fn stale_status_is_refused(h: &Harness) -> TestResult {
    let objects = untyped(h);
    let read = objects.get(HEALTHY).await?;
    let stale = read
        .resource_version()
        .ok_or("the cluster has no resourceVersion")?;
    // Another writer changes the object after the read.
    objects
        .patch(
            HEALTHY,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": { "annotations": { "e2e/touched": "yes" } } })),
        )
        .await?;
    let body = |version: Option<&str>| {
        let mut body = json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": { "name": HEALTHY },
            "status": { "clusterToken": "planned-from-a-stale-object" },
        });
        if let Some(version) = version {
            body["metadata"]["resourceVersion"] = json!(version);
        }
        body
    };
    let result = objects
        .patch_status(
            HEALTHY,
            &PatchParams::apply("e2e-stale-writer").force(),
            &Patch::Apply(&body(Some(&stale))),
        )
        .await;
    match result {
        Err(kube::Error::Api(status)) if status.code == 409 => {
            eprintln!("stale status apply refused: {}", status.message);
        }
        other => return Err(format!("a stale status apply was not refused: {other:?}").into()),
    }
    let token = objects.get(HEALTHY).await?.data["status"]["clusterToken"].clone();
    if token == json!("planned-from-a-stale-object") {
        return Err("the refused status was written".into());
    }
    Ok(())
}

async fn with_unreadable_cluster(h: &mut Harness) -> TestResult {
    apply_crd(h, true).await?;
    let objects = untyped(h);
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "durable-etcd.io/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": { "name": BAD, "namespace": h.namespace },
        "spec": {
            "replicas": 1,
            "storage": {
                "storageClassName": "lab-network",
                "size": "1Gi",
                "retentionPolicy": UNKNOWN_POLICY
            }
        }
    }))?;
    // The API server serves the new schema a moment after the update.
    wait_for(
        "the CRD variant to accept the unknown policy",
        Duration::from_secs(30),
        || async {
            Ok(objects
                .create(&Default::default(), &bad)
                .await
                .map_err(|e| eprintln!("create {BAD}: {e}"))
                .is_ok())
        },
    )
    .await?;
    // The premise: this operator's typed client cannot read the object, and
    // a typed list fails as a whole because of it.
    if h.clusters.get(BAD).await.is_ok() {
        return Err("the operator's own type reads the bad object: the test proves nothing".into());
    }
    match h.clusters.list(&ListParams::default()).await {
        Ok(_) => return Err("a typed list reads the bad object: the test proves nothing".into()),
        Err(error) => eprintln!("a typed list of EtcdClusters fails: {error}"),
    }

    // A restart lists every EtcdCluster anew, the bad one included.
    h.stop_operator();
    create_unreadable_backup_objects(h).await?;
    h.start_operator()?;

    let pod = format!("{HEALTHY}-0");
    h.write_keys("/before/", 10).await?;
    let before = h.pods.get(&pod).await?.uid();
    h.pods.delete(&pod, &DeleteParams::default()).await?;
    let pods = &h.pods;
    wait_for(
        "the healthy cluster's pod recreated",
        Duration::from_secs(90),
        || async {
            Ok(pods.get_opt(&pod).await?.is_some_and(|p| {
                p.uid() != before && p.metadata.deletion_timestamp.is_none() && pod_ready(&p)
            }))
        },
    )
    .await?;
    h.wait_available(HEALTHY, 1, Duration::from_secs(120))
        .await?;
    // Served by the recreated member.
    h.write_keys("/isolation/", 10).await?;
    h.check_keys("/isolation/", 10).await?;
    h.check_keys("/before/", 10).await?;

    h.wait_warning_event(
        BAD,
        "UnreadableSpec",
        "spec.storage.retentionPolicy",
        Duration::from_secs(30),
    )
    .await?;
    let condition = untyped_condition(&objects.get(BAD).await?, "Unreadable")
        .ok_or("no Unreadable condition on the bad object")?;
    eprintln!("condition on {BAD}: {condition}");
    if condition["status"] != "True" || condition["reason"] != "UnreadableSpec" {
        return Err(format!("unexpected condition {condition}").into());
    }
    let pods_of_bad = h
        .pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={BAD}")))
        .await?
        .items;
    if !pods_of_bad.is_empty() {
        return Err(format!(
            "the unreadable cluster got pods: {:?}",
            pods_of_bad.iter().map(Pod::name_any).collect::<Vec<_>>()
        )
        .into());
    }
    backups_go_on(h).await
}

/// With the operator stopped (no pass races the status written here): the
/// backup CRDs widened, and a schedule and a backup of the new shape.
async fn create_unreadable_backup_objects(h: &Harness) -> TestResult {
    apply_backup_crds(h, true).await?;
    let schedules = untyped_of::<EtcdBackupSchedule>(h);
    let schedule: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "durable-etcd.io/v1alpha1",
        "kind": "EtcdBackupSchedule",
        "metadata": { "name": BAD_SCHEDULE, "namespace": h.namespace },
        "spec": {
            "clusterName": HEALTHY,
            "schedule": "@yearly",
            "destination": { "local": { "path": backup_dir(h) } },
            "incremental": { "enabled": true, "maxSegmentBytes": "32Mi" }
        }
    }))?;
    wait_for(
        "the schedule CRD variant to accept a string maxSegmentBytes",
        Duration::from_secs(30),
        || async {
            Ok(schedules
                .create(&Default::default(), &schedule)
                .await
                .map_err(|e| eprintln!("create {BAD_SCHEDULE}: {e}"))
                .is_ok())
        },
    )
    .await?;
    let backups = untyped_of::<EtcdBackup>(h);
    backups
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "durable-etcd.io/v1alpha1",
                "kind": "EtcdBackup",
                "metadata": { "name": BAD_BACKUP, "namespace": h.namespace },
                "spec": {
                    "clusterName": HEALTHY,
                    "destination": { "local": { "path": backup_dir(h) } }
                }
            }))?,
        )
        .await?;
    let archived = json!({ "status": { "phase": "Archived", "attempts": 1 } });
    wait_for(
        "the backup CRD variant to accept phase Archived",
        Duration::from_secs(30),
        || async {
            Ok(backups
                .patch_status(
                    BAD_BACKUP,
                    &PatchParams::default(),
                    &Patch::Merge(&archived),
                )
                .await
                .map_err(|e| eprintln!("status of {BAD_BACKUP}: {e}"))
                .is_ok())
        },
    )
    .await?;
    // The premise: typed lists of either kind fail as a whole.
    let typed_backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    let typed_schedules: Api<EtcdBackupSchedule> = Api::namespaced(h.client.clone(), &h.namespace);
    if typed_backups.list(&ListParams::default()).await.is_ok()
        || typed_schedules.list(&ListParams::default()).await.is_ok()
    {
        return Err("a typed list reads a bad backup object: the test proves nothing".into());
    }
    Ok(())
}

/// A backup of the healthy cluster completes beside the unreadable objects;
/// each unreadable object is reported on itself.
async fn backups_go_on(h: &Harness) -> TestResult {
    let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    for (name, cluster) in [("healthy-backup", HEALTHY), ("backup-of-unreadable", BAD)] {
        backups
            .create(
                &Default::default(),
                &serde_json::from_value(json!({
                    "metadata": { "name": name },
                    "spec": {
                        "clusterName": cluster,
                        "destination": { "local": { "path": backup_dir(h) } }
                    }
                }))?,
            )
            .await?;
    }
    let backups = &backups;
    wait_for(
        "the healthy cluster's backup",
        Duration::from_secs(60),
        || async {
            let status = backups
                .get("healthy-backup")
                .await?
                .status
                .unwrap_or_default();
            Ok(status.phase == Some(BackupPhase::Succeeded))
        },
    )
    .await?;
    wait_for(
        "the unreadable cluster's backup to say so",
        Duration::from_secs(30),
        || async {
            let status = backups
                .get("backup-of-unreadable")
                .await?
                .status
                .unwrap_or_default();
            Ok(status.error.is_some_and(|e| {
                e.contains("cannot read EtcdCluster") && e.contains("spec.storage.retentionPolicy")
            }))
        },
    )
    .await?;
    for (name, reason, path, objects) in [
        (
            BAD_SCHEDULE,
            "UnreadableSpec",
            "spec.incremental.maxSegmentBytes",
            untyped_of::<EtcdBackupSchedule>(h),
        ),
        (
            BAD_BACKUP,
            "UnreadableStatus",
            "status.phase",
            untyped_of::<EtcdBackup>(h),
        ),
    ] {
        h.wait_warning_event(name, reason, path, Duration::from_secs(30))
            .await?;
        let condition = untyped_condition(&objects.get(name).await?, "Unreadable")
            .ok_or(format!("no Unreadable condition on {name}"))?;
        if condition["reason"] != reason {
            return Err(format!("unexpected condition on {name}: {condition}").into());
        }
    }
    Ok(())
}

/// Deletes the bad object and puts the operator's own CRD back.
async fn restore(h: &Harness) -> TestResult {
    let objects = untyped(h);
    if objects.get_opt(BAD).await?.is_some() {
        objects.delete(BAD, &DeleteParams::default()).await?;
    }
    wait_for("the bad object gone", Duration::from_secs(30), || async {
        Ok(objects.get_opt(BAD).await?.is_none())
    })
    .await?;
    for (objects, name) in [
        (untyped_of::<EtcdBackupSchedule>(h), BAD_SCHEDULE),
        (untyped_of::<EtcdBackup>(h), BAD_BACKUP),
    ] {
        if objects.get_opt(name).await?.is_some() {
            objects.delete(name, &DeleteParams::default()).await?;
        }
    }
    let _ = std::fs::remove_dir_all(backup_dir(h));
    apply_backup_crds(h, false).await?;
    apply_crd(h, false).await
}

/// The local backup destination: the operator runs on this host.
fn backup_dir(h: &Harness) -> String {
    std::env::temp_dir()
        .join(format!("{}-backups", h.namespace))
        .display()
        .to_string()
}

fn untyped_of<K: Resource<DynamicType = ()>>(h: &Harness) -> Api<DynamicObject> {
    Api::namespaced_with(
        h.client.clone(),
        &h.namespace,
        &ApiResource::erase::<K>(&()),
    )
}

/// Applies the operator's EtcdBackup and EtcdBackupSchedule CRDs, or
/// (`widened`) variants where `status.phase` may be `Archived` and
/// `spec.incremental.maxSegmentBytes` may be a string.
async fn apply_backup_crds(h: &Harness, widened: bool) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(h.client.clone());
    for kind in ["EtcdBackup", "EtcdBackupSchedule"] {
        let crd = etcd_operator::api::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .ok_or(format!("no {kind} CRD"))?;
        let mut crd = serde_json::to_value(crd)?;
        if widened {
            let versions = crd["spec"]["versions"]
                .as_array_mut()
                .ok_or("the CRD has no versions")?;
            for version in versions {
                let schema = &mut version["schema"]["openAPIV3Schema"]["properties"];
                if kind == "EtcdBackup" {
                    schema["status"]["properties"]["phase"]["enum"]
                        .as_array_mut()
                        .ok_or("no enum at status.phase")?
                        .push(Value::from("Archived"));
                } else {
                    schema["spec"]["properties"]["incremental"]["properties"]["maxSegmentBytes"] =
                        json!({ "x-kubernetes-int-or-string": true });
                }
            }
        }
        let name = crd["metadata"]["name"]
            .as_str()
            .ok_or("the CRD has no name")?
            .to_owned();
        crds.patch(
            &name,
            &PatchParams::apply(CRD_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    Ok(())
}

fn untyped(h: &Harness) -> Api<DynamicObject> {
    Api::namespaced_with(
        h.client.clone(),
        &h.namespace,
        &ApiResource::erase::<EtcdCluster>(&()),
    )
}

/// Applies the operator's EtcdCluster CRD, or (`widened`) its variant whose
/// `spec.storage.retentionPolicy` also accepts [`UNKNOWN_POLICY`].
async fn apply_crd(h: &Harness, widened: bool) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(h.client.clone());
    let mut crd = serde_json::to_value(etcd_operator::api::crd())?;
    if widened {
        let versions = crd["spec"]["versions"]
            .as_array_mut()
            .ok_or("the CRD has no versions")?;
        for version in versions {
            let policy = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                ["storage"]["properties"]["retentionPolicy"]["enum"];
            let values = policy
                .as_array_mut()
                .ok_or("no enum at spec.storage.retentionPolicy")?;
            values.push(Value::from(UNKNOWN_POLICY));
        }
    }
    let name = crd["metadata"]["name"]
        .as_str()
        .ok_or("the CRD has no name")?
        .to_owned();
    crds.patch(
        &name,
        &PatchParams::apply(CRD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    eprintln!(
        "CRD {name}: {}",
        if widened {
            "accepts retentionPolicy Archive"
        } else {
            "restored"
        }
    );
    Ok(())
}
