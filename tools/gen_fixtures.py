#!/usr/bin/env python3
"""Generate headprune's tiny random-initialised test fixtures.

For every fixture under tests/fixtures/<name>/ this writes a Hugging Face model
directory (config.json + model.safetensors or shards), a held-out set
(data.npy or data.jsonl) and the reference numbers the C engine must reproduce
(reference.json, reference.safetensors). Fully deterministic.

    /work/venv/bin/python tools/gen_fixtures.py [--out tests/fixtures] [names...]

Semantics: see tools/README.md and tools/hp_ref.py.
"""
import argparse
import copy
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402

from transformers import (  # noqa: E402
    BertConfig, BertForMaskedLM, BertModel, GPT2Config, GPT2LMHeadModel,
    LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
    Qwen3Config, Qwen3ForCausalLM, Phi3Config, Phi3ForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM,
    Olmo2Config, Olmo2ForCausalLM, Gemma2Config, Gemma2ForCausalLM, Gemma3TextConfig, Gemma3ForCausalLM,
)
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)  # bit-for-bit reproducible reductions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INIT = 0.3  # initializer_range: large so attention is peaked and heads matter
N_SEQS, SEQ_LEN = 3, 16

# ---------------------------------------------------------------- building


def perturb(model, seed, std):
    """HF init zeroes biases and sets norm gains to 1; make them random too so a
    loader that drops or swaps a bias / norm tensor gives different numbers."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            low = name.lower()
            is_norm = "norm" in low or ".ln_" in low or low.startswith("ln_") or "layernorm" in low
            if is_norm and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(std * torch.randn(p.shape, generator=g))


def round_params(model, dtype):
    """Round every parameter to dtype and back, in place (the model stays f32)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))


def make(model_cls, config, seed, round_to=None):
    torch.manual_seed(seed)
    model = model_cls._from_config(config, attn_implementation="eager", dtype=torch.float32)
    perturb(model, seed + 1000, 0.5 * config.initializer_range)
    if round_to is not None:
        round_params(model, round_to)
    model.eval()
    return model


# ---------------------------------------------------------------- running


class Runner:
    """Binds a model to its held-out set. arch: gpt2 | bert | neox | llama."""

    def __init__(self, model, arch, kind, data):
        self.model, self.arch, self.kind, self.data = model, arch, kind, data
        cfg = model.config
        if arch == "gpt2":
            base = model.transformer
            mods = [blk.attn.c_proj for blk in base.h]
            self.n_heads, self.n_kv = cfg.n_head, cfg.n_head
        elif arch == "bert":
            base = model.bert if hasattr(model, "bert") else model
            mods = [lay.attention.output.dense for lay in base.encoder.layer]
            self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_attention_heads
        elif arch == "neox":
            mods, _ = hp_ref.out_projections(model)
            self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_attention_heads
        else:
            mods = [lay.self_attn.o_proj for lay in model.model.layers]
            self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.n_layers = len(mods)
        self.d_head = mods[0].weight.shape[0 if arch == "gpt2" else 1] // self.n_heads
        self.abl = hp_ref.HeadAblator(mods, self.n_heads, self.d_head)
        ids = data["ids"]
        self.attn_mask = data.get("attention_mask")
        self.real = self.attn_mask if self.attn_mask is not None else torch.ones_like(ids)

    @torch.no_grad()
    def forward(self, head_mask=None):
        d = self.data
        kw = {"input_ids": d["ids"]}
        if self.arch == "bert":
            kw["attention_mask"] = d["attention_mask"]
            if "token_type_ids" in d:
                kw["token_type_ids"] = d["token_type_ids"]
        if head_mask is not None:
            kw["head_mask"] = head_mask
        out = self.model(**kw)
        if self.kind == "encoder":
            return out.last_hidden_state.float()
        return out.logits.float()

    def masked_output(self, gate, ablation, use_head_mask):
        if ablation == "zero" and use_head_mask:
            self.abl.mode = None
            return self.forward(head_mask=gate)
        if ablation != "zero":
            self.abl.mode = "record"
            self.forward()
            self.abl.set_means(self.real, ablation)
        self.abl.gate, self.abl.ablation, self.abl.mode = gate, ablation, "apply"
        try:
            return self.forward()
        finally:
            self.abl.mode = None

    def metrics(self, out_m, out_u):
        d = self.data
        if self.kind == "causal":
            return hp_ref.causal_metrics(out_m, out_u, d["ids"], self.attn_mask)
        if self.kind == "mlm":
            return hp_ref.mlm_metrics(out_m, out_u, d["labels"])
        return hp_ref.cos_metrics(out_m, out_u, d["attention_mask"])


def case_list(n_layers, n_heads, n_kv, with_mean):
    L, H = n_layers, n_heads
    cases = [
        ("none", "", "zero"),
        (f"h0_1", "0.1", "zero"),
        (f"h{L-1}_{H-1}", f"{L-1}.{H-1}", "zero"),
        ("l1", "1.*", "zero"),
        ("all", ",".join(f"{l}.*" for l in range(L)), "zero"),
        ("mix", f"0.0,{L-1}.1", "zero"),
    ]
    if n_kv != n_heads:
        cases.append(("kv1_0", "kv:1.0", "zero"))
    if with_mean:
        cases.append(("mean", "0.1,1.2", "mean"))
        cases.append(("mean_pos", "0.1,1.2", "mean_pos"))
    return cases


