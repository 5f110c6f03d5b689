#!/usr/bin/env python3
"""Extracts the C++ programs of README.md and docs/*.md into a CMake project that uses an installed
lightning-cpp as a user would (find_package(LightningCpp), lightning_cpp_precompile_headers).

Every ```cpp block needs a marker on the line before it (an HTML comment, invisible when rendered):

  <!-- doctest: run -->                a whole program: built and run (exit 0 within the time limit)
  <!-- doctest: build: REASON -->      a whole translation unit: built (an executable if it has main(),
                                       else a module library, as a plugin is) but not run, for REASON
  <!-- doctest: snippet WRAPPER [run] -->
                                       a fragment, pasted into tests/docs/wrappers/WRAPPER.cpp at its
                                       `// @SNIPPET@` line; built, and run with `run`
  <!-- doctest: file DIR/NAME [run EXE] -->
                                       a file of a standalone project DIR (any language: its
                                       CMakeLists.txt too), which is built with add_subdirectory(DIR);
                                       `run EXE` runs DIR's executable EXE after the build
  <!-- doctest: skip: REASON -->       not a program (a declaration, pseudo-code); REASON is required

A ```cpp block without a marker, an unknown marker, or a skip or build without a reason is an error:
the docs cannot gain a program that nothing compiles. Compiler messages point at the Markdown lines
(#line). Writes OUT/CMakeLists.txt, the sources, and OUT/run.list ("name<TAB>path in the build tree").
"""
import pathlib
import re
import sys

CPP_FENCES = {"cpp", "c++", "cc", "cxx"}
MARKER = re.compile(r"^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+)\s*([^\s`]*)\s*$")
HAS_MAIN = re.compile(r"\bint\s+main\s*\(")


def blocks(path):
    """(language, first content line number, text, marker or None, marker line) per fenced block."""
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i + 1
        j = start
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        if j == len(lines):
            raise SystemExit(f"{path}:{i + 1}: unterminated code block")
        body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[start:j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = MARKER.match(lines[k]) if k >= 0 else None
        yield lang, start + 1, "\n".join(body) + "\n", (marker.group(1) if marker else None), k + 1
        i = j + 1


def main():
    if len(sys.argv) < 4:
        raise SystemExit("usage: extract_blocks.py SOURCE_DIR WRAPPERS_DIR OUT_DIR")
    src, wrappers, out = (pathlib.Path(a).resolve() for a in sys.argv[1:4])
    pages = [src / "README.md"] + sorted((src / "docs").glob("**/*.md"))
    out.mkdir(parents=True, exist_ok=True)
    targets, runs, projects, errors = [], [], [], []
    for page in pages:
        rel = page.relative_to(src)
        stem = re.sub(r"\W", "_", str(rel.with_suffix("")))
        for lang, line, text, marker, marker_line in blocks(page):
            where = f"{rel}:{line - 1}"
            if marker is None:
                if lang in CPP_FENCES:
                    errors.append(f"{where}: a ```{lang} block without a doctest marker (see {__file__})")
                continue
            kind = re.match(r"\w*", marker).group(0)
            rest = marker[len(kind):].strip()
            reason = rest[1:].strip() if rest.startswith(":") else ""
            name = f"doc_{stem}_{line - 1}"
            if kind in ("build", "skip"):
                if not reason:
                    errors.append(f"{rel}:{marker_line}: '{kind}' needs a reason after a colon")
                    continue
                if kind == "skip":
                    continue
                source = out / "blocks" / f"{name}.cpp"
                source.parent.mkdir(exist_ok=True)
                source.write_text(f'#line {line} "{page}"\n' + text, encoding="utf-8")
                targets.append((name, source, bool(HAS_MAIN.search(text))))
            elif kind == "run":
                source = out / "blocks" / f"{name}.cpp"
                source.parent.mkdir(exist_ok=True)
                source.write_text(f'#line {line} "{page}"\n' + text, encoding="utf-8")
                targets.append((name, source, True))
                runs.append((name, name))
            elif kind == "snippet":
                args = rest.split()
                if not args or any(a != "run" for a in args[1:]):
                    errors.append(f"{rel}:{marker_line}: expected 'snippet WRAPPER [run]'")
                    continue
                wrapper = wrappers / f"{args[0]}.cpp"
                if not wrapper.exists():
                    errors.append(f"{rel}:{marker_line}: no wrapper {wrapper}")
                    continue
                wlines = wrapper.read_text(encoding="utf-8").split("\n")
                at = [n for n, ln in enumerate(wlines) if ln.strip() == "// @SNIPPET@"]
                if len(at) != 1:
                    errors.append(f"{wrapper}: expected one '// @SNIPPET@' line")
                    continue
                n = at[0]
                code = (f'#line 1 "{wrapper}"\n' + "\n".join(wlines[:n]) + f'\n#line {line} "{page}"\n' + text +
                        f'#line {n + 2} "{wrapper}"\n' + "\n".join(wlines[n + 1:]))
                source = out / "blocks" / f"{name}.cpp"
                source.parent.mkdir(exist_ok=True)
                source.write_text(code, encoding="utf-8")
                targets.append((name, source, bool(HAS_MAIN.search(code))))
                if "run" in args[1:]:
                    runs.append((name, name))
            elif kind == "file":
                args = rest.split()
                if len(args) not in (1, 3) or (len(args) == 3 and args[1] != "run") or "/" not in args[0]:
                    errors.append(f"{rel}:{marker_line}: expected 'file DIR/NAME [run EXE]'")
                    continue
                target = out / "projects" / args[0]
                if ".." in pathlib.PurePosixPath(args[0]).parts:
                    errors.append(f"{rel}:{marker_line}: a file path inside its project, please")
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
                project = args[0].split("/")[0]
                if project not in projects:
                    projects.append(project)
                if len(args) == 3:
                    runs.append((f"{project}_{args[2]}", f"projects/{project}/{args[2]}"))
            else:
                errors.append(f"{rel}:{marker_line}: unknown doctest marker '{marker}'")
    if errors:
        raise SystemExit("\n".join(errors))
    cmake = [
        "# Generated by tests/docs/extract_blocks.py from README.md and docs/: every C++ program there.",
        "cmake_minimum_required(VERSION 3.18)",
        "project(lightning_cpp_docs CXX)",
        "set(CMAKE_CXX_STANDARD 17)",
        "find_package(LightningCpp REQUIRED)",
        "# A precompiled header GCC cannot use fails the build: the test checks the helper, too.",
        "add_compile_options(-Werror=invalid-pch)",
    ]
    for name, source, is_program in targets:
        kind = "add_executable" if is_program else "add_library"
        lib = "" if is_program else " MODULE"
        cmake += [f'{kind}({name}{lib} "{source}")',
                  f"target_link_libraries({name} PRIVATE LightningCpp::lightning_cpp)",
                  f"lightning_cpp_precompile_headers({name})"]
    cmake += [f"add_subdirectory(projects/{p})" for p in projects]
    (out / "CMakeLists.txt").write_text("\n".join(cmake) + "\n", encoding="utf-8")
    (out / "run.list").write_text("".join(f"{n}\t{p}\n" for n, p in runs), encoding="utf-8")
    print(f"doctest: {len(targets)} blocks and {len(projects)} projects to build, {len(runs)} to run")


if __name__ == "__main__":
    main()
