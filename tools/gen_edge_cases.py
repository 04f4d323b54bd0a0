#!/usr/bin/env python3
"""Edge patching (mask items "SENDER>RECEIVER") in float64: tests/fixtures/edge-cases.json.

An edge u>v is one connection through the residual stream, from a unit that writes to it (the sender u) to
one that reads it (the receiver v). Patching it changes what v reads and nothing else.

Senders (what each adds to the residual stream):
    L.H     head H of layer L: its output o_h (the d_head slice [H*d_head, (H+1)*d_head) of the attention
            output projection's input, where hp_ref.HeadAblator works) times that head's rows of the output
            projection W_O (GPT-2 attn.c_proj, Llama-family self_attn.o_proj, GPT-NeoX attention.dense), without
            the projection's bias (the bias belongs to no head and is never patched).
            Gemma 2 / 3 (a norm after the attention: post_attention_layernorm(o_proj(O)) joins the stream, O the
            layer's head outputs side by side; o_proj has no bias): a head's output is not a sum of parts, so
            L.H is defined by its difference only, the layer's contribution with only that head's o_h changed:
                a_u(other) - a_u(this) = post_attention_layernorm(o_proj(O with o_h := its replacement))
                                         - post_attention_layernorm(o_proj(O))
            O the layer's head outputs in the run being computed (the mask's own ablations in it), the
            replacement the ablation's value of o_h (as hp_ref.HeadAblator puts it). Each patched edge u>v adds
            its own such difference to x_v, also when several heads of one layer feed v (they are not ablated
            jointly; check (3') measures that the two differ)
    mlp:L   the MLP block's whole output as it joins the residual stream: gen_mlp_cases.py's CONTRIBUTION module
            (GPT-2 transformer.h[L].mlp, Llama/Mistral/Qwen2/Qwen3/Phi-3 model.layers[L].mlp, GPT-NeoX
            gpt_neox.layers[L].mlp, Gemma 2 / 3 model.layers[L].post_feedforward_layernorm: after the post-MLP
            norm)
    emb     the residual stream before layer 0: the token embedding row (GPT-2: plus its learned position row);
            none of these families scales it but Gemma: the row times sqrt(hidden_size) in the model's dtype
            (Gemma2Model's normalizer torch.tensor(hidden_size ** 0.5, dtype=the embeddings' dtype); Gemma 3's
            Gemma3TextScaledWordEmbedding, embed_scale cast to the weights' dtype): float64 sqrt(32) here
Receivers (what each reads, before its own norm):
    L.H:q   the input from which head H of layer L computes its query
    L.H:k   the input from which head H's keys are computed; under grouped-query attention only query head H
            sees these keys, the other query heads of its KV group (h // (n_heads / n_kv_heads)) keep theirs
    L.H:v   likewise the values head H sees
    L.H     the three above (written expanded in the cases' masks)
    mlp:L   the MLP block's input, before its norm (GPT-NeoX parallel residual: the layer's input, which the
            attention reads too; otherwise the stream after the layer's attention; Gemma: the norm is
            pre_feedforward_layernorm)
    logits  the final residual stream, before the final norm

Under a set of patched edges every receiver v reads
    x_v = (the residual stream it reads in this run) + sum over patched u>v of (a_u(other) - a_u(this))
and then applies its own norm and projection as the model does: q_H = rope(qnorm(W_q[H] norm1(x_v) + b_q[H]))
for L.H:q, k and v of head H's KV group from norm1(x_v) for L.H:k / L.H:v (the other heads of the group keep
the keys and values of the unpatched input), mlp(norm2(x_v)) for mlp:L, lm_head(final_norm(x_v)) for logits.
a_u(this) is the sender's output in the run being computed, which is itself changed by the edges patched
upstream of it: everything is one pass, layer by layer. a_u(other) is the ablation's value of the sender:
    zero       0
    mean       head: the mean of o_h over every real token of the held-out set under the unmasked model, times
               W_O[h]; MLP: its contribution's mean, exactly gen_mlp_cases.py's replacement. Both means are
               hp_ref.HeadAblator.set_means's computation (float64 sums stored as float32, as the engine stores
               them), on transformers' own unmasked run recorded by gen_mlp_cases.Model's hooks
    mean-pos   the same at each position
    resample   (llama-gqa's task rows only, one row a forward as gen_task_fixtures.py runs them) the sender's
               output when the unmasked model runs on the row's corrupt prompt
    emb's other is 0: emb is a sender under zero only.
Plain mask items ablate as they always do: an ablated head's o_h is replaced by its replacement before the
output projection (hp_ref.HeadAblator), an ablated MLP's contribution by its replacement (gen_mlp_cases), with
the same ablation as the edges; their a_u(this) is then that replacement's contribution, so an edge out of a
unit the mask also ablates changes nothing (the case "0.1,0.1>L.0:v,0.2>logits" tests that the engine does
not subtract it twice: the tool checks it equals "0.1,0.2>logits").

Valid edges: from a head of layer l or mlp:l' to a receiver of a later layer (l, l' < the receiver's layer);
a head of layer l also feeds mlp:l (not under GPT-NeoX's parallel residual, where the layer's attention and
MLP both read the layer's input); anything feeds logits; emb feeds everything. fixtures.<name>.invalid lists
masks a checker must refuse.

Canonical mask text (what "mask" holds): items joined by ",", the plain items first as hp_mask_format writes
them (per layer ascending: "L.H" by head, or "L.*", then "mlp:L"), then the edges sorted by receiver (layer
ascending; within a layer the heads by index, each with channels q, k, v, then mlp:L; logits last), then by
sender (emb first, then by layer, within a layer the heads by index before mlp:L). A receiver without a
channel is written as its three channel edges.

The reference is a forward of this tool's own, layer by layer, in float64, built from the transformers model's
modules and weights (from_pretrained(dtype=float64, attn_implementation="eager")): per family
    GPT-2            wte + wpe, ln_1, attn.c_attn (Conv1D; q, k, v each n_embd wide, head h at [h*d_head...]),
                     scores / sqrt(d_head) (scale_attn_weights; scale_attn_by_inverse_layer_idx honoured, false
                     in the fixture; reorder_and_upcast_attn asserted false), causal softmax in float64,
                     attn.c_proj, ln_2, mlp, ln_f, lm_head
    Llama, Qwen2,    embed_tokens, input_layernorm, q_proj / k_proj / v_proj (Qwen2 with biases; Phi-3 the fused
    Qwen3, Mistral,  qkv_proj: rows [0, H*d) the queries, then KV*d keys, then KV*d values, as Phi3Attention
    Phi-3            slices it; Qwen3 q_norm / k_norm over each head's d_head before rotary), the model's
                     rotary_emb and its module's apply_rotary_pos_emb, scores * self_attn.scaling, causal (and
                     windowed: below) softmax, o_proj, post_attention_layernorm, mlp, norm, lm_head
    GPT-NeoX         embed_in, input_layernorm, attention.query_key_value (per head [q | k | v] side by side:
                     the output viewed (B, T, H, 3*d_head) and chunked in three, as GPTNeoXAttention does),
                     partial rotary (rotary_pct of each head, its module's apply_rotary_pos_emb), scores *
                     attention.scaling, attention.dense, post_attention_layernorm, mlp, use_parallel_residual
                     (x + attn(ln1 x) + mlp(ln2 x), else sequential), final_layer_norm, embed_out
    Gemma 2,         embed_tokens times sqrt(hidden_size) (above), input_layernorm, q_proj / k_proj / v_proj
    Gemma 3          (Gemma 3: q_norm / k_norm over each head's d_head), rotary (Gemma 2 model.rotary_emb; Gemma 3
                     model.rotary_emb on its full-attention layers, rope_theta with rope_scaling, and
                     model.rotary_emb_local, rope_local_base_freq, on its sliding layers, as Gemma3DecoderLayer
                     picks by self_attn.is_sliding), scores * self_attn.scaling (query_pre_attn_scalar ** -0.5),
                     Gemma 2: soft-capped (s / attn_logit_softcapping, tanh, * attn_logit_softcapping; Gemma3Attention
                     does not pass it), causal (and windowed) softmax in float32, o_proj, post_attention_layernorm,
                     + x, pre_feedforward_layernorm, mlp, post_feedforward_layernorm, + x, norm, lm_head, then
                     final_logit_softcapping when set (Gemma 2: z / c, tanh, * c)
Sliding windows as transformers' masking_utils builds them (sliding_window_overlay: key j is seen from query i
iff i - W < j <= i, i.e. the token itself and the W - 1 before it): Mistral and Phi-3 whenever config
sliding_window is set (mistral-window W = 20 over 96 tokens; phi3-fused W = 6 over 16: Phi3Model builds the
sliding mask from config.sliding_window alone), Qwen2 / Qwen3 only on layers layer_types names
"sliding_attention" (none in the fixtures), Gemma 2 / 3 likewise on their "sliding_attention" layers
(gemma2-softcap and gemma3-local: layers 0 and 2, W = 6 over 16 tokens; use_bidirectional_attention asserted
false). transformers' float32 islands are kept, since the forward calls
transformers' own modules or follows its code: the Llama-family RMSNorms (and Qwen3's q/k norms) compute in
float32 (hidden.to(torch.float32)), so do Gemma's RMSNorms ((1 + weight), x.float(), then type_as: every
Gemma norm's output, and so every Gemma contribution, holds float32 values), the rotary cos/sin are computed in
float32, and the eager softmax of
Llama-family and GPT-NeoX attention is softmax(..., dtype=torch.float32); GPT-2 and GPT-NeoX LayerNorms and
GPT-2's softmax are float64. So the numbers are transformers' "float64" ones, as in mlp-cases.json.

Before writing it checks, per fixture, and refuses to write (AssertionError) if one fails:
  (1) the forward with no edges equals transformers' own float64 logits within 1e-10 (and so do the runs on
      every task row); with plain mask items only it equals transformers with gen_mlp_cases' hooks
      (hp_ref.HeadAblator, MLPAblator) within 1e-9 for every head and MLP alone, zero / mean / mean-pos, and
      the cases' losses for the masks mlp-cases.json also has equal that file's within 1e-10;
  (2) every valid edge of the model patched at once with a_u(other) := a_u(this) leaves the logits unchanged
      (within 1e-12);
  (3) patching every edge out of head u (u > every receiver after it, logits included) equals ablating head u
      by hp_ref.HeadAblator on transformers' forward, within 1e-9, for every head and zero / mean / mean-pos
      (and resample on llama-gqa's task rows); the same for every mlp:L against gen_mlp_cases' MLP ablation;
 (3') Gemma only: every edge out of heads L.0 and L.1 patched (each its own difference) differs from the two
      heads ablated together by hp_ref.HeadAblator (by more than 1e-6, every layer and ablation: the fixtures
      distinguish per-sender differences from a joint ablation);
  (4) u>L.H (one input shared by q, k and v) equals u>L.H:q,u>L.H:k,u>L.H:v, within 1e-12;
  (5) an edge into L.H:q, L.H:k or L.H:v (every head H of the last layer) changes head H's o_h at layer L and
      no other head's (bit for bit), nor anything in earlier layers: under GQA the group-mates keep their keys
      and values;
  (6) every number is finite;
  (7) independently of this forward, on transformers' own forward with hooks: every case without plain mask
      items and without chained edges (no sender downstream of a patched receiver), and under GQA edges into
      the keys / values of every head of a KV group, are reproduced by hooks that add the delta, computed from
      the unpatched run's recorded outputs, to the input of the final norm (logits), of the MLP's norm (mlp:L),
      or that replace the receiving heads' columns of the q / k / v projection's output (q_proj, k_proj,
      v_proj; Phi-3's qkv_proj; GPT-2's c_attn; GPT-NeoX's query_key_value) by the projection of the norm of
      the stream plus the delta: within 1e-9;
  (8) every edge of every case changes the loss (leaving it out moves the loss by more than 1e-9), except the
      edge out of a head the same mask ablates, which must change nothing (fixtures.<name>.checks lists it).

    /work/venv/bin/python tools/gen_edge_cases.py

Deterministic (one torch thread, fixed fixtures; byte-identical on re-run); about a minute.
"""
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_mlp_cases as mc  # noqa: E402
import hp_ref  # noqa: E402,F401  (the means and metrics come through gen_mlp_cases, which uses it)

