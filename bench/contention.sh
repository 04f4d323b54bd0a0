#!/usr/bin/env bash
# bench/contention.sh -- run's threads against other work on the machine.
#
# Two workloads:
#   quickstart  plans/quickstart.yaml (the embedded default model, 128 jobs)
#   gpt2        baseline + every single head of the random GPT-2-small that
#               build/bench/bench_forward writes (145 jobs over 4 x 128 tokens)
# each run with the default threads (matched to idle CPUs), --threads 1 and
# --threads 2, under four conditions:
#   idle        nothing else running
#   busy1       beside one CPU-bound process (a shell busy loop)
#   busy2       beside two CPU-bound processes
#   pair        two identical runs started at once (the wall time until both end)
# Every run writes a fresh database; the busy loops start 1 s before the run
# and are killed after it. Per run the table gives the wall time and "others":
# CPUs busy according to /proc/stat minus the runs' own CPU time (from
# /usr/bin/time), over the wall time. Runs of one rep go condition by
# condition, the three thread settings side by side, so slow drifts of the
# machine hit them alike; medians over reps are printed at the end.
#
#   bench/contention.sh [--reps N] [--only quickstart|gpt2] [--out FILE]
#
# Environment: HEADPRUNE (default build/headprune), MODEL (default
# /tmp/hp-bench-gpt2-small: `build/bench/bench_forward --reps 1` writes it),
# DATA (default /tmp/hp-bench-scaling-4x128.npy, the ids bench/scaling.py
# uses; written here with numpy's default_rng(1) if $PYTHON has numpy, else
# refused). One rep of both workloads takes about 30 minutes on 2 CPUs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HEADPRUNE:-$ROOT/build/headprune}
MODEL=${MODEL:-/tmp/hp-bench-gpt2-small}
DATA=${DATA:-/tmp/hp-bench-scaling-4x128.npy}
PYTHON=${PYTHON:-python3}
REPS=1
ONLY=
OUT=
while [ $# -gt 0 ]; do
    case $1 in
    --reps) REPS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "usage: bench/contention.sh [--reps N] [--only quickstart|gpt2] [--out FILE]" >&2; exit 2 ;;
    esac
done

log() { echo "[contention] $*" >&2; }
die() { echo "contention: $*" >&2; exit 1; }

[ -x "$BIN" ] || die "$BIN not found; meson compile -C build"
WD=$(mktemp -d /tmp/hp-contention-XXXXXX)
BUSY=()
cleanup() {
    for p in "${BUSY[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WD"
}
trap cleanup EXIT

WORKLOADS=()
if [ -z "$ONLY" ] || [ "$ONLY" = quickstart ]; then
    WORKLOADS+=(quickstart)
fi
if [ -z "$ONLY" ] || [ "$ONLY" = gpt2 ]; then
    [ -f "$MODEL/model.safetensors" ] || die "$MODEL missing; run build/bench/bench_forward --reps 1 once to write it"
    if [ ! -f "$DATA" ]; then
        "$PYTHON" -c "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).integers(0, 50257, size=(4, 128), dtype=np.int32))" "$DATA" ||
            die "cannot write $DATA (needs numpy in $PYTHON)"
        log "wrote $DATA"
    fi
    cat >"$WD/gpt2.yaml" <<EOF
name: contention
model: $MODEL
data: $DATA
metric: loss
studies:
  - baseline
  - single
EOF
    WORKLOADS+=(gpt2)
fi
plan_of() { if [ "$1" = quickstart ]; then echo "$ROOT/plans/quickstart.yaml"; else echo "$WD/gpt2.yaml"; fi; }

HZ=$(getconf CLK_TCK)
now() { date +%s.%N; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }
cpu_of() { awk '{s += $1 + $2} END {printf "%.2f", s}' "$@"; } # /usr/bin/time -f '%U %S' files
start_busy() { for _ in $(seq 1 "$1"); do (while :; do :; done) & BUSY+=($!); done; sleep 1; }
stop_busy() {
    for p in "${BUSY[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${BUSY[@]}"; do wait "$p" 2>/dev/null || true; done
    BUSY=()
}

RAW=$WD/raw.tsv # workload condition threads rep wall others
: >"$RAW"
one() { # WORKLOAD CONDITION THREADS REP
    local w=$1 cond=$2 thr=$3 rep=$4 plan n=1 args=()
    plan=$(plan_of "$w")
    [ "$thr" = auto ] || args=(--threads "$thr")
    case $cond in busy1) start_busy 1 ;; busy2) start_busy 2 ;; pair) n=2 ;; esac
    local b0 t0 t1 b1 pids=() tf=()
    b0=$(busy); t0=$(now)
    for i in $(seq 1 "$n"); do
        /usr/bin/time -f '%U %S' -o "$WD/t$i" "$BIN" run "$plan" --db "$WD/$w-$cond-$thr-$rep-$i.db" "${args[@]}" \
            --quiet >"$WD/o$i" &
        pids+=($!); tf+=("$WD/t$i")
    done
    for p in "${pids[@]}"; do wait "$p" || die "$w $cond --threads $thr failed: $(cat "$WD"/o*)"; done
    t1=$(now); b1=$(busy)
    stop_busy
    local wall others
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
    others=$(awk -v b0="$b0" -v b1="$b1" -v hz="$HZ" -v own="$(cpu_of "${tf[@]}")" -v w="$wall" \
        'BEGIN {o = ((b1 - b0) / hz - own) / w; printf "%.2f", o < 0 ? 0 : o}')
    log "$w $cond threads=$thr rep $rep: $wall s, others $others CPU; $(tr '\n' ' ' <"$WD/o1")"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$cond" "$thr" "$rep" "$wall" "$others" >>"$RAW"
}

for rep in $(seq 1 "$REPS"); do
    for w in "${WORKLOADS[@]}"; do
        for cond in idle busy1 busy2 pair; do
            for thr in auto 1 2; do
                one "$w" "$cond" "$thr" "$rep"
            done
        done
    done
done

REPORT=$WD/report.md
{
    echo "headprune bench/contention.sh, $(date -u '+%Y-%m-%d %H:%M') UTC, $REPS rep(s), $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p')"
    echo
    echo "Median wall seconds (others CPU); auto/1 = the default's time over --threads 1's, auto/2 idle = over --threads 2's."
    echo
    echo "| workload | condition | default (auto) | --threads 1 | --threads 2 | auto / 1 | auto / 2 |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    for w in "${WORKLOADS[@]}"; do
        for cond in idle busy1 busy2 pair; do
            row="| $w | $cond"
            declare -A med=()
            for thr in auto 1 2; do
                read -r m o < <(awk -F'\t' -v w="$w" -v c="$cond" -v t="$thr" \
                    '$1 == w && $2 == c && $3 == t {print $5, $6}' "$RAW" | sort -n |
                    awk '{v[NR] = $1; o[NR] = $2} END {i = int((NR + 1) / 2); printf "%s %s\n", v[i], o[i]}')
                med[$thr]=$m
                row="$row | $m ($o)"
            done
            row="$row | $(awk -v a="${med[auto]}" -v b="${med[1]}" 'BEGIN {printf "%.2f", a / b}')"
            row="$row | $(awk -v a="${med[auto]}" -v b="${med[2]}" 'BEGIN {printf "%.2f", a / b}') |"
            echo "$row"
            unset med
        done
    done
} >"$REPORT"
cat "$REPORT"
if [ -n "$OUT" ]; then cp "$REPORT" "$OUT"; fi
