#!/usr/bin/env python3
"""Reference gradients at the MLP gates (units mlp:L), from torch autograd in float64:
tests/fixtures/mlp-grad-cases.json.

The engine gives each layer's MLP block a gate g_L. The block's contribution a_L to the residual stream (the
output of the module tools/gen_mlp_cases.py hooks per family, gen_mlp_cases.CONTRIBUTION: GPT-2 h[L].mlp,
BERT layer[L].output.dense, the Llama family's layers[L].mlp, GPT-NeoX layers[L].mlp, OLMo 2 / Gemma 2 /
Gemma 3 layers[L].post_feedforward_layernorm) becomes, by a forward hook on that module,
    g_L a_L                       (an MLP kept, g_L = 1),
    r_L + g_L (a_L - r_L)         (an MLP ablated, g_L = 0),
with g a float64 leaf tensor requiring grad and r_L the replacement: 0 (zero ablation), or the contribution's
mean over every real token ("mean") or at each position over the rows where it is real ("mean-pos", 0 where
none is) under the unmasked model: hp_ref.HeadAblator.set_means's computation, float64 sums rounded to float32
as the engine stores them, as gen_mlp_cases.py computes them, held constant. The heads are gated at the same
time exactly as tools/gen_grad_fixtures.py gates them (its Gates class, a pre-hook on the output projection:
xi_h a_h for a head kept, r_h + xi_h (a_h - r_h) for a head ablated, the head's mean under the same ablation).

The metric L is gen_grad_fixtures.objective itself, signed as damage:
  - "loss": the mean loss (causal: every predicted token; mlm: the labelled positions; cls: the rows' labels);
  - "kl": the mean over the same items of KL(unmasked || gated), the unmasked model's distribution a constant.
    Like gen_grad_fixtures.py, no KL case at the mask "": KL's gradient is exactly 0 at the unmasked model
    (its minimum), so there is no reference to give there, only rounding noise.
Per case:
  - value: L at the gate setting;
  - mlp_grad[L] = dL/dg_L;
  - mlp_atp[L] = <dL/dctx_L, r_L - ctx_L> summed over every token and dimension, ctx_L the tensor the hook
    returns (what is added to the residual stream), its gradient by autograd: the first-order change of L were
    MLP L alone replaced by r_L; 0 for an MLP already at 0;
  - mlp_seq_grad[s][L]: sequence s's share of mlp_grad, as gen_grad_fixtures.py's seq_grad: the gradient of
    gen_grad_fixtures.objective(..., per_seq=True)[s] (sequence s's summed loss or KL divided by what the mean
    divides by), each by a backward of its own; the shares sum to mlp_grad;
  - grad[L][H], atp[L][H], seq_grad[s][L][H]: the same at the head gates (atp 0 at an ablated head), at the
    same gate setting, so a test can check that the heads' part is unchanged when an MLP gate is involved.
Masks ("L.H" a head at 0, "mlp:L" an MLP at 0): "", "mlp:0", "mlp:1,0.2", each under zero and mean ablation
(heads and MLPs get the same ablation), and under mean-pos on gpt2-tiny and bert-mlm (padded rows).

How it differs from tools/gen_grad_fixtures.py: float64 models instead of float32, and truly float64. A
transformers model loaded in float64 still computes in float32 in places: the RMSNorms (.to(torch.float32),
Gemma's x.float()), the eager attention softmax (softmax(..., dtype=torch.float32)) and the rotary cos/sin.
Those float32 islands make L a staircase at the 1e-7 level, which no finite difference can check to 1e-6. So
the model is model.double()'d (its buffers too) and every forward runs under a TorchDispatchMode (Float64
below) that turns each dtype=float32 an op asks for, and each float32 tensor an op is handed, into float64;
the script asserts that no op of a forward yielded a float32 tensor (checks.float32_requests_made_float64
counts what was turned, over all of a fixture's forwards; 0 for GPT-2, BERT). The numbers thus
differ from transformers' own "float64" run (and from mlp-cases.json) by float32 rounding, ~1e-7 relative
(checked: value against mlp-cases.json's loss / kl, and the head grad at "" against grad.json's float32 one).

DEGENERATE: gemma3-local's second row starts with token 0, its pad token, whose embedding row is 0. The residual
stream at that position is then exactly 0 through every layer (it attends to itself only, no biases, every MLP
and head output 0 there: fixtures.gemma3-local.zero_rows), so every RMSNorm there sits at x = 0, where its
derivative is (1 + w) / sqrt(eps), ~1e3. The metric's derivative with respect to what is added there is
enormous (|dL/dctx| up to ~2e16 at layer 0, ~1e9 at layer 1) and the metric is linear in it only within ~1e-16.
Zero ablation and mlp_grad never move that position (a_L = 0 there), nor does a mask that ablates something in
layer 0 (the replacement makes the residual non-zero); but at the mask "" under mean ablation atp's direction
r - ctx is the non-zero mean there, and gemma3-local's mlp_atp there is -1.1e16 (layer 0), -8.0e8 (layer 1),
-9.3 (layer 2), its head atp up to 2e19 in magnitude: the exact first derivative (forward and reverse mode agree to 1e-14), which a backward through RMSNorm as the
formula reads must reproduce, and a meaningless first-order estimate.

Before writing it asserts, and refuses to write (AssertionError) if one fails:
  (1) finite differences: for every case and every MLP gate, mlp_grad[L] against the derivative of
      t -> L(g_L + t) at 0 with the MLP's ablated flag as in the case (at an ablated MLP: along r + g (a - r)
      at g = 0, linear in g there), relative 1e-6; likewise every kept MLP's atp against minus the derivative
      along r + g (a - r) at g = 1 (the path that replaces it), and every head's grad in the "mlp:1,0.2"
      cases. The derivative: the central difference D(h) = (L(+h) - L(-h)) / 2h at h = 1e-4, whose O(h^2)
      truncation error alone reaches ~1e-5 relative where the curvature is large (Gemma 2, an ablated MLP),
      so the asserted one is its Richardson extrapolation (4 D(h/2) - D(h)) / 3 (O(h^4)); the worst relative
      disagreement of each, over the fixture's cases, is printed and stored under checks (fd_*: D(h),
      fd_*_richardson: the extrapolation). With transformers' float32 islands (below) D(1e-4) is off by
      ~2e-3 on llama-gqa, gemma2-softcap, olmo2-post-norms; in true float64 the extrapolation agrees to ~1e-8.
      Besides, every mlp_grad and mlp_atp against forward-mode AD (torch.autograd.forward_ad, a dual g_L with
      the same flags), relative 1e-10: an independent derivative that also holds where a finite difference
      cannot (DEGENERATE below: the atp of the mask "" under mean / mean-pos on a fixture with such a
      position is checked by forward-mode only, counted in checks.fd_mlp_atp_skipped);
  (2) the sum over s of mlp_seq_grad (and of the heads' seq_grad) equals mlp_grad (grad), 1e-10 relative;
  (3) zero ablation, mask "": mlp_atp[L] = -<dL/dctx_L, a_L> (a_L recorded from the unmasked model) =
      -mlp_grad[L], 1e-12 relative; printed (not asserted): whether L(MLP L removed) - L(unmasked) has the sign
      of mlp_atp[L], per layer;
  (4) every number is finite; no op of a forward yields float32; the value against mlp-cases.json (mask "" and
      "mlp:0", every ablation, loss and kl) within 1e-6 relative; the head grad at "" (zero, loss) against the
      fixture's grad.json "none" case (float32) within 1e-4 relative to its largest entry.

    /work/venv/bin/python tools/gen_mlp_grad_cases.py              # every fixture, writes the file
    /work/venv/bin/python tools/gen_mlp_grad_cases.py gpt2-tiny    # checks one, writes nothing

Deterministic (one torch thread, fixed fixtures, CPU); about five minutes of CPU (ten of wall clock on a busy
machine): the finite differences are most of it, each forward some 2x slower under the Float64 mode.
"""
import json
import math
import os
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
import torch.autograd.forward_ad as fwAD

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_grad_fixtures as ggf  # noqa: E402
import gen_mlp_cases as gmc  # noqa: E402
import hp_ref  # noqa: E402

