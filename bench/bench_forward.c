/*
 * bench_forward.c -- forward-pass throughput of headprune on a GPT-2-small-
 * shaped model, side by side with BLIS sgemm measured in the same run.
 *
 * For each thread count, every rep times, back to back: one square sgemm
 * (2048^3), one sgemm of the MLP-up shape (m x n x k = rows x 3072 x 768), the
 * headprune forward over all sequences in one pass, and a replay of exactly the
 * weight products (hp_mat_gemm: a bf16 or f16 model's include their panels'
 * conversion) and hp_gemm calls that forward makes (same shapes, strides and weights) so the time
 * outside BLIS can be read off as forward - replay. Figures are medians over
 * the reps; one warm-up rep (which also faults the mapped weights in) is not
 * counted. The CPU time other processes took meanwhile is measured and
 * printed: on a shared machine it is the main source of noise.
 *
 * The model is random (weights ~ N(0, 0.02), LayerNorm weights 1, biases 0)
 * and written once as a Hugging Face directory outside the repo.
 *
 * Invariant: the replay mirrors engine/compute/forward.c for GPT-2 with no head
 * masked; when forward.c changes its GEMM calls, replay_forward must follow.
 * Must not: write anywhere but the model directory given on the command line.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blas.h"
#include "forward.h"
#include "headprune.h"
#include "model.h"

#define DEFAULT_DIR "/tmp/hp-bench-gpt2-small"
#define MAX_THREAD_COUNTS 8

/* GPT-2 small */
enum { N_LAYER = 12, N_HEAD = 12, N_EMBD = 768, N_VOCAB = 50257, N_POS = 1024, N_FF = 4 * N_EMBD };

// --- small helpers ----------------------------------------------------------

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n); v is left sorted. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static double uniform(uint64_t *s)
{
    return ((double)(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* n samples of N(0, sd^2) by Box-Muller. */
static void fill_normal(float *x, size_t n, double sd, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(uniform(s))), th = 6.283185307179586 * uniform(s);
        x[i] = (float)(sd * r * cos(th));
        if (i + 1 < n)
            x[i + 1] = (float)(sd * r * sin(th));
    }
}

static void cpu_model(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *c = strchr(line, ':');
        if (!c)
            break;
        c++;
        while (*c == ' ' || *c == '\t')
            c++;
        c[strcspn(c, "\n")] = '\0';
        snprintf(buf, cap, "%s", c);
        break;
    }
    fclose(f);
}

/*
 * CPU seconds used by the whole machine (from /proc/stat) and by this
 * process (all its threads): their difference over an interval is what other
 * work took from us, the main source of noise. busy = -1 when unknown.
 */
struct cpu_use {
    double busy, self, wall;
};

static struct cpu_use cpu_use_now(void)
{
    struct cpu_use u = {-1, 0, now()};
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        unsigned long long v[8] = {0};
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]) == 8)
            /* user nice system [idle iowait] irq softirq steal */
            u.busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
        fclose(f);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        u.self = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
                 1e-6 * (double)ru.ru_stime.tv_usec;
    return u;
}

/* Average number of CPUs other processes kept busy between a and b; -1 when unknown. */
static double cpu_others(struct cpu_use a, struct cpu_use b)
{
    if (a.busy < 0 || b.busy < 0 || b.wall <= a.wall)
        return -1;
    double o = ((b.busy - a.busy) - (b.self - a.self)) / (b.wall - a.wall);
    return o < 0 ? 0 : o;
}

// --- the random GPT-2-small directory ---------------------------------------

enum init { INIT_NORMAL, INIT_ONES, INIT_ZEROS };

struct tensor_spec {
    char name[48];
    int64_t d0, d1; /* d1 = 0 for vectors */
    enum init init;
};