import transformers  # noqa: E402

transformers.logging.set_verbosity_error()

REPO = mc.REPO
FIX = mc.FIX
OUT = os.path.join(FIX, "edge-cases.json")
FIXTURES = ["gpt2-tiny", "llama-gqa", "qwen2-bias", "qwen3-qknorm", "mistral-window", "phi3-fused",
            "neox-parallel", "neox-sequential", "gemma2-softcap", "gemma3-local"]
TASK_FIXTURES = ["llama-gqa"]
ABLATIONS = ["zero", "mean", "mean-pos"]
AB = {"zero": "zero", "mean": "mean", "mean-pos": "mean_pos", "resample": "patch"}
TOL_HF = 1e-10      # (1) the forward against transformers
TOL_ABL = 1e-9      # (1), (3), (7): two computations of the same ablation
TOL_SAME = 1e-12    # (2), (4)
MIN_EFFECT = 1e-9   # (8)
CHANNELS = "qkv"
LLAMA_LIKE = mc.LLAMA_LIKE
GEMMA = ("gemma2", "gemma3_text")  # norms after the attention and after the MLP (sandwich norms)


# ---------------------------------------------------------------- mask text: parse, check, write


def templates(n_layers, parallel):
    """The cases' masks as written (receiver layer Z = the last layer; the brief's "1" on 2-layer models)."""
    Z = n_layers - 1
    t = [f"0.0>{Z}.0:q", f"0.1>{Z}.2:k", f"0.1>{Z}.2:v", f"0.1>{Z}.2", "0.0>logits", f"{Z}.1>logits",
         f"mlp:0>{Z}.1:q", "mlp:0>logits"]
    if not parallel:
        t.append("0.1>mlp:0")
    t += [f"0.2>mlp:{Z}", f"emb>{Z}.0:k", "emb>logits",
          f"0.0>{Z}.0:q,0.1>{Z}.0:q,mlp:0>{Z}.0:q", f"0.1,0.1>{Z}.0:v,0.2>logits"]
    if n_layers > 2:
        # an edge between two later layers, the middle MLP into logits, and a chain: 1.1's output changed by
        # the first edge is what the second takes away (a_u(this) of the patched run)
        t += ["1.1>2.2:k", "mlp:1>logits", "0.3>1.1:v,1.1>2.0:q"]
    elif not parallel:
        t += ["0.3>mlp:0,mlp:0>1.1:q"]
    return t


