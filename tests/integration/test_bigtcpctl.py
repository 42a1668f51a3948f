"""bigtcpctl end to end: every command against a daemon running in a test namespace, human and
--json output, exit codes and one-line errors; validate without any daemon."""

import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import helpers
import nl
from helpers import Monitor, T, sizes4, veth, write_file_atomic
from policies import BROKEN, standard_policy
from varlink_client import Client

CTL = Path(os.environ.get('BIGTCPCTL_BIN', helpers.BIN.parent.parent / 'cli' / 'bigtcpctl'))
IFACE = 'io.bigtcpd.Manager'

POLICY = standard_policy('big', 'name: ["v*"]', flow=False)

OTHER = POLICY.replace('"v*"', '"k*"').replace('185000', '100000').replace('name: big', 'name: other')


@pytest.fixture(scope='module', autouse=True)
def ctl_binary():
    if not CTL.exists():
        pytest.fail(f'{CTL} does not exist: build it or set BIGTCPCTL_BIN')


def ctl(*args, sock=None, nobody=False, env=None, check_rc=None):
    argv = [str(CTL), *(['--socket', str(sock)] if sock else []), *map(str, args)]
    if nobody:
        argv = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', *argv]
    full_env = dict(os.environ, **(env or {}))
    full_env.pop('NO_COLOR', None)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=full_env, stdin=subprocess.DEVNULL)
    if check_rc is not None:
        assert r.returncode == check_rc, f'{argv}: exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}'
    # Never colour into a pipe; errors are one line.
    assert '\x1b' not in r.stdout and '\x1b' not in r.stderr, r.stdout
    return r


def one_line_error(r, rc, pattern):
    assert r.returncode == rc, f'exit {r.returncode}, want {rc}: {r.stderr}'
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith('bigtcpctl: '), r.stderr
    assert re.search(pattern, lines[0]), lines[0]