import transformers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(REPO, "tests", "fixtures")
OUT = os.path.join(FIX, "mlp-grad-cases.json")

FIXTURES = gmc.FIXTURES            # fixture -> (data file, kind, transformers class): every family
MASKS = ["", "mlp:0", "mlp:1,0.2"]
ABLATIONS = ["zero", "mean"]
MEAN_POS = ["gpt2-tiny", "bert-mlm"]  # fixtures that also get mean-pos cases
HEAD_FD_MASK = "mlp:1,0.2"            # the mask whose cases also check every head's grad by finite differences
H_FD = 1e-4
FD_REL = 1e-6
SEQ_REL = 1e-10
JVP_REL = 1e-10
CHECKS = [f"fd_{k}{r}" for k in ("mlp_grad_kept", "mlp_grad_ablated", "mlp_atp", "head_grad")
          for r in ("", "_richardson")] + ["jvp_mlp_grad", "jvp_mlp_atp", "seq_sum", "atp_zero_vs_minus_grad",
                                           "value_vs_mlp_cases",
                                           "head_grad_vs_grad_json"]


# ---------------------------------------------------------------- float64 throughout


class Float64(TorchDispatchMode):
    """Every op asked for dtype=float32, or handed a float32 tensor, works in float64 instead (counted);
    counts the ops that still yield a float32 tensor (the script asserts none does)."""

    def __init__(self):
        super().__init__()
        self.rewritten = 0
        self.float32_outputs = 0

    def _up(self, x):
        if torch.is_tensor(x) and x.dtype == torch.float32:
            self.rewritten += 1
            return x.double()
        if x is torch.float32:
            self.rewritten += 1
            return torch.float64
        return x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map(self._up, (args, dict(kwargs or {})))
        out = func(*args, **kwargs)
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if torch.is_tensor(o) and o.dtype == torch.float32:
                self.float32_outputs += 1
        return out


