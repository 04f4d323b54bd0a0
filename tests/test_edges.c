/*
 * test_edges.c -- edges between senders and receivers ("SENDER>RECEIVER" mask items, struct hp_edge).
 *
 * Their text (order, expansion of "*" and of a head's three inputs, one-line errors); an independent float64
 * forward of each family with the edges patched (tests/fixtures/edge-cases.json, tools/gen_edge_cases.py) on
 * both of the evaluator's paths (refcases.h); and the invariants a second code path gives: a node patched on
 * every edge out of it is the node ablated (the mask's own ablation path, which test_mlp and test_reference
 * check against Hugging Face), a receiving head's three inputs given together are the head given whole, and
 * the plain and reuse paths agree with several variants of different edges in one pass.
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headprune.h"
#include "refcases.h"
#include "testutil.h"

static const struct hp_model_info toy = {.n_layers = 3, .n_heads = 4, .n_kv_heads = 2, .d_head = 2, .d_model = 8};

static struct hp_mask *parse_ok(const char *spec, const struct hp_model_info *in)
{
    struct hp_error err = {0};
    struct hp_mask *m;
    cr_assert_eq(hp_mask_parse(spec, false, in, &m, &err), HP_OK, "'%s': %s", spec, err.msg);
    return m;
}

Test(edges, text_order_and_expansion)
{
    struct hp_mask *m = parse_ok(" 1.2>2.0:k, emb>logits,0.1>2.0:q , 0.1>1.2,0.1>2.0:q", &toy);
    char *s = hp_mask_format(m);
    cr_assert_str_eq(s, "0.1>1.2:q,0.1>1.2:k,0.1>1.2:v,0.1>2.0:q,1.2>2.0:k,emb>logits");
    cr_assert_eq(m->n_edges, 6, "an edge named twice is one edge");
    cr_assert_eq(hp_mask_count_ablated(m), 0, "edges ablate no unit");
    cr_assert_eq(hp_mask_first_changed(m, 3), 0, "emb is before layer 0");
    struct hp_mask *back = parse_ok(s, &toy), *copy = hp_mask_new(3, 4);
    char *s2 = hp_mask_format(back);
    cr_assert_str_eq(s2, s, "the text reads back as itself");
    cr_assert(hp_mask_copy(copy, m));
    char *s3 = hp_mask_format(copy);
    cr_assert_str_eq(s3, s, "a copy has the edges");
    free(s), free(s2), free(s3);
    hp_mask_free(m), hp_mask_free(back), hp_mask_free(copy);

    /* units first, then edges; a mask of units alone keeps its text */
    m = parse_ok("mlp:1>logits,0.3,1.2>mlp:1", &toy);
    s = hp_mask_format(m);
    cr_assert_str_eq(s, "0.3,1.2>mlp:1,mlp:1>logits");
    cr_assert_eq(hp_mask_first_changed(m, 3), 0);
    free(s);
    hp_mask_free(m);
    m = parse_ok("1.2>2.0:k", &toy);
    cr_assert_eq(hp_mask_first_changed(m, 3), 1, "a pass with edges starts at its first sender's layer");
    hp_mask_free(m);
    m = parse_ok("0.1,1.*", &toy);
    s = hp_mask_format(m);
    cr_assert_str_eq(s, "0.1,1.*");
    cr_assert(!hp_mask_has_edges(m));
    free(s);
    hp_mask_free(m);

    /* "*" and "L.*": every edge that exists there */
    static const struct {
        const char *spec;
        int n, n_parallel;
    } counts[] = {
        {"0.1>*", 2 * 4 * 3 + 3 + 1, 2 * 4 * 3 + 2 + 1}, /* layers 1, 2's inputs; mlp:0 (not parallel), 1, 2; logits */
        {"*>logits", 1 + 3 * 4 + 3, 1 + 3 * 4 + 3},
        {"*>0.0:q", 1, 1},                  /* only emb writes before layer 0 reads */
        {"*>mlp:0", 1 + 4, 1},              /* emb and layer 0's heads; under a parallel residual emb alone */
        {"1.*>2.0:q", 4, 4},
        {"mlp:0>2.*", 12, 12},
        {"emb>1.3", 3, 3},
    };
    struct hp_model_info par = toy;
    par.parallel = true;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        m = parse_ok(counts[i].spec, &toy);
        cr_expect_eq(m->n_edges, counts[i].n, "'%s': %d edges", counts[i].spec, m->n_edges);
        hp_mask_free(m);
        m = parse_ok(counts[i].spec, &par);
        cr_expect_eq(m->n_edges, counts[i].n_parallel, "'%s' (parallel): %d edges", counts[i].spec, m->n_edges);
        hp_mask_free(m);
    }
}

