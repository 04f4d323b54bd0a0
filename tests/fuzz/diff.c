/*
 * diff.c -- a differential fuzzer of the engine's numeric paths (issue 23,
 * "Systematic checks"): random tiny models of every architecture, random
 * held-out data, masks and ablations, and five ways of computing the same
 * number that must agree.
 *
 * A case (reproducible from --seed and its number alone) writes a random
 * checkpoint into a scratch folder with a safetensors writer of its own:
 * gpt2 (with or without "transformer.", tied, tied with a stored copy of the
 * head, or untied with its own lm_head.weight), bert (an encoder with its
 * pooling, an MLM head with padding and labels, a sequence classifier), llama
 * (GQA, explicit head_dim, attention_bias and mlp_bias, rope_scaling),
 * mistral (sliding_window), qwen2 (q/k/v biases), qwen3 (q/k norms, attention_bias), phi3 (fused
 * qkv_proj and gate_up_proj, sliding_window), olmo2 (norms after the blocks, q/k norms over every head;
 * its export refused), gemma2 and gemma3_text ((1 + weight) norms before and after attention and the MLP,
 * embeddings scaled, query_pre_attn_scalar, soft caps given, null or the class's, sliding layers by
 * layer_types or the class's pattern, Gemma 3's q/k norms and local rotary base) and gpt_neox (each head's q, k, v together in query_key_value,
 * partial rotary, the parallel residual or not, attention_bias, tied or not); 1-3 layers, 1-4 heads,
 * KV heads dividing them, heads 2-8 wide, vocabularies of 16-64; f32, f16,
 * bf16 or a mix; one file or shards; and with some probability one head's output-projection inputs scaled
 * by up to 1e6 (a massive activation). Then random variants (nothing, all
 * ones, single heads, layers, KV groups, random subsets, all heads,
 * fractional gates) under zero, mean or mean-pos ablation, and these checks:
 *
 *  1 reuse-plain  hp_evaluator_run_many (variants in random groups) against
 *                 the plain path (hp_evaluator_set_plain), every metric the
 *                 model has, whole set and per sequence;
 *  2 grad         hp_evaluator_grad's value (loss, kl; 1 - cos) and the
 *                 metrics its forward measured (hp_evaluator_grad_pass_metrics)
 *                 against the plain path at the same gates; and a gradient
 *                 pass at the unmasked model, whose metrics run_many then
 *                 hands out, against the reuse path's own pass, bit for bit;
 *                 and gradients of the gates from a layer on, passes in a row
 *                 as ig-layer takes them, against whole passes: the same bits
 *                 from that layer on, 0 below (grad-from);
 *  3 export       hp_model_export without a 0/1 mask's heads, reopened and run
 *                 unmasked, against the masked original (plain path): loss,
 *                 acc per sequence, and the forward's outputs; and the pruned
 *                 checkpoint through checks 1, 2 and 4 with the same variants;
 *  4 groups       the reuse path's result of a variant is the same bits
 *                 whichever variants share its pass (two groupings, one
 *                 shuffled and sometimes every variant alone, on the same or
 *                 a fresh evaluator);
 *  5 dead-head    a zero-ablated head's output-projection inputs scaled by
 *                 another random factor (0, or 1e-2 .. 1e6, and at most 1e9
 *                 in all; 6e4 in f16) change no loss or accuracy
 *                 (whole set, per sequence; both paths) and no output.
 *
 * Tolerances (u = 2^-24 ~ 6e-8, float's unit roundoff; REL = 1e-6 ~ 17 u):
 *  - loss:  |a - b| <= REL |b|, as tests/test_reuse.c: both paths compute the
 *    same float activations up to the order of some sums, and a token's loss
 *    lse(z) - z_y is reduced in double from logits each rounded to a few u of
 *    their own size. Its gradient in the logits is p - onehot(y), of 1-norm
 *    2 (1 - p_y) <= 2 min(1, loss), so the loss moves by at most 2 min(1,
 *    loss) max_v |dz_v|: REL |loss| holds, however small the loss, while the
 *    paths' logits differ by under REL / 2 = 5e-7, a few u of logits up to
 *    ~10, which these models' normalised final rows and weights of sigma <= 1
 *    keep them within (closest call: a one-token sequence of loss 7.2e-7 off
 *    by 2.7e-13, 0.38 of its tolerance; models with larger logits would need
 *    REL min(1, loss) max|z| instead);
 *  - KL:    |a - b| <= REL (|b| + loss + sqrt(2 max(|a|, |b|))): a
 *    difference of log-probabilities of the loss's size, rounded relative to
 *    that size, not to KL's; and near KL = 0, where that vanishes, the
 *    logits' own rounding (under REL / 2 apart, as for the loss) moves KL(p
 *    || q) through its gradient in q's logits, q - p, of 1-norm at most
 *    sqrt(2 KL) (Pinsker), and as much through p's (for p near q). Seed 1
 *    case 713, a Gemma 3 model of losses up to 80 nats, whose tokens of loss
 *    1e-22 have KLs of 0 against 8.6e-23 by the two paths, needs that term;
 *    a leak of the ablated head changes a KL of everyday size (0.01-1,
 *    where the first terms rule) by far more;
 *  - acc:   one token per sequence: an argmax flips where the top two logits
 *    are within rounding; a classifier's exactly (its sequences are its
 *    tokens, so one flip each would allow any accuracy; a flip needs two of a
 *    row's few logits within rounding of each other, rare with random logits,
 *    and its finding would show the loss agreeing);
 *  - cos:   |a - b| <= REL (|b| + 1): a dot product over the product of two
 *    norms, rounded relative to the norms, not to the cosine;
 *  - the classifier's loss as any other's: a row's loss is lse(z) - z_y of
 *    one row of a few logits, whose rounding is a few u of the logits rather
 *    than of the loss, but the paths make the same logits: measured equal bit
 *    for bit on every classifier case so far (tests/test_reuse.c's note that
 *    bert-cls differs by 1.9e-6 predates the reuse path's rebuilt output
 *    projection; that fixture too is now equal bit for bit);
 *  - export and outputs: REL max(1, |b|) (tests/test_export.c), outputs REL
 *    max(1, the largest |output|): the pruned checkpoint runs the same
 *    products without the removed heads' columns;
 *  - groups and the kept unmasked pass: the same bits (memcmp): the reuse
 *    path promises a variant's bits never depend on its company (shards,
 *    merges and resumed sweeps store whichever process's result);
 *  - dead-head: the same numbers, exactly (loss, acc, outputs): the copy runs
 *    the same operations on the same shapes, and the head's output is skipped
 *    or multiplied by an exact 0 (forward.c's invariant), so any difference at
 *    all is the ablated head leaking (tests/test_reuse.c allows 1e-6; the
 *    issue's bug moved the loss by 5e-6 relative at a scale of 1e3). Unlike
 *    an export, whose products lose the heads' columns and may group their
 *    sums otherwise in BLIS's blocks of a longer inner dimension.
 * A massive head does not widen any of these: the activations it feeds are
 * normalised (pre-LN, RMSNorm, BERT's post-LN) before anything else reads
 * them, so a rounding of the large residual moves what follows by a few u
 * of it, relative, on both paths alike; only a subtraction of the large part
 * (the bug of issue 23 item 1) or a different sum loses digits.
 * Every check records its largest |a - b| / tolerance; the summary prints
 * them (a check that uses most of its width is worth a look).
 *
 * Output: one line per finding, "FINDING seed=S case=C arch=A check=K
 * model=... mask=... ablation=... metric=... a=... b=... diff=... tol=...",
 * then how to rerun that case alone; exit 1 on any finding, 2 on bad usage.
 * Scratch folders live under $TMPDIR (else /tmp) and are removed, a
 * finding's too unless --keep is given.
 * Must not: depend on anything but the public API (include/headprune.h) and
 * the files it writes itself; leave files behind.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "headprune.h"

#define REL 1e-6

/* KL's tolerance (the opening comment): a and b the two paths' KLs, loss b's loss */
static double kl_tol(double a, double b, double loss)
{
    return REL * (fabs(b) + fabs(loss) + sqrt(2 * fmax(fabs(a), fabs(b))));
}
#define MAX_VARIANTS 12
#define MAX_PRINTED 12 /* findings printed per case; the rest are counted */

// --- random numbers -----------------------------------------------------------------------------

struct rng {
    uint64_t s;
};

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rnext(struct rng *r)
{
    return mix64(r->s += 0x9e3779b97f4a7c15ULL);
}

/* uniform in [lo, hi] */
static int rint_in(struct rng *r, int lo, int hi)
{
    return lo + (int)(rnext(r) % (uint64_t)(hi - lo + 1));
}

/* uniform in [0, 1) */
static double runi(struct rng *r)
{
    return (double)(rnext(r) >> 11) * 0x1p-53;
}

static bool rchance(struct rng *r, double p)
{
    return runi(r) < p;
}

static double rnorm(struct rng *r)
{
    double u1 = runi(r), u2 = runi(r);
    return sqrt(-2.0 * log(u1 > 0 ? u1 : 0x1p-53)) * cos(6.283185307179586 * u2);
}

// --- 16-bit formats -----------------------------------------------------------------------------

enum { DT_F32, DT_F16, DT_BF16, DT_MIXED };
static const char *const dt_json[] = {"F32", "F16", "BF16"};
static const char *const dt_label[] = {"f32", "f16", "bf16", "mixed"};

/* IEEE binary16, round to nearest even (overflow to infinity; the writer keeps values in range) */
static uint16_t to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, m = x & 0x7fffff;
    int e = (int)((x >> 23) & 0xff) - 127 + 15;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        m |= 0x800000;
        int shift = 14 - e;
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)h;
}

/* bfloat16, round to nearest even (no NaN is ever written) */
static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// --- a random checkpoint ------------------------------------------------------------------------

/* the Llama family from A_LLAMA to A_GEMMA3, in the order of config_write's tables */
enum arch_id {
    A_GPT2,
    A_BERT,
    A_LLAMA,
    A_MISTRAL,
    A_QWEN2,
    A_QWEN3,
    A_PHI3,
    A_OLMO2,
    A_GEMMA2,
    A_GEMMA3,
    A_NEOX,
    N_ARCH
};
static const char *const arch_names[N_ARCH] = {"gpt2",  "bert",   "llama",       "mistral", "qwen2",   "qwen3",
                                               "phi3",  "olmo2",  "gemma2",      "gemma3_text", "gpt_neox"};
#define IS_GEMMA(a) ((a) == A_GEMMA2 || (a) == A_GEMMA3)
enum bert_kind { BERT_ENCODER, BERT_MLM, BERT_CLS };

struct spec {
    enum arch_id arch;
    int L, H, KV, dh, d, f, V, n_ctx;
    enum bert_kind bk;
    int n_types, n_labels;
    int pooling;        /* bert encoder: -1 no 1_Pooling folder, 0 mean, 1 cls, 2 max */
    bool prefix;        /* "transformer." (gpt2), "bert." (bert) */
    int tie;            /* -1: key absent (the architecture's default), 0 false, 1 true */
    bool tied;          /* what that means */
    bool tied_copy;     /* a tied head stored too, byte for byte the embedding */
    bool buffers;       /* known-harmless buffers: GPT-2's attn.bias, rotary inv_freq, BERT's position_ids */
    bool pooler;        /* bert encoder: a pooler stored (read only by the classifier) */
    bool head_dim_key;  /* llama family: head_dim written */
    bool qkv_bias, o_bias, mlp_bias;
    int window;         /* mistral, phi3: sliding_window, 0 = null; gemma: its sliding layers' (never null) */
    /* gemma: key -1 absent (the class's default), 0 null, 1 the value */
    int attn_cap_key, final_cap_key;
    double attn_cap, final_cap, qpas; /* the soft caps, query_pre_attn_scalar */
    bool layer_types_key;             /* layer_types written (slides[]), else the class's pattern */
    int pattern;                      /* gemma3 without layer_types: sliding_window_pattern, 0 = absent (6) */
    bool slides[3];                   /* gemma with layer_types: which layers slide */
    double rope_local;                /* gemma3: rope_local_base_freq, 0 = absent (10000) */
    double rotary_pct;  /* gpt_neox: the fraction of a head rotary turns */
    int rot;            /* the dimensions rotary turns: dh, or gpt_neox's int(dh * rotary_pct) */
    bool parallel;      /* gpt_neox: use_parallel_residual */
    int rope;           /* llama family: 0 rope_scaling null, 1 linear (factor 2), 2 {"rope_type": "default"},
                         * 3 dynamic (factor 2), 4 llama3 */
    int shards;         /* 1: model.safetensors; 2, 3: that many shards named by model.safetensors.index.json */
    double rope_theta, eps;
    const char *act;
    bool scale_by_layer; /* gpt2 */
    bool n_inner_key;    /* gpt2: n_inner written (else null: 4 n_embd) */
    int dtype;           /* DT_* */
    double sigma;        /* weights' standard deviation */
    int big_l, big_h;    /* the massive head (big > 1) */
    double big;
    char desc[400];
};

