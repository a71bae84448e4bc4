#!/usr/bin/python3
"""Check that the tree keeps its shape: the layer order and no include cycles.

Reads every `#include "..."` line of the .c and .h files under src/ and include/ and reports,
one line per finding (FILE:LINE: what is wrong):

  - an include that runs against the layer order (LAYERS below, written out in
    docs/layout.md): a file may include headers of its own folder and of strictly lower
    layers; folders on the same layer never include each other; include/accelnet/ is the
    public API of xfer, so it counts as part of xfer;
  - an include cycle between modules: a module is one file stem in one folder (foo.c, foo.h
    and foo-t.h are module foo), with an edge A -> B when any file of A includes a header of
    B; every strongly connected component of more than one module is one finding, and so is
    a cycle between the files of one module (foo.h <-> foo-t.h);
  - a quoted include that names no header of the tree, or a folder missing from LAYERS.

It also reads the calls, since a header can declare what its module does not own and so hide
a cycle from the includes: a function is owned by the module whose .c file defines it (not
static), or whose header defines it (static inline), and a call is a name followed by `(`
that names such a function. It reports:

  - a header that declares a function another module owns (each module declares its own);
  - a call against the layer order (a lower folder calling a higher one, or a folder calling
    one on its own layer);
  - a call cycle between modules: the same strongly connected components as for includes,
    over the call edges (a function pointer handed over, a hook, is not a call).

Findings listed in scripts/layers-known.txt (the debt the tree still carries, each line as
printed; line numbers are not compared, since they move as files change) are counted as known
and do not fail the check; a known line that no longer occurs does, so the list only shrinks.

Ends with `layers: N files, N includes, N cycles, N upward includes, N calls, N call cycles,
N upward calls, N foreign declarations` (and how many of them are known) and exits 1 if
anything new was found (`--edges` lists, under each cycle, every include between its modules).
`--root DIR` checks another tree (the fixtures of tests/layers/ do); `--self-test`
runs every fixture under tests/layers/ and compares the output with its `expected` file.
Standard library only: Debian's /usr/bin/python3 runs it.
"""

import argparse
import os
import re
import sys

# Highest layer first. A folder may include its own headers and those of later rows only.
LAYERS = [
    ["cli"],
    ["control"],
    ["proxy", "xfer", "sim"],
    ["runtime"],
    ["cache", "guard", "obs"],
    ["http", "conf"],
    ["policy"],
    ["net", "tok"],
    ["core"],
]
# Folders of include/ that belong to a folder of src/ (its public API).
PUBLIC = {"accelnet": "xfer"}
SEARCH = ["src", "include"]  # the -I order of the Makefile

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def layer_of(folder):
    """(rank, owner folder) of a folder, rank 0 lowest; None if it is not in LAYERS."""
    owner = PUBLIC.get(folder, folder)
    for i, row in enumerate(LAYERS):
        if owner in row:
            return len(LAYERS) - 1 - i, owner
    return None


def public_users(folder):
    """The folders that may include a public folder of include/: its owner and those above."""
    rank, owner = layer_of(folder)
    return [f"{f}/" for row in LAYERS for f in row if layer_of(f)[0] > rank] + [f"{owner}/"]


def strip_comments(text):
    """The text with comments blanked out, newlines kept so line numbers stay right."""
    return COMMENT_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def folder_of(rel):
    """'src/http/h1/codec.c' -> 'http': the folder under src/ or include/ that holds a file."""
    parts = rel.split(os.sep)
    return parts[1] if len(parts) > 2 else parts[0]


def module_of(rel):
    """'src/runtime/queue-t.h' -> 'runtime/queue'; 'include/accelnet/xfer.h' -> 'accelnet/xfer'."""
    path = rel.split(os.sep, 1)[1].rsplit(".", 1)[0]
    return path[:-2] if path.endswith("-t") else path


def scan(root):
    """Every source file under src/ and include/ (relative paths) and its quoted includes."""
    files = {}
    for top in SEARCH:
        for dirpath, dirnames, names in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = strip_comments(f.read())
                incs = []
                for n, line in enumerate(text.split("\n"), 1):
                    m = INCLUDE_RE.match(line)
                    if m:
                        incs.append((n, m.group(1)))
                files[rel] = incs
    return files


def resolve(root, rel, name, files):
    """The tree file a quoted include names, as the compiler finds it; None if none."""
    for d in [os.path.dirname(rel)] + SEARCH:
        cand = os.path.normpath(os.path.join(d, name))
        if cand in files:
            return cand
    return None


