"""Reference gradients of the metrics at the head gates, from torch autograd.

For committed fixtures under tests/fixtures/, writes <fixture>/grad.json: the
gradient dL/dξ of a case's metric L with respect to a gate ξ per (layer, query
head), where L is one of headprune's metrics signed as damage:
  - "loss": the mean loss (causal LM, MLM over labelled positions, or a
    classifier's cross-entropy);
  - "kl": the mean over the same items of KL(unmasked || gated), the
    unmasked model's distribution a constant (its forward without gates);
  - "cos" (an encoder without a head): 1 - the mean over sequences of the
    cosine between the mean-pooled final hidden states (over real tokens)
    of the gated and the unmasked model;
with respect to a
gate ξ per (layer, query head) that multiplies the head's output where the
attention output projection reads it, for a few gate settings and ablations,
and the first-order estimate of each head's ablation effect (atp).

Two ways of gating, so the reference does not rest on one:
  - GPT-2 and BERT: Hugging Face's own head_mask (it multiplies the attention
    probabilities, which is the same as multiplying the head's output) with
    requires_grad, for zero ablation; the pre-hook below must agree with it
    (checked, max |diff| printed);
  - every model: a forward pre-hook on the output projection (GPT-2
    attn.c_proj, BERT attention.output.dense, GPT-NeoX attention.dense, Llama/Qwen2 self_attn.o_proj)
    replacing head h's slice a_h by
        ξ_h a_h                  (a head not ablated, ξ_h != 0),
        r_h + ξ_h (a_h - r_h)    (an ablated head, ξ_h = 0; r_h = 0 or its mean),
    with ξ a leaf tensor requiring grad. For zero ablation both lines are
    ξ_h a_h; under mean ablation the second is the path from the mean back to
    the head (the forward itself jumps to the mean at 0).
atp_h = <dL/dctx_h, r_h - ctx_h> summed over tokens, with ctx_h the slice
the projection reads (its gradient taken by autograd) and r_h the
replacement: the first-order change of the loss were h alone replaced.
seq_grad[s] is sequence s's share of the gradient: that of its own summed
loss divided by what the mean divides by (the scored tokens of the whole
set, or the sequences of a classifier), each by a backward of its own
(sequences do not interact: the means of mean ablation are constants), so
the shares sum to grad. The plan's `importance` study reads them.

Usage (from the repository root; torch 2.x, transformers<5):
    /work/venv/bin/python tools/gen_grad_fixtures.py            # every fixture below
    /work/venv/bin/python tools/gen_grad_fixtures.py gpt2-tiny  # one
Deterministic (one torch thread, float32 models, float64 loss).
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import (AutoModelForCausalLM, BertForMaskedLM,
                          BertForSequenceClassification, BertModel)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hp_ref  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")

# fixture -> (kind, data file, cases: (name, ablated spec, {(l, h): fractional gate}, ablation[, metric]))
# KL and 1 - cos have no case at the unmasked model: their gradient there is 0 (test_grad.c checks
# that exactly), and torch's rounding noise around 0 is no reference.
PARTIAL = [("none", "", {}, "zero"),
           ("partial", "0.1,1.2", {}, "zero"),
           ("fractional", "0.1", {(1, 0): 0.5, (1, 3): 0.25}, "zero")]
KL = [("kl_partial", "0.1,1.2", {}, "zero", "kl"),
      ("kl_fractional", "0.1", {(1, 0): 0.5, (1, 3): 0.25}, "zero", "kl")]
FIXTURES = {
    "gpt2-tiny": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean"),
                                                    ("mean_pos", "0.1,2.2", {}, "mean_pos")]
                  + KL + [("kl_mean", "0.1,2.2", {(1, 0): 0.5}, "mean", "kl")]),
    "llama-gqa": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")]
                  + KL + [("kl_mean", "0.1,2.2", {(1, 0): 0.5}, "mean", "kl")]),
    "qwen2-bias": ("causal", "data.npy", PARTIAL + KL[:1]),
    "qwen3-qknorm": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")] + KL),
    "phi3-fused": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")] + KL),
    "neox-parallel": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")] + KL),
    "olmo2-post-norms": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")] + KL),
    "gemma2-softcap": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")] + KL),
    "gemma3-local": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")] + KL),
    "neox-sequential": ("causal", "data.npy", PARTIAL + [("mean", "0.1,2.2", {(1, 0): 0.5}, "mean")] + KL[:1]),
    "gpt2-untied": ("causal", "data.npy", PARTIAL + KL[:1]),
    "llama-mlp-bias": ("causal", "data.npy", PARTIAL + [("mean", "0.1,1.2", {(1, 0): 0.5}, "mean")] + KL[:1]),
    "gpt2-vocab": ("causal", "data.npy", PARTIAL + KL[:1]),
    "stories260K": ("causal", "data.npy", [("none", "", {}, "zero"), ("partial", "0.1,2.*,4.7", {(1, 3): 0.5}, "zero"),
                                           ("mean", "0.1,2.5", {}, "mean"),
                                           ("kl_partial", "0.1,2.*,4.7", {(1, 3): 0.5}, "zero", "kl")]),
    "bert-mlm": ("mlm", "data.jsonl", PARTIAL + [("mean", "0.1", {(1, 2): 0.5}, "mean")] + KL),
    "bert-cls": ("cls", "data.jsonl", PARTIAL + KL),
    "bert-encoder": ("enc", "data.jsonl", [("cos_partial", "0.1,1.2", {}, "zero", "cos"),
                                           ("cos_fractional", "0.1", {(1, 0): 0.5, (1, 3): 0.25}, "zero", "cos"),
                                           ("cos_mean", "0.1", {(1, 2): 0.5}, "mean", "cos")]),
}


def load(name, kind, data_file):
    d = os.path.join(ROOT, name)
    cfg = json.load(open(os.path.join(d, "config.json")))
    cls = {"mlm": BertForMaskedLM, "cls": BertForSequenceClassification, "enc": BertModel}.get(kind,
                                                                                                AutoModelForCausalLM)
    model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    for p in model.parameters():
        p.requires_grad_(False)
    path = os.path.join(d, data_file)
    if path.endswith(".npy"):
        data = {"ids": torch.from_numpy(np.load(path).astype(np.int64))}
    else:
        rows = [json.loads(line) for line in open(path) if line.strip()]
        data = {"ids": torch.tensor([r["ids"] for r in rows])}
        for k in ("labels", "attention_mask", "token_type_ids"):
            if k in rows[0]:
                data[k] = torch.tensor([r[k] for r in rows])
        if "label" in rows[0]:
            data["label"] = torch.tensor([r["label"] for r in rows])
    arch = cfg["model_type"]
    mods, _ = hp_ref.out_projections(model)
    H = cfg["n_head"] if arch == "gpt2" else cfg["num_attention_heads"]
    return model, arch, mods, H, data


class Gates:
    """The pre-hook gate of every head (see the docstring); keeps ctx for atp."""

    def __init__(self, mods, n_heads):
        self.mods, self.H = mods, n_heads
        self.xi = None          # (L, H) leaf, requires grad
        self.ablated = None     # (L, H) bool
        self.repl = None        # per layer: None (zero), (D,) or (T, D)
        self.record = False
        self.recorded = [None] * len(mods)
        self.ctx = [None] * len(mods)
        self.handles = [m.register_forward_pre_hook(self._hook(l)) for l, m in enumerate(mods)]

    def _hook(self, l):
        def hook(module, args):
            x = args[0]
            if self.record:
                self.recorded[l] = x.detach().clone()
                return None
            if self.xi is None:
                return None
            B, T, D = x.shape
            dh = D // self.H
            a = x.view(B, T, self.H, dh)
            if self.repl is None:
                r = torch.zeros_like(a)
            else:
                r = self.repl[l]
                r = (r[:T] if r.dim() == 2 else r).reshape(-1, T if r.dim() == 2 else 1, self.H, dh)
                r = r.expand(B, T, self.H, dh)
            xi = self.xi[l].view(1, 1, self.H, 1)
            abl = self.ablated[l].view(1, 1, self.H, 1)
            out = torch.where(abl, r + xi * (a - r), xi * a).reshape(B, T, D)
            out.retain_grad()
            self.ctx[l] = (out, r.reshape(B, T, D))
            return (out,) + tuple(args[1:])
        return hook


def forward(model, arch, data, head_mask=None):
    kw = {"input_ids": data["ids"]}
    if arch == "bert":
        kw["attention_mask"] = data["attention_mask"]
        if "token_type_ids" in data:
            kw["token_type_ids"] = data["token_type_ids"]
    if head_mask is not None:
        kw["head_mask"] = head_mask
    out = model(**kw)
    return out.last_hidden_state if isinstance(model, BertModel) else out.logits


def objective(kind, metric, out, base, data, per_seq=False):
    """The case's metric as damage (float64) from the gated model's outputs and the
    unmasked model's (base, a constant); per_seq: each sequence's share, (B,)."""
    if metric == "loss":
        return mean_loss(kind, out, data, per_seq)
    if metric == "cos":
        m = data["attention_mask"].double()[..., None]
        e, eb = (out.double() * m).sum(1) / m.sum(1), (base.double() * m).sum(1) / m.sum(1)
        c = 1 - torch.nn.functional.cosine_similarity(e, eb, dim=-1, eps=0)
        return c / c.shape[0] if per_seq else c.mean()
    lp, lb = torch.log_softmax(out.double(), dim=-1), torch.log_softmax(base.double(), dim=-1)
    kl = (lb.exp() * (lb - lp)).sum(-1)
    if kind == "cls":
        return kl / kl.shape[0] if per_seq else kl.mean()
    if kind == "causal":
        kl = kl[:, :-1]
        w = torch.ones_like(kl, dtype=torch.bool)
    else:
        w = data["labels"] != -100
    if per_seq:
        return (kl * w).sum(dim=1) / w.sum()
    return (kl * w).sum() / w.sum()


def mean_loss(kind, logits, data, per_seq=False):
    """The token-weighted mean cross-entropy (float64), as headprune's metric "loss";
    per_seq: each sequence's share of it instead, (B,), summing to it."""
    lp = torch.log_softmax(logits.double(), dim=-1)
    if kind == "cls":
        ce = -lp.gather(-1, data["label"][:, None])[:, 0]
        return ce / ce.shape[0] if per_seq else ce.mean()
    if kind == "causal":
        lp, tgt = lp[:, :-1], data["ids"][:, 1:]
        w = torch.ones_like(tgt, dtype=torch.bool)
    else:
        tgt = data["labels"]
        w = tgt != -100
    ce = -lp.gather(-1, tgt.clamp(min=0)[..., None])[..., 0]
    if per_seq:
        return (ce * w).sum(dim=1) / w.sum()
    return (ce * w).sum() / w.sum()