struct tensor {
    char name[128];
    int nd;
    int64_t shape[4];
    float *v;
    size_t n;
    int dt;
};

struct model {
    struct spec sp;
    struct tensor *t;
    int n, cap;
};

enum kind { K_W, K_NORM, K_BIAS, K_MASKBUF, K_INVFREQ, K_POSIDS };

static struct tensor *add(struct model *m, struct rng *r, enum kind k, int nd, int64_t d0, int64_t d1,
                          const char *fmt, ...)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->t = realloc(m->t, (size_t)m->cap * sizeof *m->t);
        if (!m->t)
            abort();
    }
    struct tensor *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->nd = nd;
    t->n = 1;
    if (k == K_MASKBUF) { /* GPT-2's causal-mask buffer (1, 1, n_ctx, n_ctx) */
        t->nd = 4;
        t->shape[0] = t->shape[1] = 1;
        t->shape[2] = t->shape[3] = d0;
        t->n = (size_t)(d0 * d0);
    } else {
        t->shape[0] = d0;
        t->shape[1] = d1;
        for (int i = 0; i < nd; i++)
            t->n *= (size_t)t->shape[i];
    }
    t->v = malloc((t->n ? t->n : 1) * sizeof *t->v);
    if (!t->v)
        abort();
    const struct spec *s = &m->sp;
    for (size_t i = 0; i < t->n; i++) {
        switch (k) {
        case K_W: t->v[i] = (float)(s->sigma * rnorm(r)); break;
        case K_NORM: t->v[i] = (float)(1.0 + 0.2 * rnorm(r)); break;
        case K_BIAS: t->v[i] = (float)(0.3 * s->sigma * rnorm(r)); break;
        case K_MASKBUF: t->v[i] = (float)(i % (size_t)d0 <= i / (size_t)d0); break;
        case K_INVFREQ: t->v[i] = (float)pow(s->rope_theta, -2.0 * (double)i / s->rot); break;
        case K_POSIDS: t->v[i] = (float)i; break;
        }
    }
    /* buffers stay f32; weights in the model's dtype, or each its own */
    t->dt = k >= K_MASKBUF ? DT_F32 : s->dtype == DT_MIXED ? rint_in(r, 0, 2) : s->dtype;
    return t;
}

/* A tensor stored twice (a tied head with its copy): the same dtype and values. */
static void add_copy(struct model *m, const char *name, const char *of)
{
    int src = -1;
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, of) == 0)
            src = i;
    if (src < 0)
        abort();
    if (m->n == m->cap) {
        m->cap *= 2;
        m->t = realloc(m->t, (size_t)m->cap * sizeof *m->t);
        if (!m->t)
            abort();
    }
    struct tensor *t = &m->t[m->n++];
    *t = m->t[src];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->v = malloc(t->n * sizeof *t->v);
    if (!t->v)
        abort();
    memcpy(t->v, m->t[src].v, t->n * sizeof *t->v);
}

static struct tensor *find_tensor(struct model *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, name) == 0)
            return &m->t[i];
    return NULL;
}

static void model_free(struct model *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->t[i].v);
    free(m->t);
    m->t = NULL;
    m->n = m->cap = 0;
}

/* The output projection of layer l, and whether head inputs are its rows (Conv1D) or columns (Linear). */
static void oproj_name(const struct spec *s, int l, char *buf, size_t n, bool *rows)
{
    *rows = s->arch == A_GPT2;
    if (s->arch == A_GPT2)
        snprintf(buf, n, "%sh.%d.attn.c_proj.weight", s->prefix ? "transformer." : "", l);
    else if (s->arch == A_BERT)
        snprintf(buf, n, "%sencoder.layer.%d.attention.output.dense.weight", s->prefix ? "bert." : "", l);
    else if (s->arch == A_NEOX)
        snprintf(buf, n, "gpt_neox.layers.%d.attention.dense.weight", l);
    else
        snprintf(buf, n, "model.layers.%d.self_attn.o_proj.weight", l);
}

/* Is element i of the output projection t an input of head h? */
static bool in_head(const struct spec *s, const struct tensor *t, bool rows, size_t i, int h)
{
    size_t cols = (size_t)t->shape[1];
    size_t in = rows ? i / cols : i % cols;
    return in >= (size_t)h * s->dh && in < (size_t)(h + 1) * s->dh;
}

/* The largest |value| of head h's inputs of layer l's output projection. */
static double head_max(struct model *m, int l, int h)
{
    char name[128];
    bool rows;
    oproj_name(&m->sp, l, name, sizeof name, &rows);
    struct tensor *t = find_tensor(m, name);
    double mx = 0;
    for (size_t i = 0; i < t->n; i++)
        if (in_head(&m->sp, t, rows, i, h))
            mx = fmax(mx, fabs(t->v[i]));
    return mx;
}

/* Head h of layer l's output-projection inputs times factor, in place; an f16 tensor that would overflow becomes
 * bf16 (only at generation: a copy must keep every other head's bits). */
static void scale_head(struct model *m, int l, int h, double factor)
{
    char name[128];
    bool rows;
    oproj_name(&m->sp, l, name, sizeof name, &rows);
    struct tensor *t = find_tensor(m, name);
    if (!t)
        abort();
    for (size_t i = 0; i < t->n; i++)
        if (in_head(&m->sp, t, rows, i, h))
            t->v[i] = (float)(t->v[i] * factor);
}

static void spec_random(struct spec *s, struct rng *r, enum arch_id a)
{
    memset(s, 0, sizeof *s);
    s->arch = a;
    s->L = rint_in(r, 1, 3);
    s->H = rint_in(r, 1, 4);
    s->KV = s->H;
    s->dh = rint_in(r, 2, 8);
    s->V = rint_in(r, 16, 64);
    s->sigma = 0.1 + 0.9 * runi(r);
    s->eps = rchance(r, 0.5) ? 1e-5 : rchance(r, 0.5) ? 1e-12 : 1e-3;
    s->pooling = -1;
    s->tie = -1;
    const double pd = runi(r);
    s->dtype = pd < 0.6 ? DT_F32 : pd < 0.75 ? DT_BF16 : pd < 0.87 ? DT_F16 : DT_MIXED;
    static const char *const gelus[] = {"gelu_new", "gelu", "relu", "gelu_pytorch_tanh"};
    switch (a) {
    case A_GPT2:
        s->d = s->H * s->dh;
        s->n_inner_key = rchance(r, 0.5);
        s->f = s->n_inner_key ? rint_in(r, 4, 48) : 4 * s->d;
        s->prefix = rchance(r, 0.6);
        s->tie = rint_in(r, -1, 1);
        s->tied = s->tie != 0;
        s->tied_copy = s->tied && rchance(r, 0.3);
        s->buffers = rchance(r, 0.3);
        s->act = gelus[rint_in(r, 0, 3)];
        s->scale_by_layer = rchance(r, 0.25);
        break;
    case A_BERT:
        s->d = s->H * s->dh;
        s->f = rint_in(r, 4, 48);
        s->bk = (enum bert_kind)rint_in(r, 0, 2);
        s->n_types = rint_in(r, 1, 2);
        s->prefix = s->bk != BERT_ENCODER || rchance(r, 0.3);
        s->act = rchance(r, 0.7) ? "gelu" : gelus[rint_in(r, 0, 3)];
        s->buffers = rchance(r, 0.3);
        if (s->bk == BERT_ENCODER) {
            s->pooling = rint_in(r, -1, 2);
            s->pooler = rchance(r, 0.5);
        }
        if (s->bk == BERT_MLM) {
            s->tie = rint_in(r, -1, 1);
            s->tied = s->tie != 0;
            s->tied_copy = s->tied && rchance(r, 0.3);
        }
        if (s->bk == BERT_CLS)
            s->n_labels = rint_in(r, 2, 4);
        break;
    case A_LLAMA:
    case A_MISTRAL:
    case A_QWEN2:
    case A_QWEN3:
    case A_PHI3:
    case A_OLMO2:
    case A_GEMMA2:
    case A_GEMMA3: {
        int divs[4], nd = 0;
        for (int k = 1; k <= s->H; k++)
            if (s->H % k == 0)
                divs[nd++] = k;
        s->KV = divs[rint_in(r, 0, nd - 1)];
        s->dh = 2 * rint_in(r, 1, 4); /* rotary: even */
        /* Qwen3Config's head_dim is 128 when absent (and save_pretrained always writes it): always given */
        s->head_dim_key = (a != A_QWEN2 ? rchance(r, 0.5) : rchance(r, 0.2)) || a == A_QWEN3 || IS_GEMMA(a);
        s->d = s->head_dim_key && rchance(r, 0.7) ? rint_in(r, 4, 40) : s->H * s->dh;
        s->f = rint_in(r, 4, 48);
        s->tie = rint_in(r, -1, 1);
        s->tied = s->tie == 1;
        s->tied_copy = s->tied && rchance(r, 0.3);
        s->buffers = rchance(r, 0.3);
        s->act = rchance(r, 0.8) ? "silu" : "gelu";
        s->rope_theta = rchance(r, 0.5) ? 10000.0 : pow(10, 2 + 4 * runi(r));
        s->rope = rint_in(r, 0, 2);
        if (rchance(r, 0.5))
            s->rope = 0;
        if (a == A_LLAMA || a == A_QWEN3 || a == A_OLMO2)
            s->qkv_bias = s->o_bias = rchance(r, 0.4);
        if (a == A_LLAMA)
            s->mlp_bias = rchance(r, 0.4);
        if (a == A_QWEN2)
            s->qkv_bias = true;
        if (IS_GEMMA(a)) {
            s->tied = s->tie != 0; /* Gemma's classes tie by default */
            s->qkv_bias = s->o_bias = rchance(r, 0.3);
            s->act = rchance(r, 0.8) ? "gelu_pytorch_tanh" : "gelu";
            s->qpas = rchance(r, 0.3) ? s->dh : 0.5 + 64 * runi(r);
            const double cap_dflt = a == A_GEMMA2;
            s->attn_cap_key = rchance(r, 0.3) ? -1 : rint_in(r, 0, 1);
            s->final_cap_key = rchance(r, 0.3) ? -1 : rint_in(r, 0, 1);
            s->attn_cap = s->attn_cap_key == 1 ? 0.5 + 10 * runi(r) : s->attn_cap_key < 0 ? 50 * cap_dflt : 0;
            s->final_cap = s->final_cap_key == 1 ? 0.5 + 10 * runi(r) : s->final_cap_key < 0 ? 30 * cap_dflt : 0;
            s->layer_types_key = rchance(r, 0.5);
            for (int l = 0; l < 3; l++)
                s->slides[l] = rchance(r, 0.5);
            if (a == A_GEMMA3) {
                s->pattern = rchance(r, 0.5) ? 0 : rint_in(r, 1, 3);
                s->rope_local = rchance(r, 0.3) ? 0 : pow(10, 2 + 4 * runi(r));
            }
            if (!s->layer_types_key) /* the classes' patterns */
                for (int l = 0; l < 3; l++)
                    s->slides[l] = a == A_GEMMA2 ? l % 2 == 0 : (l + 1) % (s->pattern ? s->pattern : 6) != 0;
        }
        break;
    }
    case A_NEOX: {
        s->dh = 2 * rint_in(r, 1, 4);
        s->d = s->H * s->dh;
        s->f = rint_in(r, 4, 48);
        static const double pcts[] = {1.0, 0.5, 0.25, 0.75};
        s->rotary_pct = pcts[rint_in(r, 0, 3)];
        s->rot = (int)(s->dh * s->rotary_pct);
        if (s->rot < 2 || s->rot % 2) /* an odd or empty rotation is refused: turn the whole head */
            s->rotary_pct = 1.0, s->rot = s->dh;
        s->parallel = rchance(r, 0.7);
        s->qkv_bias = s->o_bias = rchance(r, 0.7);
        s->mlp_bias = true;
        s->tie = rint_in(r, -1, 1);
        s->tied = s->tie == 1;
        s->tied_copy = s->tied && rchance(r, 0.3);
        s->buffers = rchance(r, 0.3);
        s->act = gelus[rint_in(r, 0, 3)];
        s->rope_theta = rchance(r, 0.5) ? 10000.0 : pow(10, 2 + 4 * runi(r));
        s->rope = rchance(r, 0.5) ? 0 : rint_in(r, 0, 2);
        break;
    }
    default: abort();
    }
    if (a != A_NEOX)
        s->rot = s->dh;
    /* the massive head */
    s->big = 1;
    if (rchance(r, 0.4)) {
        s->big_l = rint_in(r, 0, s->L - 1);
        s->big_h = rint_in(r, 0, s->H - 1);
        s->big = pow(10, 1 + 5 * runi(r));
    }
}

