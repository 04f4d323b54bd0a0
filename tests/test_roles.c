/*
 * test_roles.c -- head roles (engine/analysis/roles.c) against independent references:
 *
 *  - a float64 reference from Hugging Face's attentions (eager, float64,
 *    output_attentions=True), written by tools/roles_reference.py into
 *    tests/fixtures/roles/<name>.json for every fixture architecture (GPT-2,
 *    GPT-2 pruned and with padded rows, BERT encoder / MLM / classifier,
 *    Llama with GQA, Llama bf16, Qwen2 f16 with biases, stories260K) and the
 *    default model: every score within TOL (the float32 engine measured at
 *    most 6e-7 from float64 when the fixtures were made), the preferred
 *    offsets exactly (or, where the reference's two best offsets lie within
 *    TOL of each other, one of them), the query counts and the probe's ids
 *    exactly;
 *  - TransformerLens's head detector ("mul" score, its own forward and
 *    detection patterns) on the GPT-2 models, stored in the same files: the
 *    engine's scores renormalised as TransformerLens normalises them must
 *    equal its previous-token, duplicate-token and induction scores within TOL;
 *  - hand-worked attention matrices through the per-sequence reduction;
 *  - invariants: the same bits with 1 and 2 threads; bad input is one line.
 */
#define _DEFAULT_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "roles.h"
#include "testutil.h"

/* |engine - float64 reference| allowed for every score (masses, and entropy in bits) */
#define TOL 2e-6

static char tmp[64];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "roles");
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(roles, .init = setup, .fini = teardown);

/* A path under the repository root. */
static void repo_path(const char *rel, char *out, size_t n)
{
    snprintf(out, n, "%s/../%s", getenv("HP_TESTS"), rel);
}

static cJSON *load_ref(const char *name)
{
    char p[1024], rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/roles/%s.json", name);
    repo_path(rel, p, sizeof p);
    char *txt = tu_slurp(p, NULL);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    cr_assert(ref, "%s: not JSON", p);
    return ref;
}

