#!/usr/bin/env bash
# tests/fuzz_http/build-libfuzzer.sh [DIR] - builds the libFuzzer target
# fuzz_http.c (clang, ASan + UBSan) into DIR (default /tmp/sefer-fuzz-http):
#
#   DIR/build/      libsefer.a from a meson build of this tree with clang,
#                   -Doverride=false (only the sefer_* API: ASan owns
#                   malloc), -fsanitize=fuzzer-no-link,address,undefined
#   DIR/fuzz_http   the target, -fsanitize=fuzzer,address,undefined
#
# Then, from the source tree (docs/security.md, "Introspection"):
#
#   nice -n 10 DIR/fuzz_http -max_total_time=600 -timeout=10 \
#     -dict=tests/fuzz_http/http.dict DIR/work tests/fuzz_http/corpus
#
# Not used by CI: meson test "fuzz-http-corpus" replays the corpus with the
# build's own compiler.  CC overrides the compiler (default clang-14, or
# clang).
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-/tmp/sefer-fuzz-http}
cc=${CC:-$(command -v clang-14 || command -v clang)}
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=all)

mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ ! -f "$out/build/meson-private/coredata.dat" ]; then
    CC=$cc meson setup "$out/build" "$src" -Doverride=false -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=all"
fi
ninja -C "$out/build" lib/libsefer.a
"$cc" -g -O1 -fsanitize=fuzzer "${sanitize[@]}" -D_GNU_SOURCE -Wall -Wextra \
    -I"$src/include" -I"$src/lib" -I"$src/introspect" \
    "$src/tests/fuzz_http/fuzz_http.c" "$out/build/lib/libsefer.a" \
    -lcjson -ldl -lpthread -o "$out/fuzz_http"
mkdir -p "$out/work"
echo "built $out/fuzz_http"
