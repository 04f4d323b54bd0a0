#!/usr/bin/env bash
# Install what a fresh Debian 12 machine lacks to build and test headprune.
# Idempotent: does nothing when every package is already there.
set -euo pipefail
pkgs=(gcc libc6-dev meson ninja-build pkg-config libblis-dev libcjson-dev
      libcriterion-dev libsqlite3-dev libyaml-dev libxxhash-dev libgsl-dev libpcre2-dev libutf8proc-dev
      python3-pip python3-venv python3-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "headprune: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
