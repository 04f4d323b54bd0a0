"""Every Model.eval keyword against the `headprune eval` option it mirrors (docs/python.md promises eval --json's
numbers): the same call from Python and from the command line gives the same bits, or the same error line.

One row a case: the data (a file of each kind, or ids in memory), the keywords, the CLI's options. Ids in memory
go to the CLI as the .npy file of the same array, its shape kept (a 1-D array is a 1-D file), so the rows test
that an array follows the rules a file does. An error row expects the ValueError's message to be the CLI's stderr
line without its "headprune: " prefix: the engine's line word for word (the array's name where the CLI names
its file), or, for an option the CLI refuses itself (exit 2, "headprune eval: --option ..."), its line with the
keyword for the option.

All on llama-gqa (3 layers x 4 heads, 2 KV groups; data.npy is 3 rows of 16 ids): the issue 52 cases are its.
"""
import json
import subprocess

import numpy as np
import pytest

from conftest import CLI, FIXTURES

MODEL = FIXTURES / "llama-gqa"
IDS = np.load(MODEL / "data.npy")  # (3, 16) int32
TIMINGS = {"seconds", "grad_seconds"}
GRID = np.zeros((3, 4), dtype=bool)
GRID[2, 0] = True  # head 2.0 (its transpose, once read as head 0.2: test_errors.py)
KEEP = np.zeros((3, 4), dtype=bool)
KEEP[0, 1] = KEEP[1, :] = True  # 0.1 and layer 1
# an option's CLI name -> the keyword that mirrors it
KEYWORD = {"--seq-len": "seq_len", "--threads": "threads", "--ablation": "ablation", "--grad-metric": "metric",
           "--mask": "mask", "--keep": "keep"}


def files(d):
    """The data forms by name: (what Python is given, the file the CLI is given)."""
    flat = IDS.ravel()
    np.save(d / "flat.npy", flat)
    np.save(d / "rows.npy", IDS)
    flat.astype("<u2").tofile(d / "raw.bin")  # nanoGPT's raw uint16 stream
    (d / "rows.jsonl").write_text("".join(json.dumps({"ids": r.tolist()}) + "\n" for r in IDS))
    (d / "text.txt").write_text("some text\n")
    return {"npy": (str(d / "rows.npy"),) * 2, "npy-1d": (str(d / "flat.npy"),) * 2,
            "bin": (str(d / "raw.bin"),) * 2, "jsonl": (str(d / "rows.jsonl"),) * 2,
            "task": (str(MODEL / "task.jsonl"),) * 2, "txt": (str(d / "text.txt"),) * 2,
            "array": (IDS, str(d / "rows.npy")), "array-1d": (flat, str(d / "flat.npy")),
            "array-int64": (IDS.astype(np.int64), str(d / "rows.npy")),
            "array-list": (IDS.tolist(), str(d / "rows.npy"))}


