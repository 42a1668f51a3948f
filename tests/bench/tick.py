#!/usr/bin/python3
"""Tick benchmark: what bigtcpd costs while nothing happens, in probation and after it.

Not part of the test suite. Run it as root after `bash scripts/build.sh` (release build):
    /usr/bin/python3 tests/bench/tick.py [--devices 10,1000] [--window 20] [--strace] [--perf] [--bin PATH]

For each count of devices: bigtcpd runs in a namespace of its own with a netns policy whose
devices (veth pairs, IPv6 off so that no router solicitation runs) are in another namespace
(the pods' case: its counters are read through descriptors opened inside it; the daemon sees no
other namespace and no other mount, in a mount namespace of its own), with the built-in
guards (link errors, Ip/Ip6 header errors, the observer's big retransmits) and a window long
enough for the measurement, interval 1 s. Once every device is in probation: the CPU seconds of
the daemon and its children (scale.cpu_ns()) over --window seconds, per minute; then, once the
window has closed, the same while idle. --strace adds `strace -f -c` over another --window seconds
of each phase (strace slows what it counts: its own pass, not the one the CPU figure is from).
Everything it makes (namespaces, processes, files) is removed at the end, also on failure.
"""

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from burst import Bench  # noqa: E402
from scale import cpu_ns  # noqa: E402
import varlink_client  # noqa: E402

PREFIX = os.environ.get("BT_NETNS_PREFIX", "bt-bench-")


def policy(pods, window):
    return f"""version: 1
policies:
  - name: pods
    match:
      netns: ["{pods}"]
      name: ["tk*"]
    ipv6: {{gso-max-size: 185000, gro-max-size: 185000}}
    ipv4: {{gso-max-size: 185000, gro-max-size: 185000}}
    rollback:
      window: {window}s
      interval: 1s
"""


class Tick(Bench):
    def __init__(self, args):
        super().__init__(args)
        self.mounts = []

    def cleanup(self):
        while self.mounts:
            subprocess.run(["umount", self.mounts.pop()], check=False)
        super().cleanup()

    def in_probation(self, ns):
        """How many devices, of every namespace, are in probation (GetStatus counts its own)."""
        devices = varlink_client.call(os.path.join(self.tmp, f"run-{ns}", "io.bigtcpd.Manager"),
                                      "io.bigtcpd.Manager.ListDevices", timeout=30)["devices"]
        return sum(1 for d in devices if d.get("state") == "probation")

    def wait_status(self, ns, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.in_probation(ns)):
                return
            time.sleep(0.5)  # ListDevices has no change notification short of Monitor's stream
        raise RuntimeError(f"{ns}: not within {timeout} s: {what}\n{self.daemon_log(ns)}")

    def measure(self, daemon, what, n):
        c0, t0 = cpu_ns(daemon.pid), time.monotonic()
        time.sleep(self.args.window)  # the measurement itself: nothing happens
        c1, t1 = cpu_ns(daemon.pid), time.monotonic()
        print(f"{n} devices, {what}: {(c1 - c0) / 1e9 * 60 / (t1 - t0):.3f} CPU s per minute "
              f"({(c1 - c0) / 1e6:.0f} ms over {t1 - t0:.1f} s)", flush=True)
        if self.args.strace:
            out = os.path.join(self.tmp, "strace.txt")
            subprocess.run(["timeout", "-s", "INT", str(self.args.window), "strace", "-f", "-c", "-o", out,
                            "-p", str(daemon.pid)], check=False, stdout=subprocess.DEVNULL)
            with open(out) as f:
                print("".join(f"    {line}" for line in f.readlines()[:16]), flush=True)
        if self.args.perf:
            data = os.path.join(self.tmp, "perf.data")
            subprocess.run(["perf", "record", "-q", "-F", "20000", "-g", "-o", data, "-p", str(daemon.pid), "--", "sleep",
                            str(self.args.window)], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            r = subprocess.run(["perf", "report", "-i", data, "--stdio", "--children", "--sort", "sym", "-g", "none", "--percent-limit", "1.5"],
                               capture_output=True, text=True, check=False)
            lines = [line for line in r.stdout.splitlines() if line.strip() and not line.startswith("#")]
            print("".join(f"    {line}\n" for line in lines[:45]), flush=True)

    def run_one(self, n):
        host, pods = f"{PREFIX}th{n}", f"{PREFIX}tp{n}"
        self.netns_add(host)
        self.netns_add(pods)
        for k in ("all", "default"):
            subprocess.run(["ip", "netns", "exec", pods, "sysctl", "-qw", f"net.ipv6.conf.{k}.disable_ipv6=1"],
                           check=True)
        # probation lasts the settling, the measurement (and strace's) and a margin
        window = int(self.args.window * (1 + self.args.strace + self.args.perf) + 15)
        config = os.path.join(self.tmp, f"{host}.yaml")
        with open(config, "w") as f:
            f.write(policy(pods, window))
        # The daemon alone: its namespaces directory holds the pods' namespace alone (a bind mount
        # of its file), and its mount table is its own (a private copy), so that namespaces and
        # mounts that others on the machine make come and go unseen: no scan is measured as idle.
        netns_dir = os.path.join(self.tmp, f"netns-{n}")
        os.mkdir(netns_dir)
        open(os.path.join(netns_dir, pods), "w").close()
        subprocess.run(["mount", "--bind", f"/run/netns/{pods}", os.path.join(netns_dir, pods)], check=True)
        self.mounts.append(os.path.join(netns_dir, pods))
        daemon = self.start_daemon(host, config, extra_args=("--log-level", "info", "--netns-dir", netns_dir),
                                   prefix=("unshare", "-m", "--propagation", "private"))
        try:
            self.ip_batch(pods, self.pairs_batch(n // 2, "tk"))
            self.wait_status(host, lambda k: k == n, 120,
                             f"{n} devices in probation")
            time.sleep(2)  # the burst's own work is over
            self.measure(daemon, f"in probation (window {window} s, interval 1 s)", n)
            self.wait_status(host, lambda k: k == 0, window + 60,
                             "the windows closed")
            time.sleep(2)
            self.measure(daemon, "idle", n)
        finally:
            self.stop(daemon)
            while self.mounts:
                subprocess.run(["umount", self.mounts.pop()], check=False)
            for ns in (pods, host):
                subprocess.run(["ip", "netns", "del", ns], check=False)
                self.namespaces.remove(ns)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("BIGTCPD_BIN", os.path.join(
        os.path.dirname(os.path.dirname(HERE)), "build", "daemon", "bigtcpd")))
    ap.add_argument("--devices", default="10,1000")
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--ready-timeout", type=float, default=30)
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--perf", action="store_true", help="perf record over another --window seconds of each phase")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("tick.py: run as root")
    bench = Tick(args)
    try:
        for n in (int(x) for x in args.devices.split(",")):
            bench.run_one(n)
    finally:
        bench.cleanup()


if __name__ == "__main__":
    main()
