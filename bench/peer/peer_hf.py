#!/usr/bin/env python3
"""Peer benchmark for headprune: Hugging Face transformers 4.x (eager
attention) on PyPI torch, on the random GPT-2-small model that
build/bench/bench_forward writes (default /tmp/hp-bench-gpt2-small).

Modes (each prints ONE JSON object on stdout; progress goes to stderr):

  forward --model DIR --threads N [--seqs 8 --seq-len 256 --reps 5 --seed 0]
      one warm-up, then `reps` timed `model(input_ids).logits` on the whole
      batch (logits for every position).

  sweep --model DIR --data FILE.npy --threads N [--limit K]
      the baseline (no head masked) then every single head (l, h), l-major:
      1 + L*H variants, each `model(ids, head_mask=m, labels=ids)` on the
      whole batch, i.e. the Python loop users write today. Reports the loss
      of every variant (token-weighted mean next-token cross-entropy) and
      the loop's wall time.

Not part of CI; see bench/peer/README.md.
"""

import argparse
import os
import sys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)

    f = sub.add_parser("forward", help="forward-pass throughput")
    f.add_argument("--model", default="/tmp/hp-bench-gpt2-small")
    f.add_argument("--threads", type=int, required=True)
    f.add_argument("--seqs", type=int, default=8)
    f.add_argument("--seq-len", type=int, default=256)
    f.add_argument("--reps", type=int, default=5)
    f.add_argument("--seed", type=int, default=0)

    s = sub.add_parser("sweep", help="single-head ablation sweep via head_mask")
    s.add_argument("--model", default="/tmp/hp-bench-gpt2-small")
    s.add_argument("--data", required=True,
                   help="int32 .npy of token ids, shape [n_seqs, seq_len]")
    s.add_argument("--threads", type=int, required=True)
    s.add_argument("--limit", type=int, default=None,
                   help="run only the first K variants (baseline counts as one)")

    a = p.parse_args()
    if a.threads < 1:
        p.error("--threads must be >= 1")
    if a.mode == "forward" and (a.seqs < 1 or a.seq_len < 1 or a.reps < 1):
        p.error("--seqs, --seq-len and --reps must be >= 1")
    if a.mode == "sweep" and a.limit is not None and a.limit < 1:
        p.error("--limit must be >= 1")
    return a


# Arguments are parsed, and the thread environment set, before torch (or
# numpy, which may bring up its own BLAS pool) is imported, so that OpenMP and
# MKL size their pools from N rather than from the CPU count.
ARGS = parse_args()
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

# Before any torch work: set_num_interop_threads fails once the pool exists.
torch.set_num_interop_threads(1)
torch.set_num_threads(ARGS.threads)

import transformers  # noqa: E402
from transformers import GPT2LMHeadModel  # noqa: E402