def invalid_masks(n_layers, parallel):
    """Masks whose edges the semantics do not allow: a checker must refuse them."""
    Z = n_layers - 1
    out = [f"{Z}.0>0.1:q", "0.0>0.1:q", "0.0>0.1", f"mlp:{Z}>0.0:k", "mlp:0>mlp:0", "mlp:0>0.1:v",
           f"logits>{Z}.0:q", "0.1>emb", f"0.4>{Z}.0:q", f"0.0>{Z}.0:x", f"0.0>{n_layers}.0:q"]
    if parallel:
        out.append("0.1>mlp:0")
    return out


def parse_sender(s, n_layers, n_heads):
    if s == "emb":
        return ("emb",)
    if s.startswith("mlp:"):
        l = int(s[4:])
        if not 0 <= l < n_layers:
            raise ValueError(s)
        return ("mlp", l)
    l, h = s.split(".")
    l, h = int(l), int(h)
    if not (0 <= l < n_layers and 0 <= h < n_heads):
        raise ValueError(s)
    return ("head", l, h)


def parse_receiver(s, n_layers, n_heads):
    if s == "logits":
        return [("logits",)]
    if s.startswith("mlp:"):
        l = int(s[4:])
        if not 0 <= l < n_layers:
            raise ValueError(s)
        return [("mlp", l)]
    chans = CHANNELS
    if ":" in s:
        s, chans = s.split(":")
        if chans not in ("q", "k", "v"):
            raise ValueError(chans)
    l, h = s.split(".")
    l, h = int(l), int(h)
    if not (0 <= l < n_layers and 0 <= h < n_heads):
        raise ValueError(s)
    return [("head", l, h, c) for c in chans]


def valid(u, v, parallel):
    if u[0] == "emb" or v[0] == "logits":
        return True
    lv = v[1]
    if u[0] == "head":
        return u[1] < lv or (v[0] == "mlp" and u[1] == lv and not parallel)
    return u[1] < lv  # mlp


def sender_key(u):
    return (-1, 0, 0) if u[0] == "emb" else (u[1], 0, u[2]) if u[0] == "head" else (u[1], 1, 0)


def receiver_key(v, n_layers):
    if v[0] == "logits":
        return (n_layers, 0, 0, 0)
    if v[0] == "mlp":
        return (v[1], 1, 0, 0)
    return (v[1], 0, v[2], CHANNELS.index(v[3]))


def parse_spec(spec, n_layers, n_heads, n_kv, parallel):
    """-> (plain items' text, sorted list of edges (u, v)). ValueError on anything invalid."""
    plain, edges = [], set()
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if ">" in item:
            a, b = item.split(">")
            u = parse_sender(a, n_layers, n_heads)
            for v in parse_receiver(b, n_layers, n_heads):
                if not valid(u, v, parallel):
                    raise ValueError(f"edge {item}: {v} does not read {u}")
                edges.add((u, v))
        else:
            plain.append(item)
    mlps, gate = mc.split_mask(",".join(plain), n_layers, n_heads, n_kv)
    return (mlps, gate), sorted(edges, key=lambda e: (receiver_key(e[1], n_layers), sender_key(e[0])))


def fmt_sender(u):
    return "emb" if u[0] == "emb" else f"{u[1]}.{u[2]}" if u[0] == "head" else f"mlp:{u[1]}"


def fmt_receiver(v):
    return "logits" if v[0] == "logits" else f"mlp:{v[1]}" if v[0] == "mlp" else f"{v[1]}.{v[2]}:{v[3]}"


def fmt_spec(plain, edges):
    """Canonical text: hp_mask_format's plain items, then the edges in order."""
    mlps, gate = plain
    items = []
    n_layers, n_heads = gate.shape
    for l in range(n_layers):
        off = [h for h in range(n_heads) if gate[l, h] == 0]
        items += [f"{l}.*"] if len(off) == n_heads else [f"{l}.{h}" for h in off]
        if l in mlps:
            items.append(f"mlp:{l}")
    items += [f"{fmt_sender(u)}>{fmt_receiver(v)}" for u, v in edges]
    return ",".join(items)


# ---------------------------------------------------------------- the forward