def run_cases(runner, cases):
    """-> (case dicts, outputs). Zero masks on GPT-2 / BERT use HF's head_mask and
    are cross-checked against the pre-hook path."""
    out_u = runner.forward()
    res, outputs = [], {}
    for name, spec, ablation in cases:
        gate = hp_ref.parse_mask(spec, runner.n_layers, runner.n_heads, runner.n_kv)
        hm = ablation == "zero" and runner.arch in ("gpt2", "bert")
        out_m = out_u if spec == "" else runner.masked_output(gate, ablation, hm)
        if hm and spec != "":
            alt = runner.masked_output(gate, ablation, False)
            diff = float((alt - out_m).abs().max())
            print(f"    [{name}] head_mask vs o_proj pre-hook: max |diff| = {diff:.3g}")
            assert diff < 1e-4, diff
        c = {"name": name, "mask": spec, "ablation": ablation,
             "n_ablated": int((gate == 0).sum())}
        c.update(runner.metrics(out_m, out_u))
        c["output"] = name
        assert hp_ref.isfinite_case(c), c
        res.append(c)
        outputs[name] = out_m
    return res, outputs


def report(name, dirpath, cases, single_heads):
    c0 = cases[0]
    print(f"  {name}: {hp_ref.dir_size(dirpath) / 1024:.1f} KiB")
    for c in cases:
        print(f"    {c['name']:10s} {c['mask']!r:18s} {c['ablation']:8s} {hp_ref.fmt_case(c)}"
              f"  rel.change={hp_ref.rel_change(c0, c):.2e}")
    for c in cases[1:]:
        if c["name"] in single_heads:  # single heads must move the loss (1 - cos) by > 0.1 %
            assert hp_ref.rel_change(c0, c) > 1e-3, f"{name}/{c['name']}: mask barely matters"
        if "kl" in c:
            assert c["kl"] > 1e-3, f"{name}/{c['name']}: mask barely changes the distribution"


def check_reload(model_cls, dirpath, runner, ref_out, tol=0.0):
    """Load the written directory back with transformers and compare the unmasked output."""
    m = model_cls.from_pretrained(dirpath, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    r = Runner(m, runner.arch, runner.kind, runner.data)
    diff = float((r.forward() - ref_out).abs().max())
    print(f"    reload {os.path.basename(dirpath)} with from_pretrained: max |diff| = {diff:.3g}")
    assert diff <= tol, diff
    r.abl.remove()


def fresh_dir(out, name):
    d = os.path.join(out, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    return d


def causal_data(vocab, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, size=(N_SEQS, SEQ_LEN)).astype(np.int32)


def meta(name, data_file, runner, data, kind):
    ids = data["ids"]
    return {"model": name, "data": data_file, "n_seqs": int(ids.shape[0]), "seq_len": int(ids.shape[1]),
            "kind": kind, "n_layers": runner.n_layers, "n_heads": runner.n_heads,
            "n_kv_heads": runner.n_kv, "d_head": runner.d_head,
            "output_kind": "hidden" if kind == "encoder" else "logits",
            "output_seqs": int(ids.shape[0])}


def finish(out, name, data_file, model, arch, kind, data, with_mean=False, model_cls=None,
           save=None):
    d = os.path.join(out, name)
    r = Runner(model, arch, kind, data)
    cases, outputs = run_cases(r, case_list(r.n_layers, r.n_heads, r.n_kv, with_mean))
    hp_ref.write_reference(d, meta(name, data_file, r, data, kind), cases, outputs)
    if model_cls is not None:
        check_reload(model_cls, d, r, outputs["none"])
    report(name, d, cases, {c[0] for c in case_list(r.n_layers, r.n_heads, r.n_kv, False)[1:3]})
    r.abl.remove()
    return cases


def write_npy(d, ids):
    np.save(os.path.join(d, "data.npy"), ids)
    return {"ids": torch.from_numpy(ids.astype(np.int64))}


# ---------------------------------------------------------------- fixtures


def gpt2_tiny(out):
    name = "gpt2-tiny"
    cfg = GPT2Config(n_layer=3, n_head=4, n_embd=32, vocab_size=97, n_positions=64,
                     initializer_range=INIT, bos_token_id=0, eos_token_id=0)
    model = make(GPT2LMHeadModel, cfg, 1)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 101))
    return finish(out, name, "data.npy", model, "gpt2", "causal", data, True, GPT2LMHeadModel)


