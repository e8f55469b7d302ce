#!/usr/bin/env bash
# `make image`: the OCI images of the operator and of every etcd release the
# lab builds, written without a container engine (go-containerregistry's
# crane, pinned in tools/crane, and GNU tar). docs/images.md explains them.
#
# Output, in target/images/ (the whole directory is replaced):
#   <dir>/        one OCI image layout per image (oci-layout, index.json,
#                 blobs/): etcd-operator/, etcd-<X.Y.Z>/ per etcd set
#   images.tsv    one line per reference: `<reference>\t<dir>`, <dir>
#                 relative to target/images/; every etcd layout is listed under
#                 each official name of its release:
#                   gcr.io/etcd-development/etcd:v<X.Y.Z>
#                   quay.io/coreos/etcd:v<X.Y.Z>
#                   registry.k8s.io/etcd:<X.Y.Z>-0
# The lab reads images.tsv and pushes every layout under every reference it
# lists into its own registry: keep exactly this format (two fields, one tab,
# no header, no comment lines).
#
# Reproducible: the same inputs (binaries, host CA bundle, SOURCE_DATE_EPOCH,
# git commit) give the same digests. Layers are GNU tar archives with numeric
# owners, entries in byte order and every mtime at SOURCE_DATE_EPOCH (default:
# the time of the HEAD commit); the image config carries no build time (its
# `created` is the zero time, as crane writes it).
#
# Knobs:
#   IMAGE_REPOSITORY  operator image repository (ghcr.io/durable-etcd/etcd-operator)
#   IMAGE_TAG         operator image tag (dev)
#   IMAGE_PROFILE     release (default) or debug: the cargo profile of the
#                     operator binary (scripts/build-static.sh)
#   UPSTREAM_DIRS     the output of `bash tools/build-upstream.sh` when the
#                     caller already has it (it is run otherwise)
#   CRANE             a crane binary to use instead of the pinned one
#
# A step needs a registry (crane sets an image's config only in one): a
# `crane registry serve` on 127.0.0.1 for the duration of the script.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."

repository="${IMAGE_REPOSITORY:-ghcr.io/durable-etcd/etcd-operator}"
tag="${IMAGE_TAG:-dev}"
out=target/images
source_url=https://github.com/durable-etcd/etcd-operator
# distroless' environment: the usual PATH, and the CA bundle for OpenSSL.
image_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ca_bundle=etc/ssl/certs/ca-certificates.crt

say() { printf 'build-images: %s\n' "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}
# shellcheck source=scripts/lib/crane.sh
source scripts/lib/crane.sh

# --- inputs ------------------------------------------------------------------

IMAGE_PROFILE="${IMAGE_PROFILE:-release}" bash scripts/build-static.sh >&2
operator_binary=target/static/etcd-operator

upstream="${UPSTREAM_DIRS:-$(bash tools/build-upstream.sh)}"

UPSTREAM_DIRS="$upstream" find_crane

if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
	SOURCE_DATE_EPOCH="$(git log -1 --format=%ct 2>/dev/null || echo 0)"
fi
export SOURCE_DATE_EPOCH
revision="$(git rev-parse HEAD 2>/dev/null || true)"
version="$(cargo metadata --no-deps --format-version 1 --locked --offline |
	jq -r '.packages[] | select(.name == "etcd-operator") | .version')"
[[ -n "$version" ]] || die "no version of the etcd-operator crate in cargo metadata"
[[ -s "/$ca_bundle" ]] || die "no CA bundle at /$ca_bundle (Debian: ca-certificates)"

work="$(mktemp -d "${TMPDIR:-/tmp}/build-images.XXXXXX")"
cleanup() {
	stop_loopback_registry
	rm -rf "$work"
}
trap cleanup EXIT

# --- layers ------------------------------------------------------------------