class EdgeNet:
    """The fixture's transformers model (gen_mlp_cases.Model, hooks installed, left in pass-through) run layer
    by layer by this class, with edges patched (the module docstring's semantics)."""

    def __init__(self, m):
        self.m = m
        hf = self.hf = m.model
        cfg = self.cfg = hf.config
        self.fam = m.family
        self.L, self.H, self.KV, self.dh = m.n_layers, m.n_heads, m.n_kv, m.d_head
        self.G = self.H // self.KV
        self.parallel = self.fam == "gpt_neox" and bool(cfg.use_parallel_residual)
        if self.fam == "gpt2":
            assert not cfg.reorder_and_upcast_attn and not cfg.add_cross_attention
            self.layers = hf.transformer.h
            W = [b.attn.c_proj.weight for b in self.layers]                    # Conv1D (H*dh, D): x @ W
            self.wo = [w.reshape(self.H, self.dh, -1) for w in W]
            self.attn_mod = [b.attn for b in self.layers]
        elif self.fam == "gpt_neox":
            self.layers = hf.gpt_neox.layers
            self.wo = [lay.attention.dense.weight.t().reshape(self.H, self.dh, -1) for lay in self.layers]
            self.attn_mod = [lay.attention for lay in self.layers]
            assert self.dh * self.H == cfg.hidden_size
        else:
            assert self.fam in LLAMA_LIKE + GEMMA, self.fam
            self.layers = hf.model.layers
            self.wo = [lay.self_attn.o_proj.weight.t().reshape(self.H, self.dh, -1) for lay in self.layers]
            self.attn_mod = [lay.self_attn for lay in self.layers]
        if self.fam != "gpt2":
            self.apply_rope = sys.modules[type(self.attn_mod[0]).__module__].apply_rotary_pos_emb
        self.D = self.wo[0].shape[-1]
        # Gemma 2 / 3: a head's a_u is the attention block's output after post_attention_layernorm with only
        # that head's o_h changed (other_attn), o_proj has no bias
        self.post_norms = self.fam in GEMMA
        if self.post_norms:
            assert all(a.o_proj.bias is None for a in self.attn_mod)
            assert not getattr(cfg, "use_bidirectional_attention", False)

    # ---- the family's pieces

    def window(self, l):
        c = self.cfg
        if self.fam in ("mistral", "phi3"):
            return getattr(c, "sliding_window", None)
        if self.fam in ("qwen2", "qwen3") + GEMMA:
            lt = getattr(c, "layer_types", None)
            return c.sliding_window if lt is not None and lt[l] == "sliding_attention" else None
        return None

    def embed(self, ids):
        T = ids.shape[1]
        pos = torch.arange(T)[None]
        if self.fam == "gpt2":
            tr = self.hf.transformer
            return tr.wte(ids) + tr.wpe(pos), None
        if self.fam == "gpt_neox":
            x = self.hf.gpt_neox.embed_in(ids)
            return x, self.hf.gpt_neox.rotary_emb(x, pos)
        x = self.hf.model.embed_tokens(ids)
        if self.fam == "gemma2":
            # Gemma2Model: inputs_embeds * torch.tensor(hidden_size ** 0.5, dtype=inputs_embeds.dtype), the
            # rotary cos / sin from the unscaled embeddings (only their dtype matters)
            cs = self.hf.model.rotary_emb(x, pos)
            return x * torch.tensor(self.cfg.hidden_size ** 0.5, dtype=x.dtype), cs
        if self.fam == "gemma3_text":
            # Gemma3TextScaledWordEmbedding multiplies by its embed_scale buffer itself; the global rotary
            # (rope_theta, rope_scaling) and the local one (rope_local_base_freq, default rope)
            return x, {"global": self.hf.model.rotary_emb(x, pos), "local": self.hf.model.rotary_emb_local(x, pos)}
        return x, self.hf.model.rotary_emb(x, pos)

    def layer_cs(self, l, cs):
        """The rotary cos / sin layer l uses (Gemma 3: local on its sliding layers, as Gemma3DecoderLayer)."""
        if self.fam == "gemma3_text":
            return cs["local"] if self.attn_mod[l].is_sliding else cs["global"]
        return cs

    def norm1(self, l, x):
        lay = self.layers[l]
        return lay.ln_1(x) if self.fam == "gpt2" else lay.input_layernorm(x)

    def norm2_module(self, l):
        """The norm the MLP reads the stream through."""
        lay = self.layers[l]
        return lay.ln_2 if self.fam == "gpt2" else lay.pre_feedforward_layernorm if self.post_norms \
            else lay.post_attention_layernorm

    def norm2(self, l, x):
        return self.norm2_module(l)(x)

    def mlp(self, l, xn):
        """The MLP's contribution (Gemma: after post_feedforward_layernorm) from its normed input."""
        lay = self.layers[l]
        if self.post_norms:
            return lay.post_feedforward_layernorm(lay.mlp(xn))
        return lay.mlp(xn)

    def attn_out(self, l, o):
        """The attention block's output as it joins the stream (Gemma: after post_attention_layernorm)."""
        if self.post_norms:
            return self.layers[l].post_attention_layernorm(self.attn_mod[l].o_proj(o))
        return self.o_proj(l, o)

    def other_attn(self, l, h, O, ab, repl):
        """Gemma: the attention block's output with head h's o_h in O (B, T, H, dh) replaced by the ablation's."""
        B, T = O.shape[:2]
        O2 = O.clone()
        O2[:, :, h] = self.head_repl_o(l, h, ab, repl, (B, T, self.dh))
        return self.attn_out(l, O2.reshape(B, T, self.H * self.dh))

    def o_proj(self, l, o):
        a = self.attn_mod[l]
        return a.c_proj(o) if self.fam == "gpt2" else a.dense(o) if self.fam == "gpt_neox" else a.o_proj(o)

    def final(self, x):
        hf = self.hf
        if self.fam == "gpt2":
            return hf.lm_head(hf.transformer.ln_f(x))
        if self.fam == "gpt_neox":
            return hf.embed_out(hf.gpt_neox.final_layer_norm(x))
        z = hf.lm_head(hf.model.norm(x))
        cap = self.cfg.final_logit_softcapping if self.post_norms else None
        if cap is not None:  # Gemma2ForCausalLM / Gemma3ForCausalLM
            z = z / cap
            z = torch.tanh(z)
            z = z * cap
        return z

    def proj(self, l, xn):
        """Normed input -> q (B, T, H, dh), k, v (B, T, KV, dh): after Qwen3's q/k norms, before rotary."""
        B, T, _ = xn.shape
        a, H, KV, dh = self.attn_mod[l], self.H, self.KV, self.dh
        if self.fam == "gpt2":
            q, k, v = a.c_attn(xn).split(a.split_size, dim=2)
        elif self.fam == "gpt_neox":
            q, k, v = a.query_key_value(xn).view(B, T, H, 3 * dh).chunk(3, dim=-1)
        elif self.fam == "phi3":
            qkv = a.qkv_proj(xn)
            qp = H * dh
            q, k, v = qkv[..., :qp], qkv[..., qp:qp + KV * dh], qkv[..., qp + KV * dh:]
        else:
            q, k, v = a.q_proj(xn), a.k_proj(xn), a.v_proj(xn)
        q, k, v = q.reshape(B, T, H, dh), k.reshape(B, T, KV, dh), v.reshape(B, T, KV, dh)
        if self.fam in ("qwen3", "gemma3_text"):
            q, k = a.q_norm(q), a.k_norm(k)
        return q, k, v

    def attend(self, l, q, k, v):
        """q, k, v (B, H, T, dh): each query head with its own keys and values. -> o (B, H, T, dh)."""
        T = q.shape[2]
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        allowed = j <= i
        w = self.window(l)
        if w is not None:
            allowed = allowed & (j > i - w)
        if self.fam == "gpt2":
            a = self.attn_mod[l]
            s = torch.matmul(q, k.transpose(-1, -2))
            if a.scale_attn_weights:
                s = s / torch.full([], v.size(-1) ** 0.5, dtype=s.dtype)
            if a.scale_attn_by_inverse_layer_idx:
                s = s / float(l + 1)
            s = s.masked_fill(~allowed, float("-inf"))
            p = torch.softmax(s, dim=-1)
        else:
            s = torch.matmul(q, k.transpose(2, 3)) * self.attn_mod[l].scaling
            # Gemma 2's attention soft-capping (Gemma3Attention does not pass it; null in the fixture)
            cap = self.attn_mod[l].attn_logit_softcapping if self.fam == "gemma2" else None
            if cap is not None:
                s = s / cap
                s = torch.tanh(s)
                s = s * cap
            s = s.masked_fill(~allowed, float("-inf"))
            p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)  # transformers' eager softmax
        return torch.matmul(p, v)

    def rope(self, q, k, cs):
        if cs is None:
            return q, k
        return self.apply_rope(q, k, cs[0], cs[1])

    # ---- what an ablation puts in a unit's place

    def head_repl_o(self, l, h, ab, repl, shape):
        """The replacement of o_h (B, T, dh), as hp_ref.HeadAblator puts it before the output projection."""
        sl = slice(h * self.dh, (h + 1) * self.dh)
        T = shape[1]
        if ab == "zero":
            return torch.zeros(shape, dtype=torch.float64)
        if ab == "mean":
            return repl["heads"][l][sl].to(torch.float64).expand(shape)
        if ab == "mean_pos":
            return repl["heads"][l][:T, sl].to(torch.float64).unsqueeze(0).expand(shape)
        if ab == "patch":
            src = repl["heads"][l][..., sl].to(torch.float64)
            assert src.shape == shape, (src.shape, shape)
            return src
        raise ValueError(ab)

    def mlp_repl(self, l, ab, repl, shape):
        T = shape[1]
        if ab == "zero":
            return torch.zeros(shape, dtype=torch.float64)
        if ab == "mean":
            return repl["mlps"][l].to(torch.float64).expand(shape)
        if ab == "mean_pos":
            return repl["mlps"][l][:T].to(torch.float64).unsqueeze(0).expand(shape)
        if ab == "patch":
            src = repl["mlps"][l].to(torch.float64)
            assert src.shape == shape, (src.shape, shape)
            return src
        raise ValueError(ab)

    def other(self, u, ab, repl, shape):
        """a_u(other) (broadcastable to shape (B, T, D)), None for 0."""
        if ab == "zero":
            return None
        if u[0] == "emb":
            raise ValueError("emb is a sender under zero only")
        if u[0] == "head":
            _, l, h = u
            assert not self.post_norms, "Gemma: a head's a_u(other) depends on the run (other_attn)"
            return self.head_repl_o(l, h, ab, repl, shape[:2] + (self.dh,)) @ self.wo[l][h]
        return self.mlp_repl(u[1], ab, repl, shape)

    # ---- the pass

    def run(self, ids, plain=None, edges=(), ablation="zero", repl=None, keep_o=False):
        """Logits (B, T, V) with plain = (mlps, gate) ablated and edges patched; ablation "self" patches every
        edge with a_u(other) := a_u(this). A receiver ("head", l, h, "qkv") is the three channels' one shared
        input (check 4)."""
        m = self.m
        assert m.heads.mode is None and m.mlps.mode is None
        ab = ablation if ablation == "self" else AB[ablation]
        mlps_off, gate = plain if plain is not None else ([], torch.ones(self.L, self.H))
        B, T = ids.shape
        shape = (B, T, self.D)
        x, cs = self.embed(ids)
        senders = {u for u, _ in edges}
        incoming = {}
        for u, v in edges:
            incoming.setdefault(v, []).append(u)
        this = {("emb",): x}
        others = {}

        def delta(v):
            d = None
            for u in incoming.get(v, ()):
                a = this[u]
                if ab == "self":
                    o = a
                else:
                    if u not in others:
                        others[u] = self.other(u, ab, repl, shape)
                    o = others[u]
                t = -a if o is None else o - a
                d = t if d is None else d + t
            return d

        os_ = []
        for l in range(self.L):
            xn = self.norm1(l, x)
            q0, k0, v0 = self.proj(l, xn)
            qs, ks, vs = [], [], []
            for h in range(self.H):
                g = h // self.G
                dj = delta(("head", l, h, "qkv"))
                for c, base, idx, out in (("q", q0, h, qs), ("k", k0, g, ks), ("v", v0, g, vs)):
                    d = delta(("head", l, h, c))
                    if dj is not None:
                        d = dj if d is None else d + dj
                    if d is None:
                        out.append(base[:, :, idx])
                    else:
                        p = self.proj(l, self.norm1(l, x + d))[CHANNELS.index(c)]
                        out.append(p[:, :, idx])
            Q = torch.stack(qs, dim=1)  # (B, H, T, dh)
            K = torch.stack(ks, dim=1)
            V = torch.stack(vs, dim=1)
            Q, K = self.rope(Q, K, self.layer_cs(l, cs))
            O = self.attend(l, Q, K, V).transpose(1, 2).contiguous()  # (B, T, H, dh)
            for h in range(self.H):
                if gate[l, h] == 0:
                    O[:, :, h] = self.head_repl_o(l, h, ab, repl, (B, T, self.dh))
            if keep_o:
                os_.append(O.clone())
            attn_out = self.attn_out(l, O.reshape(B, T, self.H * self.dh))
            for h in range(self.H):
                if ("head", l, h) in senders:
                    if self.post_norms:
                        # a_u(other) - a_u(this) = attn block out with o_h replaced - attn block out, per sender
                        this[("head", l, h)] = attn_out
                        if ab != "self":
                            others[("head", l, h)] = self.other_attn(l, h, O, ab, repl)
                    else:
                        this[("head", l, h)] = O[:, :, h] @ self.wo[l][h]
            mid = x if self.parallel else attn_out + x
            d = delta(("mlp", l))
            mo = self.mlp(l, self.norm2(l, mid if d is None else mid + d))
            if l in mlps_off:
                mo = self.mlp_repl(l, ab, repl, mo.shape)
            this[("mlp", l)] = mo
            x = mo + attn_out + x if self.parallel else mid + mo
        d = delta(("logits",))
        z = self.final(x if d is None else x + d)
        return (z, os_) if keep_o else z

    # ---- the same edges on transformers' own forward, by hooks (check 7)

    def hookable(self, plain, edges):
        """Whether hooks can do these edges: no plain items, no sender downstream of a patched receiver, and
        under GQA, per layer, the heads whose keys (values) are patched are whole KV groups with one delta."""
        mlps, gate = plain
        if mlps or bool((gate == 0).any()):
            return False
        recv = {v for _, v in edges}
        for u, _ in edges:
            if u[0] == "emb":
                continue
            for v in recv:
                if v[0] == "head" and v[1] <= u[1]:  # (conservative: a head receiver moves its own layer)
                    return False
                if v[0] == "mlp" and (v[1] < u[1] or (v[1] == u[1] and u[0] == "mlp")):
                    return False
        if self.G > 1:
            for l in range(self.L):
                for c in "kv":
                    for g in range(self.KV):
                        group = [tuple(sorted(sender_key(u) for u, v in edges if v == ("head", l, h, c)))
                                 for h in range(g * self.G, (g + 1) * self.G)]
                        if any(group) and len(set(group)) != 1:
                            return False
        return True

    def hf_edges(self, kw, edges, ablation, repl):
        """transformers' logits with the edges done by hooks (valid only where hookable)."""
        m, hf = self.m, self.hf
        ab = AB[ablation]
        ids = kw["input_ids"]
        B, T = ids.shape
        shape = (B, T, self.D)
        # a_u(this) from the unpatched run: the hooks' records, and the input of layer 0 for emb
        seen = {}
        h0 = self.layers[0].register_forward_pre_hook(
            lambda _m, a, k: seen.__setitem__("emb", (a[0] if a else k["hidden_states"]).clone()), with_kwargs=True)
        try:
            m.record(kw)
        finally:
            h0.remove()
        rec_h, rec_m = list(m.heads.recorded), list(m.mlps.recorded)

        def this(u):
            if u[0] == "emb":
                return seen["emb"]
            if u[0] == "mlp":
                return rec_m[u[1]]
            _, l, h = u
            return rec_h[l][..., h * self.dh:(h + 1) * self.dh] @ self.wo[l][h]

        deltas = {}
        for u, v in edges:
            if self.post_norms and u[0] == "head":
                _, l, h = u
                O = rec_h[l].reshape(B, T, self.H, self.dh)
                t = self.other_attn(l, h, O, ab, repl) - self.attn_out(l, rec_h[l])
                deltas[v] = t if v not in deltas else deltas[v] + t
                continue
            o = self.other(u, ab, repl, shape)
            t = -this(u) if o is None else o - this(u)
            deltas[v] = t if v not in deltas else deltas[v] + t
        handles = []
        hf_model = self.hf
        if self.fam == "gpt2":
            final_norm = hf_model.transformer.ln_f
        elif self.fam == "gpt_neox":
            final_norm = hf_model.gpt_neox.final_layer_norm
        else:
            final_norm = hf_model.model.norm

        def add(d):
            return lambda _m, a: (a[0] + d,) + tuple(a[1:])

        stream = {}
        by_module = {}
        for v, d in deltas.items():
            if v[0] == "logits":
                handles.append(final_norm.register_forward_pre_hook(add(d)))
            elif v[0] == "mlp":
                handles.append(self.norm2_module(v[1]).register_forward_pre_hook(add(d)))
            else:
                _, l, h, c = v
                mod, cols = self.columns(l, h, c)
                by_module.setdefault((l, id(mod)), (mod, []))[1].append((cols, d))
        for l in sorted({k[0] for k in by_module}):
            norm = self.layers[l].ln_1 if self.fam == "gpt2" else self.layers[l].input_layernorm

            def keep(_m, a, l=l):
                stream[l] = a[0]
            handles.append(norm.register_forward_pre_hook(keep))
        for (l, _), (mod, jobs) in by_module.items():
            norm = self.layers[l].ln_1 if self.fam == "gpt2" else self.layers[l].input_layernorm

            def replace(module, _a, out, l=l, jobs=jobs, norm=norm):
                out = out.clone()
                for cols, d in jobs:
                    new = module.forward(norm.forward(stream[l] + d))
                    out[..., cols] = new[..., cols]
                return out
            handles.append(mod.register_forward_hook(replace))
        try:
            return m.logits(kw)
        finally:
            for hd in handles:
                hd.remove()

    def columns(self, l, h, c):
        """(module, column slice) of head h's channel c in the projection's output (for k / v: its KV group's;
        hookable() makes sure the whole group gets the same delta)."""
        a, H, KV, dh = self.attn_mod[l], self.H, self.KV, self.dh
        g = h // self.G
        i = CHANNELS.index(c)
        if self.fam == "gpt2":
            D = H * dh
            return a.c_attn, slice(i * D + h * dh, i * D + (h + 1) * dh)
        if self.fam == "gpt_neox":
            return a.query_key_value, slice(h * 3 * dh + i * dh, h * 3 * dh + (i + 1) * dh)
        if self.fam == "phi3":
            start = (h * dh, H * dh + g * dh, H * dh + KV * dh + g * dh)[i]
            return a.qkv_proj, slice(start, start + dh)
        mod = (a.q_proj, a.k_proj, a.v_proj)[i]
        n = h if c == "q" else g
        return mod, slice(n * dh, (n + 1) * dh)


