#!/usr/bin/env bash
# The GPU check: one command on a GPU machine (PyTorch 2.11+cu130 in
# /opt/torch/.venv, nvcc, CMake and ninja from pip; no apt, no internet).
#
#   scripts/gpu_check.sh prepare      here, on a Debian machine with apt: unpacks the Debian libraries the build
#                                     needs (yaml-cpp, spdlog, fmt, CLI11, GoogleTest, zlib) and copies the
#                                     Fashion-MNIST files into .gpu-deps/ (git-ignored, ~36 MB), which the device
#                                     call carries
#   scripts/gpu_check.sh [--dry-run] [tests] [bench]
#                                     there: configures and builds the library, the binaries holding
#                                     the Cuda tests and the GPU benchmarks against the venv's torch and
#                                     .gpu-deps/ only; runs the tests labelled cuda (tests) and the benchmarks
#                                     (bench; both when neither is named), and writes report.md and the logs
#                                     under $OUT (else build-gpu/report). --dry-run: the same on a machine
#                                     without a GPU, where every Cuda test skips and the benchmarks run tiny on
#                                     the CPU; it stops before the first GPU step.
#
# On a lent GPU (one command there may run 10 minutes): a device call carrying .gpu-deps with the command
# `scripts/gpu_check.sh tests` (timeout 560 s: the build and the tests), then at once, while the machine and its
# build-gpu/ are warm, `scripts/gpu_check.sh bench`. Each phase has a limit of its own, so a report comes back
# whatever fails.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.gpu-deps
VENV=${LT_TORCH_VENV:-/opt/torch/.venv}
# Fashion-MNIST: the Debian machine's copy, else the one prepare put into .gpu-deps/ (the GPU machine has none).
DATA=/usr/share/datasets/fashion-mnist
[[ -d $DATA ]] || DATA=$ROOT/.gpu-deps/fashion-mnist
# Debian's names; libgmock-dev because GTest's CMake files name its targets too.
PACKAGES="libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev
  libgtest-dev libgmock-dev zlib1g-dev zlib1g"

