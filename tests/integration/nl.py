#!/usr/bin/python3
"""nl.py — the tests' own rtnetlink code: read and write the four BIG TCP sizes of every link in a
named network namespace, and wait on link notifications. Independent of the daemon (struct +
socket only, no pyroute2) so that a bug there cannot hide a bug in the daemon.

Public API (also used by the README demo and tests/bench):
    read_links(netns) -> {ifname: {'ifindex', 'gso_max_size', 'gro_max_size',
                                   'gso_ipv4_max_size', 'gro_ipv4_max_size', 'tso_max_size', ...}}
    set_sizes(netns, ifname, **sizes)      one RTM_NEWLINK, attributes in the order given, acked
    wait_links(netns, predicate, timeout)  subscribe, dump, re-check after every notification
    LinkWatcher(netns)                     the same, as an object that also records every event
CLI:
    /usr/bin/python3 nl.py show [--netns NS] [--json]
`netns` is a name under /run/netns, or None for the caller's own namespace.

Kernel facts this code is built around (verified on 6.18):
- A change of only gso/gro(_ipv4)_max_size sends NO RTM_NEWLINK (do_setlink() marks it
  MODIFIED, not NOTIFY), and neither does a bridge's tso_max_size rising when a port joins.
  So waiting re-dumps periodically besides following notifications.
- Bridge ports also produce AF_BRIDGE RTM_NEWLINK/RTM_DELLINK messages: partial, and a DELLINK
  of that family means "left the bridge". Only AF_UNSPEC link messages are state.
"""

import argparse
import ctypes
import errno
import json
import os
import select
import socket
import struct
import sys
import time

# --- constants (ABI; values never change) ---------------------------------------------------

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11
SO_RCVBUFFORCE = 33

RTMGRP_LINK = 0x1

NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSG_OVERRUN = 4

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_DUMP_INTR = 0x10
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1

RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18

NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_MASTER = 10
IFLA_LINKINFO = 18
IFLA_INFO_KIND = 1
IFLA_EXT_MASK = 29
IFLA_GSO_MAX_SIZE = 41
IFLA_PROP_LIST = 52
IFLA_ALT_IFNAME = 53
IFLA_GRO_MAX_SIZE = 58
IFLA_TSO_MAX_SIZE = 59
IFLA_GSO_IPV4_MAX_SIZE = 63
IFLA_GRO_IPV4_MAX_SIZE = 64

RTEXT_FILTER_SKIP_STATS = 1 << 3

IFF_UP = 0x1
IFF_LOOPBACK = 0x8

CLONE_NEWNET = 0x40000000

LEGACY = 65536
GRO_MAX = 524280

SIZE_ATTRS = {
    'gso_max_size': IFLA_GSO_MAX_SIZE,
    'gro_max_size': IFLA_GRO_MAX_SIZE,
    'gso_ipv4_max_size': IFLA_GSO_IPV4_MAX_SIZE,
    'gro_ipv4_max_size': IFLA_GRO_IPV4_MAX_SIZE,
}
# The four writable sizes, in the order the daemon is required to write them.
SIZES = ('gso_max_size', 'gro_max_size', 'gso_ipv4_max_size', 'gro_ipv4_max_size')
ALL_SIZES = SIZES + ('tso_max_size',)

_NLMSGHDR = struct.Struct('=IHHII')   # len, type, flags, seq, pid
_IFINFOMSG = struct.Struct('=BxHiII')  # family, type, index, flags, change
_RTATTR = struct.Struct('=HH')         # len, type
_U32 = struct.Struct('=I')

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)


class NetlinkError(OSError):
    """The kernel refused a request. .errno is set; .ext_ack holds the extended ack text."""

    def __init__(self, err, what, ext_ack=None):
        msg = f'{what}: {os.strerror(err)}'
        if ext_ack:
            msg += f' ({ext_ack})'
        super().__init__(err, msg)
        self.ext_ack = ext_ack


def _align(n):
    return (n + 3) & ~3


