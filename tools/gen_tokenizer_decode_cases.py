#!/usr/bin/env python3
"""Token strings and decoded text from Hugging Face for the tokenizer fixtures:
tests/fixtures/tokenizers/<name>/decode.json and tests/fixtures/tokenizers/decoder-cases.json.

test_tokenizer.c checks `hp_tokenizer_piece` (`headprune tokenize --pieces`) and
`hp_tokenizer_decode` (`headprune tokenize --decode`) against these. The fixtures'
tokenizer.json and expected.json (tools/gen_tokenizer_fixtures.py) are read, not
remade: this script only adds what the tokenizers library and transformers say
about them. Per fixture, decode.json holds

  "lines":  per corpus line: "tokens" (Encoding.tokens of the encoding with
            special tokens, i.e. the ids of expected.json's ids_special),
            "text" = decode(ids), "text_special" = decode(ids_special) and
            "text_skip" = decode(ids_special, skip_special_tokens=True);
  "seqs":   id sequences that no text encodes to, with "text" and "text_skip":
            random ids (specials among them), prefixes and suffixes of the
            encodings of emoji / CJK / Devanagari lines (cut inside a
            character), single bytes and byte sequences that are not UTF-8
            (truncated, overlong, surrogates, past U+10FFFF, stray continuation
            bytes) for the byte-level and byte-fallback tokenizers, and
            WordPiece word sequences for the clean-up of spaces before
            punctuation;
  "singles": every id (minilm: a sample of its 30522) with its token string
            (id_to_token) and decode([id]);
  "clean_up": (bert-wordpiece, llama3-bpe) the same lines and seqs decoded by
            transformers with a tokenizer_config.json that sets
            clean_up_tokenization_spaces true (as Llama-3's and BERT's real
            ones do); "tokenizer_config" is that file's text.

A text holding a NUL byte (the byte-level token for byte 0) is stored as
"<key>_hex" (UTF-8 bytes in hex) instead: cJSON strings cannot hold NUL.

Decoded text is transformers' `tokenizer.decode(ids)` (AutoTokenizer when the
directory has a tokenizer_config.json, else PreTrainedTokenizerFast over the
tokenizer.json), checked here to equal the tokenizers library's
`Tokenizer.decode(ids, skip_special_tokens=...)` whenever transformers does not
clean up spaces: the decoding rules live in the tokenizers library, the
clean-up of spaces before punctuation in transformers. The byte-level
tokenizers must give every corpus line back (decode(encode(line)) == line).

decoder-cases.json holds small hand-made tokenizer.json files whose decoders
the fixtures do not use (Metaspace with each prepend_scheme, no decoder at all,
WordPiece without clean-up and another prefix, Strip, Replace of longer
strings, BPEDecoder, ByteFallback's "<0x0a>" and "<0x+A>", ByteLevel on tokens
outside its alphabet, a template's special token the vocabulary lacks) with id
sequences, their decoded text and token strings ("encodings": texts encoded
with special tokens, their ids and Encoding.tokens).

Deterministic (fixed seeds); run from anywhere:
    /work/venv/bin/python tools/gen_tokenizer_decode_cases.py
"""
import json
import os
import random
import shutil
import tempfile

os.environ.setdefault("RAYON_NUM_THREADS", "2")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(REPO, "tests", "fixtures", "tokenizers")
NAMES = ["gpt2-bpe", "llama3-bpe", "bert-wordpiece", "bert-wordpiece-cased", "sp-bpe", "minilm"]
BYTE_LEVEL = {"gpt2-bpe", "llama3-bpe"}
CLEAN_UP = {"bert-wordpiece", "llama3-bpe"}
CLEAN_UP_CONFIG = json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": True})

# Byte strings that are not (all) UTF-8, and some that are, for the byte tokens.
BYTE_CASES = [
    b"\xe4\xb8", b"\xe4", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xf0", b"\xf0\x9f\x98\x80", b"\xe4\xb8\xad",
    b"\x80", b"\xbf\x80", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\x9f\xbf",
    b"\xf4\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf5\x80", b"\xff", b"\xfe\xff", b"a\xe4b", b"\xe4\xb8\xad\xe4",
    b"\xe4\xb8\xad\xe4\xb8", b"\xc3\xa9\xc3", b"\xc3\x28", b"\xe2\x82\x28", b"\xf0\x28\x8c\xbc", b"\xe2\x28\xa1",
    b"\x00", b"a\x00b", b"\n", b"\t ", b"\xef\xbb\xbf",
]

