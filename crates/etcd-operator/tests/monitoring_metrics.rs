//! The monitoring of `deploy/monitoring/` against what really exists:
//!
//! - every metric an alert rule or a dashboard query names (parsed as
//!   PromQL) is one the operator exports, read from its own registry
//!   (`telemetry::Metrics`), or one of etcd's listed in
//!   `deploy/monitoring/etcd-metrics.txt`; renaming a metric on either side
//!   fails here;
//! - that list is what real etcd members of each pinned release
//!   (`tools/etcd-*`) serve on `/metrics`, and every name on it is used;
//! - every alert has a summary, a description and a runbook URL naming its
//!   own section of `docs/runbooks.md`, and `promtool` cases in
//!   `deploy/monitoring/tests/` where it fires and where it does not;
//! - the PodMonitors select the operator's Pods (`deploy/operator.yaml`) and
//!   the member Pods the operator builds, and name their metrics ports;
//! - `docs/metrics.md` describes every metric the operator exports and every
//!   etcd metric the queries use.
//!
//! `scripts/check-monitoring.sh` runs this and the rules' `promtool` checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_operator::api::EtcdCluster;
use etcd_operator::api::identity::MemberIdentity;
use etcd_operator::planner::Bootstrap;
use etcd_operator::resources::{MemberAddressing, member_pod};
use etcd_operator::telemetry::Metrics;
use promql_parser::parser::{self, Expr};
use serde_json::Value;
use test_kit::etcd_process::{EtcdProcess, READY_TIMEOUT, initial_cluster};
use test_kit::upstream::upstream_set;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A file of the repository.
fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml_documents(path: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The rules of the PrometheusRule.
fn rules() -> Vec<Value> {
    let rule = yaml("deploy/monitoring/prometheus-rule.yaml");
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|group| group["rules"].as_array().expect("rules").clone())
        .collect()
}

fn alerts() -> Vec<Value> {
    let alerts: Vec<Value> = rules()
        .into_iter()
        .filter(|rule| rule.get("alert").is_some())
        .collect();
    assert!(!alerts.is_empty(), "no alert rule");
    alerts
}

fn text<'a>(value: &'a Value, field: &str) -> &'a str {
    value[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field} in {value}"))
}

/// Every query with where it is: the rules' expressions, the dashboard's
/// panel queries and the metric selectors of its variables.
fn queries() -> Vec<(String, String)> {
    let mut queries: Vec<(String, String)> = rules()
        .iter()
        .map(|rule| {
            let name = rule
                .get("alert")
                .or_else(|| rule.get("record"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            (format!("rule {name}"), text(rule, "expr").to_owned())
        })
        .collect();
    let dashboard: Value =
        serde_json::from_str(&read("deploy/monitoring/dashboard.json")).expect("dashboard JSON");
    let mut panel_queries = Vec::new();
    expressions(&dashboard["panels"], &mut panel_queries);
    assert!(
        panel_queries.len() >= 10,
        "the dashboard's queries: {panel_queries:?}"
    );
    for (panel, expr) in panel_queries {
        queries.push((
            format!("dashboard panel {panel:?}"),
            grafana_to_promql(&expr),
        ));
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]
            .get("query")
            .unwrap_or(&variable["query"])
            .as_str()
            .expect("a variable's query");
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.rsplit_once(','))
            .map(|(selector, _label)| selector)
            .unwrap_or_else(|| {
                panic!("variable query {query:?} is not label_values(metric, label)")
            });
        queries.push((
            format!("dashboard variable {}", variable["name"]),
            grafana_to_promql(selector),
        ));
    }
    queries
}

/// The `expr` of every target under `value`, with its panel's title.
fn expressions(value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| expressions(item, out)),
        Value::Object(object) => {
            if let Some(targets) = object.get("targets").and_then(Value::as_array) {
                let title = object.get("title").and_then(Value::as_str).unwrap_or("?");
                for target in targets {
                    out.push((title.to_owned(), text(target, "expr").to_owned()));
                }
            }
            if let Some(panels) = object.get("panels") {
                expressions(panels, out);
            }
        }
        _ => {}
    }
}

/// Grafana's interval macros as PromQL durations; `$variables` only appear
/// inside label matchers' strings.
fn grafana_to_promql(query: &str) -> String {
    ["$__rate_interval", "$__interval", "$__range"]
        .iter()
        .fold(query.to_owned(), |q, macro_| q.replace(macro_, "5m"))
}

