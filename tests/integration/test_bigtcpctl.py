"""bigtcpctl end to end: every command against a daemon running in a test namespace, human and
--json output, exit codes and one-line errors; validate without any daemon."""

import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

import helpers
import nl
from helpers import T, policy_text, sizes4, veth, write_file_atomic
from varlink_client import Client

CTL = Path(os.environ.get('BIGTCPCTL_BIN', helpers.BIN.parent.parent / 'cli' / 'bigtcpctl'))
IFACE = 'io.bigtcpd.Manager'

POLICY = policy_text('''
    version: 1
    policies:
      - name: big
        match:
          name: ["v*"]
        ipv6:
          gso-max-size: 185000
          gro-max-size: 185000
        ipv4:
          gso-max-size: 185000
          gro-max-size: 185000
    ''')

OTHER = POLICY.replace('"v*"', '"k*"').replace('185000', '100000').replace('name: big', 'name: other')

BROKEN = policy_text('''
    version: 1
    policies:
      - name: broken
        match:
          name: ["v*"]
        ipv6:
          gso-max-size: lots
    ''')


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


@pytest.fixture
def running(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    veth(ns, 'v0', 'v1')
    veth(ns, 'k0', 'k1')
    d = daemon(ns, cfg)
    d.cfg = cfg
    d.sock = d.runtime_dir / IFACE
    return d


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
        f'{bad}:7:21: gso-max-size: expected a number of bytes, "max" or "legacy"'], r.stderr
    r = ctl('validate', '--json', bad, check_rc=1)
    assert json.loads(r.stdout) == {'valid': False, 'errors': [
        {'file': str(bad), 'line': 7, 'column': 21,
         'message': 'gso-max-size: expected a number of bytes, "max" or "legacy"'}]}
    assert json.loads(ctl('validate', '--json', good, check_rc=0).stdout) == {'valid': True, 'errors': []}

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
    one_line_error(ctl(), 2, 'no command')
    one_line_error(ctl('frobnicate'), 2, 'unknown command "frobnicate"')
    one_line_error(ctl('show'), 2, 'show takes one device name')
    one_line_error(ctl('rollback'), 2, 'rollback takes one device name, or --all')
    one_line_error(ctl('rollback', 'v0', '--all'), 2, 'rollback takes one device name, or --all')
    one_line_error(ctl('list', '--all'), 2, '--all goes with rollback only')
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

    # D-Bus: no bus at all is "not running"; the privileged commands are varlink only.
    r = ctl('--dbus', 'status', env={'DBUS_SYSTEM_BUS_ADDRESS': f'unix:path={tmp_path}/no-bus'})
    one_line_error(r, 3, 'no system bus|not on the system bus')
    one_line_error(ctl('--dbus', 'monitor'), 1, 'only available over varlink')
    one_line_error(ctl('--dbus', 'plan'), 1, 'only available over varlink')


# --- against a daemon -------------------------------------------------------------------------------

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

    j = json.loads(ctl('status', '--json', sock=d.sock, check_rc=0).stdout)
    with Client(d.sock) as c:
        raw = c.call(f'{IFACE}.GetStatus')
    assert j == raw


