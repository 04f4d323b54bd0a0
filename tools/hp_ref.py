"""Shared reference machinery for headprune's Python fixtures.

Implements, in PyTorch on top of Hugging Face models, exactly the semantics the
C engine implements: head masks (gate / zero ablation), mean and per-position
mean ablation of a head's slice of the attention output-projection input, and
the metrics (loss, acc, kl, cos) with per-sequence breakdowns.

Used by gen_fixtures.py, convert_stories.py and gen_task_fixtures.py; not a test
of anything by itself.
"""
import json
import math
import os

import numpy as np
import torch
from safetensors.torch import save_file

# ---------------------------------------------------------------- mask specs


def parse_mask(spec, n_layers, n_heads, n_kv_heads=None, keep=False):
    """headprune mask spec -> gate (n_layers, n_heads) float32, 1 kept / 0 ablated.

    Comma-separated "L.H", "L.*" (whole layer), "kv:L.G" (every query head h of
    layer L with h // (n_heads / n_kv_heads) == G). Empty spec = nothing ablated
    (with keep=True: the named heads are kept, all others ablated)."""
    if n_kv_heads is None:
        n_kv_heads = n_heads
    named = torch.zeros(n_layers, n_heads, dtype=torch.bool)
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item.startswith("kv:"):
            l, g = item[3:].split(".")
            l, g = int(l), int(g)
            group = n_heads // n_kv_heads
            assert 0 <= l < n_layers and 0 <= g < n_kv_heads, item
            for h in range(n_heads):
                if h // group == g:
                    named[l, h] = True
        else:
            l, h = item.split(".")
            l = int(l)
            assert 0 <= l < n_layers, item
            if h == "*":
                named[l, :] = True
            else:
                h = int(h)
                assert 0 <= h < n_heads, item
                named[l, h] = True
    gate = named.float() if keep else (~named).float()
    return gate


def gate_to_spec(gate):
    """Explicit list "L.H,..." of the ablated heads of a gate."""
    return ",".join(f"{l}.{h}" for l in range(gate.shape[0]) for h in range(gate.shape[1])
                    if gate[l, h] == 0)


# ---------------------------------------------------------------- hooks


def out_projections(model):
    """The module of every layer whose input is the heads' outputs side by side, and its family's word for
    the model: (modules, "gpt2" | "bert" | "neox" | "llama"). GPT-2 attn.c_proj, BERT
    attention.output.dense, GPT-NeoX attention.dense, the Llama family's self_attn.o_proj."""
    if hasattr(model, "transformer"):
        return [b.attn.c_proj for b in model.transformer.h], "gpt2"
    if hasattr(model, "gpt_neox"):
        return [lay.attention.dense for lay in model.gpt_neox.layers], "neox"
    enc = getattr(model, "encoder", None) or (model.bert.encoder if hasattr(model, "bert") else None)
    if enc is not None:
        return [lay.attention.output.dense for lay in enc.layer], "bert"
    return [lay.self_attn.o_proj for lay in model.model.layers], "llama"


class HeadAblator:
    """Forward pre-hooks on every layer's attention output projection.

    modules[l] is the module whose input is the concatenation of the heads'
    attention outputs (out_projections: GPT-2 attn.c_proj, BERT attention.output.dense,
    GPT-NeoX attention.dense, Llama/Qwen2 self_attn.o_proj); head h is the slice [h*d_head, (h+1)*d_head).

    mode None: pass-through. mode "record": keep a copy of every input.
    mode "apply": ablated heads' slices are replaced by 0 ("zero"), by the
    replacement vectors computed with set_means() ("mean", "mean_pos"), or by
    another run's inputs ("patch": repl[l] is a recorded (B, T, D) input of
    layer l, e.g. the same batch's corrupt prompts; with positions a list of
    token positions, only those are replaced).
    """

    def __init__(self, modules, n_heads, d_head):
        self.modules = list(modules)
        self.n_heads = n_heads
        self.d_head = d_head
        self.mode = None
        self.recorded = [None] * len(self.modules)
        self.gate = None
        self.ablation = "zero"
        self.repl = None
        self.positions = None
        self.handles = [m.register_forward_pre_hook(self._hook(i)) for i, m in enumerate(self.modules)]

    def remove(self):
        for h in self.handles:
            h.remove()

    def _hook(self, layer):
        def hook(module, args):
            x = args[0]
            if self.mode == "record":
                self.recorded[layer] = x.detach().clone()
                return None
            if self.mode != "apply":
                return None
            g = self.gate[layer]
            if bool((g != 0).all()):
                return None
            x = x.clone()
            for h in range(self.n_heads):
                if g[h] != 0:
                    continue
                sl = slice(h * self.d_head, (h + 1) * self.d_head)
                if self.ablation == "zero":
                    x[..., sl] = 0.0
                elif self.ablation == "mean":
                    x[..., sl] = self.repl[layer][sl].to(x.dtype)
                elif self.ablation == "mean_pos":
                    T = x.shape[1]
                    x[..., sl] = self.repl[layer][:T, sl].to(x.dtype).unsqueeze(0)
                elif self.ablation == "patch":
                    src = self.repl[layer][..., sl].to(x.dtype)
                    assert src.shape == x[..., sl].shape, (src.shape, x.shape)
                    if self.positions is None:
                        x[..., sl] = src
                    else:
                        x[:, self.positions, sl] = src[:, self.positions]
                else:
                    raise ValueError(self.ablation)
            return (x,) + tuple(args[1:])
        return hook

    def set_means(self, attn_mask, ablation):
        """From the recorded (clean) inputs: means over real tokens.

        attn_mask (B, T) with 1 = real token. "mean": one vector (D,) per layer,
        averaged over all real tokens of all sequences. "mean_pos": (T, D) per
        layer, at each position averaged over the sequences where it is real
        (positions with no real token get 0). Accumulated in float64."""
        m = attn_mask.double()
        self.repl = []
        for x in self.recorded:
            x = x.double()
            if ablation == "mean":
                r = (x * m[..., None]).sum(dim=(0, 1)) / m.sum()
            elif ablation == "mean_pos":
                cnt = m.sum(dim=0)
                r = (x * m[..., None]).sum(dim=0) / cnt.clamp(min=1)[:, None]
                r[cnt == 0] = 0.0
            else:
                raise ValueError(ablation)
            self.repl.append(r.float())


