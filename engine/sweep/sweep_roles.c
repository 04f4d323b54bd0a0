/*
 * sweep_roles.c -- the sweep's roles procedure (HP_STUDY_RUN_ROLES): every
 * head's roles (roles.c) on the plan's model and data, one unmasked pass,
 * found in the store by their content address or computed once and stored,
 * then linked to the sweep.
 *
 * Must not: print; know SQL.
 */
#include <stdio.h>

#include "roles.h" // HP_ROLES_PROBE_SEED, hp_roles_probe_size
#include "sweep_priv.h"
#include "util.h"

/*
 * A roles study: every head's roles on the plan's model and data (unmasked,
 * whatever the plan's ablation), found in the store by their content address
 * (a variant's, with the mask text marked "roles:" and the probe's size and
 * seed, which no mask spec starts with) or computed once and stored, then
 * linked to the sweep.
 */
static enum hp_status run(struct sw_ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    (void)ord; /* roles are no job of the sweep's */
    const struct hp_study *s = &c->plan->studies[si];
    struct hp_roles_opts ro = {.probe_seqs = s->roles.probe_seqs, .probe_len = s->roles.probe_len,
                               .progress = sw_on_evaluator_progress, .user = c};
    struct hp_error why;
    if (hp_roles_probe_size(c->info, &ro, &ro.probe_seqs, &ro.probe_len, &why) != HP_OK) /* expansion checked it */
        return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s': %s", c->plan->path, s->line, s->name, why.msg);
    int32_t sep;
    enum hp_status st = hp_roles_sep_id(c->model, &sep, err);
    if (st != HP_OK)
        return st;
    /* the [SEP] id is part of what was computed: a model with one is scored (and stored) apart from the roles
     * stored before sep_token was */
    char marked[96], key[HP_DIGEST_HEX], sep_part[24] = "";
    if (sep >= 0)
        snprintf(sep_part, sizeof sep_part, ":sep%d", (int)sep);
    snprintf(marked, sizeof marked, "roles:%dx2x%d:%llx%s", ro.probe_seqs, ro.probe_len,
             (unsigned long long)HP_ROLES_PROBE_SEED, sep_part);
    hp_digest_job(c->model_digest, c->data_digest, HP_ABLATE_ZERO, marked, key);
    bool found = false;
    st = hp_store_has_roles(c->store, key, &found, err);
    if (st == HP_OK && found) {
        if (sw_key_seen(c, key))
            c->sum->n_repeated++;
        else
            c->sum->n_cached++;
    } else if (st == HP_OK) {
        sw_adapt_threads(c);
        struct hp_roles *r = NULL;
        double t = hp_now();
        st = hp_roles_compute(c->model, c->data, &ro, &r, err);
        double secs = hp_now() - t;
        sw_work_timed(c, SW_PASS, 1, secs);
        struct hp_store_roles sr = {key, c->model_digest, c->data_digest, r};
        if (st == HP_OK)
            st = hp_store_put_roles(c->store, &sr, secs, c->threads, hp_runtime_kernel(), err);
        if (st == HP_OK) {
            c->sum->n_run++;
            sw_key_add(c, key);
        }
        hp_roles_free(r);
    }
    if (st == HP_OK)
        st = hp_store_link_roles(c->store, c->sweep_id, s->name, key, err);
    struct hp_job job = {.study = si, .layer = -1, .unit = -1, .unit2 = -1};
    if (st == HP_OK)
        sw_job_done(c, &job, SW_PASS);
    return st;
}

const struct sw_proc sw_proc_roles = {.run = run, .before_jobs = false};