# ---------------------------------------------------------------- helpers


def maxdiff(a, b):
    return float((a - b).abs().max())


def every_edge(net):
    senders = [("emb",)] + [("head", l, h) for l in range(net.L) for h in range(net.H)] + \
              [("mlp", l) for l in range(net.L)]
    return [(u, v) for v in all_receivers(net) for u in senders if valid(u, v, net.parallel)]


def all_receivers(net):
    out = []
    for l in range(net.L):
        out += [("head", l, h, c) for h in range(net.H) for c in CHANNELS]
        out.append(("mlp", l))
    return out + [("logits",)]


def out_edges(net, u):
    return [(u, v) for v in all_receivers(net) if valid(u, v, net.parallel)]


def means(m, kw, real, ablation):
    """The replacements gen_mlp_cases.Model.masked uses: hp_ref's means of transformers' unmasked run."""
    a = AB[ablation]
    if a not in ("mean", "mean_pos"):
        return None
    m.record(kw)
    m.heads.set_means(real, a)
    m.mlps.set_means(real, a)
    out = {"heads": list(m.heads.repl), "mlps": list(m.mlps.repl)}
    m.heads.repl = m.mlps.repl = None
    return out


def recorded(m, kw):
    m.record(kw)
    return {"heads": list(m.heads.recorded), "mlps": list(m.mlps.recorded)}


