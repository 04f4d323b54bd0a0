#!/usr/bin/env bash
# bench/shards.sh -- one process with 2 threads against two 1-thread shards.
#
# The same sweep (baseline + every single head of GPT-2-small: 145 jobs over
# 4 x 128 tokens) run
#   (a) as one process:   headprune run --threads 2
#   (b) as two shards started together, --shard 1/2 and 2/2 with --threads 1
#       each into two databases, then `headprune merge`
# alternating a, b, a, b (REPS pairs, default 2), each into fresh databases.
# For (b) the wall time is until both shards have finished, and the merge is
# timed on its own; b's total is the two. Checks that every database holds
# what it should (as many results as the plan has jobs: 145, the shards 73 +
# 72, the merge 145) and compares
# the merged losses with the single process's, variant by variant.
#
# Also records, per run, the 1-minute load average before it and "others":
# CPUs busy according to /proc/stat minus headprune's own CPU time (from
# /usr/bin/time), over the wall time.
#
#   bench/shards.sh [--out FILE]
#
# Environment: HEADPRUNE (default build/headprune), MODEL (default
# /tmp/hp-bench-gpt2-small, written by build/bench/bench_forward), DATA
# (default /tmp/hp-bench-scaling-4x128.npy, written if missing with numpy
# default_rng(1), as bench/scaling.py does, by $PYTHON, default
# /work/venv/bin/python), REPS (default 2). About 5 minutes on 2 CPUs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEADPRUNE:-$ROOT/build/headprune}
MODEL=${MODEL:-/tmp/hp-bench-gpt2-small}
DATA=${DATA:-/tmp/hp-bench-scaling-4x128.npy}
PYTHON=${PYTHON:-/work/venv/bin/python}
REPS=${REPS:-2}
OUT=
if [ "${1:-}" = --out ] && [ -n "${2:-}" ]; then
    OUT=$2