/* The tensors of a Hugging Face GPT2Model checkpoint, in file order. */
static int gpt2_small_specs(struct tensor_spec *t)
{
    int n = 0;
#define T(nm, a, b, in) (t[n] = (struct tensor_spec){"", a, b, in}, snprintf(t[n].name, sizeof t[n].name, "%s", nm), n++)
    T("wte.weight", N_VOCAB, N_EMBD, INIT_NORMAL);
    T("wpe.weight", N_POS, N_EMBD, INIT_NORMAL);
    for (int l = 0; l < N_LAYER; l++) {
        static const struct { const char *s; int64_t d0, d1; enum init in; } L[] = {
            {"ln_1.weight", N_EMBD, 0, INIT_ONES},
            {"ln_1.bias", N_EMBD, 0, INIT_ZEROS},
            {"attn.c_attn.weight", N_EMBD, 3 * N_EMBD, INIT_NORMAL},
            {"attn.c_attn.bias", 3 * N_EMBD, 0, INIT_ZEROS},
            {"attn.c_proj.weight", N_EMBD, N_EMBD, INIT_NORMAL},
            {"attn.c_proj.bias", N_EMBD, 0, INIT_ZEROS},
            {"ln_2.weight", N_EMBD, 0, INIT_ONES},
            {"ln_2.bias", N_EMBD, 0, INIT_ZEROS},
            {"mlp.c_fc.weight", N_EMBD, N_FF, INIT_NORMAL},
            {"mlp.c_fc.bias", N_FF, 0, INIT_ZEROS},
            {"mlp.c_proj.weight", N_FF, N_EMBD, INIT_NORMAL},
            {"mlp.c_proj.bias", N_EMBD, 0, INIT_ZEROS},
        };
        for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
            char nm[48];
            snprintf(nm, sizeof nm, "h.%d.%s", l, L[i].s);
            T(nm, L[i].d0, L[i].d1, L[i].in);
        }
    }
    T("ln_f.weight", N_EMBD, 0, INIT_ONES);
    T("ln_f.bias", N_EMBD, 0, INIT_ZEROS);
#undef T
    return n;
}

static int64_t spec_numel(const struct tensor_spec *s)
{
    return s->d0 * (s->d1 ? s->d1 : 1);
}

/*
 * The safetensors header for the specs, padded with spaces so the data area
 * starts 8-byte aligned. Returns malloc'd text (caller frees), its length in *len.
 */
