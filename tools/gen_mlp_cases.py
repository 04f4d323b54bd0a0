#!/usr/bin/env python3
"""MLP ablation (mask items "mlp:L") against transformers in float64: tests/fixtures/mlp-cases.json.

Ablating the unit mlp:L replaces the MLP block's contribution to the residual stream at layer L (every
token) by a replacement r. The contribution is the tensor the block adds to the residual stream, taken as the
output of one module per family (CONTRIBUTION below; checked against transformers 4.57's modeling code):

    GPT-2                               transformer.h[L].mlp
    BERT (post-norm)                    encoder.layer[L].output.dense (before dropout, the residual add and
                                        the LayerNorm: the tensor that enters the LayerNorm with the residual)
    Llama, Mistral, Qwen2, Qwen3, Phi-3 model.layers[L].mlp
    GPT-NeoX (parallel and sequential)  gpt_neox.layers[L].mlp
    OLMo 2, Gemma 2, Gemma 3            model.layers[L].post_feedforward_layernorm (after the post-MLP norm)

(transformers' Gemma RMSNorm computes in float32 even in a float64 model, x.float(): Gemma's contributions are
float32 values, as in every other Gemma reference of the project.)

r is 0 ("zero"); the contribution's mean over every real token of the held-out set under the unmasked model
("mean", one d_model vector per layer); its mean at each position over the rows where that position is real,
0 where none is ("mean-pos"); or, on task rows, its value at the same row and position when the unmasked model
runs on the row's corrupt prompt ("resample"). Means are hp_ref.HeadAblator.set_means's very computation
(float64 sums, stored as float32 as the engine stores them). A mask may mix heads and MLPs ("mlp:0,1.2"): the
heads get the same ablation through hp_ref.HeadAblator (zero / mean / mean_pos / patch), and every replacement
comes from the unmasked model. Metrics as the fixtures' references compute them: causal next-token loss, BERT
MLM loss over the labels, bert-cls cross-entropy of the label, each with acc and KL(unmasked || masked); on
task rows (llama-gqa's task.jsonl, one row at a time as tools/gen_task_fixtures.py runs them) the answer
position's loss, acc, KL and the task metrics.

Before writing it checks, per fixture, and refuses to write (AssertionError) if one fails:
  - the hooks in place but editing nothing give the plain model's logits exactly;
  - mlp:L zeroed changes the logits and the loss, for every layer L;
  - r = the unmasked model's own contribution (same batch) gives the unmasked logits and loss within 1e-12;
  - mlp:L zeroed by the hook equals the model with the MLP's last linear layer (weight and bias) zeroed, within
    1e-12;
  - r = the contribution + a fixed vector d moves the residual stream after layer L (for BERT, the input of
    output.LayerNorm) by exactly d: the hooked tensor enters the residual stream additively, with nothing after it;
  - mean-pos of every MLP on a held-out set of one row repeated equals the unmasked run (up to the float32 means);
  - the unmasked loss agrees with the fixture's reference.json (float32 there) within 1e-4 relative;
  - task rows: the clean and corrupt metrics and every head's resample logit_diff equal task-reference.json's
    within 1e-10, and resample with corrupt = prompt equals the clean run within 1e-12;
  - every number is finite.

    /work/venv/bin/python tools/gen_mlp_cases.py

Deterministic (one torch thread, fixed fixtures); about half a minute.
"""
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402

import transformers  # noqa: E402
from transformers import (AutoModelForCausalLM, BertForMaskedLM, BertForSequenceClassification,  # noqa: E402
                          GPT2LMHeadModel)

transformers.logging.set_verbosity_error()

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(REPO, "tests", "fixtures")
OUT = os.path.join(FIX, "mlp-cases.json")
TOL = 1e-12

