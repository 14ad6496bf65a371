#!/usr/bin/env bash
# tests/package/symbols.sh LIB HEADER MAP SOVERSION OVERRIDE FAULT - the ABI
# of libsefer.so (docs/install.md, "ABI"):
#   1. its SONAME is libsefer.so.SOVERSION;
#   2. the sefer_* names of the version script MAP are exactly the functions
#      HEADER (include/sefer.h) declares with SEFER_EXPORT;
#   3. LIB exports exactly: those functions (the SEFER_FAULT_INJECTION ones
#      only if FAULT is 1), and, if OVERRIDE is 1, every other name of MAP
#      (the malloc family, C++ operator new/delete), compared demangled;
#      nothing else, and no symbol versions (a versioned malloc could not
#      interpose glibc's).
set -u
lib=$1 header=$2 map=$3 soversion=$4 override=$5 fault=$6
for tool in readelf nm; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (binutils)"; exit 77; }
done
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = "libsefer.so.$soversion" ]; then ok "SONAME $soname"; else fail "SONAME '$soname', expected libsefer.so.$soversion"; fi

# The header's functions: "SEFER_EXPORT <type> name(", and which of them sit
# inside #ifdef SEFER_FAULT_INJECTION.
awk '
    /^#ifdef SEFER_FAULT_INJECTION/ { fault = 1 }
    fault && /^#endif/ { fault = 0 }
    /^SEFER_EXPORT/ && match($0, /sefer_[a-z0-9_]+\(/) {
        print substr($0, RSTART, RLENGTH - 1), (fault ? "fault" : "always")
    }' "$header" | sort >"$tmp/header"
[ -s "$tmp/header" ] || fail "no SEFER_EXPORT function found in $header"

# The map's names: "name;" lines outside comments, C++ ones quoted.
sed -e 's|/\*.*\*/||' "$map" | sed -n 's/^[[:space:]]*\("[^"]*"\|[A-Za-z_][A-Za-z0-9_]*\);.*/\1/p' |
    sed 's/^"\(.*\)"$/\1/' | grep -vx 'local\|global' | sort >"$tmp/map"
grep '^sefer_' "$tmp/map" >"$tmp/map-sefer"
cut -d' ' -f1 "$tmp/header" | diff -u - "$tmp/map-sefer" >"$tmp/diff" &&
    ok "the version script's sefer_* names are the $(wc -l <"$tmp/header") functions of sefer.h" ||
    { fail "sefer.h and $map disagree (- header only, + map only):"; cat "$tmp/diff"; }

{
    awk -v f="$fault" '$2 == "always" || f == 1 { print $1 }' "$tmp/header"
    [ "$override" = 1 ] && grep -v '^sefer_' "$tmp/map"
} | sort >"$tmp/expected"
nm -D --defined-only --demangle "$lib" | cut -d' ' -f3- | sort >"$tmp/exported"
diff -u "$tmp/expected" "$tmp/exported" >"$tmp/diff" &&
    ok "libsefer exports exactly the $(wc -l <"$tmp/expected") expected names" ||
    { fail "exported names differ (- expected only, + exported only):"; cat "$tmp/diff"; }

if readelf -V "$lib" | grep -q "Version definition section"; then
    fail "the library defines symbol versions"
else
    ok "no symbol versions defined"
fi
exit $((fails > 0))
