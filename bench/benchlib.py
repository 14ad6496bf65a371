"""Shared helpers of the bench/ runner scripts (compare, compare-larson,
instructions, realprogs, guard-levels, introspect-cost, profile-cost,
scaling) and of the profiling harness (tools/profile).

Knows where each allocator lives, installs missing Debian packages, finds the
benchmark binaries in a meson build directory, checks that an LD_PRELOAD took
effect, records what was measured (the sefer build, read from the library
itself; the machine and its load) and writes result files named by that
build, and formats markdown tables.  Holds the registry of workloads
(WORKLOADS) and the measurement of one run of a row (run_one) that
bench/compare makes and the other runners repeat.  Standard library only (python3 of
Debian 12)."""

import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

MULTIARCH = f"/usr/lib/{platform.machine()}-linux-gnu"

# name -> (library to LD_PRELOAD or None for glibc, Debian package)
SYSTEM_ALLOCATORS = {
    "glibc": (None, None),
    "mimalloc": (f"{MULTIARCH}/libmimalloc.so.2", "libmimalloc2.0"),
    "jemalloc": (f"{MULTIARCH}/libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": (f"{MULTIARCH}/libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}
KNOWN = ["sefer", "glibc", "mimalloc", "jemalloc", "tcmalloc"]


def die(msg):
    print(f"\nERROR: {msg}\n", file=sys.stderr)
    sys.exit(1)


def apt_install(packages):
    """Installs Debian packages (apt-get update first), only when some are missing."""
    if not packages:
        return
    print(f"installing {' '.join(packages)} with apt-get ...", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    quiet = dict(stdout=subprocess.DEVNULL, env=env)
    if subprocess.run(["apt-get", "update", "-q"], **quiet).returncode:
        die("apt-get update failed")
    if subprocess.run(["apt-get", "install", "-y", "-q", *packages], **quiet).returncode:
        die(f"apt-get install {' '.join(packages)} failed")


def ensure_tools(allocators, tools=()):
    """Makes sure each system allocator and each (path, package) tool exists."""
    need = []
    for a in allocators:
        if a in SYSTEM_ALLOCATORS:
            lib, pkg = SYSTEM_ALLOCATORS[a]
            if lib and not os.path.exists(lib):
                need.append(pkg)
    for path, pkg in tools:
        if not (os.path.exists(path) or shutil.which(path)):
            need.append(pkg)
    apt_install(sorted(set(need)))


def default_build_dir():
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "..", "build"))


def run_logged(argv, what):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        sys.stderr.write(r.stdout[-4000:])
        die(f"{' '.join(argv)} failed (see above); {what}")


def prepare_build(build, compile_first, bin_dir=None):
    """Returns the directory holding the bench binaries.

    Unless told not to, configures BUILD when it is not a meson build
    directory yet (release, the project's default) and compiles it, so that
    the benchmark runs the current sources."""
    if bin_dir:
        return bin_dir
    if compile_first:
        ensure_tools([], [("meson", "meson"), ("ninja", "ninja-build"), ("cc", "gcc")])
        if not os.path.exists(os.path.join(build, "build.ninja")):
            root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
            print(f"configuring {build} (meson setup, release) ...", file=sys.stderr)
            run_logged(["meson", "setup", build, root], "fix the build or pass --bin-dir")
        print(f"compiling {build} ...", file=sys.stderr)
        run_logged(["meson", "compile", "-C", build], "fix the build or pass --no-compile")
    return os.path.join(build, "bench")


def require_binary(path, build):
    if not os.access(path, os.X_OK):
        root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), ".."))
        die(f"{path} not found.  Build first:\n  cd {root} && meson setup {build} && meson compile -C {build}")


def preload_for(alloc, build, sefer_lib=None):
    """Path to LD_PRELOAD for an allocator (None for glibc)."""
    if alloc == "sefer":
        lib = sefer_lib or os.path.join(build, "lib", "libsefer.so")
        if not os.path.exists(lib):
            die(f"sefer library {lib} does not exist (build it, pass --build DIR or --sefer PATH,"
                " or leave sefer out with --allocators)")
        return os.path.abspath(lib)
    if alloc not in SYSTEM_ALLOCATORS:
        die(f"unknown allocator {alloc!r}; known: {', '.join(KNOWN)}")
    return SYSTEM_ALLOCATORS[alloc][0]


