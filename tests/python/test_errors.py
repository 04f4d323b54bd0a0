"""Bad inputs: the right exception, the engine's one line (the very line the CLI prints, where it has the
case), and an interpreter that goes on working."""
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from conftest import DEFAULT, FIXTURES, cli_error, small_data, write_plan

HELDOUT = str(DEFAULT / "heldout.npy")


def raises_engine(hp, status, fn, *a, **kw):
    with pytest.raises(hp.Error) as ei:
        fn(*a, **kw)
    assert isinstance(ei.value, ValueError)
    assert getattr(ei.value, "status", None) == status, (str(ei.value), getattr(ei.value, "status", None))
    msg = str(ei.value)
    assert "\n" not in msg and msg
    return msg


def test_missing_model_folder(hp, tmp_path):
    d = tmp_path / "nowhere"
    msg = raises_engine(hp, "io", hp.Model, str(d))
    assert "config.json: cannot open" in msg
    assert msg == cli_error("eval", "--model", d, "--data", HELDOUT, "--quiet")


def test_corrupt_safetensors(hp, tmp_path):
    d = tmp_path / "corrupt"
    d.mkdir()
    shutil.copy(DEFAULT / "config.json", d)
    (d / "model.safetensors").write_bytes((DEFAULT / "model.safetensors").read_bytes()[:5000])
    msg = raises_engine(hp, "format", hp.Model, str(d))
    assert "runs past the end of the 5000-byte file" in msg
    assert msg == cli_error("eval", "--model", d, "--data", HELDOUT, "--quiet")


@pytest.mark.parametrize("arr,substring", [
    (np.zeros((2, 4), dtype=np.float32), "must be an integer array, not float32"),
    (np.zeros((2, 4), dtype=bool), "must be an integer array, not bool"),
    (np.zeros((2, 2, 2), dtype=np.int32), "array (2 x 2 x 2): array has shape (2, 2, 2) (expected"),
    (np.zeros((0, 5), dtype=np.int32), "array (0 x 5): array of shape (0, 5) holds no tokens"),
    (np.zeros((3, 0), dtype=np.int32), "array (3 x 0): array of shape (3, 0) holds no tokens"),
    (np.int32(7), "array (): array has shape ()"),
    (np.array([[1, 2**31 + 5]]), "token id 2147483653 is out of range"),
    (np.array([[1, -2**31 - 1]]), "token id -2147483649 is out of range"),
], ids=["float", "bool", "3d", "empty-rows", "empty-tokens", "scalar", "big", "small"])
def test_bad_arrays(model, arr, substring):
    with pytest.raises(ValueError) as ei:
        model.eval(arr, threads=1)
    assert substring in str(ei.value)
    assert model.eval(np.load(HELDOUT)[:1, :8], threads=1)["n_seqs"] == 1


@pytest.mark.parametrize("make,status,substring", [
    (lambda a: a.astype(np.float32), "unsupported", "dtype '<f4' is not supported"),
    (lambda a: np.zeros((2, 2, 2), np.int32), "shape", "array has shape (2, 2, 2)"),
    (lambda a: np.zeros((0, 5), np.int32), "format", "holds no tokens"),
    (lambda a: np.where(np.arange(a.size).reshape(a.shape) == 11, 2**31 + 5, a.astype(np.int64)), "format",
     "token 2147483653 at index 11 does not fit in int32"),
], ids=["float", "3d", "empty", "big"])
def test_bad_npy_files(hp, model, tmp_path, make, status, substring):
    f = tmp_path / "bad.npy"
    np.save(f, make(np.load(HELDOUT)[:2, :8]))
    msg = raises_engine(hp, status, model.eval, str(f), threads=1)
    assert substring in msg
    assert msg == cli_error("eval", "--model", DEFAULT, "--data", f, "--quiet")


def test_id_outside_vocabulary(hp, model, tmp_path):
    a = np.load(HELDOUT)[:2, :8].copy()
    a[1, 3] = 300
    msg = raises_engine(hp, "arg", model.eval, a, threads=1)
    assert msg == "array (2 x 8): token id 300 at row 1, position 3 is outside the vocabulary (model has 256 tokens)"
    f = tmp_path / "oov.npy"
    np.save(f, a)
    assert raises_engine(hp, "arg", model.eval, str(f), threads=1) == cli_error(
        "eval", "--model", DEFAULT, "--data", f, "--quiet")


