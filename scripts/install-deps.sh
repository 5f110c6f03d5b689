#!/usr/bin/env bash
# Installs what lightning-cpp needs on Debian 12, as root. Idempotent: a
# second run installs nothing.
#   - Debian's packages, LibTorch 1.13 (CPU) among them;
#   - PyTorch 2.11 from PyPI into the virtual environment $LT_TORCH_VENV
#     (default /opt/torch/.venv, where CMake looks for it): its LibTorch (the
#     CMake package in site-packages/torch/share/cmake), its Python (the tests'
#     oracle for a 2.11 build) and its torchrun. PyPI's Linux wheel is a CUDA
#     13.0 build; its NVIDIA libraries come as packages beside it (about 4.6 GB
#     in all, downloaded once).
set -euo pipefail
torch_version=2.11.0
venv=${LT_TORCH_VENV:-/opt/torch/.venv}
packages=(
  build-essential cmake ninja-build pkg-config
  python3-venv                      # the venv PyTorch 2.11 goes into
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

# PyTorch 2.11 (LibTorch, Python, torchrun). numpy: torch warns on import
# without it, and the oracles' arithmetic is torch's own either way.
if ! "$venv/bin/python3" -c "import torch, numpy, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" \
    2>/dev/null; then
  [[ -x $venv/bin/python3 ]] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --progress-bar off --disable-pip-version-check "torch==$torch_version" numpy
fi

# Lightning 2.6 (the pytorch-lightning package), for the benchmarks that set lightning-cpp beside it (bench/gpu)
# and the lr_find oracle (tests/python/lr_find_oracle.py runs Lightning's own classes): the version the GPU machines
# have. Its requirements (torchmetrics, lightning-utilities) come with it; torch is already there.
lightning_version=2.6.6
if ! "$venv/bin/python3" -c "import pytorch_lightning as pl, sys; sys.exit(pl.__version__ != '$lightning_version')" \
    2>/dev/null; then
  "$venv/bin/pip" install --quiet --progress-bar off --disable-pip-version-check \
    "pytorch-lightning==$lightning_version"
fi

# TensorBoard, whose own reader (EventAccumulator) reads back what TensorBoardLogger writes
# (tests/python/tensorboard_reader.py); users open the same folders with it.
tensorboard_version=2.21.0
if ! "$venv/bin/python3" -c "import tensorboard, sys; sys.exit(tensorboard.__version__ != '$tensorboard_version')" \
    2>/dev/null; then
  "$venv/bin/pip" install --quiet --progress-bar off --disable-pip-version-check "tensorboard==$tensorboard_version"
fi

# MLflow's client (the skinny package: no server), which reads back the file store MLflowLogger writes
# (tests/python/mlflow_reader.py).
mlflow_version=3.17.2
if ! "$venv/bin/python3" -c "import mlflow, sys; sys.exit(mlflow.__version__ != '$mlflow_version')" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --progress-bar off --disable-pip-version-check "mlflow-skinny==$mlflow_version"
fi
