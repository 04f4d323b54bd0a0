/*
 * store_results.c -- what the sweep runner finishes, written to and read from
 * the results database (schema in engine/store/schema.sql): variants with their
 * metrics and per-sequence values, mean-ablation statistics, gradients and
 * the scores made of them, head roles, gate training runs; and a study's
 * step, for an export.
 *
 * Every write is one BEGIN IMMEDIATE transaction (hs_commit_or_fail): a
 * killed process leaves a whole result or none of it.
 * Must not: know about tensors, models, plans or jobs: it is given rows of
 * plain fields (store.h), and the kernel and thread count by its caller;
 * open databases or touch the schema (store.c).
 */
#define _XOPEN_SOURCE 700 /* strdup */
#include "store_priv.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// --- results ------------------------------------------------------------------

enum hp_status hp_store_lookup(struct hp_store *s, const char *key, bool *found, struct hp_store_metrics *m,
                               struct hp_error *err)
{
    sqlite3_stmt *st;
    char cols[HS_METRIC_COLS], sql[HS_METRIC_COLS + 128];
    hs_metric_cols(cols, "r.");
    snprintf(sql, sizeof sql, "SELECT %s FROM variants v JOIN results r ON r.variant_id = v.id WHERE v.key = ?", cols);
    int rc = hs_prep(s, sql, &st);
    if (rc != SQLITE_OK)
        return hs_sql_fail(s, rc, "looking up a result", err);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    *found = rc == SQLITE_ROW;
    if (*found) {
        for (int k = 0; k < HP_N_METRICS; k++)
            m->value[k] = sqlite3_column_type(st, k) == SQLITE_NULL ? NAN : sqlite3_column_double(st, k);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return hs_sql_fail(s, rc, "looking up a result", err);
    return HP_OK;
}

/* INSERT OR IGNORE the sweep_jobs row of j (variant found by key). */
static int link_row(struct hp_store *s, const struct hp_store_job *j)
{
    sqlite3_stmt *st;
    int rc = hs_prep(s, "INSERT OR IGNORE INTO sweep_jobs(sweep_id, ord, variant_id, study, kind, kv, label, layer, "
                     "unit, unit2, step, sample, k) VALUES (?1, ?2, (SELECT id FROM variants WHERE key = ?3), "
                     "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                  &st);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_int64(st, 1, j->sweep_id);
    sqlite3_bind_int64(st, 2, j->ord);
    sqlite3_bind_text(st, 3, j->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, j->study, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, j->kind, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 6, j->kv);
    sqlite3_bind_text(st, 7, j->label, -1, SQLITE_STATIC);
    int vals[3] = {j->layer, j->unit, j->unit2};
    for (int i = 0; i < 3; i++)
        if (vals[i] >= 0)
            sqlite3_bind_int(st, 8 + i, vals[i]);
        else
            sqlite3_bind_null(st, 8 + i);
    sqlite3_bind_int(st, 11, j->step);
    sqlite3_bind_int(st, 12, j->sample);
    sqlite3_bind_int(st, 13, j->k);
    rc = hs_step_done(st);
    if (rc != SQLITE_OK)
        return rc;
    return hs_touch_sweep(s, j->sweep_id);
}

enum hp_status hp_store_link(struct hp_store *s, const struct hp_store_job *j, struct hp_error *err)
{
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    if (rc == SQLITE_OK)
        rc = link_row(s, j);
    return hs_commit_or_fail(s, rc, "recording a job", err);
}

static void bind_metric(sqlite3_stmt *st, int i, bool has, double v)
{
    if (has && isfinite(v))
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static int insert_variant(struct hp_store *s, const struct hp_store_job *j, const struct hp_metrics *mt,
                          double wall_s, int threads, const char *kernel)
{
    /* variants.mask: bit i (LSB first) set when gate i is 0; n_ablated counts them */
    int nbits = j->n_layers * j->n_heads, n_ablated = 0;
    unsigned char bits[(nbits + 7) / 8 + 1];
    memset(bits, 0, sizeof bits);
    for (int i = 0; i < nbits; i++)
        if (j->gate[i] == 0.0f) {
            bits[i / 8] |= (unsigned char)(1u << (i % 8));
            n_ablated++;
        }
    sqlite3_stmt *st;
    int rc = hs_prep(s, "INSERT INTO variants(key, model_id, dataset_id, ablation, mask, mask_text, n_ablated) VALUES "
                     "(?1, (SELECT id FROM models WHERE digest = ?2), (SELECT id FROM datasets WHERE digest = ?3), "
                     "?4, ?5, ?6, ?7)",
                  &st);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, j->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, j->model_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, j->data_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, j->ablation, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 5, bits, (nbits + 7) / 8, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, j->mask_text, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 7, n_ablated);
    if ((rc = hs_step_done(st)) != SQLITE_OK)
        return rc;
    int64_t vid = sqlite3_last_insert_rowid(s->db);
    if (j->one_position) {
        if ((rc = hs_prep(s, "INSERT INTO variant_positions(variant_id, position) VALUES (?, ?)", &st)) != SQLITE_OK)
            return rc;
        sqlite3_bind_int64(st, 1, vid);
        sqlite3_bind_int(st, 2, j->position);
        if ((rc = hs_step_done(st)) != SQLITE_OK)
            return rc;
    }

    char now[32];
    hs_now_iso(now);
    /* the metrics' columns, one a row of the metric table, in its order */
    char cols[HS_METRIC_COLS], qs[HS_METRIC_COLS], sql[3 * HS_METRIC_COLS + 256];
    hs_metric_cols(cols, "");
    hs_metric_params(qs);
    snprintf(sql, sizeof sql,
             "INSERT INTO results(variant_id, %s, ppl, n_tokens, n_seqs, wall_s, engine_version, numeric_version, "
             "host, threads, kernel, created) VALUES (?, %s, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
             cols, qs);
    if ((rc = hs_prep(s, sql, &st)) != SQLITE_OK)
        return rc;
    int c = 1;
    sqlite3_bind_int64(st, c++, vid);
    for (int k = 0; k < HP_N_METRICS; k++)
        bind_metric(st, c++, mt->has[k], mt->value[k]);
    bind_metric(st, c++, mt->has[HP_METRIC_LOSS], mt->ppl);
    sqlite3_bind_int64(st, c++, mt->n_tokens);
    sqlite3_bind_int(st, c++, mt->n_seqs);
    hs_bind_provenance(s, st, c, wall_s, threads, kernel, now);
    if ((rc = hs_step_done(st)) != SQLITE_OK)
        return rc;

    snprintf(sql, sizeof sql, "INSERT INTO seq_results(variant_id, seq, %s, n_tokens) VALUES (?, ?, %s, ?)", cols, qs);
    if ((rc = hs_prep(s, sql, &st)) != SQLITE_OK)
        return rc;
    for (int i = 0; i < mt->n_seqs && rc == SQLITE_OK; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, vid);
        sqlite3_bind_int(st, 2, i);
        for (int k = 0; k < HP_N_METRICS; k++)
            bind_metric(st, 3 + k, mt->has[k], mt->has[k] ? mt->seq[k][i] : 0); /* seq[k] may be NULL without it */
        sqlite3_bind_int64(st, 3 + HP_N_METRICS, mt->seq_tokens[i]);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
    return rc;
}

enum hp_status hp_store_put(struct hp_store *s, const struct hp_store_job *j, const struct hp_metrics *mt,
                            double wall_s, int threads, const char *kernel, struct hp_error *err)
{
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    int64_t vid;
    bool exists = false;
    if (rc == SQLITE_OK)
        rc = hs_select_int(s, "SELECT id FROM variants WHERE key = ?", j->key, &vid, &exists);
    /* another worker may have finished the same variant meanwhile: keep theirs */
    if (rc == SQLITE_OK && !exists)
        rc = insert_variant(s, j, mt, wall_s, threads, kernel);
    if (rc == SQLITE_OK)
        rc = link_row(s, j);
    return hs_commit_or_fail(s, rc, "writing a result", err);
}

// --- a patching study's tokens ------------------------------------------------------

enum hp_status hp_store_put_patch_tokens(struct hp_store *s, int64_t sweep_id, const char *study,
                                         const struct hp_store_patch_token *t, int n, struct hp_error *err)
{
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK && (rc = hs_prep(s, "DELETE FROM patch_tokens WHERE sweep_id = ? AND study = ?", &st)) ==
                               SQLITE_OK) {
        sqlite3_bind_int64(st, 1, sweep_id);
        sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
        rc = hs_step_done(st);
    }
    st = NULL;
    if (rc == SQLITE_OK)
        rc = hs_prep(s, "INSERT INTO patch_tokens(sweep_id, study, position, token, corrupt, text, corrupt_text) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)", &st);
    for (int i = 0; i < n && rc == SQLITE_OK; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, sweep_id);
        sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, t[i].position);
        sqlite3_bind_int(st, 4, t[i].token);
        if (t[i].corrupt >= 0)
            sqlite3_bind_int(st, 5, t[i].corrupt);
        else
            sqlite3_bind_null(st, 5);
        if (t[i].text)
            sqlite3_bind_text(st, 6, t[i].text, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 6);
        if (t[i].corrupt_text)
            sqlite3_bind_text(st, 7, t[i].corrupt_text, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 7);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = hs_touch_sweep(s, sweep_id);
    return hs_commit_or_fail(s, rc, "recording a patching study's tokens", err);
}

