#!/usr/bin/env python3
"""Gradients at the head gates: headprune's forward+backward against its forward, and against torch autograd.

On the random GPT-2-small that build/bench/bench_forward writes
(/tmp/hp-bench-gpt2-small; run bench_forward once first), over 8 x 256
random tokens, in one run, the tools taking turns within each round:

  - headprune: `headprune eval --json` (one pass: forward, loss fused into
    the LM head) and `headprune eval --grad --json` (hp_evaluator_grad: a
    forward keeping what the reverse pass reads, the LM head fused with the
    loss's gradient, and the reverse pass; the unmasked model's metrics are
    that forward's, not another pass). Both report "seconds" (opening the
    model and reading the data not included): the forward's, and the
    forward + backward's;
  - the peer, with --peer-python: Hugging Face transformers 4.x (eager
    attention, PyPI torch, weights requires_grad_(False)),
    `model(ids, labels=ids, head_mask=hm)` timed alone and with
    `loss.backward()` where `hm.requires_grad_()`: the loss and the gradient
    at the same gates, as torch's users compute Michel's importance.

The peer runs in one process that loads the model once and then waits;
each round runs headprune's two commands and then one peer round (forward,
then forward+backward), so that both see the same machine: on a shared VM
torch's time moves with the load by a third from one minute to the next.
Each round also measures BLIS's sgemm 2048^3 (bench_forward's), and the
backward's rate is taken against it: eval --grad's `grad_seconds` split the
pass into forward, head (logits and their gradient, fused) and reverse, and
the backward is the reverse with the head's gradient half, over the FLOPs
of their products (grad_gflop). Medians of --reps rounds after one warm-up
round, and the median of the rounds' own ratios. Also checks that the two gradients agree (max |diff|
relative to the largest).

With --studies, then: `headprune run` of one-study plans over 4 x 128 random
tokens on the same model, each into a fresh database, timed as run reports
it (opening and hashing the model included): the exact `single` sweep
(baseline + 144 heads) against `attribution` (one forward and one
backward), and Michel's curve in steps of 10% ranked exactly (`rank:
exact`: every remaining head evaluated at every step) against ranked by
gradient (`rank: gradient`: one backward a step) and ranked once by the default
estimate (`rank: estimate`: ig-layer, 2 passes a layer), and the single
sweep against the estimators alone and the screen. Each once.
--studies-only times the studies alone.

    bench/grad.py [--threads 2] [--reps 5] [--peer-python /work/venv/bin/python]

Only the standard library (the peer's side runs in the peer's Python). Not part of CI.
"""
import argparse
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HP = os.path.join(REPO, "build", "headprune")
MODEL = "/tmp/hp-bench-gpt2-small"
SEQS, T, VOCAB = 8, 256, 50257

PEER = r"""
import json, os, sys, time
threads, model, data = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
import numpy as np, torch, transformers
torch.set_num_threads(threads)
transformers.logging.set_verbosity_error()
m = transformers.GPT2LMHeadModel.from_pretrained(model, attn_implementation="eager").eval()
for p in m.parameters():
    p.requires_grad_(False)
ids = torch.from_numpy(np.load(data).astype(np.int64))
L, H = m.config.n_layer, m.config.n_head
print(json.dumps({"ready": True, "torch": torch.__version__, "transformers": transformers.__version__}), flush=True)
for line in sys.stdin:  # one round a line: a forward, then a forward + backward
    with torch.no_grad():
        t = time.perf_counter(); loss = m(ids, labels=ids, head_mask=torch.ones(L, H)).loss; a = time.perf_counter() - t
    hm = torch.ones(L, H, requires_grad=True)
    t = time.perf_counter(); loss = m(ids, labels=ids, head_mask=hm).loss; loss.backward(); b = time.perf_counter() - t
    print(json.dumps({"forward_s": a, "forward_backward_s": b, "loss": float(loss), "grad": hm.grad.tolist()}),
          flush=True)
"""


def write_npy(path, rows):
    hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (len(rows), len(rows[0]))
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        for r in rows:
            f.write(struct.pack("<%di" % len(r), *r))