def _attr(atype, payload):
    return _RTATTR.pack(_RTATTR.size + len(payload), atype) + payload + b'\0' * (_align(len(payload)) - len(payload))


def _parse_attrs(buf, off, end):
    """Yield (type, start, stop) of each attribute in buf[off:end], checking lengths."""
    while off + _RTATTR.size <= end:
        alen, atype = _RTATTR.unpack_from(buf, off)
        if alen < _RTATTR.size or off + alen > end:
            return
        yield atype & NLA_TYPE_MASK, off + _RTATTR.size, off + alen
        off += _align(alen)


def _cstr(buf, start, stop):
    return bytes(buf[start:stop]).split(b'\0', 1)[0].decode('utf-8', 'replace')


# The link's u32 attributes, as the keys of read_links()' entries.
_U32_FIELDS = {IFLA_GSO_MAX_SIZE: 'gso_max_size', IFLA_GRO_MAX_SIZE: 'gro_max_size', IFLA_TSO_MAX_SIZE: 'tso_max_size',
               IFLA_GSO_IPV4_MAX_SIZE: 'gso_ipv4_max_size', IFLA_GRO_IPV4_MAX_SIZE: 'gro_ipv4_max_size',
               IFLA_MASTER: 'master'}


def _parse_link(buf, off, end):
    """Parse one RTM_NEWLINK/RTM_DELLINK body (after the nlmsghdr) into a dict."""
    if off + _IFINFOMSG.size > end:
        return None
    family, itype, index, flags, _change = _IFINFOMSG.unpack_from(buf, off)
    link = {'ifindex': index, 'ifname': None, 'flags': flags, 'type': itype, 'family': family,
            'kind': None, 'master': 0, 'address': None, 'altnames': []}
    for s in ALL_SIZES:
        link[s] = None
    for atype, a, b in _parse_attrs(buf, off + _IFINFOMSG.size, end):
        if atype == IFLA_IFNAME:
            link['ifname'] = _cstr(buf, a, b)
        elif atype in _U32_FIELDS and b - a >= 4:
            link[_U32_FIELDS[atype]] = _U32.unpack_from(buf, a)[0]
        elif atype == IFLA_ADDRESS:
            link['address'] = ':'.join(f'{x:02x}' for x in bytes(buf[a:b]))
        elif atype == IFLA_LINKINFO:
            for t2, a2, b2 in _parse_attrs(buf, a, b):
                if t2 == IFLA_INFO_KIND:
                    link['kind'] = _cstr(buf, a2, b2)
        elif atype == IFLA_PROP_LIST:
            for t2, a2, b2 in _parse_attrs(buf, a, b):
                if t2 == IFLA_ALT_IFNAME:
                    link['altnames'].append(_cstr(buf, a2, b2))
    return link


def _parse_ack(buf, off, end):
    """Parse an NLMSG_ERROR body: returns (error, seq of the request, ext ack text or None)."""
    if off + 4 + _NLMSGHDR.size > end:
        return -errno.EBADMSG, 0, None
    err = struct.unpack_from('=i', buf, off)[0]
    olen, _t, _f, oseq, _p = _NLMSGHDR.unpack_from(buf, off + 4)
    ext = None
    flags = _NLMSGHDR.unpack_from(buf, off - _NLMSGHDR.size)[2]
    if flags & NLM_F_ACK_TLVS:
        # With NETLINK_CAP_ACK the original request is capped to its header.
        payload_len = _NLMSGHDR.size if flags & 0x100 else _align(olen)
        for atype, a, b in _parse_attrs(buf, off + 4 + payload_len, end):
            if atype == NLMSGERR_ATTR_MSG:
                ext = _cstr(buf, a, b)
    return err, oseq, ext


# --- sockets in a named namespace ------------------------------------------------------------

def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f'setns: {os.strerror(e)}')


