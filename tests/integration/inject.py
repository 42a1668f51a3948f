"""Real error sources for the guard tests: frames sent through a packet socket inside a test
namespace. A veth whose peer is down counts tx_dropped for every frame sent into it; IPv4
packets with a broken header raise Ip.InHdrErrors in the receiving namespace."""

import json
import os
import socket
import struct
import subprocess

import helpers
import nl

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800


def socket_in_netns(netns, family, stype, proto=0):
    """A socket created inside /run/netns/<netns> (sockets stay in the namespace they were made in)."""
    orig = os.open('/proc/thread-self/ns/net', os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(f'/run/netns/{netns}', os.O_RDONLY | os.O_CLOEXEC)
        try:
            nl._setns(target)
            try:
                return socket.socket(family, stype | socket.SOCK_CLOEXEC, proto)
            finally:
                nl._setns(orig)
        finally:
            os.close(target)
    finally:
        os.close(orig)


def mac_of(netns, ifname):
    out = subprocess.run(['ip', '-n', netns, '-j', 'link', 'show', 'dev', ifname], check=True,
                         capture_output=True, text=True).stdout
    return bytes.fromhex(json.loads(out)[0]['address'].replace(':', ''))


def _checksum(data):
    if len(data) % 2:
        data += b'\0'
    s = sum(struct.unpack(f'!{len(data) // 2}H', data))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def ipv4_frame(dst_mac, src_mac, src_ip, dst_ip, payload=b'x' * 32, bad_header=False):
    """An Ethernet frame with a UDP/IPv4 packet to port 9 (discard). bad_header: IHL 4, which
    the receiving stack counts in Ip.InHdrErrors."""
    udp = struct.pack('!HHHH', 40000, 9, 8 + len(payload), 0) + payload
    ihl = 4 if bad_header else 5
    hdr = struct.pack('!BBHHHBBH4s4s', (4 << 4) | ihl, 0, 20 + len(udp), 0x1234, 0, 64, 17, 0,
                      socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    hdr = hdr[:10] + struct.pack('!H', _checksum(hdr)) + hdr[12:]
    return dst_mac + src_mac + struct.pack('!H', ETH_P_IP) + hdr + udp


def send_frames(netns, ifname, frames):
    """Send each frame as it is out of `ifname`; returns how many the socket accepted."""
    s = socket_in_netns(netns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sent = 0
    try:
        s.bind((ifname, 0))
        for f in frames:
            try:
                s.send(f)
                sent += 1
            except OSError:
                pass
    finally:
        s.close()
    return sent


def snmp_counter(netns, key):
    """Group.Name from the namespace's /proc/net/snmp (read by `ip netns exec cat`)."""
    group, name = key.split('.', 1)
    text = subprocess.run(['ip', 'netns', 'exec', netns, 'cat', '/proc/net/snmp', '/proc/net/netstat'],
                          check=True, capture_output=True, text=True).stdout.splitlines()
    for head, vals in zip(text, text[1:]):
        if head.startswith(group + ':') and vals.startswith(group + ':') and not head.split()[1].isdigit():
            names, values = head.split()[1:], vals.split()[1:]
            if name in names:
                return int(values[names.index(name)])
    raise KeyError(key)


def link_stat(netns, ifname, field):
    out = subprocess.run(['ip', '-n', netns, '-j', '-s', 'link', 'show', 'dev', ifname], check=True,
                         capture_output=True, text=True).stdout
    st = json.loads(out)[0]['stats64']
    key = {'tx_dropped': ('tx', 'dropped'), 'rx_dropped': ('rx', 'dropped'),
           'tx_packets': ('tx', 'packets'), 'rx_packets': ('rx', 'packets')}[field]
    return st[key[0]][key[1]]


def popen_in(netns, argv):
    """Start a process in the namespace; stop it with stop()."""
    return subprocess.Popen(['ip', 'netns', 'exec', netns, *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def run_in(netns, argv, timeout):
    return subprocess.run(['ip', 'netns', 'exec', netns, *argv], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


stop = helpers.stop