def gpt2_vocab(out):
    """A GPT-2 whose vocabulary (4500) spans three of the engine's 2048-logit blocks (HP_VOCAB_BLOCK), so the
    LM head's online softmax rescales its running sums when a later block holds a larger logit; every other
    fixture's vocabulary fits one block. Only the unmasked case keeps its logits (432 KiB); the masked cases
    are checked by their metrics."""
    name = "gpt2-vocab"
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=16, vocab_size=4500, n_positions=32,
                     initializer_range=INIT, bos_token_id=0, eos_token_id=0)
    model = make(GPT2LMHeadModel, cfg, 7)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    rng = np.random.default_rng(107)
    data = write_npy(d, rng.integers(0, 4500, size=(2, 12)).astype(np.int32))
    r = Runner(model, "gpt2", "causal", data)
    cases, outputs = run_cases(r, case_list(r.n_layers, r.n_heads, r.n_kv, True))
    for c in cases[1:]:
        del c["output"]
    # where each scored row's largest logit lies: the test is only worth its name if some lie past block 0
    z = outputs["none"][:, :-1, :]
    blocks = (z.argmax(-1) // 2048).flatten().tolist()
    print(f"    largest logit in vocabulary block 0/1/2: {[blocks.count(b) for b in range(3)]}")
    assert blocks.count(1) + blocks.count(2) > 0
    hp_ref.write_reference(d, meta(name, "data.npy", r, data, "causal"), cases, {"none": outputs["none"]})
    check_reload(GPT2LMHeadModel, d, r, outputs["none"])
    report(name, d, cases, {c[0] for c in case_list(r.n_layers, r.n_heads, r.n_kv, False)[1:3]})
    r.abl.remove()
    return cases


def gpt2_noprefix(out):
    name = "gpt2-noprefix"
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=97, n_positions=64,
                     initializer_range=INIT, bos_token_id=0, eos_token_id=0)
    model = make(GPT2LMHeadModel, cfg, 22)
    d = fresh_dir(out, name)
    # like the original `gpt2` checkpoint: base-model keys, no lm_head (tied),
    # plus the causal-mask buffers h.N.attn.bias a loader must skip
    sd = {k: v.detach().clone().contiguous() for k, v in model.transformer.state_dict().items()}
    n = cfg.n_positions
    for i in range(cfg.n_layer):
        sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n, dtype=torch.float32)).view(1, 1, n, n)
    assert not any(k.startswith(("transformer.", "lm_head")) for k in sd)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg_d = cfg.to_dict()
    cfg_d["architectures"] = ["GPT2LMHeadModel"]
    cfg_d.pop("_attn_implementation_autoset", None)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg_d, f, indent=2, sort_keys=True)
        f.write("\n")
    data = write_npy(d, causal_data(97, 102))
    return finish(out, name, "data.npy", model, "gpt2", "causal", data, False, GPT2LMHeadModel)


def bert_rows(vocab, seed, lengths, mlm, types):
    """Rows of ids / attention_mask / token_type_ids (/ labels): 2 = [CLS],
    3 = [SEP], 4 = [MASK], 0 = [PAD], ordinary tokens in [5, vocab)."""
    rng = np.random.default_rng(seed)
    T = max(lengths)
    rows = []
    for i, n in enumerate(lengths):
        ids = [2] + list(rng.integers(5, vocab, size=n - 2)) + [3] + [0] * (T - n)
        row = {"ids": [int(v) for v in ids],
               "attention_mask": [1] * n + [0] * (T - n)}
        if types[i]:
            split = n // 2
            row["token_type_ids"] = [0] * split + [1] * (n - split) + [0] * (T - n)
        else:
            row["token_type_ids"] = [0] * T
        if mlm:
            labels = [-100] * T
            cand = np.arange(1, n - 1)
            k = max(1, int(round(0.22 * n)))
            for p in sorted(rng.choice(cand, size=k, replace=False)):
                labels[p] = row["ids"][p]
                r = rng.random()
                if r < 0.8:
                    row["ids"][p] = 4
                elif r < 0.9:
                    row["ids"][p] = int(rng.integers(5, vocab))
            row["labels"] = labels
        rows.append(row)
    return rows


def write_jsonl(d, rows, keys):
    with open(os.path.join(d, "data.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps({k: r[k] for k in keys}) + "\n")
    return {k: torch.tensor([r[k] for r in rows], dtype=torch.int64) for k in keys}


def bert_mlm(out):
    name = "bert-mlm"
    cfg = BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                     initializer_range=INIT, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, pad_token_id=0,
                     sep_token_id=3)  # bert_rows' [SEP]: roles' sep_token reads it from config.json
    model = make(BertForMaskedLM, cfg, 3)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    rows = bert_rows(101, 103, [16, 11, 16, 7], True, [True, False, True, False])
    data = write_jsonl(d, rows, ["ids", "labels", "attention_mask", "token_type_ids"])
    return finish(out, name, "data.jsonl", model, "bert", "mlm", data, False, BertForMaskedLM)


def bert_encoder(out):
    name = "bert-encoder"
    cfg = BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                     initializer_range=INIT, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, pad_token_id=0)
    model = make(BertModel, cfg, 4)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)  # BertModel keys carry no "bert." prefix
    rows = bert_rows(101, 104, [16, 9, 13, 16], False, [False] * 4)
    data = write_jsonl(d, rows, ["ids", "attention_mask"])
    return finish(out, name, "data.jsonl", model, "bert", "encoder", data, False, BertModel)


