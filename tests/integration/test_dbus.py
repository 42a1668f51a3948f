"""D-Bus: io.bigtcpd1 on a private dbus-daemon that runs the shipped bus policy
(conf/io.bigtcpd1.conf), checked with busctl: introspection, properties, every method, the
RolledBack signal and PropertiesChanged, root-only methods refused to others (by the bus policy
and by the daemon's own UID check), no bus at all, and a bus that goes away and comes back."""

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import helpers
import dbus_wire
import nl
from helpers import REPO, T, assert_sizes, at, line_of, sizes4, stop, veth, wait_file
from policies import standard_policy

SHIPPED_POLICY = REPO / 'conf' / 'io.bigtcpd1.conf'
NAME, PATH, IFACE = 'io.bigtcpd1', '/io/bigtcpd1', 'io.bigtcpd1.Manager'
NOBODY = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups']

ORIG = sizes4(65536)
BIG = sizes4(185000)

POLICY = standard_policy(guards='[]')

# The system bus's own defaults (Debian's /usr/share/dbus-1/system.conf): connect, but no name
# and no method call unless a policy file punches a hole; root may monitor.
BUS_CONFIG = '''<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
  <policy user="root">
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Monitoring"/>
  </policy>
  <include>{policy}</include>
  {extra}
</busconfig>
'''

# A local policy that lets everyone call everything: the daemon must still refuse.
PERMISSIVE = ('<policy context="mandatory"><allow send_destination="io.bigtcpd1"/>'
              '<allow receive_sender="io.bigtcpd1"/></policy>')