# fixture -> (its data file, kind, transformers class): gen_config_key_cases.py's ARCHS, plus neox-sequential
# and bert-cls
FIXTURES = {
    "gpt2-tiny": ("data.npy", "causal", GPT2LMHeadModel),
    "bert-mlm": ("data.jsonl", "mlm", BertForMaskedLM),
    "bert-cls": ("data.jsonl", "cls", BertForSequenceClassification),
    "llama-gqa": ("data.npy", "causal", AutoModelForCausalLM),
    "mistral-window": ("data.npy", "causal", AutoModelForCausalLM),
    "qwen2-bias": ("data.npy", "causal", AutoModelForCausalLM),
    "qwen3-qknorm": ("data.npy", "causal", AutoModelForCausalLM),
    "phi3-fused": ("data.npy", "causal", AutoModelForCausalLM),
    "neox-parallel": ("data.npy", "causal", AutoModelForCausalLM),
    "neox-sequential": ("data.npy", "causal", AutoModelForCausalLM),
    "olmo2-post-norms": ("data.npy", "causal", AutoModelForCausalLM),
    "gemma2-softcap": ("data.npy", "causal", AutoModelForCausalLM),
    "gemma3-local": ("data.npy", "causal", AutoModelForCausalLM),
}
TASK_FIXTURES = ["llama-gqa"]  # fixtures whose task.jsonl (with corrupt prompts) gets resample cases
ABLATIONS = ["zero", "mean", "mean-pos"]
TASK_METRICS = ("logit_diff", "answer_logprob", "answer_prob", "answer_acc")
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "phi3")
POST_NORM = ("olmo2", "gemma2", "gemma3_text")

# model_type -> the module whose output is the MLP's contribution, in words (the JSON says it per fixture)
CONTRIBUTION = {
    "gpt2": "transformer.h[L].mlp",
    "bert": "encoder.layer[L].output.dense",
    "gpt_neox": "gpt_neox.layers[L].mlp",
    **{t: "model.layers[L].mlp" for t in LLAMA_LIKE},
    **{t: "model.layers[L].post_feedforward_layernorm" for t in POST_NORM},
}


def masks(n_layers):
    out = ["mlp:0", "mlp:1", "mlp:0,1.2", "mlp:0,mlp:1"]
    if n_layers > 2:
        out.append(f"mlp:{n_layers - 1}")  # the last layer's MLP, right before the final norm
    return out


# ---------------------------------------------------------------- the model and its hooks


def family_modules(model):
    """(contribution modules, the MLP's last linear layers, the residual probes) of every layer.

    A probe is (module, "out" | "in"): its output (or first input) holds the residual stream right after the
    MLP's contribution is added (the decoder layer's output; for BERT the input of output.LayerNorm)."""
    t = model.config.model_type
    if t == "gpt2":
        layers = model.transformer.h
        return [b.mlp for b in layers], [b.mlp.c_proj for b in layers], [(b, "out") for b in layers]
    if t == "bert":
        layers = (model.bert if hasattr(model, "bert") else model).encoder.layer
        return ([lay.output.dense for lay in layers], [lay.output.dense for lay in layers],
                [(lay.output.LayerNorm, "in") for lay in layers])
    if t == "gpt_neox":
        layers = model.gpt_neox.layers
        return [lay.mlp for lay in layers], [lay.mlp.dense_4h_to_h for lay in layers], [(lay, "out") for lay in layers]
    layers = model.model.layers
    if t in LLAMA_LIKE:
        contrib = [lay.mlp for lay in layers]
    elif t in POST_NORM:
        contrib = [lay.post_feedforward_layernorm for lay in layers]
    else:
        raise SystemExit(f"gen_mlp_cases: no MLP contribution known for model_type {t}")
    return contrib, [lay.mlp.down_proj for lay in layers], [(lay, "out") for lay in layers]