def llama_gqa(out):
    name = "llama-gqa"
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      initializer_range=INIT, bos_token_id=1, eos_token_id=2)
    model = make(LlamaForCausalLM, cfg, 5)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 105))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, True, LlamaForCausalLM)

    # the same model, sharded
    sname = name + "-sharded"
    sd = fresh_dir(out, sname)
    model.save_pretrained(sd, safe_serialization=True, max_shard_size="60KB")
    shutil.copy(os.path.join(d, "data.npy"), sd)
    shutil.copy(os.path.join(d, "reference.safetensors"), sd)
    with open(os.path.join(d, "reference.json")) as f:
        ref = json.load(f)
    ref["model"] = sname
    with open(os.path.join(sd, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    shards = sorted(x for x in os.listdir(sd) if x.startswith("model-"))
    assert os.path.exists(os.path.join(sd, "model.safetensors.index.json")) and 2 <= len(shards) <= 3, shards
    print(f"  {sname}: {hp_ref.dir_size(sd) / 1024:.1f} KiB, shards {shards}")
    r = Runner(model, "llama", "causal", data)
    check_reload(LlamaForCausalLM, sd, r, load_file(os.path.join(d, "reference.safetensors"))["none"])
    r.abl.remove()
    return cases


def llama_tied_bf16(out):
    name = "llama-tied-bf16"
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      initializer_range=INIT, bos_token_id=1, eos_token_id=2)
    model = make(LlamaForCausalLM, cfg, 6, round_to=torch.bfloat16)
    d = fresh_dir(out, name)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    check_stored(d, model, torch.bfloat16)
    data = write_npy(d, causal_data(97, 106))
    return finish(out, name, "data.npy", model, "llama", "causal", data, False, LlamaForCausalLM)


def llama_rope(out, kind):
    """A Llama whose rotary embedding is scaled as config.json's rope_scaling says."""
    name = "llama-rope-" + kind
    # llama3 at d_head 16: of the frequencies at theta 500000, one falls between the wavelengths the
    # type blends (original 16 / high 4 .. 16 / low 1) and the rest beyond them (slowed by factor);
    # dynamic applies past max_position_embeddings: 16-token data on a model of 8 positions
    scaling = {"llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 16},
               "linear": {"rope_type": "linear", "factor": 4.0},
               "dynamic": {"rope_type": "dynamic", "factor": 2.0}}[kind]
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=8 if kind == "dynamic" else 64, rope_theta=500000.0,
                      rope_scaling=scaling, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      initializer_range=INIT, bos_token_id=1, eos_token_id=2)
    model = make(LlamaForCausalLM, cfg, {"llama3": 7, "linear": 7, "dynamic": 10}[kind])
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 107))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, False, LlamaForCausalLM)
    # the scaling must matter: the same weights without it give other logits
    plain = copy.deepcopy(cfg)
    plain.rope_scaling = None
    plain.max_position_embeddings = 64
    unscaled = LlamaForCausalLM(plain).eval()
    unscaled.load_state_dict(model.state_dict())
    with torch.no_grad():
        diff = float((unscaled(data["ids"]).logits - model(data["ids"]).logits).abs().max())
    print(f"    {name}: max |logits - unscaled logits| = {diff:.3g}")
    assert diff > 1e-3, diff
    return cases


def window_matters(name, model, cfg, model_cls, data):
    """The same weights without the sliding window give other logits: the fixture tests the window."""
    full = copy.deepcopy(cfg)
    full.sliding_window = None
    nowin = model_cls(full).eval()
    nowin.load_state_dict(model.state_dict())
    with torch.no_grad():
        diff = float((nowin(data["ids"]).logits - model(data["ids"]).logits).abs().max())
    print(f"    {name}: max |logits - logits without the window| = {diff:.3g}")
    assert diff > 1e-3, diff


def mistral_window(out):
    """A Mistral whose sliding window (20) is shorter than its 96-token data: the engine's causal attention
    goes by bands of 64 queries, so the second band's keys start inside the data (at 64 - 20 + 1)."""
    name = "mistral-window"
    cfg = MistralConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        sliding_window=20, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                        initializer_range=INIT, bos_token_id=1, eos_token_id=2)
    model = make(MistralForCausalLM, cfg, 8)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, np.random.default_rng(108).integers(0, 97, size=(N_SEQS, 96)).astype(np.int32))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, False, MistralForCausalLM)
    window_matters(name, model, cfg, MistralForCausalLM, data)
    return cases


def qwen2_bias(out):
    name = "qwen2-bias"
    cfg = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      use_sliding_window=False, initializer_range=INIT,
                      bos_token_id=1, eos_token_id=2)
    model = make(Qwen2ForCausalLM, cfg, 7, round_to=torch.float16)
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    d = fresh_dir(out, name)
    copy.deepcopy(model).to(torch.float16).save_pretrained(d, safe_serialization=True)
    check_stored(d, model, torch.float16)
    data = write_npy(d, causal_data(97, 107))
    return finish(out, name, "data.npy", model, "llama", "causal", data, False, Qwen2ForCausalLM)


