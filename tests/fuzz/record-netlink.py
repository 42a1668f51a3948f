#!/usr/bin/python3
"""Record rtnetlink traffic from the running kernel as seeds for fuzz-netlink.

Usage: sudo tests/fuzz/record-netlink.py [OUTDIR]   (default: tests/fuzz/corpus/fuzz-netlink)

Creates a throwaway network namespace (bt-fuzz-rec-PID), builds in it what bigtcpd meets on a
host (veth pairs, a bridge with ports, vxlan, tap, macvlan, ifb, altnames, BIG TCP sizes, IPv4
and IPv6 addresses, default, prefix, multipath, other-table, blackhole and replaced routes, a
rename, a link down, deletions), and saves the raw datagrams the kernel sends:

  events-NNN        what a socket subscribed to the link and route groups received while that
                    was built and torn down (RTM_NEWLINK/DELLINK/NEWROUTE/DELROUTE), in order, in
                    pieces of up to 8 KiB
  link-dump-*       RTM_GETLINK dumps: without stats (IFLA_EXT_MASK RTEXT_FILTER_SKIP_STATS, as
                    the daemon dumps), with stats, and AF_BRIDGE (port messages, which the daemon
                    skips)
  link-get-*        RTM_GETLINK of one device with stats (a probation sample) and without
  route-dump-*      RTM_GETROUTE dumps (IPv4 and IPv6, every table)
  session-*         a link dump followed by route dumps (and the last events): one input that
                    fills the device table and then routes into it

Every file is what recvmsg() returned, or several such datagrams back to back: nlmsghdr-framed
messages (the dumps' NLMSG_DONE included). The namespace is deleted on the way out, also after a failure or a signal.
"""
import os
import signal
import socket
import struct
import subprocess
import sys

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_GETLINK, RTM_GETROUTE = 16, 18, 26
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
IFLA_IFNAME, IFLA_EXT_MASK = 3, 29
IFLA_GSO_IPV4_MAX_SIZE, IFLA_GRO_IPV4_MAX_SIZE = 63, 64
RTEXT_FILTER_SKIP_STATS = 1 << 3
RTMGRP_LINK, RTMGRP_IPV4_ROUTE, RTMGRP_IPV6_ROUTE = 0x1, 0x40, 0x400
AF_BRIDGE = 7
RECV_SIZE = 256 * 1024  # like the daemon's receive buffer
EVENT_CHUNK = 8192


def nlattr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def nlmsg(kind, flags, seq, body):
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def ifinfomsg(family=socket.AF_UNSPEC, index=0):
    return struct.pack("=BxHiII", family, 0, index, 0, 0)


def rtmsg(family=socket.AF_UNSPEC):
    return struct.pack("=BBBBBBBBI", family, 0, 0, 0, 0, 0, 0, 0, 0)


class Netlink:
    def __init__(self, groups=0):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
        self.sock.bind((0, groups))
        self.seq = 0

    def request(self, kind, flags, body):
        """Send one request; return the datagrams of its answer, up to NLMSG_DONE or the ack."""
        self.seq += 1
        self.sock.send(nlmsg(kind, NLM_F_REQUEST | flags, self.seq, body))
        datagrams = []
        while True:
            data = self.sock.recv(RECV_SIZE)
            datagrams.append(data)
            off, end = 0, False
            while off + 16 <= len(data):
                length, mtype, _, seq, _ = struct.unpack_from("=IHHII", data, off)
                if length < 16:
                    break
                if seq == self.seq and mtype in (NLMSG_DONE, NLMSG_ERROR):
                    end = True
                    if mtype == NLMSG_ERROR:
                        (err,) = struct.unpack_from("=i", data, off + 16)
                        if err and not flags & NLM_F_DUMP:
                            raise OSError(-err, os.strerror(-err))
                off += (length + 3) & ~3
            if end or not flags & NLM_F_DUMP:
                return datagrams

    def drain(self):
        datagrams = []
        self.sock.setblocking(False)
        try:
            while True:
                datagrams.append(self.sock.recv(RECV_SIZE))
        except BlockingIOError:
            pass
        self.sock.setblocking(True)
        return datagrams