def start_on_pairs(ns, daemon, confdir, policy):
    """The daemon on `policy` (its d.cfg, d.sock) over two veth pairs, v0/v1 and k0/k1."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy)
    veth(ns, 'v0', 'v1')
    veth(ns, 'k0', 'k1')
    d = daemon(ns, cfg)
    d.cfg = cfg
    d.sock = d.runtime_dir / IFACE
    return d


@pytest.fixture
def running(ns, daemon, confdir):
    return start_on_pairs(ns, daemon, confdir, POLICY)


# --- without a daemon -----------------------------------------------------------------------------

def test_validate_without_a_daemon(tmp_path):
    good, other, bad = tmp_path / 'good.yaml', tmp_path / 'other.yaml', tmp_path / 'bad.yaml'
    good.write_text(POLICY)
    other.write_text(OTHER)
    bad.write_text(BROKEN)

    r = ctl('validate', good, check_rc=0)
    assert r.stdout == '1 file valid: 1 policy.\n' and r.stderr == ''
    r = ctl('validate', good, other, check_rc=0)
    assert r.stdout == '2 files valid: 2 policies.\n'
    assert ctl('--no-legend', 'validate', good, check_rc=0).stdout == ''

    r = ctl('validate', bad, check_rc=1)
    assert r.stdout == ''
    assert r.stderr.splitlines() == [
        f'{bad}:7:21: gso-max-size: expected a number of bytes, "max", "legacy" or "auto"'], r.stderr
    r = ctl('validate', '--json', bad, check_rc=1)
    assert json.loads(r.stdout) == {'valid': False, 'errors': [
        {'file': str(bad), 'line': 7, 'column': 21,
         'message': 'gso-max-size: expected a number of bytes, "max", "legacy" or "auto"'}], 'warnings': []}
    assert json.loads(ctl('validate', '--json', good, check_rc=0).stdout) == {'valid': True, 'errors': [],
                                                                              'warnings': []}

    # Checked together, as one policy: the same name twice is an error.
    r = ctl('validate', good, good, check_rc=1)
    assert re.search(r'duplicate|already', r.stderr), r.stderr
    r = ctl('validate', good, tmp_path / 'missing.yaml', check_rc=1)
    assert str(tmp_path / 'missing.yaml') in r.stderr and 'good.yaml' not in r.stderr
    one_line_error(ctl('validate'), 2, 'one or more policy files')


def test_usage_errors_and_no_daemon(tmp_path):
    r = ctl('--help', check_rc=0)
    assert 'Exit status' in r.stdout and '3 bigtcpd is not running' in r.stdout
    assert ctl('--version', check_rc=0).stdout.startswith('bigtcpctl ')
    # no command is list, as networkctl does: here without a daemon
    one_line_error(ctl('--socket', tmp_path / 'none.sock'), 3, 'bigtcpd is not running')
    one_line_error(ctl('frobnicate'), 2, 'unknown command "frobnicate"')
    one_line_error(ctl('show'), 2, 'show takes one device: a name, an altname or an ifindex')
    one_line_error(ctl('rollback'), 2, 'rollback takes one device name, or --all')
    one_line_error(ctl('rollback', 'v0', '--all'), 2, 'rollback takes one device name, or --all')
    one_line_error(ctl('retry'), 2, 'retry takes one device name, or --all')
    one_line_error(ctl('retry', 'v0', '--all'), 2, 'retry takes one device name, or --all')
    one_line_error(ctl('list', '--all'), 2, '--all goes with plan, rollback and retry only')
    one_line_error(ctl('--dbus', '--socket', '/x', 'status'), 2, 'exclude each other')
    assert ctl('--bogus-option').returncode == 2

    nowhere = tmp_path / 'io.bigtcpd.Manager'
    for cmd in (['status'], ['list'], ['show', 'v0'], ['plan'], ['reload'], ['rollback', '--all'],
                ['retry', 'v0'], ['monitor'], ['metrics']):
        one_line_error(ctl(*cmd, sock=nowhere), 3, f'bigtcpd is not running \\(nothing listens on {nowhere}\\)')
    # A socket file nobody listens on (a daemon that died): the same.
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(nowhere))
    s.close()
    one_line_error(ctl('status', sock=nowhere), 3, 'not running')

    # D-Bus: no bus at all is "not running", for every verb (--dbus refuses none of them).
    nobus = {'DBUS_SYSTEM_BUS_ADDRESS': f'unix:path={tmp_path}/no-bus'}
    for args in (['status'], ['monitor'], ['plan'], ['reload'], ['rollback', '--all'], ['confirm']):
        one_line_error(ctl('--dbus', *args, env=nobus), 3, 'no system bus|not on the system bus')


# --- against a daemon -------------------------------------------------------------------------------

def steady_status(s):
    """GetStatus without what each read of it measures anew: the observer's last read of its maps
    (GetStatus reads them)."""
    s = json.loads(json.dumps(s))
    s.get('evidence', {}).pop('observer_read_usec', None)
    return s


def test_status(running):
    d = running
    r = ctl('status', sock=d.sock, check_rc=0)
    fields = dict(re.match(r'^\s*([^:]+?): (.*)$', l).groups() for l in r.stdout.splitlines()
                  if re.match(r'^\s*[^:]+: ', l))
    assert fields['State'] == 'ready'
    assert fields['Policy files'] == str(d.cfg)
    assert re.fullmatch(r'1 policy, digest [0-9a-f]{16}', fields['Policy'])
    assert re.fullmatch(r'5 total: 3 unmanaged, 2 (probation|applied)', fields['Devices']), fields['Devices']
    assert re.fullmatch(r'2 \(0 refused\), 0 restores, 0 rollbacks', fields['Writes'])
    assert fields['Kernel'].endswith('(IPv4 sizes: yes)')

    # --json is GetStatus's reply as it is. The daemon's counters move (probation samples each
    # interval): the reply is compared between two raw replies that are the same, so that
    # nothing moved while bigtcpctl asked (a busy machine may take more than an interval).
    with Client(d.sock) as c:
        for _ in range(10):
            before = steady_status(c.call(f'{IFACE}.GetStatus'))
            j = steady_status(json.loads(ctl('status', '--json', sock=d.sock, check_rc=0).stdout))
            raw = steady_status(c.call(f'{IFACE}.GetStatus'))
            if before == raw:
                break
    assert before == raw, 'the status moved at every one of 10 tries'
    assert j == raw


def test_list_and_show(running):
    d = running
    r = ctl('list', sock=d.sock, check_rc=0)
    lines = r.stdout.splitlines()
    # NETNS always, also where no policy names a namespace: the columns scripts read are stable
    assert lines[0].split() == ['NETNS', 'IDX', 'LINK', 'KIND', 'STATE', 'POLICY', 'GSO', 'GRO', 'GSO4', 'GRO4',
                                'TSO']
    assert lines[-2:] == ['', '5 links listed.']
    assert all(l.split()[0] == 'host' for l in lines[1:-2]), r.stdout
    rows = {l.split()[2]: l.split()[1:] for l in lines[1:-2]}
    assert set(rows) == {'lo', 'v0', 'v1', 'k0', 'k1'}
    assert rows['v0'][2:5] in (['veth', 'probation', 'big'], ['veth', 'applied', 'big'])
    assert rows['v0'][5:] == ['185000'] * 4 + ['524280']
    assert rows['k0'][2:] == ['veth', 'unmanaged', '-'] + ['65536'] * 4 + ['524280']
    assert rows['lo'][2] == '-'
    # show says kinds in the policy's words (match.kind)
    assert re.search(r'^ +Kind: loopback$', ctl('show', 'lo', sock=d.sock, check_rc=0).stdout, re.M)
    assert re.search(r'^ +Kind: veth$', ctl('show', 'v0', sock=d.sock, check_rc=0).stdout, re.M)
    # Columns line up: every row is as wide as the header up to the last column.
    starts = [m.start() for m in re.finditer(r'\S+', lines[0])]
    for l in lines[1:-2]:
        assert l[starts[2]:].split()[0] in rows and l[starts[2] - 1] == ' '

    r = ctl('list', '--no-legend', sock=d.sock, check_rc=0)
    assert len(r.stdout.splitlines()) == 5 and 'IDX' not in r.stdout and 'listed' not in r.stdout
    # what bigtcpctl(8) documents for scripts: $1 NETNS, $3 LINK, $5 STATE
    assert {(l.split()[0], l.split()[2], l.split()[4]) for l in r.stdout.splitlines()} == {
        ('host', n, rows[n][3]) for n in rows}

    j = json.loads(ctl('list', '--json', sock=d.sock, check_rc=0).stdout)
    assert [x['ifname'] for x in j['devices']] == [x['ifname'] for x in
                                                    sorted(j['devices'], key=lambda x: x['ifindex'])]
    assert {x['ifname'] for x in j['devices']} == set(rows)

    r = ctl('show', 'v0', sock=d.sock, check_rc=0)
    out = r.stdout
    assert re.match(r'^● \d+: v0\n', out)
    assert re.search(r'^\s+Kind: veth$', out, re.M) and re.search(r'^\s+Policy: big \(matched by name v\*\)$', out, re.M)
    assert re.search(r'^\s+State: (probation \(\d+\.\ds left\)|applied)$', out, re.M), out
    assert re.search(r'^\s+TSO max size: 524280 \(511\.9K\)$', out, re.M)
    assert re.search(r'^\s+Last error: -$', out, re.M) and re.search(r'^\s+Last rollback: -$', out, re.M)
    assert re.search(r'^gso_max_size\s+185000 \(180\.6K\)\s+185000 \(180\.6K\)\s+65536 \(64K\)$', out, re.M), out
    assert re.search(r'^gro_ipv4_max_size\s+185000 \(180\.6K\)\s+185000 \(180\.6K\)\s+65536 \(64K\)$', out, re.M)
    assert re.search(r'^SIZE\s+CURRENT\s+DESIRED\s+ORIGINAL$', out, re.M)
    assert 'SIZE' not in ctl('show', '--no-legend', 'v0', sock=d.sock, check_rc=0).stdout
    k = ctl('show', 'k1', sock=d.sock, check_rc=0).stdout
    assert re.search(r'^gso_max_size\s+65536 \(64K\)\s+-\s+-$', k, re.M), k

    j = json.loads(ctl('show', '--json', 'v0', sock=d.sock, check_rc=0).stdout)
    assert j['ifname'] == 'v0' and j['current']['gso_max_size'] == 185000
    one_line_error(ctl('show', 'nope0', sock=d.sock), 1, 'no device "nope0"')


def test_plan(running, tmp_path):
    d = running
    r = ctl('plan', sock=d.sock, check_rc=0)
    assert r.stdout == '0 of 5 devices would change.\n'
    other = tmp_path / 'other.yaml'
    other.write_text(OTHER)
    r = ctl('plan', other, sock=d.sock, check_rc=0)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ['NETNS', 'IDX', 'LINK', 'POLICY', 'ACTION', 'CHANGES']
    rows = {l.split()[2]: l for l in lines[1:-2]}
    assert set(rows) == {'v0', 'v1', 'k0', 'k1'}
    assert re.search(r'k0\s+other\s+write\s+gso_max_size 65536→100000, gro_max_size 65536→100000, '
                     r'gso_ipv4_max_size 65536→100000, gro_ipv4_max_size 65536→100000$', rows['k0'])
    assert re.search(r'v0\s+-\s+restore\s+gso_max_size 185000→65536', rows['v0'])
    assert lines[-1] == '4 of 5 devices would change.'
    j = json.loads(ctl('plan', '--json', other, sock=d.sock, check_rc=0).stdout)
    assert {x['ifname']: x['action'] for x in j['devices']} == {
        'lo': 'none', 'v0': 'restore', 'v1': 'restore', 'k0': 'write', 'k1': 'write'}

    bad = tmp_path / 'bad.yaml'
    bad.write_text(BROKEN)
    r = ctl('plan', bad, sock=d.sock, check_rc=1)
    assert r.stderr.splitlines() == [
        f'{bad}:7:21: gso-max-size: expected a number of bytes, "max", "legacy" or "auto"',
        'bigtcpctl: the policy has errors']
    one_line_error(ctl('plan', tmp_path / 'missing.yaml', sock=d.sock), 1, 'missing.yaml: No such file')


def test_rollback_retry_reload_and_permissions(running, ns):
    d = running
    os.chmod(d.runtime_dir.parent, 0o755)   # the harness makes it 0700

    # Everyone may read; only root may change things (exit 4, one line).
    assert ctl('status', sock=d.sock, nobody=True, check_rc=0).stdout.startswith('')
    assert 'v0' in ctl('list', sock=d.sock, nobody=True, check_rc=0).stdout
    for cmd in (['reload'], ['rollback', 'v0'], ['rollback', '--all'], ['retry', 'v0']):
        one_line_error(ctl(*cmd, sock=d.sock, nobody=True), 4, f'permission denied: {cmd[0]} needs root')
    assert nl.sizes_of(nl.read_links(ns)['v0']) == sizes4(185000)

    r = ctl('rollback', 'v0', sock=d.sock, check_rc=0)
    assert r.stdout.splitlines() == [
        'v0 goes back: ' + ', '.join(f'{s} 185000 → 65536' for s in ALL_SIZES),
        'v0 is held there until the policy changes or "bigtcpctl retry v0".'] and r.stderr == ''
    nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(65536), T(10), 'v0 rolled back')
    one_line_error(ctl('rollback', 'v0', sock=d.sock), 1,
                   r'^bigtcpctl: v0: nothing to roll back \(bigtcpd never wrote it, or it is rolled back already\)$')
    one_line_error(ctl('rollback', 'k0', sock=d.sock), 1, 'k0: nothing to roll back')
    out = ctl('show', 'v0', sock=d.sock, check_rc=0).stdout
    assert re.search(r'^\s+State: rolled-back$', out, re.M)
    assert re.search(r'^\s+Last rollback: by an operator at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$', out, re.M), out
    ctl('retry', 'v0', sock=d.sock, check_rc=0)
    nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(185000), T(10), 'v0 retried')
    one_line_error(ctl('retry', 'k0', sock=d.sock), 1, 'k0: nothing to do')
    one_line_error(ctl('rollback', 'nope0', sock=d.sock), 1, 'no device "nope0"')
    r = ctl('rollback', '--all', sock=d.sock, check_rc=0)
    assert sorted(r.stdout.splitlines()[:2]) == [
        f'{n} goes back: ' + ', '.join(f'{s} 185000 → 65536' for s in ALL_SIZES) for n in ('v0', 'v1')], r.stdout
    assert r.stdout.splitlines()[2:] == [
        'These 2 devices are held there until the policy changes or "bigtcpctl retry DEV"',
        '("bigtcpctl retry --all" for all of them).']
    nl.wait_links(ns, lambda links: all(nl.sizes_of(links[n]) == sizes4(65536) for n in ('v0', 'v1')),
                  T(10), 'all rolled back')
    states = {x['ifname']: x['state'] for x in json.loads(ctl('list', '--json', sock=d.sock).stdout)['devices']}
    assert states['v0'] == states['v1'] == 'rolled-back'
    one_line_error(ctl('rollback', '--all', sock=d.sock), 1, 'nothing to roll back: bigtcpd has written no device, '
                   'or every one is rolled back already')
    r = ctl('retry', '--all', sock=d.sock)
    assert r.returncode == 0 and sorted(r.stdout.splitlines()) == sorted([
        f'{n} is released: bigtcpd applies its policy again.' for n in ('v0', 'v1')] + [
        f'{n}: ' + ', '.join(f'{s} 65536 → 185000' for s in ALL_SIZES) for n in ('v0', 'v1')]), r
    nl.wait_links(ns, lambda links: all(nl.sizes_of(links[n]) == sizes4(185000) for n in ('v0', 'v1')),
                  T(10), 'all retried')

    # reload says what moved (nothing when bigtcpd read the changed file on its own first: then
    # the kernel holds the new sizes already)
    write_file_atomic(d.cfg, POLICY.replace('185000', '150000'))
    r = ctl('reload', sock=d.sock, check_rc=0)
    lines = r.stdout.splitlines()
    m = re.fullmatch(r'Reloaded: policy digest [0-9a-f]{16}; (\d) devices? moved\.', lines[0])
    assert m and int(m.group(1)) == len(lines) - 1, r.stdout
    assert sorted(lines[1:]) == [f'{n}: ' + ', '.join(f'{s} 185000 → 150000' for s in ALL_SIZES)
                                 for n in ('v0', 'v1')][:len(lines) - 1] or lines[1:] == [], r.stdout
    assert all(nl.sizes_of(nl.read_links(ns)[n]) == sizes4(150000) for n in ('v0', 'v1'))
    r = ctl('reload', '--json', sock=d.sock, check_rc=0)
    j = json.loads(r.stdout)
    assert re.fullmatch(r'[0-9a-f]{16}', j['digest']) and j['moved'] == j['refused'] == j['pending'] == [], j
    write_file_atomic(d.cfg, BROKEN)
    r = ctl('reload', sock=d.sock, check_rc=1)
    assert r.stderr.splitlines() == [
        f'{d.cfg}:7:21: gso-max-size: expected a number of bytes, "max", "legacy" or "auto"',
        'bigtcpctl: the policy has errors; the running policy stays']
    # and a counter this host lacks, beside the errors
    write_file_atomic(d.cfg, BROKEN.replace('policies:', 'rollback:\n  guards:\n    - {counter: Tcp.RetransSeg, '
                                            'max-increase: 5}\npolicies:', 1))
    r = ctl('reload', sock=d.sock, check_rc=1)
    assert r.stderr.splitlines() == [
        f'{d.cfg}:10:21: gso-max-size: expected a number of bytes, "max", "legacy" or "auto"',
        f'{d.cfg}:4:17: warning: guard counter "Tcp.RetransSeg" is not on this host (did you mean '
        '"Tcp.RetransSegs"?): guards on it never trip',
        'bigtcpctl: the policy has errors; the running policy stays'], r.stderr


METRIC_LINE = re.compile(r'^([a-z_]+)(\{([a-z_]+="[^"\\]*"(,[a-z_]+="[^"\\]*")*)\})? (-?\d+(\.\d+)?)$')


def test_metrics(running):
    d = running
    r = ctl('metrics', sock=d.sock, check_rc=0)
    helps, types, samples = {}, {}, []
    for line in r.stdout.splitlines():
        if line.startswith('# HELP '):
            name, text = line[7:].split(' ', 1)
            helps[name] = text
        elif line.startswith('# TYPE '):
            name, kind = line[7:].split(' ')
            assert name in helps, f'TYPE before HELP for {name}'
            types[name] = kind
        else:
            m = METRIC_LINE.match(line)
            assert m, f'not a Prometheus sample: {line!r}'
            assert m.group(1) in types, f'sample of {m.group(1)} before its TYPE'
            labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(3) or ''))
            samples.append((m.group(1), labels, float(m.group(5))))
    assert types['bigtcpd_device_size_bytes'] == 'gauge'
    for counter in ('bigtcpd_rollbacks_total', 'bigtcpd_writes_total', 'bigtcpd_write_failures_total'):
        assert types[counter] == 'counter'

    def value(name, **labels):
        got = [v for n, l, v in samples if n == name and l == labels]
        assert len(got) == 1, (name, labels, got)
        return got[0]

    # Every per-device series names the device's policy ("" for none: no label to Prometheus).
    assert value('bigtcpd_device_size_bytes', ifname='v0', policy='big', size='gso_max_size') == 185000
    assert value('bigtcpd_device_size_bytes', ifname='k0', policy='', size='gro_ipv4_max_size') == 65536
    assert value('bigtcpd_device_size_bytes', ifname='v0', policy='big', size='tso_max_size') == 524280
    assert value('bigtcpd_device_desired_size_bytes', ifname='v1', policy='big', size='gro_max_size') == 185000
    assert not [l for n, l, v in samples if n == 'bigtcpd_device_desired_size_bytes' and l['ifname'] == 'k0']
    for dev in ('lo', 'v0', 'v1', 'k0', 'k1'):
        states = {l['state']: v for n, l, v in samples if n == 'bigtcpd_device_state' and l['ifname'] == dev}
        assert len(states) == 7 and sum(states.values()) == 1, (dev, states)
    assert value('bigtcpd_device_state', ifname='k1', policy='', state='unmanaged') == 1
    assert value('bigtcpd_writes_total') == 2
    assert value('bigtcpd_write_failures_total') == 0
    # Per policy, and at 0 before the first one (increase() misses the first rise of a new series).
    assert value('bigtcpd_rollbacks_total', policy='big') == 0
    assert not [l for n, l, v in samples if n == 'bigtcpd_rollbacks_total' and l != {'policy': 'big'}]
    assert value('bigtcpd_policy_applies', policy='big') == 1
    assert not [n for n, l, v in samples if n in ('bigtcpd_policy_cohort', 'bigtcpd_policy_hosts_percent')]
    assert value('bigtcpd_probation_sample_gap_max_seconds') >= 0
    assert value('bigtcpd_devices', state='unmanaged') == 3
    assert value('bigtcpd_ready') == 1


class Lines:
    """Lines of a child's stdout, with a deadline (no blocking readline on a pipe)."""

    def __init__(self, proc):
        self.proc, self.buf = proc, b''

    def next(self, timeout):
        deadline = time.monotonic() + timeout
        while b'\n' not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f'no line within {timeout}s; partial: {self.buf!r}'
            if select.select([self.proc.stdout], [], [], left)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise EOFError(self.buf)
                self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        return line.decode()

    def until(self, pred, timeout, what):
        seen, deadline = [], time.monotonic() + timeout
        while True:
            line = self.next(max(0.01, deadline - time.monotonic()))
            seen.append(line)
            if pred(line):
                return seen
            assert time.monotonic() < deadline, f'{what}: not seen in {seen}'