# (id, data, keywords, CLI options); threads=1 unless a row gives it
SAME = [
    ("npy", "npy", {}, []),
    ("npy-seq_len-equal", "npy", {"seq_len": 16}, ["--seq-len", "16"]),
    ("npy-1d-seq_len", "npy-1d", {"seq_len": 16}, ["--seq-len", "16"]),
    ("npy-1d-tail-dropped", "npy-1d", {"seq_len": 20}, ["--seq-len", "20"]),
    ("bin-seq_len", "bin", {"seq_len": 12}, ["--seq-len", "12"]),
    ("jsonl", "jsonl", {}, []),
    ("jsonl-seq_len-equal", "jsonl", {"seq_len": 16}, ["--seq-len", "16"]),
    ("task", "task", {}, []),
    ("array", "array", {}, []),
    ("array-int64", "array-int64", {}, []),
    ("array-list", "array-list", {}, []),
    ("array-seq_len-equal", "array", {"seq_len": 16}, ["--seq-len", "16"]),
    ("array-1d-seq_len", "array-1d", {"seq_len": 16}, ["--seq-len", "16"]),  # issue 52: 3 rows, not 1 of 48
    ("array-1d-tail-dropped", "array-1d", {"seq_len": 20}, ["--seq-len", "20"]),
    ("array-1d-one-row", "array-1d", {"seq_len": 48}, ["--seq-len", "48"]),
    ("mask-spec", "array", {"mask": "2.0"}, ["--mask", "2.0"]),
    ("mask-grid", "array", {"mask": GRID}, ["--mask", "2.0"]),
    ("mask-pairs", "array", {"mask": [(2, 0), (0, 3)]}, ["--mask", "2.0,0.3"]),
    ("mask-kv", "npy", {"mask": "kv:0.0,1.1"}, ["--mask", "kv:0.0,1.1"]),
    ("mask-mlp", "npy", {"mask": "mlp:1,0.2", "ablation": "mean"}, ["--mask", "mlp:1,0.2", "--ablation", "mean"]),
    ("keep-mlp", "array", {"keep": "mlp:0,1.*"}, ["--keep", "mlp:0,1.*"]),
    ("grad-mask-mlp", "array", {"grad": True, "mask": "mlp:2"}, ["--grad", "--mask", "mlp:2"]),
    ("keep-spec", "array", {"keep": "0.1,1.*"}, ["--keep", "0.1,1.*"]),
    ("keep-grid", "array", {"keep": KEEP}, ["--keep", "0.1,1.0,1.1,1.2,1.3"]),
    ("ablation-mean", "npy", {"ablation": "mean", "mask": "1.*"}, ["--ablation", "mean", "--mask", "1.*"]),
    ("ablation-mean-pos", "array", {"ablation": "mean-pos", "mask": "0.2"},
     ["--ablation", "mean-pos", "--mask", "0.2"]),
    ("ablation-resample", "task", {"ablation": "resample", "mask": "2.*"},
     ["--ablation", "resample", "--mask", "2.*"]),
    ("ablation-denoise", "task", {"ablation": "denoise", "keep": "1.1"}, ["--ablation", "denoise", "--keep", "1.1"]),
    ("grad", "array", {"grad": True}, ["--grad"]),
    ("grad-mask", "npy-1d", {"grad": True, "mask": "0.0", "seq_len": 8}, ["--grad", "--mask", "0.0", "--seq-len", "8"]),
    ("metric-kl", "array", {"metric": "kl", "mask": "1.2"}, ["--grad-metric", "kl", "--mask", "1.2"]),
    ("metric-loss", "array", {"metric": "loss"}, ["--grad-metric", "loss"]),
    ("metric-logit_diff", "task", {"metric": "logit_diff", "mask": "0.0"},
     ["--grad-metric", "logit_diff", "--mask", "0.0"]),
    ("edges-spec", "array", {"edges": "0.1>1.0:q,mlp:0>logits"}, ["--edges", "0.1>1.0:q,mlp:0>logits"]),
    ("edges-list", "array", {"edges": ["0.1>1.0:q", "mlp:0>logits"]}, ["--edges", "0.1>1.0:q,mlp:0>logits"]),
    ("edges-mask-mean", "npy", {"mask": "0.2", "edges": "0.1>*", "ablation": "mean"},
     ["--mask", "0.2", "--edges", "0.1>*", "--ablation", "mean"]),
    ("edges-resample", "task", {"edges": "1.*>logits", "ablation": "resample"},
     ["--edges", "1.*>logits", "--ablation", "resample"]),
    ("threads-2", "array", {"threads": 2}, ["--threads", "2"]),
    ("threads-numpy-int", "npy", {"threads": np.int64(1)}, ["--threads", "1"]),
]

