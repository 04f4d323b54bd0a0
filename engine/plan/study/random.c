/*
 * random.c -- the random study: for each k, `samples` draws of k units from
 * the selected units of the selected layers, each draw ablated together.
 *
 * A draw is a function of (plan seed, study name, k, sample) only --
 * splitmix64 seeding xoshiro256** (util.h) -- so it is the same on every
 * machine and survives adding, removing or reordering other studies (the
 * results database then recognises the variants as already done). The
 * study's index is deliberately not part of the seed.
 */
#include "study_int.h"


#include <stdlib.h>

// --- options ---------------------------------------------------------------------------

static enum hp_status parse_k(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int_list(ld, "k", v, 1, &s->random.k, &s->random.n_k);
}

static enum hp_status parse_samples(const struct hp_loader *ld, const yaml_node_t *v, struct hp_study *s)
{
    return hp_ld_int(ld, "'samples'", v, 1, "a positive integer", &s->random.samples);
}

static void defaults(struct hp_study *s)
{
    s->random.samples = 1;
}

static void clear(struct hp_study *s)
{
    free(s->random.k);
}

// --- draws -------------------------------------------------------------------------------

// Uniform in [0, n), without modulo bias.
static uint64_t below(uint64_t s[4], uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, r;
    do
        r = hp_xoshiro256ss(s);
    while (r >= limit);
    return r % n;
}

// The generator for one draw: a function of seed, study name, k and sample.
static void seed_draw(uint64_t s[4], uint64_t seed, const char *name, int k, int sample)
{
    uint64_t x = seed;
    x = hp_splitmix64(&x) ^ hp_fnv1a(name);
    x = hp_splitmix64(&x) ^ (uint64_t)(unsigned)k;
    x = hp_splitmix64(&x) ^ (uint64_t)(unsigned)sample;
    for (int i = 0; i < 4; i++)
        s[i] = hp_splitmix64(&x);
}

// --- expansion ---------------------------------------------------------------------------

static int64_t count_jobs(const struct hp_expander *e)
{
    return (int64_t)e->s->random.n_k * e->s->random.samples;
}

/* k's draws from the pool units[0..n) (indices i * n_sel + j), into jobs; pool: n entries of scratch */
static enum hp_status draw_k(struct hp_expander *e, int k, const int *units, int *pool, int n)
{
    enum hp_status st = HP_OK;
    for (int smp = 0; st == HP_OK && smp < e->s->random.samples; smp++) {
        uint64_t rng[4];
        seed_draw(rng, e->p->seed, e->s->name, k, smp);
        for (int i = 0; i < n; i++)
            pool[i] = units[i];
        // A partial Fisher-Yates shuffle: pool[0..k) is the draw.
        for (int i = 0; i < k; i++) {
            int j = i + (int)below(rng, (uint64_t)(n - i));
            int t = pool[i];
            pool[i] = pool[j];
            pool[j] = t;
        }
        struct hp_mask *m = hp_ex_new_mask(e);
        for (int i = 0; m && i < k; i++)
            hp_ex_ablate(e, m, e->lay[pool[i] / e->n_sel], e->sel[pool[i] % e->n_sel]);
        st = hp_ex_emit(e, m, -1, -1, -1, smp, k, "k=%d #%d", k, smp);
    }
    return st;
}

static enum hp_status expand(struct hp_expander *e)
{
    const struct hp_study *s = e->s;
    enum hp_status st = HP_OK;
    // The pool: every selected unit of every selected layer the checkpoint has, layer-major.
    int n_all = e->n_lay * e->n_sel, n = 0;
    int *pool = malloc(sizeof *pool * (size_t)n_all), *units = malloc(sizeof *units * (size_t)n_all);
    if (!pool || !units) {
        free(pool), free(units);
        return hp_ex_nomem(e);
    }
    for (int i = 0; i < n_all; i++)
        if (hp_ex_live(e, i / e->n_sel, i % e->n_sel))
            units[n++] = i;
    for (int ki = 0; st == HP_OK && ki < s->random.n_k; ki++) {
        int k = s->random.k[ki];
        if (k > n)
            st = hp_ex_fail(e, "k", k, NULL, "k = %d is more than the %d %s it draws from (%d layer%s x %d%s)", k, n,
                            hp_unit_name(s->unit, true), e->n_lay, e->n_lay == 1 ? "" : "s", e->n_sel,
                            n < n_all ? ", less those the pruned checkpoint lacks" : "");
        else
            st = draw_k(e, k, units, pool, n);
    }
    free(pool), free(units);
    return st;
}

static const struct hp_study_opt opts[] = {{"k", parse_k}, {"samples", parse_samples}};

const struct hp_study_kind_row hp_study_random = {
    .name = "random",
    .units = true,
    .mlp_units = true,
    .opts = opts,
    .n_opts = 2,
    .required = "k",
    .example = "random: {k: [2, 4], samples: 5}",
    .defaults = defaults,
    .clear = clear,
    .count_jobs = count_jobs,
    .expand = expand,
    .many_key = "samples",
};