def test_monitor(running, ns):
    d = running
    procs = [subprocess.Popen([str(CTL), '--socket', str(d.sock), 'monitor', *extra], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) for extra in ([], ['--json'])]
    try:
        human, js = (Lines(p) for p in procs)
        assert human.next(T(10)) == 'Monitoring bigtcpd (Ctrl-C to stop).'
        assert json.loads(js.next(T(10))) == {'event': 'subscribed'}

        veth(ns, 'v5', 'k5')
        seen = human.until(lambda l: re.search(r' v5: pending → (probation|applied)$', l), T(10), 'v5 state')
        stamp = r'^\d\d:\d\d:\d\d\.\d{3} '
        assert any(re.match(stamp + r'v5: unmanaged → pending$', l) for l in seen), seen
        # The cause comes from a bigtcpd of the redesign (issue 9); the one before sends none.
        assert any(re.match(stamp + r'v5: write( \((new-device|policy)\))? gso_max_size 65536 → 185000, '
                            r'gro_max_size 65536 → 185000, gso_ipv4_max_size 65536 → 185000, '
                            r'gro_ipv4_max_size 65536 → 185000$', l) for l in seen), seen
        assert not [l for l in seen if ' k5: write' in l]
        events = [json.loads(l) for l in js.until(
            lambda l: json.loads(l).get('ifname') == 'v5' and json.loads(l).get('state') in ('probation', 'applied'),
            T(10), 'v5 state (json)')]
        # Every device that appears is announced, matched (v5) or not (k5), before its decisions.
        added = {e['ifname']: e['ifindex'] for e in events if e['event'] == 'added'}
        assert set(added) >= {'v5', 'k5'}, events
        assert {'event': 'state', 'ifindex': added['v5'], 'ifname': 'v5', 'state': 'pending',
                'previous': 'unmanaged'} in events, events
        writes = [e for e in events if e['event'] == 'write']
        assert [(e['ifname'], e['cause']) for e in writes] == [('v5', 'new-device')], writes
        assert any(re.search(r' k5: added \(ifindex \d+\)$', l) for l in seen), seen

        ctl('rollback', 'v5', sock=d.sock, check_rc=0)
        human.until(lambda l: re.search(r' v5: rolled back by an operator: gso_max_size 185000 → 65536, ', l),
                    T(10), 'rollback line')
        ctl('reload', sock=d.sock, check_rc=0)
        human.until(lambda l: re.search(r' policy reloaded, digest [0-9a-f]{16}$', l), T(10), 'reload line')

        # The daemon goes away: monitor says so and waits for it to come back (as journalctl -f;
        # test_broken_start.py sees it come back).
        d.stop()
        for p in procs:
            assert select.select([p.stderr], [], [], T(10))[0], 'monitor said nothing'
            assert p.stderr.readline().decode() == \
                'bigtcpctl: bigtcpd closed the connection; waiting for it to come back\n'
            assert p.poll() is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(5)
            p.stdout.close()
            p.stderr.close()


