/*
 * test_reuse.c -- the reuse path (the default) against the plain path.
 *
 * The plain path evaluates each variant by whole forward passes with logits
 * materialised; it is itself checked against Hugging Face (test_reference).
 * The reuse path resumes each variant from its first changed layer, batches
 * variants as blocks of one pass and fuses the LM head with the metrics, so
 * its float rounding differs. Here both run the same variants and must agree:
 *
 *   loss and its per-sequence values:      |diff| <= 1e-6 |plain|
 *   cosine (and per sequence):             |diff| <= 1e-6 (|plain| + 1)
 *   KL (and per sequence):                 |diff| <= 1e-6 (|plain KL| + plain loss)
 *   acc (and per sequence):                at most one token per sequence flips
 *                                          (none where a sequence is one scored row)
 *
 * KL is E_p[log p - log q]: a difference of log-probabilities whose size is
 * the loss, each rounded in float relative to that size, so its rounding
 * scales with the loss, not with KL (measured: ~5e-7 nats on KL ~0.3 with a
 * loss of ~5 on both paths' differing summation orders). A wrong reuse (a
 * head subtracted twice, a wrong layer) moves KL by its own size. Accuracy
 * is an argmax: where the top two logits of a token are within float
 * rounding of each other the two paths may pick different ones (seen on
 * stories260K: one token in 1016 for one variant), so a sequence's accuracy
 * may differ by one token of it, the whole set's by one token per sequence.
 * A cosine is a dot product over the product of two norms: its rounding is
 * relative to the norms, so it does not shrink with the cosine (seen: 2.4e-8
 * on a cosine of -0.02, the bert-encoder with a head's outputs scaled by 1e8).
 *
 * Variants: none, an all-ones mask, every single head, every layer, pairs
 * across layers, random subsets, all heads, KV groups, gates of 0.5 (scaled
 * heads), under zero, mean and mean-pos ablation (zero only for the default
 * model, which is slower and only adds chunks); evaluated all together and
 * again in batches of 3 (different blocks per pass); on GPT-2, Llama with
 * GQA, Qwen2 with biases, BERT MLM with padding and a BERT encoder (cosine),
 * and the embedded default model over 8 chunks and over 7 sequences (a last
 * chunk shorter than the others). And a sweep of every study
 * kind (tests/plans/sweep.yaml) run both ways: equal databases.
 *
 * The BERT sequence classifier (bert-cls) too: its per-row loss is one
 * difference of two class logits with no averaging over tokens, so the two
 * paths' rounding once moved it by up to 1.9e-6 (1.1e-6 relative); since the
 * reuse path makes a resumed layer's output projection as the full pass does
 * (issue 23), both paths give it the same bits (found by tests/fuzz/diff.c).
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "headprune.h"
#include "testmodel.h"
#include "testutil.h"

#define REL 1e-6

static int close_to(const char *what, int i, int s, double got, double want, double abs_tol)
{
    double tol = REL * fabs(want) + abs_tol;
    if (fabs(got - want) <= tol && !(isnan(got) ^ isnan(want)))
        return 0;
    cr_log_error("variant %d%s%.0d: %s reuse %.12g plain %.12g (diff %.3g > %.3g)", i, s >= 0 ? " seq " : "",
                 s >= 0 ? s : 0, what, got, want, fabs(got - want), tol);
    return 1;
}

static int compare(int i, const struct hp_metrics *r, const struct hp_metrics *p)
{
    int bad = 0;
    cr_assert_eq(r->n_tokens, p->n_tokens);
    cr_assert_eq(r->has_loss, p->has_loss);
    if (p->has_loss) {
        bad += close_to("loss", i, -1, r->loss, p->loss, 0);
        /* one token a sequence may flip; where a sequence is one scored row (a classifier) that would allow
         * anything, so there the argmax must agree */
        const bool one_row = p->n_tokens == p->n_seqs;
        bad += close_to("acc", i, -1, r->acc, p->acc, one_row ? 0 : (double)p->n_seqs / (double)p->n_tokens);
        bad += close_to("kl", i, -1, r->kl, p->kl, REL * p->loss);
    } else {
        bad += close_to("cos", i, -1, r->cos, p->cos, REL);
    }
    for (int s = 0; s < p->n_seqs; s++) {
        cr_assert_eq(r->seq_tokens[s], p->seq_tokens[s]);
        if (p->has_loss) {
            bad += close_to("loss", i, s, r->seq_loss[s], p->seq_loss[s], 0);
            bad += close_to("acc", i, s, r->seq_acc[s], p->seq_acc[s],
                            p->seq_tokens[s] > 1 ? 1.0 / (double)p->seq_tokens[s] : 0);
            bad += close_to("kl", i, s, r->seq_kl[s], p->seq_kl[s], REL * p->seq_loss[s]);
        } else {
            bad += close_to("cos", i, s, r->seq_cos[s], p->seq_cos[s], REL);
        }
    }
    return bad;
}

