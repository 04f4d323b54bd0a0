#!/usr/bin/env python3
"""How the cost of a `headprune run` sweep grows, on GPT-2-small shape.

Three series, each point two `headprune run`s into fresh databases
(--threads 2 by default), over random-weight GPT-2-small-shaped models: the
baseline alone (s0: model open, hashing, one unmasked pass), then the
baseline + single heads (s; a plan without a baseline study gets one, so a
sweep of N heads is N + 1 jobs). (s - s0) / N is the marginal cost of one
single-head variant.

  variants  single heads: 12, 36, 72 and 144 of them (layers [6]; [2, 6, 10];
            [1, 3, 5, 7, 9, 11]; all 12) over 4 x 128 tokens. The layers are
            spread so that the mean number of layers a variant reruns
            (12 - layer, with the reuse path) stays near 6 across the points.
  tokens    the 12 heads of layer 6 over 4 sequences of 128, 256, 512 and
            1024 tokens
  layers    models of 3, 6 and 12 layers, the 12 heads of layer 0 (every
            layer reruns) over 4 x 128 tokens

Figures per point: seconds as headprune reports them (model open, hashing
and database included), the sweep process's wall time, seconds per variant,
peak memory as headprune reports it (its ru_maxrss), and the load the rest of
the machine put on the CPUs meanwhile: "others" is the CPUs busy according to
/proc/stat minus headprune's own CPU time, over the wall time; "load1" is the
1-minute load average just before the run.

Data: int32 token ids in [0, 50257) from numpy default_rng(1), written to
/tmp/hp-bench-scaling-4xT.npy. Models: the 12-layer one is
/tmp/hp-bench-gpt2-small (written by build/bench/bench_forward); the 3- and
6-layer ones are written once to /tmp/hp-bench-gpt2-LN from its first N
layers' tensors (never in the repo). numpy and safetensors are needed only
for writing those, which a child process does (a spawned process's ru_maxrss
starts at its parent's peak RSS on Linux, so the driver stays small); run
with /work/venv/bin/python or any Python that has them.

    bench/scaling.py [--threads 2] [--series variants,tokens,layers] [--out FILE]

About 5 minutes with the defaults on a 2-CPU machine. Prints a Markdown
report and writes it to --out.
"""

import argparse
import datetime
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL12 = "/tmp/hp-bench-gpt2-small"
VOCAB = 50257
N_SEQS = 4
D_MODEL = 768

VARIANT_POINTS = [[6], [2, 6, 10], [1, 3, 5, 7, 9, 11], list(range(12))]
TOKEN_POINTS = [128, 256, 512, 1024]
LAYER_POINTS = [3, 6, 12]

LINE = re.compile(r"sweep \d+: (\d+) jobs \((\d+) run, \d+ repeated within the plan, (\d+) already in the database\) "
                  r"in ([0-9.]+) s(?:, [^,]*threads?(?: \(auto\))?)?, "
                  r"peak memory (\d+) MB")


def log(msg):
    print(f"[scaling] {msg}", file=sys.stderr, flush=True)


def data_path(seq_len):
    return f"/tmp/hp-bench-scaling-{N_SEQS}x{seq_len}.npy"


def model_path(n_layer):
    return MODEL12 if n_layer == 12 else f"/tmp/hp-bench-gpt2-L{n_layer}"


def write_data(seq_len):
    import numpy as np
    path = data_path(seq_len)
    ids = np.random.default_rng(1).integers(0, VOCAB, size=(N_SEQS, seq_len), dtype=np.int32)
    if os.path.exists(path):
        try:
            if np.array_equal(np.load(path), ids):
                return
        except (ValueError, OSError):
            pass
    np.save(path, ids)
    log(f"wrote {path}")


