/*
 * test_mask.c -- hp_mask_new / hp_mask_parse / hp_mask_count_ablated, units
 * (counts, widths, names, labels), the first changed layer, the metric and
 * ablation name tables, and hp_status_name.
 *
 * Models are described by a hand-filled struct hp_model_info; no weights
 * are needed. Expected gates are spelled out head by head.
 */
#define _DEFAULT_SOURCE /* mkdtemp, in testutil.h */
#include "headprune.h"
#include "testutil.h"

#include <criterion/criterion.h>

#include <string.h>

static struct hp_mask *parse_ok(const char *spec, bool keep, const struct hp_model_info *info)
{
    struct hp_mask *m = NULL;
    struct hp_error err = {{0}};
    enum hp_status st = hp_mask_parse(spec, keep, info, &m, &err);
    cr_assert_eq(st, HP_OK, "'%s': %s: %s", spec ? spec : "(null)", hp_status_name(st),
                 err.msg);
    cr_assert_not_null(m);
    cr_assert_eq(m->n_layers, info->n_layers);
    cr_assert_eq(m->n_heads, info->n_heads);
    return m;
}

// want is one string per layer of '1' (kept) and '0' (ablated) per head.
static void expect_gates(const struct hp_mask *m, const char *const *want)
{
    int ablated = 0;
    for (int l = 0; l < m->n_layers; l++) {
        cr_assert_eq((int)strlen(want[l]), m->n_heads);
        for (int h = 0; h < m->n_heads; h++) {
            float g = m->gate[l * m->n_heads + h];
            float w = want[l][h] == '1' ? 1.0f : 0.0f;
            cr_assert(g == w, "gate[%d][%d] = %g, want %g", l, h, (double)g, (double)w);
            ablated += w == 0.0f;
        }
    }
    cr_assert_eq(hp_mask_count_ablated(m), ablated);
}

static void expect_error(const char *spec, const struct hp_model_info *info, const char *want)
{
    struct hp_mask *m = (struct hp_mask *)&m; // any non-NULL: must be reset
    struct hp_error err = {{0}};
    cr_assert_eq(hp_mask_parse(spec, false, info, &m, &err), HP_ERR_ARG, "'%s' accepted", spec);
    cr_assert_null(m);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(hp_mask_parse(spec, true, info, &m, NULL), HP_ERR_ARG);
    cr_assert_null(m);
}

// An error whose message contains each of the given parts.
static void expect_error_has(const char *spec, const struct hp_model_info *info,
                             const char *part1, const char *part2)
{
    struct hp_mask *m = NULL;
    struct hp_error err = {{0}};
    cr_assert_eq(hp_mask_parse(spec, false, info, &m, &err), HP_ERR_ARG, "'%s' accepted", spec);
    cr_assert_null(m);
    cr_assert_not_null(strstr(err.msg, part1), "'%s': message lacks \"%s\": %s", spec, part1,
                       err.msg);
    if (part2)
        cr_assert_not_null(strstr(err.msg, part2), "'%s': message lacks \"%s\": %s", spec,
                           part2, err.msg);
    cr_assert_null(strchr(err.msg, '\n'));
}

// --- construction ------------------------------------------------------------

Test(mask, new_is_all_ones)
{
    struct hp_mask *m = hp_mask_new(3, 4);
    cr_assert_not_null(m);
    cr_assert_eq(m->n_layers, 3);
    cr_assert_eq(m->n_heads, 4);
    const char *want[] = {"1111", "1111", "1111"};
    expect_gates(m, want);
    cr_assert_eq(hp_mask_count_ablated(m), 0);
    m->gate[5] = 0.0f;
    cr_assert_eq(hp_mask_count_ablated(m), 1);
    hp_mask_free(m);
}

Test(mask, new_refuses_empty_and_free_accepts_null)
{
    cr_assert_null(hp_mask_new(0, 4));
    cr_assert_null(hp_mask_new(3, 0));
    cr_assert_null(hp_mask_new(-1, 4));
    hp_mask_free(NULL);
    cr_assert_eq(hp_mask_count_ablated(NULL), 0);
}

// --- parsing ---------------------------------------------------------------

Test(mask, single_head)
{
    struct hp_model_info info = tu_info(3, 4, 4);
    struct hp_mask *m = parse_ok("1.2", false, &info);
    const char *want[] = {"1111", "1101", "1111"};
    expect_gates(m, want);
    hp_mask_free(m);
}

Test(mask, several_items_with_whitespace)
{
    struct hp_model_info info = tu_info(3, 4, 4);
    struct hp_mask *m = parse_ok(" 0.0 ,2.3,\t1.1 ", false, &info);
    const char *want[] = {"0111", "1011", "1110"};
    expect_gates(m, want);
    hp_mask_free(m);
}

