"""D-Bus that no local user can turn against root, on a private dbus-daemon configured like the
system bus (test_dbus.py's Bus, the shipped bus policy): unprivileged users (setpriv to UIDs other
than 0, tests/integration/dbus_attacker.py on the raw wire) send 30 MB Validate calls, calls that
expect no reply, calls in flight on many connections, calls and a close; root's Reload (on a
connection of its own each time, as bigtcpctl --dbus makes it) is never refused, the daemon's
memory stays bounded, its log too. Each test prints root's D-Bus latency under the flood and
varlink's beside it."""

import os
import pwd
import statistics
import threading
import time

import pytest

import dbus_wire
import helpers
from helpers import BIN, REPO, T, veth, vm
from policies import standard_policy
from test_dbus import bus, bus_factory, busdir, wait_serving  # noqa: F401 (fixtures)
from varlink_client import timed_call as varlink_timed_call

# floods of connections and calls: not in the quick tier
pytestmark = pytest.mark.slow

ATTACKER = REPO / 'tests' / 'integration' / 'dbus_attacker.py'
NAME, PATH, IFACE = 'io.bigtcpd1', '/io/bigtcpd1', 'io.bigtcpd1.Manager'
ROOT_NAME = 'io.bigtcpd1.Root'   # the same object on a connection only root may call

POLICY = standard_policy(guards='[]')


def users(n):
    """UIDs of n users other than root that exist (dbus-daemon refuses a UID without a passwd
    entry: it cannot tell its groups): nobody and Debian's base system users."""
    uids = []
    for name in ('nobody', 'daemon', 'bin', 'sys', 'sync', 'games'):
        try:
            uids.append(pwd.getpwnam(name).pw_uid)
        except KeyError:
            continue
    if len(uids) < n:
        pytest.skip(f'{n} users other than root are needed, found {uids}')
    return uids[:n]


@pytest.fixture
def attackers(attackers):
    """attackers(bus, uid, *args): dbus_attacker.py on the bus (conftest's, narrowed)."""
    return lambda bus, uid, *args: attackers(ATTACKER, bus.socket, uid, *args)


class Prober(helpers.Prober):
    """Root's Reload over D-Bus (a connection of its own each time), the bus's own GetId the same
    way at the same moment (what the bus alone takes, on another connection: what the Reload
    took beyond it is the daemon's share) and GetStatus over varlink, every 50 ms, until
    stopped: every latency, and every D-Bus answer that was not a reply."""

    def __init__(self, d, bus, member='Reload', destination=NAME, tolerant=False):
        super().__init__(0.05, 90, 'root\'s calls failed under the flood')
        self.d, self.bus, self.member, self.destination = d, bus, member, destination
        self.tolerant = tolerant   # a call that fails is counted as refused, and probing goes on
        self.dbus, self.bus_only, self.beyond, self.varlink, self.refused = [], [], [], [], []

    def bus_alone(self, got):
        """The same connection and Hello, and a call dbus-daemon answers itself."""
        t0 = time.monotonic()
        with dbus_wire.Connection(str(self.bus.socket), timeout=T(60)) as c:
            c.call(*dbus_wire.BUS, 'GetId')
        got.append(time.monotonic() - t0)

    def probe(self):
        alone = []
        beside = threading.Thread(target=self.bus_alone, args=(alone,), daemon=True)
        beside.start()
        try:
            dt, m = dbus_wire.timed_call(str(self.bus.socket), self.member, timeout=T(60),
                                         destination=self.destination)
        except (OSError, ConnectionError) as e:
            if not self.tolerant:
                raise
            self.refused.append(f'{e!r}')
            return True   # again at once
        finally:
            beside.join(T(60))
        assert alone, 'the bus did not answer GetId'
        self.bus_only.append(alone[0])
        if m.error:
            self.refused.append(f'{m.error}: {m.first_string()}')
        else:
            self.dbus.append(dt)
            self.beyond.append(max(dt - alone[0], 0))
        dt, _ = varlink_timed_call(str(self.d.runtime_dir / 'io.bigtcpd.Manager'), timeout=T(30))
        self.varlink.append(dt)

    def figures(self):
        def f(lat):
            if not lat:
                return 'none'
            return (f'{len(lat)} calls, p50 {statistics.median(lat) * 1000:.1f} ms, '
                    f'max {max(lat) * 1000:.1f} ms')
        return (f'root D-Bus {self.member} to {self.destination}: {f(self.dbus)}; '
                f'the bus alone (GetId at the same moment): {f(self.bus_only)}; '
                f'{self.member} beyond the bus alone: {f(self.beyond)}; '
                f'varlink GetStatus: {f(self.varlink)}')