# ---------------------------------------------------------------- per fixture


def fixture_cases(name):
    data_file, kind, cls = mc.FIXTURES[name]
    assert kind == "causal"
    m = mc.Model(name, cls)
    data = mc.load_data(name, data_file)
    kw = mc.model_kw(data)
    ids = kw["input_ids"]
    real = mc.real_tokens(data)
    plain_logits = m.logits(kw)
    m.hook()
    net = EdgeNet(m)
    L, H, KV = net.L, net.H, net.KV
    checks = {}
    with torch.no_grad():
        # (1) the forward against transformers
        z0 = net.run(ids)
        checks["forward_vs_transformers"] = maxdiff(z0, plain_logits)
        assert checks["forward_vs_transformers"] <= TOL_HF, (name, checks)
        reps = {ab: means(m, kw, real, ab) for ab in ABLATIONS}
        # (1) plain items, (3) every unit's out-edges, against the hooks on transformers' forward
        checks["plain_vs_hooks"] = checks["out_edges_vs_hooks"] = 0.0
        for ab in ABLATIONS:
            units = [("head", l, h) for l in range(L) for h in range(H)] + [("mlp", l) for l in range(L)]
            for u in units:
                spec = fmt_sender(u)
                want = m.masked(kw, spec, ab, real)
                plain, _ = parse_spec(spec, L, H, KV, net.parallel)
                got_plain = net.run(ids, plain, (), ab, reps[ab])
                got_edges = net.run(ids, None, out_edges(net, u), ab, reps[ab])
                checks["plain_vs_hooks"] = max(checks["plain_vs_hooks"], maxdiff(got_plain, want))
                checks["out_edges_vs_hooks"] = max(checks["out_edges_vs_hooks"], maxdiff(got_edges, want))
        assert checks["plain_vs_hooks"] <= TOL_ABL, (name, checks)
        assert checks["out_edges_vs_hooks"] <= TOL_ABL, (name, checks)
        if net.post_norms:
            # the per-sender differences do not add up to a joint ablation: two heads of a layer, every edge out
            # of both patched, differ from both heads ablated at once (the post-attention norm is not linear),
            # so the cases tell the two semantics apart
            checks["two_heads_out_edges_vs_joint_ablation_min"] = math.inf
            for ab in ABLATIONS:
                for l in range(L):
                    both = out_edges(net, ("head", l, 0)) + out_edges(net, ("head", l, 1))
                    d = maxdiff(net.run(ids, None, both, ab, reps[ab]), m.masked(kw, f"{l}.0,{l}.1", ab, real))
                    checks["two_heads_out_edges_vs_joint_ablation_min"] = min(
                        checks["two_heads_out_edges_vs_joint_ablation_min"], d)
            assert checks["two_heads_out_edges_vs_joint_ablation_min"] > 1e-6, (name, checks)
        # (2) every edge with other := this
        everything = every_edge(net)
        checks["n_valid_edges"] = len(everything)
        checks["self_patch_all_edges"] = maxdiff(net.run(ids, None, everything, "self"), z0)
        assert checks["self_patch_all_edges"] <= TOL_SAME, (name, checks)
        # (4) u>L.H shared input = the three channels
        Z = L - 1
        checks["head_receiver_vs_channels"] = 0.0
        for ab in ABLATIONS:
            for u in (("head", 0, 1), ("mlp", 0)):
                three = [(u, ("head", Z, 2, c)) for c in CHANNELS]
                joint = [(u, ("head", Z, 2, "qkv"))]
                d = maxdiff(net.run(ids, None, three, ab, reps[ab]), net.run(ids, None, joint, ab, reps[ab]))
                checks["head_receiver_vs_channels"] = max(checks["head_receiver_vs_channels"], d)
        assert checks["head_receiver_vs_channels"] <= TOL_SAME, (name, checks)
        # (5) an edge into one head's channel moves that head's o_h only
        _, o_base = net.run(ids, keep_o=True)
        checks["one_head_moved_min"] = math.inf
        for h in range(H):
            for c in CHANNELS:
                _, o = net.run(ids, None, [(("head", 0, 1), ("head", Z, h, c))], "zero", keep_o=True)
                for l in range(L):
                    for h2 in range(H):
                        same = torch.equal(o[l][:, :, h2], o_base[l][:, :, h2])
                        if l == Z and h2 == h:
                            moved = maxdiff(o[l][:, :, h2], o_base[l][:, :, h2])
                            assert moved > 1e-6, f"{name}: 0.1>{Z}.{h}:{c} leaves o_{h} alone ({moved})"
                            checks["one_head_moved_min"] = min(checks["one_head_moved_min"], moved)
                        else:
                            assert same, f"{name}: 0.1>{Z}.{h}:{c} moved head {l}.{h2}'s output"
        # GQA: the extra edge sets check (7) runs (keys / values of a whole KV group)
        extra = []
        if net.G > 1:
            g1 = list(range(net.G, 2 * net.G))
            extra = [",".join(f"0.1>{Z}.{h}:k" for h in range(net.G)),
                     ",".join(f"mlp:0>{Z}.{h}:v" for h in g1),
                     ",".join(f"emb>{Z}.{h}:k" for h in g1)]

        # ---- the cases
        cases = []
        checks["hooks_vs_forward"] = 0.0
        checks["n_hooked"] = 0
        effects = {"edge_effect_min": math.inf, "no_effect_edges": []}
        base = mc.scores(kind, data, plain_logits, plain_logits)

        def case(written, ab):
            plain, edges = parse_spec(written, L, H, KV, net.parallel)
            spec = fmt_spec(plain, edges)
            # the canonical text reads back to itself
            assert parse_spec(spec, L, H, KV, net.parallel)[1] == edges and \
                fmt_spec(*parse_spec(spec, L, H, KV, net.parallel)) == spec, (written, spec)
            z = net.run(ids, plain, edges, ab, reps.get(ab))
            if net.hookable(plain, edges):
                d = maxdiff(net.hf_edges(kw, edges, ab, reps.get(ab)), z)
                checks["hooks_vs_forward"] = max(checks["hooks_vs_forward"], d)
                checks["n_hooked"] += 1
                assert d <= TOL_ABL, f"{name}: {spec} {ab}: hooks vs forward {d}"
            c = {"fixture": name, "data": data_file, "kind": kind, "mask": spec, "ablation": ab}
            c.update(mc.scores(kind, data, z, plain_logits))
            assert mc.finite(c), c
            # (8) each edge changes the loss; the edge out of a head the mask ablates changes nothing
            for e in edges:
                rest = [f for f in edges if f != e]
                lo = mc.scores(kind, data, net.run(ids, plain, rest, ab, reps.get(ab)), plain_logits)["loss"]
                eff = abs(lo - c["loss"])
                u = e[0]
                ablated = (u[0] == "head" and plain[1][u[1], u[2]] == 0) or (u[0] == "mlp" and u[1] in plain[0])
                what = f"{fmt_sender(e[0])}>{fmt_receiver(e[1])} in {spec} ({ab})"
                if ablated:
                    assert eff <= 1e-12, f"{name}: {what}: an ablated unit's edge moves the loss by {eff}"
                    effects["no_effect_edges"].append(what)
                else:
                    assert eff > MIN_EFFECT, f"{name}: {what} changes the loss by {eff} only"
                    effects["edge_effect_min"] = min(effects["edge_effect_min"], eff)
            cases.append(c)
            print(f"  {name:16s} {spec:40s} {ab:9s} loss {c['loss']:.9f} kl {c['kl']:.3e}")
            return c

        b = {"fixture": name, "data": data_file, "kind": kind, "mask": "", "ablation": "zero"}
        b.update(base)
        cases.append(b)
        by_mask = {}
        for ab in ABLATIONS:
            for t in templates(L, net.parallel):
                if t.startswith("emb") and ab != "zero":
                    continue
                c = case(t, ab)
                by_mask[(c["mask"], ab)] = c
            # the ablated head's own edge changes nothing: the case equals the one without it
            plain, edges = parse_spec("0.1,0.2>logits", L, H, KV, net.parallel)
            lo = mc.scores(kind, data, net.run(ids, plain, edges, ab, reps[ab]), plain_logits)["loss"]
            with_edge = by_mask[(f"0.1,0.1>{Z}.0:v,0.2>logits", ab)]["loss"]
            assert abs(lo - with_edge) <= 1e-12, (name, ab, lo, with_edge)
            for t in extra:  # checks only
                if t.startswith("emb") and ab != "zero":
                    continue
                plain, edges = parse_spec(t, L, H, KV, net.parallel)
                assert net.hookable(plain, edges), t
                d = maxdiff(net.hf_edges(kw, edges, ab, reps.get(ab)), net.run(ids, plain, edges, ab, reps.get(ab)))
                checks["hooks_vs_forward"] = max(checks["hooks_vs_forward"], d)
                checks["n_hooked"] += 1
                assert d <= TOL_ABL, (name, t, ab, d)
        checks.update(effects)
        # the masks mlp-cases.json has too: its numbers
        mlp_ref = json.load(open(mc.OUT))
        checks["vs_mlp_cases_json"] = 0.0
        n_vs = 0
        for r in mlp_ref["cases"]:
            if r["fixture"] != name or r["kind"] != "causal":
                continue
            plain, edges = parse_spec(r["mask"], L, H, KV, net.parallel)
            z = net.run(ids, plain, edges, r["ablation"], reps.get(r["ablation"]) if r["mask"] else None)
            s = mc.scores(kind, data, z, plain_logits)
            d = max(abs(s["loss"] - r["loss"]), abs(s["kl"] - r["kl"]),
                    max(abs(a - b) for a, b in zip(s["per_seq_loss"], r["per_seq_loss"])))
            checks["vs_mlp_cases_json"] = max(checks["vs_mlp_cases_json"], d)
            n_vs += 1
        assert n_vs > 0 and checks["vs_mlp_cases_json"] <= TOL_HF, (name, checks)
        # the edges a checker must refuse
        invalid = invalid_masks(L, net.parallel)
        for spec in invalid:
            try:
                parse_spec(spec, L, H, KV, net.parallel)
            except (ValueError, AssertionError):
                continue
            raise AssertionError(f"{name}: {spec} parsed")
        info = {"family": m.family, "kind": kind, "data": data_file, "n_layers": L, "n_heads": H,
                "n_kv_heads": KV, "d_head": net.dh, "n_seqs": int(ids.shape[0]), "seq_len": int(ids.shape[1]),
                "parallel_residual": net.parallel,
                "sliding_window": [net.window(l) for l in range(L)],
                "contribution": mc.CONTRIBUTION[m.family] + " output",
                "invalid": invalid, "checks": checks}
        if name in TASK_FIXTURES:
            tc, info["task_checks"] = task_cases(m, net)
            cases += tc
    m.unhook()
    return info, cases


