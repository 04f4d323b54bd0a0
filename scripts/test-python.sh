#!/usr/bin/env bash
# The Python package's tests (tests/python, docs/python.md): the package installed the way a user installs
# it, `pip install .`, into a fresh virtual environment, offline (--no-index, --no-build-isolation) once
# its build and run dependencies are there, then pytest against that install and the headprune command
# the same wheel installed (the same build, so every comparison with the command line is bit for bit).
#
# The dependencies (meson-python, meson, ninja, numpy, pandas, pytest, tqdm) come from PyPI once, as wheels
# kept in build-py/wheels; later runs need no network. Exit 77: skipped, with the reason (no python3 -m
# venv, or PyPI unreachable and no wheels kept).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
work=build-py
deps=(meson-python meson ninja numpy pandas pytest tqdm)
mkdir -p "$work"

if ! "$py" -m venv --help >/dev/null 2>&1; then
    echo "test-python.sh: skipped: $py has no venv module (apt-get install python3-venv)" >&2
    exit 77
fi
# the dependencies as wheels, fetched once
if ! [ -f "$work/wheels/.complete" ]; then
    rm -rf "$work/wheels"
    "$py" -m venv --clear "$work/fetch"
    if ! "$work/fetch/bin/pip" download -q -d "$work/wheels" "${deps[@]}" 2>"$work/fetch.log"; then
        echo "test-python.sh: skipped: cannot fetch ${deps[*]} from PyPI ($(tail -1 "$work/fetch.log"))" >&2
        exit 77
    fi
    touch "$work/wheels/.complete"
fi
# a fresh environment each run: the install is part of what is tested
env=$work/venv
"$py" -m venv --clear "$env"
"$env/bin/pip" install -q --no-index --find-links "$work/wheels" "${deps[@]}"
echo "test-python.sh: pip install . (offline, into a fresh $env)" >&2
t0=$(date +%s)
"$env/bin/pip" install -q --no-index --no-build-isolation "$root" >"$work/install.log" 2>&1 ||
    { tail -30 "$work/install.log" >&2; echo "test-python.sh: pip install . failed (log $work/install.log)" >&2; exit 1; }
echo "test-python.sh: installed in $(( $(date +%s) - t0 )) s" >&2
# pytest from outside the source tree, so `import headprune` is the installed package
cd "$work"
HP_REPO=$root HP_CLI=$root/$env/bin/headprune HP_CACHE_DIR=$root/$work/cache \
    "$root/$env/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python" "$@"
