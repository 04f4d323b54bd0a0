"""Prompt-pair tasks and their float64 Hugging Face reference (issue 25's "Proof").

For each causal fixture model under tests/fixtures/ (FIXTURES below) writes
  - <model>/task.jsonl: task rows in the ids form,
        {"prompt_ids": [...], "corrupt_ids": [...], "answer_id": A, "wrong_id": W}
    12 rows; prompt and corrupt of a row have the same length; four rows share
    one length and one template (the group the per-position grid averages
    over), the other eight have eight other lengths;
  - <model>/task-reference.json: what transformers computes on them in float64
    (model.double(), eager attention): per row, clean and corrupt task
    metrics; per query head, the metrics under zero ablation, resample
    (noising) and denoise, per row and averaged; the head x position grid of
    the group; "definitions" says each in words.

Rows (a random-init model knows no task, so the rows are made to have one):
an IOI-like template of length T, fillers f, names A != B,
    f.. A f B f.. A f.. f          answer B (the name not repeated), wrong A,
the first A at p1, B at p1 + 2, the second A at p3 (p1 + 4 <= p3 <= T - 2), the
answer position T - 1 (the prompt's last token). Corrupt: the second A
replaced by B (one token), or on every other row outside the group B and the
second A swapped (two tokens). Names come from ids [V/4, V/2), fillers from
the rest (not 0). Each row draws up to 32 (A, B) pairs from its seeded
generator and keeps the first whose clean logit(B) - logit(A) at T - 1 is
positive (the last drawn if none is). On two rows outside the group the answer
is instead the clean model's top-1 token there (wrong stays A), so answer_acc
is 1 on some clean rows. Seeded by the model's name: deterministic.

Patching is a forward pre-hook on the attention output projection (GPT-2
attn.c_proj, GPT-NeoX attention.dense, Llama/Qwen2/Mistral self_attn.o_proj; hp_ref.HeadAblator), whose
input is the heads' outputs z side by side, query head h the slice
[h d_head, (h + 1) d_head) (with grouped-query attention too). Zero ablation
is headprune's: the slice set to 0 at every position, the projection's bias
kept (README "Semantics", engine/eval/ablation.c's zero row).

Before writing, it checks its hooks and refuses to write if one fails:
  - with the hooks in place but editing nothing (pass-through, recording, and
    an all-kept gate) the logits equal the plain model's exactly;
  - GPT-2 (unpruned): zero ablation through the hook equals transformers' own
    head_mask for every head and row within 1e-12;
  - every architecture: zero ablation through the hook equals the model with
    the head's input columns of the projection's weight zeroed, within 1e-12;
  - resample with corrupt = clean equals the clean run within 1e-12;
  - the grid's batched runs: every head patched at all positions of the
    group's rows equals the per-row resample and denoise means within 1e-12.

Usage (from the repository root; torch 2.x, transformers<5):
    /work/venv/bin/python tools/gen_task_fixtures.py            # every fixture in FIXTURES
    /work/venv/bin/python tools/gen_task_fixtures.py gpt2-tiny  # one
"""
import json
import os
import sys
import zlib

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")

# fixture -> (the group's length, the other rows' lengths). mistral-window's rows are longer than
# its sliding window (20) so the window matters; llama-rope-dynamic's straddle its
# max_position_embeddings (8), past which dynamic NTK rescales the rotary frequencies.
SHORT = (10, (6, 7, 8, 9, 11, 12, 13, 14))
FIXTURES = {
    "gpt2-tiny": SHORT, "gpt2-noprefix": SHORT, "gpt2-untied": SHORT, "gpt2-vocab": SHORT,
    "gpt2-pruned": SHORT, "llama-gqa": SHORT, "llama-mlp-bias": SHORT, "llama-tied-bf16": SHORT,
    "llama-rope-dynamic": SHORT, "llama-rope-linear": SHORT, "llama-rope-llama3": SHORT,
    "qwen2-bias": SHORT, "mistral-window": (24, (12, 16, 19, 21, 23, 27, 31, 40)),
    "stories260K": SHORT, "qwen3-qknorm": SHORT, "phi3-fused": SHORT, "neox-parallel": SHORT,
    "neox-sequential": SHORT, "olmo2-post-norms": SHORT, "gemma2-softcap": SHORT, "gemma3-local": SHORT,
}
# causal fixtures left out, and why (main() checks every causal fixture is in one of the two)
SKIPPED = {"llama-gqa-sharded": "the same model as llama-gqa (sharded files): use llama-gqa's task"}
N_TRIES = 32
METRICS = ("logit_diff", "answer_logprob", "answer_prob", "answer_acc")
TOL = 1e-12

