"""The notebook views: _repr_html_ of results, models, databases and reports."""
import json

import numpy as np

from conftest import DEFAULT, cli


def test_dataframe_html(hp, session_db):
    df = hp.open(str(session_db)).heads(top=3)
    h = df._repr_html_()
    assert "<table" in h and df["label"].iloc[0] in h and "effect" in h


def test_eval_result_html(model):
    r = model.eval(np.load(DEFAULT / "heldout.npy")[:4], mask="0.1,2.3", threads=1)
    h = r._repr_html_()
    assert h.startswith("<p>") and "<table>" in h
    assert f"{r['loss']:.6g}" in h and f"{r['unmasked']['loss']:.6g}" in h and f"{r['change']['loss']:+.6g}" in h
    assert "0.1,2.3" in h and "2 of 32 heads ablated (zero)" in h and "4 sequences" in h


def test_eval_result_html_task(hp, repo):
    d = repo / "tests" / "fixtures" / "gpt2-vocab"
    r = hp.Model(str(d)).eval(str(d / "task.jsonl"), mask="0.0", threads=1)
    h = r._repr_html_()
    assert "logit_diff" in h and f"{r['logit_diff']:.6g}" in h


def test_model_html(model):
    h = model._repr_html_()
    info = json.loads(cli("inspect", "--model", DEFAULT, "--json").stdout)
    assert "<table>" in h and "GPT-2" in h and str(info["n_params"]) in h
    assert "842496" in repr(model) and "4 layers x 8 heads" in repr(model)


def test_database_html(hp, session_db):
    db = hp.open(str(session_db))
    h = db._repr_html_()
    assert str(session_db) in h and "<table" in h and "main" in h and "mean" in h
    assert repr(db) == f"Database({str(session_db)!r})"


def test_report_html(hp, session_db):
    rep = hp.open(str(session_db)).report()
    h = rep._repr_html_()
    assert h.count("<svg") >= len(rep.figures) >= 3
    assert all(f'title="{f.id}"' in h for f in rep.figures)
    assert "figures" in repr(rep) and repr(rep.figures[0]).startswith("Figure(")