static struct hp_roles *compute(const char *model_rel, const char *data_rel, int threads)
{
    char mdir[1024], data[1024];
    repo_path(model_rel, mdir, sizeof mdir);
    repo_path(data_rel, data, sizeof data);
    hp_runtime_init(threads);
    struct hp_error err;
    struct hp_model *m;
    struct hp_data *d;
    struct hp_roles *r;
    cr_assert_eq(hp_model_open(mdir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_roles_compute(m, d, NULL, &r, &err), HP_OK, "%s", err.msg);
    hp_data_free(d);
    hp_model_close(m);
    return r;
}

static double field(cJSON *o, const char *k)
{
    cJSON *v = cJSON_GetObjectItem(o, k);
    cr_assert(v, "reference field %s missing", k);
    return cJSON_IsNull(v) ? NAN : v->valuedouble;
}

/* The [SEP] fields, which references made before sep_token lack: their models have no [SEP] (neither a
 * sep_token_id nor a tokenizer, as tools/roles_reference.py finds it), so the engine must find none either. */
static double sep_field(cJSON *ref, cJSON *o, const char *k)
{
    return cJSON_HasObjectItem(ref, "sep_id") ? field(o, k) : NAN;
}

/* One score against the reference: both undefined, or within TOL. Logs and counts a mismatch. */
static int check(const char *name, int l, int h, const char *what, double got, double want, double *worst)
{
    if (isnan(want) || isnan(got)) {
        if (isnan(want) && isnan(got))
            return 0;
        cr_log_error("%s head %d.%d %s: engine %.9g, reference %.9g (one undefined)", name, l, h, what, got, want);
        return 1;
    }
    double d = fabs(got - want);
    if (d > *worst)
        *worst = d;
    if (d <= TOL)
        return 0;
    cr_log_error("%s head %d.%d %s: engine %.9g, reference %.9g (|diff| %.3g > %g)", name, l, h, what, got, want, d,
                 TOL);
    return 1;
}

/* The engine's preferred offset must be the reference's, or tie with it in the reference within TOL. */
static int check_offset(const char *name, int l, int h, const char *what, int got, int want, cJSON *masses, int d0)
{
    if (got == want)
        return 0;
    cJSON *g = cJSON_GetArrayItem(masses, got - d0), *w = cJSON_GetArrayItem(masses, want - d0);
    if (g && w && !cJSON_IsNull(g) && fabs(g->valuedouble - w->valuedouble) <= TOL)
        return 0;
    cr_log_error("%s head %d.%d %s: engine %d, reference %d", name, l, h, what, got, want);
    return 1;
}

static void against_reference(const char *name)
{
    cJSON *ref = load_ref(name);
    struct hp_roles *r = compute(cJSON_GetObjectItem(ref, "model")->valuestring,
                                 cJSON_GetObjectItem(ref, "data")->valuestring, 2);
    const int L = (int)field(ref, "n_layers"), H = (int)field(ref, "n_heads"), T = (int)field(ref, "seq_len");
    cr_assert_eq(r->n_layers, L);
    cr_assert_eq(r->n_heads, H);
    cr_assert_eq(r->seq_len, T);
    cr_assert_eq(r->causal, cJSON_IsTrue(cJSON_GetObjectItem(ref, "causal")));
    /* the probe and the queries behind each score: exactly */
    cJSON *pr = cJSON_GetObjectItem(ref, "probe");
    cr_assert_eq(r->probe_seqs, (int)field(pr, "seqs"), "%s: probe sequences", name);
    cr_assert_eq(r->probe_len, (int)field(pr, "len"), "%s: probe length", name);
    cr_assert_eq(r->probe_seed, (uint64_t)field(pr, "seed"), "%s: probe seed", name);
    cJSON *q = cJSON_GetObjectItem(ref, "queries");
    cr_assert_eq(r->n_queries, (int64_t)field(q, "all"), "%s: queries", name);
    cr_assert_eq(r->n_prev, (int64_t)field(q, "prev_token"), "%s: previous-token queries", name);
    cr_assert_eq(r->n_duplicate, (int64_t)field(q, "duplicate_token"), "%s: duplicate-token queries", name);
    cr_assert_eq(r->n_first, (int64_t)field(q, "first_token"), "%s: first-token queries", name);
    cr_assert_eq(r->n_induction, (int64_t)field(q, "induction"), "%s: probe queries", name);
    const double sep_id = sep_field(ref, ref, "sep_id");
    cr_assert_eq(r->sep_id, isnan(sep_id) ? -1 : (int32_t)sep_id, "%s: [SEP] id", name);
    if (r->sep_id >= 0)
        cr_assert_eq(r->n_sep, (int64_t)field(q, "sep_token"), "%s: sep-token queries", name);

    int bad = 0;
    double worst = 0;
    cJSON *heads = cJSON_GetObjectItem(ref, "heads");
    cr_assert_eq(cJSON_GetArraySize(heads), L * H);
    for (int i = 0; i < L * H; i++) {
        cJSON *e = cJSON_GetArrayItem(heads, i);
        const struct hp_head_roles *x = &r->heads[i];
        const int l = i / H, h = i % H;
        cr_assert_eq(x->present, cJSON_IsTrue(cJSON_GetObjectItem(e, "present")), "%s head %d.%d present", name, l, h);
        if (!x->present) {
            cr_assert(isnan(x->prev_token) && isnan(x->entropy), "%s: a pruned head has scores", name);
            continue;
        }
        bad += check(name, l, h, "prev_token", x->prev_token, field(e, "prev_token"), &worst);
        bad += check(name, l, h, "duplicate_token", x->duplicate_token, field(e, "duplicate_token"), &worst);
        bad += check(name, l, h, "induction", x->induction, field(e, "induction"), &worst);
        bad += check(name, l, h, "induction_mass", x->induction_mass, field(e, "induction_mass"), &worst);
        bad += check(name, l, h, "first_token", x->first_token, field(e, "first_token"), &worst);
        bad += check(name, l, h, "dominant_mass", x->dominant_mass, field(e, "dominant_mass"), &worst);
        bad += check(name, l, h, "entropy", x->entropy, field(e, "entropy"), &worst);
        bad += check(name, l, h, "rare_token", x->rare_token, field(e, "rare_token"), &worst);
        bad += check(name, l, h, "sep_token", x->sep_token, sep_field(ref, e, "sep_token"), &worst);
        bad += check_offset(name, l, h, "dominant_offset", x->dominant_offset, (int)field(e, "dominant_offset"),
                            cJSON_GetObjectItem(e, "offset_mass"), -(T - 1));
        bad += check_offset(name, l, h, "induction_offset", x->induction_offset, (int)field(e, "induction_offset"),
                            cJSON_GetObjectItem(e, "induction_window"), -HP_ROLES_WINDOW);
    }
    cr_log_info("%s: %d heads, max |engine - reference| %.3g (tolerance %g)", name, L * H, worst, TOL);
    cr_assert_eq(bad, 0, "%s: %d scores differ from the float64 reference (max |diff| %.3g)", name, bad, worst);

    /* the probe's ids, made again as the engine makes them */
    const int len = r->probe_len, ns = r->probe_seqs;
    int32_t *perm = malloc(sizeof *perm * 200000), *ids = malloc(sizeof *ids * (size_t)ns * 2 * len);
    char mdir[1024];
    repo_path(cJSON_GetObjectItem(ref, "model")->valuestring, mdir, sizeof mdir);
    struct hp_model *m;
    struct hp_error err;
    cr_assert_eq(hp_model_open(mdir, &m, &err), HP_OK, "%s", err.msg);
    hp_roles_probe(hp_model_get_info(m)->n_vocab, ns, len, HP_ROLES_PROBE_SEED, perm, ids);
    hp_model_close(m);
    cJSON *pids = cJSON_GetObjectItem(pr, "ids");
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < 2 * len; t++)
            cr_assert_eq(ids[s * 2 * len + t], cJSON_GetArrayItem(cJSON_GetArrayItem(pids, s), t)->valueint,
                         "%s: probe id [%d][%d]", name, s, t);
    free(perm), free(ids);
    hp_roles_free(r);
    cJSON_Delete(ref);
}

