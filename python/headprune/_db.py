"""headprune.open: a results database, each query kind a method that returns a pandas DataFrame.

The methods are made from the engine's table of query kinds (hp_query_kinds, engine/query/query.c): each kind
the command line has is a method here, with the options its row takes, and its help as the docstring.
Nothing here names a kind, so a new kind is a method without a line of Python."""
import html
import inspect
import json
import os

import numpy as np
import pandas as pd

from . import _engine
from ._report import Report


def _frame(text, columns, note, kind):
    """A query's JSON (hp_table_json) as a DataFrame of its rows, with its columns in order; the summary
    rows (rank correlations, means over every unit) as records in .attrs["summary"], the note in
    .attrs["note"]."""
    t = json.loads(text)
    df = pd.DataFrame(t["rows"], columns=columns)
    df.attrs = {"kind": kind, "note": note, "summary": t["summary"]}
    return df


# Options every kind accepts (the engine's comment on HP_QUERY_TAKES_*), then those its row must take.
_COMMON = [("sweep", None, "the sweep's id (None: the newest; db.sweeps() lists them)"),
           ("metric", None, "the metric effects are read on (None: the sweep's)"),
           ("eps", 0.01, "redundancy: a unit whose effect is below eps counts as redundant"),
           ("full_mask", False, "curve: each iterative step's whole mask too (column \"mask\")"),
           ("timeout", None, "seconds before reading stops with an error (None: 600)")]
_TAKES = {"study": [("study", None, "the study to read (None: as the kind says)")],
          "top": [("top", None, "at most this many rows (None: all)")],
          "matrix": [("matrix", False, "one row per layer, one column per unit")],
          "gates": [("gates", False, "a gates study's test-time gates at each lambda instead of the effects")],
          "b": [("db2", None, "the second sweep's database (None: this one)"),
                ("sweep2", None, "the second sweep (None: the newest of its database)"),
                ("study2", None, "the second sweep's study (None: study)"),
                ("by", "head", "\"head\": a row per unit; \"layer\": a row per layer")]}


def _engine_args(kind, kw):
    """The keyword arguments of _engine.query for a method's arguments."""
    a = {"kind": kind}
    for name in ("metric", "study", "db2", "study2"):
        if kw.get(name) is not None:
            a[name] = os.fspath(kw[name]) if name == "db2" else kw[name]
    for name in ("sweep", "sweep2", "top"):
        if kw.get(name) is not None:
            v = kw[name]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{kind}: {name} must be a positive integer, not {v!r}")
            a[name] = int(v)
    for name in ("full_mask", "matrix", "gates"):
        if kw.get(name):
            a[name] = True
    if "eps" in kw:
        a["eps"] = float(kw["eps"])
    if kw.get("timeout") is not None:
        a["timeout"] = float(kw["timeout"])
    if "by" in kw:
        if kw["by"] not in ("head", "unit", "layer"):
            raise ValueError(f"{kind}: by must be \"head\" or \"layer\", not {kw['by']!r}")
        a["by_layer"] = kw["by"] == "layer"
    return a


def _method(row):
    """The Database method of one kind's row."""
    kind = row["name"]
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    lines = []
    if row["sql"]:
        params.append(inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD))
        lines.append("query: one read-only SQL statement")
    opts = [o for t, os_ in _TAKES.items() if row[t] for o in os_] + _COMMON
    for name, default, text in opts:
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
        lines.append(f"{name}: {text}")
    names = [p.name for p in params[1:]]

    def method(self, *args, **kw):
        bound = sig.bind(self, *args, **kw)
        bound.apply_defaults()
        given = {n: bound.arguments[n] for n in names}
        a = _engine_args(kind, given)
        if row["sql"]:
            a["sql"] = given["query"]
        return _frame(*_engine.query(self.path, **a), kind)

    sig = inspect.Signature(params)
    method.__signature__ = sig
    method.__name__ = method.__qualname__ = kind.replace("-", "_")
    method.__doc__ = (row["help"].replace("\n", " ") + "\n\nReturns a DataFrame with the columns of `headprune "
                      f"query {kind} --format json` (summary rows in .attrs[\"summary\"]).\n\n"
                      + "\n".join(lines))
    return method


