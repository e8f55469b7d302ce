#!/usr/bin/env bash
# The lab phase of `make test`: every lab test (crates/etcd-lab/tests/*.rs),
# every node agent test that makes namespaces and addresses
# (crates/etcd-lab-node/tests/*.rs) and every end-to-end test
# (crates/etcd-operator/tests/e2e_*.rs), the short chaos campaign and the
# hosted control plane (crates/etcd-chaos/tests/*.rs), each in a
# lab lane of its own (scripts/lab-lane.sh), LAB_LANES (default 4) at a
# time. The longest tests start first and each lane takes the next test as
# soon as it is free. A test's output goes to target/lab-logs/<test>.log and
# is printed in one piece, with its duration, when it ends; the phase fails
# naming every failed test and where its log and its lab's logs are.
# Needs root and a build of the test binaries (`cargo test --no-run`).
#
# Lanes wait mostly on Kubernetes and etcd (a lab test alone leaves a
# 2-core machine about 84 % idle). On 2 cores the phase took 1306 s with 2
# lanes and 803 s with 3 when there were fewer tests; with the 35 tests of
# 2026-12-04 it took 1025 s with 3 lanes (the tests' durations add up to
# 3,072 s there), against about 2,500 s one test after another for the
# earlier set. The same build with 4 lanes took 810 s, all passing, with
# the load average near 9 and the tests' durations adding up to 3,231 s
# (up to 1.2x longer each), and the clean-clone run of commit f01fb74 on a
# fresh machine (empty Go, cargo and upstream caches) took 838 s with 4
# lanes, all passing: 4 is the default.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

logs=target/lab-logs

# Expected durations in seconds on the 2-core machine, each as it took in
# a `make test` of a clean clone with 3 lanes (2026-12-04, commit a4b0966); the longest
# start first (a test not listed counts as 200 s).
expected_seconds() {
	case "$1" in
	chaos_short) echo 301 ;;
	e2e_backup_volume) echo 254 ;;
	faults) echo 233 ;;
	e2e_ca_rotation) echo 206 ;;
	hosted_control_plane) echo 194 ;;
	e2e_rollout) echo 194 ;;
	e2e_maintenance) echo 147 ;;
	e2e_tls) echo 118 ;;
	e2e_durability) echo 115 ;;
	e2e_newest_survivor) echo 114 ;;
	e2e_backup_restore_waits) echo 110 ;;
	e2e_tls_migration) echo 106 ;;
	e2e_tls_member_lost) echo 130 ;;
	e2e_quiet_operator) echo 84 ;;
	e2e_node_out_of_service) echo 84 ;;
	e2e_labels_stripped) echo 84 ;;
	e2e_network_policy) echo 83 ;;
	e2e_cert_manager) echo 83 ;;
	e2e_node_deleted) echo 78 ;;
	e2e_restore_backup) echo 76 ;;
	network_volumes) echo 73 ;;
	e2e_restore_survivor) echo 73 ;;
	e2e_restore_node_object_deleted) echo 120 ;;
	e2e_damaged_member) echo 200 ;;
	e2e_scale) echo 63 ;;
	e2e_kubectl_etcd) echo 62 ;;
	e2e_helm) echo 59 ;;
	e2e_ca_deleted) echo 50 ;;
	e2e_volume_loss) echo 47 ;;
	e2e_images) echo 30 ;;
	e2e_isolation) echo 28 ;;
	lab) echo 25 ;;
	volume_size) echo 21 ;;
	disk_full) echo 14 ;;
	kubectl_streaming) echo 13 ;;
	e2e_name_taken) echo 40 ;;
	e2e_admission) echo 7 ;;
	pod_address_reuse) echo 1 ;;
	grpc_probe) echo 1 ;;
	container_in_pod_netns) echo 1 ;;
	gateway_address_stable) echo 1 ;;
	*) echo 200 ;;
	esac
}

# One test, in the lane xargs gives it ($LAB_LANE, 0-based): runs it, then
# prints its log in one piece.
run_one() {
	local test="$1" crate_dir executable
	read -r crate_dir executable < <(awk -v t="$test" '$1 == t { print $2, $3 }' "$logs/.executables")
	local log="$logs/$test.log" started=$SECONDS status=0
	# Timeout: a hung test must not hang the run; SIGKILL ends the lane's
	# PID namespace, and with it every process of its lab.
	(cd "$crate_dir" && timeout --kill-after=30 "${LAB_TEST_TIMEOUT:-1800}" \
		"$repo/scripts/lab-lane.sh" "$test" "$executable" --test-threads=1 --nocapture) \
		>"$log" 2>&1 || status=$?
	local took=$((SECONDS - started))
	{
		flock 9
		printf '\n--- %s (lane %d): %s in %d s; log %s\n' "$test" "$((LAB_LANE + 1))" \
			"$( ((status == 0)) && echo passed || echo "FAILED (status $status)")" "$took" "$log"
		cat "$log"
		printf -- '--- end of %s\n' "$test"
		printf '%s %d %d\n' "$test" "$status" "$took" >>"$logs/.results"
	} 9>>"$logs/.print.lock"
}

if [[ "${1:-}" == "--one" ]]; then
	run_one "$2"
	exit 0
fi

lanes="${LAB_LANES:-4}"
if [[ ! "$lanes" =~ ^[1-9][0-9]*$ ]]; then
	echo "LAB_LANES must be a positive number: $lanes" >&2
	exit 2
fi
rm -rf "$logs"
mkdir -p "$logs"

# Every lab test binary: name, crate directory, executable. The tests run
# the built binaries directly (as `cargo test` would, from the crate's
# directory): no cargo lock is held while they run.
tests=()
for t in crates/etcd-lab/tests/*.rs crates/etcd-lab-node/tests/*.rs crates/etcd-operator/tests/e2e_*.rs crates/etcd-chaos/tests/*.rs; do
	[[ -e "$t" ]] && tests+=(--test "$(basename "$t" .rs)")
done
cargo test -p etcd-lab -p etcd-lab-node -p etcd-operator -p etcd-chaos --locked --no-run --message-format=json "${tests[@]}" |
	python3 -c '
import json, os, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable") \
            and "test" in message["target"]["kind"]:
        print(message["target"]["name"], os.path.dirname(message["manifest_path"]),
              message["executable"])
' >"$logs/.executables"

# The machine's own lab (from `make demo` or a test run by hand) stays up:
# the lanes do not see it.
started=$SECONDS
awk '{ print $1 }' "$logs/.executables" |
	while read -r test; do echo "$(expected_seconds "$test") $test"; done |
	sort -k1,1nr -k2 | awk '{ print $2 }' |
	xargs -P "$lanes" -n 1 --process-slot-var=LAB_LANE "$repo/scripts/lab-tests.sh" --one
took=$((SECONDS - started))

printf '\n=== lab tests: %d in %d s on %d lanes\n' "$(wc -l <"$logs/.results")" "$took" "$lanes"
sort -k3,3nr "$logs/.results" | awk '{ printf "%-28s %5d s  %s\n", $1, $3, ($2 == 0 ? "ok" : "FAILED") }'
failed=0
while read -r test status _; do
	if ((status != 0)); then
		failed=1
		echo "FAILED: $test: log $logs/$test.log; its lab (state, logs, operator log) in ${LAB_LANES_DIR:-/var/lib/etcd-lab-lanes}/$test" >&2
	fi
done <"$logs/.results"
if (($(wc -l <"$logs/.results") != $(wc -l <"$logs/.executables"))); then
	failed=1
	echo "FAILED: not every lab test ran (see above)" >&2
fi
exit "$failed"