Test(roles, gpt2_tiny) { against_reference("gpt2-tiny"); }
Test(roles, gpt2_tiny_with_left_and_right_padding) { against_reference("gpt2-tiny-padded"); }
Test(roles, gpt2_pruned_heads_have_no_scores) { against_reference("gpt2-pruned"); }
Test(roles, bert_encoder) { against_reference("bert-encoder"); }
Test(roles, bert_mlm_with_token_types) { against_reference("bert-mlm"); }
Test(roles, bert_classifier) { against_reference("bert-cls"); }

/*
 * The [SEP] id from the tokenizer where config.json has none: bert-mlm's weights and config without its
 * sep_token_id, beside a vocab.txt whose line 3 is [SEP], score exactly as bert-mlm (checked against Hugging
 * Face above, its id from config.json). A sep_token_id that is no id of the model is refused in one line.
 */
Test(roles, the_sep_id_from_the_tokenizer_and_a_bad_one_refused)
{
    char dir[256], path[320], cmd[1024];
    snprintf(dir, sizeof dir, "%s/sep", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/bert-mlm/model.safetensors %s/ && grep -v sep_token_id "
             "%s/bert-mlm/config.json > %s/config.json", dir, getenv("HP_FIXTURES"), dir, getenv("HP_FIXTURES"), dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char vocab[2048] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    for (int i = 5; i < 101; i++)
        snprintf(vocab + strlen(vocab), sizeof vocab - strlen(vocab), "w%d\n", i);
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    tu_spit(path, vocab, strlen(vocab));
    struct hp_roles *want = compute("tests/fixtures/bert-mlm", "tests/fixtures/bert-mlm/data.jsonl", 1);
    char data[1024];
    repo_path("tests/fixtures/bert-mlm/data.jsonl", data, sizeof data);
    struct hp_error err;
    struct hp_model *m;
    struct hp_data *d;
    struct hp_roles *r;
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_roles_compute(m, d, NULL, &r, &err), HP_OK, "%s", err.msg);
    hp_model_close(m);
    cr_assert(want->sep_id == 3 && r->sep_id == 3 && r->n_sep == want->n_sep && r->n_sep > 0, "[SEP] %d, %d",
              (int)want->sep_id, (int)r->sep_id);
    for (int i = 0; i < r->n_layers * r->n_heads; i++)
        cr_assert(r->heads[i].sep_token == want->heads[i].sep_token && isfinite(r->heads[i].sep_token),
                  "head %d: %.17g from the tokenizer, %.17g from config.json", i, r->heads[i].sep_token,
                  want->heads[i].sep_token);
    hp_roles_free(r);
    hp_roles_free(want);
    /* a sep_token_id past the vocabulary */
    snprintf(cmd, sizeof cmd, "sed 's/\"sep_token_id\": 3/\"sep_token_id\": 101/' %s/bert-mlm/config.json > "
             "%s/config.json", getenv("HP_FIXTURES"), dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_roles_compute(m, d, NULL, &r, &err), HP_ERR_FORMAT);
    cr_assert(strstr(err.msg, "/sep/config.json: sep_token_id 101 is no token id of the model (0 to 100)"), "%s",
              err.msg);
    hp_model_close(m);
    hp_data_free(d);
}
Test(roles, llama_gqa_query_heads) { against_reference("llama-gqa"); }
Test(roles, llama_bf16) { against_reference("llama-tied-bf16"); }
Test(roles, qwen2_f16_with_biases) { against_reference("qwen2-bias"); }
Test(roles, qwen3_qk_norms) { against_reference("qwen3-qknorm"); }
Test(roles, phi3_fused_with_a_window) { against_reference("phi3-fused"); }
Test(roles, gpt_neox_parallel) { against_reference("neox-parallel"); }
Test(roles, olmo2_post_norms) { against_reference("olmo2-post-norms"); }
Test(roles, gemma2_soft_capped_scores) { against_reference("gemma2-softcap"); }
Test(roles, gemma3_local_layers) { against_reference("gemma3-local"); }
Test(roles, stories260K) { against_reference("stories260K"); }
Test(roles, default_model) { against_reference("default"); }

/*
 * TransformerLens's "mul" score of a head: the attention on the detection
 * pattern's (query, key) pairs over all the attention, every query of a
 * sequence counted (query 0 too), the mean over sequences taken last. On
 * unpadded rows of T tokens that is the engine's mean over its queries times
 * their number over S T; on the probe (no BOS) induction / 2.
 */
static void against_transformer_lens(const char *name)
{
    cJSON *ref = load_ref(name);
    cJSON *tl = cJSON_GetObjectItem(ref, "transformer_lens");
    cr_assert(tl, "%s: no TransformerLens scores (tools/roles_reference.py without --no-tl writes them)", name);
    struct hp_roles *r = compute(cJSON_GetObjectItem(ref, "model")->valuestring,
                                 cJSON_GetObjectItem(ref, "data")->valuestring, 1);
    const double ST = (double)r->n_seqs * r->seq_len;
    int bad = 0;
    double worst = 0;
    for (int l = 0; l < r->n_layers; l++)
        for (int h = 0; h < r->n_heads; h++) {
            const struct hp_head_roles *x = &r->heads[l * r->n_heads + h];
            double dup = r->n_duplicate ? x->duplicate_token * (double)r->n_duplicate / ST : 0.0;
            double got[3] = {x->prev_token * (double)r->n_prev / ST, dup,
                             x->induction * (double)r->n_induction / (2.0 * r->probe_len * r->probe_seqs)};
            const char *keys[3] = {"previous_token_head", "duplicate_token_head", "induction_head"};
            for (int k = 0; k < 3; k++) {
                double want = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItem(tl, keys[k]), l), h)->valuedouble;
                bad += check(name, l, h, keys[k], got[k], want, &worst);
            }
        }
    cr_log_info("%s: max |engine - TransformerLens %s| %.3g", name, cJSON_GetObjectItem(tl, "version")->valuestring,
                worst);
    cr_assert_eq(bad, 0, "%s: %d scores differ from TransformerLens's head detector", name, bad);
    hp_roles_free(r);
    cJSON_Delete(ref);
}

