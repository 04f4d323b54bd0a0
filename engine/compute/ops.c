/*
 * ops.c -- the forward's element-wise and row-wise operations: norms,
 * activations, bias and residual adds, rotary embedding, the masked softmax.
 *
 * Each works on row-major buffers it is handed, in place where the header
 * says so. One section per kind of operation, so that a reverse pass can
 * put each one's backward beside it. Row-wise work is split over OpenMP
 * threads when there is enough of it (hp_op_par); every element is computed
 * the same way whatever the thread count, so results do not depend on it.
 * Must not: allocate, call BLIS, or know the model beyond enum hp_act.
 */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "vmath.h"

// --- norms ------------------------------------------------------------------

/*
 * The sum of (x_i - mean)^2 over a row of d (with mean 0, of x_i^2). The norms' row statistics are all taken
 * over HP_VLANES fixed lanes, as hp_vsum_d sums (vmath.h): vectorisable, and the same order of additions
 * whatever the threads or the buffer's alignment.
 */
static double row_dev2(const float *x, int d, double mean)
{
    double acc[HP_VLANES] = {0};
    int i = 0;
    for (; i + HP_VLANES <= d; i += HP_VLANES)
        for (int j = 0; j < HP_VLANES; j++) {
            const double c = x[i + j] - mean;
            acc[j] += c * c;
        }
    for (; i < d; i++)
        acc[i % HP_VLANES] += (x[i] - mean) * (x[i] - mean);
    return hp_vlanes_total(acc);
}

void hp_op_layer_norm(float *y, const float *x, int T, int d, const float *w, const float *b, float eps)
{
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)T * d))
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * d;
        float *yr = y + (size_t)t * d;
        const double mean = hp_vsum_d(xr, (size_t)d) / d;
        float rstd = (float)(1.0 / sqrt(row_dev2(xr, d, mean) / d + eps));
        float mu = (float)mean;
        for (int i = 0; i < d; i++)
            yr[i] = (xr[i] - mu) * rstd * w[i] + b[i];
    }
}


/*
 * Its reverse: with xhat = (x - mean) rstd and g = dy w, dx = rstd (g - mean(g) - xhat mean(g xhat)),
 * added to dx. The statistics are recomputed from x as the forward computed them.
 */
void hp_op_layer_norm_backward(float *dx, const float *dy, const float *x, int T, int d, const float *w, float eps)
{
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)T * d))
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * d, *gr = dy + (size_t)t * d;
        float *dr = dx + (size_t)t * d;
        const double mean = hp_vsum_d(xr, (size_t)d) / d, rstd = 1.0 / sqrt(row_dev2(xr, d, mean) / d + eps);
        double ag[HP_VLANES] = {0}, agx[HP_VLANES] = {0};
        int i = 0;
        for (; i + HP_VLANES <= d; i += HP_VLANES)
            for (int j = 0; j < HP_VLANES; j++) {
                const double g = (double)gr[i + j] * w[i + j];
                ag[j] += g;
                agx[j] += g * (xr[i + j] - mean);
            }
        for (; i < d; i++) {
            const double g = (double)gr[i] * w[i];
            ag[i % HP_VLANES] += g;
            agx[i % HP_VLANES] += g * (xr[i] - mean);
        }
        const double sg = hp_vlanes_total(ag) / d, sgx = hp_vlanes_total(agx) * rstd / d;
        for (i = 0; i < d; i++) {
            const double xh = (xr[i] - mean) * rstd;
            dr[i] += (float)(rstd * ((double)gr[i] * w[i] - sg - xh * sgx));
        }
    }
}

/* One row's RMSNorm: y (d) = w x / rms(x); y may equal x. */
static void rms_row(float *yr, const float *xr, int d, const float *w, float eps)
{
    float r = (float)(1.0 / sqrt(row_dev2(xr, d, 0.0) / d + eps));
    for (int i = 0; i < d; i++)
        yr[i] = w[i] * (xr[i] * r);
}

/* One row's reverse: with r = 1 / rms(x) and g = dy w, dx = r g - x r^3 mean(g x), added to dx (add) or in
 * its place; dx may equal dy (each element reads its own dy after the sums). */
