#!/usr/bin/env python3
"""Checks that the library's includes only run down its layers (docs/architecture.md).

Each area may include its own files and those of the areas below it, never an
area above it or beside it. Prints every offending include with its file and
line, and exits 1 if there is one. Usage: check_layering.py [SOURCE_DIR]
"""
import pathlib
import re
import sys

# Bottom up; areas in one entry are side by side (neither includes the other).
LAYERS = [
    ["core"],
    ["data"],
    # Checkpoint I/O (Lightning's plugins/io): the strategies own a CheckpointIO.
    ["plugins/environments", "plugins/io"],
    ["plugins/launchers"],
    ["plugins/distributed"],
    ["plugins/join"],
    ["plugins/precision", "plugins/layer_sync"],
    ["plugins/strategies"],
    ["loops", "loggers"],
    ["trainer", "fabric"],
    ["callbacks"],
    # The Tuner runs a sweep as a fit of its own, with a callback of its own.
    ["tuner"],
    ["cli"],
]
RANK = {area: i for i, areas in enumerate(LAYERS) for area in areas}
# Forwarding headers a moved public header left behind for a release
# (docs/architecture.md): each counts as part of the area it forwards to, so
# it may include that area, and no file below that area may include it.
FORWARDING = {
    "core/checkpoint_io.h": "plugins/io",  # 0.2.x only: checkpoint I/O moved to plugins/io/
}
INCLUDE = re.compile(r'^\s*#\s*include\s*<lightning_cpp/([^>]+)>')


def area_of(path):
    """The longest known area that `path` (relative, with /) lies in; a forwarding header's target area."""
    if path in FORWARDING:
        return FORWARDING[path]
    best = None
    for area in RANK:
        if path == area or path.startswith(area + "/"):
            if best is None or len(area) > len(best):
                best = area
    return best


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    sources = []  # (file, its area)
    for area in RANK:
        for f in sorted((root / area).rglob("*")):
            if f.suffix not in (".h", ".cpp") or f.name.endswith("_test.cpp"):
                continue
            if area_of(f.relative_to(root).as_posix()) == area:  # else a deeper area's file, or a forwarding header
                sources.append((f, area))
    sources += [(root / rel, target) for rel, target in FORWARDING.items() if (root / rel).exists()]
    problems = []
    for f, area in sources:
        rel = f.relative_to(root).as_posix()
        for n, line in enumerate(f.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = area_of(m.group(1))
            if target is None:
                problems.append(f"{rel}:{n}: includes <lightning_cpp/{m.group(1)}>, in no known area")
            elif target != area and RANK[target] >= RANK[area]:
                where = "above" if RANK[target] > RANK[area] else "beside"
                problems.append(f"{rel}:{n}: {area} includes {target}, which is {where} it: {m.group(1)}")
    files = len(sources)
    for p in problems:
        print(p)
    print(f"{files} files checked, {len(problems)} includes running up or sideways")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
