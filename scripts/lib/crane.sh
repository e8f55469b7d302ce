# Sourced by scripts/build-images.sh and scripts/check-images.sh: the pinned
# crane and a registry of the script's own on loopback. The caller defines
# `die MESSAGE` and `work` (its scratch directory), and calls
# `stop_loopback_registry` in its EXIT trap.

# find_crane: sets `crane` to $CRANE, else to the crane of the upstream sets
# (the output of tools/build-upstream.sh: $UPSTREAM_DIRS, or run here).
find_crane() {
	crane="${CRANE:-}"
	if [[ -z "$crane" ]]; then
		local upstream crane_dir
		upstream="${UPSTREAM_DIRS:-$(bash tools/build-upstream.sh)}"
		crane_dir="$(grep -E '/crane-[0-9a-f]+$' <<<"$upstream" || true)"
		[[ -n "$crane_dir" && -x "$crane_dir/crane" ]] ||
			die "no crane among the upstream sets: run bash tools/build-upstream.sh"
		crane="$crane_dir/crane"
	fi
	crane="$(realpath "$crane")"
}

# start_loopback_registry: `crane registry serve` on 127.0.0.1 (a free
# port), blobs under $work/registry; sets `registry` (HOST:PORT) and
# `registry_pid`.
registry_pid=
start_loopback_registry() {
	mkdir -p "$work/registry"
	"$crane" registry serve --address 127.0.0.1:0 --disk "$work/registry" \
		2>"$work/registry.log" &
	registry_pid=$!
	local port=
	for _ in $(seq 100); do
		port="$(sed -n 's/.*serving on port \([0-9][0-9]*\).*/\1/p' "$work/registry.log")"
		[[ -n "$port" ]] && break
		kill -0 "$registry_pid" 2>/dev/null || die "crane registry serve exited: $(cat "$work/registry.log")"
		sleep 0.1
	done
	[[ -n "$port" ]] || die "crane registry serve did not say its port: $(cat "$work/registry.log")"
	registry="127.0.0.1:$port"
}

stop_loopback_registry() {
	if [[ -n "$registry_pid" ]]; then
		kill "$registry_pid" 2>/dev/null || true
		wait "$registry_pid" 2>/dev/null || true
	fi
}
