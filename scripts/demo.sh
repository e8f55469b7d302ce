#!/usr/bin/env bash
# The main demonstration: a lab, the operator installed as in production
# (kubectl apply -k deploy/), a 3-member EtcdCluster under a continuous
# writer, a majority of its nodes powered off and back on, and at the end a
# timeline and the count of acknowledged writes found intact.
#
# The lab stays up afterwards for exploring. Settings (environment):
#   DEMO_DOWN_SECONDS   how long the majority stays powered off (default 90;
#                       nodes turn NotReady after 50 s)
#   DEMO_NAMESPACE      namespace of the demo cluster (default demo)
set -euo pipefail
cd "$(dirname "$0")/.."

down_seconds="${DEMO_DOWN_SECONDS:-90}"
ns="${DEMO_NAMESPACE:-demo}"
cluster=durable
lab=./target/release/etcd-lab
# The kubectl plugin of this workspace (`kubectl etcd`), found on the PATH
# as kubectl finds any plugin.
export PATH="$PWD/target/release:$PATH"
work="$(mktemp -d /tmp/etcd-demo.XXXXXX)"
timeline="$work/timeline"
acked="$work/acked-keys"
demo_start=$SECONDS

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
mark() {
	printf '%4ss  %s\n' "$((SECONDS - demo_start))" "$*" | tee -a "$timeline"
}

say "Starting the lab (real kube-apiserver, controller-manager, scheduler, etcd; 3 process-backed nodes)"
$lab up
eval "$($lab env)"
kubectl get nodes -L topology.kubernetes.io/zone
mark "lab up: $(kubectl get nodes --no-headers | wc -l) nodes Ready"

say "Installing the operator as in production: kubectl apply -k deploy/"
kubectl apply -k deploy/
kubectl -n etcd-operator-system rollout status deployment/etcd-operator --timeout=180s
operator_node="$(kubectl -n etcd-operator-system get pods -l app.kubernetes.io/name=etcd-operator \
	-o jsonpath='{.items[0].spec.nodeName}')"
mark "operator running on $operator_node"

say "Creating a 3-member EtcdCluster (mutual TLS by default)"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<EOF
apiVersion: durable-etcd.io/v1alpha1
kind: EtcdCluster
metadata:
  name: $cluster
  namespace: $ns
spec:
  replicas: 3
  storage:
    storageClassName: lab-network
    size: 1Gi
  # The clients below run from the lab's client namespace (etcd-lab exec),
  # outside the Pod network: the cluster's NetworkPolicy lets that address
  # in beside the cluster's own namespace and the operator.
  networkPolicy:
    clientsFrom:
      - ipBlock: { cidr: 10.244.250.0/24 }
EOF
kubectl -n "$ns" wait etcdcluster/$cluster --for=condition=Available --timeout=300s
kubectl -n "$ns" get etcdcluster/$cluster
kubectl -n "$ns" get pods -o wide
kubectl -n "$ns" get networkpolicy "$cluster-members"
cluster_id_before="$(kubectl -n "$ns" get etcdcluster/$cluster -o jsonpath='{.status.clusterID}')"
members_before="$(kubectl -n "$ns" get etcdcluster/$cluster -o jsonpath='{range .status.members[*]}{.name}={.id} {end}')"
mark "cluster Available: clusterID $cluster_id_before, members $members_before"

endpoints=""
for i in 0 1 2; do
	endpoints+="${endpoints:+,}https://$cluster-$i.$cluster-peer.$ns.svc.cluster.local:2379"
done
# The users' client certificate the operator issued, as a client would
# mount it: without it every member refuses the connection.
for key in ca.crt tls.crt tls.key; do
	kubectl -n "$ns" get secret "$cluster-client-tls" -o go-template="{{index .data \"$key\"}}" | base64 -d >"$work/$key"
done
chmod 600 "$work/tls.key"
etcdctl_tls="--cacert=$work/ca.crt --cert=$work/tls.crt --key=$work/tls.key"
mark "transport: $(kubectl -n "$ns" get etcdcluster/$cluster -o jsonpath='{.status.transport}'); client certificate from Secret $cluster-client-tls"
if $lab exec -- etcdctl --endpoints "$endpoints" --cacert="$work/ca.crt" --dial-timeout=2s --command-timeout=3s get demo/ >/dev/null 2>&1; then
	echo "a client without a certificate was served" >&2
	exit 1