static uint64_t rng_state = 12345;
static uint64_t next_rand(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static struct hp_mask *spec_mask(const struct hp_model_info *in, const char *spec)
{
    struct hp_error err = {0};
    struct hp_mask *m;
    cr_assert_eq(hp_mask_parse(spec, false, in, &m, &err), HP_OK, "%s: %s", spec, err.msg);
    return m;
}

/* The variants listed above; returns how many. */
static int make_masks(const struct hp_model_info *in, struct hp_mask **out, int cap)
{
    const int L = in->n_layers, H = in->n_heads;
    int n = 0;
    out[n++] = NULL;
    out[n++] = hp_mask_new(L, H);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            struct hp_mask *m = hp_mask_new(L, H);
            m->gate[l * H + h] = 0.0f;
            out[n++] = m;
        }
    for (int l = 0; l < L; l++) {
        char spec[32];
        snprintf(spec, sizeof spec, "%d.*", l);
        out[n++] = spec_mask(in, spec);
    }
    for (int l = 0; l + 1 < L; l++) {
        struct hp_mask *m = hp_mask_new(L, H);
        m->gate[l * H + (l % H)] = 0.0f;
        m->gate[(l + 1) * H + ((l + 1) % H)] = 0.0f;
        out[n++] = m;
    }
    for (int k = 0; k < 6; k++) {
        struct hp_mask *m = hp_mask_new(L, H);
        for (int i = 0; i < L * H; i++)
            if (next_rand() % 3 == 0)
                m->gate[i] = 0.0f;
        out[n++] = m;
    }
    struct hp_mask *all = hp_mask_new(L, H);
    for (int i = 0; i < L * H; i++)
        all->gate[i] = 0.0f;
    out[n++] = all;
    if (in->n_kv_heads < H)
        out[n++] = spec_mask(in, "kv:0.1,kv:1.0");
    struct hp_mask *half = hp_mask_new(L, H);
    half->gate[(L - 1) * H] = 0.5f;
    half->gate[H > 1 ? 1 : 0] = 0.5f;
    out[n++] = half;
    cr_assert_leq(n, cap);
    return n;
}

/* Compare under the first n_abl of zero, mean and mean-pos ablation. */
static void check(const char *dir, const char *data, int n_abl)
{
    struct hp_error err = {0};
    struct hp_model *m;
    struct hp_data *d;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m);
    struct hp_mask *masks[512];
    int n = make_masks(in, masks, 512);
    struct hp_evaluator *plain, *reuse;
    cr_assert_eq(hp_evaluator_new(m, d, &plain, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m, d, &reuse, &err), HP_OK, "%s", err.msg);
    hp_evaluator_set_plain(plain, true);
    const enum hp_ablation abls[] = {HP_ABLATE_ZERO, HP_ABLATE_MEAN, HP_ABLATE_MEAN_POS};
    int bad = 0;
    for (int a = 0; a < n_abl; a++) {
        struct hp_metrics *p[512], *r[512], *r3[512];
        for (int i = 0; i < n; i++)
            cr_assert_eq(hp_evaluator_run(plain, masks[i], abls[a], &p[i], &err), HP_OK, "%s", err.msg);
        /* three at a time first, then all at once: the workspace, sized to what is asked, grows */
        for (int i = 0; i < n; i += 3)
            cr_assert_eq(hp_evaluator_run_many(reuse, (const struct hp_mask *const *)masks + i, n - i < 3 ? n - i : 3,
                                               abls[a], r3 + i, &err),
                         HP_OK, "%s", err.msg);
        cr_assert_eq(hp_evaluator_run_many(reuse, (const struct hp_mask *const *)masks, n, abls[a], r, &err), HP_OK,
                     "%s", err.msg);
        for (int i = 0; i < n; i++) {
            bad += compare(i, r[i], p[i]);
            bad += compare(i, r3[i], p[i]);
            hp_metrics_free(p[i]);
            hp_metrics_free(r[i]);
            hp_metrics_free(r3[i]);
        }
        cr_log_info("%s, ablation %d: %d variants compared", dir, a, n);
    }
    cr_assert_eq(bad, 0, "%s: %d values differ between the reuse and plain paths (see above)", dir, bad);
    for (int i = 0; i < n; i++)
        hp_mask_free(masks[i]);
    hp_evaluator_free(plain);
    hp_evaluator_free(reuse);
    hp_data_free(d);
    hp_model_close(m);
}

