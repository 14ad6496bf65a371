#!/bin/sh
# tests/secure_env/run.sh PROBE - sefer ignores SEFER_* in a setgid program.
#
# A copy of PROBE made setgid to another group runs in glibc's secure mode
# (egid != rgid): secure_getenv returns NULL there, so SEFER_GUARD_LEVEL=3
# must not reach sefer (docs/security.md, threat model).  Needs root (to
# chgrp) and a filesystem that honours setgid; skips otherwise.
probe=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to make a setgid copy"; exit 77; }
group=nogroup
getent group "$group" >/dev/null || { echo "SKIP: no group $group"; exit 77; }
dir=$(mktemp -d "$(dirname "$probe")/secure-env.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
plain=$(SEFER_GUARD_LEVEL=3 "$probe")
[ "$plain" = "3 env" ] || { echo "FAIL: plain run: got '$plain', expected '3 env'"; exit 1; }
cp "$probe" "$dir/probe" && chgrp "$group" "$dir/probe" && chmod g+s "$dir/probe" || exit 1
secure=$(SEFER_GUARD_LEVEL=3 SEFER_CONFIG=/etc/shadow "$dir/probe")
case "$secure" in
"1 default") echo "ok: a setgid program ignores SEFER_GUARD_LEVEL and SEFER_CONFIG" ;;
"3 env") echo "SKIP: setgid not honoured here (nosuid filesystem?)"; exit 77 ;;
*) echo "FAIL: setgid run: got '$secure', expected '1 default'"; exit 1 ;;
esac
