#!/usr/bin/env python3
"""Import circles between the files of each crate (issue 35's proof).

For every crate of the workspace (a folder with Cargo.toml and src/), maps
each module to its file, reads every path that names another module of the
same crate (`crate::a::b`, `super::x`, `self::y`, in `use` items and in
code), and reports the strongly connected groups of files: files that
reach each other through such paths. A group of one file is no circle.

    python3 tests/arch/import_circles.py            # a line per crate
    python3 tests/arch/import_circles.py --files    # and each circle's files

Rough by design: it reads text, not Rust's name resolution (a path inside
a comment or string counts; a glob re-export is followed one level).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def crates():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in ("target", ".git", "node_modules")]
        if "Cargo.toml" in filenames and os.path.isdir(os.path.join(dirpath, "src")):
            yield dirpath


def modules(src):
    """module path (tuple) -> file, for every .rs file under src."""
    out = {}
    for dirpath, _, filenames in os.walk(src):
        for f in filenames:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel[-1] in ("mod",):
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            out[tuple(rel)] = full
    return out


PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^}]*)\}")
COMMENT = re.compile(r"//[^\n]*")


def targets(mod, text, mods):
    """the modules a file's text names"""
    text = COMMENT.sub("", text)
    found = set()

    def resolve(kind, parts):
        if kind == "crate":
            base = ()
        elif kind == "self":
            base = mod
        else:
            base = mod[:-1]
        full = base + tuple(parts)
        # the longest prefix that is a module of the crate
        for n in range(len(full), -1, -1):
            if full[:n] in mods:
                return full[:n]
        return None

    for m in GROUP.finditer(text):
        head = [p for p in m.group(2).split("::") if p]
        for item in m.group(3).split(","):
            item = item.strip().split(" as ")[0].split("::")
            t = resolve(m.group(1), head + [p for p in item if p and p != "self"])
            if t is not None:
                found.add(t)
    for m in PATH.finditer(text):
        t = resolve(m.group(1), [p for p in m.group(2).split("::") if p])
        if t is not None:
            found.add(t)
    return found


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    show = "--files" in sys.argv
    for crate in sorted(crates()):
        src = os.path.join(crate, "src")
        mods = modules(src)
        graph = {}
        for mod, path in mods.items():
            with open(path, encoding="utf-8") as f:
                text = f.read()
            # a file does not depend on itself, nor on its own submodules'
            # parent chain only because it declares them
            graph[path] = {mods[t] for t in targets(mod, text, mods) if mods[t] != path}
        circles = [c for c in sccs(graph) if len(c) > 1]
        name = os.path.relpath(crate, ROOT)
        files = sum(len(c) for c in circles)
        print(f"{name}: {len(mods)} files, {len(circles)} circles, {files} files in them")
        if show:
            for c in sorted(circles, key=len, reverse=True):
                print("   ", " ".join(sorted(os.path.relpath(p, src) for p in c)))


if __name__ == "__main__":
    main()
