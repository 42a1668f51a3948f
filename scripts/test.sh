#!/usr/bin/env bash
# The test command: installs what is missing, builds with ASan+UBSan, runs the unit tests
# (meson test), builds the Debian package and checks it with lintian (scripts/package.sh), runs
# the integration tests (pytest, real kernel, in namespaces the tests make; test_systemd_boot.py
# installs the package under a real systemd in a container) and a short run of every fuzzer
# (scripts/fuzz.sh --check; BT_FUZZ_SECONDS each, default 20), checks that no namespace of its own was
# left behind (in a /run/netns of the run's own), and prints one summary line. BT_NETNS_PREFIX
# (default bt-) names the namespaces the tests make and the ones counted (and deleted) as left
# behind: another prefix keeps two runs on one machine from counting each other's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

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
bash scripts/build.sh asan || { echo "test.sh: FAILED: build (asan)"; summary 0 1 0; exit 1; }
# The optimized build too: -O2 finds warnings (-Werror) that the -O0 sanitizer build does not.
bash scripts/build.sh release || { echo "test.sh: FAILED: build (release)"; summary 0 1 0; exit 1; }
tmp=$(mktemp -d /tmp/bigtcpd-test.XXXXXX)
trap 'rm -rf -- "$tmp"' EXIT

before=$(bt_namespaces)
if [[ -n $before ]]; then
        echo "warning: $BT_NETNS_PREFIX* namespaces exist before the tests (not counted as leaks):" "${before//$'\n'/ }"
fi

failed=()

echo "== unit tests (build-asan)"
meson test -C build-asan --print-errorlogs
unit_rc=$?
[[ $unit_rc -eq 0 ]] || failed+=("unit tests (meson test exit $unit_rc)")

# The Debian package (dpkg-buildpackage, lintian): test_systemd_boot.py installs it in a container
# under a real systemd.
echo "== Debian package (scripts/package.sh)"
bash scripts/package.sh "$tmp/debs" </dev/null
package_rc=$?
[[ $package_rc -eq 0 ]] || failed+=("Debian package (package.sh exit $package_rc)")

echo "== integration tests (build-asan/daemon/bigtcpd)"
BIGTCPD_DEB_DIR=$tmp/debs \
        BIGTCPD_BIN=$PWD/build-asan/daemon/bigtcpd \
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        /usr/bin/python3 -m pytest -v --junitxml="$tmp/integration.xml" \
        tests/integration </dev/null
integ_rc=$?
# pytest: 5 means no test was collected, which is a failure here, not a pass
[[ $integ_rc -eq 0 ]] || failed+=("integration tests (pytest exit $integ_rc)")

# Each fuzzer replays its committed corpus and regression inputs, then fuzzes briefly; its own
# clang build (build-fuzz/, ASan+UBSan). Long runs: scripts/fuzz.sh TARGET SECONDS.
fuzz_seconds=${BT_FUZZ_SECONDS:-20}
echo "== fuzzers (build-fuzz, corpus and regressions, then ${fuzz_seconds}s each)"
bash scripts/fuzz.sh --check "$fuzz_seconds" 2>&1 | tee "$tmp/fuzz.log"
fuzz_rc=${PIPESTATUS[0]}
[[ $fuzz_rc -eq 0 ]] || failed+=("fuzzers (fuzz.sh --check exit $fuzz_rc)")
read -r fuzz_passed fuzz_failed < <(sed -n 's/^fuzz-check: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' "$tmp/fuzz.log")

leaked=$(comm -13 <(printf '%s\n' "$before") <(bt_namespaces) | sed '/^$/d')
if [[ -n $leaked ]]; then
        failed+=("namespaces left behind: ${leaked//$'\n'/ }")
        for ns in $leaked; do ip netns del "$ns" 2>/dev/null || true; done
fi

# counts: meson's test log (one JSON object per line) and pytest's JUnit XML
read -r passed nfailed skipped < <(/usr/bin/python3 - build-asan/meson-logs/testlog.json \
        "$tmp/integration.xml" <<'PY'
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
try:
    root = ET.parse(sys.argv[2]).getroot()
    for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        n, bad = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        sk = int(suite.get("skipped", 0))
        p, f, s = p + n - bad - sk, f + bad, s + sk
except (OSError, ET.ParseError):
    pass
print(p, f, s)
PY
)
passed=$((${passed:-0} + ${fuzz_passed:-0}))
nfailed=$((${nfailed:-0} + ${fuzz_failed:-0}))
# a failure that no test counted (crash, no tests collected, leaked namespace) still counts
[[ ${#failed[@]} -gt 0 && ${nfailed:-0} -eq 0 ]] && nfailed=${#failed[@]}

echo
if [[ ${#failed[@]} -eq 0 ]]; then
        echo "test.sh: PASSED (unit tests, Debian package, integration tests, fuzzers, no namespaces left behind)"
        summary "${passed:-0}" 0 "${skipped:-0}"
        exit 0
fi
echo "test.sh: FAILED: $(IFS=';'; echo "${failed[*]}")"
summary "${passed:-0}" "${nfailed:-1}" "${skipped:-0}"
exit 1
