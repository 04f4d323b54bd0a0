#!/usr/bin/env python3
"""Long texts and the ids Hugging Face tokenizers gives for them:
tests/fixtures/tokenizers/long-cases.json.

Each case is a unit repeated `repeat` times (one long line of words, or one word
of 100k characters) for a fixture tokenizer; its ids are stored run-length
stored as head + cycle * times + tail (a long text of repeated units gives
periodic ids but at its ends), which keeps the file small. test_tokenizer.c
builds the same text, encodes it and compares: tokenizing must stay linear in
the text and give the library's ids for it (issue 16: splitting and BPE merges
were quadratic). Run with the tokenizers package installed (e.g. in a venv):
    python3 tools/gen_tokenizer_long_cases.py
"""
import json
import os

import tokenizers
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(HERE, "tests", "fixtures", "tokenizers")

SENTENCE = "The 3 quick brown foxes' 12.5% jump\u2014\u00fcber na\u00efve dogs!\n  Tabs\tand  spaces. "
CASES = [
    ("gpt2-bpe", "word ", 100000),                # 100k words on one line: regex splitting
    ("gpt2-bpe", "internationalization", 5000),   # unit None: lcg_word(repeat)   # one word of 100k letters: BPE merges
    ("gpt2-bpe", SENTENCE, 2000),
    ("llama3-bpe", "x", 100000),                  # the report's case
    ("llama3-bpe", SENTENCE, 2000),
    ("sp-bpe", "ab\u00e9c\u4e2d", 20000),          # byte fallback inside one long word
    ("bert-wordpiece", SENTENCE, 2000),
    ("gpt2-bpe", None, 8000),                     # one word of 8k pseudo-random letters (lcg_word)
    ("llama3-bpe", None, 8000),
]


def lcg_word(n):
    """n letters a-z from the C library's classic LCG; test_tokenizer.c makes the same word."""
    x, out = 1, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(chr(ord("a") + (x >> 16) % 26))
    return "".join(out)


def periodic(ids, per_unit):
    """ids as head + cycle * times + tail, with the longest periodic stretch (period: a few units' ids)."""
    best = (0, 0, 1)  # (covered, start, period)
    for mult in range(1, 5):
        for p in {max(1, round(per_unit * mult) + d) for d in range(-2, 3)}:
            run = 0
            for i in range(len(ids) - p - 1, -1, -1):  # run: how far ids[i:] repeats with period p
                run = run + 1 if ids[i] == ids[i + p] else 0
                if run + p > best[0]:
                    best = (run + p, i, p)
    covered, h, p = best
    times = covered // p
    return {"head": ids[:h], "cycle": ids[h:h + p], "times": times, "tail": ids[h + p * times:]}


cases = []
for name, unit, repeat in CASES:
    tok = Tokenizer.from_file(os.path.join(FIX, name, "tokenizer.json"))
    text = lcg_word(repeat) if unit is None else unit * repeat
    ids = tok.encode(text, add_special_tokens=False).ids
    c = {"tokenizer": name, "unit": unit, "repeat": repeat, "n_ids": len(ids)}
    c.update(periodic(ids, len(ids) / repeat))
    assert c["head"] + c["cycle"] * c["times"] + c["tail"] == ids
    cases.append(c)
    print(name, repr((unit or "lcg_word")[:20]), repeat, len(ids), "ids:", len(c["head"]), "+", len(c["cycle"]), "*", c["times"], "+",
          len(c["tail"]))
path = os.path.join(FIX, "long-cases.json")
with open(path, "w") as f:
    json.dump({"tokenizers": tokenizers.__version__, "cases": cases}, f, separators=(",", ":"))
    f.write("\n")
print("wrote", path, os.path.getsize(path), "bytes")