class Bus:
    """A private dbus-daemon, started by pid and stopped by pid."""

    def __init__(self, directory, extra=''):
        self.dir = Path(directory)
        self.socket = self.dir / 'bus'
        self.address = f'unix:path={self.socket}'
        self.config = self.dir / 'bus.conf'
        self.config.write_text(BUS_CONFIG.format(socket=self.socket, policy=SHIPPED_POLICY, extra=extra))
        self.proc = None

    def start(self):
        if self.socket.exists():
            self.socket.unlink()
        self.proc = subprocess.Popen(['dbus-daemon', f'--config-file={self.config}', '--nofork',
                                      '--nopidfile', '--print-address'],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        r, _, _ = select.select([self.proc.stdout], [], [], T(10))
        assert r, 'dbus-daemon printed no address'
        line = self.proc.stdout.readline().strip()
        assert line.startswith(self.address), f'dbus-daemon address {line!r}'

    def stop(self):
        if self.proc:
            stop(self.proc, T(5))
        if self.proc:
            self.proc.stdout.close()
            self.proc.stderr.close()
        self.proc = None


def busctl(bus, *args, user=None, check=True):
    cmd = (NOBODY if user == 'nobody' else []) + ['busctl', f'--address={bus.address}', *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=T(30))
    if check and r.returncode != 0:
        raise AssertionError(f'{" ".join(cmd)} exited {r.returncode}: {r.stderr.strip()}')
    return r


def call(bus, method, signature='', *args, user=None, check=True):
    """A method of io.bigtcpd1.Manager; returns the reply's data (busctl --json=short)."""
    r = busctl(bus, '--json=short', 'call', NAME, PATH, IFACE, method, *([signature, *args] if signature else []),
               user=user, check=check)
    if r.returncode != 0:
        return r
    return json.loads(r.stdout)['data'] if r.stdout.strip() else None


def call_error(bus, method, *strings, user=None):
    """Call a method (string arguments only) that must fail; returns (error name, message).
    dbus-send, because busctl prints only its own text for well-known errors."""
    cmd = (NOBODY if user == 'nobody' else []) + [
        'dbus-send', f'--bus={bus.address}', '--print-reply', f'--dest={NAME}', PATH, f'{IFACE}.{method}',
        *[f'string:{a}' for a in strings]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=T(30))
    assert r.returncode != 0, f'{method}{strings} as {user or "root"} succeeded: {r.stdout}'
    first = r.stderr.strip()
    assert first.startswith('Error '), first
    name, _, message = first[len('Error '):].partition(': ')
    return name, message


def prop(bus, name, user=None):
    r = busctl(bus, '--json=short', 'get-property', NAME, PATH, IFACE, name, user=user)
    return json.loads(r.stdout)['data']


class Monitor:
    """`busctl monitor` as root, one JSON message per line."""

    def __init__(self, bus):
        self.bus = bus
        self.proc = subprocess.Popen(['busctl', f'--address={bus.address}', '--json=short', 'monitor'],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b''
        self.messages = []
        self.cursor = 0
        # Listening for sure once it shows a call made after it started.
        deadline = time.monotonic() + T(10)
        while True:
            busctl(bus, 'call', 'org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus', 'GetId')
            if self.wait(lambda m: m.get('member') == 'GetId', 0.5, fail=False):
                break
            assert time.monotonic() < deadline, 'busctl monitor saw nothing'

    def _read(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], max(timeout, 0))
        if not r:
            return
        chunk = self.proc.stdout.read()
        if not chunk:
            return
        self.buf += chunk
        *lines, self.buf = self.buf.split(b'\n')
        for line in lines:
            if line.strip():
                self.messages.append(json.loads(line))

    def wait(self, pred, timeout, fail=True):
        """The first message after the previous match that satisfies `pred`."""
        deadline = time.monotonic() + T(timeout)
        while True:
            for i in range(self.cursor, len(self.messages)):
                if pred(self.messages[i]):
                    self.cursor = i + 1
                    return self.messages[i]
            left = deadline - time.monotonic()
            if left <= 0:
                if fail:
                    raise AssertionError(f'no such message within {T(timeout)}s; seen: '
                                         f'{json.dumps(self.messages[self.cursor:])[:4000]}')
                return None
            self._read(min(left, 0.2))

    def signals(self, member):
        return [m for m in self.messages if m.get('type') == 'signal' and m.get('path') == PATH
                and m.get('member') == member]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()
        self.proc.stdout.close()


def changed(member_props):
    """Predicate: a PropertiesChanged of io.bigtcpd1.Manager carrying these values."""
    def pred(m):
        if m.get('type') != 'signal' or m.get('member') != 'PropertiesChanged' or m.get('path') != PATH:
            return False
        iface, values, _ = m['payload']['data']
        return iface == IFACE and all(k in values and values[k]['data'] == v for k, v in member_props.items())
    return pred


@pytest.fixture
def busdir():
    d = tempfile.mkdtemp(prefix='bt-bus.', dir='/tmp')
    os.chmod(d, 0o755)   # nobody must reach the socket
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def bus_factory(busdir):
    buses = []

    def make(extra=''):
        sub = busdir / f'b{len(buses)}'
        sub.mkdir()
        os.chmod(sub, 0o755)
        b = Bus(sub, extra)
        buses.append(b)
        b.start()
        return b

    yield make
    for b in buses:
        b.stop()


@pytest.fixture
def bus(bus_factory):
    return bus_factory()


def name_owned(m):
    """Predicate: the bus's NameOwnerChanged giving io.bigtcpd1 an owner."""
    if m.get('type') != 'signal' or m.get('member') != 'NameOwnerChanged':
        return False
    name, _old, new = m['payload']['data']
    return name == NAME and new != ''


def wait_owned(bus, d, timeout):
    """Wait until io.bigtcpd1 has an owner: the bus's own NameOwnerChanged, subscribed before
    asking (NameHasOwner) so that it cannot pass between the two."""
    mon = Monitor(bus)
    try:
        r = busctl(bus, '--json=short', 'call', 'org.freedesktop.DBus', '/org/freedesktop/DBus',
                   'org.freedesktop.DBus', 'NameHasOwner', 's', NAME)
        if not json.loads(r.stdout)['data'][0]:
            try:
                mon.wait(name_owned, timeout)
            except AssertionError:
                assert d.running(), f'bigtcpd exited\n{d.log_tail()}'
                raise AssertionError(f'bigtcpd did not take {NAME} within {T(timeout)}s\n{d.log_tail()}') from None
    finally:
        mon.stop()


def wait_serving(d, bus, timeout=10):
    """The daemon owns io.bigtcpd1 and has handled its RequestName answer (so it has said so in
    its log): the bus announces the owner, then a call to the daemon is answered only after
    the answer before it on the same connection."""
    wait_owned(bus, d, timeout)
    prop(bus, 'Ready')
    assert d.log_lines(r'D-Bus: serving io\.bigtcpd1 on'), f'owns {NAME} but did not log it\n{d.log_tail()}'


@pytest.fixture
def served(ns, confdir, bus, daemon):
    """Two veth pairs at 185000 under a policy without guards, and the daemon on the bus."""
    veth(ns, 'va', 'vb')
    veth(ns, 'vc', 'vd')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
    assert_sizes(ns, {n: BIG for n in ('va', 'vb', 'vc', 'vd')}, 'after READY=1')
    wait_serving(d, bus)
    return ns, d, bus, cfg


def test_introspect(served):
    _, _, bus, _ = served
    xml = busctl(bus, 'introspect', '--xml-interface', NAME, PATH).stdout
    for needle in ('<interface name="io.bigtcpd1.Manager">', '<method name="GetStatusJSON">',
                   '<method name="ListDevicesJSON">', '<method name="ListDevices">', '<method name="GetDevice">',
                   '<method name="Plan">', '<method name="Validate">', '<method name="Reload">',
                   '<method name="Rollback">', '<method name="Retry">', '<method name="Try">',
                   '<method name="Confirm">', '<method name="Revert">', '<method name="Watch">',
                   '<signal name="RolledBack">',
                   '<property name="PolicyDigest" type="s" access="read">',
                   '<property name="Rollbacks" type="t" access="read">',
                   '<property name="State" type="s" access="read">',
                   '<property name="LastReloadSuccessful" type="b" access="read">',
                   '<property name="LastReloadTimestamp" type="t" access="read">'):
        assert needle in xml, f'{needle} missing from the introspection data:\n{xml}'
    table = busctl(bus, 'introspect', NAME, PATH, IFACE).stdout
    assert '.RolledBack' in table and 'sst' in table, table
    # Everyone may introspect.
    assert '<interface name="io.bigtcpd1.Manager">' in busctl(bus, 'introspect', '--xml-interface', NAME, PATH,
                                                               user='nobody').stdout


def test_properties(served):
    ns, _, bus, _ = served
    status = json.loads(call(bus, 'GetStatusJSON')[0])
    links = nl.read_links(ns)
    assert prop(bus, 'Version') == status['version']
    assert prop(bus, 'PolicyDigest') == status['policy']['digest']
    assert prop(bus, 'DevicesTotal') == len(links) == status['devices_total']
    assert prop(bus, 'DevicesManaged') == 4
    assert prop(bus, 'DevicesApplied') == 4
    assert prop(bus, 'DevicesProbation') == prop(bus, 'DevicesRolledBack') == prop(bus, 'DevicesFailed') == 0
    assert prop(bus, 'Rollbacks') == 0
    assert prop(bus, 'Ready') is True
    assert prop(bus, 'State') == status['state'] == 'ready'
    assert prop(bus, 'LastReloadSuccessful') is True
    assert prop(bus, 'LastReloadTimestamp') == status['last_reload']['time_usec'] > 0
    # Everyone may read them.
    assert prop(bus, 'DevicesManaged', user='nobody') == 4
    every = json.loads(busctl(bus, '--json=short', 'call', NAME, PATH, 'org.freedesktop.DBus.Properties', 'GetAll',
                              's', IFACE, user='nobody').stdout)['data'][0]
    assert {'Version', 'PolicyDigest', 'DevicesTotal', 'DevicesManaged', 'DevicesApplied', 'DevicesProbation',
            'DevicesRolledBack', 'DevicesFailed', 'Rollbacks'} <= set(every), every


def test_read_methods(served):
    ns, _, bus, _ = served
    links = nl.read_links(ns)

    status = json.loads(call(bus, 'GetStatusJSON', user='nobody')[0])
    assert status['devices']['applied'] == 4 and status['ready'] is True, status

    devices = json.loads(call(bus, 'ListDevicesJSON', 's', '', user='nobody')[0])['devices']
    assert [d['ifname'] for d in devices] == sorted(links, key=lambda n: links[n]['ifindex'])
    one = json.loads(call(bus, 'ListDevicesJSON', 's', 'va')[0])['devices']
    assert len(one) == 1 and one[0]['ifname'] == 'va' and one[0]['state'] == 'applied', one
    assert call_error(bus, 'ListDevicesJSON', 'nosuch0') == (f'{IFACE}.NoSuchDevice', 'No device "nosuch0"')

    typed = call(bus, 'ListDevices', user='nobody')[0]
    by_name = {row[1]: row for row in typed}
    assert set(by_name) == set(links)
    ifindex, ifname, kind, state, policy, current, desired, tso, big = by_name['va']
    assert (ifindex, kind, state, policy) == (links['va']['ifindex'], 'veth', 'applied', 'veth')
    assert tuple(current) == BIG and tuple(desired) == BIG and tso == links['va']['tso_max_size']
    # its big packets, as ListDevicesJSON has them (zeros, and in effect not known, when never counted)
    va = json.loads(call(bus, 'ListDevicesJSON', 's', 'va')[0])['devices'][0]
    bp, eff = va.get('big_packets'), va.get('effective')
    assert big == ([False, 0, 0, 0, 0, 0, 0, 0, 0, -1] if bp is None else
                   [bp['watching'], bp['tx'], bp['rx'], bp['tx_largest'], bp['rx_largest'], bp['ipv6'], bp['ipv4'],
                    bp['missed'], bp['since'], -1 if eff is None else int(eff)]), (big, va)
    lo = by_name['lo']
    assert lo[3] == 'unmanaged' and lo[4] == '' and tuple(lo[6]) == (0, 0, 0, 0), lo
    # lo, never watched: with the eBPF observer, what it counted since it loaded (lo carries no
    # packet above 64 KiB here), as ListDevicesJSON says; with packet sockets, zeros
    lj = json.loads(call(bus, 'ListDevicesJSON', 's', 'lo')[0])['devices'][0].get('big_packets')
    assert lo[8] == ([False, 0, 0, 0, 0, 0, 0, 0, 0, -1] if lj is None else
                     [False, 0, 0, 0, 0, 0, 0, 0, lj['since'], -1]), ('never counted: zeros, in effect not known', lj)
    assert call(bus, 'GetDevice', 's', 'vb')[0][1] == 'vb'
    assert call_error(bus, 'GetDevice', 'nosuch0')[0] == f'{IFACE}.NoSuchDevice'

    assert call(bus, 'Validate', 's', POLICY, user='nobody') == [[], []]
    broken = POLICY.replace('185000, gro', '600000, gro', 1)
    errors, warnings = call(bus, 'Validate', 's', broken)
    assert len(errors) == 1 and warnings == [], (errors, warnings)
    file, line, column, message = errors[0]
    assert file == '<policy>' and line == line_of(broken, '600000') and column > 0, errors
    assert 'out of range' in message, message
    # a counter this host lacks: a warning beside the error, in the second array
    lacking = broken.replace('guards: []', 'guards:\n    - {counter: Tcp.RetransSeg, max-increase: 5}', 1)
    assert lacking != broken
    errors, warnings = call(bus, 'Validate', 's', lacking)
    assert len(errors) == 1 and [w[:2] for w in warnings] == [['<policy>', line_of(lacking, 'Tcp.RetransSeg')]], \
        (errors, warnings)
    assert warnings[0][3].startswith('guard counter "Tcp.RetransSeg" is not on this host'), warnings

    plan = json.loads(call(bus, 'Plan', 's', '', user='nobody')[0])['devices']
    assert {d['ifname']: d['action'] for d in plan}['va'] == 'none', plan
    other = POLICY.replace('185000', '100000')
    plan = json.loads(call(bus, 'Plan', 's', other)[0])['devices']
    va = next(d for d in plan if d['ifname'] == 'va')
    assert va['action'] == 'write' and va['desired']['gso_max_size'] == 100000, va
    name, text = call_error(bus, 'Plan', broken)
    assert name == f'{IFACE}.PolicyInvalid' and '<policy>:' in text and 'out of range' in text, text
    # Plan and Validate changed nothing.
    assert_sizes(ns, {n: BIG for n in ('va', 'vb', 'vc', 'vd')}, 'after Plan()')


def changes(reply):
    """The `changes` string of an operation's reply, its last argument, as JSON."""
    return json.loads(reply[-1])


def test_rollback_signal_and_properties_changed(served):
    ns, d, bus, _ = served
    mon = Monitor(bus)
    big4, orig4 = dict(zip(nl.SIZES, BIG)), dict(zip(nl.SIZES, ORIG))
    nothing = {'moved': [], 'refused': [], 'held': [], 'released': [], 'pending': []}
    try:
        # Rollback answers once the kernel answered its write, with what moved and what is held
        r = changes(call(bus, 'Rollback', 's', 'va'))
        assert r == {**nothing, 'moved': [{'ifname': 'va', 'from': big4, 'to': orig4}], 'held': ['va']}, r
        assert nl.sizes_of(nl.read_links(ns)['va']) == ORIG
        sig = mon.wait(lambda m: m.get('type') == 'signal' and m.get('member') == 'RolledBack'
                       and m.get('path') == PATH, 10)
        assert sig['interface'] == IFACE and sig['payload'] == {'type': 'sst', 'data': ['va', 'operator', 0]}, sig
        mon.wait(changed({'DevicesRolledBack': 1, 'Rollbacks': 1, 'State': 'degraded'}), 10)
        nl.wait_links(ns, at({'va': ORIG, 'vb': BIG}), T(10), 'va back at its original sizes')
        assert prop(bus, 'DevicesRolledBack') == 1 and prop(bus, 'Rollbacks') == 1
        assert json.loads(call(bus, 'ListDevicesJSON', 's', 'va')[0])['devices'][0]['state'] == 'rolled-back'
        # Again: nothing to do.
        assert call_error(bus, 'Rollback', 'va') == (f'{IFACE}.NothingToDo', 'Nothing to do for "va" in its state')

        r = changes(call(bus, 'Retry', 's', 'va'))
        assert r == {**nothing, 'moved': [{'ifname': 'va', 'from': orig4, 'to': big4}], 'released': ['va']}, r
        mon.wait(changed({'DevicesRolledBack': 0}), 10)
        nl.wait_links(ns, at({'va': BIG}), T(10), 'va released')

        # Every device at once: one signal per device.
        r = changes(call(bus, 'Rollback', 's', ''))
        assert sorted(m['ifname'] for m in r['moved']) == sorted(r['held']) == ['va', 'vb', 'vc', 'vd'], r
        mon.wait(changed({'DevicesRolledBack': 4}), 10)
        names = sorted(s['payload']['data'][0] for s in mon.signals('RolledBack'))
        assert names == ['va', 'va', 'vb', 'vc', 'vd'], names
        nl.wait_links(ns, at({n: ORIG for n in ('va', 'vb', 'vc', 'vd')}), T(10), 'all rolled back')
        assert prop(bus, 'Rollbacks') == 5
        assert call_error(bus, 'Retry', 'nosuch0') == (f'{IFACE}.NoSuchDevice', 'No device "nosuch0"')
        # "" is every device, as for Rollback
        r = changes(call(bus, 'Retry', 's', ''))
        assert sorted(r['released']) == ['va', 'vb', 'vc', 'vd'] and r['refused'] == [], r
        mon.wait(changed({'DevicesRolledBack': 0, 'State': 'ready'}), 10)
        nl.wait_links(ns, at({n: BIG for n in ('va', 'vb', 'vc', 'vd')}), T(10), 'all released')
        assert call_error(bus, 'Retry', '') == (f'{IFACE}.NothingToDo', 'Nothing to do')
    finally:
        mon.stop()
    assert d.log_lines(r'D-Bus: Rollback\("va"\) from :')


def test_event_signals_while_subscribed(served):
    """Monitor on D-Bus: after Subscribe() every event comes as an Event signal (Monitor's JSON),
    for anyone; once the subscriber has left the bus, none."""
    ns, d, bus, _ = served
    mon = Monitor(bus)
    try:
        with dbus_wire.Connection(str(bus.socket), timeout=T(30)) as sub:
            r = sub.call(NAME, PATH, IFACE, 'Subscribe')
            assert r.type == dbus_wire.METHOD_RETURN, r.error
            call(bus, 'Rollback', 's', 'vb')
            ev = mon.wait(lambda m: m.get('member') == 'Event' and 'rollback' in m['payload']['data'][0], 10)
            assert ev['interface'] == IFACE and ev['path'] == PATH and ev['payload']['type'] == 's', ev
            e = json.loads(ev['payload']['data'][0])
            assert e['event'] == 'rollback' and e['ifname'] == 'vb' and e['counter'] == 'operator', e
            w = mon.wait(lambda m: m.get('member') == 'Event' and '"write"' in m['payload']['data'][0], 10)
            e = json.loads(w['payload']['data'][0])
            assert (e['ifname'], e['cause'], e['to']) == ('vb', 'rollback', dict(zip(nl.SIZES, ORIG))), e
            unique = sub.unique_name
        # the subscriber is gone (the bus said so, and bigtcpd has read that: it answered a call
        # made after): no more Event signals (the RolledBack signal stays)
        mon.wait(lambda m: m.get('member') == 'NameOwnerChanged' and m['payload']['data'][0] == unique, 10)
        call(bus, 'GetStatusJSON')
        mark = len(mon.messages)
        call(bus, 'Retry', 's', 'vb')
        call(bus, 'Rollback', 's', 'vb')
        mon.wait(lambda m: m.get('member') == 'RolledBack', 10)
        assert not [m for m in mon.messages[mark:] if m.get('member') == 'Event'], mon.messages[mark:]
        # Subscribe is a read: anyone may
        with dbus_wire.Connection(str(bus.socket), timeout=T(30)) as sub:
            assert sub.call(NAME, PATH, IFACE, 'Subscribe').type == dbus_wire.METHOD_RETURN
    finally:
        mon.stop()


def test_reload(served):
    ns, d, bus, cfg = served
    digest = call(bus, 'Reload')[0]
    assert digest == prop(bus, 'PolicyDigest')
    d.wait_notify('RELOADING=1')
    d.wait_notify('READY=1')

    mon = Monitor(bus)
    try:
        cfg.write_text(POLICY.replace('185000', '100000'))
        new, moved = call(bus, 'Reload')
        assert new != digest
        # answered once the writes are, with what moved (nothing when bigtcpd saw the file change
        # and reloaded on its own before this call)
        r = json.loads(moved)
        assert set(m['ifname'] for m in r['moved']) <= {'va', 'vb', 'vc', 'vd'}, r
        assert all(m['to'] == dict(zip(nl.SIZES, sizes4(100000))) for m in r['moved']), r
        assert r['refused'] == r['pending'] == r['held'] == [], r
        assert all(nl.sizes_of(x) == sizes4(100000) for n, x in nl.read_links(ns).items() if n in ('va', 'vb'))
        mon.wait(changed({'PolicyDigest': new}), 10)
    finally:
        mon.stop()

    broken = POLICY.replace('kind: [veth]', 'kind: [veth]\n      colour: blue')
    # and a counter this host lacks: its warning after the errors
    broken = broken.replace('guards: []', 'guards:\n    - {counter: Tcp.RetransSeg, max-increase: 5}', 1)
    mon = Monitor(bus)   # before the file is written: its inotify reload may come first, and say it
    try:
        cfg.write_text(broken)
        name, text = call_error(bus, 'Reload')
        assert name == f'{IFACE}.PolicyInvalid' and f'{cfg}:' in text and 'unknown key "colour"' in text, text
        lines = text.splitlines()
        assert 'warning' not in lines[0] and lines[-1].startswith(
            f'{cfg}:{line_of(broken, "Tcp.RetransSeg")}:17: warning: guard counter "Tcp.RetransSeg" is not on this '
            'host'), lines
        assert prop(bus, 'PolicyDigest') == new, 'the running policy stays'
        assert prop(bus, 'LastReloadSuccessful') is False, 'a refused reload leaves a trace'
        # the running policy is not what the files say: State is degraded, and that is announced
        mon.wait(changed({'State': 'degraded', 'LastReloadSuccessful': False}), 10)
        assert prop(bus, 'State') == 'degraded'
        cfg.write_text(POLICY.replace('185000', '100000'))
        assert call(bus, 'Reload')[0] == new
        mon.wait(changed({'State': 'ready', 'LastReloadSuccessful': True}), 10)
    finally:
        mon.stop()


def test_try_confirm_revert(served):
    """Try over D-Bus: the tried policy runs until Revert; Confirm installs it in the policy file."""
    ns, d, bus, cfg = served
    tried = POLICY.replace('185000', '100000')
    digest, target, deadline, moved = call(bus, 'Try', 'stss', tried, 60_000_000, 'tried.yaml', '')
    assert target == str(cfg) and deadline > time.time() * 1e6 + 50e6
    assert sorted(m['ifname'] for m in json.loads(moved)['moved']) == ['va', 'vb', 'vc', 'vd'], moved
    assert digest == prop(bus, 'PolicyDigest')
    nl.wait_links(ns, at({n: sizes4(100000) for n in ('va', 'vb')}), T(10), 'the tried policy')
    assert json.loads(call(bus, 'GetStatusJSON')[0])['try']['file'] == 'tried.yaml'
    assert call_error(bus, 'Reload')[0] == f'{IFACE}.TryRunning'
    r = changes(call(bus, 'Revert'))
    assert sorted(m['ifname'] for m in r['moved']) == ['va', 'vb', 'vc', 'vd'], r
    assert all(m['to'] == dict(zip(nl.SIZES, BIG)) for m in r['moved']), r
    nl.wait_links(ns, at({n: BIG for n in ('va', 'vb')}), T(10), 'reverted')
    assert call_error(bus, 'Revert')[0] == f'{IFACE}.NoTry'
    assert call_error(bus, 'Confirm')[0] == f'{IFACE}.NoTry'

    broken = tried.replace('100000', 'lots')
    r = call(bus, 'Try', 'stss', broken, 0, 'broken.yaml', '', check=False)
    assert r.returncode != 0 and 'broken.yaml:' in r.stderr, r.stderr
    r = call(bus, 'Try', 'stss', tried, 0, 'tried.yaml', '/etc/passwd', check=False)
    assert r.returncode != 0 and 'bigtcpd reads no policy file there' in r.stderr, r.stderr
    r = call(bus, 'Try', 'stss', tried, 500_000, 'tried.yaml', '', check=False)
    assert r.returncode != 0 and 'timeout_usec' in r.stderr, r.stderr
    assert json.loads(call(bus, 'GetStatusJSON')[0])['try'] is None

    # bigtcpctl --dbus: confirm and revert
    ctl = [os.environ.get('BIGTCPCTL_BIN', str(helpers.BIN.parent.parent / 'cli' / 'bigtcpctl')), '--dbus']
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address)
    r = subprocess.run([*ctl, 'revert'], capture_output=True, text=True, env=env, timeout=T(30))
    assert (r.returncode, r.stdout, r.stderr) == (1, '', 'bigtcpctl: no try runs\n'), r
    call(bus, 'Try', 'stss', tried, 0, 'tried.yaml', '')
    r = subprocess.run([*ctl, 'revert'], capture_output=True, text=True, env=env, timeout=T(30))
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[0] == 'Reverted: the policy that ran before is back.', r
    assert sorted(lines[1:]) == [f'{n}: ' + ', '.join(f'{k} 100000 → 185000' for k in nl.SIZES)
                                 for n in ('va', 'vb', 'vc', 'vd')], r
    nl.wait_links(ns, at({n: BIG for n in ('va', 'vb')}), T(10), 'reverted by bigtcpctl --dbus')
    call(bus, 'Try', 'stss', tried, 0, 'tried.yaml', '')
    r = subprocess.run([*ctl, 'confirm'], capture_output=True, text=True, env=env, timeout=T(30))
    assert (r.returncode, r.stdout) == (0, f'Confirmed: the tried policy is installed as {cfg}.\n'), r
    assert cfg.read_text() == tried
    nl.wait_links(ns, at({n: sizes4(100000) for n in ('va', 'vb')}), T(10), 'confirmed')
    assert json.loads(call(bus, 'GetStatusJSON')[0])['try'] is None


