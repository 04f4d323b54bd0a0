#!/usr/bin/env python3
"""GGUF files whose tokenizer is their metadata (tokenizer.ggml.*), and the ids Hugging Face's libraries give
for a text of our own, so tests/test_tokenizer_gguf.c compares headprune's GGUF tokenizer with them exactly
and needs no torch.

Writes tests/fixtures/gguf-tokenizer/:
- llama-spm.gguf: the llama kind (SentencePiece BPE): a sentencepiece BPE model trained here on
  tests/fixtures/tokenizers/corpus.txt (byte fallback, a user-defined "<mask>" and control "<ctl>"), its
  pieces, scores and types written as llama.cpp's converter writes them, without merges (transformers makes
  them from the scores). Reference: transformers' GGUF loader (AutoTokenizer.from_pretrained(dir,
  gguf_file=...)), plus the user-defined tokens as added tokens (its converter leaves them out; llama.cpp and
  the model's own tokenizer.json split them out of the text).
- bpe-<pre>.gguf: the gpt2 kind (byte-level BPE), one vocabulary trained here with the tokenizers library,
  under several tokenizer.ggml.pre names. Reference: the tokenizers library with the pipeline the models of
  that name declare in their tokenizer.json (written out below, independently of the C table). transformers'
  GGUF loader ignores tokenizer.ggml.pre (a fixed ByteLevel), so its ids are printed as a difference count,
  not used.
- bpe-smollm.tokenizer.json: the smollm reference as a tokenizer.json (its Digits pre-tokenizer too).
- cases.json: the texts and, per file, the ids without and with special tokens.
And, when models/SmolLM2-135M-Instruct.Q4_1.gguf is there (scripts/get-smollm2.sh), the real file's ids in
tests/fixtures/smollm2-gguf/tokenizer-cases.json: SmolLM2's tokenizer (its tokenizer.json's pipeline,
Digits then ByteLevel, over the file's own tokens and merges).

Run with /work/venv/bin/python (transformers 4.57, tokenizers, gguf, sentencepiece). Deterministic.
"""
import json
import os
import sys
import tempfile

import gguf
import numpy as np
import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf-tokenizer")
CORPUS = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "corpus.txt")

# The text of our own: scripts, accents (composed and not), digits of every length, whitespace runs, special
# tokens inside words and beside spaces, contractions in both cases.
TEXTS = [
    "Hello world",
    " leading space, and  two   three    spaces",
    "trailing spaces   ",
    "tabs\tand\ttab\t\truns\n\nnew lines\r\nCRLF",
    "Numbers: 7, 42, 123, 2024, 12345678 and 3.14159 or 1,000,000.",
    "Année, naïve café, résumé (composed) and re\u0301sume\u0301 (combining)",
    "Ångström Ελληνικά Русский текст עברית العربية",
    "日本語のテキスト、中文文本和한국어 텍스트",
    "emoji 😀👍🏽 and flags 🇺🇸🇫🇷 ❤️",
    "I'M sure they'll say it's fine, DON'T you think? We've seen it. 'Tis",
    "<s>begins with bos</s> and ends</s>",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "a<mask>b <mask> c<ctl>d",
    "<|endoftext|>text<|endoftext|> <tool>call</tool>",
    "def foo(x):\n    return x ** 2  # comment",
    "   ",
    "",
    "ſ and K and ǅ: other cases",
    "x" * 80 + " " + "ab" * 40,
    "zero\u200bwidth and non\u00a0breaking and ideographic\u3000space",
]

LLAMA_HP = {"block_count": 1, "context_length": 64, "embedding_length": 8, "feed_forward_length": 16,
            "head_count": 2, "head_count_kv": 2, "rope_dimension_count": 4, "rms_eps": 1e-5}


