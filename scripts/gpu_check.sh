#!/usr/bin/env bash
# The GPU check: one command on a GPU machine (PyTorch 2.11+cu130 in
# /opt/torch/.venv, nvcc, CMake and ninja from pip; no apt, no internet).
#
#   scripts/gpu_check.sh prepare      here, on a Debian machine with apt: unpacks the Debian libraries the build
#                                     needs (yaml-cpp, spdlog, fmt, CLI11, GoogleTest, zlib) into .gpu-deps/
#                                     (git-ignored), which the device call carries
#   scripts/gpu_check.sh [--dry-run]  there: configures and builds the library and the binaries holding the Cuda
#                                     tests against the venv's torch and .gpu-deps/ only, runs the tests labelled
#                                     cuda, and writes report.md, the test log and the build log's tail under
#                                     $OUT (else build-gpu/report). --dry-run: the same on a machine without a
#                                     GPU, where every Cuda test skips; it stops before the first GPU step.
#
# A device call: carry .gpu-deps, command `scripts/gpu_check.sh`, timeout 540 s; it ends within 8 minutes (each
# phase has a limit of its own, so a report comes back whatever fails).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.gpu-deps
VENV=${LT_TORCH_VENV:-/opt/torch/.venv}
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
  echo "gpu_check prepare: $(du -sh "$DEPS" | cut -f1) in $DEPS"
  exit 0
fi

DRY=0
[[ "${1:-}" == --dry-run ]] && DRY=1
REPORT=${OUT:-$ROOT/build-gpu/report}
BUILD=$ROOT/build-gpu
mkdir -p "$REPORT" "$BUILD"
MD=$REPORT/report.md
export PATH=$VENV/bin:$PATH
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
say "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with changes)')"
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
targets="cuda_test join_test fsdp_test"
phase "build ($targets)" 300 "$REPORT/build.log" cmake --build "$BUILD" --target $targets -j "$(nproc)"
built=$?
tail -60 "$REPORT/build.log" >"$REPORT/build_tail.log" && rm -f "$REPORT/build.log"
[[ $built == 0 ]] || { say "- the build failed: build_tail.log"; exit 1; }

# The Cuda tests: one GPU shared, so two at a time.
phase "ctest -L cuda" 300 "$REPORT/ctest.log" ctest --test-dir "$BUILD" -L cuda -j2 --output-on-failure \
  --output-junit "$REPORT/ctest.xml"
tested=$?
say ""
say "## Tests labelled cuda"
grep -E '^ *[0-9]+/[0-9]+ Test' "$REPORT/ctest.log" | sed 's/^ */    /' >>"$MD"
grep -E 'tests passed|tests failed' "$REPORT/ctest.log" | tee -a "$MD"
[[ $DRY == 1 ]] && { say ""; say "Dry run: stopped before the first GPU step, $(( $(date +%s) - started )) s in all."; exit $tested; }
say ""
say "$(( $(date +%s) - started )) s in all."
exit $tested