# WordPiece-style word sequences (kept when every token is in the vocabulary): the clean-up cases.
WORD_SEQS = [
    ["i", "don", "'", "t", "know", ",", "she", "said", "."],
    ["hello", "!", "how", "are", "you", "?"],
    ["it", "'", "s", "fine", "'", "m", "'", "ve", "'", "re"],
    ["do", "not", "go", "."],
    ["a", "'", "b"],
    ["##s", "the", "##s"],
    ["[CLS]", "the", "[MASK]", "is", "[UNK]", ".", "[SEP]", "[PAD]", "[PAD]"],
    ["[CLS]", ".", ",", "!", "?", "[SEP]"],
    ["the", ".", ".", ".", "end"],
]


def corpus():
    with open(os.path.join(FIX, "corpus.txt"), "rb") as f:
        data = f.read().decode("utf-8")
    assert data.endswith("\n")
    return data[:-1].split("\n")


def put_text(d, key, s):
    if "\x00" in s:
        d[key + "_hex"] = s.encode("utf-8").hex()
    else:
        d[key] = s


def dumps(o):
    return json.dumps(o, ensure_ascii=False, separators=(",", ":"))


def write_records(path, head, sections):
    """One JSON object, one record a line (as expected.json), so diffs stay readable."""
    parts = ["{"]
    parts += ["%s:%s," % (dumps(k), dumps(v)) for k, v in head]
    for i, (key, rows) in enumerate(sections):
        last = i + 1 == len(sections)
        if isinstance(rows, dict):
            parts.append("%s:%s%s" % (dumps(key), dumps(rows), "" if last else ","))
            continue
        parts.append("%s:[" % dumps(key))
        parts += [dumps(r) + ("," if k + 1 < len(rows) else "") for k, r in enumerate(rows)]
        parts.append("]" + ("" if last else ","))
    parts.append("}")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(parts) + "\n")


def byte_level_char(b):
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for x in range(256):
        if x not in bs:
            bs.append(x)
            cs.append(256 + n)
            n += 1
    return chr(dict(zip(bs, cs))[b])


def hf_tokenizer(d):
    """transformers' tokenizer for directory d, as a user would load it."""
    if os.path.isfile(os.path.join(d, "tokenizer_config.json")):
        return AutoTokenizer.from_pretrained(d)
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))


def make_seqs(name, tok, lines, expected):
    vocab = tok.get_vocab(with_added_tokens=True)
    all_ids = sorted(set(vocab.values()))
    specials = sorted(a.content for a in tok.get_added_tokens_decoder().values() if a.special)
    special_ids = [vocab[s] for s in specials]
    rng = random.Random("decode:" + name)
    seqs = []
    for _ in range(150):
        n = rng.randint(1, 12)
        seqs.append(("random", [rng.choice(special_ids) if rng.random() < 0.2 else rng.choice(all_ids)
                                for _ in range(n)]))
    # cut inside characters: prefixes and suffixes of lines with emoji, CJK, Devanagari, Hangul
    marks = ["Great job", "Family ZWJ", "Flags:", "\u732b\u5728", "\u092c\u093f\u0932", "\uace0\uc591"]
    for m in marks:
        i = next(k for k, s in enumerate(lines) if s.startswith(m))
        ids = expected[i]["ids"]
        for k in range(1, min(len(ids), 24)):
            seqs.append(("prefix %d of line %d" % (k, i), ids[:k]))
            seqs.append(("suffix from %d of line %d" % (k, i), ids[k:k + 24]))
    # bytes: byte-level tokens or <0xXX> byte-fallback tokens
    if name in BYTE_LEVEL or name == "sp-bpe":
        def byte_id(b):
            return vocab[byte_level_char(b)] if name in BYTE_LEVEL else vocab["<0x%02X>" % b]
        word = tok.encode("the cat", add_special_tokens=False).ids
        for bs in BYTE_CASES:
            ids = [byte_id(b) for b in bs]
            seqs.append(("bytes %s" % bs.hex(), ids))
            seqs.append(("bytes %s between words" % bs.hex(), word + ids + word))
    for words in WORD_SEQS:
        if all(w in vocab for w in words):
            seqs.append(("words " + " ".join(words), [vocab[w] for w in words]))
    return seqs