static char *st_header(const struct tensor_spec *t, int n, size_t *len)
{
    size_t cap = 256 + (size_t)n * 160;
    char *h = malloc(cap);
    if (!h)
        return NULL;
    size_t o = (size_t)snprintf(h, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = 4 * spec_numel(&t[i]);
        char shape[48];
        if (t[i].d1)
            snprintf(shape, sizeof shape, "%lld,%lld", (long long)t[i].d0, (long long)t[i].d1);
        else
            snprintf(shape, sizeof shape, "%lld", (long long)t[i].d0);
        o += (size_t)snprintf(h + o, cap - o, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[%lld,%lld]}",
                              t[i].name, shape, (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    o += (size_t)snprintf(h + o, cap - o, "}");
    while ((8 + o) % 8 != 0)
        h[o++] = ' ';
    h[o] = '\0';
    *len = o;
    return h;
}

static int mkdir_p(const char *dir)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", dir);
    for (char *c = p + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return -1;
        *c = '/';
    }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static const char config_json[] =
    "{\n"
    "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
    "  \"model_type\": \"gpt2\",\n"
    "  \"activation_function\": \"gelu_new\",\n"
    "  \"n_layer\": 12,\n"
    "  \"n_head\": 12,\n"
    "  \"n_embd\": 768,\n"
    "  \"n_ctx\": 1024,\n"
    "  \"n_positions\": 1024,\n"
    "  \"vocab_size\": 50257,\n"
    "  \"layer_norm_epsilon\": 1e-05,\n"
    "  \"scale_attn_weights\": true,\n"
    "  \"torch_dtype\": \"float32\",\n"
    "  \"_comment\": \"random weights written by headprune bench_forward; not a trained model\"\n"
    "}\n";

/* Write the random GPT-2-small directory unless it already holds a model. */
static int ensure_model(const char *dir)
{
    static struct tensor_spec t[2 + 12 * N_LAYER + 2];
    int n = gpt2_small_specs(t);
    size_t hlen;
    char *hdr = st_header(t, n, &hlen);
    if (!hdr) {
        fprintf(stderr, "bench_forward: out of memory\n");
        return -1;
    }
    int64_t data_bytes = 0;
    for (int i = 0; i < n; i++)
        data_bytes += 4 * spec_numel(&t[i]);
    int64_t want = 8 + (int64_t)hlen + data_bytes;

    char cfg[1100], st[1100], tmp[1100];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s/model.safetensors.tmp", dir);
    /* a directory that has a model is used as it is (another dtype, say: bench/to_bf16.py's copy), never
     * overwritten; an interrupted write leaves only model.safetensors.tmp */
    struct stat sb;
    if (stat(cfg, &sb) == 0 && stat(st, &sb) == 0) {
        free(hdr);
        return 0;
    }

    fprintf(stderr, "bench_forward: writing a random GPT-2-small model to %s (%.0f MB) ...\n", dir, (double)want / 1e6);
    if (mkdir_p(dir) != 0) {
        fprintf(stderr, "bench_forward: cannot create %s: %s\n", dir, strerror(errno));
        free(hdr);
        return -1;
    }
    FILE *f = fopen(cfg, "w");
    if (!f || fputs(config_json, f) == EOF || fclose(f) != 0) {
        fprintf(stderr, "bench_forward: cannot write %s: %s\n", cfg, strerror(errno));
        free(hdr);
        return -1;
    }
    f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "bench_forward: cannot write %s: %s\n", tmp, strerror(errno));
        free(hdr);
        return -1;
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    bool ok = fwrite(le, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    free(hdr);
    float *buf = malloc((size_t)N_VOCAB * N_EMBD * sizeof *buf); /* the largest tensor */
    ok = ok && buf;
    uint64_t seed = 20240601;
    for (int i = 0; i < n && ok; i++) {
        size_t ne = (size_t)spec_numel(&t[i]);
        if (t[i].init == INIT_NORMAL)
            fill_normal(buf, ne, 0.02, &seed);
        else
            for (size_t j = 0; j < ne; j++)
                buf[j] = t[i].init == INIT_ONES ? 1.0f : 0.0f;
        ok = fwrite(buf, sizeof *buf, ne, f) == ne; /* x86-64: already little-endian */
    }
    free(buf);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, st) != 0) {
        fprintf(stderr, "bench_forward: cannot write %s: %s\n", st, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

// --- FLOP count ---------------------------------------------------------------

/*
 * FLOPs of one forward over T tokens, 2 per multiply-add: QKV, output
 * projection, MLP up and down, LM head (2 m n k each), and attention
 * scores + weighted sum, 2 T T d_head each per head per layer over the full
 * T x T as the kernel computes it. Not counted: layer norms, softmax, GELU,
 * bias adds, residual adds, embedding lookup.
 */
static double forward_flops(const struct hp_model_info *in, int T)
{
    double t = T, d = in->d_model, f = in->d_ff, qd = (double)in->n_heads * in->d_head,
           kvd = (double)in->n_kv_heads * in->d_head;
    double proj = 2 * t * d * (qd + 2 * kvd) + 2 * t * qd * d + 2 * 2 * t * d * f;
    double attn = in->n_heads * 2.0 * (2 * t * t * in->d_head);
    return in->n_layers * (proj + attn) + 2 * t * d * in->n_vocab;
}

// --- GEMM replay --------------------------------------------------------------

enum part { P_QKV, P_ATTN, P_OUT, P_UP, P_DOWN, P_LM, N_PART };
static const char *const part_name[N_PART] = {
    "QKV projection", "attention QK^T, PV", "output projection", "MLP up", "MLP down", "LM head",
};

struct replay_buf {
    float *h, *q, *k, *v, *att, *ctx, *tmp, *ff, *out;
};

/*
 * The hp_gemm calls engine/compute/forward.c makes for S GPT-2 sequences of T tokens
 * in one pass (N = S * T rows) with no head masked, in the same order on the
 * model's own weights; time per part is added into secs[N_PART].
 */
static void replay_forward(const struct hp_model *m, struct hp_mat_buf *mb, int T, int S, struct replay_buf *b,
                           double *secs)
{
    const struct hp_model_info *in = &m->info;
    const int d = in->d_model, f = in->d_ff, H = in->n_heads, dh = in->d_head, qd = H * dh, kvd = qd, N = S * T;
    const float scale = 1.0f / sqrtf((float)dh);
    for (int l = 0; l < in->n_layers; l++) {
        const struct hp_layer *L = &m->layers[l];
        double t0 = now();
        hp_mat_gemm(mb, N, qd, d, 1.0f, b->h, d, 1, L->wq, 0.0f, b->q, qd, 1);
        hp_mat_gemm(mb, N, kvd, d, 1.0f, b->h, d, 1, L->wk, 0.0f, b->k, kvd, 1);
        hp_mat_gemm(mb, N, kvd, d, 1.0f, b->h, d, 1, L->wv, 0.0f, b->v, kvd, 1);
        double t1 = now();
        /* (head, sequence) pairs side by side, each product on one thread, as forward.c runs them */
#pragma omp parallel for schedule(dynamic, 1)
        for (int p = 0; p < H * S; p++) {
            const int h = p / S;
            const size_t r0 = (size_t)(p % S) * T;
            float *att = b->att + (size_t)omp_get_thread_num() * T * T;
            hp_gemm1(T, T, dh, scale, b->q + r0 * qd + h * dh, qd, 1, b->k + r0 * kvd + h * dh, 1, kvd, 0.0f, att, T, 1);
            hp_gemm1(T, dh, T, 1.0f, att, T, 1, b->v + r0 * kvd + h * dh, kvd, 1, 0.0f, b->ctx + r0 * qd + h * dh, qd, 1);
        }
        double t2 = now();
        hp_mat_gemm(mb, N, d, qd, 1.0f, b->ctx, qd, 1, L->wo, 0.0f, b->tmp, d, 1);
        double t3 = now();
        hp_mat_gemm(mb, N, f, d, 1.0f, b->h, d, 1, L->w_up, 0.0f, b->ff, f, 1);
        double t4 = now();
        hp_mat_gemm(mb, N, d, f, 1.0f, b->ff, f, 1, L->w_down, 0.0f, b->tmp, d, 1);
        double t5 = now();
        secs[P_QKV] += t1 - t0;
        secs[P_ATTN] += t2 - t1;
        secs[P_OUT] += t3 - t2;
        secs[P_UP] += t4 - t3;
        secs[P_DOWN] += t5 - t4;
    }
    double t0 = now();
    hp_mat_gemm(mb, N, in->n_vocab, d, 1.0f, b->h, d, 1, hp_mat_t(m->lm_head), 0.0f, b->out, in->n_vocab, 1);
    secs[P_LM] += now() - t0;
}

// --- sgemm reference ----------------------------------------------------------

/* GFLOPS of C (m, n) = A (m, k) B (k, n), all row-major, repeated for at least min_s seconds. */
static double sgemm_gflops(int m, int n, int k, const float *a, const float *b, float *c, double min_s)
{
    int calls = 0;
    double t0 = now(), t;
    do {
        hp_gemm(m, n, k, 1.0f, a, k, 1, b, n, 1, 0.0f, c, n, 1);
        calls++;
        t = now() - t0;
    } while (t < min_s);
    return 2.0 * m * n * k * calls / t / 1e9;
}

// --- main -----------------------------------------------------------------------

struct result {
    int threads;
    char kernel[32];
    bool kernel_env;
    double sq_gflops, fs_gflops;         /* medians: sgemm 2048^3, forward-shaped sgemm */
    double fwd_s, fwd_min, fwd_max;      /* forward over all sequences, per rep */
    double replay_s, part_s[N_PART];     /* GEMM replay, per rep */
    double outside_s;                    /* forward - replay, paired within each rep */
    double others;                       /* CPUs other processes kept busy meanwhile */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_forward [--threads N[,N...]] [--seqs 8] [--seq-len 256] [--reps 5] [--model DIR]\n"
            "                     [--json FILE]\n"
            "  Times the headprune forward on a random GPT-2-small next to BLIS sgemm, in one run.\n"
            "  --threads  BLIS thread counts to run (default: 1,2)\n"
            "  --model    model directory, written there if missing (default " DEFAULT_DIR ")\n");
}

static int parse_int(const char *s, int lo, int hi, const char *opt)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_forward: %s wants an integer in [%d, %d], got '%s'\n", opt, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    int threads[MAX_THREAD_COUNTS] = {1, 2}, n_threads = 2;
    int n_seqs = 8, T = 256, reps = 5;
    const char *dir = DEFAULT_DIR, *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(o, "--threads") == 0) {
            char list[256];
            snprintf(list, sizeof list, "%s", v);
            n_threads = 0;
            for (char *sv, *tok = strtok_r(list, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
                if (n_threads == MAX_THREAD_COUNTS) {
                    fprintf(stderr, "bench_forward: at most %d thread counts\n", MAX_THREAD_COUNTS);
                    return 2;
                }
                threads[n_threads++] = parse_int(tok, 1, 1024, o);
            }
            if (n_threads == 0) {
                usage(stderr);
                return 2;
            }
        } else if (strcmp(o, "--seqs") == 0) {
            n_seqs = parse_int(v, 1, 1 << 20, o);
        } else if (strcmp(o, "--seq-len") == 0) {
            T = parse_int(v, 1, N_POS, o);
        } else if (strcmp(o, "--reps") == 0) {
            reps = parse_int(v, 1, 1000, o);
        } else if (strcmp(o, "--model") == 0) {
            dir = v;
        } else if (strcmp(o, "--json") == 0) {
            json = v;
        } else {
            usage(stderr);
            return 2;
        }
    }

    if (ensure_model(dir) != 0)
        return 1;
    struct cpu_use idle0 = cpu_use_now();
    struct timespec pause = {1, 0};
    nanosleep(&pause, NULL);
    const double others_before = cpu_others(idle0, cpu_use_now());
    hp_runtime_init(threads[0]);
    struct hp_model *m;
    struct hp_error err = {{0}};
    if (hp_model_open(dir, &m, &err) != HP_OK) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return 1;
    }
    const struct hp_model_info *in = hp_model_get_info(m);
    if (in->arch != HP_ARCH_GPT2 || !m->lm_head.p) {
        fprintf(stderr, "bench_forward: %s is not a GPT-2 model with an LM head\n", dir);
        hp_model_close(m);
        return 1;
    }

    /* inputs and buffers, sized once */
    const int d = in->d_model, f = in->d_ff, V = in->n_vocab, qd = in->n_heads * in->d_head;
    const int SQ = 2048;
    uint64_t seed = 1;
    int32_t *ids = malloc((size_t)n_seqs * T * sizeof *ids);
    int max_threads = 1;
    for (int i = 0; i < n_threads; i++)
        max_threads = threads[i] > max_threads ? threads[i] : max_threads;
    const int R = n_seqs * T; /* rows of one pass: every sequence at once, as the evaluator and the peer run */
    float *logits = malloc((size_t)R * V * sizeof *logits);
    float *sa = malloc((size_t)SQ * SQ * sizeof(float)), *sb = malloc((size_t)SQ * SQ * sizeof(float)),
          *sc = malloc((size_t)SQ * SQ * sizeof(float));
    float *fa = malloc((size_t)R * d * sizeof(float)), *fb = malloc((size_t)d * f * sizeof(float)),
          *fc = malloc((size_t)R * f * sizeof(float));
    struct replay_buf rb = {
        .h = malloc((size_t)R * d * sizeof(float)),
        .q = malloc((size_t)R * qd * sizeof(float)),
        .k = malloc((size_t)R * qd * sizeof(float)),
        .v = malloc((size_t)R * qd * sizeof(float)),
        .att = malloc((size_t)max_threads * T * T * sizeof(float)), /* one per thread */
        .ctx = malloc((size_t)R * qd * sizeof(float)),
        .tmp = malloc((size_t)R * d * sizeof(float)),
        .ff = malloc((size_t)R * f * sizeof(float)),
        .out = logits,
    };
    double *v_sq = malloc((size_t)reps * sizeof(double)), *v_fs = malloc((size_t)reps * sizeof(double)),
           *v_fwd = malloc((size_t)reps * sizeof(double)), *v_rep = malloc((size_t)reps * sizeof(double)),
           *v_out = malloc((size_t)reps * sizeof(double)),
           *v_part = malloc((size_t)reps * N_PART * sizeof(double));
    if (!ids || !logits || !sa || !sb || !sc || !fa || !fb || !fc || !rb.h || !rb.q || !rb.k || !rb.v || !rb.att ||
        !rb.ctx || !rb.tmp || !rb.ff || !v_sq || !v_fs || !v_fwd || !v_rep || !v_out || !v_part) {
        fprintf(stderr, "bench_forward: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)n_seqs * T; i++)
        ids[i] = (int32_t)(splitmix64(&seed) % (uint64_t)V);
    fill_normal(sa, (size_t)SQ * SQ, 1.0, &seed);
    fill_normal(sb, (size_t)SQ * SQ, 1.0, &seed);
    fill_normal(fa, (size_t)R * d, 1.0, &seed);
    fill_normal(fb, (size_t)d * f, 0.02, &seed);
    /* replay inputs: finite values of a realistic size (contents do not change GEMM speed) */
    fill_normal(rb.h, (size_t)R * d, 1.0, &seed);
    fill_normal(rb.att, (size_t)T * T, 1.0 / T, &seed);
    fill_normal(rb.ctx, (size_t)R * qd, 1.0, &seed);
    fill_normal(rb.ff, (size_t)R * f, 1.0, &seed);
    memset(rb.q, 0, (size_t)R * qd * sizeof(float));
    memset(rb.k, 0, (size_t)R * qd * sizeof(float));
    memset(rb.v, 0, (size_t)R * qd * sizeof(float));

    const double flops = forward_flops(in, T) * n_seqs;
    hp_runtime_init(max_threads); /* the workspace sizes its per-thread buffers for this many */
    struct hp_fwd *fw = hp_fwd_new(m, T, n_seqs);
    struct hp_mat_buf *mb = hp_mat_buf_new(m); /* the replay's panel, as the forward's workspace has one */
    if (!fw || !mb) {
        fprintf(stderr, "bench_forward: out of memory for the forward's workspace\n");
        return 1;
    }
    const int64_t tokens = (int64_t)n_seqs * T;
    struct result res[MAX_THREAD_COUNTS];

    for (int ti = 0; ti < n_threads; ti++) {
        struct result *r = &res[ti];
        memset(r, 0, sizeof *r);
        r->threads = threads[ti];
        hp_runtime_init(r->threads);
        snprintf(r->kernel, sizeof r->kernel, "%s", hp_runtime_kernel());
        r->kernel_env = hp_runtime_kernel_from_env();
        fprintf(stderr, "bench_forward: %d thread(s): warm-up + %d reps ...\n", r->threads, reps);
        struct cpu_use u0 = cpu_use_now();
        for (int rep = -1; rep < reps; rep++) {
            double sq = sgemm_gflops(SQ, SQ, SQ, sa, sb, sc, 0.5);
            double fs = sgemm_gflops(R, f, d, fa, fb, fc, 0.5);
            double t0 = now();
            struct hp_fwd_in fa_in = {.ids = ids, .T = T, .n_seqs = n_seqs};
            struct hp_fwd_taps fa_taps = {.out = logits};
            hp_fwd_run(m, fw, &fa_in, NULL, &fa_taps);
            double fwd = now() - t0;
            double part[N_PART] = {0};
            t0 = now();
            replay_forward(m, mb, T, n_seqs, &rb, part);
            double rep_s = now() - t0;
            if (rep < 0)
                continue; /* warm-up: page faults on the mapped weights, BLIS packing buffers, OpenMP pool */
            v_sq[rep] = sq, v_fs[rep] = fs, v_fwd[rep] = fwd, v_rep[rep] = rep_s, v_out[rep] = fwd - rep_s;
            for (int p = 0; p < N_PART; p++)
                v_part[p * reps + rep] = part[p];
        }
        r->others = cpu_others(u0, cpu_use_now());
        r->sq_gflops = median(v_sq, reps);
        r->fs_gflops = median(v_fs, reps);
        r->fwd_s = median(v_fwd, reps);
        r->fwd_min = v_fwd[0], r->fwd_max = v_fwd[reps - 1];
        r->replay_s = median(v_rep, reps);
        r->outside_s = median(v_out, reps);
        for (int p = 0; p < N_PART; p++)
            r->part_s[p] = median(v_part + p * reps, reps);
    }

    // --- report ---
    char cpu[256], date[64];
    cpu_model(cpu, sizeof cpu);
    time_t tnow = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&tnow));
    printf("headprune %s bench_forward, %s\n", HP_VERSION, date);
    printf("command: ");
    for (int i = 0; i < argc; i++)
        printf("%s%s", i ? " " : "", argv[i]);
    printf("\ncpu:     %s, %ld logical CPUs online; BLIS kernel set %s (%s)\n", cpu, sysconf(_SC_NPROCESSORS_ONLN),
           res[0].kernel, res[0].kernel_env ? "from BLIS_ARCH_TYPE" : "chosen by headprune");
    printf("others:  other processes kept %.2f CPUs busy in the second before the run", others_before);
    for (int ti = 0; ti < n_threads; ti++)
        printf(", %.2f during the %d-thread part", res[ti].others, res[ti].threads);
    printf("\n");
    double worst = others_before;
    for (int ti = 0; ti < n_threads; ti++)
        worst = res[ti].others > worst ? res[ti].others : worst;
    if (worst > 0.1)
        printf("WARNING: other work competed for the CPUs (up to %.2f CPUs): these figures are skewed, rerun when idle\n",
               worst);
    printf("model:   %s: %s, %d layers x %d heads, d_model %d, d_ff %d, vocab %d, n_ctx %d, %.1fM params %s, random\n",
           dir, in->model_type, in->n_layers, in->n_heads, in->d_model, in->d_ff, in->n_vocab, in->n_ctx,
           (double)in->n_params / 1e6, in->dtype);
    printf("work:    %d sequences x %d tokens = %lld tokens per rep, no head masked; %d reps after 1 warm-up, medians\n",
           n_seqs, T, (long long)tokens, reps);
    printf("FLOPs:   %.1f G per rep = 2mnk for QKV, output projection, MLP up/down, LM head\n"
           "         + 2*T*T*d_head*2 per head per layer (full T x T scores and weighted sum, as computed);\n"
           "         not counted: layer norm, softmax, GELU, bias and residual adds, embedding\n\n",
           flops / 1e9);

    /* one row per thread count; fractions are forward GFLOPS over the sgemm GFLOPS of the same rep set */
    char fs_name[48];
    snprintf(fs_name, sizeof fs_name, "%dx%dx%d", R, f, d);
    printf("%7s  %12s  %18s  %23s  %9s  %8s  %12s  %18s\n", "", "sgemm 2048^3", "sgemm", "forward s/rep", "",
           "forward", "forward /", "forward /");
    printf("%7s  %12s  %18s  %23s  %9s  %8s  %12s  %18s\n", "threads", "GFLOPS", fs_name, "median (min - max)",
           "tokens/s", "GFLOPS", "sgemm 2048^3", fs_name);
    for (int ti = 0; ti < n_threads; ti++) {
        const struct result *r = &res[ti];
        double g = flops / r->fwd_s / 1e9;
        char span[32];
        snprintf(span, sizeof span, "%.3f (%.3f - %.3f)", r->fwd_s, r->fwd_min, r->fwd_max);
        printf("%7d  %12.1f  %18.1f  %23s  %9.0f  %8.1f  %11.1f%%  %17.1f%%\n", r->threads, r->sq_gflops,
               r->fs_gflops, span, (double)tokens / r->fwd_s, g, 100.0 * g / r->sq_gflops, 100.0 * g / r->fs_gflops);
    }

    printf("\nwhere the time goes: median s per rep; GEMM rows replay the forward's hp_gemm calls on the same weights,\n"
           "\"outside GEMM\" = forward - replay within each rep (layer norm, softmax, GELU, bias/residual adds, embedding)\n");
    printf("%-22s", "");
    for (int ti = 0; ti < n_threads; ti++) {
        char hd[32];
        snprintf(hd, sizeof hd, "%d thread%s", res[ti].threads, res[ti].threads == 1 ? "" : "s");
        printf("  %-27s", hd);
    }
    printf("\n%-22s", "");
    for (int ti = 0; ti < n_threads; ti++)
        printf("  %7s %6s %12s", "s/rep", "share", "GFLOPS");
    printf("\n");
    for (int p = 0; p <= N_PART + 1; p++) {
        const char *name = p < N_PART ? part_name[p] : p == N_PART ? "outside GEMM" : "forward total";
        printf("%-22s", name);
        for (int ti = 0; ti < n_threads; ti++) {
            const struct result *r = &res[ti];
            double s = p < N_PART ? r->part_s[p] : p == N_PART ? r->outside_s : r->fwd_s;
            double fl = 0;
            if (p == P_ATTN)
                fl = (double)n_seqs * in->n_layers * in->n_heads * 4.0 * T * T * in->d_head;
            else if (p == P_QKV)
                fl = (double)n_seqs * in->n_layers * 2.0 * T * d * 3 * qd;
            else if (p == P_OUT)
                fl = (double)n_seqs * in->n_layers * 2.0 * T * qd * d;
            else if (p == P_UP || p == P_DOWN)
                fl = (double)n_seqs * in->n_layers * 2.0 * T * d * f;
            else if (p == P_LM)
                fl = (double)n_seqs * 2.0 * T * d * V;
            else if (p == N_PART + 1)
                fl = flops;
            char gf[32] = "";
            if (fl > 0)
                snprintf(gf, sizeof gf, "%.1f", fl / s / 1e9);
            printf("  %7.3f %5.1f%% %12s", s, 100.0 * s / r->fwd_s, gf);
        }
        printf("\n");
    }

    if (json) {
        /* the figures above, for bench/compare.py */
        FILE *jf = fopen(json, "w");
        if (!jf) {
            fprintf(stderr, "bench_forward: cannot write %s\n", json);
            return 1;
        }
        fprintf(jf, "{\"flops\": %.17g, \"tokens\": %lld, \"kernel\": \"%s\", \"results\": [", flops,
                (long long)tokens, res[0].kernel);
        for (int ti = 0; ti < n_threads; ti++) {
            const struct result *r = &res[ti];
            fprintf(jf,
                    "%s{\"threads\": %d, \"sgemm_gflops\": %.6g, \"sgemm_fwd_shape_gflops\": %.6g, "
                    "\"forward_s\": %.6g, \"forward_min_s\": %.6g, \"forward_max_s\": %.6g, \"others_cpus\": %.3f}",
                    ti ? ", " : "", r->threads, r->sq_gflops, r->fs_gflops, r->fwd_s, r->fwd_min, r->fwd_max, r->others);
        }
        fprintf(jf, "]}\n");
        fclose(jf);
    }

    free(ids), free(logits), free(sa), free(sb), free(sc), free(fa), free(fb), free(fc);
    free(rb.h), free(rb.q), free(rb.k), free(rb.v), free(rb.att), free(rb.ctx), free(rb.tmp), free(rb.ff);
    free(v_sq), free(v_fs), free(v_fwd), free(v_rep), free(v_out), free(v_part);
    hp_fwd_free(fw);
    hp_mat_buf_free(mb);
    hp_model_close(m);
    return 0;
}