@pytest.fixture
def served(ns, confdir, bus, daemon):
    """The daemon on the bus with two veth pairs; the sanitizer's quarantine off, so that what
    the daemon frees leaves its RSS."""
    veth(ns, 'va', 'vb')
    veth(ns, 'vc', 'vd')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    asan = os.environ.get('ASAN_OPTIONS', '')
    d = daemon(ns, cfg, log_level='info',
               env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address,
                    'ASAN_OPTIONS': (asan + ':' if asan else '') + 'quarantine_size_mb=0'})
    wait_serving(d, bus)
    return d, bus


def wait_root_serving(d, bus):
    """The daemon owns io.bigtcpd1.Root too (its own connection asks for it beside io.bigtcpd1)."""
    deadline = time.monotonic() + T(10)
    while not d.log_lines(r'D-Bus: serving io\.bigtcpd1\.Root on'):
        assert time.monotonic() < deadline, f'no io.bigtcpd1.Root\n{d.log_tail()}'
        time.sleep(0.05)


def flood(served, attackers, seconds, *attacks):
    """Start the attacks ((uid, args...) each), probe root for `seconds`, stop them: the prober,
    the attackers' reports, the daemon's peak memory growth."""
    d, bus = served
    before = vm(d.proc.pid, 'VmRSS')
    started = [attackers(bus, *a) for a in attacks]
    for a in started:
        assert a.line()['event'] == 'ready'
    prober = Prober(d, bus)
    prober.start()
    time.sleep(seconds)   # the flood's length: nothing to wait for, it is the load itself
    reports = [a.finish() for a in started]
    prober.stop()
    grown = vm(d.proc.pid, 'VmHWM') - before
    return prober, reports, grown


ASAN_DAEMON = 'build-asan' in str(BIN)
# sd-bus reads a message a socket's worth at a time (~214 KB, what the bus's send buffer holds) and
# reallocs its buffer to the message's size before every read: a no-op for glibc, a new buffer and
# a copy of what was read so far for AddressSanitizer, which never reallocs in place. So the
# sanitizer build takes time quadratic in the size: 15 s for 30 MB, about 2.5 s for 12 MB, which is
# still twelve times what a policy may be and more than the memory the test allows to stay.
HUGE = 12_000_000 if ASAN_DAEMON else 30_000_000


@pytest.mark.serial  # through the bus within the attacker's 30 s socket timeout
def test_huge_validate_refused_at_once(served, attackers):
    """Validate calls of HUGE bytes (two, on one connection; the optimized build reads 16 of 30 MB
    in 6 s): each refused as it is read, before its caller is asked for; the daemon's memory back
    where it was; root's Reload meanwhile answered."""
    d, bus = served
    before = vm(d.proc.pid, 'VmRSS')
    prober = Prober(d, bus)
    prober.start()
    got = attackers(bus, users(1)[0], 'big-validate', 1, HUGE).line(timeout=120)
    prober.stop()
    after = vm(d.proc.pid, 'VmRSS')
    print(f'2 Validate calls of {got["size"] / 1e6:.0f} MB: answered in {got["seconds"]:.2f} s, '
          f'{got["answers"]}; RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB; {prober.figures()}')
    assert got['answers'] == {'org.freedesktop.DBus.Error.InvalidArgs': 2}, got
    assert after - before < 8 << 20, f'RSS grew {(after - before) / 2**20:.1f} MiB'
    assert not prober.refused, prober.refused
    # the text was not even read into a job: no worker ran
    assert not d.log_lines(r'Validate'), d.log_lines(r'Validate')


@pytest.mark.parametrize('n_users', [1, 4])
def test_root_never_refused_while_users_flood(served, attackers, n_users):
    """Each user: 16 connections sending Validate calls that expect no reply as fast as the bus
    takes them, and 16 connections keeping 8 Validate calls each in flight. Calls without a reply
    are dropped as they are read; a user beyond its share gets LimitsExceeded; root's Reload is
    never refused."""
    attacks = []
    for uid in users(n_users):
        attacks += [(uid, 'noreply', 16), (uid, 'validate', 16, 8)]
    prober, reports, grown = flood(served, attackers, 4, *attacks)
    print(f'{n_users} user(s) flooding: {reports}; daemon peak memory +{grown / 2**20:.1f} MiB; {prober.figures()}')
    assert not prober.refused, prober.refused
    assert prober.dbus, prober.figures()
    answered = [r for r in reports if r['answers']]
    assert all(set(r['answers']) <= {'ok', 'org.freedesktop.DBus.Error.LimitsExceeded'} for r in answered), reports
    assert any(r['answers'].get('ok') for r in answered), reports