/* Every tensor of s, with random values, in the names and shapes the architecture's checkpoints use. */
static void model_random(struct model *m, struct rng *r)
{
    const struct spec *s = &m->sp;
    const int d = s->d, f = s->f, V = s->V, C = s->n_ctx, qd = s->H * s->dh, kvd = s->KV * s->dh;
    if (s->arch == A_GPT2) {
        const char *p = s->prefix ? "transformer." : "";
        add(m, r, K_W, 2, V, d, "%swte.weight", p);
        add(m, r, K_W, 2, C, d, "%swpe.weight", p);
        for (int l = 0; l < s->L; l++) {
            add(m, r, K_NORM, 1, d, 0, "%sh.%d.ln_1.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sh.%d.ln_1.bias", p, l);
            add(m, r, K_W, 2, d, 3 * qd, "%sh.%d.attn.c_attn.weight", p, l);
            add(m, r, K_BIAS, 1, 3 * qd, 0, "%sh.%d.attn.c_attn.bias", p, l);
            add(m, r, K_W, 2, qd, d, "%sh.%d.attn.c_proj.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sh.%d.attn.c_proj.bias", p, l);
            if (s->buffers)
                add(m, r, K_MASKBUF, 4, C, 0, "%sh.%d.attn.bias", p, l);
            add(m, r, K_NORM, 1, d, 0, "%sh.%d.ln_2.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sh.%d.ln_2.bias", p, l);
            add(m, r, K_W, 2, d, f, "%sh.%d.mlp.c_fc.weight", p, l);
            add(m, r, K_BIAS, 1, f, 0, "%sh.%d.mlp.c_fc.bias", p, l);
            add(m, r, K_W, 2, f, d, "%sh.%d.mlp.c_proj.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sh.%d.mlp.c_proj.bias", p, l);
        }
        add(m, r, K_NORM, 1, d, 0, "%sln_f.weight", p);
        add(m, r, K_BIAS, 1, d, 0, "%sln_f.bias", p);
        char wte[64];
        snprintf(wte, sizeof wte, "%swte.weight", p);
        if (!s->tied)
            add(m, r, K_W, 2, V, d, "lm_head.weight");
        else if (s->tied_copy)
            add_copy(m, "lm_head.weight", wte);
    } else if (s->arch == A_BERT) {
        const char *p = s->prefix ? "bert." : "";
        add(m, r, K_W, 2, V, d, "%sembeddings.word_embeddings.weight", p);
        add(m, r, K_W, 2, C, d, "%sembeddings.position_embeddings.weight", p);
        add(m, r, K_W, 2, s->n_types, d, "%sembeddings.token_type_embeddings.weight", p);
        add(m, r, K_NORM, 1, d, 0, "%sembeddings.LayerNorm.weight", p);
        add(m, r, K_BIAS, 1, d, 0, "%sembeddings.LayerNorm.bias", p);
        if (s->buffers)
            add(m, r, K_POSIDS, 2, 1, C, "%sembeddings.position_ids", p);
        for (int l = 0; l < s->L; l++) {
            static const char *const qkv[] = {"query", "key", "value"};
            for (int k = 0; k < 3; k++) {
                add(m, r, K_W, 2, qd, d, "%sencoder.layer.%d.attention.self.%s.weight", p, l, qkv[k]);
                add(m, r, K_BIAS, 1, qd, 0, "%sencoder.layer.%d.attention.self.%s.bias", p, l, qkv[k]);
            }
            add(m, r, K_W, 2, d, qd, "%sencoder.layer.%d.attention.output.dense.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sencoder.layer.%d.attention.output.dense.bias", p, l);
            add(m, r, K_NORM, 1, d, 0, "%sencoder.layer.%d.attention.output.LayerNorm.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sencoder.layer.%d.attention.output.LayerNorm.bias", p, l);
            add(m, r, K_W, 2, f, d, "%sencoder.layer.%d.intermediate.dense.weight", p, l);
            add(m, r, K_BIAS, 1, f, 0, "%sencoder.layer.%d.intermediate.dense.bias", p, l);
            add(m, r, K_W, 2, d, f, "%sencoder.layer.%d.output.dense.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sencoder.layer.%d.output.dense.bias", p, l);
            add(m, r, K_NORM, 1, d, 0, "%sencoder.layer.%d.output.LayerNorm.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%sencoder.layer.%d.output.LayerNorm.bias", p, l);
        }
        if (s->bk == BERT_CLS || s->pooler) {
            add(m, r, K_W, 2, d, d, "%spooler.dense.weight", p);
            add(m, r, K_BIAS, 1, d, 0, "%spooler.dense.bias", p);
        }
        if (s->bk == BERT_CLS) {
            add(m, r, K_W, 2, s->n_labels, d, "classifier.weight");
            add(m, r, K_BIAS, 1, s->n_labels, 0, "classifier.bias");
        }
        if (s->bk == BERT_MLM) {
            add(m, r, K_W, 2, d, d, "cls.predictions.transform.dense.weight");
            add(m, r, K_BIAS, 1, d, 0, "cls.predictions.transform.dense.bias");
            add(m, r, K_NORM, 1, d, 0, "cls.predictions.transform.LayerNorm.weight");
            add(m, r, K_BIAS, 1, d, 0, "cls.predictions.transform.LayerNorm.bias");
            add(m, r, K_BIAS, 1, V, 0, "cls.predictions.bias");
            char wte[80];
            snprintf(wte, sizeof wte, "%sembeddings.word_embeddings.weight", p);
            if (!s->tied)
                add(m, r, K_W, 2, V, d, "cls.predictions.decoder.weight");
            else if (s->tied_copy)
                add_copy(m, "cls.predictions.decoder.weight", wte);
        }
    } else if (s->arch == A_NEOX) {
        add(m, r, K_W, 2, V, d, "gpt_neox.embed_in.weight");
        for (int l = 0; l < s->L; l++) {
            const char *p = "gpt_neox.layers";
            add(m, r, K_NORM, 1, d, 0, "%s.%d.input_layernorm.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%s.%d.input_layernorm.bias", p, l);
            add(m, r, K_W, 2, 3 * qd, d, "%s.%d.attention.query_key_value.weight", p, l); /* a head's q, k, v */
            if (s->qkv_bias)
                add(m, r, K_BIAS, 1, 3 * qd, 0, "%s.%d.attention.query_key_value.bias", p, l);
            add(m, r, K_W, 2, d, qd, "%s.%d.attention.dense.weight", p, l);
            if (s->o_bias)
                add(m, r, K_BIAS, 1, d, 0, "%s.%d.attention.dense.bias", p, l);
            if (s->buffers) {
                add(m, r, K_MASKBUF, 4, C, 0, "%s.%d.attention.bias", p, l);
                add(m, r, K_INVFREQ, 1, s->rot / 2, 0, "%s.%d.attention.rotary_emb.inv_freq", p, l);
            }
            add(m, r, K_NORM, 1, d, 0, "%s.%d.post_attention_layernorm.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%s.%d.post_attention_layernorm.bias", p, l);
            add(m, r, K_W, 2, f, d, "%s.%d.mlp.dense_h_to_4h.weight", p, l);
            add(m, r, K_BIAS, 1, f, 0, "%s.%d.mlp.dense_h_to_4h.bias", p, l);
            add(m, r, K_W, 2, d, f, "%s.%d.mlp.dense_4h_to_h.weight", p, l);
            add(m, r, K_BIAS, 1, d, 0, "%s.%d.mlp.dense_4h_to_h.bias", p, l);
        }
        add(m, r, K_NORM, 1, d, 0, "gpt_neox.final_layer_norm.weight");
        add(m, r, K_BIAS, 1, d, 0, "gpt_neox.final_layer_norm.bias");
        if (!s->tied)
            add(m, r, K_W, 2, V, d, "embed_out.weight");
        else if (s->tied_copy)
            add_copy(m, "embed_out.weight", "gpt_neox.embed_in.weight");
    } else {
        add(m, r, K_W, 2, V, d, "model.embed_tokens.weight");
        for (int l = 0; l < s->L; l++) {
            if (s->arch != A_OLMO2) /* OLMo 2's norms come after the blocks (and Gemma's before and after) */
                add(m, r, K_NORM, 1, d, 0, "model.layers.%d.input_layernorm.weight", l);
            if (s->arch == A_PHI3) {
                add(m, r, K_W, 2, qd + 2 * kvd, d, "model.layers.%d.self_attn.qkv_proj.weight", l);
            } else {
                add(m, r, K_W, 2, qd, d, "model.layers.%d.self_attn.q_proj.weight", l);
                add(m, r, K_W, 2, kvd, d, "model.layers.%d.self_attn.k_proj.weight", l);
                add(m, r, K_W, 2, kvd, d, "model.layers.%d.self_attn.v_proj.weight", l);
            }
            if (s->qkv_bias) {
                add(m, r, K_BIAS, 1, qd, 0, "model.layers.%d.self_attn.q_proj.bias", l);
                add(m, r, K_BIAS, 1, kvd, 0, "model.layers.%d.self_attn.k_proj.bias", l);
                add(m, r, K_BIAS, 1, kvd, 0, "model.layers.%d.self_attn.v_proj.bias", l);
            }
            if (s->arch == A_QWEN3 || s->arch == A_OLMO2 || s->arch == A_GEMMA3) { /* OLMo 2's over all heads */
                const int wq = s->arch == A_OLMO2 ? qd : s->dh, wk = s->arch == A_OLMO2 ? kvd : s->dh;
                add(m, r, K_NORM, 1, wq, 0, "model.layers.%d.self_attn.q_norm.weight", l);
                add(m, r, K_NORM, 1, wk, 0, "model.layers.%d.self_attn.k_norm.weight", l);
            }
            add(m, r, K_W, 2, d, qd, "model.layers.%d.self_attn.o_proj.weight", l);
            if (s->o_bias)
                add(m, r, K_BIAS, 1, d, 0, "model.layers.%d.self_attn.o_proj.bias", l);
            if (s->buffers)
                add(m, r, K_INVFREQ, 1, s->dh / 2, 0, "model.layers.%d.self_attn.rotary_emb.inv_freq", l);
            add(m, r, K_NORM, 1, d, 0, "model.layers.%d.post_attention_layernorm.weight", l);
            if (IS_GEMMA(s->arch))
                add(m, r, K_NORM, 1, d, 0, "model.layers.%d.pre_feedforward_layernorm.weight", l);
            if (s->arch == A_OLMO2 || IS_GEMMA(s->arch))
                add(m, r, K_NORM, 1, d, 0, "model.layers.%d.post_feedforward_layernorm.weight", l);
            if (s->arch == A_PHI3) {
                add(m, r, K_W, 2, 2 * f, d, "model.layers.%d.mlp.gate_up_proj.weight", l);
            } else {
                add(m, r, K_W, 2, f, d, "model.layers.%d.mlp.gate_proj.weight", l);
                add(m, r, K_W, 2, f, d, "model.layers.%d.mlp.up_proj.weight", l);
            }
            add(m, r, K_W, 2, d, f, "model.layers.%d.mlp.down_proj.weight", l);
            if (s->mlp_bias) {
                add(m, r, K_BIAS, 1, f, 0, "model.layers.%d.mlp.gate_proj.bias", l);
                add(m, r, K_BIAS, 1, f, 0, "model.layers.%d.mlp.up_proj.bias", l);
                add(m, r, K_BIAS, 1, d, 0, "model.layers.%d.mlp.down_proj.bias", l);
            }
        }
        add(m, r, K_NORM, 1, d, 0, "model.norm.weight");
        if (!s->tied)
            add(m, r, K_W, 2, V, d, "lm_head.weight");
        else if (s->tied_copy)
            add_copy(m, "lm_head.weight", "model.embed_tokens.weight");
    }
    /* the massive head: an f16 output projection that would overflow is stored bf16 */
    if (s->big > 1) {
        char name[128];
        bool rows;
        oproj_name(s, s->big_l, name, sizeof name, &rows);
        struct tensor *t = find_tensor(m, name);
        scale_head(m, s->big_l, s->big_h, s->big);
        if (t->dt == DT_F16 && head_max(m, s->big_l, s->big_h) > 6e4)
            t->dt = DT_BF16;
    }
}

// --- writing files ------------------------------------------------------------------------------

struct buf {
    char *p;
    size_t n, cap;
};

static void bprintf(struct buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            abort();
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
}

