/*
 * sweep_jobs.c -- running jobs and gradients into the store, for the sweep
 * (sweep.c) and every procedure (sweep_<procedure>.c): the windows of jobs
 * evaluated together, each result found by its content address or computed
 * and stored, linked to the sweep; the gradient at a mask, likewise; the
 * keys this run stored (a result found among them is a repeat within the
 * plan, not an earlier run's); progress; threads matched to idle CPUs.
 *
 * Invariant: a window's jobs are evaluated together whenever any of them is
 * not finished, so every result's float rounding is a function of the plan
 * alone and a resumed sweep writes the same bits as an uninterrupted one.
 * Must not: print; know SQL (the store does that); call sweep.c or a
 * procedure (calls go sweep.c -> procedures -> here: sweep_priv.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gates.h"   // hp_gates_mask_text: a job's mask text
#include "job.h"     // the key prefixes that give a gradient its own address
#include "study/study.h" // hp_study_run_of: progress names a procedure's step
#include "sweep_priv.h"
#include "util.h"

// --- the keys this run stored (an open-addressing set; keys are digests, so their digits hash well) ----------

static size_t key_slot(const struct sw_ctx *c, const char *key)
{
    size_t h = 0;
    for (int k = 0; k < 16 && key[k]; k++)
        h = h * 16 + (size_t)(key[k] <= '9' ? key[k] - '0' : (key[k] | 0x20) - 'a' + 10);
    size_t i = h & (c->put_cap - 1);
    while (c->put[i][0] && strcmp(c->put[i], key) != 0)
        i = (i + 1) & (c->put_cap - 1);
    return i;
}

bool sw_key_seen(const struct sw_ctx *c, const char *key)
{
    return c->put_cap && c->put[key_slot(c, key)][0];
}

/* Remember a stored key; false when out of memory (the count is then only less precise). */
bool sw_key_add(struct sw_ctx *c, const char *key)
{
    if (2 * (c->put_n + 1) > c->put_cap) {
        size_t cap = c->put_cap ? 2 * c->put_cap : 1024;
        char(*old)[HP_DIGEST_HEX] = c->put;
        size_t old_cap = c->put_cap;
        if (!(c->put = calloc(cap, sizeof *c->put))) {
            c->put = old;
            return false;
        }
        c->put_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i][0])
                memcpy(c->put[key_slot(c, old[i])], old[i], HP_DIGEST_HEX);
        free(old);
    }
    size_t i = key_slot(c, key);
    if (!c->put[i][0]) {
        memcpy(c->put[i], key, HP_DIGEST_HEX);
        c->put_n++;
    }
    return true;
}
bool sw_stopping(const struct sw_ctx *c)
{
    return c->o->stop && *c->o->stop;
}

/* The plan's metric as damage: its value signed so that larger = worse. */
double sw_damage(const struct sw_ctx *c, const struct hp_store_metrics *m)
{
    const double v = m->value[c->metric];
    return hp_metric_sign(c->metric) > 0 ? v : -v;
}

static void to_store_metrics(const struct hp_metrics *mt, struct hp_store_metrics *m)
{
    for (int k = 0; k < HP_N_METRICS; k++)
        m->value[k] = mt->has[k] ? mt->value[k] : NAN;
}

/* The unmasked model's loss and accuracy: data made for another model shows in them. */
static void note_unmasked(struct sw_ctx *c, double loss, double acc)
{
    if (isnan(loss))
        return;
    c->sum->base_loss = loss;
    c->sum->base_acc = acc;
    c->sum->foreign = hp_evaluator_looks_foreign(c->ev, loss, acc);
}

/* What this run did of every kind, and the seconds it took. */
static void work_done(const struct sw_tally work[SW_N_WORK], int64_t *measured, double *seconds)
{
    *measured = 0, *seconds = 0;
    for (int w = 0; w < SW_N_WORK; w++)
        *measured += work[w].measured, *seconds += work[w].seconds;
}

double sw_eta(const struct sw_tally work[SW_N_WORK])
{
    int64_t measured;
    double seconds;
    work_done(work, &measured, &seconds);
    if (measured == 0)
        return NAN;
    double eta = 0;
    for (int w = 0; w < SW_N_WORK; w++) {
        const int64_t left = work[w].total - work[w].done;
        if (left > 0)
            eta += (double)left * (work[w].measured > 0 ? work[w].seconds / (double)work[w].measured
                                                        : seconds / (double)measured);
    }
    return eta;
}

