#!/usr/bin/env python3
"""Pruned checkpoints against the original: size on disk and measured speed.

On the random GPT-2-small that build/bench/bench_forward writes
(/tmp/hp-bench-gpt2-small; run bench_forward once first), `headprune prune`
writes checkpoints without 20%, 40% (Michel et al.'s BERT figure) and 60% of
the heads, the same number in every layer (heads (5 l + i) mod 12, i < k).
For each model, in one run:

  - the size of model.safetensors and the parameters headprune counts;
  - headprune: `headprune eval --json` over 8 x 256 random tokens, the
    "seconds" it reports (the forward with the LM head fused into the
    metrics; opening the model and reading the data not included), median
    of --reps rounds, the models taking turns within each round so a change
    in the machine's state hits them alike; tokens/s = 2048 / seconds;
  - the peer, when --peer-python is given: Hugging Face transformers 4.x
    (eager attention, PyPI torch) loading the same directory, which reads
    config.json's pruned_heads (bench/peer/peer_hf.py forward, its median).

Also the original under head masks equal to each pruned set, through
`headprune eval --mask` (which skips masked heads' work but also runs the
unmasked model it reports beside, so its time is that of two passes sharing
the layers before the first masked one): reported, not compared.

    bench/prune.py [--threads 2] [--reps 5] [--peer-python /work/venv/bin/python]

Only the standard library. Prints a Markdown table; not part of CI.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HP = os.path.join(REPO, "build", "headprune")
MODEL = "/tmp/hp-bench-gpt2-small"
WORK = "/tmp/hp-bench-prune"
L, H, SEQS, T, VOCAB = 12, 12, 8, 256, 50257


def write_npy(path, rows):
    """int32 [n, T] .npy, written by hand (format version 1.0)."""
    hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (len(rows), len(rows[0]))
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        for r in rows:
            f.write(struct.pack("<%di" % len(r), *r))


def spec_for(frac):
    k = round(frac * H)
    return ",".join(f"{l}.{(5 * l + i) % H}" for l in range(L) for i in range(k)), k * L


def hp_eval(model, data, threads, mask=None):
    cmd = [HP, "eval", "--model", model, "--data", data, "--threads", str(threads), "--json", "--quiet"]
    if mask:
        cmd += ["--mask", mask]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def params(model):
    r = subprocess.run([HP, "inspect", "--model", model, "--json"], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["n_params"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--peer-python", default=os.environ.get("HP_PEER_PYTHON"))
    a = ap.parse_args()
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        sys.exit(f"{MODEL} is missing: run build/bench/bench_forward --reps 1 once to write it")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    rng = random.Random(0)
    data = os.path.join(WORK, "data.npy")
    write_npy(data, [[rng.randrange(VOCAB) for _ in range(T)] for _ in range(SEQS)])

    models = [("original", MODEL, "", 0)]
    for frac in (0.2, 0.4, 0.6):
        spec, n = spec_for(frac)
        out = os.path.join(WORK, f"pruned-{int(frac * 100)}")
        subprocess.run([HP, "prune", "--model", MODEL, "--mask", spec, "--out", out, "--quiet"], check=True)
        models.append((f"{n} of {L * H} heads pruned ({int(frac * 100)}%)", out, spec, n))

    times = {m[1]: [] for m in models}
    masked = {m[1]: [] for m in models if m[2]}
    losses = {}
    for rep in range(a.reps + 1):  # round 0 warms the page cache and is not counted
        for name, path, spec, _ in models:
            r = hp_eval(path, data, a.threads)
            losses[path] = r["loss"]
            if rep:
                times[path].append(r["seconds"])
            if spec:
                rm = hp_eval(MODEL, data, a.threads, spec)
                if rep:
                    masked[path].append(rm["seconds"])
                losses["masked " + path] = rm["loss"]
        print(f"round {rep} done", file=sys.stderr)

    peer = {}
    if a.peer_python:
        for name, path, _, _ in models:
            r = subprocess.run([a.peer_python, os.path.join(REPO, "bench", "peer", "peer_hf.py"), "forward",
                                "--model", path, "--threads", str(a.threads), "--seqs", str(SEQS),
                                "--seq-len", str(T), "--reps", str(a.reps)],
                               check=True, capture_output=True, text=True)
            peer[path] = json.loads(r.stdout)

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, {a.threads} threads, {SEQS} x {T} tokens, median of {a.reps}\n")
    cols = "| model | model.safetensors | parameters | headprune s | tokens/s | vs original |"
    sep = "|---|---|---|---|---|---|"
    if peer:
        cols += " transformers s | tokens/s | vs original |"
        sep += "---|---|---|"
    print(cols)
    print(sep)
    base = statistics.median(times[MODEL])
    pbase = peer[MODEL]["median_s"] if peer else None
    for name, path, spec, _ in models:
        size = os.path.getsize(os.path.join(path, "model.safetensors")) / 1e6
        s = statistics.median(times[path])
        row = f"| {name} | {size:.1f} MB | {params(path) / 1e6:.1f} M | {s:.3f} | {SEQS * T / s:.0f} | {base / s:.2f}x |"
        if peer:
            ps = peer[path]["median_s"]
            row += f" {ps:.3f} | {SEQS * T / ps:.0f} | {pbase / ps:.2f}x |"
        print(row)
    print()
    for name, path, spec, _ in models:
        if spec:
            print(f"- original with the same {name.split(' (')[0]} masked (`eval --mask`, two passes): "
                  f"{statistics.median(masked[path]):.3f} s; loss {losses['masked ' + path]:.6f}, "
                  f"the pruned checkpoint's {losses[path]:.6f}")


if __name__ == "__main__":
    main()