def singles_of(name, tok):
    ids = sorted(set(tok.get_vocab(with_added_tokens=True).values()))
    if name == "minilm":  # 30522 ids: the first 1100 (specials, [unused], characters) and every 29th
        ids = [i for i in ids if i < 1100 or i % 29 == 0]
    return ids


def decode_both(hf, tok, ids, cleaning):
    """(text, text_skip) from transformers, checked against the tokenizers library when it does not clean up."""
    out = []
    for skip in (False, True):
        text = hf.decode(ids, skip_special_tokens=skip)
        if not cleaning:
            raw = tok.decode(ids, skip_special_tokens=skip)
            assert text == raw, (ids, skip, text, raw)
        out.append(text)
    return out


def gen_fixture(name, lines):
    d = os.path.join(FIX, name)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(d, "expected.json"), encoding="utf-8") as f:
        exp = json.load(f)
    expected = {c["line"]: c for c in exp["cases"]}
    hf = hf_tokenizer(d)
    assert not hf.clean_up_tokenization_spaces, name  # then transformers' decode is the library's
    recs = []
    roundtrip_bad = []
    for c in exp["cases"]:
        s = lines[c["line"]]
        e = tok.encode(s, add_special_tokens=True)
        assert e.ids == c["ids_special"], (name, c["line"])
        plain = tok.encode(s, add_special_tokens=False)
        assert plain.ids == c["ids"] and all(t in e.tokens for t in plain.tokens)
        r = {"line": c["line"], "tokens": e.tokens}
        put_text(r, "text", decode_both(hf, tok, c["ids"], False)[0])
        special, skip = decode_both(hf, tok, c["ids_special"], False)
        put_text(r, "text_special", special)
        put_text(r, "text_skip", skip)
        if r.get("text") != s:
            roundtrip_bad.append(c["line"])
        recs.append(r)
    if name in BYTE_LEVEL:
        assert not roundtrip_bad, (name, roundtrip_bad)
    seq_recs = []
    for what, ids in make_seqs(name, tok, lines, expected):
        r = {"what": what, "ids": ids}
        text, skip = decode_both(hf, tok, ids, False)
        put_text(r, "text", text)
        put_text(r, "text_skip", skip)
        seq_recs.append(r)
    ids = singles_of(name, tok)
    singles = {"ids": ids, "tokens": [tok.id_to_token(i) for i in ids], "text": [], "text_hex": {}}
    for i in ids:
        t = hf.decode([i])
        assert t == tok.decode([i], skip_special_tokens=False)
        if "\x00" in t:
            singles["text_hex"][str(i)] = t.encode("utf-8").hex()
            t = ""
        singles["text"].append(t)
    sections = [("lines", recs), ("seqs", seq_recs), ("singles", singles)]
    n_clean = 0
    if name in CLEAN_UP:
        tmp = tempfile.mkdtemp(prefix="hp-decode-")
        try:
            shutil.copyfile(os.path.join(d, "tokenizer.json"), os.path.join(tmp, "tokenizer.json"))
            with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
                f.write(CLEAN_UP_CONFIG)
            hfc = AutoTokenizer.from_pretrained(tmp)
            assert hfc.clean_up_tokenization_spaces
            cl, cs = [], []
            for c in exp["cases"]:
                r = {"line": c["line"]}
                special, skip = decode_both(hfc, tok, c["ids_special"], True)
                put_text(r, "text_special", special)
                put_text(r, "text_skip", skip)
                n_clean += special != decode_both(hf, tok, c["ids_special"], False)[0]
                cl.append(r)
            for r0 in seq_recs:
                r = {"ids": r0["ids"]}
                text, skip = decode_both(hfc, tok, r0["ids"], True)
                put_text(r, "text", text)
                put_text(r, "text_skip", skip)
                cs.append(r)
        finally:
            shutil.rmtree(tmp)
        sections.append(("clean_up", {"tokenizer_config": CLEAN_UP_CONFIG, "lines": cl, "seqs": cs}))
    head = [("tokenizer", name), ("tokenizers_version", tokenizers.__version__),
            ("transformers_version", transformers.__version__), ("transformers_class", type(hf).__name__)]
    write_records(os.path.join(d, "decode.json"), head, sections)
    print("%-22s %4d lines (%d do not decode to themselves), %4d seqs, %5d singles%s" % (
        name, len(recs), len(roundtrip_bad), len(seq_recs), len(ids),
        ", clean-up changes %d lines" % n_clean if name in CLEAN_UP else ""))


