"""Train headprune's embedded default model: a small GPT-2 on data with planted structure.

Writes models/default/: config.json + model.safetensors (Hugging Face GPT-2
layout, f32, tied embeddings), heldout.npy (int32 [32, 128], the held-out
set), training.json (settings, loss curve, every figure below) and README.md.

    /work/venv/bin/python tools/train_default.py                 # train + verify (~10-14 min, 2 cores)
    /work/venv/bin/python tools/train_default.py --verify-only   # re-verify models/default, rewrite README

Deterministic: fixed seeds, torch.use_deterministic_algorithms(True), 2 torch
threads; rerunning with the same library versions reproduces the weights.

Data generator (vocabulary V = 256, sequences of T = 128 tokens)
----------------------------------------------------------------
Two planted structures, mixed in every sequence:

1. A third-order log-linear Markov process. Token x[t+1] is drawn from

       p(x[t+1] = v | past)  ∝  exp(A[x[t], v] + B[x[t-1], v] + C[x[t-2], v])

   A (bigram), B (the token before the current one) and C (two before) are
   fixed random low-rank V x V tables (ranks 16, 8, 8; entry standard
   deviations 2.5, 2.5, 2.0), drawn once from seed 1234. The A term can be
   learned without attention (embedding -> unembedding); the B term needs the
   previous token's identity at position t (a previous-token head), the C term
   the token two back (a head attending to t-2). Terms whose position would be
   negative are left out; x[0] is uniform.

2. Repeated segments. Each sequence gets 0, 1, 2 or 3 copies (probabilities
   0.1, 0.3, 0.3, 0.3): a span x[s:s+L], L ~ U{10..30}, is repeated verbatim at
   x[d:d+L], s + L <= d; destination spans are disjoint, sources are ordinary
   Markov text (possibly an earlier copy). Generation runs left to right, so
   the Markov process continues from a copy's last tokens. Inside a copy the
   next token is the one that followed the current token's earlier
   occurrence: an induction head (attend to the token after an earlier
   occurrence of the current token, copy it) pays off, composed with a
   previous-token head that tells each key position which token preceded it.
   About 29 % of the tokens are copied.

Training batches are drawn fresh for every step (numpy generator seed 1, batch
by batch); the held-out set is 32 sequences from seed 2.

The "oracle" loss is the generator's own negative log-likelihood of the
held-out tokens when it knows where the copies are (0 for copied tokens,
-log p_Markov otherwise): a bound no model reaches, since a model has to
notice that a copy has started.

Verification (Hugging Face head_mask, eager attention, on the held-out set)
--------------------------------------------------------------------------
Baseline loss; loss with each head masked alone (the single-head sweep); loss
with each layer masked whole; loss with every "cheap" head (< 0.01 nats alone)
masked at once. Loss = mean next-token cross-entropy over positions 0..126 of
every sequence (what `headprune eval` computes). It is also split into copy
positions (x[t] and x[t+1] both inside the same copy: predictable by
induction) and the other positions.

Attention scores per head, averaged over the held-out set:
- previous-token score: attention probability on position t-1 (t >= 1);
- two-back score: attention probability on position t-2 (t >= 2);
- induction score: at copy positions t (x[t] = x[j], x[t+1] = x[j+1] for the
  source j), attention probability on j+1.
"""
import argparse
import json
import math
import os
import shutil
import time

# passive OpenMP waiting: with 2 threads on a busy 2-core machine, spinning
# threads slow each step down several-fold
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
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
RANK_A, RANK_B, RANK_C = 16, 8, 8
STD_A, STD_B, STD_C = 2.5, 2.5, 2.0
COPY_P = (0.1, 0.3, 0.3, 0.3)     # probability of 0, 1, 2, 3 copies per sequence
COPY_LEN = (10, 30)                # inclusive
N_HELDOUT = 32

N_LAYER, N_HEAD, N_EMBD = 4, 8, 128
BATCH, STEPS, WARMUP = 32, 1800, 150
DECAY_FRAC = 0.3                   # lr: warm-up, constant, linear decay over the last 30 %
LR, WD, BETAS, CLIP = 3e-3, 0.1, (0.9, 0.95), 1.0
CHEAP = 0.01                       # nats: a head "costs nothing" below this
SCORE_THRESHOLD = 0.3              # attention score that names a head's role in the README

