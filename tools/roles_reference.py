#!/usr/bin/env python3
"""Reference head roles for headprune's fixtures, in float64, from Hugging Face's attentions.

For every fixture model under tests/fixtures (GPT-2, BERT, Llama/Qwen2 with GQA) and the
default model (models/default) this loads the model with transformers (eager attention,
float64, output_attentions=True), runs its held-out data and the induction probe, and
computes every score of docs/roles.md from the attention probabilities, written here
independently of engine/analysis/roles.c: each role is a 0/1 target matrix over (query, key), each
score a masked sum over queries divided by the number of queries that qualify. Writes
tests/fixtures/roles/<name>.json, which tests/test_roles.c compares the C engine with.

Also, for the GPT-2 models, TransformerLens's head detector (transformer_lens.head_detector,
its "mul" score) on the same tokens: the model converted to a HookedTransformer, the
attention patterns TransformerLens computes, its own detection patterns and score function.
The script checks that those scores equal the reference's per-query masses renormalised as
TransformerLens normalises them (every query of a sequence counted, the mean over sequences
taken last) and stores them for the C test. This part needs transformer_lens, which is not
in /work/venv (its current release wants transformers>=5); run the script with a venv that
has it (tools/README.md, "Head roles"), or pass --no-tl to leave the section out.

    /tmp/tl-venv/bin/python tools/roles_reference.py            # all
    /work/venv/bin/python tools/roles_reference.py --no-tl gpt2-tiny

Deterministic: float64 on the CPU, one torch thread, the probe from a fixed seed.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(REPO, "tests", "fixtures")
OUT = os.path.join(FIX, "roles")

# as include/headprune.h
PROBE_SEQS, PROBE_LEN, PROBE_SEED, WINDOW = 16, 32, 0x726F6C6573, 4
MASK64 = (1 << 64) - 1

# name -> (model directory, data file); the padded GPT-2 set is written by this script
MODELS = {
    "gpt2-tiny": ("tests/fixtures/gpt2-tiny", "tests/fixtures/gpt2-tiny/data.npy"),
    "gpt2-tiny-padded": ("tests/fixtures/gpt2-tiny", "tests/fixtures/roles/gpt2-tiny-padded.jsonl"),
    "gpt2-pruned": ("tests/fixtures/gpt2-pruned", "tests/fixtures/gpt2-pruned/data.npy"),
    "bert-encoder": ("tests/fixtures/bert-encoder", "tests/fixtures/bert-encoder/data.jsonl"),
    "bert-mlm": ("tests/fixtures/bert-mlm", "tests/fixtures/bert-mlm/data.jsonl"),
    "bert-cls": ("tests/fixtures/bert-cls", "tests/fixtures/bert-cls/data.jsonl"),
    "llama-gqa": ("tests/fixtures/llama-gqa", "tests/fixtures/llama-gqa/data.npy"),
    "llama-tied-bf16": ("tests/fixtures/llama-tied-bf16", "tests/fixtures/llama-tied-bf16/data.npy"),
    "qwen2-bias": ("tests/fixtures/qwen2-bias", "tests/fixtures/qwen2-bias/data.npy"),
    "qwen3-qknorm": ("tests/fixtures/qwen3-qknorm", "tests/fixtures/qwen3-qknorm/data.npy"),
    "phi3-fused": ("tests/fixtures/phi3-fused", "tests/fixtures/phi3-fused/data.npy"),
    "olmo2-post-norms": ("tests/fixtures/olmo2-post-norms", "tests/fixtures/olmo2-post-norms/data.npy"),
    "gemma2-softcap": ("tests/fixtures/gemma2-softcap", "tests/fixtures/gemma2-softcap/data.npy"),
    "gemma3-local": ("tests/fixtures/gemma3-local", "tests/fixtures/gemma3-local/data.npy"),
    "neox-parallel": ("tests/fixtures/neox-parallel", "tests/fixtures/neox-parallel/data.npy"),
    "stories260K": ("tests/fixtures/stories260K", "tests/fixtures/stories260K/data.npy"),
    "default": ("models/default", "models/default/heldout.npy"),
}
GPT2_TL = {"gpt2-tiny", "default"}  # where TransformerLens's detector applies (GPT-2, unpadded, unpruned)


# ---------------------------------------------------------------- the probe (roles.h's hp_roles_probe)


def splitmix64(state):
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & MASK64
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def below(state, n):
    limit = MASK64 - MASK64 % n
    while True:
        r = splitmix64(state)
        if r < limit:
            return r % n


def probe_ids(n_vocab, n_seqs, half):
    state = [PROBE_SEED]
    rows = []
    for _ in range(n_seqs):
        perm = list(range(n_vocab))
        for k in range(half):
            j = k + below(state, n_vocab - k)
            perm[k], perm[j] = perm[j], perm[k]
        rows.append(perm[:half] * 2)
    return np.array(rows, dtype=np.int64)


# ---------------------------------------------------------------- data


def write_padded(path):
    """gpt2-tiny's rows with padding: right-padded, left-padded, and one of a single real token
    (a causal model's lone first position, which is no query), ids from its data."""
    ids = np.load(os.path.join(FIX, "gpt2-tiny", "data.npy"))
    T = ids.shape[1]
    rows = []
    specs = [(0, 11), (5, T), (0, T), (3, 4), (2, 13)]  # [start, end) of the real tokens
    for r, (a, b) in enumerate(specs):
        row = ids[r % ids.shape[0]].tolist()
        rows.append({"ids": [row[t] if a <= t < b else 0 for t in range(T)],
                     "attention_mask": [1 if a <= t < b else 0 for t in range(T)]})
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def load_data(path):
    full = os.path.join(REPO, path)
    if path.endswith(".npy"):
        ids = np.load(full).astype(np.int64)
        return {"ids": ids, "attention_mask": np.ones_like(ids)}
    rows = [json.loads(line) for line in open(full) if line.strip()]
    ids = np.array([r["ids"] for r in rows], dtype=np.int64)
    d = {"ids": ids, "attention_mask": np.array([r.get("attention_mask", [1] * ids.shape[1]) for r in rows])}
    if any("token_type_ids" in r for r in rows):
        d["token_type_ids"] = np.array([r.get("token_type_ids", [0] * ids.shape[1]) for r in rows])
    return d


# ---------------------------------------------------------------- the model's attentions


def load_model(mdir):
    """The base model, every weight from the checkpoint. AutoModel of a causal LM's checkpoint can miss them all
    (Gemma3TextModel does not strip Gemma3ForCausalLM's "model." prefix) and run random weights; the causal LM
    class then loads them, and its attentions are the base model's."""
    kw = {"attn_implementation": "eager", "dtype": torch.float64, "output_loading_info": True}
    model, info = AutoModel.from_pretrained(os.path.join(REPO, mdir), **kw)
    if info["missing_keys"]:
        model, info = AutoModelForCausalLM.from_pretrained(os.path.join(REPO, mdir), **kw)
    assert not info["missing_keys"], f"{mdir}: weights missing from the checkpoint: {info['missing_keys'][:5]}"
    model.eval()
    return model


def head_index(config, n_layers, n_heads):
    """For each layer, the original head index of each head HF keeps (pruned checkpoints lack some)."""
    pruned = {int(k): set(v) for k, v in (getattr(config, "pruned_heads", None) or {}).items()}
    return [[h for h in range(n_heads) if h not in pruned.get(l, set())] for l in range(n_layers)]


@torch.no_grad()
def attentions(model, ids, mask, types=None):
    kw = {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask), "output_attentions": True}
    if types is not None:
        kw["token_type_ids"] = torch.tensor(types)
    out = model(**kw)
    return [a.double().numpy() for a in out.attentions]  # each (B, H_l, T, T)


