#!/usr/bin/env python3
"""Regenerate the seed corpora under tests/fuzz/corpus/ from the repository's fixtures
and a few hand-written cases. Usage: make_corpus.py [HEADPRUNE]  (HEADPRUNE, default
build/headprune, runs two small sweeps for the query seeds; they are skipped without it).
Seeds are small on purpose: libFuzzer mutates small inputs far faster."""
import json, os, shutil, sqlite3, struct, subprocess, sys, tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
out = os.path.join(root, "tests", "fuzz", "corpus")
fx = os.path.join(root, "tests", "fixtures")


def put(name, seed, data):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, seed), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(*p):
    with open(os.path.join(root, *p), "rb") as f:
        return f.read()


def safetensors(tensors, meta=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    head, off, blob = {}, 0, b""
    if meta is not None:
        head["__metadata__"] = meta
    for name, dt, shape, data in tensors:
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(head, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + blob


shutil.rmtree(out, ignore_errors=True)

# --- safetensors
put("safetensors", "small", safetensors([("a", "F32", [2, 3], bytes(24)), ("b", "F16", [4], bytes(8)),
                                         ("c", "BF16", [], bytes(2)), ("d", "I64", [1, 1], bytes(8))],
                                        {"format": "pt"}))
put("safetensors", "empty-tensor", safetensors([("z", "F32", [0, 5], b""), ("u", "U8", [3], b"abc")]))
put("safetensors", "no-tensors", safetensors([], {}))
put("safetensors", "qwen2-bias", read("tests", "fixtures", "qwen2-bias", "model.safetensors"))

# --- gguf: the reader's fixtures (tools/gen_gguf_fixtures.py), one a tensor type
for f in sorted(os.listdir(os.path.join(fx, "gguf"))):
    if f.endswith(".gguf"):
        put("gguf", f, read("tests", "fixtures", "gguf", f))

# --- a GGUF file's tokenizer: the tokenizer fixtures (tools/gen_gguf_tokenizer_cases.py), both kinds
for f in sorted(os.listdir(os.path.join(fx, "gguf-tokenizer"))):
    if f.endswith(".gguf"):
        put("gguf_tokenizer", f, read("tests", "fixtures", "gguf-tokenizer", f))

# --- a GGUF file opened as a model: the llama-gguf fixture's file
put("gguf_model", "llama-gguf", read("tests", "fixtures", "llama-gguf", "model.Q8_0-mixed.gguf"))

# --- config.json: byte 0 picks the fixture whose weights sit beside it (fuzz_config.c's order)
for i, name in enumerate(["gpt2-tiny", "gpt2-noprefix", "bert-encoder", "bert-mlm", "bert-cls", "llama-gqa",
                          "qwen2-bias", "llama-tied-bf16", "gpt2-pruned", "exported/llama-gqa-uneven",
                          "qwen3-qknorm", "phi3-fused", "neox-parallel", "olmo2-post-norms"]):
    put("config", name.replace("/", "-"), bytes([i]) + read("tests", "fixtures", *name.split("/"), "config.json"))

# --- plans
for d in ("plans", os.path.join("tests", "plans")):
    for f in sorted(os.listdir(os.path.join(root, d))):
        if f.endswith(".yaml"):
            put("plan", f, read(d, f))
put("plan", "flow", "{name: flow, model: m, data: d.npy, studies: [single, {random: {k: [1, 2], samples: 3}}]}\n")
put("plan", "gradient", "name: g\nmodel: m\ndata: d.npy\nstudies:\n  - importance: {kv: true, normalize: none}\n"
    "  - attribution: {layers: [1]}\n  - iterative: {prune: 20%, rank: gradient, normalize: layer, keep_one_per_layer: true}\n")
put("plan", "gates", "name: g\nmodel: m\ndata: d.npy\nseed: 7\nstudies:\n"
    "  - gates: {lambda: [0, 0.01, 1e-1], steps: 20, lr: 0.1, beta: 0.33, init: -0.5, seed: 3, split: 25%}\n"
    "  - gates: {lambda: 2, split: 0.25, name: g2}\n")
put("plan", "kv-iterative", "name: it\nmodel: m\ndata: d.npy\nstudies:\n  - iterative: {prune: 0.5, floor: 10%, kv: true}\n"
    "  - pairs: {kv: true, layers: [0]}\n  - only: {heads: [1, 3]}\n")

# --- tokenizers: tokenizer.json, 0xFF, text (a second 0xFF makes a pair)
text = read("tests", "fixtures", "tokenizers", "corpus.txt")[:200]
for name in ("gpt2-bpe", "bert-wordpiece", "sp-bpe", "llama3-bpe"):
    put("tokenizer", name, read("tests", "fixtures", "tokenizers", name, "tokenizer.json") + b"\xff" + text +
        b"\xff" + "Héllo wörld 123 <|endoftext|> [SEP]".encode())
tiny_wp = {"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                     "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "b": 5, "##b": 6, "ab": 7}},
           "normalizer": {"type": "BertNormalizer", "lowercase": True}, "pre_tokenizer": {"type": "BertPreTokenizer"},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                              "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 1}},
                                       {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                              "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                 "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
           "added_tokens": [{"id": 0, "content": "[PAD]", "special": True}, {"id": 1, "content": "[UNK]", "special": True},
                            {"id": 2, "content": "[CLS]", "special": True}, {"id": 3, "content": "[SEP]", "special": True}]}
put("tokenizer", "tiny-wordpiece", json.dumps(tiny_wp).encode() + b"\xffab abb AB b\xffba")
tiny_bpe = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120a": 4},
                      "merges": ["a b", "\u0120 a"]},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False}, "decoder": {"type": "ByteLevel"},
            "added_tokens": [{"id": 5, "content": "<|endoftext|>", "special": True}]}
