#!/usr/bin/env python3
"""Training sets for the gates studies of the shipped plans, apart from their held-out sets.

Gate training must never see the sequences a curve is evaluated on, so each
model gets fresh sequences from the same source as its held-out set:

- plans/data/default-train.npy: int32 [16, 128] from the default model's
  generator (tools/train_default.py's make_tables / generate), seed 3 (the
  model trained on seed 1's draws, models/default/heldout.npy is seed 2);
- plans/data/stories260K-train.npy: int32 [32, 128] sampled from the
  converted stories260K (tests/fixtures/stories260K) as tools/convert_stories.py
  sampled its data.npy (BOS first, temperature 1, multinomial), but with
  torch.Generator seed 4321 instead of 1234.

Both are deterministic. Each is checked to share no row with the held-out set.

    /work/venv/bin/python tools/gen_gate_data.py
"""
import os
import sys

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import train_default as td  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

DEFAULT_SEED, N_DEFAULT = 3, 16
STORIES_SEED, N_STORIES, STORIES_LEN = 4321, 32, 128


def check_disjoint(train, held, name):
    rows = {r.tobytes() for r in held}
    shared = sum(r.tobytes() in rows for r in train)
    assert shared == 0, f"{name}: {shared} training rows are held-out rows"


def main():
    out = os.path.join(REPO, "plans", "data")
    os.makedirs(out, exist_ok=True)

    tables = td.make_tables()
    ids, _, _ = td.generate(np.random.default_rng(DEFAULT_SEED), N_DEFAULT, *tables)
    ids = ids.astype(np.int32)
    check_disjoint(ids, np.load(os.path.join(REPO, "models", "default", "heldout.npy")), "default")
    np.save(os.path.join(out, "default-train.npy"), ids)
    print(f"default-train.npy: {ids.shape}, row 0 starts {ids[0, :12].tolist()}")

    torch.set_num_threads(1)
    model = LlamaForCausalLM.from_pretrained(os.path.join(REPO, "tests", "fixtures", "stories260K"),
                                             dtype=torch.float32, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(STORIES_SEED)
    seqs = torch.full((N_STORIES, 1), 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(STORIES_LEN - 1):
            logits = model(input_ids=seqs, use_cache=False).logits[:, -1].float()
            probs = torch.softmax(logits.double(), dim=-1)
            seqs = torch.cat([seqs, torch.multinomial(probs, 1, generator=g)], dim=1)
    ids = seqs.numpy().astype(np.int32)
    check_disjoint(ids, np.load(os.path.join(REPO, "tests", "fixtures", "stories260K", "data.npy")), "stories260K")
    np.save(os.path.join(out, "stories260K-train.npy"), ids)
    print(f"stories260K-train.npy: {ids.shape}, row 0 starts {ids[0, :12].tolist()}")


if __name__ == "__main__":
    main()