# ---------------------------------------------------------------- generator


def make_tables():
    r = np.random.default_rng(TABLE_SEED)

    def lowrank(rank, std):
        u = r.standard_normal((V, rank))
        w = r.standard_normal((V, rank))
        m = u @ w.T
        return m * (std / m.std())

    return lowrank(RANK_A, STD_A), lowrank(RANK_B, STD_B), lowrank(RANK_C, STD_C)


def plan_copies(r):
    """List of (s, d, L) for one sequence: x[s:s+L] is repeated at x[d:d+L]
    (s + L <= d); destination spans are disjoint."""
    k = r.choice(len(COPY_P), p=COPY_P)
    copies = []
    tries = 0
    while len(copies) < k and tries < 200:
        tries += 1
        L = int(r.integers(COPY_LEN[0], COPY_LEN[1] + 1))
        d = int(r.integers(L, T - L + 1))          # room for a source before it
        s = int(r.integers(0, d - L + 1))
        if any(d < d2 + L2 and d2 < d + L for (_, d2, L2) in copies):
            continue
        copies.append((s, d, L))
    return copies


def generate(r, n, A, B, C):
    """n sequences [n, T] int64; the copy source index of each position ([n, T],
    -1 = sampled); the generator's log-prob of each token ([n, T], 0 for copied
    tokens)."""
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
        lg = A[x[:, t - 1]]
        if t >= 2:
            lg = lg + B[x[:, t - 2]]
        if t >= 3:
            lg = lg + C[x[:, t - 3]]
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
def token_losses(model, ids, head_mask=None):
    """Next-token cross-entropy [n, T-1] (float64) at positions 0..T-2."""
    logits = model(ids, head_mask=head_mask).logits.double()
    lp = torch.log_softmax(logits[:, :-1], -1)
    return -lp.gather(-1, ids[:, 1:, None])[..., 0]


def loss_of(model, ids, head_mask=None):
    return float(token_losses(model, ids, head_mask).mean())


def copy_positions(src):
    """Positions t (per sequence) where x[t] and x[t+1] are inside the same copy:
    boolean [n, T-1], and the source position j+1 of x[t+1] there."""
    both = (src[:, :-1] >= 0) & (src[:, 1:] == src[:, :-1] + 1)
    return both, src[:, 1:]


@torch.no_grad()
def attention_scores(model, ids, src):
    """Per head [n_layer, n_head]: previous-token, two-back and induction scores."""
    att = torch.stack(model(ids, output_attentions=True).attentions).double()  # [Ly, n, H, T, T]
    t1, t2 = torch.arange(1, T), torch.arange(2, T)
    prev = att[:, :, :, t1, t1 - 1].mean(dim=(1, 3))
    prev2 = att[:, :, :, t2, t2 - 2].mean(dim=(1, 3))
    both, target = copy_positions(src)
    n_idx, t_idx = np.nonzero(both)
    s_idx = target[n_idx, t_idx]
    n_idx, t_idx, s_idx = (torch.from_numpy(a.astype(np.int64)) for a in (n_idx, t_idx, s_idx))
    ind = att[:, n_idx, :, t_idx, s_idx].mean(0)          # [n_pos, Ly, H] -> [Ly, H]
    return prev.numpy(), prev2.numpy(), ind.numpy(), int(len(n_idx))


def gate(spec_heads):
    m = torch.ones(N_LAYER, N_HEAD)
    for l, h in spec_heads:
        m[l, h] = 0
    return m