// --- mean-ablation statistics ---------------------------------------------------

enum hp_status hp_store_get_means(struct hp_store *s, const char *model_digest, const char *data_digest,
                                  struct hp_means *m, bool *found, struct hp_error *err)
{
    *found = false;
    sqlite3_stmt *st;
    int rc = hs_prep(s,
                  "SELECT n_layers, seq_len, width, mean_all, mean_pos FROM ablation_means "
                  "WHERE model_digest = ? AND data_digest = ? AND numeric_version = ?",
                  &st);
    if (rc != SQLITE_OK)
        return hs_sql_fail(s, rc, "reading mean-ablation statistics", err);
    sqlite3_bind_text(st, 1, model_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, data_digest, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, HP_NUMERIC_VERSION);
    rc = sqlite3_step(st);
    enum hp_status ret = HP_OK;
    if (rc == SQLITE_ROW) {
        /* each blob: the heads' statistics, then the MLP blocks' (a row written before MLPs were units has only
         * the heads': not found, made again and replaced, the heads' the same bits) */
        const size_t n_all = (size_t)m->n_layers * m->width, n_pos = n_all * m->seq_len,
                     n_mall = (size_t)m->n_layers * m->d_model, n_mpos = n_mall * m->seq_len;
        const size_t b_all = (size_t)sqlite3_column_bytes(st, 3), b_pos = (size_t)sqlite3_column_bytes(st, 4);
        const bool old = b_all == n_all * sizeof(float) && b_pos == n_pos * sizeof(float);
        if (sqlite3_column_int(st, 0) != m->n_layers || sqlite3_column_int(st, 1) != m->seq_len ||
            sqlite3_column_int(st, 2) != m->width ||
            (!old && (b_all != (n_all + n_mall) * sizeof(float) || b_pos != (n_pos + n_mpos) * sizeof(float)))) {
            ret = hp_fail(err, HP_ERR_SQL, "%s: stored mean-ablation statistics have the wrong shape (a damaged database?)",
                          s->path);
        } else if (!old) {
            const float *all = sqlite3_column_blob(st, 3), *pos = sqlite3_column_blob(st, 4);
            memcpy(m->all, all, n_all * sizeof(float));
            memcpy(m->mlp_all, all + n_all, n_mall * sizeof(float));
            memcpy(m->pos, pos, n_pos * sizeof(float));
            memcpy(m->mlp_pos, pos + n_pos, n_mpos * sizeof(float));
            *found = true;
        }
    } else if (rc != SQLITE_DONE) {
        ret = hs_sql_fail(s, rc, "reading mean-ablation statistics", err);
    }
    sqlite3_finalize(st);
    return ret;
}