static void check_fixture(const char *name, const char *data)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), name);
    snprintf(path, sizeof path, "%s/%s", dir, data);
    check(dir, path, 3);
}

Test(reuse, gpt2) { check_fixture("gpt2-tiny", "data.npy"); }
Test(reuse, llama_gqa) { check_fixture("llama-gqa", "data.npy"); }
Test(reuse, qwen2_bias) { check_fixture("qwen2-bias", "data.npy"); }
Test(reuse, bert_mlm_padding) { check_fixture("bert-mlm", "data.jsonl"); }
Test(reuse, bert_encoder_cosine) { check_fixture("bert-encoder", "data.jsonl"); }
Test(reuse, bert_classifier) { check_fixture("bert-cls", "data.jsonl"); }
Test(reuse, stories260K) { check_fixture("stories260K", "data.npy"); }

Test(reuse, default_model_many_chunks, .timeout = 1500)
{
    char dir[1024], data[1200];
    snprintf(dir, sizeof dir, "%s/../models/default", getenv("HP_TESTS"));
    snprintf(data, sizeof data, "%s/heldout.npy", dir);
    /* 8 chunks of 4 x 128 tokens, up to 4 variant blocks a pass; zero ablation
     * only (the ablations differ only before the reuse, and cost time here) */
    check(dir, data, 1);
}