# ---------------------------------------------------------------- metrics


def lm_metrics(logits_m, logits_u, targets, weight):
    """Token-weighted loss / acc / kl from masked and unmasked logits.

    logits (B, T, V) float32 aligned with targets (B, T) and weight (B, T) bool:
    position t of sequence b counts iff weight[b, t]; it predicts targets[b, t]."""
    w = weight.double()
    tgt = targets.clamp(min=0).long()
    lpm = torch.log_softmax(logits_m.double(), dim=-1)
    lpu = torch.log_softmax(logits_u.double(), dim=-1)
    ce = -lpm.gather(-1, tgt[..., None])[..., 0]
    hit = (logits_m.argmax(dim=-1) == tgt).double()
    kl = (lpu.exp() * (lpu - lpm)).sum(dim=-1)
    n_seq = w.sum(dim=1)
    n = w.sum()
    out = {
        "loss": float((ce * w).sum() / n),
        "acc": float((hit * w).sum() / n),
        "kl": float((kl * w).sum() / n),
        "n_tokens": int(n),
        "per_seq_loss": ((ce * w).sum(dim=1) / n_seq).tolist(),
        "per_seq_acc": ((hit * w).sum(dim=1) / n_seq).tolist(),
        "per_seq_kl": ((kl * w).sum(dim=1) / n_seq).tolist(),
        "per_seq_tokens": [int(v) for v in n_seq.tolist()],
    }
    assert all(v > 0 for v in out["per_seq_tokens"]), "a sequence has no scored tokens"
    return out


def causal_metrics(logits_m, logits_u, ids, attn_mask=None):
    """Position t predicts ids[t+1], t = 0..T-2 (only where mask[t+1] == 1)."""
    w = torch.ones_like(ids[:, 1:], dtype=torch.bool) if attn_mask is None else attn_mask[:, 1:].bool()
    return lm_metrics(logits_m[:, :-1], logits_u[:, :-1], ids[:, 1:], w)


def mlm_metrics(logits_m, logits_u, labels):
    return lm_metrics(logits_m, logits_u, labels, labels != -100)


def cos_metrics(h_m, h_u, attn_mask):
    """Mean over sequences of cosine(meanpool(h_u), meanpool(h_m)), float64."""
    m = attn_mask.double()[..., None]
    pu = (h_u.double() * m).sum(dim=1) / m.sum(dim=1)
    pm = (h_m.double() * m).sum(dim=1) / m.sum(dim=1)
    c = (pu * pm).sum(-1) / (pu.norm(dim=-1) * pm.norm(dim=-1))
    return {
        "cos": float(c.mean()),
        "n_tokens": int(attn_mask.sum()),
        "per_seq_cos": c.tolist(),
        "per_seq_tokens": [int(v) for v in attn_mask.sum(dim=1).tolist()],
    }


# ---------------------------------------------------------------- writing


def write_reference(dirpath, meta, cases, outputs):
    """reference.json (meta + cases) and reference.safetensors (outputs: name -> tensor)."""
    ref = dict(meta)
    ref["cases"] = cases
    with open(os.path.join(dirpath, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    save_file({k: v.detach().float().contiguous() for k, v in outputs.items()},
              os.path.join(dirpath, "reference.safetensors"))


def tidy_perms(path):
    """safetensors writes files 0600; make a fixture directory world-readable."""
    for root, _, files in os.walk(path):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)


def dir_size(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def fmt_case(c):
    if "loss" in c:
        return f"loss={c['loss']:.6f} acc={c['acc']:.4f} kl={c['kl']:.6f}"
    return f"cos={c['cos']:.6f}"


def rel_change(c0, c):
    if "loss" in c:
        return abs(c["loss"] - c0["loss"]) / abs(c0["loss"])
    return 1.0 - c["cos"]


def isfinite_case(c):
    return all(math.isfinite(v) for k, v in c.items() if isinstance(v, float))
