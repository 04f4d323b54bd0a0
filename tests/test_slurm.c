/*
 * test_slurm.c -- `headprune slurm`: the scripts it writes and its answers to
 * bad input, without a Slurm (scripts/slurm-test.sh runs them on a real one).
 *
 *  - the #SBATCH lines, against hand-worked text: sbatch's own quoting of
 *    the user's values ('...' with \' and \\), everything before the first
 *    command (where sbatch stops reading directives);
 *  - the paths, read back by bash itself from the scripts, under a folder
 *    whose name has blanks, quotes and double quotes, with the binary
 *    copied there so its own path has them too;
 *  - the scripts run by bash as Slurm runs them (SLURM_ARRAY_TASK_ID and
 *    SLURM_CPUS_PER_TASK set per task; a task given 3 CPUs runs 3 threads):
 *    with one shard failing, the merge merges the others, names it,
 *    exits 1 and prints a re-run command whose folder bash enters; re-run,
 *    the merged database holds exactly what one process's run writes
 *    (every result, per-sequence value, job and gradient score);
 *  - bad input: each a clear error and a non-zero exit (usage mistakes 2,
 *    the rest 1 with one line on stderr), sbatch missing from PATH included.
 */
#define _DEFAULT_SOURCE
#include <criterion/criterion.h>

#include "testutil.h"
#include "slurm.h"
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[64], work[256], out[1 << 16], errs[1 << 14];

static void setup(void)
{
    tu_mkdtemp(tmp, sizeof tmp, "slurm");
    snprintf(work, sizeof work, "%s/a dir with 'quotes' and \"doubles\"", tmp);
    cr_assert_eq(mkdir(work, 0777), 0);
}

static void teardown(void)
{
    tu_rmrf(tmp);
}

TestSuite(slurm, .init = setup, .fini = teardown, .timeout = 300);

static void read_into(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    size_t r = fread(buf, 1, n - 1, f);
    buf[r] = 0;
    fclose(f);
}

/*
 * Run argv (argv[0] found on PATH) in folder cwd (NULL: the repository),
 * with env's "NAME=value" entries added (NULL-terminated list, may be NULL);
 * stdout and stderr into out and errs. No shell: paths go through as they are.
 */
static int runv(const char *cwd, const char *const *env, const char *const *argv)
{
    char o[128], e[128];
    snprintf(o, sizeof o, "%s/stdout", tmp);
    snprintf(e, sizeof e, "%s/stderr", tmp);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        char repo[PATH_MAX];
        snprintf(repo, sizeof repo, "%s/..", getenv("HP_TESTS"));
        if (chdir(cwd ? cwd : repo) != 0)
            _exit(126);
        int in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        freopen(o, "w", stdout);
        freopen(e, "w", stderr);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    read_into(o, out, sizeof out);
    read_into(e, errs, sizeof errs);
    cr_assert(WIFEXITED(st), "%s did not exit normally", argv[0]);
    return WEXITSTATUS(st);
}

static const char *hp(void)
{
    return getenv("HP_HEADPRUNE");
}

static void plan_path(char *buf, size_t n, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/plans/%s", getenv("HP_TESTS"), name);
    cr_assert(realpath(p, buf), "%s", p);
    (void)n;
}

/* Exit 1, exactly one line on stderr, "headprune: " first and words in it, nothing on stdout. */
static void expect_error_line(int rc, const char *words)
{
    cr_assert_eq(rc, 1, "exit %d, not 1 (stderr: %s)", rc, errs);
    cr_assert(strncmp(errs, "headprune: ", 11) == 0, "stderr: %s", errs);
    char *nl = strchr(errs, '\n');
    cr_assert(nl && nl[1] == '\0', "expected one line on stderr, got: %s", errs);
    cr_assert(strstr(errs, words), "stderr does not say '%s': %s", words, errs);
}

/* A usage mistake: exit 2, "headprune slurm: <msg>" first, nothing on stdout. */
static void expect_usage(int rc, const char *words)
{
    cr_assert_eq(rc, 2, "exit %d, not 2 (stderr: %s)", rc, errs);
    cr_assert(strncmp(errs, "headprune slurm: ", 17) == 0, "stderr: %s", errs);
    cr_assert(strstr(errs, words), "stderr does not say '%s': %s", words, errs);
    cr_assert_str_empty(out, "stdout: %s", out);
}

