# Shared by scripts/demo.sh and tests/bench/: cleanup bookkeeping, daemon start with
# readiness, small namespace helpers. Source it; it defines functions only, plus one trap.
# shellcheck shell=bash

BT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BT_PY=/usr/bin/python3
BT_NL=${BT_NL:-$BT_ROOT/tests/integration/nl.py}

bt_pids=()
bt_netns=()
bt_tmpdirs=()

# bt_alive PID: the process exists and is not a zombie (a daemon whose starter exited is
# reaped by init, which need not be quick about it).
bt_alive() {
        local state
        state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
        [[ -n $state && $state != Z && $state != X ]]
}

bt_log() { printf "== %s\n" "$*"; }
bt_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

bt_require_root() {
        [[ $(id -u) -eq 0 ]] || bt_die "must run as root (try: sudo bash $0)"
}

# Stops every process this script started (by pid: TERM, then KILL after 5 s), then
# deletes the namespaces and temporary directories it made. Runs on any exit.
bt_cleanup() {
        local rc=$? pid i
        trap - EXIT INT TERM
        for pid in "${bt_pids[@]}"; do
                kill -TERM "$pid" 2>/dev/null || true
        done
        for pid in "${bt_pids[@]}"; do
                for ((i = 0; i < 50; i++)); do
                        bt_alive "$pid" || break
                        sleep 0.1
                done
                if bt_alive "$pid"; then
                        echo "warning: pid $pid ignored SIGTERM, killing it" >&2
                        kill -KILL "$pid" 2>/dev/null || true
                fi
                wait "$pid" 2>/dev/null || true
        done
        for ns in "${bt_netns[@]}"; do
                ip netns del "$ns" 2>/dev/null || true
        done
        for d in "${bt_tmpdirs[@]}"; do
                rm -rf -- "$d"
        done
        exit "$rc"
}
trap bt_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# bt_mktemp VAR: a temporary directory in VAR, removed at exit. Not $(bt_mktemp): a command
# substitution runs in a subshell, and the directory would never reach bt_tmpdirs.
bt_mktemp() {
        local d
        d=$(mktemp -d /tmp/bigtcpd.XXXXXX)
        bt_tmpdirs+=("$d")
        printf -v "$1" '%s' "$d"
}

# bt_netns_add NAME: a fresh namespace with lo up. A leftover of the same name (from a run
# that was killed hard) is deleted first.
bt_netns_add() {
        local ns=$1
        if ip netns list | awk '{print $1}' | grep -qxF "$ns"; then
                echo "warning: deleting leftover namespace $ns" >&2
                ip netns del "$ns"
        fi
        ip netns add "$ns"
        bt_netns+=("$ns")
        ip -n "$ns" link set lo up
}

bt_forget_pid() {
        local pid=$1 i
        for i in "${!bt_pids[@]}"; do
                [[ ${bt_pids[$i]} == "$pid" ]] && unset 'bt_pids[i]'
        done
        bt_pids=("${bt_pids[@]}")
}

# bt_stop PID: stop one process started by this script and wait until it is gone.
bt_stop() {
        local pid=$1 i
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
                bt_alive "$pid" || break
                sleep 0.1
        done
        if bt_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
        wait "$pid" 2>/dev/null || true
        bt_forget_pid "$pid"
}

# shellcheck disable=SC2034  # BT_DAEMON_PID is for the caller
# bt_start_daemon NS LOG RUNTIME_DIR CONFIG [ARGS...]: runs bigtcpd ($BIGTCPD_BIN, default
# build/daemon/bigtcpd) in NS and returns once it sent READY=1 on its NOTIFY_SOCKET (it
# does so after its first full reconcile). Sets BT_DAEMON_PID. Fails, leaving nothing
# running, if the daemon exits first or is not ready within $BT_READY_TIMEOUT (30 s).
bt_start_daemon() {
        local ns=$1 log=$2 rundir=$3 config=$4 pid
        shift 4
        local bin=${BIGTCPD_BIN:-$BT_ROOT/build/daemon/bigtcpd}
        [[ -x $bin ]] || bt_die "$bin not found; build it with: bash scripts/build.sh"
        mkdir -p "$rundir"
        pid=$("$BT_PY" - "$log" "${BT_READY_TIMEOUT:-30}" \
                ip netns exec "$ns" "$bin" --config "$config" --runtime-dir "$rundir" "$@" <<'PY'
import os, shutil, socket, subprocess, sys, tempfile, time

log, timeout, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
d = tempfile.mkdtemp(prefix="bigtcpd-notify.")
path = os.path.join(d, "notify")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)  # before the daemon starts, so no READY=1 is lost
sock.settimeout(0.1)
with open(log, "ab") as out:
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            env=dict(os.environ, NOTIFY_SOCKET=path))
deadline = time.monotonic() + timeout
error = None
while True:
    try:
        if b"READY=1" in sock.recv(65536).split(b"\n"):
            break
    except socket.timeout:
        pass
    if proc.poll() is not None:
        error = f"exited with status {proc.returncode} before READY=1"
        break
    if time.monotonic() > deadline:
        error = f"sent no READY=1 within {timeout:g} s"
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        break
sock.close()
shutil.rmtree(d, ignore_errors=True)
if error:
    print(f"bigtcpd {error}; its log: {log}", file=sys.stderr)
    sys.exit(1)
print(proc.pid)
PY
        ) || { tail -n 20 "$log" >&2; return 1; }
        bt_pids+=("$pid")
        BT_DAEMON_PID=$pid
}

# bt_show NS: every device's sizes as the kernel reports them (tests/integration/nl.py).
bt_show() {
        "$BT_PY" "$BT_NL" show --netns "$1"
}
