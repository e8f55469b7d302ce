# Entry points. Everything runs as root (the lab creates network namespaces).
.PHONY: setup upstream build demo test lint bench down

setup: ## system packages, pinned upstream binaries, release build
	bash scripts/install-deps.sh
	bash tools/build-upstream.sh >/dev/null
	cargo build --release --locked

upstream:
	bash tools/build-upstream.sh

build:
	cargo build --release --locked

demo: setup ## the lab with a durable etcd cluster surviving the loss of a majority
	bash scripts/demo.sh

test: setup ## lint, unit, property, etcd integration and end-to-end lab tests
	bash scripts/test.sh

bench: setup
	bash scripts/bench.sh

down:
	./target/release/etcd-lab down