class MLPAblator:
    """Forward hooks on every layer's contribution module (family_modules), like hp_ref.HeadAblator's.

    mode None: pass-through. "record": keep a copy of every output. "apply": the outputs of the layers in
    self.layers are replaced by 0 ("zero"), by set_means()'s vectors ("mean", "mean_pos"), by another run's
    outputs ("patch": repl[l] a recorded (B, T, D) output of layer l), or shifted ("shift": out + repl[l],
    for the residual check only)."""

    def __init__(self, modules):
        self.modules = list(modules)
        self.mode = None
        self.recorded = [None] * len(self.modules)
        self.layers = set()
        self.ablation = "zero"
        self.repl = None
        self.handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(self.modules)]

    def remove(self):
        for h in self.handles:
            h.remove()

    def _hook(self, layer):
        def hook(module, args, out):
            assert torch.is_tensor(out), type(out)
            if self.mode == "record":
                self.recorded[layer] = out.detach().clone()
                return None
            if self.mode != "apply" or layer not in self.layers:
                return None
            if self.ablation == "zero":
                return torch.zeros_like(out)
            if self.ablation == "mean":
                return self.repl[layer].to(out.dtype).expand_as(out).clone()
            if self.ablation == "mean_pos":
                T = out.shape[1]
                return self.repl[layer][:T].to(out.dtype).unsqueeze(0).expand_as(out).clone()
            if self.ablation == "patch":
                src = self.repl[layer].to(out.dtype)
                assert src.shape == out.shape, (src.shape, out.shape)
                return src.clone()
            if self.ablation == "shift":
                return out + self.repl[layer].to(out.dtype)
            raise ValueError(self.ablation)
        return hook

    def set_means(self, attn_mask, ablation):
        # the heads' computation itself (hp_ref), on this ablator's recorded outputs
        hp_ref.HeadAblator.set_means(self, attn_mask, ablation)


def split_mask(spec, n_layers, n_heads, n_kv):
    """"mlp:0,1.2" -> ([0], the heads' gate (n_layers, n_heads), 0 = ablated)."""
    mlps, heads = set(), []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item.startswith("mlp:"):
            l = int(item[4:])
            assert 0 <= l < n_layers, item
            mlps.add(l)
        else:
            heads.append(item)
    return sorted(mlps), hp_ref.parse_mask(",".join(heads), n_layers, n_heads, n_kv)


class Model:
    """A fixture's model in float64 with head and MLP hooks."""

    def __init__(self, fixture, cls):
        self.fixture = fixture
        model, info = cls.from_pretrained(os.path.join(FIX, fixture), dtype=torch.float64,
                                          attn_implementation="eager", output_loading_info=True)
        bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        assert not bad, (fixture, bad)
        self.model = model.eval()
        cfg = model.config
        self.family = cfg.model_type
        self.causal = self.family != "bert"
        self.contrib, self.last_linear, self.probes = family_modules(model)
        head_mods, _ = hp_ref.out_projections(model.bert if hasattr(model, "bert") else model)
        self.n_layers = len(head_mods)
        assert len(self.contrib) == self.n_layers
        self.n_heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.d_head = head_mods[0].weight.shape[0 if self.family == "gpt2" else 1] // self.n_heads
        self.head_mods = head_mods
        self.heads = None
        self.mlps = None

    def hook(self):
        self.heads = hp_ref.HeadAblator(self.head_mods, self.n_heads, self.d_head)
        self.mlps = MLPAblator(self.contrib)

    def unhook(self):
        self.heads.remove()
        self.mlps.remove()
        self.heads = self.mlps = None

    def logits(self, kw):
        with torch.no_grad():
            if self.causal:
                return self.model(**kw, use_cache=False).logits.double()
            return self.model(**kw).logits.double()

    def record(self, kw):
        """Unmasked logits; the heads' and the MLPs' recorded tensors are left in the ablators."""
        self.heads.mode = self.mlps.mode = "record"
        try:
            return self.logits(kw)
        finally:
            self.heads.mode = self.mlps.mode = None

    def masked(self, kw, spec, ablation, real=None, corrupt_kw=None):
        """Logits with the mask's heads and MLPs ablated; replacements from the unmasked model."""
        mlps, gate = split_mask(spec, self.n_layers, self.n_heads, self.n_kv)
        a = {"zero": "zero", "mean": "mean", "mean-pos": "mean_pos", "resample": "patch"}[ablation]
        if a in ("mean", "mean_pos"):
            self.record(kw)
            self.heads.set_means(real, a)
            self.mlps.set_means(real, a)
        elif a == "patch":
            self.record(corrupt_kw)
            self.heads.repl = list(self.heads.recorded)
            self.mlps.repl = list(self.mlps.recorded)
        self.heads.gate, self.heads.ablation, self.heads.positions = gate, a, None
        self.mlps.layers, self.mlps.ablation = set(mlps), a
        self.heads.mode = self.mlps.mode = "apply"
        try:
            return self.logits(kw)
        finally:
            self.heads.mode = self.mlps.mode = None
            self.heads.repl = self.mlps.repl = None
            self.mlps.layers = set()


