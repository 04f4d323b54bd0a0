/*
 * store.h -- the results database (SQLite), as the sweep runner uses it.
 *
 * The store knows no tensors, plans or jobs: it is handed rows of plain
 * fields (strings and numbers: digests, names, paths, sizes, gates) and
 * metrics, and the caller says what ran them (kernel, threads). Every write is one BEGIN IMMEDIATE transaction, so a killed
 * process leaves either the whole result or none of it, and several local
 * workers can share one database (WAL mode, busy timeout).
 */
#ifndef HP_STORE_H
#define HP_STORE_H

#include "headprune.h"

#define HP_SCHEMA_VERSION 11

struct hp_store;
struct sqlite3;
struct sqlite3_stmt;

/*
 * Open a database named by a file path for SQLite, the one way every module
 * does it (store, merge, query). The path is never a URI: SQLite sees only a
 * "file:" URI this function builds from the percent-escaped path, with "./"
 * before a relative one, so ":memory:", "file:x.db?mode=memory" or "" name
 * files (or are refused) instead of selecting in-memory or temporary
 * databases. The path must be a regular file (or, when writing, absent with a
 * writable folder). Read-only opens create no -wal/-shm files of their own
 * where the folder is not writable and no writer is at work (immutable).
 * The connection has FTS3 tokenizers, extension loading and schema writes
 * (defensive mode) disabled. Destructor: sqlite3_close.
 */
enum hp_status hp_store_db_open(const char *path, bool write, struct sqlite3 **db, struct hp_error *err);

/* The URI under which path is opened read-only (as hp_store_db_open would): a fresh string (free() it), NULL
 * when out of memory. */
char *hp_store_ro_uri(const char *path);

/* Whether SQLite cannot open path because its name is too long for SQLite's files (*n: its length as SQLite
 * measures it, *max: SQLite's limit with the terminator): to say so when an open fails. */
bool hp_store_too_long(const char *path, size_t *n, int *max);

/*
 * Open a results database to read (queries): hp_store_db_open read-only, a
 * busy timeout of busy_ms (a sweep may be writing), PRAGMA query_only, no
 * attached databases, and the schema checked: an empty file, a foreign one or
 * one written by a newer headprune is an error saying so. Reading stops with
 * an error once `seconds` have passed since the opening (<= 0:
 * HP_READ_SECONDS): a hostile file's views, or SQL, that would run for ever.
 * *db is NULL on failure. Destructor: sqlite3_close.
 */
enum hp_status hp_store_open_read(const char *path, int busy_ms, double seconds, struct sqlite3 **db,
                                  struct hp_error *err);

/* A reader's time limit when none is given: long enough for any real sweep's queries. */
#define HP_READ_SECONDS 600.0

/* A reader's SQLite failure (rc) on db as one line naming the database: busy,
 * not a database, corrupt, unreadable without writing beside it, ... */
enum hp_status hp_store_read_fail(struct sqlite3 *db, const char *path, int rc, struct hp_error *err);

/* sqlite3_step on a reader's statement: 1 = a row, 0 = done, -1 = failed (*s and err set, as
 * hp_store_read_fail translates it). */
int hp_store_read_step(struct sqlite3 *db, const char *path, struct hp_error *err, struct sqlite3_stmt *st,
                       enum hp_status *s);

/*
 * Create the schema on db, or bring an older database's up to it: schema.sql's
 * tables, a column per metric in results and seq_results, and the views jobs,
 * baselines and effects made from the metric table (engine/core/metric.c). Within
 * the caller's transaction. An SQLite error code, else SQLITE_OK.
 */
int hp_store_schema(struct sqlite3 *db);

/* Open or create a results database. Destructor: hp_store_close. */
enum hp_status hp_store_open(const char *path, struct hp_store **out, struct hp_error *err);
void hp_store_close(struct hp_store *s);

/* A sweep and the plan, model and dataset rows it refers to (docs/database.md). */
struct hp_store_sweep_row {
    const char *plan_digest, *model_digest, *data_digest;
    const char *name;          /* sweeps.name, plans.name */
    const char *plan_path;     /* plans.path */
    const char *plan_text;     /* plans.text: the plan file as read */
    const char *ablation;      /* sweeps.ablation: "zero", "mean", "mean-pos" */
    const char *metric;        /* sweeps.metric, resolved against the model */
    const char *model_path;    /* models.path */
    const char *model_type;    /* models.model_type */
    int n_layers, n_heads, n_kv_heads, d_head;
    int64_t n_params;
    const uint8_t *pruned;     /* NULL or (n_layers, n_heads): the heads the checkpoint lacks (pruned_heads rows) */
    const char *data_path;     /* datasets.path */
    int n_seqs, seq_len;
};