def test_mask_head_the_model_lacks(hp, model):
    msg = raises_engine(hp, "arg", model.eval, HELDOUT, mask="9.9", threads=1)
    assert "layer 9 does not exist (model has layers 0-3)" in msg
    assert msg == cli_error("eval", "--model", DEFAULT, "--data", HELDOUT, "--mask", "9.9", "--quiet")
    assert "does not exist" in raises_engine(hp, "arg", model.eval, HELDOUT, mask=[(0, 9)], threads=1)


def test_bad_mask_forms(model):
    with pytest.raises(ValueError, match="is not a head"):
        model.eval(HELDOUT, mask=[(0, 1, 2)])
    with pytest.raises(ValueError, match="must be \\(n_layers, n_heads\\)"):
        model.eval(HELDOUT, mask=np.zeros(32, dtype=bool))


@pytest.mark.parametrize("what", ["mask", "keep"])
@pytest.mark.parametrize("grid", [np.ones((8, 4), bool), np.ones((3, 8), bool), np.ones((4, 9), bool)],
                         ids=["transposed", "fewer-layers", "more-heads"])
def test_grid_of_the_wrong_shape(model, what, grid):
    """A boolean grid not the model's (n_layers, n_heads) is refused naming both shapes. Issue 52: on
    llama-gqa (3 x 4) the transposed (4, 3) grid of head 2.0 was read as head 0.2 (loss 6.029539; 2.0 gives
    5.833427)."""
    with pytest.raises(ValueError) as ei:
        model.eval(HELDOUT, **{what: grid}, threads=1)
    assert str(ei.value) == (f"{what}: a boolean array must be (n_layers, n_heads) = (4, 8) for this model, "
                             f"not shape {grid.shape}")
    with pytest.raises(ValueError, match=r"= \(4, 8\) for this model, not shape \(2, 8\)"):
        model.eval(HELDOUT, **{what: [[True] + [False] * 7, [False] * 8]}, threads=1)  # a nested list too


def test_transposed_grid_issue_52(hp):
    """The issue's case, literally: llama-gqa (3 layers x 4 heads), grid.T of a grid marking head 2.0."""
    d = FIXTURES / "llama-gqa"
    grid = np.zeros((3, 4), dtype=bool)
    grid[2, 0] = True
    with pytest.raises(ValueError, match=r"^mask: a boolean array must be \(n_layers, n_heads\) = \(3, 4\) for this "
                                         r"model, not shape \(4, 3\)$"):
        hp.Model(str(d)).eval(np.load(d / "data.npy"), mask=grid.T, threads=1)


def test_mask_and_keep(model):
    with pytest.raises(ValueError, match="not both"):
        model.eval(HELDOUT, mask="0.1", keep="0.2")


def test_unknown_ablation(hp, model):
    """The package's docs: every engine error is a headprune.Error whose .status names the kind."""
    msg = raises_engine(hp, "arg", model.eval, HELDOUT, ablation="bogus", threads=1)
    assert msg == "eval: ablation must be zero, mean, mean-pos, resample or denoise"  # as the CLI's --ablation


def test_unknown_metric(hp, model):
    msg = raises_engine(hp, "arg", model.eval, HELDOUT, metric="bogus", threads=1)
    assert "must be loss, kl, cos or logit_diff (the metrics with a gradient)" in msg


def test_not_a_headprune_database(hp, tmp_path):
    db = tmp_path / "other.db"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE t(x)")
    c.commit()
    c.close()
    msg = raises_engine(hp, "format", hp.open, str(db))
    assert "not a headprune database" in msg
    assert msg == cli_error("query", "sweeps", "--db", db)


def test_text_file_as_database(hp, tmp_path):
    db = tmp_path / "text.db"
    db.write_text("hello, not sqlite\n" * 100)
    with pytest.raises(hp.Error) as ei:
        hp.open(str(db))
    assert str(ei.value) == cli_error("query", "sweeps", "--db", db)


def test_newer_schema(hp, session_db, tmp_path):
    db = tmp_path / "newer.db"
    shutil.copy(session_db, db)
    c = sqlite3.connect(db)
    assert c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0].isdigit()
    c.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    c.commit()
    c.close()
    msg = raises_engine(hp, "unsupported", hp.open, str(db))
    assert "written by a newer headprune (schema 99" in msg
    assert msg == cli_error("query", "sweeps", "--db", db)
    with pytest.raises(hp.Error) as ei:
        db_obj = object.__new__(hp.Database)
        db_obj.path = str(db)
        db_obj.report()
    assert str(ei.value) == cli_error("report", "--db", db, "--out", tmp_path / "r.html")


