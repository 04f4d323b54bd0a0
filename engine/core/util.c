/* util.c -- error formatting, whole-file reading, the clock and index-range hints shared by the engine's modules. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <stdarg.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/*
 * A message longer than the buffer loses its middle, not its end: messages
 * read "path: what is wrong (hint)", and a path may be thousands of bytes
 * long, so cutting the tail would keep the path and lose the reason. The cut
 * falls between UTF-8 characters and is marked " ... ".
 */
static void fit_message(char *dst, size_t cap, const char *src, size_t n)
{
    static const char mark[] = " ... ";
    size_t keep = cap - 1 - (sizeof mark - 1), head = keep * 2 / 5, tail = keep - head;
    while (head > 0 && ((unsigned char)src[head] & 0xC0) == 0x80)
        head--; /* src[head] starts a character: the head ends before it */
    size_t from = n - tail;
    while (from < n && ((unsigned char)src[from] & 0xC0) == 0x80)
        from++;
    memcpy(dst, src, head);
    memcpy(dst + head, mark, sizeof mark - 1);
    memcpy(dst + head + sizeof mark - 1, src + from, n - from + 1);
}

enum hp_status hp_fail(struct hp_error *err, enum hp_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap, again;
        va_start(ap, fmt);
        va_copy(again, ap);
        int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        char *whole = n >= (int)sizeof err->msg ? malloc((size_t)n + 1) : NULL;
        if (whole) {
            vsnprintf(whole, (size_t)n + 1, fmt, again);
            fit_message(err->msg, sizeof err->msg, whole, (size_t)n);
            free(whole);
        }
        va_end(again);
        va_end(ap);
        /* one line only: a stray newline from file content would break it */
        for (char *c = err->msg; *c; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
    }
    return st;
}

enum hp_status hp_path_make(char **out, struct hp_error *err, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    *out = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (*out)
        vsnprintf(*out, (size_t)n + 1, fmt, again);
    va_end(again);
    return *out ? HP_OK : hp_fail(err, HP_ERR_NOMEM, "out of memory (making a file name)");
}

#define STR(x) #x
#define XSTR(x) STR(x)

const char *hp_strerror(int e)
{
    if (e == ENAMETOOLONG)
        return "path too long: the system takes " XSTR(PATH_MAX) " bytes in a path, its terminator included, and "
               XSTR(NAME_MAX) " in one name";
    return strerror(e);
}

enum hp_status hp_read_text(const char *path, size_t max_bytes, enum hp_status too_big, const char *what,
                            char **out, size_t *len, struct hp_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return hp_fail(err, HP_ERR_IO, "%s: cannot open (%s)", path, hp_strerror(errno));
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
            st = hp_fail(err, HP_ERR_IO, "%s: cannot read (%s)", path, hp_strerror(errno));
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