DEFINITIONS = {
    "answer position": "the prompt's last token (index T-1 of a row of T tokens); every metric reads the "
                       "logits there",
    "logit_diff": "logit[answer_id] - logit[wrong_id]",
    "answer_logprob": "log softmax(logits)[answer_id] (natural log)",
    "answer_prob": "softmax(logits)[answer_id]",
    "answer_acc": "1.0 if answer_id is the argmax of the logits, else 0.0",
    "mean": "the plain mean over the rows the field covers (every row; the grid: its group's rows)",
    "clean / corrupt": "the unmasked model run on prompt_ids / corrupt_ids",
    "head": "query head h of layer l, numbered as in the unpruned model (a pruned head's entries are null); "
            "its output z is the slice [j*d_head, (j+1)*d_head) of the input of the attention output "
            "projection (GPT-2 attn.c_proj, GPT-NeoX attention.dense, Llama/Qwen2/Mistral self_attn.o_proj), j its index among the "
            "layer's heads that are left; under grouped-query attention each query head is its own slice",
    "zero": "run on the prompt with the head's z set to 0 at every position (the projection's bias is "
            "kept: headprune's zero ablation)",
    "resample": "noising: run on the prompt with the head's z replaced, at every position, by its value in "
                "the unmasked model run on the same row's corrupt_ids",
    "denoise": "run on corrupt_ids with the head's z restored, at every position, from the unmasked model "
               "run on the same row's prompt_ids",
    "patch_recovery": "denoise: (mean logit_diff - corrupt mean logit_diff) / (clean mean logit_diff - "
                      "corrupt mean logit_diff), from the means over all rows",
    "grid": "the rows of the one-template group (same length, same template, same corrupted positions): "
            "grid.noise[l][h][t] = mean over the group's rows of logit_diff when the head's z is replaced "
            "at position t only (every other position and head as in the clean run) by its value on the "
            "row's corrupt run; grid.denoise[l][h][t] the same on the corrupt run with the clean value "
            "restored at t only",
    "layout": "ablations.<ablation>.<metric>.mean[l][h]; ablations.<ablation>.<metric>.rows[l][h][r] "
              "(r the task.jsonl line, 0-based); clean.<metric>[r], corrupt.<metric>[r]",
    "dynamic rope": "rope_scaling dynamic: each run's rotary frequencies are those of its own length T (NTK "
                    "base past max_position_embeddings, as modeling_rope_utils computes them for seq_len T); "
                    "HF's rotary module is reset before every forward, since by itself it keeps the "
                    "frequencies of the longest earlier input while T stays above the trained length",
    "precision": "float64 throughout (model.double(), eager attention), weights as stored (f16/bf16 "
                 "fixtures: their rounded values)",
}


# ---------------------------------------------------------------- the model


def kept_heads(config, n_layers, n_heads):
    """For each layer, the original head index of each head HF keeps (pruned checkpoints lack some)."""
    pruned = {int(k): set(v) for k, v in (getattr(config, "pruned_heads", None) or {}).items()}
    return [[h for h in range(n_heads) if h not in pruned.get(l, set())] for l in range(n_layers)]


