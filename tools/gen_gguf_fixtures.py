#!/usr/bin/env python3
"""Generate the GGUF reader's fixtures under tests/fixtures/gguf/ (docs/gguf.md).

The C reader (engine/model/gguf.c) must read what the `gguf` Python package writes and
dequantize every supported type to exactly the floats `gguf.quants.dequantize`
gives (what transformers' GGUF loading uses). For each type this writes:

  <type>.gguf   a GGUFWriter file (version 3, arch "llama") with the metadata below
                and two tensors of that type:
                  blk.0.attn_q.weight    a matrix (2-D)
                  blk.0.ffn_down.weight  a 3-D (block-32 types) or 1-D tensor
  <type>.f32    gguf.quants.dequantize of each tensor, in file order, little-endian f32

Data: F32, F16 and BF16 hold random normals plus special values (signed zeros,
infinities, subnormals, the largest finite values, quiet NaNs); Q8_0, Q4_0 and Q4_1 are
random normals quantized by gguf.quants.quantize. gguf-py has no quantizer for the
K-quants (Q4_K, Q5_K, Q6_K), so their blocks are random bytes with chosen f16 scales
(normal, negative and subnormal): every bit pattern of the scale and quant fields is
as valid as any a quantizer writes, and the reference is gguf-py's dequantize of
those very bytes.

Also:
  q8_0-v2.gguf      q8_0.gguf with its version field set to 2 (v2 and v3 share the layout)
  unsupported.gguf  a Q2_K and a Q5_0 tensor, which the reader opens but does not dequantize
  types.tsv         gguf-py's GGML_QUANT_SIZES: each type's name, number, block size and bytes

Metadata of every file (test_gguf.c expects these values): general.architecture,
general.name, llama.* hyperparameters, one key of each scalar value type
(test.u8 ... test.f64, test.bool, test.str), one array of each element type
(test.arr.<type>), and tokenizer.ggml.tokens / scores / token_type. q4_0.gguf and
q4_k.gguf set general.alignment (64 and 16); the rest use the default 32.

Usage: /work/venv/bin/python tools/gen_gguf_fixtures.py   (needs numpy and gguf;
       seeded, so a rerun writes the same bytes with the same package versions)
"""
import os
import sys
from importlib.metadata import version

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = os.path.join(root, "tests", "fixtures", "gguf")

TOKENS = ["<unk>", "<s>", "</s>", "\u2581the", "\u2581a", "\u00e9t\u00e9", "\n", "", "<0x0A>", "\u2581GGUF"]


