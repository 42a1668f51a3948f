#!/usr/bin/python3
"""footprint.py — what 10000 devices cost the daemon, and how its reads compare with the kernel's
own, each figure beside its baseline from the same run (issue 37). Not part of the test suite.

One namespace with --pairs veth pairs (10000 devices by default), made once. Then --rounds rounds;
in each, every binary given (--bin, and --baseline-bin to compare two builds side by side; their
order alternates from round to round) goes through:

  * applied: a fresh runtime directory and a policy for kind veth at sizes no device holds yet
    (all four; a window of 1 s; the guard link.tx_dropped, as scale.py's, or with --guards shipped
    the guard list of conf/bigtcpd.yaml), the time to READY=1 and until GetStatus counts every device
    applied; then its VmRSS and VmHWM, and its children's RSS;
  * `bigtcpctl --json list` against `ip -n NS -j -d link show` of the same devices, --lists times
    each, interleaved, both printing to /dev/null: wall times, and the ratio of the medians;
  * a restart over the applied devices (SIGKILL, then the same runtime directory): the time to
    READY=1 against one `ip -j -d link show` measured right after;
  * probation: the same with a window of an hour (every device in probation), its RSS, and a
    restart over them;
  * auto: a policy with `ipv6: {gso-max-size: auto}` (window 2 s), every device applied, then
    --idle seconds idle: RSS at the end, and the CPU time of the daemon and its children;
  * metrics: every device applied, --metrics-listen on the namespace's loopback, then --scrapes
    GET /metrics one after the other: per scrape the CPU time of the daemon and its children, its
    wall time, and the VmHWM it reached (/proc/PID/clear_refs 5 resets the peak before each), the
    first scrape's beside the VmRSS before it;
  * monitor: every device applied, then --reloads pairs of reloads to sizes no device holds (each
    rewrites every device: a write and state events, 5 events a device), the first of a pair with
    no Monitor stream, the second with one (read by a thread): the median CPU time of each arm,
    from the Reload call until every device is applied again with every write counted, and their
    difference, what the stream costs (on a loaded machine mostly noise: --perf records each reload
    with the stream and sums what the functions that make and send the events take, callees
    included).

Each figure is printed as the median over the rounds (min..max), with the load average at the
start and the end. It asserts nothing. Run as root after `bash scripts/build.sh`:
    /usr/bin/python3 tests/bench/footprint.py [--bin build/daemon/bigtcpd] [--baseline-bin OTHER]
        [--pairs 5000] [--rounds 5] [--lists 5] [--idle 20] [--scrapes 5]
        [--only applied,probation,auto,metrics,monitor] [--guards one|shipped]
"""

import argparse
import http.client
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import burst  # noqa: E402
from burst import status_kb, timed  # noqa: E402
import helpers  # noqa: E402  (its Monitor, a stream read by a thread)
import varlink_client  # noqa: E402  (tests/integration, on the path through burst)
from scale import children, cpu_ns  # noqa: E402  (the daemon's and its children's)

IFACE = "io.bigtcpd.Manager"


ONE_GUARD = ["{counter: link.tx_dropped, max-increase: 10}"]


def shipped_guards():
    """The guards of the shipped conf/bigtcpd.yaml (its `rollback:`), each as a flow mapping."""
    with open(os.path.join(burst.ROOT, "conf", "bigtcpd.yaml")) as f:
        guards = yaml.safe_load(f)["rollback"]["guards"]
    return [yaml.safe_dump(g, default_flow_style=True, width=1000).strip() for g in guards]


def policy(size, window, auto=False, guards=ONE_GUARD):
    if auto:
        sizes = "    ipv6:\n      gso-max-size: auto\n"
    else:
        sizes = (f"    ipv6:\n      gso-max-size: {size}\n      gro-max-size: {size}\n"
                 f"    ipv4:\n      gso-max-size: {size}\n      gro-max-size: {size}\n")
    return (f"version: 1\npolicies:\n  - name: bench\n    match:\n      kind: [veth]\n{sizes}"
            f"    rollback:\n      window: {window}\n      interval: 500ms\n"
            "      guards:\n" + "".join(f"        - {g}\n" for g in guards))


