"""Two first-order estimators from the literature against exact single-head effects, in torch (docs/gradients.md).

Neither is built into headprune: measured here, neither ranks heads better than the estimators it has. For each
model, the exact effect of every head ablated alone (zero ablation, the token-weighted mean loss, the gates of
tools/gen_grad_fixtures.py) and, Spearman rho and top-10% overlap against it:
  atp, importance, ig-layer/2      headprune's own (a check: they reproduce its numbers);
  graddrop                         AtP*'s GradDrop (Kramar et al. 2024, arXiv 2403.00745): for each layer l a
                                   backward with the gradient through layer l's attention and MLP outputs zeroed
                                   (every path through l dropped); AtP under each, then the mean over l of |.|
                                   (the paper's, / (L - 1)), the signed mean, and per sequence sum_s |.|;
  relp                             RelP-style (arXiv 2508.21258): AtP with the backward of layer-wise relevance
                                   propagation made by detaching, the forward unchanged: norms' scale (LN-rule),
                                   attention probabilities (AH-rule), the activation's ratio act(x)/x (identity
                                   rule) and, in a gated MLP, half of each factor's gradient (half rule); each rule
                                   alone and together, signed and per sequence |.|.
Models: the default model (models/default, heldout.npy), stories260K (tests/fixtures/stories260K, data.npy) and,
with --smollm2, SmolLM2-135M-Instruct from models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/get-smollm2.sh),
dequantized by transformers' GGUF loader into /tmp/smollm2-hf with the token rows headprune makes of
bench/screen-heldout.txt (seq_len 64, the file's own tokenizer), as bench/estimators-smollm2.yaml reads them.

Usage (the reference venv of tools/README.md, plus `gguf` and `accelerate` for --smollm2; build/headprune built):
    /work/venv/bin/python bench/estimators_literature.py                 # default, stories260K: ~2 min
    /work/venv/bin/python bench/estimators_literature.py --smollm2       # SmolLM2 alone: ~25 min on 2 threads
"""
import contextlib
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(REPO, "tools"))
import gen_grad_fixtures as gg  # noqa: E402
import gen_estimator_reference as ger  # noqa: E402

MODELS = {"default": (os.path.join(REPO, "models"), "default", "heldout.npy"),
          "stories260K": (os.path.join(REPO, "tests", "fixtures"), "stories260K", "data.npy"),
          "smollm2": ("/tmp", "smollm2-hf", "data.npy")}


def make_smollm2():
    """/tmp/smollm2-hf: the GGUF dequantized by transformers, and headprune's rows of screen-heldout.txt."""
    from transformers import AutoModelForCausalLM
    gguf = os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf),
                                             dtype=torch.float32)
    m.save_pretrained("/tmp/smollm2-hf")
    with tempfile.TemporaryDirectory() as cache:
        subprocess.run([os.path.join(REPO, "build", "headprune"), "eval", "--model", gguf, "--data",
                        os.path.join(HERE, "screen-heldout.txt"), "--seq-len", "64"],
                       env=dict(os.environ, HP_CACHE_DIR=cache), check=True, capture_output=True)
        tok = os.path.join(cache, "tokens")
        (name,) = os.listdir(tok)
        raw = open(os.path.join(tok, name), "rb").read()
    # the cache's HPTOK3 header: magic, rows, seq_len, then 20 bytes headprune's own; int32 ids after it
    assert raw[:6] == b"HPTOK3"
    rows, seq = np.frombuffer(raw[8:16], dtype=np.int32)
    ids = np.frombuffer(raw[36:], dtype=np.int32).reshape(rows, seq)
    np.save("/tmp/smollm2-hf/data.npy", ids.astype(np.int64))


