/* data.h -- what data.c shares with text.c, and task.c's task rows (docs/tasks.md) that both feed. */
#ifndef HP_DATA_H
#define HP_DATA_H

#include "headprune.h"
#include "tokenizer.h"

/* A struct hp_data with arrays (n_seqs, seq_len) (labels, mask and types when
 * asked for); the caller has checked the sizes. path names it in errors. */
enum hp_status hp_data_alloc(const char *path, int n_seqs, int seq_len, bool labels, bool mask, bool types,
                             struct hp_data **out, struct hp_error *err);

/* Whether the file name's extension is ext (lower case, no dot), in any case. */
bool hp_path_has_ext(const char *path, const char *ext);

/* Whether s[0..n) holds only spaces, tabs, \r, \f and \v. */
bool hp_blank(const char *s, size_t n);

// --- task rows (task.c; docs/tasks.md) -----------------------------------------

struct cJSON;

/* One task row as read: its prompt (and corrupt prompt) ids, answer and wrong answer. */
struct hp_task_row {
    int line;        /* in the file, from 1 */
    int n;           /* tokens in the prompt (and in the corrupt prompt) */
    int32_t *prompt; /* (n) */
    int32_t *corrupt; /* NULL or (n) */
    int32_t answer, wrong;
};

/* Task rows gathered one by one: set path and seq_len (0: the longest row), zero the rest. */
struct hp_task_rows {
    const char *path;
    int seq_len;
    int n, cap, first_line;
    bool has_wrong, has_corrupt; /* as the first row: every row must agree */
    struct hp_task_row *row;     /* (n) */
};

/* Whether obj is a task row (has "prompt" or "prompt_ids"); whether it has a text field too. */
bool hp_task_row_is(const struct cJSON *obj);
bool hp_task_row_has_text(const struct cJSON *obj);

/* Parse and check the row obj on line, text fields tokenized with t (NULL: text is an error). */
enum hp_status hp_task_rows_add(struct hp_task_rows *r, const struct cJSON *obj, int line,
                                const struct hp_tokenizer *t, struct hp_error *err);

/* The rows' length: seq_len when given, else the longest prompt. */
int hp_task_rows_len(const struct hp_task_rows *r);

/* d (r->n rows of hp_task_rows_len, with a mask) filled from the rows, padded with pad, and d->task made. */
enum hp_status hp_task_rows_fill(const struct hp_task_rows *r, int32_t pad, struct hp_data *d, struct hp_error *err);
void hp_task_rows_free(struct hp_task_rows *r);

/* The rows as a struct hp_data with d->task (data.c: hp_data_alloc, then hp_task_rows_fill); r stays the
 * caller's. No rows is an error. */
enum hp_status hp_data_from_task_rows(const struct hp_task_rows *r, int32_t pad, struct hp_data **out,
                                      struct hp_error *err);

/* d->task for d's n_seqs and seq_len (wrong and corrupt when asked); HP_ERR_NOMEM leaves what was allocated
 * for hp_data_free. */
enum hp_status hp_task_alloc(struct hp_data *d, bool wrong, bool corrupt);
void hp_task_free(struct hp_task *k);

/* Exchange d's prompts (ids) and corrupt prompts (d->task->corrupt, which must be there) and flip
 * d->task->swapped: the data denoise runs on (hp_ablation_bind_data). Swapping twice restores d. */
void hp_task_swap(struct hp_data *d);

#endif