def metadata(w, label):
    w.add_name(f"headprune gguf fixture ({label})")
    w.add_uint32("llama.block_count", 2)
    w.add_uint32("llama.context_length", 64)
    w.add_uint32("llama.embedding_length", 256)
    w.add_uint32("llama.attention.head_count", 4)
    w.add_uint32("llama.attention.head_count_kv", 2)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32("general.quantization_version", 2)
    # one key of each scalar type, values at the edges of their ranges
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62) - 7)
    w.add_float32("test.f32", 0.1)
    w.add_float64("test.f64", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "h\u00e9llo, GGUF")
    # one array of each element type
    w.add_key_value("test.arr.u8", [0, 1, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("test.arr.i8", [-128, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("test.arr.u16", [0, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("test.arr.i16", [-32768, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("test.arr.u32", [7, 4294967295], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("test.arr.i32", [-2147483648, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.arr.u64", [2**64 - 1, 3], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("test.arr.i64", [-(2**63), 2**63 - 1], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("test.arr.f32", [0.5, -1.25, 3e38], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.arr.f64", [0.1, -2.5e300], V.ARRAY, sub_type=V.FLOAT64)
    w.add_key_value("test.arr.bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("test.arr.str", ["one", "", "three"], V.ARRAY, sub_type=V.STRING)
    # a tokenizer's arrays, as llama.cpp's converters write them
    w.add_tokenizer_model("llama")
    w.add_token_list(TOKENS)
    w.add_token_scores([float(-i) / 4 for i in range(len(TOKENS))])
    w.add_token_types([2, 3, 3] + [1] * (len(TOKENS) - 3))
    w.add_bos_token_id(1)


def specials_f32():
    return np.array([0.0, -0.0, np.inf, -np.inf, 1e-40, -1e-45, 3.4028235e38, -1.1754944e-38, np.nan],
                    dtype=np.float32)


def float_tensor(rng, qtype, shape):
    """(bytes as uint8 rows, reference) for F32, F16 or BF16."""
    x = rng.standard_normal(shape).astype(np.float32) * np.float32(3)
    flat = x.reshape(-1)
    if qtype == Q.F16:
        h = flat.astype(np.float16)
        sp = np.array([0x0000, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x83FF, 0x7BFF, 0x0400, 0x7E00, 0xFE00],
                      dtype=np.uint16).view(np.float16)
        h[: min(len(sp), len(h))] = sp[: len(h)]
        raw = h.view(np.uint8)
    else:
        sp = specials_f32()
        flat[: min(len(sp), len(flat))] = sp[: len(flat)]
        raw = flat.view(np.uint8) if qtype == Q.F32 else gguf.quants.quantize(flat, Q.BF16).view(np.uint8)
    raw = raw.reshape(*shape[:-1], -1)
    return raw, gguf.quants.dequantize(raw, qtype)


def quantized_tensor(rng, qtype, shape):
    """Random normals (rows of different scales) quantized by gguf.quants."""
    scale = (10.0 ** rng.uniform(-2, 1, size=shape[:-1] + (1,))).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32) * scale
    raw = gguf.quants.quantize(x, qtype)
    return raw, gguf.quants.dequantize(raw, qtype)


# where each K-quant block keeps its f16 scales: (d offset, dmin offset or None)
K_SCALES = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208, None)}


def k_tensor(rng, qtype, shape):
    """Random K-quant blocks: random quant and scale bytes, f16 super-block scales of either sign, the
    first block's d subnormal."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = int(np.prod(shape)) // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    d_at, dmin_at = K_SCALES[qtype]
    for b in range(n_blocks):
        d = 3e-6 if b == 0 else rng.uniform(1e-4, 1e-1) * rng.choice([-1.0, 1.0])
        raw[b, d_at:d_at + 2] = np.array([d], dtype=np.float16).view(np.uint8)
        if dmin_at is not None:
            dmin = rng.uniform(1e-4, 1e-1) * rng.choice([-1.0, 1.0])
            raw[b, dmin_at:dmin_at + 2] = np.array([dmin], dtype=np.float16).view(np.uint8)
    raw = raw.reshape(*shape[:-1], shape[-1] // block * size)
    return raw, gguf.quants.dequantize(raw, qtype)


def make(rng, qtype, shapes):
    if qtype in (Q.F32, Q.F16, Q.BF16):
        return [float_tensor(rng, qtype, s) for s in shapes]
    if qtype in K_SCALES:
        return [k_tensor(rng, qtype, s) for s in shapes]
    return [quantized_tensor(rng, qtype, s) for s in shapes]


def write(path, label, tensors, alignment=None):
    w = gguf.GGUFWriter(path, "llama")
    metadata(w, label)
    if alignment:
        w.add_custom_alignment(alignment)
    for name, qtype, raw in tensors:
        if qtype == Q.F32:
            w.add_tensor(name, raw.view(np.float32))
        elif qtype == Q.F16:
            w.add_tensor(name, raw.view(np.float16))
        else:
            w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check(path, tensors, refs):
    """Read the file back with gguf-py's own reader: the tensors and their dequantized values as written."""
    r = gguf.GGUFReader(path)
    assert [t.name for t in r.tensors] == [name for name, _, _ in tensors], path
    for t, (name, qtype, raw), ref in zip(r.tensors, tensors, refs):
        assert t.tensor_type == qtype, (path, name)
        assert list(t.shape) == list(reversed(ref.shape)), (path, name, t.shape, ref.shape)
        got = gguf.quants.dequantize(np.asarray(t.data), qtype)
        assert got.tobytes() == ref.tobytes(), (path, name)


def main():
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261207)
    plan = [  # type, shapes (numpy order: the last is ggml's ne[0]), alignment
        (Q.F32, [(2, 3, 4, 8), (5,)], None),
        (Q.F16, [(2, 3, 4, 8), (5,)], None),
        (Q.BF16, [(2, 3, 4, 8), (5,)], None),
        (Q.Q8_0, [(4, 64), (2, 3, 32)], None),
        (Q.Q4_0, [(4, 64), (2, 3, 32)], 64),
        (Q.Q4_1, [(4, 64), (2, 3, 32)], None),
        (Q.Q4_K, [(2, 256), (256,)], 16),
        (Q.Q5_K, [(2, 256), (256,)], None),
        (Q.Q6_K, [(2, 256), (256,)], None),
    ]
    for qtype, shapes, alignment in plan:
        stem = qtype.name.lower()
        made = make(rng, qtype, shapes)
        names = ["blk.0.attn_q.weight", "blk.0.ffn_down.weight"]
        tensors = [(n, qtype, raw) for n, (raw, _) in zip(names, made)]
        refs = [ref.astype("<f4") for _, ref in made]
        path = os.path.join(out, stem + ".gguf")
        write(path, qtype.name, tensors, alignment)
        check(path, tensors, refs)
        with open(os.path.join(out, stem + ".f32"), "wb") as f:
            for ref in refs:
                f.write(ref.tobytes())
        print(f"{path}: {os.path.getsize(path)} bytes, {sum(r.size for r in refs)} reference floats")

    with open(os.path.join(out, "q8_0.gguf"), "rb") as f:
        b = bytearray(f.read())
    assert b[4:8] == (3).to_bytes(4, "little")
    b[4:8] = (2).to_bytes(4, "little")
    with open(os.path.join(out, "q8_0-v2.gguf"), "wb") as f:
        f.write(b)

    unsup = [("blk.0.attn_k.weight", Q.Q2_K, rng.integers(0, 256, size=(1, 84), dtype=np.uint8)),
             ("blk.0.attn_v.weight", Q.Q5_0, rng.integers(0, 256, size=(2, 22), dtype=np.uint8))]
    write(os.path.join(out, "unsupported.gguf"), "unsupported", unsup)
    # gguf-py's table of types, for test_gguf.c to hold the reader's table against
    with open(os.path.join(out, "types.tsv"), "w") as f:
        f.write("# name\tggml id\tblock size\tbytes per block (gguf.GGML_QUANT_SIZES)\n")
        for qt, (block, size) in sorted(gguf.GGML_QUANT_SIZES.items(), key=lambda kv: int(kv[0])):
            f.write(f"{qt.name}\t{int(qt)}\t{block}\t{size}\n")
    print("numpy", np.__version__, "gguf", version("gguf"), file=sys.stderr)


if __name__ == "__main__":
    main()
