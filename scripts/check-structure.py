#!/usr/bin/env python3
"""check-structure.py -- the house's size and cycle rules, checked on engine/ (issue 24).

Rules (docs: ../shared/STYLE.md, "The shape of the house"):
  - no engine file (engine/**/*.c, *.h) over 1500 lines;
  - no function over 150 lines, counted from its definition's first line to its closing brace
    (the house's style: the definition at column 0, then `{` and `}` alone at column 0);
  - no include cycle between modules: a module is engine/X.c with its engine/X.h (what others include), X_int.h and
    engine/X_priv.h (so mat.c -> model.h -> mat.h is a loop, as mat.c and mat.h are one
    module);
  - no call cycle between files: a file calls another when it names a non-static function the
    other defines (outside comments and strings, not as a member after `.` or `->`); a cycle is
    A calling B and B calling A, directly or through a chain (one line per strongly connected set);
  - nothing in engine/ outside engine/cli/ includes a file of engine/cli/ or calls a function it defines;
  - engine/ is a folder per stage (LAYERS, lowest first) and a file includes only headers of its own folder
    and folders below it: never one above (the house's order, ../shared/STYLE.md);
  - no test of the architecture (an HP_ARCH_ value named in code) outside the loader (engine/model/model*.c,
    LOADER below): the passes and front ends read the model's features (hp_model_info's gated_mlp,
    n_token_types, hf_prune, ...), so a new architecture is a config parser and a weight binder.

Each violation is one line `file:line: what (detail)`. A violation whose `file: what` is a line of the
allow-list (scripts/structure-allow.txt: named debts that are being paid off) is not reported; an
allowed entry that no longer occurs is reported ("allowed but not found: remove it"), so the list
cannot go stale. Exit status: 0 when nothing is reported, 1 otherwise.

Usage: scripts/check-structure.py [--root DIR] [--allow FILE] [--no-allow]
Python 3 standard library only.
"""
import argparse
import os
import re
import sys

MAX_FILE_LINES = 1500
LOADER = re.compile(r"^engine/model/model[a-z_]*\.[ch]$")  # the files that may name an architecture
# the engine's folders, one per stage, lowest first: a file includes headers of its own folder and the folders
# before it only (engine/cli/, the command line, is above them all; engine/plan/study/ is part of plan/). The
# store is below the sweep that writes into it (STYLE.md's flow lists the sweep first: data flows that way, calls
# the other).
LAYERS = ["core", "model", "compute", "text", "eval", "analysis", "plan", "store", "sweep", "query", "report", "cli"]
ARCH = re.compile(r"\bHP_ARCH_(?!COUNT\b)[A-Z0-9_]+\b")
MAX_FUNC_LINES = 150

IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def strip_c(text):
    """The text with comments, string and character literals blanked (newlines kept, so lines keep their numbers)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Source:
    def __init__(self, root, rel):
        self.rel = rel  # e.g. engine/report/report.c
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            self.text = f.read()
        self.lines = self.text.split("\n")
        if self.lines and self.lines[-1] == "":
            self.lines.pop()
        self.code = strip_c(self.text).split("\n")
        self.funcs = self._functions()  # (name, first line, last line, static), lines 1-based

    def _functions(self):
        """Definitions in the house's style: a header starting at column 0, then `{` alone at column 0,
        the body ending at the next `}` at column 0."""
        funcs = []
        code = self.code
        i = 0
        while i < len(code):
            if code[i].rstrip() != "{":
                i += 1
                continue
            # the header: back over indented continuation lines to the line at column 0
            s = i - 1
            while s > 0 and code[s][:1] in (" ", "\t") and code[s].strip():
                s -= 1
            header = " ".join(code[k].strip() for k in range(s, i))
            e = i + 1
            while e < len(code) and not code[e].startswith("}"):
                e += 1
            m = re.match(r"[^(=]*?([A-Za-z_][A-Za-z_0-9]*)\s*\(", header)
            if m and not header.startswith("#") and "=" not in header.split("(")[0]:
                words = IDENT.findall(header.split("(")[0])
                funcs.append((m.group(1), s + 1, e + 1, "static" in words))
            i = e + 1
        return funcs

    def module(self):
        """engine/X.c, engine/X.h and its private engine/X_priv.h (X_int.h) are module engine/X."""
        base = self.rel
        for suf in ("_int.h", "_priv.h", ".c", ".h"):
            if base.endswith(suf):
                return base[: -len(suf)]
        return base


def find_sources(root):
    out = []
    for d, dirs, files in os.walk(os.path.join(root, "engine")):
        dirs.sort()
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(out)


def in_cli(rel):
    return rel.startswith("engine/cli/")


def sccs(nodes, edges):
    """Strongly connected sets (Tarjan), each a sorted list; only those of two or more nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        # iterative, so a long chain cannot overflow Python's stack
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            u, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    p = work[-1][0]
                    low[p] = min(low[p], low[u])
                if low[u] == index[u]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == u:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter[0]
                counter[0] += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(edges.get(nxt, ())))))
            elif nxt in on:
                low[u] = min(low[u], index[nxt])

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out)


