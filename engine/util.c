/* util.c -- error formatting, whole-file reading, the clock and index-range hints shared by the engine's modules. */
#define _POSIX_C_SOURCE 200809L
#include "util_int.h"

#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

enum hp_status hp_read_text(const char *path, size_t max_bytes, enum hp_status too_big, const char *what,
                            char **out, size_t *len, struct hp_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    /* fopen takes a directory and the first read fails with a bare EISDIR;
     * say what is wrong. (Pipes and other streams are read to their end.) */
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return hp_fail(err, HP_ERR_IO, "%s: is a directory, not a file (give a file)", path);
    }
    /* read up to one byte past the limit, to tell "at the limit" from "over" */
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    enum hp_status st = HP_OK;
    while (buf && st == HP_OK) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (ferror(f))
            st = hp_fail(err, HP_ERR_IO, "%s: cannot read (%s)", path, strerror(errno));
        else if (n > max_bytes)
            st = hp_fail(err, too_big, "%s: over %zu bytes, too large for %s", path, max_bytes, what);
        else if (feof(f))
            break;
        else if (n == cap - 1) {
            char *p = realloc(buf, cap * 2);
            if (!p)
                free(buf);
            buf = p;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf)
        return hp_fail(err, HP_ERR_NOMEM, "%s: out of memory", path);
    if (st != HP_OK) {
        free(buf);
        return st;
    }
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return HP_OK;
}

void hp_prefault(void *p, size_t bytes)
{
    const size_t page = 4096; /* the smallest page: a larger one is touched more than once, harmlessly */
    volatile char *c = p;
    const long n = (long)(bytes / page);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        c[(size_t)i * page] = 0;
}

double hp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void hp_range_text(char *buf, size_t cap, const char *many, const char *one, int n)
{
    if (n == 1)
        snprintf(buf, cap, "only %s 0", one);
    else
        snprintf(buf, cap, "%s 0-%d", many, n - 1);
}