# ---------------------------------------------------------------- the scores (docs/roles.md)


def sep_id_of(mdir, config):
    """The model's [SEP] id as Hugging Face has it: config.sep_token_id, else its tokenizer's sep_token_id
    (AutoTokenizer on the directory); None when neither (no tokenizer there)."""
    if getattr(config, "sep_token_id", None) is not None:
        return int(config.sep_token_id)
    d = os.path.join(REPO, mdir)
    if not any(os.path.exists(os.path.join(d, f)) for f in ("tokenizer.json", "vocab.txt", "vocab.json")):
        return None
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(d).sep_token_id


def seq_targets(ids, real, causal, freq, sep=None):
    """Query eligibility and the 0/1 target matrices of one sequence."""
    T = len(ids)
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    first = int(np.argmax(real))
    q = real.astype(bool).copy()
    if causal:
        q[first] = False
    visible = real[None, :].astype(bool) & ((j <= i) if causal else np.ones((T, T), bool))
    prev = (j == i - 1) & visible
    same = (ids[:, None] == ids[None, :]) & (j != i) & visible
    if causal:
        same &= j < i
    firstm = (j == first) & (i != first)
    t = {"prev": prev, "dup": same, "first": firstm}
    e = {"prev": q & prev.any(1), "dup": q & same.any(1), "first": q & (np.arange(T) != first), "all": q}
    if not causal:
        f = np.array([freq[x] if real[k] else np.inf for k, x in enumerate(ids)])
        rare = (f == f.min())[None, :] & np.ones((T, 1), bool)
        t["rare"] = rare
    if sep is not None:
        # [SEP] keys (real, visible), from queries that are no [SEP] and see one
        sepm = (ids[None, :] == sep) & visible & (ids[:, None] != sep)
        t["sep"] = sepm
        e["sep"] = q & sepm.any(1)
    return q, t, e


