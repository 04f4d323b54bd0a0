"""Model.eval against `headprune eval --json` on the same inputs: bit for bit, every field but the timings."""
import numpy as np
import pytest

from conftest import DEFAULT, FIXTURES, cli, cli_json

TIMINGS = {"seconds", "grad_seconds"}
HELDOUT = str(DEFAULT / "heldout.npy")


def assert_same(py, ref, path="", skip=()):
    """py (the package's value: dicts, numpy arrays, scalars) equals ref (the CLI's parsed JSON) exactly."""
    if isinstance(ref, dict):
        assert isinstance(py, dict), path
        want = {k for k in ref if k not in skip}
        got = {k for k in py if k not in skip}
        assert got == want, (path, got ^ want)
        for k in want:
            assert_same(py[k], ref[k], f"{path}.{k}")
    elif isinstance(py, np.ndarray):
        r = np.asarray(ref, dtype=py.dtype)
        assert py.shape == r.shape, path
        assert np.array_equal(py, r), path
        # bit for bit, not merely ==: -0.0 and 0.0 differ
        assert py.tobytes() == r.tobytes(), path
    else:
        assert type(py) is type(ref), (path, type(py), type(ref))
        assert py == ref, (path, py, ref)


def cli_eval(model, data, *opts):
    return cli_json("eval", "--model", model, "--data", data, "--threads", "1", "--quiet", "--json", *opts)


def check(model_obj, model_dir, data, cli_opts, skip=TIMINGS, **kw):
    py = model_obj.eval(data, threads=1, **kw)
    ref = cli_eval(model_dir, data, *cli_opts)
    assert_same(py, ref, skip=skip)
    return py, ref


@pytest.mark.parametrize("cli_opts,kw", [
    ([], {}),
    (["--mask", "0.1,2.3"], {"mask": "0.1,2.3"}),
    (["--keep", "0.1,3.*"], {"keep": "0.1,3.*"}),
    (["--grad"], {"grad": True}),
    (["--mask", "0.5", "--grad"], {"mask": "0.5", "grad": True}),
    (["--ablation", "mean", "--mask", "1.*"], {"ablation": "mean", "mask": "1.*"}),
    (["--mask", "3.1", "--grad-metric", "kl"], {"mask": "3.1", "metric": "kl"}),
], ids=["plain", "mask", "keep", "grad", "mask-grad", "mean", "kl"])
def test_default_model(model, cli_opts, kw):
    py, ref = check(model, str(DEFAULT), HELDOUT, cli_opts, **kw)
    assert py["n_seqs"] == 32 and isinstance(py["per_seq"]["loss"], np.ndarray)
    if kw.get("grad") or kw.get("metric"):
        assert py["grad"].shape == (4, 8) and py["atp"].shape == (4, 8)


def test_mask_changes_the_result(model):
    """The cases above are not vacuous: a mask moves the loss."""
    a, b = model.eval(HELDOUT, threads=1), model.eval(HELDOUT, mask="0.1", threads=1)
    assert b["loss"] > a["loss"] + 0.1


def test_llama_gqa(hp):
    d = FIXTURES / "llama-gqa"
    m = hp.Model(str(d))
    data = str(d / "data.npy")
    with pytest.warns(UserWarning):  # the fixture's ids are random: the engine says so
        check(m, str(d), data, [])
    with pytest.warns(UserWarning):
        check(m, str(d), data, ["--mask", "kv:0.0,1.1", "--grad"], mask="kv:0.0,1.1", grad=True)


def test_array_equals_path(model):
    ids = np.load(HELDOUT)
    by_path = model.eval(HELDOUT, mask="0.1,2.3", grad=True, threads=1)
    ref = cli_eval(str(DEFAULT), HELDOUT, "--mask", "0.1,2.3", "--grad")
    by_array = model.eval(ids, mask="0.1,2.3", grad=True, threads=1)
    assert by_array["data"] == "array (32 x 128)" and by_path["data"] == HELDOUT
    assert_same(by_array, ref, skip=TIMINGS | {"data"})
    assert_same(by_path, ref, skip=TIMINGS)


