#!/bin/sh
# What a one-line change to a user's module file costs to rebuild (issue 28's <= 10 s target): the
# standalone app of docs/getting-started.md, built against this build tree installed into a prefix, as a
# user builds it. For each build type, with and without lightning_cpp_precompile_headers: the one-off
# build, then ROUNDS times an edited learning rate in model.cpp and `cmake --build` (a compile and a
# link), timed in wall and CPU seconds with the load average before each (a busy machine stretches wall
# time, not CPU time). Compiles take no BLAS, so the machine line has no sgemm figure.
#
#   bench/rebuild/rebuild_bench.sh BUILD_DIR [ROUNDS] [BUILD_TYPES]
#   e.g. bench/rebuild/rebuild_bench.sh build 3 "default Debug RelWithDebInfo"
# (default: no CMAKE_BUILD_TYPE, as docs/getting-started.md builds the app).
set -eu
build_dir=$(cd "${1:?usage: rebuild_bench.sh BUILD_DIR [ROUNDS] [BUILD_TYPES]}" && pwd)
rounds=${2:-3}
types=${3:-default Debug RelWithDebInfo}
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/lt_rebuild_XXXXXX)
trap 'rm -rf "$work"' EXIT

printf 'machine: %s, %s cores, %s; %s\n' "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)" "$(nproc)" \
  "$(awk '/MemTotal/ {printf "%.1f GB", $2 / 1e6}' /proc/meminfo)" "$(c++ --version | head -1)"
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
python3 "$source_dir/tests/docs/extract_blocks.py" "$source_dir" "$source_dir/tests/docs/wrappers" "$work/docs" >/dev/null
app="$work/docs/projects/my_app"
test -f "$app/model.cpp" || { echo "no my_app in docs/getting-started.md" >&2; exit 1; }

# Seconds of wall and CPU (children's user + system) of a command, as "wall cpu".
timed() {
  /usr/bin/time -f '%e %U %S' -o "$work/time" "$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  awk '{printf "%.1f %.1f", $1, $2 + $3}' "$work/time"
}

printf '%-15s %-7s %9s %s\n' "build type" helper "one-off" "rebuild after a one-line change: wall s (cpu s) [load]"
for type in $types; do
  for helper in yes no; do
    project="$work/$type-$helper"
    cp -r "$app" "$project"
    if [ "$helper" = no ]; then sed -i '/^lightning_cpp_precompile_headers/d' "$project/CMakeLists.txt"; fi
    cmake -S "$project" -B "$project/build" -G Ninja -DCMAKE_BUILD_TYPE="$([ "$type" = default ] || echo "$type")" \
      -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
    first=$(timed cmake --build "$project/build")
    line=""
    round=1
    while [ "$round" -le "$rounds" ]; do
      # The one-line change: Adam's learning rate, another each round.
      sed -i "s/AdamOptions([0-9.e-]*)/AdamOptions(1e-$((round + 1)))/" "$project/model.cpp"
      load=$(cut -d' ' -f1 /proc/loadavg)
      set -- $(timed cmake --build "$project/build")
      line="$line $1 ($2) [$load]"
      round=$((round + 1))
    done
    printf '%-15s %-7s %8ss %s\n' "$type" "$helper" "${first%% *}" "$line"
    rm -rf "$project"
  done
done
