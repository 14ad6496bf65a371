#!/bin/sh
# tests/secure_env/run.sh PROBE - sefer ignores SEFER_* in a setgid program.
#
# A copy of PROBE made setgid to another group runs in secure mode (the
# kernel sets AT_SECURE when egid != rgid): there secure_getenv returns
# NULL, so SEFER_GUARD_LEVEL=3 and SEFER_CONFIG must not reach sefer
# (docs/security.md, threat model).  The probe reports AT_SECURE itself, so
# the verdict does not guess from sefer's answer:
#   secure=1 and "1 default"   pass: the kernel honoured setgid, sefer read nothing
#   secure=1 and anything else fail: the kernel honoured setgid and sefer read the variables
#   secure=0                   skip: the kernel did not honour setgid here (a nosuid
#                              filesystem): the check cannot run
# Needs root (to chgrp) and a group other than root's; skips otherwise.
probe=$1
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to make a setgid copy"; exit 77; }
group=nogroup
getent group "$group" >/dev/null || { echo "SKIP: no group $group"; exit 77; }
dir=$(mktemp -d "$(dirname "$probe")/secure-env.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
plain=$(SEFER_GUARD_LEVEL=3 "$probe")
[ "$plain" = "3 env secure=0" ] || { echo "FAIL: plain run: got '$plain', expected '3 env secure=0'"; exit 1; }
cp "$probe" "$dir/probe" && chgrp "$group" "$dir/probe" && chmod g+s "$dir/probe" || exit 1
secure=$(SEFER_GUARD_LEVEL=3 SEFER_CONFIG=/etc/shadow "$dir/probe")
case "$secure" in
"1 default secure=1") echo "ok: a setgid program ignores SEFER_GUARD_LEVEL and SEFER_CONFIG" ;;
*" secure=1") echo "FAIL: setgid run in secure mode: got '$secure', expected '1 default secure=1'"; exit 1 ;;
*" secure=0") echo "SKIP: the kernel did not honour setgid here (nosuid filesystem?): got '$secure'"; exit 77 ;;
*) echo "FAIL: setgid run: got '$secure'"; exit 1 ;;
esac
