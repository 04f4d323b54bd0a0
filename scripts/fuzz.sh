#!/usr/bin/env bash
# libFuzzer harnesses of headprune's readers (tests/fuzz/README.md says what each covers).
#
#   scripts/fuzz.sh build                 compile every harness into build-fuzz/ (clang, ASan + UBSan)
#   scripts/fuzz.sh run SECONDS [NAME...] fuzz each harness for SECONDS on a scratch copy of its
#                                         seed corpus; non-zero on any crash, leak, timeout or OOM
#   scripts/fuzz.sh regress               run every file of tests/fuzz/regressions/<name>/ through
#                                         its harness once; non-zero on any finding
#   scripts/fuzz.sh list                  the harness names
#   scripts/fuzz.sh diff SECONDS [ARCH...] the differential fuzzer (tests/fuzz/diff.c, built by meson into
#                                         build/): SECONDS per architecture (gpt2 bert llama mistral qwen2 qwen3
#                                         phi3 olmo2 gemma2 gemma3_text gpt_neox by default) with a random seed,
#                                         printed; HP_FUZZ_SEED fixes it.
#                                         Non-zero on any finding
#
# The engine sources are compiled straight into each harness (no meson build dir), so the
# sanitizers and coverage see all of the engine. Installs clang's fuzzer runtime when missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build-fuzz
fz=$root/tests/fuzz

names=(safetensors gguf gguf_model gguf_tokenizer config plan tokenizer mask query data_npy data_jsonl data_bin data_txt data_textjsonl)

die() { echo "fuzz.sh: $*" >&2; exit 2; }

deps() {
    "$root/scripts/deps.sh"
    local pkgs=(clang libclang-rt-14-dev libomp-dev python3) missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "fuzz.sh: installing ${missing[*]}" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # the Debian package name has moved between releases: check that the runtime really links
    local probe
    probe=$(mktemp -d)
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
        >"$probe/p.c"
    clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err" ||
        { cat "$probe/err" >&2; rm -rf "$probe"; die "clang cannot link libFuzzer (apt-get install libclang-rt-14-dev)"; }
    rm -rf "$probe"
}

