#!/bin/sh
# Set up (or verify) the Python environment for bench/peer/peer_hf.py:
# torch from PyPI + Hugging Face transformers 4.x, in a venv OUTSIDE the repo.
#
#   bench/peer/setup.sh                      # venv at $HOME/.cache/headprune-peer-venv
#   HP_PEER_VENV=/path/to/venv bench/peer/setup.sh
#
# If the venv already has torch and transformers < 5, nothing is installed; the
# script only verifies it and prints the versions. Otherwise it creates the venv
# (if needed) and pip installs torch, "transformers>=4.40,<5", numpy, safetensors.
# NOTE: PyPI's default torch wheel for Linux x86_64 pulls in the CUDA libraries,
# about 5 GB of downloads/disk, although the benchmark only uses the CPU.
# Never used by CI.
set -eu

VENV=${HP_PEER_VENV:-"$HOME/.cache/headprune-peer-venv"}
REPO=$(cd "$(dirname "$0")/../.." && pwd -P)

# Refuse a venv inside the repository.
mkdir -p "$(dirname "$VENV")"
VENV_ABS=$(cd "$(dirname "$VENV")" && pwd -P)/$(basename "$VENV")
case "$VENV_ABS/" in
    "$REPO"/*) echo "setup.sh: $VENV_ABS is inside the repository ($REPO); choose a path outside it" >&2
               exit 1 ;;
esac

PY="$VENV_ABS/bin/python"

check() {
    "$PY" - <<'EOF'
import sys
try:
    import torch, transformers, numpy, safetensors
except ImportError as e:
    print(f"missing: {e.name}", file=sys.stderr)
    sys.exit(1)
major = int(transformers.__version__.split(".")[0])
if major >= 5:
    print(f"transformers {transformers.__version__} is >= 5", file=sys.stderr)
    sys.exit(1)
EOF
}

if [ -x "$PY" ] && check 2>/dev/null; then
    echo "setup.sh: $VENV_ABS already has torch and transformers < 5; verifying only"
else
    if [ ! -x "$PY" ]; then
        echo "setup.sh: creating venv $VENV_ABS"
        python3 -m venv "$VENV_ABS"
    fi
    echo "setup.sh: installing torch (PyPI default wheel, ~5 GB with its CUDA libraries),"
    echo "          transformers>=4.40,<5, numpy, safetensors into $VENV_ABS"
    "$PY" -m pip install --upgrade pip
    "$PY" -m pip install torch "transformers>=4.40,<5" numpy safetensors
    check
fi

echo "python: $PY"
"$PY" - <<'EOF'
import platform, numpy, safetensors, torch, transformers
print(f"python {platform.python_version()}")
print(f"torch {torch.__version__}")
print(f"transformers {transformers.__version__}")
print(f"numpy {numpy.__version__}")
print(f"safetensors {safetensors.__version__}")
print(f"MKL available (torch.backends.mkl.is_available()): {torch.backends.mkl.is_available()}")
EOF