def sccs(graph):
    """Strongly connected components of a {node: set(nodes)} graph (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def shortest_cycle(start, members, graph):
    """A shortest path start -> ... -> start inside one component, as a list of modules."""
    prev, queue = {start: None}, [start]
    for v in queue:
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return None


STRING_RE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
# a function at file scope: its line starts in column 0 with a type, then NAME(
FUNC_RE = re.compile(r"^(?!typedef|return|if|while|for|switch|#)([A-Za-z_][\w \t\*]*?[\s\*])"
                     r"([A-Za-z_]\w*)\s*\(", re.M)
CALL_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def strip_strings(text):
    """The text with string and character literals blanked, newlines kept."""
    return STRING_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def functions(text):
    """(name, line, kind, is_static, offset of the name) of each function at file scope of a
    comment- and string-free text: kind 'def' when a body follows its parameters, 'decl' for
    ';'."""
    out = []
    for m in FUNC_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        rest = text[i:i + 200].lstrip()
        if rest.startswith("__attribute__"):
            rest = rest[rest.find("))") + 2:].lstrip()
        kind = "def" if rest.startswith("{") else "decl" if rest.startswith(";") else None
        if kind:
            line = text.count("\n", 0, m.start()) + 1
            out.append((m.group(2), line, kind, "static" in m.group(1).split(), m.start(2)))
    return out


def calls(root, files):
    """The call graph of the tree: (owner: {function: module}, declared: [(file, line, name)]
    of the headers' prototypes, called: {file: [(line, name)]})."""
    owner, declared, called, seen = {}, [], {}, {}
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = strip_strings(strip_comments(f.read()))
        text = "\n".join("" if line.lstrip().startswith("#") else line
                         for line in text.split("\n"))
        named = set()  # where a definition or a declaration names its function
        for name, line, kind, static, at in functions(text):
            named.add(at)
            if kind == "def" and (rel.endswith(".h") or not static):
                owner.setdefault(name, module_of(rel))  # a header's static inline too
            elif kind == "decl" and rel.endswith(".h") and not static:
                declared.append((rel, line, name))
        seen[rel] = (text, named)
    for rel, (text, named) in seen.items():
        called[rel] = [(text.count("\n", 0, m.start()) + 1, m.group(1))
                       for m in CALL_RE.finditer(text)
                       if m.group(1) in owner and m.start(1) not in named]
    return owner, declared, called


def check_calls(root, files):
    """The findings of the calls (see the module's essay) and their counts."""
    owner, declared, called = calls(root, files)
    findings = []
    nforeign = nup = ncalls = 0
    for rel, line, name in declared:
        mine = module_of(rel)
        public = PUBLIC.get(folder_of(rel))  # a public API declares its owner folder's functions
        if name in owner and owner[name] != mine and owner[name].split("/")[0] != public:
            nforeign += 1
            findings.append(f"{rel}:{line}: declares {name}(), a function of {owner[name]}"
                            f" (each module declares its own, in its own header)")
    graph, where = {}, {}
    for rel in sorted(called):
        a = module_of(rel)
        mine = layer_of(folder_of(rel))
        for line, name in called[rel]:
            b = owner[name]
            if a == b:
                continue
            ncalls += 1
            graph.setdefault(a, set()).add(b)
            graph.setdefault(b, set())
            if (a, b) not in where:
                where[(a, b)] = f"{rel}:{line}"
                theirs = layer_of(b.split("/")[0])
                if mine and theirs and mine[1] != theirs[1] and theirs[0] >= mine[0]:
                    nup += 1
                    side = "upward" if theirs[0] > mine[0] else "sideways"
                    findings.append(f"{rel}:{line}: {side} call of {name}() in {b}")
    ncycles = 0
    for comp in sccs(graph):
        if len(comp) < 2:
            continue
        ncycles += 1
        path = shortest_cycle(comp[0], set(comp), graph)
        steps = ", ".join(f"{where[(path[i], path[i + 1])]} -> {path[i + 1]}"
                          for i in range(len(path) - 1))
        findings.append(f"{where[(path[0], path[1])]}: call cycle between {len(comp)} modules"
                        f" ({', '.join(comp)}): {steps}")
    return findings, ncalls, ncycles, nup, nforeign


LINE_RE = re.compile(r"(\.[ch]):\d+")


def known_findings(root):
    """The lines of scripts/layers-known.txt (without comments and blank lines)."""
    try:
        with open(os.path.join(root, "scripts", "layers-known.txt"), encoding="utf-8") as f:
            return [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")]
    except FileNotFoundError:
        return []


def check(root, edges=False):
    """Print the findings and the summary line for one tree; return the number of findings."""
    files = scan(root)
    findings = []
    graph = {module_of(f): set() for f in files}
    where = {}  # (module A, module B) -> first 'file:line' of an include of B by A
    fgraph = {f: set() for f in files}  # the same between files, for cycles inside a module
    fwhere = {}
    nincs = nup = 0
    for rel in sorted(files):
        folder = folder_of(rel)
        mine = layer_of(folder)
        if mine is None:
            findings.append(f"{rel}:1: folder {folder}/ is not in the layer order"
                            " (scripts/check-layers.py LAYERS)")
        for line, name in files[rel]:
            nincs += 1
            target = resolve(root, rel, name, files)
            if target is None:
                findings.append(f'{rel}:{line}: #include "{name}" names no header under'
                                f" {' or '.join(s + '/' for s in SEARCH)}")
                continue
            if target != rel:
                fgraph[rel].add(target)
                fwhere.setdefault((rel, target), f"{rel}:{line}")
            a, b = module_of(rel), module_of(target)
            if a != b:
                graph[a].add(b)
                where.setdefault((a, b), f"{rel}:{line}")
            tfolder = folder_of(target)
            theirs = layer_of(tfolder)
            if mine is None or theirs is None or mine[1] == theirs[1]:
                continue
            if tfolder in PUBLIC and theirs[0] >= mine[0]:
                nup += 1
                findings.append(f'{rel}:{line}: include of "{name}": {tfolder}/ is the public API'
                                f" of {theirs[1]}/, for {' and '.join(public_users(tfolder))} only")
            elif theirs[0] > mine[0]:
                nup += 1
                findings.append(f'{rel}:{line}: upward include of "{name}":'
                                f" {folder}/ is below {tfolder}/ in the layer order")
            elif theirs[0] == mine[0]:
                nup += 1
                findings.append(f'{rel}:{line}: sideways include of "{name}":'
                                f" {folder}/ and {tfolder}/ are on the same layer")
    cycles = [c for c in sccs(graph) if len(c) > 1]
    for comp in cycles:
        path = shortest_cycle(comp[0], set(comp), graph)
        steps = ", ".join(f"{where[(path[i], path[i + 1])]} -> {path[i + 1]}"
                          for i in range(len(path) - 1))
        loc = where[(path[0], path[1])]
        findings.append(f"{loc}: include cycle between {len(comp)} modules"
                        f" ({', '.join(comp)}): {steps}")
        if edges:
            findings += [f"  {where[(a, b)]}: {a} -> {b}" for a in comp for b in sorted(graph[a])
                         if b in comp]
    # files that include each other inside one module (foo.h <-> foo-t.h): no module edge shows it
    for comp in sccs(fgraph):
        if len(comp) > 1 and len({module_of(f) for f in comp}) == 1:
            cycles.append(comp)
            path = shortest_cycle(comp[0], set(comp), fgraph)
            steps = ", ".join(f"{fwhere[(path[i], path[i + 1])]} -> {path[i + 1]}"
                              for i in range(len(path) - 1))
            findings.append(f"{fwhere[(path[0], path[1])]}: include cycle between {len(comp)}"
                            f" files of module {module_of(comp[0])}: {steps}")
    cfind, ncalls, ncc, nupc, nforeign = check_calls(root, files)
    known = known_findings(root)
    unplaced = [LINE_RE.sub(r"\1", k) for k in known]  # lines move as files change
    nknown = 0
    for f in findings + cfind:
        u = LINE_RE.sub(r"\1", f)
        if u in unplaced:
            nknown += 1
            del known[unplaced.index(u)]
            unplaced.remove(u)
        else:
            print(f)
    for k in known:
        print(f"scripts/layers-known.txt: no longer found, remove it: {k}")
    findings = [f for f in findings if not f.startswith("  ")]  # not the --edges lines
    other = len(findings) - len(cycles) - nup
    print(f"layers: {len(files)} files, {nincs} includes, {len(cycles)} cycles,"
          f" {nup} upward includes, {ncalls} calls, {ncc} call cycles, {nupc} upward calls,"
          f" {nforeign} foreign declarations" + (f", {other} other findings" if other else "")
          + (f" ({nknown} known: scripts/layers-known.txt)" if nknown else ""))
    return len(findings) + len(cfind) - nknown + len(known)


def self_test(here):
    """Run every fixture of tests/layers/ and compare with its `expected` file."""
    import io
    from contextlib import redirect_stdout

    base = os.path.join(here, "tests", "layers")
    bad = 0
    cases = sorted(d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d)))
    for case in cases:
        root = os.path.join(base, case)
        buf = io.StringIO()
        with redirect_stdout(buf):
            rc = 1 if check(root) else 0
        got = f"exit {rc}\n" + buf.getvalue()
        with open(os.path.join(root, "expected"), encoding="utf-8") as f:
            want = f.read()
        if got != want:
            bad += 1
            print(f"tests/layers/{case}: output differs from tests/layers/{case}/expected:")
            print("--- got\n" + got + "--- expected\n" + want, end="")
        else:
            print(f"tests/layers/{case}: ok ({got.splitlines()[0]})")
    print(f"check-layers self-test: {len(cases) - bad} fixtures ok, {bad} wrong")
    return 1 if bad or not cases else 0


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=here, help="the tree to check (default: this one)")
    ap.add_argument("--edges", action="store_true",
                    help="under each cycle, list every include between its modules")
    ap.add_argument("--self-test", action="store_true", help="run the fixtures of tests/layers/")
    args = ap.parse_args()
    if args.self_test:
        return self_test(here)
    return 1 if check(args.root, args.edges) else 0


if __name__ == "__main__":
    sys.exit(main())
