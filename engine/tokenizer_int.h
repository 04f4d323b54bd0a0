/* tokenizer_int.h -- what the tokenizer tells the text loader (engine/tokenizer.c). */
#ifndef HP_TOKENIZER_INT_H
#define HP_TOKENIZER_INT_H

#include "headprune.h"

/* The id to put after each packed document when the tokenizer's template adds
 * no special tokens of its own (GPT-2's <|endoftext|>), else -1. */
int32_t hp_tokenizer_separator(const struct hp_tokenizer *t);

/* The padding id: [PAD], <pad>, or 0. Padded positions are masked anyway. */
int32_t hp_tokenizer_pad(const struct hp_tokenizer *t);

#endif
