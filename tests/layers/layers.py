#!/usr/bin/env python3
"""layers.py - lib/'s layer rule, read from the objects (docs/design.md, "Layers").

    layers.py --design docs/design.md --lib lib --map lib/libsefer.map
              --nm nm [--core-max 17] ARCHIVE...

Each ARCHIVE is a (thin) archive of the objects of one variant of the
library (libsefer.so, the counter build); together they give one graph.  A
file uses another when its object references a name that only the other's
object defines (nm: U against T, D, B, R...).  The checks:

  1. docs/design.md's file table names every .c and .h file of lib/, each
     once, with a layer from its layer table, and no file that is not there;
  2. no file uses a file of a higher layer; introspect/ (and the dashboard's
     generated source) is above every layer of lib/;
  3. the only files that use each other in a circle are in the core, and
     that circle has at most --core-max files (mimalloc's src/, read the same
     way, has 17);
  4. what lib/internal.h declares under the heading of a file
     ("/* ---- alloc.c: ..."), that file defines.

Not counted as uses, and why (docs/design.md says the same):
  - the names the C library also defines (malloc, free, memcpy...: those of
    the version script that are not sefer_*): sefer's own code calls them as
    any program does, and gets libc's or its own by the link, not by layer;
  - the counter build's hooks (sf_ls_lock, sf_ls_unlock, sf_ls_rmw,
    sf_ls_stat) behind sf_lock, sf_stat_add and SF_LS_RMW: instrumentation
    every layer calls, compiled in only with -Dlock_stats.

Prints the layers, the uses that cross a layer (file -> file: names), and
the circles; exits 1 if a check fails."""

import argparse
import collections
import os
import re
import subprocess
import sys

HOOKS = {"sf_ls_lock", "sf_ls_unlock", "sf_ls_rmw", "sf_ls_stat"}
DEFINED = set("TDBRVWGS")


def fail(msg):
    print("FAIL: " + msg, flush=True)
    return 1


def section(text, title):
    """The lines of the '## title' section of a markdown text."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == title
            continue
        if inside:
            out.append(line)
    return out


def table_rows(lines):
    """The cells of a markdown table's body rows (header and rule skipped)."""
    rows = [ln for ln in lines if ln.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def read_design(path):
    """(layers lowest first, {file: layer}) from the Layers and Files tables."""
    text = open(path, encoding="utf-8").read()
    layers = [r[0].strip("`") for r in table_rows(section(text, "Layers"))]
    files, twice = {}, []
    for r in table_rows(section(text, "Files")):
        name = r[0].strip("`")
        if name in files:
            twice.append(name)
        files[name] = r[1].strip("`") if len(r) > 1 else ""
    return layers, files, twice


def libc_names(map_path):
    """The version script's names that are not sefer_* (C names only)."""
    text = re.sub(r"/\*.*?\*/", "", open(map_path, encoding="utf-8").read(), flags=re.S)
    names = re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*);", text, flags=re.M)
    return {n for n in names if not n.startswith("sefer_")}


def object_file(member, lib_files):
    """The source file an object stands for: lib's by its name, else
    introspect/... or webui/... (meson flattens ../introspect/x.c into
    .._introspect_x.c.o)."""
    base = os.path.basename(member)
    base = base[:-2] if base.endswith(".o") else base
    if base in lib_files:
        return base
    m = re.search(r"(introspect|webui)_(\w+\.c)$", base)
    return f"{m.group(1)}/{m.group(2)}" if m else None


def read_objects(nm, archives, lib_files):
    """({file: names it defines}, {file: names it references})."""
    defs, refs = collections.defaultdict(set), collections.defaultdict(set)
    for archive in archives:
        out = subprocess.run([nm, archive], stdout=subprocess.PIPE, text=True, check=True).stdout
        current = None
        for line in out.splitlines():
            if line.endswith(":") and " " not in line:
                member = line[:-1]
                current = object_file(member, lib_files)
                if current is None:
                    sys.exit(fail(f"{member}: an object of no file of lib/, introspect/ or webui/"))
                defs[current], refs[current]  # (known even if empty)
                continue
            parts = line.split()
            if current is None or len(parts) < 2:
                continue
            if parts[-2] == "U":
                refs[current].add(parts[-1])
            elif len(parts) == 3 and parts[1] in DEFINED:
                defs[current].add(parts[2])
    return defs, refs


HEADING = re.compile(r"^/\* ---- (\w+\.c)\b")
# a declared name: sf_... followed by its parameters, its bounds, the end of
# the declaration or an attribute (types, sf_*_t, are not names)
DECLARED = re.compile(r"\b(sf_\w+)\b(?=\s*[(\[;,)]|\s+__attribute__)")


