#!/usr/bin/env python3
"""Every config.json key headprune honours, changed on a fixture, against transformers in float64.

For each architecture, each key that docs/checkpoints.md marks "honoured" (and the keys marked "irrelevant" for
which a change is listed below: a key transformers' modeling code ignores must leave the numbers alone), the
fixture's config.json is changed in that key alone (a few keys take several values), the fixture's weights and
held-out data kept, and transformers 4.x loads the result in float64 (eager attention) and scores it unmasked and
with layer 1's heads zeroed (o_proj pre-hooks, tools/hp_ref.py). Each case records:

  expect "same"     transformers loads the changed checkpoint cleanly (no missing, unexpected or mismatched
                    tensor): headprune must give its losses (tests/test_model.c, 1e-5 relative);
  expect "no_reference"  transformers fails by accident (a TypeError in its own code, not a check of the value):
                    headprune may run or refuse it in one line; nothing to compare with;
  expect "refused"  transformers cannot load it as it is (a tensor missing, unused or of another shape; it
                    would initialise the missing ones at random), or the value is one headprune documents it
                    does not implement (REFUSE below, a one-line refusal naming the key): headprune must refuse.

A key honoured with no case must be listed in EXEMPT with the reason another test covers it; test_model.c fails
on an honoured key (engine/model/config_keys.c's rows) with neither. Writes tests/fixtures/config-key-cases.json.

    /work/venv/bin/python tools/gen_config_key_cases.py

Deterministic (one torch thread, fixed fixtures); about a minute.
"""
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402

import transformers  # noqa: E402
from transformers import (AutoModelForCausalLM, BertForMaskedLM, BertForSequenceClassification,  # noqa: E402
                          GPT2LMHeadModel)

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(REPO, "tests", "fixtures")
OUT = os.path.join(FIX, "config-key-cases.json")
MASKS = ["", "1.*"]

# model_type -> (fixture, its data file, kind, transformers class)
ARCHS = {
    "gpt2": ("gpt2-tiny", "data.npy", "causal", GPT2LMHeadModel),
    "bert": ("bert-mlm", "data.jsonl", "mlm", BertForMaskedLM),
    "llama": ("llama-gqa", "data.npy", "causal", AutoModelForCausalLM),
    "mistral": ("mistral-window", "data.npy", "causal", AutoModelForCausalLM),
    "qwen2": ("qwen2-bias", "data.npy", "causal", AutoModelForCausalLM),
    "qwen3": ("qwen3-qknorm", "data.npy", "causal", AutoModelForCausalLM),
    "phi3": ("phi3-fused", "data.npy", "causal", AutoModelForCausalLM),
    "gpt_neox": ("neox-parallel", "data.npy", "causal", AutoModelForCausalLM),
    "olmo2": ("olmo2-post-norms", "data.npy", "causal", AutoModelForCausalLM),
    "gemma2": ("gemma2-softcap", "data.npy", "causal", AutoModelForCausalLM),
    "gemma3_text": ("gemma3-local", "data.npy", "causal", AutoModelForCausalLM),
}
# keys whose cases run on another fixture of the architecture: (model_type, key) -> fixture
ON = {
    ("bert", "id2label"): ("bert-cls", "data.jsonl", "cls", BertForSequenceClassification),
    ("bert", "problem_type"): ("bert-cls", "data.jsonl", "cls", BertForSequenceClassification),
    ("llama", "mlp_bias"): ("llama-mlp-bias", "data.npy", "causal", AutoModelForCausalLM),
}

DELETE = "__delete__"  # an edit that removes the key
CRASH = "crash"  # transformers failed by accident, not by a check of its own: nothing to compare with


def halve(v):
    return max(1, int(v) // 2)


def other_act(v):
    return {"silu": "gelu_new", "gelu_new": "relu", "gelu": "silu", "gelu_pytorch_tanh": "silu",
            "relu": "gelu"}.get(v, "silu")


# key -> list of changes, each a function of the base config giving {key: value} (DELETE removes a key)
def one(key, f):
    return lambda c: {key: f(c.get(key))}


ROPE_VALUES = [
    {"rope_type": "linear", "factor": 3.0},
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8},
    {"type": "linear", "factor": 3.0},  # the spelling before transformers 4.45, the only one Olmo2Config takes
    {"type": "dynamic", "factor": 2.0},
    {"rope_type": "yarn", "factor": 2.0},  # transformers implements it, headprune does not (REFUSE)
]