Test(mask, whole_layer)
{
    struct hp_model_info info = tu_info(3, 4, 4);
    struct hp_mask *m = parse_ok("1.*", false, &info);
    const char *want[] = {"1111", "0000", "1111"};
    expect_gates(m, want);
    hp_mask_free(m);
}

Test(mask, kv_group)
{
    // 4 query heads over 2 KV heads: group G is heads 2G and 2G+1.
    struct hp_model_info info = tu_info(3, 4, 2);
    struct hp_mask *m = parse_ok("kv:0.1,kv:2.0", false, &info);
    const char *want[] = {"1100", "1111", "0011"};
    expect_gates(m, want);
    hp_mask_free(m);
}

Test(mask, kv_group_mqa_and_mha)
{
    struct hp_model_info mqa = tu_info(2, 4, 1); // one KV head: the whole layer
    struct hp_mask *m = parse_ok("kv:1.0", false, &mqa);
    const char *want1[] = {"1111", "0000"};
    expect_gates(m, want1);
    hp_mask_free(m);

    struct hp_model_info mha = tu_info(2, 4, 4); // no GQA: one head
    m = parse_ok("kv:1.3", false, &mha);
    const char *want2[] = {"1111", "1110"};
    expect_gates(m, want2);
    hp_mask_free(m);

    struct hp_model_info unset = tu_info(2, 4, 0); // n_kv_heads unset: as without GQA
    m = parse_ok("kv:0.2", false, &unset);
    const char *want3[] = {"1101", "1111"};
    expect_gates(m, want3);
    hp_mask_free(m);
}

Test(mask, keep)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    struct hp_mask *m = parse_ok("0.1, 2.*, kv:1.1", true, &info);
    const char *want[] = {"0100", "0011", "1111"};
    expect_gates(m, want);
    cr_assert_eq(hp_mask_count_ablated(m), 5);
    hp_mask_free(m);
}

Test(mask, empty_spec)
{
    struct hp_model_info info = tu_info(2, 3, 3);
    const char *ones[] = {"111", "111"}, *zeros[] = {"000", "000"};
    const char *specs[] = {"", "   ", " \t\n"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        struct hp_mask *m = parse_ok(specs[i], false, &info);
        expect_gates(m, ones);
        hp_mask_free(m);
        m = parse_ok(specs[i], true, &info);
        expect_gates(m, zeros);
        cr_assert_eq(hp_mask_count_ablated(m), 6);
        hp_mask_free(m);
    }
    struct hp_mask *m = parse_ok(NULL, false, &info);
    expect_gates(m, ones);
    hp_mask_free(m);
}

Test(mask, duplicates_are_fine)
{
    struct hp_model_info info = tu_info(2, 4, 2);
    struct hp_mask *m = parse_ok("0.1,0.1,kv:0.0,0.*,1.3,1.3", false, &info);
    const char *want[] = {"0000", "1110"};
    expect_gates(m, want);
    hp_mask_free(m);
    m = parse_ok("0.1,0.1", true, &info);
    const char *want_keep[] = {"0100", "0000"};
    expect_gates(m, want_keep);
    hp_mask_free(m);
}

Test(mask, leading_zeros)
{
    struct hp_model_info info = tu_info(3, 4, 4);
    struct hp_mask *m = parse_ok("02.003", false, &info);
    const char *want[] = {"1111", "1111", "1110"};
    expect_gates(m, want);
    hp_mask_free(m);
}

// --- errors -----------------------------------------------------------------

Test(mask, layer_out_of_range)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    expect_error("3.1", &info, "mask '3.1': layer 3 does not exist (model has layers 0-2)");
    expect_error("3.*", &info, "mask '3.*': layer 3 does not exist (model has layers 0-2)");
    expect_error("kv:7.0", &info,
                 "mask 'kv:7.0': layer 7 does not exist (model has layers 0-2)");
    expect_error("99999999999999999999.0", &info, "mask '99999999999999999999.0': layer "
                 "99999999999999999999 does not exist (model has layers 0-2)");
    struct hp_model_info one = tu_info(1, 4, 4);
    expect_error("1.0", &one, "mask '1.0': layer 1 does not exist (model has only layer 0)");
}

Test(mask, head_out_of_range)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    expect_error("0.9", &info, "mask '0.9': head 9 does not exist (layer 0 has heads 0-3)");
    expect_error("2.4", &info, "mask '2.4': head 4 does not exist (layer 2 has heads 0-3)");
    expect_error("0.4294967296", &info,
                 "mask '0.4294967296': head 4294967296 does not exist (layer 0 has heads 0-3)");
}