Test(edges, what_cannot_be_an_edge_is_refused_in_one_line)
{
    static const char *bad[] = {
        "0.1>0.2",      "1.0>0.3:q", "mlp:1>1.0:q", "logits>0.1", "0.1>emb",   "0.9>1.0",  "0.1>1.0:x", "0.1>>1.0",
        "0.1>",         ">1.0",      "mlp:2>0.*",   "0.1>mlp:7",  "5.0>logits", "emb>1.0:qk", "*>emb",   "0.1>1.0:",
        "mlp:0>mlp:0",  "2.1>2.*",
    };
    struct hp_error err;
    struct hp_mask *m;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (struct hp_error){0};
        cr_expect_neq(hp_mask_parse(bad[i], false, &toy, &m, &err), HP_OK, "'%s' was accepted", bad[i]);
        cr_expect(strstr(err.msg, bad[i]) && !strchr(err.msg, '\n'), "'%s': %s", bad[i], err.msg);
    }
    /* a head into its own layer's MLP exists unless the residual is parallel */
    struct hp_model_info par = toy;
    par.parallel = true;
    cr_assert_eq(hp_mask_parse("0.1>mlp:0", false, &toy, &m, &err), HP_OK, "%s", err.msg);
    hp_mask_free(m);
    cr_assert_neq(hp_mask_parse("0.1>mlp:0", false, &par, &m, &err), HP_OK);
    cr_assert(strstr(err.msg, "parallel") && !strchr(err.msg, '\n'), "%s", err.msg);
}

// --- against an independent float64 forward --------------------------------------------

Test(edges, every_family_matches_a_float64_forward_of_its_own, .timeout = 600)
{
    int n_edge_cases[HP_ABLATE_COUNT] = {0};
    const int bad = rc_check_file("edge-cases.json", ">", n_edge_cases);
    for (int a = 0; a <= HP_ABLATE_RESAMPLE; a++)
        cr_expect(n_edge_cases[a] > 0, "no edge case under %s", hp_ablation_name((enum hp_ablation)a));
    cr_assert_eq(bad, 0, "%d metrics differ from the float64 forward's (above)", bad);
}

/* The masks the reference tool lists as edges that cannot exist, per fixture (its own reading of the rule). */
Test(edges, what_the_reference_refuses_is_refused)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/edge-cases.json", getenv("HP_FIXTURES"));
    char *txt = tu_slurp(p, NULL);
    cJSON *j = cJSON_Parse(txt), *fx = cJSON_GetObjectItem(j, "fixtures"), *f;
    int n = 0;
    cJSON_ArrayForEach(f, fx)
    {
        struct hp_model_info in = {.n_layers = cJSON_GetObjectItem(f, "n_layers")->valueint,
                                   .n_heads = cJSON_GetObjectItem(f, "n_heads")->valueint,
                                   .n_kv_heads = cJSON_GetObjectItem(f, "n_kv_heads")->valueint,
                                   .d_head = cJSON_GetObjectItem(f, "d_head")->valueint,
                                   .parallel = cJSON_IsTrue(cJSON_GetObjectItem(f, "parallel_residual"))};
        const cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(f, "invalid"))
        {
            struct hp_error err = {0};
            struct hp_mask *m = NULL;
            cr_expect_neq(hp_mask_parse(b->valuestring, false, &in, &m, &err), HP_OK, "%s: '%s' was accepted",
                          f->string, b->valuestring);
            cr_expect(!strchr(err.msg, '\n') && err.msg[0], "%s: %s", f->string, err.msg);
            hp_mask_free(m);
            n++;
        }
    }
    cr_assert_gt(n, 20);
    cJSON_Delete(j);
    free(txt);
}

