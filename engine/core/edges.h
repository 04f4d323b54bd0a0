/*
 * edges.h -- edges as mask items (engine/core/edges.c): what mask.c calls to
 * read, hold and write a mask's edges. The types and their order are
 * headprune.h's (struct hp_edge, hp_edge_cmp).
 */
#ifndef HP_EDGES_H
#define HP_EDGES_H

#include "headprune.h"

/* Append to m the edges item s[0..n) names ("SENDER>RECEIVER", whitespace trimmed); unsorted until
 * hp_edges_finish. An error names the item in one line. */
enum hp_status hp_edges_apply_item(const char *s, size_t n, const struct hp_model_info *info, struct hp_mask *m,
                                   struct hp_error *err);

/* m's edges sorted (hp_edge_cmp) and each once. */
void hp_edges_finish(struct hp_mask *m);

/* Room in m->edges for n edges (its room follows one rule, so a copy grows as the original does); false when
 * out of memory (m unchanged). */
bool hp_edges_reserve(struct hp_mask *m, int n);

/* "SENDER>RECEIVER" with a receiving head's channel ("0.1>2.3:q"). Returns what snprintf returns. */
int hp_edge_label(char *buf, size_t size, const struct hp_edge *e);

#endif
