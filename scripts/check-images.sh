#!/usr/bin/env bash
# Checks that the images of scripts/build-images.sh are what they claim. Run
# it after build-images.sh, as root (it runs the images' programs in their
# own root file systems with chroot). docs/images.md explains the images.
#
# For every layout target/images/images.tsv lists: pushed to a `crane
# registry serve` on 127.0.0.1 (so a registry takes it and its digest stays
# the same) and flattened with `crane export`, then
#   every image: no shell, no C library or dynamic loader, every ELF
#     executable static, the base (users, CA bundle, /tmp, /home/nonroot);
#   the operator image: user 65532:65532, entrypoint and cmd, labels;
#     `etcd-operator --version` runs in its root as user 65532;
#   each etcd image: listed under each official name of its release, laid
#     out like etcd's own image (binaries, WORKDIRs, ports, CMD, root);
#     `etcd --version` (and etcdctl's, etcdutl's) runs in its root and names
#     the release; the member guard works inside it as member Pods run it:
#     installed by the init container (in the operator's root) into a shared
#     directory, it refuses an empty data dir that should hold a member
#     (exit 3), and lets a new member's etcd start (it execs etcd).
# Prints every failed check and exits 1 when any failed.
#
# CRANE: a crane binary to use instead of the pinned one (see build-images.sh).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."

images=target/images
tsv="$images/images.tsv"

failures=0
say() { printf 'check-images: %s\n' "$*" >&2; }
fail() {
	printf 'check-images: FAILED: %s\n' "$*" >&2
	failures=$((failures + 1))
}
die() {
	printf 'check-images: cannot check: %s\n' "$*" >&2
	exit 1
}
# shellcheck source=scripts/lib/crane.sh
source scripts/lib/crane.sh

[[ "$(id -u)" == 0 ]] || die "run as root (chroot)"
[[ -s "$tsv" ]] || die "no $tsv: run scripts/build-images.sh first"

find_crane

work="$(mktemp -d "${TMPDIR:-/tmp}/check-images.XXXXXX")"
cleanup() {
	stop_loopback_registry
	rm -rf "$work"
}
trap cleanup EXIT

start_loopback_registry

# --- images.tsv ----------------------------------------------------------------

declare -A dir_refs=()
operator_dir=
while IFS= read -r line || [[ -n "$line" ]]; do
	IFS=$'\t' read -r reference dir extra <<<"$line"
	if [[ -z "$reference" || -z "$dir" || -n "${extra:-}" || "$line" != "$reference"$'\t'"$dir" ]]; then
		fail "images.tsv: '$line' is not '<reference><TAB><dir>'"
		continue
	fi
	[[ -d "$images/$dir" ]] || {
		fail "images.tsv: $reference names $dir, which is not a directory of $images"
		continue
	}
	dir_refs["$dir"]+="$reference "
	case "$reference" in
	*/etcd-operator:*) operator_dir="$dir" ;;
	esac
done <"$tsv"
[[ -n "$operator_dir" ]] || die "images.tsv lists no */etcd-operator image"

# --- helpers ---------------------------------------------------------------------

# config DIR JQ: the jq filter over the image config of layout DIR (pushed).
config() { jq -c "$2" "$work/$1.config.json"; }

expect_config() {
	local dir="$1" filter="$2" want="$3" got
	got="$(config "$dir" "$filter")"
	[[ "$got" == "$want" ]] || fail "$dir: config $filter is $got, expected $want"
}

# Pushes layout DIR to the loopback registry, keeps its config, and
# flattens it into $work/DIR.root.
flatten() {
	local dir="$1" layout="$images/$1" want got
	[[ "$(jq -r .imageLayoutVersion "$layout/oci-layout" 2>/dev/null)" == 1.0.0 ]] ||
		fail "$dir: no oci-layout file of version 1.0.0"
	[[ "$(jq '.manifests | length' "$layout/index.json")" == 1 ]] ||
		fail "$dir: index.json does not hold exactly one manifest"
	want="$(jq -r '.manifests[0].digest' "$layout/index.json")"
	"$crane" push "$layout" "$registry/check/$dir:pushed" >/dev/null 2>"$work/$dir.push.log" ||
		die "$dir: crane push to a registry failed: $(cat "$work/$dir.push.log")"
	got="$("$crane" digest "$registry/check/$dir:pushed")"
	[[ "$got" == "$want" ]] || fail "$dir: pushed as $got, the layout says $want"
	"$crane" config "$registry/check/$dir:pushed" >"$work/$dir.config.json"
	mkdir -p "$work/$dir.root"
	"$crane" export "$registry/check/$dir:pushed" - |
		tar --extract --numeric-owner --same-permissions --directory "$work/$dir.root"
}

# in_root ROOT UID:GID PROGRAM ARGS...: runs PROGRAM in ROOT as a container
# runtime would: chroot, with its own PID namespace and /proc (the member
# guard finds its own executable there to install it), as UID:GID.
in_root() {
	local root="$1" user="$2"
	shift 2
	mkdir -p "$root/proc"
	unshare --fork --pid --mount-proc="$root/proc" chroot --userspec="$user" "$root" "$@"
}