void sw_work_timed(struct sw_ctx *c, enum sw_work w, int64_t n, double seconds)
{
    c->work[w].measured += n;
    c->work[w].seconds += seconds;
}

/* The progress callback, the study at work named by label. */
static void report_progress(struct sw_ctx *c, const char *label, enum sw_work w)
{
    static const char *const unit[SW_N_WORK] = {"jobs", "gradient passes", "training steps", "roles passes"};
    int64_t measured;
    double seconds;
    work_done(c->work, &measured, &seconds);
    const struct sw_tally *now = &c->work[w];
    struct hp_sweep_progress p = {.done = c->done,
                                  .total = c->total,
                                  .cached = c->sum->n_cached + c->sum->n_repeated,
                                  .label = label,
                                  .elapsed = hp_now() - c->t0,
                                  .evaluated = measured,
                                  .eval_seconds = seconds,
                                  .eta = sw_eta(c->work),
                                  .rate = now->seconds > 0 ? (double)now->measured / now->seconds : 0,
                                  .unit = unit[w]};
    c->o->progress(c->o->user, &p);
}

void sw_job_done(struct sw_ctx *c, const struct hp_job *job, enum sw_work w)
{
    c->done++;
    if (c->done > c->total) /* the plan's estimate of an iterative study is an upper bound; be safe */
        c->total = c->done;
    c->work[w].done++;
    c->at_work = w;
    if (!c->o->progress)
        return;
    /* results arrive a window at a time: name the study (and step) at work, not one job */
    char label[192];
    const struct hp_study *s = &c->plan->studies[job->study];
    if (hp_study_run_of(s->kind) == HP_STUDY_RUN_ITERATIVE)
        snprintf(label, sizeof label, "%s, step %d%s", s->name, job->step, job->k < 0 ? " (gradient)" : "");
    else if (hp_study_run_of(s->kind) == HP_STUDY_RUN_GATES)
        snprintf(label, sizeof label, "%s, %s", s->name, job->label);
    else
        snprintf(label, sizeof label, "%s", s->name);
    report_progress(c, label, w);
}

void sw_sweep_done(struct sw_ctx *c)
{
    if (c->done == c->total || !c->o->progress)
        return;
    c->total = c->done; /* an iterative study that stopped early did fewer steps than the plan's estimate */
    report_progress(c, "done", c->at_work);
}
// --- threads matched to idle CPUs ----------------------------------------------------

static void set_threads(struct sw_ctx *c, int n)
{
    if (n != c->threads)
        hp_runtime_init(n);
    c->threads = n;
    if (c->sum->threads_min == 0 || n < c->sum->threads_min)
        c->sum->threads_min = n;
    if (n > c->sum->threads_max)
        c->sum->threads_max = n;
}

/* With automatic threads, as many as other processes left CPUs idle since the last reading. */
void sw_adapt_threads(struct sw_ctx *c)
{
    int n = c->auto_threads ? hp_auto_threads_next(&c->load) : 0;
    if (n > 0)
        set_threads(c, n);
}

void sw_on_evaluator_progress(void *user, int done, int total)
{
    (void)done, (void)total;
    sw_adapt_threads(user);
}

/* The first choice: measured over the sweep's start (opening the model and data); when that was too
 * short to tell, every CPU, until the first quarter second of evaluation says otherwise. */
void sw_start_threads(struct sw_ctx *c)
{
    set_threads(c, c->auto_threads ? hp_auto_threads_first(&c->load) : c->o->threads);
}
/*
 * The mask a job's variant is: its own, or where it names heads the checkpoint lacks (a gates study's
 * held-closed heads, an explicit set naming one) a copy without them in *own (hp_mask_drop_absent: the rule
 * every count of heads follows), so that its text, key and n_ablated count only heads the model has. NULL: out
 * of memory.
 */
