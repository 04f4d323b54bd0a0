/*
 * json.h -- the engine's one way into cJSON: every JSON text it reads
 * (config.json, tokenizer files, safetensors headers, .jsonl rows) is parsed
 * by hp_json_parse, which refuses what cJSON would read wrong.
 */
#ifndef HP_JSON_H
#define HP_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "headprune.h"

/*
 * Parse the JSON value at the start of text[0, len) (a NUL byte does not end
 * the text; what follows the value is the caller's to check). On HP_OK, *out
 * is the tree, freed with cJSON_Delete, or NULL when the text is not JSON:
 * the caller says so in its own words. *end (may be NULL) gets the byte just
 * past the value, or where cJSON stopped on a text that is not JSON.
 *
 * Fails with HP_ERR_FORMAT (*out NULL) when a string or key of the value
 * holds a NUL character (\u0000, or a raw 0 byte), which cJSON's strings,
 * NUL-terminated and without a length, would cut short; or a raw 0 byte
 * stands between the value's tokens. The message names the string as written:
 * "file:line: the string "a\u0000" holds a NUL character (...)". file names
 * the text; line is the line of text[0] in it, or 0 where lines mean nothing
 * (a safetensors header).
 */
enum hp_status hp_json_parse(const char *file, size_t line, const char *text, size_t len, const char **end,
                             cJSON **out, struct hp_error *err);

#endif
