# Entry points. Everything runs as root (the lab creates network namespaces).
.PHONY: deps setup upstream build static image demo demo-hosted test bench chaos down

deps: ## system packages and the pinned upstream binaries
	bash scripts/install-deps.sh
	bash tools/build-upstream.sh >/dev/null

setup: deps ## plus a release build of the workspace
	cargo build --release --locked

upstream:
	bash tools/build-upstream.sh

build:
	cargo build --release --locked

static: ## the statically linked operator binary of the container image
	bash scripts/build-static.sh

image: ## the OCI images of the operator and of each pinned etcd release, in target/images/ (no container engine)
	bash scripts/build-images.sh

demo: setup image ## the lab (running the images) with a durable etcd cluster surviving the loss of a majority
	bash scripts/demo.sh

demo-hosted: setup ## a tenant kube-apiserver storing in an operator-managed cluster, through a majority loss, a member replacement, an upgrade and a restore
	./target/release/etcd-hosted

test: deps ## lint, unit, property, etcd integration and end-to-end lab tests
	bash scripts/test.sh

bench: setup
	bash scripts/bench.sh

chaos: setup ## a seeded chaos campaign of 500 faults on the lab (CHAOS_SEED, CHAOS_STEPS), its summary into docs/reliability.md
	./target/release/etcd-chaos --steps $${CHAOS_STEPS:-500} $${CHAOS_SEED:+--seed $$CHAOS_SEED} --summary docs/reliability.md

down:
	./target/release/etcd-lab down