def qwen3_qknorm(out):
    """Qwen3: RMSNorms over each query and key head before rotary (q_norm, k_norm, gains made random by
    perturb), head_dim 12 where hidden / heads is 8, no biases. A loader that skips either norm, or puts it
    after rotary, gives other logits (checked below)."""
    name = "qwen3-qknorm"
    cfg = Qwen3Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
                      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
                      use_sliding_window=False, initializer_range=INIT, bos_token_id=1, eos_token_id=2)
    model = make(Qwen3ForCausalLM, cfg, 13)
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.bias is None and attn.q_norm.weight.shape == (12,)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 113))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, True, Qwen3ForCausalLM)
    for which in ("q_norm", "k_norm"):
        plain = copy.deepcopy(model)
        with torch.no_grad():
            for lay in plain.model.layers:
                getattr(lay.self_attn, which).weight.fill_(1.0)
            diff = float((plain(data["ids"]).logits - model(data["ids"]).logits).abs().max())
        print(f"    {name}: max |logits - logits with {which}'s gains at 1| = {diff:.3g}")
        assert diff > 1e-3, diff
    return cases


def phi3_fused(out):
    """Phi-3: q, k and v in one qkv_proj (the k and v rows of 2 KV heads narrower than q's 4), the MLP's gate and
    up in one gate_up_proj, and Mistral's sliding window (6) shorter than the 16-token data. A loader that splits
    either tensor wrongly, or drops the window, gives other logits (checked below)."""
    name = "phi3-fused"
    cfg = Phi3Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     original_max_position_embeddings=64, sliding_window=6, rope_theta=10000.0, rope_scaling=None,
                     rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=INIT,
                     bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = make(Phi3ForCausalLM, cfg, 17)
    assert model.model.layers[0].self_attn.qkv_proj.weight.shape == (64, 32)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 117))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, True, Phi3ForCausalLM)
    window_matters(name, model, cfg, Phi3ForCausalLM, data)
    return cases


def neox(out, name, parallel, rotary_pct, bias, tied, seed):
    """GPT-NeoX (Pythia): each head's q, k and v rows together in query_key_value, rotary on the first
    rotary_pct of each head, LayerNorms with biases made random by perturb, the MLP beside attention (parallel)
    or after it. A loader that reads query_key_value as q, k, v side by side, turns the whole head, or runs the
    blocks in the other order gives other logits (checked below)."""
    cfg = GPTNeoXConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                        num_attention_heads=4, max_position_embeddings=64, rotary_pct=rotary_pct,
                        rotary_emb_base=10000, layer_norm_eps=1e-5, use_parallel_residual=parallel,
                        attention_bias=bias, tie_word_embeddings=tied, hidden_act="gelu",
                        initializer_range=INIT, bos_token_id=1, eos_token_id=2)
    model = make(GPTNeoXForCausalLM, cfg, seed)
    if tied:
        assert model.embed_out.weight.data_ptr() == model.gpt_neox.embed_in.weight.data_ptr()
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, seed + 100))
    cases = finish(out, name, "data.npy", model, "neox", "causal", data, True, GPTNeoXForCausalLM)
    logits = model(data["ids"]).logits
    for what, change in (("the other residual order", {"use_parallel_residual": not parallel}),
                         ("rotary over the whole head", {"rotary_pct": 1.0})):
        other = GPTNeoXForCausalLM(GPTNeoXConfig(**{**cfg.to_dict(), **change})).eval()
        other.load_state_dict(model.state_dict())
        with torch.no_grad():
            diff = float((other(data["ids"]).logits - logits).abs().max())
        print(f"    {name}: max |logits - logits with {what}| = {diff:.3g}")
        assert diff > 1e-3, diff
    return cases


def olmo2_post_norms(out):
    """OLMo 2: RMSNorms after attention and after the MLP (none before), q_norm over all four heads' queries
    together and k_norm over both KV heads' keys (gains made random by perturb), q/k/v/o biases. A loader that
    normalises each head on its own, or puts the norms before the blocks, gives other logits (checked below)."""
    name = "olmo2-post-norms"
    cfg = Olmo2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=True, initializer_range=INIT,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = make(Olmo2ForCausalLM, cfg, 29)
    assert model.model.layers[0].self_attn.q_norm.weight.shape == (32,)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 129))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, True, Olmo2ForCausalLM)
    class PerHead(torch.nn.Module):  # the same gains over each head on its own: what the norm is not
        def __init__(self, norm, dh):
            super().__init__()
            self.norm, self.dh = norm, dh

        def forward(self, x):
            y = x.view(*x.shape[:-1], -1, self.dh)
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.norm.variance_epsilon)
            return y.reshape(x.shape) * self.norm.weight

    per_head = copy.deepcopy(model)
    for lay in per_head.model.layers:
        lay.self_attn.q_norm = PerHead(lay.self_attn.q_norm, lay.self_attn.head_dim)
        lay.self_attn.k_norm = PerHead(lay.self_attn.k_norm, lay.self_attn.head_dim)
    with torch.no_grad():
        diff = float((per_head(data["ids"]).logits - model(data["ids"]).logits).abs().max())
    print(f"    {name}: max |logits - logits with each head normalised on its own| = {diff:.3g}")
    assert diff > 1e-3, diff
    return cases


