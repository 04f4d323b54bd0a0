/*
 * slurm.c -- a plan's sweep as Slurm jobs: a job array of shards, each into
 * a database of its own, and a merge job after it.
 *
 * The sweep is already shardable (`run --shard K/N`, jobs with ord % N ==
 * K-1; iterative and gradient studies in shard 1) and its results content-
 * addressed (`merge` adds what a database lacks). So the array's task K
 * runs shard K/N into dir/shard-K-of-N.db with as many threads as Slurm
 * gave it CPUs, then writes its exit status to dir/shard-K-of-N.status;
 * the merge job, submitted with --dependency=afterany on the array, merges
 * the shards whose status is 0 and names the others with the command that
 * re-runs them (a re-run shard resumes from its database).
 *
 * Invariants: never one SQLite database shared by tasks (file locking over
 * a network file system cannot be trusted); every path in a script is
 * absolute and shell-quoted, and no path appears on an #SBATCH line (logs
 * are named relative to the folder sbatch is run from, the scripts'
 * folder), so any path but one with a newline works; user-given #SBATCH
 * values are quoted as sbatch's own parser reads them (single quotes, \'
 * and \\ inside: a backslash-escaped blank ends its word there).
 * Must not: print (the CLI says what was written and submitted); touch a
 * shard's database (the tasks and `merge` do).
 */
#define _POSIX_C_SOURCE 200809L
#include "slurm.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

// --- quoting ---------------------------------------------------------------------

bool hp_shell_quote(const char *s, char *out, size_t cap)
{
    size_t n = 0;
#define PUT(c)                                                                                                         \
    do {                                                                                                               \
        if (n + 1 >= cap)                                                                                              \
            return false;                                                                                              \
        out[n++] = (c);                                                                                                \
    } while (0)
    PUT('\'');
    for (; *s; s++) {
        if (*s == '\'') { /* close, an escaped quote, reopen */
            PUT('\'');
            PUT('\\');
            PUT('\'');
        }
        PUT(*s);
    }
    PUT('\'');
#undef PUT
    out[n] = '\0';
    return true;
}

/* s as one word of an #SBATCH line: sbatch's parser takes '...' with \ escaping the next character. */
static bool sbatch_quote(const char *s, char *out, size_t cap)
{
    size_t n = 0;
    if (cap < 3)
        return false;
    out[n++] = '\'';
    for (; *s; s++) {
        if (n + 4 >= cap)
            return false;
        if (*s == '\'' || *s == '\\')
            out[n++] = '\\';
        out[n++] = *s;
    }
    out[n++] = '\'';
    out[n] = '\0';
    return true;
}

// --- checks ------------------------------------------------------------------------

/* Digits only, at least one. */
static bool digits(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* n fields of digits separated by ':' (1 <= n <= max). */
static bool clock_fields(const char *s, int max)
{
    int fields = 0;
    for (;;) {
        const char *c = strchr(s, ':');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        if (!digits(s, len) || ++fields > max)
            return false;
        if (!c)
            return true;
        s = c + 1;
    }
}

bool hp_slurm_time_ok(const char *t)
{
    if (!strcmp(t, "UNLIMITED") || !strcmp(t, "INFINITE") || !strcmp(t, "unlimited") || !strcmp(t, "infinite"))
        return true;
    const char *dash = strchr(t, '-');
    if (dash) /* days-hours[:minutes[:seconds]] */
        return digits(t, (size_t)(dash - t)) && clock_fields(dash + 1, 3);
    return clock_fields(t, 3); /* minutes, minutes:seconds, hours:minutes:seconds */
}

// --- paths ---------------------------------------------------------------------------

enum hp_status hp_slurm_paths_for(const char *db, struct hp_slurm_paths *p, struct hp_error *err)
{
    size_t n = strlen(db);
    if (n > 3 && !strcmp(db + n - 3, ".db"))
        n -= 3;
    int a = snprintf(p->dir, sizeof p->dir, "%.*s.slurm", (int)n, db);
    int b = snprintf(p->shards, sizeof p->shards, "%s/shards.sbatch", p->dir);
    int c = snprintf(p->merge, sizeof p->merge, "%s/merge.sbatch", p->dir);
    if (a < 0 || b < 0 || c < 0 || (size_t)a >= sizeof p->dir || (size_t)b >= sizeof p->shards ||
        (size_t)c >= sizeof p->merge)
        return hp_fail(err, HP_ERR_ARG, "%s: path too long for the scripts' folder beside it", db);
    return HP_OK;
}

// --- writing the scripts -------------------------------------------------------------

/* A growing string; a failed allocation is remembered and reported once, at the end. */
struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
};

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void sb_add(struct sbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap ? b->cap : 4096);
        while (cap <= b->n + (size_t)k)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* Write text to path whole or not at all (a temporary file beside it, renamed), executable. */
