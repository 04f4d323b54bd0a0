#!/usr/bin/env bash
# Install, build, and run the main job on the embedded default: a sweep of
# plans/quickstart.yaml over models/default (a small GPT-2 trained on data with
# planted previous-token and induction structure), then the pruning curve, the
# heads that matter most, and the per-layer redundancy table; then the report
# of the sweep (one HTML file of figures: headprune report) and its path.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
HP=./build/headprune
DB=results/quickstart.db
REPORT=results/quickstart.html
$HP run plans/quickstart.yaml --db "$DB"
echo
echo "== pruning curve: headprune query curve --db $DB"
$HP query curve --db "$DB"
echo
echo "== the heads that matter most: headprune query heads --db $DB --top 8"
$HP query heads --db "$DB" --top 8
echo
echo "== redundancy per layer: headprune query redundancy --db $DB"
$HP query redundancy --db "$DB"
echo
echo "== the report (figures, one self-contained HTML file): headprune report --db $DB --out $REPORT"
$HP report --db "$DB" --out "$REPORT"
