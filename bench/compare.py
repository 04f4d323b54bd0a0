#!/usr/bin/env python3
"""headprune against its peer and against the machine's limit, side by side.

For each thread count (default 1 and 2), back to back in one run:

  sgemm + forward  build/bench/bench_forward: BLIS sgemm 2048^3 (the limit)
                   and headprune's forward on GPT-2-small shape, 8 x 256
                   tokens, random weights (medians over --reps)
  peer forward     bench/peer/peer_hf.py forward: Hugging Face transformers
                   4.x, eager attention, PyPI torch, the same model and shape
  headprune sweep  `headprune run` of baseline + all 144 single heads over
                   4 x 128 tokens (the default reuse path), wall time as it
                   reports it, model loading and hashing included
  peer sweep       the Python loop over head_mask, one forward per variant

and the floor: the FLOPs each run must do (projections, attention, MLP, LM
head; for headprune's sweep only what the reuse leaves) over the sgemm rate
measured in the same run. Also checks that headprune's 145 losses equal the
peer's (Hugging Face's) within 1e-5 relative.

Uses only the standard library; the peer runs in its own virtual environment
(bench/peer/setup.sh), never in CI. Prints a Markdown report (and --out FILE).

    bench/compare.py [--threads 1,2] [--reps 3] [--peer-python PATH] [--out FILE]
"""

import argparse
import json
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "/tmp/hp-bench-gpt2-small"
DATA = "/tmp/hp-bench-sweep.npy"
# GPT-2 small
L, H, D, F, V, DH = 12, 12, 768, 3072, 50257, 64
FWD_SEQS, FWD_T = 8, 256
SWEEP_SEQS, SWEEP_T = 4, 128