static enum hp_status write_whole(const char *path, const char *text, size_t n, struct hp_error *err)
{
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return hp_fail(err, HP_ERR_IO, "%s: cannot write (%s)", path, hp_strerror(errno));
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int e = errno;
    bool ok = done == n && fchmod(fd, 0755) == 0;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (ok && rename(tmp, path) == 0)
        return HP_OK;
    if (ok)
        e = errno;
    unlink(tmp);
    return hp_fail(err, HP_ERR_IO, "%s: cannot write (%s)", path, hp_strerror(e));
}

/* mkdir that accepts a folder already there. */
static enum hp_status make_dir(const char *path, const char *hint, struct hp_error *err)
{
    if (mkdir(path, 0777) == 0 || errno == EEXIST) {
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            return HP_OK;
        return hp_fail(err, HP_ERR_IO, "%s: exists and is not a folder (%s)", path, hint);
    }
    return hp_fail(err, HP_ERR_IO, "%s: cannot make the folder (%s; %s)", path, hp_strerror(errno), hint);
}

/* The #SBATCH lines both scripts share: partition, time, the user's own options (check_job made sure each fits q). */
static void common_directives(struct sbuf *b, const struct hp_slurm_job *j, char *q, size_t cap)
{
    if (j->partition && sbatch_quote(j->partition, q, cap))
        sb_add(b, "#SBATCH --partition=%s\n", q);
    if (j->time && sbatch_quote(j->time, q, cap))
        sb_add(b, "#SBATCH --time=%s\n", q);
    for (int i = 0; i < j->n_sbatch_args; i++)
        if (sbatch_quote(j->sbatch_args[i], q, cap))
            sb_add(b, "#SBATCH %s\n", q);
}

/* Every value that goes into a script, checked: absolute paths, no newline, each fits when quoted. */
static enum hp_status check_job(const struct hp_slurm_job *j, struct hp_error *err)
{
    const char *paths[] = {j->headprune, j->plan, j->db};
    const char *what[] = {"the headprune binary", "the plan", "the database"};
    for (int i = 0; i < 3; i++) {
        if (!paths[i] || paths[i][0] != '/')
            return hp_fail(err, HP_ERR_ARG, "%s: %s must be an absolute path (the tasks run in other folders)",
                           paths[i] ? paths[i] : "(none)", what[i]);
        if (strchr(paths[i], '\n'))
            return hp_fail(err, HP_ERR_ARG, "%s: a path with a newline cannot be written into a job script "
                           "(rename it)", what[i]);
    }
    if (j->shards < 1 || j->cpus_per_task < 1)
        return hp_fail(err, HP_ERR_ARG, "shards and CPUs per task must be at least 1");
    const char *vals[2] = {j->partition, j->time};
    const char *names[2] = {"--partition", "--time"};
    for (int i = 0; i < 2; i++)
        if (vals[i] && (!vals[i][0] || strchr(vals[i], '\n') || strlen(vals[i]) >= PATH_MAX))
            return hp_fail(err, HP_ERR_ARG, "%s: empty, too long or with a newline (give a value for one #SBATCH line)",
                           names[i]);
    if (j->time && !hp_slurm_time_ok(j->time))
        return hp_fail(err, HP_ERR_ARG, "--time %s: not a Slurm time (minutes, H:M:S, or D-H:M:S, e.g. 2:00:00)",
                       j->time);
    for (int i = 0; i < j->n_sbatch_args; i++) {
        const char *a = j->sbatch_args[i];
        if (a[0] != '-' || strchr(a, '\n') || strlen(a) >= PATH_MAX)
            return hp_fail(err, HP_ERR_ARG, "--sbatch-arg '%s': not one sbatch option (give each as --name=value, "
                           "e.g. --sbatch-arg=--mem=8G)", a);
    }
    return HP_OK;
}

