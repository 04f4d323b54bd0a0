/* util_int.h -- small helpers shared by the engine's modules. */
#ifndef HP_UTIL_INT_H
#define HP_UTIL_INT_H

#include "headprune.h"

/* Format one line into err (may be NULL) and return st. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
enum hp_status hp_fail(struct hp_error *err, enum hp_status st, const char *fmt, ...);

#endif
