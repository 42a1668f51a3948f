"""A hostile local user of the varlink socket, run by the tests under another UID (setpriv):

    attacker.py SOCKET monitors N          N Monitor streams that read "subscribed" and nothing
                                           more; "ready" then; they stay until stdin closes
    attacker.py SOCKET validate-deep D     one Validate of a policy nested D deep
    attacker.py SOCKET plan-big BYTES      one Plan of a policy of about BYTES (many policies,
                                           each with a long list of name globs)
    attacker.py SOCKET unread N            N connections pipelining ListDevices without reading;
                                           "ready" (with the bytes sent) once the daemon stops
                                           taking calls; they stay until stdin closes
    attacker.py SOCKET refused N           N pipelined Reload calls on one connection
    attacker.py SOCKET unfinished N        N connections, each sending 1.5 MB of a Validate it never
                                           finishes (no NUL) as far as the daemon takes it; "ready"
                                           (with the bytes taken) once it takes no more; they stay
                                           until stdin closes, then the process exits
    attacker.py SOCKET validate-big N      N connections each looping Validate of a 2 MB text
                                           (a comment: valid YAML), each sent whole in turn,
                                           then each reply read; "ready" after the first
                                           round; rounds until stdin closes, which ends it at
                                           once, in the middle of a call or not

Each prints one JSON line per result. Standard library only: it runs as a user that may not
read the test tree's imports."""

import json
import os
import select
import socket
import sys
import threading
import time

IFACE = 'io.bigtcpd.Manager'


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def encode(method, parameters=None, **kw):
    msg = {'method': method}
    if parameters is not None:
        msg['parameters'] = parameters
    msg.update(kw)
    return json.dumps(msg).encode() + b'\0'


def recv_one(s, buf=b''):
    while b'\0' not in buf:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise EOFError('closed')
        buf += chunk
    msg, _, rest = buf.partition(b'\0')
    return json.loads(msg), rest


def call(path, method, parameters=None):
    t0 = time.monotonic()
    with connect(path) as s:
        s.sendall(encode(method, parameters))
        reply, _ = recv_one(s)
    return time.monotonic() - t0, reply


def out(**kw):
    print(json.dumps(kw), flush=True)


def monitors(path, n):
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(path)
        s.sendall(encode(f'{IFACE}.Monitor', more=True))
        conns.append(s)
    for s in conns:   # the first reply, "subscribed", and never another
        reply, _ = recv_one(s)
        assert reply['parameters']['event'] == 'subscribed', reply
    out(event='ready', connections=len(conns))
    sys.stdin.read()   # until the test closes it: never read a reply


def validate_deep(path, depth):
    text = 'version: 1\nx: ' + '[' * depth + ']' * depth + '\npolicies: []\n'
    dt, reply = call(path, f'{IFACE}.Validate', {'policy': text})
    out(seconds=dt, reply=reply, size=len(text))


def plan_big(path, size):
    head = 'version: 1\npolicies:\n'
    globs = ', '.join(f'"nomatch-{i:04d}*"' for i in range(250))
    one = '  - name: p{n}\n    match: {{ name: [' + globs + '] }}\n    ipv6: {{ gso-max-size: 100000 }}\n'
    parts, total, n = [head], len(head), 0
    while n < 1024 and total + len(one) + 8 < size:
        p = one.format(n=n)
        parts.append(p)
        total += len(p)
        n += 1
    text = ''.join(parts)
    dt, reply = call(path, f'{IFACE}.Plan', {'policy': text})
    devices = reply.get('parameters', {}).get('devices')
    out(seconds=dt, size=len(text), policies=n, error=reply.get('error'),
        devices=None if devices is None else len(devices))


def unread(path, n):
    call_bytes = encode(f'{IFACE}.ListDevices')
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(path)
        s.setblocking(False)
        conns.append([s, 0])
    batch = call_bytes * 256
    # Send until the daemon has taken nothing for half a second: it stopped reading our calls.
    sent = send_until_stalled(conns, lambda c: batch[c[1] % len(call_bytes):][:len(batch) - 1], 0.5)
    out(event='ready', sent=sent)
    sys.stdin.read()   # until the test closes it


def send_until_stalled(conns, data_of, idle):
    """Send on each non-blocking connection ([socket, bytes sent]) what data_of() gives for it
    until the daemon has taken nothing for `idle` seconds; the bytes taken in all."""
    last = time.monotonic()
    while time.monotonic() - last < idle:
        progressed = False
        for c in conns:
            data = data_of(c)
            if not data:
                continue
            try:
                k = c[0].send(data)
            except BlockingIOError:
                continue
            c[1] += k
            progressed = True
        if progressed:
            last = time.monotonic()
        else:
            time.sleep(0.01)
    return sum(c[1] for c in conns)


def unfinished(path, n):
    head = encode(f'{IFACE}.Validate', {'policy': '#' + 'x' * (3 << 19)})[:-3]   # no '"}}' and no NUL
    conns = []
    for _ in range(n):
        s = connect(path)
        s.setblocking(False)
        conns.append([s, 0])
    out(event='ready', sent=send_until_stalled(conns, lambda c: head[c[1]:], 3))
    sys.stdin.read()   # until the test closes it; the connections close with the process


def refused(path, n):
    with connect(path) as s:
        s.sendall(encode(f'{IFACE}.Reload') * n)
        errors, buf = {}, b''
        for _ in range(n):
            reply, buf = recv_one(s, buf)
            errors[reply.get('error')] = errors.get(reply.get('error'), 0) + 1
    out(errors=errors)


def validate_big(path, n):
    """Each connection sends its call whole (blocking), then the next; then every reply is read;
    over and over: one call being sent at a time per user, n waiting for their answer."""
    # gone at once when stdin closes, in the middle of a call or not: a round is 2 MB a
    # connection, which the daemon reads at the pace of the UID's cap
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    text = 'version: 1\npolicies: []\n#' + 'x' * (2 * 1024 * 1024 - 200) + '\n'
    call_bytes = encode(f'{IFACE}.Validate', {'policy': text})
    conns = [connect(path) for _ in range(n)]
    bufs = [b''] * n
    rounds = 0
    while True:
        for s in conns:
            s.sendall(call_bytes)
        for i, s in enumerate(conns):
            _, bufs[i] = recv_one(s, bufs[i])
        rounds += 1
        if rounds == 1:
            out(event='ready', answers=n)


def main():
    path, what, arg = sys.argv[1], sys.argv[2], int(sys.argv[3])
    {'monitors': monitors, 'validate-deep': validate_deep, 'plan-big': plan_big, 'unread': unread,
     'refused': refused, 'validate-big': validate_big, 'unfinished': unfinished}[what](path, arg)


if __name__ == '__main__':
    main()
