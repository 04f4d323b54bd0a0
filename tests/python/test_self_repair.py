"""The `direct` study and `query self-repair` (docs/edges.md) on the default model (a trained GPT-2 shape).

Each unit's total effect is its `single` effect (the same variant), its direct effect is `eval --edges
UNIT>logits`'s change of the loss, compensation = direct - total, and each interval is the paired t interval of
the per-sequence values `eval --json` gives: everything the query prints is checked against eval, a second path.
"""
import numpy as np
import pytest

from conftest import DEFAULT, FIXTURES, cli, cli_error, cli_json, small_data, write_plan

UNITS = ["direct: {layers: [0, 3]}", "single: {layers: [0, 3]}", "direct: {units: mlp, name: direct-mlp}"]
T975_5 = 2.5705818366147395  # Student's t, 97.5th percentile, 5 degrees of freedom (6 sequences)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    d = tmp_path_factory.mktemp("self-repair")
    data = small_data(d / "d.npy", rows=6, tokens=32)
    plan = write_plan(d / "p.yaml", "p", data, ["baseline", *UNITS])
    db = d / "r.db"
    cli("run", plan, "--db", db, "--threads", "1", "--quiet")
    return db, data


def query(db, kind, *opts):
    return cli_json("query", kind, "--db", db, "--format", "json", *opts)


def ev(data, *opts):
    return cli_json("eval", "--model", DEFAULT, "--data", data, "--json", "--threads", "1", "--quiet", *opts)


def check_interval(lo, hi, xs):
    """lo..hi is the 95% t interval of the mean of xs."""
    xs = np.asarray(xs, dtype=float)
    mid, half = xs.mean(), T975_5 * xs.std(ddof=1) / np.sqrt(len(xs))
    assert (lo + hi) / 2 == pytest.approx(mid, abs=1e-6) and (hi - lo) / 2 == pytest.approx(half, rel=1e-5, abs=1e-9)


def check_study(db, data, study, label_of):
    """Every row of `query self-repair --study study` against eval (label_of: the row's unit -> its mask item)."""
    got = query(db, "self-repair", "--study", study)["rows"]
    assert got, "no rows: not a test"
    base = ev(data)
    b_seq = np.array(base["per_seq"]["loss"])
    comps = [r["compensation"] for r in got]
    assert comps == sorted(comps, reverse=True), "largest compensation first"
    for r in got:
        unit = r["unit"]
        tot = ev(data, "--mask", label_of(unit))
        dire = ev(data, "--edges", f"{label_of(unit)}>logits")
        assert dire["n_edges"] >= 1 and tot["n_edges"] == 0
        assert r["total"] == pytest.approx(tot["loss"] - base["loss"], abs=1e-6), unit
        assert r["direct"] == pytest.approx(dire["loss"] - base["loss"], abs=1e-6), unit
        assert r["compensation"] == pytest.approx(r["direct"] - r["total"], abs=1e-12), unit
        t_s = np.array(tot["per_seq"]["loss"]) - b_seq
        d_s = np.array(dire["per_seq"]["loss"]) - b_seq
        assert r["seqs"] == len(b_seq) == 6
        check_interval(r["total_lo"], r["total_hi"], t_s)
        check_interval(r["direct_lo"], r["direct_hi"], d_s)
        check_interval(r["ci_lo"], r["ci_hi"], d_s - t_s)
    return got


def test_heads_total_is_single_and_direct_is_the_edge_to_the_logits(sweep):
    db, data = sweep
    got = check_study(db, data, "direct", lambda u: u)
    single = {r["label"]: r["effect"] for r in query(db, "heads", "--study", "single")["rows"]}
    assert {r["unit"] for r in got} == set(single) and len(got) == 2 * 8  # layers 0 and 3, 8 heads each
    for r in got:
        assert r["total"] == single[r["unit"]], "the total effect is the single study's variant, bit for bit"
    assert max(abs(r["compensation"]) for r in got) > 1e-3, "no head's direct effect differs from its total one"


def test_mlps(sweep):
    db, data = sweep
    got = check_study(db, data, "direct-mlp", lambda u: u)
    assert [r["unit"] for r in sorted(got, key=lambda r: r["layer"])] == [f"mlp:{l}" for l in range(4)]


def test_python_method_is_the_query(hp, sweep):
    db, _ = sweep
    df = hp.open(str(db)).self_repair(study="direct")
    j = query(db, "self-repair", "--study", "direct")
    assert list(df.columns) == list(j["rows"][0]) and len(df) == len(j["rows"])
    for (_, a), b in zip(df.iterrows(), j["rows"]):
        assert a["unit"] == b["unit"] and a["compensation"] == b["compensation"]


def test_refused_in_one_line(tmp_path, sweep):
    db, data = sweep
    plain = tmp_path / "plain.db"
    cli("run", write_plan(tmp_path / "s.yaml", "s", data, ["baseline", "single: {layers: [0]}"]), "--db", plain,
        "--threads", "1", "--quiet")
    assert "direct" in cli_error("query", "self-repair", "--db", plain)
    bert = FIXTURES / "bert-mlm"
    plan = write_plan(tmp_path / "b.yaml", "b", bert / "data.jsonl", ["baseline", "direct: {layers: [0]}"],
                      model=bert)
    assert "post-norm" in cli_error("run", plan, "--db", tmp_path / "b.db", "--quiet")
