"""Database query methods against `headprune query KIND --format json` on the same database (the CLI wrote it)."""
import json
import sqlite3

import numpy as np
import pandas as pd
import pytest

from conftest import cli, cli_error

# Each answerable kind with options: (python kwargs, CLI args).
CASES = [
    ("sweeps", {}, []),
    ("curve", {}, []),
    ("curve", {"study": "random"}, ["--study", "random"]),
    ("curve", {"full_mask": True}, ["--full-mask"]),
    ("heads", {}, []),
    ("heads", {"top": 3}, ["--top", "3"]),
    ("heads", {"sweep": 1}, ["--sweep", "1"]),
    ("heads", {"metric": "acc"}, ["--metric", "acc"]),
    ("sets", {}, []),
    ("sets", {"study": "explicit"}, ["--study", "explicit"]),
    ("compare", {"sweep": 1}, ["--sweep", "1"]),
    ("compare", {"sweep": 1, "by": "layer"}, ["--sweep", "1", "--by", "layer"]),
    ("compare", {"sweep": 1, "top": 4}, ["--sweep", "1", "--top", "4"]),
    ("compare", {"sweep": 1, "db2": "SELF", "sweep2": 2}, ["--sweep", "1", "--db2", "SELF", "--sweep2", "2"]),
    ("redundancy", {}, []),
    ("redundancy", {"eps": 0.001}, ["--eps", "0.001"]),
    ("pairs", {}, []),
    ("pairs", {"top": 2}, ["--top", "2"]),
    ("importance", {}, []),
    ("attribution", {}, []),
    ("attribution", {"top": 5}, ["--top", "5"]),
    ("roles", {}, []),
    ("screen", {}, []),
]


def cli_query(kind, db, args, fmt="json"):
    return cli("query", kind, "--db", db, "--format", fmt, *args).stdout


def compare_frame(df, j):
    assert list(df.columns) == list(j["rows"][0].keys())
    pd.testing.assert_frame_equal(df, pd.DataFrame(j["rows"], columns=df.columns))
    assert df.attrs["summary"] == j["summary"]


def test_every_kind_is_a_method(hp):
    kinds = [k["name"] for k in hp._engine.query_kinds()]
    assert {"sweeps", "heads", "curve", "sql"} <= set(kinds)
    for k in kinds:  # a kind's name as an identifier: self-repair is db.self_repair()
        assert callable(getattr(hp.Database, k.replace("-", "_")))
    covered = {c[0] for c in CASES} | {"sql", "gates", "patching", "self-repair", "edges", "circuit"}
    # self-repair: test_self_repair.py; edges, circuit: test_circuits.py
    assert set(kinds) <= covered, set(kinds) - covered