static const struct hp_mask *settled_mask(const struct sw_ctx *c, const struct hp_mask *m, struct hp_mask **own)
{
    *own = NULL;
    const size_t n = (size_t)m->n_layers * m->n_heads;
    bool names_absent = false;
    for (size_t i = 0; c->info->pruned && i < n && !names_absent; i++)
        names_absent = c->info->pruned[i] && m->gate[i] != 1.0f;
    if (!names_absent)
        return m;
    if (!(*own = hp_mask_new(m->n_layers, m->n_heads)) || !hp_mask_copy(*own, m)) {
        hp_mask_free(*own);
        return *own = NULL;
    }
    hp_mask_drop_absent(*own, c->info);
    return *own;
}

/*
 * Evaluate n jobs (or find them finished) and record them in the sweep, in
 * windows of batch consecutive jobs: a window's finished jobs are linked at
 * once; if any is not finished, the whole window is evaluated together and
 * each new result written in its own transaction. Evaluating whole windows
 * makes every result's float rounding (which depends on which variants share
 * a pass) a function of the plan alone, so a resumed sweep writes the same
 * bits as an uninterrupted one. ords[i] is job i's place in the sweep; res
 * (NULL or (n)) receives the metrics. Stops between windows when asked to.
 */
enum hp_status sw_run_jobs(struct sw_ctx *c, const int64_t *ords, const struct hp_job *jobs, int n,
                               const char *kind, struct hp_store_metrics *res, struct hp_error *err)
{
    const int batch = c->o->batch > 0 ? c->o->batch : HP_SWEEP_BATCH;
    struct hp_store_job *sj = calloc((size_t)batch, sizeof *sj);
    char(*keys)[HP_DIGEST_HEX] = calloc((size_t)batch, sizeof *keys);
    bool *found = calloc((size_t)batch, sizeof *found);
    const struct hp_mask **masks = calloc((size_t)batch, sizeof *masks);
    struct hp_metrics **mts = calloc((size_t)batch, sizeof *mts);
    struct hp_store_metrics *lm = calloc((size_t)batch, sizeof *lm); /* what the database holds of found jobs */
    struct hp_mask **own = calloc((size_t)batch, sizeof *own);      /* settled_mask's copies */
    enum hp_status st = sj && keys && found && masks && mts && lm && own ? HP_OK
                                                                        : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int w0 = 0; w0 < n && st == HP_OK && !sw_stopping(c); w0 += batch) {
        const int nw = n - w0 < batch ? n - w0 : batch;
        int n_new = 0;
        for (int i = 0; i < nw && st == HP_OK; i++) {
            const struct hp_job *job = &jobs[w0 + i];
            const struct hp_mask *mask = settled_mask(c, job->mask, &own[i]);
            /* hp_mask_format's text, but marked with the gates where some are fractional (gates studies) */
            char *mask_text = mask ? hp_gates_mask_text(mask) : NULL;
            if (!mask_text) {
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                break;
            }
            /* a computation other than the mask's plain evaluation gets its own address, marked by a prefix no
             * mask spec starts with: a gradient pass's evaluation (sw_gradient_at's is HP_KEY_GRAD), or a patch
             * at one position */
            char mark[32] = "";
            if (job->grad_pass)
                snprintf(mark, sizeof mark, HP_KEY_GRAD_PASS);
            else if (mask->pos >= 0)
                snprintf(mark, sizeof mark, HP_KEY_POS "%d|", mask->pos);
            char *marked = malloc(strlen(mask_text) + sizeof mark);
            if (!marked) {
                free(mask_text);
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                break;
            }
            sprintf(marked, "%s%s", mark, mask_text);
            hp_digest_job(c->model_digest, c->data_digest, c->plan->ablation, marked, keys[i]);
            free(marked);
            const struct hp_study *sd = &c->plan->studies[job->study];
            sj[i] = (struct hp_store_job){
                .sweep_id = c->sweep_id,
                .ord = ords[w0 + i],
                .study = sd->name,
                .kind = kind ? kind : hp_study_kind_name(sd->kind),
                .kv = sd->unit,
                .label = job->label,
                .layer = job->layer,
                .unit = job->unit,
                .unit2 = job->unit2,
                .step = job->step,
                .sample = job->sample,
                .k = job->k,
                .key = keys[i],
                .ablation = hp_ablation_name(c->plan->ablation),
                .mask_text = mask_text,
                .n_layers = mask->n_layers,
                .n_heads = mask->n_heads,
                .gate = mask->gate,
                .model_digest = c->model_digest,
                .data_digest = c->data_digest,
                .one_position = mask->pos >= 0,
                .position = mask->pos >= 0 ? mask->pos : 0,
            };
            masks[i] = mask;
            st = hp_store_lookup(c->store, keys[i], &found[i], &lm[i], err);
            if (st == HP_OK && found[i] && res)
                res[w0 + i] = lm[i];
            n_new += st == HP_OK && !found[i];
        }
        if (n_new > 0)
            sw_adapt_threads(c);
        double t = hp_now();
        if (st == HP_OK && n_new > 0 && jobs[w0].grad_pass) /* alone in its window (sweep_iterative.c) */
            st = hp_evaluator_grad_pass_metrics(c->ev, masks[0], c->plan->ablation, &mts[0], err);
        else if (st == HP_OK && n_new > 0) /* each mask says where (its pos: sweep_patching.c's) */
            st = hp_evaluator_run_many(c->ev, masks, nw, c->plan->ablation, mts, err);
        /* the window's evaluations, counted at once: they finished together. A gradient-ranked curve's point
         * (grad_pass) is an evaluation of the plan's count whose metrics its gradient pass kept: its backward is
         * timed where it ran (sw_gradient_at), and handing the metrics out is not evaluation work to time */
        if (n_new > 0 && !jobs[w0].grad_pass)
            sw_work_timed(c, SW_EVAL, n_new, hp_now() - t);
        double secs = (hp_now() - t) / nw; /* each result's time: its share of the window's */
        for (int i = 0; i < nw && st == HP_OK; i++) {
            const bool seen = sw_key_seen(c, keys[i]); /* stored by this run: a repeat within the plan */
            if (found[i] || seen) {
                /* found before the window, or stored from an earlier job of this window */
                st = hp_store_link(c->store, &sj[i], err);
                if (!found[i] && res)
                    to_store_metrics(mts[i], &res[w0 + i]);
                if (seen)
                    c->sum->n_repeated++;
                else
                    c->sum->n_cached++;
            } else {
                st = hp_store_put(c->store, &sj[i], mts[i], secs, c->threads, hp_runtime_kernel(), err);
                if (res)
                    to_store_metrics(mts[i], &res[w0 + i]);
                c->sum->n_run++;
                sw_key_add(c, keys[i]);
            }
            if (st == HP_OK && hp_mask_first_changed(masks[i], c->info->n_layers) == c->info->n_layers)
                note_unmasked(c, found[i] ? lm[i].value[HP_METRIC_LOSS] : mts[i]->has_loss ? mts[i]->loss : NAN,
                              found[i] ? lm[i].value[HP_METRIC_ACC] : mts[i]->has_loss ? mts[i]->acc : NAN);
            if (st == HP_OK)
                sw_job_done(c, &jobs[w0 + i], SW_EVAL);
        }
        for (int i = 0; i < nw; i++) {
            free((char *)sj[i].mask_text);
            sj[i].mask_text = NULL;
            hp_metrics_free(mts[i]);
            mts[i] = NULL;
            hp_mask_free(own[i]);
            own[i] = NULL;
        }
    }
    free(sj), free(keys), free(found), free(masks), free(mts), free(lm), free(own);
    return st;
}
// --- gradients ---------------------------------------------------------------------

