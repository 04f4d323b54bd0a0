"""headprune.run: a plan run into a results database, in process, resumable as `headprune run` is."""
import os
import sys
import threading
import time

from . import _engine
from ._model import int_option


class _Bar:
    """Progress: a tqdm bar where tqdm is installed, else a line on stderr every few seconds."""

    def __init__(self, plan):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None
        name = os.path.splitext(os.path.basename(plan))[0]
        self.bar = tqdm(total=0, desc=name, unit="job", dynamic_ncols=True) if tqdm else None
        self.last = 0.0

    def __call__(self, p):
        if self.bar is not None:
            if p["total"] != self.bar.total:
                self.bar.total = p["total"]
            self.bar.set_postfix_str(f"{p['label']}, {p['cached']} cached", refresh=False)
            self.bar.update(p["done"] - self.bar.n)
        elif time.monotonic() - self.last >= 5 or p["done"] == p["total"]:
            self.last = time.monotonic()
            print(f"headprune: {p['done']}/{p['total']} jobs ({p['cached']} cached), {p['label']}, "
                  f"{p['elapsed']:.1f} s", file=sys.stderr, flush=True)

    def close(self, finished):
        """finished: the plan's estimate of its jobs becomes what it ran, so a finished bar is full."""
        if self.bar is not None:
            if finished:
                self.bar.total = self.bar.n
                self.bar.refresh()
            self.bar.close()


def run(plan, db, threads=None, progress=True, batch=None, plain=False, shard=None):
    """Run a plan's jobs into an SQLite results database, as `headprune run PLAN --db DB` does.

    Finished jobs are found by their content address and skipped, so running again resumes. Every result
    is written as its batch ends. Ctrl-C (a notebook's interrupt) stops after the current batch, with every
    finished result kept, and raises KeyboardInterrupt; run the same call to resume.

    threads: a count from 1, as `--threads` (None: as many as other processes leave idle). progress: True
    (a tqdm bar where tqdm is installed, else a line on stderr every 5 s), False, or a callable taking a dict
    (done, total, cached, evaluated, label, elapsed, eta, rate, unit). batch: variants evaluated together
    (None: 64).
    plain: no reuse (the reference path). shard: (i, n), 1-based, to run the i-th of n slices.

    Returns a dict: sweep_id, n_jobs, n_run, n_repeated, n_cached, seconds, threads_min, threads_max."""
    plan, db = os.fspath(plan), os.fspath(db)
    threads = 0 if threads is None else int_option("run", "threads", threads, _engine.THREADS_MAX)
    si, sn = shard if shard is not None else (1, 1)
    if not (1 <= si <= sn):
        raise ValueError(f"run: shard must be (i, n) with 1 <= i <= n, not {shard!r}")
    bar = _Bar(plan) if progress is True else None
    callback = bar if bar is not None else (progress if callable(progress) else None)
    main = threading.current_thread() is threading.main_thread()
    s = None
    try:
        s = _engine.run(plan, db, threads=threads, batch=int(batch or 0), plain=bool(plain),
                        shard_index=si - 1, shard_count=sn, progress=callback, sigint=main)
    finally:
        if bar is not None:
            bar.close(s is not None and not s["interrupted"])
    if s["interrupted"]:
        raise KeyboardInterrupt(f"headprune: interrupted after {s['n_jobs']} jobs ({s['n_run']} run, "
                                f"{s['n_cached'] + s['n_repeated']} already done), every finished result is in "
                                f"{db}; run the same call to resume")
    if s["foreign"]:
        import warnings
        warnings.warn(s["foreign"], stacklevel=2)
    out = {k: s[k] for k in ("sweep_id", "n_jobs", "n_run", "n_repeated", "n_cached", "seconds", "threads_min",
                             "threads_max")}
    out["db"] = db
    return out