// --- against a second code path ------------------------------------------------------

/* The fixtures whose forward patches edges: every pre-norm family but OLMo 2's norm over every head's queries. */
static const char *const families[] = {"gpt2-tiny",      "llama-gqa",       "qwen2-bias",     "qwen3-qknorm",
                                       "mistral-window", "phi3-fused",      "neox-parallel",  "neox-sequential",
                                       "gemma2-softcap", "gemma3-local"};

struct opened {
    struct hp_model *m;
    struct hp_data *d;
    struct hp_evaluator *ev;
};

static struct opened open_fixture(const char *fix)
{
    char dir[1024], data[1200];
    snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), fix);
    snprintf(data, sizeof data, "%s/data.npy", dir);
    struct hp_error err = {0};
    struct opened o;
    cr_assert_eq(hp_model_open(dir, &o.m, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_data_load(data, 0, &o.d, &err), HP_OK, "%s", err.msg);
    cr_assert_eq(hp_evaluator_new(o.m, o.d, &o.ev, &err), HP_OK, "%s", err.msg);
    return o;
}

static void close_fixture(struct opened *o)
{
    hp_evaluator_free(o->ev);
    hp_data_free(o->d);
    hp_model_close(o->m);
}

/* |a - b| within tol * max(1, |b|) for loss and KL, logged; returns the misses. */
static int near_metrics(const char *what, const struct hp_metrics *a, const struct hp_metrics *b, double tol)
{
    int bad = 0;
    const enum hp_metric ms[] = {HP_METRIC_LOSS, HP_METRIC_KL};
    for (size_t k = 0; k < 2; k++) {
        const double x = a->value[ms[k]], y = b->value[ms[k]];
        if (!(fabs(x - y) <= tol * fmax(1.0, fabs(y))) && ++bad)
            cr_log_error("%s: %s %.9g against %.9g", what, hp_metric_name(ms[k]), x, y);
    }
    return bad;
}

/* Every node u of a family: "u>*" (all together, reuse path) against "u" ablated (plain path), and the same edge
 * masks on the plain path, under zero, mean and mean-pos. */