def data_scores(atts, heads_of, n_heads, data, causal, sep=None):
    ids, real = data["ids"], data["attention_mask"]
    S, T = ids.shape
    L = len(atts)
    freq = {}
    if not causal:
        for s in range(S):
            for k in range(T):
                if real[s, k]:
                    freq[int(ids[s, k])] = freq.get(int(ids[s, k]), 0) + 1
    roles = ["prev", "dup", "first"] + ([] if causal else ["rare"]) + ([] if sep is None else ["sep"])
    sums = {r: np.zeros((L, n_heads)) for r in roles + ["ent"]}
    offs = np.zeros((L, n_heads, 2 * T - 1))
    counts = {"all": 0, "prev": 0, "dup": 0, "first": 0} | ({} if sep is None else {"sep": 0})
    for s in range(S):
        q, t, e = seq_targets(ids[s], real[s], causal, freq, sep)
        for k in counts:
            counts[k] += int(e[k].sum())
        for l in range(L):
            for hi, h in enumerate(heads_of[l]):
                A = atts[l][s, hi]
                for r in roles:
                    sums[r][l, h] += (A * t[r])[q].sum()
                with np.errstate(divide="ignore", invalid="ignore"):
                    ent = -np.where(A > 0, A * np.log2(A), 0.0)
                sums["ent"][l, h] += ent[q].sum()
                for d in range(-(T - 1), T):
                    diag = np.diagonal(A, offset=d)  # A[i, i + d], i from max(0, -d)
                    rows = np.arange(max(0, -d), max(0, -d) + len(diag))
                    offs[l, h, d + T - 1] += diag[q[rows]].sum()
    if causal:
        offs[:, :, T:] = 0  # keys after the query: none
    div = lambda x, n: x / n if n else np.full_like(x, np.nan)
    out = {"prev_token": div(sums["prev"], counts["prev"]), "duplicate_token": div(sums["dup"], counts["dup"]),
           "first_token": div(sums["first"], counts["first"]), "entropy": div(sums["ent"], counts["all"]),
           "rare_token": div(sums["rare"], counts["all"]) if not causal else np.full((L, n_heads), np.nan),
           "sep_token": div(sums["sep"], counts["sep"]) if sep is not None else np.full((L, n_heads), np.nan),
           "offset_mass": div(offs, counts["all"])}
    return out, counts


def probe_scores(atts, heads_of, n_heads, half):
    L = len(atts)
    S = atts[0].shape[0]
    win = np.zeros((L, n_heads, 2 * WINDOW + 1))
    cnt = np.zeros(2 * WINDOW + 1)
    for d in range(-WINDOW, WINDOW + 1):
        qs = [i for i in range(half, 2 * half) if i - half + d >= 0]
        cnt[d + WINDOW] = S * len(qs)
        for l in range(L):
            for hi, h in enumerate(heads_of[l]):
                win[l, h, d + WINDOW] = sum(atts[l][s, hi, i, i - half + d] for s in range(S) for i in qs)
    return win / cnt[None, None, :]


