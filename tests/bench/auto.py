#!/usr/bin/python3
"""auto.py — what `auto` costs at scale with no traffic (issue 29): N devices (N/2 veth pairs)
on a policy with `ipv6: {gso-max-size: auto}`, for each N of --devices:

  * settle: from the end of the burst until GetStatus counts every device applied (at the
    search's first size, its min: the veths' own 65536, so nothing is written);
  * idle: the CPU time of the daemon and its children (scale.cpu_ns()) and the daemon's context
    switches over --idle seconds
    after that. Nothing fills a proven size, so every search is idle and wakes for a watch
    after the window, then twice as long each time: with --window 2s, 60 s hold about five
    rounds of watches for every device (at most EVIDENCE_WATCHED_MAX of them counted at once);
  * its RSS (VmRSS, VmHWM) and open descriptors, at the end and the most seen during idle;
  * with --count-watches: how many devices had a watch at least once, and how many watches the
    limit turned away (from the daemon's debug log);
  * the state file's writes over the same idle seconds, per minute: new snapshots (state.json
    renamed into place: two fsyncs each, the file's and the directory's) and journal appends
    (one fdatasync each), seen by inotify on the runtime directory. An idle daemon writes none.

It prints its figures; it asserts nothing. Run as root, after `bash scripts/build.sh release`:
    /usr/bin/python3 tests/bench/auto.py [--bin build/daemon/bigtcpd] [--devices 10,1000,10000]
        [--idle 60] [--window 2s] [--min 65536] [--count-watches] [--prefix bt-bench-]
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import burst  # noqa: E402  (which puts tests/integration on the path)
from helpers import StateWrites  # noqa: E402
from scale import Scale, cpu_ns, ctxt, proc_status  # noqa: E402


def policy(window, start):
    size = "auto" if start == 65536 else f"{{auto: {{min: {start}}}}}"
    return f"""\
version: 1
policies:
  - name: bench-auto
    match:
      kind: [veth]
    ipv6:
      gso-max-size: {size}
    rollback:
      window: {window}
      interval: 500ms