enum hp_status hp_slurm_write(const struct hp_slurm_job *j, const struct hp_slurm_paths *p, struct hp_error *err)
{
    enum hp_status st = check_job(j, err);
    if (st != HP_OK)
        return st;
    char logs[PATH_MAX + 8];
    snprintf(logs, sizeof logs, "%s/logs", p->dir);
    st = make_dir(p->dir, "the folder of --db must exist and be writable", err);
    if (st == HP_OK)
        st = make_dir(logs, "the scripts' folder must be writable", err);
    if (st != HP_OK)
        return st;

    /* each value quoted once, used in both scripts; a quoted path is at most 4x + 2 long */
    const size_t cap = 4 * PATH_MAX + 8;
    char *hp_q = malloc(cap), *plan_q = malloc(cap), *dir_q = malloc(cap), *db_q = malloc(cap), *q = malloc(cap);
    struct sbuf a = {0}, m = {0};
    if (!hp_q || !plan_q || !dir_q || !db_q || !q) {
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
        goto out;
    }
    hp_shell_quote(j->headprune, hp_q, cap);
    hp_shell_quote(j->plan, plan_q, cap);
    hp_shell_quote(p->dir, dir_q, cap);
    hp_shell_quote(j->db, db_q, cap);
    const int n = j->shards;

    // the job array: one task per shard
    sb_add(&a, "#!/bin/bash\n"
               "# headprune slurm: plan %s as a Slurm job array of %d task%s.\n"
               "#\n"
               "# Task K runs shard K of %d of the plan's jobs (`headprune run --shard K/%d`) into a\n"
               "# database of its own in this folder, shard-K-of-%d.db, with one thread per CPU\n"
               "# Slurm allocates it. Each result is written as its batch ends, and a task run\n"
               "# again resumes: the jobs its database already has are skipped.\n",
           j->name, n, n == 1 ? "" : "s", n, n, n);
    if (j->sequential)
        sb_add(&a, "# Shard 1 also runs the plan's iterative, gradient, gates and roles studies, after its\n"
                   "# share of the other jobs: each of their steps depends on the results of the steps before.\n");
    sb_add(&a, "# A task ends by writing its exit status to shard-K-of-%d.status, from which\n"
               "# merge.sbatch tells the shards that finished from those that did not.\n"
               "#\n"
               "# Written by `headprune slurm`; submitted from this folder (logs go to logs/):\n"
               "#   cd %s && sbatch shards.sbatch\n"
               "# To re-run shards 2 and 4, say (their finished jobs are skipped), and merge again:\n"
               "#   cd %s && jid=$(sbatch --parsable --array=2,4 shards.sbatch) && sbatch --dependency=afterany:${jid%%%%;*} merge.sbatch\n"
               "#SBATCH --job-name=hp-%s\n"
               "#SBATCH --array=1-%d\n"
               "#SBATCH --cpus-per-task=%d\n"
               "#SBATCH --output=logs/shard-%%a-of-%d.%%A.out\n",
           n, dir_q, dir_q, j->name, n, j->cpus_per_task, n);
    common_directives(&a, j, q, cap);
    sb_add(&a, "set -u\n"
               "headprune=%s\n"
               "plan=%s\n"
               "dir=%s\n"
               "n=%d\n"
               "k=${SLURM_ARRAY_TASK_ID:?is not set: submit this script with sbatch, which runs it as a task of a job array}\n"
               "rm -f \"$dir/shard-$k-of-$n.status\"\n"
               "\"$headprune\" run \"$plan\" --shard \"$k/$n\" --db \"$dir/shard-$k-of-$n.db\" --threads \"${SLURM_CPUS_PER_TASK:-1}\"\n"
               "rc=$?\n"
               "echo \"$rc\" >\"$dir/shard-$k-of-$n.status\"\n"
               "exit \"$rc\"\n",
           hp_q, plan_q, dir_q, n);