static bool has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

// --- the scripts, read ---------------------------------------------------------------

/* What bash makes of the script's lines NAME=... : printf'd one a line. */
static void bash_reads(const char *script, const char *names)
{
    char prog[512];
    snprintf(prog, sizeof prog,
             "eval \"$(grep -E '^(headprune|plan|dir|out|n)=' \"$1\")\" && for v in %s; do printf '%%s\\n' \"${!v}\"; done",
             names);
    const char *argv[] = {"bash", "-c", prog, "bash", script, NULL};
    cr_assert_eq(runv(NULL, NULL, argv), 0, "bash could not read %s: %s", script, errs);
}

Test(slurm, dry_run_writes_scripts_with_sbatch_quoting_and_absolute_paths)
{
    char plan[PATH_MAX], db[512], exe[PATH_MAX];
    plan_path(plan, sizeof plan, "sweep-small.yaml");
    snprintf(db, sizeof db, "%s/out.db", work);
    cr_assert(realpath(hp(), exe));
    const char *argv[] = {hp(), "slurm", plan, "--shards", "3", "--db", db, "--partition", "gpu",
                          "--time", "1-02:03:04", "--cpus-per-task", "3", "--sbatch-arg=--mem=8G",
                          "--sbatch-arg", "--comment=it's a \"test\" #1 \\o/", "--dry-run", NULL};
    cr_assert_eq(runv(NULL, NULL, argv), 0, "stderr: %s", errs);

    char dir[512], shards[600], merge[600], line[2048];
    snprintf(dir, sizeof dir, "%s/out.slurm", work);
    snprintf(shards, sizeof shards, "%s/shards.sbatch", dir);
    snprintf(merge, sizeof merge, "%s/merge.sbatch", dir);
    snprintf(line, sizeof line, "wrote %s: a job array of 3 tasks, task K runs shard K of 3 into shard-K-of-3.db with 3 CPUs",
             shards);
    cr_assert(has_line(out, line), "stdout lacks '%s':\n%s", line, out);
    /* the folder quoted by hand: '...' with each ' as '\'' */
    snprintf(line, sizeof line, "  cd '%s/a dir with '\\''quotes'\\'' and \"doubles\"/out.slurm' && sbatch --parsable shards.sbatch",
             tmp);
    cr_assert(has_line(out, line), "stdout lacks '%s':\n%s", line, out);
    snprintf(line, sizeof line, "  cd '%s/a dir with '\\''quotes'\\'' and \"doubles\"/out.slurm' && sbatch --parsable "
             "--dependency=afterany:ARRAY_JOB_ID merge.sbatch", tmp);
    cr_assert(has_line(out, line), "stdout lacks '%s':\n%s", line, out);

    char *a = tu_slurp(shards, NULL), *m = tu_slurp(merge, NULL);
    /* sbatch's quoting, worked by hand: ' and \ escaped with \ inside '...' */
    const char *common[] = {"#SBATCH --partition='gpu'", "#SBATCH --time='1-02:03:04'", "#SBATCH '--mem=8G'",
                            "#SBATCH '--comment=it\\'s a \"test\" #1 \\\\o/'"};
    const char *array_lines[] = {"#!/bin/bash", "#SBATCH --job-name=hp-sweep-small", "#SBATCH --array=1-3",
                                 "#SBATCH --cpus-per-task=3", "#SBATCH --output=logs/shard-%a-of-3.%A.out"};
    const char *merge_lines[] = {"#!/bin/bash", "#SBATCH --job-name=hp-sweep-small-merge", "#SBATCH --cpus-per-task=1",
                                 "#SBATCH --output=logs/merge.%j.out"};
    for (size_t i = 0; i < sizeof common / sizeof *common; i++) {
        cr_assert(has_line(a, common[i]), "shards.sbatch lacks '%s':\n%s", common[i], a);
        cr_assert(has_line(m, common[i]), "merge.sbatch lacks '%s':\n%s", common[i], m);
    }
    for (size_t i = 0; i < sizeof array_lines / sizeof *array_lines; i++)
        cr_assert(has_line(a, array_lines[i]), "shards.sbatch lacks '%s':\n%s", array_lines[i], a);
    for (size_t i = 0; i < sizeof merge_lines / sizeof *merge_lines; i++)
        cr_assert(has_line(m, merge_lines[i]), "merge.sbatch lacks '%s':\n%s", merge_lines[i], m);
    cr_assert(!strstr(m, "#SBATCH --array"), "the merge is not an array:\n%s", m);
    /* sbatch reads #SBATCH lines only before the first command: every line up to "set -u" is a comment */
    const char *scripts[] = {a, m};
    for (int s = 0; s < 2; s++) {
        const char *set = strstr(scripts[s], "\nset -u\n");
        cr_assert(set);
        for (const char *p = scripts[s]; p <= set; p = strchr(p, '\n') + 1)
            cr_assert(*p == '#', "a command before the #SBATCH lines end:\n%.80s", p);
        cr_assert(!strstr(set, "#SBATCH"), "an #SBATCH line after the first command");
    }
    free(a);
    free(m);

    /* bash reads back exactly the paths */
    char want[3 * PATH_MAX];
    bash_reads(shards, "headprune plan dir n");
    snprintf(want, sizeof want, "%s\n%s\n%s\n3\n", exe, plan, dir);
    cr_assert_str_eq(out, want);
    bash_reads(merge, "headprune dir out n");
    snprintf(want, sizeof want, "%s\n%s\n%s\n3\n", exe, dir, db);
    cr_assert_str_eq(out, want);
    for (int s = 0; s < 2; s++) {
        const char *argv2[] = {"bash", "-n", s ? merge : shards, NULL};
        cr_assert_eq(runv(NULL, NULL, argv2), 0, "bash -n: %s", errs);
        struct stat sb;
        cr_assert_eq(stat(s ? merge : shards, &sb), 0);
        cr_assert_eq(sb.st_mode & 0777, 0755);
    }
    char logs[600], st1[600];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    struct stat sb;
    cr_assert(stat(logs, &sb) == 0 && S_ISDIR(sb.st_mode), "no logs/ folder");
    snprintf(st1, sizeof st1, "%s/shard-1-of-3.db", dir);
    cr_assert_neq(stat(st1, &sb), 0, "a dry run made a shard database");
}

