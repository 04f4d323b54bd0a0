/*
 * status.c -- names of enum hp_status values, for messages and the store.
 *
 * The names are stable: they may be written to result files and compared
 * by scripts, so change them only with a version bump.
 */
#include "headprune.h"

const char *hp_status_name(enum hp_status st)
{
    switch (st) {
    case HP_OK: return "ok";
    case HP_ERR_IO: return "io";
    case HP_ERR_FORMAT: return "format";
    case HP_ERR_SHAPE: return "shape";
    case HP_ERR_NOMEM: return "nomem";
    case HP_ERR_ARG: return "arg";
    case HP_ERR_UNSUPPORTED: return "unsupported";
    case HP_ERR_SQL: return "sql";
    case HP_ERR_PLAN: return "plan";
    }
    return "unknown"; // a value cast from outside the enum
}
