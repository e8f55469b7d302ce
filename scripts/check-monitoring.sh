#!/usr/bin/env bash
# The checks of deploy/monitoring:
# - promtool (Prometheus v3.16.0, built from tools/prometheus by
#   tools/build-upstream.sh) checks the PrometheusRule's rules and runs their
#   unit tests, deploy/monitoring/tests/*.test.yaml: every alert firing and
#   not firing;
# - tests/monitoring_metrics.rs: every metric an alert or the dashboard
#   names is one the operator exports or one of etcd's in
#   deploy/monitoring/etcd-metrics.txt (which real etcd members of each
#   pinned release serve), every alert has its runbook section and both kinds
#   of promtool case, the PodMonitors select the operator's and the members'
#   Pods, docs/metrics.md describes every metric.
# Part of scripts/test.sh; runs alone as well (as any user that can build).
set -euo pipefail
cd "$(dirname "$0")/.."

promtool="$(bash tools/build-upstream.sh | grep '/prometheus-[0-9a-f]*$')/promtool"

# promtool reads plain rule files: the PrometheusRule's spec is one once
# unindented. The tests name it etcd-operator.rules.yaml beside them.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
awk 'found { sub(/^  /, ""); print } /^spec:$/ { found = 1 }' \
	deploy/monitoring/prometheus-rule.yaml >"$work/etcd-operator.rules.yaml"
if [[ "$(head -n1 "$work/etcd-operator.rules.yaml")" != "groups:" ]]; then
	echo "deploy/monitoring/prometheus-rule.yaml: spec must hold only groups:" >&2
	exit 1
fi
cp deploy/monitoring/tests/*.test.yaml "$work/"

"$promtool" check rules "$work/etcd-operator.rules.yaml"
(cd "$work" && "$promtool" test rules ./*.test.yaml)

cargo test -p etcd-operator --locked --test monitoring_metrics
