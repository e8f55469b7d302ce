#!/usr/bin/env bash
# Builds the pinned upstream binaries that etcd-lab runs (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, and etcd/etcdctl/etcdutl
# for each etcd minor line) from the official Go modules under tools/, the
# object-store servers of the backup tests (tools/s3-server, tools/gcs-server),
# crane for the images and the lab's registry (tools/crane),
# promtool for the alert rules' checks (tools/prometheus), helm for the
# chart's checks and lab test (tools/helm), the cert-manager controllers for
# the cert-manager issuer path of the TLS (tools/cert-manager) and, with npm,
# Azurite (tools/azurite/install.sh).
#
# Output goes to "$ETCD_LAB_CACHE/upstream/<module>-<pin hash>/", outside the
# repository (default ETCD_LAB_CACHE=$HOME/.cache/etcd-lab), so a clean clone
# on the same machine reuses it. A set whose go.mod/go.sum (and build tags,
# `build_tags=...` before `build_set`) are unchanged is
# skipped (for tools/s3-server, tools/gcs-server and tools/cert-manager,
# their .go files count too). Prints the directory of each set, one per
# line, on stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ETCD_LAB_CACHE:-$HOME/.cache/etcd-lab}"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly

pin_dir() {
	local module_dir="$1"
	local hash
	# The pins, then the module's own .go files in byte order (the mains of
	# the test servers and of cert-manager; the other upstream sets have
	# none), so that editing a main builds its set anew.
	hash="$(cd "$module_dir" && {
		cat go.mod go.sum
		find . -maxdepth 1 -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0r cat
		# Build tags change the binary too (none: the hash of the pins
		# alone, as before tags were used).
		[[ -z "${build_tags:-}" ]] || echo "tags: $build_tags"
	} | sha256sum | cut -c1-12)"
	echo "$cache/upstream/$(basename "$module_dir")-$hash"
}

build_set() {
	local module_dir="$1" ldflags="$2"
	shift 2
	local out
	out="$(pin_dir "$module_dir")"
	if [[ -f "$out/.complete" ]]; then
		echo "$out"
		return
	fi
	mkdir -p "$out"
	local start=$SECONDS
	if [[ "$(basename "$module_dir")" == kubernetes ]]; then
		# One build of every binary: the packages they share compile once,
		# and the compiles and links of the binaries run side by side.
		echo "building $(printf '%s ' "${@##*/}")(kubernetes)" >&2
		rm -rf "$out/.partial" && mkdir -p "$out/.partial"
		(cd "$module_dir" && go build -trimpath -tags "${build_tags:-}" -ldflags "$ldflags" -o "$out/.partial/" "$@")
		mv "$out"/.partial/* "$out"/ && rmdir "$out/.partial"
		echo "$((SECONDS - start))" >"$out/.build-seconds"
		touch "$out/.complete"
		echo "$out"
		return
	fi
	for pkg in "$@"; do
		local name
		name="$(basename "$pkg")"
		case "$pkg" in
		go.etcd.io/etcd/server/v3) name=etcd ;;
		go.etcd.io/etcd/etcdctl/v3) name=etcdctl ;;
		go.etcd.io/etcd/etcdutl/v3) name=etcdutl ;;
		etcd-operator.local/tools/cert-manager) name=cert-manager-controller ;;
		esac
		echo "building $name ($(basename "$module_dir"))" >&2
		(cd "$module_dir" && go build -trimpath -tags "${build_tags:-}" -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
		mv "$out/$name.tmp" "$out/$name"
	done
	echo "$((SECONDS - start))" >"$out/.build-seconds"
	touch "$out/.complete"
	echo "$out"
}

kube_version="$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/kubernetes/go.mod")"
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
	kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

for etcd_dir in "$here"/etcd-*/; do
	build_set "${etcd_dir%/}" "-s -w" \
		go.etcd.io/etcd/server/v3 \
		go.etcd.io/etcd/etcdctl/v3 \
		go.etcd.io/etcd/etcdutl/v3
done

# An S3-compatible server for the backup tests (gofakes3 in a tiny main);
# see docs/backup.md for why not MinIO.
build_set "$here/s3-server" "-s -w" etcd-operator.local/tools/s3-server

# A GCS server for the backup tests (fake-gcs-server in a small main that
# adds the XML API writes it lacks); see docs/backup.md.
build_set "$here/gcs-server" "-s -w" etcd-operator.local/tools/gcs-server

# promtool, which checks and unit-tests the alert rules of deploy/monitoring.
# Prometheus 3 publishes release 3.N.P as the Go module version v0.3NN.P.
# The rules need no service discovery: the build tag remove_all_sd leaves
# out every discovery mechanism (and the cloud SDKs they import), which
# takes its build on a fresh machine from 268 s to 119 s on 2 cores.
prom_module="$(awk '$1=="github.com/prometheus/prometheus" {print $2}' "$here/prometheus/go.mod")"
prom_version="$(echo "$prom_module" | awk -F. '{printf "%d.%d.%s", int($2 / 100), $2 % 100, $3}')"
build_tags=remove_all_sd build_set "$here/prometheus" \
	"-s -w -X github.com/prometheus/common/version.Version=$prom_version -X github.com/prometheus/common/version.Branch=HEAD" \
	github.com/prometheus/prometheus/cmd/promtool

# crane (go-containerregistry): writes the OCI images of `make image` and
# serves the lab's registry, from which the lab's nodes pull them.
build_set "$here/crane" "-s -w" github.com/google/go-containerregistry/cmd/crane

# helm, which lints and renders charts/etcd-operator (scripts/check-helm.sh)
# and installs it on the lab (tests/e2e_helm.rs); the version variable makes
# `helm version` print the release.
helm_version="$(awk '$1=="helm.sh/helm/v4" {print $2}' "$here/helm/go.mod")"
build_set "$here/helm" \
	"-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
	helm.sh/helm/v4/cmd/helm

# The cert-manager controllers (issuers, certificates, the approver and the
# CA and self-signed signers) in a small main, as cert-manager-controller:
# the cert-manager issuer path of the operator's TLS, tested on the lab. The
# module's own cmd/controller is a module of its own that the Go proxy does
# not serve.
# Its CRDs of the same release go beside the binary, in crds/ (the
# cert-manager.io kinds; the tests install them on the lab).
cert_manager_out="$(build_set "$here/cert-manager" "-s -w" etcd-operator.local/tools/cert-manager)"
if [[ ! -f "$cert_manager_out/crds/.complete" ]]; then
	cert_manager_module="$(cd "$here/cert-manager" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
	rm -rf "$cert_manager_out/crds" && mkdir -p "$cert_manager_out/crds"
	cp "$cert_manager_module"/deploy/crds/cert-manager.io_*.yaml "$cert_manager_out/crds/"
	touch "$cert_manager_out/crds/.complete"
fi
echo "$cert_manager_out"

# Azurite, the Azure Storage emulator, from npm (package-lock.json pinned).
"$here/azurite/install.sh"

build_set "$here/kubernetes" "$kube_ldflags" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kubectl