/// The metric names an expression selects.
fn metric_names(expr: &Expr, out: &mut BTreeSet<String>) {
    match expr {
        Expr::VectorSelector(selector) => selector_name(selector, out),
        Expr::MatrixSelector(matrix) => selector_name(&matrix.vs, out),
        Expr::Aggregate(aggregate) => {
            metric_names(&aggregate.expr, out);
            if let Some(param) = &aggregate.param {
                metric_names(param, out);
            }
        }
        Expr::Unary(unary) => metric_names(&unary.expr, out),
        Expr::Binary(binary) => {
            metric_names(&binary.lhs, out);
            metric_names(&binary.rhs, out);
        }
        Expr::Paren(paren) => metric_names(&paren.expr, out),
        Expr::Subquery(subquery) => metric_names(&subquery.expr, out),
        Expr::Call(call) => call.args.args.iter().for_each(|arg| metric_names(arg, out)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
        Expr::Extension(_) => panic!("the parser makes no extension node"),
    }
}

fn selector_name(selector: &parser::VectorSelector, out: &mut BTreeSet<String>) {
    let by_label = selector
        .matchers
        .matchers
        .iter()
        .find(|m| m.name == "__name__")
        .map(|m| m.value.clone());
    match selector.name.clone().or(by_label) {
        Some(name) => {
            out.insert(name);
        }
        None => panic!("a selector without a metric name: {selector}"),
    }
}

/// The sample names the operator exposes, by family, from its own
/// registry: a counter's `_total`, a histogram's `_bucket`, `_sum` and
/// `_count`.
fn operator_metrics() -> BTreeMap<String, String> {
    let metrics = Metrics::new();
    let mut names = BTreeMap::new();
    for metric in metrics.descriptions() {
        let family = &metric.name;
        let samples: Vec<String> = match metric.kind.as_str() {
            "counter" => vec![format!("{family}_total")],
            "histogram" => ["bucket", "sum", "count"]
                .iter()
                .map(|suffix| format!("{family}_{suffix}"))
                .collect(),
            "gauge" => vec![family.clone()],
            other => panic!("{family}: a {other} the checks do not know"),
        };
        for sample in samples {
            names.insert(sample, family.clone());
        }
    }
    assert!(!names.is_empty(), "the operator registers no metric");
    names
}

/// The allow-listed etcd metrics.
fn etcd_metrics() -> BTreeSet<String> {
    read("deploy/monitoring/etcd-metrics.txt")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_metric_in_the_alerts_and_the_dashboard_exists() {
    let operator = operator_metrics();
    let etcd = etcd_metrics();
    let mut unknown = Vec::new();
    let mut used = BTreeSet::new();
    for (place, query) in queries() {
        let expr = parser::parse(&query).unwrap_or_else(|e| panic!("{place}: {e}\n{query}"));
        let mut names = BTreeSet::new();
        metric_names(&expr, &mut names);
        assert!(!names.is_empty(), "{place} names no metric: {query}");
        for name in names {
            if !operator.contains_key(&name) && !etcd.contains(&name) {
                unknown.push(format!("{place}: {name}"));
            }
            used.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics neither the operator exports (telemetry/metrics.rs) nor listed as etcd's \
         (deploy/monitoring/etcd-metrics.txt):\n{}",
        unknown.join("\n")
    );
    let unused: Vec<&String> = etcd.difference(&used).collect();
    assert!(
        unused.is_empty(),
        "deploy/monitoring/etcd-metrics.txt lists metrics no query uses: {unused:?}"
    );
}

#[test]
fn a_renamed_metric_is_caught() {
    let expr =
        parser::parse("sum(rate(etcd_operator_reconcile_errorz_total[5m])) > 0").expect("parses");
    let mut names = BTreeSet::new();
    metric_names(&expr, &mut names);
    assert_eq!(
        names,
        BTreeSet::from(["etcd_operator_reconcile_errorz_total".to_owned()])
    );
    assert!(!operator_metrics().contains_key("etcd_operator_reconcile_errorz_total"));
    assert!(!etcd_metrics().contains("etcd_operator_reconcile_errorz_total"));
}

/// GET /metrics of a plain-HTTP URL.
async fn scrape(url: &str) -> String {
    let address = url.strip_prefix("http://").expect("a plain http URL");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream
            .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        std::io::Result::Ok(String::from_utf8_lossy(&response).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .unwrap_or_else(|_| panic!("GET {url}/metrics timed out"))
        .unwrap_or_else(|e| panic!("GET {url}/metrics: {e}"));
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.contains(" 200 "), "GET {url}/metrics: {head}");
    body.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_metrics_listed_are_what_each_pinned_etcd_serves() {
    let listed = etcd_metrics();
    for release in ["etcd-3.6", "etcd-3.7"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut member = EtcdProcess::new(dir.path(), "m0").with_metrics();
        member.set_binary(&upstream_set(release).join("etcd"));
        let initial = initial_cluster([&member]);
        member
            .start(&initial, "new", "monitoring")
            .unwrap_or_else(|e| panic!("{e}"));
        member
            .wait_serving(READY_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{release}: {e}\n{}", member.log_tail()));
        let exposition = scrape(member.metrics_url.as_deref().expect("a metrics URL")).await;
        let served: BTreeSet<&str> = exposition
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .filter_map(|line| line.split(['{', ' ']).next())
            .collect();
        let missing: Vec<&String> = listed
            .iter()
            .filter(|name| !served.contains(name.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "{release} does not serve {missing:?} (deploy/monitoring/etcd-metrics.txt)"
        );
        member.kill();
    }
}

/// The anchors of the level-two headings of a Markdown file.
fn section_anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(|heading| {
            heading
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn every_alert_has_a_summary_a_description_and_its_runbook_section() {
    let anchors = section_anchors(&read("docs/runbooks.md"));
    for alert in alerts() {
        let name = text(&alert, "alert");
        let annotations = &alert["annotations"];
        for field in ["summary", "description"] {
            assert!(
                annotations[field].as_str().is_some_and(|s| s.len() > 20),
                "{name} has no {field}"
            );
        }
        let url = text(annotations, "runbook_url");
        let anchor = url
            .split_once("docs/runbooks.md#")
            .map(|(_, anchor)| anchor)
            .unwrap_or_else(|| {
                panic!("{name}: runbook_url {url} is not a section of docs/runbooks.md")
            });
        assert_eq!(
            anchor,
            name.to_lowercase(),
            "{name}: each alert has the section named after it"
        );
        assert!(
            anchors.contains(anchor),
            "{name}: docs/runbooks.md has no section `## {name}`"
        );
        assert!(
            alert["labels"]["severity"].as_str().is_some(),
            "{name} has no severity"
        );
    }
}

#[test]
fn every_alert_has_promtool_cases_that_fire_and_that_do_not() {
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    let dir = repo_file("deploy/monitoring/tests");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("deploy/monitoring/tests") {
        let path = entry.expect("entry").path();
        if !path.to_string_lossy().ends_with(".test.yaml") {
            continue;
        }
        files += 1;
        let file: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).expect("read"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for test in file["tests"].as_array().expect("tests") {
            for case in test["alert_rule_test"].as_array().into_iter().flatten() {
                let name = text(case, "alertname").to_owned();
                match case["exp_alerts"].as_array() {
                    Some(alerts) if !alerts.is_empty() => fires.insert(name),
                    _ => silent.insert(name),
                };
            }
        }
    }
    assert!(files > 0, "no *.test.yaml in {}", dir.display());
    for alert in alerts() {
        let name = text(&alert, "alert");
        assert!(fires.contains(name), "no promtool case where {name} fires");
        assert!(
            silent.contains(name),
            "no promtool case where {name} does not fire"
        );
    }
}

fn labels_of(value: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("labels {value}: {e}"))
}

/// `matchLabels` all found among `labels`.
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let wanted = labels_of(&selector["matchLabels"]);
    !wanted.is_empty() && wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn pod_monitor<'a>(monitors: &'a [Value], name: &str) -> &'a Value {
    monitors
        .iter()
        .find(|m| m["kind"] == "PodMonitor" && m["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no PodMonitor {name}"))
}

/// A member Pod as the operator builds it.
fn member() -> k8s_openapi::api::core::v1::Pod {
    let cluster: EtcdCluster = serde_saphyr::from_str(
        "apiVersion: durable-etcd.io/v1alpha1\nkind: EtcdCluster\n\
         metadata: {name: main, namespace: prod, uid: 1234-5678}\n\
         spec: {replicas: 3, storage: {storageClassName: standard, size: 2Gi}}\n",
    )
    .expect("an EtcdCluster");
    member_pod(
        &cluster,
        &MemberAddressing::new("main", "prod"),
        "example.org/etcd-operator:dev",
        1,
        &Bootstrap::New {
            token: "main-1234".to_owned(),
            initial_members: vec![0, 1, 2],
        },
        &MemberIdentity {
            cluster_token: "main-1234".to_owned(),
            cluster_id: None,
            member_id: None,
        },
    )
}

/// The label a Kubernetes pod label becomes in Prometheus' service
/// discovery.
fn discovered(label: &str) -> String {
    let sanitized: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("__meta_kubernetes_pod_label_{sanitized}")
}

#[test]
fn the_pod_monitors_select_the_operator_and_the_members_by_their_metrics_ports() {
    let monitors = yaml_documents("deploy/monitoring/pod-monitors.yaml");

    // The operator's Deployment.
    let deployment = yaml_documents("deploy/operator.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the operator's Deployment");
    let template = &deployment["spec"]["template"];
    let operator = pod_monitor(&monitors, "etcd-operator");
    assert_eq!(
        operator["metadata"]["namespace"],
        deployment["metadata"]["namespace"]
    );
    assert!(selects(
        &operator["spec"]["selector"],
        &labels_of(&template["metadata"]["labels"])
    ));
    let endpoint = &operator["spec"]["podMetricsEndpoints"][0];
    assert_eq!(
        endpoint["honorLabels"], true,
        "the operator's namespace and cluster labels are kept"
    );
    let ports: Vec<&Value> = template["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .collect();
    assert!(
        ports.iter().any(|p| p["name"] == endpoint["port"]),
        "the operator's Pod has no port {}",
        endpoint["port"]
    );

    // The member Pods, as the operator builds them.
    let pod = member();
    let labels = pod.metadata.labels.clone().expect("labels");
    let members = pod_monitor(&monitors, "etcd-members");
    assert_eq!(members["spec"]["namespaceSelector"]["any"], true);
    assert!(
        selects(&members["spec"]["selector"], &labels),
        "the member Pod's labels {labels:?}"
    );
    let endpoint = &members["spec"]["podMetricsEndpoints"][0];
    let etcd = pod
        .spec
        .as_ref()
        .expect("spec")
        .containers
        .iter()
        .find(|c| {
            c.ports
                .iter()
                .flatten()
                .any(|p| p.name.as_deref() == endpoint["port"].as_str())
        })
        .unwrap_or_else(|| panic!("no member container has port {}", endpoint["port"]));
    let port = etcd
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == endpoint["port"].as_str())
        .expect("the port");
    let listens = format!(
        "--listen-metrics-urls=http://0.0.0.0:{}",
        port.container_port
    );
    assert!(
        etcd.args.iter().flatten().any(|a| *a == listens)
            || etcd.command.iter().flatten().any(|a| *a == listens),
        "etcd serves its metrics in plain HTTP on port {}: {:?}",
        port.container_port,
        etcd.args
    );
    for relabeling in endpoint["relabelings"].as_array().expect("relabelings") {
        let source = relabeling["sourceLabels"][0].as_str().expect("a source");
        assert!(
            labels.keys().any(|label| discovered(label) == source),
            "{source} is no label of the member Pod: {labels:?}"
        );
    }
    assert!(
        endpoint["relabelings"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["targetLabel"] == "cluster"),
        "etcd's series carry the cluster's name as `cluster`, like the operator's"
    );
}

#[test]
fn docs_metrics_describes_every_metric() {
    let docs = read("docs/metrics.md");
    let families: BTreeSet<String> = operator_metrics().into_values().collect();
    for family in families {
        let exposed = [
            family.clone(),
            format!("{family}_total"),
            format!("{family}_bucket"),
        ];
        assert!(
            exposed
                .iter()
                .any(|name| docs.contains(&format!("`{name}`"))),
            "docs/metrics.md does not describe {family}"
        );
    }
    for name in etcd_metrics() {
        assert!(
            docs.contains(&format!("`{name}`"))
                || docs.contains(&format!("`{}`", name.trim_end_matches("_bucket"))),
            "docs/metrics.md does not name etcd's {name}"
        );
    }
}