def tie_order(n):
    """0, -1, 1, -2, 2, ...: how ties are settled (nearest first, then the earlier)."""
    return [k // 2 if k % 2 == 0 else -(k + 1) // 2 for k in range(n)]


def argmax_offset(mass, lo, hi):
    best, bm = 0, -np.inf
    for d in tie_order(2 * max(-lo, hi) + 1):
        if lo <= d <= hi and mass[d - lo] > bm:
            best, bm = d, mass[d - lo]
    return best, bm


# ---------------------------------------------------------------- TransformerLens


def tl_scores(mdir, data, probe, counts):
    """TransformerLens's head detector ("mul") on the data (previous, duplicate) and the probe (induction)."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens import head_detector as hd
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(os.path.join(REPO, mdir), attn_implementation="eager", dtype=torch.float64)
    c = hf.config
    cfg = HookedTransformerConfig(
        n_layers=c.n_layer, d_model=c.n_embd, n_ctx=c.n_positions, d_head=c.n_embd // c.n_head, n_heads=c.n_head,
        d_mlp=c.n_inner or 4 * c.n_embd, d_vocab=c.vocab_size, act_fn=c.activation_function, normalization_type="LN",
        eps=c.layer_norm_epsilon, positional_embedding_type="standard", dtype=torch.float64,
        default_prepend_bos=False, original_architecture="GPT2LMHeadModel", device="cpu")
    model = HookedTransformer(cfg)
    model.load_and_process_state_dict(convert_gpt2_weights(hf, cfg), fold_ln=False, center_writing_weights=False,
                                      center_unembed=False, fold_value_biases=False,
                                      refactor_factored_attn_matrices=False)
    model.eval()
    makers = {"previous_token_head": hd.get_previous_token_head_detection_pattern,
              "duplicate_token_head": hd.get_duplicate_token_head_detection_pattern,
              "induction_head": hd.get_induction_head_detection_pattern}

    def scores(rows, name):
        tot = np.zeros((c.n_layer, c.n_head))
        with torch.no_grad():
            _, cache = model.run_with_cache(torch.tensor(rows))
        for s, row in enumerate(rows):
            det = makers[name](torch.tensor(row)[None, :]).double()
            for l in range(c.n_layer):
                pat = cache["pattern", l][s]
                for h in range(c.n_head):
                    tot[l, h] += hd.compute_head_attention_similarity_score(
                        pat[h].clone(), det, exclude_bos=False, exclude_current_token=False, error_measure="mul")
        return tot / len(rows)  # detect_head's mean over a list of sequences

    from importlib.metadata import version
    return {"version": version("transformer_lens"),
            "previous_token_head": scores(data["ids"], "previous_token_head"),
            "duplicate_token_head": scores(data["ids"], "duplicate_token_head"),
            "induction_head": scores(probe, "induction_head")}


# ---------------------------------------------------------------- one model


def r12(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(f"{x:.12g}")


def run(name, use_tl):
    mdir, dpath = MODELS[name]
    config = AutoConfig.from_pretrained(os.path.join(REPO, mdir))
    causal = config.model_type != "bert"
    model = load_model(mdir)
    n_layers = config.num_hidden_layers
    n_heads = config.num_attention_heads
    n_ctx = config.max_position_embeddings
    heads_of = head_index(config, n_layers, n_heads)
    data = load_data(dpath)
    S, T = data["ids"].shape
    atts = attentions(model, data["ids"], data["attention_mask"], data.get("token_type_ids"))
    sep = sep_id_of(mdir, config)
    sc, counts = data_scores(atts, heads_of, n_heads, data, causal, sep)

    half = min(PROBE_LEN, n_ctx // 2, config.vocab_size)
    probe = probe_ids(config.vocab_size, PROBE_SEQS, half)
    patts = attentions(model, probe, np.ones_like(probe))
    win = probe_scores(patts, heads_of, n_heads, half)

    heads = []
    for l in range(n_layers):
        for h in range(n_heads):
            present = h in heads_of[l]
            e = {"layer": l, "head": h, "present": present}
            if present:
                om = sc["offset_mass"][l, h]
                hi = 0 if causal else T - 1
                dom, dmass = argmax_offset(om, -(T - 1), hi)
                iw = win[l, h]
                ioff, imass = argmax_offset(iw, -WINDOW, WINDOW)
                e.update({k: r12(float(sc[k][l, h])) for k in
                          ["prev_token", "duplicate_token", "first_token", "entropy", "rare_token", "sep_token"]})
                e.update({"induction": r12(float(iw[1 + WINDOW])), "induction_offset": ioff,
                          "induction_mass": r12(float(imass)), "dominant_offset": dom, "dominant_mass": r12(float(dmass)),
                          "offset_mass": [r12(float(x)) for x in om[: (T if causal else 2 * T - 1)]],
                          "induction_window": [r12(float(x)) for x in iw]})
            heads.append(e)
    ref = {"model": mdir, "data": dpath, "causal": causal, "n_layers": n_layers, "n_heads": n_heads,
           "n_kv_heads": getattr(config, "num_key_value_heads", n_heads) or n_heads, "n_seqs": S, "seq_len": T,
           "probe": {"seqs": PROBE_SEQS, "len": half, "seed": PROBE_SEED, "window": WINDOW, "ids": probe.tolist()},
           "queries": {"all": counts["all"], "prev_token": counts["prev"], "duplicate_token": counts["dup"],
                       "first_token": counts["first"], "induction": PROBE_SEQS * half,
                       "sep_token": counts.get("sep")},
           "sep_id": sep,
           "made_with": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "numpy": np.__version__, "dtype": "float64", "attn_implementation": "eager"},
           "heads": heads}

    if name in GPT2_TL and use_tl:
        tl = tl_scores(mdir, data, probe, counts)
        # what the reference's masses give when normalised as TransformerLens's "mul" does
        # (unpadded rows of T tokens: every query of a row counted, query 0 included)
        P = np.array([[e["prev_token"] for e in heads[l * n_heads:(l + 1) * n_heads]] for l in range(n_layers)])
        D = np.array([[e["duplicate_token"] for e in heads[l * n_heads:(l + 1) * n_heads]] for l in range(n_layers)])
        I = np.array([[e["induction"] for e in heads[l * n_heads:(l + 1) * n_heads]] for l in range(n_layers)])
        mine = {"previous_token_head": P * counts["prev"] / (S * T),
                "duplicate_token_head": np.nan_to_num(D) * counts["dup"] / (S * T),
                "induction_head": I * (PROBE_SEQS * half) / (PROBE_SEQS * 2 * half)}
        worst = max(float(np.abs(tl[k] - mine[k]).max()) for k in mine)
        print(f"  {name}: TransformerLens {tl['version']} mul scores vs the reference renormalised: "
              f"max |diff| {worst:.2e}")
        assert worst < 1e-9, worst
        ref["transformer_lens"] = {"version": tl["version"], "error_measure": "mul", "exclude_bos": False,
                                   "exclude_current_token": False, "max_abs_diff_vs_reference": worst,
                                   **{k: [[r12(float(x)) for x in row] for row in tl[k]] for k in mine}}

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(ref, f, indent=None, separators=(",", ":"))
        f.write("\n")
    return ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="models (default: all): " + ", ".join(MODELS))
    ap.add_argument("--no-tl", action="store_true", help="leave out the TransformerLens comparison")
    a = ap.parse_args()
    use_tl = not a.no_tl
    if use_tl:
        try:
            import transformer_lens  # noqa: F401
        except ImportError:
            sys.exit("transformer_lens is not importable here: run with a venv that has it "
                     "(tools/README.md, 'Head roles') or pass --no-tl")
    os.makedirs(OUT, exist_ok=True)
    write_padded(os.path.join(OUT, "gpt2-tiny-padded.jsonl"))
    for name in a.names or list(MODELS):
        ref = run(name, use_tl)
        print(f"{name}: {ref['n_layers']}x{ref['n_heads']} heads, {ref['n_seqs']}x{ref['seq_len']} tokens, "
              f"probe {PROBE_SEQS}x2x{ref['probe']['len']}")
    for root, _, files in os.walk(OUT):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)


if __name__ == "__main__":
    main()