# What no image may hold: a shell, a C library, a dynamic loader, a
# dynamically linked executable. And the base every image is built on.
check_base() {
	local dir="$1" root="$work/$1.root" found file
	found="$(cd "$root" && find . \( -name sh -o -name bash -o -name dash -o -name ash \
		-o -name zsh -o -name ksh -o -name mksh -o -name csh -o -name tcsh -o -name fish \
		-o -name busybox -o -name toybox \) -print)"
	[[ -z "$found" ]] || fail "$dir: holds a shell: $found"
	found="$(cd "$root" && find . \( -name 'ld-linux*' -o -name 'ld-musl*' -o -name 'libc.so*' \
		-o -name 'libc-*.so' -o -name 'libc.musl*' \) -print)"
	[[ -z "$found" ]] || fail "$dir: holds a C library or dynamic loader: $found"
	while IFS= read -r file; do
		if [[ "$(head -c 4 "$file" | od -An -c | tr -d ' ')" == '177ELF' ]]; then
			if readelf --program-headers "$file" | grep -q INTERP; then
				fail "$dir: ${file#"$root"} is dynamically linked (it names a program interpreter)"
			fi
		fi
	done < <(find "$root" -type f -perm /111)
	grep -qx 'root:x:0:0:root:/root:/sbin/nologin' "$root/etc/passwd" ||
		fail "$dir: /etc/passwd has no root entry"
	grep -qx 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' "$root/etc/passwd" ||
		fail "$dir: /etc/passwd has no nonroot 65532 entry"
	grep -qx 'nonroot:x:65532:' "$root/etc/group" || fail "$dir: /etc/group has no nonroot 65532"
	grep -q '^hosts: *files dns$' "$root/etc/nsswitch.conf" ||
		fail "$dir: /etc/nsswitch.conf does not resolve hosts from files then DNS"
	grep -q 'BEGIN CERTIFICATE' "$root/etc/ssl/certs/ca-certificates.crt" ||
		fail "$dir: no CA certificates at /etc/ssl/certs/ca-certificates.crt"
	[[ "$(stat -c '%a %u' "$root/tmp")" == "1777 0" ]] ||
		fail "$dir: /tmp is $(stat -c '%a %u' "$root/tmp"), expected mode 1777 owned by root"
	[[ "$(stat -c '%u:%g' "$root/home/nonroot")" == "65532:65532" ]] ||
		fail "$dir: /home/nonroot is owned by $(stat -c '%u:%g' "$root/home/nonroot"), expected 65532:65532"
	expect_config "$dir" '.config.Env' \
		'["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"]'
	expect_config "$dir" '[.os, .architecture]' '["linux","amd64"]'
}

# --- the operator image -----------------------------------------------------------

say "operator image: $operator_dir (${dir_refs[$operator_dir]% })"
flatten "$operator_dir"
operator_root="$work/$operator_dir.root"
check_base "$operator_dir"
expect_config "$operator_dir" '.config.User' '"65532:65532"'
expect_config "$operator_dir" '.config.Entrypoint' '["/usr/local/bin/etcd-operator"]'
expect_config "$operator_dir" '.config.Cmd' '["run"]'
crate_version="$(cargo metadata --no-deps --format-version 1 --locked --offline |
	jq -r '.packages[] | select(.name == "etcd-operator") | .version')"
expect_config "$operator_dir" '.config.Labels["org.opencontainers.image.version"]' "\"$crate_version\""
[[ "$(config "$operator_dir" '.config.Labels["org.opencontainers.image.source"]')" == '"https://'* ]] ||
	fail "$operator_dir: no org.opencontainers.image.source label"
if version_line="$(in_root "$operator_root" 65532:65532 /usr/local/bin/etcd-operator --version 2>&1)"; then
	if [[ "$version_line" == "etcd-operator $crate_version" ]]; then
		say "  etcd-operator --version as 65532: $version_line"
	else
		fail "$operator_dir: etcd-operator --version says '$version_line', not etcd-operator $crate_version"
	fi
else
	fail "$operator_dir: etcd-operator --version does not run in the image's root as 65532: $version_line"
fi

# --- the etcd images ----------------------------------------------------------------

