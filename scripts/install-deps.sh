#!/usr/bin/env bash
# Installs what lightning-cpp needs on Debian 12, as root. Idempotent: a
# second run installs nothing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev          # LibTorch 1.13 (CPU) and the Gloo headers c10d needs
  libyaml-cpp-dev libspdlog-dev libcli11-dev libgtest-dev zlib1g-dev
  python3-torch                     # /usr/bin/python3 + torch 1.13: the oracle in tests and benchmarks
  dataset-fashion-mnist             # /usr/share/datasets/fashion-mnist
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
