#!/usr/bin/python3
"""Pod namespaces at scale (issue 11), from one run (not part of the test suite):

  * burst: N pod namespaces (default 500) made with one `ip -batch` of `netns add`, then one veth
    each whose peer (eth0) goes into its pod, from one `ip -n HOST -batch`, with bigtcpd running
    in HOST and a policy for the pods' eth0 at 185000: the lag from the end of the veth batch
    (and from the end of the namespace batch) until every pod end reads back at 185000 for all
    four sizes, read inside each pod with a socket of our own;
  * the daemon's RSS (VmRSS, VmHWM) and file descriptors before and after, per namespace;
  * the daemon's own netlink sockets per namespace (/proc/PID/fd); its runtime directory is on a
    tmpfs mounted for the run (as /run is on a real host), --runtime-on-disk keeps it on /tmp;
  * --only sockets: what the two ways of hearing N namespaces cost, measured without bigtcpd:
    (a) a subscribed NETLINK_ROUTE socket created in each namespace; (b) one socket in the
    daemon's namespace with NETLINK_LISTEN_ALL_NSID (every namespace given an nsid there first)
    plus one write socket in each namespace, which writes need anyway. For each: descriptors,
    the kernel's slab growth (/proc/meminfo Slab, noisy), setup time, and the time to receive
    the RTM_NEWLINK of a link change in every namespace (one `ip link set up` per namespace
    from a batch), read with one epoll loop.

Namespaces are named bt-bp<random>-<i> (the policy names only those) and are always removed, as
is every process started here. Run as root:
    /usr/bin/python3 tests/bench/netns.py [--bin build/daemon/bigtcpd] [--pods 500] [--only burst|sockets]
"""

import argparse
import ctypes
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from burst import Bench, messages, parse_links, status_kb  # noqa: E402  (processes, namespaces, temporary directory: cleaned up)
from policies import SIZE, standard_policy  # noqa: E402

CLONE_NEWNET = 0x40000000
SO_RCVBUFFORCE = 33
SOL_NETLINK = 270
NETLINK_LISTEN_ALL_NSID = 8
RTMGRP_LINK = 1
RTM_NEWLINK, RTM_GETLINK, RTM_NEWNSID = 16, 18, 88
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 2
IFLA_IFNAME, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS = 3, 29, 1 << 3
NETNSA_NSID, NETNSA_FD = 1, 3

_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class In:
    """`with In(name):` runs the block inside /run/netns/<name>."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            setns(target)
        finally:
            os.close(target)

    def __exit__(self, *exc):
        setns(self.own)
        os.close(self.own)


def nl_socket(groups=0, rcvbuf=None):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
    s.bind((0, groups))
    return s


def attr(t, payload):
    a = struct.pack("=HH", 4 + len(payload), t) + payload
    return a + b"\0" * ((4 - len(a) % 4) % 4)


def getlink_eth0(seq):
    body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)
    body += attr(IFLA_IFNAME, b"eth0\0") + attr(IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_SKIP_STATS))
    return struct.pack("=LHHLL", 16 + len(body), RTM_GETLINK, NLM_F_REQUEST, seq, 0) + body


def fds(pid):
    """The daemon's descriptors, but the spare packet sockets of its own namespace (bound to no
    device: made ahead, they come after READY=1, and again after a watch there took one)."""
    with open(f"/proc/{pid}/net/packet") as f:
        spares = {c[8] for c in (line.split() for line in f) if len(c) > 8 and c[4] == "0"}
    out = {"netlink": 0, "other": 0, "total": 0, "targets": {}}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in spares:
            continue
        out["total"] += 1
        out["targets"][fd] = target
        out["netlink" if target.startswith("socket:") else "other"] += 1
    return out


def describe(pid, target):
    """What a descriptor of pid is: a unix socket's line of /proc/PID/net/unix (its peer shown by
    `ss -xp`), a packet socket's of /proc/PID/net/packet, else its target."""
    if not target.startswith("socket:["):
        return target
    ino = target[8:-1]
    for table, col in (("unix", 6), ("packet", 8), ("netlink", 9)):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f:
                c = line.split()
                if len(c) > col and c[col] == ino:
                    peer = ""
                    if table == "unix":
                        ss = subprocess.run(["nsenter", "-t", str(pid), "-n", "ss", "-xpH"], capture_output=True,
                                            text=True).stdout
                        peer = " " + " | ".join(x.strip() for x in ss.splitlines() if f" {ino} " in x)
                    return f"{table} {line.strip()}{peer}"
    return target