Test(slurm, default_db_is_results_plan_name_in_the_working_folder)
{
    char plan[PATH_MAX], real[PATH_MAX];
    plan_path(plan, sizeof plan, "sweep-small.yaml");
    const char *argv[] = {hp(), "slurm", plan, "--shards", "2", "--dry-run", NULL};
    cr_assert_eq(runv(work, NULL, argv), 0, "stderr: %s", errs);
    cr_assert(realpath(work, real));
    char line[2 * PATH_MAX + 200];
    snprintf(line, sizeof line, "      %s/results/sweep-small.slurm/merge.sbatch: after the array, merges the shards "
             "that finished into %s/results/sweep-small.db", real, real);
    cr_assert(has_line(out, line), "stdout lacks '%s':\n%s", line, out);
    /* a plan without sequential studies: no note of them */
    cr_assert(!strstr(out, "sequential"), "%s", out);
}

// --- the scripts, run by bash as Slurm runs them ------------------------------------------

/* A canonical text dump of a results database (as tests/test_sweep.c's). */
static char *dump(const char *db)
{
    const char *queries[] = {
        "SELECT key, mask_text, n_ablated, ablation FROM variants ORDER BY key",
        "SELECT v.key, printf('%!.17g %!.17g %!.17g %!.17g', r.loss, r.ppl, r.acc, r.kl), r.n_tokens, r.n_seqs "
        "FROM results r JOIN variants v ON v.id = r.variant_id ORDER BY v.key",
        "SELECT v.key, q.seq, printf('%!.17g %!.17g %!.17g', q.loss, q.acc, q.kl), q.n_tokens "
        "FROM seq_results q JOIN variants v ON v.id = q.variant_id ORDER BY v.key, q.seq",
        "SELECT s.key, j.ord, j.study, j.kind, j.label, j.step, v.key "
        "FROM sweep_jobs j JOIN sweeps s ON s.id = j.sweep_id JOIN variants v ON v.id = j.variant_id "
        "ORDER BY s.key, j.ord",
        "SELECT s.key, u.study, u.step, u.layer, u.unit, printf('%!.17g %!.17g', u.score, u.raw), g.key "
        "FROM unit_scores u JOIN sweeps s ON s.id = u.sweep_id JOIN gradients g ON g.id = u.gradient_id "
        "ORDER BY s.key, u.study, u.step, u.layer, u.unit",
    };
    return tu_rows(db, queries, sizeof queries / sizeof *queries);
}