elif [ $# -gt 0 ]; then
    echo "usage: bench/shards.sh [--out FILE]" >&2
    exit 2
fi

log() { echo "[shards] $*" >&2; }
die() { echo "shards: $*" >&2; exit 1; }

[ -x "$BIN" ] || die "$BIN not found; meson compile -C build"
[ -f "$MODEL/model.safetensors" ] || die "$MODEL missing; run build/bench/bench_forward once to write it"
if [ ! -f "$DATA" ]; then
    "$PYTHON" -c "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).integers(0, 50257, size=(4, 128), dtype=np.int32))" "$DATA"
    log "wrote $DATA"
fi

WD=$(mktemp -d /tmp/hp-shards-XXXXXX)
trap 'rm -rf "$WD"' EXIT
PLAN=$WD/shards.yaml
cat >"$PLAN" <<EOF
name: shards
model: $MODEL
data: $DATA
metric: loss
studies:
  - baseline
  - single
EOF
JOBS=$(("$("$BIN" plan "$PLAN" --format csv | wc -l)" - 1))

HZ=$(getconf CLK_TCK)
now() { date +%s.%N; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }
load1() { cut -d' ' -f1 /proc/loadavg; }
cpu_of() { awk '{s += $1 + $2} END {printf "%.2f", s}' "$@"; } # /usr/bin/time -f '%U %S' files
reported() { sed -n 's/.* in \([0-9.]*\) s, peak memory \([0-9]*\) MB.*/\1 \2/p' "$1"; }
count() { sqlite3 "$1" "SELECT count(*) FROM results"; }
others() { awk -v b0="$1" -v b1="$2" -v hz="$HZ" -v own="$3" -v t0="$4" -v t1="$5" \
    'BEGIN {w = t1 - t0; o = w > 0 ? ((b1 - b0) / hz - own) / w : 0; printf "%.2f", o < 0 ? 0 : o}'; }
run() { # OUTFILE TIMEFILE ARGS...: headprune run, timed by /usr/bin/time
    local out=$1 tf=$2
    shift 2
    /usr/bin/time -f '%U %S' -o "$tf" "$BIN" run "$PLAN" "$@" --quiet >"$out"
}

REPORT=$WD/report.md
{
    echo "headprune bench/shards.sh, $(date -u '+%Y-%m-%d %H:%M') UTC: baseline + single, $MODEL, $DATA"
    echo
    echo "| rep | configuration | wall s | merge s | total s | reported s | peak MB | results | others CPU | load1 |"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$REPORT"

RATIOS=()
CMPS=()
for rep in $(seq 1 "$REPS"); do
    # (a) one process, 2 threads
    log "rep $rep (a): $BIN run $PLAN --db $WD/a$rep.db --threads 2 --quiet"
    l=$(load1); b0=$(busy); t0=$(now)
    run "$WD/a$rep.out" "$WD/a$rep.time" --db "$WD/a$rep.db" --threads 2
    t1=$(now); b1=$(busy)
    wa=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    read -r sa ma < <(reported "$WD/a$rep.out")
    na=$(count "$WD/a$rep.db")
    [ "$na" = "$JOBS" ] || die "rep $rep (a): $na results, expected $JOBS"
    oa=$(others "$b0" "$b1" "$(cpu_of "$WD/a$rep.time")" "$t0" "$t1")
    ra=$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')
    log "  $(cat "$WD/a$rep.out") (wall $wa s, others $oa CPU, load $l)"
    echo "| $rep | (a) 1 process x 2 threads | $wa | - | $wa | $sa | $ma | $na | $oa | $l |" >>"$REPORT"

    # (b) two shards, 1 thread each, started together, then merged
    log "rep $rep (b): $BIN run $PLAN --db $WD/b$rep-{1,2}.db --shard {1,2}/2 --threads 1 --quiet, together"
    l=$(load1); b0=$(busy); t0=$(now)
    run "$WD/b$rep-1.out" "$WD/b$rep-1.time" --db "$WD/b$rep-1.db" --shard 1/2 --threads 1 &
    p1=$!
    run "$WD/b$rep-2.out" "$WD/b$rep-2.time" --db "$WD/b$rep-2.db" --shard 2/2 --threads 1 &
    p2=$!
    wait "$p1" || die "rep $rep: shard 1 failed"
    wait "$p2" || die "rep $rep: shard 2 failed"
    t1=$(now); b1=$(busy)
    "$BIN" merge "$WD/b$rep.db" "$WD/b$rep-1.db" "$WD/b$rep-2.db" >"$WD/b$rep.merge.out"
    t2=$(now)
    wb=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    wm=$(awk -v a="$t1" -v b="$t2" 'BEGIN {printf "%.2f", b - a}')
    tb=$(awk -v a="$t0" -v b="$t2" 'BEGIN {printf "%.1f", b - a}')
    read -r s1 m1 < <(reported "$WD/b$rep-1.out")
    read -r s2 m2 < <(reported "$WD/b$rep-2.out")
    n1=$(count "$WD/b$rep-1.db"); n2=$(count "$WD/b$rep-2.db"); nb=$(count "$WD/b$rep.db")
    [ "$nb" = "$JOBS" ] || die "rep $rep (b): merged database has $nb results, expected $JOBS"
    ob=$(others "$b0" "$b1" "$(cpu_of "$WD/b$rep-1.time" "$WD/b$rep-2.time")" "$t0" "$t1")
    log "  shard 1: $(cat "$WD/b$rep-1.out")"
    log "  shard 2: $(cat "$WD/b$rep-2.out")"
    log "  merge: $(cat "$WD/b$rep.merge.out") (shards wall $wb s, merge $wm s, others $ob CPU, load $l)"
    echo "| $rep | (b) 2 shards x 1 thread + merge | $wb | $wm | $tb | $s1 / $s2 | $m1 / $m2 | $n1 + $n2 -> $nb | $ob | $l |" >>"$REPORT"

    # the merged losses against the single process's, by content address
    cmp=$(sqlite3 "$WD/a$rep.db" "ATTACH '$WD/b$rep.db' AS m;
        SELECT count(*), printf('%.3g', max(abs(ra.loss - rb.loss) / abs(ra.loss)))
        FROM variants va JOIN results ra ON ra.variant_id = va.id
        JOIN m.variants vb ON vb.key = va.key JOIN m.results rb ON rb.variant_id = vb.id;")
    RATIOS+=("$(awk -v a="$ra" -v t0="$t0" -v t2="$t2" 'BEGIN {printf "%.3f", (t2 - t0) / a}')")
    CMPS+=("rep $rep: ${cmp%%|*} variants matched by content address, max relative loss difference ${cmp##*|}")
done

{
    echo
    echo "b total / a wall, per rep: ${RATIOS[*]}; median $(printf '%s\n' "${RATIOS[@]}" | sort -n |
        awk '{v[NR] = $1} END {printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')"
    echo
    echo "merged (b) against (a): $(IFS=';'; echo "${CMPS[*]}" | sed 's/;/; /g')"
    echo
    echo "plan: $JOBS jobs; others CPU = CPUs busy (/proc/stat) minus headprune's own CPU time, over the wall"
    echo "time (for (b) over the shards, without the merge); load1 = 1-minute load average before the run"
} >>"$REPORT"
cat "$REPORT"
if [ -n "$OUT" ]; then
    cp "$REPORT" "$OUT"
fi