bool sw_grad_buf_init(struct sw_grad_buf *b, const struct sw_ctx *c, bool mlps)
{
    const size_t hh = (size_t)c->info->n_layers * c->info->n_heads;
    memset(b, 0, sizeof *b);
    b->g = (struct hp_store_grad){.key = b->key, .model_digest = c->model_digest, .data_digest = c->data_digest,
                                  .ablation = hp_ablation_name(c->plan->ablation), .n_layers = c->info->n_layers,
                                  .n_heads = c->info->n_heads, .n_seqs = c->data->n_seqs};
    b->g.grad = malloc(hh * sizeof(double));
    b->g.atp = malloc(hh * sizeof(double));
    b->g.seq_grad = malloc(hh * (size_t)c->data->n_seqs * sizeof(double));
    if (mlps) {
        const size_t L = (size_t)c->info->n_layers;
        b->g.mlp_grad = malloc(L * sizeof(double));
        b->g.mlp_atp = malloc(L * sizeof(double));
        b->g.mlp_seq_grad = malloc(L * (size_t)c->data->n_seqs * sizeof(double));
    }
    return b->g.grad && b->g.atp && b->g.seq_grad &&
           (!mlps || (b->g.mlp_grad && b->g.mlp_atp && b->g.mlp_seq_grad));
}