enum hp_status hp_store_put_means(struct hp_store *s, const char *model_digest, const char *data_digest,
                                  const struct hp_means *m, struct hp_error *err)
{
    const size_t n_all = (size_t)m->n_layers * m->width, n_pos = n_all * m->seq_len,
                 n_mall = (size_t)m->n_layers * m->d_model, n_mpos = n_mall * m->seq_len;
    float *all = malloc((n_all + n_mall) * sizeof(float)), *pos = malloc((n_pos + n_mpos) * sizeof(float));
    if (!all || !pos) {
        free(all);
        free(pos);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for mean-ablation statistics");
    }
    memcpy(all, m->all, n_all * sizeof(float));
    memcpy(all + n_all, m->mlp_all, n_mall * sizeof(float));
    memcpy(pos, m->pos, n_pos * sizeof(float));
    memcpy(pos + n_pos, m->mlp_pos, n_mpos * sizeof(float));
    sqlite3_stmt *st;
    /* REPLACE: a row of the heads' statistics alone (written before MLPs were units) gains the MLPs' */
    int rc = hs_prep(s, "INSERT OR REPLACE INTO ablation_means VALUES (?, ?, ?, ?, ?, ?, ?, ?)", &st);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, model_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, data_digest, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, HP_NUMERIC_VERSION);
        sqlite3_bind_int(st, 4, m->n_layers);
        sqlite3_bind_int(st, 5, m->seq_len);
        sqlite3_bind_int(st, 6, m->width);
        sqlite3_bind_blob64(st, 7, all, (n_all + n_mall) * sizeof(float), SQLITE_STATIC);
        sqlite3_bind_blob64(st, 8, pos, (n_pos + n_mpos) * sizeof(float), SQLITE_STATIC);
        rc = hs_step_done(st);
    }
    free(all);
    free(pos);
    return rc == SQLITE_OK ? HP_OK : hs_sql_fail(s, rc, "writing mean-ablation statistics", err);
}

// --- gradients and the scores made of them ------------------------------------------

