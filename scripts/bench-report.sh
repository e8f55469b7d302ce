#!/usr/bin/env bash
# Writes docs/benchmarks.md (to stdout) from the figures of the benches in
# DIR (lab.json, operator.json, replacement.json, backup.json, rollout.json,
# defrag.json, corruption.json).
# Used by scripts/bench.sh. A bench with no figures in DIR gets a section
# that says so; with PREVIOUS, an earlier report (such as
# `<(git show HEAD:docs/benchmarks.md)` after running one bench alone), it
# keeps that report's section instead, marked with that report's date and
# commit.
set -euo pipefail
dir=${1:-target/bench}
previous=${2:-}
stand_ins=$(mktemp -d)
trap 'rm -rf "$stand_ins"' EXIT
previous_text=""
[ -z "$previous" ] || previous_text=$(cat "$previous")

# The body of section HEADING (a "## " line) of the previous report, without
# its heading and the blank lines around it; nothing when it has none.
previous_section() {
	printf '%s\n' "$previous_text" | awk -v heading="$1" '
		$0 == heading { inside = 1; next }
		inside && /^## / { exit }
		inside { lines[++n] = $0 }
		END {
			first = 1; while (first <= n && lines[first] == "") first++
			last = n; while (last >= first && lines[last] == "") last--
			for (i = first; i <= last; i++) print lines[i]
		}'
}

# The path of NAME.json in DIR, or of a stand-in holding ERROR when the
# bench wrote none.
figures() {
	local name=$1 error=$2
	if [ -f "$dir/$name.json" ]; then
		echo "$dir/$name.json"
		return
	fi
	printf '{"error":"%s"}\n' "$error" >"$stand_ins/$name.json"
	echo "$stand_ins/$name.json"
}
# Whether the previous report has section HEADING.
kept() {
	[ -n "$previous_text" ] && [ -n "$(previous_section "$1")" ]
}
lab=$(figures lab "lab_footprint did not write its figures")
op=$(figures operator "the operator bench did not write its figures")
rep=$(figures replacement "the replacement bench did not write its figures")
bk=$(figures backup "the backup bench did not write its figures")
roll=$(figures rollout "the rollout bench did not write its figures")
dfr=$(figures defrag "the defrag bench did not write its figures")
cor=$(figures corruption "the corruption bench did not write its figures")