class Patcher:
    """A float64 causal model, its hooks and its runs on one batch of same-length rows."""

    def __init__(self, model):
        self.model = model
        cfg = model.config
        mods, _ = hp_ref.out_projections(model)
        if cfg.model_type == "gpt2":
            self.n_heads, self.n_kv = cfg.n_head, cfg.n_head
        else:
            self.n_heads = cfg.num_attention_heads
            self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.n_layers = len(mods)
        self.d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.kept = kept_heads(cfg, self.n_layers, self.n_heads)
        self.hooks = hp_ref.HeadAblator(mods, self.n_heads, self.d_head)

    def heads(self):
        """(l, h original, j slice index) of every head the model has."""
        return [(l, h, j) for l in range(self.n_layers) for j, h in enumerate(self.kept[l])]

    def logits(self, ids):
        rot = getattr(getattr(self.model, "model", None), "rotary_emb", None)
        if rot is not None and getattr(rot, "rope_type", None) == "dynamic":
            # HF keeps the frequencies of the longest input so far until one is back within the trained
            # length; start every run afresh so a row's frequencies are its own length's
            rot.max_seq_len_cached = rot.original_max_seq_len
            rot.register_buffer("inv_freq", rot.original_inv_freq, persistent=False)
        with torch.no_grad():
            return self.model(input_ids=ids, use_cache=False).logits

    def plain(self, ids):
        self.hooks.mode = None
        return self.logits(ids)

    def record(self, ids):
        """Unmasked logits and every layer's projection input."""
        self.hooks.mode = "record"
        out = self.logits(ids)
        self.hooks.mode = None
        return out, list(self.hooks.recorded)

    def edited(self, ids, l, j, ablation, repl=None, positions=None):
        """Logits with slice j of layer l zeroed (ablation "zero") or patched from repl."""
        gate = torch.ones(self.n_layers, self.n_heads)
        gate[l, j] = 0
        h = self.hooks
        h.mode, h.gate, h.ablation, h.repl, h.positions = "apply", gate, ablation, repl, positions
        out = self.logits(ids)
        h.mode, h.repl, h.positions = None, None, None
        return out


def metrics(logits, answer, wrong):
    """Task metrics at the last position of each row: dict metric -> list over the batch."""
    last = logits[:, -1, :].double()
    lp = torch.log_softmax(last, dim=-1)
    a, w = torch.as_tensor(answer), torch.as_tensor(wrong)
    idx = torch.arange(last.shape[0])
    return {"logit_diff": (last[idx, a] - last[idx, w]).tolist(),
            "answer_logprob": lp[idx, a].tolist(),
            "answer_prob": lp[idx, a].exp().tolist(),
            "answer_acc": (last.argmax(dim=-1) == a).double().tolist()}


# ---------------------------------------------------------------- rows


