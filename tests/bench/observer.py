#!/usr/bin/python3
"""Observer benchmark: what the eBPF observer costs the traffic it counts, and the daemon.

Not part of the test suite. Run it as root after `bash scripts/build.sh` (release build):
    /usr/bin/python3 tests/bench/observer.py [--runs 5] [--seconds 3] [--devices 10000] [--compare BIN]

1. Two fresh namespaces joined by a veth pair at 185000 (IPv6); iperf3 over it `--runs` times
   with bigtcpd running (its observer loaded: it counts every packet of every device) and
   `--runs` times with the daemon stopped (nothing loaded), alternating, the order swapped each
   round so that drift on a shared machine hits both alike. Prints the median Gbit/s of each and
   their ratio (target: at least 0.98). --compare BIN adds a third arm, another build's daemon,
   in the same rounds (each round starts with the next arm). The rounds run with the kernel's BPF
   statistics off, as a host does; then one more run with each daemon and them on gives the
   observer's programs' own time per run (kernel.bpf_stats_enabled, restored after): what the
   iperf3 ratio cannot show on a loaded machine.
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


def prog_ids(pid):
    """The ids of the BPF programs process `pid` attached (its links' fdinfo names them)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                ids.update(int(line.split()[1]) for line in f if line.startswith("prog_id:"))
        except OSError:
            pass
    return ids


def prog_stats(ids):
    """{program name: (run_time_ns, run_cnt)} of those programs (kernel.bpf_stats_enabled=1)."""
    progs = json.loads(run("bpftool", "-j", "prog", "show").stdout)
    return {p["name"]: (p.get("run_time_ns", 0), p.get("run_cnt", 0)) for p in progs if p["id"] in ids}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--devices", type=int, default=10000)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "daemon", "bigtcpd"))
    ap.add_argument("--compare", metavar="BIN",
                    help="another bigtcpd (an older build, its observer object inside it) run as a third arm of the "
                         "same rounds: the two observers' costs side by side")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("observer.py: run as root")
    a, b = f"{PREFIX}oa{os.getpid() % 10000}", f"{PREFIX}ob{os.getpid() % 10000}"
    tmp = tempfile.mkdtemp(prefix="bt-obs-bench-")
    procs = []
    restore = []  # kernel.bpf_stats_enabled as it was
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

        def with_daemon(binary=args.bin, timed=False):
            rt = tempfile.mkdtemp(dir=tmp)
            d = subprocess.Popen(["ip", "netns", "exec", a, binary, "--config", policy, "--runtime-dir", rt,
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
                if not timed:
                    return iperf()
                ids = prog_ids(d.pid)
                before = prog_stats(ids)
                gbit = iperf()
                for name, (ns, cnt) in prog_stats(ids).items():
                    t = runs_ns.setdefault(binary, {}).setdefault(name, [0, 0])
                    t[0] += ns - before.get(name, (0, 0))[0]
                    t[1] += cnt - before.get(name, (0, 0))[1]
                return gbit
            finally:
                d.send_signal(signal.SIGTERM)
                d.wait(timeout=30)
                procs.remove(d)

        runs_ns = {}  # binary -> program -> [ns, runs] over its timed iperf3 run
        with open("/proc/sys/kernel/bpf_stats_enabled") as f:
            stats_were = f.read().strip()
        restore.append(stats_were)

        def stats(on):
            with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
                f.write("1" if on else "0")

        # The throughput rounds run as a host runs: with the kernel's BPF statistics off (they time
        # every run of every program, two clock reads each, a cost the observer does not have).
        stats(False)
        arms = [("on", with_daemon), ("off", iperf)]
        if args.compare:
            arms.append(("compare", lambda: with_daemon(args.compare)))
        got = {name: [] for name, _ in arms}
        for i in range(args.runs):
            k = i % len(arms)  # each round starts with another arm: drift hits all alike
            for name, fn in arms[k:] + arms[:k]:
                got[name].append(fn())
        # the programs' own time per run: one more iperf3 run per daemon, statistics on
        stats(True)
        with_daemon(timed=True)
        if args.compare:
            with_daemon(args.compare, timed=True)
        stats(False)
        on, off = got["on"], got["off"]
        mon, moff = statistics.median(on), statistics.median(off)
        print(f"iperf3 over a veth at {BIG}, {args.runs} runs of {args.seconds}s: observer {mon:.1f} Gbit/s, "
              f"daemon stopped {moff:.1f} Gbit/s (median), ratio {mon / moff:.3f}")
        print(f"  observer runs: {', '.join(f'{x:.1f}' for x in on)}; stopped: {', '.join(f'{x:.1f}' for x in off)}")
        if args.compare:
            other = got["compare"]
            print(f"  {args.compare}: {statistics.median(other):.1f} Gbit/s (median), ratio "
                  f"{statistics.median(other) / moff:.3f}; runs: {', '.join(f'{x:.1f}' for x in other)}")
        for binary, progs in runs_ns.items():
            print(f"  {binary}: " + ", ".join(f"{name} {ns / max(cnt, 1):.0f} ns a run ({cnt} runs)"
                                              for name, (ns, cnt) in sorted(progs.items())))
        reader = os.path.join(os.path.dirname(os.path.dirname(args.bin)), "tests", "observer-read")
        # its observer's loader is the one built beside the daemon
        loader = os.path.join(os.path.dirname(args.bin), "bigtcpd-observer-loader")
        print(run(reader, str(args.devices), "50",
                  env=dict(os.environ, BIGTCPD_OBSERVER_LOADER=loader)).stdout.strip())
    finally:
        for p in procs:
            stop(p, 10)
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for was in restore:
            with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
                f.write(was)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