def read_line(p, timeout):
    """The next line of a running process' stdout, within `timeout` s (os.read: select() knows
    nothing of what a buffered read took ahead)."""
    buf = getattr(p, 'pending', b'')
    deadline = time.monotonic() + timeout
    while b'\n' not in buf:
        left = deadline - time.monotonic()
        if not (left > 0 and select.select([p.stdout], [], [], left)[0]):
            p.kill()
            raise AssertionError(f'no line within {timeout} s: {buf!r}; stderr: {p.stderr.read()!r}')
        chunk = os.read(p.stdout.fileno(), 65536)
        assert chunk, f'the process ended: {buf!r}'
        buf += chunk
    line, _, p.pending = buf.partition(b'\n')
    return line.decode()


@pytest.mark.slow
def test_over_dbus(ns, daemon, confdir, tmp_path):
    """--dbus: the same output from io.bigtcpd1 on a private bus that runs the shipped policy."""
    import tempfile
    from test_dbus import Bus, wait_serving
    busdir = Path(tempfile.mkdtemp(prefix='bt-bus.', dir='/tmp'))
    os.chmod(busdir, 0o755)
    bus = Bus(busdir)
    bus.start()
    try:
        cfg = confdir / 'bigtcpd.yaml'
        # a short window, over before the transports are compared: while a device is in
        # probation its guards are sampled, and the metrics of two reads a sample apart differ
        cfg.write_text(POLICY + 'rollback: {window: 1s, interval: 200ms}\n')
        veth(ns, 'v0', 'v1')
        veth(ns, 'k0', 'k1')
        d = daemon(ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
        with Monitor(d) as mon:
            for name in ('v0', 'v1'):
                mon.wait_state(name, 'applied', 10)
                # the window's count of big packets ends with it: status counts it while it runs
                mon.wait_for(lambda e, name=name: e.get('event') == 'evidence' and e.get('ifname') == name,
                             10, f'{name}: its count ended', since=0)
        wait_serving(d, bus)
        sock = d.runtime_dir / IFACE
        env = {'DBUS_SYSTEM_BUS_ADDRESS': bus.address}

        def both(*args):
            a = ctl('--dbus', *args, env=env, check_rc=0).stdout
            b = ctl(*args, sock=sock, check_rc=0).stdout
            return a, b

        a, b = both('list', '--json')
        clocks = ('probation_left_usec', 'current_age_usec')
        timeless = lambda j: [{k: ({**v, 'watch_left_usec': None} if k == 'big_packets' and v else v)
                               for k, v in x.items() if k not in clocks} for x in j['devices']]
        assert timeless(json.loads(a)) == timeless(json.loads(b))
        # Over D-Bus there is no refresh: how old the sizes are may be said, and differ.
        ageless = lambda out: [l for l in out.splitlines() if not re.match(r'^(Sizes as read| +Current read:)', l)]
        a, b = both('list')
        assert ageless(a) == ageless(b) and '5 links listed.' in a
        a, b = both('status', '--json')
        assert steady_status(json.loads(a)) == steady_status(json.loads(b))
        a, b = both('show', 'k0')
        assert ageless(a) == ageless(b)
        a, b = both('metrics')
        # bigtcpd_observer_read_seconds: what the last read of the observer's maps took, each time anew
        unread = lambda out: [l for l in out.splitlines() if not l.startswith('bigtcpd_observer_read_seconds ')]
        assert unread(a) == unread(b)
        one_line_error(ctl('--dbus', 'show', 'nope0', env=env), 1, 'no device "nope0"')

        # monitor over D-Bus: the Event signals after Subscribe(), as the varlink stream has them
        mon_d = subprocess.Popen([CTL, '--dbus', 'monitor', '--json'], env={**os.environ, **env},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        mon_t = subprocess.Popen([CTL, '--dbus', 'monitor'], env={**os.environ, **env},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert json.loads(read_line(mon_d, T(10))) == {'event': 'subscribed'}
            assert read_line(mon_t, T(10)) == 'Monitoring bigtcpd over D-Bus (Ctrl-C to stop).'
            r = ctl('--dbus', 'rollback', 'v0', env=env, check_rc=0)
            assert r.stdout.startswith('v0 goes back: gso_max_size 185000 → 65536, ') and r.stdout.endswith(
                '\nv0 is held there until the policy changes or "bigtcpctl retry v0".\n'), r.stdout
            seen = []
            while not any(e.get('event') == 'rollback' for e in seen):
                seen.append(json.loads(read_line(mon_d, T(10))))
            rb = [e for e in seen if e['event'] == 'rollback'][0]
            assert rb['ifname'] == 'v0' and rb['counter'] == 'operator', seen
            # (a line of its own, the same as varlink's monitor prints)
            while not re.match(r'\d\d:\d\d:\d\d\.\d{3} v0: rolled back by an operator: gso_max_size 185000 → 65536',
                               read_line(mon_t, T(10))):
                pass
        finally:
            for p in (mon_d, mon_t):
                p.send_signal(signal.SIGTERM)
                p.wait(5)
                p.stdout.close()
                p.stderr.close()
        # --json of rollback over D-Bus: the same answer as varlink's
        j = json.loads(ctl('--dbus', '--json', 'retry', 'v0', env=env, check_rc=0).stdout)
        assert j['released'] == ['v0'] and [m['ifname'] for m in j['moved']] == ['v0'], j
        j = json.loads(ctl('--dbus', '--json', 'rollback', 'v0', env=env, check_rc=0).stdout)
        assert j['held'] == ['v0'] and [(m['ifname'], m['to']['gso_max_size']) for m in j['moved']] == [('v0', 65536)], j
        nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(65536), T(10), 'v0 rolled back')
        a, b = both('status')
        # how many devices the observer has counted so far moves with any packet (lo's too)
        uncounted = lambda out: re.sub(r'^( +Observer: \w+) \(\d+ devices? counted\)$', r'\1', out, flags=re.M)
        assert uncounted(a) == uncounted(b) and re.search(r'^ +State: degraded \(1 device rolled back\)$', a, re.M), a
        assert re.search(r'^ +Rolled back: v0 \(by an operator\)$', a, re.M), a
        one_line_error(ctl('--dbus', 'rollback', 'v0', env=env), 1, 'v0: nothing to roll back')
        ctl('--dbus', 'retry', 'v0', env=env, check_rc=0)
        nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(185000), T(10), 'v0 retried')
        one_line_error(ctl('--dbus', 'retry', 'k0', env=env), 1, 'k0: nothing to do')
        r = ctl('--dbus', 'reload', '--json', env=env, check_rc=0)
        j = json.loads(r.stdout)
        assert re.fullmatch(r'[0-9a-f]{16}', j['digest']) and j['refused'] == j['pending'] == [], j
        one_line_error(ctl('--dbus', 'reload', env=env, nobody=True), 4, 'permission denied: reload needs root')
        assert ctl('--dbus', 'status', env=env, nobody=True, check_rc=0).stdout

        # plan and try over D-Bus, as over varlink
        other = tmp_path / 'other.yaml'
        other.write_text(POLICY.replace('185000', '120000'))
        a, b = both('plan', str(other))
        assert a == b and '120000' in a, (a, b)
        a, b = both('plan', '--json')
        assert json.loads(a) == json.loads(b)
        r = ctl('--dbus', 'try', str(other), '--timeout', '60s', env=env, check_rc=0)
        assert r.stdout.startswith(f'Trying {other} (digest '), r.stdout
        assert sorted(l for l in r.stdout.splitlines() if l.startswith('v')) == [
            f'{n}: ' + ', '.join(f'{s} 185000 → 120000' for s in ALL_SIZES) for n in ('v0', 'v1')], r.stdout
        assert all(nl.sizes_of(nl.read_links(ns)[n]) == sizes4(120000) for n in ('v0', 'v1'))
        one_line_error(ctl('--dbus', 'try', str(other), env=env), 1, 'a try runs')
        j = json.loads(ctl('--dbus', '--json', 'revert', env=env, check_rc=0).stdout)
        assert sorted((m['ifname'], m['to']['gso_max_size']) for m in j['moved']) == [('v0', 185000), ('v1', 185000)], j
        one_line_error(ctl('--dbus', 'revert', env=env), 1, 'no try runs')
    finally:
        bus.stop()
        import shutil
        shutil.rmtree(busdir, ignore_errors=True)


def test_dbus_not_running(tmp_path):
    """--dbus exits 3, "not running", whenever io.bigtcpd1 has no owner and the bus cannot start
    it: here a private bus with no bigtcpd, then one whose activation of io.bigtcpd1 fails (the
    daemon exits at once). What systemd answers for a disabled bigtcpd (NoSuchUnit) is checked
    under a real systemd, in test_systemd_boot.py."""
    import shutil
    import tempfile
    from test_dbus import Bus
    busdir = Path(tempfile.mkdtemp(prefix='bt-bus.', dir='/tmp'))
    os.chmod(busdir, 0o755)
    services = busdir / 'services'
    services.mkdir()
    bus = Bus(busdir, extra=f'<servicedir>{services}</servicedir>')
    bus.start()
    try:
        env = {'DBUS_SYSTEM_BUS_ADDRESS': bus.address}
        for args in (['status'], ['list'], ['show', 'v0'], ['metrics'], ['reload']):
            one_line_error(ctl('--dbus', *args, env=env), 3,
                           r'bigtcpd is not running \(io\.bigtcpd1 is not on the system bus\)')
        (services / 'io.bigtcpd1.service').write_text('[D-BUS Service]\nName=io.bigtcpd1\nExec=/bin/false\n')
        subprocess.run(['busctl', f'--address={bus.address}', 'call', 'org.freedesktop.DBus', '/org/freedesktop/DBus',
                        'org.freedesktop.DBus', 'ReloadConfig'], check=True, capture_output=True, timeout=T(10))
        one_line_error(ctl('--dbus', 'status', env=env), 3,
                       r'bigtcpd is not running \(the system bus could not start it: .*\)')
    finally:
        bus.stop()
        shutil.rmtree(busdir, ignore_errors=True)


# --- against a scripted daemon: the contract of the redesign (issue 9), and the daemons before it ---

class FakeDaemon:
    """A varlink server in a thread that answers from `handlers` (method -> function(parameters)
    returning one reply, or a list of them for a stream), and records every call: the replies
    of a daemon of a newer or older contract, without a kernel."""

    def __init__(self, path, handlers):
        self.path, self.handlers, self.calls = str(path), handlers, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.bind(self.path)
        self.sock.listen(16)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn):
        buf = b''
        with conn:
            while True:
                while b'\0' not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                msg, buf = buf.split(b'\0', 1)
                call = json.loads(msg)
                if call['method'] == 'org.varlink.service.GetInfo':
                    # bigtcpctl's check that somebody answers, before its first call
                    conn.sendall(json.dumps(ok(vendor='fake')).encode() + b'\0')
                    continue
                self.calls.append((call['method'], call.get('parameters', {})))
                handler = self.handlers.get(call['method'])
                replies = handler(call.get('parameters', {})) if handler else error(
                    'org.varlink.service.MethodNotFound', method=call['method'])
                for reply in replies if isinstance(replies, list) else [replies]:
                    conn.sendall(json.dumps(reply).encode() + b'\0')

    def methods(self):
        return [m.rsplit('.', 1)[1] for m, _ in self.calls]

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def ok(**parameters):
    return {'parameters': parameters}