fi
mark "a client without a certificate is refused"

say "Writing keys continuously (each key recorded only once etcd acknowledged it)"
$lab exec -- bash -c "
	n=0
	while [ ! -e '$work/stop-writer' ]; do
		n=\$((n + 1))
		key=\$(printf 'demo/key-%07d' \$n)
		if etcdctl --endpoints '$endpoints' $etcdctl_tls --dial-timeout=1s --command-timeout=2s put \"\$key\" \"value-\$n\" >/dev/null 2>&1; then
			echo \"\$key\" >>'$acked'
		fi
	done" &
writer=$!
sleep 15
mark "writer running: $(wc -l <"$acked") writes acknowledged so far"

victims=()
for node in $(kubectl -n "$ns" get pods -l durable-etcd.io/cluster=$cluster -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u); do
	if [[ "$node" != "$operator_node" && ${#victims[@]} -lt 2 ]]; then victims+=("$node"); fi
done
if ((${#victims[@]} < 2)); then
	# The operator shares a node with a member: any two member nodes will do;
	# the operator is then down too, and etcd keeps serving without it.
	mapfile -t victims < <(kubectl -n "$ns" get pods -l durable-etcd.io/cluster=$cluster \
		-o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | head -2)
fi

say "Power loss on ${victims[*]}: two of three members gone at once (quorum lost)"
for node in "${victims[@]}"; do $lab node stop "$node"; done
mark "nodes ${victims[*]} powered off; acknowledged so far: $(wc -l <"$acked")"

waited=0
while ((waited < down_seconds)); do
	sleep 15
	waited=$((waited + 15))
	quorum="$(kubectl -n "$ns" get etcdcluster/$cluster \
		-o jsonpath='{.status.conditions[?(@.type=="QuorumLost")].status} {.status.conditions[?(@.type=="QuorumLost")].message}' 2>/dev/null || true)"
	mark "down ${waited}s: QuorumLost=${quorum:-unknown}; acknowledged: $(wc -l <"$acked")"
done

say "What the operator reports while it waits (it removes nothing, restores nothing)"
kubectl get nodes
kubectl -n "$ns" get etcdcluster/$cluster
kubectl -n "$ns" get etcdcluster/$cluster -o jsonpath='{range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}'
kubectl -n "$ns" get events --sort-by=.lastTimestamp | tail -n 12
kubectl etcd status "$cluster" -n "$ns" || true

say "Power back on ${victims[*]}"
for node in "${victims[@]}"; do $lab node start "$node"; done
mark "nodes ${victims[*]} powered on"
kubectl -n "$ns" wait etcdcluster/$cluster --for=condition=Available --timeout=600s
mark "cluster Available again"
sleep 10
touch "$work/stop-writer"
wait "$writer" || true
mark "writer stopped: $(wc -l <"$acked") writes acknowledged in total"

say "Checking every acknowledged write"
$lab exec -- etcdctl --endpoints "$endpoints" $etcdctl_tls get demo/ --prefix --keys-only | sed '/^$/d' | sort >"$work/present-keys"
sort "$acked" >"$work/acked-sorted"
missing="$(comm -23 "$work/acked-sorted" "$work/present-keys" | wc -l)"
cluster_id_after="$(kubectl -n "$ns" get etcdcluster/$cluster -o jsonpath='{.status.clusterID}')"
members_after="$(kubectl -n "$ns" get etcdcluster/$cluster -o jsonpath='{range .status.members[*]}{.name}={.id} {end}')"
mark "acknowledged writes: $(wc -l <"$acked"); present: $(($(wc -l <"$acked") - missing)); missing: $missing"
mark "clusterID before $cluster_id_before, after $cluster_id_after"
mark "members before: $members_before"
mark "members after:  $members_after"

say "kubectl etcd status"
kubectl etcd status "$cluster" -n "$ns"

say "Timeline"
cat "$timeline"

say "The lab stays up for exploring"
echo "  eval \"\$($lab env)\"; kubectl -n $ns get etcdcluster,pods"
echo "  stop it with: $lab down"

if [[ "$missing" != 0 || "$cluster_id_before" != "$cluster_id_after" || "$members_before" != "$members_after" ]]; then
	echo "DURABILITY CHECK FAILED" >&2
	exit 1
fi
