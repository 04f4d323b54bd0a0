"""Train headprune's embedded default model: a small GPT-2 on data with planted structure.

Writes models/default/: config.json + model.safetensors (Hugging Face GPT-2
layout, f32, tied embeddings), heldout.npy (int32 [32, 128]) and README.md
(the figures of the run). Deterministic: fixed seeds, torch deterministic
algorithms, 2 torch threads; rerunning with the same library versions and
thread count reproduces the same weights.

    /work/venv/bin/python tools/train_default.py            # ~10 min on 2 cores

Data generator (vocabulary V = 256, sequences of T = 128 tokens)
----------------------------------------------------------------
Two planted structures, mixed in every sequence:

1. A second-order log-linear Markov process. Token x[t+1] is drawn from

       p(x[t+1] = v | x[t], x[t-1])  ∝  exp(A[x[t], v] + B[x[t-1], v])

   A (the bigram term) and B (the skip-bigram term, from the token *before* the
   current one) are fixed random low-rank tables (rank 16 and 8, entries of
   standard deviation 2.5 and 2.5), drawn once from seed 1234. The A term can
   be learned without attention (embedding -> unembedding); the B term needs
   the previous token's identity at position t: a previous-token head. For
   x[1] the B term is absent; x[0] is uniform.

2. Repeated segments. Each sequence gets 0, 1 or 2 copies (probabilities 0.2,
   0.4, 0.4): a span of L ~ U{8..24} tokens already generated earlier in the
   sequence, starting at s, is repeated verbatim at destination d >= s + L
   (destination spans never overlap). Generation runs left to right, so the
   Markov process continues from the copy's last tokens. Inside a copy, x[d+i]
   for i >= 1 is determined by the earlier occurrence: an induction head
   (attend to the token after an earlier occurrence of the current token, copy
   it) pays off; with a previous-token head supplying "which token preceded
   me" at each key position.

Training data are drawn fresh for every step from generator seed 1 (one numpy
Generator, batch by batch); the held-out set is 32 sequences from seed 2.

The "oracle" loss printed is the generator's own negative log-likelihood of the
held-out tokens when it knows where the copies are (0 for copied tokens,
-log p_Markov otherwise): a lower bound no model reaches exactly, since a model
has to infer that a copy has started.

Verification (Hugging Face head_mask, eager attention, on the held-out set)
--------------------------------------------------------------------------
Baseline loss; loss with each head masked alone; loss with each layer masked
whole. Loss = mean next-token cross-entropy over positions 0..126 of every
sequence (headprune's definition). Previous-token score of a head = mean
attention probability on position t-1 (t >= 1); induction score = mean
attention probability, at positions d+i (i >= 1) inside a copy, on the source
position s+i (the token after the earlier occurrence of the current token).
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

transformers.logging.set_verbosity_error()
torch.set_num_threads(2)
torch.use_deterministic_algorithms(True)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "models", "default")

# ---------------------------------------------------------------- settings

V, T = 256, 128
TABLE_SEED, TRAIN_SEED, HELDOUT_SEED, INIT_SEED = 1234, 1, 2, 0
RANK_A, RANK_B, STD_A, STD_B = 16, 8, 2.5, 2.5
COPY_P = (0.2, 0.4, 0.4)          # probability of 0, 1, 2 copies per sequence
COPY_LEN = (8, 24)                 # inclusive
N_HELDOUT = 32

N_LAYER, N_HEAD, N_EMBD = 4, 8, 128
BATCH, STEPS, WARMUP = 32, 3000, 150
LR, WD, BETAS = 2e-3, 0.1, (0.9, 0.95)
ATTN_PDROP = 0.0
PREV_THRESHOLD, IND_THRESHOLD = 0.5, 0.3    # for naming heads in the README

# ---------------------------------------------------------------- generator


def make_tables():
    r = np.random.default_rng(TABLE_SEED)

    def lowrank(rank, std):
        u = r.standard_normal((V, rank))
        w = r.standard_normal((V, rank))
        m = u @ w.T
        return m * (std / m.std())

    return lowrank(RANK_A, STD_A), lowrank(RANK_B, STD_B)


def plan_copies(r):
    """List of (s, d, L) for one sequence: copy x[s:s+L] to x[d:d+L]."""
    k = r.choice(3, p=COPY_P)
    copies = []
    tries = 0
    while len(copies) < k and tries < 100:
        tries += 1
        L = int(r.integers(COPY_LEN[0], COPY_LEN[1] + 1))
        d = int(r.integers(L, T - L + 1))          # room for a source before it
        s = int(r.integers(0, d - L + 1))
        if any(not (d + L <= d2 or d2 + L2 <= d) for (_, d2, L2) in copies):
            continue
        copies.append((s, d, L))
    return copies


def generate(r, n, A, B):
    """n sequences [n, T] int64, copy source index per position ([n, T], -1 = sampled),
    and the Markov log-prob of each sampled token ([n, T], 0 for copied ones)."""
    src = np.full((n, T), -1, dtype=np.int64)
    for i in range(n):
        for (s, d, L) in plan_copies(r):
            src[i, d:d + L] = np.arange(s, s + L)
    x = np.zeros((n, T), dtype=np.int64)
    logp = np.zeros((n, T))
    x[:, 0] = r.integers(0, V, n)
    logp[:, 0] = -math.log(V)
    rows = np.arange(n)
    for t in range(1, T):
        lg = A[x[:, t - 1]] + (B[x[:, t - 2]] if t >= 2 else 0.0)
        lg = lg - lg.max(1, keepdims=True)
        p = np.exp(lg)
        p /= p.sum(1, keepdims=True)
        u = r.random(n)
        v = np.minimum((p.cumsum(1) < u[:, None]).sum(1), V - 1)
        copied = src[:, t] >= 0
        v = np.where(copied, x[rows, np.maximum(src[:, t], 0)], v)
        x[:, t] = v
        logp[:, t] = np.where(copied, 0.0, np.log(p[rows, v]))
    return x, src, logp


# ---------------------------------------------------------------- evaluation


@torch.no_grad()
def loss_of(model, ids, head_mask=None):
    logits = model(ids, head_mask=head_mask).logits.double()
    lp = torch.log_softmax(logits[:, :-1], -1)
    return float(-lp.gather(-1, ids[:, 1:, None]).mean())


@torch.no_grad()
def attention_scores(model, ids, src):
    """Per head: previous-token score and induction score, each [n_layer, n_head]."""
    att = model(ids, output_attentions=True).attentions   # n_layer x [n, H, T, T]
    att = torch.stack(att).double()                         # [Ly, n, H, T, T]
    t = torch.arange(1, T)
    prev = att[:, :, :, t, t - 1].mean(dim=(1, 3))          # [Ly, H]
    # induction: inside a copy (not its first token), attention on the source position
    n_idx, t_idx = [], []
    s_idx = []
    for i in range(src.shape[0]):
        for tt in range(1, T):
            if src[i, tt] >= 0 and src[i, tt - 1] >= 0:
                n_idx.append(i)
                t_idx.append(tt)
                s_idx.append(int(src[i, tt]))
    n_idx, t_idx, s_idx = map(torch.tensor, (n_idx, t_idx, s_idx))
    ind = att[:, n_idx, :, t_idx, s_idx]                    # [n_pos, Ly, H]
    return prev, ind.mean(0), len(n_idx)


def sweep(model, ids):
    Ly, H = model.config.n_layer, model.config.n_head
    base = loss_of(model, ids)
    single = np.zeros((Ly, H))
    for l in range(Ly):
        for h in range(H):
            m = torch.ones(Ly, H)
            m[l, h] = 0
            single[l, h] = loss_of(model, ids, m)
    layer = np.zeros(Ly)
    for l in range(Ly):
        m = torch.ones(Ly, H)
        m[l] = 0
        layer[l] = loss_of(model, ids, m)
    return base, single, layer


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    t0 = time.time()
    A, B = make_tables()
    ho_ids, ho_src, ho_logp = generate(np.random.default_rng(HELDOUT_SEED), N_HELDOUT, A, B)
    oracle = float(-ho_logp[:, 1:].mean())
    markov_only = ho_src < 0
    print(f"held-out: {N_HELDOUT} x {T}, copied tokens {100 * (1 - markov_only[:, 1:].mean()):.1f}%, "
          f"oracle loss {oracle:.4f} nats")

    torch.manual_seed(INIT_SEED)
    cfg = GPT2Config(vocab_size=V, n_positions=T, n_embd=N_EMBD, n_layer=N_LAYER, n_head=N_HEAD,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=ATTN_PDROP,
                     bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)
    # train with SDPA (faster on CPU); verify with eager attention (head_mask, attentions)
    model = GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: GPT-2 {N_LAYER} layers x {N_HEAD} heads, d {N_EMBD}, {n_params} parameters")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS)

    def lr_at(step):
        if step < WARMUP:
            return LR * (step + 1) / WARMUP
        f = (step - WARMUP) / max(1, args.steps - WARMUP)
        return LR * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * f)))

    r = np.random.default_rng(TRAIN_SEED)
    ho = torch.from_numpy(ho_ids)
    recent = []
    t_train = time.time()
    for step in range(args.steps):
        x, _, _ = generate(r, BATCH, A, B)
        ids = torch.from_numpy(x)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        model.train()
        out = model(ids, labels=ids)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent.append(out.loss.item())
        recent = recent[-100:]
        if step % 250 == 0 or step == args.steps - 1:
            model.eval()
            print(f"step {step:5d}  lr {lr_at(step):.2e}  train {np.mean(recent):.4f}  "
                  f"held-out {loss_of(model, ho):.4f}  ({time.time() - t_train:.0f} s)", flush=True)
    train_time = time.time() - t_train
    train_loss = float(np.mean(recent))
    eager = GPT2LMHeadModel._from_config(cfg, attn_implementation="eager")
    eager.load_state_dict(model.state_dict())
    model = eager.eval()

    # ---- verification
    base, single, layer = sweep(model, ho)
    prev, ind, n_ind = attention_scores(model, ho, ho_src)
    Ly, H = N_LAYER, N_HEAD
    delta = single - base
    order = sorted(((delta[l, h], l, h) for l in range(Ly) for h in range(H)), reverse=True)
    cheap = int((delta < 0.01).sum())
    print(f"\nbaseline held-out loss {base:.4f} (oracle {oracle:.4f}), final train loss {train_loss:.4f}")
    print("single-head ablation, loss increase (nats), rows = layers:")
    for l in range(Ly):
        print(f"  L{l}: " + " ".join(f"{delta[l, h]:+.4f}" for h in range(H)))
    print("previous-token score:")
    for l in range(Ly):
        print(f"  L{l}: " + " ".join(f"{prev[l, h]:.2f}" for h in range(H)))
    print(f"induction score ({n_ind} positions):")
    for l in range(Ly):
        print(f"  L{l}: " + " ".join(f"{ind[l, h]:.2f}" for h in range(H)))
    print("top heads:", ", ".join(f"{l}.{h} {d:+.4f}" for d, l, h in order[:8]))
    print(f"heads costing < 0.01 nats alone: {cheap} of {Ly * H}")
    print("whole-layer ablation:", ", ".join(f"L{l} {layer[l]:.4f}" for l in range(Ly)))
    print(f"training time {train_time:.0f} s, total {time.time() - t0:.0f} s")

    # ---- save
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    model.save_pretrained(args.out, safe_serialization=True)
    gc = os.path.join(args.out, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    np.save(os.path.join(args.out, "heldout.npy"), ho_ids.astype(np.int32))
    # reload check: the saved directory reproduces the baseline
    re = GPT2LMHeadModel.from_pretrained(args.out, attn_implementation="eager", dtype=torch.float32).eval()
    base2 = loss_of(re, torch.from_numpy(np.load(os.path.join(args.out, "heldout.npy")).astype(np.int64)))
    assert abs(base2 - base) < 1e-9, (base, base2)

    summary = dict(copied_pct=100 * (1 - markov_only[:, 1:].mean()), n_params=n_params, train_time_s=round(train_time), train_loss=train_loss,
                   heldout_loss=base, oracle_loss=oracle, single=delta.tolist(),
                   layer=layer.tolist(), prev=prev.tolist(), induction=ind.tolist(),
                   n_induction_positions=n_ind, cheap=cheap, steps=args.steps)
    json.dump(summary, open(os.path.join("/tmp", "train_default_summary.json"), "w"), indent=1)
    write_readme(args.out, summary, order)


def classify(s):
    """Heads whose previous-token / induction score stands out."""
    prev, ind = np.array(s["prev"]), np.array(s["induction"])
    Ly, H = prev.shape
    pt = [(l, h) for l in range(Ly) for h in range(H) if prev[l, h] >= PREV_THRESHOLD]
    it = [(l, h) for l in range(Ly) for h in range(H) if ind[l, h] >= IND_THRESHOLD]
    return pt, it


def write_readme(out, s, order):
    delta, prev, ind = np.array(s["single"]), np.array(s["prev"]), np.array(s["induction"])
    Ly, H = delta.shape
    pt, it = classify(s)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    fmt_heads = lambda hs: ", ".join(f"{l}.{h}" for l, h in hs) or "none"  # noqa: E731

    def table(m, f):
        rows = ["| layer | " + " | ".join(f"h{h}" for h in range(H)) + " |",
                "|---|" + "---|" * H]
        for l in range(Ly):
            rows.append(f"| {l} | " + " | ".join(f(m[l, h]) for h in range(H)) + " |")
        return "\n".join(rows)

    top = "\n".join(f"| {l}.{h} | {d:+.4f} | {prev[l, h]:.2f} | {ind[l, h]:.2f} |"
                     for d, l, h in order[:8])
    layers = "\n".join(f"| {l}.* | {x:.4f} | {x - s['heldout_loss']:+.4f} |"
                        for l, x in enumerate(s["layer"]))
    text = f"""# models/default — headprune's embedded default model