etcd_images=0
for dir in "${!dir_refs[@]}"; do
	[[ "$dir" == "$operator_dir" ]] && continue
	etcd_images=$((etcd_images + 1))
	refs="${dir_refs[$dir]}"
	etcd_version="$(grep -oE 'gcr[.]io/etcd-development/etcd:v[0-9]+[.][0-9]+[.][0-9]+ ' <<<"$refs" | sed 's/.*:v//; s/ $//' || true)"
	if [[ -z "$etcd_version" ]]; then
		fail "$dir: not listed as gcr.io/etcd-development/etcd:v<X.Y.Z> (listed as: $refs)"
		continue
	fi
	say "etcd image: $dir (${refs% })"
	for reference in "gcr.io/etcd-development/etcd:v$etcd_version" \
		"quay.io/coreos/etcd:v$etcd_version" "registry.k8s.io/etcd:$etcd_version-0"; do
		[[ " $refs" == *" $reference "* ]] || fail "$dir: not listed in images.tsv as $reference"
	done
	flatten "$dir"
	root="$work/$dir.root"
	check_base "$dir"
	expect_config "$dir" '.config.User' '"0"'
	expect_config "$dir" '.config.Entrypoint' 'null'
	expect_config "$dir" '.config.Cmd' '["/usr/local/bin/etcd"]'
	expect_config "$dir" '.config.WorkingDir' '"/var/lib/etcd"'
	expect_config "$dir" '.config.ExposedPorts' '{"2379/tcp":{},"2380/tcp":{}}'
	for path in var/etcd var/lib/etcd; do
		[[ -d "$root/$path" ]] || fail "$dir: no /$path (a WORKDIR of etcd's image)"
	done
	if out="$(in_root "$root" 0:0 /usr/local/bin/etcd --version 2>&1)"; then
		if grep -qx "etcd Version: $etcd_version" <<<"$out"; then
			say "  etcd --version: $(head -1 <<<"$out")"
		else
			fail "$dir: etcd --version does not say 'etcd Version: $etcd_version': $out"
		fi
	else
		fail "$dir: etcd --version does not run in the image's root: $out"
	fi
	for tool in etcdctl etcdutl; do
		if out="$(in_root "$root" 0:0 "/usr/local/bin/$tool" version 2>&1)"; then
			grep -qx "$tool version: $etcd_version" <<<"$out" ||
				fail "$dir: $tool version does not say '$tool version: $etcd_version': $out"
		else
			fail "$dir: $tool version does not run in the image's root: $out"
		fi
	done

	# The member Pod. The init container runs in the operator's root, with
	# the member's volume at /var/lib/etcd and the guard's emptyDir at
	# /var/run/etcd-operator, and installs the guard there; the etcd
	# container runs it from that emptyDir (copied here into etcd's root)
	# before etcd. Both as user 1000, the member Pods' runAsUser and
	# fsGroup (which makes the volume theirs).
	rm -rf "$operator_root/var/lib/etcd" "$operator_root/var/run/etcd-operator"
	mkdir -p "$operator_root/var/lib/etcd" "$operator_root/var/run/etcd-operator"
	chown 1000:1000 "$operator_root/var/lib/etcd" "$operator_root/var/run/etcd-operator"
	set +e
	out="$(in_root "$operator_root" 1000:1000 /usr/local/bin/etcd-operator member-guard \
		--data-dir=/var/lib/etcd/data --member-name=main-0 --cluster-token=main-x \
		--install-to=/var/run/etcd-operator/etcd-operator 2>&1)"
	code=$?
	set -e
	installed="$operator_root/var/run/etcd-operator/etcd-operator"
	if [[ "$code" != 0 || ! -x "$installed" ]]; then
		fail "$dir: the init container's member-guard did not install the guard (exit $code): $out"
		continue
	fi
	mkdir -p "$root/var/run/etcd-operator"
	cp -p "$installed" "$root/var/run/etcd-operator/etcd-operator"
	chown 1000:1000 "$root/var/lib/etcd" "$root/var/run/etcd-operator"
	set +e
	out="$(in_root "$root" 1000:1000 /var/run/etcd-operator/etcd-operator member-guard \
		--data-dir=/var/lib/etcd/data --member-name=main-0 --cluster-token=main-x \
		--member-id=1 --expect-data -- /usr/local/bin/etcd --version 2>&1)"
	refused=$?
	accepted_out="$(in_root "$root" 1000:1000 /var/run/etcd-operator/etcd-operator member-guard \
		--data-dir=/var/lib/etcd/data --member-name=main-0 --cluster-token=main-x \
		-- /usr/local/bin/etcd --version 2>&1)"
	accepted=$?
	set -e
	if [[ "$refused" != 3 ]]; then
		fail "$dir: the member guard exited $refused on an empty data dir that should hold member 1, expected 3 (refusal): $out"
	elif grep -q 'etcd Version' <<<"$out"; then
		fail "$dir: the member guard refused (exit 3) but etcd ran: $out"
	else
		say "  member guard in etcd's root: refuses an empty data dir that should hold a member (exit 3)"
	fi
	if [[ "$accepted" != 0 ]] || ! grep -qx "etcd Version: $etcd_version" <<<"$accepted_out"; then
		fail "$dir: the member guard did not start etcd $etcd_version for a new member (exit $accepted): $accepted_out"
	else
		say "  member guard in etcd's root: a new member's etcd starts through it"
	fi
done
((etcd_images > 0)) || fail "images.tsv lists no etcd image"

if ((failures > 0)); then
	say "$failures check(s) failed"
	exit 1
fi
say "every image is what it claims ($((etcd_images + 1)) layouts)"