def write_model(n_layer):
    path = model_path(n_layer)
    if n_layer == 12:
        if not os.path.exists(os.path.join(MODEL12, "model.safetensors")):
            sys.exit(f"scaling: {MODEL12} missing; run build/bench/bench_forward once to write it")
        return
    cfg_path, st_path = os.path.join(path, "config.json"), os.path.join(path, "model.safetensors")
    if os.path.exists(cfg_path) and os.path.exists(st_path):
        with open(cfg_path) as f:
            if json.load(f).get("n_layer") == n_layer:
                return
    from safetensors.numpy import load_file, save_file
    with open(os.path.join(MODEL12, "config.json")) as f:
        cfg = json.load(f)
    if n_layer > cfg["n_layer"]:
        sys.exit(f"scaling: cannot make {n_layer} layers from {cfg['n_layer']}")
    tensors = load_file(os.path.join(MODEL12, "model.safetensors"))
    keep = {}
    for name, t in tensors.items():
        m = re.search(r"(?:^|\.)h\.(\d+)\.", name)
        if m is None or int(m.group(1)) < n_layer:
            keep[name] = t
    os.makedirs(path, exist_ok=True)
    save_file(keep, st_path)
    cfg["n_layer"] = n_layer
    cfg["_comment"] = (f"first {n_layer} layers of {MODEL12} (random weights), "
                       "written by headprune bench/scaling.py; not a trained model")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    log(f"wrote {path} ({n_layer} layers)")


def prepare(series):
    """Every model and data file the series need (run in a child process, see main)."""
    for nl in (LAYER_POINTS if "layers" in series else [12]):
        write_model(nl)
    for t in (TOKEN_POINTS if "tokens" in series else [128]):
        write_data(t)


def busy_jiffies():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...: busy = all but idle, iowait, steal
    return v[0] + v[1] + v[2] + v[5] + v[6]


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_point(binary, workdir, tag, model, data, studies, threads):
    plan = os.path.join(workdir, f"{tag}.yaml")
    db = os.path.join(workdir, f"{tag}.db")
    for p in (db, db + "-wal", db + "-shm"):
        if os.path.exists(p):
            os.remove(p)
    with open(plan, "w") as f:
        f.write(f"name: {tag}\nmodel: {model}\ndata: {data}\nmetric: loss\nstudies:\n")
        for s in studies:
            f.write(f"  - {s}\n")
    cmd = [binary, "run", plan, "--db", db, "--threads", str(threads), "--quiet"]
    log(" ".join(cmd))
    load1 = loadavg()
    hz = os.sysconf("SC_CLK_TCK")
    b0, t0 = busy_jiffies(), time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall, b1 = time.monotonic() - t0, busy_jiffies()
    p.stdout.close()
    rc = p.returncode = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.exit(f"scaling: headprune exited with {rc}")
    m = LINE.search(out)
    if m is None:
        sys.exit(f"scaling: unexpected output: {out!r}")
    own = ru.ru_utime + ru.ru_stime
    others = max(0.0, ((b1 - b0) / hz - own) / wall)
    r = {"jobs": int(m.group(1)), "run": int(m.group(2)), "s": float(m.group(4)), "mb": int(m.group(5)),
         "wall": wall, "cpu": own, "others": others, "load": load1}
    log(f"  {out.strip()}  (wall {wall:.1f} s, others {others:.2f} CPU, load {load1:.2f})")
    return r