def verify(model, ho_ids, ho_src):
    """Every figure of the README, as a dict (plain Python types)."""
    ids = torch.from_numpy(ho_ids.astype(np.int64))
    both, _ = copy_positions(ho_src)
    both = torch.from_numpy(both)
    Ly, H = N_LAYER, N_HEAD
    heads = [(l, h) for l in range(Ly) for h in range(H)]

    def split(tl):
        return dict(loss=float(tl.mean()), copy=float(tl[both].mean()), other=float(tl[~both].mean()))

    base = split(token_losses(model, ids))
    single = {f"{l}.{h}": split(token_losses(model, ids, gate([(l, h)]))) for l, h in heads}
    layer = {f"{l}.*": split(token_losses(model, ids, gate([(l, h) for h in range(H)]))) for l in range(Ly)}
    delta = np.array([[single[f"{l}.{h}"]["loss"] - base["loss"] for h in range(H)] for l in range(Ly)])
    cheap = [(l, h) for l, h in heads if delta[l, h] < CHEAP]
    costly = [(l, h) for l, h in heads if delta[l, h] >= 0.1]
    together = {
        "cheap": split(token_losses(model, ids, gate(cheap))),        # every cheap head masked at once
        "keep_costly": split(token_losses(model, ids, gate([x for x in heads if x not in costly]))),
    }
    prev, prev2, ind, n_ind = attention_scores(model, ids, ho_src)
    return dict(baseline=base, single=single, layer=layer, delta=delta.tolist(),
                cheap=[f"{l}.{h}" for l, h in cheap], costly=[f"{l}.{h}" for l, h in costly],
                together=together, prev=prev.tolist(), prev2=prev2.tolist(), induction=ind.tolist(),
                n_copy_positions=n_ind, copy_share=float(both.double().mean()))


def roles(v):
    """Heads named by their attention score (>= SCORE_THRESHOLD)."""
    out = {}
    for key, name in (("prev", "previous-token"), ("prev2", "two-back"), ("induction", "induction")):
        m = np.array(v[key])
        out[name] = [f"{l}.{h}" for l in range(m.shape[0]) for h in range(m.shape[1])
                     if m[l, h] >= SCORE_THRESHOLD]
    return out


def print_figures(v, info):
    Ly, H = N_LAYER, N_HEAD
    delta = np.array(v["delta"])
    b = v["baseline"]
    print(f"\nheld-out baseline loss {b['loss']:.4f} (copy positions {b['copy']:.4f}, others "
          f"{b['other']:.4f}); oracle {info['oracle_loss']:.4f}; final train loss {info['train_loss']:.4f}")
    for title, m, f in (("single-head ablation, loss increase (nats)", delta, "{:+.4f}"),
                        ("previous-token score", np.array(v["prev"]), "{:.2f}"),
                        ("two-back score", np.array(v["prev2"]), "{:.2f}"),
                        (f"induction score ({v['n_copy_positions']} copy positions)",
                         np.array(v["induction"]), "{:.2f}")):
        print(title + ":")
        for l in range(Ly):
            print(f"  L{l}: " + " ".join(f.format(m[l, h]) for h in range(H)))
    order = sorted(((delta[l, h], l, h) for l in range(Ly) for h in range(H)), reverse=True)
    print("top heads:", ", ".join(f"{l}.{h} {d:+.4f}" for d, l, h in order[:8]))
    print(f"heads costing < {CHEAP} nats alone: {len(v['cheap'])} of {Ly * H}; all of them masked at once: "
          f"loss {v['together']['cheap']['loss']:.4f}")
    print(f"keep only the heads costing >= 0.1 ({', '.join(v['costly'])}): "
          f"loss {v['together']['keep_costly']['loss']:.4f}")
    print("whole-layer ablation:", ", ".join(f"L{l} {v['layer'][f'{l}.*']['loss']:.4f}" for l in range(Ly)))
    for name, hs in roles(v).items():
        print(f"{name} heads: {', '.join(hs) or 'none'}")


# ---------------------------------------------------------------- training


def make_config():
    return GPT2Config(vocab_size=V, n_positions=T, n_embd=N_EMBD, n_layer=N_LAYER, n_head=N_HEAD,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                      bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)