put("tokenizer", "tiny-bpe", json.dumps(tiny_bpe).encode() + b"\xffab a ab<|endoftext|>")
# every decoder step at once (engine/text/detokenize.c), over byte-fallback and metaspace tokens
tiny_dec = {"model": {"type": "BPE", "vocab": {"<unk>": 0, "<0xE4>": 1, "<0xB8>": 2, "<0x41>": 3, "\u2581a": 4,
                                               "b": 5, "##b": 6, "a</w>": 7, "\u0120": 8},
                      "merges": [], "unk_token": "<unk>", "byte_fallback": True},
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                               {"type": "Replace", "pattern": {"String": " "},
                                                                "content": "\u2581"}]},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
                {"type": "Replace", "pattern": {"String": "b"}, "content": "bb"}, {"type": "ByteFallback"},
                {"type": "WordPiece", "prefix": "##", "cleanup": True}, {"type": "BPEDecoder", "suffix": "</w>"},
                {"type": "ByteLevel"}, {"type": "Fuse"}, {"type": "Strip", "content": "a", "start": 1, "stop": 2}]},
            "added_tokens": [{"id": 0, "content": "<unk>", "special": True}]}
put("tokenizer", "tiny-decoders", json.dumps(tiny_dec).encode() + "\xffa b\u4e2d a\xffA".encode())

# --- masks: byte 0 = keep (bit 0) | shape (bits 1-2)
for i, spec in enumerate(["", "0.1", "0.*,1.2,3.3", "kv:1.0,2.5", " 2.1 , 0.3,0.*, kv:1.1", "11.11,kv:11.3"]):
    put("mask", "spec%d" % i, bytes([i % 8]) + spec.encode())

# --- data readers: byte 0 = seq_len (bits 0-5) | bert-wordpiece (bit 6) | a model (bit 7)
for f in sorted(os.listdir(os.path.join(root, "tests", "data"))):
    p = read("tests", "data", f)
    if f.endswith(".npy"):
        put("data_npy", f, bytes([0]) + p)
        put("data_npy", f + "-4", bytes([4]) + p)
    elif f.endswith(".bin"):
        put("data_bin", f, bytes([4]) + p)
    elif f.endswith(".jsonl"):
        put("data_jsonl", f, bytes([0]) + p)
put("data_npy", "gpt2-tiny", bytes([0]) + read("tests", "fixtures", "gpt2-tiny", "data.npy"))
for name in ("bert-encoder", "bert-cls"):
    put("data_jsonl", name, bytes([0]) + read("tests", "fixtures", name, "data.jsonl"))
put("data_jsonl", "ragged", bytes([3]) + b'{"ids": [1, 2, 3, 4]}\n{"ids": [5]}\n\n{"ids": [6, 7, 8]}\n')
corpus = read("tests", "fixtures", "tokenizers", "corpus.txt")
put("data_txt", "gpt2", bytes([16]) + corpus[:600])
put("data_txt", "bert", bytes([0x40 | 12]) + corpus[600:1200])
put("data_txt", "docs", bytes([8]) + b"one doc\n\nanother\r\n\r\n\n  third doc   \n")
put("data_textjsonl", "text", bytes([0]) + b'{"text": "hello world"}\n{"text": "a longer line of text here"}\n')
put("data_textjsonl", "pairs", bytes([0xC0 | 16]) + b'{"text_a": "is it", "text_b": "yes it is", "label": "pos"}\n'
    b'{"text_a": "no", "text_b": "", "label": 0}\n')
put("data_textjsonl", "labels-bert", bytes([0x40 | 0x80]) + b'{"text": "good", "label": "neg"}\n{"text": "bad", "label": 1}\n')

# --- query: whole databases, and 'S' + SQL on the empty schema
hp = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "headprune")
if os.access(hp, os.X_OK):
    tmp = tempfile.mkdtemp()
    for plan in ("sweep-small", "sweep"):
        db = os.path.join(tmp, plan + ".db")
        subprocess.run([hp, "run", os.path.join(root, "tests", "plans", plan + ".yaml"), "--db", db, "--threads",
                        "1", "--quiet"], check=True, capture_output=True)
        c = sqlite3.connect(db)
        c.execute("PRAGMA journal_mode = DELETE")
        c.execute("VACUUM")
        sql = "\n".join(l.replace("INSERT INTO", "INSERT OR REPLACE INTO", 1) for l in c.iterdump()
                        if l.startswith("INSERT INTO") and not l.startswith('INSERT INTO "meta"'))
        c.close()
        put("query", plan + ".db", read(db))
        put("query", plan + ".sql", b"S" + sql.encode())
    shutil.rmtree(tmp)
else:
    print("make_corpus.py: no %s, query seeds skipped" % hp, file=sys.stderr)
