#!/usr/bin/env bash
# tests/package/systemd.sh DEPLOY.MD LIB PROD.TOML - the systemd drop-ins of
# docs/deploy.md: each ```ini block after a "<!-- systemd.sh: NAME -->"
# marker is applied, as NAME, to a small oneshot test service whose program
# (check.py, below) checks that it runs under sefer.
#
# Where systemd is the running init (/run/systemd/system exists), the service
# is started for real, as a runtime unit in /run/systemd/system, with LIB for
# the drop-in's library, test copies of the files it names (PROD.TOML plus
# an [introspect] table) and listen port 0; then once more with a config
# error, which must fail with status 78 (SEFER_CONFIG_STRICT=1).  Needs root.
#
# Everywhere (a container, CI) every drop-in is checked with
# `systemd-analyze verify`, and any message it prints is a failure (it exits
# 0 on an unknown key).
set -u
doc=$1 lib=$2 prod=$3
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze is not installed (package systemd)"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] || { echo "SKIP: /usr/bin/python3 is not installed"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
unit=sefer-deploy-test-$$.service
cleanup() {
    if [ -n "${runtime_unit:-}" ]; then
        systemctl stop "$unit" 2>/dev/null
        rm -rf "/run/systemd/system/$unit" "/run/systemd/system/$unit.d"
        systemctl daemon-reload
        systemctl reset-failed "$unit" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# The drop-ins, as docs/deploy.md shows them.
mkdir "$tmp/dropins"
awk -v dir="$tmp/dropins" '
    match($0, /^<!-- systemd\.sh: [A-Za-z0-9_.-]+ -->$/) { name = $3; next }
    name != "" && /^```ini$/ { out = dir "/" name; next }
    out != "" && /^```$/ { close(out); out = ""; name = ""; next }
    out != "" { print > out }' "$doc"
dropins=$(cd "$tmp/dropins" && ls)
[ "$(echo "$dropins" | wc -w)" -ge 2 ] || fail "expected at least two drop-ins in $doc, found: $dropins"

# The test service's program: under sefer, strict mode on, the server up.
cat >"$tmp/check.py" <<'PY'
import ctypes, os, sys, urllib.request
sefer = ctypes.CDLL(None)
if not hasattr(sefer, "sefer_version"):
    sys.exit("check.py: sefer is not loaded (LD_PRELOAD=%s)" % os.environ.get("LD_PRELOAD"))
sefer.sefer_version.restype = ctypes.c_char_p
if os.environ.get("SEFER_CONFIG_STRICT") != "1":
    sys.exit("check.py: SEFER_CONFIG_STRICT is not 1")
port = sefer.sefer_introspect_port()
with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=60) as r:
    print("check.py: sefer %s, SEFER_CONFIG=%s, /healthz on port %d: %d"
          % (sefer.sefer_version().decode(), os.environ.get("SEFER_CONFIG"), port, r.status))
PY
write_unit() { # write_unit DIR
    printf '[Unit]\nDescription=sefer docs/deploy.md test service\n\n[Service]\nType=oneshot\nExecStart=%s %s\n' \
        "$py" "$tmp/check.py" >"$1/$unit"
}

# 1. systemd-analyze verify, each drop-in on the test service
for d in $dropins; do
    dir=$tmp/verify-$d
    mkdir -p "$dir/$unit.d"
    write_unit "$dir"
    cp "$tmp/dropins/$d" "$dir/$unit.d/$d"
    out=$(SYSTEMD_UNIT_PATH=$dir: systemd-analyze verify --man=no "$dir/$unit" 2>&1)
    rc=$?
    if [ $rc = 0 ] && [ -z "$out" ]; then
        ok "systemd-analyze verify: $d ($(grep -c '^[A-Za-z]' "$dir/$unit.d/$d") settings)"
    else
        fail "systemd-analyze verify with $d (exit $rc): $out"
    fi
done

# 2. a real start, where systemd runs
if [ ! -d /run/systemd/system ]; then
    echo "systemd is not running here (no /run/systemd/system): no service started; the drop-ins were verified only"
    exit $((fails > 0))
fi
if [ "$(id -u)" != 0 ]; then
    echo "not root: no service started; the drop-ins were verified only"
    exit $((fails > 0))
fi
{
    cat "$prod"
    printf '\n[introspect]\nenabled = true\nlisten = "127.0.0.1:0"\ntoken = "deploy-test-token"\n'
} >"$tmp/prod.toml"
printf 'SEFER_INTROSPECT_TOKEN=deploy-test-token\n' >"$tmp/introspect.env"
runtime_unit=1
for d in $dropins; do
    rm -rf "/run/systemd/system/$unit.d"
    mkdir -p "/run/systemd/system/$unit.d"
    write_unit /run/systemd/system
    sed -e "s|^Environment=LD_PRELOAD=.*|Environment=LD_PRELOAD=$lib|" \
        -e "s|/etc/sefer/prod.toml|$tmp/prod.toml|g" -e "s|/etc/sefer/introspect.env|$tmp/introspect.env|g" \
        -e "s|127\.0\.0\.1:9090|127.0.0.1:0|g" "$tmp/dropins/$d" >"/run/systemd/system/$unit.d/$d"
    systemctl daemon-reload
    since=$(date '+%Y-%m-%d %H:%M:%S')
    if systemctl start "$unit"; then
        ok "$d: the service ran under sefer: $(journalctl -u "$unit" --since "$since" -o cat --no-pager | grep '^check.py:' | tail -1)"
    else
        fail "$d: the service failed:"
        journalctl -u "$unit" --since "$since" -o cat --no-pager | tail -20
    fi
    cp "$tmp/prod.toml" "$tmp/prod.toml.good"
    printf '[guard]\nlevle = 2\n' >>"$tmp/prod.toml"
    systemctl start "$unit" 2>/dev/null
    status=$(systemctl show -p ExecMainStatus --value "$unit")
    if [ "$status" = 78 ]; then
        ok "$d: a config error stops the service at start (status 78)"
    else
        fail "$d: with a config error the service's status is '$status', not 78"
    fi
    mv "$tmp/prod.toml.good" "$tmp/prod.toml"
    systemctl reset-failed "$unit" 2>/dev/null
done
exit $((fails > 0))