/* Find or create the sweep (and its plan, model and dataset rows). */
enum hp_status hp_store_sweep(struct hp_store *s, const struct hp_store_sweep_row *d, int64_t *sweep_id,
                              struct hp_error *err);

/* The metrics a finished variant keeps, for ranking without re-running. */
struct hp_store_metrics {
    double value[HP_N_METRICS]; /* by enum hp_metric; NaN where not applicable */
};

/* Whether the variant with this key is finished; if so its metrics. */
enum hp_status hp_store_lookup(struct hp_store *s, const char *key, bool *found, struct hp_store_metrics *m,
                               struct hp_error *err);

/* One job of a sweep (a sweep_jobs row) and the variant it evaluates (a variants row). */
struct hp_store_job {
    int64_t sweep_id;
    int64_t ord;
    const char *study; /* the study's name */
    const char *kind;  /* sweep_jobs.kind: the study's kind, or e.g. "iterative-score" */
    int kv;            /* enum hp_unit_kind: units are heads (0), KV groups (1) or MLP blocks (2) */
    const char *label;
    int layer, unit, unit2; /* -1 = none (NULL in the row) */
    int step, sample, k;
    const char *key;   /* the variant's content address */
    const char *ablation;
    const char *mask_text;
    int n_layers, n_heads;
    const float *gate; /* (n_layers, n_heads), row-major: the mask's gates, 0 = ablated */
    const char *model_digest, *data_digest;
    bool one_position; /* the dead heads replaced only at position (variant_positions), else at every one */
    int position;
};

/* Record that a job of a sweep is the (already finished) variant `key`. */
enum hp_status hp_store_link(struct hp_store *s, const struct hp_store_job *j, struct hp_error *err);

/* Write a finished variant, its per-sequence values and its sweep link, atomically.
 * wall_s, threads and kernel say how it ran (results.wall_s, .threads, .kernel). */
enum hp_status hp_store_put(struct hp_store *s, const struct hp_store_job *j, const struct hp_metrics *mt,
                            double wall_s, int threads, const char *kernel, struct hp_error *err);

/* A patching study's position: the first row's token there on the prompt and the corrupt prompt (-1: none), and
 * their text (NULL: no tokenizer). */
struct hp_store_patch_token {
    int position;
    int32_t token, corrupt;
    const char *text, *corrupt_text;
};

/* The tokens of study's positions in a sweep (patch_tokens), replacing any recorded before. */
enum hp_status hp_store_put_patch_tokens(struct hp_store *s, int64_t sweep_id, const char *study,
                                         const struct hp_store_patch_token *t, int n, struct hp_error *err);

/* A gradient at some gates (a gradients row). */
struct hp_store_grad {
    const char *key;          /* its content address */
    const char *model_digest, *data_digest, *ablation, *mask_text;
    int n_layers, n_heads, n_seqs;
    double loss;
    double *grad, *atp;       /* (n_layers, n_heads) */
    double *seq_grad;         /* (n_seqs, n_layers, n_heads) */
    int from_layer;           /* 0: every gate's; l: only layers l on were taken (the arrays 0 below; the key says) */
    /* the MLP blocks' gates' (hp_evaluator_grad_units), stored after the heads' in each blob: NULL (not wanted,
     * not stored) or (n_layers), (n_layers), (n_seqs, n_layers) */
    double *mlp_grad, *mlp_atp, *mlp_seq_grad;
};

/*
 * The gradient with g->key: *found, and if so its loss and arrays into g's
 * (sized by g's shape; a stored shape that differs is an error). Wanting the
 * MLPs' (g->mlp_grad) and finding a row without them is not finding it: it is
 * made again, and hp_store_put_grad completes the row (its id kept).
 */
enum hp_status hp_store_get_grad(struct hp_store *s, struct hp_store_grad *g, bool *found, struct hp_error *err);

/* Store a gradient (one transaction; a copy already there is kept). wall_s, threads, kernel: how it ran. */
enum hp_status hp_store_put_grad(struct hp_store *s, const struct hp_store_grad *g, double wall_s, int threads,
                                 const char *kernel, struct hp_error *err);

/* One unit's score in a gradient study (a unit_scores row). */
struct hp_store_score {
    int layer, unit;
    const char *label;
    double score, raw;
};