def writer(path, n_vocab):
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(LLAMA_HP["block_count"])
    w.add_context_length(LLAMA_HP["context_length"])
    w.add_embedding_length(LLAMA_HP["embedding_length"])
    w.add_feed_forward_length(LLAMA_HP["feed_forward_length"])
    w.add_head_count(LLAMA_HP["head_count"])
    w.add_head_count_kv(LLAMA_HP["head_count_kv"])
    w.add_rope_dimension_count(LLAMA_HP["rope_dimension_count"])
    w.add_layer_norm_rms_eps(LLAMA_HP["rms_eps"])
    w.add_vocab_size(n_vocab)
    return w


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# --- the llama kind ----------------------------------------------------------------------------------

def llama_fixture(tmp):
    prefix = os.path.join(tmp, "sp")
    spm.SentencePieceTrainer.train(input=CORPUS, model_prefix=prefix, model_type="bpe", vocab_size=900,
                                   byte_fallback=True, character_coverage=0.98, user_defined_symbols=["<mask>"],
                                   control_symbols=["<ctl>"], num_threads=1, seed_sentencepiece_size=100000,
                                   shuffle_input_sentence=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        # sentencepiece's piece types are llama.cpp's token types: 1 normal ... 6 byte
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i)
                     else 4 if tokens[-1] == "<mask>" else 1)
    path = os.path.join(OUT, "llama-spm.gguf")
    w = writer(path, len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_unk_token_id(sp.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    finish(w)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(OUT, gguf_file="llama-spm.gguf")
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t, k in zip(tokens, types) if k == 4])
    return {"file": "llama-spm.gguf", "n_tokens": len(tokens),
            "plain": [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS],
            "special": [tok(t, add_special_tokens=True)["input_ids"] for t in TEXTS]}


# --- the gpt2 kind ---------------------------------------------------------------------------------------

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"


def split(regex):
    return pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)


# Each name's pipeline, as its models' tokenizer.json has it: (normalizer, pre_tokenizer, ignore_merges, add_bos)
PIPELINES = {
    # GPT-2, OLMo, MPT: ByteLevel with its own regex
    "gpt-2": (None, lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False, False),
    # SmolLM2, StarCoder: each digit alone, then GPT-2's ByteLevel
    "smollm": (None, lambda: pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                      pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                               use_regex=True)]), False, False),
    # Llama 3: its Split, ByteLevel without a regex, ignore_merges, <|begin_of_text|> first
    "llama-bpe": (None, lambda: pre_tokenizers.Sequence([split(LLAMA3_RE), pre_tokenizers.ByteLevel(
        add_prefix_space=False, use_regex=False)]), True, True),
    # Qwen2: NFC, its Split, ByteLevel without a regex
    "qwen2": (lambda: normalizers.NFC(), lambda: pre_tokenizers.Sequence([split(QWEN2_RE), pre_tokenizers.ByteLevel(
        add_prefix_space=False, use_regex=False)]), False, False),
    # llama.cpp's "default" (no tokenizer.json has it: its four splits as Split steps)
    "default": (None, lambda: pre_tokenizers.Sequence([split(r"[\p{P}\$\+<=>\^~\|]+"), split(GPT2_SPLIT),
                                                       split(r"\p{N}+"), split(r"[0-9][0-9][0-9]"),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                use_regex=False)]), False, False),
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER = ["<tool>"]


def train_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=520, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with open(CORPUS, encoding="utf-8") as f:
        lines = f.read().split("\n")
    tok.train_from_iterator(lines + TEXTS, trainer=trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    tokens += USER
    return tokens, merges


def reference(tokens, merges, pre, special_ids):
    norm, pretok, ignore, add_bos = PIPELINES[pre]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], ignore_merges=ignore))
    if norm:
        tok.normalizer = norm()
    tok.pre_tokenizer = pretok()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS])
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in USER])
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                           pair="<|endoftext|> $A <|endoftext|>:1 $B:1",
                                                           special_tokens=[("<|endoftext|>", vocab["<|endoftext|>"])])
    return tok