static bool spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* snprintf into a path buffer; a path that does not fit stops the program (the scratch folder's name is short) */
static void path_fmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n) {
        fprintf(stderr, "fuzz_diff: a path is too long: %.80s...\n", buf);
        exit(2);
    }
}

/* model.safetensors: 8-byte little-endian header length, the JSON header (padded with blanks to 8 bytes), the
 * data, each tensor in its dtype */
static bool write_safetensors(const struct model *m, const char *path, int lo, int hi)
{
    struct buf h = {0};
    bprintf(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = lo; i < hi; i++) {
        const struct tensor *t = &m->t[i];
        size_t bytes = t->n * (t->dt == DT_F32 ? 4 : 2);
        bprintf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, dt_json[t->dt]);
        for (int k = 0; k < t->nd; k++)
            bprintf(&h, "%s%" PRId64, k ? "," : "", t->shape[k]);
        bprintf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    bprintf(&h, "}");
    while (h.n % 8)
        bprintf(&h, " ");
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h.p);
        return false;
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    bool ok = fwrite(len, 1, 8, f) == 8 && fwrite(h.p, 1, h.n, f) == h.n;
    for (int i = lo; i < hi && ok; i++) {
        const struct tensor *t = &m->t[i];
        for (size_t k = 0; k < t->n && ok; k++) {
            unsigned char b[4];
            if (t->dt == DT_F32) {
                uint32_t x;
                memcpy(&x, &t->v[k], 4);
                for (int j = 0; j < 4; j++)
                    b[j] = (unsigned char)(x >> (8 * j));
                ok = fwrite(b, 1, 4, f) == 4;
            } else {
                uint16_t x = t->dt == DT_F16 ? to_f16(t->v[k]) : to_bf16(t->v[k]);
                b[0] = (unsigned char)x;
                b[1] = (unsigned char)(x >> 8);
                ok = fwrite(b, 1, 2, f) == 2;
            }
        }
    }
    ok = fclose(f) == 0 && ok;
    free(h.p);
    return ok;
}

/* rope_scaling as config.json writes it: spec.rope's 0 null, 1 linear, 2 default, 3 dynamic, 4 llama3; old: the
 * {"type", "factor"} form, the only one Olmo2Config takes (linear and dynamic only) */
static const char *rope_text(int rope, bool old)
{
    if (old)
        return rope == 1 ? "{\"type\": \"linear\", \"factor\": 2.0}"
               : rope == 3 ? "{\"type\": \"dynamic\", \"factor\": 2.0}"
                           : "null";
    return rope == 1   ? "{\"rope_type\": \"linear\", \"factor\": 2.0}"
           : rope == 2 ? "{\"rope_type\": \"default\"}"
           : rope == 3 ? "{\"rope_type\": \"dynamic\", \"factor\": 2.0}"
           : rope == 4 ? "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8}"
                       : "null";
}

static const char *tie_text(int tie)
{
    return tie == 1 ? "true" : "false";
}

static bool write_config(const struct spec *s, const char *dir)
{
    struct buf b = {0};
    const char *dtn = s->dtype == DT_F16 ? "float16" : s->dtype == DT_BF16 ? "bfloat16" : "float32";
    if (s->arch == A_GPT2) {
        bprintf(&b, "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], \"n_layer\": %d, "
                    "\"n_head\": %d, \"n_embd\": %d, \"n_positions\": %d, \"vocab_size\": %d, ",
                s->L, s->H, s->d, s->n_ctx, s->V);
        if (s->n_inner_key)
            bprintf(&b, "\"n_inner\": %d, ", s->f);
        else
            bprintf(&b, "\"n_inner\": null, ");
        bprintf(&b, "\"activation_function\": \"%s\", \"layer_norm_epsilon\": %.17g, "
                    "\"scale_attn_by_inverse_layer_idx\": %s, \"scale_attn_weights\": true, \"attn_pdrop\": 0.1",
                s->act, s->eps, s->scale_by_layer ? "true" : "false");
    } else if (s->arch == A_BERT) {
        static const char *const archs[] = {"BertModel", "BertForMaskedLM", "BertForSequenceClassification"};
        bprintf(&b, "{\"model_type\": \"bert\", \"architectures\": [\"%s\"], \"hidden_size\": %d, "
                    "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"intermediate_size\": %d, "
                    "\"max_position_embeddings\": %d, \"type_vocab_size\": %d, \"vocab_size\": %d, "
                    "\"hidden_act\": \"%s\", \"layer_norm_eps\": %.17g, \"position_embedding_type\": \"absolute\", "
                    "\"pad_token_id\": 0, \"hidden_dropout_prob\": 0.0",
                archs[s->bk], s->d, s->L, s->H, s->f, s->n_ctx, s->n_types, s->V, s->act, s->eps);
        if (s->bk == BERT_CLS) {
            bprintf(&b, ", \"id2label\": {");
            for (int c = 0; c < s->n_labels; c++)
                bprintf(&b, "%s\"%d\": \"class%d\"", c ? ", " : "", c, c);
            bprintf(&b, "}, \"label2id\": {");
            for (int c = 0; c < s->n_labels; c++)
                bprintf(&b, "%s\"class%d\": %d", c ? ", " : "", c, c);
            bprintf(&b, "}");
        }
    } else if (s->arch == A_NEOX) {
        bprintf(&b, "{\"model_type\": \"gpt_neox\", \"architectures\": [\"GPTNeoXForCausalLM\"], \"hidden_size\": %d, "
                    "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
                    "\"max_position_embeddings\": %d, \"vocab_size\": %d, \"layer_norm_eps\": %.17g, "
                    "\"rotary_emb_base\": %.17g, \"rotary_pct\": %.17g, \"use_parallel_residual\": %s, "
                    "\"attention_bias\": %s, \"hidden_act\": \"%s\", \"rope_scaling\": %s",
                s->d, s->f, s->L, s->H, s->n_ctx, s->V, s->eps, s->rope_theta, s->rotary_pct,
                s->parallel ? "true" : "false", s->qkv_bias ? "true" : "false", s->act, rope_text(s->rope, false));
    } else {
        static const char *const types[] = {"llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "gemma2",
                                            "gemma3_text"};
        static const char *const archs[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                            "Qwen3ForCausalLM", "Phi3ForCausalLM",    "Olmo2ForCausalLM",
                                            "Gemma2ForCausalLM", "Gemma3ForCausalLM"};
        const int k = s->arch - A_LLAMA;
        bprintf(&b, "{\"model_type\": \"%s\", \"architectures\": [\"%s\"], \"hidden_size\": %d, "
                    "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
                    "\"num_key_value_heads\": %d, \"max_position_embeddings\": %d, \"vocab_size\": %d, "
                    "\"rms_norm_eps\": %.17g, \"rope_theta\": %.17g, \"%s\": \"%s\"",
                types[k], archs[k], s->d, s->f, s->L, s->H, s->KV, s->n_ctx, s->V, s->eps, s->rope_theta,
                IS_GEMMA(s->arch) ? "hidden_activation" : "hidden_act", s->act);
        if (s->head_dim_key)
            bprintf(&b, ", \"head_dim\": %d", s->dh);
        else if (s->arch == A_MISTRAL)
            bprintf(&b, ", \"head_dim\": null");
        bprintf(&b, ", \"rope_scaling\": %s", rope_text(s->rope, s->arch == A_OLMO2));
        if (s->arch == A_LLAMA)
            bprintf(&b, ", \"attention_bias\": %s, \"mlp_bias\": %s", s->o_bias ? "true" : "false",
                    s->mlp_bias ? "true" : "false");
        if (s->arch == A_MISTRAL || s->arch == A_PHI3) {
            if (s->window)
                bprintf(&b, ", \"sliding_window\": %d", s->window);
            else
                bprintf(&b, ", \"sliding_window\": null");
        }
        if (s->arch == A_QWEN3 || s->arch == A_OLMO2 || IS_GEMMA(s->arch))
            bprintf(&b, ", \"attention_bias\": %s", s->o_bias ? "true" : "false");
        if (IS_GEMMA(s->arch)) {
            bprintf(&b, ", \"sliding_window\": %d, \"query_pre_attn_scalar\": %.17g", s->window, s->qpas);
            const char *const ck[2] = {"attn_logit_softcapping", "final_logit_softcapping"};
            const int kk[2] = {s->attn_cap_key, s->final_cap_key};
            const double cv[2] = {s->attn_cap, s->final_cap};
            for (int j = 0; j < 2; j++)
                if (kk[j] == 0)
                    bprintf(&b, ", \"%s\": null", ck[j]);
                else if (kk[j] == 1)
                    bprintf(&b, ", \"%s\": %.17g", ck[j], cv[j]);
            if (s->layer_types_key) {
                bprintf(&b, ", \"layer_types\": [");
                for (int l = 0; l < s->L; l++)
                    bprintf(&b, "%s\"%s\"", l ? ", " : "", s->slides[l] ? "sliding_attention" : "full_attention");
                bprintf(&b, "]");
            }
            if (s->pattern)
                bprintf(&b, ", \"sliding_window_pattern\": %d", s->pattern);
            if (s->rope_local)
                bprintf(&b, ", \"rope_local_base_freq\": %.17g", s->rope_local);
        }
        if (s->arch == A_QWEN2 || s->arch == A_QWEN3) {
            bprintf(&b, ", \"use_sliding_window\": false, \"sliding_window\": null, \"layer_types\": [");
            for (int l = 0; l < s->L; l++)
                bprintf(&b, "%s\"full_attention\"", l ? ", " : "");
            bprintf(&b, "]");
        }
    }
    if (s->tie >= 0)
        bprintf(&b, ", \"tie_word_embeddings\": %s", tie_text(s->tie));
    bprintf(&b, ", \"dtype\": \"%s\"}\n", dtn);
    char path[4200];
    path_fmt(path, sizeof path, "%s/config.json", dir);
    bool ok = spit(path, b.p, b.n);
    free(b.p);
    if (ok && s->pooling >= 0) {
        path_fmt(path, sizeof path, "%s/1_Pooling", dir);
        if (mkdir(path, 0700) != 0)
            return false;
        path_fmt(path, sizeof path, "%s/1_Pooling/config.json", dir);
        char txt[256];
        int n = snprintf(txt, sizeof txt,
                         "{\"word_embedding_dimension\": %d, \"pooling_mode_cls_token\": %s, "
                         "\"pooling_mode_mean_tokens\": %s, \"pooling_mode_max_tokens\": %s}\n",
                         s->d, s->pooling == 1 ? "true" : "false", s->pooling == 0 ? "true" : "false",
                         s->pooling == 2 ? "true" : "false");
        ok = spit(path, txt, (size_t)n);
    }
    return ok;
}

static bool write_model(const struct model *m, const char *dir)
{
    char path[4200];
    if (mkdir(dir, 0700) != 0)
        return false;
    if (!write_config(&m->sp, dir))
        return false;
    if (m->sp.shards <= 1) {
        path_fmt(path, sizeof path, "%s/model.safetensors", dir);
        return write_safetensors(m, path, 0, m->n);
    }
    /* shards of about equal tensor counts, and the index naming each tensor's */
    const int k = m->sp.shards;
    struct buf idx = {0};
    bprintf(&idx, "{\"metadata\": {}, \"weight_map\": {");
    bool ok = true;
    for (int j = 0; j < k && ok; j++) {
        const int lo = m->n * j / k, hi = m->n * (j + 1) / k;
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", j + 1, k);
        path_fmt(path, sizeof path, "%s/%s", dir, name);
        ok = write_safetensors(m, path, lo, hi);
        for (int i = lo; i < hi; i++)
            bprintf(&idx, "%s\"%s\": \"%s\"", i ? ", " : "", m->t[i].name, name);
    }
    bprintf(&idx, "}}\n");
    path_fmt(path, sizeof path, "%s/model.safetensors.index.json", dir);
    ok = ok && spit(path, idx.p, idx.n);
    free(idx.p);
    return ok;
}

// --- random held-out data -----------------------------------------------------------------------

struct dataset {
    int n, T;
    int32_t *ids, *labels, *types, *seq_labels; /* (n, T); labels, types, seq_labels may be NULL */
    uint8_t *am;                               /* NULL or (n, T) */
    bool jsonl;
    char desc[64];
};

static void data_free(struct dataset *d)
{
    free(d->ids);
    free(d->labels);
    free(d->types);
    free(d->seq_labels);
    free(d->am);
}