def single(layers):
    return "single: {layers: [%s]}" % ", ".join(str(x) for x in layers)


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--series", default="variants,tokens,layers")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "headprune"))
    ap.add_argument("--out")
    ap.add_argument("--prepare", metavar="SERIES", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prepare:
        prepare(args.prepare.split(","))
        return
    series = args.series.split(",")
    for s in series:
        if s not in ("variants", "tokens", "layers"):
            sys.exit(f"scaling: unknown series {s!r}")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"scaling: {args.bin} not found; meson compile -C build")

    # The models and data are written by a child process: on Linux a process's
    # peak RSS (ru_maxrss, which headprune reports as its peak memory) starts
    # at its parent's peak when it is spawned, so this driver must stay small
    # (standard library only, no numpy) for the figures to be headprune's own.
    subprocess.run([sys.executable, os.path.abspath(__file__), "--prepare", ",".join(series)], check=True)
    driver_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    started = datetime.datetime.now(datetime.timezone.utc)
    report = [f"headprune bench/scaling.py, {started:%Y-%m-%d %H:%M} UTC, --threads {args.threads}, "
              f"one run per point, fresh database each",
              ""]
    T = args.threads

    def pair(tag, model, data, layers):
        """baseline only, then baseline + the single heads of `layers` (a plan without a baseline gets one)."""
        b = run_point(args.bin, wd, tag + "-b", model, data, ["baseline"], T)
        r = run_point(args.bin, wd, tag, model, data, [single(layers)], T)
        n = r["jobs"] - 1
        return b, r, n, [f"{b['s']:.1f}", f"{r['s']:.1f}", f"{r['wall']:.1f}", f"{r['s'] / n:.3f}",
                         f"{(r['s'] - b['s']) / n:.3f}"]

    def tail(b, r):
        return [f"{b['mb']} / {r['mb']}", f"{r['others']:.2f}", f"{r['load']:.2f}"]

    common = ["s0 (baseline only)", "s (baseline + singles)", "wall s", "s / variant", "(s - s0) / variant"]
    ctail = ["peak MB (baseline only / sweep)", "others CPU", "load1"]
    with tempfile.TemporaryDirectory(prefix="hp-scaling-") as wd:
        if "variants" in series:
            model, data = model_path(12), data_path(128)
            rows = []
            for layers in VARIANT_POINTS:
                b, r, n, cols = pair(f"v{len(layers) * 12}", model, data, layers)
                rerun = sum(12 - l for l in layers) / len(layers)
                rows.append([str(n), ",".join(map(str, layers)), f"{rerun:.1f}"] + cols + tail(b, r))
            report += ["### Variants: single heads of GPT-2-small (12 layers), 4 x 128 tokens", "",
                       table(["variants", "layers", "mean layers rerun"] + common + ctail, rows), ""]
        if "tokens" in series:
            model = model_path(12)
            rows = []
            for t in TOKEN_POINTS:
                b, r, n, cols = pair(f"t{t}", model, data_path(t), [6])
                tok = N_SEQS * t
                rows.append([str(t), str(tok), str(n)] + cols +
                            [f"{(r['s'] - b['s']) / n / tok * 1000:.3f}", f"{100 * t / (t + 6 * D_MODEL):.1f}%"] +
                            tail(b, r))
            report += ["### Tokens: the 12 heads of layer 6, GPT-2-small, 4 sequences", "",
                       table(["seq len", "tokens", "variants"] + common +
                             ["(s - s0) / variant / 1k tokens", "attention share of a layer's FLOPs"] + ctail, rows),
                       "", "attention share = T / (T + 6 d_model): full T x T scores and weighted sum against "
                       "the QKV, output and MLP projections (LM head not included).", ""]
        if "layers" in series:
            data = data_path(128)
            rows = []
            for nl in LAYER_POINTS:
                b, r, n, cols = pair(f"l{nl}", model_path(nl), data, [0])
                rows.append([str(nl), model_path(nl), str(n)] + cols + tail(b, r))
            report += ["### Layers: the 12 heads of layer 0 (every layer reruns), 4 x 128 tokens", "",
                       table(["layers", "model", "variants"] + common + ctail, rows), ""]
    report += ["Each point is two runs: the baseline alone (s0: model open, hashing, one unmasked pass) and "
               "the baseline + single heads (s); s / variant = s / singles, (s - s0) / variant = the "
               "marginal cost of one single-head variant.", ""]
    took = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    report += [f"total {took:.0f} s; driver's peak RSS {driver_mb:.0f} MB; others CPU = CPUs busy (/proc/stat) minus headprune's own CPU time, "
               f"over the wall time; load1 = 1-minute load average before the run"]
    text = "\n".join(report) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