enum hp_status hp_store_get_grad(struct hp_store *s, struct hp_store_grad *g, bool *found, struct hp_error *err)
{
    *found = false;
    sqlite3_stmt *st;
    int rc = hs_prep(s, "SELECT n_layers, n_heads, n_seqs, loss, grad, atp, seq_grad FROM gradients WHERE key = ?", &st);
    if (rc != SQLITE_OK)
        return hs_sql_fail(s, rc, "reading a gradient", err);
    sqlite3_bind_text(st, 1, g->key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    enum hp_status ret = HP_OK;
    if (rc == SQLITE_ROW) {
        /* each blob the heads' part, then (a row made with them) the MLPs' */
        const size_t L = (size_t)g->n_layers, hh = L * g->n_heads, ns = hh * g->n_seqs, nm = L * g->n_seqs,
                     b_g = (size_t)sqlite3_column_bytes(st, 4), b_a = (size_t)sqlite3_column_bytes(st, 5),
                     b_s = (size_t)sqlite3_column_bytes(st, 6), D = sizeof(double);
        const bool heads_only = b_g == hh * D && b_a == hh * D && b_s == ns * D,
                   with_mlps = b_g == (hh + L) * D && b_a == (hh + L) * D && b_s == (ns + nm) * D;
        if (sqlite3_column_int(st, 0) != g->n_layers || sqlite3_column_int(st, 1) != g->n_heads ||
            sqlite3_column_int(st, 2) != g->n_seqs || !(heads_only || with_mlps)) {
            ret = hp_fail(err, HP_ERR_SQL, "%s: a stored gradient has the wrong shape (a damaged database?)", s->path);
        } else if (with_mlps || !g->mlp_grad) {
            const double *bg = sqlite3_column_blob(st, 4), *ba = sqlite3_column_blob(st, 5),
                         *bs = sqlite3_column_blob(st, 6);
            g->loss = sqlite3_column_double(st, 3);
            memcpy(g->grad, bg, hh * D);
            memcpy(g->atp, ba, hh * D);
            memcpy(g->seq_grad, bs, ns * D);
            if (g->mlp_grad) {
                memcpy(g->mlp_grad, bg + hh, L * D);
                memcpy(g->mlp_atp, ba + hh, L * D);
                memcpy(g->mlp_seq_grad, bs + ns, nm * D);
            }
            *found = true;
        }
    } else if (rc != SQLITE_DONE) {
        ret = hs_sql_fail(s, rc, "reading a gradient", err);
    }
    sqlite3_finalize(st);
    return ret;
}

enum hp_status hp_store_put_grad(struct hp_store *s, const struct hp_store_grad *g, double wall_s, int threads,
                                 const char *kernel, struct hp_error *err)
{
    const size_t L = (size_t)g->n_layers, hh = L * g->n_heads, ns = hh * g->n_seqs, D = sizeof(double),
                 ml = g->mlp_grad ? L : 0, nm = g->mlp_grad ? L * g->n_seqs : 0;
    /* each blob the heads' part, then the MLPs' when there are */
    double *bg = malloc((hh + ml) * D), *ba = malloc((hh + ml) * D), *bs = malloc((ns + nm) * D);
    if (!bg || !ba || !bs) {
        free(bg), free(ba), free(bs);
        return hp_fail(err, HP_ERR_NOMEM, "out of memory for a gradient");
    }
    memcpy(bg, g->grad, hh * D);
    memcpy(ba, g->atp, hh * D);
    memcpy(bs, g->seq_grad, ns * D);
    if (ml) {
        memcpy(bg + hh, g->mlp_grad, ml * D);
        memcpy(ba + hh, g->mlp_atp, ml * D);
        memcpy(bs + ns, g->mlp_seq_grad, nm * D);
    }
    char now[32];
    hs_now_iso(now);
    sqlite3_stmt *st;
    /* a copy already there is kept, unless it lacks the MLPs' part this one has: then it is completed in place
     * (its id, which unit_scores name, kept) */
    int rc = hs_prep(s,
                  "INSERT INTO gradients(key, model_id, dataset_id, ablation, mask_text, n_layers, n_heads, "
                  "n_seqs, loss, grad, atp, seq_grad, wall_s, engine_version, numeric_version, host, threads, kernel, "
                  "created, from_layer) VALUES (?1, (SELECT id FROM models WHERE digest = ?2), "
                  "(SELECT id FROM datasets WHERE digest = ?3), ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
                  "?16, ?17, ?18, ?19, ?20) ON CONFLICT(key) DO UPDATE SET grad = excluded.grad, atp = excluded.atp, "
                  "seq_grad = excluded.seq_grad WHERE length(excluded.grad) > length(gradients.grad)",
                  &st);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, g->key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, g->model_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, g->data_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, g->ablation, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, g->mask_text, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 6, g->n_layers);
        sqlite3_bind_int(st, 7, g->n_heads);
        sqlite3_bind_int(st, 8, g->n_seqs);
        sqlite3_bind_double(st, 9, g->loss);
        sqlite3_bind_blob64(st, 10, bg, (hh + ml) * D, SQLITE_STATIC);
        sqlite3_bind_blob64(st, 11, ba, (hh + ml) * D, SQLITE_STATIC);
        sqlite3_bind_blob64(st, 12, bs, (ns + nm) * D, SQLITE_STATIC);
        hs_bind_provenance(s, st, 13, wall_s, threads, kernel, now);
        sqlite3_bind_int(st, 20, g->from_layer);
        rc = hs_step_done(st);
    }
    free(bg), free(ba), free(bs);
    return rc == SQLITE_OK ? HP_OK : hs_sql_fail(s, rc, "writing a gradient", err);
}

/* text, or NULL as SQL's NULL */
static void bind_text_or_null(sqlite3_stmt *st, int i, const char *text)
{
    if (text)
        sqlite3_bind_text(st, i, text, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

enum hp_status hp_store_put_scores(struct hp_store *s, const struct hp_store_scores *of,
                                   const struct hp_store_score *rows, int n, struct hp_error *err)
{
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK)
        rc = hs_prep(s,
                  "INSERT OR REPLACE INTO unit_scores(sweep_id, study, kind, kv, step, layer, unit, label, score, raw, "
                  "normalize, gradient_id, estimator, base) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                  "(SELECT id FROM gradients WHERE key = ?12), ?13, ?14)",
                  &st);
    for (int i = 0; i < n && rc == SQLITE_OK; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, of->sweep_id);
        sqlite3_bind_text(st, 2, of->study, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, of->kind, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 4, of->kv);
        sqlite3_bind_int(st, 5, of->step);
        sqlite3_bind_int(st, 6, rows[i].layer);
        sqlite3_bind_int(st, 7, rows[i].unit);
        sqlite3_bind_text(st, 8, rows[i].label, -1, SQLITE_STATIC);
        sqlite3_bind_double(st, 9, rows[i].score);
        sqlite3_bind_double(st, 10, rows[i].raw);
        bind_text_or_null(st, 11, of->normalize);
        sqlite3_bind_text(st, 12, of->grad_key, -1, SQLITE_STATIC);
        bind_text_or_null(st, 13, of->estimator);
        bind_text_or_null(st, 14, of->base);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = hs_touch_sweep(s, of->sweep_id);
    return hs_commit_or_fail(s, rc, "writing a study's scores", err);
}

