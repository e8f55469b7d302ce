#!/usr/bin/env bash
# The checks of charts/etcd-operator, the Helm path to what
# `kubectl apply -k deploy/` installs (docs/helm.md):
# - its copies of deploy/ are byte-identical: crds/*.yaml of deploy/crds/,
#   files/ of deploy/monitoring's PodMonitors, PrometheusRule and dashboard;
#   Chart.yaml's version and appVersion are the workspace's version;
# - `helm lint --strict` (Helm v4.3.1, built from tools/helm by
#   tools/build-upstream.sh) with the default, the namespaced and the
#   monitoring values;
# - with default values, `helm template --include-crds` renders exactly the
#   objects of `kubectl kustomize deploy/`, object by object, but for
#   Helm's four labels (HELM_LABELS below; docs/helm.md says why each);
#   with monitoring.enabled, the objects it adds are those of
#   `kubectl kustomize deploy/monitoring`;
# - namespaced (ci/namespaced-values.yaml): the watched namespace gets a
#   Role and RoleBinding with every rule on namespaced objects, the
#   ClusterRole keeps only the cluster-scoped reads, the two together grant
#   what the default ClusterRole grants, the operator is told to watch
#   that namespace, and nothing else changes;
# - values that cannot work are refused when rendered.
# Exits non-zero with a diff on any drift. Part of scripts/test.sh; runs
# alone as well.
set -euo pipefail
cd "$(dirname "$0")/.."

upstream="$(bash tools/build-upstream.sh)"
helm="$(grep '/helm-[0-9a-f]*$' <<<"$upstream")/helm"
kubectl="$(grep '/kubernetes-[0-9a-f]*$' <<<"$upstream")/kubectl"

chart=charts/etcd-operator
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
fail() {
	echo "check-helm: $*" >&2
	failed=1
}

