#!/usr/bin/env bash
# The LibTorch 1.13 leg of the suite (ctest: LibTorch113.*): builds lightning-cpp
# against Debian's libtorch-dev 1.13 in its own folder and runs there the Join
# matrices and Join tests, the checkpoint tests and the launch tests (torchrun
# 1.13 of /usr/bin, the local launcher), and find_package(LightningCpp) from
# an outside project against its installed tree. Then checkpoints cross over:
# each build writes a mid-epoch checkpoint and resumes the other's, and the
# Python of the 2.x build opens 1.13's with torch.load's defaults.
#   libtorch113.sh <source dir> <this build dir (2.x)> <work dir> <the 2.x build's Python>
# Exit 77 (skipped) where Debian's LibTorch is not installed.
set -euo pipefail
src=$1 main_build=$2 work=$3 python=$4
arch=$(gcc -print-multiarch)
torch_dir=/usr/lib/$arch/cmake/Torch
if [[ ! -f $torch_dir/TorchConfig.cmake ]]; then
  echo "skipped: Debian's libtorch-dev (LibTorch 1.13) is not installed (scripts/install-deps.sh)"
  exit 77
fi
build=$work/build
mkdir -p "$work"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTorch_DIR="$torch_dir" \
  -DLT_BUILD_BENCH=OFF > "$work/configure.log"
grep "lightning-cpp: LibTorch" "$work/configure.log"
binaries=(join_test checkpoint_test io_test torchrun_test launcher_test lightning-cpp)
cmake --build "$build" --target "${binaries[@]}"
# Every test of those binaries; the others of the tree are not built there.
ctest --test-dir "$build" --output-on-failure -j2 -E '_NOT_BUILT$|^(Docs|Example|Architecture|Oracles)\.'
# Checkpoints across the two LibTorch versions, both ways.
cross=$work/cross
rm -rf "$cross" && mkdir -p "$cross"
for dir in "$main_build" "$build"; do
  LT_CROSS_DIR=$cross "$dir/tests/checkpoint_test" --gtest_filter=CheckpointTest.WriteForTheOtherLibTorch
done
for dir in "$main_build" "$build"; do
  LT_CROSS_DIR=$cross "$dir/tests/checkpoint_test" --gtest_filter=CheckpointTest.ResumeTheOtherLibTorchsCheckpoint
done
"$python" -c "import sys, torch; c = torch.load(sys.argv[1]); print('torch', torch.__version__, 'opened', sys.argv[1], \
'with its defaults: global_step', c['global_step'])" "$cross/libtorch-1.13/epoch=0-step=4.ckpt"
