#!/usr/bin/env python3
"""newlink.py — what counting big packets costs a new link: the latency from a veth pair's
creation (the kernel's first RTM_NEWLINK of the pair) until both ends read back at the policy's
four sizes, p50 and p99, with 0 and with N other devices managed, evidence on (both ends watched in
their probation window) against off (the same policy and probation, bigtcpd --no-count-packets),
and against the floor: no daemon, the benchmark itself writing both ends' four sizes (two acked
RTM_NEWLINKs on a socket opened before) the moment both are announced, measured the same way.
Target (issue 25): evidence on within 1.5x of off at p99.

Not part of the test suite. Run as root, after `bash scripts/build.sh release`:
    /usr/bin/python3 tests/bench/newlink.py [--bin build/daemon/bigtcpd] [--pairs 5000] [--singles 100]
        [--prefix bt-bench-]
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import burst  # noqa: E402
from burst import SIZE  # noqa: E402
from scale import Scale, percentile  # noqa: E402

ON = burst.POLICY + """    rollback:
      window: 2s
      interval: 500ms
"""


def fmt(lat):
    return f"p50 {percentile(lat, 50):6.2f} ms  p99 {percentile(lat, 99):6.2f} ms  max {max(lat):6.2f} ms"


class NewLink(Scale):
    def one(self, n, label):
        ns = f"{self.args.prefix}nl-{label}-{n}"
        self.netns_add(ns)
        config = os.path.join(self.tmp, f"{label}-{n}.yaml")
        with open(config, "w") as f:
            f.write(ON)
        daemon = self.start_daemon(ns, config, ["--no-count-packets"] if label == "off" else [])
        try:
            if n:
                self.ip_batch(ns, self.pairs_batch(n // 2, "bb"))
                if not self.wait_settled(ns, n):
                    print("  warning: not every device reached applied within 120 s", flush=True)
            lat = self.single_link_latency(ns, self.args.singles)
        finally:
            self.stop(daemon)
        subprocess.run(["ip", "netns", "del", ns], check=False)
        self.namespaces.remove(ns)
        return lat

    def run(self):
        ns = f"{self.args.prefix}nl-floor"
        self.netns_add(ns)
        sock = burst.netlink_socket_in(ns)
        try:
            floor = self.single_link_latency(ns, self.args.singles,
                                             writer=lambda ifindexes: burst.write_four(ns, ifindexes, SIZE, sock=sock))
        finally:
            sock.close()
        print(f"floor (no daemon: both ends written the moment they are announced), {len(floor)} pairs: "
              f"{fmt(floor)}", flush=True)
        for n in (0, self.args.pairs * 2):
            res = {}
            for label in ("off", "on"):
                res[label] = self.one(n, label)
                print(f"{n:6d} managed, evidence {label:3s}: {fmt(res[label])}", flush=True)
            ratio = percentile(res["on"], 99) / percentile(res["off"], 99)
            print(f"{n:6d} managed: p99 on/off {ratio:.2f} (target <= 1.5)", flush=True)
        return 0


def main():
    ap = burst.arguments(__doc__)
    ap.add_argument("--pairs", type=int, default=5000)
    ap.add_argument("--singles", type=int, default=100)
    ap.add_argument("--prefix", default=os.environ.get("BT_NETNS_PREFIX", "bt-bench-"))
    ap.add_argument("--ready-timeout", type=float, default=60)
    args = ap.parse_args()
    return burst.run_as_root("newlink.py", NewLink, args)


if __name__ == "__main__":
    sys.exit(main())
