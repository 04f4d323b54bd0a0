#!/usr/bin/env python3
"""A gate training step against a forward, on the random GPT-2-small of bench_forward.

A gates study's step is one forward and one reverse pass over its training set
at the drawn (fractional) gates (hp_evaluator_grad), then Adam on every head's
log alpha. This times, in one run:

  - the forward: `headprune eval --json` over the training tokens (8 x 256
    random ids; "seconds": the pass, opening the model and reading the data
    not included), once;
  - gate training: `headprune run` of a plan with one gates study,
    `--lambdas` values x `--steps` steps on those tokens (the held-out set is
    1 x 256 other random ids, so the run's two evaluations a lambda are
    small), into a fresh database; a step's time is gate_runs.wall_s / steps
    (the steps alone: the run's evaluations and opening the model are not in
    it); the run's own wall time and peak memory as `run` prints them.

    ./build/bench/bench_forward --reps 1      # once: writes /tmp/hp-bench-gpt2-small
    bench/gates.py [--threads 2] [--steps 3] [--lambdas 2]

Only the standard library. Not part of CI.
"""
import argparse
import json
import os
import random
import re
import sqlite3
import struct
import subprocess
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "/tmp/hp-bench-gpt2-small"
VOCAB = 50257


def write_npy(path, rows, seed):
    """int32 [len(rows), T] of random ids from a fixed seed, as numpy's .npy v1."""
    r = random.Random(seed)
    n, t = rows
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (n, t)
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%di" % (n * t), *[r.randrange(VOCAB) for _ in range(n * t)]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lambdas", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--headprune", default=os.path.join(REPO, "build", "headprune"))
    a = ap.parse_args()
    assert os.path.exists(os.path.join(MODEL, "model.safetensors")), "run ./build/bench/bench_forward --reps 1 first"
    with tempfile.TemporaryDirectory() as tmp:
        train = os.path.join(tmp, "train.npy")
        held = os.path.join(tmp, "held.npy")
        write_npy(train, (a.seqs, a.seq_len), 1)
        write_npy(held, (1, a.seq_len), 2)
        out = subprocess.run([a.headprune, "eval", "--model", MODEL, "--data", train, "--threads", str(a.threads),
                              "--json"], check=True, capture_output=True, text=True).stdout
        fwd = json.loads(out)["seconds"]
        lambdas = ", ".join("%g" % (0.01 * 10 ** i) for i in range(a.lambdas))
        plan = os.path.join(tmp, "gates.yaml")
        with open(plan, "w") as f:
            f.write(f"name: bench-gates\nmodel: {MODEL}\ndata: held.npy\nstudies:\n"
                    f"  - gates: {{lambda: [{lambdas}], steps: {a.steps}, train: train.npy}}\n")
        db = os.path.join(tmp, "g.db")
        run = subprocess.run([a.headprune, "run", plan, "--db", db, "--threads", str(a.threads), "--quiet"],
                             check=True, capture_output=True, text=True).stdout.strip()
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT lambda, steps, wall_s FROM gate_runs ORDER BY lambda").fetchall()
        per_step = [w / s for (_, s, w) in rows]
        step = sorted(per_step)[len(per_step) // 2]
        print(f"threads {a.threads}, {a.seqs} x {a.seq_len} training tokens, {len(rows)} lambdas x {a.steps} steps")
        print(f"forward (eval --json seconds): {fwd:.3f} s")
        for (lam, s, w), p in zip(rows, per_step):
            print(f"  lambda {lam:g}: {s} steps in {w:.3f} s, {p:.3f} s a step")
        print(f"gate step (median over lambdas): {step:.3f} s = {step / fwd:.2f}x a forward")
        m = re.search(r"in ([0-9.]+) s.*peak memory ([0-9]+) MB", run)
        print(f"run: {run}")
        if m:
            print(f"whole run {m.group(1)} s (opening and hashing the model, the evaluations), peak memory "
                  f"{m.group(2)} MB")


if __name__ == "__main__":
    main()