// --- screens ------------------------------------------------------------------------

enum hp_status hp_store_put_screen(struct hp_store *s, const struct hp_store_screen *v, struct hp_error *err)
{
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK)
        rc = hs_prep(s,
                     "INSERT OR REPLACE INTO screens(sweep_id, study, kv, units, k, estimator, evaluated, audits, "
                     "population, audited, missed_max, confidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                     "?11, ?12)",
                     &st);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, v->sweep_id);
        sqlite3_bind_text(st, 2, v->study, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, v->kv);
        sqlite3_bind_int(st, 4, v->units);
        sqlite3_bind_int(st, 5, v->k);
        sqlite3_bind_text(st, 6, v->estimator, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 7, v->evaluated);
        sqlite3_bind_int(st, 8, v->audits);
        sqlite3_bind_int(st, 9, v->population);
        sqlite3_bind_int(st, 10, v->audited);
        sqlite3_bind_int(st, 11, v->missed_max);
        sqlite3_bind_double(st, 12, v->confidence);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_OK)
        rc = hs_touch_sweep(s, v->sweep_id);
    return hs_commit_or_fail(s, rc, "writing a screen's verdict", err);
}

// --- head roles ------------------------------------------------------------------

enum hp_status hp_store_has_roles(struct hp_store *s, const char *key, bool *found, struct hp_error *err)
{
    int64_t id;
    int rc = hs_select_int(s, "SELECT id FROM role_runs WHERE key = ?", key, &id, found);
    return rc == SQLITE_OK ? HP_OK : hs_sql_fail(s, rc, "looking up head roles", err);
}

/* NULL for a score that is undefined (NaN). */
static void bind_score(sqlite3_stmt *st, int i, double v)
{
    if (isnan(v))
        sqlite3_bind_null(st, i);
    else
        sqlite3_bind_double(st, i, v);
}

static int insert_roles(struct hp_store *s, const struct hp_store_roles *in, double wall_s, int threads,
                        const char *kernel)
{
    const struct hp_roles *r = in->roles;
    char now[32];
    hs_now_iso(now);
    sqlite3_stmt *st;
    int rc = hs_prep(s,
                  "INSERT INTO role_runs(key, model_id, dataset_id, causal, probe_seqs, probe_len, probe_seed, "
                  "n_queries, n_prev, n_duplicate, n_first, n_induction, wall_s, engine_version, numeric_version, host, "
                  "threads, kernel, created, sep_id, n_sep) VALUES (?1, (SELECT id FROM models WHERE digest = ?2), "
                  "(SELECT id FROM datasets WHERE digest = ?3), ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
                  "?16, ?17, ?18, ?19, ?20, ?21)",
                  &st);
    if (rc != SQLITE_OK)
        return rc;
    sqlite3_bind_text(st, 1, in->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, in->model_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, in->data_digest, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 4, r->causal);
    sqlite3_bind_int(st, 5, r->probe_seqs);
    sqlite3_bind_int(st, 6, r->probe_len);
    sqlite3_bind_int64(st, 7, (sqlite3_int64)r->probe_seed);
    sqlite3_bind_int64(st, 8, r->n_queries);
    sqlite3_bind_int64(st, 9, r->n_prev);
    sqlite3_bind_int64(st, 10, r->n_duplicate);
    sqlite3_bind_int64(st, 11, r->n_first);
    sqlite3_bind_int64(st, 12, r->n_induction);
    hs_bind_provenance(s, st, 13, wall_s, threads, kernel, now);
    if (r->sep_id >= 0) { /* else both NULL: the model has no [SEP] */
        sqlite3_bind_int(st, 20, r->sep_id);
        sqlite3_bind_int64(st, 21, r->n_sep);
    }
    if ((rc = hs_step_done(st)) != SQLITE_OK)
        return rc;
    const int64_t run = sqlite3_last_insert_rowid(s->db);
    if ((rc = hs_prep(s,
                   "INSERT INTO head_roles(run_id, layer, head, prev_token, duplicate_token, induction, "
                   "induction_offset, induction_mass, first_token, dominant_offset, dominant_mass, entropy, rare_token, "
                   "sep_token) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                   &st)) != SQLITE_OK)
        return rc;
    for (int i = 0; i < r->n_layers * r->n_heads && rc == SQLITE_OK; i++) {
        const struct hp_head_roles *h = &r->heads[i];
        if (!h->present)
            continue;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, i / r->n_heads);
        sqlite3_bind_int(st, 3, i % r->n_heads);
        bind_score(st, 4, h->prev_token);
        bind_score(st, 5, h->duplicate_token);
        bind_score(st, 6, h->induction);
        if (!hp_roles_offset_shown(h->induction_mass))
            sqlite3_bind_null(st, 7);
        else
            sqlite3_bind_int(st, 7, h->induction_offset);
        bind_score(st, 8, h->induction_mass);
        bind_score(st, 9, h->first_token);
        if (isnan(h->dominant_mass))
            sqlite3_bind_null(st, 10);
        else
            sqlite3_bind_int(st, 10, h->dominant_offset);
        bind_score(st, 11, h->dominant_mass);
        bind_score(st, 12, h->entropy);
        bind_score(st, 13, h->rare_token);
        bind_score(st, 14, h->sep_token);
        rc = sqlite3_step(st);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    sqlite3_finalize(st);
    return rc;
}

enum hp_status hp_store_put_roles(struct hp_store *s, const struct hp_store_roles *r, double wall_s, int threads,
                                  const char *kernel, struct hp_error *err)
{
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    int64_t id;
    bool exists = false;
    if (rc == SQLITE_OK)
        rc = hs_select_int(s, "SELECT id FROM role_runs WHERE key = ?", r->key, &id, &exists);
    /* another worker may have stored the same roles meanwhile: keep theirs */
    if (rc == SQLITE_OK && !exists)
        rc = insert_roles(s, r, wall_s, threads, kernel);
    return hs_commit_or_fail(s, rc, "writing head roles", err);
}

enum hp_status hp_store_link_roles(struct hp_store *s, int64_t sweep_id, const char *study, const char *key,
                                   struct hp_error *err)
{
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK &&
        (rc = hs_prep(s, "INSERT OR REPLACE INTO sweep_roles(sweep_id, study, run_id) VALUES "
                      "(?1, ?2, (SELECT id FROM role_runs WHERE key = ?3))",
                   &st)) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, sweep_id);
        sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, key, -1, SQLITE_STATIC);
        rc = hs_step_done(st);
    }
    if (rc == SQLITE_OK)
        rc = hs_touch_sweep(s, sweep_id);
    return hs_commit_or_fail(s, rc, "recording a roles study", err);
}