# ---------------------------------------------------------------- the MLP gates


class MLPGates:
    """A forward hook on every layer's contribution module (gen_mlp_cases.family_modules); keeps ctx for atp.

    g None: pass-through. record: keep a copy of every output."""

    def __init__(self, modules):
        self.g = None           # (L,) float64 leaf, requires grad
        self.ablated = None     # (L,) bool
        self.repl = None        # per layer: (D,) or (T, D) float64; None: zero
        self.record = False
        self.recorded = [None] * len(modules)
        self.ctx = [None] * len(modules)
        self.handles = [m.register_forward_hook(self._hook(l)) for l, m in enumerate(modules)]

    def remove(self):
        for h in self.handles:
            h.remove()

    def _hook(self, l):
        def hook(module, args, a):
            assert torch.is_tensor(a), type(a)
            if self.record:
                self.recorded[l] = a.detach().clone()
                return None
            if self.g is None:
                return None
            if self.repl is None:
                r = torch.zeros_like(a)
            else:
                r = self.repl[l]
                r = (r[:a.shape[1]].unsqueeze(0) if r.dim() == 2 else r).to(a.dtype).expand_as(a)
            g = self.g[l]
            ctx = r + g * (a - r) if bool(self.ablated[l]) else g * a
            if ctx.requires_grad:   # not under forward-mode AD alone (jvp)
                ctx.retain_grad()
            self.ctx[l] = (ctx, r)
            return ctx
        return hook