Test(edges, a_node_patched_on_every_edge_out_is_the_node_ablated, .timeout = 600)
{
    int bad = 0, n_checked = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        struct opened o = open_fixture(families[f]);
        const struct hp_model_info *in = hp_model_get_info(o.m);
        const enum hp_ablation abls[] = {HP_ABLATE_ZERO, HP_ABLATE_MEAN, HP_ABLATE_MEAN_POS};
        const int n = in->n_layers * (in->n_heads + 1);
        struct hp_mask **edge = calloc((size_t)n, sizeof *edge), **unit = calloc((size_t)n, sizeof *unit);
        char spec[64], what[160];
        for (int l = 0, i = 0; l < in->n_layers; l++)
            for (int h = 0; h <= in->n_heads; h++, i++) {
                if (h < in->n_heads)
                    snprintf(spec, sizeof spec, "%d.%d", l, h);
                else
                    snprintf(spec, sizeof spec, "mlp:%d", l);
                unit[i] = parse_ok(spec, in);
                strcat(spec, ">*");
                edge[i] = parse_ok(spec, in);
            }
        struct hp_error err = {0};
        for (size_t a = 0; a < 3; a++) {
            struct hp_metrics **me = calloc((size_t)n, sizeof *me), **mp = calloc((size_t)n, sizeof *mp), *mu;
            hp_evaluator_set_plain(o.ev, false);
            cr_assert_eq(hp_evaluator_run_many(o.ev, (const struct hp_mask *const *)edge, n, abls[a], me, &err), HP_OK,
                         "%s: %s", families[f], err.msg);
            hp_evaluator_set_plain(o.ev, true);
            for (int i = 0; i < n; i++) {
                char *t = hp_mask_format(unit[i]);
                cr_assert_eq(hp_evaluator_run(o.ev, unit[i], abls[a], &mu, &err), HP_OK, "%s", err.msg);
                cr_assert_eq(hp_evaluator_run(o.ev, edge[i], abls[a], &mp[i], &err), HP_OK, "%s", err.msg);
                snprintf(what, sizeof what, "%s %s: %s>* (reuse path) against %s ablated", families[f],
                         hp_ablation_name(abls[a]), t, t);
                bad += near_metrics(what, me[i], mu, 1e-5);
                snprintf(what, sizeof what, "%s %s: %s>* (plain path) against the reuse path", families[f],
                         hp_ablation_name(abls[a]), t);
                bad += near_metrics(what, mp[i], me[i], 1e-5);
                cr_expect(mu->value[HP_METRIC_KL] > 1e-7, "%s: %s changes nothing: the test would not see a miss",
                          families[f], t);
                n_checked++;
                free(t);
                hp_metrics_free(mu), hp_metrics_free(me[i]), hp_metrics_free(mp[i]);
            }
            free(me), free(mp);
        }
        for (int i = 0; i < n; i++)
            hp_mask_free(edge[i]), hp_mask_free(unit[i]);
        free(edge), free(unit);
        close_fixture(&o);
    }
    cr_assert_eq(bad, 0, "%d of %d comparisons differ (above)", bad, 2 * n_checked);
}

/* Variants of different edges in one pass (the reuse path's blocks) give what each gives alone (plain path); a
 * head's three inputs named one by one are the head named whole. */
Test(edges, blocks_of_different_edges_in_one_pass, .timeout = 300)
{
    static const char *specs[] = {"0.0>1.0:q",     "0.1>1.1:k", "0.1>1.1:v",          "0.0>logits", "mlp:0>1.1:q",
                                  "emb>1.0",       "emb>logits", "0.1,0.1>1.0:v,1.0>logits", "*>logits", "0.1>1.1",
                                  "1.0>mlp:1,0.0>mlp:1"};
    int bad = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        struct opened o = open_fixture(families[f]);
        const struct hp_model_info *in = hp_model_get_info(o.m);
        struct hp_mask *ms[16];
        int n = 0;
        struct hp_error err = {0};
        for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
            if (hp_mask_parse(specs[i], false, in, &ms[n], &err) == HP_OK)
                n++;
            else /* a head into its own layer's MLP under a parallel residual */
                cr_assert(in->parallel && strstr(specs[i], ">mlp:1"), "%s '%s': %s", families[f], specs[i], err.msg);
        }
        struct hp_metrics *all[16], *one;
        hp_evaluator_set_plain(o.ev, false);
        cr_assert_eq(hp_evaluator_run_many(o.ev, (const struct hp_mask *const *)ms, n, HP_ABLATE_ZERO, all, &err),
                     HP_OK, "%s: %s", families[f], err.msg);
        hp_evaluator_set_plain(o.ev, true);
        for (int i = 0; i < n; i++) {
            char *t = hp_mask_format(ms[i]), what[200];
            cr_assert_eq(hp_evaluator_run(o.ev, ms[i], HP_ABLATE_ZERO, &one, &err), HP_OK, "%s", err.msg);
            snprintf(what, sizeof what, "%s '%s': together against alone", families[f], t);
            bad += near_metrics(what, all[i], one, 1e-5);
            cr_expect(one->value[HP_METRIC_KL] > 1e-9, "%s '%s' changes nothing", families[f], t);
            if (!strcmp(t, "0.1>1.1:q,0.1>1.1:k,0.1>1.1:v")) { /* "0.1>1.1" parsed: the same mask as the three */
                struct hp_mask *three = parse_ok("0.1>1.1:v,0.1>1.1:q,0.1>1.1:k", in);
                struct hp_metrics *m3;
                cr_assert_eq(hp_evaluator_run(o.ev, three, HP_ABLATE_ZERO, &m3, &err), HP_OK, "%s", err.msg);
                cr_expect_eq(m3->value[HP_METRIC_LOSS], one->value[HP_METRIC_LOSS], "%s: the three inputs given "
                             "one by one are not the head given whole", families[f]);
                hp_metrics_free(m3);
                hp_mask_free(three);
            }
            free(t);
            hp_metrics_free(one), hp_metrics_free(all[i]);
            hp_mask_free(ms[i]);
        }
        close_fixture(&o);
    }
    cr_assert_eq(bad, 0, "%d comparisons differ (above)", bad);
}