Test(roles, gpt2_tiny_agrees_with_transformer_lens) { against_transformer_lens("gpt2-tiny"); }
Test(roles, default_model_agrees_with_transformer_lens) { against_transformer_lens("default"); }

/* --- hand-worked ------------------------------------------------------------------- */

/*
 * Four tokens a b a c, causal, no padding. Query 0 is no query (it sees only
 * itself). Rows (query) of keys 0..3:
 *   1: .5 .5
 *   2: .2 .3 .5          (2 holds a, as 0 does: duplicate target 0)
 *   3: .1 .6 .1 .2
 * prev: (.5 + .3 + .1) / 3; duplicate: .2 / 1 (only query 2 has an earlier
 * occurrence); first: (.5 + .2 + .1) / 3; offsets: -1: (.5+.3+.1)/3,
 * 0: (.5+.5+.2)/3, -2: (.2+.6)/3, -3: .1/3 -> dominant 0 (1.2/3);
 * entropy: row 1 1 bit; row 2 -(.2 log .2 + .3 log .3 + .5 log .5); row 3 ...
 * With b as [SEP]: queries 2 and 3 see it (query 1 is it): (.3 + .6) / 2.
 */
static double h2(double p)
{
    return p > 0 ? -p * log2(p) : 0;
}

Test(roles, hand_worked_causal)
{
    const int T = 4;
    const int32_t ids[4] = {0, 1, 0, 2};
    float p[16] = {1, 0, 0, 0, .5f, .5f, 0, 0, .2f, .3f, .5f, 0, .1f, .6f, .1f, .2f};
    int32_t last[3] = {-1, -1, -1}, links[16];
    struct hp_roles_seq q = {.prev_occ = links, .next_occ = links + 4, .rare = links + 8, .seps = links + 12};
    hp_roles_seq_prepare(&q, ids, NULL, T, true, NULL, 1, last);
    cr_assert(last[0] == -1 && last[1] == -1 && last[2] == -1, "the scratch is left all -1");
    double acc[HP_RS_OFF + 7] = {0};
    hp_roles_seq_reduce(&q, p, acc);
    int64_t nq = 0, np = 0, nd = 0, nf = 0, ns = 0;
    hp_roles_seq_count(&q, &nq, &np, &nd, &nf, &ns);
    cr_assert(nq == 3 && np == 3 && nd == 1 && nf == 3 && ns == 2, "counts %lld %lld %lld %lld %lld", (long long)nq,
              (long long)np, (long long)nd, (long long)nf, (long long)ns);
    const double e = 1e-7;
    cr_assert_float_eq(acc[HP_RS_PREV], .5 + .3 + .1, e);
    cr_assert_float_eq(acc[HP_RS_DUP], .2, e);
    cr_assert_float_eq(acc[HP_RS_FIRST], .5 + .2 + .1, e);
    cr_assert_float_eq(acc[HP_RS_RARE], 0, e);
    cr_assert_float_eq(acc[HP_RS_SEP], .3 + .6, e);
    double *off = acc + HP_RS_OFF + T - 1;
    cr_assert_float_eq(off[0], .5 + .5 + .2, e);
    cr_assert_float_eq(off[-1], .5 + .3 + .1, e);
    cr_assert_float_eq(off[-2], .2 + .6, e);
    cr_assert_float_eq(off[-3], .1, e);
    cr_assert_float_eq(acc[HP_RS_ENT], 1.0 + h2(.2) + h2(.3) + h2(.5) + h2(.1) + h2(.6) + h2(.1) + h2(.2), 1e-6);
}

/*
 * Encoder, five positions a b a c [pad], frequencies over the data: a 5,
 * b 1, c 1 (b and c tie for the rarest: both are targets). Rows of keys
 * 0..4 (the pad key holds 0):
 *   0: .4 .1 .2 .3 0     1: .25 .25 .25 .25 0   2: .1 .2 .3 .4 0   3: 0 .5 .5 0 0
 * Every real position is a query (4); the pad row is none.
 * prev (queries 1..3): .25 + .2 + .5; duplicate: query 0 -> 2 (.2),
 * query 2 -> 0 (.1): .3 over 2; first (queries 1..3): .25 + .1 + 0;
 * rare (keys 1 and 3): (.1+.3) + (.25+.25) + (.2+.4) + (.5+0).
 * With c as [SEP] (and the pad's id, which is no key): queries 0..2 (3 is
 * it): .3 + .25 + .4 over 3.
 */
