#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz: builds them with clang, ASan and UBSan into build-fuzz/,
# and runs them. See tests/fuzz/README.md.
#
#   scripts/fuzz.sh TARGET|all SECONDS [LIBFUZZER-OPTION...]
#       Fuzz each target for SECONDS, one after the other. The corpus grows in
#       build-fuzz/fuzz/TARGET/corpus (seeded from tests/fuzz/corpus/TARGET and
#       tests/fuzz/regressions/TARGET, which are only read); crashes land in
#       build-fuzz/fuzz/TARGET/artifacts/, the log in build-fuzz/fuzz/TARGET/run.log.
#   scripts/fuzz.sh --check [SECONDS]
#       The test suite's short run: every target replays its committed corpus and regression
#       inputs, then fuzzes for SECONDS (default 20) into a temporary directory. Writes nothing
#       under tests/. Ends with "fuzz-check: P passed, F failed".
#   scripts/fuzz.sh --merge TARGET|all
#       Minimize the committed corpus plus the grown one into tests/fuzz/corpus/TARGET: the named
#       seeds stay, of the rest only inputs that add coverage.
#   scripts/fuzz.sh --build
#       Only build.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build-fuzz
targets=(fuzz-policy fuzz-state fuzz-netlink fuzz-varlink fuzz-snmp)
# -Werror stays with the gcc builds (build.sh): a warning only clang has must not stop fuzzing.
# -O1 with line tables only, as OSS-Fuzz builds: a crash's stack still names file and line, and
# the build costs 73 CPU-s instead of -O2 -g's 87 (the suite builds it every run).
opts=(-Dfuzz=true -Dbuildtype=plain '-Dc_args=-O1 -gline-tables-only' '-Db_sanitize=address,undefined'
        -Db_lundef=false -Dwerror=false)

# UBSan only reports unless told to stop; LeakSanitizer runs at the end of every input.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}

usage() {
        sed -n '5,19s/^# \{0,1\}//p' "$0" >&2
        exit 2
}

build() {
        local stamp=$dir/.bigtcpd-build-options want="CC=clang ${opts[*]}"
        if [[ ! -f $dir/meson-private/coredata.dat ]]; then
                CC=clang meson setup "${opts[@]}" "$dir" >/dev/null
        elif [[ ! -f $dir/build.ninja || ! -f $stamp || $(<"$stamp") != "$want" ]]; then
                CC=clang meson setup --reconfigure "${opts[@]}" "$dir" >/dev/null ||
                        CC=clang meson setup --wipe "${opts[@]}" "$dir" >/dev/null
        fi
        printf '%s\n' "$want" >"$stamp"
        # only the fuzzers and what they link, not the daemon, CLI and unit tests
        if ! ninja -C "$dir" "${targets[@]/#/tests/fuzz/}" >"$dir/fuzz-build.log" 2>&1; then
                grep -v '^\[' "$dir/fuzz-build.log" | tail -n 40 >&2
                echo "fuzz.sh: build failed (log: $dir/fuzz-build.log)" >&2
                return 1
        fi
        grep -E 'warning:' "$dir/fuzz-build.log" | sort -u | sed 's/^/fuzz.sh: clang: /' >&2 || true
}