/* Whose scores they are (unit_scores' columns but the rows'). */
struct hp_store_scores {
    int64_t sweep_id;
    const char *study, *kind;
    int kv; /* enum hp_unit_kind */
    int step;
    const char *normalize; /* importance, iterative: layer | none; else NULL */
    const char *estimator; /* attribution: hp_estimator_name's; else NULL */
    const char *base;      /* a scores study's mask: as canonical text ('' none), where its estimates start; else NULL */
    const char *grad_key;  /* the gradient they come from (integrated gradients: the last along the path) */
};

/*
 * Record a study's scores at one step in one transaction (re-recording the
 * same rows is harmless).
 */
enum hp_status hp_store_put_scores(struct hp_store *s, const struct hp_store_scores *of,
                                   const struct hp_store_score *rows, int n, struct hp_error *err);

/* A screen study's verdict (a screens row). */
struct hp_store_screen {
    int64_t sweep_id;
    const char *study;
    int kv; /* enum hp_unit_kind */
    int units, k;
    const char *estimator;
    int evaluated, audits, population, audited, missed_max;
    double confidence;
};
/* Record it (re-recording replaces it). */
enum hp_status hp_store_put_screen(struct hp_store *s, const struct hp_store_screen *v, struct hp_error *err);

/* A head-roles computation to store (a role_runs row and its head_roles rows). */
struct hp_store_roles {
    const char *key; /* its content address */
    const char *model_digest, *data_digest;
    const struct hp_roles *roles;
};

/* Whether the roles with this key are stored. */
enum hp_status hp_store_has_roles(struct hp_store *s, const char *key, bool *found, struct hp_error *err);

/* Store them, one transaction (a copy already there is kept). wall_s, threads, kernel: how they ran. */
enum hp_status hp_store_put_roles(struct hp_store *s, const struct hp_store_roles *r, double wall_s, int threads,
                                  const char *kernel, struct hp_error *err);

/* Record that the sweep's roles study is the stored roles with key (re-recording is harmless). */
enum hp_status hp_store_link_roles(struct hp_store *s, int64_t sweep_id, const char *study, const char *key,
                                   struct hp_error *err);
/* A gate training run (a gate_runs row): its identity, settings and state. */
struct hp_store_gate_run {
    const char *key;           /* its content address */
    const char *model_digest, *train_digest, *train_path;
    int train_seqs;
    const char *metric;        /* "loss", "kl", "cos" */
    double lambda, lr, beta, init;
    uint64_t seed;
    int steps, n_layers, n_heads;
    /* the state */
    int step;
    double objective, value, penalty; /* NaN before the first step */
    double *log_alpha, *adam_m, *adam_v; /* (n_layers, n_heads) */
    uint64_t rng[4];
    int n_kept;                /* finished: heads kept; -1 while training */
    const double *gate;        /* finished: (n_layers, n_heads) test-time gates (put only) */
    double wall_s;             /* seconds of training so far */
};

/*
 * The state of the run with r->key into r (step, objective, value, penalty,
 * the arrays, sized by r's shape, rng, n_kept, wall_s): *found says whether
 * it was there (a stored shape that differs is an error).
 */
enum hp_status hp_store_get_gate_run(struct hp_store *s, struct hp_store_gate_run *r, bool *found,
                                     struct hp_error *err);

/*
 * Save a run's state (created, or updated in place), and once finished
 * (n_kept >= 0) its gates, one gate_heads row a head, in one transaction. A
 * finished run already there is kept as it is. threads, kernel: how the
 * last steps ran.
 */
enum hp_status hp_store_put_gate_run(struct hp_store *s, const struct hp_store_gate_run *r, int threads,
                                     const char *kernel, struct hp_error *err);

/* Record that lambda (the idx-th of study's) of sweep_id is the finished run run_key. */
enum hp_status hp_store_put_sweep_gate(struct hp_store *s, int64_t sweep_id, const char *study, int idx,
                                       double lambda, const char *run_key, struct hp_error *err);

/*
 * Stored mean-ablation statistics of (model, data) under this engine's
 * numeric version. m gives the shape and the arrays to fill; *found says
 * whether they were there (a stored shape that differs is an error).
 */
enum hp_status hp_store_get_means(struct hp_store *s, const char *model_digest, const char *data_digest,
                                  struct hp_means *m, bool *found, struct hp_error *err);

/* Store them (one transaction; a copy already there is kept). */
enum hp_status hp_store_put_means(struct hp_store *s, const char *model_digest, const char *data_digest,
                                  const struct hp_means *m, struct hp_error *err);

#endif
