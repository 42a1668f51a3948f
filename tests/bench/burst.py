#!/usr/bin/python3
"""Burst benchmark: how long after a burst of new veth pairs bigtcpd has every device at the
policy's sizes, next to how long the kernel takes to write the same four sizes itself.

Not part of the test suite. Run it as root through tests/bench/burst.sh (which builds first),
or directly: /usr/bin/python3 tests/bench/burst.py [--pairs 1000,5000] [--bin PATH].

For each N:
  1. the kernel's pace: a fresh namespace, N veth pairs (2N devices), then the time the kernel
     takes to write all four sizes of every device as bigtcpd writes them (one RTM_NEWLINK with
     the four attributes each, acked), from one netlink socket, pipelined 1000 at a time, the
     requests made before the clock starts (iproute2 6.1 cannot set gso_ipv4_max_size /
     gro_ipv4_max_size: `ip -batch` would write two of the four). Read back after.
  2. daemon lag: another fresh namespace with bigtcpd running a policy for kind veth at 185000
     for all four sizes, READY=1 received; N veth pairs created with one `ip -n NS -batch -`.
     The lag is the time from the end of that `ip` process until the last of the 2N devices was
     written: the arrival of its `state` event (written and acknowledged: probation or applied)
     on a Monitor stream subscribed before the burst, timestamped by a thread that does nothing
     else (a resolution of the event's delivery, not of a read-back). The kernel sends no
     notification when only these sizes change, so the sizes are then read back: one dump, then
     pipelined RTM_GETLINK for the devices still short, until none is; the lag counts only once
     every device reads back at 185000 for all four sizes. That read-back's own end (an upper
     bound, to within one round: the first dump of 2N devices) is printed beside it. The result
     is then read back once more with tests/integration/nl.py.

Namespaces are kept until the end (deleting one with thousands of devices keeps the kernel
busy for a while afterwards) and always removed, as is every process started here.
"""

import argparse
import ctypes
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import helpers  # noqa: E402  (its Monitor: a varlink Monitor stream read by a thread)
import nl  # noqa: E402  (the integration tests' own netlink reader)

from policies import SIZE, standard_policy  # noqa: E402  (the tests' standard policy)

FIELDS = ("gso_max_size", "gro_max_size", "gso_ipv4_max_size", "gro_ipv4_max_size")
POLICY = standard_policy("bench-veth")

# rtnetlink constants (linux/rtnetlink.h, linux/if_link.h)
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS = 29, 1 << 3
IFLA_IFNAME, IFLA_GSO_MAX_SIZE, IFLA_GRO_MAX_SIZE = 3, 41, 58
IFLA_GSO_IPV4_MAX_SIZE, IFLA_GRO_IPV4_MAX_SIZE = 63, 64
ATTR_FIELD = {
    IFLA_GSO_MAX_SIZE: 0,
    IFLA_GRO_MAX_SIZE: 1,
    IFLA_GSO_IPV4_MAX_SIZE: 2,
    IFLA_GRO_IPV4_MAX_SIZE: 3,
}
CLONE_NEWNET = 0x40000000
SO_RCVBUFFORCE = 33