/* Where the semantics do not hold or the engine does not patch edges yet, one line says so. */
Test(edges, refused_where_they_do_not_apply)
{
    static const struct {
        const char *fix, *data, *spec;
        enum hp_ablation abl;
        int pos;
        const char *says;
    } cases[] = {
        {"bert-mlm", "data.jsonl", "0.1>1.0:q", HP_ABLATE_ZERO, -1, "post-norm"},
        {"olmo2-post-norms", "data.npy", "0.1>logits", HP_ABLATE_ZERO, -1, "OLMo 2"},
        {"llama-gqa", "data.npy", "0.1>logits", HP_ABLATE_ZERO, 3, "position 3"},
        {"llama-gqa", "data.npy", "emb>logits", HP_ABLATE_MEAN, -1, "emb"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[1024], data[1200];
        snprintf(dir, sizeof dir, "%s/%s", getenv("HP_FIXTURES"), cases[i].fix);
        snprintf(data, sizeof data, "%s/%s", dir, cases[i].data);
        struct hp_error err = {0};
        struct hp_model *m;
        struct hp_data *d;
        struct hp_evaluator *ev;
        struct hp_mask *mask;
        struct hp_metrics *mt = NULL;
        cr_assert_eq(hp_model_open(dir, &m, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_data_load(data, 0, &d, &err), HP_OK, "%s", err.msg);
        cr_assert_eq(hp_evaluator_new(m, d, &ev, &err), HP_OK, "%s", err.msg);
        mask = parse_ok(cases[i].spec, hp_model_get_info(m));
        mask->pos = cases[i].pos;
        cr_expect_neq(hp_evaluator_run(ev, mask, cases[i].abl, &mt, &err), HP_OK, "%s '%s' ran", cases[i].fix,
                      cases[i].spec);
        cr_expect(strstr(err.msg, cases[i].says) && !strchr(err.msg, '\n'), "%s: %s", cases[i].fix, err.msg);
        cr_expect_null(mt);
        if (i == 3) { /* gradients are at the units' gates */
            mask->pos = -1;
            const int HH = hp_model_get_info(m)->n_layers * hp_model_get_info(m)->n_heads;
            double *g = calloc((size_t)HH, sizeof *g);
            err = (struct hp_error){0};
            cr_expect_eq(hp_evaluator_grad(ev, HP_METRIC_LOSS, mask, HP_ABLATE_ZERO, g, NULL, NULL, &err),
                         HP_ERR_UNSUPPORTED);
            cr_expect(strstr(err.msg, "edges") && !strchr(err.msg, '\n'), "%s", err.msg);
            free(g);
        }
        hp_mask_free(mask);
        hp_evaluator_free(ev);
        hp_data_free(d);
        hp_model_close(m);
    }
}