class Fixture:
    """A fixture's float64 model with both kinds of gates, its data and the unmasked outputs."""

    def __init__(self, name):
        data_file, kind, cls = FIXTURES[name]
        self.name, self.data_file, self.kind = name, data_file, kind
        self.m = gmc.Model(name, cls)   # float64, eager attention, gen_mlp_cases's modules
        self.m.model.double()           # its buffers too (the rotary inv_freq stays float32 otherwise)
        for p in self.m.model.parameters():
            p.requires_grad_(False)
        self.L, self.H, self.n_kv = self.m.n_layers, self.m.n_heads, self.m.n_kv
        self.data = gmc.load_data(name, data_file)
        self.kw = gmc.model_kw(self.data)
        self.real = gmc.real_tokens(self.data)
        self.mode = Float64()
        self.base = self.forward()          # before any hook: the unmasked model
        self.heads = ggf.Gates(self.m.head_mods, self.H)
        self.mlps = MLPGates(self.m.contrib)
        assert torch.equal(self.forward(), self.base), f"{name}: pass-through hooks change the logits"
        self.heads.record = self.mlps.record = True
        assert torch.equal(self.forward(), self.base), f"{name}: recording changes the logits"
        self.heads.record = self.mlps.record = False
        self.contrib = list(self.mlps.recorded)     # a_L of the unmasked model
        # positions where every head's output and every MLP's contribution is exactly 0 in the unmasked model:
        # there the residual stream is 0 through every layer (see DEGENERATE)
        B, T = self.data["ids"].shape
        self.zero_rows = [(b, t) for b in range(B) for t in range(T)
                          if all(float(x[b, t].abs().max()) == 0 for x in self.contrib + self.heads.recorded)]
        self.means = {}
        for abl in ("mean", "mean_pos"):
            # hp_ref's computation (float64 sums, rounded to float32 as the engine stores them), held as float64
            reps = []
            for rec in (self.heads.recorded, self.mlps.recorded):
                holder = type("Rec", (), {})()
                holder.recorded = rec
                hp_ref.HeadAblator.set_means(holder, self.real, abl)
                reps.append([r.double() for r in holder.repl])
            self.means[abl] = reps

    def forward(self):
        with self.mode:
            if self.m.causal:
                out = self.m.model(**self.kw, use_cache=False).logits
            else:
                out = self.m.model(**self.kw).logits
        assert out.dtype == torch.float64
        return out

    def remove(self):
        for h in self.heads.handles:
            h.remove()
        self.mlps.remove()

    def set_gates(self, xi, head_abl, g, mlp_abl, ablation):
        a = {"zero": None, "mean": "mean", "mean-pos": "mean_pos"}[ablation]
        self.heads.repl, self.mlps.repl = (None, None) if a is None else self.means[a]
        self.heads.xi, self.heads.ablated = xi, head_abl
        self.mlps.g, self.mlps.ablated = g, mlp_abl

    def jvp(self, metric, xi, head_abl, g, mlp_abl, ablation, l):
        """d/dt L(g + t e_l) at 0 by forward-mode AD (with the case's ablated flags, mlp_abl)."""
        with fwAD.dual_level():
            tangent = torch.zeros_like(g)
            tangent[l] = 1.0
            self.set_gates(xi.clone().requires_grad_(), head_abl, fwAD.make_dual(g.clone(), tangent), mlp_abl,
                           ablation)
            v = ggf.objective(self.kind, metric, self.forward(), self.base, self.data)
            return float(fwAD.unpack_dual(v).tangent.detach())

    def value_at(self, metric, xi, head_abl, g, mlp_abl, ablation):
        # with autograd on: gen_grad_fixtures.Gates's hook retains its output's gradient
        self.set_gates(xi.clone().requires_grad_(), head_abl, g.clone().requires_grad_(), mlp_abl, ablation)
        return float(ggf.objective(self.kind, metric, self.forward(), self.base, self.data).detach())


def central(f, i):
    """d/dt f(i, t) at t = 0: the central difference with step H_FD, and its Richardson extrapolation
    (4 D(h/2) - D(h)) / 3, whose error is O(h^4) instead of O(h^2)."""
    d1 = (f(i, H_FD) - f(i, -H_FD)) / (2 * H_FD)
    d2 = (f(i, H_FD / 2) - f(i, -H_FD / 2)) / H_FD
    return d1, (4 * d2 - d1) / 3