def error(name, **parameters):
    return {'error': name, 'parameters': parameters}


def sizes(gso, gro=None, gso4=None, gro4=None):
    gro, gso4, gro4 = (gso if x is None else x for x in (gro, gso4, gro4))
    return {'gso_max_size': gso, 'gro_max_size': gro, 'gso_ipv4_max_size': gso4, 'gro_ipv4_max_size': gro4}


ALL_SIZES = ['gso_max_size', 'gro_max_size', 'gso_ipv4_max_size', 'gro_ipv4_max_size']


def device(ifindex, ifname, state='applied', policy='big', current=None, desired=None, original=None, **extra):
    """A Device of ListDevices. The new fields (owned, pending, current_age_usec) only when given."""
    managed = policy is not None
    d = {'ifindex': ifindex, 'ifname': ifname, 'kind': 'veth', 'state': state, 'policy': policy,
         'current': current or sizes(185000 if managed else 65536),
         'desired': desired if desired is not None or not managed else sizes(185000),
         'original': original if original is not None or not managed else sizes(65536),
         'tso_max_size': 524280, 'probation_left_usec': None, 'last_error': None, 'last_rollback': None}
    d.update(extra)
    return d


@pytest.fixture
def fake(tmp_path):
    """fake(handlers) -> a FakeDaemon on a socket of its own; closed at teardown."""
    made = []

    def make(handlers):
        f = FakeDaemon(tmp_path / f'fake{len(made)}.sock', handlers)
        made.append(f)
        return f
    yield make
    for f in made:
        f.close()


