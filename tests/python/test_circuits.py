"""The `edges` and `circuit` studies, `query edges`, `query circuit` and `headprune circuit` (docs/edges.md),
each number against `eval --edges` / `eval --circuit`, a second path: a study's edge effects are eval's with that
edge patched, a circuit's metric is eval's with the circuit file `headprune circuit` writes, and faithfulness,
CPR and CMD are recomputed here from the rows by their formulas."""
import math

import numpy as np
import pytest

from conftest import DEFAULT, FIXTURES, cli, cli_error, cli_json, small_data, write_plan

GQA = FIXTURES / "llama-gqa"
SIZES = [0.01, 0.05, 0.1, 0.2, 0.5]


def query(db, kind, *opts):
    return cli_json("query", kind, "--db", db, "--format", "json", *opts)


def ev(model, data, *opts):
    return cli_json("eval", "--model", model, "--data", data, "--json", "--threads", "1", "--quiet", *opts)


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    d = tmp_path_factory.mktemp("circuits")
    data = small_data(d / "d.npy", rows=4, tokens=32)
    edges = write_plan(d / "e.yaml", "e", data, ["baseline", 'edges: {from: "0.*", to: "3.*"}'])
    circuit = write_plan(d / "c.yaml", "c", GQA / "data.npy", ["baseline", f"circuit: {{sizes: {SIZES}}}"],
                         model=GQA)
    for plan, db in ((edges, d / "e.db"), (circuit, d / "c.db")):
        cli("run", plan, "--db", db, "--threads", "1", "--quiet")
    return d, data


def test_each_edge_is_eval_with_that_edge_patched(sweeps):
    d, data = sweeps
    rows = query(d / "e.db", "edges")["rows"]
    base = ev(DEFAULT, data)
    assert len(rows) == ev(DEFAULT, data, "--edges", "0.*>3.*")["n_edges"] == 8 * 8 * 3  # heads of 0 into 3's q, k, v
    sizes = [abs(r["effect"]) for r in rows]
    assert sizes == sorted(sizes, reverse=True), "the largest |effect| first"
    for r in rows[:6] + rows[-3:]:
        e = ev(DEFAULT, data, "--edges", r["edge"])
        assert e["n_edges"] == 1 and r["edge"] == f"{r['sender']}>{r['receiver']}"
        assert r["effect"] == pytest.approx(e["loss"] - base["loss"], abs=1e-6), r["edge"]
    assert max(sizes) > 1e-4, "no edge changes the loss: not a test"


def test_circuits_are_eval_of_the_file_headprune_circuit_writes(sweeps, tmp_path):
    d, _ = sweeps
    db = d / "c.db"
    table = query(db, "circuit")
    rows, area = table["rows"], table["summary"][0]
    n = rows[-1]["edges"]
    assert n == ev(GQA, GQA / "data.npy", "--edges", "*>*")["n_edges"] == 262
    want_k = sorted({0, n, *(min(n, max(1, math.ceil(f * n))) for f in SIZES)})
    assert [r["edges"] for r in rows] == want_k
    m0, m1 = rows[0]["loss"], rows[-1]["loss"]
    assert m1 == ev(GQA, GQA / "data.npy")["loss"], "the whole graph kept is the unmasked model"
    assert m0 == pytest.approx(ev(GQA, GQA / "data.npy", "--edges", "*>*")["loss"], abs=1e-6), "the empty circuit"
    for r in rows:
        f = tmp_path / f"c{r['edges']}.txt"
        f.write_text(cli("circuit", "--db", db, "--size", r["edges"]).stdout)
        lines = [x for x in f.read_text().splitlines() if x and not x.startswith("#")]
        assert len(lines) == r["edges"]
        e = ev(GQA, GQA / "data.npy", "--circuit", f)
        assert e["n_edges"] == n - r["edges"]
        assert r["loss"] == pytest.approx(e["loss"], abs=1e-6), r["circuit"]
        assert r["faithfulness"] == pytest.approx((r["loss"] - m0) / (m1 - m0), rel=1e-9, abs=1e-12)
    x = np.array([r["edges"] / n for r in rows])
    fx = np.array([(r["loss"] - m0) / (m1 - m0) for r in rows])
    def trapezoids(y):
        return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))
    assert area["faithfulness"] == pytest.approx(trapezoids(fx), rel=1e-9), "CPR"
    assert area["abs_1_minus_f"] == pytest.approx(trapezoids(np.abs(1 - fx)), rel=1e-9), "CMD"
    ranked = query(db, "edges", "--study", "circuit")["rows"]
    assert [r["edge"] for r in ranked[:3]] == [x for x in (tmp_path / "c3.txt").read_text().splitlines()
                                               if not x.startswith("#")]


def test_refused_in_one_line(sweeps, tmp_path):
    d, data = sweeps
    for studies, piece in ((['edges: {from: "9.*"}'], "layer 9 does not exist"),
                           (['edges: {to: "0.1>2.0"}'], "is one pattern"),
                           (["circuit: {sizes: [0]}"], "sizes"),
                           (["circuit: {sizes: [1.5]}"], "in (0, 1]"),
                           (['circuit: {from: "3.*", to: "0.*"}'], "names no edge")):
        plan = write_plan(tmp_path / "bad.yaml", "bad", data, ["baseline", *studies])
        line = cli_error("plan", plan)
        assert piece in line and str(plan) in line, line
    assert "ranked 262 edges" in cli_error("circuit", "--db", d / "c.db", "--size", "999")
    assert "edges" in cli_error("query", "edges", "--db", d / "e.db", "--study", "nope")


def test_python_methods_are_the_queries(hp, sweeps):
    d, _ = sweeps
    db = hp.open(str(d / "c.db"))
    for kind, df, kw in (("circuit", db.circuit(), {}), ("edges", db.edges(study="circuit"), {"study": "circuit"})):
        j = query(d / "c.db", kind, *(["--study", kw["study"]] if kw else []))
        assert list(df.columns) == list(j["rows"][0]) and len(df) == len(j["rows"]), kind
        assert df.attrs["summary"] == j["summary"], kind
        for (_, a), b in zip(df.iterrows(), j["rows"]):
            assert [a[c] for c in df.columns] == [b[c] for c in df.columns], kind
