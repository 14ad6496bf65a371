#!/usr/bin/env python3
"""tests/text_layout/check.py LIB PROBE - the common paths' code stays in
libsefer.so's hot section (lib/hot_text.ld, docs/design.md "Code layout"),
and its own read-only data in one window (lib/hot_rodata.ld).

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
        for name in (".text.sefer_hot", ".text", ".rodata.sefer", ".rodata", ".eh_frame"):
            if name in f and f.index(name) + 3 < len(f) and f[f.index(name)] == name:
                i = f.index(name)
                found[name] = (int(f[i + 2], 16), int(f[i + 3], 16), int(f[i + 4], 16))  # addr, off, size
    return found


secs = sections(lib)
if ".text.sefer_hot" not in secs:
    sys.exit(f"FAIL: {lib} has no .text.sefer_hot section: lib/hot_text.ld was not linked")
window = 64 << 10
try:
    with open("/sys/kernel/debug/fault_around_bytes") as f:
        window = max(window, int(f.read()))
except OSError:
    pass


def window_edge(name, maps, end=True):
    """The file offset where the fault-around window holding the end (or
    the start) of section name ends (or starts): windows are aligned in the
    process's addresses, and the library's load address is aligned to 2 MiB
    on ext4 but only to a page on tmpfs and elsewhere (maps: the probe's
    (start, end, offset) of each mapping of the library)."""
    addr, off, size = secs[name]
    at_off = off + size - 1 if end else off
    for start, stop, moff in maps:
        if moff <= at_off < moff + (stop - start):
            at = start + (at_off - moff)  # in the process
            edge = (at // window + (1 if end else 0)) * window
            return edge - start + moff
    sys.exit(f"FAIL: no mapping of {lib} holds {name} (offset {at_off:#x})")



r = subprocess.run([probe], env=dict(os.environ, LD_PRELOAD=lib), capture_output=True, text=True)
if r.returncode == 77:
    print(r.stdout.strip())
    sys.exit(77)
if r.returncode != 0:
    sys.exit(f"FAIL: the probe exited {r.returncode}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
maps = [(int(a, 16), int(b, 16), int(c, 16)) for a, b, c in
        re.findall(r"^map (0x[0-9a-f]+) (0x[0-9a-f]+) (0x[0-9a-f]+|0) ", r.stdout, re.M)]
_, hot_off, hot_size = secs[".text.sefer_hot"]
allowed_end = window_edge(".text.sefer_hot", maps)
pages = [int(m, 16) for m in re.findall(r"^page (0x[0-9a-f]+|0)$", r.stdout, re.M)]
cold = [p for p in pages if p >= allowed_end]
print(f"hot section: file offsets {hot_off:#x}-{hot_off + hot_size:#x} ({hot_size} bytes); "
      f"resident code pages: {len(pages)} ({len(pages) * 4} KiB), {len(cold)} past {allowed_end:#x}")
failed = False
# Read-only data: the library's own in .rodata.sefer, one window from a
# 64 KiB boundary (lib/hot_rodata.ld); the probe serves no dashboard, so
# nothing past that window (the dashboard's files, .eh_frame) is mapped.
base_aligned = any(moff == 0 and start % window == 0 for start, _, moff in maps)  # (where its first page lies)
if ".rodata.sefer" not in secs:
    print(f"FAIL: {lib} has no .rodata.sefer section: lib/hot_rodata.ld was not linked")
    failed = True
elif not base_aligned:
    # (on tmpfs and other file systems without large folios the kernel
    # loads the library at any page; what it then maps around a fault in
    # read-only data did not follow the address windows on this machine's
    # tmpfs: the check would judge the file system, not the layout)
    print(f"own read-only data: not checked, the library is loaded at an address not a multiple of {window >> 10} KiB")
else:
    _, ro_off, ro_size = secs[".rodata.sefer"]
    ro_end = window_edge(".rodata.sefer", maps)
    ro_start = max(ro_off, window_edge(".rodata.sefer", maps, end=False))
    # (the segment's last page in the file is also the first of the RELRO
    # mapping that follows, read at every start: left out)
    seg_end = (secs[".eh_frame"][1] + secs[".eh_frame"][2]) & ~0xfff
    data = [int(m, 16) for m in re.findall(r"^data (0x[0-9a-f]+|0)$", r.stdout, re.M)]
    data = [p for p in data if ro_off <= p < seg_end]
    stray = [p for p in data if p >= ro_end or p < ro_start]
    print(f"own read-only data: file offsets {ro_off:#x}-{ro_off + ro_size:#x}; resident pages of its segment: "
          f"{len(data)} ({len(data) * 4} KiB), {len(stray)} past {ro_end:#x}")
    if stray:
        print("FAIL: read-only data outside .rodata.sefer's window is resident: " +
              ", ".join(f"{p:#x}" for p in stray[:16]) + " (which object's data lies there: readelf -SW, nm -n)")
        failed = True
if cold:
    windows = sorted({p // window * window for p in cold})
    print("FAIL: code outside the hot section ran: resident windows " +
          ", ".join(f"{w:#x}-{w + window:#x}" for w in windows) +
          ".  Run scripts/hot-text --check (valgrind) to see which functions, "
          "then scripts/hot-text and commit lib/hot_text.ld.")
    failed = True
sys.exit(1 if failed else 0)
