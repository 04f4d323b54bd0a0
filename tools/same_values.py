#!/usr/bin/env python3
"""same_values.py -- do two builds of headprune give the same answers?

A refactor that promises "no number changes" is checked here against the
build before it, on everything users run: each shipped plan (plans/*.yaml)
is run by both builds into databases of their own, and every query kind, on
every study it takes (--study), is asked of

  * the old build on its own database (the reference),
  * the new build on its own database (the engine's numbers),
  * the new build on the old build's database (old databases still read),
  * the new build on a merge of the old database made by the new build.

Answers are compared as JSON: the same rows, keys and strings, and numbers
equal to 1e-6 relative (1e-12 absolute near zero). Fields that are not
results (times, dates, paths, the database's row ids) are ignored. Finally
both builds' reports of the old database must be the same bytes apart from
the line that dates them.

Usage (from the repository root; OLD is a build of the base commit, e.g. from
`git worktree add /tmp/base REV && meson setup /tmp/base/build /tmp/base &&
meson compile -C /tmp/base/build`):

    python3 tools/same_values.py --old /tmp/base/build/headprune \
        --new build/headprune [--work /tmp/same-values] [PLAN.yaml ...]

Plans whose model is not on this machine (all-MiniLM-L6-v2 comes from
scripts/get-minilm.sh) are skipped, saying so. Standard library only.
Exit status 0 when every answer agrees, 1 otherwise.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

REL = 1e-6
ABS = 1e-12
# keys whose values are about the run, not its results
IGNORED = {"seconds", "created", "started", "finished", "path", "db", "elapsed", "grad_seconds", "created_by",
           "host", "threads", "updated", "wall_seconds", "time", "date", "id", "sweep", "sweep_id", "ms"}


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return p.returncode, p.stdout, p.stderr


def query_kinds(binary):
    """The kinds the build's `query --help` lists (its own table: not restated here)."""
    rc, out, err = run([binary, "query", "--help"])
    text = out + err
    kinds, on = [], False
    for line in text.splitlines():
        if line.startswith("Kinds:"):
            on = True
            continue
        if on:
            if line and not line.startswith(" "):
                break
            m = re.match(r"^  ([a-z]+)\s", line)
            if m:
                kinds.append(m.group(1))
    return kinds