# ---------------------------------------------------------------- hand-made decoders


def bpe(vocab):
    return {"type": "BPE", "vocab": vocab, "merges": [], "unk_token": None, "byte_fallback": False, "fuse_unk": False,
            "dropout": None, "continuing_subword_prefix": None, "end_of_word_suffix": None}


def wordpiece(vocab):
    return {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100, "vocab": vocab}


def added(content, i, special=True):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
            "special": special}


META = {"\u2581a": 0, "b": 1, "\u2581": 2, "\u2581\u2581": 3, "a\u2581": 4, "\u2581b\u2581c": 5, "<s>": 6}
META_SEQS = [[0, 1, 0], [2, 0], [3, 1], [1, 0], [4, 0], [5, 5], [6, 0, 1], [6, 2, 0], [], [2], [3]]
BL = {"x a": 0, "\u0120\u00e9": 1, "\u0120\u4e2d": 2, "\u00e4": 3, "\u00f0\u0141\u013a": 4, "\u0122": 5,
      "hi": 6, "\u0120there": 7, "<|x y|>": 8}
BL_SEQS = [[0], [1], [2], [3], [1, 1], [4], [4, 5], [5], [6, 7], [6, 4, 5, 7], [6, 8, 7], [8], [4, 8, 5]]
DEC_CASES = {
    "metaspace_always": (bpe(META), {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                     "split": True}, [added("<s>", 6)], META_SEQS),
    "metaspace_first": (bpe(META), {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                    "split": False}, [added("<s>", 6)], META_SEQS),
    "metaspace_never": (bpe(META), {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never",
                                    "split": True}, [added("<s>", 6)], META_SEQS),
    "metaspace_legacy_add_prefix_space": (bpe(META), {"type": "Metaspace", "replacement": "\u2581",
                                                      "add_prefix_space": True}, [added("<s>", 6)], META_SEQS),
    "metaspace_other_replacement": (bpe({"_a": 0, "b_": 1, "\u2581c": 2}), {"type": "Metaspace", "replacement": "_",
                                                                            "prepend_scheme": "always", "split": True},
                                    [], [[0, 1, 2], [1, 0], [2, 0]]),
    "no_decoder_joins_with_spaces": (bpe({"a": 0, "b": 1, "c d": 2, "<s>": 3, "e": 4}), None,
                                     [added("<s>", 3), added("e", 4, special=False)],
                                     [[0, 1, 2], [3, 0, 3], [0, 4, 1], [], [3]]),
    "wordpiece_no_cleanup_other_prefix": (
        wordpiece({"[UNK]": 0, "do": 1, "not": 2, "@@ing": 3, "##x": 4, ".": 5, ",": 6, "'": 7, "s": 8, "[CLS]": 9}),
        {"type": "WordPiece", "prefix": "@@", "cleanup": False}, [added("[UNK]", 0), added("[CLS]", 9)],
        [[1, 3, 2, 5], [3, 1], [4, 4], [9, 1, 6, 7, 8, 5, 0], [1, 2, 0]]),
    "wordpiece_cleanup_within_tokens": (
        wordpiece({"[UNK]": 0, "do not": 1, "n't": 2, "'m": 3, ".": 4, "' x": 5, "a ,": 6, "'s": 7, "'ve": 8,
                   "'re": 9, "x": 10, "!": 11, "?": 12, "##.": 13}),
        {"type": "WordPiece", "prefix": "##", "cleanup": True}, [added("[UNK]", 0)],
        [[10, 1], [10, 2, 3, 4], [10, 5, 6], [10, 7, 8, 9], [10, 11, 12, 13], [1, 10], [4, 10]]),
    "strip_both_ends": (bpe({"xxaxx": 0, "x": 1, "ax": 2, "xa": 3}),
                        {"type": "Strip", "content": "x", "start": 3, "stop": 1}, [],
                        [[0], [2], [3], [0, 3, 2], [2, 3, 2]]),
    "replace_longer_strings": (bpe({"ab": 0, "abab": 1, "aab": 2, "\u00e9ab\u00e9": 3, "x": 4}),
                               {"type": "Sequence", "decoders": [
                                   {"type": "Replace", "pattern": {"String": "ab"}, "content": "-"},
                                   {"type": "Sequence", "decoders": [
                                       {"type": "Replace", "pattern": {"String": "\u00e9"}, "content": ""}]}]},
                               [], [[0], [1], [2], [3], [4, 0, 4]]),
    "bpe_decoder_suffix": (bpe({"a</w>": 0, "b": 1, "c</w>": 2, "</w>": 3}), {"type": "BPEDecoder", "suffix": "</w>"},
                           [], [[0, 1, 2], [1, 2], [0], [3, 3], [2, 0]]),
    "byte_fallback_spellings": (bpe({"<0x41>": 0, "<0x+A>": 1, "<0x0a>": 2, "<0xZZ>": 3, "a": 4, "<0xE4>": 5,
                                     "<0xB8>": 6, "<0xAD>": 7, "<0x4>": 8, "<0x041>": 9}),
                                {"type": "ByteFallback"}, [],
                                [[0], [1], [2], [3], [5, 6, 7], [5, 6], [5, 4, 6], [5, 6, 7, 5], [8], [9], [0, 2, 0]]),
    "byte_level_tokens_outside_its_alphabet": (bpe(BL), {"type": "ByteLevel", "add_prefix_space": True,
                                                         "trim_offsets": True, "use_regex": True},
                                               [added("<|x y|>", 8)], BL_SEQS),
    # a template's special token that neither the vocabulary nor added_tokens has: Encoding.tokens
    # shows its string, decoding drops it
    "template_token_outside_the_vocabulary": (bpe({"a": 0, "b": 1, "<s>": 2}), None, [added("<s>", 2)],
                                              [[0, 1], [2, 0, 1, 2]]),
}
POST = {"template_token_outside_the_vocabulary": {
    "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<cls>", "type_id": 0}},
                                             {"Sequence": {"id": "A", "type_id": 0}},
                                             {"SpecialToken": {"id": "<s>", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<cls>": {"id": "<cls>", "ids": [7], "tokens": ["<cls>"]},
                       "<s>": {"id": "<s>", "ids": [2], "tokens": ["<s>"]}}}}
