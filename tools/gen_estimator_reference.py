"""Reference first-order estimators of each head's single-ablation effect, from torch autograd.

For gpt2-tiny and llama-gqa under tests/fixtures/, writes <fixture>/estimators.json:
per unit, the exact effect of ablating it alone and several estimates of it,
for the C tests of the attribution study's estimators to compare against.

Ablation is zero ablation and the metric the mean loss L (causal LM, the
token-weighted mean cross-entropy), exactly as grad.json's case "none" computes
it: the model, data.npy, the gate ξ per (layer, query head) on the head's slice
of the attention output projection's input (a forward pre-hook) and the loss
are those of gen_grad_fixtures.py, imported from it. g(ξ) = dL/dξ at gates ξ.

Units: "heads", each query head; "kv" (llama-gqa only), each KV group u of a
layer, whose one gate is shared by its consecutive query heads h in
[u*w, (u+1)*w), w = n_heads / n_kv_heads. At a mask where a group's heads move
together, the unit's gradient is the sum of its heads' gradients.
  - exact:      L(unit's gates = 0, all others 1) - L(all gates 1), forward passes;
  - atp:        -g_unit(all ones);
  - importance: sum over sequences s of |g_{s,unit}(all ones)|, g_s sequence s's
                share of the gradient (its own summed loss divided by the scored
                tokens of the whole set; the shares sum to g): gen_grad_fixtures'
                seq_grad of case "none", by its own run_case;
  - ig:         integrated gradients along the joint path, midpoint rule:
                -(1/steps) * sum_{k<steps} g_unit(all gates = t_k), t_k = (k + 0.5) / steps;
  - ig-layer:   the same with only the unit's layer l on the path:
                -(1/steps) * sum_k g_unit(layer l's gates = t_k, other layers' gates 1);
ig and ig-layer for steps 1, 2 and 4.

Output, arrays [n_layers][n_units]:
  {"model", "tool", "torch", "transformers", "ablation": "zero", "metric": "loss",
   "value": L(ones), "units": {"heads": {"exact", "atp", "importance",
   "ig": {"1", "2", "4"}, "ig-layer": {"1", "2", "4"}}, "kv": {...}}}

Checks (printed, and asserted where they must hold): g(ones) and atp against
grad.json's case "none" (grad, atp; max |diff|), L(ones) against its value;
completeness, printed only: the sum over all units of ig with 64 steps against
L(all gates 0) - L(ones), and per layer the sum of ig-layer (64 steps) against
L(layer's gates 0) - L(ones); and each estimator's Spearman correlation with exact.

Usage (from the repository root; torch 2.x, transformers<5):
    /work/venv/bin/python tools/gen_estimator_reference.py            # both fixtures
    /work/venv/bin/python tools/gen_estimator_reference.py llama-gqa  # one
Deterministic (one torch thread, float32 models, float64 loss).
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_grad_fixtures as gg  # noqa: E402

FIXTURES = ["gpt2-tiny", "llama-gqa"]
STEPS = [1, 2, 4]
COMPLETENESS_STEPS = 64


class Model:
    """A fixture's model with gen_grad_fixtures' gate hook: L and g at any gate matrix."""

    def __init__(self, name):
        self.name = name
        self.kind, self.data_file, _ = gg.FIXTURES[name]
        self.model, self.arch, self.mods, self.H, self.data = gg.load(name, self.kind, self.data_file)
        self.L = len(self.mods)
        cfg = json.load(open(os.path.join(gg.ROOT, name, "config.json")))
        self.KV = cfg.get("num_key_value_heads", self.H)

    def loss_grad(self, xi):
        """(L(ξ), g(ξ)) under zero ablation: float, (L, H) float64."""
        gates = gg.Gates(self.mods, self.H)
        try:
            gates.repl = None
            gates.xi = xi.clone().float().requires_grad_()
            gates.ablated = gates.xi.detach() == 0
            loss = gg.mean_loss(self.kind, gg.forward(self.model, self.arch, self.data), self.data)
            loss.backward()
            return float(loss.detach()), gates.xi.grad.double()
        finally:
            for hd in gates.handles:
                hd.remove()

    def loss(self, xi):
        return self.loss_grad(xi)[0]

    def ones(self):
        return torch.ones(self.L, self.H)


def to_units(per_head, w):
    """(..., L, H) head values -> (..., L, H / w): the sum over each group's w heads."""
    return per_head.reshape(*per_head.shape[:-1], per_head.shape[-1] // w, w).sum(-1)


def estimators(m, w, grad1, seq_grad):
    """Every estimator for units of w consecutive heads (w = 1: the heads)."""
    L, U = m.L, m.H // w
    base = m.loss(m.ones())
    exact = torch.zeros(L, U, dtype=torch.float64)
    for l in range(L):
        for u in range(U):
            xi = m.ones()
            xi[l, u * w:(u + 1) * w] = 0
            exact[l, u] = m.loss(xi) - base
    out = {"exact": exact, "atp": -to_units(grad1, w),
           "importance": to_units(seq_grad, w).abs().sum(0), "ig": {}, "ig-layer": {}}
    for steps in STEPS:
        out["ig"][str(steps)] = ig_joint(m, w, steps)
        out["ig-layer"][str(steps)] = ig_layer(m, w, steps)
    return out


def ig_joint(m, w, steps):
    acc = torch.zeros(m.L, m.H, dtype=torch.float64)
    for k in range(steps):
        acc += m.loss_grad(torch.full((m.L, m.H), (k + 0.5) / steps))[1]
    return -to_units(acc, w) / steps


def ig_layer(m, w, steps):
    acc = torch.zeros(m.L, m.H, dtype=torch.float64)
    for l in range(m.L):
        for k in range(steps):
            xi = m.ones()
            xi[l] = (k + 0.5) / steps
            acc[l] += m.loss_grad(xi)[1][l]
    return -to_units(acc, w) / steps


def spearman(a, b):
    def rank(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        for v in np.unique(x):          # ties: the average rank
            r[x == v] = r[x == v].mean()
        return r
    ra, rb = rank(np.asarray(a).ravel()), rank(np.asarray(b).ravel())
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def tolist(v):
    return {k: tolist(x) for k, x in v.items()} if isinstance(v, dict) else v.tolist()


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name in sys.argv[1:] or FIXTURES:
        m = Model(name)
        # case "none" by gen_grad_fixtures' own code path: g, atp (from ctx) and the sequences' shares
        value, _, grad_n, atp_n, _, seq_grad = gg.run_case(m.model, m.arch, m.mods, m.H, m.data, m.kind,
                                                           "", {}, "zero", "loss")
        value1, grad1 = m.loss_grad(m.ones())
        assert torch.equal(grad1, grad_n) and value1 == value
        ref = next(c for c in json.load(open(os.path.join(gg.ROOT, name, "grad.json")))["cases"]
                   if c["name"] == "none")
        d_grad = float((grad1 - torch.tensor(ref["grad"], dtype=torch.float64)).abs().max())
        d_atp = float((-grad1 - torch.tensor(ref["atp"], dtype=torch.float64)).abs().max())
        d_atp_ctx = float((-grad1 - atp_n).abs().max())
        d_seq = float((seq_grad - torch.tensor(ref["seq_grad"], dtype=torch.float64)).abs().max())
        d_val = abs(value - ref["value"])
        print(f"{name}: L(ones) {value:.9f}  vs grad.json none: |dvalue| {d_val:.2g}  max|dgrad| {d_grad:.2g}"
              f"  max|datp| {d_atp:.2g}  max|dseq_grad| {d_seq:.2g}  (-g vs ctx atp {d_atp_ctx:.2g})")
        assert max(d_grad, d_atp, d_seq) < 1e-5 and d_val < 1e-6

        widths = {"heads": 1}
        if m.KV != m.H:
            widths["kv"] = m.H // m.KV
        units = {}
        for uname, w in widths.items():
            est = estimators(m, w, grad1, seq_grad)
            units[uname] = tolist(est)
            ex = est["exact"].numpy()
            rho = {"atp": spearman(est["atp"], ex), "importance": spearman(est["importance"], ex),
                   "importance~|exact|": spearman(est["importance"], np.abs(ex))}
            for kind in ("ig", "ig-layer"):
                for s, v in est[kind].items():
                    rho[f"{kind}/{s}"] = spearman(v, ex)
            print(f"  {uname:5s} Spearman vs exact: " + "  ".join(f"{k} {v:+.3f}" for k, v in rho.items()))

        # completeness (printed, not asserted): the path's integral of g is the change of L
        S = COMPLETENESS_STEPS
        ig64 = ig_joint(m, 1, S)
        full = m.loss(torch.zeros(m.L, m.H)) - value
        print(f"  completeness ig/{S}: sum {float(ig64.sum()):.9f}  L(zeros)-L(ones) {full:.9f}"
              f"  gap {float(ig64.sum()) - full:+.3g}")
        igl64 = ig_layer(m, 1, S)
        for l in range(m.L):
            xi = m.ones()
            xi[l] = 0
            dl = m.loss(xi) - value
            print(f"  completeness ig-layer/{S} layer {l}: sum {float(igl64[l].sum()):.9f}"
                  f"  L(layer 0)-L(ones) {dl:.9f}  gap {float(igl64[l].sum()) - dl:+.3g}")

        out = {"model": name, "tool": "tools/gen_estimator_reference.py", "torch": torch.__version__,
               "transformers": __import__("transformers").__version__, "ablation": "zero", "metric": "loss",
               "value": value, "units": units}
        path = os.path.join(gg.ROOT, name, "estimators.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        print(f"  wrote {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