build() {
    deps
    mkdir -p "$out/obj"
    local san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -g -O1 -fno-omit-frame-pointer)
    # every folder of the engine on the include path, as meson.build has them (a header is named by its file)
    local incs=(-I"$root/include" -I"$root/engine") d
    for d in "$root"/engine/*/; do
        [ "$(basename "$d")" = cli ] || incs+=(-I"${d%/}")
    done
    local cflags=(-std=c11 -Wall -Wextra -Wno-unused-parameter -fopenmp "${incs[@]}" -I"$out"
                  $(pkg-config --cflags sqlite3 yaml-0.1 libxxhash gsl libpcre2-8 libutf8proc))
    local libs=(-lblis -lcjson $(pkg-config --libs sqlite3 yaml-0.1 libxxhash gsl libpcre2-8 libutf8proc) -lmvec -lm)
    python3 "$root/engine/store/embed.py" "$root/engine/store/schema.sql" "$out/schema_sql.h.new" schema_sql
    cmp -s "$out/schema_sql.h.new" "$out/schema_sql.h" 2>/dev/null || mv "$out/schema_sql.h.new" "$out/schema_sql.h"
    rm -f "$out/schema_sql.h.new"

    # an object is rebuilt when its source, or any header, is newer
    local newest_h
    newest_h=$(ls -t $(find "$root/engine" -name '*.h' -not -path '*/cli/*') "$root"/include/*.h "$fz"/*.h \
               "$out/schema_sql.h" | head -1)
    local objs=() pids=() src obj extra
    # the engine's folders, every depth (engine/cli/ is the command line, not the engine); an object is named by
    # its path (engine/plan/study/gates.c -> plan_study_gates.o, beside engine/analysis/gates.c's analysis_gates.o)
    for src in $(find "$root/engine" -name '*.c' -not -path '*/cli/*' | sort); do
        [ "$(basename "$src")" = cli.c ] && continue
        obj=$(realpath --relative-to="$root/engine" "$src")
        obj=$out/obj/${obj//\//_}
        obj=${obj%.c}.o
        objs+=("$obj")
        extra=()
        # as meson.build: libmvec's SIMD expf is declared only under -ffast-math, for this one file
        [ "$(basename "$src")" = vmath.c ] && extra=(-ffast-math -fopenmp-simd -Wno-pass-failed)
        if [ ! -e "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest_h" -nt "$obj" ]; then
            nice -n 10 clang "${cflags[@]}" "${san[@]}" -fsanitize=fuzzer-no-link "${extra[@]}" -c "$src" -o "$obj" &
            pids+=($!)
            if ((${#pids[@]} >= 2)); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
        fi
    done
    for p in "${pids[@]}"; do wait "$p"; done
    rm -f "$out/libhp_fuzz.a"
    ar rcs "$out/libhp_fuzz.a" "${objs[@]}"

    local name harness defs
    for name in "${names[@]}"; do
        defs=(-DHP_FUZZ_ROOT="\"$root\"")
        harness=$fz/fuzz_$name.c
        if [[ $name == data_* ]]; then
            harness=$fz/fuzz_data.c
            defs+=(-DHP_FUZZ_EXT="\"${name#data_}\"")
        fi
        echo "fuzz.sh: building fuzz_$name" >&2
        nice -n 10 clang "${cflags[@]}" "${san[@]}" -fsanitize=fuzzer "${defs[@]}" "$harness" \
            "$out/libhp_fuzz.a" "${libs[@]}" -o "$out/fuzz_$name"
    done
}

check_name() {
    local n
    for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done
    die "no harness '$1' (scripts/fuzz.sh list)"
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# HP_FUZZ_SEED: libFuzzer's -seed (default 0: a random seed each run). scripts/test.sh, which CI
# runs, fixes it, so the mutations CI tries are the ones a run here tried.
common=(-rss_limit_mb=2048 -timeout=10 -malloc_limit_mb=2048 -seed="${HP_FUZZ_SEED:-0}")

run() {
    local secs=${1:-}
    [[ $secs =~ ^[0-9]+$ ]] || die "usage: scripts/fuzz.sh run SECONDS [NAME...]"
    shift
    local list=("$@")
    ((${#list[@]})) || list=("${names[@]}")
    local n
    for n in "${list[@]}"; do check_name "$n"; [ -x "$out/fuzz_$n" ] || die "build first: scripts/fuzz.sh build"; done
    # scratch space that survives the run, so reproducers can be read afterwards
    local work
    work=$out/runs/$(date +%Y%m%d-%H%M%S)-$$
    mkdir -p "$work"
    local failed=() rc
    for n in "${list[@]}"; do
        mkdir -p "$work/$n/corpus" "$work/$n/artifacts" "$work/$n/tmp"
        [ -d "$fz/corpus/$n" ] && cp -r "$fz/corpus/$n/." "$work/$n/corpus/"
        echo "fuzz.sh: fuzzing $n for ${secs}s (log $work/$n/log)" >&2
        rc=0
        TMPDIR=$work/$n/tmp nice -n 10 "$out/fuzz_$n" "${common[@]}" -max_total_time="$secs" \
            -print_final_stats=1 -artifact_prefix="$work/$n/artifacts/" "$work/$n/corpus" \
            >"$work/$n/log" 2>&1 || rc=$?
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)|^#[0-9]+[[:space:]]+DONE' \
            "$work/$n/log" | sed "s/^/  $n: /" >&2 || true
        if [ "$rc" -ne 0 ] || compgen -G "$work/$n/artifacts/*" >/dev/null; then
            failed+=("$n")
            echo "fuzz.sh: FINDING in $n (exit $rc):" >&2
            grep -E 'ERROR: |SUMMARY: |fuzz check failed|runtime error' "$work/$n/log" | head -5 | sed 's/^/    /' >&2 || true
            local a
            for a in "$work/$n/artifacts"/*; do
                [ -e "$a" ] && echo "    reproducer: $a  (replay: $out/fuzz_$n $a)" >&2
            done
        fi
        rm -rf "$work/$n/tmp"
    done
    if ((${#failed[@]})); then
        echo "fuzz.sh: findings in: ${failed[*]} (logs and reproducers under $work)" >&2
        exit 1
    fi
    echo "fuzz.sh: no findings (logs under $work)" >&2
}

regress() {
    local failed=() n dir files rc tmp
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    for dir in "$fz"/regressions/*/; do
        [ -d "$dir" ] || continue
        n=$(basename "$dir")
        check_name "$n"
        [ -x "$out/fuzz_$n" ] || die "build first: scripts/fuzz.sh build"
        files=("$dir"*)
        [ -e "${files[0]}" ] || continue
        rc=0
        TMPDIR=$tmp "$out/fuzz_$n" "${common[@]}" "${files[@]}" >"$tmp/$n.log" 2>&1 || rc=$?
        if [ "$rc" -ne 0 ]; then
            failed+=("$n")
            echo "fuzz.sh: regression in $n (exit $rc):" >&2
            grep -E 'Running: |ERROR: |SUMMARY: |fuzz check failed|runtime error' "$tmp/$n.log" | tail -6 | sed 's/^/    /' >&2
        else
            echo "fuzz.sh: $n: ${#files[@]} regression input(s) pass" >&2
        fi
    done
    if ((${#failed[@]})); then
        echo "fuzz.sh: regressions fail in: ${failed[*]}" >&2
        exit 1
    fi
}

# The differential fuzzer: an optimised meson build (its numbers are the engine's as shipped), one run per
# architecture, each with the same seed, which is printed so a finding can be rerun.
diff_run() {
    local secs=${1:-}
    [[ $secs =~ ^[0-9]+$ ]] || die "usage: scripts/fuzz.sh diff SECONDS [ARCH...]"
    shift
    local archs=("$@")
    ((${#archs[@]})) || archs=(gpt2 bert llama mistral qwen2 qwen3 phi3 olmo2 gemma2 gemma3_text gpt_neox)
    (cd "$root" && { [ -f build/build.ninja ] || meson setup build >/dev/null; } && meson compile -C build fuzz_diff >/dev/null) ||
        die "cannot build build/tests/fuzz_diff"
    local seed=${HP_FUZZ_SEED:-0}
    [ "$seed" != 0 ] || seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    echo "fuzz.sh: differential fuzzing, seed $seed, ${secs}s per architecture: ${archs[*]}" >&2
    local failed=() a rc
    for a in "${archs[@]}"; do
        rc=0
        nice -n 10 "$root/build/tests/fuzz_diff" --seed "$seed" --seconds "$secs" --arch "$a" || rc=$?
        [ "$rc" -eq 0 ] || failed+=("$a")
        [ "$rc" -le 1 ] || die "fuzz_diff --arch $a stopped with status $rc"
    done
    if ((${#failed[@]})); then
        echo "fuzz.sh: differential findings in: ${failed[*]} (seed $seed; each FINDING line says how to rerun it)" >&2
        exit 1
    fi
    echo "fuzz.sh: no differential findings (seed $seed)" >&2
}

case ${1:-} in
build) build ;;
run) shift; run "$@" ;;
regress) regress ;;
list) printf '%s\n' "${names[@]}" ;;
diff) shift; diff_run "$@" ;;
*) die "usage: scripts/fuzz.sh build | run SECONDS [NAME...] | regress | list | diff SECONDS [ARCH...]" ;;
esac
