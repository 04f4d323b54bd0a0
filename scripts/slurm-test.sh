#!/usr/bin/env bash
# `headprune slurm` against a real Slurm: a single-node cluster from Debian's
# packages (munged, slurmctld, slurmd as root, all state in a temporary
# folder, on free ports of 127.0.0.1) runs plans/quickstart.yaml as 4 shards
# plus the merge, from a folder whose path has blanks and quotes in it.
#
#  1. a submission sbatch refuses (a partition that does not exist): exit 1,
#     one line quoting sbatch's error;
#  2. the real run (with an #SBATCH value of quotes, blanks and '#' that
#     sbatch must read back exactly), with shard 2 made to fail (its database path taken by a
#     folder): the other shards finish, and the merge job fails, naming
#     shard 2 and printing the command that re-runs it;
#  3. that command, run as printed once the obstacle is gone: shard 2 runs
#     again, the merge completes, and the merged database answers
#     `query heads`, `query curve` and `query redundancy` exactly as a
#     one-process `headprune run` of the same plan does (the text compared
#     whole: these outputs hold no timings).
# Each task's log must show it ran with one thread per CPU it was given.
# One CPU a task: on a machine shared with other work, 2-thread BLIS
# barriers stall (bench/README.md, Contention), and the test is about
# Slurm, not speed (tests/test_slurm.c checks a task given 2 CPUs runs 2
# threads).
#
# Usage: scripts/slurm-test.sh [BUILD_DIR]      (default build; headprune built there)
# Exit status: 0 passed, 77 skipped (only where Slurm cannot start: not root,
# the packages not installable; the reason printed), 1 failed. The daemons
# are stopped and the folder removed however it ends.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
build=${1:-build}
hp_built="$repo/$build/headprune"
wait_max=${HP_SLURM_WAIT:-600} # seconds a job may take before the test gives up

