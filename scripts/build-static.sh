#!/usr/bin/env bash
# The operator binary for its container image: statically linked (glibc,
# crt-static), because member Pods run it inside etcd's own image (the
# member guard before every etcd start, the restore Pod's replay step),
# which has no C library. Writes target/static/etcd-operator, then checks
# that it runs in an empty root: `--version`, and the member guard refusing
# an empty data dir that should hold a member (exit 3).
#
# IMAGE_PROFILE=release (default) or debug: the cargo profile. The test
# suite builds its images from a debug build, which compiles in a fraction
# of the time; a release image is built with the default.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-unknown-linux-gnu
profile="${IMAGE_PROFILE:-release}"
case "$profile" in
release) profile_flags=(--release) ;;
debug) profile_flags=() ;;
*)
	echo "IMAGE_PROFILE must be release or debug, not '$profile'" >&2
	exit 2
	;;
esac
RUSTFLAGS="-C target-feature=+crt-static" \
	cargo build "${profile_flags[@]}" --locked --target "$target" \
	--target-dir target/static-build -p etcd-operator --bin etcd-operator
mkdir -p target/static
cp "target/static-build/$target/$profile/etcd-operator" target/static/etcd-operator.tmp
mv target/static/etcd-operator.tmp target/static/etcd-operator

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/data/data"
cp target/static/etcd-operator "$root/bin/"
chroot "$root" /bin/etcd-operator --version
set +e
chroot "$root" /bin/etcd-operator member-guard --data-dir=/data/data \
	--member-name=main-0 --cluster-token=main-x --member-id=1 --expect-data 2>/dev/null
code=$?
set -e
if [ "$code" != 3 ]; then
	echo "the static binary's member guard exited $code in an empty root, expected 3 (refusal)" >&2
	exit 1
fi
echo "target/static/etcd-operator ($profile): static, runs in an empty root (member guard refuses with exit 3)"