def list_rows(out):
    lines = out.splitlines()
    return {l.split()[2]: l.split()[1:] for l in lines[1:]
            if l and not l.endswith('.') and l.split()[1].isdigit()}


def test_list_refresh_and_age(fake):
    devs = [device(1, 'lo', 'unmanaged', None, current_age_usec=0), device(2, 'v0', current_age_usec=200000)]
    new = fake({f'{IFACE}.ListDevices': lambda p: ok(devices=devs)})
    r = ctl('list', sock=new.path, check_rc=0)
    assert new.calls == [(f'{IFACE}.ListDevices', {'refresh': True})]
    assert r.stdout.splitlines()[-2:] == ['', '2 links listed.'], r.stdout
    assert list_rows(r.stdout)['v0'][5:] == ['185000'] * 4 + ['524280']

    # Values the daemon could not read again: the footer says how old the oldest are.
    devs[1]['current_age_usec'] = 12_345_678
    r = ctl('list', sock=new.path, check_rc=0)
    assert r.stdout.splitlines()[-2:] == [
        '2 links listed.', 'Sizes as read from the kernel up to 12.3s ago; the kernel may hold others now.']
    assert 'ago' not in ctl('list', '--no-legend', sock=new.path, check_rc=0).stdout
    devs[1]['current_age_usec'] = 2 * 3600 * 10**6 + 5 * 60 * 10**6
    assert 'up to 2h 5min ago' in ctl('list', sock=new.path, check_rc=0).stdout
    # --json: the daemon's bytes.
    assert json.loads(ctl('list', '--json', sock=new.path, check_rc=0).stdout) == {'devices': devs}

    # A daemon from before `refresh` refuses the parameter: asked again without it.
    def old_list(p):
        if set(p) - {'ifname'}:
            return error('org.varlink.service.InvalidParameter', parameter=next(iter(set(p) - {'ifname'})))
        return ok(devices=[{k: v for k, v in d.items() if k != 'current_age_usec'}
                           for d in devs if p.get('ifname') in (None, d['ifname'])])
    old = fake({f'{IFACE}.ListDevices': old_list})
    r = ctl('list', sock=old.path, check_rc=0)
    assert [p for _, p in old.calls] == [{'refresh': True}, {}]
    assert r.stdout.splitlines()[-2:] == ['', '2 links listed.'] and r.stderr == ''
    old.calls.clear()
    j = json.loads(ctl('list', '--json', sock=old.path, check_rc=0).stdout)
    assert [p for _, p in old.calls] == [{'refresh': True}, {}] and len(j['devices']) == 2
    # show names the device; it never asks for refresh (the ifname form reads the kernel anyway).
    old.calls.clear()
    ctl('show', 'v0', sock=old.path, check_rc=0)
    assert [p for _, p in old.calls] == [{'ifname': 'v0'}]


def test_show_owned_pending_and_age(fake):
    # Policy B names only ipv6.gso-max-size: the other three go back to their originals.
    moved = device(3, 'v0', 'pending', 'b', current=sizes(185000), desired=sizes(150000, 65536, 65536, 65536),
                   original=sizes(65536), owned=['gso_max_size'], pending='rollout-slot', current_age_usec=0)
    fresh = device(4, 'v1', 'pending', 'b', current=sizes(65536), desired=sizes(150000, 65536, 65536, 65536),
                   owned=['gso_max_size'], pending='queued', current_age_usec=3_500_000)
    fresh['original'] = None   # bigtcpd has not written it yet
    free = device(5, 'k0', 'unmanaged', None, owned=[], current_age_usec=0)
    devs = {d['ifname']: d for d in (moved, fresh, free)}
    f = fake({f'{IFACE}.ListDevices': lambda p: ok(devices=[devs[p['ifname']]]) if p.get('ifname') in devs
              else error(f'{IFACE}.NoSuchDevice', ifname=p.get('ifname'))})

    out = ctl('show', 'v0', sock=f.path, check_rc=0).stdout
    assert re.search(r'^\s+State: pending \(waiting for a slot of its rollout\)$', out, re.M), out
    assert re.search(r'^\s+Owned sizes: gso_max_size$', out, re.M), out
    assert 'Current read' not in out
    assert re.search(r'^gso_max_size\s+185000 \(180\.6K\)\s+150000 \(146\.4K\)\s+65536 \(64K\)$', out, re.M), out
    for size in ALL_SIZES[1:]:
        assert re.search(rf'^{size}\s+185000 \(180\.6K\)\s+original\s+65536 \(64K\)$', out, re.M), out

    out = ctl('show', 'v1', sock=f.path, check_rc=0).stdout
    assert re.search(r'^\s+State: pending \(write queued\)$', out, re.M), out
    assert re.search(r'^\s+Current read: 3\.5s ago; the kernel may hold others now$', out, re.M), out
    assert re.search(r'^gro_max_size\s+65536 \(64K\)\s+not bigtcpd\'s\s+-$', out, re.M), out

    out = ctl('show', 'k0', sock=f.path, check_rc=0).stdout
    assert re.search(r'^\s+Owned sizes: -$', out, re.M), out
    assert re.search(r'^gso_max_size\s+65536 \(64K\)\s+-\s+-$', out, re.M), out
    # --json: the device as the daemon sent it.
    assert json.loads(ctl('show', '--json', 'v0', sock=f.path, check_rc=0).stdout) == moved
    one_line_error(ctl('show', 'nope0', sock=f.path), 1, 'no device "nope0"')
    # Every state reason has words; one this bigtcpctl does not know is shown as it is.
    for reason, words in (('in-flight', 'write in flight'), ('rollout-halted', 'its rollout is halted'),
                          ('throttled', 'throttled'), ('new-reason', 'new-reason')):
        moved['pending'] = reason
        assert f'State: pending ({words})\n' in ctl('show', 'v0', sock=f.path, check_rc=0).stdout
    # pending with a probation running (a put-back waiting for its slot): the reason first
    moved['pending'] = 'rollout-slot'
    moved['probation_left_usec'] = 17_000_000
    assert 'State: pending (waiting for a slot of its rollout; probation 17.0s left)\n' in ctl(
        'show', 'v0', sock=f.path, check_rc=0).stdout


def status_fields(out):
    """'Label: value' lines of status; a line that goes on the one above (no label) is appended."""
    fields, last = {}, None
    for line in out.splitlines():
        m = re.match(r'^\s*([^:]+?): (.*)$', line)
        if m and line[:16].strip():
            last = m.group(1)
            fields[last] = [m.group(2)]
        else:
            assert last and line.startswith(' ' * 18), line
            fields[last].append(line[18:])
    return fields