static void data_random(struct dataset *d, const struct spec *s, struct rng *r)
{
    memset(d, 0, sizeof *d);
    const bool causal = s->arch != A_BERT;
    d->T = rint_in(r, 2, s->n_ctx);
    d->n = rchance(r, 0.7) ? rint_in(r, 1, 8) : rint_in(r, 9, 40);
    const size_t N = (size_t)d->n * d->T;
    d->ids = malloc(N * sizeof *d->ids);
    if (!d->ids)
        abort();
    for (size_t i = 0; i < N; i++)
        d->ids[i] = rint_in(r, 0, s->V - 1);
    /* padding: BERT often, causal models sometimes (then .jsonl) */
    if (causal ? rchance(r, 0.15) : rchance(r, 0.6)) {
        d->am = malloc(N);
        for (int q = 0; q < d->n; q++) {
            int len = rchance(r, 0.4) ? d->T : rint_in(r, 1, d->T);
            if (q == 0 && causal)
                len = d->T; /* something is scored */
            for (int t = 0; t < d->T; t++) {
                d->am[(size_t)q * d->T + t] = t < len;
                if (t >= len)
                    d->ids[(size_t)q * d->T + t] = 0;
            }
        }
    }
    if (!causal) {
        if (s->n_types > 1 && rchance(r, 0.7)) {
            d->types = calloc(N, sizeof *d->types);
            for (int q = 0; q < d->n; q++) {
                int cut = rint_in(r, 0, d->T);
                for (int t = cut; t < d->T; t++)
                    if (!d->am || d->am[(size_t)q * d->T + t])
                        d->types[(size_t)q * d->T + t] = 1;
            }
        }
        if (s->bk == BERT_MLM) {
            d->labels = malloc(N * sizeof *d->labels);
            for (size_t i = 0; i < N; i++)
                d->labels[i] = (!d->am || d->am[i]) && rchance(r, 0.3) ? rint_in(r, 0, s->V - 1) : -100;
            d->labels[0] = rint_in(r, 0, s->V - 1); /* position 0 is always real */
        }
        if (s->bk == BERT_CLS) {
            d->seq_labels = malloc((size_t)d->n * sizeof *d->seq_labels);
            for (int q = 0; q < d->n; q++)
                d->seq_labels[q] = rint_in(r, 0, s->n_labels - 1);
        }
    }
    d->jsonl = !causal || d->am || rchance(r, 0.3);
    snprintf(d->desc, sizeof d->desc, "%dx%d%s%s", d->n, d->T, d->am ? " padded" : "", d->jsonl ? " jsonl" : " npy");
}

static void json_ints(struct buf *b, const char *key, const int32_t *v, int n)
{
    bprintf(b, "%s\"%s\": [", b->n && b->p[b->n - 1] != '{' ? ", " : "", key);
    for (int i = 0; i < n; i++)
        bprintf(b, "%s%d", i ? ", " : "", v[i]);
    bprintf(b, "]");
}

static bool write_data(const struct dataset *d, const char *path)
{
    struct buf b = {0};
    if (d->jsonl) {
        int32_t *am = malloc((size_t)d->T * sizeof *am);
        for (int q = 0; q < d->n; q++) {
            const size_t o = (size_t)q * d->T;
            bprintf(&b, "{");
            json_ints(&b, "ids", d->ids + o, d->T);
            if (d->labels)
                json_ints(&b, "labels", d->labels + o, d->T);
            if (d->am) {
                for (int t = 0; t < d->T; t++)
                    am[t] = d->am[o + t];
                json_ints(&b, "attention_mask", am, d->T);
            }
            if (d->types)
                json_ints(&b, "token_type_ids", d->types + o, d->T);
            if (d->seq_labels)
                bprintf(&b, ", \"label\": %d", d->seq_labels[q]);
            bprintf(&b, "}\n");
        }
        free(am);
    } else {
        /* .npy version 1.0: magic, header length, a dict padded to 64 bytes with '\n' last, int32 data */
        char hdr[128];
        int k = snprintf(hdr, sizeof hdr, "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }", d->n,
                         d->T);
        while ((10 + k + 1) % 64)
            hdr[k++] = ' ';
        hdr[k++] = '\n';
        b.cap = 10 + (size_t)k + 4 * (size_t)d->n * d->T;
        if (!(b.p = malloc(b.cap)))
            abort();
        memcpy(b.p, "\x93NUMPY\x01\x00", 8);
        b.p[8] = (char)(k & 0xff);
        b.p[9] = (char)(k >> 8);
        b.n = 10;
        memcpy(b.p + b.n, hdr, (size_t)k);
        b.n += (size_t)k;
        for (size_t i = 0; i < (size_t)d->n * d->T; i++) {
            uint32_t x = (uint32_t)d->ids[i];
            for (int j = 0; j < 4; j++)
                b.p[b.n++] = (char)(x >> (8 * j));
        }
    }
    bool ok = spit(path, b.p, b.n);
    free(b.p);
    return ok;
}

// --- variants -----------------------------------------------------------------------------------

static struct hp_mask *mask_all(const struct hp_model_info *in, float g)
{
    struct hp_mask *m = hp_mask_new(in->n_layers, in->n_heads);
    for (int i = 0; i < in->n_layers * in->n_heads; i++)
        m->gate[i] = g;
    return m;
}

/* A random 0/1 mask ablating at least one head. */
static struct hp_mask *mask_zero_one(const struct hp_model_info *in, struct rng *r)
{
    const int n = in->n_layers * in->n_heads;
    struct hp_mask *m = hp_mask_new(in->n_layers, in->n_heads);
    double p = runi(r);
    for (int i = 0; i < n; i++)
        m->gate[i] = rchance(r, p) ? 0.0f : 1.0f;
    m->gate[rint_in(r, 0, n - 1)] = 0.0f;
    return m;
}

static struct hp_mask *variant_random(const struct hp_model_info *in, struct rng *r)
{
    const int L = in->n_layers, H = in->n_heads, n = L * H;
    struct hp_mask *m;
    switch (rint_in(r, 0, 9)) {
    case 0: return NULL;
    case 1: return mask_all(in, 1.0f);
    case 2: /* one head */
        m = mask_all(in, 1.0f);
        m->gate[rint_in(r, 0, n - 1)] = 0.0f;
        return m;
    case 3: /* a layer */
        m = mask_all(in, 1.0f);
        for (int h = 0, l = rint_in(r, 0, L - 1); h < H; h++)
            m->gate[l * H + h] = 0.0f;
        return m;
    case 4: return mask_zero_one(in, r);
    case 5: /* a KV group or two */
        m = mask_all(in, 1.0f);
        for (int k = rint_in(r, 1, 2); k > 0; k--) {
            const int l = rint_in(r, 0, L - 1), g = rint_in(r, 0, hp_unit_count(in, true) - 1);
            hp_mask_set_unit(m, in, true, l, g, 0.0f);
        }
        return m;
    case 6: return mask_all(in, 0.0f);
    case 7: /* fractional gates */
        m = mask_all(in, 1.0f);
        for (int i = 0; i < n; i++)
            if (rchance(r, 0.5))
                m->gate[i] = (float)(0.05 + 0.9 * runi(r));
        {
            const int i = rint_in(r, 0, n - 1); /* (one statement each: the order would be unspecified) */
            m->gate[i] = (float)(0.05 + 0.9 * runi(r));
        }
        return m;
    case 8: /* zeros and fractions */
        m = mask_all(in, 1.0f);
        for (int i = 0; i < n; i++) {
            double u = runi(r);
            m->gate[i] = u < 0.3 ? 0.0f : u < 0.6 ? (float)(0.05 + 0.9 * runi(r)) : 1.0f;
        }
        return m;
    default: /* one fractional gate */
        m = mask_all(in, 1.0f);
        {
            const int i = rint_in(r, 0, n - 1);
            m->gate[i] = (float)runi(r);
        }
        return m;
    }
}

/* "none", "ones", or the gates that are not 1: "L.H" for 0, "L.H=g" otherwise. */
static void mask_text(const struct hp_mask *m, char *buf, size_t n)
{
    if (!m) {
        snprintf(buf, n, "none");
        return;
    }
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n_layers * m->n_heads && o + 24 < n; i++) {
        float g = m->gate[i];
        if (g == 1.0f)
            continue;
        if (g == 0.0f)
            o += (size_t)snprintf(buf + o, n - o, "%s%d.%d", o ? "," : "", i / m->n_heads, i % m->n_heads);
        else
            o += (size_t)snprintf(buf + o, n - o, "%s%d.%d=%.9g", o ? "," : "", i / m->n_heads, i % m->n_heads, g);
    }
    if (!o)
        snprintf(buf, n, "ones");
}

// --- findings and statistics --------------------------------------------------------------------

enum check { C_REUSE, C_GRAD, C_KEPT, C_FROM, C_EXPORT, C_GROUPS, C_DEAD, C_ENGINE, N_CHECKS };
static const char *const check_names[N_CHECKS] = {"reuse-plain", "grad",   "grad-kept", "grad-from", "export",
                                                  "groups",      "dead-head", "engine"};

struct stats {
    long cases[N_ARCH];
    long compared[N_CHECKS];
    long findings[N_CHECKS];
    double worst[N_CHECKS];         /* largest |a - b| / tol */
    double worst_arch[N_CHECKS][N_ARCH];
    char worst_at[N_CHECKS][200];
};

struct ctx {
    uint64_t seed;
    long case_no;
    enum arch_id arch;
    const struct spec *sp;
    const char *data_desc;
    struct stats *st;
    int findings, printed;
};

static void finding_line(struct ctx *c, enum check k, const char *mask, enum hp_ablation abl, const char *metric,
                         int seq, double a, double b, double tol, const char *extra)
{
    c->findings++;
    c->st->findings[k]++;
    if (c->printed++ >= MAX_PRINTED)
        return;
    char seqs[24] = "";
    if (seq >= 0)
        snprintf(seqs, sizeof seqs, "[seq %d]", seq);
    printf("FINDING seed=%" PRIu64 " case=%ld arch=%s check=%s model=\"%s\" data=\"%s\" mask=%s ablation=%s "
           "metric=%s%s a=%.17g b=%.17g diff=%.3g tol=%.3g%s%s\n",
           c->seed, c->case_no, arch_names[c->arch], check_names[k], c->sp->desc, c->data_desc, mask,
           hp_ablation_name(abl), metric, seqs, a, b, fabs(a - b), tol, extra ? " " : "", extra ? extra : "");
    fflush(stdout);
}

static void engine_error(struct ctx *c, const char *what, const struct hp_error *err)
{
    c->findings++;
    c->st->findings[C_ENGINE]++;
    if (c->printed++ >= MAX_PRINTED)
        return;
    printf("FINDING seed=%" PRIu64 " case=%ld arch=%s check=engine model=\"%s\" data=\"%s\" %s failed: %s\n", c->seed,
           c->case_no, arch_names[c->arch], c->sp->desc, c->data_desc, what, err->msg);
    fflush(stdout);
}

/* a against b within tol (NaN agrees only with NaN); records the ratio */
static bool within(struct ctx *c, enum check k, const char *mask, enum hp_ablation abl, const char *metric, int seq,
                   double a, double b, double tol)
{
    c->st->compared[k]++;
    if (isnan(a) || isnan(b)) {
        if (isnan(a) && isnan(b))
            return true;
        finding_line(c, k, mask, abl, metric, seq, a, b, tol, NULL);
        return false;
    }
    double diff = fabs(a - b), ratio = tol > 0 ? diff / tol : diff > 0 ? INFINITY : 0;
    if (ratio > c->st->worst_arch[k][c->arch])
        c->st->worst_arch[k][c->arch] = ratio;
    if (ratio > c->st->worst[k]) {
        c->st->worst[k] = ratio;
        snprintf(c->st->worst_at[k], sizeof c->st->worst_at[k], "seed %" PRIu64 " case %ld %s %s%s%.0d (%.9g, %.9g)",
                 c->seed, c->case_no, arch_names[c->arch], metric, seq >= 0 ? " seq " : "", seq >= 0 ? seq : 0, a, b);
    }
    if (diff <= tol)
        return true;
    finding_line(c, k, mask, abl, metric, seq, a, b, tol, NULL);
    return false;
}

