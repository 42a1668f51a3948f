#!/usr/bin/python3
"""Evidence benchmark: what counting a device's packets above 64 KiB costs its traffic.

Not part of the test suite. Run it as root after `bash scripts/build.sh` (release build):
    /usr/bin/python3 tests/bench/evidence.py [--runs 5] [--seconds 3] [--bin PATH] [--small]

Two fresh namespaces joined by a veth pair, both ends at 185000 for all four sizes: bigtcpd
writes its end (a policy without guards, so no probation window attaches anything), the test
writes the peer. iperf3 runs over the pair for each family (IPv6, IPv4) and direction (tx: the
daemon's end sends; rx: iperf3 -R, it receives), `--runs` times unwatched and `--runs` times
watched — a Watch() of the device for the run's length, so that the daemon's own packet socket
and filter are what is measured — alternating (unwatched first in odd rounds, watched first in
even ones) so that drift on a shared machine hits both alike. Prints, for each, the median
Gbit/s unwatched and watched, the difference, what the watched runs counted (median big
packets, and how many the socket missed) and the daemon's CPU time per watched run. Target:
watched within 3 % of unwatched. Everything it makes is removed at the end.

--small: small packets instead (iperf3 -u -l 64 -b 0), in millions of packets per second
received: what the watched socket's filter costs each packet that it drops.
"""

import argparse
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import burst  # noqa: E402  (run_as_root, start_bigtcpd)
from policies import standard_policy  # noqa: E402
import helpers  # noqa: E402  (stop: a process stopped by pid)
import nl  # noqa: E402  (the tests' own rtnetlink: iproute2 6.1 cannot write the IPv4 sizes)

IFACE = "io.bigtcpd.Manager"
BIG = 185000
POLICY = standard_policy("bench-evidence", "name: [ev0]", BIG, rollback=("guards: []",))
ADDR = {"ipv6": ("fd13:be::1", "fd13:be::2"), "ipv4": ("10.213.0.1", "10.213.0.2")}


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def send_call(path, method, params):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(json.dumps({"method": method, "parameters": params}).encode() + b"\0")
    return s


def recv_reply(s, timeout):
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\0" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([s], [], [], left)[0]:
            raise RuntimeError("no reply in time")
        chunk = s.recv(1 << 20)
        if not chunk:
            raise RuntimeError("connection closed")
        buf += chunk
    s.close()
    reply = json.loads(buf.split(b"\0")[0])
    if "error" in reply:
        raise RuntimeError(f"{reply['error']} {reply.get('parameters')}")
    return reply["parameters"]