def slab_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Slab:"):
                return int(line.split()[1])
    return 0


class Run(Bench):
    """burst.Bench (processes, namespaces and the temporary directory removed at the end) with the
    runtime directory on a tmpfs and namespaces made and deleted in batches."""

    def __init__(self, args):
        super().__init__(args)
        self.tag = "bt-bp" + secrets.token_hex(2)
        # The runtime directory on a tmpfs, as /run is on a real host (here it may be a disk, where
        # creating and fsyncing each namespace's state files costs what it would not there).
        self.mounted = False
        if not args.runtime_on_disk:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=64m", "bigtcpd-bench", self.tmp],
                           check=True)
            self.mounted = True

    def cleanup(self):
        if self.namespaces:   # one batch; Bench.cleanup() deletes what it left, one by one
            subprocess.run(["ip", "-batch", "-"], input="".join(f"netns del {n}\n" for n in self.namespaces).encode(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            self.namespaces = [n for n in self.namespaces if os.path.exists(f"/run/netns/{n}")]
        tmp = self.tmp
        super().cleanup()   # the daemon stopped, so that nothing holds the tmpfs
        if self.mounted:
            subprocess.run(["umount", tmp], check=False)
            self.mounted = False
            shutil.rmtree(tmp, ignore_errors=True)

    def batch(self, text, ns=None):
        """One `ip [-n NS] -batch -`; returns (start, end) in monotonic ns."""
        if ns:
            return self.ip_batch(ns, text)
        start = time.monotonic_ns()
        r = subprocess.run(["ip", "-batch", "-"], input=text.encode(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        end = time.monotonic_ns()
        if r.returncode != 0:
            raise RuntimeError(f"ip -batch failed: {r.stderr.decode().strip()[:500]}")
        return start, end

    def make_namespaces(self, names):
        self.namespaces.extend(names)
        return self.batch("".join(f"netns add {n}\n" for n in names))


def burst(run):
    n = run.args.pods
    host = f"{run.tag}-host"
    pods = [f"{run.tag}-{i}" for i in range(n)]
    run.make_namespaces([host])
    policy = standard_policy("pod-ends", (f'netns: ["{run.tag}-[0-9]*"]', "kind: [veth]"))
    cfg = os.path.join(run.tmp, "bigtcpd.yaml")
    with open(cfg, "w") as f:
        f.write(policy)
    d = run.start_daemon(host, cfg, ("--netns-dir", "/run/netns", "--log-level", "notice"))
    rss0, fds0 = status_kb(d.pid, "VmRSS"), fds(d.pid)
    perf = None
    if run.args.perf:   # where the daemon's time goes during the burst
        perf = subprocess.Popen(["perf", "record", "-q", "-g", "-p", str(d.pid), "-o", run.args.perf],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    ns_start, ns_end = run.make_namespaces(pods)
    # Our own reading sockets, one in each pod, made between the two batches so that making them
    # does not count in the lag.
    socks = {}
    for p in pods:
        with In(p):
            socks[p] = nl_socket()
    sockets_end = time.monotonic_ns()
    _, veth_end = run.batch("".join(f"link add vh{i} type veth peer name eth0 netns {p}\n"
                                    for i, p in enumerate(pods)), ns=host)
    left, seq, rounds = set(pods), 0, 0
    done_at = None
    deadline = time.monotonic() + 120
    while left and time.monotonic() < deadline:
        rounds += 1
        for p in list(left):
            seq += 1
            socks[p].send(getlink_eth0(seq))
        for p in list(left):
            got = next(parse_links(socks[p].recv(1 << 16)), None)
            if got and all(v == SIZE for v in got[2]):
                left.discard(p)
        if not left:
            done_at = time.monotonic_ns()
    for s in socks.values():
        s.close()
    if perf:
        perf.send_signal(signal.SIGINT)
        perf.wait(30)
    if left:
        print(f"burst: {len(left)} of {n} pod ends not at {SIZE} after 120 s", file=sys.stderr)
        return 1
    rss1, hwm1, fds1 = status_kb(d.pid, "VmRSS"), status_kb(d.pid, "VmHWM"), fds(d.pid)
    print(f"burst of {n} pod namespaces, one veth each:")
    print(f"  ip -batch netns add: {(ns_end - ns_start) / 1e6:.0f} ms; the veth batch took "
          f"{(veth_end - sockets_end) / 1e6:.0f} ms")
    print(f"  lag until every pod end at {SIZE}: {(done_at - veth_end) / 1e6:.0f} ms after the veth batch, "
          f"{(done_at - ns_start) / 1e6:.0f} ms after the namespace batch began ({rounds} read-back rounds)")
    print(f"  RSS {rss0} KiB before, {rss1} KiB after (peak {hwm1} KiB): "
          f"{(rss1 - rss0) / n:.1f} KiB per namespace")
    print(f"  fds {fds0['total']} before, {fds1['total']} after: {(fds1['total'] - fds0['total']) / n:.2f} per namespace "
          f"({(fds1['netlink'] - fds0['netlink']) / n:.2f} sockets, {(fds1['other'] - fds0['other']) / n:.2f} files)")
    # forgetting them: every namespace deleted in one batch
    t0 = time.monotonic_ns()
    run.batch("".join(f"netns del {p}\n" for p in pods))
    run.namespaces = [x for x in run.namespaces if x not in pods]
    # until the daemon is back at the descriptors it held at READY=1 (a poll: the daemon says
    # nothing when its last one closes), for at most 60 s
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and fds(d.pid)["total"] > fds0["total"]:
        time.sleep(0.05)
    t1 = time.monotonic_ns()
    back = fds(d.pid)
    if back["total"] > fds0["total"]:
        extra = {fd: t for fd, t in back["targets"].items() if fds0["targets"].get(fd) != t}
        extra = {fd: describe(d.pid, t) for fd, t in extra.items()}
        print(f"  all {n} deleted: daemon NOT back at its {fds0['total']} fds after 60 s: {back['total']} "
              f"({back['total'] - fds0['total']} more: {extra}); RSS {status_kb(d.pid, 'VmRSS')} KiB; "
              f"still running: {d.poll() is None}")
        return 1
    print(f"  all {n} deleted: daemon back at its {back['total']} fds {(t1 - t0) / 1e6:.0f} ms after the delete "
          f"batch began; RSS {status_kb(d.pid, 'VmRSS')} KiB; still running: {d.poll() is None}")
    return 0


def receive_all(socks, want, timeout=30):
    """Reads RTM_NEWLINK messages from `socks` with one epoll until `want` arrived; returns the count."""
    ep = select.epoll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        ep.register(fd, select.EPOLLIN)
    got = 0
    deadline = time.monotonic() + timeout
    while got < want and time.monotonic() < deadline:
        for fd, _ in ep.poll(1):
            while True:
                try:
                    data = by_fd[fd].recv(1 << 16, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                got += sum(kind == RTM_NEWLINK for _off, _length, kind in messages(data))
    ep.close()
    return got


def assign_nsid(sock, ns_name, nsid):
    fd = os.open(f"/run/netns/{ns_name}", os.O_RDONLY)
    try:
        body = struct.pack("=Bxxx", socket.AF_UNSPEC) + attr(NETNSA_FD, struct.pack("=I", fd)) + \
            attr(NETNSA_NSID, struct.pack("=i", nsid))
        sock.send(struct.pack("=LHHLL", 16 + len(body), RTM_NEWNSID, NLM_F_REQUEST | NLM_F_ACK, nsid, 0) + body)
        data = sock.recv(4096)
        (err,) = struct.unpack_from("=i", data, 16)
        if err and err != -17:  # EEXIST: it has one
            raise OSError(-err, f"RTM_NEWNSID {ns_name}: {os.strerror(-err)}")
    finally:
        os.close(fd)


def sockets(run):
    n = run.args.pods
    pods = [f"{run.tag}-{i}" for i in range(n)]
    run.make_namespaces(pods)
    run.batch("".join(f"netns exec {p} ip link add d0 type veth peer name d1\n" for p in pods))

    def change():
        """One link change in every pod; returns the batch's end."""
        return run.batch("".join(f"netns exec {p} ip link set d0 up\n" for p in pods))[1]

    def down():
        run.batch("".join(f"netns exec {p} ip link set d0 down\n" for p in pods))

    results = []
    # (a) three sockets per namespace, as bigtcpd opens them (event, write, statistics)
    slab0, t0 = slab_kib(), time.monotonic_ns()
    per_ns = []
    for p in pods:
        with In(p):
            per_ns.append((nl_socket(RTMGRP_LINK, 32 << 20), nl_socket(), nl_socket()))
    setup = (time.monotonic_ns() - t0) / 1e6
    slab = slab_kib() - slab0
    end = change()
    got = receive_all([s[0] for s in per_ns], n)
    t = (time.monotonic_ns() - end) / 1e6
    results.append(("a: 3 sockets in each namespace", 3 * n, slab, setup, got, t))
    for trio in per_ns:
        for s in trio:
            s.close()
    down()
    time.sleep(0.5)   # let the kernel free what the closed sockets held before the next reading

    # (b) one LISTEN_ALL_NSID socket here (each namespace needs an nsid here), one write socket there
    slab0, t0 = slab_kib(), time.monotonic_ns()
    listener = nl_socket(RTMGRP_LINK, 64 << 20)
    listener.setsockopt(SOL_NETLINK, NETLINK_LISTEN_ALL_NSID, 1)
    ctl = nl_socket()
    for i, p in enumerate(pods):
        assign_nsid(ctl, p, 100000 + i)
    writers = []
    for p in pods:
        with In(p):
            writers.append(nl_socket())
    setup = (time.monotonic_ns() - t0) / 1e6
    slab = slab_kib() - slab0
    # drain what assigning nsids announced
    receive_all([listener], 10 ** 9, timeout=0.2)
    end = change()
    got = receive_all([listener], n)
    t = (time.monotonic_ns() - end) / 1e6
    results.append(("b: 1 LISTEN_ALL_NSID socket + 1 write socket each", n + 2, slab, setup, got, t))
    listener.close()
    ctl.close()
    for s in writers:
        s.close()

    print(f"hearing {n} namespaces (one link change in each, from one ip -batch):")
    for name, nfds, slab, setup, got, t in results:
        print(f"  {name}: {nfds} sockets ({nfds / n:.2f} per namespace), slab +{slab} KiB, setup {setup:.0f} ms, "
              f"{got}/{n} RTM_NEWLINK received {t:.0f} ms after the batch ended")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "daemon", "bigtcpd"))
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--ready-timeout", type=float, default=30)
    ap.add_argument("--only", choices=("burst", "sockets"))
    ap.add_argument("--runtime-on-disk", action="store_true",
                    help="keep the runtime directory on the disk under /tmp, not on a tmpfs")
    ap.add_argument("--perf", metavar="FILE", help="perf record the daemon during the burst into FILE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root", file=sys.stderr)
        return 2
    rc = 0
    for part in ("burst", "sockets"):
        if args.only and args.only != part:
            continue
        run = Run(args)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        try:
            rc |= {"burst": burst, "sockets": sockets}[part](run)
        finally:
            run.cleanup()
    return rc


if __name__ == "__main__":
    sys.exit(main())