@pytest.mark.serial  # a 1 s watch answers between 1 s and 5 s
def test_watch(served):
    """Watch(s ifname, t duration_usec) counts a device's big packets for that time and answers
    then, with the device's JSON; bigtcpctl --dbus watch says it in words. Root only."""
    ns, d, bus, _ = served
    t0 = time.monotonic()
    data = call(bus, 'Watch', 'st', 'vc', '1000000')
    took = time.monotonic() - t0
    dev = json.loads(data[0])['device']
    assert dev['ifname'] == 'vc' and dev['big_packets']['watching'] is False, dev
    assert dev['big_packets']['tx'] == 0 and dev.get('effective') is None, 'idle: counted nothing, no verdict'
    assert 1.0 <= took < T(5), f'answered after {took:.2f}s for a 1 s window'
    assert d.log_lines(r'vc: watching for 1s, asked for over D-Bus')
    ctl = Path(os.environ.get('BIGTCPD_BIN', REPO / 'build' / 'daemon' / 'bigtcpd')).resolve().parent.parent
    r = subprocess.run([str(ctl / 'cli' / 'bigtcpctl'), '--dbus', 'watch', 'vd', '--for',
                        '500ms'], capture_output=True, text=True, timeout=T(30),
                       env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address))
    assert r.returncode == 0, r.stderr
    assert 'vd: 0 sent above 64 KiB; 0 received; since ' in r.stdout, r.stdout
    assert call_error(bus, 'Watch', 'nosuch0')[0] == 'org.freedesktop.DBus.Error.InvalidArgs'  # no duration
    name, _ = call_error(bus, 'Watch', 'vc', user='nobody')
    assert name == 'org.freedesktop.DBus.Error.AccessDenied'
    r = call(bus, 'Watch', 'st', 'nosuch0', '1000000', check=False)
    assert r.returncode != 0 and 'nosuch0' in r.stderr, r.stderr


