//! A cluster's status as a person reads it (pure): the facts of `status`
//! in one [`Report`], printed as one screen of text or as a stable JSON
//! document (`-o json`, its fields only ever added to).

use etcd_operator_api::api::{EtcdCluster, MemberRole};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use crate::approval::{self, Decision};

/// Version of the JSON document; bumped only if a field changes meaning.
pub const REPORT_VERSION: u32 = 1;

/// Everything `status` shows.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub report_version: u32,
    pub name: String,
    pub namespace: String,
    pub phase: Option<String>,
    pub replicas: i32,
    pub ready_members: i32,
    pub version: Option<String>,
    pub paused: bool,
    pub incarnation: Option<String>,
    #[serde(rename = "clusterID")]
    pub cluster_id: Option<String>,
    pub members: Vec<MemberReport>,
    pub conditions: Vec<ConditionReport>,
    pub last_operation: Option<String>,
    pub backup: BackupReport,
    pub tls: Option<TlsReport>,
    /// What the members serve clients and peers on (`status.transport`).
    pub transport: Option<String>,
    pub recovery: RecoveryReport,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberReport {
    pub name: String,
    /// `Voter`, `Learner`, or none while outside the membership.
    pub role: Option<String>,
    pub leader: bool,
    pub healthy: bool,
    pub revision: Option<i64>,
    pub db_size_bytes: Option<i64>,
    pub volume_used_bytes: Option<i64>,
    pub volume_capacity_bytes: Option<i64>,
    pub pod: Option<String>,
    pub node: Option<String>,
    pub message: Option<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Serialize, Debug, Clone, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupReport {
    pub schedules: Vec<String>,
    pub newest_full_backup: Option<String>,
    pub newest_full_backup_time: Option<String>,
    pub newest_full_backup_revision: Option<i64>,
    pub recovery_point: Option<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsReport {
    pub issuer: String,
    pub ca_not_after: Option<String>,
    pub certificates: Vec<CertificateReport>,
    pub renewed_for: Option<String>,
    /// The CA rotation in progress: its request and next step in words.
    pub ca_rotation: Option<String>,
    pub ca_rotated_for: Option<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateReport {
    pub secret: String,
    pub not_after: String,
}

/// The restore a cluster needs, runs or needs approved.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryReport {
    /// `None`, `ApprovalNeeded`, `Approved`, `ChooseSurvivor`, `Restoring`,
    /// `Blocked`.
    pub state: String,
    pub summary: String,
    /// The approval a person would write (`spec.recovery` fields).
    pub approval: Option<serde_json::Value>,
    /// The command that writes it, or what to do next.
    pub next: Option<String>,
}

/// The conditions shown first, in this order; any other that is True
/// follows.
const MAIN_CONDITIONS: [&str; 4] = ["Available", "Progressing", "Degraded", "BackupReady"];

/// The report of `cluster`.
pub fn report(cluster: &EtcdCluster) -> Report {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let status = cluster.status.clone().unwrap_or_default();
    let mut conditions: Vec<ConditionReport> = MAIN_CONDITIONS
        .iter()
        .filter_map(|t| status.conditions.iter().find(|c| c.type_ == *t))
        .chain(
            status
                .conditions
                .iter()
                .filter(|c| !MAIN_CONDITIONS.contains(&c.type_.as_str()) && c.status == "True"),
        )
        .map(|c| ConditionReport {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect();
    conditions.dedup();
    let backup = status.backup.clone().unwrap_or_default();
    Report {
        report_version: REPORT_VERSION,
        namespace: cluster.metadata.namespace.clone().unwrap_or_default(),
        phase: status.phase.map(|p| format!("{p:?}")),
        replicas: cluster.spec.replicas,
        ready_members: status.ready_members,
        version: status.version.clone(),
        paused: cluster.spec.paused,
        incarnation: status.cluster_token.clone(),
        cluster_id: status.cluster_id.clone(),
        members: status
            .members
            .iter()
            .map(|m| MemberReport {
                name: m.name.clone(),
                role: m.role.map(|r| match r {
                    MemberRole::Voter => "Voter".to_string(),
                    MemberRole::Learner => "Learner".to_string(),
                }),
                leader: m.leader,
                healthy: m.healthy,
                revision: m.revision,
                db_size_bytes: m.db_size_bytes,
                volume_used_bytes: m
                    .volume_capacity_bytes
                    .zip(m.volume_available_bytes)
                    .map(|(capacity, available)| capacity - available),
                volume_capacity_bytes: m.volume_capacity_bytes,
                pod: m.pod.clone(),
                node: m.node.clone(),
                message: m.message.clone(),
            })
            .collect(),
        conditions,
        last_operation: status
            .last_operation
            .as_ref()
            .map(|o| format!("{} ({:?}): {}", o.type_, o.state, o.description)),
        backup: BackupReport {
            schedules: backup.schedules.clone(),
            newest_full_backup: backup.newest_full_backup.clone(),
            newest_full_backup_time: backup.newest_full_backup_time.map(|t| t.0.to_string()),
            newest_full_backup_revision: backup.newest_full_backup_revision,
            recovery_point: backup.recovery_point.map(|t| t.0.to_string()),
        },
        transport: status.transport.map(|t| format!("{t:?}")),
        tls: status.tls.as_ref().map(|tls| TlsReport {
            issuer: tls.issuer.clone(),
            ca_not_after: tls.ca_not_after.as_ref().map(|t| t.0.to_string()),
            certificates: tls
                .certificates
                .iter()
                .map(|c| CertificateReport {
                    secret: c.secret.clone(),
                    not_after: c.not_after.0.to_string(),
                })
                .collect(),
            renewed_for: tls.renewed_for.clone(),
            ca_rotation: tls
                .ca_rotation
                .as_ref()
                .map(|r| format!("{}: {}", r.requested_for, r.message)),
            ca_rotated_for: tls.ca_rotated_for.clone(),
        }),
        recovery: recovery(cluster, &name),
        name,
    }
}

fn recovery(cluster: &EtcdCluster, name: &str) -> RecoveryReport {
    let restoring = cluster
        .status
        .as_ref()
        .and_then(|s| s.restore.as_ref())
        .filter(|r| r.in_progress());
    if let Some(restore) = restoring {
        return RecoveryReport {
            state: "Restoring".to_string(),
            summary: format!(
                "restoring from {} into incarnation {}: {}",
                restore.survivor, restore.incarnation, restore.step
            ),
            approval: None,
            next: None,
        };
    }
    let command = format!("kubectl etcd approve-recovery {name}");
    match approval::decide(cluster, None) {
        Decision::Approve(plan) => RecoveryReport {
            state: "ApprovalNeeded".to_string(),
            summary: plan.consequences().join("; "),
            approval: Some(plan.recovery_patch()),
            next: Some(command),
        },
        Decision::AlreadyApproved(plan) => RecoveryReport {
            state: "Approved".to_string(),
            summary: plan.consequences().join("; "),
            approval: Some(plan.recovery_patch()),
            next: None,
        },
        Decision::ChooseSurvivor { why, .. } => RecoveryReport {
            state: "ChooseSurvivor".to_string(),
            summary: why,
            approval: None,
            next: Some(format!(
                "wait for the survivors, or choose one: {command} --survivor <member>"
            )),
        },
        Decision::Stale { why, next } => RecoveryReport {
            state: "Blocked".to_string(),
            summary: why,
            approval: None,
            next: Some(next),
        },
        Decision::Nothing { why, next } => {
            let lost = cluster.status.as_ref().is_some_and(|s| {
                s.is_true(etcd_operator_api::api::ConditionType::MajorityDataLost)
            });
            RecoveryReport {
                state: if lost { "Blocked" } else { "None" }.to_string(),
                summary: if lost {
                    why
                } else {
                    "no restore needed".to_string()
                },
                approval: None,
                next: lost.then_some(next),
            }
        }
    }
}

/// The report as one screen of text; times relative to `now`.
pub fn text(report: &Report, now: Timestamp) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "Cluster {}/{}: {}{}, {}/{} members ready, etcd {}",
        report.namespace,
        report.name,
        report.phase.as_deref().unwrap_or("unknown"),
        if report.paused { " (paused)" } else { "" },
        report.ready_members,
        report.replicas,
        report.version.as_deref().unwrap_or("unknown"),
    ));
    if let Some(token) = &report.incarnation {
        line(format!(
            "Incarnation {token}, cluster ID {}",
            report.cluster_id.as_deref().unwrap_or("unknown")
        ));
    }
    if let Some(transport) = &report.transport {
        line(format!(
            "Transport {transport}{}",
            transport_note(transport)
        ));
    }
    line(String::new());
    line("Members".to_string());
    let rows: Vec<[String; 7]> = report
        .members
        .iter()
        .map(|m| {
            [
                m.name.clone(),
                format!(
                    "{}{}",
                    m.role.as_deref().unwrap_or("-"),
                    if m.leader { " (leader)" } else { "" }
                ),
                if m.healthy { "healthy" } else { "unhealthy" }.to_string(),
                m.revision.map_or("-".to_string(), |r| r.to_string()),
                m.db_size_bytes.map_or("-".to_string(), bytes),
                match (m.volume_used_bytes, m.volume_capacity_bytes) {
                    (Some(used), Some(capacity)) if capacity > 0 => format!(
                        "{} of {} ({}%)",
                        bytes(used),
                        bytes(capacity),
                        used * 100 / capacity
                    ),
                    _ => "-".to_string(),
                },
                format!(
                    "{} on {}",
                    m.pod.as_deref().unwrap_or("no pod"),
                    m.node.as_deref().unwrap_or("no node")
                ),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "ROLE",
        "HEALTH",
        "REVISION",
        "DB SIZE",
        "VOLUME USED",
        "POD/NODE",
    ]
    .map(str::to_string);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        line(format!("  {}", cells.join("  ").trim_end()));
    }
    for m in &report.members {
        if let Some(message) = &m.message {
            line(format!("  {}: {message}", m.name));
        }
    }
    line(String::new());
    line("Conditions".to_string());
    for c in &report.conditions {
        line(format!(
            "  {:<16} {:<5} {}: {}",
            c.type_, c.status, c.reason, c.message
        ));
    }
    if let Some(operation) = &report.last_operation {
        line(format!("  last operation: {operation}"));
    }
    line(String::new());
    line("Backups".to_string());
    if report.backup.schedules.is_empty() {
        line("  no EtcdBackupSchedule names this cluster".to_string());
    } else {
        line(format!(
            "  schedules: {}",
            report.backup.schedules.join(", ")
        ));
    }
    if let Some(full) = &report.backup.newest_full_backup {
        line(format!(
            "  newest full backup: {full} (revision {}, {})",
            report
                .backup
                .newest_full_backup_revision
                .map_or("unknown".to_string(), |r| r.to_string()),
            report
                .backup
                .newest_full_backup_time
                .as_deref()
                .map_or("time unknown".to_string(), |t| relative(t, now))
        ));
    }
    if let Some(point) = &report.backup.recovery_point {
        line(format!("  recovery point: {}", relative(point, now)));
    }
    if let Some(tls) = &report.tls {
        line(String::new());
        line(format!("TLS ({})", tls.issuer));
        if let Some(ca) = &tls.ca_not_after {
            line(format!("  CA expires {}", relative(ca, now)));
        }
        for c in &tls.certificates {
            line(format!(
                "  {} expires {}",
                c.secret,
                relative(&c.not_after, now)
            ));
        }
        if let Some(rotation) = &tls.ca_rotation {
            line(format!("  CA rotation in progress: {rotation}"));
        }
        if let Some(done) = &tls.ca_rotated_for {
            line(format!("  last CA rotation done: {done}"));
        }
        if let Some(done) = &tls.renewed_for {
            line(format!("  last renewal done: {done}"));
        }
    }
    line(String::new());
    line(format!(
        "Recovery: {} ({})",
        report.recovery.summary, report.recovery.state
    ));
    if let Some(next) = &report.recovery.next {
        line(format!("  next: {next}"));
    }
    out
}

/// The report as a JSON document.
/// What a transport stage means for a client, in a few words.
fn transport_note(transport: &str) -> &'static str {
    match transport {
        "Tls" => ": mutual TLS for clients and peers",
        "Plaintext" => ": plain HTTP, no client authentication",
        "BridgingPeers" => {
            ": turning TLS on; plain HTTP works until Tls, TLS on every member once this stage has rolled out"
        }
        "ReturningPeers" => ": turning TLS on; TLS works, plain HTTP until Tls has rolled out",
        _ => "",
    }
}

pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    format!("{value:.1} {unit}")
}