# The 30 MB flood is a release build's measurement: an ASan daemon reads the flood so slowly that
# the bus's queue behind it holds root's calls past their timeout whatever bigtcpd does (issue 34,
# item 8: root's latency under it is the bus's, 1.5-3.0 s on a release build, target 250 ms).


@pytest.mark.serial  # root's calls timed against a flood: nothing else may load the bus or the CPU
@pytest.mark.parametrize('attack, seconds', [
    pytest.param(('big-flood', 8, 30_000_000), 12, marks=pytest.mark.skipif(
        ASAN_DAEMON, reason='a release build measurement: the ASan daemon cannot keep up with 30 MB calls')),
    (('noreply', 16), 5)], ids=['30MB-validate', 'noreply'])
def test_root_never_refused_nor_queued_behind_one_users_flood(served, attackers, attack, seconds):
    """One user floods io.bigtcpd1: 8 connections each keeping a 30 MB Validate call in flight,
    or 16 connections sending calls that expect no reply as fast as the bus takes them. The bus
    queues every caller's messages to a connection in one line and passes it on slower than the
    user fills it: root's Reload to io.bigtcpd1 waited seconds behind the user's calls (up to
    5.9 s, release build), and was refused once the line was full ("destination has a full
    message queue"). Root's Reload to io.bigtcpd1.Root, the same object on a connection only
    root may call (what bigtcpctl --dbus calls as root), is never refused and is answered: its
    latency is printed beside that of io.bigtcpd1 (the target is 250 ms; it is the bus's own,
    which the flood slows too: GetId beside it)."""
    d, bus = served
    wait_root_serving(d, bus)
    started = attackers(bus, users(1)[0], *attack)
    assert started.line()['event'] == 'ready'
    root, shared = Prober(d, bus, destination=ROOT_NAME), Prober(d, bus, tolerant=True)
    root.start()
    shared.start()
    time.sleep(seconds)   # the flood's length: nothing to wait for, it is the load itself
    report = started.finish()
    root.stop()
    shared.stop()
    worst = lambda p: f'{max(p.dbus) * 1000:.0f} ms' if p.dbus else 'none answered'
    print(f'{attack[0]} x {attack[1]} for {seconds} s: {report}')
    print(f'  root Reload to {ROOT_NAME}: worst {worst(root)}, {len(root.refused)} refused; {root.figures()}')
    print(f'  root Reload to {NAME}: worst {worst(shared)}, {len(shared.refused)} refused '
          f'{sorted(set(shared.refused))}; {shared.figures()}')
    assert not root.refused, root.refused
    assert root.dbus, root.figures()


def test_memory_bounded_under_400_connections(served, attackers):
    """4 users × 100 connections × 128 GetStatusJSON calls in flight: the daemon stops reading
    while sd-bus holds DBUS_WRITE_QUEUE_MAX (256) replies, so its memory grows by less than
    32 MiB (it grew by 135 MiB without that ceiling)."""
    prober, reports, grown = flood(served, attackers, 5, *[(uid, 'status', 100, 128) for uid in users(4)])
    print(f'400 connections × 128 in flight: {[r["sent"] for r in reports]} calls sent; '
          f'daemon peak memory +{grown / 2**20:.1f} MiB; {prober.figures()}')
    assert not prober.refused, prober.refused
    assert grown < 32 << 20, f'the daemon grew {grown / 2**20:.1f} MiB'


def test_hit_and_run_does_not_flood_the_log(served, attackers):
    """Validate and close, in a loop, from 4 threads for 5 s: at most 10 lines in the log (the
    daemon at its production level, info; it logged one warning for each before)."""
    d, bus = served
    before = len(d.log().splitlines())
    a = attackers(bus, users(1)[0], 'hit-and-run', 4)
    assert a.line()['event'] == 'ready'
    time.sleep(5)   # the flood's length: nothing to wait for, it is the load itself
    got = a.finish()
    lines = d.log().splitlines()[before:]
    print(f'hit and run: {got["sent"]} Validate calls and closes in 5 s; {len(lines)} log lines')
    assert got['sent'] > 100, got
    assert len(lines) <= 10, lines