def test_list_and_show(running):
    d = running
    r = ctl('list', sock=d.sock, check_rc=0)
    lines = r.stdout.splitlines()
    assert lines[0].split() == ['IDX', 'LINK', 'KIND', 'STATE', 'POLICY', 'GSO', 'GRO', 'GSO4', 'GRO4', 'TSO']
    assert lines[-2:] == ['', '5 links listed.']
    rows = {l.split()[1]: l.split() for l in lines[1:-2]}
    assert set(rows) == {'lo', 'v0', 'v1', 'k0', 'k1'}
    assert rows['v0'][2:5] in (['veth', 'probation', 'big'], ['veth', 'applied', 'big'])
    assert rows['v0'][5:] == ['185000'] * 4 + ['524280']
    assert rows['k0'][2:] == ['veth', 'unmanaged', '-'] + ['65536'] * 4 + ['524280']
    assert rows['lo'][2] == '-'
    # Columns line up: every row is as wide as the header up to the last column.
    starts = [m.start() for m in re.finditer(r'\S+', lines[0])]
    for l in lines[1:-2]:
        assert l[starts[1]:].split()[0] in rows and l[starts[1] - 1] == ' '

    r = ctl('list', '--no-legend', sock=d.sock, check_rc=0)
    assert len(r.stdout.splitlines()) == 5 and 'IDX' not in r.stdout and 'listed' not in r.stdout

    j = json.loads(ctl('list', '--json', sock=d.sock, check_rc=0).stdout)
    assert [x['ifname'] for x in j['devices']] == [x['ifname'] for x in
                                                    sorted(j['devices'], key=lambda x: x['ifindex'])]
    assert {x['ifname'] for x in j['devices']} == set(rows)

    r = ctl('show', 'v0', sock=d.sock, check_rc=0)
    out = r.stdout
    assert re.match(r'^● \d+: v0\n', out)
    assert re.search(r'^\s+Kind: veth$', out, re.M) and re.search(r'^\s+Policy: big$', out, re.M)
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
    assert lines[0].split() == ['IDX', 'LINK', 'POLICY', 'ACTION', 'CHANGES']
    rows = {l.split()[1]: l for l in lines[1:-2]}
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
        f'{bad}:7:21: gso-max-size: expected a number of bytes, "max" or "legacy"',
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
    assert r.stdout == '' and r.stderr == ''
    nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(65536), T(10), 'v0 rolled back')
    out = ctl('show', 'v0', sock=d.sock, check_rc=0).stdout
    assert re.search(r'^\s+State: rolled-back$', out, re.M)
    assert re.search(r'^\s+Last rollback: by an operator at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$', out, re.M), out
    ctl('retry', 'v0', sock=d.sock, check_rc=0)
    nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(185000), T(10), 'v0 retried')
    one_line_error(ctl('retry', 'k0', sock=d.sock), 1, 'k0: nothing to do')
    one_line_error(ctl('rollback', 'nope0', sock=d.sock), 1, 'no device "nope0"')
    ctl('rollback', '--all', sock=d.sock, check_rc=0)
    nl.wait_links(ns, lambda links: all(nl.sizes_of(links[n]) == sizes4(65536) for n in ('v0', 'v1')),
                  T(10), 'all rolled back')
    states = {x['ifname']: x['state'] for x in json.loads(ctl('list', '--json', sock=d.sock).stdout)['devices']}
    assert states['v0'] == states['v1'] == 'rolled-back'

    write_file_atomic(d.cfg, POLICY.replace('185000', '150000'))
    r = ctl('reload', sock=d.sock, check_rc=0)
    assert r.stdout == ''
    r = ctl('reload', '--json', sock=d.sock, check_rc=0)
    assert re.fullmatch(r'[0-9a-f]{16}', json.loads(r.stdout)['digest'])
    write_file_atomic(d.cfg, BROKEN)
    r = ctl('reload', sock=d.sock, check_rc=1)
    assert r.stderr.splitlines() == [
        f'{d.cfg}:7:21: gso-max-size: expected a number of bytes, "max" or "legacy"',
        'bigtcpctl: the policy has errors; the running policy stays']


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

    assert value('bigtcpd_device_size_bytes', ifname='v0', size='gso_max_size') == 185000
    assert value('bigtcpd_device_size_bytes', ifname='k0', size='gro_ipv4_max_size') == 65536
    assert value('bigtcpd_device_size_bytes', ifname='v0', size='tso_max_size') == 524280
    assert value('bigtcpd_device_desired_size_bytes', ifname='v1', size='gro_max_size') == 185000
    assert not [l for n, l, v in samples if n == 'bigtcpd_device_desired_size_bytes' and l['ifname'] == 'k0']
    for dev in ('lo', 'v0', 'v1', 'k0', 'k1'):
        states = {l['state']: v for n, l, v in samples if n == 'bigtcpd_device_state' and l['ifname'] == dev}
        assert len(states) == 7 and sum(states.values()) == 1, (dev, states)
    assert value('bigtcpd_device_state', ifname='k1', state='unmanaged') == 1
    assert value('bigtcpd_writes_total') == 2
    assert value('bigtcpd_write_failures_total') == 0
    assert value('bigtcpd_rollbacks_total') == 0
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
        assert any(re.match(stamp + r'v5: wrote gso_max_size 65536→185000 gro_max_size 65536→185000 '
                            r'gso_ipv4_max_size 65536→185000 gro_ipv4_max_size 65536→185000$', l) for l in seen), seen
        assert not [l for l in seen if ' k5: wrote' in l]
        events = [json.loads(l) for l in js.until(
            lambda l: json.loads(l).get('ifname') == 'v5' and json.loads(l).get('state') in ('probation', 'applied'),
            T(10), 'v5 state (json)')]
        assert {'event': 'state', 'ifindex': events[0]['ifindex'], 'ifname': 'v5', 'state': 'pending',
                'previous': 'unmanaged'} in events, events

        ctl('rollback', 'v5', sock=d.sock, check_rc=0)
        human.until(lambda l: re.search(r' v5: rolled back \(operator rose 0, threshold 0\): gso_max_size '
                                        r'185000→65536', l), T(10), 'rollback line')
        ctl('reload', sock=d.sock, check_rc=0)
        human.until(lambda l: re.search(r' policy reloaded, digest [0-9a-f]{16}$', l), T(10), 'reload line')

        # The daemon goes away: monitor ends, saying so (exit 3).
        d.stop()
        for p in procs:
            assert p.wait(T(10)) == 3
            assert p.stderr.read().decode() == 'bigtcpctl: bigtcpd closed the connection\n'
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(5)
            p.stdout.close()
            p.stderr.close()


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
        cfg.write_text(POLICY)
        veth(ns, 'v0', 'v1')
        veth(ns, 'k0', 'k1')
        d = daemon(ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
        wait_serving(d, bus)
        sock = d.runtime_dir / IFACE
        env = {'DBUS_SYSTEM_BUS_ADDRESS': bus.address}

        def both(*args):
            a = ctl('--dbus', *args, env=env, check_rc=0).stdout
            b = ctl(*args, sock=sock, check_rc=0).stdout
            return a, b

        a, b = both('list', '--json')
        timeless = lambda j: [{k: v for k, v in x.items() if k != 'probation_left_usec'} for x in j['devices']]
        assert timeless(json.loads(a)) == timeless(json.loads(b))
        a, b = both('list')
        assert a == b and '5 links listed.' in a
        a, b = both('status', '--json')
        assert json.loads(a) == json.loads(b)
        a, b = both('show', 'k0')
        assert a == b
        a, b = both('metrics')
        assert a == b
        one_line_error(ctl('--dbus', 'show', 'nope0', env=env), 1, 'no device "nope0"')

        ctl('--dbus', 'rollback', 'v0', env=env, check_rc=0)
        nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(65536), T(10), 'v0 rolled back')
        ctl('--dbus', 'retry', 'v0', env=env, check_rc=0)
        nl.wait_links(ns, lambda links: nl.sizes_of(links['v0']) == sizes4(185000), T(10), 'v0 retried')
        one_line_error(ctl('--dbus', 'retry', 'k0', env=env), 1, 'k0: nothing to do')
        r = ctl('--dbus', 'reload', '--json', env=env, check_rc=0)
        assert re.fullmatch(r'[0-9a-f]{16}', json.loads(r.stdout)['digest'])
        one_line_error(ctl('--dbus', 'reload', env=env, nobody=True), 4, 'permission denied: reload needs root')
        assert ctl('--dbus', 'status', env=env, nobody=True, check_rc=0).stdout
        one_line_error(ctl('--dbus', 'monitor', env=env), 1, 'only available over varlink')
    finally:
        bus.stop()
        import shutil
        shutil.rmtree(busdir, ignore_errors=True)