# The targets that run the engine keep their state files (and fuzz-varlink its socket) in
# /dev/shm/bigtcpd-fuzz-TARGET.PID. A fuzzer removes its own at exit, but a crash ends it without
# (libFuzzer's -fork jobs, too): those of processes that are gone are removed here.
sweep_shm() {
        local d pid
        for d in /dev/shm/bigtcpd-fuzz-*.*; do
                [[ -d $d ]] || continue
                pid=${d##*.}
                [[ $pid =~ ^[0-9]+$ && ! -d /proc/$pid ]] && rm -rf -- "$d"
        done
        return 0
}

# select NAME: the targets NAME stands for
select_targets() {
        local t
        if [[ $1 == all ]]; then
                echo "${targets[@]}"
                return
        fi
        for t in "${targets[@]}"; do
                [[ $t == "$1" || fuzz-$1 == "$t" ]] && { echo "$t"; return; }
        done
        echo "fuzz.sh: no target $1 (targets: ${targets[*]})" >&2
        exit 2
}

# seed_dirs TARGET: the committed inputs that exist
seed_dirs() {
        local d
        for d in "tests/fuzz/corpus/$1" "tests/fuzz/regressions/$1"; do
                [[ -d $d ]] && echo "$d"
        done
}

dict_opt() {
        [[ -f tests/fuzz/$1.dict ]] && echo "-dict=tests/fuzz/$1.dict"
        return 0
}

# The last status line and the final stats of a libFuzzer log, on one line.
figures() {
        local log=$1 status execs rate
        status=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
        printf 'executions %s, exec/s %s, %s\n' "${execs:-?}" "${rate:-?}" \
                "$(sed -E 's/^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+//; s/[[:space:]]+/ /g' <<<"$status")"
}

run_one() {
        local t=$1 secs=$2 work=$dir/fuzz/$1 rc=0
        shift 2
        mkdir -p "$work/corpus" "$work/artifacts" "$work/tmp"
        echo "== $t: ${secs}s (log: $work/run.log)"
        # $(dict_opt) and $(seed_dirs) are split on purpose: each is zero or more words
        # shellcheck disable=SC2046
        TMPDIR=$PWD/$work/tmp "$dir/tests/fuzz/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
                -print_final_stats=1 -artifact_prefix="$work/artifacts/" $(dict_opt "$t") "$@" \
                "$work/corpus" $(seed_dirs "$t") >"$work/run.log" 2>&1 || rc=$?
        rm -rf -- "${work:?}/tmp"
        sweep_shm
        echo "$t: $(figures "$work/run.log"), corpus $(find "$work/corpus" -type f | wc -l) files"
        if [[ $rc -ne 0 ]]; then
                echo "$t: FAILED (exit $rc); the end of its log:" >&2
                tail -n 40 "$work/run.log" >&2
                ls -l "$work/artifacts" >&2
        fi
        return "$rc"
}

check() {
        local secs=${1:-20} tmp t rc passed=0 failed=0 start=$SECONDS
        tmp=$(mktemp -d /tmp/bigtcpd-fuzz-check.XXXXXX)
        # shellcheck disable=SC2064  # expand now: $tmp is local
        trap "rm -rf -- '$tmp'" EXIT
        for t in "${targets[@]}"; do
                mkdir -p "$tmp/$t/new" "$tmp/$t/tmp"
                rc=0
                # shellcheck disable=SC2046
                # -timeout is wall-clock time: the suite runs this niced beside its tests, where an
                # input of under a second here (slowest_unit_time_sec 0 in 100 s runs) can take ten
                # times as long; a hang still ends the run, a slow machine does not
                TMPDIR=$tmp/$t/tmp "$dir/tests/fuzz/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=60 \
                        -print_final_stats=1 -artifact_prefix="$tmp/$t/" $(dict_opt "$t") \
                        "$tmp/$t/new" $(seed_dirs "$t") >"$tmp/$t/log" 2>&1 || rc=$?
                sweep_shm
                if [[ $rc -eq 0 ]]; then
                        echo "fuzz $t: ok: $(figures "$tmp/$t/log")"
                        passed=$((passed + 1))
                else
                        echo "fuzz $t: FAILED; the end of its log:"
                        tail -n 40 "$tmp/$t/log"
                        local a
                        # the gist on lines of their own, for a reader that sees only a run's last
                        # lines (test.sh prints them at its end): what broke, where, and the input
                        # itself when it is small, so that a CI run's failure can be replayed here
                        grep -E '^(SUMMARY|==[0-9]+== ?ERROR)|^ +#[0-7] ' "$tmp/$t/log" | head -n 12 |
                                sed "s/^/fuzz-failure: $t: /"
                        for a in "$tmp/$t"/crash-* "$tmp/$t"/leak-* "$tmp/$t"/timeout-* "$tmp/$t"/oom-*; do
                                [[ -f $a ]] || continue
                                mkdir -p "$dir/fuzz/$t/artifacts"
                                cp -- "$a" "$dir/fuzz/$t/artifacts/"
                                echo "fuzz $t: input kept as $dir/fuzz/$t/artifacts/$(basename "$a")"
                                if [[ $(stat -c %s "$a") -le 3072 ]]; then
                                        echo "fuzz-failure: $t: input $(basename "$a"), base64: $(base64 -w0 "$a")"
                                fi
                        done
                        failed=$((failed + 1))
                fi
        done
        echo "fuzz-check: $passed passed, $failed failed ($((SECONDS - start))s)"
        [[ $failed -eq 0 ]]
}

# The seeds (written or recorded by hand: named files) stay as they are; of the inputs found by
# fuzzing (named by their SHA-1), a small set that adds coverage beyond them is kept, so that the
# committed corpus stays small: first inputs of up to 4 KiB by every feature (edges and hit
# counts), then larger ones only for edges nothing smaller reaches.
merge() {
        local t=$1 work=$dir/fuzz/$1 dest=tests/fuzz/corpus/$1 new f step
        new=$(mktemp -d "/tmp/bigtcpd-fuzz-merge.XXXXXX")
        mkdir -p "$work/corpus" "$work/tmp" "$dest"
        for f in "$dest"/*; do
                [[ -f $f && ! $(basename "$f") =~ ^[0-9a-f]{40}$ ]] && cp -- "$f" "$new/"
        done
        : >"$work/merge.log"
        for step in -max_len=4096 -use_counters=0; do
                # shellcheck disable=SC2046
                TMPDIR=$PWD/$work/tmp "$dir/tests/fuzz/$t" -set_cover_merge=1 "$step" -rss_limit_mb=2048 \
                        -timeout=10 $(dict_opt "$t") "$new" "$dest" "$work/corpus" >>"$work/merge.log" 2>&1 || {
                        tail -n 20 "$work/merge.log" >&2
                        rm -rf -- "$new"
                        return 1
                }
        done
        rm -rf -- "${work:?}/tmp"
        sweep_shm
        find "$dest" -maxdepth 1 -type f -delete
        cp -- "$new"/* "$dest"/
        rm -rf -- "$new"
        echo "$t: $(find "$dest" -type f | wc -l) files ($(find "$dest" -type f -regextype egrep \
                -regex '.*/[0-9a-f]{40}' | wc -l) found by fuzzing), $(cat "$dest"/* | wc -c) bytes in $dest"
}

[[ $# -ge 1 ]] || usage
case $1 in
-h | --help) usage ;;
--build) build ;;
--check)
        build
        check "${2:-20}"
        ;;
--merge)
        [[ $# -eq 2 ]] || usage
        build
        for t in $(select_targets "$2"); do merge "$t"; done
        ;;
-*) usage ;;
*)
        [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage
        sel=$(select_targets "$1")
        secs=$2
        shift 2
        build
        rc=0
        for t in $sel; do run_one "$t" "$secs" "$@" || rc=1; done
        exit "$rc"
        ;;
esac