# layer OUT ROOT [PATH=UID:GID]...: a tar of every entry under ROOT, in byte
# order of their paths, owned by 0:0 unless named, each mtime at
# SOURCE_DATE_EPOCH, pax format without access or change times. One append
# per entry, so each entry gets its own numeric owner.
layer() {
	local out="$1" root="$2" path owner
	shift 2
	local -A owners=()
	for owner in "$@"; do
		owners["${owner%%=*}"]="${owner#*=}"
	done
	rm -f "$out"
	while IFS= read -r path; do
		owner="${owners[$path]:-0:0}"
		tar --append --file="$out" --directory="$root" --no-recursion \
			--format=pax --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
			--mtime="@$SOURCE_DATE_EPOCH" --numeric-owner \
			--owner="${owner%%:*}" --group="${owner#*:}" -- "$path"
	done < <(cd "$root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort)
}

# The base of every image, like distroless' static image: users, name
# service switch, CA certificates, /tmp and the non-root user's home. No
# shell, no package manager, no C library.
base="$work/base"
mkdir -p "$base/etc/ssl/certs" "$base/home/nonroot" "$base/root" "$base/tmp"
cat >"$base/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$base/etc/group" <<'GROUP'
root:x:0:
nonroot:x:65532:
GROUP
cat >"$base/etc/nsswitch.conf" <<'NSSWITCH'
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
NSSWITCH
cp "/$ca_bundle" "$base/$ca_bundle"
find "$base" -type d -exec chmod 0755 {} +
find "$base" -type f -exec chmod 0644 {} +
chmod 1777 "$base/tmp"
chmod 0700 "$base/root" "$base/home/nonroot"
layer "$work/base.tar" "$base" home/nonroot=65532:65532

operator="$work/operator"
mkdir -p "$operator/usr/local/bin"
install -m 0755 "$operator_binary" "$operator/usr/local/bin/etcd-operator"
find "$operator" -type d -exec chmod 0755 {} +
layer "$work/operator.tar" "$operator"

# --- images --------------------------------------------------------------------

start_loopback_registry

# crane ARGS...: crane, its log kept for the error message.
run_crane() {
	"$crane" "$@" 2>>"$work/crane.log" ||
		die "crane $1 failed: $(tail -n 20 "$work/crane.log")"
}

# image DIR NAME LAYER... -- MUTATE-FLAGS...: the layers on an empty OCI
# base, the config set by `crane mutate`, pulled back as an OCI layout into
# $next/DIR. Sets `digest` to the manifest digest.
image() {
	local dir="$1" name="$2" layers=()
	shift 2
	while [[ "$1" != -- ]]; do
		layers+=(-f "$1")
		shift
	done
	shift
	run_crane append --oci-empty-base "${layers[@]}" -t "$registry/$name:layers" >/dev/null
	run_crane mutate "$registry/$name:layers" --set-platform linux/amd64 \
		--env "PATH=$image_path" --env "SSL_CERT_FILE=/$ca_bundle" \
		"$@" -t "$registry/$name:image" >/dev/null
	run_crane pull --format=oci "$registry/$name:image" "$next/$dir"
	digest="$(run_crane digest "$registry/$name:image")"
}

next="$out.next"
rm -rf "$next"
mkdir -p "$next"
tsv="$next/images.tsv"
: >"$tsv"

labels=(
	--label "org.opencontainers.image.source=$source_url"
	--label "org.opencontainers.image.version=$version"
	--label "org.opencontainers.image.title=etcd-operator"
)
[[ -n "$revision" ]] && labels+=(--label "org.opencontainers.image.revision=$revision")
image etcd-operator etcd-operator "$work/base.tar" "$work/operator.tar" -- \
	--user 65532:65532 --workdir /home/nonroot \
	--entrypoint /usr/local/bin/etcd-operator --cmd run "${labels[@]}"
printf '%s\t%s\n' "$repository:$tag" etcd-operator >>"$tsv"
say "$repository:$tag -> etcd-operator ($digest)"

# One image per etcd set of tools/, laid out like etcd's own release images
# (etcd's Dockerfile): the three binaries in /usr/local/bin, the directories
# of its two WORKDIRs, ports 2379 and 2380, CMD etcd, as root, on a
# distroless static base.
for module in tools/etcd-*/; do
	module="${module%/}"
	set_name="$(basename "$module")"
	etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" && NF >= 2 { sub(/^v/, "", $2); print $2 }' "$module/go.mod")"
	[[ "$etcd_version" =~ ^[0-9]+[.][0-9]+[.][0-9]+$ ]] ||
		die "no etcd release pinned in $module/go.mod (go.etcd.io/etcd/server/v3)"
	set_dir="$(grep -E "/$set_name-[0-9a-f]+\$" <<<"$upstream" || true)"
	[[ -n "$set_dir" && -f "$set_dir/.complete" ]] ||
		die "the $set_name set is not built (bash tools/build-upstream.sh)"
	files="$work/$set_name"
	mkdir -p "$files/usr/local/bin" "$files/var/etcd" "$files/var/lib/etcd"
	for binary in etcd etcdctl etcdutl; do
		install -m 0755 "$set_dir/$binary" "$files/usr/local/bin/$binary"
	done
	find "$files" -type d -exec chmod 0755 {} +
	layer "$work/$set_name.tar" "$files"
	dir="etcd-$etcd_version"
	image "$dir" "etcd-$etcd_version" "$work/base.tar" "$work/$set_name.tar" -- \
		--user 0 --workdir /var/lib/etcd --exposed-ports 2379/tcp,2380/tcp \
		--cmd /usr/local/bin/etcd \
		--label "org.opencontainers.image.source=https://github.com/etcd-io/etcd" \
		--label "org.opencontainers.image.version=$etcd_version" \
		--label "org.opencontainers.image.title=etcd"
	for reference in "gcr.io/etcd-development/etcd:v$etcd_version" \
		"quay.io/coreos/etcd:v$etcd_version" "registry.k8s.io/etcd:$etcd_version-0"; do
		printf '%s\t%s\n' "$reference" "$dir" >>"$tsv"
	done
	say "etcd $etcd_version -> $dir ($digest)"
done

rm -rf "$out.old"
if [[ -d "$out" ]]; then
	mv "$out" "$out.old"
fi
mv "$next" "$out"
rm -rf "$out.old"
say "wrote $out/ (images.tsv):"
cat "$out/images.tsv" >&2
