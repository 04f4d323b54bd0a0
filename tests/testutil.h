/* testutil.h -- small file helpers shared by the Criterion tests. */
#ifndef HP_TESTUTIL_H
#define HP_TESTUTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

/* Whole file, NUL-terminated; *n (may be NULL) gets its length. Fails the test if unreadable. */
static inline char *tu_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(len + 1);
    cr_assert(fread(s, 1, len, f) == len, "short read of %s", path);
    s[len] = 0;
    fclose(f);
    if (n)
        *n = len;
    return s;
}

static inline void tu_spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert(fwrite(p, 1, n, f) == n);
    fclose(f);
}

#endif