def gate_matrix(spec, fractions, L, H):
    g = hp_ref.parse_mask(spec, L, H)
    for (l, h), v in fractions.items():
        g[l, h] = v
    return g


def means(gates, model, arch, data, kind, ablation):
    gates.record, gates.xi = True, None
    with torch.no_grad():
        forward(model, arch, data)
    gates.record = False
    real = data.get("attention_mask", torch.ones_like(data["ids"]))
    m = real.double()
    out = []
    for x in gates.recorded:
        x = x.double()
        if ablation == "mean":
            r = (x * m[..., None]).sum(dim=(0, 1)) / m.sum()
        else:
            cnt = m.sum(dim=0)
            r = (x * m[..., None]).sum(dim=0) / cnt.clamp(min=1)[:, None]
        out.append(r.float())
    return out


def run_case(model, arch, mods, H, data, kind, spec, fractions, ablation, metric):
    L = len(mods)
    g = gate_matrix(spec, fractions, L, H)
    gates = Gates(mods, H)
    try:
        with torch.no_grad():
            base = forward(model, arch, data)  # the unmasked model: no gates yet
        gates.repl = None if ablation == "zero" else means(gates, model, arch, data, kind, ablation)
        gates.xi = g.clone().requires_grad_()
        gates.ablated = g == 0
        loss = objective(kind, metric, forward(model, arch, data), base, data)
        loss.backward()
        grad = gates.xi.grad.double()
        # each sequence's share, by a backward of its own
        gates.xi = g.clone().requires_grad_()
        shares = objective(kind, metric, forward(model, arch, data), base, data, per_seq=True)
        seq_grad = []
        for s in range(shares.shape[0]):
            (gs,) = torch.autograd.grad(shares[s], gates.xi, retain_graph=s + 1 < shares.shape[0])
            seq_grad.append(gs.double())
        seq_grad = torch.stack(seq_grad)
        assert float((seq_grad.sum(dim=0) - grad).abs().max()) <= 1e-6 * max(1.0, float(grad.abs().max()))
        gates.xi = g.clone().requires_grad_()
        loss = objective(kind, metric, forward(model, arch, data), base, data)
        loss.backward()
        assert torch.equal(gates.xi.grad.double(), grad)
        atp = torch.zeros(L, H, dtype=torch.float64)
        for l, (out, r) in enumerate(gates.ctx):
            B, T, D = out.shape
            dh = D // H
            diff = (r - out.detach()).double().view(B, T, H, dh) * out.grad.double().view(B, T, H, dh)
            atp[l] = diff.sum(dim=(0, 1, 3))
        atp[g == 0] = 0.0
        check = None
        if ablation == "zero" and arch in ("gpt2", "bert"):
            # Hugging Face's own head_mask, with requires_grad, must agree with the hook
            gates.xi = None
            hm = g.clone().requires_grad_()
            l2 = objective(kind, metric, forward(model, arch, data, head_mask=hm), base, data)
            l2.backward()
            check = float((hm.grad.double() - grad).abs().max())
            assert check <= 1e-6 * max(1.0, float(grad.abs().max())), f"head_mask and hook disagree: {check}"
            assert abs(l2.item() - loss.item()) < 1e-9
        return float(loss.detach()), g, grad, atp, check, seq_grad
    finally:
        for hd in gates.handles:
            hd.remove()


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    names = sys.argv[1:] or list(FIXTURES)
    for name in names:
        kind, data_file, cases = FIXTURES[name]
        model, arch, mods, H, data = load(name, kind, data_file)
        out = {"model": name, "data": data_file, "kind": kind, "n_layers": len(mods), "n_heads": H,
               "tool": "tools/gen_grad_fixtures.py", "torch": torch.__version__,
               "transformers": __import__("transformers").__version__, "cases": []}
        for case in cases:
            cname, spec, fr, abl = case[:4]
            metric = case[4] if len(case) > 4 else "loss"
            loss, g, grad, atp, check, seq_grad = run_case(model, arch, mods, H, data, kind, spec, fr, abl, metric)
            out["cases"].append({"name": cname, "mask": spec, "gates": g.tolist(), "ablation": abl.replace("_", "-"),
                                 "metric": metric, "value": loss, "grad": grad.tolist(), "atp": atp.tolist(),
                                 "seq_grad": seq_grad.tolist()})
            print(f"{name:12s} {cname:10s} loss {loss:.6f} max|grad| {float(grad.abs().max()):.4g}"
                  + (f"  head_mask vs hook max|diff| {check:.2g}" if check is not None else ""))
        with open(os.path.join(ROOT, name, "grad.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