class Database:
    """A headprune results database, read-only. Each query kind of `headprune query` is a method returning
    a pandas DataFrame with the columns of its --format json, numbers in full precision: db.sweeps(),
    db.heads(study=None, sweep=None), db.curve(), db.redundancy(), db.pairs(), db.roles(),
    db.importance(), db.attribution(), db.self_repair(), db.compare(...), db.sql(query), ... (dir(db) lists
    them).
    db.gradients() decodes the stored gradient arrays; db.report() draws the report's figures."""

    def __init__(self, path, timeout=None):
        self.path = os.fspath(path)
        self.sweeps(timeout=timeout)  # a file that is not a headprune database, or a newer one, says so now

    def gradients(self, sweep=None):
        """The gradient passes the gradient studies of a sweep (None: the newest) used, one row each:
        ablation, mask_text (the heads at gate 0), n_seqs, loss, and the arrays grad and atp
        (n_layers, n_heads) and seq_grad (n_seqs, n_layers, n_heads) decoded to numpy float64; where the
        pass also took the MLP blocks' gates (a study with units: mlp), mlp_grad and mlp_atp (n_layers) and
        mlp_seq_grad (n_seqs, n_layers), else None."""
        sweep_id = int(sweep) if sweep is not None else int(self.sweeps()["id"].max())
        q = ("SELECT g.id, g.ablation, g.mask_text, g.n_layers, g.n_heads, g.n_seqs, g.loss, hex(g.grad) AS grad, "
             "hex(g.atp) AS atp, hex(g.seq_grad) AS seq_grad FROM gradients g WHERE g.id IN "
             f"(SELECT gradient_id FROM unit_scores WHERE sweep_id = {sweep_id}) ORDER BY g.id")
        df = self.sql(q)

        def arr(h, shape, mlp_shape):
            """The heads' part of a blob, and the MLPs' after it where the row has one (else None)."""
            a = np.frombuffer(bytes.fromhex(h), dtype="<f8")
            n, m = int(np.prod(shape)), int(np.prod(mlp_shape))
            if a.size not in (n, n + m):
                raise _engine.Error(f"{self.path}: gradient blob of {a.size} numbers, not {shape}")
            return a[:n].reshape(shape), (a[n:].reshape(mlp_shape) if a.size > n else None)

        for col in ("grad", "atp"):
            parts = [arr(h, (nl, nh), (nl,)) for h, nl, nh in zip(df[col], df["n_layers"], df["n_heads"])]
            df[col] = [p[0] for p in parts]
            df["mlp_" + col] = [p[1] for p in parts]
        parts = [arr(h, (ns, nl, nh), (ns, nl)) for h, ns, nl, nh in
                 zip(df["seq_grad"], df["n_seqs"], df["n_layers"], df["n_heads"])]
        df["seq_grad"] = [p[0] for p in parts]
        df["mlp_seq_grad"] = [p[1] for p in parts]
        return df

    def report(self, sweep=None, scale="log", eps=0.01, timeout=None):
        """The sweep's report (None: the newest), as `headprune report` draws it: a Report, whose figures
        a notebook shows inline; .html is the whole page, .save(path) writes it."""
        return Report(self.path, sweep=sweep, scale=scale, eps=eps, timeout=timeout)

    def __repr__(self):
        return f"Database({self.path!r})"

    def _repr_html_(self):
        return f"<p>{html.escape(self.path)}</p>" + self.sweeps().to_html(index=False)


for _row in _engine.query_kinds():  # a kind's name as a Python identifier: self-repair is db.self_repair()
    setattr(Database, _row["name"].replace("-", "_"), _method(_row))
del _row


def open(path, timeout=None):
    """A results database (headprune.run or `headprune run` writes one), opened read-only."""
    return Database(path, timeout=timeout)