Test(mask, kv_group_out_of_range)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    expect_error("kv:0.5", &info,
                 "mask 'kv:0.5': KV group 5 does not exist (model has KV groups 0-1)");
    expect_error("kv:0.2", &info,
                 "mask 'kv:0.2': KV group 2 does not exist (model has KV groups 0-1)");
    struct hp_model_info mqa = tu_info(3, 4, 1);
    expect_error("kv:0.1", &mqa,
                 "mask 'kv:0.1': KV group 1 does not exist (model has only KV group 0)");
}

Test(mask, kv_groups_uneven)
{
    struct hp_model_info info = tu_info(2, 6, 4);
    expect_error_has("kv:0.1", &info, "mask 'kv:0.1': model has 6 query heads and 4 KV heads",
                     "(name heads as LAYER.HEAD instead)");
    // Plain heads still work on such a model.
    struct hp_mask *m = parse_ok("0.5", false, &info);
    cr_assert_eq(hp_mask_count_ablated(m), 1);
    hp_mask_free(m);
}

Test(mask, syntax)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    expect_error("x.1", &info, "mask 'x.1': expected LAYER.HEAD, LAYER.*, kv:LAYER.GROUP or mlp:LAYER");
    const char *bad[] = {"1",     "1.",     ".1",    "1.2.3", "-1.0",  "1.-2", "+1.0",
                         "kv:1.*", "1.*x",  "1 .2",  "1. 2",  "KV:0.1", "kv:",  "kv0.1",
                         "*.1",   "1.**",   "0x1.0", "1.2a",  "1,2",   "kv:x.1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error_has(bad[i], &info, "expected LAYER.HEAD, LAYER.*, kv:LAYER.GROUP or mlp:LAYER",
                         "mask '");
}

Test(mask, error_names_the_bad_item)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    expect_error("0.1, 1.2 ,  5.0 ,2.2", &info,
                 "mask '5.0': layer 5 does not exist (model has layers 0-2)");
    expect_error("0.1,bogus", &info,
                 "mask 'bogus': expected LAYER.HEAD, LAYER.*, kv:LAYER.GROUP or mlp:LAYER");
}

Test(mask, empty_items)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    expect_error_has("0.1,,0.2", &info, "mask '0.1,,0.2': empty item", NULL);
    expect_error_has("0.1,", &info, "mask '0.1,': empty item", NULL);
    expect_error_has(",0.1", &info, "empty item", NULL);
    expect_error_has(" , ", &info, "empty item", NULL);
}