def cpu_seconds(pid):
    """utime + stime of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    def __init__(self, args):
        self.args = args
        prefix = os.environ.get("BT_NETNS_PREFIX", "bt-")
        self.ns = (f"{prefix}evb{os.getpid()}a", f"{prefix}evb{os.getpid()}b")
        self.tmp = tempfile.mkdtemp(prefix="bt-ev.", dir="/tmp")
        self.procs = []
        self.made = []

    def cleanup(self):
        for p in reversed(self.procs):
            helpers.stop(p, 10)
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def setup(self):
        a, b = self.ns
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", a, "link", "add", "ev0", "type", "veth", "peer", "name", "ev1", "netns", b)
        for fam, (x, y) in ADDR.items():
            extra = ["nodad"] if fam == "ipv6" else []
            plen = "/64" if fam == "ipv6" else "/24"
            sh("ip", "-n", a, "addr", "add", x + plen, "dev", "ev0", *extra)
            sh("ip", "-n", b, "addr", "add", y + plen, "dev", "ev1", *extra)
        nl.set_sizes(b, "ev1", gso_max_size=BIG, gro_max_size=BIG, gso_ipv4_max_size=BIG, gro_ipv4_max_size=BIG)
        sh("ip", "-n", a, "link", "set", "ev0", "up")
        sh("ip", "-n", b, "link", "set", "ev1", "up")
        for ns, name in ((a, "ev0"), (b, "ev1")):   # the carrier: until then, "no route to host"
            nl.wait_links(ns, lambda links: name in links and links[name]["flags"] & 0x40, 10, f"{name} running")

        config = os.path.join(self.tmp, "bench.yaml")
        with open(config, "w") as f:
            f.write(POLICY)
        self.log = os.path.join(self.tmp, "bigtcpd.log")
        self.daemon = burst.start_bigtcpd(
            ["ip", "netns", "exec", a, self.args.bin, "--config", config, "--runtime-dir",
             os.path.join(self.tmp, "run"), "--log-level", "info"],
            os.path.join(self.tmp, "notify"), self.log, 30, self.procs.append)
        self.sock = os.path.join(self.tmp, "run", IFACE)
        # `ip netns exec` execs bigtcpd (older iproute2 forked it): the process named bigtcpd, not
        # its children (bigtcpd-closer, bigtcpd-packets, bigtcpd-sync)
        self.daemon_pid = self.daemon.pid
        with open(f"/proc/{self.daemon.pid}/comm") as f:
            if f.read().strip() != "bigtcpd":
                self.daemon_pid = int(sh("pgrep", "-x", "-P", str(self.daemon.pid), "bigtcpd").split()[0])
        links = nl.read_links(a)
        assert nl.sizes_of(links["ev0"]) == (BIG,) * 4, links["ev0"]
        self.ifindex = links["ev0"]["ifindex"]
        assert not self.attached(), "a device not watched has a packet socket"

        srv = subprocess.Popen(["ip", "netns", "exec", b, "iperf3", "-s", "--forceflush"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        self.procs.append(srv)
        for _ in range(3):
            if "listening" in srv.stdout.readline():
                break
        else:
            raise RuntimeError("iperf3 server did not start")

    def attached(self):
        rows = [line.split() for line in sh("ip", "netns", "exec", self.ns[0], "cat", "/proc/net/packet").splitlines()[1:]]
        return [r for r in rows if int(r[4]) == self.ifindex]

    def iperf(self, fam, reverse):
        argv = ["ip", "netns", "exec", self.ns[0], "iperf3", "-c", ADDR[fam][1], "-t", str(self.args.seconds), "-J",
                "--connect-timeout", "5000"]
        if reverse:
            argv.append("-R")
        if self.args.small:
            argv += ["-u", "-l", "64", "-b", "0"]
        r = json.loads(sh(*argv, timeout=self.args.seconds + 30))
        if "error" in r:
            raise RuntimeError(f"iperf3: {r['error']}")
        if self.args.small:
            s = r["end"]["sum"]
            return (s["packets"] - s["lost_packets"]) / s["seconds"] / 1e6
        return r["end"]["sum_received"]["bits_per_second"] / 1e9

    def watched(self, fam, reverse):
        s = send_call(self.sock, f"{IFACE}.Watch",
                      {"ifname": "ev0", "duration_usec": int((self.args.seconds + 1.5) * 1e6)})
        deadline = time.monotonic() + 5
        while not self.attached():   # a benchmark, not a test: the call is in flight
            if time.monotonic() > deadline:
                raise RuntimeError("Watch attached nothing")
            time.sleep(0.01)
        cpu0 = cpu_seconds(self.daemon_pid)
        gbps = self.iperf(fam, reverse)
        cpu = cpu_seconds(self.daemon_pid) - cpu0
        dev = recv_reply(s, self.args.seconds + 30)["device"]
        assert not self.attached(), "the watch ended but a socket is left"
        return gbps, dev["big_packets"], cpu

    def run(self):
        self.setup()
        rows = []
        for fam in ("ipv6", "ipv4"):
            for reverse in (False, True):
                off, on, big, missed, cpu = [], [], [], [], []
                for i in range(self.args.runs):
                    order = (False, True) if i % 2 == 0 else (True, False)
                    for watch in order:
                        if watch:
                            g, bp, c = self.watched(fam, reverse)
                            on.append(g)
                            big.append(bp["rx" if reverse else "tx"])
                            missed.append(bp["missed"])
                            cpu.append(c)
                        else:
                            off.append(self.iperf(fam, reverse))
                rows.append((fam, "rx" if reverse else "tx", off, on, big, missed, cpu))
                unit = "Mpps" if self.args.small else "Gbit/s"
                print(f"{fam} {'rx' if reverse else 'tx'}: unwatched {[round(x, 2) for x in off]} {unit}, "
                      f"watched {[round(x, 2) for x in on]} {unit}", flush=True)
        print()
        print(f"{'family':6} {'dir':3} {'unwatched':>10} {'watched':>10} {'change':>8} {'big pkts':>10} "
              f"{'missed':>7} {'daemon CPU':>11}")
        worst = None
        for fam, d, off, on, big, missed, cpu in rows:
            a, b = statistics.median(off), statistics.median(on)
            change = (b - a) * 100 / a if a else 0.0
            worst = change if worst is None else min(worst, change)
            u = "M" if self.args.small else "G"
            print(f"{fam:6} {d:3} {a:9.2f}{u} {b:9.2f}{u} {change:+7.1f}% {statistics.median(big):10.0f} "
                  f"{statistics.median(missed):7.0f} {statistics.median(cpu) * 1000:8.0f} ms")
        print(f"(median of {self.args.runs} runs of {self.args.seconds} s each; daemon CPU per watched run; on a "
              f"shared machine the spread between runs can exceed the difference)")
        met = worst >= -3.0
        print(f"target (watched within 3 % of unwatched): {'met' if met else 'MISSED'} (worst {worst:+.1f} %)")
        return 0 if met else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "daemon", "bigtcpd"))
    ap.add_argument("--small", action="store_true", help="64-byte UDP packets, in Mpps")
    args = ap.parse_args()

    def make(args):
        if not os.access(args.bin, os.X_OK):
            sys.exit(f"evidence.py: {args.bin} not found; build it with: bash scripts/build.sh")
        return Bench(args)

    return burst.run_as_root("evidence.py", make, args)


if __name__ == "__main__":
    sys.exit(main())
