"""hp.run against `headprune run`: the same results bit for bit, resumable, with progress and Ctrl-C."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import DEFAULT, FIXTURES, cli, small_data, write_plan

RESULTS = "SELECT v.key, r.loss FROM results r JOIN variants v ON v.id = r.variant_id ORDER BY v.key"
STUDIES = ["baseline", "single", "layer", "only", "iterative: {prune: 25%, keep_one_per_layer: true}",
           "random: {k: [8, 16], samples: 2}", "pairs: {layers: [0]}", "attribution"]


def results(db):
    with sqlite3.connect(db) as c:
        return c.execute(RESULTS).fetchall()


@pytest.fixture
def plan(tmp_path):
    data = small_data(tmp_path / "d.npy", rows=4, tokens=32)
    return write_plan(tmp_path / "p.yaml", "p", data, STUDIES)


def test_run_then_again_and_against_cli(hp, plan, tmp_path):
    db, ref = tmp_path / "py.db", tmp_path / "cli.db"
    s = hp.run(str(plan), str(db), threads=1, progress=False)
    assert set(s) >= {"sweep_id", "n_jobs", "n_run", "n_repeated", "n_cached", "seconds", "threads_min",
                      "threads_max", "db"}
    assert s["n_jobs"] > 100 and s["n_run"] > 0 and s["n_cached"] == 0
    assert s["n_run"] + s["n_repeated"] == s["n_jobs"]
    assert s["threads_min"] == s["threads_max"] == 1
    again = hp.run(str(plan), str(db), threads=1, progress=False)
    assert again["n_run"] == 0 and again["n_cached"] == again["n_jobs"] == s["n_jobs"]
    cli("run", plan, "--db", ref, "--threads", "1", "--quiet")
    a, b = results(db), results(ref)
    assert len(a) == len(b) > 100
    assert [k for k, _ in a] == [k for k, _ in b]
    assert [np.float64(x).tobytes() for _, x in a] == [np.float64(x).tobytes() for _, x in b]


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, 1025])
def test_threads_refused_as_the_cli_refuses(hp, plan, tmp_path, threads):
    """threads as `run --threads` takes it (1 to 1024; None is auto): anything else is the CLI's line, with the
    keyword for the option (0 and -1 once meant auto, 1.5 one thread)."""
    p = cli("run", plan, "--db", tmp_path / "cli.db", "--threads", threads, check=False)
    assert p.returncode == 2 and p.stderr.startswith("headprune run: --threads must be"), p.stderr
    with pytest.raises(ValueError) as ei:
        hp.run(str(plan), str(tmp_path / "py.db"), threads=threads, progress=False)
    assert str(ei.value) == p.stderr.splitlines()[0].replace("headprune run: --threads", "run: threads")
    assert not (tmp_path / "py.db").exists()


def test_plain_and_batch_agree(hp, plan, tmp_path):
    """plain (the reference path) and a small batch give the default run's results (to the engine's
    tolerance for reuse: the CLI says results do not depend on these)."""
    cli("run", plan, "--db", tmp_path / "ref.db", "--threads", "1", "--quiet", "--plain")
    hp.run(str(plan), str(tmp_path / "plain.db"), threads=1, progress=False, plain=True)
    assert results(tmp_path / "plain.db") == results(tmp_path / "ref.db")
    hp.run(str(plan), str(tmp_path / "b3.db"), threads=2, progress=False, batch=3)
    cli("run", plan, "--db", tmp_path / "cb3.db", "--threads", "2", "--quiet", "--batch", "3")
    assert results(tmp_path / "b3.db") == results(tmp_path / "cb3.db")


def test_shards_cover_the_plan(hp, plan, tmp_path):
    s1 = hp.run(str(plan), str(tmp_path / "s1.db"), threads=1, progress=False, shard=(1, 2))
    s2 = hp.run(str(plan), str(tmp_path / "s2.db"), threads=1, progress=False, shard=(2, 2))
    cli("run", plan, "--db", tmp_path / "c2.db", "--threads", "1", "--quiet", "--shard", "2/2")
    assert results(tmp_path / "s2.db") == results(tmp_path / "c2.db")
    assert 0 < s2["n_jobs"] < s1["n_jobs"]


def test_progress_callable(hp, plan, tmp_path):
    seen = []
    s = hp.run(str(plan), str(tmp_path / "x.db"), threads=1, progress=seen.append)
    assert seen
    keys = {"done", "total", "cached", "evaluated", "label", "elapsed", "eta", "rate", "unit"}
    assert all(set(p) == keys for p in seen)
    assert all(0 <= p["done"] <= p["total"] for p in seen)
    assert [p["done"] for p in seen] == sorted(p["done"] for p in seen)
    # the total may be revised as iterative steps are planned; the last report is the whole plan, done
    s_total = s["n_jobs"]
    assert seen[-1]["done"] == seen[-1]["total"] == s_total
    # the second run: everything cached
    seen2 = []
    hp.run(str(plan), str(tmp_path / "x.db"), threads=1, progress=seen2.append)
    assert seen2 and seen2[-1]["done"] == seen2[-1]["total"] and seen2[-1]["cached"] == seen2[-1]["total"]


def test_progress_true_and_false(hp, plan, tmp_path, capsys):
    hp.run(str(plan), str(tmp_path / "t.db"), threads=1, progress=True)
    err = capsys.readouterr().err
    n = hp.run(str(plan), str(tmp_path / "t.db"), threads=1, progress=False)["n_jobs"]
    assert f"{n}/{n}" in err  # the tqdm bar, ending at the whole plan
    hp.run(str(plan), str(tmp_path / "t.db"), threads=1, progress=False)
    assert capsys.readouterr().err == ""


def test_progress_exception_stops_the_run(hp, plan, tmp_path):
    class Stop(Exception):
        pass

    def cb(p):
        if p["done"] >= 10:
            raise Stop("enough")
    db = tmp_path / "stop.db"
    with pytest.raises(Stop):
        hp.run(str(plan), str(db), threads=1, progress=cb, batch=4)
    done = len(results(db))
    s = hp.run(str(plan), str(db), threads=1, progress=False)
    assert s["n_cached"] > 0 and s["n_run"] > 0
    assert done < len(results(db))


CHILD = """
import sys, headprune as hp
hp.run(sys.argv[1], sys.argv[2], threads=1, batch=2, progress=False)
print("finished")
"""


def test_ctrl_c(hp, tmp_path):
    data = small_data(tmp_path / "d.npy", rows=32, tokens=64)
    plan = write_plan(tmp_path / "big.yaml", "big", data,
                      ["baseline", "single", "random: {k: [4, 8, 12, 16, 20, 24], samples: 12}"])
    db = tmp_path / "int.db"
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(plan), str(db)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 60 and p.poll() is None:
            time.sleep(0.1)
            if db.exists():
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
                        n = c.execute("SELECT count(*) FROM results").fetchone()[0]
                except sqlite3.OperationalError:
                    n = 0
                if n >= 5:
                    break
        assert p.poll() is None, "the run ended before it could be interrupted: make the plan larger"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # An uncaught KeyboardInterrupt: Python prints its traceback, then ends by SIGINT (as it does since 3.8);
    # a crash would be SIGSEGV/SIGABRT with no traceback.
    assert p.returncode in (1, -signal.SIGINT, 128 + signal.SIGINT), (p.returncode, err)
    assert "Traceback (most recent call last)" in err
    assert "finished" not in out
    assert "KeyboardInterrupt" in err and "interrupted" in err and "resume" in err, err
    assert "Segmentation" not in err and "Fatal Python error" not in err
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # a variant row exists only with its result
        assert c.execute("SELECT count(*) FROM variants v LEFT JOIN results r ON r.variant_id = v.id "
                         "WHERE r.variant_id IS NULL").fetchone()[0] == 0
    partial = results(db)
    s = hp.run(str(plan), str(db), threads=2, progress=False)
    assert s["n_cached"] > 0 and s["n_run"] > 0
    ref = tmp_path / "ref.db"
    cli("run", plan, "--db", ref, "--threads", "2", "--quiet")
    final, want = results(db), results(ref)
    assert len(partial) < len(final)
    assert set(partial) <= set(want)
    assert final == want


def test_foreign_data_warning_matches_cli(hp, tmp_path):
    """A sweep on data made for another model warns in Python with the very line `headprune run` prints."""
    d = FIXTURES / "llama-gqa"
    plan = write_plan(tmp_path / "f.yaml", "f", d / "data.npy", ["baseline"], model=d)
    p = cli("run", plan, "--db", tmp_path / "cli.db", "--threads", "1")
    line = [l for l in p.stderr.splitlines() if "looks made for another model" in l][0]
    assert line.startswith("headprune: warning: ")
    with pytest.warns(UserWarning) as w:
        hp.run(plan, tmp_path / "py.db", threads=1, progress=False)
    assert [str(x.message) for x in w if "looks made" in str(x.message)] == [line[len("headprune: warning: "):]]