Test(mask, long_item_is_cut_in_message)
{
    struct hp_model_info info = tu_info(3, 4, 2);
    char spec[300];
    memset(spec, 'a', sizeof spec - 1);
    spec[sizeof spec - 1] = '\0';
    struct hp_mask *m = NULL;
    struct hp_error err;
    cr_assert_eq(hp_mask_parse(spec, false, &info, &m, &err), HP_ERR_ARG);
    cr_assert_null(m);
    cr_assert_lt(strlen(err.msg), 200, "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "aaa...'"), "%s", err.msg);
}

Test(mask, bad_model_info)
{
    struct hp_model_info info = tu_info(0, 4, 4);
    expect_error_has("0.1", &info, "mask: model has 0 layers of 4 heads", NULL);
}

// --- status names -------------------------------------------------------------

Test(status, names)
{
    cr_assert_str_eq(hp_status_name(HP_OK), "ok");
    cr_assert_str_eq(hp_status_name(HP_ERR_IO), "io");
    cr_assert_str_eq(hp_status_name(HP_ERR_FORMAT), "format");
    cr_assert_str_eq(hp_status_name(HP_ERR_SHAPE), "shape");
    cr_assert_str_eq(hp_status_name(HP_ERR_NOMEM), "nomem");
    cr_assert_str_eq(hp_status_name(HP_ERR_ARG), "arg");
    cr_assert_str_eq(hp_status_name(HP_ERR_UNSUPPORTED), "unsupported");
    cr_assert_str_eq(hp_status_name(HP_ERR_SQL), "sql");
    cr_assert_str_eq(hp_status_name(HP_ERR_PLAN), "plan");
    cr_assert_str_eq(hp_status_name((enum hp_status)99), "unknown");
}

// --- units, labels, first changed layer (one definition each, in mask.c) ------

Test(units, counts_widths_names_labels)
{
    struct hp_model_info gqa = tu_info(2, 8, 2), mha = tu_info(2, 4, 4), uneven = tu_info(1, 6, 4);
    cr_assert_eq(hp_unit_count(&gqa, false), 8);
    cr_assert_eq(hp_unit_count(&gqa, true), 2);
    cr_assert_eq(hp_unit_width(&gqa, false), 1);
    cr_assert_eq(hp_unit_width(&gqa, true), 4);
    cr_assert_eq(hp_unit_width(&mha, true), 1);
    cr_assert_eq(hp_unit_width(&uneven, true), 0, "6 query heads over 4 KV heads do not group");
    struct hp_model_info none = tu_info(1, 4, 4);
    none.n_kv_heads = 0; // a model that declares no KV heads has one per query head
    cr_assert_eq(hp_unit_count(&none, true), 4);
    cr_assert_eq(hp_unit_width(&none, true), 1);
    cr_assert_str_eq(hp_unit_name(false, false), "head");
    cr_assert_str_eq(hp_unit_name(true, true), "KV groups");
    char buf[32];
    hp_unit_label(buf, sizeof buf, false, 3, 2);
    cr_assert_str_eq(buf, "3.2");
    hp_unit_label(buf, sizeof buf, true, 1, 0);
    cr_assert_str_eq(buf, "kv:1.0");
}

// Setting a unit equals parsing its label: the label and the grouping agree.
Test(units, set_unit_matches_its_parsed_label)
{
    struct hp_model_info info = tu_info(3, 8, 2);
    for (int kv = 0; kv < 2; kv++)
        for (int l = 0; l < info.n_layers; l++)
            for (int u = 0; u < hp_unit_count(&info, kv); u++) {
                char label[32];
                hp_unit_label(label, sizeof label, kv, l, u);
                struct hp_mask *want = parse_ok(label, false, &info);
                struct hp_mask *got = hp_mask_new(info.n_layers, info.n_heads);
                hp_mask_set_unit(got, &info, kv, l, u, 0.0f);
                cr_assert(memcmp(got->gate, want->gate, sizeof(float) * 24) == 0, "unit %s", label);
                hp_mask_free(want);
                hp_mask_free(got);
            }
}

Test(mask, first_changed)
{
    struct hp_model_info info = tu_info(4, 3, 3);
    cr_assert_eq(hp_mask_first_changed(NULL, 4), 4, "no mask: nothing changes");
    struct hp_mask *m = parse_ok("", false, &info);
    cr_assert_eq(hp_mask_first_changed(m, 4), 4);
    hp_mask_free(m);
    m = parse_ok("3.2,2.0", false, &info);
    cr_assert_eq(hp_mask_first_changed(m, 4), 2);
    m->gate[1] = 0.5f; // any gate that is not 1 changes its layer
    cr_assert_eq(hp_mask_first_changed(m, 4), 0);
    hp_mask_free(m);
}

// --- metric and ablation names (one table each, in metric.c) -------------------

Test(names, metrics_round_trip_and_signs)
{
    const char *want[] = {"loss", "kl", "acc", "cos", "logit_diff", "answer_logprob", "answer_prob", "answer_acc",
                          "patch_recovery"};
    const int sign[] = {+1, +1, -1, -1, -1, -1, -1, -1, -1};
    cr_assert_eq(HP_N_METRICS, 9);
    for (int i = 0; i < HP_N_METRICS; i++) {
        enum hp_metric m;
        cr_assert_str_eq(hp_metric_name((enum hp_metric)i), want[i]);
        cr_assert(hp_metric_parse(want[i], &m));
        cr_assert_eq((int)m, i);
        cr_assert_eq(hp_metric_sign(m), sign[i], "%s", want[i]);
    }
    enum hp_metric m = HP_METRIC_KL;
    cr_assert_not(hp_metric_parse("Loss", &m));
    cr_assert_not(hp_metric_parse("", &m));
    cr_assert_eq(m, HP_METRIC_KL, "a failed parse leaves *out alone");
    cr_assert_str_eq(hp_metric_name((enum hp_metric)HP_N_METRICS), "unknown");
}

Test(names, ablations_round_trip)
{
    const char *want[] = {"zero", "mean", "mean-pos", "resample", "denoise"};
    cr_assert_eq(HP_N_ABLATIONS, 5);
    for (int i = 0; i < HP_N_ABLATIONS; i++) {
        enum hp_ablation a;
        cr_assert_str_eq(hp_ablation_name((enum hp_ablation)i), want[i]);
        cr_assert(hp_ablation_parse(want[i], &a));
        cr_assert_eq((int)a, i);
    }
    enum hp_ablation a;
    cr_assert_not(hp_ablation_parse("mean_pos", &a));
    cr_assert_str_eq(hp_ablation_name((enum hp_ablation)-1), "unknown");
    /* the methods whose replacement is the evaluator's mean statistics, which a sweep stores */
    cr_assert_not(hp_ablation_reads_means(HP_ABLATE_ZERO));
    cr_assert(hp_ablation_reads_means(HP_ABLATE_MEAN));
    cr_assert(hp_ablation_reads_means(HP_ABLATE_MEAN_POS));
    cr_assert_not(hp_ablation_reads_means(HP_ABLATE_RESAMPLE));
    cr_assert_not(hp_ablation_reads_means(HP_ABLATE_DENOISE));
    cr_assert_not(hp_ablation_reads_means((enum hp_ablation)-1));
}
