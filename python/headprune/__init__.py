"""headprune from Python: the engine in process, and results as pandas DataFrames.

    import headprune as hp
    model = hp.Model("models/default")
    r = model.eval("models/default/heldout.npy", mask="0.1,2.*")
    hp.run("plans/quickstart.yaml", "results/quickstart.db")
    db = hp.open("results/quickstart.db")
    db.heads()                  # a DataFrame, the columns of `headprune query heads --format json`

docs/python.md is the guide. Every engine error is a headprune.Error (a ValueError) carrying the
engine's one line; its .status names the kind (io, format, shape, arg, unsupported, sql, plan).
"""
from ._engine import Error
from ._engine import runtime as _runtime
from ._model import EvalResult, Model
from ._run import run
from ._db import Database, open
from ._report import Figure, Report

__version__ = _runtime()["version"]


def runtime():
    """The BLIS kernel set the engine runs (and whether BLIS_ARCH_TYPE chose it), and its versions."""
    return _runtime()


__all__ = ["Database", "Error", "EvalResult", "Figure", "Model", "Report", "open", "run", "runtime"]
