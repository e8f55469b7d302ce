#!/usr/bin/env bash
# The bench command: lab and operator figures on the lab (root, `make setup`
# done), folded into docs/benchmarks.md with the date, machine and commit.
# Not part of CI. BENCH_RUNS (default 3) sets the runs of each median.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/bench
mkdir -p "$out"
rm -f "$out/lab.json" "$out/operator.json" "$out/replacement.json" "$out/backup.json" "$out/rollout.json" "$out/defrag.json" "$out/corruption.json"
failed=0

printf '\n=== lab footprint\n'
cargo bench -p etcd-lab --locked --bench lab_footprint || failed=1
printf '\n=== operator on the lab\n'
cargo bench -p etcd-operator --locked --bench operator || failed=1
printf '\n=== member replacement beside etcd alone\n'
cargo bench -p etcd-operator --locked --bench replacement || failed=1
printf '\n=== rolling upgrade under load beside etcd alone\n'
cargo bench -p etcd-operator --locked --bench rollout || failed=1
printf '\n=== defragmentation under load beside etcdctl defrag --cluster\n'
cargo bench -p etcd-operator --locked --bench defrag || failed=1
printf '\n=== backups beside etcdctl and etcdutl, RPO under load\n'
cargo bench -p etcd-operator --locked --bench backup || failed=1
printf '\n=== corruption checks: a restart with the initial check, HashKV\n'
cargo bench -p etcd-operator --locked --bench corruption || failed=1

bash scripts/bench-report.sh "$out" >docs/benchmarks.md
echo "wrote docs/benchmarks.md"
exit "$failed"