def task_cases(m, net):
    """Resample cases on the fixture's task.jsonl, one row per forward (gen_mlp_cases.task_cases' rows)."""
    name = m.fixture
    L, H, KV, Z = net.L, net.H, net.KV, net.L - 1
    rows = [json.loads(line) for line in open(os.path.join(FIX, name, "task.jsonl"))]
    kws = [({"input_ids": torch.tensor([r["prompt_ids"]])}, {"input_ids": torch.tensor([r["corrupt_ids"]])})
           for r in rows]
    checks = {"forward_vs_transformers": 0.0, "out_edges_vs_hooks": 0.0, "resample_self": 0.0}
    reps = [recorded(m, c) for _, c in kws]
    selfs = [recorded(m, k) for k, _ in kws]
    clean = torch.cat([m.logits(k)[:, -1] for k, _ in kws])
    corrupt = torch.cat([m.logits(c)[:, -1] for _, c in kws])
    for (k, c), z in zip(kws, clean):
        checks["forward_vs_transformers"] = max(checks["forward_vs_transformers"],
                                                maxdiff(net.run(k["input_ids"])[0, -1], z))
    assert checks["forward_vs_transformers"] <= TOL_HF, (name, checks)
    ld = {w: mc.task_scores(lg, clean, rows, 1.0, 0.0)["logit_diff"] for w, lg in (("clean", clean),
                                                                                   ("corrupt", corrupt))}
    # (3) out-edges under resample = hp_ref's patch of the unit on transformers' forward
    for u in [("head", l, h) for l in range(L) for h in range(H)] + [("mlp", l) for l in range(L)]:
        for (k, c), rep in zip(kws, reps):
            want = m.masked(k, fmt_sender(u), "resample", corrupt_kw=c)
            got = net.run(k["input_ids"], None, out_edges(net, u), "resample", rep)
            checks["out_edges_vs_hooks"] = max(checks["out_edges_vs_hooks"], maxdiff(got, want))
    assert checks["out_edges_vs_hooks"] <= TOL_ABL, (name, checks)
    cases = []

    def case(spec, last):
        c = {"fixture": name, "data": "task.jsonl", "kind": "task", "mask": spec, "ablation": "resample"}
        c.update(mc.task_scores(last, clean, rows, ld["clean"], ld["corrupt"]))
        assert mc.finite(c), c
        cases.append(c)
        print(f"  {name:16s} {spec:40s} resample  loss {c['loss']:.9f} kl {c['kl']:.3e} "
              f"logit_diff {c['logit_diff']:.9f}")
        return c

    b = {"fixture": name, "data": "task.jsonl", "kind": "task", "mask": "", "ablation": "zero"}
    b.update(mc.task_scores(clean, clean, rows, ld["clean"], ld["corrupt"]))
    cases.append(b)
    effect_min = math.inf
    no_effect = []
    for t in templates(L, net.parallel):
        if t.startswith("emb"):
            continue
        plain, edges = parse_spec(t, L, H, KV, net.parallel)
        spec = fmt_spec(plain, edges)
        last = torch.cat([net.run(k["input_ids"], plain, edges, "resample", rep)[:, -1]
                          for (k, _), rep in zip(kws, reps)])
        same = torch.cat([net.run(k["input_ids"], plain, edges, "resample", rep)[:, -1]
                          for (k, _), rep in zip(kws, selfs)])
        checks["resample_self"] = max(checks["resample_self"], maxdiff(same, clean))
        c = case(spec, last)
        for e in edges:
            rest = [f for f in edges if f != e]
            lr = torch.cat([net.run(k["input_ids"], plain, rest, "resample", rep)[:, -1]
                            for (k, _), rep in zip(kws, reps)])
            eff = max(abs(mc.task_scores(lr, clean, rows, ld["clean"], ld["corrupt"])[q] - c[q])
                      for q in ("loss", "logit_diff"))
            what = f"{fmt_sender(e[0])}>{fmt_receiver(e[1])} in {spec} (resample)"
            u = e[0]
            if u[0] == "head" and plain[1][u[1], u[2]] == 0:
                assert eff <= 1e-12, (what, eff)
                no_effect.append(what)
            else:
                assert eff > MIN_EFFECT, f"{name}: {what} changes the task metrics by {eff} only"
                effect_min = min(effect_min, eff)
    assert checks["resample_self"] <= TOL_SAME, (name, checks)
    checks["edge_effect_min"] = effect_min
    checks["no_effect_edges"] = no_effect
    return cases, checks


