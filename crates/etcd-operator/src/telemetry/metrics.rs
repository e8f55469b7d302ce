//! Prometheus metrics of the operator (prefix `etcd_operator_`).
//!
//! Labels stay bounded: per-cluster series are removed when the cluster is
//! deleted ([`Metrics::forget_cluster`]), per-schedule series when the
//! schedule is ([`Metrics::retain_backup_schedules`]). Every metric is
//! described in `docs/metrics.md`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::TypedMetric;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// The prefix of every metric name.
const PREFIX: &str = "etcd_operator";

/// One metric the operator registers, as `docs/metrics.md` and the checks
/// of `deploy/monitoring` read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricDescription {
    /// The name as exposed, prefix included; a counter's samples add
    /// `_total`, a histogram's `_bucket`, `_sum` and `_count`.
    pub name: String,
    /// The OpenMetrics type: `counter`, `gauge`, `histogram`.
    pub kind: String,
    /// Its help text.
    pub help: String,
}

/// What a pass planned its writes from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlannedFromLabels {
    /// `copies` (the watch-fed copies said nothing was to change; no
    /// request to the API server) or `api` (fresh reads, then any step and
    /// status write).
    pub reads: String,
}

/// `step` and `category` of a failed reconcile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Pipeline step that failed: `read`, `observe`, `tls`, `act`,
    /// `status`, `confirm`, `network-policy`, `pass`.
    pub step: String,
    /// Error category: `transient`, `invalid_spec`, `conflict`, ...
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    namespace: String,
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    namespace: String,
    cluster: String,
    secret: String,
}

/// The certificate Secrets published per cluster, to forget them with it.
type PublishedCertificates = BTreeMap<(String, String), Vec<String>>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScheduleLabels {
    namespace: String,
    cluster: String,
    schedule: String,
}

/// The labels each backup schedule's series were published under, by
/// `(namespace, schedule)`: a schedule that names another cluster, or is
/// deleted, takes its old series with it.
type PublishedSchedules = BTreeMap<(String, String), ScheduleLabels>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    namespace: String,
    cluster: String,
    state: String,
}

/// Member counts of one cluster as last observed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterGauges {
    /// Members the spec asks for.
    pub desired: i64,
    /// Members etcd lists (voters and learners).
    pub members: i64,
    /// Members that answered their health check.
    pub healthy: i64,
    /// Learners among the members.
    pub learners: i64,
    /// Whether a majority of voters is healthy (etcd serves).
    pub quorum: bool,
}

/// What one backup schedule's pass saw, as gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScheduleGauges {
    /// When its newest successful full backup completed (Unix time).
    pub last_success: Option<i64>,
    /// Whether its last attempt failed (`status.lastError` is set; the next
    /// success clears it).
    pub last_attempt_failed: bool,
    /// The schedule's period in seconds (between its next two fire times):
    /// `BackupReady` turns false once the newest backup is older than
    /// twice this.
    pub period_seconds: i64,
    /// Continuous backup, while a watcher should run.
    pub incremental: Option<IncrementalGauges>,
}

/// Continuous backup of one schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IncrementalGauges {
    /// The longest time between two segments, in seconds: `BackupReady`
    /// turns false once writes could be lost for more than three of them.
    pub interval_seconds: i64,
    /// Every write acknowledged before this time is durable (Unix time);
    /// `None` before the watcher's first durable point.
    pub recovery_point: Option<i64>,
    /// Seconds of acknowledged writes a restore would lose right now (0
    /// when etcd recently confirmed every write is stored); `None` before
    /// the first durable point.
    pub loss_window_seconds: Option<i64>,
}