static void rms_row_backward(float *dr, const float *gr, const float *xr, int d, const float *w, float eps, bool add)
{
    double agx[HP_VLANES] = {0};
    int i = 0;
    for (; i + HP_VLANES <= d; i += HP_VLANES)
        for (int j = 0; j < HP_VLANES; j++)
            agx[j] += (double)gr[i + j] * w[i + j] * xr[i + j];
    for (; i < d; i++)
        agx[i % HP_VLANES] += (double)gr[i] * w[i] * xr[i];
    double r = 1.0 / sqrt(row_dev2(xr, d, 0.0) / d + eps), k = r * r * r * hp_vlanes_total(agx) / d;
    for (i = 0; i < d; i++)
        dr[i] = (add ? dr[i] : 0.0f) + (float)(r * gr[i] * w[i] - xr[i] * k);
}

void hp_op_rms_norm(float *y, const float *x, int T, int d, const float *w, float eps)
{
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)T * d))
    for (int t = 0; t < T; t++)
        rms_row(y + (size_t)t * d, x + (size_t)t * d, d, w, eps);
}

void hp_op_rms_norm_backward(float *dx, const float *dy, const float *x, int T, int d, const float *w, float eps)
{
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)T * d))
    for (int t = 0; t < T; t++)
        rms_row_backward(dx + (size_t)t * d, dy + (size_t)t * d, x + (size_t)t * d, d, w, eps, true);
}

void hp_op_head_rms_norm(float *x, float *raw, int N, int ld, int h0, int h1, int dh, const float *w, float eps)
{
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)N * (h1 - h0) * dh))
    for (int t = 0; t < N; t++)
        for (int h = h0; h < h1; h++) {
            float *xr = x + (size_t)t * ld + (size_t)h * dh;
            if (raw)
                memcpy(raw + (size_t)t * ld + (size_t)h * dh, xr, (size_t)dh * sizeof(float));
            rms_row(xr, xr, dh, w, eps);
        }
}

void hp_op_head_rms_norm_backward(float *dx, const float *raw, int N, int ld, int h0, int h1, int dh, const float *w,
                                  float eps)
{
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)N * (h1 - h0) * dh))
    for (int t = 0; t < N; t++)
        for (int h = h0; h < h1; h++) {
            const size_t o = (size_t)t * ld + (size_t)h * dh;
            rms_row_backward(dx + o, dx + o, raw + o, dh, w, eps, false);
        }
}

// --- activations ------------------------------------------------------------

float hp_op_act(enum hp_act a, float x)
{
    switch (a) {
    case HP_ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case HP_ACT_GELU_TANH: {
        /* 0.5 x (1 + tanh(u)) = x sigmoid(2u): one expf instead of glibc's slow tanhf */
        float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return x / (1.0f + expf(-2.0f * u));
    }
    case HP_ACT_RELU:
        return x > 0 ? x : 0;
    case HP_ACT_SILU:
        return x / (1.0f + expf(-x));
    }
    return x;
}


/* The derivative of activation a at x, in double (the reverse pass's precision). */
double hp_op_act_grad(enum hp_act a, float x)
{
    double v = x;
    switch (a) {
    case HP_ACT_GELU:
        return 0.5 * (1.0 + erf(v * 0.70710678118654752)) + v * exp(-0.5 * v * v) * 0.39894228040143268;
    case HP_ACT_GELU_TANH: {
        double c = 0.79788456080286536, th = tanh(c * (v + 0.044715 * v * v * v));
        return 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * c * (1.0 + 3 * 0.044715 * v * v);
    }
    case HP_ACT_RELU:
        return x > 0 ? 1.0 : 0.0;
    case HP_ACT_SILU: {
        double sg = 1.0 / (1.0 + exp(-v));
        return sg * (1.0 + v * (1.0 - sg));
    }
    }
    return 1.0;
}

/* gelu_new and SiLU are both x sigmoid(s): s = 2 sqrt(2/pi) (x + 0.044715 x^3) for gelu_new (0.5 x (1 + tanh(u))
 * with s = 2u), s = x for SiLU */
static inline float sigmoid_arg(enum hp_act a, float x)
{
    return a == HP_ACT_SILU ? x : 2.0f * (0.79788456080286536f * (x + 0.044715f * x * x * x));
}

void hp_op_act_span(enum hp_act a, float *y, const float *x, const float *g, size_t n)
{
    if (a != HP_ACT_GELU_TANH && a != HP_ACT_SILU) {
        for (size_t i = 0; i < n; i++)
            y[i] = g ? g[i] * hp_op_act(a, x[i]) : hp_op_act(a, x[i]);
        return;
    }
    float e[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        size_t k = n - i0 < 256 ? n - i0 : 256;
        const float *xs = x + i0;
        for (size_t i = 0; i < k; i++)
            e[i] = -sigmoid_arg(a, xs[i]);
        hp_vexpf(e, e, 0.0f, k);
        for (size_t i = 0; i < k; i++) {
            float v = xs[i] / (1.0f + e[i]);
            y[i0 + i] = g ? g[i0 + i] * v : v;
        }
    }
}