ENCODE = {"template_token_outside_the_vocabulary": ["ab", "ba"]}


def gen_decoders():
    out = {}
    for name, (model, dec, add, seqs) in DEC_CASES.items():
        j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": add, "normalizer": None,
             "pre_tokenizer": None, "post_processor": POST.get(name), "decoder": dec, "model": model}
        text = json.dumps(j, ensure_ascii=False)
        tok = Tokenizer.from_str(text)
        vocab = tok.get_vocab(with_added_tokens=True)
        rs = []
        encs = []
        for plain in ENCODE.get(name, []):
            e = tok.encode(plain, add_special_tokens=True)
            encs.append({"text": plain, "ids": e.ids, "tokens": e.tokens})
            seqs = seqs + [e.ids]
        for ids in seqs:
            r = {"ids": ids}
            put_text(r, "text", tok.decode(ids, skip_special_tokens=False))
            put_text(r, "text_skip", tok.decode(ids, skip_special_tokens=True))
            rs.append(r)
        out[name] = {"json": text, "tokens": {str(i): tok.id_to_token(i) for i in sorted(set(vocab.values()))},
                     "seqs": rs}
        if encs:
            out[name]["encodings"] = encs
        print("%-40s %s" % (name, " | ".join(repr(r.get("text")) for r in rs)))
    path = os.path.join(FIX, "decoder-cases.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump({"tokenizers": tokenizers.__version__, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", path)


def main():
    lines = corpus()
    print("tokenizers %s, transformers %s" % (tokenizers.__version__, transformers.__version__))
    for name in NAMES:
        gen_fixture(name, lines)
    gen_decoders()


if __name__ == "__main__":
    main()