def bpe_fixtures():
    tokens, merges = train_bpe()
    types = [3 if t in SPECIALS else 4 if t in USER else 1 for t in tokens]
    out = []
    for pre in PIPELINES:
        name = "bpe-%s.gguf" % pre
        w = writer(os.path.join(OUT, name), len(tokens))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        eot = tokens.index("<|endoftext|>")
        w.add_bos_token_id(eot)
        w.add_eos_token_id(eot)
        if pre != "llama-bpe":  # llama-bpe: add_bos_token's default for the name (true) stands
            w.add_add_bos_token(False)
        finish(w)
        tok = reference(tokens, merges, pre, types)
        if pre == "smollm":  # the same as a tokenizer.json (Digits, then ByteLevel), for the loader of those
            with open(os.path.join(OUT, "bpe-smollm.tokenizer.json"), "w") as o:
                o.write(tok.to_str())
        case = {"file": name, "n_tokens": len(tokens),
                "plain": [tok.encode(t, add_special_tokens=False).ids for t in TEXTS],
                "special": [tok.encode(t, add_special_tokens=True).ids for t in TEXTS]}
        out.append(case)
        from transformers import AutoTokenizer
        hf = AutoTokenizer.from_pretrained(OUT, gguf_file=name)
        diff = sum(hf(t, add_special_tokens=False)["input_ids"] != p for t, p in zip(TEXTS, case["plain"]))
        print("%s: transformers' GGUF loader differs on %d of %d texts (it ignores tokenizer.ggml.pre)"
              % (name, diff, len(TEXTS)))
    return out


# --- the real file ----------------------------------------------------------------------------------------

def smollm2():
    path = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        print("SmolLM2 skipped: %s is not there (scripts/get-smollm2.sh fetches it)" % path)
        return
    r = gguf.GGUFReader(path)
    f = r.fields
    tokens = [f["tokenizer.ggml.tokens"].contents(i) for i in range(len(f["tokenizer.ggml.tokens"].data))]
    merges = [f["tokenizer.ggml.merges"].contents(i) for i in range(len(f["tokenizer.ggml.merges"].data))]
    types = [f["tokenizer.ggml.token_type"].contents(i) for i in range(len(tokens))]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges]))
    tok.pre_tokenizer = PIPELINES["smollm"][1]()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t, k in zip(tokens, types) if k == 3])
    case = {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "n_tokens": len(tokens),
            "plain": [tok.encode(t, add_special_tokens=False).ids for t in TEXTS],
            "special": [tok.encode(t, add_special_tokens=True).ids for t in TEXTS]}
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    plain = sum(hf(t, add_special_tokens=False)["input_ids"] != p for t, p in zip(TEXTS, case["plain"]))
    special = sum(hf(t)["input_ids"] != p for t, p in zip(TEXTS, case["special"]))
    print("SmolLM2: transformers' GGUF loader differs on %d of %d texts without special tokens (digits: it "
          "ignores tokenizer.ggml.pre), on %d with them (it adds %r, add_bos_token false notwithstanding)"
          % (plain, len(TEXTS), special, hf.bos_token))
    with open(os.path.join(ROOT, "tests", "fixtures", "smollm2-gguf", "tokenizer-cases.json"), "w") as o:
        json.dump({"texts": TEXTS, "cases": [case]}, o, ensure_ascii=False, indent=0)
        o.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cases = [llama_fixture(tmp)] + bpe_fixtures()
    with open(os.path.join(OUT, "cases.json"), "w") as o:
        json.dump({"texts": TEXTS, "cases": cases}, o, ensure_ascii=False, indent=0)
        o.write("\n")
    smollm2()
    for c in cases:
        print("%s: %d tokens, %d bytes" % (c["file"], c["n_tokens"], os.path.getsize(os.path.join(OUT, c["file"]))))


if __name__ == "__main__":
    sys.exit(main())
