/* util.c -- error formatting shared by the engine's modules. */
#include "util_int.h"

#include <stdarg.h>
#include <stdio.h>

enum hp_status hp_fail(struct hp_error *err, enum hp_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* one line only: a stray newline from file content would break it */
        for (char *c = err->msg; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
    }
    return st;
}