DOC = ("Edge patching references for headprune's mask items SENDER>RECEIVER (tools/gen_edge_cases.py; regenerate "
       "with `/work/venv/bin/python tools/gen_edge_cases.py`, about a minute; the tool's docstring has the whole "
       "definition and its checks). An edge u>v patches only what receiver v reads from sender u through the "
       "residual stream: v reads x_v = (its input in this run, before its norm) + sum over patched u>v of "
       "(a_u(other) - a_u(this)). Senders: L.H (head H's o_h times its rows of the attention output projection, "
       "no bias), mlp:L (the MLP block's output as it joins the stream: fixtures.<name>.contribution), emb "
       "(the stream before layer 0: token (+ GPT-2 position) embedding; zero ablation only). Receivers: L.H:q, "
       "L.H:k, L.H:v (the input head H's query, keys, values are computed from; under GQA only head H sees the "
       "changed keys / values, its KV group-mates keep theirs), mlp:L (the MLP's input before its norm), logits "
       "(the final stream before the final norm). a_u(this): the sender's output in the run being computed (one "
       "pass, layer by layer: edges upstream change it); a_u(other): 0 (zero), the mean over every real token "
       "of the held-out set of o_h (times W_O[h]) or of the MLP's contribution under the unmasked model (mean; "
       "hp_ref.HeadAblator.set_means: float64 sums stored as float32), the same per position (mean-pos), the "
       "unmasked model's value on the row's corrupt prompt (resample, llama-gqa task rows). Plain mask items "
       "ablate as in mlp-cases.json with the same ablation; an ablated unit's a_u(this) is its replacement, so "
       "an edge out of it changes nothing. Valid edges: a head of layer l or mlp:l' into a receiver of a later "
       "layer; a head of layer l also into mlp:l (not under GPT-NeoX's parallel residual); anything into logits; "
       "emb into anything (fixtures.<name>.invalid: masks to refuse). mask is canonical: plain items first as "
       "hp_mask_format writes them, then the edges by receiver (layer ascending; heads by index with channels "
       "q, k, v, then mlp:L; logits last), then by sender (emb, then by layer, heads by index before mlp:L); a "
       "receiver L.H without channel is written as its three channel edges. Numbers: transformers' modules in "
       "float64 (eager, one thread) run layer by layer by the tool, transformers' float32 islands (Llama-family "
       "RMSNorm, eager softmax, rotary cos/sin) kept, so mask-only cases equal mlp-cases.json's. A case's fields "
       "are mlp-cases.json's: fixture, data, kind (causal: mean next-token loss over every predicted token; task: "
       "one row at a time, the prompt's last position, answer as target), mask, ablation, loss, acc, kl "
       "(KL(unmasked || patched) per scored item), n_tokens, per_seq_loss (task: per_seq and the task metrics). "
       "The case with mask \"\" and ablation zero is the unmasked model. fixtures.<name>.checks holds what the "
       "self-checks measured. Gemma 2 / 3 (gemma2-softcap, gemma3-local; norms after the attention and the MLP): "
       "mlp:L's contribution is post_feedforward_layernorm's output and the MLP reads the stream through "
       "pre_feedforward_layernorm; a head sender L.H is defined by its difference only, a_u(other) - a_u(this) = "
       "post_attention_layernorm(o_proj(O with head H's o_h replaced by the ablation's)) - "
       "post_attention_layernorm(o_proj(O)), O the layer's head outputs in this run (the mask's ablations in it), "
       "each patched edge adding its own difference (heads of one layer into one receiver are not ablated "
       "jointly); emb is the embedding row times sqrt(hidden_size) (float64); the receivers read through "
       "input_layernorm, then q/k norms per head (Gemma 3), the layer's rotary (Gemma 3: rope_local_base_freq on "
       "sliding layers), scores * query_pre_attn_scalar ** -0.5, attention soft-capping (Gemma 2), the sliding "
       "window of layer_types' sliding layers; logits: norm, lm_head, final logit soft-capping (Gemma 2).")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    out = {"doc": DOC, "tool": "tools/gen_edge_cases.py", "transformers": transformers.__version__,
           "torch": torch.__version__, "fixtures": {}, "cases": []}
    only = sys.argv[1:]
    for name in FIXTURES:
        if only and name not in only:
            continue
        info, cases = fixture_cases(name)
        print(f"{name}: {len(cases)} cases, checks {json.dumps(info['checks'])}"
              + (f", task checks {json.dumps(info['task_checks'])}" if "task_checks" in info else ""))
        out["fixtures"][name] = info
        out["cases"] += cases
    assert mc.finite(out)
    if only:
        print(f"(not written: a subset) {len(out['cases'])} cases, {time.time() - t0:.1f} s")
        return
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.chmod(OUT, 0o644)
    print(f"wrote {os.path.relpath(OUT, REPO)}: {len(out['cases'])} cases on {len(out['fixtures'])} fixtures, "
          f"{os.path.getsize(OUT)} bytes, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
