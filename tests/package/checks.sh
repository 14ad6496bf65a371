# shellcheck shell=bash disable=SC2015,SC2154  # ok/fail always return 0; $tmp is the caller's
# tests/package/checks.sh - sourced by install.sh (a meson install --destdir
# tree) and deb.sh (the installed Debian packages): what both check of an
# installed sefer.  Each check prints "ok: ..." or "FAIL: ..." and counts
# failures in $fails; $tmp is the caller's scratch directory.
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)

# check_pkg_config PROG.C SOVERSION [LIBDIR]: sefer.pc names nothing of
# libmicrohttpd or cJSON and requires no other package; PROG.C builds with
# exactly `pkg-config --cflags --libs sefer` and runs (LIBDIR: where the
# loader must look, for a tree outside its path), and builds with -static
# and exactly `pkg-config --static --cflags --libs sefer` and runs.
check_pkg_config() {
    local prog_c=$1 soversion=$2 libdir=${3:-} cc=${CC:-cc} shared static out pc
    shared=$(pkg-config --cflags --libs sefer) && static=$(pkg-config --static --cflags --libs sefer) ||
        { fail "pkg-config does not find sefer"; return; }
    echo "pkg-config --cflags --libs sefer:          $shared"
    echo "pkg-config --static --cflags --libs sefer: $static"
    [[ " $shared $static " != *microhttpd* && " $shared $static " != *cjson* ]] &&
        ok "no libmicrohttpd or cJSON in sefer.pc's flags" || fail "libmicrohttpd or cJSON in sefer.pc's flags"
    pc=$(pkg-config --variable=pcfiledir sefer)/sefer.pc
    if grep -q '^Requires' "$pc"; then fail "$pc has a Requires line"; else ok "sefer.pc requires no other package"; fi
    # shellcheck disable=SC2086  # the flags are words
    if "$cc" "$prog_c" -o "$tmp/shared" $shared && out=$(LD_LIBRARY_PATH=$libdir "$tmp/shared"); then
        readelf -d "$tmp/shared" | grep -q "NEEDED.*\[libsefer.so.$soversion\]" &&
            ok "shared: $out (NEEDED libsefer.so.$soversion)" || fail "shared: not linked to libsefer.so.$soversion"
    else
        fail "shared: a program built with \`pkg-config --cflags --libs sefer\` did not build or run"
    fi
    # shellcheck disable=SC2086
    if "$cc" -static "$prog_c" -o "$tmp/static" $static 2>"$tmp/cc.log" && out=$("$tmp/static"); then
        ok "static: $out"
    else
        cat "$tmp/cc.log"
        fail "static: a program built with -static and \`pkg-config --static --cflags --libs sefer\` did not build or run"
    fi
}

# check_sefer_run SEFER LIB: `SEFER run` preloads LIB, found with no SEFER_*
# variable set, and the program's introspection server answers.
check_sefer_run() {
    local sefer=$1 lib=$2 out rc
    out=$(env -u SEFER_LIB -u SEFER_SOAK -u SEFER_CONFIG "$sefer" run --listen 127.0.0.1:0 -- "$py" -c '
import ctypes, os, urllib.request
port = ctypes.CDLL(None).sefer_introspect_port()
with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=60) as r:
    print("preload", os.environ["LD_PRELOAD"], "healthz", r.status)' 2>"$tmp/run.err")
    rc=$?
    if [ $rc = 0 ] && [ "$out" = "preload $lib healthz 200" ] && ! grep -q "no such knob" "$tmp/run.err"; then
        ok "sefer run: $lib preloaded, the program's /healthz answers"
    else
        fail "sefer run (exit $rc): $out"
        cat "$tmp/run.err"
    fi
}

# check_sefer_soak SEFER SOAK LIB CONFIG: a one-second `SEFER soak` runs SOAK
# with LIB and CONFIG, found with no SEFER_* variable set, and passes.
check_sefer_soak() {
    local sefer=$1 soak=$2 lib=$3 config=$4 out rc
    out=$(env -u SEFER_LIB -u SEFER_SOAK -u SEFER_CONFIG "$sefer" soak --seconds 1 --listen 127.0.0.1:0 -- --quiet 2>&1)
    rc=$?
    if [ $rc = 0 ] && [[ $out == *"sefer soak: $soak --seconds 1"*"with $lib, SEFER_CONFIG=$config"* ]] &&
        [[ $out == *"sefer-soak: PASS"* ]]; then
        ok "sefer soak: $soak with $lib and $config: PASS"
    else
        fail "sefer soak (exit $rc):"
        echo "$out"
    fi
}