# (id, data, keywords, CLI options, a piece of the line, so that a row cannot pass on the wrong error)
REFUSED = [
    ("npy-seq_len-8", "npy", {"seq_len": 8}, ["--seq-len", "8"], "rows have 16 tokens but seq_len is 8"),
    ("array-seq_len-8", "array", {"seq_len": 8}, ["--seq-len", "8"], "rows have 16 tokens but seq_len is 8"),
    ("npy-1d-no-seq_len", "npy-1d", {}, [], "1-D token stream of 48 tokens needs a seq_len"),
    ("array-1d-no-seq_len", "array-1d", {}, [], "1-D token stream of 48 tokens needs a seq_len"),
    ("array-1d-seq_len-too-long", "array-1d", {"seq_len": 64}, ["--seq-len", "64"],
     "only 48 tokens, fewer than seq_len 64"),
    ("bin-no-seq_len", "bin", {}, [], "needs a seq_len"),
    ("jsonl-seq_len-8", "jsonl", {"seq_len": 8}, ["--seq-len", "8"], "row has 16 ids, expected 8"),
    ("txt-no-tokenizer", "txt", {"seq_len": 8}, ["--seq-len", "8"], "tokenizer"),
    ("seq_len-0", "array", {"seq_len": 0}, ["--seq-len", "0"], "seq_len must be an integer from 1 to"),
    ("seq_len-negative", "array", {"seq_len": -1}, ["--seq-len", "-1"], "seq_len must be an integer"),
    ("seq_len-fraction", "array", {"seq_len": 1.5}, ["--seq-len", "1.5"], "seq_len must be an integer"),
    ("seq_len-bool", "array", {"seq_len": True}, ["--seq-len", "True"], "seq_len must be an integer"),
    ("seq_len-huge", "array", {"seq_len": (1 << 20) + 1}, ["--seq-len", str((1 << 20) + 1)],
     "seq_len must be an integer"),
    ("threads-0", "array", {"threads": 0}, ["--threads", "0"], "threads must be an integer from 1 to"),
    ("threads-negative", "array", {"threads": -2}, ["--threads", "-2"], "threads must be an integer"),
    ("threads-fraction", "array", {"threads": 1.5}, ["--threads", "1.5"], "threads must be an integer"),
    ("threads-bool", "array", {"threads": True}, ["--threads", "True"], "threads must be an integer"),
    ("threads-huge", "array", {"threads": 1025}, ["--threads", "1025"], "threads must be an integer"),
    ("mask-missing-layer", "array", {"mask": "9.9"}, ["--mask", "9.9"], "layer 9 does not exist"),
    ("mask-missing-mlp", "array", {"mask": "mlp:3"}, ["--mask", "mlp:3"], "layer 3 does not exist"),
    ("keep-missing-head", "npy", {"keep": "0.7"}, ["--keep", "0.7"], "does not exist"),
    ("edges-not-an-edge", "array", {"edges": "0.1"}, ["--edges", "0.1"], "'0.1' is not an edge"),
    ("edges-backwards", "array", {"edges": "1.0>0.1:q"}, ["--edges", "1.0>0.1:q"], "does not write"),
    ("edges-emb-mean", "array", {"edges": "emb>logits", "ablation": "mean"},
     ["--edges", "emb>logits", "--ablation", "mean"], "edges from emb are patched under zero ablation only"),
    ("ablation-unknown", "array", {"ablation": "bogus"}, ["--ablation", "bogus"], "ablation must be zero, mean"),
    ("ablation-denoise-no-task", "array", {"ablation": "denoise"}, ["--ablation", "denoise"], "corrupt prompt"),
    ("metric-unknown", "array", {"metric": "bogus"}, ["--grad-metric", "bogus"], "metric must be loss"),
    ("metric-logit_diff-no-task", "npy", {"metric": "logit_diff"}, ["--grad-metric", "logit_diff"],
     "needs task rows with a wrong answer"),
]


def array_name(a):
    return f"array ({' x '.join(map(str, np.shape(a)))})"


def cli_eval(path, opts):
    if "--threads" not in opts:
        opts = [*opts, "--threads", "1"]
    return subprocess.run([str(CLI), "eval", "--model", str(MODEL), "--data", path, "--quiet", "--json", *opts],
                          capture_output=True, text=True, timeout=300)


def py_eval(model, data, kw):
    return model.eval(data, **{"threads": 1, **kw})


@pytest.fixture(scope="module")
def gqa(hp):
    return hp.Model(str(MODEL))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return files(tmp_path_factory.mktemp("eval-cli"))


def same_bits(py, ref, path=""):
    """py (dicts, numpy arrays, scalars) equals ref (the CLI's parsed JSON) bit for bit."""
    if isinstance(ref, dict):
        assert isinstance(py, dict) and set(py) == set(ref), (path, set(py) ^ set(ref))
        for k in ref:
            same_bits(py[k], ref[k], f"{path}.{k}")
    elif isinstance(py, np.ndarray):
        r = np.asarray(ref, dtype=py.dtype)
        assert py.shape == r.shape and py.tobytes() == r.tobytes(), path  # -0.0 is not 0.0
    else:
        assert type(py) is type(ref) and (py == ref or py != py and ref != ref), (path, py, ref)


@pytest.mark.filterwarnings("ignore:.*looks made for another model")  # the fixture's ids are random
@pytest.mark.parametrize("form,kw,opts", [r[1:] for r in SAME], ids=[r[0] for r in SAME])
def test_same_bits(gqa, data, form, kw, opts):
    src, path = data[form]
    p = cli_eval(path, opts)
    assert p.returncode == 0, p.stderr
    ref = json.loads(p.stdout)
    py = dict(py_eval(gqa, src, kw))
    assert py.pop("data") == (path if isinstance(src, str) else array_name(src))
    ref.pop("data")
    for k in TIMINGS:
        py.pop(k, None)
        ref.pop(k, None)
    same_bits(py, ref)