void hp_op_act_span_backward(enum hp_act a, float *dx, float *dg, const float *dy, const float *x, const float *g,
                             size_t n)
{
    if (a != HP_ACT_GELU_TANH && a != HP_ACT_SILU) {
        for (size_t i = 0; i < n; i++) {
            const double d = dy[i], gi = g ? g[i] : 1.0, xi = x[i];
            if (dg)
                dg[i] = (float)(d * hp_op_act(a, (float)xi));
            dx[i] = (float)(d * gi * hp_op_act_grad(a, (float)xi));
        }
        return;
    }
    /* both are x sigmoid(s) (see hp_op_act_span): act' = sg + x sg (1 - sg) ds/dx */
    float e[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        size_t k = n - i0 < 256 ? n - i0 : 256;
        const float *xs = x + i0;
        for (size_t i = 0; i < k; i++)
            e[i] = -sigmoid_arg(a, xs[i]);
        hp_vexpf(e, e, 0.0f, k);
        for (size_t i = 0; i < k; i++) {
            const float xi = xs[i], sg = 1.0f / (1.0f + e[i]), d = dy[i0 + i], gi = g ? g[i0 + i] : 1.0f;
            const float ds = a == HP_ACT_SILU ? 1.0f : 2.0f * 0.79788456080286536f * (1.0f + 3 * 0.044715f * xi * xi);
            if (dg)
                dg[i0 + i] = d * xi * sg;
            dx[i0 + i] = d * gi * (sg + xi * sg * (1.0f - sg) * ds);
        }
    }
}

// --- bias and residual adds -------------------------------------------------

void hp_op_add_bias(float *y, int T, int n, ptrdiff_t rs, const float *b)
{
    if (!b)
        return;
#pragma omp parallel for schedule(static) if (hp_op_par((size_t)T * n))
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++)
            y[t * rs + i] += b[i];
}


void hp_op_add_into(float *x, const float *y, size_t n)
{
#pragma omp parallel for schedule(static) if (hp_op_par(n))
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}


// --- rotary embedding -------------------------------------------------------

/* Frequency i of r at length T, as modeling_rope_utils computes it (in float where it does). */
static float rope_inv_freq(const struct hp_rope *r, int i, int T, int d_head)
{
    float base = r->theta;
    if (r->type == HP_ROPE_DYNAMIC && T > r->original_max) /* NTK: the base grows past the trained length */
        base = (float)(r->theta * pow(r->factor * T / r->original_max - (r->factor - 1), (double)d_head / (d_head - 2)));
    float inv = 1.0f / powf(base, (float)(2 * i) / (float)d_head);
    if (r->type == HP_ROPE_LINEAR)
        inv /= (float)r->factor;
    if (r->type == HP_ROPE_LLAMA3) {
        /* long wavelengths are slowed by factor, short ones kept, those between blended */
        const float wavelen = 2 * 3.14159265358979323846f / inv, low = (float)(r->original_max / r->low_freq_factor),
                    high = (float)(r->original_max / r->high_freq_factor);
        if (wavelen > low)
            inv /= (float)r->factor;
        else if (!(wavelen < high)) {
            const float smooth =
                (float)((r->original_max / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor));
            inv = (1 - smooth) * inv / (float)r->factor + smooth * inv;
        }
    }
    return inv;
}

void hp_op_rope_table(float *tab, int T, const struct hp_rope *r)
{
    const int d_head = r->dim, half = d_head / 2;
    for (int i = 0; i < half; i++) {
        const float inv = rope_inv_freq(r, i, T, d_head);
        for (int pos = 0; pos < T; pos++) {
            float ang = (float)pos * inv;
            tab[(size_t)pos * d_head + 2 * i] = (float)cos((double)ang);
            tab[(size_t)pos * d_head + 2 * i + 1] = (float)sin((double)ang);
        }
    }
}

void hp_op_rope(float *x, int N, int T, ptrdiff_t rs, int dh, const float *tab)
{
    int half = dh / 2;
    for (int t = 0; t < N; t++) {
        float *r = x + t * rs;
        const float *cs = tab + (size_t)(t % T) * dh;
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float a = r[i], b = r[i + half];
            r[i] = a * c - b * s;
            r[i + half] = b * c + a * s;
        }
    }
}