def differs(name, model, data, what, change):
    """The model's logits with change(copy) applied differ: the fixture tests what change undoes."""
    other = copy.deepcopy(model)
    change(other)
    with torch.no_grad():
        diff = float((other(data["ids"]).logits - model(data["ids"]).logits).abs().max())
    print(f"    {name}: max |logits - logits {what}| = {diff:.3g}")
    assert diff > 1e-3, diff


def gemma2_softcap(out):
    """Gemma 2: RMSNorms scaling by 1 + weight before and after attention and the MLP (gains made random by
    perturb), embeddings times sqrt(hidden), query_pre_attn_scalar 10 where head_dim is 12 (and hidden / heads
    8), soft caps low enough to bend the scores (2) and the logits (3), the window (6, shorter than the 16-token
    data) on layers 0 and 2 only, tanh GELU, tied embeddings. A loader that drops any of these gives other
    logits (checked below)."""
    name = "gemma2-softcap"
    cfg = Gemma2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
                       rope_theta=10000.0, rms_norm_eps=1e-6, query_pre_attn_scalar=10, sliding_window=6,
                       attn_logit_softcapping=2.0, final_logit_softcapping=3.0, initializer_range=INIT,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = make(Gemma2ForCausalLM, cfg, 37)
    assert model.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 137))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, True, Gemma2ForCausalLM)

    def no_caps(m):
        m.config.final_logit_softcapping = None
        for lay in m.model.layers:
            lay.self_attn.attn_logit_softcapping = None

    def no_window(m):
        for lay in m.model.layers:
            lay.self_attn.sliding_window = None
            lay.attention_type = "full_attention"
        m.config.layer_types = ["full_attention"] * 3

    differs(name, model, data, "without the soft caps", no_caps)
    differs(name, model, data, "without the window", no_window)
    return cases


def gemma3_local(out):
    """Gemma 3 (text): Gemma 2's norms and scaled embeddings, q_norm and k_norm over each head (gains random),
    no soft caps, sliding layers 0 and 2 (layer_types) with their own rotary base (rope_local_base_freq 100)
    unscaled, the full layer 1 by rope_theta with linear scaling (factor 2). A loader that turns every layer by
    one base, or scales the local ones, gives other logits (checked below)."""
    name = "gemma3-local"
    cfg = Gemma3TextConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
                           rope_theta=10000.0, rope_local_base_freq=100.0,
                           rope_scaling={"rope_type": "linear", "factor": 2.0}, rms_norm_eps=1e-6,
                           query_pre_attn_scalar=10, sliding_window=6,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                           initializer_range=INIT, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = make(Gemma3ForCausalLM, cfg, 41)
    assert model.model.layers[0].self_attn.q_norm.weight.shape == (12,)
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 141))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, True, Gemma3ForCausalLM)

    def one_base(m):
        m.model.rotary_emb_local = m.model.rotary_emb

    def plain_qk(m):
        for lay in m.model.layers:
            lay.self_attn.q_norm.weight.data.zero_()

    differs(name, model, data, "with the global rotary on every layer", one_base)
    differs(name, model, data, "with q_norm's gains at 1", plain_qk)
    return cases


