"""Model.tokenize and .decode against `headprune tokenize` (and --decode) on a GPT-2 with a BPE tokenizer."""
import os

import numpy as np
import pytest

from conftest import FIXTURES, cli

TEXTS = ["Hello world, this is GPT-2.", "  leading spaces and\ttabs", "naïve café — ünïcödé ✓", "don't stop",
         "12345 67890 3.14159", "a"]


@pytest.fixture(scope="module")
def tok_model(hp, tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt2-bpe-model")
    for src in (FIXTURES / "gpt2-tiny").iterdir():
        os.symlink(src, d / src.name)
    for name in ("vocab.json", "merges.txt", "tokenizer.json"):
        src = FIXTURES / "tokenizers" / "gpt2-bpe" / name
        if src.exists() and not (d / name).exists():
            os.symlink(src, d / name)
    return d, hp.Model(str(d))


def cli_ids(d, text, *opts):
    out = cli("tokenize", "--model", d, *opts, input=text + "\n").stdout
    return [int(x) for x in out.split()]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_equals_cli(tok_model, text):
    d, m = tok_model
    ids = m.tokenize(text)
    assert ids and all(isinstance(i, int) for i in ids)
    assert ids == cli_ids(d, text)
    assert m.tokenize(text, special=True) == cli_ids(d, text, "--special")


@pytest.mark.parametrize("text", TEXTS)
def test_decode_equals_cli(tok_model, text):
    d, m = tok_model
    ids = m.tokenize(text)
    out = cli("tokenize", "--model", d, "--decode", input=" ".join(map(str, ids)) + "\n").stdout
    assert m.decode(ids) == out.rstrip("\n")
    assert m.decode(np.array(ids)) == m.decode(ids) == text  # byte-level BPE round-trips


def test_decode_unknown_id(hp, tok_model):
    d, m = tok_model
    with pytest.raises(hp.Error):
        m.decode([10**6])


def test_no_tokenizer(hp, model):
    with pytest.raises(hp.Error) as ei:
        model.tokenize("x")
    assert ei.value.status == "io" and "no tokenizer.json" in str(ei.value)
