/* data_int.h -- what data.c shares with text.c. */
#ifndef HP_DATA_INT_H
#define HP_DATA_INT_H

#include "headprune.h"
#include "tokenizer_int.h"

/* A struct hp_data with arrays (n_seqs, seq_len) (labels, mask and types when
 * asked for); the caller has checked the sizes. path names it in errors. */
enum hp_status hp_data_alloc(const char *path, int n_seqs, int seq_len, bool labels, bool mask, bool types,
                             struct hp_data **out, struct hp_error *err);

/* Whether the file name's extension is ext (lower case, no dot), in any case. */
bool hp_path_has_ext(const char *path, const char *ext);

/* Whether s[0..n) holds only spaces, tabs, \r, \f and \v. */
bool hp_blank(const char *s, size_t n);

#endif