def hp_eval(data, threads, grad):
    cmd = [HP, "eval", "--model", MODEL, "--data", data, "--threads", str(threads), "--json", "--quiet"]
    if grad:
        cmd.append("--grad")
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def sgemm_gflops(threads):
    """BLIS sgemm 2048^3 at this many threads, now (bench_forward's own measurement, a tiny forward beside it)."""
    out = os.path.join(tempfile.mkdtemp(prefix="hp-bench-sgemm-"), "sgemm.json")
    subprocess.run([os.path.join(REPO, "build", "bench", "bench_forward"), "--threads", str(threads), "--reps", "1",
                    "--seqs", "1", "--seq-len", "16", "--json", out], check=True, capture_output=True)
    with open(out) as f:
        return json.load(f)["results"][0]["sgemm_gflops"]


def grad_gflop():
    """GFLOP of eval --grad's head (logits and their gradient at the scored rows) and of its reverse pass through
    the layers: every data-gradient product (layer 0 sends none to its input, so it has no q/k/v products and no
    attention reverse) and attention's four T x T x d_head gradient products a head and sequence. The product
    that makes the probabilities again is work the pass does but is not counted: a reverse that stored them
    would not do it."""
    with open(os.path.join(MODEL, "config.json")) as f:
        c = json.load(f)
    L, d, H, V = c["n_layer"], c["n_embd"], c["n_head"], c["vocab_size"]
    dh, N = d // H, SEQS * T
    head = 2 * 2 * SEQS * (T - 1) * V * d
    reverse = 2 * N * (12 * L - 3) * d * d + 2 * 4 * (L - 1) * H * SEQS * T * T * dh
    return head / 1e9, reverse / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--peer-python", default=os.environ.get("HP_PEER_PYTHON"))
    ap.add_argument("--studies", action="store_true", help="also time the gradient studies against exact ones")
    ap.add_argument("--studies-only", action="store_true", help="time only the studies (no passes, no peer)")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        sys.exit(f"{MODEL} is missing: run build/bench/bench_forward --reps 1 once to write it")
    work = tempfile.mkdtemp(prefix="hp-bench-grad-")
    data = os.path.join(work, "data.npy")
    rng = random.Random(0)
    write_npy(data, [[rng.randrange(VOCAB) for _ in range(T)] for _ in range(SEQS)])
    if a.studies_only:  # the same tokens as after the rounds: rng has drawn the passes' first
        studies(work, a.threads, rng)
        return

    peer = None
    if a.peer_python:
        peer = subprocess.Popen([a.peer_python, "-c", PEER, str(a.threads), MODEL, data], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        info = json.loads(peer.stdout.readline())
    fw, fg, pf, pfb, ph, sgemm, last, plast = [], [], [], [], [], [], None, None
    for rep in range(a.reps + 1):
        f = hp_eval(data, a.threads, False)
        g = hp_eval(data, a.threads, True)
        sg = sgemm_gflops(a.threads)
        if peer:
            peer.stdin.write("round\n")
            peer.stdin.flush()
            plast = json.loads(peer.stdout.readline())
        if rep:
            fw.append(f["seconds"])
            fg.append(g["seconds"])
            ph.append(g["grad_seconds"])
            sgemm.append(sg)
            if peer:
                pf.append(plast["forward_s"])
                pfb.append(plast["forward_backward_s"])
        last = g
        print(f"round {rep} done", file=sys.stderr)
    if peer:
        peer.stdin.close()
        peer.wait()

    t_f = statistics.median(fw)
    t_fb = statistics.median(fg)  # eval --grad: hp_evaluator_grad, whose forward also gives the metrics
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, {a.threads} threads, {SEQS} x {T} tokens, medians of {a.reps}\n")
    print("| | forward (loss) s | forward + backward (loss, dL/dgate) s | ratio |")
    print("|---|---|---|---|")
    print(f"| headprune | {t_f:.3f} | {t_fb:.3f} | {t_fb / t_f:.2f}x |")
    if peer:
        p_f, p_fb = statistics.median(pf), statistics.median(pfb)
        print(f"| transformers {info['transformers']}, torch {info['torch']} | {p_f:.3f} | {p_fb:.3f} | "
              f"{p_fb / p_f:.2f}x |")
        rounds = [p / h for p, h in zip(pfb, fg)]
        print(f"\nheadprune's forward + backward against torch's: {p_fb / t_fb:.2f}x faster (medians); "
              f"per round {', '.join(f'{x:.2f}' for x in rounds)}, median {statistics.median(rounds):.2f}x")
        hg = [x for row in last["grad"] for x in row]
        pg = [x for row in plast["grad"] for x in row]
        big = max(abs(x) for x in pg)
        diff = max(abs(x - y) for x, y in zip(hg, pg))
        print(f"gradients: max |diff| {diff:.3g}, {diff / big:.2g} of the largest ({big:.3g}); "
              f"loss {last['loss']:.6f} here, {plast['loss']:.6f} in torch")
    g_head, g_rev = grad_gflop()
    t_head = statistics.median(p["head"] for p in ph)
    t_rev = statistics.median(p["reverse"] for p in ph)
    t_fwd = statistics.median(p["forward"] for p in ph)
    t_sg = statistics.median(sgemm)
    # the backward alone: the reverse through the layers and the head's gradient half (its products are the
    # logits' transposed, fused in one loop: half the head's time stands for them)
    bwd = [(g_rev + g_head / 2) / (p["reverse"] + p["head"] / 2) / sg for p, sg in zip(ph, sgemm)]
    print(f"\neval --grad by phase (medians): forward {t_fwd:.3f} s, head {t_head:.3f} s ({g_head:.0f} GFLOP, "
          f"{g_head / t_head:.0f} GFLOPS), reverse {t_rev:.3f} s ({g_rev:.0f} GFLOP, {g_rev / t_rev:.0f} GFLOPS); "
          f"BLIS sgemm 2048^3 {t_sg:.0f} GFLOPS in the same rounds")
    print(f"the backward (the reverse and the head's gradient half) at {statistics.median(bwd):.0%} of that "
          f"round's sgemm (median; per round {', '.join(f'{x:.0%}' for x in bwd)}); the reverse alone at "
          f"{statistics.median(g_rev / p['reverse'] / sg for p, sg in zip(ph, sgemm)):.0%}")
    if a.studies:
        studies(work, a.threads, rng)


def run_plan(work, name, study, data, threads):
    plan = os.path.join(work, name + ".yaml")
    with open(plan, "w") as f:
        f.write(f"name: {name}\nmodel: {MODEL}\ndata: {data}\nmetric: loss\nstudies:\n  - {study}\n")
    db = os.path.join(work, name + ".db")
    r = subprocess.run([HP, "run", plan, "--db", db, "--threads", str(threads), "--quiet"], check=True,
                       capture_output=True, text=True)
    line = [x for x in r.stdout.splitlines() + r.stderr.splitlines() if " jobs (" in x][-1]
    secs = float(re.search(r"\) in ([0-9.]+) s", line).group(1))
    return secs, db


def studies(work, threads, rng):
    data = os.path.join(work, "sweep.npy")
    write_npy(data, [[rng.randrange(VOCAB) for _ in range(128)] for _ in range(4)])
    pairs = [("single-head effects", "single",
              ["attribution: {estimator: atp}", "attribution: {estimator: importance}",
               "attribution: {estimator: ig-layer}", "screen", "screen: {estimator: ig-layer}"]),
             ("Michel's curve, steps of 10%", "iterative: {prune: 10%, name: exact}",
              ["iterative: {prune: 10%, rank: gradient, name: gradient}",
               "iterative: {prune: 10%, rank: estimate, name: estimate}"])]
    print(f"\nstudies on 4 x 128 tokens, {threads} threads, one run each (`headprune run`'s time):\n")
    print("| question | exact study | exact s | instead | its s | faster |")
    print("|---|---|---|---|---|---|")
    for i, (what, exact, fast) in enumerate(pairs):
        te, _ = run_plan(work, f"exact-{i}", exact, data, threads)
        for j, f in enumerate(fast):
            tf, _ = run_plan(work, f"fast-{i}-{j}", f, data, threads)
            print(f"| {what} | `{exact}` | {te:.1f} | `{f}` | {tf:.1f} | {te / tf:.1f}x |", flush=True)

if __name__ == "__main__":
    main()