def netns_socket(netns, groups=0, rcvbuf=None):
    """A NETLINK_ROUTE socket created inside /run/netns/<netns> (a path when it begins with /; here
    when netns is None).
    A socket stays bound to the namespace it was created in, so we switch only for socket()."""
    if netns is None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    else:
        orig = os.open('/proc/thread-self/ns/net', os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(netns if netns.startswith('/') else f'/run/netns/{netns}', os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(target)
                try:
                    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                         NETLINK_ROUTE)
                finally:
                    _setns(orig)  # if this fails the process is in a bad state: let it raise
            finally:
                os.close(target)
        finally:
            os.close(orig)
    try:
        if rcvbuf:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
            except PermissionError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        sock.bind((0, groups))
    except BaseException:
        sock.close()
        raise
    return sock


class _Conn:
    """A request/response netlink socket."""

    def __init__(self, netns, groups=0, rcvbuf=None):
        self.sock = netns_socket(netns, groups, rcvbuf)
        self.seq = int(time.monotonic() * 1000) & 0xFFFFFF
        self.buf = bytearray(1 << 20)

    def close(self):
        self.sock.close()

    def send(self, mtype, flags, body):
        self.seq += 1
        msg = _NLMSGHDR.pack(_NLMSGHDR.size + len(body), mtype, flags, self.seq, 0) + body
        self.sock.sendto(msg, (0, 0))
        return self.seq

    def recv(self, block=True):
        """Return one datagram as a memoryview (valid until the next recv), or None."""
        try:
            n = self.sock.recv_into(self.buf, 0, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        return memoryview(self.buf)[:n]

    @staticmethod
    def messages(data):
        """Yield (type, flags, seq, pid, body_start, end) for each message of a datagram."""
        off = 0
        n = len(data)
        while off + _NLMSGHDR.size <= n:
            mlen, mtype, flags, seq, pid = _NLMSGHDR.unpack_from(data, off)
            if mlen < _NLMSGHDR.size or off + mlen > n:
                return
            yield mtype, flags, seq, pid, off + _NLMSGHDR.size, off + mlen
            off += _align(mlen)


def _dump_request():
    return _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + _attr(IFLA_EXT_MASK, _U32.pack(RTEXT_FILTER_SKIP_STATS))


def _dump_part(data, mtype, a, b):
    """A message of a link dump (but its NLMSG_DONE): an RTM_NEWLINK's link, None for another
    message; its NLMSG_ERROR raised."""
    if mtype == NLMSG_ERROR:
        err, _s, ext = _parse_ack(data, a, b)
        raise NetlinkError(-err, 'RTM_GETLINK dump', ext)
    return _parse_link(data, a, b) if mtype == RTM_NEWLINK else None


def _by_name(by_index):
    return {l['ifname']: l for l in by_index.values() if l['ifname'] is not None}


def read_links(netns=None):
    """One RTM_GETLINK dump: {ifname: {...}}. Retries when the dump was interrupted."""
    conn = _Conn(netns)
    try:
        for _attempt in range(10):
            seq = conn.send(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, _dump_request())
            links = {}
            intr = False
            done = False
            while not done:
                data = conn.recv()
                for mtype, flags, mseq, _pid, a, b in conn.messages(data):
                    if mseq != seq:
                        continue
                    if flags & NLM_F_DUMP_INTR:
                        intr = True
                    if mtype == NLMSG_DONE:
                        done = True
                    elif link := _dump_part(data, mtype, a, b):
                        links[link['ifindex']] = link
            if not intr:
                return _by_name(links)
        return _by_name(links)
    finally:
        conn.close()


def set_sizes(netns, ifname, **sizes):
    """Write sizes (gso_max_size=..., gro_ipv4_max_size=..., in the order given) to one device
    with one RTM_NEWLINK, the device named by IFLA_IFNAME. Raises NetlinkError if refused."""
    attrs = [_attr(IFLA_IFNAME, ifname.encode() + b'\0')]
    for key, value in sizes.items():
        if key not in SIZE_ATTRS:
            raise TypeError(f'set_sizes: unknown size {key!r} (one of {", ".join(SIZES)})')
        attrs.append(_attr(SIZE_ATTRS[key], _U32.pack(int(value))))
    body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + b''.join(attrs)
    conn = _Conn(netns)
    try:
        seq = conn.send(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, body)
        while True:
            data = conn.recv()
            for mtype, _flags, mseq, _pid, a, b in conn.messages(data):
                if mtype == NLMSG_ERROR and mseq == seq:
                    err, _s, ext = _parse_ack(data, a, b)
                    if err:
                        raise NetlinkError(-err, f'{ifname}: RTM_NEWLINK {sizes}', ext)
                    return
    finally:
        conn.close()


def sizes_of(link):
    """The four writable sizes of a link as a tuple, in SIZES order."""
    return tuple(link[s] for s in SIZES)


def format_table(links, limit=None):
    rows = sorted(links.values(), key=lambda l: l['ifindex'])
    lines = [f'{"ifindex":>7} {"ifname":<16} {"kind":<8} ' + ' '.join(f'{s:>17}' for s in ALL_SIZES)]
    for l in rows[:limit] if limit else rows:
        lines.append(f'{l["ifindex"]:>7} {l["ifname"]:<16} {(l.get("kind") or "-"):<8} '
                     + ' '.join(f'{("-" if l[s] is None else l[s]):>17}' for s in ALL_SIZES))
    if limit and len(rows) > limit:
        lines.append(f'... and {len(rows) - limit} more')
    return '\n'.join(lines)


class LinkWatcher:
    """Subscribes to RTMGRP_LINK, then dumps, and keeps `self.links` ({ifname: link}) current.
    Every notification is appended to `self.events` as (msg_type, link dict). ENOBUFS on our own
    socket is handled by dumping again (counted in `self.overruns`)."""

    def __init__(self, netns=None, rcvbuf=64 << 20):
        self.netns = netns
        self.conn = _Conn(netns, groups=RTMGRP_LINK, rcvbuf=rcvbuf)
        self.portid = self.conn.sock.getsockname()[0]
        self.by_index = {}
        self.events = []
        self.overruns = 0
        self.last_dump_time = 0.0
        self._dump_seq = None
        self._start_dump()
        while self._dump_seq is not None:
            self._process(block=True)

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def links(self):
        return _by_name(self.by_index)

    def _start_dump(self):
        self._dump_seq = self.conn.send(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, _dump_request())
        self._dump_fresh = {}
        self._redump = False

    def _process(self, block):
        """Handle one datagram. Returns False when nothing was pending (non-blocking)."""
        try:
            data = self.conn.recv(block)
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            # Notifications were lost: dump again. Only one dump may run per socket, so one that
            # is in flight is finished first and then repeated.
            self.overruns += 1
            if self._dump_seq is None:
                self._start_dump()
            else:
                self._redump = True
            return True
        if data is None:
            return False
        for mtype, flags, seq, pid, a, b in self.conn.messages(data):
            # Notifications carry the portid and seq of whoever caused them; only pid tells
            # replies to our own dump apart.
            mine = pid == self.portid
            if mine and self._dump_seq is not None and seq == self._dump_seq:
                if mtype == NLMSG_DONE:
                    if self._redump:
                        self._start_dump()
                        continue
                    # Links not seen in the dump are gone (their DELLINK may have been lost).
                    self.by_index = {i: l for i, l in self.by_index.items() if i in self._dump_fresh}
                    self._dump_seq = None
                elif link := _dump_part(data, mtype, a, b):
                    self.by_index[link['ifindex']] = link
                    self._dump_fresh[link['ifindex']] = True
                continue
            if mine:
                continue  # the rest of an abandoned dump
            if mtype in (RTM_NEWLINK, RTM_DELLINK) and b - a >= 1 and data[a] != socket.AF_UNSPEC:
                # AF_BRIDGE port messages: partial, and an AF_BRIDGE RTM_DELLINK only means "left
                # the bridge", not that the device is gone.
                continue
            if mtype == RTM_NEWLINK:
                link = _parse_link(data, a, b)
                if link:
                    self.by_index[link['ifindex']] = link
                    if self._dump_seq is not None:
                        self._dump_fresh[link['ifindex']] = True
                    self.events.append((RTM_NEWLINK, link))
            elif mtype == RTM_DELLINK:
                link = _parse_link(data, a, b)
                if link:
                    self.by_index.pop(link['ifindex'], None)
                    if self._dump_seq is not None:
                        self._dump_fresh.pop(link['ifindex'], None)
                    self.events.append((RTM_DELLINK, link))
        return True

    def drain(self):
        """Process everything already queued (and finish a dump in flight)."""
        while self._process(block=False) or self._dump_seq is not None:
            if self._dump_seq is not None:
                self._process(block=True)

    def redump(self):
        """Dump now and process until the dump is complete."""
        t = time.monotonic()
        if self._dump_seq is None:
            self._start_dump()
        else:
            self._redump = True
        while self._dump_seq is not None:
            self._process(block=True)
        self.last_dump_time = time.monotonic() - t

    def wait(self, predicate, timeout, what=None, poll=0.05):
        """Return self.links once predicate(self.links) is true. Re-evaluated after each batch
        of notifications and, because the kernel sends no notification when only a GSO/GRO size
        or tso_max_size changes, after a fresh dump every `poll` seconds (at least 3x the time
        a dump takes). Raises TimeoutError with the last state."""
        deadline = time.monotonic() + timeout
        # What was dumped before may be stale: changes of the sizes alone raise no event.
        self.drain()
        self.redump()
        next_dump = time.monotonic() + poll
        while True:
            links = self.links
            if predicate(links):
                return links
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                raise TimeoutError(
                    f'{what or "condition"} not reached within {timeout}s in netns {self.netns}; '
                    f'last state:\n{format_table(links, limit=60)}')
            r, _, _ = select.select([self.conn.sock], [], [], max(0, min(left, next_dump - now)))
            if r:
                self._process(block=True)
                self.drain()
            if time.monotonic() >= next_dump:
                self.redump()
                next_dump = time.monotonic() + max(poll, 3 * self.last_dump_time)

    def value_changes(self, ifnames=None):
        """Notifications that showed one of the four sizes of a device (by ifindex) changed, as
        (ifname, before, after) tuples; only devices named in `ifnames` when given. Beware: the
        kernel does not notify a change of the sizes alone (do_setlink() marks it MODIFIED but
        not NOTIFY), so this sees a size change only when something else is notified with it."""
        last = {}
        changes = []
        for mtype, link in self.events:
            if mtype != RTM_NEWLINK:
                continue
            cur = sizes_of(link)
            prev = last.get(link['ifindex'])
            last[link['ifindex']] = cur
            if prev is not None and prev != cur and (ifnames is None or link['ifname'] in ifnames):
                changes.append((link['ifname'], prev, cur))
        return changes


def wait_links(netns, predicate, timeout, what=None, poll=0.05):
    """Subscribe to link notifications, dump, and wait until predicate({ifname: link}) holds
    (see LinkWatcher.wait: size changes are not notified, so it also re-dumps every `poll` s)."""
    with LinkWatcher(netns) as w:
        return w.wait(predicate, timeout, what, poll)


def main(argv=None):
    ap = argparse.ArgumentParser(description='Show the BIG TCP sizes of every link.')
    sub = ap.add_subparsers(dest='cmd', required=True)
    show = sub.add_parser('show', help='print every device with its five sizes')
    show.add_argument('--netns', help='a name under /run/netns (default: this namespace)')
    show.add_argument('--json', action='store_true', help='print JSON instead of a table')
    args = ap.parse_args(argv)
    links = read_links(args.netns)
    if args.json:
        out = [{'ifindex': l['ifindex'], 'ifname': l['ifname'], 'kind': l['kind'],
                **{s: l[s] for s in ALL_SIZES}}
               for l in sorted(links.values(), key=lambda l: l['ifindex'])]
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write('\n')
    else:
        print(format_table(links))
    return 0


if __name__ == '__main__':
    sys.exit(main())
