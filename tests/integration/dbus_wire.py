"""dbus_wire.py — a small raw D-Bus client for the tests (the wire protocol of the D-Bus
specification: EXTERNAL authentication, little-endian messages, string and uint64 arguments).
No library, so that a test can send what no library would — calls that expect no reply, many
calls in flight on one connection, a call and a close — and so that it runs, standard library
only, as any UID (dbus_attacker.py imports it)."""

import os
import socket
import struct
import time

METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL = 1, 2, 3, 4
NO_REPLY_EXPECTED = 0x1
BUS = ('org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus')


def _pad(buf, n):
    buf += b'\0' * (-len(buf) % n)


def _string(buf, s):
    b = s.encode()
    _pad(buf, 4)
    buf += struct.pack('<I', len(b)) + b + b'\0'


def _signature(buf, s):
    buf += bytes([len(s)]) + s.encode() + b'\0'


def _args(buf, signature, args):
    for code, value in zip(signature, args):
        if code == 's':
            _string(buf, value)
        elif code == 't':
            _pad(buf, 8)
            buf += struct.pack('<Q', value)
        elif code == 'u':
            _pad(buf, 4)
            buf += struct.pack('<I', value)
        else:
            raise ValueError(f'dbus_wire: no marshalling of {code!r}')


def encode(serial, destination, path, interface, member, signature='', args=(), flags=0):
    body = bytearray()
    _args(body, signature, args)
    fields = bytearray()
    for code, sig, value in ((1, 'o', path), (2, 's', interface), (3, 's', member), (6, 's', destination),
                             (8, 'g', signature)):
        if value is None or (code == 8 and not value):
            continue
        _pad(fields, 8)
        fields += bytes([code])
        _signature(fields, sig)
        if sig == 'g':
            _signature(fields, value)
        else:
            _string(fields, value)
    head = bytearray(struct.pack('<cBBBIII', b'l', METHOD_CALL, flags, 1, len(body), serial, len(fields)))
    head += fields
    _pad(head, 8)
    return bytes(head + body)


class Message:
    def __init__(self, type_, flags, serial, fields, body):
        self.type, self.flags, self.serial, self.fields, self.body = type_, flags, serial, fields, body

    @property
    def reply_serial(self):
        return self.fields.get(5)

    @property
    def error(self):
        return self.fields.get(4) if self.type == ERROR else None

    def first_string(self):
        """The body's first argument when it is a string (errors' text, the JSON replies)."""
        if not self.fields.get(8, '').startswith('s'):
            return None
        n, = struct.unpack_from('<I', self.body, 0)
        return self.body[4:4 + n].decode()

    def uint32(self):
        return struct.unpack_from('<I', self.body, 0)[0]


def _parse_fields(data):
    fields, i = {}, 0
    while i < len(data):
        i += -i % 8
        if i >= len(data):
            break
        code = data[i]
        n = data[i + 1]
        sig = data[i + 2:i + 2 + n].decode()
        i += 3 + n
        if sig in ('s', 'o'):
            i += -i % 4
            k, = struct.unpack_from('<I', data, i)
            fields[code] = data[i + 4:i + 4 + k].decode()
            i += 5 + k
        elif sig == 'g':
            k = data[i]
            fields[code] = data[i + 1:i + 1 + k].decode()
            i += 2 + k
        elif sig == 'u':
            i += -i % 4
            fields[code], = struct.unpack_from('<I', data, i)
            i += 4
        else:
            raise ValueError(f'dbus_wire: header field of type {sig!r}')
    return fields


class Connection:
    """One connection to a bus, authenticated (EXTERNAL, as the process's UID) and said Hello."""

    def __init__(self, path, timeout=30.0, hello=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b''
        self.serial = 0
        self.unique_name = None
        uid = str(os.geteuid()).encode().hex()
        self.sock.sendall(b'\0AUTH EXTERNAL ' + uid.encode() + b'\r\n')
        line = self._line()
        if not line.startswith(b'OK '):
            raise ConnectionError(f'dbus_wire: authentication refused: {line!r}')
        self.sock.sendall(b'BEGIN\r\n')
        if hello:
            self.unique_name = self.call(*BUS, 'Hello').first_string()

    def _line(self):
        while b'\r\n' not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError('dbus_wire: closed during authentication')
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b'\r\n')
        return line

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, destination, path, interface, member, signature='', args=(), flags=0):
        """Send a method call; returns its serial."""
        self.serial += 1
        self.sock.sendall(encode(self.serial, destination, path, interface, member, signature, args, flags))
        return self.serial

    def take(self):
        """The next message if the buffer holds all of it (nothing is read), else None."""
        if len(self.buf) < 16:
            return None
        _, type_, flags, _, body_len, serial, fields_len = struct.unpack_from('<cBBBIII', self.buf, 0)
        head_len = 16 + fields_len + (-(16 + fields_len) % 8)
        if len(self.buf) < head_len + body_len:
            return None
        fields = _parse_fields(self.buf[16:16 + fields_len])
        body = self.buf[head_len:head_len + body_len]
        self.buf = self.buf[head_len + body_len:]
        return Message(type_, flags, serial, fields, body)

    def recv(self):
        """The next message."""
        while True:
            m = self.take()
            if m:
                return m
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError('dbus_wire: closed')
            self.buf += chunk

    def reply_to(self, serial):
        """The reply to `serial` (signals and other replies meanwhile are dropped)."""
        while True:
            m = self.recv()
            if m.type in (METHOD_RETURN, ERROR) and m.reply_serial == serial:
                return m

    def call(self, destination, path, interface, member, signature='', args=()):
        return self.reply_to(self.send(destination, path, interface, member, signature, args))


NAME, PATH, IFACE = 'io.bigtcpd1', '/io/bigtcpd1', 'io.bigtcpd1.Manager'


def timed_call(path, member, signature='', args=(), timeout=30.0, destination=NAME):
    """One call of io.bigtcpd1.Manager on a connection of its own, as bigtcpctl --dbus makes it:
    (seconds from connecting to the reply, the reply)."""
    t0 = time.monotonic()
    with Connection(path, timeout=timeout) as c:
        m = c.call(destination, PATH, IFACE, member, signature, args)
    return time.monotonic() - t0, m