def ip(*args, check=True):
    r = subprocess.run(("ip",) + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        msg = "ip %s: %s" % (" ".join(args), r.stderr.strip())
        if check:
            raise RuntimeError(msg)
        print("record-netlink: skipped (the kernel refused): " + msg, file=sys.stderr)
    return r.returncode == 0


def ifindex(name):
    return socket.if_nametoindex(name)


def set_ipv4_sizes(nl, name, size):
    """gso/gro_ipv4_max_size (Linux >= 6.3) straight over rtnetlink: older ip(8) lacks them."""
    body = ifinfomsg(index=ifindex(name))
    body += nlattr(IFLA_GSO_IPV4_MAX_SIZE, struct.pack("=I", size))
    body += nlattr(IFLA_GRO_IPV4_MAX_SIZE, struct.pack("=I", size))
    try:
        nl.request(RTM_NEWLINK, NLM_F_ACK, body)
    except OSError as e:
        print("record-netlink: skipped ipv4 sizes on %s: %s" % (name, e), file=sys.stderr)


def build(nl):
    """What the event socket sees; each step is one a host meets."""
    ip("link", "set", "lo", "up")
    ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth0-peer")
    ip("link", "add", "veth1", "address", "02:00:00:00:01:01", "type", "veth", "peer", "name", "veth1-peer")
    ip("link", "add", "eth-fabric", "address", "0c:42:a1:12:34:56", "type", "veth", "peer", "name", "eth-fabric-p")
    ip("link", "property", "add", "dev", "eth-fabric", "altname", "enp65s0f0np0", "altname", "alt-fabric")
    ip("link", "add", "br0", "type", "bridge")
    ip("link", "set", "veth0-peer", "master", "br0")
    ip("link", "set", "veth1-peer", "master", "br0")
    ip("link", "add", "vxlan42", "type", "vxlan", "id", "42", "dstport", "4789", "local", "192.0.2.1", check=False)
    ip("tuntap", "add", "mode", "tap", "tap0", check=False)
    ip("link", "add", "mv0", "link", "eth-fabric", "type", "macvlan", "mode", "bridge", check=False)
    ip("link", "add", "ifb0", "type", "ifb", check=False)
    for dev in ("veth0", "veth0-peer", "veth1", "veth1-peer", "eth-fabric", "eth-fabric-p", "br0"):
        ip("link", "set", dev, "up")
    ip("link", "set", "dev", "eth-fabric", "gso_max_size", "185000", "gro_max_size", "185000")
    set_ipv4_sizes(nl, "eth-fabric", 185000)
    ip("link", "set", "dev", "br0", "gro_max_size", "524280")

    ip("addr", "add", "192.0.2.1/24", "dev", "eth-fabric")
    ip("addr", "add", "2001:db8:1::1/64", "dev", "eth-fabric", "nodad")
    ip("addr", "add", "198.51.100.1/24", "dev", "veth0")
    ip("addr", "add", "2001:db8:2::1/64", "dev", "veth0", "nodad")
    ip("addr", "add", "203.0.113.1/24", "dev", "br0")
    ip("addr", "add", "fd00:42::1/64", "dev", "br0", "nodad")

    ip("route", "add", "default", "via", "192.0.2.254", "dev", "eth-fabric")
    ip("-6", "route", "add", "default", "via", "2001:db8:1::fe", "dev", "eth-fabric")
    ip("route", "add", "10.0.0.0/8", "nexthop", "via", "192.0.2.2", "dev", "eth-fabric", "weight", "2",
       "nexthop", "via", "198.51.100.2", "dev", "veth0")
    ip("-6", "route", "add", "2001:db8:100::/48", "nexthop", "via", "2001:db8:1::2", "dev", "eth-fabric",
       "nexthop", "via", "2001:db8:2::2", "dev", "veth0")
    ip("route", "add", "172.16.0.0/12", "dev", "br0", "table", "100", "metric", "50")
    ip("-6", "route", "add", "fd00:99::/32", "dev", "br0", "table", "1000")
    ip("route", "add", "blackhole", "10.99.0.0/16")
    ip("-6", "route", "add", "unreachable", "2001:db8:dead::/48")
    ip("route", "add", "100.64.0.0/10", "dev", "veth0", "tos", "0x10")
    ip("route", "replace", "100.64.0.0/10", "dev", "br0", "tos", "0x10")
    ip("route", "add", "192.0.2.128/25", "via", "192.0.2.3", "dev", "eth-fabric", "metric", "10")
    ip("route", "del", "192.0.2.128/25", "via", "192.0.2.3", "dev", "eth-fabric", "metric", "10")

    # a rename (the link must be down), a link going down (IPv4 drops its routes silently)
    ip("link", "set", "veth1", "down")
    ip("link", "set", "veth1", "name", "veth1-renamed")
    ip("link", "set", "veth1-renamed", "up")
    ip("link", "set", "veth0", "down")
    ip("link", "set", "veth0", "up")


def teardown():
    ip("link", "del", "veth1-renamed")
    ip("link", "del", "mv0", check=False)


def save(outdir, name, data):
    path = os.path.join(outdir, name)
    with open(path, "wb") as f:
        f.write(data)
    return [path]


def chunks(datagrams, limit):
    """Datagrams joined into pieces of at most `limit` bytes (a single larger one stays whole)."""
    out, cur = [], b""
    for d in datagrams:
        if cur and len(cur) + len(d) > limit:
            out.append(cur)
            cur = b""
        cur += d
    if cur:
        out.append(cur)
    return out


def inside(outdir):
    os.makedirs(outdir, exist_ok=True)
    events = Netlink(RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE)
    nl = Netlink()

    build(nl)
    ev = events.drain()

    link_nostats = nl.request(RTM_GETLINK, NLM_F_DUMP,
                              ifinfomsg() + nlattr(IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_SKIP_STATS)))
    link_stats = nl.request(RTM_GETLINK, NLM_F_DUMP, ifinfomsg())
    link_bridge = nl.request(RTM_GETLINK, NLM_F_DUMP, ifinfomsg(AF_BRIDGE))
    get_stats = nl.request(RTM_GETLINK, 0, ifinfomsg(index=ifindex("eth-fabric")))
    get_nostats = nl.request(RTM_GETLINK, 0, ifinfomsg(index=ifindex("br0")) +
                             nlattr(IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_SKIP_STATS)))
    routes = nl.request(RTM_GETROUTE, NLM_F_DUMP, rtmsg())
    routes6 = nl.request(RTM_GETROUTE, NLM_F_DUMP, rtmsg(socket.AF_INET6))

    teardown()
    ev += events.drain()

    j = b"".join
    written = []
    written += save(outdir, "link-dump-nostats", j(link_nostats))
    written += save(outdir, "link-dump-stats", j(link_stats))
    written += save(outdir, "link-dump-bridge", j(link_bridge))
    written += save(outdir, "link-get-stats", j(get_stats))
    written += save(outdir, "link-get-nostats", j(get_nostats))
    written += save(outdir, "route-dump", j(routes))
    written += save(outdir, "route-dump-inet6", j(routes6))
    # events in pieces of a few KiB: small inputs mutate faster
    for i, c in enumerate(chunks(ev, EVENT_CHUNK)):
        written += save(outdir, "events-%03d" % i, c)
    # the daemon's order: links, then routes, then what happens next
    written += save(outdir, "session-nostats", j(link_nostats + routes) + chunks(ev, EVENT_CHUNK)[-1])
    written += save(outdir, "session-stats", j(link_stats + routes + routes6))
    total = sum(os.path.getsize(p) for p in written)
    print("record-netlink: %d files, %d bytes in %s (%d event datagrams)" % (len(written), total, outdir, len(ev)))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--inside":
        inside(sys.argv[2])
        return 0
    if os.geteuid() != 0:
        sys.exit("record-netlink: must run as root (it creates a network namespace)")
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "fuzz-netlink"))
    ns = "bt-fuzz-rec-%d" % os.getpid()

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    inner = None
    try:
        # `ip netns exec` execs the inner python: stopping `inner` stops the recording itself
        inner = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, os.path.abspath(__file__), "--inside",
                                  outdir])
        rc = inner.wait()
        if rc != 0:
            sys.exit("record-netlink: recording in %s failed (exit %d)" % (ns, rc))
    finally:
        if inner and inner.poll() is None:
            inner.terminate()
            inner.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