class GradBlock(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return torch.zeros_like(g)


def blocks(model, arch):
    if arch == "gpt2":
        return [(b.attn, b.mlp) for b in model.transformer.h]
    return [(b.self_attn, b.mlp) for b in model.model.layers]


class M:
    def __init__(self, key):
        root, name, data = MODELS[key]
        gg.ROOT = root
        self.model, self.arch, self.mods, self.H, self.data = gg.load(name, "causal", data)
        self.L = len(self.mods)
        self.drop = None
        for l, (att, mlp) in enumerate(blocks(self.model, self.arch)):
            att.register_forward_hook(self._drop_hook(l))
            mlp.register_forward_hook(self._drop_hook(l))

    def _drop_hook(self, l):
        def hook(mod, args, out):
            if self.drop != l:
                return None
            if isinstance(out, tuple):
                return (GradBlock.apply(out[0]),) + tuple(out[1:])
            return GradBlock.apply(out)
        return hook

    def loss_grad(self, xi, per_seq=False):
        gates = gg.Gates(self.mods, self.H)
        try:
            gates.repl = None
            gates.xi = xi.clone().float().requires_grad_()
            gates.ablated = gates.xi.detach() == 0
            logits = gg.forward(self.model, self.arch, self.data)
            if not per_seq:
                loss = gg.mean_loss("causal", logits, self.data)
                loss.backward()
                return float(loss.detach()), gates.xi.grad.double()
            shares = gg.mean_loss("causal", logits, self.data, per_seq=True)
            gs = []
            for s in range(shares.shape[0]):
                (g,) = torch.autograd.grad(shares[s], gates.xi, retain_graph=s + 1 < shares.shape[0])
                gs.append(g.double())
            return None, torch.stack(gs)
        finally:
            for hd in gates.handles:
                hd.remove()

    def loss(self, xi):
        gates = gg.Gates(self.mods, self.H)
        try:
            gates.repl = None
            gates.xi = xi.clone().float().requires_grad_()
            gates.ablated = gates.xi.detach() == 0
            return float(gg.mean_loss("causal", gg.forward(self.model, self.arch, self.data), self.data).detach())
        finally:
            for hd in gates.handles:
                hd.remove()

    def ones(self):
        return torch.ones(self.L, self.H)


@contextlib.contextmanager
def lrp_rules(m, softmax=True, norm=True, act=True, half=True):
    """LRP's rules as detached factors: the forward's values unchanged, its backward relevance's."""
    import torch.nn.functional as F
    saved = []
    orig_softmax = F.softmax
    if softmax:
        def sm(*a, **k):
            return orig_softmax(*a, **k).detach()
        F.softmax = sm
    for mod in m.model.modules():
        cls = type(mod).__name__
        if norm and cls == "LayerNorm":
            def ln(x, mod=mod):
                mu = x.mean(-1, keepdim=True)
                var = ((x - mu) ** 2).mean(-1, keepdim=True)
                return (x - mu) / torch.sqrt(var + mod.eps).detach() * mod.weight + mod.bias
            saved.append((mod, mod.forward))
            mod.forward = ln
        elif norm and cls.endswith("RMSNorm"):
            def rms(x, mod=mod):
                xf = x.float()
                r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon).detach()
                return mod.weight * (xf * r).to(x.dtype)
            saved.append((mod, mod.forward))
            mod.forward = rms
        elif act and cls == "GPT2MLP":
            def mlp(x, mod=mod):
                h = mod.c_fc(x)
                ratio = torch.where(h.abs() > 1e-12, mod.act(h) / h, torch.zeros_like(h)).detach()
                return mod.dropout(mod.c_proj(h * ratio))
            saved.append((mod, mod.forward))
            mod.forward = mlp
        elif act and cls == "LlamaMLP":
            def lmlp(x, mod=mod):
                g, u = mod.gate_proj(x), mod.up_proj(x)
                a = g * torch.sigmoid(g).detach()
                p = a * u
                if half:
                    h = 0.5 * (a * u.detach() + a.detach() * u)
                    p = h + (p - h).detach()
                return mod.down_proj(p)
            saved.append((mod, mod.forward))
            mod.forward = lmlp
    try:
        yield
    finally:
        F.softmax = orig_softmax
        for mod, f in saved:
            mod.forward = f


def topk(a, b, k):
    ia = set(np.argsort(-np.asarray(a).ravel())[:k])
    ib = set(np.argsort(-np.asarray(b).ravel())[:k])
    return len(ia & ib)


def measure(key):
    m = M(key)
    L, H = m.L, m.H
    base = m.loss(m.ones())
    exact = torch.zeros(L, H, dtype=torch.float64)
    for l in range(L):
        for h in range(H):
            xi = m.ones()
            xi[l, h] = 0
            exact[l, h] = m.loss(xi) - base
    ex = exact.numpy()
    k = max(1, (L * H + 9) // 10)
    res = {"atp": -m.loss_grad(m.ones())[1], "importance": m.loss_grad(m.ones(), per_seq=True)[1].abs().sum(0),
           "ig-layer/2": ger.ig_layer(m, 1, 2)}
    gd, gd_seq = [], []
    for l in range(L):
        m.drop = l
        gd.append(-m.loss_grad(m.ones())[1])
        gd_seq.append(m.loss_grad(m.ones(), per_seq=True)[1])
    m.drop = None
    gd, gd_seq = torch.stack(gd), torch.stack(gd_seq)
    res["graddrop |.| mean"] = gd.abs().sum(0) / (L - 1)
    res["graddrop signed mean"] = gd.sum(0) / (L - 1)
    res["graddrop per-seq |.|"] = gd_seq.abs().sum((0, 1))
    for name, kw in [("relp (all rules)", {}), ("relp no half rule", {"half": False}),
                     ("relp softmax only", {"norm": False, "act": False}),
                     ("relp norm only", {"softmax": False, "act": False}), ("relp norm+act", {"softmax": False})]:
        with lrp_rules(m, **kw):
            res[name] = -m.loss_grad(m.ones())[1]
            res[name + " per-seq |.|"] = m.loss_grad(m.ones(), per_seq=True)[1].abs().sum(0)
    with lrp_rules(m):
        assert abs(m.loss(m.ones()) - base) < 1e-6, "the rules changed the forward"
    print(f"== {key}: {L} x {H} heads, L(ones) {base:.6f}; top-{k} overlap")
    for n, v in res.items():
        print(f"  {n:30s} rho {ger.spearman(v.numpy(), ex):+.3f}  top{k} {topk(v.numpy(), ex, k)}/{k}")


def main():
    torch.set_num_threads(2)
    if "--smollm2" in sys.argv:
        if not os.path.exists("/tmp/smollm2-hf/data.npy"):
            make_smollm2()
        measure("smollm2")
        return
    for key in [a for a in sys.argv[1:] if not a.startswith("-")] or ["default", "stories260K"]:
        measure(key)


if __name__ == "__main__":
    main()
