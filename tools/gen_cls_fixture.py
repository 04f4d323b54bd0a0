#!/usr/bin/env python3
"""Reference fixture for BERT sequence classification (tests/fixtures/bert-cls).

A tiny random BertForSequenceClassification (2 layers x 4 heads, 3 labels
with names in id2label) and held-out rows with padding, token types and a
"label" each; for a set of masks, Hugging Face transformers' (eager,
head_mask) per-sequence cross-entropy of the classifier's logits against the
label, accuracy, and KL(unmasked || masked) of the label distributions,
written as reference.json in the format tests/test_reference.c reads (one
scored "token" per sequence). Needs torch and transformers<5.

    python tools/gen_cls_fixture.py
"""
import json
import os

import torch

import hp_ref  # the mask spec parser the other fixture tools share
from transformers import BertConfig, BertForSequenceClassification

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "bert-cls")
MASKS = [("none", ""), ("h0_1", "0.1"), ("h1_3", "1.3"), ("layer0", "0.*"), ("mix", "0.0,0.2,1.1"),
         ("all_but_one", "0.0,0.1,0.2,0.3,1.0,1.1,1.2")]


def main():
    torch.manual_seed(5)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.3,
                     num_labels=3, id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
                     label2id={"entailment": 0, "neutral": 1, "contradiction": 2})
    cfg._attn_implementation = "eager"
    model = BertForSequenceClassification(cfg).eval()
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    g = torch.Generator().manual_seed(6)
    n, T = 6, 12
    lengths = [12, 9, 12, 5, 10, 12]
    ids = torch.zeros(n, T, dtype=torch.long)
    att = torch.zeros(n, T, dtype=torch.long)
    typ = torch.zeros(n, T, dtype=torch.long)
    labels = torch.randint(0, 3, (n,), generator=g)
    rows = []
    for i, ln in enumerate(lengths):
        body = torch.randint(4, 100, (ln,), generator=g)
        body[0] = 2  # a [CLS]-like first token
        ids[i, :ln] = body
        att[i, :ln] = 1
        typ[i, ln // 2:ln] = 1
        rows.append({"ids": ids[i].tolist(), "attention_mask": att[i].tolist(), "token_type_ids": typ[i].tolist(),
                     "label": int(labels[i])})
    with open(os.path.join(OUT, "data.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    cases = []
    base = None
    with torch.no_grad():
        for name, spec in MASKS:
            logits = model(input_ids=ids, attention_mask=att, token_type_ids=typ,
                           head_mask=hp_ref.parse_mask(spec, 2, 4)).logits.double()
            logp = torch.log_softmax(logits, -1)
            if base is None:
                base = logp
            loss = -logp[torch.arange(n), labels]
            acc = (logits.argmax(-1) == labels).double()
            kl = (base.exp() * (base - logp)).sum(-1)
            cases.append({"name": name, "mask": spec, "ablation": "zero",
                          "n_ablated": int((hp_ref.parse_mask(spec, 2, 4) == 0).sum()),
                          "loss": float(loss.mean()), "acc": float(acc.mean()), "kl": float(kl.mean()),
                          "n_tokens": n, "per_seq_loss": loss.tolist(), "per_seq_acc": acc.tolist(),
                          "per_seq_kl": kl.tolist(), "per_seq_tokens": [1] * n})
    ref = {"model": "bert-cls", "data": "data.jsonl", "n_seqs": n, "seq_len": T, "kind": "cls", "n_layers": 2,
           "n_heads": 4, "n_kv_heads": 4, "d_head": 8, "transformers": __import__("transformers").__version__,
           "cases": cases}
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    # test_reference.c reads outputs from here; class logits are checked through the metrics instead
    from safetensors.torch import save_file
    save_file({"labels": labels.to(torch.int32)}, os.path.join(OUT, "reference.safetensors"))
    print(f"wrote {OUT}: {len(cases)} cases; labels {labels.tolist()}; accuracy unmasked {cases[0]['acc']}")


if __name__ == "__main__":
    main()