def ctl_of(daemon_bin):
    for c in (os.path.join(os.path.dirname(daemon_bin), "bigtcpctl"),
              os.path.join(os.path.dirname(daemon_bin), "..", "cli", "bigtcpctl")):
        if os.access(c, os.X_OK):
            return os.path.normpath(c)
    sys.exit(f"footprint.py: no bigtcpctl beside {daemon_bin}")


class Footprint(burst.Bench):
    """The runtime directories are on a tmpfs, as /run is on a real system (each first write of a
    device waits for the state file's fsync)."""

    def __init__(self, args):
        super().__init__(args)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m,mode=0755", "bigtcpd-bench", self.tmp], check=True)
        self.mounted = True
        self.ns = f"{args.prefix}fp"
        self.n = 2 * args.pairs
        self.k = 0
        self.figures = {}  # (label, figure) -> [values]
        self.guards = shipped_guards() if args.guards == "shipped" else ONE_GUARD

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.procs.clear()
        if getattr(self, "mounted", False):
            subprocess.run(["umount", self.tmp], check=False)
            self.mounted = False
        super().cleanup()

    def policy(self, size, window, auto=False):
        return policy(size, window, auto, self.guards)

    def note(self, label, what, value):
        self.figures.setdefault((label, what), []).append(value)

    def status(self, run):
        return varlink_client.call(os.path.join(run, IFACE), f"{IFACE}.GetStatus", timeout=60)

    def wait_count(self, run, state, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status(run)["devices"].get(state, 0) >= self.n:
                return
            time.sleep(0.2)  # GetStatus has no change notification short of Monitor's stream
        raise RuntimeError(f"not every device {state} within {timeout} s")

    def start(self, daemon_bin, config, run, extra=()):
        """Starts daemon_bin with `run` as its runtime directory; (process, seconds to READY=1)."""
        path = os.path.join(self.tmp, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(0.1)
        t0 = time.monotonic()
        with open(os.path.join(self.tmp, f"bigtcpd-{self.k}.log"), "ab") as log:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns, daemon_bin, "--config", config, "--runtime-dir", run,
                                  *extra],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, NOTIFY_SOCKET=path))
        self.procs.append(p)
        try:
            while True:
                try:
                    if b"READY=1" in sock.recv(65536).split(b"\n"):
                        return p, time.monotonic() - t0
                except socket.timeout:
                    pass
                if p.poll() is not None:
                    raise RuntimeError(f"bigtcpd exited with {p.returncode} before READY=1")
                if time.monotonic() - t0 > self.args.ready_timeout:
                    self.kill(p)
                    raise RuntimeError(f"no READY=1 within {self.args.ready_timeout:g} s")
        finally:
            sock.close()
            os.unlink(path)

    def log_tail(self, lines=5):
        try:
            with open(os.path.join(self.tmp, f"bigtcpd-{self.k}.log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def forget_part(self):
        """The part's state directory and log go: 22 parts of 10000 devices fill the tmpfs."""
        shutil.rmtree(os.path.join(self.tmp, f"state-{self.k}"), ignore_errors=True)
        for f in (f"bigtcpd-{self.k}.log", f"policy-{self.k}.yaml"):
            try:
                os.unlink(os.path.join(self.tmp, f))
            except FileNotFoundError:
                pass

    def kill(self, p):
        p.kill()
        p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def stop(self, p):
        if p in self.procs:
            super().stop(p)

    def config(self, text):
        self.k += 1
        path = os.path.join(self.tmp, f"policy-{self.k}.yaml")
        with open(path, "w") as f:
            f.write(text)
        run = os.path.join(self.tmp, f"state-{self.k}")
        os.mkdir(run, 0o755)
        return path, run

    def size(self):
        return 100000 + 1000 * (self.k % 200)  # one no device holds: every device is written

    def ip_show(self):
        return timed(["ip", "-n", self.ns, "-j", "-d", "link", "show"])

    def restart(self, label, what, daemon_bin, p, config, run):
        self.kill(p)
        p, ready = self.start(daemon_bin, config, run)
        ip = self.ip_show()
        self.note(label, f"{what}: restart to READY=1 (s)", ready)
        self.note(label, f"{what}: ip -j -d link show then (s)", ip)
        self.note(label, f"{what}: restart / ip", ready / ip)
        return p

    def applied(self, label, daemon_bin):
        config, run = self.config(self.policy(self.size(), "1s"))
        p, ready = self.start(daemon_bin, config, run)
        try:
            self.wait_count(run, "applied")
            time.sleep(1)
            self.note(label, "applied: VmRSS (kB)", status_kb(p.pid, "VmRSS"))
            self.note(label, "applied: VmHWM (kB)", status_kb(p.pid, "VmHWM"))
            self.note(label, "applied: children's VmRSS (kB)", sum(status_kb(k, "VmRSS") for k in children(p.pid)))
            ctl = [ctl_of(daemon_bin), "--socket", os.path.join(run, IFACE), "--json", "list"]
            lists, ips = [], []
            for _ in range(self.args.lists):
                lists.append(timed(ctl))
                ips.append(self.ip_show())
            self.note(label, "list --json (s)", statistics.median(lists))
            self.note(label, "ip -j -d link show (s)", statistics.median(ips))
            self.note(label, "list --json / ip", statistics.median(lists) / statistics.median(ips))
            size = len(subprocess.run(ctl, capture_output=True, check=True).stdout)
            ipsize = len(subprocess.run(["ip", "-n", self.ns, "-j", "-d", "link", "show"], capture_output=True,
                                        check=True).stdout)
            self.note(label, "list --json bytes a device", size / self.n)
            self.note(label, "ip -j -d bytes a device", ipsize / (self.n + 1))
            p = self.restart(label, "applied", daemon_bin, p, config, run)
            self.wait_count(run, "applied")
        finally:
            self.stop(p)

    def probation(self, label, daemon_bin):
        config, run = self.config(self.policy(self.size(), "3600s"))
        p, _ = self.start(daemon_bin, config, run)
        try:
            self.wait_count(run, "probation")
            time.sleep(1)
            self.note(label, "probation: VmRSS (kB)", status_kb(p.pid, "VmRSS"))
            p = self.restart(label, "probation", daemon_bin, p, config, run)
            self.wait_count(run, "probation")
            self.note(label, "probation: VmRSS after the restart (kB)", status_kb(p.pid, "VmRSS"))
        finally:
            self.stop(p)

    def auto(self, label, daemon_bin):
        config, run = self.config(self.policy(0, "2s", auto=True))
        p, _ = self.start(daemon_bin, config, run)
        try:
            self.wait_count(run, "applied")
            c0, t0 = cpu_ns(p.pid), time.monotonic()
            time.sleep(self.args.idle)
            c1, t1 = cpu_ns(p.pid), time.monotonic()
            self.note(label, "auto idle: VmRSS (kB)", status_kb(p.pid, "VmRSS"))
            self.note(label, "auto idle: CPU incl. children (ms/min)", (c1 - c0) / 1e6 * 60 / (t1 - t0))
        finally:
            self.stop(p)

    def scrape(self, port):
        """One GET /metrics over a TCP socket made in the namespace; the body's size."""
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            burst.setns(target)
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            finally:
                burst.setns(own)
        finally:
            os.close(target)
            os.close(own)
        sock.settimeout(120)
        sock.connect(("127.0.0.1", port))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.sock = sock  # a chunked answer is read as one body
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError(f"GET /metrics: {r.status} {body[:100]!r}")
        finally:
            conn.close()
        return len(body)

    def metrics(self, label, daemon_bin):
        port = 9437
        config, run = self.config(self.policy(self.size(), "1s"))
        p, _ = self.start(daemon_bin, config, run, ("--metrics-listen", f"127.0.0.1:{port}"))
        try:
            self.wait_count(run, "applied")
            time.sleep(1)
            self.note(label, "metrics: VmRSS before the first scrape (kB)", status_kb(p.pid, "VmRSS"))
            cpus, walls, peaks = [], [], []
            for _ in range(self.args.scrapes):
                with open(f"/proc/{p.pid}/clear_refs", "w") as f:
                    f.write("5")  # VmHWM back to VmRSS
                c0, t0 = cpu_ns(p.pid), time.monotonic()
                size = self.scrape(port)
                c1, t1 = cpu_ns(p.pid), time.monotonic()
                cpus.append((c1 - c0) / 1e6)
                walls.append(t1 - t0)
                peaks.append(status_kb(p.pid, "VmHWM"))
            self.note(label, "metrics: CPU a scrape (ms)", statistics.median(cpus))
            self.note(label, "metrics: wall a scrape (s)", statistics.median(walls))
            self.note(label, "metrics: VmHWM in the first scrape (kB)", peaks[0])
            self.note(label, "metrics: VmHWM in a scrape (kB)", statistics.median(peaks))
            self.note(label, "metrics: VmRSS after the scrapes (kB)", status_kb(p.pid, "VmRSS"))
            self.note(label, "metrics: bytes", size)
        finally:
            self.stop(p)

    def reload_to(self, run, config, size):
        """The policy at `size` (every device rewritten): the daemon's CPU (ms) from the Reload
        call until every device is applied again."""
        with open(config, "w") as f:
            f.write(self.policy(size, "1s"))
        pid = self.daemon_pid
        w0 = self.status(run)["writes"]
        c0 = cpu_ns(pid)
        varlink_client.call(os.path.join(run, IFACE), f"{IFACE}.Reload", timeout=300)
        deadline = time.monotonic() + 300
        while True:
            s = self.status(run)
            if s["writes"] >= w0 + self.n and s["devices"].get("applied", 0) >= self.n:
                return (cpu_ns(pid) - c0) / 1e6
            if time.monotonic() > deadline:
                raise RuntimeError("the reload did not apply every device within 300 s")
            time.sleep(0.5)  # both arms poll alike; the no-Monitor arm has no stream to wait on

    def perf_start(self, pid, name):
        data = f"{self.args.perf}-{name}.data"
        rec = subprocess.Popen(["perf", "record", "-q", "-F", "1000", "--call-graph", "dwarf,16384", "-p", str(pid),
                                "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(rec)
        time.sleep(0.5)  # perf attached before the reload
        return rec, data

    def perf_stop(self, label, rec, data):
        """The daemon's CPU in the reload as perf sampled it, and the share of it that made and
        sent Monitor's events (the functions' time with their callees')."""
        rec.send_signal(signal.SIGINT)
        rec.wait()
        self.procs.remove(rec)
        out = subprocess.run(["perf", "report", "-i", data, "--children", "--stdio", "--no-demangle"],
                             capture_output=True, text=True).stdout
        total = next((int(line.split(":")[1]) for line in out.splitlines() if line.startswith("# Event count")), 0)
        share = {"made": 0.0, "printed": 0.0}
        for line in out.splitlines():
            f = line.split()
            if len(f) < 6 or not f[0].endswith("%"):
                continue
            # the event's JSON made (a tree, or text) and written to the stream
            if f[-1] in ("control_event_json", "control_event_write", "varlink_call_notify_json"):
                share["made"] += float(f[0].rstrip("%"))
            # a tree printed as text: the event's (before) and GetStatus' (the polls of both arms)
            if f[-1] == "json_object_to_json_string_length":
                share["printed"] += float(f[0].rstrip("%"))
        self.note(label, "monitor (perf): daemon CPU in the reload (ms)", total / 1e6)
        self.note(label, "monitor (perf): events made and written (ms)", share["made"] / 100 * total / 1e6)
        self.note(label, "monitor (perf): json-c trees printed, any (ms)", share["printed"] / 100 * total / 1e6)

    def monitor(self, label, daemon_bin):
        config, run = self.config(self.policy(self.size(), "1s"))
        p, _ = self.start(daemon_bin, config, run)
        self.daemon_pid = p.pid
        try:
            self.wait_count(run, "applied")
            alone, watched = [], []
            for k in range(self.args.reloads):  # interleaved: the machine's load drifts alike for both
                alone.append(self.reload_to(run, config, self.size() + 16 * k + 8))
                mon = helpers.Monitor(os.path.join(run, IFACE), seed=False, timeout=60)
                perf = self.perf_start(p.pid, f"{label}-{k}") if self.args.perf else None
                try:
                    watched.append(self.reload_to(run, config, self.size() + 16 * k + 16))
                    if perf:
                        self.perf_stop(label, *perf)
                    with mon.cond:
                        events = len(mon.events)
                finally:
                    mon.close()
            self.note(label, "monitor: reload, no stream: CPU (ms)", statistics.median(alone))
            self.note(label, "monitor: reload, one stream: CPU (ms)", statistics.median(watched))
            self.note(label, "monitor: the stream's CPU (ms)", statistics.median(watched) - statistics.median(alone))
            self.note(label, "monitor: events streamed a reload", events)
        finally:
            self.stop(p)

    def run(self):
        bins = [("after", self.args.bin)]
        if self.args.baseline_bin:
            bins.insert(0, ("before", self.args.baseline_bin))
        load0 = os.getloadavg()
        self.netns_add(self.ns)
        for k in ("all", "default"):  # no router solicitations into thousands of veths
            subprocess.run(["ip", "netns", "exec", self.ns, "sysctl", "-qw", f"net.ipv6.conf.{k}.disable_ipv6=1"],
                           check=True)
        self.ip_batch(self.ns, self.pairs_batch(self.args.pairs, "fp"))
        parts = self.args.only.split(",")
        try:
            for r in range(self.args.rounds):
                for label, b in (bins if r % 2 == 0 else bins[::-1]):
                    for part in parts:
                        try:
                            getattr(self, part)(label, b)
                        except RuntimeError as e:  # a part that failed (a loaded machine): said, and counted
                            self.note(label, f"{part}: failed", 1)
                            print(f"  round {r + 1}, {label}, {part}: {e}", flush=True)
                            print(self.log_tail(), flush=True)
                        self.forget_part()
                print(f"round {r + 1} of {self.args.rounds} done (load {os.getloadavg()[0]:.1f})", flush=True)
        finally:
            self.table(bins, load0)
        return 0

    def table(self, bins, load0):
        load1 = os.getloadavg()
        print(f"\n{self.n} devices, {self.args.rounds} rounds, {len(self.guards)} guard(s); load average {load0[0]:.1f} at the start, "
              f"{load1[0]:.1f} at the end (2 cores: {os.cpu_count()})")
        whats = list(dict.fromkeys(w for _, w in self.figures))
        print(f"{'figure':48} " + " ".join(f"{label:>28}" for label, _ in bins))
        for w in whats:
            cells = []
            for label, _ in bins:
                v = self.figures.get((label, w))
                if not v:
                    cells.append(f"{'-':>28}")
                    continue
                f = "{:.3f}" if max(v) < 100 else "{:.0f}"
                cells.append(f"{f.format(statistics.median(v)):>10} ({f.format(min(v))}..{f.format(max(v))})".rjust(28))
            print(f"{w:48} " + " ".join(cells), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(burst.ROOT, "build", "daemon", "bigtcpd"))
    ap.add_argument("--baseline-bin", help="another build's bigtcpd (its bigtcpctl beside it or in ../cli)")
    ap.add_argument("--pairs", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lists", type=int, default=5)
    ap.add_argument("--idle", type=float, default=20)
    ap.add_argument("--scrapes", type=int, default=5)
    ap.add_argument("--reloads", type=int, default=3, help="monitor: reloads of each arm, interleaved")
    ap.add_argument("--perf", metavar="PREFIX", help="monitor: perf record each reload with a stream into "
                    "PREFIX-LABEL-K.data, and say what making and sending its events cost")
    ap.add_argument("--only", default="applied,probation,auto")
    ap.add_argument("--guards", choices=("one", "shipped"), default="one",
                    help="the policies' guards: link.tx_dropped alone (the figures of earlier runs), or the "
                    "guard list of the shipped conf/bigtcpd.yaml")
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--prefix", default=os.environ.get("BT_NETNS_PREFIX", "bt-bench-"))
    args = ap.parse_args()
    for b in filter(None, (args.bin, args.baseline_bin)):
        if not os.access(b, os.X_OK):
            sys.exit(f"footprint.py: {b} not found; build it with: bash scripts/build.sh")
        ctl_of(b)
    return burst.run_as_root("footprint.py", Footprint, args)


if __name__ == "__main__":
    sys.exit(main())
