"""Shared fixtures for the headprune Python package's tests.

HP_CLI: the headprune binary (default <repo>/build/headprune); HP_REPO: the repository root (default: two
levels above this file). Run: PYTHONPATH=build/python python -m pytest tests/python
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(os.environ.get("HP_REPO") or Path(__file__).resolve().parents[2]).resolve()
CLI = Path(os.environ.get("HP_CLI") or REPO / "build" / "headprune").resolve()
DEFAULT = REPO / "models" / "default"
FIXTURES = REPO / "tests" / "fixtures"


def cli(*args, check=True, input=None, cwd=None):
    """Run the headprune binary; a CompletedProcess with text stdout/stderr."""
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, input=input, cwd=cwd,
                       timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"headprune {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p


def cli_json(*args):
    return json.loads(cli(*args).stdout)


def cli_error(*args):
    """The CLI's one error line (exit status 1), without the "headprune: " prefix die() adds."""
    p = cli(*args, check=False)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("headprune: "), lines[0]
    return lines[0][len("headprune: "):]


def small_data(path, rows=8, tokens=64):
    """The first rows x tokens of the default model's held-out ids, as a .npy file."""
    a = np.load(DEFAULT / "heldout.npy")[:rows, :tokens]
    np.save(path, np.ascontiguousarray(a))
    return path


def write_plan(path, name, data, studies, model=DEFAULT, ablation="zero"):
    """A plan YAML with absolute paths."""
    text = (f"name: {name}\nmodel: {model}\ndata: {data}\nmetric: loss\nablation: {ablation}\nstudies:\n"
            + "".join(f"  - {s}\n" for s in studies))
    Path(path).write_text(text)
    return path


# The studies of the session database's main sweep: every kind the quickstart and gradients plans have.
MAIN_STUDIES = ["baseline", "single", "layer", "only", "iterative: {prune: 25%, keep_one_per_layer: true}",
                "random: {k: [8, 16], samples: 2}", "pairs: {layers: [0]}", "attribution", "importance", "roles",
                'explicit: {sets: {early: "0.*", mix: "0.1,3.1"}}', "screen"]


@pytest.fixture(scope="session")
def repo():
    return REPO


@pytest.fixture(scope="session")
def hp():
    import headprune
    return headprune


@pytest.fixture(scope="session")
def model(hp):
    return hp.Model(str(DEFAULT))


@pytest.fixture(scope="session")
def session_db(tmp_path_factory):
    """A results database written by the CLI (an independent path from hp.run): sweep 1, a mean-ablation
    baseline + single sweep (for compare); sweep 2, the quickstart's and gradients' study kinds on 8 x 64
    tokens of the default model's held-out data. A few seconds on two cores."""
    d = tmp_path_factory.mktemp("db")
    data = small_data(d / "small.npy")
    db = d / "session.db"
    p1 = write_plan(d / "mean.yaml", "mean", data, ["baseline", "single"], ablation="mean")
    p2 = write_plan(d / "main.yaml", "main", data, MAIN_STUDIES)
    cli("run", p1, "--db", db, "--threads", "2", "--quiet")
    cli("run", p2, "--db", db, "--threads", "2", "--quiet")
    return db