Test(roles, hand_worked_encoder_with_padding_and_rare_ties)
{
    const int T = 5;
    const int32_t ids[5] = {0, 1, 0, 2, 3};
    const uint8_t mask[5] = {1, 1, 1, 1, 0};
    const int64_t freq[4] = {5, 1, 1, 9};
    float p[25] = {.4f, .1f, .2f, .3f, 0, .25f, .25f, .25f, .25f, 0, .1f, .2f, .3f, .4f, 0, 0, .5f, .5f, 0, 0,
                   .2f, .2f, .2f, .2f, .2f};
    int32_t last[4] = {-1, -1, -1, -1}, links[20];
    struct hp_roles_seq q = {.prev_occ = links, .next_occ = links + 5, .rare = links + 10, .seps = links + 15};
    hp_roles_seq_prepare(&q, ids, mask, T, false, freq, 2, last);
    cr_assert_eq(q.n_rare, 2);
    double acc[HP_RS_OFF + 9] = {0};
    hp_roles_seq_reduce(&q, p, acc);
    int64_t nq = 0, np = 0, nd = 0, nf = 0, ns = 0;
    hp_roles_seq_count(&q, &nq, &np, &nd, &nf, &ns);
    cr_assert(nq == 4 && np == 3 && nd == 2 && nf == 3 && ns == 3, "counts %lld %lld %lld %lld %lld", (long long)nq,
              (long long)np, (long long)nd, (long long)nf, (long long)ns);
    const double e = 1e-7;
    cr_assert_float_eq(acc[HP_RS_PREV], .25 + .2 + .5, e);
    cr_assert_float_eq(acc[HP_RS_DUP], .2 + .1, e);
    cr_assert_float_eq(acc[HP_RS_FIRST], .25 + .1 + 0, e);
    cr_assert_float_eq(acc[HP_RS_RARE], .4 + .5 + .6 + .5, e);
    cr_assert_float_eq(acc[HP_RS_SEP], .3 + .25 + .4, e);
    double *off = acc + HP_RS_OFF + T - 1;
    cr_assert_float_eq(off[1], .1 + .25 + .4 + 0, e); /* key = query + 1; the pad row is no query */
    cr_assert_float_eq(off[-1], .25 + .2 + .5, e);
    cr_assert_float_eq(off[0], .4 + .25 + .3 + 0, e);
}

/* --- invariants and bad input ------------------------------------------------------- */

Test(roles, the_thread_count_changes_no_bit)
{
    struct hp_roles *a = compute("tests/fixtures/stories260K", "tests/fixtures/stories260K/data.npy", 1);
    struct hp_roles *b = compute("tests/fixtures/stories260K", "tests/fixtures/stories260K/data.npy", 2);
    cr_assert_eq(memcmp(a->heads, b->heads, sizeof *a->heads * (size_t)a->n_layers * a->n_heads), 0,
                 "roles differ between 1 and 2 threads");
    hp_roles_free(a);
    hp_roles_free(b);
}

/* hp_roles_compute on the fixture model dir with data (written to tmp) and probe options: the status, err filled. */
static enum hp_status roles_on(const char *model, const char *data_text, const char *data_name,
                               const struct hp_roles_opts *o, struct hp_error *err)
{
    char mdir[1024], data[256];
    snprintf(mdir, sizeof mdir, "%s/%s", getenv("HP_FIXTURES"), model);
    snprintf(data, sizeof data, "%s/%s", tmp, data_name);
    tu_spit(data, data_text, strlen(data_text));
    struct hp_model *m;
    struct hp_data *d;
    struct hp_roles *r = NULL;
    cr_assert_eq(hp_model_open(mdir, &m, err), HP_OK, "%s", err->msg);
    cr_assert_eq(hp_data_load(data, 0, &d, err), HP_OK, "%s", err->msg);
    enum hp_status st = hp_roles_compute(m, d, o, &r, err);
    cr_assert(st == HP_OK || r == NULL, "a result beside an error");
    hp_roles_free(r);
    hp_data_free(d);
    hp_model_close(m);
    return st;
}

static void one_line(const struct hp_error *err, const char *words)
{
    cr_assert(strstr(err->msg, words), "the error does not say '%s': %s", words, err->msg);
    cr_assert_null(strchr(err->msg, '\n'), "more than one line: %s", err->msg);
}

Test(roles, data_the_model_cannot_run_is_refused)
{
    struct hp_error err;
    /* an id outside gpt2-tiny's 97 */
    cr_assert_neq(roles_on("gpt2-tiny", "{\"ids\": [1, 2, 300, 4]}\n", "far.jsonl", NULL, &err), HP_OK);
    one_line(&err, "far.jsonl");
    one_line(&err, "300");
    /* rows longer than its 64 positions */
    char row[1024] = "{\"ids\": [1";
    for (int i = 1; i < 70; i++)
        strcat(row, ", 1");
    strcat(row, "]}\n");
    cr_assert_eq(roles_on("gpt2-tiny", row, "long.jsonl", NULL, &err), HP_ERR_SHAPE);
    one_line(&err, "exceed the model's 64 positions");
    /* a row all padding */
    cr_assert_neq(roles_on("bert-encoder", "{\"ids\": [2, 5, 3], \"attention_mask\": [1, 1, 1]}\n"
                                           "{\"ids\": [0, 0, 0], \"attention_mask\": [0, 0, 0]}\n",
                           "pad.jsonl", NULL, &err), HP_OK);
    one_line(&err, "all padding");
}