// --- gate training runs -----------------------------------------------------------------

/* What is wrong with a gate run's state as read (NULL: nothing), into why: no step of training makes any of it. */
static bool gate_state_damaged(const struct hp_store_gate_run *r, size_t n, char *why, size_t size)
{
    const double *arr[3] = {r->log_alpha, r->adam_m, r->adam_v};
    static const char *const names[3] = {"log_alpha", "adam_m", "adam_v"};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n; i++)
            if (!isfinite(arr[k][i]) || (k == 2 && arr[k][i] < 0)) {
                snprintf(why, size, "%s of head %zu.%zu is %g", names[k], i / (size_t)r->n_heads,
                         i % (size_t)r->n_heads, arr[k][i]);
                return true;
            }
    if (r->step < 0 || r->step > r->steps) {
        snprintf(why, size, "step %d is not one of 0..%d", r->step, r->steps);
        return true;
    }
    if (r->n_kept < -1 || r->n_kept > (int)n || (r->n_kept >= 0 && r->step != r->steps)) {
        snprintf(why, size, "n_kept %d at step %d of %d", r->n_kept, r->step, r->steps);
        return true;
    }
    if (!(r->wall_s >= 0) || !isfinite(r->wall_s)) {
        snprintf(why, size, "wall_s is %g", r->wall_s);
        return true;
    }
    return false;
}

enum hp_status hp_store_get_gate_run(struct hp_store *s, struct hp_store_gate_run *r, bool *found, struct hp_error *err)
{
    *found = false;
    sqlite3_stmt *st;
    int rc = hs_prep(s,
                  "SELECT n_layers, n_heads, step, objective, value, penalty, log_alpha, adam_m, adam_v, rng, n_kept, "
                  "wall_s FROM gate_runs WHERE key = ?",
                  &st);
    if (rc != SQLITE_OK)
        return hs_sql_fail(s, rc, "reading a gate run", err);
    sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    enum hp_status ret = HP_OK;
    if (rc == SQLITE_ROW) {
        const size_t n = (size_t)r->n_layers * r->n_heads, b = n * sizeof(double);
        if (sqlite3_column_int(st, 0) != r->n_layers || sqlite3_column_int(st, 1) != r->n_heads ||
            (size_t)sqlite3_column_bytes(st, 6) != b || (size_t)sqlite3_column_bytes(st, 7) != b ||
            (size_t)sqlite3_column_bytes(st, 8) != b || sqlite3_column_bytes(st, 9) != (int)sizeof r->rng) {
            ret = hp_fail(err, HP_ERR_SQL, "%s: a stored gate run has the wrong shape (a damaged database?)", s->path);
        } else {
            double *v[3] = {&r->objective, &r->value, &r->penalty};
            r->step = sqlite3_column_int(st, 2);
            for (int i = 0; i < 3; i++)
                *v[i] = sqlite3_column_type(st, 3 + i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 3 + i);
            memcpy(r->log_alpha, sqlite3_column_blob(st, 6), b);
            memcpy(r->adam_m, sqlite3_column_blob(st, 7), b);
            memcpy(r->adam_v, sqlite3_column_blob(st, 8), b);
            memcpy(r->rng, sqlite3_column_blob(st, 9), sizeof r->rng);
            r->n_kept = sqlite3_column_type(st, 10) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 10);
            r->wall_s = sqlite3_column_double(st, 11);
            char why[96];
            if (gate_state_damaged(r, n, why, sizeof why))
                ret = hp_fail(err, HP_ERR_FORMAT, "%s: the saved state of gate run %.12s (lambda %g) is damaged: %s "
                              "(a damaged database? delete its gate_runs row to train it again, or run into a new "
                              "database)", s->path, r->key, r->lambda, why);
            else
                *found = true;
        }
    } else if (rc != SQLITE_DONE) {
        ret = hs_sql_fail(s, rc, "reading a gate run", err);
    }
    sqlite3_finalize(st);
    return ret;
}

