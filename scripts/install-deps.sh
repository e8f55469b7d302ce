#!/usr/bin/env bash
# Installs the system packages the lab and the build need (Debian), as root.
# Skips apt entirely when everything is already present.
set -euo pipefail
need=()
command -v nft >/dev/null || need+=(nftables)
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v ip >/dev/null || need+=(iproute2)
command -v ps >/dev/null || need+=(procps)
# python3 with PyYAML: the Helm chart's check (scripts/check-helm.sh).
command -v python3 >/dev/null || need+=(python3 python3-yaml)
command -v curl >/dev/null || need+=(curl)
# Lab volumes are ext4 disk images mounted through loop devices: losetup
# (Debian ships it in util-linux's `mount` package), mkfs.ext4, e2fsck and
# resize2fs (e2fsprogs).
command -v losetup >/dev/null || need+=(mount)
for tool in mkfs.ext4 e2fsck resize2fs; do
	command -v "$tool" >/dev/null || { need+=(e2fsprogs); break; }
done
# Lab lanes (scripts/lab-lane.sh, scripts/lab-tests.sh): unshare, flock
# (util-linux), GNU xargs with --process-slot-var (findutils).
for tool in unshare flock; do
	command -v "$tool" >/dev/null || { need+=(util-linux); break; }
done
command -v xargs >/dev/null || need+=(findutils)
# Azurite (the Azure Blob emulator of the backup tests) comes from npm.
command -v npm >/dev/null || need+=(nodejs npm)
# The GCS backup test makes a service-account key with `openssl genpkey`.
command -v openssl >/dev/null || need+=(openssl)
# The images (scripts/build-images.sh, check-images.sh): jq for cargo
# metadata and image configs, GNU tar for the layers, readelf (binutils) to
# tell static executables, the host's CA bundle for the base layer.
command -v jq >/dev/null || need+=(jq)
command -v tar >/dev/null || need+=(tar)
command -v readelf >/dev/null || need+=(binutils)
[[ -s /etc/ssl/certs/ca-certificates.crt ]] || need+=(ca-certificates)
if ((${#need[@]})); then
	echo "installing: ${need[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# A python3 that came without PyYAML (e.g. not Debian's) gets it from PyPI.
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install -q pyyaml
command -v go >/dev/null || { echo "go is required (Go 1.26 or newer)" >&2; exit 1; }
command -v cargo >/dev/null || { echo "cargo is required (Rust 1.89 or newer)" >&2; exit 1; }