Test(roles, a_probe_the_model_cannot_take_is_refused)
{
    struct hp_error err;
    const char *ok = "{\"ids\": [1, 2, 3, 4]}\n";
    struct hp_roles_opts o = {.probe_len = 33}; /* gpt2-tiny: 64 positions, at most 32 a half */
    cr_assert_eq(roles_on("gpt2-tiny", ok, "a.jsonl", &o, &err), HP_ERR_ARG);
    one_line(&err, "exceeds the model's 64 positions");
    o.probe_len = 4;
    cr_assert_eq(roles_on("gpt2-tiny", ok, "a.jsonl", &o, &err), HP_ERR_ARG);
    one_line(&err, "too short");
    o = (struct hp_roles_opts){.probe_seqs = -1};
    cr_assert_eq(roles_on("gpt2-tiny", ok, "a.jsonl", &o, &err), HP_ERR_ARG);
    one_line(&err, "probe of -1 sequences");
    /* a probe as asked is taken: 2 sequences of 2 x 8 */
    o = (struct hp_roles_opts){.probe_seqs = 2, .probe_len = 8};
    cr_assert_eq(roles_on("gpt2-tiny", ok, "a.jsonl", &o, &err), HP_OK, "%s", err.msg);
}

/* Fixture model copied into tmp/nan with the first `count` floats (all: 0) of a weight set to NaN. */
static void nan_copy(const char *model, const char *tensor, size_t count)
{
    char src[1024], dst[1024];
    snprintf(dst, sizeof dst, "%s/nan", tmp);
    cr_assert_eq(mkdir(dst, 0777), 0);
    size_t n;
    snprintf(src, sizeof src, "%s/%s/config.json", getenv("HP_FIXTURES"), model);
    char *cfg = tu_slurp(src, &n);
    snprintf(dst, sizeof dst, "%s/nan/config.json", tmp);
    tu_spit(dst, cfg, n);
    free(cfg);
    snprintf(src, sizeof src, "%s/%s/model.safetensors", getenv("HP_FIXTURES"), model);
    char *st = tu_slurp(src, &n);
    uint64_t hlen;
    memcpy(&hlen, st, 8);
    cJSON *h = cJSON_ParseWithLength(st + 8, hlen);
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, tensor);
    cr_assert(t, "no %s", tensor);
    cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    size_t b = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, e = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    if (count && b + 4 * count < e)
        e = b + 4 * count;
    float nan = NAN;
    for (size_t i = 8 + hlen + b; i < 8 + hlen + e; i += 4)
        memcpy(st + i, &nan, 4);
    cJSON_Delete(h);
    snprintf(dst, sizeof dst, "%s/nan/model.safetensors", tmp);
    tu_spit(dst, st, n);
    free(st);
}

static void expect_nonfinite(const char *model, const char *words)
{
    char mdir[256], data[1024];
    snprintf(mdir, sizeof mdir, "%s/nan", tmp);
    snprintf(data, sizeof data, "%s/%s/data.npy", getenv("HP_FIXTURES"), model);
    struct hp_error err;
    struct hp_model *m;
    struct hp_data *d;
    struct hp_roles *r = NULL;
    cr_assert_eq(hp_model_open(mdir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_roles_compute(m, d, NULL, &r, &err), HP_ERR_FORMAT, "%s", err.msg);
    cr_assert_null(r);
    one_line(&err, words);
    one_line(&err, "is not finite");
    hp_data_free(d);
    hp_model_close(m);
}

Test(roles, attention_that_is_not_finite_is_an_error)
{
    nan_copy("gpt2-tiny", "transformer.h.1.attn.c_attn.weight", 0);
    expect_nonfinite("gpt2-tiny", "head 1.0's attention on the data");
}

/* NaN queries only: the attention scores are NaN while the values are not. The softmax must not make such a
 * row uniform (finite, and wrong), or the roles (and every metric) would hide it. */
Test(roles, nan_queries_alone_are_found)
{
    nan_copy("llama-gqa", "model.layers.2.self_attn.q_proj.weight", 1);
    expect_nonfinite("llama-gqa", "head 2.0's attention on the data");
}

/* --- the roles study of a sweep ------------------------------------------------------ */

static void write_text(const char *path, const char *text)
{
    tu_spit(path, text, strlen(text));
}

static struct hp_sweep_summary sweep(const char *plan_text, const char *plan_name, const char *db)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, plan_name);
    write_text(path, plan_text);
    struct hp_plan *p;
    struct hp_error err = {0};
    cr_assert_eq(hp_plan_load(path, &p, &err), HP_OK, "%s", err.msg);
    struct hp_sweep_opts o = {.db_path = db, .shard_count = 1, .threads = 2};
    struct hp_sweep_summary sum;
    cr_assert_eq(hp_sweep_run(p, &o, &sum, &err), HP_OK, "%s", err.msg);
    hp_plan_free(p);
    return sum;
}