enum hp_status hp_store_put_gate_run(struct hp_store *s, const struct hp_store_gate_run *r, int threads,
                                     const char *kernel, struct hp_error *err)
{
    const size_t n = (size_t)r->n_layers * r->n_heads;
    char now[32], seed[24];
    hs_now_iso(now);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    sqlite3_stmt *st = NULL;
    /* in place (the id stays: gate_heads and sweep_gates refer to it), never over a finished run */
    if (rc == SQLITE_OK)
        rc = hs_prep(s,
                  "INSERT INTO gate_runs(key, model_id, train_digest, train_path, train_seqs, metric, lambda, steps, lr, "
                  "beta, init, seed, n_layers, n_heads, step, objective, value, penalty, log_alpha, adam_m, adam_v, rng, "
                  "n_kept, wall_s, engine_version, numeric_version, host, threads, kernel, created, updated) VALUES "
                  "(?1, (SELECT id FROM models WHERE digest = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, "
                  "?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?30) "
                  "ON CONFLICT(key) DO UPDATE SET step = excluded.step, objective = excluded.objective, "
                  "value = excluded.value, penalty = excluded.penalty, log_alpha = excluded.log_alpha, "
                  "adam_m = excluded.adam_m, adam_v = excluded.adam_v, rng = excluded.rng, n_kept = excluded.n_kept, "
                  "wall_s = excluded.wall_s, engine_version = excluded.engine_version, host = excluded.host, "
                  "threads = excluded.threads, kernel = excluded.kernel, updated = excluded.updated "
                  "WHERE gate_runs.n_kept IS NULL",
                  &st);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, r->model_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, r->train_digest, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, r->train_path, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 5, r->train_seqs);
        sqlite3_bind_text(st, 6, r->metric, -1, SQLITE_STATIC);
        sqlite3_bind_double(st, 7, r->lambda);
        sqlite3_bind_int(st, 8, r->steps);
        sqlite3_bind_double(st, 9, r->lr);
        sqlite3_bind_double(st, 10, r->beta);
        sqlite3_bind_double(st, 11, r->init);
        sqlite3_bind_text(st, 12, seed, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 13, r->n_layers);
        sqlite3_bind_int(st, 14, r->n_heads);
        sqlite3_bind_int(st, 15, r->step);
        bind_metric(st, 16, true, r->objective);
        bind_metric(st, 17, true, r->value);
        bind_metric(st, 18, true, r->penalty);
        sqlite3_bind_blob64(st, 19, r->log_alpha, n * sizeof(double), SQLITE_STATIC);
        sqlite3_bind_blob64(st, 20, r->adam_m, n * sizeof(double), SQLITE_STATIC);
        sqlite3_bind_blob64(st, 21, r->adam_v, n * sizeof(double), SQLITE_STATIC);
        sqlite3_bind_blob64(st, 22, r->rng, sizeof r->rng, SQLITE_STATIC);
        if (r->n_kept >= 0)
            sqlite3_bind_int(st, 23, r->n_kept);
        else
            sqlite3_bind_null(st, 23);
        hs_bind_provenance(s, st, 24, r->wall_s, threads, kernel, now);
        rc = hs_step_done(st);
        st = NULL;
    }
    /* a finished run's gates, once (INSERT OR IGNORE: a second writer's are the same) */
    if (rc == SQLITE_OK && r->n_kept >= 0)
        rc = hs_prep(s,
                  "INSERT OR IGNORE INTO gate_heads(run_id, layer, head, label, log_alpha, gate) VALUES "
                  "((SELECT id FROM gate_runs WHERE key = ?1), ?2, ?3, ?4, ?5, ?6)",
                  &st);
    for (int l = 0; rc == SQLITE_OK && r->n_kept >= 0 && l < r->n_layers; l++)
        for (int h = 0; rc == SQLITE_OK && h < r->n_heads; h++) {
            char label[32];
            hp_unit_label(label, sizeof label, false, l, h);
            sqlite3_reset(st);
            sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, l);
            sqlite3_bind_int(st, 3, h);
            sqlite3_bind_text(st, 4, label, -1, SQLITE_TRANSIENT);
            sqlite3_bind_double(st, 5, r->log_alpha[(size_t)l * r->n_heads + h]);
            sqlite3_bind_double(st, 6, r->gate[(size_t)l * r->n_heads + h]);
            rc = sqlite3_step(st);
            rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
        }
    sqlite3_finalize(st);
    return hs_commit_or_fail(s, rc, "saving a gate run", err);
}

enum hp_status hp_store_put_sweep_gate(struct hp_store *s, int64_t sweep_id, const char *study, int idx,
                                       double lambda, const char *run_key, struct hp_error *err)
{
    sqlite3_stmt *st;
    int rc = hs_exec(s, "BEGIN IMMEDIATE");
    if (rc == SQLITE_OK &&
        (rc = hs_prep(s,
                   "INSERT OR REPLACE INTO sweep_gates(sweep_id, study, idx, lambda, run_id) VALUES "
                   "(?1, ?2, ?3, ?4, (SELECT id FROM gate_runs WHERE key = ?5))",
                   &st)) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, sweep_id);
        sqlite3_bind_text(st, 2, study, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, idx);
        sqlite3_bind_double(st, 4, lambda);
        sqlite3_bind_text(st, 5, run_key, -1, SQLITE_STATIC);
        rc = hs_step_done(st);
    }
    if (rc == SQLITE_OK)
        rc = hs_touch_sweep(s, sweep_id);
    return hs_commit_or_fail(s, rc, "recording a gates study's run", err);
}