def log(msg):
    print(f"[peer_hf] {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"[peer_hf] error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def load_model(model_dir):
    """Load DIR as GPT2LMHeadModel with eager attention; fail loudly unless
    every parameter comes from the file (lm_head tied to wte)."""
    if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
        die(f"{model_dir}/model.safetensors not found; run "
            "`./build/bench/bench_forward --threads 1 --reps 1` once to write it")
    log(f"loading {model_dir}")
    t0 = time.perf_counter()
    model, info = GPT2LMHeadModel.from_pretrained(
        model_dir, attn_implementation="eager", output_loading_info=True)
    allowed_missing = {"lm_head.weight"}
    missing = [k for k in info["missing_keys"] if k not in allowed_missing]
    if missing or info["unexpected_keys"] or info["mismatched_keys"] or info["error_msgs"]:
        die(f"loading {model_dir} was not clean: {info}")
    if model.config._attn_implementation != "eager":
        die(f"attention implementation is {model.config._attn_implementation!r}, not 'eager'")
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        die("lm_head.weight is not tied to transformer.wte.weight")

    # Belt and braces: every tensor of the model equals the file's tensor of
    # the same name (so nothing was silently left at its random init).
    from safetensors import safe_open
    sd = model.state_dict()
    seen = set()
    with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt") as f:
        for name in f.keys():
            key = name if name in sd else "transformer." + name
            if key not in sd:
                die(f"file tensor {name} has no counterpart in the model")
            t = f.get_tensor(name)
            if t.shape != sd[key].shape or not torch.equal(t.to(sd[key].dtype), sd[key]):
                die(f"model tensor {key} differs from file tensor {name}")
            seen.add(key)
    not_from_file = sorted(set(sd) - seen - allowed_missing)
    if not_from_file:
        die(f"model tensors not in the file: {not_from_file}")

    model.eval()
    log(f"loaded in {time.perf_counter() - t0:.1f} s: {model.config.n_layer} layers x "
        f"{model.config.n_head} heads, d={model.config.n_embd}, vocab {model.config.vocab_size}, "
        f"all {len(seen)} tensors checked against the file")
    return model


def common_info(args):
    return {
        "peer": "huggingface-transformers-eager",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "mkl_available": bool(torch.backends.mkl.is_available()),
        "threads": args.threads,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "model": os.path.abspath(args.model),
    }


def run_forward(args):
    model = load_model(args.model)
    vocab = model.config.vocab_size
    if args.seq_len > model.config.n_positions:
        die(f"--seq-len {args.seq_len} exceeds n_positions {model.config.n_positions}")
    rng = np.random.default_rng(args.seed)
    ids_np = rng.integers(0, vocab, size=(args.seqs, args.seq_len), dtype=np.int64)
    ids = torch.from_numpy(ids_np)
    tokens = args.seqs * args.seq_len

    times = []
    with torch.inference_mode():
        for rep in range(args.reps + 1):
            t0 = time.perf_counter()
            logits = model(ids).logits
            dt = time.perf_counter() - t0
            if tuple(logits.shape) != (args.seqs, args.seq_len, vocab):
                die(f"unexpected logits shape {tuple(logits.shape)}")
            if not torch.isfinite(logits).all():
                die("non-finite logits")
            del logits
            if rep == 0:
                log(f"warm-up {dt:.3f} s")
            else:
                times.append(dt)
                log(f"rep {rep}/{args.reps}: {dt:.3f} s ({tokens / dt:.1f} tokens/s)")

    med = statistics.median(times)
    out = {
        "mode": "forward",
        **common_info(args),
        "seqs": args.seqs,
        "seq_len": args.seq_len,
        "tokens_per_rep": tokens,
        "seed": args.seed,
        "reps": args.reps,
        "times_s": times,
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "tokens_per_s": tokens / med,
    }
    print(json.dumps(out))


def loss_f64(logits, ids):
    """Token-weighted mean next-token cross-entropy over all sequences, in
    float64: position t predicts token t+1, the last position predicts nothing."""
    lp = torch.log_softmax(logits[:, :-1, :].to(torch.float64), dim=-1)
    nll = -lp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return nll.mean().item()


def run_sweep(args):
    data = np.load(args.data)
    if data.ndim != 2 or data.dtype != np.int32:
        die(f"{args.data}: want int32 [n_seqs, seq_len], got {data.dtype} {data.shape}")
    n_seqs, seq_len = data.shape
    if seq_len < 2:
        die("seq_len must be >= 2 for a next-token loss")
    model = load_model(args.model)
    L, H = model.config.n_layer, model.config.n_head
    vocab = model.config.vocab_size
    if data.min() < 0 or data.max() >= vocab:
        die(f"{args.data}: token ids outside [0, {vocab})")
    if seq_len > model.config.n_positions:
        die(f"seq_len {seq_len} exceeds n_positions {model.config.n_positions}")
    ids = torch.from_numpy(data.astype(np.int64))

    variants = [None] + [(l, h) for l in range(L) for h in range(H)]
    n_total = len(variants)
    if args.limit is not None:
        variants = variants[:args.limit]
    log(f"sweep: {len(variants)} of {n_total} variants on {n_seqs} x {seq_len} tokens, "
        f"{args.threads} thread(s)")

    losses, model_times, max_diff = [], [], 0.0
    check_s = 0.0
    t_loop = time.perf_counter()
    with torch.inference_mode():
        for i, v in enumerate(variants):
            head_mask = torch.ones(L, H)
            if v is not None:
                head_mask[v[0], v[1]] = 0.0
            t0 = time.perf_counter()
            out = model(ids, head_mask=head_mask, labels=ids)
            loss = out.loss.item()
            dt = time.perf_counter() - t0
            model_times.append(dt)

            t1 = time.perf_counter()
            mine = loss_f64(out.logits, ids)
            check_s += time.perf_counter() - t1
            diff = abs(mine - loss)
            max_diff = max(max_diff, diff)
            if not (diff <= 1e-5):
                die(f"variant {i} {v}: HF loss {loss!r} vs float64 loss {mine!r} "
                    f"differ by {diff:.3g} > 1e-5")
            losses.append(mine)
            del out
            name = "baseline" if v is None else f"L{v[0]}H{v[1]}"
            log(f"{i + 1}/{len(variants)} {name}: loss {mine:.9f} ({dt:.3f} s)")
    wall_s = time.perf_counter() - t_loop

    out = {
        "mode": "sweep",
        **common_info(args),
        "data": os.path.abspath(args.data),
        "n_seqs": int(n_seqs),
        "seq_len": int(seq_len),
        "tokens_scored_per_variant": int(n_seqs * (seq_len - 1)),
        "n_layers": L,
        "n_heads": H,
        "variants_total": n_total,
        "variants_run": len(variants),
        "variant_order": "baseline, then (layer, head) layer-major",
        # total_s: wall time of the loop as a user writes it (build the mask,
        # run the model with labels, read the loss), i.e. the loop's wall time
        # minus this script's own float64 cross-check, which is timed apart.
        "total_s": wall_s - check_s,
        "total_wall_incl_check_s": wall_s,
        "check_s": check_s,
        "sum_model_call_s": sum(model_times),
        "per_variant_median_s": statistics.median(model_times),
        "per_variant_min_s": min(model_times),
        "per_variant_max_s": max(model_times),
        "max_abs_diff_hf_vs_f64": max_diff,
        "losses": losses,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    if ARGS.mode == "forward":
        run_forward(ARGS)
    else:
        run_sweep(ARGS)