def test_status_names_trouble_and_rollouts(fake):
    status = {'version': '0.2.0', 'hostname': 'h', 'kernel': {'release': '6.18', 'ipv4_sizes': True},
              'policy': {'files': ['/etc/bigtcpd/bigtcpd.yaml'], 'digest': '0123456789abcdef', 'policies': 2},
              'devices': {'applied': 1}, 'devices_total': 1, 'writes': 1, 'write_failures': 0, 'restores': 0,
              'rollbacks': 0, 'ready': True, 'inactive_guard_counters': []}
    devs = [device(1, 'v0')]
    f = fake({f'{IFACE}.GetStatus': lambda p: ok(**status), f'{IFACE}.ListDevices': lambda p: ok(devices=devs)})
    fields = status_fields(ctl('status', sock=f.path, check_rc=0).stdout)
    assert fields['State'] == ['ready'] and 'Rollouts' not in fields and 'Rolled back' not in fields
    assert f.methods() == ['GetStatus']   # nothing to name: no ListDevices

    operator = {'counter': 'operator', 'rise': 0, 'namespace_wide': False, 'time_usec': 1, 'from': sizes(185000),
                'to': sizes(65536)}
    guard = dict(operator, counter='link.tx_errors', rise=7, max_increase=0)
    devs += [device(2, 'v1', 'rolled-back', last_rollback=operator),
             device(3, 'v2', 'rolled-back', last_rollback=guard),
             device(4, 'e0', 'failed', last_error={'errno': 22, 'message': 'Invalid argument',
                                                   'extack': 'too big'})]
    status['devices'] = {'applied': 1, 'rolled-back': 2, 'failed': 1, 'pending': 3}
    status['rollouts'] = [{'policy': 'big', 'max_parallel': 2, 'active': 1, 'waiting': 3, 'halted': True,
                           'halted_by': 'v2'},
                          {'policy': 'canary', 'max_parallel': 4, 'active': 4, 'waiting': 0, 'halted': False,
                           'halted_by': None}]
    out = ctl('status', sock=f.path, check_rc=0).stdout
    fields = status_fields(out)
    assert fields['State'] == ['degraded (2 devices rolled back, 1 failed)'], out
    assert fields['Rolled back'] == ['v1 (by an operator)', 'v2 (link.tx_errors rose 7)'], out
    assert fields['Failed'] == ['e0 (Invalid argument: too big)'], out
    assert fields['Rollouts'] == ['big: 1/2 active, 3 waiting, halted by v2', 'canary: 4/4 active, 0 waiting'], out

    status['devices'] = {'failed': 1}
    assert status_fields(ctl('status', sock=f.path).stdout)['State'] == ['degraded (1 device failed)']
    status['ready'] = False
    assert status_fields(ctl('status', sock=f.path).stdout)['State'] == ['starting']

    # Many: ten names, then how many more.
    devs[:] = [device(i, f'v{i}', 'rolled-back', last_rollback=operator) for i in range(1, 26)]
    status.update(ready=True, devices={'rolled-back': 25})
    fields = status_fields(ctl('status', sock=f.path, check_rc=0).stdout)
    assert len(fields['Rolled back']) == 11 and fields['Rolled back'][-1] == '… and 15 more (bigtcpctl list)'

    # --json: GetStatus as it came, and nothing else asked.
    f.calls.clear()
    assert json.loads(ctl('status', '--json', sock=f.path, check_rc=0).stdout) == status
    assert f.methods() == ['GetStatus']


def test_rollback_and_retry_in_words(fake):
    def record(t, counter='operator'):
        return {'counter': counter, 'rise': 0, 'namespace_wide': False, 'time_usec': t,
                'from': sizes(185000), 'to': sizes(65536, 65536, 185000, 185000)}
    devs = {'v0': device(2, 'v0', 'applied', last_rollback=record(5)), 'v1': device(3, 'v1', 'probation'),
            'v2': device(4, 'v2', 'rolled-back', last_rollback=record(7, 'link.tx_errors')),
            'e0': device(5, 'e0', 'failed'), 'k0': device(6, 'k0', 'unmanaged', None)}

    nothing = {'moved': [], 'refused': [], 'held': [], 'released': [], 'pending': []}

    def rollback(p):
        names = [p['ifname']] if p.get('ifname') else [n for n in devs if devs[n]['state'] in ('applied', 'probation')]
        if not names or any(devs[n]['state'] in ('rolled-back', 'unmanaged') for n in names):
            return error(f'{IFACE}.NothingToDo', ifname=p.get('ifname'))
        for n in names:
            devs[n].update(state='rolled-back', last_rollback=record(9))
        return ok(**{**nothing, 'held': names,
                     'moved': [{'ifname': n, 'from': sizes(185000), 'to': sizes(65536, 65536, 185000, 185000)}
                               for n in names]})

    def retry(p):
        names = [p['ifname']] if p.get('ifname') else [n for n in devs if devs[n]['state'] in ('rolled-back', 'failed')]
        if not names or any(devs[n]['state'] not in ('rolled-back', 'failed') for n in names):
            return error(f'{IFACE}.NothingToDo', ifname=p.get('ifname'))
        for n in names:
            devs[n]['state'] = 'pending'
        # e0's write is refused, v2's still on its way when the answer comes
        return ok(**{**nothing, 'released': names,
                     'moved': [{'ifname': n, 'from': sizes(65536), 'to': sizes(185000)} for n in names
                               if n not in ('e0', 'v2')],
                     'refused': [{'ifname': 'e0', 'from': sizes(65536), 'to': sizes(185000), 'errno': 22,
                                  'message': 'Invalid argument', 'extack': 'too big'}] if 'e0' in names else [],
                     'pending': ['v2'] if 'v2' in names else []})

    def listing(p):
        return ok(devices=[d for n, d in devs.items() if p.get('ifname') in (None, n)])
    f = fake({f'{IFACE}.Rollback': rollback, f'{IFACE}.Retry': retry, f'{IFACE}.ListDevices': listing})

    # --all names the devices this call rolled back (v0, v1), as the daemon answered, and asks
    # nothing else.
    r = ctl('rollback', '--all', sock=f.path, check_rc=0)
    back = 'gso_max_size 185000 → 65536, gro_max_size 185000 → 65536'
    assert r.stdout.splitlines() == [
        f'v0 goes back: {back}', f'v1 goes back: {back}',
        'These 2 devices are held there until the policy changes or "bigtcpctl retry DEV"',
        '("bigtcpctl retry --all" for all of them).'], r.stdout
    assert f.methods() == ['Rollback'] and f.calls[0][1] == {}
    one_line_error(ctl('rollback', 'v0', sock=f.path), 1,
                   r'^bigtcpctl: v0: nothing to roll back \(bigtcpd never wrote it, or it is rolled back already\)$')
    one_line_error(ctl('rollback', '--all', sock=f.path), 1, '^bigtcpctl: nothing to roll back: ')

    # retry --all: Retry(null), the devices it released by name, and what became of their writes
    # (a refused write: exit 1).
    f.calls.clear()
    r = ctl('retry', '--all', sock=f.path, check_rc=1)
    assert f.methods() == ['Retry'] and f.calls[0][1] == {}
    assert r.stdout.splitlines() == [f'{n} is released: bigtcpd applies its policy again.'
                                     for n in ('v0', 'v1', 'v2', 'e0')] + [
        f'{n}: gso_max_size 65536 → 185000, gro_max_size 65536 → 185000, gso_ipv4_max_size 65536 → 185000, '
        'gro_ipv4_max_size 65536 → 185000' for n in ('v0', 'v1')] + [
        'e0: the kernel refused the write: Invalid argument (too big)',
        'v2: its write is still on its way ("bigtcpctl monitor" shows how it ends)'], r.stdout
    one_line_error(ctl('retry', '--all', sock=f.path), 1, '^bigtcpctl: nothing to retry: no device is rolled back or failed$')
    one_line_error(ctl('retry', 'k0', sock=f.path), 1, r'^bigtcpctl: k0: nothing to do \(it is neither rolled back nor failed\)$')

    devs['v1']['state'] = 'applied'
    r = ctl('rollback', 'v1', sock=f.path, check_rc=0)
    assert r.stdout == f'v1 goes back: {back}\nv1 is held there until the policy changes or "bigtcpctl retry v1".\n'
    assert ctl('retry', 'v1', sock=f.path, check_rc=0).stdout == (
        'v1 is released: bigtcpd applies its policy again.\n'
        'v1: gso_max_size 65536 → 185000, gro_max_size 65536 → 185000, gso_ipv4_max_size 65536 → 185000, '
        'gro_ipv4_max_size 65536 → 185000\n')

    # --json: the daemon's reply, what moved included, and no other call.
    f.calls.clear()
    devs['v1']['state'] = 'applied'
    j = json.loads(ctl('rollback', '--json', 'v1', sock=f.path, check_rc=0).stdout)
    assert j == {**nothing, 'held': ['v1'], 'moved': [{'ifname': 'v1', 'from': sizes(185000),
                                                       'to': sizes(65536, 65536, 185000, 185000)}]}, j
    j = json.loads(ctl('retry', '--json', '--all', sock=f.path, check_rc=0).stdout)
    assert j['released'] == ['v1'] and [m['ifname'] for m in j['moved']] == ['v1'], j
    assert f.methods() == ['Rollback', 'Retry']

    # A daemon from before Retry(null) wants a name.
    old = fake({f'{IFACE}.ListDevices': listing, f'{IFACE}.Retry': lambda p: retry(p) if p.get('ifname') else error(
        'org.varlink.service.InvalidParameter', parameter='ifname')})
    one_line_error(ctl('retry', '--all', sock=old.path), 1,
                   r'cannot retry every device at once \(older version\?\): retry DEV, one by one$')