/// A time with how far it is from `now`: `2026-12-01T10:00:00Z (5m ago)`.
fn relative(time: &str, now: Timestamp) -> String {
    let Ok(then) = time.parse::<Timestamp>() else {
        return time.to_string();
    };
    let seconds = then.as_second() - now.as_second();
    let span = |s: i64| match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    };
    if seconds >= 0 {
        format!("{time} (in {})", span(seconds))
    } else {
        format!("{time} ({} ago)", span(-seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-12-01T12:00:00Z".parse().expect("time")
    }

    fn healthy() -> EtcdCluster {
        let members: Vec<serde_json::Value> = (0..3)
            .map(|i| {
                json!({
                    "name": format!("main-{i}"), "role": "Voter", "leader": i == 1,
                    "healthy": true, "revision": 4213, "dbSizeBytes": 25_165_824,
                    "volumeCapacityBytes": 1_073_741_824_i64, "volumeAvailableBytes": 805_306_368_i64,
                    "pod": format!("main-{i}"), "node": format!("node-{i}"), "pvc": format!("data-main-{i}"),
                })
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": { "name": "main", "namespace": "prod", "generation": 1 },
            "spec": { "replicas": 3, "tls": { "builtIn": {} } },
            "status": {
                "phase": "Running", "readyMembers": 3, "version": "3.6.16", "transport": "Tls",
                "clusterToken": "tok-1", "clusterID": "8e9e05c52164694d",
                "members": members,
                "conditions": [
                    { "type": "Degraded", "status": "False", "reason": "AsExpected", "message": "every member is healthy", "lastTransitionTime": "2026-12-01T10:00:00Z" },
                    { "type": "Available", "status": "True", "reason": "Quorum", "message": "3 of 3 members healthy", "lastTransitionTime": "2026-12-01T10:00:00Z" },
                    { "type": "Paused", "status": "False", "reason": "AsExpected", "message": "not paused", "lastTransitionTime": "2026-12-01T10:00:00Z" },
                ],
                "backup": { "schedules": ["hourly"], "newestFullBackup": "file:///b/full-1-r4000.db.zst",
                            "newestFullBackupTime": "2026-12-01T11:00:00Z", "newestFullBackupRevision": 4000,
                            "recoveryPoint": "2026-12-01T11:59:40Z" },
                "tls": { "issuer": "BuiltIn", "caNotAfter": "2036-12-01T10:00:00Z",
                         "certificates": [{ "secret": "main-0-server-tls", "serial": "01",
                                            "notBefore": "2026-12-01T10:00:00Z", "notAfter": "2027-03-01T10:00:00Z" }],
                         "caRotation": { "requestedFor": "2026-12-01", "nextStep": "SignWithNewCa", "message": "issue every certificate from the new CA" } },
            },
        }))
        .expect("a cluster")
    }

    #[test]
    fn a_healthy_cluster_on_one_screen() {
        let text = text(&report(&healthy()), now());
        assert!(
            text.starts_with("Cluster prod/main: Running, 3/3 members ready, etcd 3.6.16\n"),
            "{text}"
        );
        assert!(
            text.contains("main-1  Voter (leader)  healthy  4213"),
            "{text}"
        );
        assert!(text.contains("24.0 MiB"), "{text}");
        assert!(text.contains("256.0 MiB of 1.0 GiB (25%)"), "{text}");
        assert!(text.contains("main-2 on node-2"), "{text}");
        // Available first, then Degraded; a False Paused is left out.
        let available = text.find("Available").expect("Available");
        assert!(
            available < text.find("Degraded").expect("Degraded"),
            "{text}"
        );
        assert!(!text.contains("Paused"), "{text}");
        assert!(
            text.contains("recovery point: 2026-12-01T11:59:40Z (20s ago)"),
            "{text}"
        );
        assert!(
            text.contains("revision 4000, 2026-12-01T11:00:00Z (60m ago)"),
            "{text}"
        );
        assert!(
            text.contains("main-0-server-tls expires 2027-03-01T10:00:00Z (in 89d)"),
            "{text}"
        );
        assert!(
            text.contains("CA rotation in progress: 2026-12-01: issue every"),
            "{text}"
        );
        assert!(
            text.contains("Recovery: no restore needed (None)"),
            "{text}"
        );
        assert!(
            text.contains("Transport Tls: mutual TLS for clients and peers\n"),
            "{text}"
        );
    }

    #[test]
    fn the_json_document_is_stable() {
        let value: serde_json::Value =
            serde_json::from_str(&json(&report(&healthy()))).expect("json");
        assert_eq!(value["reportVersion"], 1);
        assert_eq!(value["phase"], "Running");
        assert_eq!(value["readyMembers"], 3);
        assert_eq!(value["clusterID"], "8e9e05c52164694d");
        let members = value["members"].as_array().expect("members");
        assert_eq!(members.len(), 3);
        assert_eq!(members[1]["leader"], true);
        assert_eq!(members[0]["volumeUsedBytes"], 268_435_456);
        assert_eq!(value["conditions"][0]["type"], "Available");
        assert_eq!(value["backup"]["newestFullBackupRevision"], 4000);
        assert_eq!(
            value["tls"]["certificates"][0]["secret"],
            "main-0-server-tls"
        );
        assert_eq!(value["recovery"]["state"], "None");
    }

    #[test]
    fn a_majority_loss_shows_the_approval_it_needs() {
        let mut cluster = healthy();
        if let Some(status) = cluster.status.as_mut() {
            status.phase = Some(etcd_operator_api::api::Phase::MajorityDataLost);
            status.conditions.push(serde_json::from_value(json!({
                "type": "MajorityDataLost", "status": "True", "reason": "MajorityDataLost",
                "lastTransitionTime": "2026-12-01T10:00:00Z",
                "message": "data of a majority is known lost: main-1 (wiped), main-2 (wiped); newest survivor main-0 at revision 4213 (raft index 4400); to restore from it set spec.recovery: {approvedIncarnation: tok-1, approvedSurvivor: main-0, approvedRevision: 4213}",
            })).expect("condition"));
        }
        let report = report(&cluster);
        assert_eq!(report.recovery.state, "ApprovalNeeded");
        assert_eq!(
            report.recovery.next.as_deref(),
            Some("kubectl etcd approve-recovery main")
        );
        let text = text(&report, now());
        assert!(text.contains("MajorityDataLost True"), "{text}");
        assert!(
            text.contains("restore from survivor main-0 at revision 4213"),
            "{text}"
        );
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
