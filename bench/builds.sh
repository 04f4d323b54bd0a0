#!/usr/bin/env bash
# builds.sh -- two builds of headprune side by side, alternating, on the same machine and inputs: a change that
# promises "performance unchanged" is checked here against the build before it (bench/README.md).
#
#   bench/builds.sh OLD/headprune NEW/headprune [REPS]
#
# Each rep runs, for each build in turn (the order alternates between reps): a single sweep (`single` over the
# 144 heads of bench_forward's GPT-2-small-shaped model, 4 x 128 random tokens, a fresh database), `eval --grad`
# on the same tokens, and a patching grid (`patching` over layer 6's heads, resample, 8 task rows x 16 positions,
# 192 variants). Wall seconds, 2 threads; the load average beside each line says whether the machine was idle.
# The model is bench_forward's (/tmp/hp-bench-gpt2-small: run `build/bench/bench_forward` once to write it);
# inputs go to /tmp/hp-bench-builds. Standard library only; about 4 minutes a rep on 2 cores.
set -euo pipefail
old=${1:?usage: bench/builds.sh OLD/headprune NEW/headprune [REPS]}
new=${2:?usage: bench/builds.sh OLD/headprune NEW/headprune [REPS]}
reps=${3:-2}
model=/tmp/hp-bench-gpt2-small
dir=/tmp/hp-bench-builds
[ -f "$model/model.safetensors" ] || { echo "builds.sh: no $model: run build/bench/bench_forward once" >&2; exit 1; }
mkdir -p "$dir"
python3 - "$dir" <<'EOF'
import json, struct, sys
d = sys.argv[1]
x = 1
def rnd(n):  # the LCG compare.py uses: the same ids on every machine
    global x
    out = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append((x >> 33) % 50257)
    return out
ids = rnd(4 * 128)
header = "{'descr': '<i4', 'fortran_order': False, 'shape': (4, 128), }"
header += " " * (63 - (len(header) + 10) % 64) + "\n"
with open(f"{d}/data.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<512i", *ids))
with open(f"{d}/task.jsonl", "w") as f:
    for _ in range(8):
        p = rnd(16)
        c = list(p)
        c[5], c[11] = rnd(2)
        a, w = rnd(2)
        f.write(json.dumps({"prompt_ids": p, "corrupt_ids": c, "answer_id": a, "wrong_id": w}) + "\n")
EOF
printf 'name: s\nmodel: %s\ndata: %s/data.npy\nstudies:\n  - single\n' "$model" "$dir" >"$dir/single.yaml"
printf 'name: p\nmodel: %s\ndata: %s/task.jsonl\nablation: resample\nmetric: logit_diff\nstudies:\n  - patching: {layers: [6], direction: noise}\n' \
    "$model" "$dir" >"$dir/patch.yaml"

secs() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }
for rep in $(seq 1 "$reps"); do
    order="old new"
    [ $((rep % 2)) -eq 0 ] && order="new old"
    for which in $order; do
        bin=$old
        [ "$which" = new ] && bin=$new
        rm -f "$dir"/*.db "$dir"/*.db-*
        s=$(secs "$bin" run "$dir/single.yaml" --db "$dir/s.db" --threads 2 --quiet)
        g=$(secs "$bin" eval --model "$model" --data "$dir/data.npy" --grad --threads 2 --quiet --json)
        p=$(secs "$bin" run "$dir/patch.yaml" --db "$dir/p.db" --threads 2 --quiet)
        echo "rep $rep $which: single sweep $s s, eval --grad $g s, patching grid $p s ($(cut -d' ' -f1-3 /proc/loadavg))"
    done
done
