#!/bin/sh
# run.sh - the browser test's entry point (meson test 'browser-dashboard'):
# skips (exit 77, with the reason) where the browser test cannot run, else
# runs dashboard.mjs with node.  scripts/setup.sh installs what it needs:
# nodejs, Debian's chromium, and playwright-core (npm ci here).
here=$(cd "$(dirname "$0")" && pwd)
chromium=${SEFER_CHROMIUM:-/usr/bin/chromium}
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is not installed (scripts/setup.sh installs nodejs)"
    exit 77
fi
if [ ! -x "$chromium" ]; then
    echo "SKIP: $chromium is not installed (scripts/setup.sh installs Debian's chromium)"
    exit 77
fi
if [ ! -f "$here/node_modules/playwright-core/package.json" ]; then
    echo "SKIP: playwright-core is not in $here/node_modules (scripts/setup.sh runs npm ci there)"
    exit 77
fi
exec node "$here/dashboard.mjs" "$@"
