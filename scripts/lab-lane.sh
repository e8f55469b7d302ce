#!/usr/bin/env bash
# Runs a command in a lab lane, as root:
#
#   scripts/lab-lane.sh NAME COMMAND [ARG...]
#
# A lane is a box in which one lab runs beside the labs of other lanes and
# of the machine itself, with every fixed name the lab uses (network
# namespace names, addresses 10.244.x, ports such as 6443, the cgroup group
# `etcd-lab`, the lab lock, the current-lab record) its own:
# - network namespace: only loopback (brought up), so the lab's namespaces,
#   veths, routes and nft tables hang off the lane, and nothing inside can
#   reach anything outside it;
# - PID namespace, with its own /proc: nothing in the lane sees or signals
#   another lane's processes, and when the command ends the kernel kills
#   whatever it left;
# - mount namespace (private propagation): private tmpfs over /run/netns,
#   /run/etcd-lab (the current-lab record) and /etc/netns, and the lane's
#   own file over the lab lock /run/etcd-lab-tests.lock; mounts of the lab
#   never show outside;
# - cgroup namespace rooted at <cgroup2>/etcd-lab-lanes/NAME, with cgroup2
#   mounted again, so the lab's group `etcd-lab` (and the kill of its
#   subtree at `down`) is the lane's own;
# - LAB_LANE_DIR=/var/lib/etcd-lab-lanes/NAME: the test kit keeps lab state
#   directories below it (loop devices are machine-wide and found by their
#   backing file's path, so paths must differ), TMPDIR below it too.
# Nothing of the lab's Rust code changes: inside, it is one lab per machine.
#
# The lane directory is removed when the command succeeds and kept (lab
# logs, operator logs) when it fails. Exits with the command's status.
set -euo pipefail

if (($# < 2)); then
	echo "usage: $0 NAME COMMAND [ARG...]" >&2
	exit 2
fi
name="$1"
shift
if [[ ! "$name" =~ ^[A-Za-z0-9_.-]+$ ]]; then
	echo "lab-lane: the lane name must be a plain file name: $name" >&2
	exit 2
fi
if ((EUID != 0)); then
	echo "lab-lane: needs root (namespaces, cgroups, mounts)" >&2
	exit 2
fi

lane_dir="${LAB_LANES_DIR:-/var/lib/etcd-lab-lanes}/$name"
# The lab lock of test-kit (crates/test-kit/src/lab_lock.rs).
lock_file=/run/etcd-lab-tests.lock

# The cgroup2 mount point, found as etcd-lab finds it
# (crates/etcd-lab-common/src/cgroup/mod.rs).
cgroup2_root() {
	local candidate
	for candidate in /sys/fs/cgroup /sys/fs/cgroup/unified; do
		if [[ -f "$candidate/cgroup.controllers" ]]; then
			echo "$candidate"
			return
		fi
	done
	awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts
}
cgroup_root="$(cgroup2_root)"
if [[ -z "$cgroup_root" ]]; then
	echo "lab-lane: no cgroup2 hierarchy" >&2
	exit 1
fi
lane_cgroup="$cgroup_root/etcd-lab-lanes/$name"

# Kills every process left in the lane's cgroup and removes its groups.
remove_cgroup() {
	[[ -d "$lane_cgroup" ]] || return 0
	if [[ -f "$lane_cgroup/cgroup.kill" ]]; then
		echo 1 >"$lane_cgroup/cgroup.kill"
	fi
	local tries
	for ((tries = 0; tries < 200; tries++)); do
		# Groups are removable a moment after their last process is reaped.
		find "$lane_cgroup" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[[ -d "$lane_cgroup" ]] || return 0
		sleep 0.05
	done
	echo "lab-lane: could not remove $lane_cgroup" >&2
}

# Detaches the loop devices whose disk images lie in the lane directory (a
# lab that was not taken down leaves them bound; its mounts went with the
# lane's mount namespace) and removes the directory.
remove_lane_dir() {
	[[ -d "$lane_dir" ]] || return 0
	local device file
	while read -r device file; do
		if [[ "$file" == "$lane_dir/"* ]]; then
			losetup --detach "$device" || true
		fi
	done < <(losetup --list --noheadings --output NAME,BACK-FILE 2>/dev/null || true)
	rm -rf --one-file-system "$lane_dir"
}

# Leftovers of an earlier run of this lane.
remove_cgroup
remove_lane_dir
mkdir -p "$lane_dir/tmp" "$lane_cgroup"
touch "$lane_dir/lab.lock"
# Mount points must exist on the machine; the lab creates them itself too.
mkdir -p /run/netns /run/etcd-lab /etc/netns
touch "$lock_file"

# Runs inside the new namespaces, as PID 1 of the lane: bash reaps the
# lab's daemons (orphaned to it) while it waits for the command.
inside='set -euo pipefail
ip link set lo up
for dir in /run/netns /run/etcd-lab /etc/netns; do
	mount -t tmpfs -o mode=0755,size=16m lab-lane "$dir"
done
mount --bind "$LAB_LANE_DIR/lab.lock" "$1"
# In the cgroup namespace, a new cgroup2 mount shows the lane as the root
# (mounted in place of the machine'"'"'s view, not over it: that fails).
umount --lazy "$2"
mount -t cgroup2 cgroup2 "$2"
shift 2
"$@"'

status=0
(
	# The lane's processes start in its cgroup, the root of its cgroup
	# namespace.
	echo "$BASHPID" >"$lane_cgroup/cgroup.procs"
	exec env LAB_LANE_DIR="$lane_dir" TMPDIR="$lane_dir/tmp" \
		unshare --net --mount --propagation private --pid --fork --kill-child --mount-proc --cgroup \
		bash -c "$inside" lab-lane "$lock_file" "$cgroup_root" "$@"
) || status=$?

remove_cgroup
if ((status == 0)); then
	remove_lane_dir
else
	echo "lab-lane: $name failed (status $status); its lab state, logs and TMPDIR are kept in $lane_dir" >&2
fi
exit "$status"