def note(checks, key, e_central, e_richardson):
    checks[key] = max(checks[key], e_central)
    checks[key + "_richardson"] = max(checks[key + "_richardson"], e_richardson)


def rel(a, b, scale=None):
    d = abs(a - b)
    s = abs(b) if scale is None else scale
    return d / s if s > 0 else (0.0 if d == 0 else math.inf)


# ---------------------------------------------------------------- one case


def run_case(fx, metric, spec, ablation, checks):
    L, H = fx.L, fx.H
    mlps, head_gate = gmc.split_mask(spec, L, H, fx.n_kv)
    g0 = torch.ones(L, dtype=torch.float64)
    g0[mlps] = 0.0
    mlp_abl = g0 == 0
    xi0 = head_gate.double()
    head_abl = xi0 == 0

    # the gradient and atp, one backward
    g, xi = g0.clone().requires_grad_(), xi0.clone().requires_grad_()
    fx.set_gates(xi, head_abl, g, mlp_abl, ablation)
    value = ggf.objective(fx.kind, metric, fx.forward(), fx.base, fx.data)
    value.backward()
    mlp_grad, grad = g.grad.clone(), xi.grad.clone()
    mlp_atp = torch.zeros(L, dtype=torch.float64)
    for l, (ctx, r) in enumerate(fx.mlps.ctx):
        mlp_atp[l] = ((r - ctx.detach()) * ctx.grad).sum()
        if ablation == "zero" and spec == "":
            # (3) atp = -<dL/dctx, a> with a the unmasked model's recorded contribution, = -mlp_grad
            want = -float((ctx.grad * fx.contrib[l]).sum())
            e = max(rel(float(mlp_atp[l]), want), rel(float(mlp_atp[l]), -float(mlp_grad[l])))
            checks["atp_zero_vs_minus_grad"] = max(checks["atp_zero_vs_minus_grad"], e)
            assert e <= 1e-12, f"{fx.name}: mlp_atp[{l}] {float(mlp_atp[l])} vs -<dL/dctx, a> {want}"
    mlp_atp[mlp_abl] = 0.0
    atp = torch.zeros(L, H, dtype=torch.float64)
    for l, (out, r) in enumerate(fx.heads.ctx):
        B, T, D = out.shape
        atp[l] = ((r - out.detach()) * out.grad).view(B, T, H, D // H).sum(dim=(0, 1, 3))
    atp[head_abl] = 0.0

    # each sequence's share, by a backward of its own
    g, xi = g0.clone().requires_grad_(), xi0.clone().requires_grad_()
    fx.set_gates(xi, head_abl, g, mlp_abl, ablation)
    shares = ggf.objective(fx.kind, metric, fx.forward(), fx.base, fx.data, per_seq=True)
    value = float(value.detach())
    assert abs(float(shares.sum().detach()) - value) <= 1e-12 * abs(value)
    mlp_seq, head_seq = [], []
    for s in range(shares.shape[0]):
        gs, hs = torch.autograd.grad(shares[s], (g, xi), retain_graph=s + 1 < shares.shape[0])
        mlp_seq.append(gs)
        head_seq.append(hs)
    mlp_seq, head_seq = torch.stack(mlp_seq), torch.stack(head_seq)
    # (2) the shares sum to the gradient
    e = max(float((mlp_seq.sum(0) - mlp_grad).abs().max()) / float(mlp_grad.abs().max()),
            float((head_seq.sum(0) - grad).abs().max()) / float(grad.abs().max()))
    checks["seq_sum"] = max(checks["seq_sum"], e)
    assert e <= SEQ_REL, f"{fx.name} {spec!r} {ablation} {metric}: seq shares sum off by {e} relative"

    # (1) finite differences at every gate, with the case's ablated flags
    v = value
    where = f"{fx.name} {spec!r} {ablation} {metric}"

    def mlp_at(ab):
        def f(l, t):
            gg = g0.clone()
            gg[l] += t
            return fx.value_at(metric, xi0, head_abl, gg, ab, ablation)
        return f

    # at the mask "" under mean / mean-pos, a position whose residual stream is 0 throughout makes atp's
    # derivative enormous and linear only within ~1e-16 (DEGENERATE): no finite difference there, jvp only
    degenerate = bool(fx.zero_rows) and spec == "" and ablation != "zero"
    for l in range(L):
        c, r = central(mlp_at(mlp_abl), l)
        ad = float(mlp_grad[l])
        key = "ablated" if mlp_abl[l] else "kept"
        note(checks, f"fd_mlp_grad_{key}", rel(c, ad), rel(r, ad))
        assert rel(r, ad) <= FD_REL, f"{where}: mlp_grad[{l}] {ad} vs finite difference {r} (central {c})"
        j = fx.jvp(metric, xi0, head_abl, g0, mlp_abl, ablation, l)
        checks["jvp_mlp_grad"] = max(checks["jvp_mlp_grad"], rel(j, ad))
        assert rel(j, ad) <= JVP_REL, f"{where}: mlp_grad[{l}] {ad} vs forward-mode {j}"
        if not mlp_abl[l]:
            # atp: minus the derivative along r + g (a - r) at g = 1, the path that replaces MLP l
            ab = mlp_abl.clone()
            ab[l] = True
            ad = float(mlp_atp[l])
            j = -fx.jvp(metric, xi0, head_abl, g0, ab, ablation, l)
            checks["jvp_mlp_atp"] = max(checks["jvp_mlp_atp"], rel(j, ad))
            assert rel(j, ad) <= JVP_REL, f"{where}: mlp_atp[{l}] {ad} vs minus the forward-mode derivative {j}"
            if degenerate:
                checks["fd_mlp_atp_skipped"] += 1
                continue
            c, r = central(mlp_at(ab), l)
            note(checks, "fd_mlp_atp", rel(-c, ad), rel(-r, ad))
            assert rel(-r, ad) <= FD_REL, f"{where}: mlp_atp[{l}] {ad} vs minus the derivative {-r}"

    def head_at(lh, t):
        xx = xi0.clone()
        xx[lh] += t
        return fx.value_at(metric, xx, head_abl, g0, mlp_abl, ablation)

    for l in range(L if spec == HEAD_FD_MASK else 0):
        for h in range(H):
            c, r = central(head_at, (l, h))
            ad = float(grad[l, h])
            note(checks, "fd_head_grad", rel(c, ad), rel(r, ad))
            assert rel(r, ad) <= FD_REL, f"{where}: grad[{l}][{h}] {ad} vs finite difference {r}"
    assert abs(fx.value_at(metric, xi0, head_abl, g0, mlp_abl, ablation) - v) <= 1e-14 * abs(v)
    fx.set_gates(None, None, None, None, "zero")
    return {"fixture": fx.name, "data": fx.data_file, "kind": fx.kind, "metric": metric, "mask": spec,
            "ablation": ablation, "value": v, "mlp_grad": mlp_grad.tolist(), "mlp_atp": mlp_atp.tolist(),
            "mlp_seq_grad": mlp_seq.tolist(), "grad": grad.tolist(), "atp": atp.tolist(),
            "seq_grad": head_seq.tolist()}


def finite(x):
    if isinstance(x, dict):
        return all(finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(finite(v) for v in x)
    if isinstance(x, float):
        return math.isfinite(x)
    return True


# ---------------------------------------------------------------- a fixture


def fixture_cases(name, mlp_ref):
    fx = Fixture(name)
    assert fx.L >= 2 and fx.H >= 3, (name, fx.L, fx.H)
    checks = {k: 0.0 for k in CHECKS}
    checks["fd_mlp_atp_skipped"] = 0
    cases = []
    ablations = ABLATIONS + (["mean-pos"] if name in MEAN_POS else [])
    for ablation in ablations:
        for spec in MASKS:
            for metric in ["loss"] + (["kl"] if spec else []):
                c = run_case(fx, metric, spec, ablation, checks)
                assert finite(c), (name, spec, ablation, metric)
                cases.append(c)
                print(f"  {name:17s} {spec:10s} {ablation:8s} {metric:4s} value {c['value']:.9f} "
                      f"mlp_grad {' '.join(f'{x:+.4e}' for x in c['mlp_grad'])} "
                      f"mlp_atp {' '.join(f'{x:+.4e}' for x in c['mlp_atp'])}")
                # the value against transformers' own float64 run (mlp-cases.json, float32 islands and all)
                ref = mlp_ref.get((name, spec, ablation))
                if ref is not None:
                    e = rel(c["value"], ref[metric])
                    checks["value_vs_mlp_cases"] = max(checks["value_vs_mlp_cases"], e)
                    assert e <= 1e-6, f"{name} {spec!r} {ablation} {metric}: {c['value']} vs mlp-cases.json {ref[metric]}"
    # the heads at the unmasked model against gen_grad_fixtures.py's float32 grad.json
    gj = os.path.join(FIX, name, "grad.json")
    if os.path.exists(gj):
        none = next(c for c in json.load(open(gj))["cases"] if c["name"] == "none")
        mine = next(c for c in cases if c["mask"] == "" and c["ablation"] == "zero" and c["metric"] == "loss")
        a, b = torch.tensor(mine["grad"]), torch.tensor(none["grad"], dtype=torch.float64)
        e = float((a - b).abs().max() / a.abs().max())
        checks["head_grad_vs_grad_json"] = e
        assert e <= 1e-4, f"{name}: head grad at '' vs grad.json off by {e} relative to its largest"
    else:
        checks["head_grad_vs_grad_json"] = None
    # (3) the sign of atp against the loss with the MLP zeroed (printed, not asserted)
    c0 = next(c for c in cases if c["mask"] == "" and c["ablation"] == "zero" and c["metric"] == "loss")
    ones, no = torch.ones(fx.L, fx.H, dtype=torch.float64), torch.zeros(fx.L, fx.H, dtype=torch.bool)
    signs = []
    for l in range(fx.L):
        g = torch.ones(fx.L, dtype=torch.float64)
        g[l] = 0.0
        dl = fx.value_at("loss", ones, no, g, g == 0, "zero") - c0["value"]
        signs.append((dl, c0["mlp_atp"][l]))
    agree = sum((dl > 0) == (a > 0) for dl, a in signs)
    print(f"  {name:17s} zero, removing MLP L alone: dloss vs atp "
          + " ".join(f"L{l}:{dl:+.3g}/{a:+.3g}" for l, (dl, a) in enumerate(signs))
          + f"  same sign {agree}/{fx.L}")
    checks["atp_sign_agrees"] = f"{agree}/{fx.L}"
    assert fx.mode.float32_outputs == 0, f"{name}: {fx.mode.float32_outputs} ops yielded float32"
    checks["float32_requests_made_float64"] = fx.mode.rewritten
    info = {"family": fx.m.family, "kind": fx.kind, "data": fx.data_file, "n_layers": fx.L, "n_heads": fx.H,
            "n_kv_heads": fx.n_kv, "n_seqs": int(fx.data["ids"].shape[0]), "seq_len": int(fx.data["ids"].shape[1]),
            "contribution": gmc.CONTRIBUTION[fx.m.family] + " output", "zero_rows": [list(p) for p in fx.zero_rows],
            "checks": checks}
    fx.remove()
    return info, cases


DOC = ("Gradients at the MLP gates (units mlp:L) and the head gates, by torch autograd on transformers models in "
       "float64 with every float32 island (RMSNorm, eager softmax, rotary) made float64 too (tools/"
       "gen_mlp_grad_cases.py; regenerate with `/work/venv/bin/python tools/gen_mlp_grad_cases.py`, about five "
       "minutes). MLP L's contribution a_L to the residual stream (fixtures.<name>.contribution, the module "
       "tools/gen_mlp_cases.py hooks) becomes g_L a_L (MLP kept, g_L = 1) or r_L + g_L (a_L - r_L) (MLP ablated, "
       "g_L = 0), r_L = 0 (ablation zero) or its mean / per-position mean under the unmasked model (mean, "
       "mean-pos; hp_ref's means, rounded to float32, held constant); the heads are gated as in "
       "tools/gen_grad_fixtures.py (xi_h a_h, or r_h + xi_h (a_h - r_h) at an ablated head, r_h under the same "
       "ablation). A case: fixture (tests/fixtures/<fixture>), data (its file), kind (causal | mlm | cls), metric "
       "(loss: the mean loss over the scored items; kl: the mean of KL(unmasked || gated) over them; as "
       "gen_grad_fixtures.objective; no kl case at mask \"\", where its gradient is exactly 0), mask (\"L.H\" a "
       "head at 0, \"mlp:L\" an MLP at 0; every other gate 1), ablation (zero | mean | mean-pos), value (the "
       "metric at that gate setting), mlp_grad[L] (dL/dg_L), mlp_atp[L] (<dL/dctx_L, r_L - ctx_L> summed over "
       "every token, ctx_L the tensor added to the residual stream: the first-order change of the metric were MLP "
       "L alone replaced; 0 at an MLP already at 0), mlp_seq_grad[s][L] (sequence s's share of mlp_grad: the "
       "gradient of its own summed loss or KL divided by what the mean divides by; the shares sum to mlp_grad), "
       "grad[L][H], atp[L][H], seq_grad[s][L][H] (the same at the head gates, at the same gate setting; atp 0 at "
       "an ablated head). fixtures.<name>.checks holds what the self-checks measured: worst relative "
       "disagreement of finite differences (fd_*: central, h = 1e-4; fd_*_richardson: its Richardson "
       "extrapolation with h / 2, the one asserted within 1e-6) with mlp_grad at kept and at ablated MLPs, with "
       "mlp_atp (minus the derivative along the path that replaces the MLP) and with the head grad; of the "
       "shares' sum with the gradient; of mlp_atp with -mlp_grad under zero ablation at mask \"\"; of value with "
       "mlp-cases.json (transformers' own float64, float32 islands included); of the head grad at \"\" with "
       "grad.json's (float32) relative to its largest entry; and in how many layers removing the MLP moves the "
       "loss with the sign of mlp_atp. fixtures.<name>.zero_rows lists the (row, position) whose residual stream is "
       "exactly 0 throughout the unmasked model (gemma3-local [1, 0]: token 0, a zero embedding): every RMSNorm "
       "sits at 0 there, so the derivative along a replacement there is huge: at mask \"\" under mean ablation "
       "gemma3-local's mlp_atp is -1.1e16, -8.0e8, -9.3 and its head atp up to 2e19: exact derivatives (forward and "
       "reverse mode agree), useless as estimates.")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    mlp_ref = {(c["fixture"], c["mask"], c["ablation"]): c
               for c in json.load(open(os.path.join(FIX, "mlp-cases.json")))["cases"] if c["kind"] != "task"}
    out = {"doc": DOC, "tool": "tools/gen_mlp_grad_cases.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "fixtures": {}, "cases": []}
    names = sys.argv[1:] or list(FIXTURES)
    for name in names:
        info, cases = fixture_cases(name, mlp_ref)
        out["fixtures"][name] = info
        out["cases"] += cases
        print(f"{name}: {json.dumps(info['checks'])}")
    assert finite(out)
    worst = {k: max(f["checks"][k] for f in out["fixtures"].values() if f["checks"][k] is not None) for k in CHECKS}
    print("worst over fixtures:", json.dumps(worst))
    if sys.argv[1:]:
        print(f"checked {len(out['cases'])} cases on {names}, nothing written (a partial run), "
              f"{time.time() - t0:.1f} s")
        return
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.chmod(OUT, 0o644)
    print(f"wrote {os.path.relpath(OUT, REPO)}: {len(out['cases'])} cases on {len(out['fixtures'])} fixtures, "
          f"{time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