# Prints section HEADING with FUNCTION's body when the bench of FILE wrote
# its figures; else the previous report's body, noted as such, when it has
# one; else that it was not measured.
section() {
	local heading=$1 file=$2 body=$3
	printf '\n%s\n\n' "$heading"
	if [[ $file != "$stand_ins"/* ]]; then
		"$body"
	elif kept "$heading"; then
		local text
		text=$(previous_section "$heading")
		# A section kept before already says from when.
		# The report's runs per median, for a section of medians that does
		# not say its own.
		if [[ $text != "Not measured in this run:"* ]]; then
			local runs_note=""
			[[ $text == *"Runs per median:"* || $text != *median* ]] ||
				runs_note="; runs per median: $(previous_field 'Runs per median' | cut -d' ' -f1)"
			printf 'Not measured in this run: kept from the report of %s (commit %s; %s%s).\n\n' \
				"$(previous_field Date)" "$(previous_field Commit)" "$(previous_field Machine)" "$runs_note"
		fi
		printf '%s\n' "$text"
	else
		printf 'Not measured: %s.\n' "$(jq -r .error "$file")"
	fi
}
# Field "- NAME: value" of the previous report's header.
previous_field() {
	printf '%s\n' "$previous_text" | awk -v name="- $1: " 'index($0, name) == 1 { print substr($0, length(name) + 1); exit }'
}

# jq expression on FILE, "n/a" when null or missing.
q() { jq -r "($2) // \"n/a\"" "$1"; }
# Seconds with one decimal.
s1() { jq -r "($2) as \$v | if \$v == null then \"n/a\" else ((\$v * 10 | round) / 10 | tostring) end" "$1"; }
# Seconds with two decimals.
s2() { jq -r "($2) as \$v | if \$v == null then \"n/a\" else ((\$v * 100 | round) / 100 | tostring) end" "$1"; }
samples() { jq -r "($2) // [] | map((. * 10 | round) / 10 | tostring) | join(\", \")" "$1"; }
# One table row per database size of the replacement bench, from the jq
# string expression $1 (s1/s2: seconds with 1 or 2 decimals; samples1/samples2:
# a list of them; db: the measured database size; span: a start-end pair).
replacement_rows() {
	jq -r '
		def s1: if . == null then "n/a" else ((. * 10 | round) / 10 | tostring) end;
		def s2: if . == null then "n/a" else ((. * 100 | round) / 100 | tostring) end;
		def samples1: (. // []) | map(s1) | join(", ");
		def samples2: (. // []) | map(s2) | join(", ");
		def db: if . == null then "" else " (db \(. | round) MiB)" end;
		def span: if . == null then "n/a" else map(tostring) | join("-") end;
		(.sizes // [])[] | '"$1" "$rep"
}

# The rows of the rollout bench, one per cluster size, from the jq string
# expression $1 (with the helpers of replacement_rows, and per_run: the
# pairs of two lists joined as "a of b").
rollout_rows() {
	jq -r '
		def s1: if . == null then "n/a" else ((. * 10 | round) / 10 | tostring) end;
		def s2: if . == null then "n/a" else ((. * 100 | round) / 100 | tostring) end;
		def samples1: (. // []) | map(s1) | join(", ");
		def samples2: (. // []) | map(s2) | join(", ");
		def list: (. // []) | map(tostring) | join(", ");
		def per_run($a; $b): [$a // [], $b // []] | transpose | map("\(.[0]) of \(.[1])") | join(", ");
		def goal: if . == null then "n/a" elif . then "yes" else "no" end;
		(.sizes // [])[] | '"$1" "$roll"
}

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- crates tools Cargo.toml Cargo.lock || commit="$commit (with uncommitted changes)"
memory=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
runs=$(jq -rs 'map(.runs // empty) | first // "n/a"' "$op" "$rep" "$roll" "$dfr")

operator_section() {
	cat <<DOC
Runs per median: $(q "$op" .runs).

| figure | median | runs |
| --- | --- | --- |
| create of a 3-member EtcdCluster to Available | $(s1 "$op" '.create_to_available.median_s') s | $(samples "$op" '.create_to_available.samples_s') |
| one member Pod deleted: status shows the member down | $(s1 "$op" '.pod_deleted.status_down.median_s') s | $(samples "$op" '.pod_deleted.status_down.samples_s') |
| same: old Pod gone (etcd stopped, Pod object deleted) | $(s1 "$op" '.pod_deleted.old_pod_gone.median_s') s | $(samples "$op" '.pod_deleted.old_pod_gone.samples_s') |
| same: new Pod created by the operator | $(s1 "$op" '.pod_deleted.new_pod_created.median_s') s | $(samples "$op" '.pod_deleted.new_pod_created.samples_s') |
| same: new Pod Ready, cluster Available with 3 ready members | $(s1 "$op" '.pod_deleted.median_s') s | $(samples "$op" '.pod_deleted.samples_s') |
| majority loss: last node's start to first successful write | $(s1 "$op" '.majority_loss.operator.median_s') s | $(samples "$op" '.majority_loss.operator.samples_s') |
| same run, etcd alone: last restart to first successful write | $(s2 "$op" '.majority_loss.etcd.median_s') s | $(jq -r '(.majority_loss.etcd.samples_s // []) | map((. * 100 | round) / 100 | tostring) | join(", ")' "$op") |
| ratio operator / etcd alone | $(s1 "$op" '.majority_loss.ratio') | |
| majority loss: last node's start to Available again | $(s1 "$op" '.majority_loss.operator.available_again.median_s') s | $(samples "$op" '.majority_loss.operator.available_again.samples_s') |

Idle with $(q "$op" .idle.clusters) clusters of $(q "$op" .idle.members_per_cluster) members, over $(s1 "$op" .idle.window_s) s after $(q "$op" .idle.settle_s) s of settling:

| figure | value |
| --- | --- |
| operator RSS (median of samples every 5 s; max) | $(s1 "$op" .idle.rss_mib_median) MiB; $(s1 "$op" .idle.rss_mib_max) MiB |
| operator CPU | $(s1 "$op" .idle.cpu_percent_of_one_core)% of one core |
| API requests per minute | $(s1 "$op" .idle.requests_per_minute) |
| requests in the window by verb | $(jq -r '(.idle.requests_by_verb // {}) | to_entries | map("\(.key) \(.value)") | join(", ")' "$op") |
| of which watches started | $(q "$op" .idle.watch_requests) |

Scale: $(q "$op" .scale.clusters) clusters ($(q "$op" .scale.members) members: every fifth cluster of 3, the others of 1), over $(s1 "$op" .scale.window_s) s after $(q "$op" .scale.settle_s) s of settling, then while the operator holds them all:

| figure | value |
| --- | --- |
| operator RSS (median; max) | $(s1 "$op" .scale.rss_mib_median) MiB; $(s1 "$op" .scale.rss_mib_max) MiB |
| operator CPU | $(s1 "$op" .scale.cpu_percent_of_one_core)% of one core |
| API requests per minute | $(s1 "$op" .scale.requests_per_minute) ($(jq -r '(.scale.requests_by_verb // {}) | to_entries | map("\(.key) \(.value)") | join(", ")' "$op")) |
| member Pod deleted to its new Pod created, one cluster after another: median; max | $(s1 "$op" .scale.reactions.pod_deleted_to_recreated.median_s) s; $(s1 "$op" .scale.reactions.pod_deleted_to_recreated_max_s) s ($(samples "$op" .scale.reactions.pod_deleted_to_recreated.samples_s)) |
| 2 of a 3-member cluster's Pods deleted to its status no longer Available | $(s1 "$op" .scale.reactions.majority_deleted_to_not_available_s) s |
DOC
}

replacement_section() {
	cat <<DOC
A member whose data is gone (its volume wiped) replaced by the operator,
beside etcd's own snapshot transfer of the same database, measured in the
same run. Runs per median: $(q "$rep" .runs).

| database | operator: wipe to a caught-up voter serving clients | etcd alone: learner add to a caught-up voter | ratio | operator runs | etcd alone runs |
| --- | --- | --- | --- | --- | --- |
$(replacement_rows '"| \(.size_mib) MiB\(.operator.db_size_mib | db) | \(.operator.median_s | s1) s | \(.etcd.median_s | s2) s | \(.ratio | s1) | \(.operator.samples_s | samples1) | \(.etcd.samples_s | samples2) |"')

Where the time goes: the operator's steps from the wipe, and etcd alone's
from the add (medians; snapshots sent per run):

| database | operator: old member removed | learner added | data applied | serving clients | promoted | etcd alone: data applied | serving clients (runs) | snapshots sent (operator; etcd alone) | load average, start-end (operator; etcd alone) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
$(replacement_rows '"| \(.size_mib) MiB | \(.operator.old_member_removed.median_s | s1) s | \(.operator.learner_added.median_s | s1) s | \(.operator.applied.median_s | s1) s | \(.operator.serving.median_s | s1) s | \(.operator.voter.median_s | s1) s | \(.etcd.applied.median_s | s2) s | \(.etcd.serving.median_s | s2) s (\(.etcd.serving.samples_s | samples2)) | \(.operator.snapshots_sent // [] | map(tostring) | join(", ")); \(.etcd.snapshots_sent // [] | map(tostring) | join(", ")) | \(.operator.load_average | span); \(.etcd.load_average | span) |"')
DOC
}

rollout_section() {
	cat <<DOC
An upgrade of etcd from $(q "$roll" .from_version) to $(q "$roll" .to_version) done by the operator
under a client load (one put every $(q "$roll" .write_interval_ms) ms, $(q "$roll" .request_timeout_ms) ms per request), beside what
the same load sees in etcd's own leader election and in the same upgrade
done by hand on etcd processes, measured in the same run. The goal: no gap
between two acknowledged writes longer than one election timeout
($(q "$roll" .election_timeout_ms) ms) plus a second, $(q "$roll" .goal_s) s. Runs per median: $(q "$roll" .runs).

| members | operator: longest gap between acknowledged writes | runs | etcd alone, leader killed | runs | etcd alone, upgrade by hand | runs | ratio to the election | ratio to by hand | every operator run within the goal |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
$(rollout_rows '"| \(.members) | \(.operator.longest_gap.median_s | s2) s | \(.operator.longest_gap.samples_s | samples2) | \(.etcd_election.longest_gap.median_s | s2) s | \(.etcd_election.longest_gap.samples_s | samples2) | \(.etcd_by_hand.longest_gap.median_s | s2) s | \(.etcd_by_hand.longest_gap.samples_s | samples2) | \(.ratio_gap_over_election_gap | s2) | \(.ratio_gap_over_by_hand_gap | s2) | \(.goal_met | goal) |"')

Load average (1 min) at the start and end of the operator's runs, on
$(nproc) cores (above the number of cores, other work competed for the CPU):
$(rollout_rows '"\(.members) members \((.operator.load_average // []) | map(tostring) | join("-"))"' | paste -sd';' | sed 's/;/; /g').

Requests and time (per run; lost: acknowledged writes missing when read
back afterwards):

| members | operator: patch to every member on the new release and Available | failed requests | lost | etcd alone, leader killed: new leader elected | first write acknowledged | failed requests | lost | etcd alone, upgrade by hand | failed requests | lost |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
$(rollout_rows '"| \(.members) | \(.operator.rollout.median_s | s1) s (\(.operator.rollout.samples_s | samples1)) | \(per_run(.operator.failed; .operator.attempted)) | \(.operator.lost | list) | \(.etcd_election.elected.median_s | s2) s (\(.etcd_election.elected.samples_s | samples2)) | \(.etcd_election.first_write.median_s | s2) s | \(per_run(.etcd_election.failed; [.etcd_election.runs // [] | .[].attempted])) | \(.etcd_election.lost | list) | \(.etcd_by_hand.rollout.median_s | s1) s (\(.etcd_by_hand.rollout.samples_s | samples1)) | \(per_run(.etcd_by_hand.failed; [.etcd_by_hand.runs // [] | .[].attempted])) | \(.etcd_by_hand.lost | list) |"')

Where the time goes: a member's old Pod going to its new Pod Ready (median
over the members of every run; then the medians of its steps, from the
times the new Pod reports, in whole seconds), and per run the longest gap,
when it began (seconds after the patch) and what the bench saw from a
second before it to its end:

$(rollout_rows '"- \(.members) members: a member down \(.operator.member_down.median_s | s1) s (max \(.operator.member_down.samples_s | max | s1) s): its new Pod created \(.operator.member_steps.recreated.median_s | s1) s after the old one was seen going, initialized (`member-guard` done) \(.operator.member_steps.initialized.median_s | s1) s later, etcd started \(.operator.member_steps.etcd_started.median_s | s1) s later, Ready \(.operator.member_steps.ready.median_s | s1) s later (max \(.operator.member_steps.ready.samples_s | max | s1) s).\n" + ((.operator.runs // []) | to_entries | map("  - run \(.key + 1): \(.value.longest_gap_s | s2) s from \(.value.longest_gap_from_s | s1) s; " + ((.value.during_longest_gap // []) | map("\(.[0] | s1) s \(.[1] | if length > 100 then .[0:100] + "…" else . end)") | join("; ") | if . == "" then "nothing seen" else . end)) | join("\n"))')
DOC
}

# jq string expression $1 on the defrag bench's figures, with the helpers
# of rollout_rows and cell(side; figure): a median with its runs.
defrag_q() {
	jq -r '
		def s2: if . == null then "n/a" else ((. * 100 | round) / 100 | tostring) end;
		def s0: if . == null then "n/a" else (round | tostring) end;
		def list: (. // []) | map(tostring) | join(", ");
		def per_run($a; $b): [$a // [], $b // []] | transpose | map("\(.[0]) of \(.[1])") | join(", ");
		def goal: if . == null then "n/a" elif . then "yes" else "no" end;
		'"$1" "$dfr"
}

corruption_section() {
	cat <<DOC
What finding damaged data costs (durability rule 15), on 3 etcd 3.6
processes on loopback holding $(q "$cor" .db_mib) MiB of live values
($(q "$cor" .values) values of $(q "$cor" .value_kib) KiB), each beside a baseline measured in the
same run. Runs per median: $(q "$cor" .runs).

| figure | with | runs | baseline | runs | ratio |
| --- | --- | --- | --- | --- | --- |
| a follower's restart on its data until it serves: with the member Pods' corruption-check flags (the initial check compares its keyspace hash with its peers') / without them | $(s2 "$cor" .restart.with_checks.median_s) s | $(samples "$cor" .restart.with_checks.samples_s) | $(s2 "$cor" .restart.without_checks.median_s) s | $(samples "$cor" .restart.without_checks.samples_s) | $(s2 "$cor" .restart.ratio) |
| one \`HashKV\` of a member's keyspace (asked of every voter before each backup; etcd's full check every 4 hours) / a serializable read of every key and value from the same member | $(q "$cor" .hashkv.hashkv.median_s) s | $(q "$cor" '(.hashkv.hashkv.samples_s // []) | map(tostring) | join(", ")') | $(s2 "$cor" .hashkv.read_all.median_s) s | $(samples "$cor" .hashkv.read_all.samples_s) | $(s2 "$cor" .hashkv.ratio) |

Load average (1 min) at the start and end, on $(nproc) cores:
$(q "$cor" '(.load_average // []) | map(tostring) | join("-")').
DOC
}

defrag_section() {
	cat <<DOC
A defragmentation of $(q "$dfr" .members) members whose database files were filled to
$(q "$dfr" .db_mib) MiB ($(q "$dfr" .value_kib) KiB values), then every other value deleted and the
history compacted (their sizes below), under a client load on every member's endpoint (one put every
$(q "$dfr" .write_interval_ms) ms, $(q "$dfr" .request_timeout_ms) ms per request): the operator's round (one member at a time,
followers first, the leader last after moving leadership away, members with
\`StopGRPCServiceOnDefrag\`) beside \`etcdctl defrag --cluster\` on etcd
processes with the same flags, in the same run. The goal: no gap between
two acknowledged writes longer than one election timeout ($(q "$dfr" .goal_s) s), no failed
request. Runs per median: $(q "$dfr" .runs).

| figure, within the defragmentation | operator | runs | \`etcdctl defrag --cluster\` | runs |
| --- | --- | --- | --- | --- |
$(defrag_q '"| longest gap between acknowledged writes | \(.operator.longest_gap_s.median | s2) s | \(.operator.longest_gap_s.samples // [] | map(s2) | join(", ")) | \(.etcdctl.longest_gap_s.median | s2) s | \(.etcdctl.longest_gap_s.samples // [] | map(s2) | join(", ")) |"')
$(defrag_q '"| p99 write latency | \(.operator.latency_p99_ms.median | s0) ms | \(.operator.latency_p99_ms.samples // [] | map(s0) | join(", ")) | \(.etcdctl.latency_p99_ms.median | s0) ms | \(.etcdctl.latency_p99_ms.samples // [] | map(s0) | join(", ")) |"')
$(defrag_q '"| failed requests | | \(per_run(.operator.failed; .operator.attempted)) | | \(per_run(.etcdctl.failed; .etcdctl.attempted)) |"')
$(defrag_q '"| time: the round / the command | \(.operator.defrag_s.median | s2) s | \(.operator.defrag_s.samples // [] | map(s2) | join(", ")) | \(.etcdctl.defrag_s.median | s2) s | \(.etcdctl.defrag_s.samples // [] | map(s2) | join(", ")) |"')
$(defrag_q '"| database files before, summed | \(.operator.db_before_mib.median | s0) MiB (\(.operator.fragmented_percent_before.median | s0) % free) | | \(.etcdctl.db_before_mib.median | s0) MiB (\(.etcdctl.fragmented_percent_before.median | s0) % free) | |"')
$(defrag_q '"| space given back, summed | \(.operator.reclaimed_mib.median | s0) MiB | \(.operator.reclaimed_mib.samples // [] | map(s0) | join(", ")) | \(.etcdctl.reclaimed_mib.median | s0) MiB | \(.etcdctl.reclaimed_mib.samples // [] | map(s0) | join(", ")) |"')
$(defrag_q '"| acknowledged writes lost | | \(.operator.lost | list) | | \(.etcdctl.lost | list) |"')
$(defrag_q '"| every run within the goal | \(.goal_met | goal) | | \(.etcdctl_goal_met | goal) | |"')

Failed requests by kind (every run): operator $(defrag_q '[.operator.runs // [] | .[].failed_by_kind | to_entries[] | "\(.key) \(.value)"] | if length == 0 then "none" else join("; ") end'); etcdctl $(defrag_q '[.etcdctl.runs // [] | .[].failed_by_kind | to_entries[] | "\(.key) \(.value)"] | if length == 0 then "none" else join("; ") end').
The operator's members, in the order done, with the seconds from the
round's start at which each was seen done: $(defrag_q '[.operator.runs // [] | .[].order // [] | map("\(.[0]) \(.[1] | s2) s") | join(", ")] | join("; ") | if . == "" then "n/a" else . end').
Load average (1 min) at the start and end of each side, on $(nproc) cores:
operator $(defrag_q '(.operator.load_average // []) | map(tostring) | join("-")'), etcd alone $(defrag_q '(.etcdctl.load_average // []) | map(tostring) | join("-")').
DOC
}

backup_section() {
	cat <<DOC
Full backups and restores of a $(q "$bk" .db_target_mib) MiB database (3 etcd
members of the pinned 3.6 set on loopback, db $(jq -r '(.db.db_size_mib_per_member // []) | map(round | tostring) | join("/")' "$bk") MiB
on the members; 1 MiB values, half random bytes, half text records), beside
etcdctl and etcdutl in the same run, and the recovery point of continuous
backup under a paced writer. Runs per median: $(q "$bk" .runs). Load average
(1 min) $(q "$bk" .load_average_at_start) at the start, $(q "$bk" .load_average_at_end) at the end, on $(nproc) cores$(jq -r --argjson cores "$(nproc)" '[.load_average_at_start, .load_average_at_end] | map(numbers) | if (max // 0) > $cores then ": above the number of cores, other work competed for the CPU for part of the time" else "" end' "$bk").

| figure | ours | etcdctl / etcdutl alone | ratio ours / alone | runs (ours; alone) |
| --- | --- | --- | --- | --- |
| full backup to the S3 server | $(s1 "$bk" .snapshot.ours_s3.median_s) s, $(s1 "$bk" .snapshot.ours_s3.mib_per_s) MiB/s (upload's end $(s2 "$bk" .snapshot.ours_s3.completion_median_s) s) | $(s1 "$bk" .snapshot.etcdctl.median_s) s, $(s1 "$bk" .snapshot.etcdctl.mib_per_s) MiB/s (\`snapshot save\`) | $(s2 "$bk" .snapshot.ratio_s3_over_etcdctl) | $(samples "$bk" .snapshot.ours_s3.samples_s); $(samples "$bk" .snapshot.etcdctl.samples_s) |
| same, without the S3 server's completion (\`CompleteMultipartUpload\`, $(s2 "$bk" .snapshot.ours_s3.store_completion_median_s) s) | $(s1 "$bk" .snapshot.ours_s3.before_store_completion_median_s) s | same | $(s2 "$bk" .snapshot.ratio_s3_before_store_completion_over_etcdctl) | |
| full backup to a local directory | $(s1 "$bk" .snapshot.ours_local.median_s) s, $(s1 "$bk" .snapshot.ours_local.mib_per_s) MiB/s (upload's end $(s2 "$bk" .snapshot.ours_local.completion_median_s) s) | same | $(s2 "$bk" .snapshot.ratio_local_over_etcdctl) | $(samples "$bk" .snapshot.ours_local.samples_s) |
| restore: download from S3 + \`etcdutl snapshot restore\` | $(s1 "$bk" .restore.ours.median_s) s (download $(s1 "$bk" .restore.ours.download_median_s) s, fsync $(s1 "$bk" .restore.ours.fsync_median_s) s, etcdutl $(s1 "$bk" .restore.ours.etcdutl_median_s) s) | $(s1 "$bk" .restore.etcdutl.median_s) s (\`snapshot restore\` of a local file) | $(s2 "$bk" .restore.ratio_ours_over_etcdutl) | $(samples "$bk" .restore.ours.samples_s); $(samples "$bk" .restore.etcdutl.samples_s) |

Snapshot $(s1 "$bk" .snapshot.snapshot_mib) MiB, stored $(s1 "$bk" .snapshot.ours_s3.stored_mib) MiB
(zstd level $(q "$bk" '.snapshot.zstd_level // 3'), $(jq -r '(.snapshot.zstd_workers // 0) | if . == 0 then "in the compression thread" else "\(.) zstd worker threads" end' "$bk")). Peak RSS of the bench process during our backups:
$(s1 "$bk" .snapshot.ours_s3.peak_rss_mib) MiB to S3, $(s1 "$bk" .snapshot.ours_local.peak_rss_mib) MiB to a local directory
(from $(s1 "$bk" .snapshot.ours_s3.rss_before_mib) MiB before).

Recovery point under load (continuous incremental backup to the S3 server;
object-store writes a day: two per segment, at the run's pace):

| segment interval | writes/s (asked) | durable lag: median | p99 | max = RPO | segments written | object-store writes a day | stored (encoded) |
| --- | --- | --- | --- | --- | --- | --- | --- |
$(jq -r '
	def s2: if . == null then "n/a" else ((. * 100 | round) / 100 | tostring) end;
	def thousands: tostring | [scan("\\d")] | reverse | [range(0; length; 3) as $i | .[$i:$i+3] | reverse | join("")] | reverse | join(",");
	(.rpo // [])[] | if .error then "| \(.error) | | | | | | | |" else
	"| \(.interval_s) s\(if .default_interval then " (default)" else "" end) | \(.achieved_writes_per_s | round) (\(.target_writes_per_s)) | \(.durable_lag_s.median | s2) s | \(.durable_lag_s.p99 | s2) s | \(.rpo_s | s2) s | \(.segments) | \(if .puts_per_day then (.puts_per_day | round | thousands) else "n/a" end) | \(.segments_stored_mib | s2) MiB (\(.segments_encoded_mib | s2) MiB) |" end' "$bk")
DOC
}

lab_section() {
	cat <<DOC
| figure | value |
| --- | --- |
| \`etcd-lab up\` to 3 Ready nodes (release build, binaries built) | $(s1 "$lab" .up_s) s |
| idle 3-node lab CPU (over $(q "$lab" .idle_sample_s) s) | $(s1 "$lab" .idle_cpu_percent_of_one_core)% of one core |
| idle 3-node lab memory (sum of RSS) | $(q "$lab" .idle_rss_mib) MiB in $(q "$lab" .idle_processes) processes |
| cold build of the upstream sets | $(jq -r '(.cold_build_s // {}) | to_entries | map("\(.key) \(.value // "unknown") s") | join(", ")' "$lab") |
DOC
}

cat <<DOC
# Benchmarks

Generated by \`make bench\` (scripts/bench.sh); do not edit by hand.
Speed and memory are measured here, not asserted in timed tests.

- Date: $(date -u +%Y-%m-%dT%H:%MZ)
- Machine: $(nproc) cores ($cpu), $memory memory
- Commit: $commit
- Runs per median: $runs (\`BENCH_RUNS\`)
DOC

section "## Operator" "$op" operator_section
section "## Member replacement" "$rep" replacement_section
section "## Rolling upgrade" "$roll" rollout_section
section "## Defragmentation" "$dfr" defrag_section
section "## Backups" "$bk" backup_section
section "## Corruption checks" "$cor" corruption_section
section "## Lab" "$lab" lab_section

# Errors of the benches of this run (not of the sections kept).
measured=()
for pair in "$op|## Operator" "$rep|## Member replacement" "$roll|## Rolling upgrade" "$dfr|## Defragmentation" "$bk|## Backups" "$cor|## Corruption checks" "$lab|## Lab"; do
	file=${pair%%|*}
	if [[ $file != "$stand_ins"/* ]] || ! kept "${pair#*|}"; then
		measured+=("$file")
	fi
done
errors=$(jq -rs '[.[] | .. | objects | .error? // empty] | join("; ")' "${measured[@]}")
if [ -n "$errors" ]; then
	printf '\nFailed in this run: %s\n' "$errors"
fi

cat <<'DOC'

## How to run

```sh
make bench            # set-up, then every bench, then this file
BENCH_RUNS=5 make bench
```

As root, like the lab. Each bench holds the lab test lock
(`/run/etcd-lab-tests.lock`), so it waits for lab tests of other users and
they wait for it. The raw figures stay in `target/bench/lab.json`,
`target/bench/operator.json`, `target/bench/replacement.json`,
`target/bench/rollout.json`, `target/bench/defrag.json` and
`target/bench/backup.json`;
`bash scripts/bench-report.sh` rewrites this file from them. Not part of CI.
After running one bench alone, `bash scripts/bench-report.sh target/bench
<(git show HEAD:docs/benchmarks.md) >docs/benchmarks.md` keeps the sections
of the benches not run from the committed report, each marked with the date
and commit it was measured at.
`BENCH_REPLACEMENT_SIZES_MIB` (default `100,1024`) sets the database sizes
of the replacement bench; `cargo bench -p etcd-operator --bench replacement`
runs it alone (about 10 minutes on 2 cores).
`cargo bench -p etcd-operator --bench rollout` runs the rolling upgrade
bench alone (about 10 minutes on 2 cores with 3 runs);
`BENCH_ROLLOUT_MEMBERS` (default `3,5`) sets its cluster sizes.
`cargo bench -p etcd-operator --bench defrag` runs the defragmentation
bench alone (about 4 minutes per run at 1 GiB on 2 cores, the lab side
waiting up to a minute for the schedule to fire); `BENCH_DEFRAG_DB_MIB`
(default 1024) sets the size each member's database file is filled to
before half of it is freed.
`cargo bench -p etcd-operator --bench backup` runs the backup bench alone
(no lab, no lock, `target/bench/backup.json`); `BENCH_BACKUP_DB_MIB`
(default 512), `BENCH_BACKUP_INTERVALS_S` (default `1,4,20`),
`BENCH_BACKUP_RPO_S` (default 60) and `BENCH_BACKUP_WRITES_PER_S` (default
1000) change its database, segment intervals, writing time and rate;
`BENCH_BACKUP_ZSTD_LEVEL` and `BENCH_BACKUP_ZSTD_WORKERS` replace the
operator's zstd settings of full backups, to compare others.

## What each figure means

- **Create to Available** (`crates/etcd-operator/benches/operator.rs`): from
  the create request of a 3-member `EtcdCluster` (`lab-network` volumes) to
  its status showing `Available` with 3 ready members, polled every 200 ms.
  Each cluster is created alone; the operator runs outside the cluster
  against the lab's API server, as in the end-to-end tests.
- **One member Pod deleted** (`benches/operator/pod_deleted.rs`): a
  follower's Pod of a 3-member cluster deleted as `kubectl delete pod` does
  (default grace), polled every 100 ms from the delete request: when the
  status first shows that member unhealthy or fewer than 3 ready members,
  when the old Pod object is gone (etcd stopped, the node agent confirmed),
  when the operator's new Pod (same name, new UID) exists, and when it is
  Ready with the cluster `Available` and 3 ready members again. The
  member's startup probe (`/livez`, every second) passes as soon as etcd
  serves, and the kubelet then probes readiness (`/readyz`) at once; when
  that first readiness try fails (the member not yet caught up), the next
  comes a readiness period (5 s) later.
- **Idle** and **scale** figures below are those of one operator process;
  divided by the clusters it holds they are its cost per cluster.
- **Scale** (`benches/operator.rs`, `BENCH_SCALE_CLUSTERS`): the earlier
  phases' clusters deleted, then 50 clusters created (every fifth of 3
  members, the others of 1) and all `Available`; the operator restarted
  through the counting proxy as for **Idle**, the same window; then, with
  that operator still running, the member Pod of ten 1-member clusters
  deleted one after another (each timed from the delete request to the
  operator's new Pod, polled every 100 ms), and 2 of the 3 member Pods of a
  3-member cluster deleted at once (timed until its status no longer says
  `Available`).
- **Majority loss**: 2 of the 3 nodes of a cluster's members are stopped
  (`node stop`: power loss, disks kept); a failing write confirms quorum is
  lost; after 5 s both nodes are started back to back. The figure is the time
  from the last node's start to the first successful write through a fresh
  etcd client on the members' pod IPs (2 s per attempt, every 200 ms). It
  includes the node agent starting again, the member pods' containers
  restarting (the `member-guard` init container first) and etcd re-forming
  quorum; pods are not evicted in this short outage, so the operator only
  observes. Each run stops a different pair of nodes.
- **etcd alone**: the same sequence on 3 etcd processes of the same pinned
  version on loopback, in the same run: 2 SIGKILLed, a failing write, 5 s,
  both restarted back to back, time from the last restart to the first
  successful write. The **ratio** is the median with the operator on the lab
  over this median: the cost of the node, pod and container machinery over
  etcd's own restart-to-leader time.
- **Available again**: from the last node's start until the operator reports
  the cluster `Available` with 3 ready members.
- **Idle**: 10 clusters of 3 members, all Available; the operator is started
  again with leader election on (as deployed) and its client routed through
  `kubectl proxy -v=6` on loopback, which logs one line per request it
  forwards. Requests are those logged within the window (a watch counts once,
  when it starts), so other components' traffic is not included. RSS
  (`VmRSS`) and CPU (`utime + stime`) are those of the operator process.
- **Member replacement** (`crates/etcd-operator/benches/replacement.rs`): a
  3-member `EtcdCluster` (default `lab-network` volumes, 4 GiB backend
  quota) is filled with 1 MiB random values until etcd's `db_size` reaches
  the size, then with 15,500 small writes, so that etcd's raft log no longer
  holds the fill and a new member can only catch up from a database snapshot,
  as in a cluster that has run a while (the snapshots the members sent are
  counted per run). Per run, the volume of a follower is wiped and its etcd
  killed (as in `tests/e2e_volume_loss.rs`): the member guard refuses the
  empty data and the operator removes the old member, creates a fresh PVC,
  adds a learner and promotes it. The figure is the time from the wipe until
  the new member (new ID, same name) is a voter, its metrics show the
  revision and applied raft index the leader had at the wipe (**data
  applied**), and it serves clients with its status at that point
  (**serving clients**), polled every 200 ms; the split shows when each step
  was first seen. The operator promotes a learner once it is caught up and
  has served for 1 s, every voter healthy for 5 s (rule 3; why the learner's
  second is enough: docs/durability.md, "Promoting a learner"). The cluster
  is grown from one size to the next.
- **etcd alone** (replacement): the same fill on 3 etcd processes of the same
  pinned version on loopback, in the same run; per run a follower is removed
  and its data deleted, a learner added and started on an empty data dir with
  `--initial-cluster-state=existing`, and promoted as soon as its metrics
  show the data applied the same way. The figure is the time from the add to
  that promotion: etcd sending and applying a snapshot of that database. The
  **ratio** is the operator's median over this one. **Serving clients** is
  measured after it: a new member serves clients only once its first
  proposal (publishing its name) has been applied, and when that proposal is
  committed before the snapshot the member receives, the member waits out
  etcd's 7 s request timeout and proposes again: about 7 s then with etcd
  alone. In the operator's Pods the member guard restarts etcd when that
  proposal is still pending 200 ms after the snapshot was applied, and the
  member serves about 0.5 s after the snapshot (docs/durability.md).
- **Writes during a replacement**: on both sides, one small write every
  200 ms. With no write at all, etcd (3.6.16 and 3.7.3) can leave a member
  that joined from a snapshot more than 5,000 entries ahead unready for good:
  applying a snapshot does not move the applied index that its "too many
  requests" check reads, so its proposals, the publishing of its name
  included, fail until it applies a new entry.
- **Rolling upgrade** (`crates/etcd-operator/benches/rollout.rs`): per run
  a fresh `EtcdCluster` (`lab-network` volumes) created on 3.6.16 and
  Available; a client load starts: one put of a new key every 10 ms, each
  sent in its own task whatever became of the earlier ones, failing after
  1 s, through one etcd client balanced over the member Pods' IPs; every
  250 ms the client is given the Ready member Pods not being deleted (as a
  Service's endpoints follow them). After 3 s `spec.version` is patched to
  3.7.3; the **time** runs until the status shows version 3.7.3, every
  member updated and ready, and `Available` (polled every 200 ms). The load
  runs 3 s more. The **longest gap** is the longest time between two
  acknowledged writes in a row over the whole load (its start counts as the
  first); **failed requests** are those that answered an error or timed
  out; afterwards every acknowledged key is read back (linearizable) and
  any missing or changed is **lost**. The operator rolls one member at a
  time, followers first, the leader last after moving leadership away
  (etcd's MoveLeader), each once every voter has been healthy for 5 s
  (etcd's health interval), is caught up and has its Pod Ready. The bench
  notes when it first saw each old Pod going and each new Pod Ready, the
  operator's last operation and the leader in status: what it saw during
  each run's longest gap is listed under the tables. A new Pod's own times
  (created, `Initialized`, etcd's container started, `Ready`) split a
  member's time down; the API gives them in whole seconds. Readiness is
  probed as soon as the startup probe (every second) passes, then every
  5 s, so a member whose etcd is not ready at that first probe is Ready
  5 s later.
- **etcd alone** (rollout): as many etcd 3.6.16 processes on loopback, with
  the operator's heartbeat (100 ms) and election timeout (1 s), a fresh
  cluster per run, the same load through a client on every member. **Leader
  killed**: after 3 s the leader is SIGKILLed; **new leader elected** is when
  a survivor (each asked every 10 ms) first reports another leader, **first
  write** when the first write after the kill is acknowledged; the load runs
  3 s after the election. **Upgrade by hand**: after 3 s each follower in
  turn is stopped cleanly (SIGTERM) and started again on its data with the
  3.7.3 binary, the next one once it serves and is within 1,000 entries of
  the leader's applied index; then leadership is moved to an upgraded member
  and the old leader upgraded the same way; the client drops a member's
  endpoint before it stops and gets it back once it serves, as the lab side
  follows Ready Pods. The **ratios** are the operator's median longest gap
  over these medians: the cost of the Pod and readiness machinery over what
  etcd's own election and a bare process restart cost clients.
- **Defragmentation** (`crates/etcd-operator/benches/defrag.rs`): 3
  members on each side, backend quota 2 GiB (on the lab a 6Gi
  `lab-network` volume, a sparse file, with defragmentation by
  fragmentation off so that nothing starts by itself). Each run fills the
  cluster with 512 KiB values until a member's database file (etcd's
  `dbSize`, looked at every 16 puts) reaches the asked size, deletes every
  other value and compacts the history (physical), so that half or more of
  each member's file is free pages (the files end somewhat larger than
  asked: bbolt grows them in steps). The load (as in the rolling upgrade bench,
  on every member's endpoint, fixed) starts; after 3 s the operator's side
  sets `spec.maintenance.defrag.schedule: "* * * * *"` (the round starts
  at the next minute) and the window runs from the round's start (the
  `started` of `status.maintenance.defragRound`, in whole seconds, or its
  first sight less one poll of 100 ms, whichever is earlier) until it is
  gone and `lastDefrag` names the round's last member; the schedule is
  then removed. etcd alone's window is the run of `etcdctl defrag --cluster`
  (every member in the member list's order, the leader whenever it comes,
  nothing moved first) on 3 etcd 3.6.16 processes on loopback with the
  operator's heartbeat, election timeout, the same quota and
  `--feature-gates=StopGRPCServiceOnDefrag=true`. **Longest gap**: the
  longest time between two acknowledged writes in a row that overlaps the
  window; **p99 latency** and **failed requests**: of the requests sent
  within the window (a failed one counts with the time it took to fail);
  **space given back**: the members' database files (etcd's `dbSize`)
  summed, before the window less after it. The load's client (etcd-client,
  Rust) balances over its endpoints without checking etcd's gRPC health
  service, so a request sent to a member while it defragments waits for it
  (or fails after 1 s) on both sides: the figures are those of such a
  client.
- **Backups** (`crates/etcd-operator/benches/backup.rs`): 3 etcd members
  of the pinned 3.6 set on loopback (backend quota 8 GiB), filled with 1 MiB
  values: every other one random bytes, which zstd cannot shrink (encrypted
  or already compressed data), the others text records shaped like stored
  Kubernetes objects, which it can; so compression matters for half the
  data. **Full backup**: the operator's `take_backup` (a follower chosen,
  the snapshot streamed, etcd's SHA-256 checked, zstd at the level above, 8 MiB parts
  uploaded two at a time, the three overlapping, metadata written) to the S3-compatible server of
  `tools/s3-server` (in memory) and to a local directory, beside `etcdctl
  snapshot save` of the same member to a local file; the order of the three
  rotates each run, and dirty pages are written out (`sync`) before each. MiB/s is the snapshot size over the time. The
  upload's end is the part of it after the snapshot's last byte was handed
  to the upload: the parts still in flight and the store's completion (S3's
  `CompleteMultipartUpload`, in which this in-memory server joins the parts
  into one buffer and hashes the whole object with MD5 on the bench's own
  cores; the local store renames its file). The row without the S3
  server's completion takes away the time from the last part's
  acknowledgement to the completion's answer: the server's work on the
  bench's cores, which a real object store does on its own machines (S3
  computes a multipart object's ETag from the parts' MD5s, taken as they
  arrive). Peak RSS is
  `VmRSS` of the bench process sampled every 20 ms during our backups: it
  stays a few parts whatever the database size. **Restore**: the newest
  backup listed in S3, downloaded with every check (stored SHA-256 and size,
  zstd, etcd's embedded SHA-256), then `etcdutl snapshot restore` (hash
  checked), as the restore Pod's `fetch-backup` does; beside `etcdutl
  snapshot restore` of etcdctl's file, written out long before. Our time is
  split: the download (made durable before it is renamed into place), a
  second fsync of the downloaded file (what write-back is left, which
  etcdutl's own fsyncs would otherwise wait for), and etcdutl.
- **Recovery point** (backups): while a writer issues small puts (100 bytes)
  paced at the asked rate (each in its own task, at most 512 in flight), the
  continuous incremental backup (`backup::incremental::spawn`) writes
  segments to the S3 server, closing each early enough for its upload to
  end within the interval after its first write. For every
  acknowledged write, the lag is the time from its acknowledgement until the
  watcher reports its revision durable (the segment holding it has its
  metadata written). The maximum is the RPO: what a restore at the worst
  moment of the run would lose. The first interval's watcher starts by taking
  a full backup of the database; the next one resumes the same chain.
- **Lab** (`crates/etcd-lab/benches/lab_footprint.rs`): time of `etcd-lab
  up` with the upstream binaries built, idle CPU (the lab's cgroup) and
  summed RSS of the lab's processes with no workload, and the cold build
  times `tools/build-upstream.sh` recorded for each upstream set.
DOC
