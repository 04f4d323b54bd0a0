/*
 * ops.h -- the forward's element-wise and row-wise operations (engine/compute/ops.c).
 *
 * Norms, activations, bias adds, rotary embedding and the masked softmax,
 * each over rows of a row-major buffer, and beside each its reverse
 * (the gradient at its input from the gradient at its output, for backward.c). They are apart from forward.c so
 * that a reverse pass can sit beside each of them, section by section
 * (llm.c's layernorm_forward beside layernorm_backward). None allocates,
 * reads a model or calls BLIS: the forward hands them pointers and shapes.
 * The activation kinds and the rotary frequencies are declared here, as what
 * the ops compute; the model (model.h) holds which of them it uses.
 */
#ifndef HP_OPS_H
#define HP_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The activations of an MLP. */
enum hp_act { HP_ACT_GELU, HP_ACT_GELU_TANH, HP_ACT_RELU, HP_ACT_SILU };

/* Rotary embedding's frequencies: theta^(-2i / dim), scaled as config.json's
 * rope_scaling says (Hugging Face's modeling_rope_utils), over the first dim
 * dimensions of each head (all of them, or GPT-NeoX's rotary_pct of them). */
struct hp_rope {
    float theta;
    int dim;              /* the rotated dimensions of a head, even: hp_op_rope's dh */
    enum hp_rope_type { HP_ROPE_DEFAULT, HP_ROPE_LINEAR, HP_ROPE_DYNAMIC, HP_ROPE_LLAMA3 } type;
    double factor;        /* linear, dynamic, llama3 */
    double low_freq_factor, high_freq_factor; /* llama3 */
    int original_max;     /* llama3: original_max_position_embeddings; dynamic: max_position_embeddings */
};

/* Whether work of this many elements is split over OpenMP threads. Every
 * element is computed the same way whatever the thread count, so results do
 * not depend on it. */
static inline bool hp_op_par(size_t work)
{
    return work >= 16384;
}

/* y (T, d) = LayerNorm of each row of x (T, d) with weight w and bias b (d). y may equal x. */
void hp_op_layer_norm(float *y, const float *x, int T, int d, const float *w, const float *b, float eps);

/* dx (T, d) += the gradient at x of hp_op_layer_norm given dy (T, d), the gradient at y. */
void hp_op_layer_norm_backward(float *dx, const float *dy, const float *x, int T, int d, const float *w, float eps);

/* y (T, d) = RMSNorm of each row of x (T, d) with weight w (d). y may equal x. */
void hp_op_rms_norm(float *y, const float *x, int T, int d, const float *w, float eps);

/* dx (T, d) += the gradient at x of hp_op_rms_norm given dy (T, d). */
void hp_op_rms_norm_backward(float *dx, const float *dy, const float *x, int T, int d, const float *w, float eps);

/*
 * Heads [h0, h1) of each of N rows of x (row stride ld; heads of dh floats side by side) RMS-normalised in
 * place with the gain w (dh) all heads share (Qwen3's q_norm and k_norm); with raw, their values before are
 * copied there first (the same layout), for the reverse.
 */
void hp_op_head_rms_norm(float *x, float *raw, int N, int ld, int h0, int h1, int dh, const float *w, float eps);

/* Its reverse in place: dx (the same layout), the gradient at the normalised heads, becomes the gradient at
 * their values before, raw. */
void hp_op_head_rms_norm_backward(float *dx, const float *raw, int N, int ld, int h0, int h1, int dh, const float *w,
                                  float eps);

/* The activation a of one number. */
float hp_op_act(enum hp_act a, float x);

/* The derivative of activation a at x. */
double hp_op_act_grad(enum hp_act a, float x);

/*
 * y[i] = act(x[i]) (times g[i] when g is given) for n elements; y may equal
 * x or g. The sigmoid-based activations take their exponentials 256 at a
 * time from libmvec; each element is computed the same way wherever it falls.
 */
void hp_op_act_span(enum hp_act a, float *y, const float *x, const float *g, size_t n);

/*
 * The reverse of hp_op_act_span: from dy, the gradient at y, the gradient at
 * x into dx and (with g; dg may be NULL otherwise) at g into dg. In place:
 * dx may equal x or dy, dg may equal g. The sigmoid-based activations in
 * float, with the same exponentials as the forward's.
 */
void hp_op_act_span_backward(enum hp_act a, float *dx, float *dg, const float *dy, const float *x, const float *g,
                             size_t n);

/* y[t * rs + i] += b[i] for T rows of n; nothing when b is NULL. */
void hp_op_add_bias(float *y, int T, int n, ptrdiff_t rs, const float *b);

/* x[i] += y[i] for n elements. */
void hp_op_add_into(float *x, const float *y, size_t n);

/* The rotary table tab (T, r->dim / 2, 2): cos and sin of position times the
 * frequencies of r at length T, computed in float as Hugging Face does. */
void hp_op_rope_table(float *tab, int T, const struct hp_rope *r);

/* Rotate-half rotary embedding of one head slice (its first dh dimensions, r->dim) over N rows
 * (strided by rs) of sequences of T tokens: row r is at position r % T. */
void hp_op_rope(float *x, int N, int T, ptrdiff_t rs, int dh, const float *tab);

/* The reverse of hp_op_rope: dx (the gradient at the rotated slice) becomes the gradient at the unrotated one. */
void hp_op_rope_backward(float *dx, int N, int T, ptrdiff_t rs, int dh, const float *tab);

/* Soft-capping (Gemma 2's attention scores and logits): each of x's n values becomes cap tanh(x / cap). */
void hp_op_softcap(float *x, size_t n, float cap);

/* Its reverse: dx (the gradient at the capped values y, n of them) becomes the gradient before the cap,
 * dx (1 - (y / cap)^2). */
void hp_op_softcap_backward(float *dx, const float *y, size_t n, float cap);

/* Softmax of each row of att (T, T) over its visible keys (causal: j <= i;
 * window > 0: also j > i - window; kmask NULL or (T), 0 = padding), on the
 * calling thread. */
void hp_op_softmax_rows(float *att, int T, bool causal, int window, const uint8_t *kmask);

/* Its reverse: dp (T, T), the gradient at the probabilities p (T, T) the forward
 * made, becomes the gradient at the scores (before the scale). */
void hp_op_softmax_rows_backward(float *dp, const float *p, int T, bool causal, int window, const uint8_t *kmask);

#endif