/* The tolerances of the file's opening comment; cls: a sequence classifier's metrics. */
static void compare_metrics(struct ctx *c, enum check k, const char *mask, enum hp_ablation abl,
                            const struct hp_metrics *a, const struct hp_metrics *b, bool cls)
{
    if (a->n_tokens != b->n_tokens || a->has_loss != b->has_loss || a->n_seqs != b->n_seqs) {
        finding_line(c, k, mask, abl, "n_tokens", -1, (double)a->n_tokens, (double)b->n_tokens, 0, NULL);
        return;
    }
    if (b->has_loss) {
        within(c, k, mask, abl, "loss", -1, a->loss, b->loss, REL * fabs(b->loss));
        /* a classifier's rows are its tokens: one flip per row would allow anything (see the top of the file) */
        within(c, k, mask, abl, "acc", -1, a->acc, b->acc,
               cls || !b->n_tokens ? 0 : (double)b->n_seqs / (double)b->n_tokens);
        within(c, k, mask, abl, "kl", -1, a->kl, b->kl, kl_tol(a->kl, b->kl, b->loss));
    } else {
        within(c, k, mask, abl, "cos", -1, a->cos, b->cos, REL * (fabs(b->cos) + 1));
    }
    for (int s = 0; s < b->n_seqs; s++) {
        if (a->seq_tokens[s] != b->seq_tokens[s]) {
            finding_line(c, k, mask, abl, "seq_tokens", s, (double)a->seq_tokens[s], (double)b->seq_tokens[s], 0,
                         NULL);
            continue;
        }
        if (b->has_loss) {
            within(c, k, mask, abl, "seq_loss", s, a->seq_loss[s], b->seq_loss[s], REL * fabs(b->seq_loss[s]));
            within(c, k, mask, abl, "seq_acc", s, a->seq_acc[s], b->seq_acc[s],
                   cls || !b->seq_tokens[s] ? 0 : 1.0 / (double)b->seq_tokens[s]);
            within(c, k, mask, abl, "seq_kl", s, a->seq_kl[s], b->seq_kl[s],
                   kl_tol(a->seq_kl[s], b->seq_kl[s], b->seq_loss[s]));
        } else {
            within(c, k, mask, abl, "seq_cos", s, a->seq_cos[s], b->seq_cos[s], REL * (fabs(b->seq_cos[s]) + 1));
        }
    }
}

/* loss and acc (whole set and per sequence) within REL max(1, |b|), or exactly: the metrics that do not refer
 * to the unmasked model */
static void compare_loss_acc(struct ctx *c, enum check k, const char *mask, enum hp_ablation abl,
                             const struct hp_metrics *a, const struct hp_metrics *b, bool exact)
{
    if (!b->has_loss)
        return;
    if (a->n_tokens != b->n_tokens) {
        finding_line(c, k, mask, abl, "n_tokens", -1, (double)a->n_tokens, (double)b->n_tokens, 0, NULL);
        return;
    }
#define TOL(x) (exact ? 0 : REL * fmax(1.0, fabs(x)))
    within(c, k, mask, abl, "loss", -1, a->loss, b->loss, TOL(b->loss));
    within(c, k, mask, abl, "acc", -1, a->acc, b->acc, TOL(b->acc));
    for (int s = 0; s < b->n_seqs; s++) {
        within(c, k, mask, abl, "seq_loss", s, a->seq_loss[s], b->seq_loss[s], TOL(b->seq_loss[s]));
        within(c, k, mask, abl, "seq_acc", s, a->seq_acc[s], b->seq_acc[s], TOL(b->seq_acc[s]));
    }
#undef TOL
}

static bool same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* every number of a and b, the same bits */
static void compare_bits(struct ctx *c, enum check k, const char *mask, enum hp_ablation abl,
                         const struct hp_metrics *a, const struct hp_metrics *b)
{
    c->st->compared[k]++;
    const double va[4] = {a->loss, a->acc, a->kl, a->cos}, vb[4] = {b->loss, b->acc, b->kl, b->cos};
    static const char *const names[4] = {"loss", "acc", "kl", "cos"};
    for (int i = 0; i < 4; i++)
        if (!same_double(va[i], vb[i]))
            finding_line(c, k, mask, abl, names[i], -1, va[i], vb[i], 0, "(not the same bits)");
    for (int s = 0; s < b->n_seqs && s < a->n_seqs; s++) {
        const double sa[4] = {a->seq_loss[s], a->seq_acc[s], a->seq_kl[s], a->seq_cos[s]},
                     sb[4] = {b->seq_loss[s], b->seq_acc[s], b->seq_kl[s], b->seq_cos[s]};
        for (int i = 0; i < 4; i++)
            if (!same_double(sa[i], sb[i])) {
                char nm[16];
                snprintf(nm, sizeof nm, "seq_%s", names[i]);
                finding_line(c, k, mask, abl, nm, s, sa[i], sb[i], 0, "(not the same bits)");
            }
    }
}

// --- the forward's outputs ----------------------------------------------------------------------

/* hp_model_forward of every sequence of d under mask: (n, T, width) floats (classifier: (n, width)); NULL on
 * error (reported) */
static float *outputs_of(struct ctx *c, struct hp_model *m, const struct hp_data *d, const struct hp_mask *mask,
                         int *width)
{
    const struct hp_model_info *in = hp_model_get_info(m);
    const int W = in->n_labels ? in->n_labels : in->has_lm_head ? in->n_vocab : in->d_model;
    const size_t per = (size_t)d->seq_len * W;
    float *out = malloc((size_t)d->n_seqs * per * sizeof *out);
    if (!out)
        abort();
    struct hp_error err = {0};
    for (int s = 0; s < d->n_seqs; s++) {
        const size_t o = (size_t)s * d->seq_len;
        if (hp_model_forward(m, d->ids + o, d->attn_mask ? d->attn_mask + o : NULL, d->type_ids ? d->type_ids + o : NULL,
                             d->seq_len, mask, out + (size_t)s * per, &err) != HP_OK) {
            engine_error(c, "hp_model_forward", &err);
            free(out);
            return NULL;
        }
    }
    *width = W;
    return out;
}

/* outputs x against y (each from outputs_of) within REL max(1, largest |y|), padded rows left out */
static void compare_outputs(struct ctx *c, enum check k, const char *mask, const struct hp_model_info *in,
                            const struct hp_data *d, const float *x, const float *y, int W, bool exact)
{
    const size_t per = (size_t)d->seq_len * W, rows = in->n_labels ? 1 : (size_t)d->seq_len;
    double maxref = 0, maxdiff = 0, at_x = 0, at_y = 0;
    int at_s = -1;
    for (int s = 0; s < d->n_seqs; s++)
        for (size_t i = 0; i < rows * W; i++) {
            if (!in->n_labels && d->attn_mask && !d->attn_mask[(size_t)s * d->seq_len + i / W])
                continue;
            const float a = x[s * per + i], b = y[s * per + i];
            maxref = fmax(maxref, fabs(b));
            if (!(fabs(a - b) <= maxdiff)) { /* NaN too */
                maxdiff = isnan(a - b) ? INFINITY : fabs(a - b);
                at_x = a, at_y = b, at_s = s;
            }
        }
    within(c, k, mask, HP_ABLATE_ZERO, "output", at_s, at_x, at_y, exact ? 0 : REL * fmax(1.0, maxref));
}

// --- one case -----------------------------------------------------------------------------------

struct opts {
    uint64_t seed;
    long cases, only_case;
    double seconds;
    bool arch_on[N_ARCH];
    int n_arch;
    enum arch_id arch_list[N_ARCH];
    bool keep, verbose;
    int threads;
    const char *scratch;
};

static void remove_tree(const char *path)
{
    DIR *dir = opendir(path);
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[4200];
            path_fmt(sub, sizeof sub, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(sub);
            else
                unlink(sub);
        }
        closedir(dir);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Evaluate masks[order[...]] in groups on ev (singles: each alone), results into out[i] for masks[i]. */
static enum hp_status run_groups(struct hp_evaluator *ev, struct hp_mask **masks, int n, const int *order,
                                 bool singles, enum hp_ablation abl, struct rng *r, struct hp_metrics **out,
                                 struct hp_error *err)
{
    const struct hp_mask *grp[MAX_VARIANTS];
    struct hp_metrics *res[MAX_VARIANTS];
    for (int i = 0; i < n;) {
        int g = singles ? 1 : rint_in(r, 1, n - i);
        for (int k = 0; k < g; k++)
            grp[k] = masks[order[i + k]];
        enum hp_status st = hp_evaluator_run_many(ev, grp, g, abl, res, err);
        if (st != HP_OK)
            return st;
        for (int k = 0; k < g; k++)
            out[order[i + k]] = res[k];
        i += g;
    }
    return HP_OK;
}

static void free_all(struct hp_metrics **m, int n)
{
    for (int i = 0; i < n; i++) {
        hp_metrics_free(m[i]);
        m[i] = NULL;
    }
}

static void case_dir(const struct opts *o, long cs, const char *sub, char *buf, size_t n)
{
    path_fmt(buf, n, "%s/case-%ld%s%s", o->scratch, cs, sub ? "/" : "", sub ? sub : "");
}

static void describe(struct spec *s)
{
    static const char *const bk[] = {"encoder", "mlm", "cls"};
    int o = snprintf(s->desc, sizeof s->desc, "%s L%d H%d KV%d dh%d d%d f%d V%d ctx%d %s", arch_names[s->arch], s->L,
                     s->H, s->KV, s->dh, s->d, s->f, s->V, s->n_ctx, dt_label[s->dtype]);
    if (s->arch == A_BERT)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " %s", bk[s->bk]);
    if (s->arch == A_BERT && s->bk == BERT_CLS)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " C%d", s->n_labels);
    if (s->arch == A_BERT && s->pooling >= 0)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " pool%d", s->pooling);
    if (s->prefix)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " prefix");
    if (s->tie >= 0 || s->tied_copy)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " tie=%d%s", s->tie, s->tied_copy ? "+copy" : "");
    if (s->qkv_bias || s->o_bias || s->mlp_bias)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " bias%s%s%s", s->qkv_bias ? "-qkv" : "",
                      s->o_bias ? "-o" : "", s->mlp_bias ? "-mlp" : "");
    if (s->head_dim_key)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " head_dim");
    if (s->window)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " window%d", s->window);
    if (s->arch == A_NEOX)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " rot%d%s", s->rot, s->parallel ? " parallel" : "");
    if (IS_GEMMA(s->arch)) {
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " slides");
        for (int l = 0; l < s->L; l++)
            o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, "%d", s->slides[l]);
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " qpas%.3g caps%.3g,%.3g", s->qpas, s->attn_cap,
                      s->final_cap);
        if (s->rope_local)
            o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " local%.3g", s->rope_local);
    }
    if (s->rope)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " rope%d", s->rope);
    if (s->shards > 1)
        o += snprintf(s->desc + o, sizeof s->desc - (size_t)o, " shards%d", s->shards);
    if (s->big > 1)
        snprintf(s->desc + o, sizeof s->desc - (size_t)o, " big%d.%d=%.3g", s->big_l, s->big_h, s->big);
}

/*
 * Checks 1, 2 and 4 of the variants masks (named by texts) under abl: the plain evaluator P against the reuse
 * evaluator R (random groups), R against a second grouping (on R or a fresh *R2), and gradient passes on G at one
 * or two of them against P. hm and hd are P's model and data. False when the engine failed (reported).
 */