def cycle_through(comp, edges):
    """A shortest cycle through the set's first node, as a list of nodes (first repeated at the end)."""
    start = comp[0]
    members = set(comp)
    prev, frontier, seen = {}, [start], {start}
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(edges.get(u, ())):
                if v not in members:
                    continue
                if v == start:
                    path = [u]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if v not in seen:
                    seen.add(v)
                    prev[v] = u
                    nxt.append(v)
        frontier = nxt
    return comp + [start]


def check(root):
    """Every violation as (file, line, what, detail)."""
    srcs = {rel: Source(root, rel) for rel in find_sources(root)}
    found = []
    if not srcs:  # a wrong --root: nothing checked is not a pass
        return [("engine", 0, "no engine sources found", "under %s" % os.path.abspath(root))]
    # every file in a stage's folder: one directly in engine/, or in a folder LAYERS does not name, would escape
    # the layer rule
    for rel in srcs:
        parts = rel.split("/")
        if len(parts) < 3 or parts[1] not in LAYERS:
            found.append((rel, 1, "not in a folder of the engine's stages", "LAYERS: %s" % " ".join(LAYERS)))

    # --- sizes
    for rel, s in srcs.items():
        if len(s.lines) > MAX_FILE_LINES:
            found.append((rel, 1, "file over %d lines" % MAX_FILE_LINES, "%d lines" % len(s.lines)))
        for name, a, b, _ in s.funcs:
            if b - a + 1 > MAX_FUNC_LINES:
                found.append((rel, a, "function %s over %d lines" % (name, MAX_FUNC_LINES), "%d lines" % (b - a + 1)))

    # --- includes: module graph, and nothing below the CLI including into it
    by_name = {}  # a header's file name -> its path (every engine folder is on the include path)
    for rel in srcs:
        by_name.setdefault(os.path.basename(rel), rel)

    def layer(rel):
        parts = rel.split("/")
        return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else None

    def resolve(frm, name):
        if "/" not in name and name in by_name and not os.path.exists(os.path.join(root, os.path.dirname(frm), name)):
            return by_name[name]
        for d in (os.path.dirname(frm), "engine", "engine/plan"):
            cand = os.path.normpath(os.path.join(d, name))
            if cand in srcs:
                return cand
        return None  # include/headprune.h, generated or system headers: not in the graph

    mod_edges, mod_why = {}, {}
    for rel, s in srcs.items():
        for ln, line in enumerate(s.lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            to = resolve(rel, m.group(1))
            if to is None:
                continue
            if in_cli(to) and not in_cli(rel):
                found.append((rel, ln, "includes %s from below the CLI" % to, "the engine must not know the CLI"))
            elif layer(rel) is not None and layer(to) is not None and layer(to) > layer(rel):
                found.append((rel, ln, "includes %s from a folder above" % to,
                              "%s/ is below %s/" % (LAYERS[layer(rel)], LAYERS[layer(to)])))
            a, b = s.module(), srcs[to].module()
            if a != b:
                mod_edges.setdefault(a, set()).add(b)
                mod_why.setdefault((a, b), (rel, ln, to))
    mods = set(mod_edges) | {m for v in mod_edges.values() for m in v}
    for comp in sccs(mods, mod_edges):
        cyc = cycle_through(comp, mod_edges)
        steps = []
        for a, b in zip(cyc, cyc[1:]):
            f, ln, to = mod_why[(a, b)]
            steps.append("%s:%d includes %s" % (os.path.basename(f), ln, os.path.basename(to)))
        f, ln, _ = mod_why[(cyc[0], cyc[1])]
        names = " ".join(os.path.basename(m) for m in comp)
        found.append((f, ln, "include cycle between modules %s" % names, "; ".join(steps)))

    # --- architectures: named by the loader only
    for rel, s in srcs.items():
        if LOADER.match(rel):
            continue
        for ln, line in enumerate(s.code, 1):
            m = ARCH.search(line)
            if m:
                found.append((rel, ln, "tests the architecture (%s) outside the loader" % m.group(0),
                              "read a feature of the model instead"))

    # --- calls: which .c file defines each non-static function, which files name it
    defined = {}  # name -> file
    for rel, s in srcs.items():
        if rel.endswith(".c"):
            for name, _, _, static in s.funcs:
                if not static:
                    defined.setdefault(name, rel)
    call_edges, call_why = {}, {}
    member = re.compile(r"(\.|->)\s*$")
    for rel, s in srcs.items():
        if not rel.endswith(".c"):
            continue
        own = {name for name, _, _, _ in s.funcs}
        for ln, line in enumerate(s.code, 1):
            if line.lstrip().startswith("#") and not line.lstrip().startswith("#define"):
                continue
            for m in IDENT.finditer(line):
                name = m.group(0)
                to = defined.get(name)
                if to is None or to == rel or name in own or member.search(line[: m.start()]):
                    continue
                if to not in call_edges.get(rel, ()):
                    call_edges.setdefault(rel, set()).add(to)
                    call_why[(rel, to)] = (ln, name)
                if in_cli(to) and not in_cli(rel) and (rel, to, name) not in call_why:
                    call_why[(rel, to, name)] = ln
                    found.append((rel, ln, "calls %s of %s from below the CLI" % (name, to),
                                  "the engine must not know the CLI"))
    files = set(call_edges) | {f for v in call_edges.values() for f in v}
    for comp in sccs(files, call_edges):
        cyc = cycle_through(comp, call_edges)
        steps = []
        for a, b in zip(cyc, cyc[1:]):
            ln, name = call_why[(a, b)]
            steps.append("%s:%d calls %s (%s)" % (os.path.basename(a), ln, name, os.path.basename(b)))
        ln, _ = call_why[(cyc[0], cyc[1])]
        names = " ".join(os.path.relpath(f, "engine") for f in comp)
        found.append((cyc[0], ln, "call cycle between files %s" % names, "; ".join(steps)))
    return sorted(found, key=lambda v: (v[0], v[1], v[2]))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="the repository (default: this script's parent)")
    ap.add_argument("--allow", default=None, help="the allow-list (default: scripts/structure-allow.txt)")
    ap.add_argument("--no-allow", action="store_true", help="report every violation, allowed or not")
    args = ap.parse_args()
    root = args.root
    allow_path = args.allow or os.path.join(root, "scripts", "structure-allow.txt")

    allowed = {}  # key -> line of the allow-list
    if not args.no_allow and os.path.exists(allow_path):
        with open(allow_path, encoding="utf-8") as f:
            for ln, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if line:
                    allowed.setdefault(line, ln)

    bad, used = 0, set()
    for f, ln, what, detail in check(root):
        key = "%s: %s" % (f, what)
        if key in allowed:
            used.add(key)
            continue
        print("%s:%d: %s (%s)" % (f, ln, what, detail))
        bad += 1
    rel_allow = os.path.relpath(allow_path, root)
    for key, ln in sorted(allowed.items(), key=lambda kv: kv[1]):
        if key not in used:
            print("%s:%d: allowed but not found: remove it (%s)" % (rel_allow, ln, key))
            bad += 1
    if used:
        print("check-structure: %d allowed debt%s left in %s" % (len(used), "" if len(used) == 1 else "s", rel_allow),
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