/* The head_roles rows of the run a sweep's study links to, against r: every score bit for bit. */
static void stored_equal(const char *db, int64_t sweep_id, const char *study, const struct hp_roles *r)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h,
                                    "SELECT h.layer, h.head, h.prev_token, h.duplicate_token, h.induction, "
                                    "h.induction_offset, h.induction_mass, h.first_token, h.dominant_offset, "
                                    "h.dominant_mass, h.entropy, h.rare_token, h.sep_token, r.probe_seqs, r.probe_len, "
                                    "r.n_queries, r.n_prev, r.n_duplicate, r.n_first, r.n_induction, "
                                    "coalesce(r.sep_id, -1), coalesce(r.n_sep, 0) FROM sweep_roles x "
                                    "JOIN role_runs r ON r.id = x.run_id JOIN head_roles h ON h.run_id = r.id "
                                    "WHERE x.sweep_id = ? AND x.study = ? ORDER BY h.layer, h.head",
                                    -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_int64(st, 1, sweep_id);
    sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const int l = sqlite3_column_int(st, 0), hd = sqlite3_column_int(st, 1);
        const struct hp_head_roles *x = &r->heads[l * r->n_heads + hd];
        cr_assert(x->present);
        const double want[11] = {x->prev_token, x->duplicate_token, x->induction,
                                 hp_roles_offset_shown(x->induction_mass) ? x->induction_offset : NAN,
                                 x->induction_mass, x->first_token, x->dominant_offset, x->dominant_mass, x->entropy,
                                 x->rare_token, x->sep_token};
        for (int c = 0; c < 11; c++) {
            double got = sqlite3_column_type(st, 2 + c) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 2 + c);
            cr_assert((isnan(got) && isnan(want[c])) || got == want[c], "%s head %d.%d column %d: stored %.17g, "
                      "computed %.17g", study, l, hd, c, got, want[c]);
        }
        const int64_t counts[9] = {r->probe_seqs, r->probe_len, r->n_queries, r->n_prev, r->n_duplicate, r->n_first,
                                   r->n_induction, r->sep_id, r->n_sep};
        for (int c = 0; c < 9; c++)
            cr_assert_eq(sqlite3_column_int64(st, 13 + c), counts[c], "%s: run column %d", study, c);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    cr_assert_eq(n, r->n_layers * r->n_heads, "%s: %d rows stored", study, n);
}

static long long db_count(const char *db, const char *q)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(h));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

