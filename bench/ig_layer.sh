#!/bin/bash
# ig_layer.sh -- the time of the default attribution estimate (ig-layer, 2 steps: 2 gradient passes a layer) alone
# in a fresh database, on the default model, stories260K and SmolLM2's GGUF file (where models/ has it:
# scripts/get-smollm2.sh), and of one gradient pass (estimator: atp) beside it; 5 rounds, medians.
# With another headprune binary as its argument (say one built from an earlier commit), each plan runs under both,
# alternating, so that the two are measured side by side. With SINGLE=1 the exact single sweep (one evaluation a
# head) is timed beside them, and ROUNDS=n sets the rounds (default 5); MODELS="smollm2" picks the models.
# Run on an idle machine from the repository root after scripts/build.sh:  bench/ig_layer.sh [OTHER_HEADPRUNE]
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("$PWD/build/headprune")
[ $# -gt 0 ] && bins+=("$(realpath "$1")")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
models=(default stories260K)
[ -f models/SmolLM2-135M-Instruct.Q4_1.gguf ] && models+=(smollm2)
[ -n "${MODELS:-}" ] && read -r -a models <<<"$MODELS"
studies=(ig-layer atp)
[ "${SINGLE:-0}" = 1 ] && studies+=(single)
for model in "${models[@]}"; do
    case $model in
    default) m=$PWD/models/default d=$m/heldout.npy extra= ;;
    stories260K) m=$PWD/tests/fixtures/stories260K d=$m/data.npy extra= ;;
    smollm2) m=$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf d=$PWD/bench/screen-heldout.txt extra='seq_len: 64\n' ;;
    esac
    for e in "${studies[@]}"; do
        study="attribution: {estimator: $e}"
        [ "$e" = single ] && study=single
        printf "name: e\nmodel: %s\ndata: %s\n${extra}metric: loss\nablation: zero\nstudies:\n  - %s\n" \
            "$m" "$d" "$study" >"$dir/$model-$e.yaml"
    done
    for round in $(seq "${ROUNDS:-5}"); do
        for e in "${studies[@]}"; do
            for b in "${!bins[@]}"; do
                rm -f "$dir"/t.db*
                s=$(date +%s.%N)
                "${bins[$b]}" run "$dir/$model-$e.yaml" --db "$dir/t.db" --threads 2 >/dev/null 2>&1
                t=$(date +%s.%N)
                echo "$model $e $b $(echo "$t - $s" | bc)"
            done
        done
    done
done | python3 -c '
import collections, statistics, sys
names = sys.argv[1:]
t = collections.defaultdict(list)
for line in sys.stdin:
    m, e, b, s = line.split()
    t[(m, e, int(b))].append(float(s))
for (m, e, b), v in t.items():
    print(f"{m:12s} {e:9s} {names[b]:40s} median {statistics.median(v):7.3f} s   (" + " ".join(f"{x:.2f}" for x in v) + ")")
' "${bins[@]}"