def differ(a, b, where):
    """The first difference between two JSON values, or None."""
    if isinstance(a, bool) or isinstance(b, bool):
        return None if a == b else f"{where}: {a!r} != {b!r}"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a == b:
            return None
        if not (math.isfinite(a) and math.isfinite(b)):
            return f"{where}: {a!r} != {b!r}"
        if abs(a - b) <= ABS or abs(a - b) <= REL * max(abs(a), abs(b)):
            return None
        return f"{where}: {a!r} != {b!r} (relative {abs(a - b) / max(abs(a), abs(b)):.2e})"
    if type(a) is not type(b):
        return f"{where}: {a!r} != {b!r}"
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} rows != {len(b)} rows"
        for i, (x, y) in enumerate(zip(a, b)):
            d = differ(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, dict):
        ka = {k for k in a if k not in IGNORED}
        kb = {k for k in b if k not in IGNORED}
        if ka != kb:
            return f"{where}: keys {sorted(ka ^ kb)} in one answer only"
        for k in sorted(ka):
            d = differ(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


def ask(binary, db, args):
    rc, out, err = run([binary, "query", *args, "--db", db, "--format", "json"])
    if rc != 0:
        return ("error", err.strip().splitlines()[-1] if err.strip() else f"exit {rc}")
    try:
        answer = json.loads(out)
    except json.JSONDecodeError as e:
        return ("error", f"not JSON: {e}")
    # {"rows": [...], "summary": [...]} since the summary rows were set apart; builds before wrote one array of
    # both, rows first: compared as that array, so an old build's answers still meet a new one's
    if isinstance(answer, dict) and "rows" in answer:
        answer = answer["rows"] + answer.get("summary", [])
    return ("ok", answer)


def questions(binary, db, kinds):
    """Every (kind, args) worth asking of db: each kind plainly, and once per study it may be given."""
    st, studies = ask(binary, db, ["sql", "SELECT DISTINCT study AS name FROM sweep_jobs ORDER BY study"])
    names = [r["name"] for r in studies] if st == "ok" else []
    qs = []
    for k in kinds:
        if k == "compare":
            qs.append((k, ["compare", "--db2", db]))
            continue
        if k == "sql":
            qs.append((k, ["sql", "SELECT * FROM effects ORDER BY sweep_id, study, kind, label, step, sample"]))
            continue
        qs.append((k, [k]))
        for n in names:
            qs.append((f"{k} --study {n}", [k, "--study", n]))
        if k == "heads":
            for n in names:
                qs.append((f"heads --gates --study {n}", [k, "--gates", "--study", n]))
    return qs


def compare_answers(label, ref_bin, ref_db, new_bin, new_db, qs):
    bad, asked = 0, 0
    for name, args in qs:
        if args[0] == "compare":
            args = ["compare", "--db2", ref_db]
            a = ask(ref_bin, ref_db, args)
            args = ["compare", "--db2", new_db]
            b = ask(new_bin, new_db, args)
        else:
            a = ask(ref_bin, ref_db, args)
            b = ask(new_bin, new_db, args)
        if a[0] == "error" and b[0] == "error":
            continue  # a question this database cannot answer, refused by both
        asked += 1
        if a[0] != b[0]:
            bad += 1
            print(f"  {label}: query {name}: old {a[0]} ({a[1] if a[0] == 'error' else '...'}), "
                  f"new {b[0]} ({b[1] if b[0] == 'error' else '...'})")
            continue
        d = differ(a[1], b[1], "")
        if d:
            bad += 1
            print(f"  {label}: query {name}: {d}")
    return asked, bad


def report_text(binary, db, out):
    rc, _, err = run([binary, "report", "--db", db, "--out", out])
    if rc != 0:
        return None, err.strip()
    with open(out, encoding="utf-8") as f:
        # the report dates itself and names the build's paths: not results
        return [ln for ln in f.read().splitlines() if not re.search(r"generated|\d{4}-\d\d-\d\dT", ln)], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="headprune built from the base commit")
    ap.add_argument("--new", required=True, help="headprune built from the change")
    ap.add_argument("--work", default="/tmp/same-values", help="folder for the databases (emptied first)")
    ap.add_argument("--threads", default="2")
    ap.add_argument("plans", nargs="*", help="plans (default: plans/*.yaml)")
    a = ap.parse_args()
    old, new = os.path.abspath(a.old), os.path.abspath(a.new)
    plans = a.plans or sorted(os.path.join("plans", p) for p in os.listdir("plans") if p.endswith(".yaml"))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    kinds = query_kinds(new)
    if kinds != query_kinds(old):
        print(f"query kinds differ: old {query_kinds(old)}, new {kinds}")
    failed, total = 0, 0
    for plan in plans:
        stem = os.path.splitext(os.path.basename(plan))[0]
        dbs = {w: os.path.join(a.work, f"{stem}-{w}.db") for w in ("old", "new", "merged")}
        rc_o, _, err_o = run([old, "run", plan, "--db", dbs["old"], "--quiet", "--threads", a.threads])
        if rc_o != 0:
            print(f"{plan}: skipped: the old build cannot run it: {err_o.strip().splitlines()[-1]}")
            continue
        rc_n, _, err_n = run([new, "run", plan, "--db", dbs["new"], "--quiet", "--threads", a.threads])
        if rc_n != 0:
            print(f"{plan}: FAILED: the new build cannot run it: {err_n.strip().splitlines()[-1]}")
            failed += 1
            continue
        rc_m, _, err_m = run([new, "merge", dbs["merged"], dbs["old"]])
        if rc_m != 0:
            print(f"{plan}: FAILED: the new build cannot merge the old database: {err_m.strip()}")
            failed += 1
        qs = questions(old, dbs["old"], kinds)
        n_bad = 0
        for label, ref_db, new_db in (("new run", dbs["old"], dbs["new"]),
                                      ("old database", dbs["old"], dbs["old"]),
                                      ("merged old database", dbs["old"], dbs["merged"])):
            if label == "merged old database" and rc_m != 0:
                continue
            asked, bad = compare_answers(label, old, ref_db, new, new_db, qs)
            total += asked
            n_bad += bad
        ro, eo = report_text(old, dbs["old"], os.path.join(a.work, f"{stem}-old.html"))
        rn, en = report_text(new, dbs["old"], os.path.join(a.work, f"{stem}-new.html"))
        if (ro is None) != (rn is None) or (ro is not None and ro != rn):
            n_bad += 1
            print(f"  report of the old database differs between the builds ({eo or en or 'contents'})")
        print(f"{plan}: {'ok' if n_bad == 0 else f'{n_bad} differences'} ({len(qs)} questions x 3 databases, report)")
        failed += n_bad
    print(f"{total} answers compared, {failed} differences")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