// --- a study's step, for an export -------------------------------------------

/* Text of column i of the current row, copied; false on OOM (NULL columns copy as ""). */
static bool column_dup(sqlite3_stmt *st, int i, char **out)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    *out = strdup(t ? (const char *)t : "");
    return *out != NULL;
}

enum hp_status hp_store_step_mask(const char *db_path, int64_t sweep_id, const char *study, int step, char **mask,
                                  char **model_path, char **model_digest, struct hp_error *err)
{
    *mask = *model_path = *model_digest = NULL;
    sqlite3 *db;
    enum hp_status s = hp_store_open_read(db_path, 5000, 0, &db, err);
    if (s != HP_OK)
        return s;
    sqlite3_stmt *st = NULL;
    if (sweep_id == 0) {
        s = hs_read_prep(db, db_path, err, &st,
                      "SELECT max(sweep_id) FROM sweep_jobs WHERE kind IN ('iterative', 'gates')");
        int r = s == HP_OK ? hp_store_read_step(db, db_path, err, st, &s) : -1;
        if (r == 1 && sqlite3_column_type(st, 0) != SQLITE_NULL)
            sweep_id = sqlite3_column_int64(st, 0);
        else if (r >= 0)
            s = hp_fail(err, HP_ERR_ARG,
                        "%s: no sweep has an iterative or gates study (whose steps or lambdas name heads to prune)",
                        db_path);
        sqlite3_finalize(st);
        st = NULL;
    }
    /* the sweep's iterative and gates studies and their last steps (a gates study's: its lambdas, in plan order) */
    char studies[512] = "";
    int n_studies = 0, last = -1;
    bool found = false, found_gates = false;
    if (s == HP_OK)
        s = hs_read_prep(db, db_path, err, &st,
                      "SELECT study, max(step), max(kind) FROM sweep_jobs WHERE sweep_id = ?1 AND kind IN "
                      "('iterative', 'gates') GROUP BY study ORDER BY study");
    if (s == HP_OK) {
        sqlite3_bind_int64(st, 1, sweep_id);
        int r;
        while ((r = hp_store_read_step(db, db_path, err, st, &s)) == 1) {
            const char *name = (const char *)sqlite3_column_text(st, 0);
            size_t u = strlen(studies);
            const bool gates = strcmp((const char *)sqlite3_column_text(st, 2), "gates") == 0;
            snprintf(studies + u, sizeof studies - u, "%s'%s' (%s 0-%d)", n_studies ? ", " : "", name ? name : "",
                     gates ? "lambdas" : "steps", sqlite3_column_int(st, 1));
            n_studies++;
            if (!study || (name && strcmp(name, study) == 0)) {
                found = true;
                found_gates = gates;
                last = sqlite3_column_int(st, 1);
            }
        }
        sqlite3_finalize(st);
        st = NULL;
    }
    if (s == HP_OK && n_studies == 0)
        s = hp_fail(err, HP_ERR_ARG,
                    "%s: sweep %lld has no iterative or gates study (whose steps or lambdas name heads to prune)",
                    db_path, (long long)sweep_id);
    else if (s == HP_OK && !study && n_studies > 1)
        s = hp_fail(err, HP_ERR_ARG, "%s: sweep %lld has %d iterative or gates studies: %s (choose one with --study)",
                    db_path, (long long)sweep_id, n_studies, studies);
    else if (s == HP_OK && !found)
        s = hp_fail(err, HP_ERR_ARG, "%s: sweep %lld has no iterative or gates study '%s' (it has %s)", db_path,
                    (long long)sweep_id, study, studies);
    else if (s == HP_OK && (step < 0 || step > last))
        s = hp_fail(err, HP_ERR_ARG, "%s: sweep %lld's study %s%s%s has no step %d (%s 0-%d)", db_path,
                    (long long)sweep_id, study ? "'" : "", study ? study : studies, study ? "'" : "", step,
                    found_gates ? "the study has lambdas" : "the study ran steps", last);
    if (s == HP_OK)
        s = hs_read_prep(db, db_path, err, &st,
                      "SELECT v.mask_text, m.path, m.digest FROM sweep_jobs j JOIN variants v ON v.id = j.variant_id "
                      "JOIN models m ON m.id = v.model_id WHERE j.sweep_id = ?1 AND j.kind IN ('iterative', "
                      "'gates') AND j.step = ?2 AND (?3 IS NULL OR j.study = ?3) LIMIT 1");
    if (s == HP_OK) {
        sqlite3_bind_int64(st, 1, sweep_id);
        sqlite3_bind_int(st, 2, step);
        if (study)
            sqlite3_bind_text(st, 3, study, -1, SQLITE_STATIC);
        int r = hp_store_read_step(db, db_path, err, st, &s);
        if (r == 0)
            s = hp_fail(err, HP_ERR_FORMAT, "%s: sweep %lld lists step %d but holds no result for it", db_path,
                        (long long)sweep_id, step);
        else if (r == 1 && !(column_dup(st, 0, mask) && column_dup(st, 1, model_path) && column_dup(st, 2, model_digest)))
            s = hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", db_path);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (s != HP_OK) {
        free(*mask);
        free(*model_path);
        free(*model_digest);
        *mask = *model_path = *model_digest = NULL;
    }
    return s;
}