    // the merge: after the array, however its tasks ended
    sb_add(&m, "#!/bin/bash\n"
               "# headprune slurm: the merge of plan %s's %d shard%s, run after the job array of\n"
               "# shards.sbatch however its tasks ended (--dependency=afterany). It merges the\n"
               "# shards that finished (status file 0) into the database below with `headprune\n"
               "# merge` (re-runnable: no result twice); when some did not finish, it names them,\n"
               "# prints the command that re-runs them and this merge again, and exits 1.\n"
               "# A re-run shard resumes from its database.\n"
               "#\n"
               "# Written by `headprune slurm`; submitted from this folder:\n"
               "#   cd %s && sbatch --dependency=afterany:ARRAY_JOB_ID merge.sbatch\n"
               "#SBATCH --job-name=hp-%s-merge\n"
               "#SBATCH --cpus-per-task=1\n"
               "#SBATCH --output=logs/merge.%%j.out\n",
           j->name, n, n == 1 ? "" : "s", dir_q, j->name);
    common_directives(&m, j, q, cap);
    sb_add(&m, "set -u\n"
               "headprune=%s\n"
               "dir=%s\n"
               "out=%s\n"
               "n=%d\n"
               "finished=()\n"
               "failed=()\n"
               "for ((k = 1; k <= n; k++)); do\n"
               "    if [ \"$(cat \"$dir/shard-$k-of-$n.status\" 2>/dev/null)\" = 0 ]; then\n"
               "        finished+=(\"$dir/shard-$k-of-$n.db\")\n"
               "    else\n"
               "        failed+=(\"$k\")\n"
               "    fi\n"
               "done\n"
               "if [ \"${#finished[@]}\" -gt 0 ]; then\n"
               "    \"$headprune\" merge \"$out\" \"${finished[@]}\" || exit 1\n"
               "fi\n"
               "if [ \"${#failed[@]}\" -gt 0 ]; then\n"
               "    list=$(IFS=,; echo \"${failed[*]}\")\n"
               "    shards=shards\n"
               "    [ \"${#failed[@]}\" -eq 1 ] && shards=shard\n"
               "    echo \"headprune: $shards $list of $n did not finish (see $dir/logs/); $out has the results of the "
               "${#finished[@]} that did. Re-run them (each resumes from its database) and merge again with:\" >&2\n"
               "    printf '  cd %%q && jid=$(sbatch --parsable --array=%%s shards.sbatch) && sbatch "
               "--dependency=afterany:${jid%%%%%%%%;*} merge.sbatch\\n' \"$dir\" \"$list\" >&2\n"
               "    exit 1\n"
               "fi\n"
               "printf 'headprune: all %%d shards finished and are merged into %%s (headprune query heads --db %%q)\\n' \\\n"
               "    \"$n\" \"$out\" \"$out\"\n",
           hp_q, dir_q, db_q, n);

    if (a.oom || m.oom)
        st = hp_fail(err, HP_ERR_NOMEM, "out of memory");
    if (st == HP_OK)
        st = write_whole(p->shards, a.s, a.n, err);
    if (st == HP_OK)
        st = write_whole(p->merge, m.s, m.n, err);
out:
    free(a.s), free(m.s);
    free(hp_q), free(plan_q), free(dir_q), free(db_q), free(q);
    return st;
}

enum hp_status hp_slurm_clear_status(const struct hp_slurm_paths *p, int n, struct hp_error *err)
{
    for (int k = 1; k <= n; k++) {
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/shard-%d-of-%d.status", p->dir, k, n);
        if (unlink(path) != 0 && errno != ENOENT)
            return hp_fail(err, HP_ERR_IO, "%s: cannot remove an earlier submission's status (%s)", path,
                           hp_strerror(errno));
    }
    return HP_OK;
}

// --- submitting ------------------------------------------------------------------------

/* Append what fd has to *buf (up to cap - 1 bytes kept); false at end of file. */
static bool drain(int fd, char *buf, size_t cap, size_t *len)
{
    char tmp[4096];
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR)
        return true;
    if (r <= 0)
        return false;
    size_t keep = (size_t)r;
    if (*len + keep > cap - 1)
        keep = cap - 1 - *len;
    memcpy(buf + *len, tmp, keep);
    *len += keep;
    buf[*len] = '\0';
    return true;
}

/*
 * sbatch's output on one line, into out: its lines joined with "; ", each
 * without sbatch's own "sbatch: error: " (or "sbatch: ") prefix, which our
 * message already names; blanks within a line kept, none at either end.
 */
static void one_line(const char *r, char *out, size_t cap)
{
    size_t w = 0;
    while (*r) {
        while (*r && isspace((unsigned char)*r)) /* blank lines and leading blanks */
            r++;
        if (!*r)
            break;
        if (!strncmp(r, "sbatch: error: ", 15))
            r += 15;
        else if (!strncmp(r, "sbatch: ", 8))
            r += 8;
        if (w > 0 && w + 2 < cap) {
            out[w++] = ';';
            out[w++] = ' ';
        }
        size_t line_end = w;
        for (; *r && *r != '\n'; r++) {
            if (w + 1 < cap)
                out[w++] = isspace((unsigned char)*r) ? ' ' : *r;
            if (!isspace((unsigned char)*r))
                line_end = w;
        }
        w = line_end; /* trailing blanks dropped */
    }
    out[w] = '\0';
}