def cli_line(p):
    """The CLI's error line, as Python words it: without "headprune: ", an option's own refusal with the keyword
    for the option."""
    assert p.returncode in (1, 2), (p.returncode, p.stdout, p.stderr)
    line = p.stderr.splitlines()[0]
    if p.returncode == 1:  # the engine's line (die)
        assert line.startswith("headprune: ") and len(p.stderr.splitlines()) == 1, p.stderr
        return line[len("headprune: "):]
    assert line.startswith("headprune eval: --"), p.stderr  # usage_error: "headprune eval: --option ..."
    opt = line.split()[2]
    return line[len("headprune "):].replace(opt, KEYWORD[opt], 1)


@pytest.mark.filterwarnings("ignore:.*looks made for another model")
@pytest.mark.parametrize("form,kw,opts,piece", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_same_error(hp, gqa, data, form, kw, opts, piece):
    src, path = data[form]
    want = cli_line(cli_eval(path, opts))
    assert piece in want
    with pytest.raises(ValueError) as ei:
        py_eval(gqa, src, kw)
    got = str(ei.value)
    if not isinstance(src, str):
        got = got.replace(array_name(src), path)
    assert got == want
    assert py_eval(gqa, IDS, {})["n_seqs"] == 3  # the model still works


@pytest.mark.filterwarnings("ignore:.*looks made for another model")
def test_issue_52_numbers(gqa):
    """The issue's numbers: the ravelled ids cut into 3 rows of 16 (loss 5.842145, as `eval --data flat.npy
    --seq-len 16`; the old code scored one 48-token row, 5.895283)."""
    r = gqa.eval(IDS.ravel(), seq_len=16, threads=1)
    assert r["n_seqs"] == 3 and r["data"] == "array (48)" and round(r["loss"], 6) == 5.842145


@pytest.mark.filterwarnings("ignore:.*looks made for another model")
def test_circuit_file_list_and_cli(gqa, tmp_path):
    """A circuit as a file (Python and CLI) and as a list of lines: the same bits; a file of every edge is the
    unmasked model, an empty one every edge patched; a line it cannot read names the file and the line."""
    lines = ["# kept", "0.1>1.0", "", "mlp:0>logits  # and this"]
    f = tmp_path / "circuit.txt"
    f.write_text("\n".join(lines) + "\n")
    p = cli_eval(str(MODEL / "data.npy"), ["--circuit", str(f)])
    assert p.returncode == 0, p.stderr
    ref = json.loads(p.stdout)
    by_path = dict(py_eval(gqa, str(MODEL / "data.npy"), {"circuit": f}))
    by_list = dict(py_eval(gqa, str(MODEL / "data.npy"), {"circuit": lines}))
    for d in (ref, by_path, by_list):
        for k in TIMINGS | {"circuit"}:
            d.pop(k, None)
    same_bits(by_path, ref)
    same_bits(by_list, ref)
    edges = dict(py_eval(gqa, IDS, {"edges": "*>*"}))
    assert ref["n_edges"] == edges["n_edges"] - 4 > 0  # 0.1>1.0:q,k,v and mlp:0>logits kept
    full = py_eval(gqa, IDS, {"circuit": ["*>*"]})
    assert full["n_edges"] == 0 and full["kl"] == 0 and full["loss"] == py_eval(gqa, IDS, {})["loss"]
    empty = py_eval(gqa, IDS, {"circuit": []})
    assert empty["n_edges"] == edges["n_edges"] and empty["loss"] == edges["loss"]
    bad = tmp_path / "bad.txt"
    bad.write_text("0.1>1.0:q\n0.1>1.0:x\n")
    p = cli_eval(str(MODEL / "data.npy"), ["--circuit", str(bad)])
    assert p.returncode == 1 and p.stderr.startswith(f"headprune: {bad}:2: ") and len(p.stderr.splitlines()) == 1
    with pytest.raises(ValueError, match=r"^circuit:2: "):
        py_eval(gqa, IDS, {"circuit": ["0.1>1.0:q", "0.1>1.0:x"]})
    with pytest.raises(ValueError, match="each edge is a string"):
        py_eval(gqa, IDS, {"circuit": [3]})