echo "--- copies of deploy/ in the chart"
for crd in deploy/crds/*.yaml; do
	cmp "$crd" "$chart/crds/$(basename "$crd")" ||
		fail "$chart/crds/$(basename "$crd") differs from $crd: cp $crd $chart/crds/"
done
for copy in "$chart"/crds/*.yaml; do
	[[ -f "deploy/crds/$(basename "$copy")" ]] || fail "$copy has no deploy/crds/ original"
done
for file in pod-monitors.yaml prometheus-rule.yaml dashboard.json; do
	cmp "deploy/monitoring/$file" "$chart/files/$file" ||
		fail "$chart/files/$file differs from deploy/monitoring/$file: cp deploy/monitoring/$file $chart/files/"
done
workspace_version="$(awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version *=/ { print $2; exit }' Cargo.toml)"
for field in version appVersion; do
	value="$(awk -v f="$field:" '$1 == f { gsub(/"/, "", $2); print $2 }' "$chart/Chart.yaml")"
	[[ "$value" == "$workspace_version" ]] ||
		fail "$chart/Chart.yaml: $field is '$value', the workspace's version is '$workspace_version'"
done

echo "--- helm lint --strict"
"$helm" version --short
"$helm" lint --strict "$chart"
"$helm" lint --strict "$chart" -f "$chart/ci/namespaced-values.yaml"
"$helm" lint --strict "$chart" --set monitoring.enabled=true --set-string monitoring.labels.release=kube-prometheus-stack

echo "--- renders"
render() { "$helm" template etcd-operator "$chart" --namespace default --include-crds "$@"; }
render >"$work/helm-default.yaml"
render --set monitoring.enabled=true >"$work/helm-monitoring.yaml"
render -f "$chart/ci/namespaced-values.yaml" >"$work/helm-namespaced.yaml"
"$kubectl" kustomize deploy/ >"$work/kustomize.yaml"
"$kubectl" kustomize deploy/monitoring >"$work/kustomize-monitoring.yaml"

echo "--- values that cannot work are refused"
refused() {
	local says="$1"
	shift
	if render "$@" >/dev/null 2>"$work/refused.txt"; then
		fail "rendered with $*, which must be refused"
	elif ! grep -q -- "$says" "$work/refused.txt"; then
		fail "refused $* without saying '$says':"
		cat "$work/refused.txt" >&2
	fi
}
refused "cannot be stored in it" --namespace etcd-operator-system
refused "helm uninstall" --set watchNamespace=etcd-operator-system
refused "/log/format" --set log.format=yaml
refused "additional properties" --set replica=2

echo "--- the chart against deploy/"
python3 - "$work" <<'PYTHON' || failed=1
import difflib
import sys

import yaml

work = sys.argv[1]

# Helm's labels, on every object the chart templates (not on the CRDs,
# which are deploy/'s files, nor on selectors or the Pod template):
# the chart and version that rendered the object, who applies it, which
# release it belongs to and the operator's version. These and nothing else
# may differ from deploy/.
HELM_LABELS = {
    "helm.sh/chart": "etcd-operator-{version}",
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": "etcd-operator",
    "app.kubernetes.io/version": "{app_version}",
}

with open("charts/etcd-operator/Chart.yaml") as f:
    chart = yaml.safe_load(f)
expected_labels = {
    key: value.format(version=chart["version"], app_version=chart["appVersion"])
    for key, value in HELM_LABELS.items()
}


def integral(value):
    """Whole floats as integers: kustomize writes a CRD schema's
    `minimum: 1` as `1.0` (JSON numbers), which means the same."""
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def load(name):
    with open(f"{work}/{name}") as f:
        objects = {}
        for obj in yaml.safe_load_all(f):
            if not obj:
                continue
            obj = integral(obj)
            meta = obj["metadata"]
            key = (obj["kind"], meta.get("namespace", ""), meta["name"])
            if key in objects:
                raise SystemExit(f"{name}: {key} twice")
            objects[key] = obj
        return objects


problems = []


def without_helm_labels(key, obj):
    """The object with Helm's labels taken off, checked to be all there."""
    if obj["kind"] == "CustomResourceDefinition":
        return obj
    labels = dict(obj["metadata"].get("labels") or {})
    for label, value in expected_labels.items():
        if labels.pop(label, None) != value:
            problems.append(f"{key}: label {label} is not {value!r}")
    obj = yaml.safe_load(yaml.safe_dump(obj))
    if labels:
        obj["metadata"]["labels"] = labels
    else:
        obj["metadata"].pop("labels", None)
    return obj


def text(obj):
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False).splitlines(keepends=True)


def compare(what, helm, kustomize):
    for key in sorted(set(helm) | set(kustomize)):
        if key not in helm:
            problems.append(f"{what}: {key} is in deploy/ but not in the chart")
        elif key not in kustomize:
            problems.append(f"{what}: {key} is in the chart but not in deploy/")
        else:
            ours = without_helm_labels(key, helm[key])
            if ours != kustomize[key]:
                diff = "".join(difflib.unified_diff(
                    text(kustomize[key]), text(ours), "kustomize", "helm"))
                problems.append(f"{what}: {key} differs:\n{diff}")


default = load("helm-default.yaml")
compare("default values", default, load("kustomize.yaml"))

monitoring = load("helm-monitoring.yaml")
added = {k: v for k, v in monitoring.items() if k not in default}
compare("monitoring.enabled", added, load("kustomize-monitoring.yaml"))
for key in default:
    if monitoring.get(key) != default[key]:
        problems.append(f"monitoring.enabled changes {key}")

# Namespaced: the rules of the default ClusterRole, split.
CLUSTER_SCOPED = {"nodes", "persistentvolumes", "storageclasses", "csidrivers"}
namespaced = load("helm-namespaced.yaml")
watched = "team-a"
operator_namespace = "etcd-operator-system"


def grants(rules):
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


cluster_role = namespaced.get(("ClusterRole", "", "etcd-operator"))
role = namespaced.get(("Role", watched, "etcd-operator"))
binding = namespaced.get(("RoleBinding", watched, "etcd-operator"))
if not (cluster_role and role and binding):
    problems.append(f"namespaced: no ClusterRole, Role and RoleBinding etcd-operator in {watched}")
else:
    everything = grants(default[("ClusterRole", "", "etcd-operator")]["rules"])
    cluster_wide = grants(cluster_role["rules"])
    in_namespace = grants(role["rules"])
    outside = {g for g in cluster_wide if g[1] not in CLUSTER_SCOPED}
    if outside:
        problems.append(f"namespaced: the ClusterRole grants namespaced objects: {sorted(outside)}")
    misplaced = {g for g in in_namespace if g[1] in CLUSTER_SCOPED}
    if misplaced:
        problems.append(f"namespaced: the Role grants cluster-scoped objects: {sorted(misplaced)}")
    if cluster_wide | in_namespace != everything:
        problems.append(
            "namespaced: the ClusterRole and Role together do not grant what the default "
            f"ClusterRole grants: missing {sorted(everything - cluster_wide - in_namespace)}, "
            f"extra {sorted((cluster_wide | in_namespace) - everything)}")
    if cluster_wide != {g for g in everything if g[1] in CLUSTER_SCOPED}:
        problems.append("namespaced: the ClusterRole lacks a cluster-scoped read of the default")
    expected_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "etcd-operator"}
    expected_subjects = [{"kind": "ServiceAccount", "name": "etcd-operator", "namespace": operator_namespace}]
    if binding["roleRef"] != expected_ref or binding["subjects"] != expected_subjects:
        problems.append(f"namespaced: the RoleBinding does not bind the Role to the operator: {binding}")
deployment = namespaced.get(("Deployment", operator_namespace, "etcd-operator"))
env = deployment["spec"]["template"]["spec"]["containers"][0]["env"] if deployment else []
if {"name": "ETCD_OPERATOR_NAMESPACE", "value": watched} not in env:
    problems.append(f"namespaced: the operator is not told to watch {watched}: {env}")
# Nothing else changes.
for key, obj in namespaced.items():
    if key in {("ClusterRole", "", "etcd-operator"), ("Role", watched, "etcd-operator"),
               ("RoleBinding", watched, "etcd-operator")}:
        continue
    if key not in default:
        problems.append(f"namespaced: unexpected {key}")
        continue
    if key[0] == "Deployment":
        obj = yaml.safe_load(yaml.safe_dump(obj))
        container = obj["spec"]["template"]["spec"]["containers"][0]
        container["env"] = [e for e in container["env"] if e["name"] != "ETCD_OPERATOR_NAMESPACE"]
    if obj != default[key]:
        problems.append(f"namespaced: {key} differs from the default render")
for key in default:
    if key not in namespaced:
        problems.append(f"namespaced: {key} is missing")

for problem in problems:
    print(f"check-helm: {problem}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"{len(default)} objects as deploy/ has them, {len(added)} as deploy/monitoring has them; "
      f"namespaced: a Role in {watched} with {len(role['rules'])} rules, a ClusterRole with "
      f"{len(cluster_role['rules'])}")
PYTHON

if ((failed)); then
	echo "check-helm: FAILED (the chart and deploy/ must say the same; see above)" >&2
	exit 1
fi
echo "check-helm: ok"
