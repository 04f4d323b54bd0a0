/*
 * fuzz_common.h -- what every libFuzzer harness under tests/fuzz/ shares.
 *
 * Harnesses are built by scripts/fuzz.sh with the engine sources compiled in
 * (ASan + UBSan + libFuzzer). Each keeps its time and memory bounded by
 * refusing inputs over its own size limit, and frees everything it made: a
 * leak is a finding. Files a harness must write go to one private scratch
 * folder made at start-up (and removed at exit), never the repository.
 * HP_FUZZ_ROOT, defined by the build, is the repository (for fixtures).
 */
#ifndef HP_FUZZ_COMMON_H
#define HP_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HP_FUZZ_ROOT
#error "HP_FUZZ_ROOT must name the repository (scripts/fuzz.sh defines it)"
#endif

/* A scratch folder for this process. */
static char fz_dir[256];

__attribute__((unused)) static void fz_rm_rf(void)
{
    if (!fz_dir[0])
        return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", fz_dir);
}

__attribute__((unused)) static const char *fz_scratch(void)
{
    if (fz_dir[0])
        return fz_dir;
    const char *tmp = getenv("TMPDIR");
    snprintf(fz_dir, sizeof fz_dir, "%s/hp-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fz_dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fz_rm_rf);
    return fz_dir;
}

/* Write n bytes to path (truncating); abort on failure: the harness is broken, not the input. */
__attribute__((unused)) static void fz_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* A NUL-terminated copy of n bytes (the caller frees it). */
__attribute__((unused)) static char *fz_strndup(const uint8_t *data, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, data, n);
    s[n] = 0;
    return s;
}

/* A finding the sanitizers cannot see: say what and stop, so libFuzzer saves the input. */
#define FZ_CHECK(cond, ...)                                          \
    do {                                                             \
        if (!(cond)) {                                               \
            fprintf(stderr, "fuzz check failed: %s: ", #cond);       \
            fprintf(stderr, __VA_ARGS__);                            \
            fprintf(stderr, "\n");                                   \
            abort();                                                 \
        }                                                            \
    } while (0)

/* The error message of a failed call must be one line naming something. */
#define FZ_CHECK_ERR(err)                                                              \
    FZ_CHECK((err).msg[0] && !strchr((err).msg, '\n'), "bad error message '%s'", (err).msg)

#endif
