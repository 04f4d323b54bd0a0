#!/usr/bin/env python3
"""Write a Llama-3-8B-shaped checkpoint with random bf16 weights (16.1 GB).

    /work/venv/bin/python bench/make_llama8b.py /tmp/hp-llama8b

For bench/README.md's scale-up figures (issue 15): what an 8B-class model
costs headprune on a 24 GB machine. Shape of Meta-Llama-3-8B: hidden 4096,
32 layers, 32 heads over 8 KV heads, d_ff 14336, vocabulary 128256,
rope_theta 500000, untied LM head; 8.03B parameters. Weights are N(0, 0.02)
rounded to bf16 (norm gains 1), drawn once into a 64M-value pool that each
tensor reads from its own random offset: the timing does not depend on the
values, and writing stays at disk speed. Streams tensor by tensor, a slice
at a time, so it needs about 300 MB of memory, never the 16 GB. Also writes
data-1x128.npy and data-4x128.npy (one and four sequences of 128 random token ids) beside the model.
Put it outside the repository, and delete it afterwards.
"""
import json
import os
import struct
import sys

import numpy as np

D, L, H, KV, F, V = 4096, 32, 32, 8, 14336, 128256
DH = D // H
POOL = 1 << 26
SLICE = 1 << 24


def tensors():
    yield "model.embed_tokens.weight", (V, D)
    for i in range(L):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (D,)
        yield p + "self_attn.q_proj.weight", (H * DH, D)
        yield p + "self_attn.k_proj.weight", (KV * DH, D)
        yield p + "self_attn.v_proj.weight", (KV * DH, D)
        yield p + "self_attn.o_proj.weight", (D, H * DH)
        yield p + "post_attention_layernorm.weight", (D,)
        yield p + "mlp.gate_proj.weight", (F, D)
        yield p + "mlp.up_proj.weight", (F, D)
        yield p + "mlp.down_proj.weight", (D, F)
    yield "model.norm.weight", (D,)
    yield "lm_head.weight", (V, D)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=False)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
        "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
        "head_dim": DH, "vocab_size": V, "max_position_embeddings": 8192, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": 128000, "eos_token_id": 128001,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    header, at = {}, 0
    specs = list(tensors())
    for name, shape in specs:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    header["__metadata__"] = {"format": "pt"}
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    rng = np.random.default_rng(8)
    pool = (rng.standard_normal(POOL, dtype=np.float32) * 0.02).view(np.uint32)
    pool = ((pool + 0x7FFF + ((pool >> 16) & 1)) >> 16).astype("<u2")
    one = np.full(D, 0x3F80, dtype="<u2")  # 1.0 in bf16
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(js)) + js)
        for name, shape in specs:
            if len(shape) == 1:
                f.write(one.tobytes())
                continue
            left = int(np.prod(shape))
            pos = int(rng.integers(0, POOL))
            while left:
                k = min(left, SLICE, POOL - pos)
                f.write(pool[pos:pos + k].tobytes())
                left -= k
                pos = (pos + k) % POOL
    np.save(os.path.join(out, "data-1x128.npy"), rng.integers(0, V, size=(1, 128)).astype(np.int32))
    np.save(os.path.join(out, "data-4x128.npy"), rng.integers(0, V, size=(4, 128)).astype(np.int32))
    print(f"{out}: {len(specs)} tensors, {sum(int(np.prod(s)) for _, s in specs) / 1e9:.2f}B parameters, "
          f"{at / 1e9:.2f} GB of bf16")


if __name__ == "__main__":
    main()
