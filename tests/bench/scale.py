#!/usr/bin/python3
"""Scale and footprint benchmark, from one run (not part of the test suite):

  * burst: 10000 devices (5000 veth pairs from one `ip -batch`) with bigtcpd running: the time
    from the end of the burst until every device reads back at the policy, next to the time
    one `ip -batch` takes to write the sizes of as many devices (the kernel's own pace);
  * single link: with those 10000 devices managed, the latency from a new link's creation (its
    RTM_NEWLINK, seen on our own socket) to the daemon's write reading back, p50/p99;
  * RSS of the daemon with 10000 managed devices (VmRSS, VmHWM);
  * `bigtcpctl list --json`: time and size of the reply, when the client is built;
  * idle: the daemon's context switches (voluntary + involuntary, /proc/PID/status) over 60 s
    with nothing changing and nothing in probation.

Targets (issue 6): burst lag <= ip-batch write time; single-link p99 < 2 ms; RSS < 8 MiB;
zero idle wakeups (a watchdog aside). Run as root:
    /usr/bin/python3 tests/bench/scale.py [--bin build/daemon/bigtcpd] [--pairs 5000] [--idle 60]
"""

import argparse
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import burst  # noqa: E402
from burst import Bench, Poller, SIZE, netlink_socket_in, parse_links  # noqa: E402
from helpers import read_state  # noqa: E402  (snapshot + journal, as the daemon loads them)

RTMGRP_LINK = 1
# Probation ends quickly so that RSS and idle are measured with nothing in probation.
POLICY = burst.POLICY + """    rollback:
      window: 2s
      interval: 500ms
"""


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def ctxt(pid):
    """(voluntary, involuntary): a wakeup is a voluntary switch back to sleep; involuntary ones
    are preemptions while awake, which other load on the machine inflates."""
    s = proc_status(pid)
    return int(s["voluntary_ctxt_switches"]), int(s["nonvoluntary_ctxt_switches"])


def percentile(values, p):
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


