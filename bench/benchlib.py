"""Shared helpers of the bench/ runner scripts (compare-larson, instructions).

Knows where each allocator lives, installs missing Debian packages, finds the
benchmark binaries in a meson build directory, checks that an LD_PRELOAD took
effect and formats markdown tables.  Standard library only (python3 of
Debian 12)."""

import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys

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


def git_describe(root):
    r = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if r.returncode:
        return "none yet"
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return r.stdout.strip() + (" (uncommitted changes)" if dirty.strip() else "")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def loadavg():
    """The 1-minute load average, as text."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


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