def train(steps, tables, ho_ids, ho_src):
    A, B, C = tables
    torch.manual_seed(INIT_SEED)
    cfg = make_config()
    # train with SDPA (faster on CPU); verify with eager attention (head_mask, attentions)
    model = GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
    monitor = GPT2LMHeadModel._from_config(cfg, attn_implementation="eager")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: GPT-2 {N_LAYER} layers x {N_HEAD} heads, d {N_EMBD}, {n_params} parameters")

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS)

    def lr_at(step):
        if step < WARMUP:
            return LR * (step + 1) / WARMUP
        start = int(steps * (1 - DECAY_FRAC))
        if step < start:
            return LR
        return LR * (1 - 0.95 * (step - start) / max(1, steps - 1 - start))

    r = np.random.default_rng(TRAIN_SEED)
    ho = torch.from_numpy(ho_ids.astype(np.int64))
    recent, curve = [], []
    t_train = time.time()
    for step in range(steps):
        x, _, _ = generate(r, BATCH, A, B, C)
        ids = torch.from_numpy(x)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        model.train()
        out = model(ids, labels=ids)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        recent.append(out.loss.item())
        recent = recent[-100:]
        if step % 250 == 0 or step == steps - 1:
            model.eval()
            monitor.load_state_dict(model.state_dict())
            prev, prev2, ind, _ = attention_scores(monitor.eval(), ho, ho_src)
            ho_loss = loss_of(model, ho)
            curve.append(dict(step=step, train=float(np.mean(recent)), heldout=ho_loss,
                              max_prev=float(prev.max()), max_prev2=float(prev2.max()),
                              max_induction=float(ind.max())))
            print(f"step {step:5d}  lr {lr_at(step):.2e}  train {np.mean(recent):.4f}  held-out {ho_loss:.4f}  "
                  f"max score: prev {prev.max():.2f} two-back {prev2.max():.2f} induction {ind.max():.2f}  "
                  f"({time.time() - t_train:.0f} s)", flush=True)
    eager = GPT2LMHeadModel._from_config(cfg, attn_implementation="eager")
    eager.load_state_dict(model.state_dict())
    info = dict(steps=steps, train_time_s=round(time.time() - t_train), train_loss=float(np.mean(recent)),
                n_params=n_params, curve=curve, torch=torch.__version__,
                transformers=transformers.__version__, numpy=np.__version__)
    return eager.eval(), info


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--verify-only", action="store_true",
                    help="load the model in --out, re-run the verification, rewrite training.json and README.md")
    args = ap.parse_args()

    t0 = time.time()
    tables = make_tables()
    ho_ids, ho_src, ho_logp = generate(np.random.default_rng(HELDOUT_SEED), N_HELDOUT, *tables)
    ho_ids = ho_ids.astype(np.int32)
    oracle = float(-ho_logp[:, 1:].mean())
    print(f"held-out: {N_HELDOUT} x {T}, copied tokens {100 * (ho_src[:, 1:] >= 0).mean():.1f}%, "
          f"oracle loss {oracle:.4f} nats")

    if args.verify_only:
        with open(os.path.join(args.out, "training.json")) as f:
            info = json.load(f)["training"]
        saved = np.load(os.path.join(args.out, "heldout.npy"))
        assert saved.dtype == np.int32 and np.array_equal(saved, ho_ids), "heldout.npy is not the generator's"
        model = GPT2LMHeadModel.from_pretrained(args.out, attn_implementation="eager", dtype=torch.float32).eval()
    else:
        model, info = train(args.steps, tables, ho_ids, ho_src)
        if os.path.isdir(args.out):
            shutil.rmtree(args.out)
        os.makedirs(args.out)
        model.save_pretrained(args.out, safe_serialization=True)
        gc = os.path.join(args.out, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
        np.save(os.path.join(args.out, "heldout.npy"), ho_ids)
        # the saved directory must reproduce the in-memory model exactly
        re = GPT2LMHeadModel.from_pretrained(args.out, attn_implementation="eager", dtype=torch.float32).eval()
        ids = torch.from_numpy(np.load(os.path.join(args.out, "heldout.npy")).astype(np.int64))
        assert torch.equal(token_losses(re, ids), token_losses(model, ids)), "reloaded model differs"
    info["oracle_loss"] = oracle
    info["copied_pct"] = float(100 * (ho_src[:, 1:] >= 0).mean())

    t_v = time.time()
    v = verify(model, ho_ids, ho_src)
    info["verify_time_s"] = round(time.time() - t_v, 1)
    print_figures(v, info)
    print(f"training time {info['train_time_s']} s, verification {info['verify_time_s']} s, "
          f"total {time.time() - t0:.0f} s")
    settings = dict(V=V, T=T, table_seed=TABLE_SEED, train_seed=TRAIN_SEED, heldout_seed=HELDOUT_SEED,
                    init_seed=INIT_SEED, ranks=[RANK_A, RANK_B, RANK_C], stds=[STD_A, STD_B, STD_C],
                    copy_p=list(COPY_P), copy_len=list(COPY_LEN), n_heldout=N_HELDOUT,
                    n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, batch=BATCH, warmup=WARMUP,
                    decay_frac=DECAY_FRAC, lr=LR, weight_decay=WD, betas=list(BETAS), clip=CLIP)
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(dict(settings=settings, training=info, verification=v), f, indent=1)
        f.write("\n")
    write_readme(args.out, v, info)
    for f in os.listdir(args.out):      # save_pretrained writes 0600
        os.chmod(os.path.join(args.out, f), 0o644)


def write_readme(out, v, info):
    Ly, H = N_LAYER, N_HEAD
    delta = np.array(v["delta"])
    prev, prev2, ind = np.array(v["prev"]), np.array(v["prev2"]), np.array(v["induction"])
    b = v["baseline"]
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)
               if f != "README.md")
    named = roles(v)

    def table(m, f):
        rows = ["| layer | " + " | ".join(f"h{h}" for h in range(H)) + " |",
                "|---|" + "---:|" * H]
        rows += [f"| {l} | " + " | ".join(f(m[l, h]) for h in range(H)) + " |" for l in range(Ly)]
        return "\n".join(rows)

    def role_of(l, h):
        r = [name for name, hs in named.items() if f"{l}.{h}" in hs]
        return ", ".join(r) or "—"

    order = sorted(((delta[l, h], l, h) for l in range(Ly) for h in range(H)), reverse=True)
    top = "\n".join(
        f"| {l}.{h} | {d:+.4f} | {v['single'][f'{l}.{h}']['copy'] - b['copy']:+.4f} | "
        f"{v['single'][f'{l}.{h}']['other'] - b['other']:+.4f} | {prev[l, h]:.2f} | {prev2[l, h]:.2f} | "
        f"{ind[l, h]:.2f} | {role_of(l, h)} |" for d, l, h in order[:6])
    layers = "\n".join(
        f"| `{k}` | {x['loss']:.4f} | {x['loss'] - b['loss']:+.4f} | {x['copy']:.4f} | {x['other']:.4f} |"
        for k, x in v["layer"].items())
    tc, tk = v["together"]["cheap"], v["together"]["keep_costly"]
    fmt = lambda hs: ", ".join(hs) or "none"  # noqa: E731
    text = f"""# models/default — headprune's embedded default model

A small GPT-2 (Hugging Face `GPT2LMHeadModel` layout, f32 safetensors, tied
embeddings) trained from scratch by `tools/train_default.py` on synthetic
token data with planted structure, so that a head sweep has something to find:
a few specialised heads whose removal hurts, and many redundant ones.

| file | what |
|---|---|
| `config.json`, `model.safetensors` | the model: {N_LAYER} layers × {N_HEAD} heads, d_model {N_EMBD} (d_head {N_EMBD // N_HEAD}), MLP {4 * N_EMBD}, vocab {V}, n_positions {T}, {info['n_params']:,} parameters |
| `heldout.npy` | held-out set, int32 `[{N_HELDOUT}, {T}]`: same generator, another seed |
| `training.json` | settings, loss curve, and every figure below (machine-readable) |

Size on disk (without this README): {size / 1e6:.2f} MB.

## Regenerate

From the repository root, with the Python environment of `tools/README.md`:

    /work/venv/bin/python tools/train_default.py                # train, verify, write this directory
    /work/venv/bin/python tools/train_default.py --verify-only  # re-verify the committed model, rewrite README/training.json

Deterministic (fixed seeds, `torch.use_deterministic_algorithms`, 2 torch
threads): the same library versions give the same weights. This run:
{info['steps']} steps in {info['train_time_s']} s on 2 cores shared with other jobs (about
0.3 s a step on an idle machine), torch {info['torch']}, transformers
{info['transformers']}, numpy {info['numpy']}.

## Data

Vocabulary {V}, sequences of {T} tokens. Two planted structures:

1. **Markov process over the last three tokens**:
   `p(x[t+1] = v | past) ∝ exp(A[x[t], v] + B[x[t-1], v] + C[x[t-2], v])`.
   A (bigram), B (the token before the current one) and C (two before) are
   fixed random low-rank tables (ranks {RANK_A}, {RANK_B}, {RANK_C}; entry std
   {STD_A}, {STD_B}, {STD_C}; seed {TABLE_SEED}). A needs no attention; B needs the previous
   token at position t (a previous-token head), C the token two back.
2. **Repeated segments**: each sequence holds 0–{len(COPY_P) - 1} copies (p = {", ".join(map(str, COPY_P))})
   of an earlier span of {COPY_LEN[0]}–{COPY_LEN[1]} tokens, pasted verbatim later in the same
   sequence; the Markov process continues after it. Inside a copy the next
   token is the one that followed the current token's earlier occurrence: an
   induction mechanism pays off.

Training batches are drawn fresh each step (seed {TRAIN_SEED}); the held-out set is
{N_HELDOUT} sequences from seed {HELDOUT_SEED}. {info['copied_pct']:.1f} % of its tokens are copied; {100 * v['copy_share']:.1f} %
of the predicted positions are *copy positions* (current and next token inside
the same copy, so the next token is predictable by induction).

## Training

AdamW (lr {LR}, betas {BETAS}, weight decay {WD} on matrices), {WARMUP} warm-up
steps, constant, then linear decay to 5 % over the last {int(100 * DECAY_FRAC)} %; batch {BATCH} × {T}
tokens, {info['steps']} steps ({info['steps'] * BATCH * T / 1e6:.1f} M tokens), gradient clipping {CLIP}, no
dropout, initialisation seed {INIT_SEED}.

| loss (nats/token) | all | copy positions | other |
|---|---:|---:|---:|
| train (mean of the last 100 steps) | {info['train_loss']:.4f} | | |
| held-out, unmasked (baseline) | {b['loss']:.4f} | {b['copy']:.4f} | {b['other']:.4f} |
| generator oracle on held-out (knows where copies are) | {info['oracle_loss']:.4f} | | |
| uniform guess | {math.log(V):.4f} | | |

## Head ablation

Hugging Face `head_mask` (zero ablation), eager attention, on `heldout.npy`;
loss = mean next-token cross-entropy over positions 0..{T - 2} of the {N_HELDOUT}
sequences, as `headprune eval` computes it. Verification took {info['verify_time_s']} s in
PyTorch (baseline, {Ly * H} single heads, {Ly} layers, 2 combined masks).

Loss increase when one head is masked alone (nats):

{table(delta, lambda x: f"{x:+.4f}")}

**{len(v['cheap'])} of {Ly * H} heads cost less than {CHEAP} nats when removed alone; {len(v['costly'])}
cost more than 0.1 ({fmt(v['costly'])}).** Top heads (increase overall, on copy positions, on the
other positions; attention scores below):

| head | Δ loss | Δ copy | Δ other | prev-token | two-back | induction | role |
|---|---:|---:|---:|---:|---:|---:|---|
{top}

Whole layer masked:

| mask | loss | increase | copy positions | other |
|---|---:|---:|---:|---:|
{layers}

Redundancy is collective, not total: masking all {len(v['cheap'])} cheap heads at once
gives loss {tc['loss']:.4f} ({tc['loss'] - b['loss']:+.4f}); keeping only the {len(v['costly'])} heads that cost
more than 0.1 ({fmt(v['costly'])}) and masking the other {Ly * H - len(v['costly'])} gives {tk['loss']:.4f}
({tk['loss'] - b['loss']:+.4f}).

## What the heads do

Attention scores, averaged over the held-out set: **previous-token** =
probability on position t−1; **two-back** = on t−2; **induction** = at the
{v['n_copy_positions']} copy positions, on the position after the earlier occurrence
of the current token (the source of the next token).

Previous-token score:

{table(prev, lambda x: f"{x:.2f}")}

Two-back score:

{table(prev2, lambda x: f"{x:.2f}")}

Induction score:

{table(ind, lambda x: f"{x:.2f}")}

Heads with a score ≥ {SCORE_THRESHOLD}:

- previous-token heads: {fmt(named['previous-token'])}
- two-back heads: {fmt(named['two-back'])}
- induction heads: {fmt(named['induction'])}
"""
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