def test_missing_database(hp, tmp_path):
    """hp.open of a path that is not there: the engine's line, as the CLI prints it, with a status."""
    db = tmp_path / "missing.db"
    msg = raises_engine(hp, "io", hp.open, str(db))
    assert msg == cli_error("query", "sweeps", "--db", db)
    assert not db.exists()


def test_malformed_plan(hp, tmp_path):
    plan = tmp_path / "bad.yaml"
    plan.write_text("name: x\nstudies: [[\n")
    db = tmp_path / "x.db"
    msg = raises_engine(hp, "plan", hp.run, str(plan), str(db), progress=False, threads=1)
    assert "YAML syntax error" in msg
    assert msg == cli_error("run", plan, "--db", db, "--quiet")


def test_plan_with_unknown_study(hp, tmp_path):
    data = small_data(tmp_path / "d.npy", rows=2, tokens=8)
    plan = write_plan(tmp_path / "p.yaml", "p", data, ["baseline", "bogus-study"])
    db = tmp_path / "x.db"
    msg = raises_engine(hp, "plan", hp.run, str(plan), str(db), progress=False, threads=1)
    assert msg == cli_error("run", plan, "--db", db, "--quiet")


def test_bad_shard(hp, tmp_path):
    with pytest.raises(ValueError, match="shard"):
        hp.run(str(tmp_path / "p.yaml"), str(tmp_path / "x.db"), shard=(3, 2))


def test_errors_never_crash_the_interpreter(tmp_path):
    """Every bad case above in one child process: it ends normally, having caught each."""
    code = f"""
import numpy as np, headprune as hp
m = hp.Model({str(DEFAULT)!r})
bad = [lambda: m.eval(np.zeros((2, 2, 2), np.int32)), lambda: m.eval(np.array([[1, 999]])),
       lambda: m.eval({HELDOUT!r}, mask="9.9"), lambda: m.eval({HELDOUT!r}, ablation="x"),
       lambda: m.eval(np.zeros((2, 2), np.float64)), lambda: hp.Model("/nonexistent/x"),
       lambda: hp.open({str(tmp_path / "none.db")!r}), lambda: m.decode([99999]),
       lambda: m.tokenize("x")]
n = 0
for f in bad:
    try:
        f()
    except ValueError:
        n += 1
print("caught", n, m.eval(np.array([[1, 2, 3]]), threads=1)["n_seqs"])
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["caught", "9", "1"], (p.stdout, p.stderr)


def test_nested_bool_list_is_a_grid_not_pairs(hp, model):
    """A nested list of booleans is a (layers, heads) grid, True where ablated: read as (layer, head)
    pairs, [[True, False], ...] named head 1.0 (the review found it); pairs of booleans are refused."""
    grid = [[False] * 8 for _ in range(4)]
    grid[0][1] = grid[3][1] = True
    data = np.load(HELDOUT)[:4, :32]
    assert model.eval(data, mask=grid, threads=1)["mask"] == "0.1,3.1"
    assert model.eval(data, mask=np.argwhere(np.array(grid)), threads=1)["mask"] == "0.1,3.1"
    with pytest.raises(ValueError, match="is not a head"):
        model.eval(data, mask=[(True, 0)])


def test_progress_callable_calling_the_engine(hp, tmp_path):
    """A progress callable that calls the engine again is a RuntimeError, not a deadlock; so is closing the
    model it is evaluating; the model works afterwards."""
    m = hp.Model(DEFAULT)
    data = np.load(HELDOUT)[:8, :64]

    def again(done, total):
        m.eval(data, threads=1)

    with pytest.raises(RuntimeError, match="already computing in this thread"):
        m.eval(data, threads=1, progress=again)

    def close(done, total):
        m.close()

    with pytest.raises(RuntimeError, match="in use by an evaluation"):
        m.eval(data, threads=1, progress=close)
    plan = write_plan(tmp_path / "p.yaml", "p", small_data(tmp_path / "d.npy", 4, 32), ["baseline", "single"])
    with pytest.raises(RuntimeError, match="already computing in this thread"):
        hp.run(plan, tmp_path / "p.db", threads=1, progress=lambda p: m.eval(data, threads=1))
    assert m.eval(data, threads=1)["loss"] == hp.Model(DEFAULT).eval(data, threads=1)["loss"]