/// All metrics of the operator, cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Counter,
    planned_from: Family<PlannedFromLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    actions: Family<ActionLabels, Counter>,
    reconcile_seconds: Histogram,
    members: Family<MemberLabels, Gauge>,
    quorum: Family<ClusterLabels, Gauge>,
    certificate_expiry: Family<CertificateLabels, Gauge>,
    published_certificates: Arc<Mutex<PublishedCertificates>>,
    backup_last_success: Family<ScheduleLabels, Gauge>,
    backup_failed: Family<ScheduleLabels, Gauge>,
    backup_period: Family<ScheduleLabels, Gauge>,
    backup_interval: Family<ScheduleLabels, Gauge>,
    backup_recovery_point: Family<ScheduleLabels, Gauge>,
    backup_loss_window: Family<ScheduleLabels, Gauge>,
    published_schedules: Arc<Mutex<PublishedSchedules>>,
    descriptions: Arc<Vec<MetricDescription>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let mut described = Vec::new();
        let reconciles = Counter::default();
        register(
            &mut registry,
            &mut described,
            "reconciles",
            "Reconcile passes started",
            reconciles.clone(),
        );
        let planned_from = Family::<PlannedFromLabels, Counter>::default();
        register(
            &mut registry,
            &mut described,
            "reconcile_passes",
            "Finished planning of reconcile passes by what they planned from: `copies` (watch-fed, nothing to change, no API request) or `api` (fresh reads, then any step and status write)",
            planned_from.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        register(
            &mut registry,
            &mut described,
            "reconcile_errors",
            "Failed reconcile passes by step and error category",
            errors.clone(),
        );
        let actions = Family::<ActionLabels, Counter>::default();
        register(
            &mut registry,
            &mut described,
            "actions",
            "Actions taken on clusters, by kind",
            actions.clone(),
        );
        let reconcile_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        register(
            &mut registry,
            &mut described,
            "reconcile_duration_seconds",
            "Duration of a reconcile pass",
            reconcile_seconds.clone(),
        );
        let members = Family::<MemberLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "cluster_members",
            "Members of each cluster by state (desired, members, healthy, learners)",
            members.clone(),
        );
        let quorum = Family::<ClusterLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "cluster_quorum",
            "1 while a majority of the cluster's voters is healthy, 0 while quorum is lost",
            quorum.clone(),
        );
        let certificate_expiry = Family::<CertificateLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "certificate_expiry_timestamp_seconds",
            "When each certificate the operator keeps for a TLS cluster expires (Unix time), by Secret",
            certificate_expiry.clone(),
        );
        let backup_last_success = Family::<ScheduleLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "backup_last_success_timestamp_seconds",
            "When the newest successful full backup of each backup schedule completed (Unix time)",
            backup_last_success.clone(),
        );
        let backup_failed = Family::<ScheduleLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "backup_last_attempt_failed",
            "1 while the last backup attempt of each backup schedule failed (its status.lastError is set), else 0",
            backup_failed.clone(),
        );
        let backup_period = Family::<ScheduleLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "backup_period_seconds",
            "Time between the next two fire times of each backup schedule; its backups are stale past twice this",
            backup_period.clone(),
        );
        let backup_interval = Family::<ScheduleLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "backup_incremental_interval_seconds",
            "Longest time between two continuous-backup segments of each schedule; its continuous backup is stale past three of them",
            backup_interval.clone(),
        );
        let backup_recovery_point = Family::<ScheduleLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "backup_recovery_point_timestamp_seconds",
            "Continuous backup of each schedule: every write acknowledged before this time is durable (Unix time)",
            backup_recovery_point.clone(),
        );
        let backup_loss_window = Family::<ScheduleLabels, Gauge>::default();
        register(
            &mut registry,
            &mut described,
            "backup_loss_window_seconds",
            "Continuous backup of each schedule: seconds of acknowledged writes a restore would lose right now (0 while etcd recently confirmed every write is stored)",
            backup_loss_window.clone(),
        );
        Self {
            registry: Arc::new(registry),
            reconciles,
            planned_from,
            errors,
            actions,
            reconcile_seconds,
            members,
            quorum,
            certificate_expiry,
            published_certificates: Arc::default(),
            backup_last_success,
            backup_failed,
            backup_period,
            backup_interval,
            backup_recovery_point,
            backup_loss_window,
            published_schedules: Arc::default(),
            descriptions: Arc::new(described),
        }
    }

    /// Every metric registered, whether or not it has a series yet.
    pub fn descriptions(&self) -> &[MetricDescription] {
        &self.descriptions
    }

    /// Counts a reconcile pass.
    pub fn reconcile_started(&self) {
        self.reconciles.inc();
    }

    /// Counts a pass by what it planned from: the copies alone (`true`)
    /// or fresh reads.
    pub fn pass_from_copies(&self, from_copies: bool) {
        let reads = if from_copies { "copies" } else { "api" };
        self.planned_from
            .get_or_create(&PlannedFromLabels {
                reads: reads.to_owned(),
            })
            .inc();
    }

    /// Records how long a pass took.
    pub fn reconcile_finished(&self, seconds: f64) {
        self.reconcile_seconds.observe(seconds);
    }

    /// Counts a failed pass.
    pub fn reconcile_failed(&self, step: &str, category: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                step: step.to_owned(),
                category: category.to_owned(),
            })
            .inc();
    }

    /// Counts an action taken.
    pub fn action_taken(&self, kind: &str) {
        self.actions
            .get_or_create(&ActionLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Publishes the member counts and quorum state of one cluster.
    pub fn set_cluster(&self, namespace: &str, cluster: &str, gauges: ClusterGauges) {
        for (state, value) in member_states(gauges) {
            self.members
                .get_or_create(&member_labels(namespace, cluster, state))
                .set(value);
        }
        self.quorum
            .get_or_create(&cluster_labels(namespace, cluster))
            .set(i64::from(gauges.quorum));
    }

    /// Publishes when each certificate of a TLS cluster expires: `(Secret,
    /// Unix time)`.
    pub fn set_certificates(&self, namespace: &str, cluster: &str, expiry: &[(String, i64)]) {
        for (secret, not_after) in expiry {
            self.certificate_expiry
                .get_or_create(&certificate_labels(namespace, cluster, secret))
                .set(*not_after);
        }
        if let Ok(mut published) = self.published_certificates.lock() {
            published.insert(
                (namespace.to_owned(), cluster.to_owned()),
                expiry.iter().map(|(secret, _)| secret.clone()).collect(),
            );
        }
    }

    /// Drops the series of a deleted cluster.
    pub fn forget_cluster(&self, namespace: &str, cluster: &str) {
        let secrets = self
            .published_certificates
            .lock()
            .ok()
            .and_then(|mut p| p.remove(&(namespace.to_owned(), cluster.to_owned())))
            .unwrap_or_default();
        for secret in secrets {
            self.certificate_expiry
                .remove(&certificate_labels(namespace, cluster, &secret));
        }
        for (state, _) in member_states(ClusterGauges::default()) {
            self.members
                .remove(&member_labels(namespace, cluster, state));
        }
        self.quorum.remove(&cluster_labels(namespace, cluster));
    }

    /// Publishes what a pass of backup schedule `schedule` of `cluster` saw;
    /// a figure it did not see is removed.
    pub fn set_backup_schedule(
        &self,
        namespace: &str,
        schedule: &str,
        cluster: &str,
        gauges: ScheduleGauges,
    ) {
        let labels = ScheduleLabels {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
            schedule: schedule.to_owned(),
        };
        let previous = self.published_schedules.lock().ok().and_then(|mut p| {
            p.insert((namespace.to_owned(), schedule.to_owned()), labels.clone())
        });
        if let Some(previous) = previous.filter(|p| *p != labels) {
            self.remove_schedule_series(&previous);
        }
        let incremental = gauges.incremental;
        let figures = [
            (&self.backup_last_success, gauges.last_success),
            (
                &self.backup_failed,
                Some(i64::from(gauges.last_attempt_failed)),
            ),
            (&self.backup_period, Some(gauges.period_seconds)),
            (
                &self.backup_interval,
                incremental.map(|i| i.interval_seconds),
            ),
            (
                &self.backup_recovery_point,
                incremental.and_then(|i| i.recovery_point),
            ),
            (
                &self.backup_loss_window,
                incremental.and_then(|i| i.loss_window_seconds),
            ),
        ];
        for (family, value) in figures {
            match value {
                Some(value) => {
                    family.get_or_create(&labels).set(value);
                }
                None => {
                    family.remove(&labels);
                }
            }
        }
    }

    /// Drops the series of every backup schedule for which `exists`
    /// (namespace, name) is false.
    pub fn retain_backup_schedules(&self, exists: impl Fn(&str, &str) -> bool) {
        let gone: Vec<ScheduleLabels> = match self.published_schedules.lock() {
            Ok(mut published) => {
                let gone = published
                    .iter()
                    .filter(|((namespace, name), _)| !exists(namespace, name))
                    .map(|(key, labels)| (key.clone(), labels.clone()))
                    .collect::<Vec<_>>();
                for (key, _) in &gone {
                    published.remove(key);
                }
                gone.into_iter().map(|(_, labels)| labels).collect()
            }
            Err(_) => Vec::new(),
        };
        for labels in &gone {
            self.remove_schedule_series(labels);
        }
    }

    fn remove_schedule_series(&self, labels: &ScheduleLabels) {
        for family in [
            &self.backup_last_success,
            &self.backup_failed,
            &self.backup_period,
            &self.backup_interval,
            &self.backup_recovery_point,
            &self.backup_loss_window,
        ] {
            family.remove(labels);
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Registers `metric` and describes it.
fn register<M: Metric + TypedMetric>(
    registry: &mut Registry,
    described: &mut Vec<MetricDescription>,
    name: &str,
    help: &str,
    metric: M,
) {
    described.push(MetricDescription {
        name: format!("{PREFIX}_{name}"),
        kind: M::TYPE.as_str().to_owned(),
        help: help.to_owned(),
    });
    registry.register(name, help, metric);
}

fn member_states(gauges: ClusterGauges) -> [(&'static str, i64); 4] {
    [
        ("desired", gauges.desired),
        ("members", gauges.members),
        ("healthy", gauges.healthy),
        ("learners", gauges.learners),
    ]
}

fn member_labels(namespace: &str, cluster: &str, state: &str) -> MemberLabels {
    MemberLabels {
        namespace: namespace.to_owned(),
        cluster: cluster.to_owned(),
        state: state.to_owned(),
    }
}

fn certificate_labels(namespace: &str, cluster: &str, secret: &str) -> CertificateLabels {
    CertificateLabels {
        namespace: namespace.to_owned(),
        cluster: cluster.to_owned(),
        secret: secret.to_owned(),
    }
}

fn cluster_labels(namespace: &str, cluster: &str) -> ClusterLabels {
    ClusterLabels {
        namespace: namespace.to_owned(),
        cluster: cluster.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_counters_and_cluster_gauges() {
        let metrics = Metrics::new();
        metrics.reconcile_started();
        metrics.reconcile_failed("observe", "transient");
        metrics.action_taken("create_pod");
        metrics.set_cluster(
            "default",
            "main",
            ClusterGauges {
                desired: 3,
                members: 3,
                healthy: 1,
                learners: 0,
                quorum: false,
            },
        );
        let text = metrics.encode().expect("encodes");
        assert!(text.contains("etcd_operator_reconciles_total 1"), "{text}");
        assert!(text.contains(
            "etcd_operator_reconcile_errors_total{step=\"observe\",category=\"transient\"} 1"
        ));
        assert!(text.contains("etcd_operator_actions_total{kind=\"create_pod\"} 1"));
        assert!(text.contains(
            "etcd_operator_cluster_members{namespace=\"default\",cluster=\"main\",state=\"healthy\"} 1"
        ));
        assert!(
            text.contains("etcd_operator_cluster_quorum{namespace=\"default\",cluster=\"main\"} 0")
        );
    }

    #[test]
    fn exposes_certificate_expiry_by_secret() {
        let metrics = Metrics::new();
        metrics.set_certificates(
            "default",
            "main",
            &[("main-server-tls".into(), 1_800_000_000)],
        );
        let text = metrics.encode().expect("encodes");
        assert!(text.contains(
            "etcd_operator_certificate_expiry_timestamp_seconds{namespace=\"default\",cluster=\"main\",secret=\"main-server-tls\"} 1800000000"
        ), "{text}");
    }

    fn hourly(recovery_point: Option<i64>) -> ScheduleGauges {
        ScheduleGauges {
            last_success: Some(1_800_000_000),
            last_attempt_failed: false,
            period_seconds: 3600,
            incremental: Some(IncrementalGauges {
                interval_seconds: 20,
                recovery_point,
                loss_window_seconds: recovery_point.map(|_| 0),
            }),
        }
    }

    #[test]
    fn exposes_each_schedule_and_removes_what_it_no_longer_has() {
        let metrics = Metrics::new();
        metrics.set_backup_schedule("prod", "hourly", "main", hourly(Some(1_800_000_100)));
        let text = metrics.encode().expect("encodes");
        let labels = "{namespace=\"prod\",cluster=\"main\",schedule=\"hourly\"}";
        for line in [
            format!("etcd_operator_backup_last_success_timestamp_seconds{labels} 1800000000"),
            format!("etcd_operator_backup_last_attempt_failed{labels} 0"),
            format!("etcd_operator_backup_loss_window_seconds{labels} 0"),
            format!("etcd_operator_backup_period_seconds{labels} 3600"),
            format!("etcd_operator_backup_incremental_interval_seconds{labels} 20"),
            format!("etcd_operator_backup_recovery_point_timestamp_seconds{labels} 1800000100"),
        ] {
            assert!(text.contains(&line), "{line} in {text}");
        }

        // Continuous backup turned off: its two series go.
        let full_only = ScheduleGauges {
            incremental: None,
            ..hourly(None)
        };
        metrics.set_backup_schedule("prod", "hourly", "main", full_only);
        let text = metrics.encode().expect("encodes");
        assert!(!text.contains("interval_seconds{"), "{text}");
        assert!(
            !text.contains("recovery_point_timestamp_seconds{"),
            "{text}"
        );
        assert!(!text.contains("loss_window_seconds{"), "{text}");
        assert!(
            text.contains("etcd_operator_backup_period_seconds{"),
            "{text}"
        );
    }

    #[test]
    fn a_schedule_that_names_another_cluster_or_is_deleted_takes_its_series() {
        let metrics = Metrics::new();
        metrics.set_backup_schedule("prod", "hourly", "main", hourly(Some(1)));
        metrics.set_backup_schedule("prod", "hourly", "other", hourly(Some(1)));
        let text = metrics.encode().expect("encodes");
        assert!(!text.contains("cluster=\"main\""), "{text}");
        assert!(text.contains("cluster=\"other\""), "{text}");

        metrics.set_backup_schedule("prod", "daily", "other", hourly(None));
        metrics.retain_backup_schedules(|namespace, name| namespace == "prod" && name == "daily");
        let text = metrics.encode().expect("encodes");
        assert!(!text.contains("schedule=\"hourly\""), "{text}");
        assert!(text.contains("schedule=\"daily\""), "{text}");
    }

    #[test]
    fn describes_every_metric_it_registers() {
        let metrics = Metrics::new();
        metrics.reconcile_started();
        metrics.pass_from_copies(true);
        metrics.reconcile_failed("observe", "transient");
        metrics.action_taken("CreatePod");
        metrics.set_cluster("prod", "main", ClusterGauges::default());
        metrics.set_certificates("prod", "main", &[("main-ca".into(), 1)]);
        metrics.set_backup_schedule("prod", "hourly", "main", hourly(Some(1)));
        let described: Vec<(&str, &str)> = metrics
            .descriptions()
            .iter()
            .map(|d| (d.name.as_str(), d.kind.as_str()))
            .collect();
        let text = metrics.encode().expect("encodes");
        let declared: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE ")?.split_once(' '))
            .collect();
        assert_eq!(declared.len(), described.len(), "{text}");
        for family in declared {
            assert!(described.contains(&family), "{family:?} in {described:?}");
        }
    }

    #[test]
    fn forgets_a_deleted_cluster() {
        let metrics = Metrics::new();
        metrics.set_cluster("default", "gone", ClusterGauges::default());
        metrics.set_certificates("default", "gone", &[("gone-ca".into(), 1)]);
        metrics.forget_cluster("default", "gone");
        let text = metrics.encode().expect("encodes");
        assert!(!text.contains("cluster=\"gone\""), "{text}");
    }
}
