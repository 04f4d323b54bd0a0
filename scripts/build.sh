#!/usr/bin/env bash
# Configure (once) and build headprune into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
