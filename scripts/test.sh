#!/usr/bin/env bash
# The test command: installs what is missing, builds with ASan+UBSan, runs the unit tests
# (meson test) and the integration tests (pytest, real kernel, in namespaces the tests make;
# test_systemd_boot.py installs the package under a real systemd in a container), and beside
# them, in the background, builds the Debian package (its -O2 build with -Werror: the optimized
# build) and checks it with lintian (scripts/package.sh), and runs a short run of every fuzzer
# (scripts/fuzz.sh --check; BT_FUZZ_SECONDS each, default 5); checks that no namespace of its
# own was left behind (in a /run/netns of the run's own), and prints one summary line.
# BT_NETNS_PREFIX (default bt-) names the namespaces the tests make and the ones counted (and
# deleted) as left behind: another prefix keeps two runs on one machine from counting each
# other's. BT_TEST_JOBS (default 4): how many processes run the integration tests.
#
#   scripts/test.sh           all of it (CI: .ci/run)
#   scripts/test.sh --quick   the edit-test loop: the ASan build, the unit tests and the
#                             integration tests not marked slow; no package (and so no
#                             optimized build), no fuzzers
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

quick=0
case $# in
0) ;;
1) [[ $1 == --quick ]] && quick=1 ;;
esac
if [[ $# -gt 1 || ($# -eq 1 && $quick -eq 0) ]]; then
        echo "usage: $0 [--quick]" >&2
        exit 2
fi

if [[ $(id -u) -ne 0 ]]; then
        echo "test.sh: must run as root (try: sudo bash scripts/test.sh)" >&2
        exit 1
fi

export BT_NETNS_PREFIX=${BT_NETNS_PREFIX:-bt-}
if [[ ! $BT_NETNS_PREFIX =~ ^bt-[a-z0-9-]{0,8}$ ]]; then
        echo "test.sh: BT_NETNS_PREFIX=$BT_NETNS_PREFIX: expected bt- and at most 8 of [a-z0-9-]" >&2
        exit 1
fi
# The run gets a /run/netns of its own: a mount namespace with a tmpfs there, where `ip netns`
# puts the namespaces the tests make. Other test runs on the same machine neither see them nor
# are seen, so the leak check below counts this run's namespaces alone, and removing a leftover
# never removes another run's; whatever is left goes with this process.
if [[ -z ${BIGTCPD_TEST_NETNS_PRIVATE:-} ]]; then
        exec env BIGTCPD_TEST_NETNS_PRIVATE=1 unshare --mount --propagation private -- bash "$PWD/scripts/test.sh" "$@"
fi
mkdir -p /run/netns
mount -t tmpfs -o mode=0755 bigtcpd-test-netns /run/netns ||
        { echo "test.sh: FAILED: a private /run/netns"; echo "summary: 0 passed, 1 failed, 0 skipped"; exit 1; }

bt_namespaces() { ip netns list 2>/dev/null | awk -v p="$BT_NETNS_PREFIX" 'index($1, p) == 1 {print $1}' | sort; }

# summary PASSED FAILED SKIPPED: the closing line, in the form CI readers count
summary() { echo "summary: $1 passed, $2 failed, $3 skipped"; }

bash scripts/setup.sh || { echo "test.sh: FAILED: setup"; summary 0 1 0; exit 1; }
tmp=$(mktemp -d /tmp/bigtcpd-test.XXXXXX)
side_pid=
unit_pid=
# On any exit (an interrupt too) the background part is stopped, by its process group, before
# its files go.
trap '[[ -n $side_pid ]] && kill -TERM -- -"$side_pid" 2>/dev/null; [[ -n $unit_pid ]] && kill -TERM -- -"$unit_pid" 2>/dev/null; wait; rm -rf -- "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

before=$(bt_namespaces)
if [[ -n $before ]]; then
        echo "warning: $BT_NETNS_PREFIX* namespaces exist before the tests (not counted as leaks):" "${before//$'\n'/ }"
fi

failed=()
fuzz_seconds=${BT_FUZZ_SECONDS:-5}

# The background part: what needs CPU but no test waits on, beside the integration tests, which
# mostly wait. The Debian package first (test_systemd_boot.py and test_systemd_fleet.py wait for
# it through BIGTCPD_DEB_STATUS). Its build is the suite's optimized build: BIGTCPD_WERROR=1
# (debian/rules) makes it -Werror, and with Debian's -O2 and hardening flags (_FORTIFY_SOURCE
# too) it finds what `build.sh release` (-O2 -g) would and more, of every target, so no release
# build of its own is made. DEB_BUILD_OPTIONS=nocheck: the package does not run the unit tests
# again, because this script runs them (meson test, below) on the same files, the package's
# copy being this tree's; under ASan and UBSan, which see what an -O2 run would and more, and a
# failure there fails the suite; the package's -O2 binaries are what test_systemd_boot.py and
# test_systemd_fleet.py run. Then each fuzzer: it replays its committed corpus and regression
# inputs, then fuzzes briefly; its own clang build (build-fuzz/, ASan+UBSan). Long runs:
# scripts/fuzz.sh TARGET SECONDS. Each step's output goes to a file of its own, shown below when
# the step is over; its exit status to STEP.rc.
side() {
        BIGTCPD_WERROR=1 DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}" \
                bash scripts/package.sh "$tmp/debs" </dev/null >"$tmp/package.log" 2>&1
        echo $? >"$tmp/package.rc.new" && mv "$tmp/package.rc.new" "$tmp/package.rc"
        # no test waits for the rest: back to idle time only, if the package was raised (below)
        idle_only "$BASHPID"
        bash scripts/fuzz.sh --check "$fuzz_seconds" </dev/null >"$tmp/fuzz.log" 2>&1
        echo $? >"$tmp/fuzz.rc"
}

# idle_only PID: the process (and what it starts from then on) runs only on CPU time and disk
# time nothing else wants: SCHED_IDLE, whose tasks any other task preempts at once, and the idle
# I/O class; nice 19 where SCHED_IDLE cannot be had.
idle_only() {
        chrt --idle -p 0 "$1" >/dev/null 2>&1 || renice -n 19 -p "$1" >/dev/null
        ionice -c 3 -p "$1" >/dev/null 2>&1 || true
}

# raise_group PGID: every process of the group back to the tests' own priority.
raise_group() {
        local p
        for p in $(pgrep -g "$1"); do
                chrt --other -p 0 "$p" >/dev/null 2>&1
                renice -n 0 -p "$p" >/dev/null 2>&1
                ionice -c 2 -n 4 -p "$p" >/dev/null 2>&1
        done
        return 0
}

# The background part starts before the ASan build and takes only the CPU the rest leaves idle
# (idle_only): the build's links, and above all the tests that measure time, which run first and
# leave more than a core idle for three minutes (they mostly wait: a window, a flood through the
# bus) — its CPU is no longer taken from the parallel tests. In a process group of its own
# (set -m), which the trap above stops.
if [[ $quick -eq 0 ]]; then
        mkdir -p "$tmp/debs"
        set -m
        (idle_only "$BASHPID" && side) &
        side_pid=$!
        set +m
fi

bash scripts/build.sh asan || { echo "test.sh: FAILED: build (asan)"; summary 0 1 0; exit 1; }

# The unit tests: no unit test measures time (meson's timeouts are hang guards), so in the full
# run they too take only idle time, beside the tests that measure time, which leave more than a
# core idle, instead of before them, where they held up everything else for half a minute. In a
# process group of their own, raised to the tests' priority if they are not over when the serial
# part is; their output is shown after the parallel part. --quick runs them here, in front.
unit_done() {
        local unit_rc
        unit_rc=$(cat "$tmp/unit.rc" 2>/dev/null || echo 1)
        [[ $unit_rc -eq 0 ]] || failed+=("unit tests (meson test exit $unit_rc)")
}
if [[ $quick -eq 1 ]]; then
        echo "== unit tests (build-asan) [at ${SECONDS}s]"
        meson test -C build-asan --no-rebuild --print-errorlogs
        echo $? >"$tmp/unit.rc"
        unit_done
else
        echo "== unit tests (build-asan), beside the tests that measure time [from ${SECONDS}s]"
        set -m
        (idle_only "$BASHPID" && meson test -C build-asan --no-rebuild --print-errorlogs </dev/null >"$tmp/unit.log" 2>&1
         echo $? >"$tmp/unit.rc.new" && mv "$tmp/unit.rc.new" "$tmp/unit.rc"
         echo "(over at ${SECONDS}s)" >>"$tmp/unit.log") &
        unit_pid=$!
        set +m
fi

# integration PART MARKEXPR ARGS...: the integration tests that MARKEXPR selects, their JUnit
# XML in $tmp/PART.xml. Exit 5 (none collected) is a failure here, not a pass.
debs=()
[[ $quick -eq 0 ]] && debs=(BIGTCPD_DEB_DIR="$tmp/debs" BIGTCPD_DEB_STATUS="$tmp/package.rc")
integration() {
        local part=$1 markexpr=$2 rc
        shift 2
        env "${debs[@]}" \
                BIGTCPD_BIN=$PWD/build-asan/daemon/bigtcpd \
                ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_sigill=1 \
                UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
                /usr/bin/python3 -m pytest -v --durations=25 -m "$markexpr" --junitxml="$tmp/$part.xml" "$@" \
                tests/integration </dev/null
        rc=$?
        [[ $rc -eq 0 ]] || failed+=("$part (pytest exit $rc)")
}

# Tests marked `serial` measure time (a latency, a deadline near what they wait for, CPU
# seconds): first, one at a time, with no other test beside them; the background part takes
# only the CPU and disk time they leave (idle_only).
only=
[[ $quick -eq 1 ]] && only=' and not slow'
echo "== integration tests that measure time, one at a time [at ${SECONDS}s]"
integration integration-serial "serial$only"

# From here the package, if it is not there yet, runs at the tests' own priority: the tests of
# test_systemd_boot.py and test_systemd_fleet.py wait for it, and beside the processes of
# tests idle time would not come (their container waited two minutes for it niced). side()
# lowers itself again once the package is over.
if [[ -n $side_pid && ! -e $tmp/package.rc ]]; then
        raise_group "$side_pid"
fi
[[ -n $unit_pid && ! -e $tmp/unit.rc ]] && raise_group "$unit_pid"

# The rest in parallel, in BT_TEST_JOBS processes (pytest-xdist): a test waits on the kernel and
# the daemon far more than it computes: with three, a tenth of the two cores' time was still idle
# (three tests in a window at once), with four it is not. Tests that share something expensive (a
# build, a booted container) are one xdist_group and run in one process. --quick leaves out the tests marked
# `slow`. tests/integration/README.md lists the marks.
jobs=${BT_TEST_JOBS:-4}
echo "== integration tests in $jobs processes (build-asan/daemon/bigtcpd) [at ${SECONDS}s]"
integration integration "not serial$only" -n "$jobs" --dist loadgroup

if [[ -n $unit_pid ]]; then
        wait "$unit_pid"
        unit_pid=
        echo "== unit tests (build-asan), run beside the tests that measure time"
        cat "$tmp/unit.log"
        unit_done
fi

if [[ -n $side_pid ]]; then
        # nothing of ours left to yield to: what is left of the background part (the fuzzers, as
        # a rule) at the tests' priority
        raise_group "$side_pid"
        wait "$side_pid"
        side_pid=
        echo "== Debian package and its -O2 build with -Werror (scripts/package.sh, beside the tests)"
        cat "$tmp/package.log"
        package_rc=$(cat "$tmp/package.rc" 2>/dev/null || echo 1)
        [[ $package_rc -eq 0 ]] || failed+=("Debian package (package.sh exit $package_rc)")
        echo "== fuzzers (build-fuzz, corpus and regressions, then ${fuzz_seconds}s each, beside the tests)"
        cat "$tmp/fuzz.log"
        fuzz_rc=$(cat "$tmp/fuzz.rc" 2>/dev/null || echo 1)
        [[ $fuzz_rc -eq 0 ]] || failed+=("fuzzers (fuzz.sh --check exit $fuzz_rc)")
        read -r fuzz_passed fuzz_failed < <(sed -n 's/^fuzz-check: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' "$tmp/fuzz.log")
fi

leaked=$(comm -13 <(printf '%s\n' "$before") <(bt_namespaces) | sed '/^$/d')
if [[ -n $leaked ]]; then
        failed+=("namespaces left behind: ${leaked//$'\n'/ }")
        for ns in $leaked; do ip netns del "$ns" 2>/dev/null || true; done
fi

# counts: meson's test log (one JSON object per line) and pytest's JUnit XML
read -r passed nfailed skipped < <(/usr/bin/python3 - build-asan/meson-logs/testlog.json \
        "$tmp/integration.xml" "$tmp/integration-serial.xml" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
p = f = s = 0
try:
    for line in open(sys.argv[1]):
        r = json.loads(line).get("result")
        if r in ("OK", "EXPECTEDFAIL"):
            p += 1
        elif r == "SKIP":
            s += 1
        else:
            f += 1
except (OSError, ValueError):
    pass
for xml in sys.argv[2:]:
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        continue
    for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        n, bad = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        sk = int(suite.get("skipped", 0))
        p, f, s = p + n - bad - sk, f + bad, s + sk
print(p, f, s)
PY
)
passed=$((${passed:-0} + ${fuzz_passed:-0}))
nfailed=$((${nfailed:-0} + ${fuzz_failed:-0}))
# a failure that no test counted (crash, no tests collected, leaked namespace) still counts
[[ ${#failed[@]} -gt 0 && ${nfailed:-0} -eq 0 ]] && nfailed=${#failed[@]}

echo
echo "test.sh: ${SECONDS}s in all"
if [[ ${#failed[@]} -eq 0 ]]; then
        if [[ $quick -eq 1 ]]; then
                echo "test.sh: PASSED (--quick: unit tests, integration tests not marked slow, no namespaces left behind)"
        else
                echo "test.sh: PASSED (unit tests, Debian package with its -O2 build, integration tests, fuzzers, no namespaces left behind)"
        fi
        summary "${passed:-0}" 0 "${skipped:-0}"
        exit 0
fi
# a fuzzer's failure again, in brief, where a reader of only the last lines sees it
grep -h '^fuzz-failure: ' "$tmp/fuzz.log" 2>/dev/null | cut -c 1-4200
echo "test.sh: FAILED: $(IFS=';'; echo "${failed[*]}")"
summary "${passed:-0}" "${nfailed:-1}" "${skipped:-0}"
exit 1
