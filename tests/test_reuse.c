/*
 * test_reuse.c -- the reuse path (the default) against the plain path.
 *
 * The plain path evaluates each variant by whole forward passes with logits
 * materialised; it is itself checked against Hugging Face (test_reference).
 * The reuse path resumes each variant from its first changed layer, batches
 * variants as blocks of one pass and fuses the LM head with the metrics, so
 * its float rounding differs. Here both run the same variants and must agree:
 *
 *   loss, cosine and their per-sequence values: |diff| <= 1e-6 |plain|
 *   KL (and per sequence):                 |diff| <= 1e-6 (|plain KL| + plain loss)
 *   acc (and per sequence):                at most one token per sequence flips
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
 * Not here: the BERT sequence classifier (bert-cls). Its per-row loss is one
 * difference of two class logits, with no averaging over tokens, and the two
 * paths' rounding moves it by up to 1.9e-6 (1.1e-6 relative) on this
 * fixture's losses of 0.3-1.7. Both paths are checked against Hugging Face
 * instead, within 1e-5 (test_reference.c).
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
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
        bad += close_to("acc", i, -1, r->acc, p->acc, (double)p->n_seqs / (double)p->n_tokens);
        bad += close_to("kl", i, -1, r->kl, p->kl, REL * p->loss);
    } else {
        bad += close_to("cos", i, -1, r->cos, p->cos, 0);
    }
    for (int s = 0; s < p->n_seqs; s++) {
        cr_assert_eq(r->seq_tokens[s], p->seq_tokens[s]);
        if (p->has_loss) {
            bad += close_to("loss", i, s, r->seq_loss[s], p->seq_loss[s], 0);
            bad += close_to("acc", i, s, r->seq_acc[s], p->seq_acc[s],
                            p->seq_tokens[s] ? 1.0 / (double)p->seq_tokens[s] : 0);
            bad += close_to("kl", i, s, r->seq_kl[s], p->seq_kl[s], REL * p->seq_loss[s]);
        } else {
            bad += close_to("cos", i, s, r->seq_cos[s], p->seq_cos[s], 0);
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
Test(reuse, stories260K) { check_fixture("stories260K", "data.npy"); }

Test(reuse, default_model_many_chunks, .timeout = 600)
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