def log(msg):
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def run(cmd, env=None):
    log(" ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"compare: {cmd[0]} failed with exit {p.returncode}")
    return p.stdout


def write_data():
    """4 x 128 int32 token ids, a fixed pseudo-random sequence, as .npy."""
    if os.path.exists(DATA):
        return
    ids, x = [], 1
    for _ in range(SWEEP_SEQS * SWEEP_T):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        ids.append((x >> 33) % V)
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (SWEEP_SEQS, SWEEP_T)
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(DATA, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%di" % len(ids), *ids))


def layer_flops(rows, seqs, t):
    """One transformer layer, counted as the engine computes it (full T x T attention)."""
    return 2 * rows * D * 3 * D + H * seqs * 4 * t * t * DH + 2 * rows * D * D + 4 * rows * D * F


def sweep_flops():
    """What the reuse path must compute for baseline + every single head."""
    rows, scored = SWEEP_SEQS * SWEEP_T, SWEEP_SEQS * (SWEEP_T - 1)
    lm = 2 * scored * D * V
    total = L * layer_flops(rows, SWEEP_SEQS, SWEEP_T) + lm  # the unmasked pass, once (the baseline is free)
    for l in range(L):
        # layer l: its output projection made again from the heads' outputs (never the saved output minus
        # the masked head's share, which cancels in float), then its MLP; later layers whole; LM head
        per = 2 * rows * D * D + 4 * rows * D * F + (L - 1 - l) * layer_flops(rows, SWEEP_SEQS, SWEEP_T) + lm
        total += H * per
    return total


def plain_sweep_flops():
    """The peer's loop: a whole forward (logits at every position) per variant."""
    rows = SWEEP_SEQS * SWEEP_T
    return (1 + L * H) * (L * layer_flops(rows, SWEEP_SEQS, SWEEP_T) + 2 * rows * D * V)


def headprune_sweep(threads, tmp):
    plan = os.path.join(tmp, "bench-single.yaml")
    with open(plan, "w") as f:
        f.write(f"name: bench-single\nmodel: {MODEL}\ndata: {DATA}\nmetric: loss\nstudies:\n  - baseline\n  - single\n")
    db = os.path.join(tmp, f"sweep-{threads}.db")
    t0 = time.perf_counter()
    out = run([os.path.join(ROOT, "build", "headprune"), "run", plan, "--db", db, "--threads", str(threads), "--quiet"])
    wall = time.perf_counter() - t0
    # "sweep 1: 145 jobs (...) in 71.8 s, peak memory 726 MB -> ..."
    words = out.split()
    secs = float(words[words.index("s,") - 1])
    peak = float(words[words.index("MB") - 1])
    con = sqlite3.connect(db)
    losses = dict(con.execute("SELECT v.mask_text, r.loss FROM variants v JOIN results r ON r.variant_id = v.id"))
    con.close()
    return {"seconds": secs, "wall_s": wall, "peak_mb": peak, "losses": losses}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer-python", default=os.environ.get(
        "HP_PEER_PYTHON", os.path.expanduser("~/.cache/headprune-peer-venv/bin/python")))
    ap.add_argument("--out", help="also write the report here")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    if not os.path.exists(a.peer_python):
        sys.exit(f"compare: no peer python at {a.peer_python}: run bench/peer/setup.sh (or give --peer-python)")
    for exe in ("build/headprune", "build/bench/bench_forward"):
        if not os.path.exists(os.path.join(ROOT, exe)):
            sys.exit(f"compare: {exe} missing: build first (meson compile -C build)")
    write_data()
    peer = os.path.join(ROOT, "bench", "peer", "peer_hf.py")
    rows = []
    with tempfile.TemporaryDirectory(prefix="hp-compare-") as tmp:
        for n in threads:
            js = os.path.join(tmp, f"fwd-{n}.json")
            run([os.path.join(ROOT, "build", "bench", "bench_forward"), "--threads", str(n), "--reps", str(a.reps),
                 "--model", MODEL, "--json", js])
            with open(js) as f:
                bf = json.load(f)
            r = bf["results"][0]
            pf = json.loads(run([a.peer_python, peer, "forward", "--model", MODEL, "--threads", str(n),
                                 "--reps", str(a.reps), "--seqs", str(FWD_SEQS), "--seq-len", str(FWD_T)]))
            hs = headprune_sweep(n, tmp)
            ps = json.loads(run([a.peer_python, peer, "sweep", "--model", MODEL, "--data", DATA,
                                 "--threads", str(n)]))
            # the same 145 losses?
            names = [""] + [f"{l}.{h}" for l in range(L) for h in range(H)]
            worst = max(abs(hs["losses"][k] - v) / abs(v) for k, v in zip(names, ps["losses"]))
            rows.append({"threads": n, "bf": bf, "r": r, "pf": pf, "hs": hs, "ps": ps, "loss_rel_diff": worst})

    fl_fwd = rows[0]["bf"]["flops"]
    fl_sweep, fl_plain = sweep_flops(), plain_sweep_flops()
    out = []
    out.append(f"headprune bench/compare.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
               f"BLIS kernel set {rows[0]['bf']['kernel']}, torch {rows[0]['pf'].get('torch')}, "
               f"transformers {rows[0]['pf'].get('transformers')}")
    out.append("")
    out.append(f"(a) forward, GPT-2-small shape, {FWD_SEQS} x {FWD_T} tokens, random weights, "
               f"{fl_fwd / 1e9:.1f} GFLOP (full T x T attention, logits at every position); medians of {a.reps}")
    out.append("")
    out.append("| threads | sgemm 2048^3 | headprune | peer (HF eager, torch) | headprune / peer | headprune % of sgemm | peer % of sgemm |")
    out.append("|---|---|---|---|---|---|---|")
    for x in rows:
        g = x["r"]["sgemm_gflops"]
        hf, pf = x["r"]["forward_s"], x["pf"]["median_s"]
        out.append(f"| {x['threads']} | {g:.1f} GFLOPS | {hf:.3f} s ({fl_fwd / hf / 1e9:.1f} GFLOPS) | "
                   f"{pf:.3f} s ({fl_fwd / pf / 1e9:.1f} GFLOPS) | **{pf / hf:.2f}x** | **{100 * fl_fwd / hf / 1e9 / g:.1f}%** | "
                   f"{100 * fl_fwd / pf / 1e9 / g:.1f}% |")
    out.append("")
    out.append(f"(b) single-head sweep (baseline + {L * H} heads) over {SWEEP_SEQS} x {SWEEP_T} tokens, loss, zero ablation")
    out.append(f"    floor = FLOPs the reuse leaves ({fl_sweep / 1e12:.2f} TFLOP) / sgemm rate of the same run; "
               f"the peer's loop does {fl_plain / 1e12:.2f} TFLOP")
    out.append("")
    out.append("| threads | headprune | peer loop | headprune / peer | floor | headprune / floor | peak memory | max loss diff vs HF |")
    out.append("|---|---|---|---|---|---|---|---|")
    for x in rows:
        g = x["r"]["sgemm_gflops"]
        hs, ps = x["hs"]["seconds"], x["ps"]["total_s"]
        floor = fl_sweep / (g * 1e9)
        out.append(f"| {x['threads']} | {hs:.1f} s | {ps:.1f} s | **{ps / hs:.2f}x** | {floor:.1f} s | "
                   f"**{hs / floor:.2f}x** | {x['hs']['peak_mb']:.0f} MB | {x['loss_rel_diff']:.1e} rel |")
    out.append("")
    out.append("Other processes' CPU use during each bench_forward part: " +
               ", ".join(f"{x['r']['others_cpus']:.2f} ({x['threads']} thr)" for x in rows))
    text = "\n".join(out)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
