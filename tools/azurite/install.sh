#!/usr/bin/env bash
# Installs the pinned Azurite (the Azure Storage emulator, from npm) for the
# Azure Blob backup tests: `npm ci` of package.json + package-lock.json into
# "$ETCD_LAB_CACHE/upstream/azurite-<pin hash>/", the cache of
# tools/build-upstream.sh (default ETCD_LAB_CACHE=$HOME/.cache/etcd-lab).
# Skipped when that directory is complete. Prints the directory on stdout;
# the server is node_modules/.bin/azurite-blob inside it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ETCD_LAB_CACHE:-$HOME/.cache/etcd-lab}"
hash="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-12)"
out="$cache/upstream/azurite-$hash"
if [[ -f "$out/.complete" ]]; then
	echo "$out"
	exit 0
fi
command -v npm >/dev/null || { echo "npm is required: run scripts/install-deps.sh" >&2; exit 1; }

echo "installing azurite (npm ci)" >&2
rm -rf "$out"
mkdir -p "$out"
cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$out/"
start=$SECONDS
# No package in the lock runs install scripts; refuse any that would.
(cd "$out" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
"$out/node_modules/.bin/azurite-blob" --help >/dev/null
echo "$((SECONDS - start))" >"$out/.build-seconds"
touch "$out/.complete"
echo "$out"
