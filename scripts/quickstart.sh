#!/usr/bin/env bash
# Install, build, and run the main job on the embedded default: evaluate the
# bundled stories260K model (a real trained Llama with grouped-query attention)
# unmasked, with one head ablated, and with a whole KV group ablated.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
M=tests/fixtures/stories260K
echo "== headprune inspect --model $M"
./build/headprune inspect --model "$M"
for mask in "" "0.3" "kv:3.1" "2.*"; do
    echo
    echo "== headprune eval --model $M --data $M/data.npy${mask:+ --mask $mask}"
    ./build/headprune eval --model "$M" --data "$M/data.npy" ${mask:+--mask "$mask"}
done