def llama_gguf(out):
    """A Llama as a GGUF file, written with the gguf package as llama.cpp's converter writes one (q and k rows
    interleaved per head for its rotary; its tensor names and metadata), its matrices in Q8_0, Q4_0, Q4_1, F16
    and F32, norms F32, an untied output. The reference numbers are those of transformers 4.57's own GGUF
    loader (from_pretrained with gguf_file=: it dequantizes with gguf-py and puts q and k back)."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    name = "llama-gguf"
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=INIT, bos_token_id=1,
                      eos_token_id=2)
    model = make(LlamaForCausalLM, cfg, 31)
    d = fresh_dir(out, name)
    path = os.path.join(d, "model.Q8_0-mixed.gguf")

    def permute(w, heads):  # llama.cpp's convert_hf_to_gguf.py LlamaModel.permute
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("headprune llama-gguf fixture")
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_block_count(2)
    w.add_feed_forward_length(64)
    w.add_rope_dimension_count(8)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(97)
    types = {"token_embd": Q.Q8_0, "output": Q.Q4_1, "attn_q": Q.Q4_0, "attn_k": Q.Q4_1, "attn_v": Q.Q8_0,
             "attn_output": Q.F16, "ffn_gate": Q.Q4_1, "ffn_up": Q.Q4_0, "ffn_down": Q.Q8_0}
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    names = [("token_embd.weight", "model.embed_tokens.weight"), ("output_norm.weight", "model.norm.weight"),
             ("output.weight", "lm_head.weight")]
    for l in range(2):
        for g, h in (("attn_norm", "input_layernorm"), ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                     ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                     ("ffn_norm", "post_attention_layernorm"), ("ffn_gate", "mlp.gate_proj"),
                     ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj")):
            names.append((f"blk.{l}.{g}.weight", f"model.layers.{l}.{h}.weight"))
    for gname, hname in names:
        x = sd[hname]
        if ".attn_q." in gname:
            x = permute(x, 4)
        if ".attn_k." in gname:
            x = permute(x, 2)
        kind = gname.split(".")[-2]
        qt = types.get(kind, Q.F32) if x.ndim == 2 else Q.F32
        if qt == Q.F32:
            w.add_tensor(gname, np.ascontiguousarray(x))
        elif qt == Q.F16:
            w.add_tensor(gname, np.ascontiguousarray(x).astype(np.float16))
        else:
            w.add_tensor(gname, gguf.quants.quantize(np.ascontiguousarray(x), qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    hf = LlamaForCausalLM.from_pretrained(d, gguf_file=os.path.basename(path), dtype=torch.float32,
                                          attn_implementation="eager").eval()
    for p_ in hf.parameters():
        p_.requires_grad_(False)
    q0 = hf.model.layers[0].self_attn.q_proj.weight
    err = float((q0 - model.model.layers[0].self_attn.q_proj.weight).abs().max())
    print(f"    {name}: transformers' GGUF loader's q_proj vs the original's: max |diff| = {err:.3g} (Q4_0 rounding)")
    assert 0 < err < 0.5, err
    data = write_npy(d, causal_data(97, 131))
    return finish(out, name, "data.npy", hf, "llama", "causal", data, True)


def gpt2_untied(out):
    """A GPT-2 with tie_word_embeddings false and its own lm_head.weight, which GPT2LMHeadModel uses: a loader
    that takes the embedding matrix as the head gives other logits (checked below)."""
    name = "gpt2-untied"
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=97, n_positions=64, tie_word_embeddings=False,
                     initializer_range=INIT, bos_token_id=0, eos_token_id=0)
    model = make(GPT2LMHeadModel, cfg, 11)
    assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr()
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    assert "lm_head.weight" in load_file(os.path.join(d, "model.safetensors"))
    data = write_npy(d, causal_data(97, 111))
    cases = finish(out, name, "data.npy", model, "gpt2", "causal", data, True, GPT2LMHeadModel)
    tied = copy.deepcopy(model)
    with torch.no_grad():
        tied.lm_head.weight.copy_(tied.transformer.wte.weight)
        diff = float((tied(data["ids"]).logits - model(data["ids"]).logits).abs().max())
    print(f"    {name}: max |logits - logits with the embedding as the head| = {diff:.3g}")
    assert diff > 1e-3, diff
    return cases


def llama_mlp_bias(out):
    """A Llama with mlp_bias and attention_bias: gate/up/down_proj and q/k/v/o_proj biases, all random and
    non-zero, which LlamaMLP and LlamaAttention add (checked below: without them the logits differ)."""
    name = "llama-mlp-bias"
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      mlp_bias=True, attention_bias=True,
                      initializer_range=INIT, bos_token_id=1, eos_token_id=2)
    model = make(LlamaForCausalLM, cfg, 13)
    mlp = model.model.layers[0].mlp
    assert mlp.gate_proj.bias is not None and mlp.up_proj.bias is not None and mlp.down_proj.bias is not None
    d = fresh_dir(out, name)
    model.save_pretrained(d, safe_serialization=True)
    data = write_npy(d, causal_data(97, 112))
    cases = finish(out, name, "data.npy", model, "llama", "causal", data, True, LlamaForCausalLM)
    for what in ("mlp", "self_attn"):
        plain = copy.deepcopy(model)
        with torch.no_grad():
            for n, p in plain.named_parameters():
                if f".{what}." in n and n.endswith(".bias"):
                    p.zero_()
            diff = float((plain(data["ids"]).logits - model(data["ids"]).logits).abs().max())
        print(f"    {name}: max |logits - logits without the {what} biases| = {diff:.3g}")
        assert diff > 1e-3, diff
    return cases


def check_stored(d, model, dtype):
    """The stored low-precision tensors are exactly the model's rounded f32 weights."""
    st = load_file(os.path.join(d, "model.safetensors"))
    ref = model.state_dict()
    for k, v in st.items():
        assert v.dtype == dtype, (k, v.dtype)
        assert torch.equal(v.float(), ref[k]), k
    print(f"    {os.path.basename(d)}: {len(st)} tensors stored as {dtype}, bit-equal to the f32 reference weights")


# ---------------------------------------------------------------- pruned by transformers


