"""Unprivileged callers get bounded work: what another UID sends over varlink never holds the loop
(root's GetStatus is answered within 300 ms and the watchdog keeps its pace while it sends a
policy nested 100000 deep, a 1 MiB Plan and 32 Monitor streams it never reads), its unread replies
are capped for the UID as a whole, its refused calls are logged at a bounded rate, and a policy
file nested too deep is refused before it costs anything. The attacker is tests/integration/
attacker.py, run under setpriv as UIDs other than 0."""

import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import helpers
from helpers import REPO, T, children, veth, vm
from policies import standard_policy
from test_systemd import wrapper
from varlink_client import Client, timed_call

# every test bounds a latency (LATENCY) or the watchdog's gaps: alone, after the parallel tests
pytestmark = [pytest.mark.serial, pytest.mark.slow]

IFACE = 'io.bigtcpd.Manager'
ATTACKER = REPO / 'tests' / 'integration' / 'attacker.py'
# The stalls this catches were 0.5 s to 70 s. Here GetStatus under the attack answers in 2-8 ms
# (median) and at most 25-68 ms; 133 ms was seen once with a second CI run and a benchmark
# loading both cores. The bound leaves room for such a machine, not for a stall.
LATENCY = 0.3

POLICY = standard_policy('big', 'name: ["v*"]', guards='[]')


def sock(d):
    return str(d.runtime_dir / IFACE)


def open_to_others(d):
    os.chmod(d.runtime_dir.parent, 0o755)   # the harness makes it 0700


@pytest.fixture
def tmpfs_runtime():
    """A runtime directory on tmpfs, as /run is: state saves cost no disk flush (with the suite's
    runtime dirs under /tmp, a busy disk makes each of root's Rollbacks wait on fdatasync, which
    is not what these tests measure). Reachable by others, as /run/bigtcpd is."""
    path = Path(tempfile.mkdtemp(prefix='bt-', dir='/dev/shm'))
    parent = path / 'run'
    parent.mkdir()
    os.chmod(path, 0o755)
    yield parent
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def attackers(attackers):
    """attackers(d, uid, *args): attacker.py against the daemon (conftest's, narrowed)."""
    return lambda d, uid, *args: attackers(ATTACKER, sock(d), uid, *args)


class Prober(helpers.Prober):
    """Root's GetStatus, on a fresh connection every 20 ms, until stopped: every latency."""

    def __init__(self, d):
        super().__init__(0.02, 10, 'GetStatus failed under attack')
        self.d = d
        self.latencies = []

    def probe(self):
        dt, p = timed_call(sock(self.d), timeout=T(5))
        assert p['version']
        self.latencies.append(dt)

    def stop(self):
        return super().stop().latencies


def figures(lat):
    lat = sorted(lat)
    return (f'{len(lat)} calls, median {statistics.median(lat) * 1000:.1f} ms, '
            f'p99 {lat[int(len(lat) * 0.99)] * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms')


def children_of(pid):
    """The worker processes of pid: its children but the three that live as long as the daemon
    (the evidence's packet sockets made and closed, the state's syncs)."""
    return [k for k, c in children(pid).items() if c not in ('bigtcpd-closer', 'bigtcpd-packets', 'bigtcpd-sync')]


def test_getstatus_answered_and_watchdog_kept_under_attack(tmpfs_runtime, ns, daemon, confdir, tmp_path,
                                                           monkeypatch, attackers):
    for i in range(4):
        veth(ns, f'v{2 * i}', f'v{2 * i + 1}')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    # a watchdog of 400 ms: WATCHDOG=1 every 200 ms while the loop turns
    monkeypatch.setattr(helpers, 'BIN', wrapper(tmp_path, 'watchdog',
                                                'WATCHDOG_USEC=400000 WATCHDOG_PID=$$ exec "$REAL" "$@"'))
    d = daemon(ns, cfg, runtime_dir=tmpfs_runtime)

    mons = attackers(d, 65534, 'monitors', 32)
    assert mons.line() == {'event': 'ready', 'connections': 32}

    # Root keeps the Monitors busy: every Rollback and Retry is a handful of events for each.
    stop_events = threading.Event()

    def churn():
        with Client(sock(d)) as c:
            while not stop_events.is_set():
                c.call(f'{IFACE}.Rollback', {})
                c.call(f'{IFACE}.Retry', {})
    churner = threading.Thread(target=churn, daemon=True)

    d._recv_notes()
    notes_before = len(d.note_times)
    prober = Prober(d)
    prober.start()
    churner.start()
    t0 = time.monotonic()
    results = []
    while time.monotonic() - t0 < T(4):
        deep = attackers(d, 65533, 'validate-deep', 100000)
        big = attackers(d, 65532, 'plan-big', 1 << 20)
        results.append((deep.line(), big.line()))
    stop_events.set()
    churner.join(T(10))
    lat = prober.stop()
    d._recv_notes()
    print(f'GetStatus under attack: {figures(lat)}')

    deep, big = results[0]
    assert deep['reply']['parameters']['valid'] is False, deep
    assert [e['message'] for e in deep['reply']['parameters']['errors']] == ['nested more than 16 levels deep']
    assert big['error'] is None and big['devices'] == 9 and big['size'] > 1000000, big
    print(f'attack: {len(results)} rounds; 100000-deep Validate answered in '
          f'{statistics.median(r[0]["seconds"] for r in results) * 1000:.1f} ms, '
          f'Plan of {big["size"]} bytes ({big["policies"]} policies) in '
          f'{statistics.median(r[1]["seconds"] for r in results) * 1000:.1f} ms (medians)')
    assert max(lat) < T(LATENCY), f'GetStatus took {max(lat) * 1000:.1f} ms under attack ({figures(lat)})'

    # The watchdog kept its pace: WATCHDOG=1 every 200 ms, never a gap of its 400 ms.
    stamps = [t for t, line in d.note_times[notes_before:] if line == 'WATCHDOG=1']
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    print(f'WATCHDOG=1 under attack: {len(stamps)}, gaps median {statistics.median(gaps) * 1000:.0f} ms, '
          f'max {max(gaps) * 1000:.0f} ms')
    assert max(gaps) < T(0.4), f'WATCHDOG=1 gaps up to {max(gaps) * 1000:.0f} ms'
    # Streams nobody reads were cut early (1 MiB each for a UID other than 0), root's never.
    cut = d.log_lines(r'pid \d+ uid 65534 does not read its Monitor stream')
    print(f'{len(cut)} of 32 unread Monitor streams cut')
    # Every worker is reaped.
    assert children_of(d.proc.pid) == []
    mons.stop()


