"""The journal entries the daemon sends under journald (JOURNAL_STREAM names its stderr), read
from a journal socket of the test's own: each carries its call site — CODE_FILE=, CODE_LINE= and
CODE_FUNC= of the line that logged, as systemd's own log functions do — so that `journalctl
CODE_FUNC=log_write` finds the writes, not every entry at once in the logger. The same under a
real systemd: test_systemd_boot.py's test_journal_can_be_queried."""

import re
import socket
import struct
import tempfile
import threading
from pathlib import Path

import pytest

import nl
from helpers import REPO, T, at, ip_batch, sizes4, veth
from policies import standard_policy

LOG_ID_WRITE = '2a9fb0c4cdfd484aafda54bda68aa087'     # lib/log.h


def parse_native(data):
    """One datagram of the journal's native protocol: KEY=value lines, or KEY, a newline, a
    little-endian 64-bit length and that many bytes (a value with a newline) and a newline."""
    fields, i = {}, 0
    while i < len(data):
        nl_at = data.index(b'\n', i)
        line = data[i:nl_at]
        if b'=' in line:
            k, v = line.split(b'=', 1)
            i = nl_at + 1
        else:
            k = line
            (n,) = struct.unpack_from('<Q', data, nl_at + 1)
            v = data[nl_at + 9:nl_at + 9 + n]
            assert data[nl_at + 9 + n:nl_at + 10 + n] == b'\n', data
            i = nl_at + 10 + n
        fields.setdefault(k.decode(), v.decode(errors='replace'))
    return fields


class Journal:
    """A journal socket of the test's own, read all the time as journald reads its own (a full
    queue would block the daemon's sends), and the wrapper that runs the daemon with it at
    /run/systemd/journal/socket — in a mount namespace of the daemon's own — and with
    JOURNAL_STREAM naming its stderr."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix='bt-journal.', dir='/tmp'))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.bind(str(self.dir / 'socket'))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.settimeout(0.1)
        self.entries = []
        self._stop = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        setup = ('mount -t tmpfs -o mode=0755 bt-journal /run/systemd && mkdir /run/systemd/journal && '
                 f'touch /run/systemd/journal/socket && mount --bind {self.dir}/socket /run/systemd/journal/socket && '
                 'export JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) && exec "$@"')
        self.wrapper = ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', setup, 'sh']

    def _read(self):
        while not self._stop:
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            self.entries.append(parse_native(data))

    def read_all(self):
        """Every entry sent so far (after the daemon's exit: all it sent)."""
        self._stop = True
        self._reader.join()
        while True:
            try:
                self.entries.append(parse_native(self.sock.recv(1 << 20, socket.MSG_DONTWAIT)))
            except (BlockingIOError, TimeoutError):
                return self.entries

    def close(self):
        self._stop = True
        self._reader.join()
        self.sock.close()
        (self.dir / 'socket').unlink(missing_ok=True)
        self.dir.rmdir()


@pytest.fixture
def journal():
    if not Path('/run/systemd').is_dir():
        pytest.skip('no /run/systemd to mount the journal socket under')
    j = Journal()
    try:
        yield j
    finally:
        j.close()


def function_lines(path, name):
    """The lines (1-based) of C function `name` in `path`: from its definition to the closing brace
    at the start of a line."""
    lines = path.read_text().splitlines()
    start = next(i for i, l in enumerate(lines, 1) if re.match(rf'^\w.*\b{name}\(', l) and not l.endswith(';'))
    end = next(i for i, l in enumerate(lines[start:], start + 1) if l == '}')
    return range(start, end + 1)


def test_entries_carry_their_call_site(ns, confdir, daemon, journal):
    """Each entry names the function, file and line that logged it: the writes (MESSAGE_ID of a
    write) come from log_write() in daemon/device-lifecycle.c, at a line inside it; the entries do not
    all name one place."""
    veth(ns, 'va', 'vb')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(standard_policy())
    d = daemon(ns, cfg, wrapper=journal.wrapper)
    nl.wait_links(ns, at({'va': sizes4(185000), 'vb': sizes4(185000)}), T(10), 'written')
    d.stop()
    got = journal.read_all()
    assert got, f'no journal entries; the daemon logged to stderr instead:\n{d.log_tail()}'
    assert d.log().strip() == '', f'under journald the lines go to the journal only:\n{d.log_tail()}'
    writes = [e for e in got if e.get('MESSAGE_ID') == LOG_ID_WRITE]
    assert {e.get('INTERFACE') for e in writes} == {'va', 'vb'}, got
    body = function_lines(REPO / 'daemon' / 'device-lifecycle.c', 'log_write')
    for e in writes:
        assert (e['CODE_FUNC'], e['CODE_FILE']) == ('log_write', 'daemon/device-lifecycle.c'), e
        assert int(e['CODE_LINE']) in body, (e, body)
    # the journalctl CODE_FUNC=log_write query: the writes, and only they
    assert [e for e in got if e.get('CODE_FUNC') == 'log_write'] == writes
    sites = {(e['CODE_FILE'], e['CODE_LINE'], e['CODE_FUNC']) for e in got}
    assert len(sites) > 3, sites
    assert not any(f == 'log.c' or f.endswith('/log.c') for f, _, _ in sites), sites
    for f, line, func in sites:
        assert (REPO / f).is_file(), f'CODE_FILE={f}: not a file of the tree'
        assert re.fullmatch(r'[A-Za-z_]\w*', func) and int(line) > 0, (f, line, func)


def test_a_burst_of_matches_is_summed_up(ns, confdir, daemon, journal):
    """150 veth pairs at start: each device's match is news, but 301 lines of it would be noise (and
    at ten thousand, past journald's own limit, push out what follows): the first 100 at info, the
    others at debug (there at --log-level debug), and one line at info says how many went there.
    Each write is still an entry of its own."""
    ip_batch(ns, [f'link add m{i}a type veth peer name m{i}b' for i in range(150)])
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(standard_policy())
    d = daemon(ns, cfg, wrapper=journal.wrapper)
    nl.wait_links(ns, at({f'm{i}{s}': sizes4(185000) for i in range(150) for s in 'ab'}), T(30), 'written')
    d.stop()
    got = journal.read_all()
    matches = [e for e in got if re.search(r': (matched policy "veth"|matches no policy)$', e.get('MESSAGE', ''))]
    info = [e for e in matches if e['PRIORITY'] == '6']
    debug = [e for e in matches if e['PRIORITY'] == '7']
    assert len(info) == 100 and len(matches) == 301, (len(info), len(debug), len(matches))
    assert {e['INTERFACE'] for e in matches} == {f'm{i}{s}' for i in range(150) for s in 'ab'} | {'lo'}
    summary = [e for e in got if 'logged at debug only' in e.get('MESSAGE', '')]
    assert [e['PRIORITY'] for e in summary] == ['6'], summary
    assert summary[0]['MESSAGE'].startswith('201 more devices matched their policy, or none, at once'), summary
    assert len([e for e in got if e.get('MESSAGE_ID') == LOG_ID_WRITE]) == 300
