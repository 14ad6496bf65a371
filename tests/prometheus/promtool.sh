#!/bin/sh
# promtool.sh ARGS... - runs Debian's promtool (package prometheus) on the
# rules and config in config/prometheus/ (meson tests prometheus-*); skips
# (exit 77) where promtool is not installed.
if ! command -v promtool >/dev/null 2>&1; then
    echo "SKIP: promtool is not installed (Debian package prometheus; scripts/setup.sh installs it)"
    exit 77
fi
exec promtool "$@"
