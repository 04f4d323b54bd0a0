#!/usr/bin/env python3
"""Convert llama2.c's stories260K.bin into a Hugging Face Llama directory and
write headprune reference outputs for it.

    /work/venv/bin/python tools/convert_stories.py \
        [--bin ../shared/models/stories260K.bin] [--out tests/fixtures/stories260K]

1. Reads the llama2.c checkpoint (7 x int32 header, then float32 arrays; see
   /work/shared/models/README.md), permutes the rows of wq / wk within each head
   from llama2.c's interleaved rotary pairs (2i, 2i+1) to Hugging Face's
   rotate-half layout (i, i + d/2), writes config.json + model.safetensors (f32,
   tied classifier).
2. Verifies the conversion independently: a small numpy forward pass written
   directly against the .bin arrays (interleaved rotary, no permutation) must
   agree with transformers' LlamaForCausalLM on the converted directory.
3. Samples 8 sequences of 128 tokens from the converted model (BOS = 1 first,
   torch generator seeded, temperature 1, multinomial) -> data.npy (int32).
4. Writes reference.json / reference.safetensors (see tools/README.md).
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402

import transformers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED_SHA256 = "9414d5a285453a7eab631713d171753232c978f6f97654211469aff8be93c8d6"
N_SAMPLES, SAMPLE_LEN, SAMPLE_SEED = 8, 128, 1234
# reference.safetensors keeps the logits of the first OUT_SEQS sequences only
# (8 x 128 x 512 f32 logits would be 2 MiB per case)
OUT_SEQS = 1


# ---------------------------------------------------------------- reading


def read_llama2c(path):
    raw = open(path, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // n_heads
    f = np.frombuffer(raw, dtype="<f4", offset=28)
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        a = f[off:off + n].reshape(shape).astype(np.float32)
        off += n
        return a

    w = {"dim": dim, "hidden": hidden, "n_layers": n_layers, "n_heads": n_heads, "n_kv": n_kv,
         "vocab": vocab, "seq_len": seq_len, "head_size": hs}
    w["tok"] = take(vocab, dim)
    w["rms_att"] = take(n_layers, dim)
    w["wq"] = take(n_layers, n_heads * hs, dim)
    w["wk"] = take(n_layers, n_kv * hs, dim)
    w["wv"] = take(n_layers, n_kv * hs, dim)
    w["wo"] = take(n_layers, dim, n_heads * hs)
    w["rms_ffn"] = take(n_layers, dim)
    w["w1"] = take(n_layers, hidden, dim)
    w["w2"] = take(n_layers, dim, hidden)
    w["w3"] = take(n_layers, hidden, dim)
    w["rms_final"] = take(dim)
    off += seq_len * hs // 2 * 2  # legacy freq_cis_real / freq_cis_imag
    w["cls"] = w["tok"] if shared else take(vocab, dim)
    assert off == f.size, (off, f.size)
    w["shared"] = shared
    return w


def permute(wt, n_heads, d_in):
    """llama2.c / Meta interleaved-pair rows -> HF rotate-half rows, per head
    (the permutation of transformers' convert_llama_weights_to_hf.py)."""
    d_out = wt.shape[0]
    return wt.reshape(n_heads, d_out // n_heads // 2, 2, d_in).transpose(0, 2, 1, 3).reshape(d_out, d_in)


# ---------------------------------------------------------------- numpy reference


def np_forward(w, ids):
    """llama2.c's forward, in float64, on the raw .bin arrays; ids (T,) -> logits (T, vocab)."""
    T = len(ids)
    dim, hs, nh, nkv = w["dim"], w["head_size"], w["n_heads"], w["n_kv"]
    x = w["tok"][ids].astype(np.float64)

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5) * g

    # interleaved rotary: pair (2i, 2i+1) of each head at frequency 10000^(-2i/hs)
    i2 = np.arange(0, hs, 2)
    freq = 1.0 / 10000.0 ** (i2 / hs)
    ang = np.arange(T)[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(v):  # (T, heads, hs)
        a, b = v[..., 0::2], v[..., 1::2]
        out = np.empty_like(v)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    causal = np.tril(np.ones((T, T), dtype=bool))
    for l in range(w["n_layers"]):
        h = rms(x, w["rms_att"][l])
        q = rope((h @ w["wq"][l].T).reshape(T, nh, hs))
        k = rope((h @ w["wk"][l].T).reshape(T, nkv, hs))
        v = (h @ w["wv"][l].T).reshape(T, nkv, hs)
        att_out = np.empty((T, nh, hs))
        for hd in range(nh):
            kv = hd // (nh // nkv)
            s = q[:, hd] @ k[:, kv].T / np.sqrt(hs)
            s = np.where(causal, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            att_out[:, hd] = s @ v[:, kv]
        x = x + att_out.reshape(T, nh * hs) @ w["wo"][l].T
        h = rms(x, w["rms_ffn"][l])
        g = h @ w["w1"][l].T
        x = x + ((g / (1.0 + np.exp(-g))) * (h @ w["w3"][l].T)) @ w["w2"][l].T
    return rms(x, w["rms_final"]) @ w["cls"].T


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(REPO), "shared", "models", "stories260K.bin"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "stories260K"))
    a = ap.parse_args()

    sha = hashlib.sha256(open(a.bin, "rb").read()).hexdigest()
    print(f"{a.bin}: sha256 {sha}")
    assert sha == EXPECTED_SHA256, "not the documented stories260K.bin"
    w = read_llama2c(a.bin)
    print({k: w[k] for k in ["dim", "hidden", "n_layers", "n_heads", "n_kv", "vocab", "seq_len", "shared"]})
    assert w["shared"]

    cfg = LlamaConfig(vocab_size=w["vocab"], hidden_size=w["dim"], intermediate_size=w["hidden"],
                      num_hidden_layers=w["n_layers"], num_attention_heads=w["n_heads"],
                      num_key_value_heads=w["n_kv"], max_position_embeddings=w["seq_len"],
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                      bos_token_id=1, eos_token_id=2, hidden_act="silu")
    sd = {"model.embed_tokens.weight": w["tok"], "model.norm.weight": w["rms_final"]}
    for l in range(w["n_layers"]):
        p = f"model.layers.{l}."
        sd[p + "input_layernorm.weight"] = w["rms_att"][l]
        sd[p + "self_attn.q_proj.weight"] = permute(w["wq"][l], w["n_heads"], w["dim"])
        sd[p + "self_attn.k_proj.weight"] = permute(w["wk"][l], w["n_kv"], w["dim"])
        sd[p + "self_attn.v_proj.weight"] = w["wv"][l]
        sd[p + "self_attn.o_proj.weight"] = w["wo"][l]
        sd[p + "post_attention_layernorm.weight"] = w["rms_ffn"][l]
        sd[p + "mlp.gate_proj.weight"] = w["w1"][l]
        sd[p + "mlp.down_proj.weight"] = w["w2"][l]
        sd[p + "mlp.up_proj.weight"] = w["w3"][l]
    sd = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in sd.items()}

    if os.path.isdir(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    save_file(sd, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    cfg_d = cfg.to_diff_dict()
    cfg_d["architectures"] = ["LlamaForCausalLM"]
    cfg_d["dtype"] = "float32"
    for k in ["tie_word_embeddings", "max_position_embeddings", "rms_norm_eps", "rope_theta",
              "num_key_value_heads", "bos_token_id", "eos_token_id"]:
        cfg_d[k] = getattr(cfg, k)  # explicit even where they equal the defaults
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg_d, f, indent=2, sort_keys=True)
        f.write("\n")

    model = LlamaForCausalLM.from_pretrained(a.out, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    # ---- sample the held-out set from the converted model
    g = torch.Generator().manual_seed(SAMPLE_SEED)
    seqs = torch.full((N_SAMPLES, 1), 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(SAMPLE_LEN - 1):
            logits = model(input_ids=seqs, use_cache=False).logits[:, -1].float()
            probs = torch.softmax(logits.double() / 1.0, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=g)
            seqs = torch.cat([seqs, nxt], dim=1)
    ids = seqs.numpy().astype(np.int32)
    np.save(os.path.join(a.out, "data.npy"), ids)
    print(f"sampled {ids.shape}; row 0 starts {ids[0, :24].tolist()}")

    # ---- independent check: numpy llama2.c forward vs transformers
    ids_t = torch.from_numpy(ids.astype(np.int64))
    with torch.no_grad():
        hf = model(input_ids=ids_t).logits.float().numpy()
    worst = 0.0
    for b in range(ids.shape[0]):
        ref = np_forward(w, ids[b])
        worst = max(worst, float(np.abs(ref - hf[b]).max()))
    scale = float(np.abs(hf).max())
    print(f"numpy llama2.c forward vs HF on the converted dir: max |logit diff| = {worst:.3g} "
          f"(max |logit| {scale:.3g}, {ids.shape[0]} x {ids.shape[1]} positions)")
    assert worst < 1e-3, worst
    # the permutation matters: without it the rotary pairs are wrong
    bad = {k: v for k, v in sd.items()}
    for l in range(w["n_layers"]):
        bad[f"model.layers.{l}.self_attn.q_proj.weight"] = torch.from_numpy(w["wq"][l])
        bad[f"model.layers.{l}.self_attn.k_proj.weight"] = torch.from_numpy(w["wk"][l])
    m2 = LlamaForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    m2.load_state_dict(bad, strict=False)
    m2.tie_weights()
    m2.eval()
    with torch.no_grad():
        d_unperm = float((m2(input_ids=ids_t[:1]).logits - torch.from_numpy(hf[:1])).abs().max())
    print(f"  (same check without the wq/wk permutation: max |diff| = {d_unperm:.3g})")
    assert d_unperm > 1e-2

    # ---- reference cases
    nl, nh, nkv = w["n_layers"], w["n_heads"], w["n_kv"]
    keep = [f"{l}.{h}" for l in range(nl) for h in range(nh) if (l + h) % 3 == 0]
    keep_gate = hp_ref.parse_mask(",".join(keep), nl, nh, nkv, keep=True)
    keep_mask = hp_ref.gate_to_spec(keep_gate)
    cases_spec = [
        ("none", "", "zero"),
        ("h0_3", "0.3", "zero"),
        ("h4_7", "4.7", "zero"),
        ("l2", "2.*", "zero"),
        ("kv3_1", "kv:3.1", "zero"),
        ("keep", keep_mask, "zero"),
        ("mean", "1.0,1.5", "mean"),
    ]
    mods = [lay.self_attn.o_proj for lay in model.model.layers]
    abl = hp_ref.HeadAblator(mods, nh, w["head_size"])
    real = torch.ones_like(ids_t)

    def fwd():
        with torch.no_grad():
            return model(input_ids=ids_t).logits.float()

    out_u = fwd()
    cases, outputs = [], {}
    for name, spec, ablation in cases_spec:
        gate = hp_ref.parse_mask(spec, nl, nh, nkv)
        if spec == "":
            out_m = out_u
        else:
            if ablation != "zero":
                abl.mode = "record"
                fwd()
                abl.set_means(real, ablation)
            abl.gate, abl.ablation, abl.mode = gate, ablation, "apply"
            out_m = fwd()
            abl.mode = None
        c = {"name": name, "mask": spec, "ablation": ablation, "n_ablated": int((gate == 0).sum())}
        if name == "keep":
            c["keep_spec"] = ",".join(keep)  # the same mask as `--keep <keep_spec>`
        c.update(hp_ref.causal_metrics(out_m, out_u, ids_t))
        c["output"] = name
        cases.append(c)
        outputs[name] = out_m[:OUT_SEQS]
    assert hp_ref.gate_to_spec(hp_ref.parse_mask("kv:3.1", nl, nh, nkv)) == "3.2,3.3"
    abl.remove()

    meta = {"model": "stories260K", "data": "data.npy", "n_seqs": int(ids.shape[0]),
            "seq_len": int(ids.shape[1]), "kind": "causal", "n_layers": nl, "n_heads": nh,
            "n_kv_heads": nkv, "d_head": w["head_size"], "output_kind": "logits",
            "output_seqs": OUT_SEQS}
    hp_ref.write_reference(a.out, meta, cases, outputs)

    with open(os.path.join(a.out, "SOURCE.md"), "w") as f:
        f.write(SOURCE_MD.format(sha=sha, n=N_SAMPLES, t=SAMPLE_LEN, seed=SAMPLE_SEED,
                                 diff=worst, out_seqs=OUT_SEQS,
                                 transformers=transformers.__version__, torch=torch.__version__))

    hp_ref.tidy_perms(a.out)
    print(f"stories260K: {hp_ref.dir_size(a.out) / 1024:.1f} KiB")
    c0 = cases[0]
    for c in cases:
        print(f"  {c['name']:6s} {c['ablation']:5s} n_ablated={c['n_ablated']:2d} {hp_ref.fmt_case(c)}"
              f" ppl={np.exp(c['loss']):.3f} rel.change={hp_ref.rel_change(c0, c):.2e}")
        if c is not c0:
            assert hp_ref.rel_change(c0, c) > 1e-3 and c["kl"] > 1e-3, c["name"]


SOURCE_MD = """# stories260K

Converted from llama2.c's `stories260K.bin` (a 260K-parameter Llama trained on
TinyStories; llama2.c is by Andrej Karpathy, MIT licence), the copy at
`/work/shared/models/stories260K.bin` (see `/work/shared/models/README.md`):

- sha256 of the .bin: `{sha}`
- made by `tools/convert_stories.py` (transformers {transformers}, torch {torch}).

Conversion: the llama2.c arrays are copied to Hugging Face Llama names, f32,
classifier tied to the embedding (no `lm_head.weight`), with the rows of wq and
wk permuted within each head from llama2.c's interleaved rotary pairs (2i, 2i+1)
to Hugging Face's rotate-half layout (i, i+d/2). Checked against an independent
numpy implementation of the llama2.c forward on the unpermuted arrays: max
|logit difference| {diff:.2g}.

`data.npy` (int32, [{n}, {t}]): sequences sampled from the model itself, each
starting with BOS = 1 (torch.Generator seed {seed}, temperature 1, multinomial).
There is no tokenizer here; the vocabulary is llama2.c's 512-token SentencePiece
model (0 unk, 1 BOS, 2 EOS, 3..258 bytes).

`reference.json` / `reference.safetensors`: see `tools/README.md`. To keep the
fixture small, the logits in `reference.safetensors` cover only the first
{out_seqs} sequence(s) (`"output_seqs"` in reference.json); the metrics cover all.
"""


if __name__ == "__main__":
    main()