Test(roles, a_sweep_stores_the_engines_roles_once_and_query_joins_the_effects)
{
    char db[128], plan[1024];
    snprintf(db, sizeof db, "%s/r.db", tmp);
    snprintf(plan, sizeof plan,
             "name: roles-sweep\nmodel: %s/gpt2-tiny\ndata: %s/gpt2-tiny/data.npy\nablation: mean\nstudies:\n"
             "  - single\n  - roles\n  - roles: {name: short, probe_len: 16, probe_seqs: 4}\n",
             getenv("HP_FIXTURES"), getenv("HP_FIXTURES"));
    struct hp_sweep_summary s1 = sweep(plan, "p.yaml", db);
    cr_assert_eq(s1.n_run, 1 + 12 + 2, "baseline, 12 heads and two roles computations: %lld", (long long)s1.n_run);
    cr_assert_eq(db_count(db, "SELECT count(*) FROM role_runs"), 2);
    cr_assert_eq(db_count(db, "SELECT count(*) FROM sweep_roles"), 2);

    /* what was stored is what the engine computes, whatever the plan's ablation */
    struct hp_roles *r = compute("tests/fixtures/gpt2-tiny", "tests/fixtures/gpt2-tiny/data.npy", 1);
    stored_equal(db, s1.sweep_id, "roles", r);
    hp_roles_free(r);
    char mdir[1024], data[1024];
    repo_path("tests/fixtures/gpt2-tiny", mdir, sizeof mdir);
    repo_path("tests/fixtures/gpt2-tiny/data.npy", data, sizeof data);
    struct hp_error err;
    struct hp_model *m;
    struct hp_data *d;
    cr_assert_eq(hp_model_open(mdir, &m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
    struct hp_roles_opts ro = {.probe_seqs = 4, .probe_len = 16};
    cr_assert_eq(hp_roles_compute(m, d, &ro, &r, &err), HP_OK, "%s", err.msg);
    hp_data_free(d);
    hp_model_close(m);
    stored_equal(db, s1.sweep_id, "short", r);
    hp_roles_free(r);

    /* run again: nothing is computed; another plan on the same model and data finds the roles too */
    struct hp_sweep_summary s2 = sweep(plan, "p.yaml", db);
    cr_assert_eq(s2.n_run, 0);
    cr_assert_eq(s2.n_cached, 1 + 12 + 2);
    char other[1024];
    snprintf(other, sizeof other,
             "name: other\nmodel: %s/gpt2-tiny\ndata: %s/gpt2-tiny/data.npy\nablation: mean\nstudies:\n"
             "  - roles: {name: again}\n",
             getenv("HP_FIXTURES"), getenv("HP_FIXTURES"));
    struct hp_sweep_summary s3 = sweep(other, "o.yaml", db);
    cr_assert_eq(s3.n_run, 0, "the roles were computed again");
    cr_assert_eq(db_count(db, "SELECT count(*) FROM role_runs"), 2);
    cr_assert_eq(db_count(db, "SELECT count(*) FROM sweep_roles"), 3);

    /* query roles: every head's effect is the one `query heads` reports */
    struct hp_query_opts q = {.kind = HP_QUERY_ROLES, .sweep_id = s1.sweep_id, .study = "roles"};
    struct hp_table *t, *heads;
    cr_assert_eq(hp_query(db, &q, &t, &err), HP_OK, "%s", err.msg);
    q = (struct hp_query_opts){.kind = HP_QUERY_HEADS, .sweep_id = s1.sweep_id};
    cr_assert_eq(hp_query(db, &q, &heads, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(t->n_rows, 12 + 1, "12 heads and the rho row");
    cr_assert_eq(t->n_summary, 1, "the rho row is a summary");
    int c_effect = t->n_cols - 1, c_label = 2;
    cr_assert_str_eq(t->cols[c_effect], "effect");
    for (int i = 0; i < 12; i++) {
        const char *label = t->cells[(size_t)i * t->n_cols + c_label];
        int found = 0;
        for (int j = 0; j < heads->n_rows; j++)
            if (strcmp(heads->cells[(size_t)j * heads->n_cols + 1], label) == 0) {
                cr_assert_str_eq(t->cells[(size_t)i * t->n_cols + c_effect], heads->cells[(size_t)j * heads->n_cols + 5],
                                 "head %s", label);
                found++;
            }
        cr_assert_eq(found, 1, "head %s", label);
    }
    cr_assert_str_eq(t->cells[(size_t)12 * t->n_cols + c_label], "rho");
    hp_table_free(t);
    hp_table_free(heads);
}

/* The cell of query roles' column col at head label (layer.head). */
static const char *roles_cell(const struct hp_table *t, const char *label, const char *col)
{
    int c = -1;
    for (int k = 0; k < t->n_cols; k++)
        if (strcmp(t->cols[k], col) == 0)
            c = k;
    cr_assert_geq(c, 0, "no column %s", col);
    for (int i = 0; i < t->n_rows; i++)
        if (strcmp(t->cells[(size_t)i * t->n_cols + 2], label) == 0)
            return t->cells[(size_t)i * t->n_cols + c] ? t->cells[(size_t)i * t->n_cols + c] : ""; /* NULL: empty */
    cr_assert_fail("no head %s", label);
    return NULL;
}

Test(roles, an_induction_offset_below_the_stated_mass_is_left_empty)
{
    /* the default model's previous-token head 0.1 puts 0.00007 of its attention at the best induction offset:
     * noise, which `query roles` showed as an offset. Its induction head 3.1 puts 0.80 at offset +1 */
    char db[128], plan[2200], root[1024];
    snprintf(db, sizeof db, "%s/offset.db", tmp);
    repo_path("models/default", root, sizeof root);
    snprintf(plan, sizeof plan, "name: offsets\nmodel: %s\ndata: %s/heldout.npy\nstudies:\n  - roles\n", root, root);
    sweep(plan, "offsets.yaml", db);
    cr_assert(!hp_roles_offset_shown(HP_ROLES_OFFSET_MIN_MASS * 0.999) && hp_roles_offset_shown(HP_ROLES_OFFSET_MIN_MASS));
    cr_assert(!hp_roles_offset_shown(NAN));
    cr_assert_eq(db_count(db, "SELECT count(*) FROM head_roles WHERE layer = 0 AND head = 1 AND "
                              "induction_offset IS NULL AND induction_mass < 1e-3"), 1);
    cr_assert_eq(db_count(db, "SELECT count(*) FROM head_roles WHERE layer = 3 AND head = 1 AND "
                              "induction_offset = 1 AND induction_mass > 0.5"), 1);
    /* every offset stored is one whose mass reaches the threshold, and every such one is stored */
    cr_assert_eq(db_count(db, "SELECT count(*) FROM head_roles WHERE (induction_offset IS NULL) = "
                              "(induction_mass >= 0.05)"), 0);
    cr_assert_float_eq(HP_ROLES_OFFSET_MIN_MASS, 0.05, 0, "the threshold the query above and the docs state");
    struct hp_error err;
    struct hp_query_opts q = {.kind = HP_QUERY_ROLES, .study = "roles"};
    struct hp_table *t;
    cr_assert_eq(hp_query(db, &q, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(roles_cell(t, "0.1", "induction_offset"), "");
    cr_assert_str_eq(roles_cell(t, "3.1", "induction_offset"), "1");
    hp_table_free(t);
    /* a database an older version wrote holds the noise offset: the query leaves it empty all the same */
    sqlite3 *h;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(h, "UPDATE head_roles SET induction_offset = -3 WHERE induction_offset IS NULL", NULL, NULL,
                              NULL), SQLITE_OK);
    sqlite3_close(h);
    cr_assert_eq(hp_query(db, &q, &t, &err), HP_OK, "%s", err.msg);
    cr_assert_str_eq(roles_cell(t, "0.1", "induction_offset"), "");
    cr_assert_str_eq(roles_cell(t, "3.1", "induction_offset"), "1");
    hp_table_free(t);
}
