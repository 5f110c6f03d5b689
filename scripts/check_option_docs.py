#!/usr/bin/env python3
"""Checks that every option row in the options tables (the .def files) has a /// doc line above it.

A row that defines an option (LT_OPTION, LT_OPTION_WITH, LT_CPP_OPTION, ...; not LT_OPTION_ALIAS, an
attribute of the row above it) must have a /// line directly above it, as LibTorch's options headers
document each TORCH_ARG. Prints every row without one, with its file and line, and exits 1 if there is
one. Usage: check_option_docs.py [SOURCE_DIR]
"""
import os
import pathlib
import re
import sys

ROW = re.compile(r'^\s*(LT_[A-Z_]*OPTION[A-Z_]*)\s*\((.*)')
NOT_OPTIONS = {"LT_OPTION_ALIAS"}  # rows that define no option of their own
SKIP_DIRS = {"tests", ".git"}  # and build*: build folders


def option_name(kind, args):
    """The option's name: the argument after the type (after codec and type for the _WITH rows)."""
    parts, depth, part = [], 0, ""
    for c in args:
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(part.strip())
            part = ""
        else:
            part += c
    parts.append(part.strip())
    index = 2 if kind.endswith("_WITH") else 1
    return parts[index] if len(parts) > index else "?"


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    tables = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        tables += [pathlib.Path(folder) / f for f in sorted(files) if f.endswith(".def")]
    rows, problems = 0, []
    for f in tables:
        lines = f.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            m = ROW.match(line)
            if not m or m.group(1) in NOT_OPTIONS:
                continue
            rows += 1
            if n == 1 or not lines[n - 2].lstrip().startswith("///"):
                name = option_name(m.group(1), m.group(2))
                problems.append(f"{f.relative_to(root).as_posix()}:{n}: option {name} has no /// line above it")
    for p in problems:
        print(p)
    print(f"{rows} option rows checked, {len(problems)} without ///")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
