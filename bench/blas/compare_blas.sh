#!/usr/bin/env bash
# Runs blas_bench under each BLAS installed for libblas.so.3 (Debian's
# alternatives: reference, OpenBLAS pthread, OpenBLAS OpenMP), selected per
# run with LD_LIBRARY_PATH, and prints a table; with --example also the
# Fashion-MNIST example's wall time (1 epoch) under each OpenBLAS.
#   bench/blas/compare_blas.sh [BUILD_DIR] [--example]
set -euo pipefail
build=${1:-build}
example=${2:-}
lib=/usr/lib/x86_64-linux-gnu
printf '| BLAS | sgemm GFLOP/s 1 thread | 2 threads | 2 processes x 1 thread | MLP steps/s 1 thread | 2 processes x 1 thread | example s |\n'
printf '|---|---:|---:|---:|---:|---:|---:|\n'
for variant in blas openblas-pthread openblas-openmp; do
  dir=$lib/$variant
  [[ -e $dir/libblas.so.3 ]] || { echo "| $variant | not installed |"; continue; }
  out=$(LD_LIBRARY_PATH=$dir "$build/bench/blas/blas_bench")
  get() { grep -F "$1" <<<"$out" | sed 's/.*: //'; }
  seconds=-
  if [[ $example == --example && $variant != blas ]]; then
    start=$(date +%s.%N)
    LD_LIBRARY_PATH=$dir "$build/examples/fashion_mnist/fashion_mnist" --epochs 1 >/dev/null 2>&1 || true
    seconds=$(echo "$(date +%s.%N) - $start" | bc)
    seconds=$(printf '%.1f' "$seconds")
  fi
  name=$variant; [[ $variant == blas ]] && name="reference"
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$(get '1 thread: ' | head -1)" \
    "$(get 'sgemm GFLOP/s, 2 threads')" "$(get 'sgemm GFLOP/s, 2 processes')" "$(get 'MLP steps/s, 1 thread')" \
    "$(get 'MLP steps/s, 2 processes')" "$seconds"
done