/* The first n sequences of the default model's held-out set as an .npy of its own. */
static void write_subset(const char *out, int n)
{
    char src[1200];
    snprintf(src, sizeof src, "%s/../models/default/heldout.npy", getenv("HP_TESTS"));
    size_t len;
    char *buf = tu_slurp(src, &len);
    size_t hlen = (size_t)(unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8;
    char header[128];
    int k = snprintf(header, sizeof header, "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, 128), }", n);
    while ((10 + k + 1) % 64)
        header[k++] = ' ';
    header[k++] = '\n';
    FILE *f = fopen(out, "wb");
    cr_assert(f);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(k & 0xff, f);
    fputc(k >> 8, f);
    fwrite(header, 1, (size_t)k, f);
    fwrite(buf + 10 + hlen, sizeof(int32_t), (size_t)n * 128, f);
    fclose(f);
    free(buf);
}

Test(reuse, partial_last_chunk)
{
    /* 7 sequences of 128 tokens: chunks of 4 and 3 */
    char tmp[64], dir[1024], data[128];
    tu_mkdtemp(tmp, sizeof tmp, "reuse7");
    snprintf(data, sizeof data, "%s/seven.npy", tmp);
    write_subset(data, 7);
    snprintf(dir, sizeof dir, "%s/../models/default", getenv("HP_TESTS"));
    check(dir, data, 2);
    tu_rmrf(tmp);
}

// --- a dominant head, ablated ---------------------------------------------------------

/*
 * Head h of layer l with the inputs of its output projection scaled by s (1e2 .. 1e8): a head whose
 * output dwarfs the rest of its layer's, as massive activations and attention sinks do in real LLMs.
 * A model with h ablated (zero) is the model without h, so whatever s is:
 *   - every variant that ablates h has the metrics that do not refer to the unmasked model (loss, acc,
 *     per sequence too) the unscaled model has, within 1e-6 relative, on the reuse path and on the
 *     plain path alike (the reuse path once subtracted h's large contribution from the kept layer
 *     output in float: 0.19 nats off at 1e8 on gpt2-tiny);
 *   - and at each s, the reuse path equals the plain path on every variant under every ablation
 *     (check(): under mean ablation h's mean goes through the scaled weights, legitimately).
 */
static int same_without_head(int i, const char *path, const struct hp_metrics *a, const struct hp_metrics *b)
{
    int bad = 0;
    char what[64];
    if (!b->has_loss)
        return 0; /* cosine: against the unmasked model, which s changes */
    snprintf(what, sizeof what, "%s loss", path);
    bad += close_to(what, i, -1, a->loss, b->loss, 0);
    snprintf(what, sizeof what, "%s acc", path);
    bad += close_to(what, i, -1, a->acc, b->acc, 0);
    for (int s = 0; s < b->n_seqs; s++) {
        bad += close_to("seq loss", i, s, a->seq_loss[s], b->seq_loss[s], 0);
        bad += close_to("seq acc", i, s, a->seq_acc[s], b->seq_acc[s], 0);
    }
    return bad;
}

/* check() against the plain path at the scales of at least plain_from */
static void dominant_head(const char *name, const char *data, const char *fmt, bool conv1d, int layer, int head,
                          double plain_from)
{
    char src[1024], tmp[64], tensor[128], path[1200];
    snprintf(src, sizeof src, "%s/%s", getenv("HP_FIXTURES"), name);
    snprintf(path, sizeof path, "%s/%s", src, data);
    snprintf(tensor, sizeof tensor, fmt, layer);
    struct hp_error err = {0};
    struct hp_model *m0;
    struct hp_data *d;
    cr_assert_eq(hp_model_open(src, &m0, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(path, 0, &d, &err), HP_OK, "%s", err.msg);
    const struct hp_model_info *in = hp_model_get_info(m0);
    const int H = in->n_heads, at = layer * H + head;
    /* the variants of make_masks that ablate the head */
    struct hp_mask *all[512], *masks[512];
    int n_all = make_masks(in, all, 512), n = 0;
    for (int i = 0; i < n_all; i++)
        if (all[i] && all[i]->gate[at] == 0.0f)
            masks[n++] = all[i];
    cr_assert_geq(n, 4);
    struct hp_evaluator *r0, *p0;
    cr_assert_eq(hp_evaluator_new(m0, d, &r0, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(m0, d, &p0, &err), HP_OK, "%s", err.msg);
    hp_evaluator_set_plain(p0, true);
    struct hp_metrics *want_r[512], *want_p[512];
    cr_assert_eq(hp_evaluator_run_many(r0, (const struct hp_mask *const *)masks, n, HP_ABLATE_ZERO, want_r, &err),
                 HP_OK, "%s", err.msg);
    for (int i = 0; i < n; i++)
        cr_assert_eq(hp_evaluator_run(p0, masks[i], HP_ABLATE_ZERO, &want_p[i], &err), HP_OK, "%s", err.msg);
    int bad = 0;
    for (double s = 1e2; s <= 1e8; s *= 100) {
        tu_mkdtemp(tmp, sizeof tmp, "dominant");
        tu_scaled_head_copy(src, tmp, tensor, conv1d, head, in->d_head, (float)s);
        struct hp_model *m;
        cr_assert_eq(hp_model_open(tmp, &m, &err), HP_OK, "%s", err.msg);
        struct hp_evaluator *r, *p;
        cr_assert_eq(hp_evaluator_new(m, d, &r, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_evaluator_new(m, d, &p, &err), HP_OK, "%s", err.msg);
        hp_evaluator_set_plain(p, true);
        struct hp_metrics *got_r[512], *got_p;
        cr_assert_eq(hp_evaluator_run_many(r, (const struct hp_mask *const *)masks, n, HP_ABLATE_ZERO, got_r, &err),
                     HP_OK, "%s", err.msg);
        int before = bad;
        for (int i = 0; i < n; i++) {
            cr_assert_eq(hp_evaluator_run(p, masks[i], HP_ABLATE_ZERO, &got_p, &err), HP_OK, "%s", err.msg);
            bad += same_without_head(i, "reuse", got_r[i], want_r[i]);
            bad += same_without_head(i, "plain", got_p, want_p[i]);
            hp_metrics_free(got_r[i]);
            hp_metrics_free(got_p);
        }
        if (bad > before)
            cr_log_error("%s, head %d.%d scaled by %g: %d values moved", name, layer, head, s, bad - before);
        hp_evaluator_free(r);
        hp_evaluator_free(p);
        hp_model_close(m);
        if (s >= plain_from)
            check(tmp, path, 3);
        tu_rmrf(tmp);
    }
    cr_assert_eq(bad, 0, "%s: %d values depend on the weights of an ablated head (see above)", name, bad);
    for (int i = 0; i < n; i++) {
        hp_metrics_free(want_r[i]);
        hp_metrics_free(want_p[i]);
    }
    for (int i = 0; i < n_all; i++)
        hp_mask_free(all[i]);
    hp_evaluator_free(r0);
    hp_evaluator_free(p0);
    hp_data_free(d);
    hp_model_close(m0);
}

Test(reuse, dominant_head_gpt2)
{
    dominant_head("gpt2-tiny", "data.npy", "transformer.h.%d.attn.c_proj.weight", true, 0, 1, 0);
}
Test(reuse, dominant_head_llama_gqa)
{
    dominant_head("llama-gqa", "data.npy", "model.layers.%d.self_attn.o_proj.weight", false, 1, 2, 0);
}
/* the trained model: its independence of the head only (against the plain path it is slow, and the fixtures above cover that) */
Test(reuse, dominant_head_stories260K)
{
    dominant_head("stories260K", "data.npy", "model.layers.%d.self_attn.o_proj.weight", false, 0, 3, INFINITY);
}
Test(reuse, dominant_head_bert_mlm)
{
    dominant_head("bert-mlm", "data.jsonl", "bert.encoder.layer.%d.attention.output.dense.weight", false, 0, 1, 0);
}
Test(reuse, dominant_head_bert_encoder)
{
    dominant_head("bert-encoder", "data.jsonl", "encoder.layer.%d.attention.output.dense.weight", false, 0, 2, 0);
}
/* the classifier: only the head's independence here (reuse.bert_classifier holds it to the plain path) */
Test(reuse, dominant_head_bert_cls)
{
    dominant_head("bert-cls", "data.jsonl", "bert.encoder.layer.%d.attention.output.dense.weight", false, 0, 1, INFINITY);
}

// --- a sweep of every study kind, both ways ------------------------------------------

static void run_plan(const char *plan, const char *db, const char *extra)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' run '%s' --db '%s' --threads 1 --quiet %s >/dev/null", getenv("HP_HEADPRUNE"), plan,
             db, extra);
    cr_assert_eq(system(cmd), 0, "%s failed", cmd);
}

Test(reuse, sweep_of_every_study_kind_equals_plain)
{
    char tmp[64], plan[1024], a[128], b[128];
    tu_mkdtemp(tmp, sizeof tmp, "reuse");
    snprintf(plan, sizeof plan, "%s/plans/sweep.yaml", getenv("HP_TESTS"));
    snprintf(a, sizeof a, "%s/reuse.db", tmp);
    snprintf(b, sizeof b, "%s/plain.db", tmp);
    run_plan(plan, a, "--batch 7");
    run_plan(plan, b, "--plain");
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(a, &db), SQLITE_OK);
    char sql[512];
    snprintf(sql, sizeof sql, "ATTACH '%s' AS p", b);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    /* the same jobs, in the same order, with the same variants */
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT (SELECT count(*) FROM sweep_jobs), (SELECT count(*) FROM p.sweep_jobs),"
                                    " (SELECT count(*) FROM sweep_jobs x JOIN p.sweep_jobs y USING (ord)"
                                    "  JOIN variants vx ON vx.id = x.variant_id JOIN p.variants vy ON vy.id = y.variant_id"
                                    "  WHERE vx.key = vy.key AND x.kind IS y.kind)",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    cr_assert_gt(n, 100);
    cr_assert_eq(sqlite3_column_int(st, 1), n);
    cr_assert_eq(sqlite3_column_int(st, 2), n, "the two runs chose different jobs");
    sqlite3_finalize(st);
    /* every metric of every variant and sequence */
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT vx.mask_text, s.seq, s.loss, t.loss, s.acc, t.acc, s.kl, t.kl, s.n_tokens,"
                                    " t.n_tokens, 1 FROM variants vx JOIN p.variants vy ON vy.key = vx.key"
                                    " JOIN seq_results s ON s.variant_id = vx.id"
                                    " JOIN p.seq_results t ON t.variant_id = vy.id AND t.seq = s.seq"
                                    " UNION ALL SELECT vx.mask_text, -1, r.loss, q.loss, r.acc, q.acc, r.kl, q.kl,"
                                    " r.n_tokens, q.n_tokens, q.n_seqs FROM variants vx JOIN p.variants vy ON vy.key = vx.key"
                                    " JOIN results r ON r.variant_id = vx.id JOIN p.results q ON q.variant_id = vy.id",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    int rows = 0, bad = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int seq = sqlite3_column_int(st, 1);
        cr_assert_eq(sqlite3_column_int(st, 8), sqlite3_column_int(st, 9));
        bad += close_to("loss", rows, seq, sqlite3_column_double(st, 2), sqlite3_column_double(st, 3), 0);
        /* one token of the sequence, or of each sequence for the whole set */
        bad += close_to("acc", rows, seq, sqlite3_column_double(st, 4), sqlite3_column_double(st, 5),
                        sqlite3_column_double(st, 10) / sqlite3_column_double(st, 9));
        bad += close_to("kl", rows, seq, sqlite3_column_double(st, 6), sqlite3_column_double(st, 7),
                        REL * sqlite3_column_double(st, 3));
        rows++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_log_info("%d rows of results compared", rows);
    cr_assert_gt(rows, n);
    cr_assert_eq(bad, 0, "%d values differ between the reuse and plain sweeps", bad);
    tu_rmrf(tmp);
}

/*
 * Every study kind of tests/plans/sweep.yaml run on llama-gqa and on a copy with head 1.2's output
 * projection inputs scaled by 1e6: every variant both runs evaluated that ablates 1.2 has the same
 * loss and accuracy, whole set and per sequence, within 1e-6 (the studies that pick heads from the
 * numbers, iterative ones, may evaluate different variants; the ones they share are compared).
 */
static void plan_for(const char *tmp, const char *model, const char *out)
{
    char src[1200], line[1024];
    snprintf(src, sizeof src, "%s/plans/sweep.yaml", getenv("HP_TESTS"));
    FILE *in = fopen(src, "r"), *o = fopen(out, "w");
    cr_assert(in && o);
    while (fgets(line, sizeof line, in)) {
        if (!strncmp(line, "model:", 6))
            fprintf(o, "model: %s\n", model);
        else if (!strncmp(line, "data:", 5))
            fprintf(o, "data: %s/llama-gqa/data.npy\n", getenv("HP_FIXTURES"));
        else
            fputs(line, o);
    }
    fclose(in);
    fclose(o);
    (void)tmp;
}

Test(reuse, dominant_head_every_study_kind)
{
    char tmp[64], src[1024], scaled[128], pa[128], pb[128], a[128], b[128], sql[512];
    tu_mkdtemp(tmp, sizeof tmp, "domsweep");
    snprintf(src, sizeof src, "%s/llama-gqa", getenv("HP_FIXTURES"));
    snprintf(scaled, sizeof scaled, "%s/scaled", tmp);
    cr_assert_eq(mkdir(scaled, 0700), 0);
    tu_scaled_head_copy(src, scaled, "model.layers.1.self_attn.o_proj.weight", false, 2, 8, 1e6f);
    snprintf(pa, sizeof pa, "%s/a.yaml", tmp);
    snprintf(pb, sizeof pb, "%s/b.yaml", tmp);
    plan_for(tmp, src, pa);
    plan_for(tmp, scaled, pb);
    snprintf(a, sizeof a, "%s/a.db", tmp);
    snprintf(b, sizeof b, "%s/b.db", tmp);
    run_plan(pa, a, "");
    run_plan(pb, b, "");
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(a, &db), SQLITE_OK);
    snprintf(sql, sizeof sql, "ATTACH '%s' AS p", b);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    /* 1.2 is bit 1 * 4 + 2 = 6 of the mask: byte 0, value 64 */
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT vx.mask_text, s.seq, s.loss, t.loss, s.acc, t.acc FROM variants vx"
                                    " JOIN p.variants vy ON vy.mask_text = vx.mask_text AND vy.ablation = vx.ablation"
                                    " JOIN seq_results s ON s.variant_id = vx.id"
                                    " JOIN p.seq_results t ON t.variant_id = vy.id AND t.seq = s.seq"
                                    " WHERE vx.ablation = 'zero' AND (unicode(substr(vx.mask, 1, 1)) & 64)"
                                    " UNION ALL SELECT vx.mask_text, -1, r.loss, q.loss, r.acc, q.acc FROM variants vx"
                                    " JOIN p.variants vy ON vy.mask_text = vx.mask_text AND vy.ablation = vx.ablation"
                                    " JOIN results r ON r.variant_id = vx.id JOIN p.results q ON q.variant_id = vy.id"
                                    " WHERE vx.ablation = 'zero' AND (unicode(substr(vx.mask, 1, 1)) & 64)",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    int rows = 0, bad = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int seq = sqlite3_column_int(st, 1);
        bad += close_to("loss", rows, seq, sqlite3_column_double(st, 3), sqlite3_column_double(st, 2), 0);
        bad += close_to("acc", rows, seq, sqlite3_column_double(st, 5), sqlite3_column_double(st, 4), 0);
        rows++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    cr_log_info("%d rows of variants ablating 1.2 compared", rows);
    cr_assert_gt(rows, 100);
    cr_assert_eq(bad, 0, "%d values depend on the weights of the ablated head 1.2", bad);
    tu_rmrf(tmp);
}