def test_monitor_events_of_the_new_contract(fake):
    dev = {'ifindex': 7, 'ifname': 'eth0'}
    up, down = sizes(65536), sizes(185000, 185000, 65536, 65536)
    perr = {'file': '/etc/bigtcpd/bigtcpd.yaml', 'line': 7, 'column': 21, 'message': 'gso-max-size: expected a number'}
    deadline = 1_700_000_000_000_000
    tried = {'event': 'try', 'file': '/tmp/t.yaml', 'target': '/etc/bigtcpd/bigtcpd.yaml', 'deadline_usec': deadline,
             'digest': '0123456789abcdef'}
    events = [
        {'event': 'subscribed'},
        dict(dev, event='added'),
        dict(dev, event='state', state='pending', previous='unmanaged'),
        dict(dev, event='write', cause='policy', **{'from': up, 'to': down}),
        dict(dev, event='write', cause='put-back', **{'from': up, 'to': down}),
        dict(dev, event='write', cause='retry', **{'from': up, 'to': down}, errno=22, error='Invalid argument',
             extack='too big'),
        dict(dev, event='rollback', counter='link.tx_errors', rise=3, threshold=0, **{'from': down, 'to': up}),
        dict(dev, event='write', cause='rollback', **{'from': down, 'to': up}),
        {'event': 'rollout', 'policy': 'big', 'halted': True, 'ifindex': 7, 'ifname': 'eth0'},
        dict(dev, event='rollback', counter='operator', rise=0, threshold=0, **{'from': down, 'to': up}),
        dict(dev, event='write', cause='restore', **{'from': down, 'to': up}),
        {'event': 'reload', 'ok': False, 'digest': '0123456789abcdef', 'errors': [perr, dict(perr, line=0, column=0)]},
        {'event': 'reload', 'ok': True, 'digest': 'fedcba9876543210'},
        dict(tried, action='started'),
        dict(tried, action='confirmed'),
        dict(tried, action='reverted', reason='timeout'),
        dict(dev, event='evidence', effective=True,
             big_packets={'tx': 5, 'tx_largest': 100000, 'rx': 0, 'rx_largest': 0, 'missed': 0, 'since': deadline,
                          'watching': False, 'ipv6': 5, 'ipv4': 0, 'full_ipv6': 0, 'full_ipv4': 0,
                          'raised': ['ipv6'], 'quiet': []}),
        {'event': 'future', 'what': 'started'},
        dict(dev, event='removed'),
    ]
    stream = [{'parameters': e, 'continues': True} for e in events[:-1]] + [{'parameters': events[-1]}]
    f = fake({f'{IFACE}.Monitor': lambda p: stream})
    r = ctl('monitor', sock=f.path, check_rc=0)
    lines = r.stdout.splitlines()
    assert lines[0] == 'Monitoring bigtcpd (Ctrl-C to stop).'
    stamp = re.compile(r'^\d\d:\d\d:\d\d\.\d{3} ')
    assert all(stamp.match(l) for l in lines[1:] if not l.startswith('    ')), lines
    got = [stamp.sub('', l) for l in lines[1:]]
    change = 'gso_max_size 65536 → 185000, gro_max_size 65536 → 185000'
    back = 'gso_max_size 185000 → 65536, gro_max_size 185000 → 65536'
    assert got == [
        'eth0: added (ifindex 7)',
        'eth0: unmanaged → pending',
        f'eth0: write (policy) {change}',
        f'eth0: write (put-back) {change}',
        'eth0: write (retry) refused: Invalid argument (errno 22): too big',
        f'eth0: rolled back (link.tx_errors rose 3, threshold 0): {back}',
        f'eth0: write (rollback) {back}',
        'rollout of policy big halted by the rollback of eth0: its waiting devices stay pending',
        f'eth0: rolled back by an operator: {back}',
        f'eth0: restore {back}',
        'new policy refused, running policy kept (digest 0123456789abcdef):',
        '    /etc/bigtcpd/bigtcpd.yaml:7:21: gso-max-size: expected a number',
        '    /etc/bigtcpd/bigtcpd.yaml: gso-max-size: expected a number',
        'policy reloaded, digest fedcba9876543210',
        f'try of /tmp/t.yaml started: reverted at {time.strftime("%H:%M:%S", time.localtime(deadline / 1e6))} '
        'unless confirmed',
        'try of /tmp/t.yaml confirmed: installed as /etc/bigtcpd/bigtcpd.yaml',
        'try of /tmp/t.yaml reverted (timeout): the policy that ran before is back',
        'eth0: evidence: 5 sent above 64 KiB, largest 100000; 0 received; since '
        f'{time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(deadline / 1e6))}; in effect: yes, big packets in IPv6',
        '{"event":"future","what":"started"}',
        'eth0: removed',
    ], got
    # --json: one line per event, the daemon's JSON.
    r = ctl('monitor', '--json', sock=f.path, check_rc=0)
    assert [json.loads(l) for l in r.stdout.splitlines()] == events

    # A bigtcpd before the redesign: "restore" events, writes without a cause.
    old = fake({f'{IFACE}.Monitor': lambda p: [
        {'parameters': {'event': 'subscribed'}, 'continues': True},
        {'parameters': dict(dev, event='write', **{'from': up, 'to': down}), 'continues': True},
        {'parameters': dict(dev, event='restore', **{'from': down, 'to': up}), 'continues': True},
        {'parameters': dict(dev, event='restore', **{'from': down, 'to': up}, errno=19, error='No such device')},
    ]})
    got = [stamp.sub('', l) for l in ctl('monitor', '--no-legend', sock=old.path, check_rc=0).stdout.splitlines()]
    assert got == [f'eth0: write {change}', f'eth0: restore {back}',
                   'eth0: restore refused: No such device (errno 19)'], got
