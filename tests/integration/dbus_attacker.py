"""A hostile local user of io.bigtcpd1 on a D-Bus system bus, run by the tests under another UID
(setpriv); raw wire messages (dbus_wire.py), standard library only:

    dbus_attacker.py SOCKET big-validate N BYTES   N connections, two Validate calls each with a
                                                   string of BYTES; one line with the answers
    dbus_attacker.py SOCKET big-flood N BYTES      N connections each keeping one Validate call
                                                   with a string of BYTES in flight (a new one for
                                                   every answer)
    dbus_attacker.py SOCKET noreply N              N connections sending Validate calls that
                                                   expect no reply, as fast as the bus takes them
    dbus_attacker.py SOCKET validate N K           N connections keeping K Validate calls each
                                                   in flight (a new one for every answer)
    dbus_attacker.py SOCKET status N K             the same with GetStatusJSON
    dbus_attacker.py SOCKET hit-and-run N          N processes: connect, Validate, close, again

Each prints "ready" once its connections are up and its calls go out, then runs until stdin
closes and prints one JSON line of what it saw (answers by error name, calls sent)."""

import json
import select
import struct
import sys
import threading
import time

import dbus_wire as w

POLICY = 'version: 1\npolicies: []\n'


def out(**kw):
    print(json.dumps(kw), flush=True)


def until_stdin_closes(stop):
    sys.stdin.read()
    stop.set()


def connections(path, n):
    """n connections; dbus-daemon drops connections beyond 64 that have not authenticated yet
    (its max_incomplete_connections), which other attackers' may be: those are tried again."""
    conns = []
    for _ in range(n):
        for attempt in range(10):
            try:
                conns.append(w.Connection(path))
                break
            except (OSError, ConnectionError):
                if attempt == 9:
                    raise
                time.sleep(0.05)
    return conns


def big_validate(path, n, size):
    text = 'version: 1\n#' + 'x' * size + '\npolicies: []\n'
    conns = connections(path, n)
    t0 = time.monotonic()
    serials = [[c.send(w.NAME, w.PATH, w.IFACE, 'Validate', 's', (text,)) for _ in range(2)] for c in conns]
    answers = {}
    for c, ss in zip(conns, serials):
        for s in ss:
            m = c.reply_to(s)
            answers[m.error or 'ok'] = answers.get(m.error or 'ok', 0) + 1
    out(answers=answers, seconds=time.monotonic() - t0, size=len(text))
    for c in conns:
        c.close()


def pump(path, n, k, member, signature, args, flags, stop):
    """n connections each with k calls in flight (none when flags say no reply), until stop."""
    conns = connections(path, n)
    for c in conns:
        c.sock.setblocking(False)
    # Encoded once (a 30 MB string takes seconds in Python): each call is the template with its
    # serial (bytes 8 to 11 of the header) in front of the template's rest, shared, never copied.
    template = memoryview(w.encode(1, w.NAME, w.PATH, w.IFACE, member, signature, args, flags))
    order = '<' if template[0] == ord('l') else '>'
    msg = lambda c: [template[:8], memoryview(struct.pack(order + 'I', c.serial)), template[12:]]
    sent, answers = 0, {}
    outbox = {c: [] for c in conns}   # memoryviews still to send: a partial send slices, never copies
    queued = lambda c: sum(len(v) for v in outbox[c])
    inflight = {c: 0 for c in conns}
    ready = False
    while not stop.is_set():
        for c in conns:
            batch, size = [], queued(c)
            while size < 65536 and (flags & w.NO_REPLY_EXPECTED or inflight[c] < k):
                c.serial += 1
                batch += msg(c)
                size += len(template)
                inflight[c] += 1
                sent += 1
            if len(template) > 65536:
                outbox[c] += batch   # a large call: its parts as they are
            elif batch:
                outbox[c].append(memoryview(b''.join(batch)))
        if not ready:
            out(event='ready', connections=len(conns))
            ready = True
        r, wr, _ = select.select([c.sock for c in conns], [c.sock for c in conns if outbox[c]], [], 0.2)
        by_sock = {c.sock: c for c in conns}
        for s in wr:
            c = by_sock[s]
            try:
                k_ = s.send(outbox[c][0])
                outbox[c][0] = outbox[c][0][k_:]
                if not len(outbox[c][0]):
                    outbox[c].pop(0)
            except BlockingIOError:
                pass
        for s in r:
            c = by_sock[s]
            try:
                chunk = s.recv(1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise ConnectionError('the bus closed a connection')
            c.buf += chunk
            while (m := c.take()):
                if m.type in (w.METHOD_RETURN, w.ERROR):
                    inflight[c] -= 1
                    answers[m.error or 'ok'] = answers.get(m.error or 'ok', 0) + 1
        if flags & w.NO_REPLY_EXPECTED:
            for c in conns:
                inflight[c] = 0
    for c in conns:
        c.close()
    return sent, answers


def flood(path, n, k, member, signature, args, flags):
    stop = threading.Event()
    threading.Thread(target=until_stdin_closes, args=(stop,), daemon=True).start()
    sent, answers = pump(path, n, k, member, signature, args, flags, stop)
    out(sent=sent, answers=answers)


def hit_and_run(path, n):
    stop = threading.Event()
    threading.Thread(target=until_stdin_closes, args=(stop,), daemon=True).start()
    count = [0] * n

    def loop(i):
        while not stop.is_set():
            try:
                c = w.Connection(path)
                c.send(w.NAME, w.PATH, w.IFACE, 'Validate', 's', (POLICY,))
                c.close()
                count[i] += 1
            except (OSError, ConnectionError):
                time.sleep(0.01)
    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    out(event='ready', connections=n)
    for t in threads:
        t.join()
    out(sent=sum(count), answers={})


def main():
    path, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if what == 'big-validate':
        big_validate(path, n, int(sys.argv[4]))
    elif what == 'big-flood':
        text = 'version: 1\n#' + 'x' * int(sys.argv[4]) + '\npolicies: []\n'
        flood(path, n, 1, 'Validate', 's', (text,), 0)
    elif what == 'noreply':
        flood(path, n, 0, 'Validate', 's', (POLICY,), w.NO_REPLY_EXPECTED)
    elif what == 'validate':
        flood(path, n, int(sys.argv[4]), 'Validate', 's', (POLICY,), 0)
    elif what == 'status':
        flood(path, n, int(sys.argv[4]), 'GetStatusJSON', '', (), 0)
    elif what == 'hit-and-run':
        hit_and_run(path, n)
    else:
        raise SystemExit(f'dbus_attacker.py: no such attack {what!r}')


if __name__ == '__main__':
    main()