_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def netlink_socket_in(ns):
    """A NETLINK_ROUTE socket created inside ns."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        setns(target)
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        finally:
            setns(own)
    finally:
        os.close(target)
        os.close(own)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    sock.bind((0, 0))
    return sock


def messages(data):
    """(offset, length, type) of each netlink message of a datagram, up to a malformed one."""
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=LH", data, off)
        if length < 16:
            return
        yield off, length, kind
        off += (length + 3) & ~3


def parse_links(data):
    """Yields (ifindex, ifname or None, [four sizes or None]) for each RTM_NEWLINK in data."""
    for off, length, kind in messages(data):
        if kind == RTM_NEWLINK and length >= 32:
            (ifindex,) = struct.unpack_from("=i", data, off + 20)
            name, sizes = None, [None] * 4
            a, end = off + 32, off + length
            while a + 4 <= end:
                alen, atype = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                atype &= 0x3FFF
                if atype == IFLA_IFNAME:
                    name = data[a + 4 : a + alen].split(b"\0", 1)[0].decode()
                elif atype in ATTR_FIELD and alen >= 8:
                    (sizes[ATTR_FIELD[atype]],) = struct.unpack_from("=I", data, a + 4)
                a += (alen + 3) & ~3
            yield ifindex, name, sizes


class Poller:
    """Reads the four sizes back from the kernel, in a namespace. The kernel sends no link
    notification when only these sizes change (do_setlink marks the device modified but does
    not notify), so the only way to see them arrive is to ask: one dump, then RTM_GETLINK for
    just the devices still short of the policy, pipelined, until none is."""

    CHUNK = 1000

    def __init__(self, ns):
        self.sock = netlink_socket_in(ns)
        self.seq = 0

    def close(self):
        self.sock.close()

    def _request(self, flags, ifindex=0):
        self.seq += 1
        body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, ifindex, 0, 0)
        body += struct.pack("=HHI", 8, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
        return struct.pack("=LHHLL", 16 + len(body), RTM_GETLINK, flags, self.seq, 0) + body

    def _receive(self, expected):
        """Receives until `expected` replies (or NLMSG_DONE when None) and notes the time then,
        before any parsing, so that the Python parser's pace does not count as the daemon's."""
        chunks, got = [], 0
        while expected is None or got < expected:
            data = self.sock.recv(1 << 20)
            chunks.append(data)
            for off, _length, kind in messages(data):
                if kind == NLMSG_DONE:
                    return time.monotonic_ns(), chunks
                if kind == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, off + 16)
                    if err and expected is None:
                        raise OSError(-err, f"link dump: {os.strerror(-err)}")
                    got += 1
                elif kind == RTM_NEWLINK:
                    got += 1
        return time.monotonic_ns(), chunks

    @staticmethod
    def _parse(chunks):
        return [link for data in chunks for link in parse_links(data)]

    def dump(self):
        """Returns (time the last reply arrived, [(ifindex, name, sizes)])."""
        self.sock.send(self._request(NLM_F_REQUEST | NLM_F_DUMP))
        t, chunks = self._receive(None)
        return t, self._parse(chunks)

    def get(self, ifindexes):
        """Returns (time the last reply arrived, [(ifindex, name, sizes)]); a device that is gone
        is missing from the list."""
        chunks = []
        ifindexes = list(ifindexes)
        for i in range(0, len(ifindexes), self.CHUNK):
            chunk = ifindexes[i:i + self.CHUNK]
            self.sock.send(b"".join(self._request(NLM_F_REQUEST, x) for x in chunk))
            t, more = self._receive(len(chunk))
            chunks.extend(more)
        return t, self._parse(chunks)


def write_four(ns, ifindexes, size, chunk=1000, sock=None):
    """Writes the four sizes of each device as bigtcpd does (one acked RTM_NEWLINK each, with
    IFLA_GSO_MAX_SIZE, IFLA_GRO_MAX_SIZE and the IPv4 two), `chunk` requests in flight at once;
    returns the seconds from the first send to the last ack (the requests are made first). `sock`:
    a NETLINK_ROUTE socket of ns to use (netlink_socket_in()), else one made for it."""
    attrs = b"".join(struct.pack("=HHI", 8, a, size) for a in
                     (IFLA_GSO_MAX_SIZE, IFLA_GRO_MAX_SIZE, IFLA_GSO_IPV4_MAX_SIZE, IFLA_GRO_IPV4_MAX_SIZE))
    msgs = []
    for seq, ifindex in enumerate(ifindexes, 1):
        body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, ifindex, 0, 0) + attrs
        msgs.append(struct.pack("=LHHLL", 16 + len(body), RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body)
    batches = [b"".join(msgs[i:i + chunk]) for i in range(0, len(msgs), chunk)]
    sizes = [min(chunk, len(msgs) - i) for i in range(0, len(msgs), chunk)]
    own = sock is None
    if own:
        sock = netlink_socket_in(ns)
    try:
        start = time.monotonic_ns()
        for batch, expected in zip(batches, sizes):
            sock.send(batch)
            got = 0
            while got < expected:
                data = sock.recv(1 << 20)
                for off, _length, kind in messages(data):
                    if kind == NLMSG_ERROR:
                        (err,) = struct.unpack_from("=i", data, off + 16)
                        if err:
                            raise OSError(-err, f"RTM_NEWLINK: {os.strerror(-err)}")
                        got += 1
        return (time.monotonic_ns() - start) / 1e9
    finally:
        if own:
            sock.close()


def status_kb(pid, key):
    """A figure of /proc/PID/status in kB (VmRSS, VmHWM, …); 0 where the process has none."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def log_tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def start_bigtcpd(argv, notify, log, timeout, started):
    """The benches' one daemon start: runs `argv` (bigtcpd, or a command that execs it) with
    NOTIFY_SOCKET at the path `notify` and its output in the file `log`, hands the process to
    `started` at once (the caller's list of what to stop at the end, also when this fails), and
    waits for READY=1. Returns the Popen; raises RuntimeError, with the end of the log, when
    bigtcpd exits first or sends no READY=1 within `timeout` seconds."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    sock.settimeout(0.1)
    try:
        with open(log, "wb") as out:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, NOTIFY_SOCKET=notify))
        started(p)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if b"READY=1" in sock.recv(65536).split(b"\n"):
                    return p
            except socket.timeout:
                pass
            if p.poll() is not None:
                raise RuntimeError(f"bigtcpd exited with {p.returncode} before READY=1 (log {log}):\n"
                                   + log_tail(log))
            if time.monotonic() > deadline:
                raise RuntimeError(f"bigtcpd sent no READY=1 within {timeout} s (log {log}):\n" + log_tail(log))
    finally:
        sock.close()
        os.unlink(notify)

class Bench:
    def __init__(self, args):
        self.args = args
        self.namespaces = []
        self.procs = []
        self.tmp = tempfile.mkdtemp(prefix="bigtcpd-bench.")

    # --- bookkeeping: everything made here is removed in cleanup() ---

    def netns_add(self, name):
        if os.path.exists(f"/run/netns/{name}"):
            print(f"  warning: deleting leftover namespace {name}", file=sys.stderr)
            subprocess.run(["ip", "netns", "del", name], check=False)
        subprocess.run(["ip", "netns", "add", name], check=True)
        self.namespaces.append(name)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    print(f"  warning: pid {p.pid} ignored SIGTERM, killing it", file=sys.stderr)
                    p.kill()
                    p.wait()
        self.procs.clear()
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], check=False)
        self.namespaces.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- pieces ---

    @staticmethod
    def pairs_batch(n, prefix):
        return "".join(f"link add {prefix}{i}a type veth peer name {prefix}{i}b\n" for i in range(n))

    @staticmethod
    def ip_batch(ns, text):
        """Runs one `ip -n NS -batch -`; returns (start, end) in monotonic ns."""
        start = time.monotonic_ns()
        r = subprocess.run(["ip", "-n", ns, "-batch", "-"], input=text.encode(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic_ns()
        if r.returncode != 0:
            raise RuntimeError(f"ip -n {ns} -batch failed: {r.stderr.decode().strip()[:500]}")
        return start, end

    def start_daemon(self, ns, config, extra_args=(), prefix=()):
        """Starts bigtcpd in ns (with `extra_args`, its command line after `prefix`, which must
        exec it) and waits for READY=1 on its NOTIFY_SOCKET."""
        cmd = [*prefix, "ip", "netns", "exec", ns, self.args.bin, "--config", config,
               "--runtime-dir", os.path.join(self.tmp, f"run-{ns}"), *extra_args]
        return start_bigtcpd(cmd, os.path.join(self.tmp, f"notify-{ns}"),
                             os.path.join(self.tmp, f"bigtcpd-{ns}.log"), self.args.ready_timeout, self.procs.append)

    def start_on(self, ns, policy, extra_args=()):
        """bigtcpd in a fresh namespace `ns` on `policy` (its text, written as NS.yaml into the
        temporary directory)."""
        self.netns_add(ns)
        config = os.path.join(self.tmp, f"{ns}.yaml")
        with open(config, "w") as f:
            f.write(policy)
        return self.start_daemon(ns, config, extra_args)

    def daemon_log(self, ns, lines=20):
        return log_tail(os.path.join(self.tmp, f"bigtcpd-{ns}.log"), lines)

    def stop(self, p):
        helpers.stop(p, 10)
        self.procs.remove(p)

    # --- the two measurements ---

    def kernel_pace(self, n):
        ns = f"bt-bench-ip{n}"
        self.netns_add(ns)
        self.ip_batch(ns, self.pairs_batch(n, "bb"))
        poller = Poller(ns)
        try:
            _, links = poller.dump()
        finally:
            poller.close()
        took = write_four(ns, [i for i, name, _ in links if name and name.startswith("bb")], SIZE)
        links = nl.read_links(ns)
        wrong = [d for d in links if d.startswith("bb") and any(links[d][k] != SIZE for k in FIELDS)]
        if wrong:
            raise RuntimeError(f"{len(wrong)} devices not at {SIZE} (all four sizes) after the kernel's writes")
        return took

    def daemon_lag(self, n):
        ns = f"bt-bench-d{n}"
        daemon = self.start_on(ns, POLICY)
        poller = Poller(ns)
        result = {"rounds": 0}
        mon = helpers.Monitor(Path(self.tmp) / f"run-{ns}" / "io.bigtcpd.Manager", seed=False)
        try:
            start, burst_end = self.ip_batch(ns, self.pairs_batch(n, "bb"))
            result["burst"] = (burst_end - start) / 1e9
            round_start = time.monotonic_ns()
            last_round, links = poller.dump()
            ours = {i: sz for i, name, sz in links if name and name.startswith("bb")}
            if len(ours) != 2 * n:
                result["error"] = f"found {len(ours)} devices after the burst, not {2 * n}"
                return result
            short = [i for i, sz in ours.items() if any(x != SIZE for x in sz)]
            deadline = last_round + int(self.args.timeout * 1e9)
            while short and time.monotonic_ns() < deadline:
                time.sleep(self.args.poll_gap)  # leave the CPUs to the daemon for a moment
                round_start = time.monotonic_ns()
                last_round, replies = poller.get(short)
                result["rounds"] += 1
                if len(replies) != len(short):
                    result["error"] = "devices disappeared"
                    return result
                short = [i for i, _, sz in replies if any(x != SIZE for x in sz)]
            if daemon.poll() is not None:
                result["error"] = f"bigtcpd exited with {daemon.returncode}"
                print(self.daemon_log(ns), file=sys.stderr)
                return result
            if short:
                result["error"] = (f"{len(short)} of {2 * n} devices not at {SIZE} "
                                   f"{self.args.timeout:g} s after the burst")
                return result
            result["readback"] = max(0, last_round - burst_end) / 1e9
            result["resolution"] = (last_round - round_start) / 1e9
            written = {}
            with mon.cond:
                for ev, t in zip(mon.events, mon.times):
                    if (ev.get("event") == "state" and ev.get("state") in ("probation", "applied") and
                            str(ev.get("ifname", "")).startswith("bb")):
                        written.setdefault(ev["ifindex"], t)
            if len(written) < 2 * n:
                result["error"] = f"the Monitor stream told of {len(written)} of {2 * n} devices written"
                return result
            result["lag"] = max(0.0, max(written.values()) - burst_end / 1e9)
        finally:
            mon.close()
            poller.close()
            if daemon.poll() is None:
                self.stop(daemon)

        # the same, read with the integration tests' own code
        links = nl.read_links(ns)
        result["lo"] = links.get("lo", {})
        wrong = [d for d, v in links.items() if d.startswith("bb") and
                 any(v[k] != SIZE for k in FIELDS)]
        if wrong:
            result["error"] = f"nl.read_links: {len(wrong)} devices not at {SIZE}"
            del result["lag"]
        return result

    def run(self):
        rows = []
        for n in self.args.pairs:
            print(f"N={n}: {2 * n} devices", flush=True)
            write = self.kernel_pace(n)
            print(f"  the kernel writing the four sizes of {2 * n} devices: {write:.3f} s",
                  flush=True)
            r = self.daemon_lag(n)
            if "burst" in r:
                print(f"  burst of {n} veth pairs took {r['burst']:.3f} s with bigtcpd running",
                      flush=True)
            lo = r.get("lo", {})
            if any(lo.get(k, 65536) != 65536 for k in FIELDS):
                print(f"  warning: lo was written: {lo}", flush=True)
            if "error" in r:
                print(f"  bigtcpd: {r['error']}", flush=True)
            else:
                print(f"  bigtcpd had written the last of {2 * n} devices {r['lag']:.3f} s after the burst "
                      f"(its Monitor event); all read back at {SIZE} (all four sizes) {r['readback']:.3f} s "
                      f"after it ({r['rounds']} read-back rounds after the first dump; the last took "
                      f"{r['resolution']:.3f} s)", flush=True)
            rows.append((n, write, r))

        print()
        print(f"{'N':>6} {'devices':>8} {'kernel write':>15} {'daemon lag':>11} {'ratio':>6}")
        for n, write, r in rows:
            lag = f"{r['lag']:.3f} s" if "lag" in r else "-"
            ratio = f"{r['lag'] / write:.2f}" if "lag" in r and write > 0 else "-"
            print(f"{n:>6} {2 * n:>8} {write:>13.3f} s {lag:>11} {ratio:>6}")
        print("kernel write: the four sizes of every device written as bigtcpd writes them (one acked "
              "RTM_NEWLINK each, 1000 in flight), no daemon.")
        print("daemon lag: end of the `ip -batch` creating the pairs -> the Monitor event of the last "
              "device written\n  (every one read back at the policy's sizes after). ratio = lag / write; "
              "target <= 1.")
        return 0 if all("lag" in r for _, _, r in rows) else 1


def timed(argv):
    """Seconds one run of `argv` takes, its output to /dev/null; raises if it fails."""
    t0 = time.monotonic()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{argv} exited {r.returncode}: {r.stderr.decode().strip()[:300]}")
    return t


def run_as_root(name, make_bench, args):
    """A benchmark's main once its arguments are parsed: as root only; SIGTERM, like the end,
    goes through the bench's cleanup (its daemons and namespaces)."""
    if os.geteuid() != 0:
        sys.exit(f"{name}: must run as root")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bench = make_bench(args)
    try:
        return bench.run()
    finally:
        bench.cleanup()


def arguments(doc):
    """A bench's command line: its docstring's first paragraph, and --bin (default $BIGTCPD_BIN,
    else the release build's daemon)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--bin", default=os.environ.get("BIGTCPD_BIN",
                                                   os.path.join(ROOT, "build", "daemon", "bigtcpd")))
    return ap


def main():
    ap = arguments(__doc__)
    ap.add_argument("--pairs", default="1000,5000",
                    help="comma-separated numbers of veth pairs (default 1000,5000)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for convergence")
    ap.add_argument("--poll-gap", type=float, default=0.002,
                    help="seconds between read-back rounds (default 0.002)")
    ap.add_argument("--ready-timeout", type=float, default=30)
    args = ap.parse_args()
    args.pairs = [int(x) for x in args.pairs.split(",") if x]
    if os.geteuid() == 0 and not os.access(args.bin, os.X_OK):
        sys.exit(f"burst.py: {args.bin} not found; build it with: bash scripts/build.sh")
    return run_as_root("burst.py", Bench, args)


if __name__ == "__main__":
    sys.exit(main())
