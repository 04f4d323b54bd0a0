"""Michel-style pruning curves ranked several ways, in torch from torch's own gradients (docs/gradients.md).

The iterative study's curves on the default model and stories260K (zero ablation, the token-weighted mean loss,
steps of round(10%) of the heads, as headprune's schedule), each point's loss printed, ranked:
  exact            each step, every remaining head's loss when ablated on top (rank: exact);
  importance       each step, raw importance sum_s |dL_s/dxi| at the current mask (rank: gradient);
  importance once  the same at the start only (rank: estimate, estimator: importance);
  ig-layer         each step, integrated gradients a layer's remaining gates together, 2 steps;
  ig-layer once    the same at the start only (rank: estimate, its default);
  atp              each step, -dL/dxi at the current mask.
The gates, model loading and loss are tools/gen_grad_fixtures.py's. Ties go to plan order, as headprune's.

Usage (the reference venv of tools/README.md; ~4 min on 1 thread):
    /work/venv/bin/python bench/curves.py [default|stories260K]
"""
import os
import sys
import numpy as np, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import gen_grad_fixtures as gg

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = {"default": (os.path.join(REPO, "models"), "default", "heldout.npy"),
          "stories260K": (os.path.join(REPO, "tests", "fixtures"), "stories260K", "data.npy")}


class M:
    def __init__(self, key):
        root, name, data = MODELS[key]
        gg.ROOT = root
        self.model, self.arch, self.mods, self.H, self.data = gg.load(name, "causal", data)
        self.L = len(self.mods)
        self.calls = 0

    def run(self, xi, grad=False, per_seq=False):
        gates = gg.Gates(self.mods, self.H)
        try:
            gates.repl = None
            gates.xi = xi.clone().float().requires_grad_()
            gates.ablated = gates.xi.detach() == 0
            logits = gg.forward(self.model, self.arch, self.data)
            if not grad:
                return float(gg.mean_loss("causal", logits, self.data).detach())
            self.calls += 1
            if not per_seq:
                loss = gg.mean_loss("causal", logits, self.data)
                loss.backward()
                return gates.xi.grad.double()
            shares = gg.mean_loss("causal", logits, self.data, per_seq=True)
            out = torch.zeros(self.L, self.H, dtype=torch.float64)
            for s in range(shares.shape[0]):
                (g,) = torch.autograd.grad(shares[s], gates.xi, retain_graph=s + 1 < shares.shape[0])
                out += g.double().abs()
            return out
        finally:
            for hd in gates.handles:
                hd.remove()


def score_exact(m, xi):
    s = torch.full((m.L, m.H), float("inf"), dtype=torch.float64)
    for l in range(m.L):
        for h in range(m.H):
            if xi[l, h] == 1:
                x = xi.clone(); x[l, h] = 0
                s[l, h] = m.run(x)
    return s


def score_importance(m, xi):
    return m.run(xi, grad=True, per_seq=True)


def score_atp(m, xi):
    return -m.run(xi, grad=True)


def score_ig_layer(m, xi, steps=2):
    acc = torch.zeros(m.L, m.H, dtype=torch.float64)
    for l in range(m.L):
        if not (xi[l] == 1).any():
            continue
        for k in range(steps):
            x = xi.clone()
            x[l][xi[l] == 1] = (k + 0.5) / steps
            acc[l] += m.run(x, grad=True)[l]
    return -acc / steps


def curve(m, scorer, once=False):
    n = m.L * m.H
    k = max(1, round(0.1 * n))  # hp_study_schedule's per_step
    xi = torch.ones(m.L, m.H)
    losses = [m.run(xi)]
    s = None
    while int((xi == 1).sum()) > 0:
        alive = xi == 1
        if s is None or not once:
            s = scorer(m, xi)
        cand = torch.where(alive, s, torch.tensor(float("inf"), dtype=torch.float64))
        take = min(k, int(alive.sum()))
        idx = torch.argsort(cand.flatten(), stable=True)[:take]
        xi.view(-1)[idx] = 0
        losses.append(m.run(xi))
    return losses


def main():
    torch.set_num_threads(1)
    for key in sys.argv[1:] or list(MODELS):
        m = M(key)
        n = m.L * m.H
        res = {}
        res["exact"] = curve(m, score_exact)
        for name, f, once in [("importance", score_importance, False), ("importance once", score_importance, True),
                              ("ig-layer", score_ig_layer, False), ("ig-layer once", score_ig_layer, True),
                              ("atp", score_atp, False)]:
            m.calls = 0
            res[name] = curve(m, f, once)
            res[name + " passes"] = m.calls
        ex = np.array(res["exact"])
        half = len(ex) // 2 + 1
        print(f"== {key} ({n} heads)")
        print("  exact        " + " ".join(f"{v:.4f}" for v in ex))
        for name in ["importance", "importance once", "ig-layer", "ig-layer once", "atp"]:
            c = np.array(res[name])
            gap = (c[:half] - ex[:half]) / ex[:half]
            print(f"  {name:16s} passes {res[name + ' passes']:3d} max gap to half {100 * gap.max():+.1f}%  "
                  + " ".join(f"{v:.4f}" for v in c))


if __name__ == "__main__":
    main()
