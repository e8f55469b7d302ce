#!/usr/bin/env bash
# The test command: lint, generated-file drift, the monitoring checks (alert
# rules under promtool, metric names of every query), the Helm chart's
# checks, unit and property tests, integration tests against real etcd, the
# images, and end-to-end tests on the lab running those images.
# Needs root (the lab creates network namespaces) and the upstream binaries
# (`make deps`). Everything runs in the dev profile: one build serves the
# binaries and every test, which keeps CI's compile time down.
set -euo pipefail
cd "$(dirname "$0")/.."

# A build from scratch gains nothing from incremental compilation's caches.
if [[ "${CI:-}" == "true" ]]; then
	export CARGO_INCREMENTAL=0
fi

step() { printf '\n=== %s (%d s since the start)\n' "$*" "$SECONDS"; }

step "free disk space"
bash scripts/check-disk.sh

step "format"
cargo fmt --all --check

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build every binary and test binary (one build, so it runs in parallel)"
cargo test --workspace --locked --no-run

step "CRD drift: deploy/ must match the Rust types"
./target/debug/etcd-operator crd >/tmp/etcd-operator-crd.yaml
# `crd` prints every CRD as one stream, each document led by `---`.
for crd in etcdclusters etcdbackups etcdbackupschedules; do
	echo '---'
	cat "deploy/crds/$crd.yaml"
done | diff -u - /tmp/etcd-operator-crd.yaml

step "monitoring: promtool check and unit tests of the alert rules, every metric of the alerts and the dashboard exists"
bash scripts/check-monitoring.sh

step "Helm: the chart against deploy/ (helm lint, the default render object by object, the namespaced render)"
bash scripts/check-helm.sh

# The images the lab runs (the operator's from a static build of this tree,
# in the dev profile; etcd's from the pinned releases) build in a target
# directory of their own, beside the tests below, which wait on etcd more
# than on the CPU.
step "images: make image (dev profile), in the background"
mkdir -p target
IMAGE_PROFILE=debug bash scripts/build-images.sh >target/images-build.log 2>&1 &
images_build=$!

step "unit, property and etcd integration tests"
cargo test --workspace --locked --lib --bins
cargo test -p module-graph --locked --tests
# The linearizability checker of the chaos campaign: its classic cases,
# its property tests against real executions and a brute-force checker.
cargo test -p linearizability --locked
cargo test -p etcd-operator --locked --test etcd_layer
cargo test -p etcd-operator --locked --test member_guard_join
for t in $(ls crates/etcd-operator/tests/backup_*.rs 2>/dev/null | xargs -n1 basename | sed 's/\.rs$//'); do
	cargo test -p etcd-operator --locked --test "$t"
done

# The lab's nodes pull those images from its registry: every lab test
# below runs on them.
step "images: the build's end, and their checks (no shell, no C library, the guard inside etcd's image)"
if ! wait "$images_build"; then
	cat target/images-build.log
	echo "make image failed (log above)" >&2
	exit 1
fi
tail -n 5 target/images-build.log
bash scripts/check-images.sh

step "lab and end-to-end tests, ${LAB_LANES:-4} lab lanes side by side"
bash scripts/lab-tests.sh

step "done"