static long count_results(const char *db)
{
    sqlite3 *h;
    cr_assert_eq(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT count(*) FROM results", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static void copy_tree(const char *from, const char *to)
{
    const char *argv[] = {"cp", "-r", from, to, NULL};
    cr_assert_eq(runv(NULL, NULL, argv), 0, "cp %s %s: %s", from, to, errs);
}

/* Task k of the array, as slurmd runs it: bash on the script with the array's variables set (k CPUs). */
static int task(const char *script, int k)
{
    char id[48], cpus[48];
    snprintf(id, sizeof id, "SLURM_ARRAY_TASK_ID=%d", k);
    snprintf(cpus, sizeof cpus, "SLURM_CPUS_PER_TASK=%d", k);
    const char *env[] = {id, cpus, NULL};
    const char *argv[] = {"bash", script, NULL};
    return runv(tmp, env, argv);
}

Test(slurm, scripts_run_by_bash_shard_fails_merge_names_it_rerun_equals_one_process)
{
    /* the plan (every study kind, sequential ones included), its model and the binary, under the odd folder */
    char src[PATH_MAX], dst[600], plans[600], bin[600], exe[700], plan[700], db[600], dir[600];
    snprintf(plans, sizeof plans, "%s/plans", work);
    snprintf(bin, sizeof bin, "%s/bin", work);
    cr_assert_eq(mkdir(plans, 0777), 0);
    cr_assert_eq(mkdir(bin, 0777), 0);
    snprintf(dst, sizeof dst, "%s/fixtures", work);
    cr_assert_eq(mkdir(dst, 0777), 0);
    snprintf(src, sizeof src, "%s/fixtures/llama-gqa", getenv("HP_TESTS"));
    copy_tree(src, dst);
    snprintf(src, sizeof src, "%s/plans/sweep.yaml", getenv("HP_TESTS"));
    copy_tree(src, plans);
    copy_tree(hp(), bin);
    snprintf(exe, sizeof exe, "%s/headprune", bin);
    snprintf(plan, sizeof plan, "%s/sweep.yaml", plans);
    snprintf(db, sizeof db, "%s/merged.db", work);
    snprintf(dir, sizeof dir, "%s/merged.slurm", work);

    const char *argv[] = {exe, "slurm", plan, "--shards", "3", "--db", db, "--dry-run", NULL};
    cr_assert_eq(runv(NULL, NULL, argv), 0, "stderr: %s", errs);
    cr_assert(strstr(out, "shard 1 also runs the plan's sequential studies (iterative, iterative-kv, importance, "
                          "importance-kv, attribution, attribution-kv, iterative-grad, screen)"),
              "%s", out);
    char shards[700], merge[700], obstacle[700], status[700];
    snprintf(shards, sizeof shards, "%s/shards.sbatch", dir);
    snprintf(merge, sizeof merge, "%s/merge.sbatch", dir);

    /* outside an array the task refuses */
    const char *plain[] = {"bash", shards, NULL};
    cr_assert_neq(runv(tmp, NULL, plain), 0);
    cr_assert(strstr(errs, "SLURM_ARRAY_TASK_ID: is not set: submit this script with sbatch"), "%s", errs);

    /* shard 2 cannot open its database: a folder stands where it goes */
    snprintf(obstacle, sizeof obstacle, "%s/shard-2-of-3.db", dir);
    cr_assert_eq(mkdir(obstacle, 0777), 0);
    cr_assert_eq(task(shards, 1), 0, "shard 1: %s", errs);
    cr_assert_neq(task(shards, 2), 0, "shard 2 ran into a folder");
    cr_assert_eq(task(shards, 3), 0, "shard 3: %s", errs);
    cr_assert(strstr(out, ", 3 threads, peak"), "shard 3, given 3 CPUs, did not run 3 threads: %s", out);
    snprintf(status, sizeof status, "%s/shard-1-of-3.status", dir);
    char *s1 = tu_slurp(status, NULL);
    cr_assert_str_eq(s1, "0\n");
    free(s1);

    const char *run_merge[] = {"bash", merge, NULL};
    cr_assert_eq(runv(tmp, NULL, run_merge), 1, "the merge did not fail: %s%s", out, errs);
    char want[2048];
    snprintf(want, sizeof want, "headprune: shard 2 of 3 did not finish (see %s/logs/); %s has the results of the 2 that "
             "did. Re-run them (each resumes from its database) and merge again with:\n", dir, db);
    cr_assert(strncmp(errs, want, strlen(want)) == 0, "stderr:\n%s\nwanted first:\n%s", errs, want);
    const char *cmd = errs + strlen(want);
    const char *tail = " && jid=$(sbatch --parsable --array=2 shards.sbatch) && sbatch "
                       "--dependency=afterany:${jid%%;*} merge.sbatch\n";
    cr_assert(strncmp(cmd, "  cd ", 5) == 0, "%s", cmd);
    const char *amp = strstr(cmd, " && jid=");
    cr_assert(amp && strcmp(amp, tail) == 0, "re-run command: %s", cmd);
    /* the folder as printed (%q) is the scripts' folder for bash */
    char cd[4096];
    snprintf(cd, sizeof cd, "cd %.*s && pwd", (int)(amp - cmd - 5), cmd + 5);
    const char *pwd[] = {"bash", "-c", cd, NULL};
    cr_assert_eq(runv(NULL, NULL, pwd), 0, "%s: %s", cd, errs);
    snprintf(want, sizeof want, "%s\n", dir);
    cr_assert_str_eq(out, want);
    long partial = count_results(db);

    /* the obstacle gone, shard 2 re-run and the merge again: everything */
    cr_assert_eq(rmdir(obstacle), 0);
    cr_assert_eq(task(shards, 2), 0, "shard 2 again: %s", errs);
    cr_assert_eq(runv(tmp, NULL, run_merge), 0, "the merge: %s", errs);
    snprintf(want, sizeof want, "headprune: all 3 shards finished and are merged into %s", db);
    cr_assert(strstr(out, want), "stdout: %s", out);

    char ref[700];
    snprintf(ref, sizeof ref, "%s/one.db", work);
    const char *one[] = {exe, "run", plan, "--db", ref, "--quiet", "--threads", "1", NULL};
    cr_assert_eq(runv(NULL, NULL, one), 0, "one process: %s", errs);
    cr_assert_lt(partial, count_results(ref), "the first merge had shard 2's results already");
    char *x = dump(ref), *y = dump(db);
    if (strcmp(x, y) != 0) {
        size_t i = 0;
        while (x[i] && x[i] == y[i])
            i++;
        size_t s = i > 200 ? i - 200 : 0;
        cr_log_error("first difference at byte %zu:\n--- one process\n%.400s\n--- merged\n%.400s", i, x + s, y + s);
        cr_assert_fail("the merged shards differ from one process's run");
    }
    free(x);
    free(y);
}

// --- bad input ----------------------------------------------------------------------------

Test(slurm, missing_plan)
{
    const char *argv[] = {hp(), "slurm", "no-such-plan.yaml", "--shards", "2", "--dry-run", NULL};
    expect_error_line(runv(tmp, NULL, argv), "no-such-plan.yaml: cannot open");
}

Test(slurm, shards_must_be_a_positive_integer)
{
    char plan[PATH_MAX];
    plan_path(plan, sizeof plan, "sweep-small.yaml");
    const char *bad[] = {"0", "-1", "x", "", "2x", "1000001", "4294967297"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *argv[] = {hp(), "slurm", plan, "--shards", bad[i], "--dry-run", NULL};
        expect_usage(runv(tmp, NULL, argv), "--shards must be an integer from 1 to 1000000");
    }
    const char *none[] = {hp(), "slurm", plan, "--dry-run", NULL};
    expect_usage(runv(tmp, NULL, none), "give --shards N");
    const char *novalue[] = {hp(), "slurm", plan, "--shards", NULL};
    expect_usage(runv(tmp, NULL, novalue), "option '--shards' needs a value");
    const char *noplan[] = {hp(), "slurm", "--shards", "2", NULL};
    expect_usage(runv(tmp, NULL, noplan), "give one PLAN.yaml");
}

Test(slurm, bad_options)
{
    char plan[PATH_MAX];
    plan_path(plan, sizeof plan, "sweep-small.yaml");
    struct {
        const char *opt, *val, *says;
    } bad[] = {
        {"--time", "2h", "--time must be a Slurm time"},
        {"--time", "1:2:3:4", "--time must be a Slurm time"},
        {"--time", "1-", "--time must be a Slurm time"},
        {"--time", "", "--time must be a Slurm time"},
        {"--cpus-per-task", "0", "--cpus-per-task must be an integer from 1 to 1024"},
        {"--cpus-per-task", "two", "--cpus-per-task must be an integer from 1 to 1024"},
        {"--partition", "", "--partition must name a partition"},
        {"--sbatch-arg", "mem=8G", "--sbatch-arg takes one sbatch option"},
        {"--sbatch-arg", "--comment=two\nlines", "--sbatch-arg takes one sbatch option"},
        {"--no-such-option", NULL, "unknown option '--no-such-option'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *argv[] = {hp(), "slurm", plan, "--shards", "2", "--dry-run", bad[i].opt, bad[i].val, NULL};
        expect_usage(runv(tmp, NULL, argv), bad[i].says);
    }
}

Test(slurm, db_folder_missing_or_path_with_newline)
{
    char plan[PATH_MAX], db[512];
    plan_path(plan, sizeof plan, "sweep-small.yaml");
    snprintf(db, sizeof db, "%s/no-such-folder/out.db", work);
    const char *argv[] = {hp(), "slurm", plan, "--shards", "2", "--db", db, "--dry-run", NULL};
    int rc = runv(tmp, NULL, argv);
    expect_error_line(rc, "no-such-folder: cannot use the folder of --db");
    cr_assert_str_empty(out);
    snprintf(db, sizeof db, "%s/two\nlines.db", work);
    const char *nl[] = {hp(), "slurm", plan, "--shards", "2", "--db", db, "--dry-run", NULL};
    expect_error_line(runv(tmp, NULL, nl), "a path with a newline cannot be written into a job script");
}

Test(slurm, sbatch_not_on_path)
{
    char plan[PATH_MAX], db[512], empty[128], path_env[160], shards[600];
    plan_path(plan, sizeof plan, "sweep-small.yaml");
    snprintf(db, sizeof db, "%s/out.db", work);
    snprintf(empty, sizeof empty, "%s/empty-bin", tmp);
    cr_assert_eq(mkdir(empty, 0777), 0);
    snprintf(path_env, sizeof path_env, "PATH=%s", empty);
    const char *env[] = {path_env, NULL};
    const char *argv[] = {hp(), "slurm", plan, "--shards", "2", "--db", db, NULL};
    int rc = runv(tmp, env, argv);
    cr_assert_eq(rc, 1, "exit %d (stderr: %s)", rc, errs);
    cr_assert_str_eq(errs, "headprune: sbatch: not found on PATH (submit from a machine with the Slurm client, a login "
                           "node; --dry-run writes the scripts without submitting)\n");
    /* the scripts are written all the same, for a submission by hand */
    snprintf(shards, sizeof shards, "%s/out.slurm/shards.sbatch", work);
    struct stat sb;
    cr_assert_eq(stat(shards, &sb), 0, "no %s", shards);
}

// --- the pieces ------------------------------------------------------------------------------

Test(slurm, time_formats_as_sbatch_takes_them)
{
    const char *good[] = {"30", "30:00", "1:00:00", "2-0", "2-12", "2-12:00", "2-12:00:00", "UNLIMITED", "INFINITE", "0"};
    const char *bad[] = {"", "2h", "1:2:3:4", "-1", "1-", "1-2:3:4:5", "1::2", ":1", "1:", "1 ", " 1", "1-2-3", "+5"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        cr_assert(hp_slurm_time_ok(good[i]), "refused '%s'", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert(!hp_slurm_time_ok(bad[i]), "took '%s'", bad[i]);
}

Test(slurm, shell_quote_round_trips_through_bash)
{
    const char *words[] = {"", "plain", "a b", "it's", "'", "''", "$(touch x) `y` $HOME", "\\", "\"", "a\tb\nc", "*?[a]",
                           "-n"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        char q[256], prog[300];
        cr_assert(hp_shell_quote(words[i], q, sizeof q));
        snprintf(prog, sizeof prog, "printf %%s %s", q);
        const char *argv[] = {"bash", "-c", prog, NULL};
        cr_assert_eq(runv(tmp, NULL, argv), 0, "%s: %s", prog, errs);
        cr_assert_str_eq(out, words[i], "bash read back '%s' as '%s'", words[i], out);
    }
    char small[4];
    cr_assert(!hp_shell_quote("abcd", small, sizeof small), "a quote that does not fit must fail");
}

/* Gates and roles studies run in shard 1 as iterative ones do, and say so; a plan of nothing else leaves the other
 * tasks nothing to run, which is said too rather than left to be found idle. */
Test(slurm, gates_and_roles_studies_are_named_as_shard_1s_and_idle_tasks_said)
{
    char plan[600], db[600], text[1200];
    snprintf(plan, sizeof plan, "%s/g.yaml", work);
    snprintf(db, sizeof db, "%s/g.db", work);
    const char *fx = getenv("HP_FIXTURES");
    snprintf(text, sizeof text,
             "name: g\nmodel: %s/llama-gqa\ndata: %s/llama-gqa/data.npy\nstudies:\n"
             "  - gates: {lambda: [0, 1], split: 1}\n  - roles\n", fx, fx);
    tu_spit(plan, text, strlen(text));
    const char *argv[] = {hp(), "slurm", plan, "--shards", "4", "--db", db, "--dry-run", NULL};
    cr_assert_eq(runv(NULL, NULL, argv), 0, "stderr: %s", errs);
    cr_assert(has_line(out, "shard 1 runs the whole plan: its studies (gates, roles) are all sequential, so tasks 2 "
                            "to 4 have nothing to run (--shards 1 does the same work; see --help)"),
              "%s", out);
    char script[700], body[1 << 14];
    snprintf(script, sizeof script, "%s/g.slurm/shards.sbatch", work);
    read_into(script, body, sizeof body);
    cr_assert(strstr(body, "iterative, gradient, gates and roles studies"), "%s", body);

    /* with other studies beside them: shard 1 also runs them, named */
    snprintf(text, sizeof text,
             "name: g\nmodel: %s/llama-gqa\ndata: %s/llama-gqa/data.npy\nstudies:\n"
             "  - single\n  - gates: {lambda: [0, 1], split: 1}\n  - roles\n", fx, fx);
    tu_spit(plan, text, strlen(text));
    const char *argv2[] = {hp(), "slurm", plan, "--shards", "2", "--db", db, "--dry-run", NULL};
    cr_assert_eq(runv(NULL, NULL, argv2), 0, "stderr: %s", errs);
    cr_assert(has_line(out, "shard 1 also runs the plan's sequential studies (gates, roles), after its share (see "
                            "--help)"),
              "%s", out);
    cr_assert(!strstr(out, "nothing to run"), "%s", out);

    const char *help[] = {hp(), "slurm", "--help", NULL};
    cr_assert_eq(runv(NULL, NULL, help), 0);
    cr_assert(strstr(out, "gates and roles studies are"), "%s", out);
}
