"""varlink_client.py — a small raw varlink client (https://varlink.org) for the tests: JSON
objects terminated by NUL on a unix stream socket. No library, so that the tests see exactly
what goes over the wire. Also runnable as a script, for calls made under another UID:

    python3 varlink_client.py SOCKET METHOD [PARAMETERS-JSON]

prints the reply as one JSON line ({"parameters": ...} or {"error": ..., "parameters": ...})."""

import json
import socket
import sys
import time


class VarlinkError(Exception):
    def __init__(self, error, parameters):
        super().__init__(f'{error} {json.dumps(parameters)}')
        self.error = error
        self.parameters = parameters


class Closed(Exception):
    pass


class Client:
    def __init__(self, path, timeout=10.0):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(self.path)
        except OSError:
            self.sock.close()   # refused, or nothing there: the socket goes with the error
            raise
        self.buf = b''

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def encode(method, parameters=None, more=False, oneway=False):
        msg = {'method': method}
        if parameters is not None:
            msg['parameters'] = parameters
        if more:
            msg['more'] = True
        if oneway:
            msg['oneway'] = True
        return json.dumps(msg).encode() + b'\0'

    def send(self, method, parameters=None, more=False, oneway=False):
        self.sock.sendall(self.encode(method, parameters, more, oneway))

    def send_raw(self, data):
        self.sock.sendall(data)

    def recv(self, timeout=None):
        """The next message as a dict. Raises Closed at EOF, socket.timeout on timeout."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        while b'\0' not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise Closed(f'connection closed; {len(self.buf)} bytes of a partial message')
            self.buf += chunk
        msg, self.buf = self.buf.split(b'\0', 1)
        return json.loads(msg)

    def recv_raw(self):
        while b'\0' not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise Closed('connection closed')
            self.buf += chunk
        msg, self.buf = self.buf.split(b'\0', 1)
        return msg

    def call(self, method, parameters=None, **kw):
        """One call, its reply's parameters; VarlinkError for an error reply."""
        self.send(method, parameters, **kw)
        reply = self.recv()
        if 'error' in reply:
            raise VarlinkError(reply['error'], reply.get('parameters', {}))
        return reply.get('parameters', {})


def call(path, method, parameters=None, timeout=10.0):
    with Client(path, timeout) as c:
        return c.call(method, parameters)


def timed_call(path, method='io.bigtcpd.Manager.GetStatus', parameters=None, timeout=5.0):
    """(seconds from connect to reply, reply parameters)."""
    t0 = time.monotonic()
    with Client(path, timeout) as c:
        p = c.call(method, parameters)
    return time.monotonic() - t0, p


if __name__ == '__main__':
    path, method = sys.argv[1], sys.argv[2]
    params = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    with Client(path) as c:
        c.send(method, params)
        print(json.dumps(c.recv()))