def env_for(preload):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    return env


def parse_kv(line):
    """Parses 'word k=v k=v ...' into a dict."""
    out = {}
    for tok in line.split()[1:]:
        k, _, v = tok.partition("=")
        out[k] = v
    return out


def result_line(stdout, word):
    for line in stdout.splitlines():
        if line.startswith(word + " "):
            return parse_kv(line)
    return None


def describe(res):
    """'sefer 0.1.0 build a3f9c2e (/path/libsefer.so)' from a result line."""
    return (f"{res.get('allocator')} {res.get('version')}" + (f" build {res['build']}" if "build" in res else "")
            + f" ({res.get('malloc_from')})")


def verify_allocator(alloc, preload, res, cmd):
    """Fails loudly unless the process's malloc came from the expected object."""
    got = res.get("malloc_from", "?")
    if alloc == "glibc":
        ok = res.get("allocator") == "glibc"
    else:
        ok = os.path.realpath(got) == os.path.realpath(preload)
    if not ok:
        die(f"LD_PRELOAD did not take effect for {alloc}:\n  expected malloc from "
            f"{preload or 'glibc (libc.so.6)'}\n  the process's malloc came from {got} "
            f"(allocator={res.get('allocator')})\n  command: {cmd}")


def run_timed_out(argv, env, timeout, cmd):
    """Runs argv in its own process group; kills that group and stops the
    script if it outlives timeout seconds (a hang is a result too)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        die(f"no result after {timeout:.0f} s, killed (a hang or a livelock?)\n"
            f"  reproduce: {cmd}\n  stderr:\n{err[-3000:]}")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def shell_cmd(preload, argv):
    pre = f"LD_PRELOAD={preload} " if preload else ""
    return pre + " ".join(argv)


# ---- provenance: what was measured, on what, under which load ----
#
# A figure is traced to the library that produced it, never to the
# repository's HEAD (which may have moved since the build, or hold edits the
# build never saw).  The bench programs print, on every run, the build of the
# sefer that served them (bench/whichalloc.h: build=, build_options=,
# guard_level=); scripts that run other programs ask the library with
# library_build().  Result files are named <date>-<build>-<script>.json in
# bench/results/; a build ending in -dirty came from uncommitted changes and
# every table says so.

RESULTS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
_BUILD_PROBE = ("import ctypes, sys\n"
                "lib = ctypes.CDLL(None)\n"
                "def s(name):\n"
                "    try:\n"
                "        f = getattr(lib, name)\n"
                "    except AttributeError:\n"
                "        return 'unknown'\n"
                "    f.restype = ctypes.c_char_p\n"
                "    return f().decode()\n"
                "print(s('sefer_version')); print(s('sefer_build')); print(s('sefer_build_options'))\n")


def library_build(lib):
    """{"version", "build", "build_options", "library"} of a libsefer.so, from
    the library itself: a python3 process preloading it calls sefer_build()
    and sefer_build_options() (a library from before they existed says
    "unknown")."""
    r = subprocess.run([sys.executable, "-c", _BUILD_PROBE], env=dict(env_for(lib), PYTHONMALLOC="malloc"),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    lines = r.stdout.splitlines()
    if r.returncode or len(lines) != 3 or lines[0] == "unknown":
        die(f"could not ask {lib} which build it is (is it a libsefer.so?):\n{r.stderr[-2000:]}")
    return {"version": lines[0], "build": lines[1], "build_options": lines[2],
            "library": os.path.realpath(lib)}


class BuildSeen:
    """The sefer build that answered the runs of one script: every run's
    result line must name the same one (a library rebuilt in the middle of a
    run would mix two builds' figures)."""

    def __init__(self, expected=None):
        self.build = expected  # dict as from library_build(), or None until a run says

    def check(self, res, cmd):
        """res: a parsed result line of a run under sefer."""
        got = {"version": res.get("version", "?"), "build": res.get("build", "unknown"),
               "build_options": res.get("build_options", "unknown").replace(",", " "),
               "library": os.path.realpath(res.get("malloc_from", "?"))}
        if self.build is None:
            self.build = got
        elif (got["build"], got["build_options"]) != (self.build["build"], self.build["build_options"]):
            die(f"two sefer builds in one run: {self.build['build']} ({self.build['build_options']}) and"
                f" {got['build']} ({got['build_options']})\n  (was the library rebuilt meanwhile?)"
                f"\n  command: {cmd}")
        return got

    def name(self):
        return self.build["build"] if self.build else "no-sefer"


def is_dirty(build):
    return build.endswith("-dirty") or build == "unknown"


def build_note(build):
    """One line for a table's header about the sefer build measured."""
    if build is None:
        return "sefer: not measured in this run."
    text = (f"sefer build {build['build']} ({build['library']}), sefer {build['version']};"
            f" build options: {build['build_options']}.")
    if build["build"].endswith("-dirty"):
        text += ("\n\n**DIRTY BUILD: this library was built from uncommitted changes; its figures"
                 " belong to no commit and cannot be reproduced from the repository.**")
    elif build["build"] == "unknown":
        text += "\n\n**UNKNOWN BUILD: the library does not say which commit it was built from.**"
    return text


def machine():
    """The machine and its load now: CPU, CPUs, kernel, load averages (1, 5
    and 15 minutes), the processes busiest at this moment, and the CPU
    one-thread runs are pinned to (pin_one_thread; None: not pinned)."""
    try:
        with open("/proc/loadavg") as f:
            la = f.read().split()
    except OSError:
        la = ["?"] * 5
    try:
        ps = subprocess.run(["ps", "-eo", "pcpu,pid,comm", "--sort=-pcpu"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, timeout=10).stdout.splitlines()[1:6]
    except (OSError, subprocess.TimeoutExpired):
        ps = []
    return {"cpu": cpu_name(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "loadavg": " ".join(la[:3]), "running_total": la[3] if len(la) > 3 else "?",
            "busiest": [" ".join(line.split()) for line in ps], "one_thread_cpu": bench_cpu()}


def load_note(before, after):
    return (f"load average (1/5/15 min) {before['loadavg']} before, {after['loadavg']} after,"
            f" on {before['cpus']} CPUs")


def result_name(script, build, started):
    """<date>-<build>-<script>: what a result file holds, by its name.  The
    build is the one the library reported (sefer_build(): its commit, with
    -dirty for uncommitted changes), never the repository's HEAD."""
    name = build["build"] if build else "no-sefer"
    if build and not re.fullmatch(r"[0-9A-Za-z._]+(-dirty)?", name):
        die(f"the library names its build {name!r}: not something a result file can be named by")
    return f"{started.strftime('%Y-%m-%d')}-{name}-{script}"


def write_result(script, build, data, text, started=None):
    """Writes bench/results/<date>-<build>-<script>.json (data, plus the
    markdown table as "table") and returns its path.  A second run of the
    same script on the same build and day gets -2, -3, ... rather than
    overwriting the first (whose figures a doc may already quote)."""
    started = started or datetime.datetime.now()
    base = result_name(script, build, started)
    os.makedirs(RESULTS, exist_ok=True)
    path, n = os.path.join(RESULTS, base + ".json"), 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(RESULTS, f"{base}-{n}.json")
    with open(path, "x") as f:
        json.dump(dict(data, script=script, sefer=build, table=text), f, indent=1)
    return path


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def median(xs):
    return statistics.median(xs)


def md_table(header, rows, align=None):
    """Markdown table with padded columns (readable as plain text too)."""
    cols = len(header)
    align = align or ["l"] + ["r"] * (cols - 1)
    width = [max(len(str(r[i])) for r in [header] + rows) for i in range(cols)]
    width = [max(w, 3) for w in width]

    def fmt(row):
        cells = [str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(row, width, align)]
        return "| " + " | ".join(cells) + " |"

    sep = ["-" * (w - 1) + ":" if a == "r" else "-" * w for w, a in zip(width, align)]
    return "\n".join([fmt(header), "| " + " | ".join(sep) + " |"] + [fmt(r) for r in rows])


# ---- the workloads (bench/compare's rows) ----------------------------------

TIME = "/usr/bin/time"
CONTROL = "ctl"  # the per-round control arm (not an allocator)
# Left out of the second geometric mean: their ratios to mimalloc are
# 0.005-0.05 and would decide any mean they are part of.
OUTLIER_GROUPS = ("large", "realloc-growth")


class Workload:
    """One entry of the registry: a program and its arguments (before the
    common -t/-d), the word its result line starts with, and what it is.

    group: "large", "realloc-growth" (left out of the second geometric mean),
        "control" (left out of both), "mixed" (counted in both; a name that
        selects its rows, as every group does: select_rows), or None.
    threads: None to take --threads, or a list of thread counts: one row per
        count, named NAME-COUNT (e.g. many-threads-64).
    time_limit_factor: how many times the run length a run may take before
        it counts as a hang (start-up and exit of thousands of threads take
        longer than the timed region)."""

    def __init__(self, name, binary, args, word, what, group=None, threads=None, time_limit_factor=20):
        self.name, self.binary, self.args, self.word, self.what = name, binary, list(args), word, what
        self.group, self.threads, self.time_limit_factor = group, threads, time_limit_factor

    def rows(self, default_threads):
        """The table rows of this workload: (row name, Row)."""
        counts = self.threads or [default_threads]
        for t in counts:
            name = f"{self.name}-{t}" if self.threads else self.name
            yield Row(name, self, t)


class Row:
    def __init__(self, name, workload, threads):
        self.name, self.w, self.threads = name, workload, threads
        self.binary, self.args, self.word = workload.binary, workload.args, workload.word
        self.what, self.group = workload.what, workload.group

    def argv(self, bin_dir, seconds):
        return [os.path.join(bin_dir, self.binary)] + self.args + ["-t", str(self.threads), "-d", f"{seconds:g}"]


# Every workload prints ops_per_s; EXTRA_KEYS names more figures kept in the
# JSON.  To add one: a Workload(...) line here, its program in bench/ and
# bench/meson.build, and a paragraph in docs/benchmarks.md.
WORKLOADS = [
    Workload("larson", "larson", [], "larson", "server pattern: random replacement, blocks handed to successor threads"),
    Workload("mstress", "mstress", [], "mstress", "objects migrate between threads; threads recreated each phase"),
    Workload("xmalloc", "xmalloc", [], "xmalloc", "producer allocates, consumer frees (lock-free SPSC ring)"),
    Workload("cache-scratch", "cache_scratch", ["-m", "scratch"], "cache_scratch", "passive false sharing"),
    Workload("cache-thrash", "cache_scratch", ["-m", "thrash"], "cache_scratch", "active false sharing"),
    Workload("churn-16", "churn", ["-z", "16"], "churn", "random replacement, 16 B blocks"),
    Workload("churn-64", "churn", ["-z", "64"], "churn", "random replacement, 64 B blocks"),
    Workload("churn-256", "churn", ["-z", "256"], "churn", "random replacement, 256 B blocks"),
    Workload("churn-1024", "churn", ["-z", "1024"], "churn", "random replacement, 1024 B blocks"),
    Workload("churn-pareto", "churn", ["-m", "pareto"], "churn", "random replacement, Pareto sizes (alpha 1.5, >= 16 B)"),
    Workload("large-4M", "large", ["-m", "alloc", "-z", "4"], "large", "malloc 4 MiB, touch every page, free",
             group="large"),
    Workload("large-16M", "large", ["-m", "alloc", "-z", "16"], "large", "malloc 16 MiB, touch every page, free",
             group="large"),
    Workload("large-64M", "large", ["-m", "alloc", "-z", "64"], "large", "malloc 64 MiB, touch every page, free",
             group="large"),
    Workload("realloc-geometric", "large", ["-m", "realloc"], "large", "realloc doubling 64 B -> 64 MiB",
             group="realloc-growth"),
    Workload("realloc-neighbour", "large", ["-m", "neighbour"], "large",
             "the same with a live neighbour after each step", group="realloc-growth"),
    Workload("vector-push", "large", ["-m", "vector"], "large", "push 4 Mi ints, grow 1.5x by realloc",
             group="realloc-growth"),
    Workload("threadchurn", "threadchurn", [], "threadchurn", "short-lived threads; blocks freed by later threads"),
    Workload("frag", "frag", [], "frag", "fill, thin to 1/16, refill with bigger sizes, churn"),
    Workload("threadrounds", "threadrounds", [], "threadrounds",
             "1000 rounds of 8 threads: each frees its predecessor's blocks, allocates 4 MiB of 1 KiB, keeps half",
             threads=[8], time_limit_factor=60),
    Workload("phases", "phases", [], "phases",
             "phases of 200 MiB in one size (64 B .. 4 MiB), all freed before the next; peak RSS is the figure",
             time_limit_factor=60),
    Workload("many-threads", "manythreads", [], "manythreads",
             "threads alive for the whole run, 64 small blocks each, 1 free in 128 to a neighbour",
             threads=[8, 64, 256, 1000, 4000], time_limit_factor=60),
    Workload("prodcons", "prodcons", [], "prodcons", "one thread allocates, the others free (batches of 256)"),
    Workload("mstress-mixed", "mstress", ["-m", "mixed"], "mstress",
             "mstress with mixed sizes: 1 in 100 up to 32 KiB, 1 in 2000 128 KiB - 4 MiB"),
    Workload("rptest", "rptest", [], "rptest", "lifetimes of 1-16 rounds, 1 block in 8 freed by the next thread"),
    Workload("large-random", "large", ["-m", "random"], "large",
             "8 live blocks per thread, each op replaces one with 5-25 MiB, touches every page", group="large"),
    # Random sizes (issue 19): bursts of K blocks of sizes drawn from a table
    # made before the clock, freed in allocation order (the mixes of
    # bench/instructions' mix* rows); one thread, or two where the name ends
    # in -2.  --only mixed runs them all.
    Workload("mixed-16-256-k8", "mixed", ["-m", "16:256", "-k", "8"], "mixed",
             "bursts of 8 blocks of 16-256 B, random sizes", group="mixed", threads=[1]),
    Workload("mixed-16-2k-k1", "mixed", ["-m", "16:2048", "-k", "1"], "mixed",
             "malloc + free of 16-2048 B, random sizes", group="mixed", threads=[1]),
    Workload("mixed-16-2k-k8", "mixed", ["-m", "16:2048", "-k", "8"], "mixed",
             "bursts of 8 blocks of 16-2048 B, random sizes", group="mixed", threads=[1, 2]),
    Workload("mixed-16-2k-k32", "mixed", ["-m", "16:2048", "-k", "32"], "mixed",
             "bursts of 32 blocks of 16-2048 B, random sizes", group="mixed", threads=[1]),
    Workload("mixed-512-2k-k8", "mixed", ["-m", "512:2048", "-k", "8"], "mixed",
             "bursts of 8 blocks of 512-2048 B, random sizes", group="mixed", threads=[1]),
    Workload("mixed-2k-8k-k8", "mixed", ["-m", "2048:8192", "-k", "8"], "mixed",
             "bursts of 8 blocks of 2-8 KiB, random sizes", group="mixed", threads=[1]),
    Workload("mixed-8k-64k-k1", "mixed", ["-m", "8192:65536", "-k", "1"], "mixed",
             "malloc + free of 8-64 KiB, random sizes", group="mixed", threads=[1]),
    Workload("mixed-8k-64k-k8", "mixed", ["-m", "8192:65536", "-k", "8"], "mixed",
             "bursts of 8 blocks of 8-64 KiB, random sizes", group="mixed", threads=[1]),
    Workload("mixed-64k-256k-k8", "mixed", ["-m", "65536:262144", "-k", "8"], "mixed",
             "bursts of 8 blocks of 64-256 KiB, random sizes", group="mixed", threads=[1]),
    Workload("mixed-log-16-64k-k8", "mixed", ["-m", "16:65536:log", "-k", "8"], "mixed",
             "bursts of 8 blocks of 16 B-64 KiB, log-uniform random sizes", group="mixed", threads=[1]),
    Workload("mixed-16-2k-k8-cross16", "mixed", ["-m", "16:2048", "-k", "8", "-x", "16"], "mixed",
             "bursts of 8 blocks of 16-2048 B, 1 block in 16 freed by the next thread", group="mixed",
             threads=[2]),
    Workload("control", "churn", ["-m", "control"], "churn", "churn loop without allocator calls", group="control"),
]
# The per-round control arm: the same loop as the "control" row, under glibc.
CONTROL_WORKLOAD = Workload("ctl", "churn", ["-m", "control"], "churn", "machine speed during the row's runs")
EXTRA_KEYS = ["rss_fill_kib", "rss_thin_kib", "rss_refill_kib", "rss_final_kib", "rss_peak_kib",
              "rss_hwm_kib", "errors", "phases", "generations", "cross_frees", "cycles", "rss_after_kib",
              "rss_round10_kib", "rss_growth"] + \
    [f"{what}_{size}" for size in (64, 1024, 16384, 262144, 4194304) for what in ("seconds", "faults")]  # (phases)


def all_rows(default_threads):
    return [r for w in WORKLOADS for r in w.rows(default_threads)]


def select_rows(rows, spec):
    """The rows a comma-separated --only list names, in registry order.  An
    item is a row name (many-threads-64), a group (mixed: all its rows), or
    a prefix ending in * (mixed-16-2k*); an item that selects nothing stops
    the script."""
    def selects(item, row):
        if item.endswith("*"):
            return row.name.startswith(item[:-1])
        return item in (row.name, row.group)

    want = [x.strip() for x in spec.split(",") if x.strip()]
    for x in want:
        if not any(selects(x, r) for r in rows):
            groups = sorted({r.group for r in rows if r.group})
            die(f"no row {x!r}; rows: {', '.join(r.name for r in rows)};"
                f" groups: {', '.join(groups)}; or a prefix ending in *")
    return [r for r in rows if any(selects(x, r) for x in want)]


def parse_time_output(text):
    """(peak RSS KiB, minor faults) from the last line of /usr/bin/time -f '%M %R'."""
    try:
        rss, minflt = text.strip().splitlines()[-1].split()
        return int(rss), int(minflt)
    except (ValueError, IndexError):
        return None, None


def bench_cpu():
    """The CPU every one-thread run is pinned to: SEFER_BENCH_CPU (a CPU
    number, or "none" to leave the scheduler free), else the lowest CPU this
    process may use.  None: no pinning."""
    want = os.environ.get("SEFER_BENCH_CPU", "")
    if want == "none":
        return None
    allowed = os.sched_getaffinity(0)
    if want:
        if int(want) not in allowed:
            die(f"SEFER_BENCH_CPU={want}: not a CPU this process may run on ({sorted(allowed)})")
        return int(want)
    return min(allowed)


def pin_one_thread(threads):
    """preexec_fn for a run of `threads` threads: a one-thread run goes to
    bench_cpu(), the same CPU for every arm and round; None otherwise.  Why:
    the two vCPUs of the development VM ran one-thread rows at different
    speeds (churn-64 3x, mixed-16-2k-k8 1.6x, the same library on CPU 0 and
    on CPU 1, 2026-12-04), so where the scheduler put each run decided its
    ratio more than the allocators did (docs/benchmarks.md, Traps)."""
    cpu = bench_cpu() if threads == 1 else None
    return None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))


def run_one(args, bin_dir, row, alloc, preload, seen):
    """One run.  Returns a dict: ok, ops (ops/s), rss (KiB), minflt, extra,
    info; or ok=False with why and cmd."""
    argv = row.argv(bin_dir, args.seconds)
    cmd = shell_cmd(preload, argv)
    limit = row.w.time_limit_factor * args.seconds + 60
    with tempfile.NamedTemporaryFile("r", prefix="compare-time-") as tf:
        # LD_PRELOAD goes to the workload through env(1), not to /usr/bin/time.
        full = [TIME, "-f", "%M %R", "-o", tf.name, "env"] + (
            [f"LD_PRELOAD={preload}"] if preload else []) + argv
        p = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env_for(None), start_new_session=True, preexec_fn=pin_one_thread(row.threads))
        try:
            out, err = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return {"ok": False, "why": f"no result after {limit:.0f} s (hang?), killed", "cmd": cmd,
                    "stderr": err[-2000:]}
        time_text = tf.read()
    res = result_line(out, row.word)
    if res is not None:
        # stops the whole script: a figure from the wrong allocator is worse than none
        verify_allocator("glibc" if alloc == CONTROL else alloc, preload, res, cmd)
        if alloc == "sefer":
            seen.check(res, cmd)
    if p.returncode or res is None:
        why = f"exit status {p.returncode}" + ("" if res else ", no result line")
        if res and res.get("errors", "0") != "0":
            why += f", errors={res['errors']} (the workload's data check failed)"
        return {"ok": False, "why": why, "cmd": cmd, "stderr": (err + time_text)[-2000:],
                "stdout": out[-1000:]}
    peak, minflt = parse_time_output(time_text)
    extra = {k: float(res[k]) for k in EXTRA_KEYS if k in res}
    return {"ok": True, "ops": float(res["ops_per_s"]), "rss": peak, "minflt": minflt, "extra": extra,
            "info": describe(res)}


def spread_percent(xs):
    med = median(xs) if xs else None
    return (max(xs) - min(xs)) / med * 100 if med else None