static bool paths_agree(struct ctx *c, struct hp_model *hm, const struct hp_data *hd, struct hp_evaluator *P,
                        struct hp_evaluator *R, struct hp_evaluator **R2, struct hp_evaluator *G,
                        struct hp_mask **masks, char (*texts)[256], int n_var, enum hp_ablation abl, struct rng *r)
{
    const struct hp_model_info *in = hp_model_get_info(hm);
    const bool cls = in->n_labels > 0, has_loss = hp_evaluator_has_metric(P, "loss");
    struct hp_error err = {0};
    struct hp_metrics *p[MAX_VARIANTS] = {0}, *ra[MAX_VARIANTS] = {0}, *rb[MAX_VARIANTS] = {0};
    int order[MAX_VARIANTS];
    for (int i = 0; i < n_var; i++)
        order[i] = i;
    bool ok = true;
    for (int i = 0; i < n_var && ok; i++)
        if (hp_evaluator_run(P, masks[i], abl, &p[i], &err) != HP_OK) {
            engine_error(c, "plain hp_evaluator_run", &err);
            ok = false;
        }
    if (ok && run_groups(R, masks, n_var, order, false, abl, r, ra, &err) != HP_OK) {
        engine_error(c, "hp_evaluator_run_many", &err);
        ok = false;
    }
    /* the second grouping: shuffled, sometimes each alone, on the same evaluator or a fresh one */
    for (int i = n_var - 1; i > 0; i--) {
        int j = rint_in(r, 0, i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    const bool singles = rchance(r, 0.3), fresh = rchance(r, 0.5);
    struct hp_evaluator *E = R;
    if (ok && fresh) {
        hp_evaluator_free(*R2);
        *R2 = NULL;
        if (hp_evaluator_new(hm, hd, R2, &err) != HP_OK) {
            engine_error(c, "hp_evaluator_new", &err);
            ok = false;
        }
        E = *R2;
    }
    if (ok && run_groups(E, masks, n_var, order, singles, abl, r, rb, &err) != HP_OK) {
        engine_error(c, "hp_evaluator_run_many (second grouping)", &err);
        ok = false;
    }
    for (int i = 0; i < n_var && ok; i++) {
        compare_metrics(c, C_REUSE, texts[i], abl, ra[i], p[i], cls);
        compare_bits(c, C_GROUPS, texts[i], abl, rb[i], ra[i]);
    }
    /* 2: a gradient pass at one or two of the variants, each metric the model has */
    for (int k = rint_in(r, 1, 2); k > 0 && ok; k--) {
        const int i = rint_in(r, 0, n_var - 1);
        const enum hp_metric ms[2] = {has_loss ? HP_METRIC_LOSS : HP_METRIC_COS, HP_METRIC_KL};
        for (int j = 0; j < (has_loss ? 2 : 1) && ok; j++) {
            const int HH = in->n_layers * in->n_heads;
            double *g = malloc(2 * (size_t)HH * sizeof *g), value = NAN;
            if (hp_evaluator_grad(G, ms[j], masks[i], abl, g, g + HH, &value, &err) != HP_OK) {
                engine_error(c, "hp_evaluator_grad", &err);
                ok = false;
                free(g);
                break;
            }
            free(g);
            char what[32];
            snprintf(what, sizeof what, "grad %s value", hp_metric_name(ms[j]));
            if (ms[j] == HP_METRIC_LOSS)
                within(c, C_GRAD, texts[i], abl, what, -1, value, p[i]->loss, REL * fabs(p[i]->loss));
            else if (ms[j] == HP_METRIC_KL)
                within(c, C_GRAD, texts[i], abl, what, -1, value, p[i]->kl, kl_tol(value, p[i]->kl, p[i]->loss));
            else
                within(c, C_GRAD, texts[i], abl, what, -1, 1.0 - value, p[i]->cos, REL * (fabs(p[i]->cos) + 1));
            struct hp_metrics *gm = NULL;
            if (hp_evaluator_grad_pass_metrics(G, masks[i], abl, &gm, &err) != HP_OK) {
                engine_error(c, "hp_evaluator_grad_pass_metrics", &err);
                ok = false;
                break;
            }
            compare_metrics(c, C_GRAD, texts[i], abl, gm, p[i], cls);
            hp_metrics_free(gm);
        }
    }
    free_all(p, n_var);
    free_all(ra, n_var);
    free_all(rb, n_var);
    return ok;
}

static void run_case(const struct opts *o, long cs, enum arch_id arch, struct stats *stats)
{
    struct rng r = {mix64(o->seed * 0x2545f4914f6cdd1dULL + 0x1234567) ^ mix64((uint64_t)cs + 1)};
    struct model m = {0};
    spec_random(&m.sp, &r, arch);
    struct spec *s = &m.sp;
    /* what was added since the first cases ran comes from a stream of its own, so that their models, data and
     * variants stay those cases' */
    struct rng r2 = {mix64(o->seed * 0x9e3779b97f4a7c15ULL + 0x7654321) ^ mix64((uint64_t)cs + 2)};
    if (s->rope == 1 && rchance(&r2, 0.6))
        s->rope = rint_in(&r2, 3, 4);
    /* the forms the configuration classes take (transformers refuses the others, and so does headprune): Phi3Config
     * only longrope, which is not implemented; Olmo2Config only linear or dynamic in the old {"type", "factor"} */
    if (s->arch == A_PHI3 || (s->arch == A_OLMO2 && (s->rope == 2 || s->rope == 4)))
        s->rope = 0;
    s->shards = rchance(&r2, 0.25) ? rint_in(&r2, 2, 3) : 1;
    s->n_ctx = rint_in(&r, 2, 32);
    if (s->arch == A_MISTRAL || s->arch == A_PHI3)
        s->window = rchance(&r, 0.8) ? rint_in(&r, 1, s->n_ctx + 2) : 0;
    if (IS_GEMMA(s->arch)) /* Gemma's sliding layers need a window */
        s->window = rint_in(&r, 1, s->n_ctx + 2);
    model_random(&m, &r);
    struct dataset ds;
    data_random(&ds, s, &r);
    describe(s);

    struct ctx c = {o->seed, cs, arch, s, ds.desc, stats, 0, 0};
    stats->cases[arch]++;
    char dir[4200], mdir[4200], path[4200];
    case_dir(o, cs, NULL, dir, sizeof dir);
    case_dir(o, cs, "model", mdir, sizeof mdir);
    if (mkdir(dir, 0700) != 0 || !write_model(&m, mdir)) {
        fprintf(stderr, "fuzz_diff: cannot write %s: %s\n", mdir, strerror(errno));
        exit(2);
    }
    path_fmt(path, sizeof path, "%s/data.%s", dir, ds.jsonl ? "jsonl" : "npy");
    if (!write_data(&ds, path)) {
        fprintf(stderr, "fuzz_diff: cannot write %s\n", path);
        exit(2);
    }
    if (o->verbose)
        printf("case %ld: %s; data %s\n", cs, s->desc, ds.desc);

    struct hp_error err = {0};
    struct hp_model *hm = NULL;
    struct hp_data *hd = NULL;
    struct hp_evaluator *P = NULL, *R = NULL, *R2 = NULL, *G = NULL;
    struct hp_mask *masks[MAX_VARIANTS] = {0};
    int n_var = 0;
    if (hp_model_open(mdir, &hm, &err) != HP_OK) {
        engine_error(&c, "hp_model_open", &err);
        goto done;
    }
    if (hp_data_load(path, 0, &hd, &err) != HP_OK) {
        engine_error(&c, "hp_data_load", &err);
        goto done;
    }
    if (hp_evaluator_new(hm, hd, &P, &err) != HP_OK || hp_evaluator_new(hm, hd, &R, &err) != HP_OK ||
        hp_evaluator_new(hm, hd, &G, &err) != HP_OK) {
        engine_error(&c, "hp_evaluator_new", &err);
        goto done;
    }
    hp_evaluator_set_plain(P, true);
    hp_evaluator_keep_grad_metrics(G, true);
    const struct hp_model_info *in = hp_model_get_info(hm);
    const bool has_loss = hp_evaluator_has_metric(P, "loss");

    n_var = rint_in(&r, 1, MAX_VARIANTS);
    for (int i = 0; i < n_var; i++)
        masks[i] = variant_random(in, &r);
    char texts[MAX_VARIANTS][256];
    for (int i = 0; i < n_var; i++)
        mask_text(masks[i], texts[i], sizeof texts[i]);

    /* one or two ablations, each through checks 1, 2, 4 */
    const int n_abl = rint_in(&r, 1, 2);
    enum hp_ablation abls[2];
    abls[0] = (enum hp_ablation)rint_in(&r, 0, 2); /* (not in an initialiser: its order of evaluation is unspecified) */
    abls[1] = (enum hp_ablation)rint_in(&r, 0, 2);
    for (int a = 0; a < n_abl; a++)
        if (!paths_agree(&c, hm, hd, P, R, &R2, G, masks, texts, n_var, abls[a], &r))
            goto done;

    /* 2, kept: a gradient pass at the unmasked model; run_many then hands out its metrics, which must be the
     * reuse path's own bits */
    {
        struct hp_evaluator *K = NULL;
        struct hp_metrics *kept = NULL, *own = NULL;
        const int HH = in->n_layers * in->n_heads;
        double *g = malloc((size_t)HH * sizeof *g), value;
        const enum hp_ablation abl = (enum hp_ablation)rint_in(&r, 0, 2);
        bool ok = hp_evaluator_new(hm, hd, &K, &err) == HP_OK;
        ok = ok && hp_evaluator_grad(K, has_loss ? HP_METRIC_LOSS : HP_METRIC_COS, NULL, abl, g, NULL, &value, &err) ==
                       HP_OK;
        const struct hp_mask *none = NULL;
        ok = ok && hp_evaluator_run_many(K, &none, 1, abl, &kept, &err) == HP_OK;
        ok = ok && hp_evaluator_run_many(R, &none, 1, abl, &own, &err) == HP_OK;
        if (!ok)
            engine_error(&c, "the kept unmasked pass", &err);
        else
            compare_bits(&c, C_KEPT, "none", abl, kept, own);
        hp_metrics_free(kept);
        hp_metrics_free(own);
        hp_evaluator_free(K);
        free(g);
        if (!ok)
            goto done;
    }

    /* 2, from: gradients of the gates from a layer on (hp_evaluator_grad_from), a few passes in a row as integrated
     * gradients a layer at a time take them (a base's gates with layer l's at t), against whole passes on another
     * evaluator: the same bits from layer l on, 0 below */
    if (has_loss || rchance(&r, 0.5)) {
        struct hp_evaluator *F = NULL;
        const int L = in->n_layers, H = in->n_heads, HH = L * H;
        double *g = malloc(4 * (size_t)HH * sizeof *g), *a = g + HH, *gw = a + HH, *aw = gw + HH, v, vw;
        const enum hp_ablation abl = (enum hp_ablation)rint_in(&r, 0, 2);
        const enum hp_metric metric = has_loss ? HP_METRIC_LOSS : HP_METRIC_COS;
        struct hp_mask *base = variant_random(in, &r), *mk = hp_mask_new(L, H);
        bool ok = g && hp_evaluator_new(hm, hd, &F, &err) == HP_OK;
        const int n_pass = rint_in(&r, 1, 2 * L);
        for (int p = 0, l = 0; ok && p < n_pass; p++, l = rchance(&r, 0.6) ? l + (l + 1 < L) : rint_in(&r, 0, L - 1)) {
            for (int i = 0; i < HH; i++) /* variant_random's NULL: the unmasked model */
                mk->gate[i] = base ? base->gate[i] : 1.0f;
            const float t = (float)(0.05 + 0.9 * runi(&r));
            for (int h = 0; h < H; h++)
                mk->gate[l * H + h] = t;
            ok = hp_evaluator_grad_from(F, metric, mk, abl, l, g, a, NULL, &v, &err) == HP_OK &&
                 hp_evaluator_grad(G, metric, mk, abl, gw, aw, &vw, &err) == HP_OK;
            if (!ok)
                break;
            char text[256], nm[48];
            mask_text(mk, text, sizeof text);
            c.st->compared[C_FROM]++;
            if (!same_double(v, vw))
                finding_line(&c, C_FROM, text, abl, hp_metric_name(metric), -1, v, vw, 0, "(value; not the same bits)");
            for (int i = 0; i < HH; i++) {
                const double wg = i < l * H ? 0 : gw[i], wa = i < l * H ? 0 : aw[i];
                snprintf(nm, sizeof nm, "grad[%d.%d] from %d", i / H, i % H, l);
                if (!same_double(g[i], wg))
                    finding_line(&c, C_FROM, text, abl, nm, -1, g[i], wg, 0, "(not the same bits)");
                if (!same_double(a[i], wa))
                    finding_line(&c, C_FROM, text, abl, nm, -1, a[i], wa, 0, "(atp; not the same bits)");
            }
        }
        if (!ok)
            engine_error(&c, "a gradient from a layer on", &err);
        hp_mask_free(base);
        hp_mask_free(mk);
        hp_evaluator_free(F);
        free(g);
        if (!ok)
            goto done;
    }

    /* 5: a zero-ablated head whose output projection is scaled by another factor changes no loss, acc or output */
    {
        struct hp_mask *mk = mask_zero_one(in, &r);
        if (s->big > 1 && rchance(&r, 0.5))
            mk->gate[s->big_l * in->n_heads + s->big_h] = 0.0f;
        /* some of the other heads at fractional gates */
        if (rchance(&r, 0.3))
            for (int i = 0; i < in->n_layers * in->n_heads; i++)
                if (mk->gate[i] == 1.0f && rchance(&r, 0.5))
                    mk->gate[i] = (float)(0.05 + 0.9 * runi(&r));
        int dead[64], n_dead = 0;
        for (int i = 0; i < in->n_layers * in->n_heads && n_dead < 64; i++)
            if (mk->gate[i] == 0.0f)
                dead[n_dead++] = i;
        int at = dead[rint_in(&r, 0, n_dead - 1)];
        if (s->big > 1 && mk->gate[s->big_l * in->n_heads + s->big_h] == 0.0f && rchance(&r, 0.5))
            at = s->big_l * in->n_heads + s->big_h;
        const int l = at / in->n_heads, h = at % in->n_heads;
        double factor = rchance(&r, 0.15) ? 0.0 : pow(10, -2 + 8 * runi(&r));
        char name[128];
        bool rows;
        oproj_name(s, l, name, sizeof name, &rows);
        const struct tensor *t = find_tensor(&m, name);
        const double hm_max = head_max(&m, l, h);
        /* f16 holds at most 65504; and the copy's unmasked model must stay finite (KL and cos compare with it) */
        const double cap = t->dt == DT_F16 ? 6e4 : 1e9;
        if (hm_max * factor > cap)
            factor = cap / hm_max;
        char mtext[256], extra[96], cdir[4200];
        mask_text(mk, mtext, sizeof mtext);
        snprintf(extra, sizeof extra, "(head %d.%d's output projection x %.3g)", l, h, factor);
        scale_head(&m, l, h, factor); /* m is written once more, as this copy, and then only freed */
        case_dir(o, cs, "copy", cdir, sizeof cdir);
        bool wrote = write_model(&m, cdir);
        struct hp_model *cm = NULL;
        struct hp_evaluator *CP = NULL, *CR = NULL;
        struct hp_metrics *a0 = NULL, *a1 = NULL, *b0 = NULL, *b1 = NULL;
        bool ok = wrote;
        if (!wrote) {
            fprintf(stderr, "fuzz_diff: cannot write %s\n", cdir);
            exit(2);
        }
        if (hp_model_open(cdir, &cm, &err) != HP_OK) {
            engine_error(&c, "hp_model_open (scaled copy)", &err);
            ok = false;
        }
        ok = ok && hp_evaluator_new(cm, hd, &CP, &err) == HP_OK && hp_evaluator_new(cm, hd, &CR, &err) == HP_OK;
        if (ok)
            hp_evaluator_set_plain(CP, true);
        ok = ok && hp_evaluator_run(P, mk, HP_ABLATE_ZERO, &a0, &err) == HP_OK &&
             hp_evaluator_run(CP, mk, HP_ABLATE_ZERO, &a1, &err) == HP_OK &&
             hp_evaluator_run(R, mk, HP_ABLATE_ZERO, &b0, &err) == HP_OK &&
             hp_evaluator_run(CR, mk, HP_ABLATE_ZERO, &b1, &err) == HP_OK;
        if (!ok && cm)
            engine_error(&c, "dead-head evaluation", &err);
        if (ok) {
            snprintf(mtext + strlen(mtext), sizeof mtext - strlen(mtext), " %s", extra);
            compare_loss_acc(&c, C_DEAD, mtext, HP_ABLATE_ZERO, a1, a0, true);
            compare_loss_acc(&c, C_DEAD, mtext, HP_ABLATE_ZERO, b1, b0, true);
            int W0, W1;
            float *x0 = outputs_of(&c, hm, hd, mk, &W0), *x1 = x0 ? outputs_of(&c, cm, hd, mk, &W1) : NULL;
            if (x0 && x1)
                compare_outputs(&c, C_DEAD, mtext, in, hd, x1, x0, W0, true);
            free(x0);
            free(x1);
        }
        hp_metrics_free(a0);
        hp_metrics_free(a1);
        hp_metrics_free(b0);
        hp_metrics_free(b1);
        hp_evaluator_free(CP);
        hp_evaluator_free(CR);
        hp_model_close(cm);
        hp_mask_free(mk);
    }

    /* 3: a pruned export of a 0/1 mask, reopened and run unmasked, against the masked original */
    {
        struct hp_mask *mk = rchance(&r, 0.1) ? mask_all(in, 0.0f) : mask_zero_one(in, &r);
        char mtext[256], edir[4200];
        mask_text(mk, mtext, sizeof mtext);
        case_dir(o, cs, "export", edir, sizeof edir);
        struct hp_export_info xi;
        struct hp_model *pm = NULL;
        struct hp_evaluator *PP = NULL;
        struct hp_metrics *want = NULL, *got = NULL;
        if (s->arch == A_OLMO2) { /* its q/k norms span every head: no export without one, nothing written */
            struct stat sb;
            const bool cuts = hp_mask_count_ablated(mk) > 0;
            const enum hp_status xs = hp_model_export(hm, mk, edir, &xi, &err);
            if (cuts ? xs != HP_ERR_UNSUPPORTED || stat(edir, &sb) == 0 : xs != HP_OK)
                finding_line(&c, C_EXPORT, mtext, HP_ABLATE_ZERO, "olmo2 export refused", -1, xs, cuts, 0,
                             err.msg);
        } else if (hp_model_export(hm, mk, edir, &xi, &err) != HP_OK) {
            engine_error(&c, "hp_model_export", &err);
        } else if (hp_model_open(edir, &pm, &err) != HP_OK) {
            engine_error(&c, "hp_model_open (pruned)", &err);
        } else {
            const int n_abl = hp_mask_count_ablated(mk);
            if (hp_model_get_info(pm)->n_pruned != n_abl || xi.n_removed != n_abl)
                finding_line(&c, C_EXPORT, mtext, HP_ABLATE_ZERO, "n_pruned", -1, hp_model_get_info(pm)->n_pruned,
                             n_abl, 0, NULL);
            if (hp_evaluator_new(pm, hd, &PP, &err) != HP_OK) {
                engine_error(&c, "hp_evaluator_new (pruned)", &err);
            } else {
                hp_evaluator_set_plain(PP, true);
                if (hp_evaluator_run(P, mk, HP_ABLATE_ZERO, &want, &err) != HP_OK ||
                    hp_evaluator_run(PP, NULL, HP_ABLATE_ZERO, &got, &err) != HP_OK) {
                    engine_error(&c, "export evaluation", &err);
                } else {
                    compare_loss_acc(&c, C_EXPORT, mtext, HP_ABLATE_ZERO, got, want, false);
                    int W0, W1;
                    float *x0 = outputs_of(&c, hm, hd, mk, &W0), *x1 = x0 ? outputs_of(&c, pm, hd, NULL, &W1) : NULL;
                    if (x0 && x1)
                        compare_outputs(&c, C_EXPORT, mtext, in, hd, x1, x0, W0, false);
                    free(x0);
                    free(x1);
                    /* and the pruned checkpoint through checks 1, 2 and 4: the heads it lacks in every path's
                     * slot tables, masks naming them or not */
                    struct hp_evaluator *PR = NULL, *PR2 = NULL, *PG = NULL;
                    char ptexts[MAX_VARIANTS][256];
                    for (int i = 0; i < n_var; i++)
                        snprintf(ptexts[i], sizeof ptexts[i], "%.100s(on the export without %.100s)", texts[i],
                                 mtext);
                    if (hp_evaluator_new(pm, hd, &PR, &err) != HP_OK || hp_evaluator_new(pm, hd, &PG, &err) != HP_OK)
                        engine_error(&c, "hp_evaluator_new (pruned)", &err);
                    else
                        paths_agree(&c, pm, hd, PP, PR, &PR2, PG, masks, ptexts, n_var,
                                    (enum hp_ablation)rint_in(&r, 0, 2), &r);
                    hp_evaluator_free(PR);
                    hp_evaluator_free(PR2);
                    hp_evaluator_free(PG);
                }
            }
        }
        hp_metrics_free(want);
        hp_metrics_free(got);
        hp_evaluator_free(PP);
        hp_model_close(pm);
        hp_mask_free(mk);
    }

done:
    for (int i = 0; i < n_var; i++)
        hp_mask_free(masks[i]);
    hp_evaluator_free(P);
    hp_evaluator_free(R);
    hp_evaluator_free(R2);
    hp_evaluator_free(G);
    hp_data_free(hd);
    hp_model_close(hm);
    data_free(&ds);
    model_free(&m);
    if (c.findings) {
        if (c.printed > MAX_PRINTED)
            printf("  ... and %d more findings in this case\n", c.printed - MAX_PRINTED);
        printf("  rerun: fuzz_diff --seed %" PRIu64 " --arch %s --case %ld%s\n", o->seed, arch_names[arch], cs,
               o->keep ? "" : " --keep");
        if (o->keep)
            printf("  kept: %s\n", dir);
    }
    if (!(c.findings && o->keep))
        remove_tree(dir);
}

// --- main ---------------------------------------------------------------------------------------

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: fuzz_diff [--seed N] [--cases N | --seconds S] [--arch NAME]... [--case C] [--keep]\n"
            "                 [--threads N] [--verbose]\n"
            "  --seed N      the run's seed (default 1); a case is made from the seed and its number alone\n"
            "  --cases N     run cases 0..N-1 (default 50 unless --seconds is given)\n"
            "  --seconds S   run cases until S seconds have passed (with --cases: whichever ends first)\n"
            "  --arch NAME   gpt2, bert, llama, mistral, qwen2, qwen3, phi3, olmo2 or gpt_neox; repeatable\n"
            "                (default: all, case c takes the (c mod n)-th)\n"
            "  --case C      run case C alone (as a finding's rerun line says)\n"
            "  --keep        keep a case's scratch folder when it has findings\n"
            "  --threads N   BLIS and OpenMP threads (default 1)\n"
            "  --verbose     a line per case\n"
            "Exit status: 0 no finding, 1 findings, 2 bad usage or a file that cannot be written.\n");
    exit(2);
}

