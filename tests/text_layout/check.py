#!/usr/bin/env python3
"""tests/text_layout/check.py LIB PROBE - the common paths' code stays in
libsefer.so's hot section (lib/hot_text.ld, docs/design.md "Code layout").

Runs PROBE (resident.c) with LIB preloaded; it prints the file offset of
every resident page of the library's code.  The kernel maps code in
windows of fault_around_bytes (64 KiB unless set otherwise) around each
fault, so the hot section's last window may hold cold pages too; a
resident page past that window means the probe ran a function outside the
section, and the list needs scripts/hot-text.  Exit 77 (skip) when the
probe cannot read its pages."""
import os
import re
import subprocess
import sys

lib, probe = sys.argv[1], sys.argv[2]


def sections(path):
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        f = line.replace("]", "] ").split()
        for name in (".text.sefer_hot", ".text"):
            if name in f and f.index(name) + 3 < len(f) and f[f.index(name)] == name:
                i = f.index(name)
                found[name] = (int(f[i + 2], 16), int(f[i + 3], 16), int(f[i + 4], 16))  # addr, off, size
    return found


secs = sections(lib)
if ".text.sefer_hot" not in secs:
    sys.exit(f"FAIL: {lib} has no .text.sefer_hot section: lib/hot_text.ld was not linked")
_, hot_off, hot_size = secs[".text.sefer_hot"]
window = 64 << 10
try:
    with open("/sys/kernel/debug/fault_around_bytes") as f:
        window = max(window, int(f.read()))
except OSError:
    pass
allowed_end = (hot_off + hot_size + window - 1) // window * window

r = subprocess.run([probe], env=dict(os.environ, LD_PRELOAD=lib), capture_output=True, text=True)
if r.returncode == 77:
    print(r.stdout.strip())
    sys.exit(77)
if r.returncode != 0:
    sys.exit(f"FAIL: the probe exited {r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
pages = [int(m, 16) for m in re.findall(r"^page (0x[0-9a-f]+|0)$", r.stdout, re.M)]
cold = [p for p in pages if p >= allowed_end]
print(f"hot section: file offsets {hot_off:#x}-{hot_off + hot_size:#x} ({hot_size} bytes); "
      f"resident code pages: {len(pages)} ({len(pages) * 4} KiB), {len(cold)} past {allowed_end:#x}")
if cold:
    windows = sorted({p // window * window for p in cold})
    print("FAIL: code outside the hot section ran: resident windows " +
          ", ".join(f"{w:#x}-{w + window:#x}" for w in windows) +
          ".  Run scripts/hot-text --check (valgrind) to see which functions, "
          "then scripts/hot-text and commit lib/hot_text.ld.")
    sys.exit(1)