def pruned_fixture(out, name, model, arch, kind, data, pruned, extra, save_data):
    """model pruned by transformers' own prune_heads, written by save_pretrained.

    pruned: {layer: [heads]} handed to prune_heads. Cases, in the original
    head numbering headprune keeps: "none" (the pruned checkpoint as it loads
    back with from_pretrained) and "extra" (the spec extra ablated on top:
    the unpruned model with HF's head_mask over pruned and extra). The
    loaded-back model must equal the unpruned one under head_mask."""
    full = Runner(model, arch, kind, data)
    spec_p = ",".join(f"{l}.{h}" for l in sorted(pruned) for h in sorted(pruned[l]))
    spec_all = spec_p + "," + extra
    masked = full.masked_output(hp_ref.parse_mask(spec_p, full.n_layers, full.n_heads), "zero", True)
    masked_extra = full.masked_output(hp_ref.parse_mask(spec_all, full.n_layers, full.n_heads), "zero", True)
    m = meta(name, "data." + ("npy" if kind == "causal" else "jsonl"), full, data, kind)
    full.abl.remove()

    pruned_model = copy.deepcopy(model)
    pruned_model.prune_heads(pruned)
    d = fresh_dir(out, name)
    pruned_model.save_pretrained(d, safe_serialization=True)
    save_data(d)
    back = type(model).from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    assert back.config.pruned_heads, "pruned_heads did not survive save_pretrained"
    r = Runner(back, arch, kind, data)
    out_u = r.forward()
    diff = float((out_u - masked).abs().max())
    print(f"    {name}: pruned by transformers, reloaded, vs head_mask on the unpruned model: max |diff| = {diff:.3g}")
    assert diff < 1e-5, diff
    cases, outputs = [], {}
    for cname, spec, out_m in (("none", "", out_u), ("extra", extra, masked_extra)):
        c = {"name": cname, "mask": spec, "ablation": "zero"}
        c.update(r.metrics(out_m, out_u))
        c["output"] = cname
        cases.append(c)
        outputs[cname] = out_m
    m["pruned"] = spec_p
    hp_ref.write_reference(d, m, cases, outputs)
    report(name, d, cases, set())
    r.abl.remove()


def gpt2_pruned(out):
    """gpt2-tiny's model with heads 0.1, 2.0 and 2.3 pruned by transformers."""
    cfg = GPT2Config(n_layer=3, n_head=4, n_embd=32, vocab_size=97, n_positions=64,
                     initializer_range=INIT, bos_token_id=0, eos_token_id=0)
    model = make(GPT2LMHeadModel, cfg, 1)
    ids = causal_data(97, 101)
    data = {"ids": torch.from_numpy(ids.astype(np.int64))}
    pruned_fixture(out, "gpt2-pruned", model, "gpt2", "causal", data, {0: [1], 2: [0, 3]}, "1.2",
                   lambda d: write_npy(d, ids))


def bert_mlm_pruned(out):
    """bert-mlm's model with heads 0.0, 0.3 and 1.2 pruned by transformers."""
    cfg = BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                     initializer_range=INIT, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, pad_token_id=0)
    model = make(BertForMaskedLM, cfg, 3)
    rows = bert_rows(101, 103, [16, 11, 16, 7], True, [True, False, True, False])
    keys = ["ids", "labels", "attention_mask", "token_type_ids"]
    data = {k: torch.tensor([r[k] for r in rows], dtype=torch.int64) for k in keys}
    pruned_fixture(out, "bert-mlm-pruned", model, "bert", "mlm", data, {0: [0, 3], 1: [2]}, "1.1",
                   lambda d: write_jsonl(d, rows, keys))


FIXTURES = {
    "gpt2-tiny": gpt2_tiny,
    "gpt2-noprefix": gpt2_noprefix,
    "gpt2-vocab": gpt2_vocab,
    "bert-mlm": bert_mlm,
    "bert-encoder": bert_encoder,
    "llama-gqa": llama_gqa,  # also writes llama-gqa-sharded
    "llama-tied-bf16": llama_tied_bf16,
    "qwen2-bias": qwen2_bias,
    "llama-rope-llama3": lambda out: llama_rope(out, "llama3"),
    "llama-rope-linear": lambda out: llama_rope(out, "linear"),
    "llama-rope-dynamic": lambda out: llama_rope(out, "dynamic"),
    "mistral-window": mistral_window,
    "gpt2-pruned": gpt2_pruned,
    "bert-mlm-pruned": bert_mlm_pruned,
    "gpt2-untied": gpt2_untied,
    "llama-mlp-bias": llama_mlp_bias,
    "qwen3-qknorm": qwen3_qknorm,
    "phi3-fused": phi3_fused,
    # Pythia's settings (parallel, partial rotary, biases, untied), and the other value of each
    "neox-parallel": lambda out: neox(out, "neox-parallel", True, 0.5, True, False, 19),
    "neox-sequential": lambda out: neox(out, "neox-sequential", False, 0.25, False, True, 23),
    "olmo2-post-norms": olmo2_post_norms,
    "llama-gguf": llama_gguf,
    "gemma2-softcap": gemma2_softcap,
    "gemma3-local": gemma3_local,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures"))
    ap.add_argument("names", nargs="*", help="fixtures to (re)generate; default all")
    a = ap.parse_args()
    names = a.names or list(FIXTURES)
    os.makedirs(a.out, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    for n in names:
        print(f"== {n}")
        FIXTURES[n](a.out)
    for n in os.listdir(a.out):
        if os.path.isdir(os.path.join(a.out, n)):
            hp_ref.tidy_perms(os.path.join(a.out, n))


if __name__ == "__main__":
    main()
