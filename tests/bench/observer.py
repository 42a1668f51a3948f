#!/usr/bin/python3
"""Observer benchmark: what the eBPF observer costs the traffic it counts, and the daemon.

Not part of the test suite. Run it as root after `bash scripts/build.sh` (release build):
    /usr/bin/python3 tests/bench/observer.py [--runs 5] [--seconds 3] [--devices 10000]

1. Two fresh namespaces joined by a veth pair at 185000 (IPv6); iperf3 over it `--runs` times
   with bigtcpd running (its observer loaded: it counts every packet of every device) and
   `--runs` times with the daemon stopped (nothing loaded), alternating, the order swapped each
   round so that drift on a shared machine hits both alike. Prints the median Gbit/s of each and
   their ratio (target: at least 0.98).
2. build/tests/observer-read: the observer's maps filled with `--devices` made-up devices, read
   as a tick reads them: the wall and CPU time of one read, the maps' kernel memory, the
   snapshot's.
Everything it makes (namespaces, processes, files) is removed at the end, also on failure.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import nl  # noqa: E402
from helpers import Iperf, stop  # noqa: E402  (the tests' iperf3 server; a process stopped by pid)

BIG = 185000
PREFIX = os.environ.get("BT_NETNS_PREFIX", "bt-bench-")


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--devices", type=int, default=10000)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "daemon", "bigtcpd"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("observer.py: run as root")
    a, b = f"{PREFIX}oa{os.getpid() % 10000}", f"{PREFIX}ob{os.getpid() % 10000}"
    tmp = tempfile.mkdtemp(prefix="bt-obs-bench-")
    procs = []
    try:
        run("ip", "netns", "add", a)
        run("ip", "netns", "add", b)
        run("ip", "-n", a, "link", "add", "e0", "type", "veth", "peer", "name", "e1", "netns", b)
        for ns, dev, addr in ((a, "e0", "fd40::1/64"), (b, "e1", "fd40::2/64")):
            run("ip", "-n", ns, "addr", "add", addr, "dev", dev, "nodad")
            run("ip", "-n", ns, "link", "set", dev, "gso_max_size", str(BIG), "gro_max_size", str(BIG), "up")
        for ns, dev in ((a, "e0"), (b, "e1")):
            nl.wait_links(ns, lambda links, dev=dev: dev in links and links[dev]["flags"] & 0x40, 300, f"{dev} running")
        server = Iperf(b, once=False)
        procs.append(server.proc)
        policy = os.path.join(tmp, "bigtcpd.yaml")
        with open(policy, "w") as f:
            f.write("version: 1\npolicies:\n  - name: none\n    match: {name: [nothing0]}\n"
                    "    ipv6: {gso-max-size: 185000}\n")

        def iperf():
            r = run("ip", "netns", "exec", a, "iperf3", "-c", "fd40::2", "-t", str(args.seconds), "-J",
                    timeout=args.seconds + 60)
            return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9

        def with_daemon():
            rt = tempfile.mkdtemp(dir=tmp)
            d = subprocess.Popen(["ip", "netns", "exec", a, args.bin, "--config", policy, "--runtime-dir", rt,
                                  "--observer=ebpf", "--log-level", "info"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
            procs.append(d)
            sock = os.path.join(rt, "io.bigtcpd.Manager")
            deadline = time.monotonic() + 60
            while not os.path.exists(sock):  # its varlink socket: the observer was loaded before it
                if d.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"bigtcpd did not start: {d.stderr.read()}")
                time.sleep(0.05)
            try:
                return iperf()
            finally:
                d.send_signal(signal.SIGTERM)
                d.wait(timeout=30)
                procs.remove(d)

        on, off = [], []
        for i in range(args.runs):
            order = (("on", with_daemon), ("off", iperf)) if i % 2 == 0 else (("off", iperf), ("on", with_daemon))
            for name, fn in order:
                (on if name == "on" else off).append(fn())
        mon, moff = statistics.median(on), statistics.median(off)
        print(f"iperf3 over a veth at {BIG}, {args.runs} runs of {args.seconds}s: observer {mon:.1f} Gbit/s, "
              f"daemon stopped {moff:.1f} Gbit/s (median), ratio {mon / moff:.3f}")
        print(f"  observer runs: {', '.join(f'{x:.1f}' for x in on)}; stopped: {', '.join(f'{x:.1f}' for x in off)}")
        reader = os.path.join(os.path.dirname(os.path.dirname(args.bin)), "tests", "observer-read")
        print(run(reader, str(args.devices), "50").stdout.strip())
    finally:
        for p in procs:
            stop(p, 10)
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