CHANGES = {
    "vocab_size": [one("vocab_size", lambda v: v + 1)],
    "hidden_size": [one("hidden_size", lambda v: v * 2)],
    "n_embd": [one("n_embd", lambda v: v * 2)],
    "intermediate_size": [one("intermediate_size", lambda v: v * 2)],
    "n_inner": [lambda c: {"n_inner": 2 * c["n_embd"]}],
    "num_hidden_layers": [one("num_hidden_layers", lambda v: v - 1), one("num_hidden_layers", lambda v: v + 1)],
    "n_layer": [one("n_layer", lambda v: v - 1)],
    "num_attention_heads": [one("num_attention_heads", halve)],
    "n_head": [one("n_head", halve)],
    "num_key_value_heads": [one("num_key_value_heads", halve)],
    "head_dim": [lambda c: {"head_dim": 2 * (c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])}],
    "hidden_act": [one("hidden_act", other_act)],
    "hidden_activation": [one("hidden_activation", other_act)],
    "activation_function": [one("activation_function", other_act)],
    # halved, but not below the data's rows; then one short of them, which headprune refuses (its rows may not
    # be longer than the positions) where a rotary model's transformers runs them anyway (REFUSE)
    "max_position_embeddings": [lambda c: {"max_position_embeddings": max(halve(c["max_position_embeddings"]),
                                                                          c["__seq_len__"])},
                                lambda c: {"max_position_embeddings": c["__seq_len__"] - 1}],
    "n_positions": [one("n_positions", halve)],
    "rms_norm_eps": [one("rms_norm_eps", lambda v: 0.05)],
    "layer_norm_eps": [one("layer_norm_eps", lambda v: 0.05)],
    "layer_norm_epsilon": [one("layer_norm_epsilon", lambda v: 0.05)],
    "rope_theta": [one("rope_theta", lambda v: 100.0)],
    "rotary_emb_base": [one("rotary_emb_base", lambda v: 100.0)],
    "rope_scaling": [(lambda r: lambda c: {"rope_scaling": r})(r) for r in ROPE_VALUES]
                    + [lambda c: {"rope_scaling": None}]
                    # dynamic scaling past its threshold: the rows twice the positions (with the factor, allowed)
                    + [(lambda t: lambda c: {"rope_scaling": {t: "dynamic", "factor": 2.0},
                                             "max_position_embeddings": c["__seq_len__"] // 2})(t)
                       for t in ("rope_type", "type")],
    "attention_bias": [one("attention_bias", lambda v: not v)],
    "mlp_bias": [one("mlp_bias", lambda v: not v)],
    "sliding_window": [one("sliding_window", lambda v: 3)],
    "layer_types": [lambda c: {"layer_types": [
        "full_attention" if t == "sliding_attention" else "sliding_attention"
        for t in (c.get("layer_types") or ["full_attention"] * c["num_hidden_layers"])]}],
    "query_pre_attn_scalar": [one("query_pre_attn_scalar", lambda v: 30)],
    "attn_logit_softcapping": [one("attn_logit_softcapping", lambda v: 2.0 if v is None else 5.0),
                               one("attn_logit_softcapping", lambda v: None)],
    "final_logit_softcapping": [one("final_logit_softcapping", lambda v: 2.0 if v is None else 1.5),
                                one("final_logit_softcapping", lambda v: None)],
    "rope_local_base_freq": [one("rope_local_base_freq", lambda v: 1000.0)],
    "sliding_window_pattern": [lambda c: {"sliding_window_pattern": 3, "layer_types": DELETE}],
    "scale_attn_by_inverse_layer_idx": [one("scale_attn_by_inverse_layer_idx", lambda v: not v)],
    "type_vocab_size": [one("type_vocab_size", lambda v: v + 1)],
    "position_embedding_type": [one("position_embedding_type", lambda v: "relative_key")],
    "id2label": [lambda c: {"id2label": {str(i): f"L{i}" for i in range(len(c["id2label"]) + 1)}}],
    "problem_type": [one("problem_type", lambda v: "single_label_classification"),
                     one("problem_type", lambda v: "multi_label_classification")],
    "rotary_pct": [one("rotary_pct", lambda v: 1.0)],
    "use_parallel_residual": [one("use_parallel_residual", lambda v: not v)],
    # the other way from the value it has (absent: the class's default, true but for the Llama family's own)
    "tie_word_embeddings": [lambda c: {"tie_word_embeddings": not c.get("tie_word_embeddings", True)}],
}

# values transformers implements and headprune documents it does not: it must refuse them, naming the key.
# (model_type or None for any, key) -> (does this change make the case, why)
UNTIED = "the fixture stores its own head, which differs from the embedding: transformers drops it silently"
REFUSE = {
    ("qwen2", "layer_types"): (lambda e, b: True, "Qwen2's sliding layers (use_sliding_window) are not implemented"),
    ("qwen3", "layer_types"): (lambda e, b: True, "Qwen3's sliding layers (use_sliding_window) are not implemented"),
    (None, "rope_scaling"): (lambda e, b: (e["rope_scaling"] or {}).get("rope_type") == "yarn",
                             "yarn rotary scaling is not implemented"),
    (None, "tie_word_embeddings"): (lambda e, b: e["tie_word_embeddings"] is True and b.get("tie_word_embeddings") is False,
                                    UNTIED),
    (None, "max_position_embeddings"): (lambda e, b: e["max_position_embeddings"] < b["__seq_len__"] and
                                        "rope_scaling" not in e,
                                        "rows longer than the positions are refused (\"positions\")"),
    ("bert", "problem_type"): (lambda e, b: e["problem_type"] == "multi_label_classification",
                               "multi-label classification's loss is not implemented"),
}

# honoured keys with no case here, and the test that covers them instead
EXEMPT = {
    "model_type": "every fixture's config names it; tests/test_reference.c compares each fixture with transformers",
    "pruned_heads": "tests/fixtures/gpt2-pruned and bert-mlm-pruned: pruned checkpoints against transformers "
                    "(tools/gen_fixtures.py, tests/test_reference.c)",
    "headprune": "headprune's own record of a pruned checkpoint, which transformers never reads "
                 "(tests/test_export.c)",
}


def honoured(arch):
    """The keys docs/checkpoints.md marks honoured and irrelevant for arch (its table and the shared one)."""
    txt = open(os.path.join(REPO, "docs", "checkpoints.md")).read()
    table, out = None, {"honoured": set(), "irrelevant": set()}
    for line in txt.splitlines():
        if line.startswith("### Every architecture"):
            table = "shared"
            continue
        m = re.match(r"^##+ (\S+)", line)
        if m:
            table = m.group(1)
            continue
        m = re.match(r"^\| `([^`]+)` \| .* \| (honoured|irrelevant)[^|]*\|$", line)
        if m and table in (arch, "shared"):
            out[m.group(2)].add(m.group(1))
    return out


def load_data(fixture, data_file):
    p = os.path.join(FIX, fixture, data_file)
    if p.endswith(".npy"):
        return {"ids": torch.from_numpy(np.load(p).astype(np.int64))}
    rows = [json.loads(line) for line in open(p)]
    return {k: torch.tensor([r[k] for r in rows], dtype=torch.int64) for k in rows[0] if k != "text"}


def run(model, kind, data):
    """Losses (float64) unmasked and under each of MASKS, zero ablation by o_proj pre-hooks."""
    mods, _ = hp_ref.out_projections(model.bert if hasattr(model, "bert") else model)
    cfg = model.config
    H = getattr(cfg, "num_attention_heads", None) or cfg.n_head
    L = len(mods)
    d_head = mods[0].weight.shape[0 if isinstance(model, GPT2LMHeadModel) else 1] // H
    abl = hp_ref.HeadAblator(mods, H, d_head)
    kw = {"input_ids": data["ids"]}
    for k in ("attention_mask", "token_type_ids"):
        if k in data:
            kw[k] = data[k]
    out = []
    try:
        for spec in MASKS:
            abl.gate = hp_ref.parse_mask(spec, L, H, getattr(cfg, "num_key_value_heads", H))
            abl.mode = "apply" if spec else None
            with torch.no_grad():
                z = model(**kw).logits.double()
            if kind == "causal":
                loss = hp_ref.causal_metrics(z, z, data["ids"], data.get("attention_mask"))["loss"]
            elif kind == "mlm":
                loss = hp_ref.mlm_metrics(z, z, data["labels"])["loss"]
            else:  # a sequence classifier: the mean cross-entropy of the rows' labels
                loss = float(torch.nn.functional.cross_entropy(z, data["label"]))
            assert np.isfinite(loss), loss
            out.append(loss)
    finally:
        abl.remove()
    return out


def edited(base, edits):
    cfg = dict(base)
    for k, v in edits.items():
        if v == DELETE:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


def hf_case(fixture, cls, kind, data, cfg):
    """transformers on the fixture's weights with config cfg: (losses or None, why not)."""
    tmp = tempfile.mkdtemp(prefix="hp-keys-")
    try:
        src = os.path.join(FIX, fixture)
        for f in os.listdir(src):
            if f.endswith(".safetensors") and not f.startswith("reference") or f.endswith(".index.json"):
                os.symlink(os.path.join(src, f), os.path.join(tmp, f))
        with open(os.path.join(tmp, "config.json"), "w") as fh:
            json.dump(cfg, fh)
        try:
            model, info = cls.from_pretrained(tmp, dtype=torch.float64, attn_implementation="eager",
                                              output_loading_info=True)
        except (ValueError, KeyError, RuntimeError) as e:  # a tensor of another shape, a value the class refuses
            return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        except Exception as e:  # transformers' own failure (a TypeError deep in its rotary code): no reference
            return CRASH, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        if bad:
            return None, "; ".join(f"{k} {sorted(map(str, v))[:3]}" for k, v in bad.items())
        model.eval()
        try:
            return run(model, kind, data), None
        except Exception as e:  # its forward fails (Qwen2's sliding layers without a window): no reference
            return CRASH, f"its forward: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    finally:
        shutil.rmtree(tmp)


def main():
    out = {"tool": "tools/gen_config_key_cases.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "masks": MASKS, "exempt": EXEMPT, "cases": []}
    for arch, default in ARCHS.items():
        keys = honoured(arch)
        for key in sorted(keys["honoured"] | (keys["irrelevant"] & set(CHANGES))):
            if key in EXEMPT:
                continue
            assert key in CHANGES, f"{arch}: honoured key {key} has no change listed (CHANGES) nor EXEMPT reason"
            fixture, data_file, kind, cls = ON.get((arch, key), default)
            base = json.load(open(os.path.join(FIX, fixture, "config.json")))
            data = load_data(fixture, data_file)
            ctx = dict(base, __seq_len__=int(data["ids"].shape[1]))
            base_loss, why = hf_case(fixture, cls, kind, data, base)
            assert base_loss, (fixture, why)
            for change in CHANGES[key]:
                try:
                    edits = change(ctx)
                except (KeyError, TypeError):  # the fixture's config lacks what the change is made from
                    edits = None
                if edits is None or all(base.get(k, DELETE) == v for k, v in edits.items()):
                    continue  # no change on this fixture (the key's value already)
                cfg = edited(base, edits)
                loss, why = hf_case(fixture, cls, kind, data, cfg)
                rule = REFUSE.get((arch, key)) or REFUSE.get((None, key))
                refuse = rule[1] if rule and rule[0](edits, ctx) else None
                c = {"model_type": arch, "key": key, "decision": "honoured" if key in keys["honoured"] else
                     "irrelevant", "fixture": fixture, "data": data_file, "edits": edits, "config": cfg}
                if loss is None:  # transformers cannot load it: headprune must refuse too, naming the checkpoint
                    c.update(expect="refused", name="", why=f"transformers: {why}")
                elif refuse:  # a value transformers runs and headprune documents it does not: named by the key or
                    named = re.search(r'"(\w+)"', refuse)  # by the word the reason quotes
                    c.update(expect="refused", name=named.group(1) if named else key, why=refuse)
                elif loss == CRASH:  # headprune must not crash and may run or refuse; nothing to compare with
                    c.update(expect="no_reference", why=f"transformers: {why}")
                else:
                    c.update(expect="same", loss=loss, changes=bool(abs(loss[0] - base_loss[0]) > 1e-9))
                out["cases"].append(c)
                print(f"{arch:12s} {key:32s} {json.dumps(edits)[:60]:60s} {c['expect']:8s} "
                      f"{c.get('loss', c.get('why'))}")
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    n = len(out["cases"])
    same = sum(c["expect"] == "same" for c in out["cases"])
    print(f"wrote {os.path.relpath(OUT, REPO)}: {n} cases ({same} compared, {n - same} refused)")


if __name__ == "__main__":
    main()