def make_row(p, rng, T, V, template=None, two=False, top1=False):
    """One task row of length T (see the docstring); template = (fillers, p1, p3) to share one."""
    lo, hi = max(1, V // 4), V // 2
    fill = np.concatenate([np.arange(1, lo), np.arange(hi, V)])
    if template is None:
        p1 = int(rng.integers(0, T - 5))
        p3 = int(rng.integers(p1 + 4, T - 1))
        template = (rng.choice(fill, size=T).tolist(), p1, p3)
    fillers, p1, p3 = template
    best = None
    for _ in range(N_TRIES):
        a, b = (int(x) for x in rng.choice(np.arange(lo, hi), size=2, replace=False))
        ids = list(fillers)
        ids[p1], ids[p1 + 2], ids[p3] = a, b, a
        lg = p.plain(torch.tensor([ids]))[0, -1]
        best = (ids, a, b, lg)
        if lg[b] > lg[a]:
            break
    ids, a, b, lg = best
    corrupt = list(ids)
    if two:
        corrupt[p1 + 2], corrupt[p3] = a, b
    else:
        corrupt[p3] = b
    answer = int(lg.argmax()) if top1 else b
    if answer == a:
        answer = b
    return {"prompt_ids": ids, "corrupt_ids": corrupt, "answer_id": answer, "wrong_id": a}, template


def make_rows(p, name, V, group_len, other_lens):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    rows, template = [], None
    for _ in range(4):
        r, template = make_row(p, rng, group_len, V, template)
        rows.append(r)
    for i, T in enumerate(other_lens):
        rows.append(make_row(p, rng, T, V, two=i % 2 == 1, top1=i in (2, 5))[0])
    order = rng.permutation(len(rows)).tolist()
    rows = [rows[i] for i in order]
    group = sorted(order.index(i) for i in range(4))
    return rows, group


# ---------------------------------------------------------------- the reference


def refuse(name, what):
    raise SystemExit(f"gen_task_fixtures: {name}: {what}; nothing written")


def maxdiff(a, b):
    return float((a - b).abs().max())


def check_hooks(p, name, rows):
    """The checks of the docstring, on every row; returns what they measured."""
    worst = {"no_edit": 0.0, "head_mask": None, "resample_self": 0.0}
    gpt2_mask = p.model.config.model_type == "gpt2" and all(len(k) == p.n_heads for k in p.kept)
    if gpt2_mask:
        worst["head_mask"] = 0.0
    p.hooks.remove()
    bares = [p.logits(torch.tensor([r["prompt_ids"]])) for r in rows]
    p.hooks = hp_ref.HeadAblator(p.hooks.modules, p.n_heads, p.d_head)
    for r, bare in zip(rows, bares):
        ids = torch.tensor([r["prompt_ids"]])
        rec, z = p.record(ids)
        p.hooks.mode, p.hooks.gate, p.hooks.ablation = "apply", torch.ones(p.n_layers, p.n_heads), "zero"
        kept = p.logits(ids)
        p.hooks.mode = None
        for lg in (p.plain(ids), rec, kept):
            if not torch.equal(lg, bare):
                refuse(name, f"the hooked model without an edit differs from the plain one by {maxdiff(lg, bare)}")
        for l, h, j in p.heads():
            d = maxdiff(p.edited(ids, l, j, "patch", z), bare)
            worst["resample_self"] = max(worst["resample_self"], d)
            if gpt2_mask:
                hm = torch.ones(p.n_layers, p.n_heads, dtype=torch.float64)
                hm[l, h] = 0
                with torch.no_grad():
                    ref = p.model(input_ids=ids, head_mask=hm, use_cache=False).logits
                worst["head_mask"] = max(worst["head_mask"], maxdiff(p.edited(ids, l, j, "zero"), ref))
    # zero ablation by the hook = the same head's input columns of the projection's weight zeroed
    # (an edit of the model, not of an activation: checks the slicing on every architecture)
    r0 = torch.tensor([rows[0]["prompt_ids"]])
    worst["weight_columns"] = 0.0
    for (l, h, j), mod in ((lhj, p.hooks.modules[lhj[0]]) for lhj in p.heads()):
        w = mod.weight.data
        sl = slice(j * p.d_head, (j + 1) * p.d_head)
        saved = (w[sl, :] if p.model.config.model_type == "gpt2" else w[:, sl]).clone()
        if p.model.config.model_type == "gpt2":  # Conv1D: weight (in, out)
            w[sl, :] = 0
        else:
            w[:, sl] = 0
        edited = p.plain(r0)
        if p.model.config.model_type == "gpt2":
            w[sl, :] = saved
        else:
            w[:, sl] = saved
        worst["weight_columns"] = max(worst["weight_columns"], maxdiff(p.edited(r0, l, j, "zero"), edited))
    if not torch.equal(p.plain(r0), bares[0]):
        refuse(name, "restoring the projection weights did not give the model back")
    if worst["weight_columns"] > TOL:
        refuse(name, f"zero ablation by the hook differs from zeroed weight columns by {worst['weight_columns']}")
    if worst["resample_self"] > TOL:
        refuse(name, f"resample with corrupt = clean differs from the clean run by {worst['resample_self']}")
    if gpt2_mask and worst["head_mask"] > TOL:
        refuse(name, f"zero ablation by the hook differs from head_mask by {worst['head_mask']}")
    return worst


def grid_of(p, rows, group, T):
    """Head x position logit-diff grid over the group's rows, noise and denoise; and the all-position runs."""
    clean = torch.tensor([rows[i]["prompt_ids"] for i in group])
    corr = torch.tensor([rows[i]["corrupt_ids"] for i in group])
    ans = [rows[i]["answer_id"] for i in group]
    wr = [rows[i]["wrong_id"] for i in group]
    _, zc = p.record(clean)
    _, zx = p.record(corr)
    empty = [[None] * p.n_heads for _ in range(p.n_layers)]
    out = {"noise": [list(x) for x in empty], "denoise": [list(x) for x in empty]}
    whole = {"noise": {}, "denoise": {}}
    for l, h, j in p.heads():
        for key, ids, src in (("noise", clean, zx), ("denoise", corr, zc)):
            out[key][l][h] = [float(np.mean(metrics(p.edited(ids, l, j, "patch", src, [t]), ans, wr)["logit_diff"]))
                              for t in range(T)]
            whole[key][(l, h)] = float(np.mean(metrics(p.edited(ids, l, j, "patch", src), ans, wr)["logit_diff"]))
    return out, whole


def reference(p, name, rows, group):
    """Everything task-reference.json holds but the descriptive fields."""
    n = len(rows)
    clean = {m: [] for m in METRICS}
    corrupt = {m: [] for m in METRICS}
    per = {a: {m: [[None] * p.n_heads for _ in range(p.n_layers)] for m in METRICS}
           for a in ("zero", "resample", "denoise")}
    for l, h, j in p.heads():
        for a in per:
            for m in METRICS:
                per[a][m][l][h] = []
    for r in rows:
        ids, cids = torch.tensor([r["prompt_ids"]]), torch.tensor([r["corrupt_ids"]])
        aw = ([r["answer_id"]], [r["wrong_id"]])
        lc, zc = p.record(ids)
        lx, zx = p.record(cids)
        for dst, lg in ((clean, lc), (corrupt, lx)):
            for m, v in metrics(lg, *aw).items():
                dst[m] += v
        for l, h, j in p.heads():
            for a, lg in (("zero", p.edited(ids, l, j, "zero")), ("resample", p.edited(ids, l, j, "patch", zx)),
                          ("denoise", p.edited(cids, l, j, "patch", zc))):
                for m, v in metrics(lg, *aw).items():
                    per[a][m][l][h] += v
    abl = {}
    for a, by_m in per.items():
        abl[a] = {}
        for m, mat in by_m.items():
            means = [[None if v is None else float(np.mean(v)) for v in row] for row in mat]
            abl[a][m] = {"mean": means, "rows": mat}
    ld_c, ld_x = float(np.mean(clean["logit_diff"])), float(np.mean(corrupt["logit_diff"]))
    abl["denoise"]["patch_recovery"] = {"mean": [[None if v is None else (v - ld_x) / (ld_c - ld_x) for v in row]
                                                 for row in abl["denoise"]["logit_diff"]["mean"]]}
    T = len(rows[group[0]]["prompt_ids"])
    grid, whole = grid_of(p, rows, group, T)
    worst = 0.0
    for (l, h), v in whole["noise"].items():
        worst = max(worst, abs(v - np.mean([per["resample"]["logit_diff"][l][h][i] for i in group])),
                    abs(whole["denoise"][(l, h)] - np.mean([per["denoise"]["logit_diff"][l][h][i] for i in group])))
    if worst > TOL:
        refuse(name, f"the grid's batched runs differ from the per-row runs by {worst}")
    vals = [clean, corrupt, abl, grid]
    if not all(np.isfinite(x) for x in flat(vals)):
        refuse(name, "a number is not finite")
    summary = {m: {"clean": float(np.mean(clean[m])), "corrupt": float(np.mean(corrupt[m]))} for m in METRICS}
    return {"n_rows": n, "summary": summary, "clean": clean, "corrupt": corrupt, "ablations": abl,
            "grid": {"rows": group, "length": T, **grid}}, worst


def flat(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from flat(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from flat(v)
    elif x is not None and not isinstance(x, (str, bool)):
        yield float(x)


def describe(p, name, how, command):
    cfg = p.model.config
    dynamic = (getattr(cfg, "rope_scaling", None) or {}).get("rope_type") == "dynamic"
    return {"model": name, "architecture": cfg.architectures[0] if cfg.architectures else cfg.model_type,
            "n_layers": p.n_layers, "n_heads": p.n_heads, "n_kv_heads": p.n_kv, "d_head": p.d_head,
            "heads_kept": p.kept, "task": "task.jsonl", "how": how,
            "definitions": {k: v for k, v in DEFINITIONS.items() if k != "dynamic rope" or dynamic},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "numpy": np.__version__},
            "command": command}


def load(d):
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").eval()
    return Patcher(model)


HOW = ("IOI-like rows on a random-init model: template f.. A f B f.. A f.. f (names A != B from ids [V/4, V/2), "
       "fillers the other ids but 0), answer B, wrong A, corrupt = the second A replaced by B (one token), or on "
       "every other row outside the group B and the second A swapped (two tokens). Per row up to {tries} seeded "
       "(A, B) draws, keeping the first whose clean logit(B) - logit(A) at the last position is positive (the "
       "last draw if none is). On two rows outside the group the answer is the clean model's top-1 token at the "
       "last position instead (wrong stays A). Four rows share one template and length {g}; the others have "
       "lengths {o}. numpy default_rng(crc32(model name)); rows shuffled by it.")


def one(name):
    d = os.path.join(ROOT, name)
    group_len, other = FIXTURES[name]
    p = load(d)
    V = p.model.config.vocab_size
    rows, group = make_rows(p, name, V, group_len, other)
    checks = check_hooks(p, name, rows)
    ref, grid_check = reference(p, name, rows, group)
    checks["grid_vs_rows"] = grid_check
    out = describe(p, name, HOW.format(tries=N_TRIES, g=group_len, o=", ".join(map(str, other))),
                   f"/work/venv/bin/python tools/gen_task_fixtures.py {name}")
    out["checks"] = checks
    out.update(ref)
    with open(os.path.join(d, "task.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(d, "task-reference.json"), "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    hp_ref.tidy_perms(d)
    s = ref["summary"]
    size = os.path.getsize(os.path.join(d, "task-reference.json"))
    wins = sum(v > 0 for v in ref["clean"]["logit_diff"])
    print(f"{name}: {len(rows)} rows, clean ld {s['logit_diff']['clean']:.4f} (answer preferred on {wins}), "
          f"corrupt ld {s['logit_diff']['corrupt']:.4f}, clean acc {s['answer_acc']['clean']:.3f}; checks "
          f"head_mask {checks['head_mask']}, resample_self {checks['resample_self']}, grid {grid_check}; "
          f"{size // 1024} KiB")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for n in sorted(os.listdir(ROOT)):
        cfg = os.path.join(ROOT, n, "config.json")
        if os.path.exists(cfg) and any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel")
                                       for a in json.load(open(cfg)).get("architectures") or []):
            assert n in FIXTURES or n in SKIPPED, f"causal fixture {n} is neither made nor skipped"
    names = sys.argv[1:] or list(FIXTURES)
    for n in names:
        if n not in FIXTURES:
            raise SystemExit(f"gen_task_fixtures: unknown fixture {n} (known: {', '.join(FIXTURES)})")
        one(n)


if __name__ == "__main__":
    main()
