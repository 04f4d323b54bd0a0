/*
 * roles.h -- head roles below the public entry (engine/analysis/roles.c): the
 * probe, its size, and the per-sequence reduction of one head's attention,
 * for the sweep (the probe's size names a result) and for tests (hand-worked
 * attention matrices, the probe against the Python reference's).
 */
#ifndef HP_ROLES_H
#define HP_ROLES_H

#include "headprune.h"

/* The most probe sequences: far more than a probe needs, far below any overflow. */
#define HP_ROLES_PROBE_MAX_SEQS (1 << 20)

/*
 * The probe size hp_roles_compute takes for a model under o (NULL: the
 * defaults): probe_seqs as given, else HP_ROLES_PROBE_SEQS; probe_len as
 * given, else HP_ROLES_PROBE_LEN cut to n_ctx / 2 and n_vocab. A length
 * below HP_ROLES_PROBE_MIN_LEN, over n_ctx / 2 (the probe is 2 len tokens)
 * or over n_vocab (a half's ids are distinct) is an HP_ERR_ARG saying which
 * limit (the caller names the file or plan); so is a count below 1.
 */
enum hp_status hp_roles_probe_size(const struct hp_model_info *in, const struct hp_roles_opts *o, int *seqs,
                                   int *len, struct hp_error *err);

/*
 * The probe's ids: n_seqs rows of 2 len tokens, row-major (n_seqs, 2 len).
 * Each row's first half is len distinct ids drawn uniformly from [0,
 * n_vocab) by a partial Fisher-Yates shuffle of 0..n_vocab-1 (restarted from
 * the identity for every row), its random numbers splitmix64's from seed,
 * one stream for all rows, each reduced to [0, n) by rejection (no modulo
 * bias); the second half repeats the first. n_vocab >= len. perm: n_vocab
 * ints of scratch.
 */
void hp_roles_probe(int n_vocab, int n_seqs, int len, uint64_t seed, int32_t *perm, int32_t *ids);

/* A head's sums over one sequence: the fields, then the offsets key - query = delta at HP_RS_OFF + delta + T - 1. */
enum { HP_RS_PREV, HP_RS_DUP, HP_RS_FIRST, HP_RS_RARE, HP_RS_ENT, HP_RS_SEP, HP_RS_OFF };

/* Width of those sums for sequences of T tokens. */
static inline int hp_roles_seq_width(int T)
{
    return HP_RS_OFF + 2 * T - 1;
}

/* One sequence of the held-out set, as its reduction reads it. */
struct hp_roles_seq {
    int T;
    bool causal;
    const int32_t *ids;   /* (T) */
    const uint8_t *mask;  /* NULL or (T): 1 = a real token */
    int first;            /* the first real position */
    int32_t *prev_occ;    /* (T) the previous real position holding the same id, -1 when none */
    int32_t *next_occ;    /* (T) the next one, -1 when none */
    int32_t *rare;        /* (n_rare) real positions holding an id of the least data frequency in the sequence */
    int n_rare;
    int32_t sep;          /* the [SEP] id, -1 when the model has none */
    int32_t *seps;        /* (n_seps) real positions holding it */
    int n_seps;
};

/*
 * Fill q for the sequence ids (T), mask (NULL or (T)); prev_occ, next_occ,
 * rare and seps are the caller's, T each. freq (n_vocab): each id's count
 * over the real positions of the whole held-out set (NULL: no rare
 * positions); sep: the [SEP] id (-1: none); last: n_vocab ints of scratch,
 * all -1, left all -1.
 */
void hp_roles_seq_prepare(struct hp_roles_seq *q, const int32_t *ids, const uint8_t *mask, int T, bool causal,
                          const int64_t *freq, int32_t sep, int32_t *last);

/* Add one head's attention p (T, T) on the sequence to acc (hp_roles_seq_width(T)), as docs/roles.md defines. */
void hp_roles_seq_reduce(const struct hp_roles_seq *q, const float *p, double *acc);

/* Add the sequence's queries to each count: every score's, rare's being n_queries (encoders). */
void hp_roles_seq_count(const struct hp_roles_seq *q, int64_t *n_queries, int64_t *n_prev, int64_t *n_dup,
                        int64_t *n_first, int64_t *n_sep);

/*
 * The model's [SEP] id into *id: config.json's sep_token_id, else the id of
 * "[SEP]" in the directory's tokenizer (hp_tokenizer_open; none, or one it
 * cannot read: no [SEP]); -1 when neither. A sep_token_id that is no id of
 * the model is an HP_ERR_FORMAT naming config.json.
 */
enum hp_status hp_roles_sep_id(const struct hp_model *m, int32_t *id, struct hp_error *err);

#endif