def test_array_forms_equal_path():
    """int64, Fortran-ordered and list data are converted to the same int32 ids."""
    ids = np.load(HELDOUT)[:4]
    import tempfile, os
    with tempfile.TemporaryDirectory() as t:
        f = os.path.join(t, "four.npy")
        np.save(f, ids)
        ref = cli_eval(str(DEFAULT), f, "--mask", "0.1")
    import headprune as hp
    m = hp.Model(str(DEFAULT))
    for arr in (ids, ids.astype(np.int64), np.asfortranarray(ids), ids.tolist(), ids.astype(np.uint16)):
        assert_same(m.eval(arr, mask="0.1", threads=1), ref, skip=TIMINGS | {"data"})


def test_one_row_as_1d(model):
    """A 1-D array is a token stream, as a 1-D .npy file is: with seq_len its length, one row."""
    ids = np.load(HELDOUT)
    a = model.eval(ids[3], mask="0.1", threads=1, seq_len=128)
    b = model.eval(ids[3:4], mask="0.1", threads=1)
    assert_same(a, dict(b), skip=TIMINGS | {"data"})
    assert a["n_seqs"] == 1 and a["data"] == "array (128)" and b["data"] == "array (1 x 128)"


@pytest.mark.parametrize("form", [
    [(0, 1), (2, 3)],
    [(np.int64(0), np.int32(1)), [2, 3]],
    ["0.1", "2.3"],
    ("0.1", "2.3"),
    "bool",
], ids=["tuples", "np-ints", "strings", "tuple-of-strings", "bool-array"])
def test_mask_forms(model, form):
    if form == "bool":
        form = np.zeros((4, 8), dtype=bool)
        form[0, 1] = form[2, 3] = True
    ref = cli_eval(str(DEFAULT), HELDOUT, "--mask", "0.1,2.3")
    py = model.eval(HELDOUT, mask=form, threads=1)
    assert_same(py, ref, skip=TIMINGS)


def test_keep_forms(model):
    ref = cli_eval(str(DEFAULT), HELDOUT, "--keep", "0.1,3.1")
    keep = np.zeros((4, 8), dtype=bool)
    keep[0, 1] = keep[3, 1] = True
    for form in ([(0, 1), (3, 1)], keep, ["0.1", "3.1"]):
        assert_same(model.eval(HELDOUT, keep=form, threads=1), ref, skip=TIMINGS)


def test_task_logit_diff(hp):
    d = FIXTURES / "gpt2-vocab"
    task = str(d / "task.jsonl")
    m = hp.Model(str(d))
    py, ref = check(m, str(d), task, ["--grad-metric", "logit_diff", "--mask", "0.0"], mask="0.0",
                    metric="logit_diff")
    assert "logit_diff" in py and py["grad"].shape == m.shape[:2]


def test_progress_callable(model):
    """The docstring: "progress: None, or a callable taking (done, total) sequences"."""
    seen = []
    model.eval(HELDOUT, mask="0.1", threads=1, progress=lambda done, total: seen.append((done, total)))
    assert seen and all(0 <= d <= t for d, t in seen) and seen[-1] == (32, 32)


def test_progress_exception_propagates(model):
    class Stop(Exception):
        pass

    def cb(*a):
        raise Stop("from the callback")
    with pytest.raises(Stop, match="from the callback"):
        model.eval(HELDOUT, threads=1, progress=cb)
    assert model.eval(np.load(HELDOUT)[:1], threads=1)["n_seqs"] == 1  # the model still works


def test_foreign_data_warning_matches_cli(hp):
    """The warning for data made for another model says what the CLI's warning says."""
    d = FIXTURES / "llama-gqa"
    data = str(d / "data.npy")
    p = cli("eval", "--model", d, "--data", data, "--threads", "1", "--json")
    line = [l for l in p.stderr.splitlines() if "looks made for another model" in l][0]
    assert line.startswith("headprune: warning: ")
    with pytest.warns(UserWarning) as w:
        hp.Model(str(d)).eval(data, threads=1)
    msgs = [str(x.message) for x in w if "looks made for another model" in str(x.message)]
    assert msgs == [line[len("headprune: warning: "):]]


def test_shape_and_info(model):
    assert model.info == cli_json("inspect", "--model", str(DEFAULT), "--json")
    assert model.shape == (4, 8, 8)
