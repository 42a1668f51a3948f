#!/usr/bin/python3
"""List benchmark: how long `bigtcpctl list --json` takes against a daemon that manages many
devices, and how large the daemon's ListDevices reply is.

Not part of the test suite. Run it as root after `bash scripts/build.sh` (release build):
    /usr/bin/python3 tests/bench/list.py [--devices 10000] [--runs 10] [--bin PATH] [--ctl PATH]

A fresh namespace gets devices/2 veth pairs; bigtcpd runs there with a policy for kind veth (so
every device has current, desired and original sizes, the largest entries; a window of 1 s) and
GetStatus is awaited until every device is applied (the usual case, not probation). Then, each
`--runs` times, interleaved:
  - `bigtcpctl --socket S list --json > /dev/null`, wall time of the whole process (connect,
    call, the daemon building and sending its reply, parsing, printing);
  - its baseline: `ip -n NS -j -d link show > /dev/null`, the kernel's own dump of the same
    devices printed as JSON (the ratio of the medians is printed);
  - the same call raw from Python (connect, send, receive up to the NUL), for the daemon's part
    and the reply's size in bytes;
  - `bigtcpctl list` (the human table) and `bigtcpctl status --json`.
Prints min / median / max of each, and the load average. Targets: `bigtcpctl list --json` under
100 ms for 10000, and no slower than `ip -j -d link show` (issue 37).
Everything it makes (namespace, daemon, temporary files) is removed at the end.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import burst  # run_as_root, timed (this directory is on sys.path: the script's own)
from burst import timed
import helpers  # noqa: E402  (tests/integration, on sys.path through burst: stop)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

POLICY = """\
version: 1
policies:
  - name: bench-veth
    match:
      kind: [veth]
    ipv6:
      gso-max-size: 185000
      gro-max-size: 185000
    ipv4:
      gso-max-size: 185000
      gro-max-size: 185000
    rollback:
      window: 1s
      interval: 500ms
"""


def raw_call(path, method):
    """(seconds, reply bytes without the NUL)."""
    t0 = time.monotonic()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b'{"method": "%s"}\0' % method.encode())
    chunks = []
    while True:
        b = s.recv(1 << 22)
        if not b:
            raise RuntimeError("connection closed before the reply ended")
        chunks.append(b)
        if b.endswith(b"\0"):
            break
    t = time.monotonic() - t0
    s.close()
    data = b"".join(chunks)[:-1]
    if data.startswith(b'{"error"'):
        raise RuntimeError(data[:200].decode())
    return t, data


def fmt(ts):
    ms = sorted(t * 1000 for t in ts)
    return f"min {ms[0]:7.1f} ms  median {statistics.median(ms):7.1f} ms  max {ms[-1]:7.1f} ms"


class Bench:
    def __init__(self, args):
        self.args = args
        self.ns = f"bt-bench-list{os.getpid()}"
        self.tmp = tempfile.mkdtemp(prefix="bt-list.", dir="/tmp")
        self.proc = None
        self.made_ns = False

    def cleanup(self):
        if self.proc:
            helpers.stop(self.proc, 10)
        if self.made_ns:
            subprocess.run(["ip", "netns", "del", self.ns], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def setup(self):
        pairs = self.args.devices // 2
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        self.made_ns = True
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True)
        t0 = time.monotonic()
        batch = "".join(f"link add lb{i}a type veth peer name lb{i}b\n" for i in range(pairs))
        subprocess.run(["ip", "-n", self.ns, "-batch", "-"], input=batch.encode(), check=True)
        print(f"{2 * pairs} veth devices created in {time.monotonic() - t0:.1f} s", flush=True)

        config = os.path.join(self.tmp, "bench.yaml")
        with open(config, "w") as f:
            f.write(POLICY)
        self.log = os.path.join(self.tmp, "bigtcpd.log")
        t0 = time.monotonic()
        self.proc = burst.start_bigtcpd(
            ["ip", "netns", "exec", self.ns, self.args.bin, "--config", config,
             "--runtime-dir", os.path.join(self.tmp, "run"), "--verify-interval", "0"],
            os.path.join(self.tmp, "notify"), self.log, self.args.ready_timeout,
            lambda p: setattr(self, "proc", p))
        print(f"bigtcpd ready (every device written) {time.monotonic() - t0:.1f} s after start", flush=True)
        self.sock = os.path.join(self.tmp, "run", "io.bigtcpd.Manager")
        while True:  # every window over: the devices applied, as they mostly are
            _, status = raw_call(self.sock, "io.bigtcpd.Manager.GetStatus")
            if json.loads(status)["parameters"]["devices"].get("applied", 0) >= 2 * pairs:
                break
            if time.monotonic() - t0 > self.args.ready_timeout:
                raise RuntimeError("not every device applied in time")
            time.sleep(0.2)  # GetStatus has no change notification short of Monitor's stream
        print(f"every device applied {time.monotonic() - t0:.1f} s after start", flush=True)

    def run(self):
        self.setup()
        ctl = [self.args.ctl, "--socket", self.sock]
        _, status = raw_call(self.sock, "io.bigtcpd.Manager.GetStatus")
        print(f"daemon status: {status.decode()[:300]}")
        raw, size = [], 0
        for _ in range(self.args.runs):
            t, data = raw_call(self.sock, "io.bigtcpd.Manager.ListDevices")
            raw.append(t)
            size = len(data)
        n = data.count(b'"ifindex"')
        load0 = os.getloadavg()[0]
        list_json, ip_json = [], []
        for _ in range(self.args.runs):
            list_json.append(timed([*ctl, "list", "--json"]))
            ip_json.append(timed(["ip", "-n", self.ns, "-j", "-d", "link", "show"]))
        list_human = [timed([*ctl, "list"]) for _ in range(self.args.runs)]
        status_json = [timed([*ctl, "status", "--json"]) for _ in range(self.args.runs)]
        print()
        print(f"devices in the reply:         {n}")
        print(f"ListDevices reply size:       {size} bytes ({size / 1048576:.2f} MiB, "
              f"{size / max(n, 1):.0f} bytes per device)")
        print(f"ListDevices, raw varlink:     {fmt(raw)}")
        print(f"bigtcpctl list --json:        {fmt(list_json)}")
        print(f"ip -j -d link show:           {fmt(ip_json)}")
        print(f"list --json / ip -j -d:       {statistics.median(list_json) / statistics.median(ip_json):.2f} "
              f"(medians of {self.args.runs}, interleaved; target <= 1.0)")
        print(f"bigtcpctl list (table):       {fmt(list_human)}")
        print(f"bigtcpctl status --json:      {fmt(status_json)}")
        print(f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs)")
        target = statistics.median(list_json) < 0.1
        print(f"target (median of bigtcpctl list --json < 100 ms): {'met' if target else 'MISSED'}")
        return 0 if target else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=10000, help="devices (veth ends), default 10000")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "daemon", "bigtcpd"))
    ap.add_argument("--ctl", default=os.path.join(ROOT, "build", "cli", "bigtcpctl"))
    ap.add_argument("--ready-timeout", type=float, default=300)
    args = ap.parse_args()

    def make(args):
        for p in (args.bin, args.ctl):
            if not os.access(p, os.X_OK):
                sys.exit(f"list.py: {p} not found; build it with: bash scripts/build.sh")
        return Bench(args)

    return burst.run_as_root("list.py", make, args)


if __name__ == "__main__":
    sys.exit(main())
