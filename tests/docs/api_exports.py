#!/usr/bin/env python3
"""api_exports.py - docs/api.md names exactly the exports of lib/libsefer.map.

    api_exports.py --map lib/libsefer.map --doc docs/api.md --header include/sefer.h

docs/api.md says the exported names are exactly those of that page.  Fails
when a name of the version script is not on the page (written as code:
`name` or `name(...)`), or when the page names a sefer_* word that the
version script does not export and that is not one of sefer.h's types
(struct sefer_stats, ...).  The C++ operators are one line each in the script and are checked
by their family: the page must name `operator new` and `operator delete`."""

import argparse
import re
import sys


def map_names(path):
    """(C names, C++ names) of the version script's global section."""
    text = re.sub(r"/\*.*?\*/", "", open(path, encoding="utf-8").read(), flags=re.S)
    text = text.split("local:")[0]
    cxx = re.findall(r'"([^"]+)";', text)
    c = re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*);", re.sub(r'"[^"]*";', "", text), flags=re.M)
    return set(c), set(cxx)


def doc_code(path):
    """Every `...` span of the page and every line of its code blocks."""
    text = open(path, encoding="utf-8").read()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```[a-z]*\n.*?^```", "", text, flags=re.S | re.M))
    return text, spans + blocks


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--map", required=True)
    p.add_argument("--doc", required=True)
    p.add_argument("--header", required=True)
    a = p.parse_args()
    types = set(re.findall(r"^struct (sefer_\w+) \{", open(a.header, encoding="utf-8").read(), flags=re.M))
    c_names, cxx_names = map_names(a.map)
    text, code = doc_code(a.doc)
    named = set()
    for piece in code:
        named |= set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\b", piece))
    bad = 0
    for name in sorted(c_names - named):
        print(f"FAIL: {a.map} exports {name}, which {a.doc} does not name")
        bad = 1
    for family in ("operator new", "operator delete"):
        if cxx_names and not any(family in piece for piece in code):
            print(f"FAIL: {a.map} exports {family} forms, which {a.doc} does not name")
            bad = 1
    mentioned = set(re.findall(r"\b(sefer_[a-z0-9_]*[a-z0-9])\b", text))
    for name in sorted(mentioned - c_names - types):
        print(f"FAIL: {a.doc} names {name}, which {a.map} does not export")
        bad = 1
    if not bad:
        print(f"ok: {a.doc} names the {len(c_names)} C names and the {len(cxx_names)} C++ operators"
              f" of {a.map}, and no other sefer_* function")
    return bad


if __name__ == "__main__":
    sys.exit(main())
