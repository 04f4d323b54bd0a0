#!/usr/bin/env python3
"""Check that Hugging Face transformers loads the checkpoints `headprune prune` writes.

For each case below this runs the built `headprune prune` on a fixture,
keeps the result under tests/fixtures/exported/<name>/ (model.safetensors and
config.json), loads it with transformers' from_pretrained (eager attention,
float32) and compares its outputs on the fixture's held-out data with the
original model's under the same heads zero-ablated (HF's head_mask for GPT-2
and BERT, the o_proj pre-hook of hp_ref.py for Llama and Qwen2). The
evidence goes to hf-check.json beside it: library versions, the max |diff|
of the outputs, and the export's metrics as transformers computes them.
A checkpoint transformers cannot build (a Llama whose layers keep different
numbers of heads, or part of a KV group; a GPT-NeoX without some heads) must be refused by from_pretrained,
not loaded wrongly: the case records the refusal.

tests/test_export.c re-exports every case and compares the bytes with what
is kept here, so the evidence is about the exporter as it is, and checks
that headprune evaluates each export to the metrics transformers recorded.

    /work/venv/bin/python tools/check_export.py [--headprune build/headprune] [cases...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402
from gen_fixtures import Runner  # noqa: E402

import transformers  # noqa: E402
from transformers import (  # noqa: E402
    BertForMaskedLM, BertModel, GPT2LMHeadModel, GPTNeoXForCausalLM, LlamaForCausalLM, Phi3ForCausalLM, Qwen2ForCausalLM,
    Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM,
)

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(REPO, "tests", "fixtures")

# name, source fixture, heads removed, model class, arch, kind, transformers loads it
CASES = [
    ("gpt2-tiny", "gpt2-tiny", "0.1,2.0,2.3", GPT2LMHeadModel, "gpt2", "causal", True),
    ("bert-mlm", "bert-mlm", "0.0,1.3", BertForMaskedLM, "bert", "mlm", True),
    ("bert-encoder", "bert-encoder", "0.1,1.2,1.3", BertModel, "bert", "encoder", True),
    ("llama-gqa-groups", "llama-gqa", "kv:0.1,kv:1.0,kv:2.0", LlamaForCausalLM, "llama", "causal", True),
    ("llama-tied-bf16", "llama-tied-bf16", "0.0,1.3", LlamaForCausalLM, "llama", "causal", True),
    ("qwen2-bias", "qwen2-bias", "kv:0.1,kv:1.0", Qwen2ForCausalLM, "llama", "causal", True),
    ("qwen3-qknorm", "qwen3-qknorm", "kv:0.0,kv:1.1,kv:2.0", Qwen3ForCausalLM, "llama", "causal", True),
    ("phi3-fused", "phi3-fused", "kv:0.1,kv:1.0,kv:2.1", Phi3ForCausalLM, "llama", "causal", True),
    ("llama-gqa-uneven", "llama-gqa", "kv:0.1,1.0", LlamaForCausalLM, "llama", "causal", False),
    ("gpt2-empty-layer", "gpt2-tiny", "1.*", GPT2LMHeadModel, "gpt2", "causal", False),
    ("neox-parallel", "neox-parallel", "0.1,2.0,2.3", GPTNeoXForCausalLM, "neox", "causal", False),
    ("gemma2-softcap", "gemma2-softcap", "kv:0.1,kv:1.0,kv:2.1", Gemma2ForCausalLM, "llama", "causal", True),
    ("gemma3-local", "gemma3-local", "kv:0.0,kv:1.1,kv:2.0", Gemma3ForCausalLM, "llama", "causal", True),
]


def load_data(src):
    ref = json.load(open(os.path.join(src, "reference.json")))
    path = os.path.join(src, ref["data"])
    if path.endswith(".npy"):
        return {"ids": torch.from_numpy(np.load(path).astype(np.int64))}
    rows = [json.loads(line) for line in open(path) if line.strip()]
    keys = [k for k in ("ids", "labels", "attention_mask", "token_type_ids") if k in rows[0]]
    return {k: torch.tensor([r[k] for r in rows], dtype=torch.int64) for k in keys}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headprune", default=os.path.join(REPO, "build", "headprune"))
    ap.add_argument("names", nargs="*", help="cases to (re)check; default all")
    a = ap.parse_args()
    out_root = os.path.join(FIX, "exported")
    os.makedirs(out_root, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    for name, src_name, spec, cls, arch, kind, loads in CASES:
        if a.names and name not in a.names:
            continue
        src = os.path.join(FIX, src_name)
        out = os.path.join(out_root, name)
        if os.path.isdir(out):
            shutil.rmtree(out)
        subprocess.run([a.headprune, "prune", "--model", src, "--mask", spec, "--out", out, "--quiet"], check=True)
        data = load_data(src)
        orig = cls.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
        ro = Runner(orig, arch, kind, data)
        gate = hp_ref.parse_mask(spec, ro.n_layers, ro.n_heads, ro.n_kv)
        want = ro.masked_output(gate, "zero", arch in ("gpt2", "bert"))
        unmasked = ro.forward()
        ro.abl.remove()
        ev = {"source": src_name, "mask": spec, "model_class": cls.__name__,
              "torch": torch.__version__, "transformers": transformers.__version__}
        try:
            back = cls.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        except Exception as e:  # transformers must refuse what it cannot build
            assert not loads, f"{name}: transformers cannot load it: {e}"
            ev["transformers_loads"] = False
            ev["refusal"] = " ".join(str(e).split())[:300]
            print(f"  {name}: refused by transformers, as it should be: {ev['refusal'][:120]}")
        else:
            assert loads, f"{name}: transformers loaded a checkpoint it cannot build rightly"
            rb = Runner(back, arch, kind, data)
            got = rb.forward()
            rb.abl.remove()
            diff = float((got - want).abs().max())
            ev["transformers_loads"] = True
            ev["n_params"] = sum(p.numel() for p in back.parameters())
            ev["max_abs_diff_vs_masked_original"] = diff
            # the export's metrics against the original's unmasked outputs, as headprune's eval of the
            # original under the mask computes them, and loss / 1 - cos against its own
            ev["metrics_vs_original"] = ro.metrics(got, unmasked)
            ev["metrics_vs_itself"] = rb.metrics(got, got)
            for k in ("metrics_vs_original", "metrics_vs_itself"):
                ev[k] = {m: v for m, v in ev[k].items() if not m.startswith("per_seq")}
            print(f"  {name}: loaded by transformers ({cls.__name__}); max |diff| vs the masked original "
                  f"= {diff:.3g}; {hp_ref.fmt_case(ev['metrics_vs_original'])}")
            assert diff < 1e-5, diff
        with open(os.path.join(out, "hf-check.json"), "w") as f:
            json.dump(ev, f, indent=1)
            f.write("\n")
        hp_ref.tidy_perms(out)


if __name__ == "__main__":
    main()