/* Its reverse: the rotation is orthogonal, so the gradient turns back by the transposed rotation. */
void hp_op_rope_backward(float *dx, int N, int T, ptrdiff_t rs, int dh, const float *tab)
{
    int half = dh / 2;
    for (int t = 0; t < N; t++) {
        float *r = dx + t * rs;
        const float *cs = tab + (size_t)(t % T) * dh;
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float a = r[i], b = r[i + half];
            r[i] = a * c + b * s;
            r[i + half] = b * c - a * s;
        }
    }
}

// --- soft-capping ------------------------------------------------------------

void hp_op_softcap(float *x, size_t n, float cap)
{
    /* as transformers: divide, tanh, multiply (not a multiply by 1 / cap, which rounds differently) */
    for (size_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}

void hp_op_softcap_backward(float *dx, const float *y, size_t n, float cap)
{
    for (size_t i = 0; i < n; i++) {
        const float t = y[i] / cap;
        dx[i] *= 1.0f - t * t;
    }
}

// --- softmax ----------------------------------------------------------------

/* A row of scores that cannot be a distribution: not a number over its visible span [j0, n), 0 elsewhere. */
static void row_none(float *r, int T, int j0, int n)
{
    for (int j = 0; j < T; j++)
        r[j] = j >= j0 && j < n ? NAN : 0.0f;
}

void hp_op_softmax_rows(float *att, int T, bool causal, int window, const uint8_t *kmask)
{
    for (int i = 0; i < T; i++) {
        float *r = att + (size_t)i * T;
        const int n = causal ? i + 1 : T, j0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
        /* a score that is not a number makes the row none either, as in Hugging Face: never the uniform
         * row below, which would hide broken weights from every metric and from head roles. Without a key
         * mask the maximum is vectorised and such a score shows in the sum instead */
        float mx = -INFINITY;
        bool nan = false;
        if (!kmask && n > j0)
            mx = hp_vmax(r + j0, (size_t)(n - j0));
        for (int j = j0; j < n && (kmask || mx == -INFINITY); j++)
            if (!kmask || kmask[j]) {
                if (r[j] > mx)
                    mx = r[j];
                nan |= isnan(r[j]);
            }
        if (nan) {
            row_none(r, T, j0, n);
            continue;
        }
        if (mx == -INFINITY) {
            /* no key visible: Hugging Face's additive mask makes this uniform */
            for (int j = 0; j < T; j++)
                r[j] = j >= j0 && j < n ? 1.0f / (float)(n - j0) : 0.0f;
            continue;
        }
        for (int j = 0; j < j0; j++)
            r[j] = 0.0f;
        hp_vexpf(r + j0, r + j0, mx, (size_t)(n - j0));
        for (int j = j0; kmask && j < n; j++)
            if (!kmask[j])
                r[j] = 0.0f;
        const double s = hp_vsum_d(r + j0, (size_t)(n - j0));
        if (isnan(s)) { /* a score that is not a number (unmasked rows), or +inf */
            row_none(r, T, j0, n);
            continue;
        }
        float inv = (float)(1.0 / s);
        for (int j = j0; j < n; j++)
            r[j] *= inv;
        for (int j = n; j < T; j++)
            r[j] = 0.0f;
    }
}

/*
 * Its reverse for one (T, T) head: dp holds dL/dP and becomes dL/dS, the
 * gradient at the scores: P (dP - sum_j P dP) row by row. Entries the
 * forward masked have P = 0 and get 0; so do rows that saw no key (their
 * uniform row does not depend on the scores once the mask is applied).
 */
void hp_op_softmax_rows_backward(float *dp, const float *p, int T, bool causal, int window, const uint8_t *kmask)
{
    for (int i = 0; i < T; i++) {
        const float *pr = p + (size_t)i * T;
        float *gr = dp + (size_t)i * T;
        const int n = causal ? i + 1 : T, j0 = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
        bool seen = false;
        for (int j = j0; j < n && !seen; j++)
            seen = !kmask || kmask[j];
        if (!seen) {
            memset(gr, 0, (size_t)T * sizeof(float));
            continue;
        }
        const double s = hp_vdot_d(pr + j0, gr + j0, (size_t)(n - j0));
        for (int j = 0; j < j0; j++)
            gr[j] = 0.0f;
        for (int j = j0; j < n; j++)
            gr[j] = (float)(pr[j] * (gr[j] - s));
        for (int j = n; j < T; j++)
            gr[j] = 0.0f;
    }
}