def declarations(header):
    """[(file, name)] for each SF_HIDDEN declaration under a file's heading."""
    out, current, decl = [], None, None
    for line in open(header, encoding="utf-8"):
        m = HEADING.match(line)
        if m:
            current = m.group(1)
        if decl is None and line.startswith("SF_HIDDEN"):
            decl = ""
        if decl is not None:
            decl += line
            if ";" in line or "{" in line:
                out += [(current, n) for n in DECLARED.findall(decl.split("{")[0])
                        if not n.endswith("_t")]
                decl = None
    return out


def uses(defs, refs, ignored):
    """{(a, b): names} for every file a using a name only file b defines."""
    owners = collections.defaultdict(set)
    for f, names in defs.items():
        for n in names:
            owners[n].add(f)
    out = collections.defaultdict(set)
    for a, names in refs.items():
        for n in names - ignored:
            if len(owners.get(n, ())) == 1:
                (b,) = owners[n]
                if b != a:
                    out[(a, b)].add(n)
    return out


def circles(nodes, edges):
    """The strongly connected components with more than one file."""
    succ = collections.defaultdict(set)
    for a, b in edges:
        succ[a].add(b)
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):  # Tarjan, iterative so that no recursion limit applies
        work = [(v, iter(sorted(succ[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(succ[w]))))
            elif w in on:
                low[node] = min(low[node], index[w])

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--design", required=True)
    p.add_argument("--lib", required=True)
    p.add_argument("--map", required=True)
    p.add_argument("--nm", default="nm")
    p.add_argument("--core-max", type=int, default=17)
    p.add_argument("archives", nargs="+")
    a = p.parse_args()

    bad = 0
    layers, table, twice = read_design(a.design)
    if not layers:
        sys.exit(f"FAIL: {a.design}: no layer table (## Layers)")
    print("layers, lowest first: " + " <- ".join(layers) + " <- introspect")
    for name in twice:
        bad |= fail(f"{a.design}: {name} is in the file table twice")
    on_disk = {f for f in os.listdir(a.lib) if f.endswith((".c", ".h"))}
    for f in sorted(on_disk - set(table)):
        bad |= fail(f"lib/{f} is not in {a.design}'s file table")
    for f in sorted(set(table) - on_disk):
        bad |= fail(f"{a.design}'s file table names {f}, which lib/ does not have")
    for f, layer in sorted(table.items()):
        if f.endswith(".h") and layer == "header":
            continue  # (no object: the rule is read from the .c files)
        if layer not in layers:
            bad |= fail(f"{a.design}: {f}: layer '{layer}' is not one of {', '.join(layers)}")

    rank = {f: layers.index(table[f]) for f in table if table[f] in layers}
    top = len(layers)  # introspect/ and webui/
    defs, refs = read_objects(a.nm, a.archives, on_disk)
    used = uses(defs, refs, libc_names(a.map) | HOOKS)

    def level(f):  # (None: a file of lib/ without a layer, reported above)
        return rank.get(f) if f in on_disk else top

    print("uses that cross a layer (file -> file: names):")
    for (f, g), names in sorted(used.items()):
        if level(f) is None or level(g) is None:
            continue
        if level(f) != level(g):
            print(f"  {f} -> {g}: {' '.join(sorted(names))}")
        if level(f) < level(g):
            bad |= fail(f"{f} ({table.get(f, 'introspect')}) uses {g} ({table.get(g, 'introspect')}), "
                        f"a higher layer: {' '.join(sorted(names))}")

    header = os.path.join(a.lib, "internal.h")
    for f, name in declarations(header):
        if f is None:
            bad |= fail(f"lib/internal.h declares {name} under no file's heading")
        elif f in defs and name not in defs[f]:
            where = sorted(g for g, names in defs.items() if name in names)
            bad |= fail(f"lib/internal.h declares {name} under {f}, which does not define it"
                        + (f" ({' '.join(where)} does)" if where else ""))

    core = layers.index("core") if "core" in layers else -1
    for comp in circles(defs.keys() | refs.keys(), used):
        where = {table.get(f, "introspect") for f in comp}
        print(f"circle of {len(comp)} files ({', '.join(sorted(where))}): {' '.join(comp)}")
        if where == {"introspect"}:
            continue
        if where != {layers[core]}:
            bad |= fail(f"a circle not all in the core ({', '.join(sorted(where))}): {' '.join(comp)}")
        elif len(comp) > a.core_max:
            bad |= fail(f"the core's circle has {len(comp)} files, more than {a.core_max}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