say() { echo "slurm-test: $*" >&2; }
skip() {
    say "SKIPPED: $*"
    exit 77
}
T=""
work=""
fail() {
    say "FAILED: $*"
    if [ -n "$T" ]; then
        for f in "$T"/log/*.log "$work"/out/quickstart.slurm/logs/*; do
            [ -f "$f" ] && { echo "--- $f (last lines)" >&2; tail -n 15 "$f" >&2; }
        done
    fi
    exit 1
}

[ -x "$hp_built" ] || fail "$hp_built: not built (meson compile -C $build)"
[ "$(id -u)" -eq 0 ] || skip "not root: munged, slurmctld and slurmd must be started as root"

# --- packages ------------------------------------------------------------------------
pkgs=(munge slurm-client slurmctld slurmd)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null; } || skip "cannot install ${missing[*]} with apt-get"
fi
for c in munged munge slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
    command -v "$c" >/dev/null || skip "$c: not found after installing ${pkgs[*]}"
done

# --- a private cluster -----------------------------------------------------------------
T=$(mktemp -d /tmp/hp-slurm-test.XXXXXX)
work="$T/work dir with 'quotes' and \"double\" ones"
pids=()
cleanup() {
    if [ -f "$T/slurm.conf" ] && ((${#pids[@]} > 1)); then
        scancel --quiet --full --user=root 2>/dev/null # only this private cluster's jobs: SLURM_CONF is ours
        for _ in $(seq 20); do
            [ -z "$(squeue -h 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do # slurmd, slurmctld, munged: the reverse of their start
        kill "${pids[i]}" 2>/dev/null
        for _ in $(seq 20); do
            kill -0 "${pids[i]}" 2>/dev/null || break
            sleep 0.25
        done
        kill -9 "${pids[i]}" 2>/dev/null
        wait "${pids[i]}" 2>/dev/null
    done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

mkdir -p "$T"/{state,spool,log,munge-key} "$T/munge" "$work"/{plans,models,bin,out}
chmod 700 "$T/munge-key"
chmod 755 "$T" "$T/munge"
head -c 1024 /dev/urandom >"$T/munge-key/munge.key"
chmod 400 "$T/munge-key/munge.key"
sock="$T/munge/munge.socket"
munged -F -f --socket="$sock" --key-file="$T/munge-key/munge.key" --log-file="$T/log/munged.log" \
    --pid-file="$T/munge/munged.pid" --seed-file="$T/munge/munged.seed" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 40); do
    [ -S "$sock" ] && break
    sleep 0.25
done
munge -n --socket="$sock" | unmunge --socket="$sock" >/dev/null || fail "munged does not answer on $sock"

# two free ports of 127.0.0.1 for slurmctld and slurmd
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ctld_port=""
for base in $(seq 16817 2 16917); do
    if port_free "$base" && port_free $((base + 1)); then
        ctld_port=$base
        break
    fi
done
[ -n "$ctld_port" ] || fail "no two free ports in 16817-16918"

cpus=$(nproc)
cat >"$T/slurm.conf" <<EOF
# a one-node cluster for scripts/slurm-test.sh: everything as root, state under $T
ClusterName=hptest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
# no systemd, no cgroups in a container: processes tracked by their parentage, tasks not bound
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=5
NodeName=localhost CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$T/slurm.conf"

slurmctld -D -i -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
    scontrol ping 2>/dev/null | grep -q "is UP" && break
    sleep 0.5
done
scontrol ping 2>/dev/null | grep -q "is UP" || fail "slurmctld did not come up"
slurmd -D -N localhost -f "$SLURM_CONF" >"$T/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do
    [ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle ] && break
    sleep 0.5
done
[ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle ] || fail "slurmd did not register the node (sinfo: $(sinfo 2>&1))"
say "a single-node Slurm is up (slurmctld on 127.0.0.1:$ctld_port, $cpus CPUs)"

# --- the plan, the model and the binary, under a path with blanks and quotes -------------
cp plans/quickstart.yaml "$work/plans/"
cp -r models/default "$work/models/"
cp "$hp_built" "$work/bin/headprune"
hp="$work/bin/headprune"
plan="$work/plans/quickstart.yaml"
out="$work/out/quickstart.db"
dir="$work/out/quickstart.slurm"

# Wait for job $1 to end; its final state into $state.
wait_job() {
    local t0=$SECONDS
    while ((SECONDS - t0 < wait_max)); do
        state=$(scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -n 1 | cut -d= -f2)
        case "$state" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) return 0 ;;
        esac
        sleep 1
    done
    fail "job $1 still ${state:-unknown} after ${wait_max}s (squeue: $(squeue 2>&1 | tr '\n' ';'))"
}

# --- 1. sbatch refuses: one line, exit 1 -------------------------------------------------
"$hp" slurm "$plan" --shards 4 --db "$T/refused.db" --partition no-such-partition >"$T/o" 2>"$T/e"
rc=$?
[ "$rc" -eq 1 ] || fail "a partition sbatch refuses: exit $rc, not 1 (stderr: $(cat "$T/e"))"
[ "$(wc -l <"$T/e")" -eq 1 ] || fail "a partition sbatch refuses: not one line on stderr: $(cat "$T/e")"
grep -q "^headprune: sbatch shards.sbatch: .*no-such-partition" "$T/e" ||
    fail "the message does not quote sbatch's error: $(cat "$T/e")"
say "ok: sbatch's refusal quoted on one line: $(cat "$T/e")"

# --- the reference: one process ---------------------------------------------------------
"$hp" run "$plan" --db "$T/reference.db" --quiet >/dev/null || fail "the one-process run failed"

# --- 2. the array with shard 2 failing ----------------------------------------------------
mkdir -p "$dir/shard-2-of-4.db" # a folder where shard 2's database should go: its run fails
comment='it'"'"'s a "test" #1 \o/' # sbatch reads it back from its own quoting of the #SBATCH line
"$hp" slurm "$plan" --shards 4 --db "$out" --cpus-per-task 1 --time 10:00 --sbatch-arg="--comment=$comment" \
    >"$T/o" 2>"$T/e" || fail "headprune slurm: $(cat "$T/e")"
cat "$T/o" >&2
array=$(sed -n 's/^submitted job array \([0-9]*\) .* merge job \([0-9]*\) .*/\1/p' "$T/o")
merge=$(sed -n 's/^submitted job array \([0-9]*\) .* merge job \([0-9]*\) .*/\2/p' "$T/o")
[ -n "$array" ] && [ -n "$merge" ] || fail "no job ids in: $(cat "$T/o")"
grep -q "squeue -j $array,$merge" "$T/o" || fail "no squeue line to follow the jobs"
for j in "$array" "$merge"; do
    got=$(scontrol show job "$j" | sed -n 's/^ *Comment=\(.*[^ ]\) *$/\1/p' | head -n 1) # scontrol pads the line
    [ "$got" = "$comment" ] || fail "job $j: sbatch read --comment as [$got], not [$comment]"
done
wait_job "$merge"
[ "$state" = FAILED ] || fail "merge job $merge ended $state, though shard 2 could not have finished"
mlog="$dir/logs/merge.$merge.out"
grep -q "^headprune: shard 2 of 4 did not finish" "$mlog" || fail "the merge does not name shard 2: $(cat "$mlog")"
rerun=$(grep "^  cd .* && jid=\$(sbatch --parsable --array=2 shards.sbatch) && sbatch" "$mlog")
[ -n "$rerun" ] || fail "the merge prints no re-run command: $(cat "$mlog")"
for k in 1 3 4; do # --threads given (no "(auto)"): 1, the CPUs Slurm gave the task
    log="$dir/logs/shard-$k-of-4.$array.out"
    grep -q "^sweep .*, 1 thread, peak" "$log" || fail "shard $k did not run with --threads 1: $(tail -n 2 "$log")"
done
say "ok: shard 2 failed, the merge named it and printed: $rerun"

# --- 3. the printed command re-runs it ---------------------------------------------------
rmdir "$dir/shard-2-of-4.db"
bash -c "$rerun" >"$T/o" 2>"$T/e" || fail "the re-run command failed: $(cat "$T/e")"
merge2=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' "$T/o")
[ -n "$merge2" ] || fail "no merge job id from the re-run command: $(cat "$T/o")"
wait_job "$merge2"
[ "$state" = COMPLETED ] || fail "the second merge job $merge2 ended $state: $(cat "$dir/logs/merge.$merge2.out")"
grep -q "^headprune: all 4 shards finished" "$dir/logs/merge.$merge2.out" ||
    fail "the second merge did not report all shards: $(cat "$dir/logs/merge.$merge2.out")"

for q in heads curve redundancy; do
    "$hp" query "$q" --db "$T/reference.db" >"$T/ref-$q.txt" || fail "query $q of the reference failed"
    "$hp" query "$q" --db "$out" >"$T/slurm-$q.txt" || fail "query $q of the merged database failed"
    [ -s "$T/ref-$q.txt" ] || fail "query $q of the reference printed nothing"
    diff -u "$T/ref-$q.txt" "$T/slurm-$q.txt" >&2 || fail "query $q: the merged database differs from one process"
done
say "ok: after the re-run, query heads, curve and redundancy of the merged database equal one process's"
say "passed"