if [[ "${1:-}" == prepare ]]; then
  set -e
  rm -rf "$DEPS" && mkdir -p "$DEPS/debs"
  (cd "$DEPS/debs" && apt-get download $PACKAGES)
  for deb in "$DEPS"/debs/*.deb; do dpkg -x "$deb" "$DEPS"; done
  rm -rf "$DEPS/debs" "$DEPS/usr/share/doc" "$DEPS/usr/share/man" "$DEPS/usr/src"
  # zlib's library lies in lib/ (not usr/lib/): one prefix holds everything.
  if [[ -d "$DEPS/lib" ]]; then cp -a "$DEPS/lib/." "$DEPS/usr/lib/" && rm -rf "$DEPS/lib"; fi
  # Links to absolute paths (libz.so -> /lib/...) would point outside the folder on the other machine.
  find "$DEPS" -type l | while read -r link; do
    target=$(readlink "$link")
    if [[ "$target" == /* ]]; then
      local_target=$DEPS$target
      [[ -e "$local_target" ]] || local_target=$DEPS/usr$target  # /lib's files are in usr/lib now
      ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$local_target")" "$link"
    fi
  done
  find "$DEPS" -xtype l -print -delete | sed 's/^/removed a dangling link: /'
  cp -r /usr/share/datasets/fashion-mnist "$DEPS/fashion-mnist"  # the example's data (scripts/install-deps.sh)
  echo "gpu_check prepare: $(du -sh "$DEPS" | cut -f1) in $DEPS"
  exit 0
fi

DRY=0 TESTS=0 BENCH=0
for arg in "$@"; do
  case $arg in
    --dry-run) DRY=1 ;;
    tests) TESTS=1 ;;
    bench) BENCH=1 ;;
    *) echo "gpu_check: unknown argument '$arg' (prepare, --dry-run, tests, bench)" >&2; exit 2 ;;
  esac
done
[[ $TESTS == 0 && $BENCH == 0 ]] && TESTS=1 BENCH=1
REPORT=${OUT:-$ROOT/build-gpu/report}
BUILD=$ROOT/build-gpu
mkdir -p "$REPORT" "$BUILD"
MD=$REPORT/report.md
export PATH=$VENV/bin:$PATH  # its cmake and ninja (pip's) on the GPU machine
# The carried CMake files name policy ranges from 2.6; a CMake 4 from pip takes them with this.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
started=$(date +%s)
say() { echo "$*" | tee -a "$MD"; }
phase() {  # phase NAME LIMIT_S LOG COMMAND...: runs it bounded, appends how it ended to the report
  local name=$1 limit=$2 log=$3; shift 3
  local t0; t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  say "- $name: exit $rc after $(( $(date +%s) - t0 )) s$([[ $rc == 124 ]] && echo " (its limit of $limit s)")"
  return $rc
}

: >"$MD"
say "# GPU check, $(date -u '+%Y-%m-%d %H:%M UTC')$([[ $DRY == 1 ]] && echo ' (dry run)')"
say ""
if commit=$(git rev-parse --short HEAD 2>/dev/null); then
  say "- commit: $commit$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
else
  say "- commit: unknown (no git repository here)"
fi
say "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"
say "- CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
say "- torch: $("$VENV/bin/python" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1 | tail -1)"
say "- compiler: $(c++ --version 2>/dev/null | head -1); cmake $(cmake --version | head -1 | awk '{print $3}'); nvcc $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo none)"
if [[ ! -d "$DEPS/usr" ]]; then
  say "- .gpu-deps/ is missing: run 'scripts/gpu_check.sh prepare' on the CPU machine and carry .gpu-deps"
  exit 2
fi
if [[ $DRY == 0 ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  say "- no GPU here: use --dry-run on a machine without one"
  exit 2
fi

# Only .gpu-deps/ provides the Debian libraries: /usr's copies (on the CPU machine) are ignored, so a dry run
# proves that what is carried suffices.
generator=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
phase configure 120 "$REPORT/configure.log" cmake -S . -B "$BUILD" -G "$generator" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$DEPS/usr" -DCMAKE_IGNORE_PREFIX_PATH=/usr -DLT_TORCH_VENV="$VENV" \
  || { tail -40 "$REPORT/configure.log" >>"$MD"; exit 1; }
targets="cuda_test join_test fsdp_test lm_bench example_gpu"
# 16 cores build it in a few minutes; a dry run on a small machine may take half an hour.
phase "build ($targets)" "$([[ $DRY == 1 ]] && echo 2400 || echo 300)" "$REPORT/build.log" cmake --build "$BUILD" --target $targets -j "$(nproc)"
built=$?
tail -60 "$REPORT/build.log" >"$REPORT/build_tail.log" && rm -f "$REPORT/build.log"
[[ $built == 0 ]] || { say "- the build failed: build_tail.log"; exit 1; }

# The Cuda tests: one GPU shared by up to four processes at a time.
tested=0
if [[ $TESTS == 1 ]]; then
  phase "ctest -L cuda" 240 "$REPORT/ctest.log" ctest --test-dir "$BUILD" -L cuda -j4 --output-on-failure \
    --output-junit "$REPORT/ctest.xml"
  tested=$?
  say ""
  say "## Tests labelled cuda"
  grep -E '^ *[0-9]+/[0-9]+ Test' "$REPORT/ctest.log" | sed 's/^ */    /' >>"$MD"
  grep -E 'tests passed|tests failed' "$REPORT/ctest.log" | tee -a "$MD"
fi

# The benchmarks (bench/gpu/compare.py): the language model and the example's work at three precisions, each
# through lt::Trainer, the plain PyTorch loop and Lightning 2.6. A dry run takes tiny ones on the CPU through the
# same pipeline instead.
benched=0
if [[ $BENCH == 1 ]]; then
  say ""
  say "## Benchmarks"
  lm=(lm --bench "$BUILD/bench/gpu/lm_bench" --markdown "$MD")
  example=(example --bench "$BUILD/bench/gpu/example_gpu" --markdown "$MD" --rounds 1 --data "$DATA")
  if [[ $DRY == 1 ]]; then
    lm+=(--rounds 1 --accelerator cpu --precision 32-true --layers 1 --width 64 --heads 2 --vocab 128 --seq 32
      --batch 4 --warmup 2 --steps 3)
    example+=(--accelerator cpu --precisions 32-true --epochs 1)
  fi
  phase "language model: lt::Trainer, plain PyTorch, Lightning 2.6" 180 "$REPORT/lm.log" "$VENV/bin/python" \
    bench/gpu/compare.py "${lm[@]}"
  benched=$?
  [[ $benched == 0 ]] || tail -30 "$REPORT/lm.log" >>"$MD"
  phase "the example at three precisions: lt::Trainer, plain PyTorch, Lightning 2.6" 240 "$REPORT/example.log" \
    "$VENV/bin/python" bench/gpu/compare.py "${example[@]}" || { benched=1; tail -30 "$REPORT/example.log" >>"$MD"; }
fi
say ""
[[ $DRY == 1 ]] && say "Dry run: stopped before the first GPU step."
say "$(( $(date +%s) - started )) s in all."
[[ $tested == 0 && $benched == 0 ]]