static long num_arg(const char *opt, const char *v, long max)
{
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : -1;
    if (!v || *end || errno || x < 0 || x > max) {
        fprintf(stderr, "fuzz_diff: %s takes a whole number from 0 to %ld\n", opt, max);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    struct opts o = {.seed = 1, .cases = -1, .only_case = -1, .seconds = -1, .threads = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            o.seed = v ? strtoull(v, &end, 10) : 0;
            if (!v || *end || errno || *v == '-') {
                fprintf(stderr, "fuzz_diff: --seed takes a whole number\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--cases")) {
            o.cases = num_arg(a, v, 1L << 40), i++;
        } else if (!strcmp(a, "--seconds")) {
            o.seconds = (double)num_arg(a, v, 1L << 30), i++;
        } else if (!strcmp(a, "--case")) {
            o.only_case = num_arg(a, v, 1L << 40), i++;
        } else if (!strcmp(a, "--threads")) {
            o.threads = (int)num_arg(a, v, 256), i++;
        } else if (!strcmp(a, "--arch")) {
            int k = 0;
            while (k < N_ARCH && !(v && !strcmp(v, arch_names[k])))
                k++;
            if (k == N_ARCH) {
                fprintf(stderr, "fuzz_diff: --arch takes gpt2, bert, llama, mistral, qwen2, qwen3, phi3, olmo2, "
                                "gemma2, gemma3_text or gpt_neox\n");
                return 2;
            }
            if (!o.arch_on[k])
                o.arch_list[o.n_arch++] = (enum arch_id)k;
            o.arch_on[k] = true;
            i++;
        } else if (!strcmp(a, "--keep")) {
            o.keep = true;
        } else if (!strcmp(a, "--verbose")) {
            o.verbose = true;
        } else {
            usage();
        }
    }
    if (!o.n_arch)
        for (int k = 0; k < N_ARCH; k++)
            o.arch_list[o.n_arch++] = (enum arch_id)k;
    if (o.cases < 0 && o.seconds < 0)
        o.cases = 50;
    hp_runtime_init(o.threads);

    const char *tmp = getenv("TMPDIR");
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s/hp_diff_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) {
        fprintf(stderr, "fuzz_diff: cannot make a scratch folder %s: %s\n", scratch, strerror(errno));
        return 2;
    }
    o.scratch = scratch;

    struct stats st;
    memset(&st, 0, sizeof st);
    const double t0 = now();
    long done = 0;
    if (o.only_case >= 0) {
        run_case(&o, o.only_case, o.arch_list[o.only_case % o.n_arch], &st);
        done = 1;
    } else {
        for (long cs = 0; o.cases < 0 || cs < o.cases; cs++) {
            if (o.seconds >= 0 && now() - t0 >= o.seconds)
                break;
            run_case(&o, cs, o.arch_list[cs % o.n_arch], &st);
            done++;
        }
    }
    if (!o.keep)
        remove_tree(scratch);
    else
        rmdir(scratch); /* only when no case was kept */

    long n_find = 0;
    for (int k = 0; k < N_CHECKS; k++)
        n_find += st.findings[k];
    printf("fuzz_diff: seed %" PRIu64 ": %ld cases in %.1f s (", o.seed, done, now() - t0);
    for (int k = 0, first = 1; k < N_ARCH; k++)
        if (st.cases[k]) {
            printf("%s%s %ld", first ? "" : ", ", arch_names[k], st.cases[k]);
            first = 0;
        }
    printf("), %ld findings\n", n_find);
    for (int k = 0; k < N_CHECKS; k++) {
        if (!st.compared[k] && !st.findings[k])
            continue;
        printf("  %-11s %9ld compared, %ld findings", check_names[k], st.compared[k], st.findings[k]);
        if (k != C_GROUPS && k != C_KEPT && k != C_FROM) { /* those compare bits */
            printf("; largest diff/tol %.3g (", st.worst[k]);
            for (int a = 0, first = 1; a < N_ARCH; a++)
                if (st.cases[a]) {
                    printf("%s%s %.2g", first ? "" : ", ", arch_names[a], st.worst_arch[k][a]);
                    first = 0;
                }
            printf(")%s%s", st.worst_at[k][0] ? " at " : "", st.worst_at[k]);
        }
        printf("\n");
    }
    return n_find ? 1 : 0;
}