enum hp_status hp_slurm_submit(const char *dir, const char *script, const char *after, char *jobid, size_t cap,
                               struct hp_error *err)
{
    char dep[96] = "";
    if (after)
        snprintf(dep, sizeof dep, "--dependency=afterany:%s", after);
    const char *argv[] = {"sbatch", "--parsable", after ? dep : script, after ? script : NULL, NULL};
    int out[2] = {-1, -1}, errp[2] = {-1, -1}, exe[2] = {-1, -1};
    if (pipe(out) || pipe(errp) || pipe(exe) || fcntl(exe[1], F_SETFD, FD_CLOEXEC)) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            if (out[i] >= 0) close(out[i]);
            if (errp[i] >= 0) close(errp[i]);
            if (exe[i] >= 0) close(exe[i]);
        }
        return hp_fail(err, HP_ERR_IO, "sbatch: cannot start (%s)", hp_strerror(e));
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* the child: stdin from /dev/null, the pipes as stdout and stderr; on a failed exec,
         * errno through the close-on-exec pipe (its closing by exec says the exec worked) */
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(out[1], 1);
        dup2(errp[1], 2);
        close(out[0]), close(errp[0]), close(exe[0]);
        int fail[2] = {1, 0}; /* {1, errno}: entering dir failed; {2, errno}: the exec */
        if (chdir(dir) != 0)
            fail[1] = errno;
        else {
            execvp("sbatch", (char *const *)argv);
            fail[0] = 2, fail[1] = errno;
        }
        ssize_t w = write(exe[1], fail, sizeof fail);
        (void)w;
        _exit(127);
    }
    close(out[1]), close(errp[1]), close(exe[1]);
    if (pid < 0) {
        int e = errno;
        close(out[0]), close(errp[0]), close(exe[0]);
        return hp_fail(err, HP_ERR_IO, "sbatch: cannot start (%s)", hp_strerror(e));
    }
    char so[512] = "", se[2048] = "";
    size_t no = 0, ne = 0;
    struct pollfd pf[2] = {{out[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++)
            if (pf[i].fd >= 0 && (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                !drain(pf[i].fd, i ? se : so, i ? sizeof se : sizeof so, i ? &ne : &no)) {
                close(pf[i].fd);
                pf[i].fd = -1;
                open_fds--;
            }
    }
    for (int i = 0; i < 2; i++)
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    int fail[2] = {0, 0};
    ssize_t got = read(exe[0], fail, sizeof fail);
    close(exe[0]);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
    }
    if (got == (ssize_t)sizeof fail && fail[0] == 1)
        return hp_fail(err, HP_ERR_IO, "%s: cannot enter the scripts' folder to submit from it (%s)", dir,
                       hp_strerror(fail[1]));
    if (got == (ssize_t)sizeof fail && fail[1] == ENOENT)
        return hp_fail(err, HP_ERR_IO, "sbatch: not found on PATH (submit from a machine with the Slurm client, "
                       "a login node; --dry-run writes the scripts without submitting)");
    if (got == (ssize_t)sizeof fail)
        return hp_fail(err, HP_ERR_IO, "sbatch: cannot run it (%s)", hp_strerror(fail[1]));
    char msg[sizeof se + 64];
    one_line(se, msg, sizeof msg);
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
        char how[48];
        if (WIFEXITED(wst))
            snprintf(how, sizeof how, "exit %d", WEXITSTATUS(wst));
        else
            snprintf(how, sizeof how, "killed by signal %d", WIFSIGNALED(wst) ? WTERMSIG(wst) : 0);
        return hp_fail(err, HP_ERR_IO, "sbatch %s: %s (%s; the scripts are in %s)", script,
                       msg[0] ? msg : "failed, with nothing on stderr", how, dir);
    }
    /* --parsable prints "jobid" or "jobid;cluster" */
    char id[sizeof so + 64];
    one_line(so, id, sizeof id);
    size_t idlen = strcspn(id, ";");
    if (!digits(id, idlen) || idlen + 1 > cap)
        return hp_fail(err, HP_ERR_FORMAT, "sbatch %s: printed '%s' where a job id was expected (%s)", script, id,
                       msg[0] ? msg : "nothing on stderr");
    memcpy(jobid, id, idlen);
    jobid[idlen] = '\0';
    return HP_OK;
}