@pytest.mark.parametrize("kind,kw,args", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_kind_equals_cli_json(hp, session_db, kind, kw, args):
    kw = {k: (str(session_db) if v == "SELF" else v) for k, v in kw.items()}
    args = [str(session_db) if a == "SELF" else a for a in args]
    db = hp.open(str(session_db))
    df = getattr(db, kind)(**kw)
    j = json.loads(cli_query(kind, session_db, args))
    assert j["rows"], "the case reads nothing: not a test"
    compare_frame(df, j)
    assert df.attrs["kind"] == kind
    table = cli_query(kind, session_db, args, fmt="table")
    if table.startswith("# "):
        assert df.attrs["note"] == table.splitlines()[0][2:]


def test_top_limits(hp, session_db):
    db = hp.open(str(session_db))
    assert len(db.heads(top=3)) == 3 and len(db.heads()) == 32
    assert list(db.heads(top=3)["label"]) == list(db.heads()["label"][:3])


@pytest.mark.parametrize("kind", ["gates", "patching"])
def test_kind_the_db_cannot_answer(hp, session_db, kind):
    with pytest.raises(hp.Error) as ei:
        getattr(hp.open(str(session_db)), kind)()
    assert str(ei.value) == cli_error("query", kind, "--db", session_db, "--format", "json")


def test_compare_same_sweep_is_an_error(hp, session_db):
    with pytest.raises(hp.Error) as ei:
        hp.open(str(session_db)).compare()
    assert "A and B are both sweep 2" in str(ei.value)
    assert str(ei.value) == cli_error("query", "compare", "--db", session_db)


def test_unknown_study_and_sweep(hp, session_db):
    db = hp.open(str(session_db))
    for kw, args in (({"study": "nope"}, ["--study", "nope"]), ({"sweep": 7}, ["--sweep", "7"])):
        with pytest.raises(hp.Error) as ei:
            db.heads(**kw)
        assert str(ei.value) == cli_error("query", "heads", "--db", session_db, *args)
    with pytest.raises(ValueError, match="positive integer"):
        db.heads(top=0)
    with pytest.raises(ValueError, match="by must be"):
        db.compare(sweep=1, by="row")


def test_heads_matrix_against_cli_matrix_text(hp, session_db):
    m = hp.open(str(session_db)).heads(matrix=True)
    text = cli_query("heads", session_db, [], fmt="matrix").splitlines()
    assert m.attrs["note"] == text[0][2:]
    header = text[1].split()
    assert list(map(str, m.columns)) == header
    rows = [list(map(float, l.split())) for l in text[3:] if l.strip()]
    cli_m = np.array(rows)
    assert cli_m.shape == m.shape == (4, 9)
    vals = m.to_numpy(dtype=float)
    assert np.array_equal(vals[:, 0], cli_m[:, 0])
    # the text has 3 significant digits
    for a, b in zip(vals[:, 1:].ravel(), cli_m[:, 1:].ravel()):
        assert float(f"{a:.3g}") == pytest.approx(b, rel=1e-12, abs=0), (a, b)


def test_pivot_one_liner(hp, session_db):
    piv = hp.open(str(session_db)).heads().pivot(index="layer", columns="unit", values="effect")
    j = json.loads(cli_query("heads", session_db, []))
    want = np.full((4, 8), np.nan)
    for r in j["rows"]:
        want[r["layer"], r["unit"]] = r["effect"]
    assert not np.isnan(want).any()
    assert list(piv.index) == [0, 1, 2, 3] and list(piv.columns) == list(range(8))
    assert np.array_equal(piv.to_numpy(), want)


def test_sql(hp, session_db):
    db = hp.open(str(session_db))
    q = "SELECT v.key, r.loss FROM results r JOIN variants v ON v.id = r.variant_id ORDER BY v.key"
    df = db.sql(q)
    j = json.loads(cli("query", "sql", "--db", session_db, "--format", "json", q).stdout)
    compare_frame(df, j)
    with sqlite3.connect(session_db) as c:
        direct = c.execute(q).fetchall()
    assert len(df) == len(direct) > 100
    assert [tuple(r) for r in df.itertuples(index=False)] == direct
    n = db.sql("SELECT count(*) AS n FROM results")
    assert list(n.columns) == ["n"] and n["n"][0] == len(direct)
    assert db.sql(query="SELECT 1 AS one")["one"].tolist() == [1]


def test_sql_errors(hp, session_db):
    db = hp.open(str(session_db))
    for q in ("SELECT * FROM no_such_table", "DELETE FROM results"):
        with pytest.raises(hp.Error) as ei:
            db.sql(q)
        assert str(ei.value) == cli_error("query", "sql", "--db", session_db, q)
    with sqlite3.connect(session_db) as c:
        assert c.execute("SELECT count(*) FROM results").fetchone()[0] > 0


def test_gradients(hp, session_db):
    g = hp.open(str(session_db)).gradients()
    assert len(g) >= 1
    with sqlite3.connect(session_db) as c:
        c.row_factory = sqlite3.Row
        direct = {r["id"]: r for r in c.execute("SELECT * FROM gradients")}
    for _, row in g.iterrows():
        nl, nh, ns = row["n_layers"], row["n_heads"], row["n_seqs"]
        assert (nl, nh, ns) == (4, 8, 8)
        d = direct[row["id"]]
        for col, shape in (("grad", (nl, nh)), ("atp", (nl, nh)), ("seq_grad", (ns, nl, nh))):
            want = np.frombuffer(d[col], dtype="<f8").reshape(shape)
            assert row[col].dtype == np.float64 and np.array_equal(row[col], want)
        assert np.abs(row["grad"]).max() > 0
        s = row["seq_grad"]
        assert np.allclose(s.sum(axis=0), row["grad"], rtol=1e-12, atol=0) or \
            np.allclose(s.mean(axis=0), row["grad"], rtol=1e-12, atol=0)
        assert row["loss"] == d["loss"] and row["ablation"] == d["ablation"]


def test_gradients_seq_grad_is_a_mean_or_sum_consistently(hp, session_db):
    """grad is the gradient of the mean loss: seq_grad's rows average to it (the brief asked whether they sum:
    this pins which one)."""
    g = hp.open(str(session_db)).gradients().iloc[0]
    summed = np.allclose(g["seq_grad"].sum(axis=0), g["grad"], rtol=1e-12, atol=0)
    meaned = np.allclose(g["seq_grad"].mean(axis=0), g["grad"], rtol=1e-12, atol=0)
    assert summed != meaned
