/*
 * sweep.c -- run a plan's jobs into the results database.
 *
 * Owns scheduling: deterministic job order, sharding (ord % N == I), skipping
 * jobs whose content address is already finished in the store, and the
 * iterative pruning procedure, whose jobs depend on earlier results, and the
 * gradient studies (importance, attribution, gradient-ranked curves), whose
 * gradients are content-addressed results of their own, and the gates
 * studies, whose training runs (gates.c) are saved as they go. Which of
 * these procedures a study runs is its kind's (hp_study_run_of, from the
 * kind's row in engine/study/): the sweep names procedures, not kinds
 * (but that run_scores tells importance from attribution).
 * Invariant: the same plan, data and threads give the same results whether
 * the sweep ran at once or was resumed after kills, because every job is
 * evaluated alone from the same inputs and iterative choices depend only on
 * stored or recomputed (identical) numbers.
 * Must not: print; know SQL (the store does that).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpuload_int.h"
#include "gates_int.h"
#include "hash_int.h"
#include "job_int.h" // the job kinds and key prefixes the queries read back
#include "study/study.h" // hp_study_run_of: the procedure each study kind runs
#include "roles_int.h"
#include "store_int.h"
#include "util_int.h"

struct ctx {
    const struct hp_plan *plan;
    enum hp_metric metric; /* plan->metric, resolved against the model */
    const struct hp_sweep_opts *o;
    struct hp_sweep_summary *sum;
    struct hp_model *model;
    const struct hp_model_info *info;
    struct hp_data *data;
    struct hp_evaluator *ev;
    struct hp_data *train;         /* NULL, or the gates studies' training set */
    struct hp_evaluator *train_ev; /* ... and its evaluator */
    struct hp_store *store;
    char model_digest[HP_DIGEST_HEX], data_digest[HP_DIGEST_HEX], plan_digest[HP_DIGEST_HEX];
    int64_t sweep_id;
    int64_t total, done; /* total: the plan's estimate for this shard, iterative evaluations included */
    double t0;
    double eval_seconds; /* spent evaluating windows, the measure of the rate */
    int64_t evaluated;   /* jobs those windows evaluated */
    /* threads: fixed (o->threads > 0), or matched to the idle CPUs between windows */
    bool auto_threads;
    int threads;
    struct hp_auto_threads load; /* with auto_threads: the load other processes make */
    /* keys this run stored: a job found among them repeats one of this plan, rather than an earlier run's */
    char (*put)[HP_DIGEST_HEX];
    size_t put_cap, put_n;
};

// --- the keys this run stored (an open-addressing set; keys are digests, so their digits hash well) ----------

static size_t key_slot(const struct ctx *c, const char *key)
{
    size_t h = 0;
    for (int k = 0; k < 16 && key[k]; k++)
        h = h * 16 + (size_t)(key[k] <= '9' ? key[k] - '0' : (key[k] | 0x20) - 'a' + 10);
    size_t i = h & (c->put_cap - 1);
    while (c->put[i][0] && strcmp(c->put[i], key) != 0)
        i = (i + 1) & (c->put_cap - 1);
    return i;
}

static bool key_seen(const struct ctx *c, const char *key)
{
    return c->put_cap && c->put[key_slot(c, key)][0];
}

/* Remember a stored key; false when out of memory (the count is then only less precise). */
static bool key_add(struct ctx *c, const char *key)
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

static bool stopping(const struct ctx *c)
{
    return c->o->stop && *c->o->stop;
}

/* The plan's metric as damage: its value signed so that larger = worse. */
static double damage(const struct ctx *c, const struct hp_store_metrics *m)
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
static void note_unmasked(struct ctx *c, double loss, double acc)
{
    if (isnan(loss))
        return;
    c->sum->base_loss = loss;
    c->sum->base_acc = acc;
    c->sum->foreign = hp_evaluator_looks_foreign(c->ev, loss, acc);
}

static void job_done(struct ctx *c, const struct hp_job *job)
{
    c->done++;
    if (c->done > c->total) /* the plan's estimate of an iterative study is an upper bound; be safe */
        c->total = c->done;
    if (c->o->progress) {
        /* results arrive a window at a time: name the study (and step) at work, not one job */
        char label[192];
        const struct hp_study *s = &c->plan->studies[job->study];
        if (hp_study_run_of(s->kind) == HP_STUDY_RUN_ITERATIVE)
            snprintf(label, sizeof label, "%s, step %d%s", s->name, job->step, job->k < 0 ? " (gradient)" : "");
        else if (hp_study_run_of(s->kind) == HP_STUDY_RUN_GATES)
            snprintf(label, sizeof label, "%s, %s", s->name, job->label);
        else
            snprintf(label, sizeof label, "%s", s->name);
        struct hp_sweep_progress p = {c->done,
                                      c->total,
                                      c->sum->n_cached + c->sum->n_repeated,
                                      label,
                                      hp_now() - c->t0,
                                      c->evaluated,
                                      c->eval_seconds};
        c->o->progress(c->o->user, &p);
    }
}

// --- threads matched to idle CPUs ----------------------------------------------------

static void set_threads(struct ctx *c, int n)
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
static void adapt_threads(struct ctx *c)
{
    int n = c->auto_threads ? hp_auto_threads_next(&c->load) : 0;
    if (n > 0)
        set_threads(c, n);
}

static void on_evaluator_progress(void *user, int done, int total)
{
    (void)done, (void)total;
    adapt_threads(user);
}

