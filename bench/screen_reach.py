#!/usr/bin/env python3
"""How far a screen must walk for the exact top k, from a finished sweep's database.

For a database written by bench/estimators-smollm2.yaml or bench/screen-smollm2-4x.yaml
(or any sweep with a `single` study and `attribution` studies over query heads):

  - halves: the exact top k (k = a tenth of the heads, rounded up) against the heads
    ranked by their exact effects on only the first or only the second half of the
    held-out rows (from the stored per-sequence losses, seq_results): the place of the
    last of the top k in that ranking. How well the rows pin the top k down;
  - pairs: for two attribution studies, the heads ordered by the better of each head's
    two ranks (each estimate signed, largest first), and the place of the last of the
    top k in that order. A count from the stored estimates, not a screen that was run.

`query attribution`'s `reach` is the same place for one estimate's sizes.

    bench/screen_reach.py /tmp/est.db                       # halves
    bench/screen_reach.py /tmp/est.db attribution atp       # and that pair

Only the standard library and build/headprune. Not part of CI.
"""
import csv
import io
import math
import os
import sqlite3
import subprocess
import sys

HP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "headprune")


def place_of_last(order, top):
    pos = {u: i + 1 for i, u in enumerate(order)}
    return max(pos[u] for u in top)


def halves(db):
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    sweep = c.execute("SELECT max(sweep_id) FROM sweep_jobs WHERE study = 'single'").fetchone()[0]
    base = c.execute("SELECT variant_id FROM sweep_jobs WHERE sweep_id = ? AND kind = 'baseline' LIMIT 1",
                     (sweep,)).fetchone()[0]
    heads = c.execute("SELECT label, variant_id FROM sweep_jobs WHERE sweep_id = ? AND study = 'single' "
                      "AND kind = 'single'", (sweep,)).fetchall()

    def losses(v):
        return {s: (loss, n) for s, loss, n in c.execute("SELECT seq, loss, n_tokens FROM seq_results "
                                                         "WHERE variant_id = ?", (v,))}

    def mean(rows, seqs):
        return sum(rows[s][0] * rows[s][1] for s in seqs) / sum(rows[s][1] for s in seqs)

    b = losses(base)
    per = {label: losses(v) for label, v in heads}
    seqs = sorted(b)
    stored = dict(c.execute("SELECT label, d_loss FROM effects WHERE sweep_id = ? AND study = 'single'", (sweep,)))
    full = {u: mean(r, seqs) - mean(b, seqs) for u, r in per.items()}
    worst = max(abs(full[u] - stored[u]) for u in full)
    if worst > 1e-12:
        sys.exit(f"{db}: per-sequence losses give effects {worst:.3g} off the stored ones")
    k = math.ceil(len(full) / 10)
    top = sorted(full, key=lambda u: -full[u])[:k]
    h = len(seqs) // 2
    print(f"{db}: {len(full)} heads, {len(seqs)} rows, exact top {k}")
    for name, part in (("first half", seqs[:h]), ("second half", seqs[h:])):
        e = {u: mean(r, part) - mean(b, part) for u, r in per.items()}
        print(f"  ranked by the exact effects on the {name} of the rows ({len(part)}): the last of the top {k} "
              f"comes {place_of_last(sorted(e, key=lambda u: -e[u]), top)}th")
    return full, top


def estimates(db, study):
    r = subprocess.run([HP, "query", "attribution", "--db", db, "--study", study, "--format", "csv"],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(r.stderr.strip())
    return {row["label"]: float(row["estimate"]) for row in csv.DictReader(io.StringIO(r.stdout)) if row["label"]}


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    db = sys.argv[1]
    full, top = halves(db)
    if len(sys.argv) == 4:
        a, b = (estimates(db, s) for s in sys.argv[2:])
        rank = [{u: i + 1 for i, u in enumerate(sorted(e, key=lambda u: -e[u]))} for e in (a, b)]
        order = sorted(full, key=lambda u: (min(rank[0][u], rank[1][u]), u))
        print(f"  by the better of each head's ranks under {sys.argv[2]} and {sys.argv[3]} (signed): the last of "
              f"the top {len(top)} comes {place_of_last(order, top)}th")


if __name__ == "__main__":
    main()