# ---------------------------------------------------------------- data and metrics


def load_data(fixture, data_file):
    p = os.path.join(FIX, fixture, data_file)
    if p.endswith(".npy"):
        return {"ids": torch.from_numpy(np.load(p).astype(np.int64))}
    rows = [json.loads(line) for line in open(p)]
    return {k: torch.tensor([r[k] for r in rows], dtype=torch.int64) for k in rows[0] if k != "text"}


def model_kw(data):
    kw = {"input_ids": data["ids"]}
    for k in ("attention_mask", "token_type_ids"):
        if k in data:
            kw[k] = data[k]
    return kw


def real_tokens(data):
    return data["attention_mask"] if "attention_mask" in data else torch.ones_like(data["ids"])


def scores(kind, data, z_m, z_u):
    """loss, acc, kl (mean per scored token of KL(unmasked || masked)), n_tokens, per_seq_loss."""
    if kind == "causal":
        m = hp_ref.causal_metrics(z_m, z_u, data["ids"], data.get("attention_mask"))
    elif kind == "mlm":
        m = hp_ref.mlm_metrics(z_m, z_u, data["labels"])
    else:  # a sequence classifier, as tools/gen_cls_fixture.py: one scored item per row
        lab = data["label"]
        lpm, lpu = torch.log_softmax(z_m.double(), -1), torch.log_softmax(z_u.double(), -1)
        ce = -lpm[torch.arange(len(lab)), lab]
        kl = (lpu.exp() * (lpu - lpm)).sum(-1)
        m = {"loss": float(ce.mean()), "acc": float((z_m.argmax(-1) == lab).double().mean()),
             "kl": float(kl.mean()), "n_tokens": len(lab), "per_seq_loss": ce.tolist()}
    return {k: m[k] for k in ("loss", "acc", "kl", "n_tokens", "per_seq_loss")}


def task_scores(last_m, last_u, rows, ld_clean, ld_corrupt):
    """The answer position's metrics over task rows: last_m / last_u (n_rows, V) masked / unmasked logits."""
    a = torch.tensor([r["answer_id"] for r in rows])
    w = torch.tensor([r["wrong_id"] for r in rows])
    idx = torch.arange(len(rows))
    lpm, lpu = torch.log_softmax(last_m, -1), torch.log_softmax(last_u, -1)
    per = {"logit_diff": last_m[idx, a] - last_m[idx, w], "answer_logprob": lpm[idx, a],
           "answer_prob": lpm[idx, a].exp(), "answer_acc": (last_m.argmax(-1) == a).double(),
           "loss": -lpm[idx, a], "kl": (lpu.exp() * (lpu - lpm)).sum(-1)}
    per["acc"] = per["answer_acc"]
    out = {k: float(v.mean()) for k, v in per.items()}
    out["patch_recovery"] = (out["logit_diff"] - ld_corrupt) / (ld_clean - ld_corrupt)
    out["n_tokens"] = len(rows)
    out["per_seq"] = {k: per[k].tolist() for k in ("loss", "kl", *TASK_METRICS)}
    return out


def maxdiff(a, b):
    return float((a - b).abs().max())


