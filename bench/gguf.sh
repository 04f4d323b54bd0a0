#!/usr/bin/env bash
# GGUF against f32 safetensors, side by side in one run (issue 27): SmolLM2-135M-Instruct's Q4_1 GGUF
# (scripts/get-smollm2.sh) and the same model as an f32 Hugging Face checkpoint (what `headprune prune` writes of
# the GGUF model with every head kept: the dequantized weights), one `headprune eval` each over the 64 IOI prompts'
# ids in rows of 64 (14 rows),
# REPS times alternately; the median wall time (open + eval) and the peak RSS of each. Run on an idle machine.
#   bench/gguf.sh [REPS]        (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
hp=./build/headprune
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$gguf" ] || scripts/get-smollm2.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
keep=$(python3 -c 'print(",".join("%d.*" % l for l in range(30)))')
$hp prune --model "$gguf" --keep "$keep" --out "$work/f32" --quiet
python3 - tests/fixtures/smollm2-ioi/task-ids.jsonl "$work/data.bin" <<'PY'
import json, struct, sys
# the 64 IOI prompts' ids (English text by SmolLM2's tokenizer) one after another, as an llm.c token file
ids = [i for line in open(sys.argv[1]) for i in json.loads(line)["prompt_ids"]]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(ids), *ids))
PY
for i in $(seq "$reps"); do
    for m in gguf f32; do
        path=$gguf
        [ $m = f32 ] && path=$work/f32
        /usr/bin/time -f "$m %e %M" -a -o "$work/times" $hp eval --model "$path" --data "$work/data.bin" \
            --seq-len 64 --threads 2 --quiet >/dev/null
    done
done
python3 - "$work/times" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and l.split()[0] in ("gguf", "f32")]
res = {}
for m in ("gguf", "f32"):
    t = [float(r[1]) for r in rows if r[0] == m]
    k = [int(r[2]) for r in rows if r[0] == m]
    res[m] = (statistics.median(t), max(k) / 1024)
    print("%-5s median %.2f s over %d runs, peak RSS %.0f MB" % (m, res[m][0], len(t), res[m][1]))
print("gguf / f32: time %.2fx, peak RSS %.2fx" % (res["gguf"][0] / res["f32"][0], res["gguf"][1] / res["f32"][1]))
PY
