#!/usr/bin/env python3
"""The head x position grid: headprune's patching study against heads x positions Hugging Face forwards.

The task: SmolLM2-135M-Instruct (--model; tools/gen_smollm2_ioi.py makes it), IOI rows of one template made by
`headprune task ioi --template 1 --n ROWS --seed 1`, every head patched alone at each position with its output
on the row's corrupt prompt (noising), logit_diff at the last token. In one run, taking turns:

  - headprune: `headprune run` of a plan `ablation: resample`, `metric: logit_diff`, one
    `patching: {positions: each}` study (heads x positions cells, and the baseline) into a fresh database; the
    time `run` reports (opening and hashing the model included);
  - the peer (transformers 4.x eager, PyPI torch, float32, no grad): the loop a per-position patching is
    without reuse, one batched forward over the clean rows per (head, position) with a pre-hook on its layer's
    o_proj replacing the head's slice at that position by the recorded corrupt one. All heads x positions
    forwards would take a long time, so the peer runs --sample cells spread over the grid, times each forward,
    and the grid's time is projected as cells x the median forward. Its effects on the sampled cells are
    checked against headprune's (max |diff|).

    bench/patching_grid.py [--rows 8] [--sample 40] [--threads 2] [--model /tmp/smollm2-hf]

Standard library only on headprune's side. Not part of CI. Run it on an otherwise idle machine.
"""
import argparse
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HP = os.path.join(REPO, "build", "headprune")

PEER = r'''
import json, sys, time
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model_dir, rows_path, threads, cells = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(model_dir)
rows = [json.loads(l) for l in open(rows_path)]
enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]
clean = torch.tensor([enc(r["prompt"]) for r in rows])
corrupt = torch.tensor([enc(r["corrupt"]) for r in rows])
ans = torch.tensor([enc(r["answer"])[0] for r in rows])
wrong = torch.tensor([enc(r["wrong"])[0] for r in rows])
m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
cfg = m.config
L, H = cfg.num_hidden_layers, cfg.num_attention_heads
dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
o_proj = [m.model.layers[l].self_attn.o_proj for l in range(L)]
n = len(rows)
def ld(logits):
    z = logits[:, -1]
    return (z[torch.arange(n), ans] - z[torch.arange(n), wrong]).mean().item()
rec = [None] * L
hs = [o_proj[l].register_forward_pre_hook(lambda mod, a, l=l: rec.__setitem__(l, a[0].detach().clone()))
      for l in range(L)]
with torch.no_grad():
    m(input_ids=corrupt)
for h in hs:
    h.remove()
with torch.no_grad():
    base = ld(m(input_ids=clean).logits)
out, secs = {}, []
for l, h, t in cells:
    def patch(mod, a, l=l, h=h, t=t):
        x = a[0].clone()
        x[:, t, h * dh:(h + 1) * dh] = rec[l][:, t, h * dh:(h + 1) * dh]
        return (x,)
    hook = o_proj[l].register_forward_pre_hook(patch)
    s = time.perf_counter()
    with torch.no_grad():
        out["%d.%d@%d" % (l, h, t)] = base - ld(m(input_ids=clean).logits)
    secs.append(time.perf_counter() - s)
    hook.remove()
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "effects": out, "seconds": secs,
                  "T": clean.shape[1], "L": L, "H": H}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="/tmp/smollm2-hf")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer-python", default="/work/venv/bin/python")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "ioi.jsonl")
        with open(data, "w") as f:
            subprocess.run([HP, "task", "ioi", "--model", a.model, "--template", "1", "--n", str(a.rows), "--seed", "1"],
                           stdout=f, check=True)
        plan = os.path.join(tmp, "p.yaml")
        with open(plan, "w") as f:
            f.write("name: ioi-grid\nmodel: %s\ndata: %s\nablation: resample\nmetric: logit_diff\nstudies:\n"
                    "  - patching: {name: grid}\n" % (a.model, data))
        db = os.path.join(tmp, "r.db")
        p = subprocess.run([HP, "run", plan, "--db", db, "--threads", str(a.threads), "--quiet"], capture_output=True,
                           text=True)
        if p.returncode != 0:
            sys.exit("headprune run failed: " + p.stderr.strip())
        hp_s = float(re.search(r" in ([0-9.]+) s", p.stdout + p.stderr).group(1))
        con = sqlite3.connect(db)
        eff = dict(con.execute("SELECT label, d_logit_diff FROM effects WHERE study = 'grid'"))
        T = con.execute("SELECT max(position) + 1 FROM variant_positions").fetchone()[0]
        con.close()
        cells = sorted(eff)
        rows = [json.loads(l) for l in open(data)]
        with open(os.path.join(tmp, "ids.txt"), "w") as f:
            f.write("".join(r["prompt"] + "\n" + r["corrupt"] + "\n" for r in rows))
        ids = subprocess.run([HP, "tokenize", "--model", a.model, os.path.join(tmp, "ids.txt")], capture_output=True,
                             text=True, check=True).stdout.split("\n")
        pairs = [(ids[2 * i].split(), ids[2 * i + 1].split()) for i in range(len(rows))]
        # positions up to which every row's corrupt prompt is its prompt: the patch is the identity there
        same = next((t for t in range(T) if any(p[t] != c[t] for p, c in pairs)), T)
        step = max(1, len(cells) // a.sample)
        pick = [c for c in cells[::step]][:a.sample]
        trip = [[int(c.split("@")[0].split(".")[0]), int(c.split("@")[0].split(".")[1]), int(c.split("@")[1])]
                for c in pick]
        q = subprocess.run([a.peer_python, "-c", PEER, a.model, data, str(a.threads), json.dumps(trip)],
                           capture_output=True, text=True)
        if q.returncode != 0:
            sys.exit("peer failed: " + q.stderr.strip()[-2000:])
        r = json.loads(q.stdout.strip().splitlines()[-1])
        diff = max(abs(eff[k] - v) for k, v in r["effects"].items())
        fwd = statistics.median(r["seconds"])
        n_cells = len(cells)
        print("SmolLM2 IOI grid: %d rows x %d tokens, %d heads x %d positions = %d cells" %
              (a.rows, T, r["L"] * r["H"], T, n_cells))
        computed = (T - same) * r["L"] * r["H"]
        print("headprune: %.2f s for the grid (%.1f ms a cell; positions 0-%d, where the prompts agree, are the "
              "unmasked model, evaluated once: %.1f ms a computed cell over %d), %d threads"
              % (hp_s, 1e3 * hp_s / n_cells, same - 1, 1e3 * hp_s / computed, computed, a.threads))
        print("Hugging Face: median forward %.1f ms over %d sampled cells (torch %s, %d threads); the grid as "
              "heads x positions forwards: %.1f s projected" % (1e3 * fwd, len(r["seconds"]), r["torch"], r["threads"],
                                                                fwd * n_cells))
        print("ratio %.2fx for the grid, %.2fx a computed cell; max |effect diff| on the sampled cells %.2e"
              % (fwd * n_cells / hp_s, fwd * computed / hp_s, diff))
        top = sorted(eff.items(), key=lambda kv: -kv[1])[:5]
        print("largest cells: " + ", ".join("%s %+.3f" % kv for kv in top))


if __name__ == "__main__":
    main()