void sw_grad_buf_free(struct sw_grad_buf *b)
{
    free(b->g.grad), free(b->g.atp), free(b->g.seq_grad);
    free(b->g.mlp_grad), free(b->g.mlp_atp), free(b->g.mlp_seq_grad);
}

/*
 * The gradient of the loss at mask's gates (and its per-sequence shares and
 * estimates) into b: found in the store by its content address, or one
 * forward and one backward over the held-out set, then stored. The address is
 * a variant's with the mask text marked "grad:", which no mask spec starts
 * with. job names the study (and step) for progress.
 */
enum hp_status sw_gradient_at(struct sw_ctx *c, const struct hp_mask *mask, struct sw_grad_buf *b,
                                  const struct hp_job *job, struct hp_error *err)
{
    return sw_gradient_from(c, mask, 0, b, job, err);
}

enum hp_status sw_gradient_from(struct sw_ctx *c, const struct hp_mask *mask, int from, struct sw_grad_buf *b,
                                const struct hp_job *job, struct hp_error *err)
{
    /* the loss's gradient keeps the address it always had; another metric's is marked with its name ('|' is in
     * no mask text) */
    const enum hp_metric gm = hp_metric_grad_of(c->metric);
    const char *mname = gm == HP_METRIC_LOSS ? "" : hp_metric_name(gm), *bar = gm == HP_METRIC_LOSS ? "" : "|";
    /* fractional gates (integrated gradients' path) are part of the address: hp_gates_mask_text writes them */
    char *text = hp_gates_mask_text(mask),
         *marked = text ? malloc(strlen(text) + sizeof HP_KEY_GRAD + strlen(mname) + 32) : NULL;
    if (!marked) {
        free(text);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    /* a gradient of the gates from a layer on is marked so ("from" starts no metric's name) */
    char part[24] = "";
    if (from > 0)
        snprintf(part, sizeof part, HP_KEY_GRAD_FROM "%d|", from);
    sprintf(marked, HP_KEY_GRAD "%s%s%s%s", part, mname, bar, text);
    hp_digest_job(c->model_digest, c->data_digest, c->plan->ablation, marked, b->key);
    free(marked);
    b->g.mask_text = text;
    b->g.from_layer = from;
    bool found = false;
    enum hp_status st = hp_store_get_grad(c->store, &b->g, &found, err);
    if (st == HP_OK && found) {
        /* importance, attribution and a gradient-ranked curve's first step share the unmasked model's */
        if (sw_key_seen(c, b->key))
            c->sum->n_repeated++;
        else
            c->sum->n_cached++;
    } else if (st == HP_OK) {
        sw_adapt_threads(c);
        double t = hp_now();
        const struct hp_grad_out out = {.grad = b->g.grad,
                                        .atp = b->g.atp,
                                        .seq_grad = b->g.seq_grad,
                                        .mlp_grad = b->g.mlp_grad,
                                        .mlp_atp = b->g.mlp_atp,
                                        .mlp_seq_grad = b->g.mlp_seq_grad};
        st = hp_evaluator_grad_units(c->ev, gm, mask, c->plan->ablation, from, &out, &b->g.loss, err);
        double secs = hp_now() - t;
        sw_work_timed(c, SW_BACKWARD, 1, secs);
        if (st == HP_OK)
            st = hp_store_put_grad(c->store, &b->g, secs, c->threads, hp_runtime_kernel(), err);
        if (st == HP_OK) {
            c->sum->n_run++;
            sw_key_add(c, b->key);
        }
    }
    free(text);
    b->g.mask_text = NULL;
    if (st == HP_OK)
        sw_job_done(c, job, SW_BACKWARD);
    return st;
}


bool sw_selected(int n, const int *list, int v)
{
    if (n == 0)
        return true;
    for (int i = 0; i < n; i++)
        if (list[i] == v)
            return true;
    return false;
}