class Scale(Bench):
    """The runtime directory is a tmpfs, as /run is on a real system: the state file is written
    (and fsync'ed) before every first write of a device, which a disk would make the bottleneck."""

    def __init__(self, args):
        super().__init__(args)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m,mode=0755", "bigtcpd-bench", self.tmp],
                       check=True)
        self.mounted = True

    def cleanup(self):
        procs_and_ns = super().cleanup  # stops processes, deletes namespaces, removes self.tmp
        if getattr(self, "mounted", False):
            for p in self.procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(10)
            self.procs.clear()
            subprocess.run(["umount", self.tmp], check=False)
            self.mounted = False
        procs_and_ns()

    def wait_settled(self, ns, n_expected, timeout=120):
        """Until the state file lists every device as applied (the window has ended)."""
        path = os.path.join(self.tmp, f"run-{ns}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                devs = read_state(path)["devices"]
                if len(devs) >= n_expected and all(d.get("state") == "applied" for d in devs):
                    return True
            except (OSError, ValueError):
                pass
            time.sleep(0.2)  # a benchmark waiting for a window to pass: there is no event to wait on
        return False

    def single_link_latency(self, ns, count):
        watcher = netlink_socket_in(ns)
        watcher.close()
        # subscribe: a socket bound to the link group, made in the namespace
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            burst.setns(target)
            try:
                sub = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
            finally:
                burst.setns(own)
        finally:
            os.close(target)
            os.close(own)
        sub.setsockopt(socket.SOL_SOCKET, burst.SO_RCVBUFFORCE, 8 << 20)
        sub.bind((0, RTMGRP_LINK))
        poller = Poller(ns)
        lat = []
        try:
            for i in range(count):
                name = f"sl{i}"
                subprocess.run(["ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name",
                                f"{name}x"], check=True)
                # the moment the kernel announced the link
                t0, ifindex = None, None
                deadline = time.monotonic() + 5
                while t0 is None and time.monotonic() < deadline:
                    r, _, _ = select.select([sub], [], [], 0.5)
                    if not r:
                        continue
                    t = time.monotonic_ns()
                    for idx, nm, _ in parse_links(sub.recv(1 << 20)):
                        if nm == name:
                            t0, ifindex = t, idx
                if t0 is None:
                    raise RuntimeError(f"no RTM_NEWLINK for {name}")
                while True:
                    t, links = poller.get([ifindex])
                    if links and all(x == SIZE for x in links[0][2]):
                        lat.append((t - t0) / 1e6)
                        break
                    if t - t0 > 5e9:
                        raise RuntimeError(f"{name} not written within 5 s")
                # drain what the daemon's write and the peer caused, so the next t0 is clean
                while select.select([sub], [], [], 0)[0]:
                    sub.recv(1 << 20)
        finally:
            sub.close()
            poller.close()
        return lat

    def bigtcpctl_list(self, ns):
        ctl = os.path.join(os.path.dirname(self.args.bin), "..", "cli", "bigtcpctl")
        if not os.access(ctl, os.X_OK):
            return None
        sock = os.path.join(self.tmp, f"run-{ns}", "io.bigtcpd.Manager")
        best, size = None, 0
        for _ in range(5):
            t = time.monotonic()
            r = subprocess.run([ctl, "--socket", sock, "--json", "list"], capture_output=True)
            dt = time.monotonic() - t
            if r.returncode != 0:
                return f"failed: {r.stderr.decode().strip()[:200]}"
            best = dt if best is None else min(best, dt)
            size = len(r.stdout)
        return best, size

    def run(self):
        n = self.args.pairs
        print(f"kernel pace: ip -batch writing gso/gro_max_size to {2 * n} devices ...", flush=True)
        write = self.kernel_pace(n)
        print(f"  {write:.3f} s", flush=True)

        ns = "bt-bench-scale"
        self.netns_add(ns)
        config = os.path.join(self.tmp, "scale.yaml")
        with open(config, "w") as f:
            f.write(POLICY)
        daemon = self.start_daemon(ns, config)
        poller = Poller(ns)
        try:
            start, burst_end = self.ip_batch(ns, self.pairs_batch(n, "bb"))
            last, links = poller.dump()
            short = [i for i, name, sz in links if name and name.startswith("bb") and any(x != SIZE for x in sz)]
            while short:
                time.sleep(0.002)
                last, replies = poller.get(short)
                short = [i for i, _, sz in replies if any(x != SIZE for x in sz)]
            lag = (last - burst_end) / 1e9
        finally:
            poller.close()
        print(f"burst: {2 * n} devices created in {(burst_end - start) / 1e9:.3f} s; all at the policy "
              f"{lag:.3f} s after it (ratio to the ip -batch write {lag / write:.2f}; target <= 1)", flush=True)

        if not self.wait_settled(ns, 2 * n):
            print("  warning: not every device reached applied within 120 s", flush=True)
        st = proc_status(daemon.pid)
        print(f"RSS with {2 * n} managed devices: VmRSS {st['VmRSS']}, VmHWM {st['VmHWM']} "
              f"(target < 8 MiB)", flush=True)

        lat = self.single_link_latency(ns, self.args.singles)
        print(f"single link, creation -> written, {len(lat)} links among {2 * n} managed: "
              f"p50 {percentile(lat, 50):.2f} ms, p99 {percentile(lat, 99):.2f} ms, "
              f"max {max(lat):.2f} ms (target p99 < 2 ms)", flush=True)

        lst = self.bigtcpctl_list(ns)
        if lst is None:
            print("bigtcpctl list --json: client not built", flush=True)
        elif isinstance(lst, str):
            print(f"bigtcpctl list --json: {lst}", flush=True)
        else:
            print(f"bigtcpctl list --json over {2 * n + 2 * self.args.singles} devices: "
                  f"{lst[0] * 1000:.0f} ms, {lst[1] / 1e6:.1f} MB (target < 100 ms)", flush=True)

        self.wait_settled(ns, 2 * n + 2 * self.args.singles)
        v0, i0 = ctxt(daemon.pid)
        time.sleep(self.args.idle)
        v1, i1 = ctxt(daemon.pid)
        print(f"idle: {v1 - v0} voluntary and {i1 - i0} involuntary context switches in {self.args.idle:g} s "
              f"with nothing changing and nothing in probation (target 0 wakeups; the verification of "
              f"managed devices, every --verify-interval = 60 s by default, is one)", flush=True)
        self.stop(daemon)
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("BIGTCPD_BIN",
                                                   os.path.join(burst.ROOT, "build", "daemon", "bigtcpd")))
    ap.add_argument("--pairs", type=int, default=5000)
    ap.add_argument("--singles", type=int, default=200)
    ap.add_argument("--idle", type=float, default=60)
    ap.add_argument("--ready-timeout", type=float, default=30)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("scale.py: must run as root")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench = Scale(args)
    try:
        return bench.run()
    finally:
        bench.cleanup()


if __name__ == "__main__":
    sys.exit(main())