@pytest.mark.serial  # a 1 s watch answers within 2 s
def test_watch_in_probation_answers_after_its_own_duration(ns, confdir, bus, daemon):
    """A device in a 60 s probation is watched already, and longer than a Watch(1 s) asks: the
    call answers after its own second (D-Bus clients give up after 25 s) with what the running
    window counted so far, which goes on."""
    veth(ns, 'va', 'vb')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY.replace('  guards: []', '  window: 60s\n  guards:\n    - counter: link.tx_errors\n'
                                  '      max-increase: 1000000'))
    d = daemon(ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
    wait_serving(d, bus)
    assert json.loads(call(bus, 'ListDevicesJSON', 's', 'va')[0])['devices'][0]['state'] == 'probation'
    t0 = time.monotonic()
    dev = json.loads(call(bus, 'Watch', 'st', 'va', '1000000')[0])['device']
    took = time.monotonic() - t0
    assert 1.0 <= took < 1.0 + T(1), f'answered after {took:.2f}s for a 1 s watch'
    packets = dev['big_packets']
    assert dev['state'] == 'probation' and packets['watching'] is True, dev
    assert packets['watch_left_usec'] > 50_000_000, packets
    # the window goes on: still in probation, still counting
    again = json.loads(call(bus, 'ListDevicesJSON', 's', 'va')[0])['devices'][0]
    assert again['state'] == 'probation' and again['big_packets']['watching'] is True, again


def test_privileged_refused_by_bus_policy(served):
    ns, d, bus, _ = served
    for method, args in (('Reload', ()), ('Rollback', ('va',)), ('Rollback', ('',)), ('Retry', ('va',)),
                         ('Confirm', ()), ('Revert', ())):
        name, text = call_error(bus, method, *args, user='nobody')
        # dbus-daemon's refusal names the rule: the bus policy stopped it, not the daemon.
        assert name == 'org.freedesktop.DBus.Error.AccessDenied' and text.startswith('Rejected send message'), \
            f'{method}: {name}: {text}'
    assert not d.log_lines(r'refused to'), 'the call reached the daemon'
    assert_sizes(ns, {n: BIG for n in ('va', 'vb', 'vc', 'vd')}, 'nothing changed')


def test_privileged_refused_by_daemon(ns, confdir, bus_factory, daemon):
    """A bus policy that lets everyone through: the daemon's own UID check refuses."""
    bus = bus_factory(PERMISSIVE)
    veth(ns, 'va', 'vb')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
    wait_serving(d, bus)
    for method, args in (('Reload', ()), ('Rollback', ('va',)), ('Retry', ('va',)), ('Confirm', ()), ('Revert', ())):
        assert call_error(bus, method, *args, user='nobody') == \
            ('org.freedesktop.DBus.Error.AccessDenied', f'{method}() needs root')
    r = call(bus, 'Try', 'stss', POLICY, 0, '', '', user='nobody', check=False)
    assert r.returncode != 0 and 'Access denied' in r.stderr, r.stderr
    assert json.loads(call(bus, 'GetStatusJSON')[0])['try'] is None
    assert_sizes(ns, {'va': BIG, 'vb': BIG}, 'nothing changed')
    assert d.log_lines(r'D-Bus: Rollback\(\) refused to :\S+ \(uid 65534\)')
    # Refusals are logged at a bounded rate: ten in ten seconds, however many come.
    t0 = time.monotonic()
    for _ in range(20):
        assert call_error(bus, 'Reload', user='nobody')[0] == 'org.freedesktop.DBus.Error.AccessDenied'
    refused = d.log_lines(r'D-Bus: \w+\(\) refused to')
    windows = int((time.monotonic() - t0) // 10) + 1
    assert 10 <= len(refused) <= 10 * windows, refused
    # Root still may.
    assert changes(call(bus, 'Rollback', 's', 'va'))['held'] == ['va']
    nl.wait_links(ns, at({'va': ORIG}), T(10), 'rolled back by root')


def test_no_bus(ns, confdir, busdir, daemon):
    veth(ns, 'va', 'vb')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': f'unix:path={busdir}/nothing'})
    assert_sizes(ns, {'va': BIG, 'vb': BIG}, 'varlink-only daemon')
    d.reload()
    lines = d.log_lines(r'D-Bus: no system bus')
    assert len(lines) == 1, lines
    d.stop()


def test_bus_goes_away_and_comes_back(served):
    ns, d, bus, cfg = served
    bus.stop()
    # Nothing but its log says that the daemon noticed (the bus is gone, varlink has no event
    # for it): wait for the line with inotify on the log.
    wait_file(d.log_path, lambda: d.log_lines(r'D-Bus: lost the system bus'), 10,
              lambda: f'no log of the lost bus\n{d.log_tail()}')
    # Still working without it.
    cfg.write_text(POLICY.replace('185000', '150000'))
    d.reload()
    nl.wait_links(ns, at({'va': sizes4(150000)}), T(10), 'reload without a bus')

    bus.start()
    wait_owned(bus, d, 15)
    r = call(bus, 'GetStatusJSON', check=False)
    assert not isinstance(r, subprocess.CompletedProcess), \
        f'bigtcpd did not come back to the bus: {r.stderr}\n{d.log_tail()}'
    assert len(d.log_lines(r'D-Bus: serving io\.bigtcpd1 on')) == 2
    assert prop(bus, 'DevicesApplied') == 4
