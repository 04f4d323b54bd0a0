/* plan.h -- what engine/plan/plan.c offers beyond the public header (the study kinds' own: study/study.h). */
#ifndef HP_PLAN_H
#define HP_PLAN_H

#include <stddef.h>

#include "headprune.h"

/*
 * Parse a plan from text (len bytes; NUL bytes inside are the YAML parser's
 * to refuse) as if read from the file path, which names it in errors and
 * anchors its relative model and data paths. hp_plan_load reads the file and
 * calls this; the fuzz harness calls it directly. Destructor: hp_plan_free.
 */
enum hp_status hp_plan_parse(const char *path, const char *text, size_t len, struct hp_plan **out,
                             struct hp_error *err);

#endif
