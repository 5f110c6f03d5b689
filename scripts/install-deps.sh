#!/usr/bin/env bash
# Installs what lightning-cpp needs on Debian 12, as root. Idempotent: a
# second run installs nothing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev          # LibTorch 1.13 (CPU) and the Gloo headers c10d needs
  libyaml-cpp-dev libspdlog-dev libcli11-dev libgtest-dev zlib1g-dev
  python3-torch                     # /usr/bin/python3 + torch 1.13: the oracle in tests and benchmarks
  python3-protobuf protobuf-compiler  # tests only: decode TensorBoardLogger's event files apart from our encoder
  python3-yaml                      # tests only: read hparams.yaml with PyYAML, as Lightning does
  dataset-fashion-mnist             # /usr/share/datasets/fashion-mnist
  libopenblas0-openmp               # the BLAS LibTorch calls (libblas.so.3); see below
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
# LibTorch calls BLAS through libblas.so.3, which a fresh Debian points at the
# reference BLAS (~15x slower). OpenBLAS's OpenMP build follows LibTorch's
# intra-op thread count; the pthread build (which Debian prefers when both are
# installed) starts threads of its own and oversubscribes DDP ranks:
# bench/blas/compare_blas.sh measured 2382 vs 1545 MLP steps/s for two
# 1-thread processes on 2 cores. Select it for BLAS and LAPACK.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
for name in blas lapack; do
  want=/usr/lib/$arch/openblas-openmp/lib$name.so.3
  link=lib$name.so.3-$arch
  if [[ $(update-alternatives --query "$link" | sed -n 's/^Value: //p') != "$want" ]]; then
    update-alternatives --quiet --set "$link" "$want"
  fi
done