/* The first choice: measured over the sweep's start (opening the model and data); when that was too
 * short to tell, every CPU, until the first quarter second of evaluation says otherwise. */
static void start_threads(struct ctx *c)
{
    set_threads(c, c->auto_threads ? hp_auto_threads_first(&c->load) : c->o->threads);
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
/*
 * The mask a job's variant is: its own, or where it names heads the checkpoint lacks (a gates study's
 * held-closed heads, an explicit set naming one) a copy without them in *own (hp_mask_drop_absent: the rule
 * every count of heads follows), so that its text, key and n_ablated count only heads the model has. NULL: out
 * of memory.
 */
static const struct hp_mask *settled_mask(const struct ctx *c, const struct hp_mask *m, struct hp_mask **own)
{
    *own = NULL;
    const size_t n = (size_t)m->n_layers * m->n_heads;
    bool names_absent = false;
    for (size_t i = 0; c->info->pruned && i < n && !names_absent; i++)
        names_absent = c->info->pruned[i] && m->gate[i] != 1.0f;
    if (!names_absent)
        return m;
    if (!(*own = hp_mask_new(m->n_layers, m->n_heads)))
        return NULL;
    memcpy((*own)->gate, m->gate, n * sizeof *m->gate);
    hp_mask_drop_absent(*own, c->info);
    return *own;
}

static enum hp_status run_jobs(struct ctx *c, const int64_t *ords, const struct hp_job *jobs, int n,
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
    for (int w0 = 0; w0 < n && st == HP_OK && !stopping(c); w0 += batch) {
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
            if (job->grad_pass) { /* its own address: HP_KEY_GRAD_PASS starts no mask spec (gradient_at's: HP_KEY_GRAD) */
                char *marked = malloc(strlen(mask_text) + sizeof HP_KEY_GRAD_PASS);
                if (!marked) {
                    free(mask_text);
                    st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                    break;
                }
                sprintf(marked, HP_KEY_GRAD_PASS "%s", mask_text);
                hp_digest_job(c->model_digest, c->data_digest, c->plan->ablation, marked, keys[i]);
                free(marked);
            } else {
                hp_digest_job(c->model_digest, c->data_digest, c->plan->ablation, mask_text, keys[i]);
            }
            const struct hp_study *sd = &c->plan->studies[job->study];
            sj[i] = (struct hp_store_job){
                .sweep_id = c->sweep_id,
                .ord = ords[w0 + i],
                .study = sd->name,
                .kind = kind ? kind : hp_study_kind_name(sd->kind),
                .kv = sd->kv,
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
            };
            masks[i] = mask;
            st = hp_store_lookup(c->store, keys[i], &found[i], &lm[i], err);
            if (st == HP_OK && found[i] && res)
                res[w0 + i] = lm[i];
            n_new += st == HP_OK && !found[i];
        }
        if (n_new > 0)
            adapt_threads(c);
        double t = hp_now();
        if (st == HP_OK && n_new > 0 && jobs[w0].grad_pass) /* alone in its window (run_iterative) */
            st = hp_evaluator_grad_pass_metrics(c->ev, masks[0], c->plan->ablation, &mts[0], err);
        else if (st == HP_OK && n_new > 0)
            st = hp_evaluator_run_many(c->ev, masks, nw, c->plan->ablation, mts, err);
        if (n_new > 0) { /* the window's evaluations, counted at once: they finished together */
            c->eval_seconds += hp_now() - t;
            c->evaluated += n_new;
        }
        double secs = (hp_now() - t) / nw; /* each result's time: its share of the window's */
        for (int i = 0; i < nw && st == HP_OK; i++) {
            const bool seen = key_seen(c, keys[i]); /* stored by this run: a repeat within the plan */
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
                key_add(c, keys[i]);
            }
            if (st == HP_OK && hp_mask_first_changed(masks[i], c->info->n_layers) == c->info->n_layers)
                note_unmasked(c, found[i] ? lm[i].value[HP_METRIC_LOSS] : mts[i]->has_loss ? mts[i]->loss : NAN,
                              found[i] ? lm[i].value[HP_METRIC_ACC] : mts[i]->has_loss ? mts[i]->acc : NAN);
            if (st == HP_OK)
                job_done(c, &jobs[w0 + i]);
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

/* A gradient's arrays for the model and data, (n_layers, n_heads) and (n_seqs, n_layers, n_heads). */
struct grad_buf {
    struct hp_store_grad g;
    char key[HP_DIGEST_HEX];
};

static bool grad_buf_init(struct grad_buf *b, const struct ctx *c)
{
    const size_t hh = (size_t)c->info->n_layers * c->info->n_heads;
    memset(b, 0, sizeof *b);
    b->g = (struct hp_store_grad){.key = b->key, .model_digest = c->model_digest, .data_digest = c->data_digest,
                                  .ablation = hp_ablation_name(c->plan->ablation), .n_layers = c->info->n_layers,
                                  .n_heads = c->info->n_heads, .n_seqs = c->data->n_seqs};
    b->g.grad = malloc(hh * sizeof(double));
    b->g.atp = malloc(hh * sizeof(double));
    b->g.seq_grad = malloc(hh * (size_t)c->data->n_seqs * sizeof(double));
    return b->g.grad && b->g.atp && b->g.seq_grad;
}

static void grad_buf_free(struct grad_buf *b)
{
    free(b->g.grad), free(b->g.atp), free(b->g.seq_grad);
}

/*
 * The gradient of the loss at mask's gates (and its per-sequence shares and
 * estimates) into b: found in the store by its content address, or one
 * forward and one backward over the held-out set, then stored. The address is
 * a variant's with the mask text marked "grad:", which no mask spec starts
 * with. job names the study (and step) for progress.
 */
static enum hp_status gradient_at(struct ctx *c, const struct hp_mask *mask, struct grad_buf *b,
                                  const struct hp_job *job, struct hp_error *err)
{
    char *text = hp_mask_format(mask), *marked = text ? malloc(strlen(text) + sizeof HP_KEY_GRAD) : NULL;
    if (!marked) {
        free(text);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    sprintf(marked, HP_KEY_GRAD "%s", text);
    hp_digest_job(c->model_digest, c->data_digest, c->plan->ablation, marked, b->key);
    free(marked);
    b->g.mask_text = text;
    bool found = false;
    enum hp_status st = hp_store_get_grad(c->store, &b->g, &found, err);
    if (st == HP_OK && found) {
        /* importance, attribution and a gradient-ranked curve's first step share the unmasked model's */
        if (key_seen(c, b->key))
            c->sum->n_repeated++;
        else
            c->sum->n_cached++;
    } else if (st == HP_OK) {
        adapt_threads(c);
        double t = hp_now();
        st = hp_evaluator_grad_seq(c->ev, HP_METRIC_LOSS, mask, c->plan->ablation, b->g.grad, b->g.atp, b->g.seq_grad, &b->g.loss,
                                   err);
        double secs = hp_now() - t;
        if (st == HP_OK)
            st = hp_store_put_grad(c->store, &b->g, secs, c->threads, hp_runtime_kernel(), err);
        if (st == HP_OK) {
            c->sum->n_run++;
            key_add(c, b->key);
        }
    }
    free(text);
    b->g.mask_text = NULL;
    if (st == HP_OK)
        job_done(c, job);
    return st;
}

/*
 * The units an importance or attribution study covers, with their scores,
 * as store rows (labels in labels, (n_units) of 32 bytes); returns how many.
 */
static int score_rows(const struct ctx *c, const struct hp_study *s, const double *score, const double *raw,
                      struct hp_store_score *rows, char (*labels)[32]);

static bool selected(int n, const int *list, int v);

/* An importance or attribution study: one gradient at the unmasked model, every unit's score from it. */
static enum hp_status run_scores(struct ctx *c, int si, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    const struct hp_model_info *in = c->info;
    const size_t nu = (size_t)in->n_layers * hp_unit_count(in, s->kv);
    struct grad_buf b;
    struct hp_mask *all = hp_mask_new(in->n_layers, in->n_heads);
    double *raw = malloc(nu * sizeof *raw), *score = malloc(nu * sizeof *score);
    struct hp_store_score *rows = malloc(nu * sizeof *rows);
    char(*labels)[32] = malloc(nu * sizeof *labels);
    enum hp_status st = grad_buf_init(&b, c) && all && raw && score && rows && labels
                            ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    struct hp_job job = {.study = si, .layer = -1, .unit = -1, .unit2 = -1, .mask = all};
    if (st == HP_OK)
        st = gradient_at(c, all, &b, &job, err);
    if (st == HP_OK) {
        if (s->kind == HP_STUDY_IMPORTANCE) {
            hp_importance(b.g.seq_grad, b.g.n_seqs, in, s->kv, s->normalize, raw, score);
        } else {
            hp_attribution(b.g.atp, in, s->kv, raw);
            memcpy(score, raw, nu * sizeof *raw);
        }
        int n = score_rows(c, s, score, raw, rows, labels);
        st = hp_store_put_scores(c->store, c->sweep_id, s->name, hp_study_kind_name(s->kind), s->kv, 0,
                                 s->kind == HP_STUDY_IMPORTANCE ? hp_normalize_name(s->normalize) : NULL, b.key, rows,
                                 n, err);
    }
    grad_buf_free(&b);
    hp_mask_free(all);
    free(raw), free(score), free(rows), free(labels);
    return st;
}

static int score_rows(const struct ctx *c, const struct hp_study *s, const double *score, const double *raw,
                      struct hp_store_score *rows, char (*labels)[32])
{
    const int U = hp_unit_count(c->info, s->kv);
    int n = 0;
    for (int l = 0; l < c->info->n_layers; l++)
        for (int u = 0; u < U; u++)
            if (selected(s->n_layers_sel, s->layers, l) && selected(s->n_units_sel, s->units, u) &&
                !hp_unit_pruned(c->info, s->kv, l, u)) {
                hp_unit_label(labels[n], sizeof labels[n], s->kv, l, u);
                rows[n] = (struct hp_store_score){l, u, labels[n], score[l * U + u], raw[l * U + u]};
                n++;
            }
    return n;
}

// --- iterative pruning --------------------------------------------------------------

struct unit {
    int layer, unit;
};

static void ablate_unit(const struct ctx *c, const struct hp_study *s, struct hp_mask *m, struct unit u)
{
    hp_mask_set_unit(m, c->info, s->kv, u.layer, u.unit, 0.0f);
}

static bool selected(int n, const int *list, int v)
{
    if (n == 0)
        return true;
    for (int i = 0; i < n; i++)
        if (list[i] == v)
            return true;
    return false;
}

struct scored {
    int idx;
    double score;
};

static int by_score(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score < y->score ? -1 : 1;
    return x->idx - y->idx; /* ties: plan order, so the choice is deterministic */
}

/*
 * One step's pruning: the want lowest-scored candidates cand (nc), in score order, skipping a
 * layer's last unit under keep_one_per_layer, ablated in base and marked in pruned. Returns how many.
 */
static int prune_best(const struct ctx *c, const struct hp_study *s, struct hp_mask *base, const struct unit *units,
                      struct scored *cand, int nc, bool *pruned, int *left_in_layer, int want)
{
    hp_qsort(cand, (size_t)nc, sizeof *cand, by_score);
    int n = 0;
    for (int i = 0; i < nc && n < want; i++) {
        struct unit u = units[cand[i].idx];
        if (s->iterative.keep_one_per_layer && left_in_layer[u.layer] <= 1)
            continue;
        pruned[cand[i].idx] = true;
        left_in_layer[u.layer]--;
        ablate_unit(c, s, base, u);
        n++;
    }
    return n;
}

/*
 * Michel et al.'s pruning curve: score every remaining unit by the damage of
 * ablating it on top of those already pruned (rank: exact), or by its
 * importance recomputed at the current mask from one gradient (rank:
 * gradient, as Hugging Face's bertology script), prune the least damaging
 * (least important) prune_frac of all units, record the curve point, repeat
 * down to the floor. Each point is evaluated exactly either way. A step that
 * prunes every unit left (no floor) ranks nothing: no scores, no gradient.
 */
static enum hp_status run_iterative(struct ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    const struct hp_model_info *in = c->info;
    int per_layer = hp_unit_count(in, s->kv);
    struct unit *units = malloc(sizeof *units * (size_t)in->n_layers * per_layer);
    bool *pruned = calloc((size_t)in->n_layers * per_layer, sizeof *pruned);
    struct scored *cand = malloc(sizeof *cand * (size_t)in->n_layers * per_layer);
    int *left_in_layer = calloc((size_t)in->n_layers, sizeof *left_in_layer);
    struct hp_mask *base = hp_mask_new(in->n_layers, in->n_heads);
    size_t nu = (size_t)in->n_layers * per_layer;
    struct hp_job *cjobs = malloc(sizeof *cjobs * nu);
    int64_t *cords = malloc(sizeof *cords * nu);
    struct hp_store_metrics *cres = malloc(sizeof *cres * nu);
    const bool by_grad = s->iterative.rank == HP_RANK_GRADIENT;
    struct grad_buf gb = {0};
    double *raw = by_grad ? malloc(sizeof *raw * nu) : NULL, *imp = by_grad ? malloc(sizeof *imp * nu) : NULL;
    struct hp_store_score *rows = by_grad ? malloc(sizeof *rows * nu) : NULL;
    char(*labels)[32] = by_grad ? malloc(sizeof *labels * nu) : NULL;
    if (!units || !pruned || !cand || !left_in_layer || !base || !cjobs || !cords || !cres ||
        (by_grad && (!grad_buf_init(&gb, c) || !raw || !imp || !rows || !labels))) {
        free(units), free(pruned), free(cand), free(left_in_layer), hp_mask_free(base);
        free(cjobs), free(cords), free(cres);
        grad_buf_free(&gb), free(raw), free(imp), free(rows), free(labels);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory");
    }
    int n = 0;
    for (int l = 0; l < in->n_layers; l++)
        for (int u = 0; u < per_layer; u++)
            if (selected(s->n_layers_sel, s->layers, l) && selected(s->n_units_sel, s->units, u) &&
                !hp_unit_pruned(in, s->kv, l, u)) {
                units[n++] = (struct unit){l, u};
                left_in_layer[l]++;
            }
    struct hp_iterative_schedule sc = hp_study_schedule(s, in); /* hp_study_evals counts by it too */
    assert(sc.n_units == n);
    int n_pruned = 0;
    enum hp_status st = HP_OK;

    for (int step = 0; st == HP_OK && !stopping(c); step++) {
        /* the curve point: everything pruned so far */
        struct hp_job point = {.study = si, .step = step, .k = n_pruned, .layer = -1, .unit = -1, .unit2 = -1,
                               .mask = base};
        snprintf(point.label, sizeof point.label, "step %d", step);
        int64_t o_point = (*ord)++;
        int want = hp_iterative_step(&sc, n - n_pruned);
        const bool all = want == n - n_pruned; /* hp_study_evals and hp_study_backwards count the same */
        /* ranked by gradient: the gradient at the current mask, then the point: that pass's metrics (at step 0
         * the unmasked model's, the baseline's bits; past it a result of its own, job.grad_pass) */
        struct hp_job gj = {.study = si, .step = step, .k = -1, .layer = -1, .unit = -1, .unit2 = -1, .mask = base};
        if (by_grad && want > 0 && !all && ((st = gradient_at(c, base, &gb, &gj, err)) != HP_OK || stopping(c)))
            break;
        point.grad_pass = by_grad && want > 0 && !all && n_pruned > 0; /* --plain: its own whole pass */
        st = run_jobs(c, &o_point, &point, 1, NULL, NULL, err);
        if (st != HP_OK || want == 0)
            break;
        if (all) {
            int nc = 0;
            for (int i = 0; i < n; i++)
                if (!pruned[i])
                    cand[nc++] = (struct scored){i, 0};
            n_pruned += prune_best(c, s, base, units, cand, nc, pruned, left_in_layer, want);
            continue;
        }
        if (by_grad) {
            /* rank the candidates by importance at the current mask: its scores stored */
            hp_importance(gb.g.seq_grad, gb.g.n_seqs, in, s->kv, s->normalize, raw, imp);
            int nc = 0;
            for (int i = 0; i < n; i++) {
                if (pruned[i] || (s->iterative.keep_one_per_layer && left_in_layer[units[i].layer] <= 1))
                    continue;
                int at = units[i].layer * per_layer + units[i].unit;
                hp_unit_label(labels[nc], sizeof labels[nc], s->kv, units[i].layer, units[i].unit);
                rows[nc] = (struct hp_store_score){units[i].layer, units[i].unit, labels[nc], imp[at], raw[at]};
                cand[nc++] = (struct scored){i, imp[at]};
            }
            st = hp_store_put_scores(c->store, c->sweep_id, s->name, "iterative", s->kv, step + 1,
                                     hp_normalize_name(s->normalize), gb.key, rows, nc, err);
            if (st != HP_OK || nc == 0)
                break;
            n_pruned += prune_best(c, s, base, units, cand, nc, pruned, left_in_layer, want);
            continue;
        }
        /* score the candidates, together */
        int nc = 0;
        for (int i = 0; i < n && st == HP_OK; i++) {
            if (pruned[i] || (s->iterative.keep_one_per_layer && left_in_layer[units[i].layer] <= 1))
                continue;
            struct hp_mask *m = hp_mask_new(in->n_layers, in->n_heads);
            if (!m) {
                st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
                break;
            }
            memcpy(m->gate, base->gate, sizeof(float) * (size_t)in->n_layers * in->n_heads);
            ablate_unit(c, s, m, units[i]);
            cjobs[nc] = (struct hp_job){.study = si, .step = step + 1, .k = n_pruned + 1, .layer = units[i].layer,
                                        .unit = units[i].unit, .unit2 = -1, .mask = m};
            char unit[64];
            hp_unit_label(unit, sizeof unit, s->kv, units[i].layer, units[i].unit);
            snprintf(cjobs[nc].label, sizeof cjobs[nc].label, "step %d: %s", step + 1, unit);
            cords[nc] = (*ord)++;
            cand[nc++] = (struct scored){i, 0};
        }
        if (st == HP_OK)
            st = run_jobs(c, cords, cjobs, nc, HP_JOB_ITERATIVE_SCORE, cres, err);
        for (int i = 0; i < nc; i++) {
            hp_mask_free(cjobs[i].mask);
            cand[i].score = damage(c, &cres[i]);
            /* a NaN or missing score never ranks a unit */
            if (st == HP_OK && !isfinite(cand[i].score))
                st = hp_fail(err, HP_ERR_FORMAT, "%s: '%s' has no finite %s score in %s: it cannot rank a unit",
                             c->plan->path, cjobs[i].label, c->plan->metric, c->o->db_path);
        }
        if (st != HP_OK || stopping(c) || nc == 0)
            break;
        n_pruned += prune_best(c, s, base, units, cand, nc, pruned, left_in_layer, want);
    }
    free(units), free(pruned), free(cand), free(left_in_layer), hp_mask_free(base);
    free(cjobs), free(cords), free(cres);
    grad_buf_free(&gb), free(raw), free(imp), free(rows), free(labels);
    return st;
}

// --- head roles -------------------------------------------------------------------

/*
 * A roles study: every head's roles on the plan's model and data (unmasked,
 * whatever the plan's ablation), found in the store by their content address
 * (a variant's, with the mask text marked "roles:" and the probe's size and
 * seed, which no mask spec starts with) or computed once and stored, then
 * linked to the sweep.
 */
static enum hp_status run_roles(struct ctx *c, int si, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    struct hp_roles_opts ro = {.probe_seqs = s->roles.probe_seqs, .probe_len = s->roles.probe_len,
                               .progress = on_evaluator_progress, .user = c};
    struct hp_error why;
    if (hp_roles_probe_size(c->info, &ro, &ro.probe_seqs, &ro.probe_len, &why) != HP_OK) /* expansion checked it */
        return hp_fail(err, HP_ERR_PLAN, "%s:%d: study '%s': %s", c->plan->path, s->line, s->name, why.msg);
    char marked[96], key[HP_DIGEST_HEX];
    snprintf(marked, sizeof marked, "roles:%dx2x%d:%llx", ro.probe_seqs, ro.probe_len,
             (unsigned long long)HP_ROLES_PROBE_SEED);
    hp_digest_job(c->model_digest, c->data_digest, HP_ABLATE_ZERO, marked, key);
    bool found = false;
    enum hp_status st = hp_store_has_roles(c->store, key, &found, err);
    if (st == HP_OK && found) {
        if (key_seen(c, key))
            c->sum->n_repeated++;
        else
            c->sum->n_cached++;
    } else if (st == HP_OK) {
        adapt_threads(c);
        struct hp_roles *r = NULL;
        double t = hp_now();
        st = hp_roles_compute(c->model, c->data, &ro, &r, err);
        double secs = hp_now() - t;
        struct hp_store_roles sr = {key, c->model_digest, c->data_digest, r};
        if (st == HP_OK)
            st = hp_store_put_roles(c->store, &sr, secs, c->threads, hp_runtime_kernel(), err);
        if (st == HP_OK) {
            c->sum->n_run++;
            key_add(c, key);
        }
        hp_roles_free(r);
    }
    if (st == HP_OK)
        st = hp_store_link_roles(c->store, c->sweep_id, s->name, key, err);
    struct hp_job job = {.study = si, .layer = -1, .unit = -1, .unit2 = -1};
    if (st == HP_OK)
        job_done(c, &job);
    return st;
}

// --- gates ---------------------------------------------------------------------------

/* A training run's state is saved every HP_GATES_SAVE_STEPS steps or HP_GATES_SAVE_S seconds, whichever comes
 * first, when stopping and when finished: a kill loses at most that much training (each save is one transaction
 * of a few arrays the size of the heads, cheap beside a step) */
#define HP_GATES_SAVE_S 10.0
#define HP_GATES_SAVE_STEPS 25

/* The content address of study s's training run at lambda: what determines every step of it. */
static void gate_run_key(const struct ctx *c, const struct hp_study *s, const char *train_digest, double lambda,
                         char key[HP_DIGEST_HEX])
{
    char text[1024];
    snprintf(text, sizeof text, "headprune-gates-1|%d|%s|%s|%s|%a|%d|%a|%a|%a|%llu|%s", HP_NUMERIC_VERSION,
             c->model_digest, train_digest, hp_metric_name(c->metric), lambda, s->gates.steps, s->gates.lr, s->gates.beta, s->gates.init,
             (unsigned long long)s->gates.seed, s->name);
    hp_digest_text(text, key);
}

/* Progress (and the summary's counts) for one training step: run now, or found done. */
static void gate_step_done(struct ctx *c, int si, double lambda, int step, bool found)
{
    struct hp_job j = {.study = si, .step = step, .layer = -1, .unit = -1, .unit2 = -1};
    snprintf(j.label, sizeof j.label, "lambda %g, step %d", lambda, step);
    if (found)
        c->sum->n_cached++;
    else
        c->sum->n_run++;
    job_done(c, &j);
}

/*
 * A gates study: for each lambda, its training run (gates.c), found
 * finished in the store, resumed from the state saved there, or started;
 * saved every HP_GATES_SAVE_S seconds, when stopping and once finished.
 * Then its two curve points, evaluated exactly on the held-out set like any
 * variant: the pruned set (the heads whose test-time gate is 0 ablated, kind
 * 'gates', the key of every variant of that mask) and the model at its
 * test-time gates (kind 'gates-frac'), each at step = the lambda's index.
 */
static enum hp_status run_gates(struct ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    const struct hp_study *s = &c->plan->studies[si];
    const struct hp_model_info *in = c->info;
    const int n = in->n_layers * in->n_heads;
    char train_digest[HP_DIGEST_HEX], train_abs[PATH_MAX];
    hp_digest_data(c->train, train_digest);
    const char *train_path = s->gates.train ? (realpath(s->gates.train, train_abs) ? train_abs : s->gates.train) : c->train->path;
    struct hp_mask *pruned = hp_mask_new(in->n_layers, in->n_heads), *frac = hp_mask_new(in->n_layers, in->n_heads);
    double *test_gate = malloc((size_t)n * sizeof *test_gate);
    enum hp_status st = pruned && frac && test_gate ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory");
    for (int li = 0; st == HP_OK && li < s->gates.n_lambda && !stopping(c); li++) {
        const double lambda = s->gates.lambda[li];
        char key[HP_DIGEST_HEX];
        gate_run_key(c, s, train_digest, lambda, key);
        struct hp_gates_state gs;
        if (!hp_gates_state_init(&gs, n, s->gates.init, s->gates.seed, s->name, lambda)) {
            st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
            break;
        }
        struct hp_store_gate_run r = {
            .key = key, .model_digest = c->model_digest, .train_digest = train_digest, .train_path = train_path,
            .train_seqs = c->train->n_seqs, .metric = hp_metric_name(c->metric), .lambda = lambda, .lr = s->gates.lr,
            .beta = s->gates.beta, .init = s->gates.init, .seed = s->gates.seed, .steps = s->gates.steps, .n_layers = in->n_layers,
            .n_heads = in->n_heads, .log_alpha = gs.log_alpha, .adam_m = gs.m, .adam_v = gs.v, .n_kept = -1,
        };
        bool found = false;
        st = hp_store_get_gate_run(c->store, &r, &found, err);
        if (st == HP_OK && found) { /* resume where it was saved */
            gs.step = r.step;
            memcpy(gs.rng, r.rng, sizeof gs.rng);
            gs.objective = r.objective, gs.value = r.value, gs.penalty = r.penalty;
            for (int k = 1; k <= gs.step; k++)
                gate_step_done(c, si, lambda, k, true);
        }
        const struct hp_gates_cfg cfg = {.metric = c->metric, .lambda = lambda, .lr = s->gates.lr, .beta = s->gates.beta,
                                         .fixed = in->pruned};
        const double wall0 = found ? r.wall_s : 0;
        double t0 = hp_now(), t_saved = t0;
        while (st == HP_OK && r.n_kept < 0 && gs.step < s->gates.steps) {
            adapt_threads(c);
            if ((st = hp_gates_step(c->train_ev, &cfg, &gs, err)) != HP_OK) {
                char inner[HP_ERR_MSG_MAX];
                snprintf(inner, sizeof inner, "%s", err ? err->msg : "");
                st = hp_fail(err, st, "%s:%d: study '%s', lambda %g: %s", c->plan->path, s->line, s->name, lambda,
                             inner);
                break;
            }
            gate_step_done(c, si, lambda, gs.step, false);
            const bool done = gs.step == s->gates.steps;
            if (done || stopping(c) || gs.step % HP_GATES_SAVE_STEPS == 0 || hp_now() - t_saved >= HP_GATES_SAVE_S) {
                r.step = gs.step;
                memcpy(r.rng, gs.rng, sizeof r.rng);
                r.objective = gs.objective, r.value = gs.value, r.penalty = gs.penalty;
                r.wall_s = wall0 + (hp_now() - t0);
                if (done) { /* the test-time gates in double, as the formula gives them (the mask's are floats) */
                    r.n_kept = hp_gates_state_mask(&gs, in->pruned, NULL, NULL);
                    for (int h = 0; h < n; h++)
                        test_gate[h] = in->pruned && in->pruned[h] ? 0.0 : hp_gate_test(gs.log_alpha[h]);
                    r.gate = test_gate;
                }
                st = hp_store_put_gate_run(c->store, &r, c->threads, hp_runtime_kernel(), err);
                t_saved = hp_now();
            }
            if (stopping(c))
                break;
        }
        if (st != HP_OK || gs.step < s->gates.steps) { /* stopped (saved above) or failed */
            hp_gates_state_free(&gs);
            break;
        }
        /* the lambda's points: the pruned set, and the model at the test-time gates */
        hp_gates_state_mask(&gs, in->pruned, frac->gate, pruned->gate);
        hp_gates_state_free(&gs);
        /* the heads the checkpoint lacks are held closed in training but are not the lambda's to prune */
        hp_mask_drop_absent(pruned, in);
        hp_mask_drop_absent(frac, in);
        const int k_pruned = hp_mask_count_ablated(pruned);
        struct hp_job jobs[2];
        for (int k = 0; k < 2; k++) {
            jobs[k] = (struct hp_job){.study = si, .step = li, .k = k_pruned, .layer = -1, .unit = -1, .unit2 = -1,
                                      .mask = k == 0 ? pruned : frac};
            snprintf(jobs[k].label, sizeof jobs[k].label, "lambda %g%s", lambda, k == 0 ? "" : ", test-time gates");
        }
        int64_t o0 = (*ord)++, o1 = (*ord)++;
        st = run_jobs(c, &o0, &jobs[0], 1, "gates", NULL, err);
        if (st == HP_OK && !stopping(c))
            st = run_jobs(c, &o1, &jobs[1], 1, HP_JOB_GATES_FRAC, NULL, err);
        if (st == HP_OK && !stopping(c))
            st = hp_store_put_sweep_gate(c->store, c->sweep_id, s->name, li, lambda, key, err);
    }
    hp_mask_free(pruned);
    hp_mask_free(frac);
    free(test_gate);
    return st;
}

// --- the run ------------------------------------------------------------------

/* Mean-ablation statistics from the store, or computed once and stored. */
static enum hp_status load_means(struct ctx *c, struct hp_error *err)
{
    const struct hp_model_info *in = c->info;
    struct hp_means m = {in->n_layers, c->data->seq_len, in->n_heads * in->d_head, NULL, NULL};
    size_t n_all = (size_t)m.n_layers * m.width;
    m.all = malloc(n_all * sizeof(float));
    m.pos = malloc(n_all * m.seq_len * sizeof(float));
    bool found = false;
    enum hp_status st = m.all && m.pos ? hp_store_get_means(c->store, c->model_digest, c->data_digest, &m, &found, err)
                                       : hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    if (st == HP_OK && found)
        st = hp_evaluator_set_means(c->ev, &m, err);
    free(m.all);
    free(m.pos);
    if (st != HP_OK || found)
        return st;
    struct hp_means mine;
    st = hp_evaluator_means(c->ev, &mine, err);
    return st == HP_OK ? hp_store_put_means(c->store, c->model_digest, c->data_digest, &mine, err) : st;
}

/* The procedure a study's kind runs after the jobs (hp_study_run_of; the scores ran before them). */
static enum hp_status run_procedure(struct ctx *c, int si, int64_t *ord, struct hp_error *err)
{
    switch (hp_study_run_of(c->plan->studies[si].kind)) {
    case HP_STUDY_RUN_ITERATIVE: return run_iterative(c, si, ord, err);
    case HP_STUDY_RUN_ROLES: return run_roles(c, si, err);
    case HP_STUDY_RUN_GATES: return run_gates(c, si, ord, err);
    case HP_STUDY_RUN_JOBS:
    case HP_STUDY_RUN_SCORES: break;
    }
    return HP_OK;
}

enum hp_status hp_sweep_run(const struct hp_plan *plan, const struct hp_sweep_opts *o, struct hp_sweep_summary *sum,
                            struct hp_error *err)
{
    memset(sum, 0, sizeof *sum);
    struct ctx c = {.plan = plan, .o = o, .sum = sum, .t0 = hp_now(), .auto_threads = o->threads <= 0};
    hp_auto_threads_begin(&c.load);
    struct hp_joblist *jobs = NULL;
    enum hp_status st = hp_model_open(plan->model, &c.model, err);
    if (st == HP_OK) {
        c.info = hp_model_get_info(c.model);
        st = hp_data_load_for(plan->data, plan->model, c.info, plan->seq_len, &c.data, err);
    }
    if (st == HP_OK)
        st = hp_evaluator_new(c.model, c.data, &c.ev, err);
    /* the plan as run: its metric resolved against the model (a copy; the studies are shared) */
    struct hp_plan eff = *plan;
    const char *metric = NULL;
    if (st == HP_OK)
        st = hp_evaluator_pick_metric(c.ev, plan->path, plan->metric, &metric, err);
    if (st == HP_OK) {
        snprintf(eff.metric, sizeof eff.metric, "%s", metric);
        hp_metric_parse(metric, &c.metric); /* a name from the metric table: always found */
        c.plan = plan = &eff;
        hp_evaluator_set_plain(c.ev, o->plain);
        hp_evaluator_keep_grad_metrics(c.ev, true); /* a gradient-ranked curve's points (hp_job.grad_pass) */
    }
    if (st == HP_OK) /* before the database is touched: nothing is written for a plan refused */
        st = hp_plan_check_grad(plan, c.ev, err);
    if (st == HP_OK) /* gates studies: their training set, and with split the held-out set is what it leaves */
        st = hp_gates_data_load(plan, metric, c.model, &c.data, &c.train, err);
    if (st == HP_OK && c.train) {
        hp_evaluator_free(c.ev);
        c.ev = NULL;
        st = hp_evaluator_new(c.model, c.data, &c.ev, err);
        if (st == HP_OK) {
            hp_evaluator_set_plain(c.ev, o->plain);
            hp_evaluator_keep_grad_metrics(c.ev, true);
            st = hp_evaluator_new(c.model, c.train, &c.train_ev, err);
        }
    }
    if (st == HP_OK)
        st = hp_plan_expand(plan, c.info, &jobs, err);
    if (st == HP_OK) {
        hp_digest_model(c.model, c.model_digest);
        hp_digest_data(c.data, c.data_digest);
        hp_digest_text(plan->text ? plan->text : "", c.plan_digest);
        st = hp_store_open(o->db_path, &c.store, err);
    }
    if (st == HP_OK) {
        start_threads(&c);
        /* between the evaluator's chunks and blocks too, so a run that starts beside another
         * (both measuring an idle start) drops its threads within a quarter second */
        hp_evaluator_set_progress(c.ev, on_evaluator_progress, &c);
        if (c.train_ev)
            hp_evaluator_set_progress(c.train_ev, on_evaluator_progress, &c);
    }
    if (st == HP_OK && hp_ablation_reads_means(plan->ablation))
        st = load_means(&c, err);
    if (st == HP_OK) {
        const struct hp_model_info *in = c.info;
        /* absolute, so a later reader finds the files wherever it runs (relative ones name the working folder) */
        char plan_abs[PATH_MAX], model_abs[PATH_MAX], data_abs[PATH_MAX];
        struct hp_store_sweep_row d = {
            .plan_digest = c.plan_digest, .model_digest = c.model_digest, .data_digest = c.data_digest,
            .name = plan->name, .plan_path = realpath(plan->path, plan_abs) ? plan_abs : plan->path,
            .plan_text = plan->text, .ablation = hp_ablation_name(plan->ablation), .metric = plan->metric,
            .model_path = realpath(plan->model, model_abs) ? model_abs : plan->model, .model_type = in->model_type,
            .n_layers = in->n_layers, .n_heads = in->n_heads, .n_kv_heads = in->n_kv_heads, .d_head = in->d_head,
            .n_params = in->n_params, .pruned = in->pruned, .data_path = realpath(plan->data, data_abs) ? data_abs : plan->data,
            .n_seqs = c.data->n_seqs, .seq_len = c.data->seq_len,
        };
        st = hp_store_sweep(c.store, &d, &c.sweep_id, err);
        sum->sweep_id = c.sweep_id;
    }
    int count = o->shard_count > 0 ? o->shard_count : 1;
    if (st == HP_OK) {
        /* this shard's jobs */
        struct hp_job *mine = malloc(sizeof *mine * (size_t)(jobs->n + 1));
        int64_t *ords = malloc(sizeof *ords * (size_t)(jobs->n + 1));
        int n = 0;
        for (int i = 0; mine && ords && i < jobs->n; i++)
            if (i % count == o->shard_index) {
                mine[n] = jobs->jobs[i];
                ords[n++] = i;
            }
        c.total = n;
        for (int si = 0; o->shard_index == 0 && si < plan->n_studies; si++) {
            struct hp_study_cost cost;
            hp_study_cost(&plan->studies[si], c.info, 0, &cost);
            c.total += cost.evals + cost.backwards + cost.train_backwards + cost.passes;
        }
        /* importance and attribution first (shard 0): their gradient's forward at the unmasked model is also
         * the baseline's pass, whose metrics (the same bits) the evaluator then hands to the baseline's job */
        for (int si = 0; st == HP_OK && o->shard_index == 0 && si < plan->n_studies && !stopping(&c); si++)
            if (hp_study_run_of(plan->studies[si].kind) == HP_STUDY_RUN_SCORES)
                st = run_scores(&c, si, err);
        if (st == HP_OK)
            st = mine && ords ? run_jobs(&c, ords, mine, n, NULL, NULL, err)
                              : hp_fail(err, HP_ERR_NOMEM, "out of memory");
        free(mine);
        free(ords);
    }
    int64_t ord = jobs ? jobs->n : 0;
    /* the procedure studies in plan order, in shard 0 only: their work depends on earlier results */
    for (int si = 0; st == HP_OK && o->shard_index == 0 && si < plan->n_studies && !stopping(&c); si++)
        st = run_procedure(&c, si, &ord, err);
    sum->n_jobs = c.done;
    sum->interrupted = stopping(&c);
    sum->seconds = hp_now() - c.t0;
    hp_store_close(c.store);
    free(c.put);
    hp_joblist_free(jobs);
    hp_evaluator_free(c.ev);
    hp_data_free(c.data);
    hp_evaluator_free(c.train_ev);
    hp_data_free(c.train);
    hp_model_close(c.model);
    return st;
}
