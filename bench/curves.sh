#!/bin/bash
# curves.sh -- the time of one pruning curve alone, ranked exact, gradient and estimate (docs/gradients.md), on
# the default model and stories260K: each in a fresh database, the three alternating, 5 rounds; medians.
# Run on an idle machine from the repository root after scripts/build.sh:  bench/curves.sh
set -euo pipefail
cd "$(dirname "$0")/.."
HP=$PWD/build/headprune
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for model in default stories260K; do
    if [ "$model" = default ]; then m=$PWD/models/default d=$m/heldout.npy; else m=$PWD/tests/fixtures/stories260K d=$m/data.npy; fi
    for r in exact gradient estimate; do
        printf 'name: c\nmodel: %s\ndata: %s\nmetric: loss\nablation: zero\nstudies:\n  - iterative: {prune: 10%%, rank: %s}\n' \
            "$m" "$d" "$r" >"$dir/$model-$r.yaml"
    done
    for round in 1 2 3 4 5; do
        for r in exact gradient estimate; do
            rm -f "$dir"/t.db*
            s=$(date +%s.%N)
            "$HP" run "$dir/$model-$r.yaml" --db "$dir/t.db" >/dev/null 2>&1
            e=$(date +%s.%N)
            echo "$model $r $(echo "$e - $s" | bc)"
        done
    done
done | python3 -c '
import collections, statistics, sys
t = collections.defaultdict(list)
for line in sys.stdin:
    m, r, s = line.split()
    t[(m, r)].append(float(s))
for (m, r), v in t.items():
    print(f"{m:12s} rank: {r:9s} median {statistics.median(v):7.3f} s   (" + " ".join(f"{x:.2f}" for x in v) + ")")
'