def test_unread_calls_and_replies_are_capped_for_the_uid(ns, daemon, confdir, attackers):
    """32 connections of one UID pipeline ListDevices and read nothing. Per connection the daemon
    would hold up to 2 MiB of calls and 1 MiB of replies (96 MiB for the UID); for the UID as a
    whole it holds 8 MiB of calls and 4 MiB of replies, then reads and answers nothing more of
    it. Measured as the growth of the daemon's peak memory (the sanitizer's quarantine off)."""
    for i in range(16):
        veth(ns, f'v{2 * i}', f'v{2 * i + 1}')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    asan = os.environ.get('ASAN_OPTIONS', '')
    d = daemon(ns, cfg, env={'ASAN_OPTIONS': (asan + ':' if asan else '') + 'quarantine_size_mb=0'})
    open_to_others(d)
    before = vm(d.proc.pid, 'VmRSS')
    prober = Prober(d)
    prober.start()
    a = attackers(d, 65534, 'unread', 32)
    ready = a.line()
    lat = prober.stop()
    grown = vm(d.proc.pid, 'VmHWM') - before
    a.stop()
    print(f'32 connections that never read: {ready["sent"] / 1e6:.1f} MB of calls taken, the daemon\'s peak '
          f'memory grew {grown / 1e6:.1f} MB; GetStatus meanwhile: {figures(lat)}')
    assert grown < 32 << 20, f'the daemon grew {grown / 1e6:.1f} MB for one UID that reads nothing'
    assert max(lat) < T(LATENCY), f'GetStatus took {max(lat) * 1000:.1f} ms ({figures(lat)})'
    assert probe_once(d) < T(LATENCY)


@pytest.mark.parametrize('load', ['unread', 'validate-big'])
def test_eight_users_stay_within_the_caps(ns, daemon, confdir, attackers, load):
    """8 local users at once: 30 connections each pipelining ListDevices and reading nothing, or 8
    connections each looping Validate of 2 MB texts. What the daemon allocates for them is what
    the caps allow (its buffers count as allocated, and grow by a quarter, never by twice what
    they hold): its RSS stays below 64 MiB, and goes back to within 8 MiB of where it was once
    they are gone. (They took it from 4.6 MB to 137 MB and 98.7 MB: the caps held for the bytes
    in the buffers, and the buffers were up to twice that, kept while idle.)"""
    for i in range(16):
        veth(ns, f'v{2 * i}', f'v{2 * i + 1}')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    asan = os.environ.get('ASAN_OPTIONS', '')
    # a sanitizer's allocator keeps what is freed unless told to give it back as malloc does
    d = daemon(ns, cfg, env={'ASAN_OPTIONS': (asan + ':' if asan else '') +
                             'quarantine_size_mb=0:allocator_release_to_os_interval_ms=0'})
    open_to_others(d)
    before = vm(d.proc.pid, 'VmRSS')
    users = [attackers(d, 60000 + i, load, 30 if load == 'unread' else 8) for i in range(8)]
    for a in users:
        assert a.line(120)['event'] == 'ready'
    during = vm(d.proc.pid, 'VmRSS')
    for a in users:
        a.stop()
    # every connection of theirs closed on the daemon's side (its log says so; nothing else does)
    n = 8 * (30 if load == 'unread' else 8)
    deadline = time.monotonic() + T(30)
    while len(d.log_lines(r'varlink: connection of pid \d+ uid 600\d\d closed')) < n:
        assert time.monotonic() < deadline, f'not every connection closed: {d.log_tail()}'
        time.sleep(0.1)
    probe_once(d)
    after = vm(d.proc.pid, 'VmRSS')
    peak = vm(d.proc.pid, 'VmHWM')
    print(f'8 users, {load}: VmRSS {before >> 10} kB before, {during >> 10} kB under load, peak {peak >> 10} kB, '
          f'{after >> 10} kB after')
    # a sanitizer build's own memory is not the daemon's: its growth is what is measured there
    limit = 64 << 20 if not asan else before + (64 << 20)
    assert peak < limit, f'peak {peak >> 10} kB (before {before >> 10} kB)'
    assert after < before + (8 << 20), f'{after >> 10} kB after, {before >> 10} kB before'


