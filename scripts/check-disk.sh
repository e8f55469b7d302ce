#!/usr/bin/env bash
# Fails at once, saying where and how much, when a `make test` run would run
# out of disk space part-way (which shows up late and confusingly, such as
# etcd's "no space left on device" in /tmp). Needs, measured on the 2-core
# machine:
# - the build: a clean build's target directory is about 5 GB;
# - temporary files (TMPDIR, default /tmp): the etcd integration tests'
#   data directories;
# - the lab lanes' state directories (/var/lib/etcd-lab-lanes): each lab's
#   disk images, control-plane data and logs.
# Directories on one file system add up. Override a figure (GiB) with
# DISK_GIB_BUILD, DISK_GIB_TMP or DISK_GIB_PER_LANE.
set -euo pipefail
cd "$(dirname "$0")/.."

gib=$((1024 * 1024 * 1024))
if [[ -d target/debug ]]; then
	build=${DISK_GIB_BUILD:-3} # an incremental build
else
	build=${DISK_GIB_BUILD:-6} # a clean build
fi
tmp_dir="${TMPDIR:-/tmp}"
lanes_dir="${LAB_LANES_DIR:-/var/lib/etcd-lab-lanes}"
lanes="${LAB_LANES:-4}"
# A lane's directory peaked at about 0.7 GiB (two lanes: 1.4 GiB).
lab=$((${DISK_GIB_PER_LANE:-2} * lanes))

# The nearest existing directory at or above a path (df needs one).
existing() {
	local path="$1"
	while [[ ! -e "$path" ]]; do path="$(dirname "$path")"; done
	echo "$path"
}

declare -A need_gib what
add() {
	local mount
	mount="$(df --output=target "$(existing "$2")" | tail -n 1)"
	need_gib[$mount]=$((${need_gib[$mount]:-0} + $3))
	what[$mount]="${what[$mount]:+${what[$mount]}, }$1 $2 ${3} GiB"
}
add "build" "$PWD/target" "$build"
add "temporary files" "$tmp_dir" "${DISK_GIB_TMP:-2}"
add "lab lanes ($lanes)" "$lanes_dir" "$lab"

short=0
for mount in "${!need_gib[@]}"; do
	avail=$(df -B1 --output=avail "$mount" | tail -n 1 | tr -d ' ')
	need=$((need_gib[$mount] * gib))
	printf '%s: %d GiB free, %d GiB needed (%s)\n' "$mount" "$((avail / gib))" "${need_gib[$mount]}" "${what[$mount]}"
	if ((avail < need)); then
		echo "not enough disk space on $mount: $((avail / gib)) GiB free, the run needs ${need_gib[$mount]} GiB (${what[$mount]}); free some space (or lower LAB_LANES) and run again" >&2
		short=1
	fi
done
exit "$short"