"""


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Auto(Scale):
    def one(self, n):
        ns = f"{self.args.prefix}auto-{n}"
        daemon = self.start_on(ns, policy(self.args.window, self.args.min),
                               ["--log-level", "debug"] if self.args.count_watches else [])
        res = {"n": n}
        try:
            _, end = self.ip_batch(ns, self.pairs_batch(n // 2, "ba"))
            self.wait_status(ns, lambda st: st["devices"].get("applied", 0) == n, self.args.settle_timeout,
                             f"{n} devices applied")
            res["settle"] = time.monotonic() - end / 1e9
            writes = StateWrites(os.path.join(self.tmp, f"run-{ns}"))
            c0, (v0, i0), t0 = cpu_ns(daemon.pid), ctxt(daemon.pid), time.monotonic()
            res["fd_max"] = fds(daemon.pid)
            while time.monotonic() - t0 < self.args.idle:
                time.sleep(1)  # sampling the descriptors; the daemon's own figures come from /proc
                res["fd_max"] = max(res["fd_max"], fds(daemon.pid))
                writes.read()
            c1, (v1, i1), t1 = cpu_ns(daemon.pid), ctxt(daemon.pid), time.monotonic()
            writes.read()
            writes.close()
            res.update(snapshots=writes.snapshots, appends=writes.appends, overflows=writes.overflows)
            st = proc_status(daemon.pid)
            res.update(cpu=(c1 - c0) / 1e9, period=t1 - t0, vol=v1 - v0, invol=i1 - i0,
                       rss=st["VmRSS"], hwm=st["VmHWM"], fd=fds(daemon.pid))
        finally:
            self.done_with(ns, daemon)
        if self.args.count_watches:
            res.update(self.watches(ns))
        return res

    def watches(self, ns):
        """From the daemon's debug log: the devices whose search had a watch at least once, and the
        watches the limit on watched devices (EVIDENCE_WATCHED_MAX) turned away."""
        watched, refused = set(), 0
        with open(os.path.join(self.tmp, f"bigtcpd-{ns}.log"), errors="replace") as f:
            for line in f:
                if "auto: watching for traffic" in line:
                    watched.add(line.split(": ")[2])
                elif "too many watched to watch its traffic now" in line:
                    refused += 1
        return {"watched": len(watched), "refused": refused}

    def run(self):
        rows = []
        for n in self.args.devices:
            print(f"{n} devices on gso-max-size: auto (min {self.args.min}), window {self.args.window} ...",
                  flush=True)
            r = self.one(n)
            if "error" in r:
                print(f"  {r['error']}", flush=True)
            else:
                print(f"  settled {r['settle']:.2f} s after the burst; idle {r['period']:.0f} s: CPU "
                      f"{r['cpu'] * 1000:.0f} ms ({r['cpu'] / r['period'] * 100:.2f} %), {r['vol']} voluntary / "
                      f"{r['invol']} involuntary switches; VmRSS {r['rss']}, VmHWM {r['hwm']}; fds {r['fd']} "
                      f"(max {r['fd_max']})", flush=True)
                per_min = 60 / r["period"]
                print(f"  state file: {r['snapshots']} snapshots and {r['appends']} journal appends in "
                      f"{r['period']:.0f} s ({r['snapshots'] * per_min:.0f} and {r['appends'] * per_min:.0f} a "
                      f"minute: {(2 * r['snapshots'] + r['appends']) * per_min:.0f} syncs a minute)"
                      + (f"; inotify overflowed {r['overflows']} times" if r["overflows"] else ""), flush=True)
                if "watched" in r:
                    print(f"  {r['watched']} of {r['n']} devices watched at least once since the start; "
                          f"{r['refused']} watches turned away by the limit", flush=True)
            rows.append(r)
        print()
        print(f"{'devices':>8} {'settle':>9} {'idle CPU':>10} {'switches':>9} {'VmRSS':>10} {'VmHWM':>10} {'fds':>4}"
              f" {'max':>4}")
        for r in rows:
            if "error" in r:
                print(f"{r['n']:>8} {r['error']}")
                continue
            print(f"{r['n']:>8} {r['settle']:>7.2f} s {r['cpu'] * 1000:>7.0f} ms {r['vol']:>9} {r['rss']:>10} "
                  f"{r['hwm']:>10} {r['fd']:>4} {r['fd_max']:>4}")
        print(f"idle CPU: the CPU time of the daemon and its children over {self.args.idle:g} s after every device was applied; "
              f"switches: voluntary ones (wakeups).")
        return 0 if all("error" not in r for r in rows) else 1


def main():
    ap = burst.arguments(__doc__)
    ap.add_argument("--devices", default="10,1000,10000", help="comma-separated device counts (even)")
    ap.add_argument("--idle", type=float, default=60)
    ap.add_argument("--window", default="2s", help="the policy's probation window: the first idle wait")
    ap.add_argument("--min", type=int, default=65536,
                    help="the search's min (default 65536, the veths' own: nothing written; above it, every "
                         "device is written and passes a window first)")
    ap.add_argument("--count-watches", action="store_true",
                    help="bigtcpd --log-level debug, and from its log the devices watched at least once (the "
                         "logging costs CPU of its own: the CPU figures of such a run are not the others')")
    ap.add_argument("--settle-timeout", type=float, default=300)
    ap.add_argument("--prefix", default=os.environ.get("BT_NETNS_PREFIX", "bt-bench-"))
    ap.add_argument("--ready-timeout", type=float, default=60)
    args = ap.parse_args()
    args.devices = [int(x) for x in args.devices.split(",") if x]
    return burst.run_as_root("auto.py", Auto, args)


if __name__ == "__main__":
    sys.exit(main())