def test_refused_calls_are_logged_at_a_bounded_rate(ns, daemon, confdir, attackers):
    veth(ns, 'v0', 'v1')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg)
    open_to_others(d)
    a = attackers(d, 65534, 'refused', 10000)
    got = a.line(timeout=120)
    assert got['errors'] == {'org.varlink.service.PermissionDenied': 10000}, got
    lines = d.log_lines(r'Reload refused to pid \d+ uid 65534')
    print(f'10000 refused Reload calls: {len(lines)} log lines')
    assert 1 <= len(lines) <= 10, f'{len(lines)} log lines for 10000 refused calls'
    # ...and root's call is not refused
    with Client(sock(d)) as c:
        assert c.call(f'{IFACE}.Reload')['digest']


def test_policy_file_nested_too_deep_is_refused_at_once(ns, daemon, confdir):
    """A reload of a file nested 100000 deep is refused before libyaml builds it (it costs the
    square of the depth: 70 s in the loop before this limit); the running policy stays."""
    veth(ns, 'v0', 'v1')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg)
    cfg.write_text(POLICY + 'x: ' + '[' * 100000 + ']' * 100000 + '\n')
    t0 = time.monotonic()
    d.reload()
    dt = time.monotonic() - t0
    assert d.log_lines(r'nested more than 16 levels deep'), d.log_tail()
    print(f'reload of a policy nested 100000 deep refused in {dt * 1000:.0f} ms')
    assert probe_once(d) < T(LATENCY)


def probe_once(d):
    dt, p = timed_call(sock(d), timeout=T(5))
    assert p['version']
    return dt


def metrics_as(d, uid):
    """`bigtcpctl metrics` as `uid`: (seconds, the process)."""
    from test_bigtcpctl import CTL
    t0 = time.monotonic()
    r = subprocess.run(['setpriv', f'--reuid={uid}', f'--regid={uid}', '--clear-groups', str(CTL), '--socket',
                        sock(d), 'metrics'], capture_output=True, text=True, timeout=T(60), stdin=subprocess.DEVNULL)
    return time.monotonic() - t0, r


def test_unfinished_calls_of_five_uids_lock_no_one_out(ns, daemon, confdir, attackers):
    """Five UIDs (one login's range of subordinate UIDs, say) each open 8 connections, send 1.5 MB
    of a Validate they never finish, and exit. While they are connected another UID's `bigtcpctl
    metrics` answers (each UID has its own share of the input cap; the 32 MiB they filled
    together held every unprivileged caller: exit 3 after 5 s), one of them is told bigtcpd is
    busy (its own share is full), and once they exit their connections are closed although
    nothing of them was being read (held at the caps, their hang-up went unseen: another UID
    was still locked out 65 s later, until bigtcpd restarted)."""
    veth(ns, 'v0', 'v1')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg)
    open_to_others(d)
    users = [attackers(d, 60001 + i, 'unfinished', 8) for i in range(5)]
    taken = [a.line(120) for a in users]
    assert all(t['event'] == 'ready' for t in taken), taken
    print(f'5 UIDs x 8 connections: {sum(t["sent"] for t in taken) / 1e6:.1f} MB of unfinished calls taken')

    dt, r = metrics_as(d, 60100)
    print(f'another UID\'s bigtcpctl metrics while they are connected: {dt:.2f} s, exit {r.returncode}')
    assert r.returncode == 0 and 'bigtcpd_devices' in r.stdout, r.stderr
    assert dt < T(3), f'{dt:.2f} s'

    # one of them, whose share is full: its call is not read, and it is told why
    dt, r = metrics_as(d, 60001)
    print(f'bigtcpctl metrics of a UID whose share is full: {dt:.2f} s, exit {r.returncode}: {r.stderr.strip()}')
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.startswith('bigtcpctl: bigtcpd is busy'), r.stderr

    t0 = time.monotonic()
    for a in users:
        a.stop()
    deadline = time.monotonic() + T(30)
    while len(d.log_lines(r'varlink: connection of pid \d+ uid 6000[1-5] closed')) < 40:
        assert time.monotonic() < deadline, f'their connections stay open: {d.log_tail()}'
        time.sleep(0.05)
    closed = time.monotonic() - t0
    dt, r = metrics_as(d, 60001)
    print(f'once they exit: their 40 connections closed within {closed:.2f} s; bigtcpctl metrics of one of the '
          f'UIDs then: {dt:.2f} s, exit {r.returncode}')
    assert r.returncode == 0, r.stderr
    assert dt < T(3), f'{dt:.2f} s'