def finite(x):
    if isinstance(x, dict):
        return all(finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(finite(v) for v in x)
    if isinstance(x, float):
        return math.isfinite(x)
    return True


# ---------------------------------------------------------------- checks


def check_fixture(m, kind, data, base_logits):
    """The docstring's checks on a fixture's held-out set; returns what they measured."""
    kw = model_kw(data)
    worst = {}
    # pass-through, recording, and an empty mask: the plain logits exactly
    m.heads.mode = m.mlps.mode = None
    for what, lg in (("none", m.logits(kw)), ("record", m.record(kw)), ("empty", m.masked(kw, "", "zero"))):
        assert torch.equal(lg, base_logits), f"{m.fixture}: hooks without an edit ({what}) change the logits"
    base = scores(kind, data, base_logits, base_logits)["loss"]
    worst["zero_changes"] = math.inf
    worst["own_value"] = worst["weights_zeroed"] = worst["residual_shift"] = 0.0
    g = torch.Generator().manual_seed(0)
    for l in range(m.n_layers):
        spec = f"mlp:{l}"
        # (1) the hook acts
        z = m.masked(kw, spec, "zero")
        d, dl = maxdiff(z, base_logits), abs(scores(kind, data, z, base_logits)["loss"] - base)
        assert d > 1e-6 and dl > 1e-9, f"{m.fixture}: {spec} zeroed barely changes the logits ({d}) or loss ({dl})"
        worst["zero_changes"] = min(worst["zero_changes"], d)
        # (2) r = the model's own contribution changes nothing
        m.record(kw)
        own = list(m.mlps.recorded)
        m.mlps.repl, m.mlps.layers, m.mlps.ablation, m.mlps.mode = own, {l}, "patch", "apply"
        lg = m.logits(kw)
        m.mlps.mode, m.mlps.layers, m.mlps.repl = None, set(), None
        dl = abs(scores(kind, data, lg, base_logits)["loss"] - base)
        worst["own_value"] = max(worst["own_value"], maxdiff(lg, base_logits), dl)
        # zero by the hook = the MLP's last linear layer zeroed
        lin = m.last_linear[l]
        saved = [(p, p.data.clone()) for p in (lin.weight, getattr(lin, "bias", None)) if p is not None]
        for p, _ in saved:
            p.data.zero_()
        zw = m.logits(kw)
        for p, v in saved:
            p.data.copy_(v)
        worst["weights_zeroed"] = max(worst["weights_zeroed"], maxdiff(zw, z))
        # the contribution enters the residual stream additively: r = own + d moves it by d
        mod, where = m.probes[l]
        seen = []
        if where == "out":
            h = mod.register_forward_hook(lambda _m, _a, o: seen.append((o[0] if isinstance(o, tuple) else o).clone()))
        else:
            h = mod.register_forward_pre_hook(lambda _m, a: seen.append(a[0].clone()))
        try:
            m.logits(kw)
            D = own[l].shape[-1]
            delta = torch.randn(D, generator=g, dtype=torch.float64)
            m.mlps.repl = [delta] * m.n_layers
            m.mlps.layers, m.mlps.ablation, m.mlps.mode = {l}, "shift", "apply"
            m.logits(kw)
        finally:
            h.remove()
            m.mlps.mode, m.mlps.layers, m.mlps.repl = None, set(), None
        assert len(seen) == 2, (m.fixture, l, len(seen))
        err = maxdiff(seen[1] - seen[0], delta.expand_as(seen[0])) / max(1.0, float(seen[0].abs().max()))
        worst["residual_shift"] = max(worst["residual_shift"], err)
        if not torch.equal(m.logits(kw), base_logits):
            raise AssertionError(f"{m.fixture}: restoring layer {l}'s weights did not give the model back")
    assert worst["own_value"] <= TOL, f"{m.fixture}: r = own contribution moves the run by {worst['own_value']}"
    assert worst["weights_zeroed"] <= TOL, f"{m.fixture}: hook zero vs zeroed weights {worst['weights_zeroed']}"
    assert worst["residual_shift"] <= TOL, f"{m.fixture}: the residual moved by r - own off by {worst['residual_shift']}"
    # mean-pos of every MLP over one row repeated: each position's mean is that row's own contribution
    rep = {k: v[:1].repeat(4, *([1] * (v.dim() - 1))) for k, v in data.items()}
    all_mlps = ",".join(f"mlp:{l}" for l in range(m.n_layers))
    lu = m.logits(model_kw(rep))
    lm = m.masked(model_kw(rep), all_mlps, "mean-pos", real_tokens(rep))
    su, sm = scores(kind, rep, lu, lu), scores(kind, rep, lm, lu)
    worst["mean_pos_repeated_row"] = abs(sm["loss"] - su["loss"]) / abs(su["loss"])
    assert worst["mean_pos_repeated_row"] <= 1e-5 and sm["kl"] <= 1e-8, \
        f"{m.fixture}: mean-pos on one row repeated moves the loss by {worst['mean_pos_repeated_row']} (kl {sm['kl']})"
    # the data read as the fixture's reference reads it
    ref = json.load(open(os.path.join(FIX, m.fixture, "reference.json")))
    r0 = next(c for c in ref["cases"] if c["mask"] == "" and c["ablation"] == "zero")
    worst["reference_json_rel"] = abs(r0["loss"] - base) / abs(r0["loss"])
    assert worst["reference_json_rel"] <= 1e-4, f"{m.fixture}: unmasked loss {base} vs reference.json {r0['loss']}"
    return worst


# ---------------------------------------------------------------- cases


def fixture_cases(name, data_file, kind, cls):
    m = Model(name, cls)
    data = load_data(name, data_file)
    kw = model_kw(data)
    plain = m.logits(kw)  # before any hook exists
    m.hook()
    checks = check_fixture(m, kind, data, plain)
    info = {"family": m.family, "kind": kind, "data": data_file, "n_layers": m.n_layers, "n_heads": m.n_heads,
            "n_kv_heads": m.n_kv, "d_head": m.d_head, "n_seqs": int(data["ids"].shape[0]),
            "seq_len": int(data["ids"].shape[1]), "contribution": CONTRIBUTION[m.family] + " output",
            "checks": checks}
    cases = []

    def case(spec, ablation, lg):
        c = {"fixture": name, "data": data_file, "kind": kind, "mask": spec, "ablation": ablation}
        c.update(scores(kind, data, lg, plain))
        assert finite(c), c
        cases.append(c)
        print(f"  {name:17s} {spec:14s} {ablation:9s} loss {c['loss']:.9f} kl {c['kl']:.3e}")

    case("", "zero", plain)
    for spec in masks(m.n_layers):
        for ablation in ABLATIONS:
            case(spec, ablation, m.masked(kw, spec, ablation, real_tokens(data)))
    if name in TASK_FIXTURES:
        tc, tchecks = task_cases(m)
        cases += tc
        info["task_checks"] = tchecks
    m.unhook()
    return info, cases


def task_cases(m):
    """Resample cases on the fixture's task.jsonl, one row per forward as tools/gen_task_fixtures.py runs them."""
    name = m.fixture
    rows = [json.loads(line) for line in open(os.path.join(FIX, name, "task.jsonl"))]
    ref = json.load(open(os.path.join(FIX, name, "task-reference.json")))
    kws = [({"input_ids": torch.tensor([r["prompt_ids"]])}, {"input_ids": torch.tensor([r["corrupt_ids"]])})
           for r in rows]
    clean = torch.cat([m.logits(k)[:, -1] for k, _ in kws])
    corrupt = torch.cat([m.logits(c)[:, -1] for _, c in kws])
    checks = {"clean_corrupt_vs_task_reference": 0.0, "head_resample_vs_task_reference": 0.0,
              "resample_self": 0.0}
    ld = {}
    for what, lg in (("clean", clean), ("corrupt", corrupt)):
        s = task_scores(lg, clean, rows, 1.0, 0.0)
        for k in TASK_METRICS:
            checks["clean_corrupt_vs_task_reference"] = max(
                checks["clean_corrupt_vs_task_reference"],
                max(abs(a - b) for a, b in zip(s["per_seq"][k], ref[what][k])))
        ld[what] = s["logit_diff"]
    assert checks["clean_corrupt_vs_task_reference"] <= 1e-10, (name, checks)
    # every head resampled alone by this script's runs: task-reference.json's numbers
    for l in range(m.n_layers):
        for h in range(m.n_heads):
            last = [m.masked(k, f"{l}.{h}", "resample", corrupt_kw=c)[0, -1] for k, c in kws]
            got = [float(z[r["answer_id"]] - z[r["wrong_id"]]) for z, r in zip(last, rows)]
            want = ref["ablations"]["resample"]["logit_diff"]["rows"][l][h]
            checks["head_resample_vs_task_reference"] = max(checks["head_resample_vs_task_reference"],
                                                            max(abs(a - b) for a, b in zip(got, want)))
    assert checks["head_resample_vs_task_reference"] <= 1e-10, (name, checks)
    cases = []

    def case(spec, ablation, last):
        c = {"fixture": name, "data": "task.jsonl", "kind": "task", "mask": spec, "ablation": ablation}
        c.update(task_scores(last, clean, rows, ld["clean"], ld["corrupt"]))
        assert finite(c), c
        cases.append(c)
        print(f"  {name:17s} {spec:14s} {ablation:9s} loss {c['loss']:.9f} kl {c['kl']:.3e} "
              f"logit_diff {c['logit_diff']:.9f} patch_recovery {c['patch_recovery']:.6f}")

    case("", "zero", clean)
    for spec in masks(m.n_layers):
        last = torch.cat([m.masked(k, spec, "resample", corrupt_kw=c)[:, -1] for k, c in kws])
        same = torch.cat([m.masked(k, spec, "resample", corrupt_kw=k)[:, -1] for k, _ in kws])
        checks["resample_self"] = max(checks["resample_self"], maxdiff(same, clean))
        assert maxdiff(last, clean) > 1e-6, f"{name}: {spec} resampled changes nothing"
        case(spec, "resample", last)
    assert checks["resample_self"] <= TOL, (name, checks)
    return cases, checks


DOC = ("MLP ablation references for headprune's mask item mlp:L (tools/gen_mlp_cases.py; regenerate with "
       "`/work/venv/bin/python tools/gen_mlp_cases.py`, about half a minute). transformers in float64 (dtype "
       "float64, eager attention, one thread). Ablating mlp:L replaces, at every token, the MLP block's "
       "contribution to the residual stream at layer L (fixtures.<name>.contribution: the module whose output it "
       "is) by r: 0 (ablation zero); its mean over every real token of the held-out set under the unmasked model "
       "(mean); its mean at each position over the rows where the position is real, 0 where none is (mean-pos); "
       "its value at the same row and position with the unmasked model run on the row's corrupt prompt "
       "(resample, task rows only). Means as the heads' (hp_ref.HeadAblator.set_means: float64 sums, rounded to "
       "float32). Head items in a mask (\"mlp:0,1.2\") get the same ablation as hp_ref does for heads; every "
       "replacement comes from the unmasked model. A case: fixture (tests/fixtures/<fixture>), data (its file), "
       "kind (causal: mean next-token loss over every predicted token; mlm: over the labelled positions; cls: "
       "cross-entropy of the rows' labels; task: one scored item per row, the prompt's last position with the "
       "answer as target, rows run one at a time), mask, ablation; loss (nats), acc (top-1), kl (mean per scored "
       "item of KL(unmasked || masked), nats), n_tokens (scored items), per_seq_loss (per row; task cases: "
       "per_seq holds per-row loss, kl and the task metrics). Task cases also have logit_diff (logit(answer) - "
       "logit(wrong)), answer_logprob, answer_prob, answer_acc (means over rows) and patch_recovery ((logit_diff "
       "- corrupt) / (clean - corrupt), of the unmasked means on the prompts and corrupt prompts), as "
       "task-reference.json defines them. The case with mask \"\" and ablation zero is the unmasked model; "
       "fixtures.<name>.checks holds what the self-checks measured (see the tool's docstring).")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    out = {"doc": DOC, "tool": "tools/gen_mlp_cases.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "fixtures": {}, "cases": []}
    for name, (data_file, kind, cls) in FIXTURES.items():
        info, cases = fixture_cases(name, data_file, kind, cls)
        out["fixtures"][name] = info
        out["cases"] += cases
    assert finite(out)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.chmod(OUT, 0o644)
    print(f"wrote {os.path.relpath(OUT, REPO)}: {len(out['cases'])} cases on {len(out['fixtures'])} fixtures, "
          f"{time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