A small GPT-2 (Hugging Face `GPT2LMHeadModel` layout, f32 safetensors, tied
embeddings) trained from scratch by `tools/train_default.py` on synthetic
token data with planted structure, so that a head sweep has something to find:
a few specialised heads whose removal hurts, and many redundant ones.

| file | what |
|---|---|
| `config.json`, `model.safetensors` | the model: {N_LAYER} layers x {N_HEAD} heads, d_model {N_EMBD} (d_head {N_EMBD // N_HEAD}), MLP {4 * N_EMBD}, vocab {V}, n_positions {T}, {s['n_params']:,} parameters |
| `heldout.npy` | held-out set, int32 `[{N_HELDOUT}, {T}]`, same generator, another seed |

Directory size: {size / 1e6:.2f} MB.

## Regenerate

From the repository root, with the Python environment of `tools/README.md`:

    /work/venv/bin/python tools/train_default.py

Deterministic (fixed seeds, `torch.use_deterministic_algorithms`, 2 torch
threads). This run: {s['steps']} steps, {s['train_time_s']} s of training on 2 cores
(torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}).
The script prints every figure below and rewrites this file.

## Data

Vocabulary {V}, sequences of {T} tokens. Two planted structures:

1. **Second-order log-linear Markov process**:
   `p(x[t+1] = v | x[t], x[t-1]) ∝ exp(A[x[t], v] + B[x[t-1], v])`, with A
   (bigram) and B (skip-bigram: the token *before* the current one) fixed random
   low-rank tables (rank {RANK_A} and {RANK_B}, entry std {STD_A} and {STD_B}, seed
   {TABLE_SEED}). The B term needs the previous token at position t: a
   previous-token head.
2. **Repeated segments**: each sequence holds 0, 1 or 2 copies (p = {COPY_P[0]},
   {COPY_P[1]}, {COPY_P[2]}) of an earlier span of {COPY_LEN[0]}–{COPY_LEN[1]} tokens, pasted
   verbatim later in the same sequence (the Markov process continues after
   it). Inside a copy the next token is the one that followed the current
   token's earlier occurrence: an induction mechanism pays off.

Training batches are drawn fresh each step (seed {TRAIN_SEED}); the held-out set
is {N_HELDOUT} sequences from seed {HELDOUT_SEED} ({s['copied_pct']:.1f} % of its predicted
tokens are inside copies).

## Training

AdamW (lr {LR}, betas {BETAS}, weight decay {WD} on matrices), {WARMUP} warm-up
steps then cosine decay to 5 %, batch {BATCH} x {T} tokens, {s['steps']} steps, gradient
clipping 1.0, no dropout, initialisation seed {INIT_SEED}.

| | loss (nats/token) |
|---|---|
| train (mean of the last 100 steps) | {s['train_loss']:.4f} |
| held-out (baseline, unmasked) | {s['heldout_loss']:.4f} |
| generator oracle on held-out (knows where copies are) | {s['oracle_loss']:.4f} |
| uniform guess | {math.log(V):.4f} |

## Head ablation (Hugging Face `head_mask`, eager attention, held-out set)

Loss = mean next-token cross-entropy over positions 0..{T - 2} of the {N_HELDOUT}
sequences, the definition `headprune eval` uses; zero ablation (`head_mask`).

Loss increase when a single head is masked alone (nats):

{table(delta, lambda x: f"{x:+.4f}")}

**{s['cheap']} of {Ly * H} heads cost less than 0.01 nats when removed alone.** Top heads:

| head | loss increase | prev-token score | induction score |
|---|---|---|---|
{top}

Whole layer masked:

| mask | loss | increase |
|---|---|---|
{layers}

## What the heads do

Previous-token score: mean attention probability on position t−1. Induction
score: mean attention probability, at positions inside a copy (after its first
token; {s['n_induction_positions']} positions), on the source position — the token after the
earlier occurrence of the current token.

Previous-token score:

{table(prev, lambda x: f"{x:.2f}")}

Induction score:

{table(ind, lambda x: f"{x:.2f}")}

- previous-token heads (score >= {PREV_THRESHOLD}): {fmt_heads(pt)}
- induction heads (score >= {IND_THRESHOLD}): {fmt_heads(it)}
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
