"""The varlink server, spoken raw over its socket (varlink_client.py, not bigtcpctl): the
org.varlink.service methods, every io.bigtcpd.Manager method with replies checked against the
shipped interface description, `more` streaming, pipelining, `oneway`, the standard errors,
authorization, and clients that misbehave — while each misbehaves, another client's GetStatus
must be answered within 100 ms."""

import json
import os
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import helpers
import nl
import varlink_idl
from helpers import REPO, T, ip, sizes4, veth, write_file_atomic
from policies import BROKEN, standard_policy
from varlink_client import Client, Closed, VarlinkError, timed_call

IFACE = 'io.bigtcpd.Manager'
SHIPPED = REPO / 'conf' / 'io.bigtcpd.Manager.varlink'
BIG = 185000
# The answer another client must get while one misbehaves.
LATENCY = 0.1

POLICY = standard_policy('big', 'name: ["v*"]', flow=False)


@pytest.fixture(scope='module')
def iface():
    return varlink_idl.parse(SHIPPED.read_text())


def sock(d):
    return d.runtime_dir / IFACE


def start(ns, daemon, confdir, text=POLICY):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(text)
    veth(ns, 'v0', 'v1')
    veth(ns, 'k0', 'k1')
    return daemon(ns, cfg), cfg


def checked(iface, c, method, params=None):
    """Call and check the reply against the interface description."""
    p = c.call(f'{IFACE}.{method}', params)
    varlink_idl.check_reply(iface, method, p)
    return p


def expect_error(c, method, params, error, iface=None, **kw):
    with pytest.raises(VarlinkError) as e:
        c.call(method, params, **kw)
    assert e.value.error == error, f'{method}: {e.value}'
    if iface is not None and error.startswith(IFACE + '.'):
        varlink_idl.check_error(iface, error, e.value.parameters)
    return e.value.parameters


def probe(d, n=5):
    """Fresh connections, one GetStatus each: the slowest answer, in seconds."""
    worst = 0.0
    for _ in range(n):
        dt, p = timed_call(sock(d), timeout=5)
        assert p['version']
        worst = max(worst, dt)
    return worst


def assert_responsive(d, what):
    worst = probe(d)
    assert worst < T(LATENCY), f'GetStatus took {worst * 1000:.1f} ms while {what}'


# --- org.varlink.service --------------------------------------------------------------------------

def test_get_info_and_interface_description_is_the_shipped_file(ns, daemon, confdir, iface):
    d, _ = start(ns, daemon, confdir)
    st = os.stat(sock(d))
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666, oct(st.st_mode)
    with Client(sock(d)) as c:
        info = c.call('org.varlink.service.GetInfo')
        assert info['vendor'] and info['product'] and info['url']
        assert info['version'] == c.call(f'{IFACE}.GetStatus')['version']
        assert set(info['interfaces']) == {IFACE, 'org.varlink.service'}

        desc = c.call('org.varlink.service.GetInterfaceDescription', {'interface': IFACE})['description']
        assert desc.encode() == SHIPPED.read_bytes(), 'served description differs from the shipped file'
        parsed = varlink_idl.parse(desc)
        assert parsed['name'] == IFACE
        assert set(parsed['methods']) == {'GetStatus', 'ListDevices', 'Monitor', 'Plan', 'Validate',
                                          'Reload', 'Rollback', 'Retry', 'Try', 'Confirm', 'Revert', 'Watch'}
        svc = varlink_idl.parse(c.call('org.varlink.service.GetInterfaceDescription',
                                       {'interface': 'org.varlink.service'})['description'])
        assert svc['name'] == 'org.varlink.service'
        assert {'GetInfo', 'GetInterfaceDescription'} <= set(svc['methods'])
        assert {'InterfaceNotFound', 'MethodNotFound', 'InvalidParameter', 'PermissionDenied',
                'ExpectedMore'} <= set(svc['errors'])

        p = expect_error(c, 'org.varlink.service.GetInterfaceDescription', {'interface': 'com.example.Nope'},
                         'org.varlink.service.InterfaceNotFound')
        assert p == {'interface': 'com.example.Nope'}
        p = expect_error(c, 'com.example.Nope.Method', None, 'org.varlink.service.InterfaceNotFound')
        assert p == {'interface': 'com.example.Nope'}
        p = expect_error(c, f'{IFACE}.NoSuchMethod', None, 'org.varlink.service.MethodNotFound')
        assert p == {'method': f'{IFACE}.NoSuchMethod'}
        p = expect_error(c, 'org.varlink.service.GetInterfaceDescription', {},
                         'org.varlink.service.InvalidParameter')
        assert p == {'parameter': 'interface'}
        # The connection is still good after errors.
        assert c.call('org.varlink.service.GetInfo') == info


# --- io.bigtcpd.Manager -------------------------------------------------------------------------

def test_every_method(ns, daemon, confdir, iface):
    d, cfg = start(ns, daemon, confdir)
    with Client(sock(d)) as c:
        st = checked(iface, c, 'GetStatus')
        assert st['ready'] is True and st['policy']['files'] == [str(cfg)]
        assert st['policy']['policies'] == 1 and len(st['policy']['digest']) == 16
        assert st['devices_total'] == 5 and sum(st['devices'].values()) == 5
        assert st['devices']['unmanaged'] == 3   # lo, k0, k1

        devs = checked(iface, c, 'ListDevices')['devices']
        assert [x['ifindex'] for x in devs] == sorted(x['ifindex'] for x in devs)
        by = {x['ifname']: x for x in devs}
        assert set(by) == {'lo', 'v0', 'v1', 'k0', 'k1'}
        v0 = by['v0']
        assert v0['kind'] == 'veth' and v0['policy'] == 'big'
        assert v0['state'] in ('probation', 'applied')
        assert v0['current'] == v0['desired'] == dict(zip(nl.SIZES, sizes4(BIG)))
        assert v0['original'] == dict(zip(nl.SIZES, sizes4(65536)))
        assert by['k0']['state'] == 'unmanaged' and by['k0'].get('desired') is None
        # what a device does not have is left out, not sent as null (the IDL's optional fields)
        assert not [(x['ifname'], k) for x in devs for k, v in x.items() if v is None], devs
        assert not {'policy', 'desired', 'original', 'pending', 'last_error', 'last_rollback', 'altnames', 'effective',
                    'auto'} & set(by['k0']), by['k0']
        assert 'kind' not in by['lo'] and 'altnames' not in v0, (by['lo'], v0)
        one = checked(iface, c, 'ListDevices', {'ifname': 'v0'})['devices']
        # ListDevices(ifname) reads the device again first: only the ages may differ (and the time
        # left of a big-packet count); and it explains the device (only the one named: matching
        # again costs what a reconcile does)
        explained = ('matched_by', 'asked', 'clamps', 'held', 'ipv4_unsupported')
        assert one[0]['matched_by'] == 'name v*' and one[0]['clamps'] == [] and one[0]['held'] is False
        assert not set(explained) & set(v0), v0
        strip = lambda x: {k: ({**v, 'watch_left_usec': None} if k == 'big_packets' and v else v) for k, v in x.items()
                           if k not in ('probation_left_usec', 'current_age_usec', *explained)}
        assert [strip(x) for x in one] == [strip(v0)]
        p = expect_error(c, f'{IFACE}.ListDevices', {'ifname': 'nope0'}, f'{IFACE}.NoSuchDevice', iface)
        assert p == {'ifname': 'nope0'}

        # Plan: the loaded policy changes nothing; another one would.
        plan = checked(iface, c, 'Plan')['devices']
        assert {x['ifname']: x['action'] for x in plan} == dict.fromkeys(by, 'none')
        other = POLICY.replace('"v*"', '"k*"').replace('185000', '100000')
        plan = {x['ifname']: x for x in checked(iface, c, 'Plan', {'policy': other, 'source': 'other.yaml'})['devices']}
        assert plan['k0']['action'] == 'write' and plan['k0']['desired']['gso_max_size'] == 100000
        assert plan['v0']['action'] == 'restore' and plan['v0']['desired'] == v0['original']
        assert plan['lo']['action'] == 'none'
        p = expect_error(c, f'{IFACE}.Plan', {'policy': BROKEN, 'source': 'b.yaml'}, f'{IFACE}.PolicyInvalid', iface)
        assert [(e['file'], e['line']) for e in p['errors']] == [('b.yaml', 7)], p

        # Validate: errors are an answer, not a failure.
        assert checked(iface, c, 'Validate', {'policy': POLICY}) == {'valid': True, 'errors': [], 'warnings': []}
        # a counter this host lacks is a warning, in its own field, beside the errors too
        lacking = BROKEN.replace('policies:', 'rollback:\n  guards:\n    - {counter: Tcp.RetransSeg, '
                                 'max-increase: 5}\npolicies:', 1)
        assert lacking != BROKEN
        v = checked(iface, c, 'Validate', {'policy': lacking, 'source': 'l.yaml'})
        assert v['valid'] is False and [e['line'] for e in v['errors']] == [10], v
        assert [(w['file'], w['line'], w['column']) for w in v['warnings']] == [('l.yaml', 4, 17)], v
        assert v['warnings'][0]['message'].startswith('guard counter "Tcp.RetransSeg" is not on this host (did you '
                                                      'mean "Tcp.RetransSegs"?)'), v
        v = checked(iface, c, 'Validate', {'policy': BROKEN})
        assert v['valid'] is False and v['errors'][0]['file'] == '<policy>'
        assert (v['errors'][0]['line'], v['errors'][0]['column']) == (7, 21), v
        v = checked(iface, c, 'Validate', {'policy': 'x' * (1024 * 1024 + 1)})
        assert not v['valid'] and 'too large' in v['errors'][0]['message']

        # Rollback: back to the originals and held; Retry: the policy again. Each answers once the
        # kernel has answered its writes, with what moved: the sizes read back at once.
        big4, orig4 = dict(zip(nl.SIZES, sizes4(BIG))), dict(zip(nl.SIZES, sizes4(65536)))
        nothing = {'moved': [], 'refused': [], 'held': [], 'released': [], 'pending': []}
        r = checked(iface, c, 'Rollback', {'ifname': 'v0'})
        assert r == {**nothing, 'moved': [{'ifname': 'v0', 'from': big4, 'to': orig4}], 'held': ['v0']}, r
        assert nl.sizes_of(nl.read_links(ns)['v0']) == sizes4(65536)
        x = checked(iface, c, 'ListDevices', {'ifname': 'v0'})['devices'][0]
        assert x['state'] == 'rolled-back' and x['last_rollback']['counter'] == 'operator'
        r = checked(iface, c, 'Retry', {'ifname': 'v0'})
        assert r == {**nothing, 'moved': [{'ifname': 'v0', 'from': orig4, 'to': big4}], 'released': ['v0']}, r
        assert nl.sizes_of(nl.read_links(ns)['v0']) == sizes4(BIG)
        expect_error(c, f'{IFACE}.Retry', {'ifname': 'k0'}, f'{IFACE}.NothingToDo', iface)
        expect_error(c, f'{IFACE}.Rollback', {'ifname': 'k0'}, f'{IFACE}.NothingToDo', iface)
        expect_error(c, f'{IFACE}.Rollback', {'ifname': 'nope0'}, f'{IFACE}.NoSuchDevice', iface)
        r = checked(iface, c, 'Rollback', {})
        assert sorted(m['ifname'] for m in r['moved']) == ['v0', 'v1'] and sorted(r['held']) == ['v0', 'v1'], r
        assert all(m['from'] == big4 and m['to'] == orig4 for m in r['moved']), r
        assert r['refused'] == r['pending'] == r['released'] == [], r
        links = nl.read_links(ns)
        assert all(nl.sizes_of(links[n]) == sizes4(65536) for n in ('v0', 'v1'))
        r = checked(iface, c, 'Retry', {})
        assert sorted(r['released']) == ['v0', 'v1'] and sorted(m['ifname'] for m in r['moved']) == ['v0', 'v1'], r

        # Reload: the new policy is in force on return, its writes answered; a broken one is refused
        # with its errors.
        digest = st['policy']['digest']
        write_file_atomic(cfg, POLICY.replace('185000', '150000'))
        r = checked(iface, c, 'Reload')
        assert r['digest'] != digest and checked(iface, c, 'GetStatus')['policy']['digest'] == r['digest']
        # (nothing moved when bigtcpd saw the file change and reloaded on its own before the call)
        assert set(m['ifname'] for m in r['moved']) <= {'v0', 'v1'}, r
        assert all(m['from'] == big4 and m['to'] == dict(zip(nl.SIZES, sizes4(150000))) for m in r['moved']), r
        assert r['held'] == r['refused'] == r['pending'] == [], r
        links = nl.read_links(ns)
        assert all(nl.sizes_of(links[n]) == sizes4(150000) for n in ('v0', 'v1'))
        write_file_atomic(cfg, BROKEN)
        p = expect_error(c, f'{IFACE}.Reload', None, f'{IFACE}.PolicyInvalid', iface)
        assert p['errors'] and p['errors'][0]['file'] == str(cfg) and p['errors'][0]['line'] == 7
        assert p['warnings'] == [], p
        # a counter this host lacks in the refused files: a warning beside the errors, in its own field
        write_file_atomic(cfg, lacking)
        p = expect_error(c, f'{IFACE}.Reload', None, f'{IFACE}.PolicyInvalid', iface)
        assert [e['line'] for e in p['errors']] == [10], p
        assert [(w['file'], w['line'], w['column']) for w in p['warnings']] == [(str(cfg), 4, 17)], p
        assert p['warnings'][0]['message'].startswith('guard counter "Tcp.RetransSeg" is not on this host'), p
        assert d.log_lines(re.escape(f'{cfg}:4:17: warning: guard counter "Tcp.RetransSeg" is not on this host'))
        assert checked(iface, c, 'GetStatus')['policy']['digest'] == r['digest']


def test_parameters_are_checked(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    inval = 'org.varlink.service.InvalidParameter'
    with Client(sock(d)) as c:
        assert expect_error(c, f'{IFACE}.ListDevices', {'ifname': 3}, inval) == {'parameter': 'ifname'}
        assert expect_error(c, f'{IFACE}.ListDevices', {'ifnam': 'v0'}, inval) == {'parameter': 'ifnam'}
        assert expect_error(c, f'{IFACE}.GetStatus', {'x': None}, inval) == {'parameter': 'x'}
        assert expect_error(c, f'{IFACE}.Retry', {'ifname': 7}, inval) == {'parameter': 'ifname'}
        assert expect_error(c, f'{IFACE}.ListDevices', {'refresh': 'yes'}, inval) == {'parameter': 'refresh'}
        # no ifname (or null) is every device: nothing is rolled back or failed here
        assert expect_error(c, f'{IFACE}.Retry', {}, f'{IFACE}.NothingToDo') == {'ifname': None}
        assert expect_error(c, f'{IFACE}.Retry', {'ifname': None}, f'{IFACE}.NothingToDo') == {'ifname': None}
        assert expect_error(c, f'{IFACE}.Validate', {'policy': ['x']}, inval) == {'parameter': 'policy'}
        assert expect_error(c, f'{IFACE}.Validate', {'policy': 'a\u0000b'}, inval) == {'parameter': 'policy'}
        assert expect_error(c, f'{IFACE}.Plan', {'source': 'x' * 5000}, inval) == {'parameter': 'source'}
        expect_error(c, f'{IFACE}.Monitor', None, 'org.varlink.service.ExpectedMore')
        # null means absent for optional parameters; `more` is harmless on other methods.
        assert len(c.call(f'{IFACE}.ListDevices', {'ifname': None})['devices']) == 5
        c.send(f'{IFACE}.GetStatus', more=True)
        reply = c.recv()
        assert 'continues' not in reply and reply['parameters']['ready'] is True


def test_pipelined_calls_are_answered_in_order_and_oneway_gets_no_reply(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    calls, expect = [], []
    for i in range(40):
        kind = i % 4
        if kind == 0:
            calls.append(Client.encode(f'{IFACE}.ListDevices', {'ifname': 'v0' if i % 8 else 'k1'}))
            expect.append(('ifname', 'v0' if i % 8 else 'k1'))
        elif kind == 1:
            calls.append(Client.encode(f'{IFACE}.NoSuch{i}'))
            expect.append(('error', f'{IFACE}.NoSuch{i}'))
        elif kind == 2:
            calls.append(Client.encode(f'{IFACE}.GetStatus', oneway=True))   # no reply
            calls.append(Client.encode('org.varlink.service.GetInfo'))
            expect.append(('info', None))
        else:
            calls.append(Client.encode(f'{IFACE}.Validate', {'policy': 'version: 1\npolicies: []\n',
                                                             'source': f's{i}'}))
            expect.append(('valid', None))
    with Client(sock(d)) as c:
        c.send_raw(b''.join(calls))         # one write, every call in it
        for what, arg in expect:
            r = c.recv(timeout=5)
            if what == 'ifname':
                assert r['parameters']['devices'][0]['ifname'] == arg, r
            elif what == 'error':
                assert r == {'error': 'org.varlink.service.MethodNotFound', 'parameters': {'method': arg}}, r
            elif what == 'info':
                assert r['parameters']['product'], r
            else:
                assert r['parameters']['valid'] is True, r
        # Nothing else comes: the oneway calls were answered by nobody.
        c.send('org.varlink.service.GetInfo')
        assert 'interfaces' in c.recv(timeout=5)['parameters']
        # A call split over many writes is one call.
        data = Client.encode(f'{IFACE}.GetStatus')
        for i in range(len(data)):
            c.send_raw(data[i:i + 1])
        assert c.recv(timeout=5)['parameters']['ready'] is True


# --- Monitor ------------------------------------------------------------------------------------

@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_monitor_streams_events_of_a_device_created_mid_stream(ns, daemon, confdir, iface):
    d, cfg = start(ns, daemon, confdir)
    with Client(sock(d)) as mon, Client(sock(d)) as other:
        mon.send(f'{IFACE}.Monitor', more=True)
        first = mon.recv(timeout=5)
        assert first == {'parameters': {'event': 'subscribed'}, 'continues': True}

        veth(ns, 'v7', 'k7')   # v7 matches, k7 does not
        events = []
        deadline = time.monotonic() + T(10)
        while not any(e['event'] == 'state' and e['ifname'] == 'v7' and e['state'] in ('probation', 'applied')
                      for e in events):
            assert time.monotonic() < deadline, f'no state events for v7: {events}'
            r = mon.recv(timeout=max(0.1, deadline - time.monotonic()))
            assert r.get('continues') is True and 'error' not in r, r
            varlink_idl.check_reply(iface, 'Monitor', r['parameters'])
            events.append(r['parameters'])
        v7 = [e for e in events if e.get('ifname') == 'v7']
        assert ('unmanaged', 'pending') in [(e['previous'], e['state']) for e in v7 if e['event'] == 'state']
        writes = [e for e in v7 if e['event'] == 'write']
        assert writes and writes[0]['to'] == dict(zip(nl.SIZES, sizes4(BIG))), v7
        assert writes[0]['from'] == dict(zip(nl.SIZES, sizes4(65536)))
        assert not [e for e in events if e.get('ifname') == 'k7' and e['event'] == 'write']

        # Events caused by another connection's calls reach the stream too.
        other.call(f'{IFACE}.Reload')
        other.call(f'{IFACE}.Rollback', {'ifname': 'v7'})
        seen = set()
        while not {'reload', 'rollback'} <= seen:
            r = mon.recv(timeout=T(10))
            varlink_idl.check_reply(iface, 'Monitor', r['parameters'])
            seen.add(r['parameters']['event'])
        # A call after Monitor on the same connection is not answered (the stream owns it)...
        mon.send(f'{IFACE}.GetStatus')
        other.call(f'{IFACE}.Retry', {'ifname': 'v7'})
        r = mon.recv(timeout=T(10))
        assert r.get('continues') is True and 'event' in r['parameters'], r
    # ...and the daemon is fine after the client left.
    assert_responsive(d, 'after a monitor went away')


@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_monitor_that_never_reads_is_dropped(ns, daemon, confdir):
    """With the output cap lowered to 64 KiB (a test knob; 16 MiB in production)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    for i in range(5):
        veth(ns, f'v{2 * i}', f'v{2 * i + 1}')
    d = daemon(ns, cfg, env={'BIGTCPD_VARLINK_OUTPUT_MAX': '65536'})
    mon = Client(sock(d))
    mon.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    mon.send(f'{IFACE}.Monitor', more=True)
    with Client(sock(d)) as c:
        deadline = time.monotonic() + T(30)
        while not d.log_lines('does not read its Monitor stream'):
            assert time.monotonic() < deadline, 'a Monitor client that never reads was not dropped'
            c.call(f'{IFACE}.Rollback', {})
            for i in range(10):
                c.call(f'{IFACE}.Retry', {'ifname': f'v{i}'})
        assert_responsive(d, 'a monitor did not read')
    # Its connection is gone: what it reads ends.
    mon.sock.settimeout(10)
    with pytest.raises((Closed, ConnectionResetError)):
        while True:
            mon.recv(timeout=10)
    mon.close()


# --- authorization ------------------------------------------------------------------------------

NOBODY_CLIENT = r'''
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
out = []
for m in sys.argv[2:]:
    name, _, params = m.partition(' ')
    s.sendall(json.dumps({'method': name, 'parameters': json.loads(params or '{}')}).encode() + b'\0')
    buf = b''
    while b'\0' not in buf:
        buf += s.recv(1 << 20)
    out.append(json.loads(buf.split(b'\0')[0]))
print(json.dumps(out))
'''


def as_nobody(*argv):
    return subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', *argv],
                          capture_output=True, text=True, timeout=30)


def test_privileged_methods_need_root(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    os.chmod(d.runtime_dir.parent, 0o755)   # the harness makes it 0700
    r = as_nobody(sys.executable, '-c', NOBODY_CLIENT, str(sock(d)),
                  f'{IFACE}.GetStatus', f'{IFACE}.ListDevices {{"ifname": "v0"}}',
                  f'{IFACE}.Validate {{"policy": "version: 1"}}', f'{IFACE}.Plan',
                  f'{IFACE}.Reload', f'{IFACE}.Rollback {{"ifname": "v0"}}', f'{IFACE}.Rollback',
                  f'{IFACE}.Retry {{"ifname": "v0"}}', f'{IFACE}.Watch {{"ifname": "v0"}}')
    assert r.returncode == 0, r.stderr
    replies = json.loads(r.stdout)
    assert [x.get('error') for x in replies[:4]] == [None] * 4, replies[:4]
    assert replies[0]['parameters']['ready'] is True
    assert [x.get('error') for x in replies[4:]] == ['org.varlink.service.PermissionDenied'] * 5
    assert d.log_lines(r'Reload refused to pid \d+ uid 65534')
    # Nothing happened to the device.
    with Client(sock(d)) as c:
        assert c.call(f'{IFACE}.ListDevices', {'ifname': 'v0'})['devices'][0]['state'] in ('probation', 'applied')


# --- hostile clients ----------------------------------------------------------------------------

@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_half_a_message_then_idle(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    data = Client.encode(f'{IFACE}.GetStatus')
    idle = [Client(sock(d)) for _ in range(8)]
    for c in idle:
        c.send_raw(data[:len(data) // 2])
    assert_responsive(d, 'clients idle in the middle of a message')
    for c in idle:   # the rest arrives, much later: one call
        c.send_raw(data[len(data) // 2:])
        assert c.recv(timeout=5)['parameters']['ready'] is True
        c.close()


@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_client_that_never_reads_its_replies(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    c = Client(sock(d))
    c.sock.setblocking(False)
    call = Client.encode(f'{IFACE}.ListDevices')
    data = call * 64
    sent, stalls, off = 0, 0, 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline or off:
        try:
            n = c.sock.send(data[off:])
            sent += n
            off = (off + n) % len(data)
        except BlockingIOError:
            stalls += 1
            time.sleep(0.01)
            if time.monotonic() > deadline + T(5):
                break
    # The daemon stopped reading its calls: the kernel pushes back on the client.
    print(f'never-reading client: {sent} bytes of calls taken, {stalls} stalls')
    assert stalls > 0, f'{sent} bytes of calls accepted without back-pressure'
    assert sent < 32 << 20, f'{sent} bytes of calls taken from a client that reads nothing'
    assert_responsive(d, 'a client does not read its replies')
    # It still gets every reply, in order, once it reads.
    c.sock.setblocking(True)
    c.sock.settimeout(10)
    assert sent % len(call) == 0
    for _ in range(sent // len(call)):
        assert len(c.recv()['parameters']['devices']) == 5
    c.close()


@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_twenty_mebibytes_without_a_nul(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    c = Client(sock(d))
    result = {}

    def flood():
        chunk = b'{"method": "' + b'x' * (1 << 20)
        total = 0
        try:
            for _ in range(20):
                c.sock.sendall(chunk)
                total += len(chunk)
        except OSError as e:
            result['error'] = e
        result['sent'] = total

    t = threading.Thread(target=flood)
    t.start()
    assert_responsive(d, 'a client sends 20 MiB without a NUL')
    t.join(T(20))
    assert not t.is_alive()
    # The daemon refused the message and closed: the client saw its error, or a reset.
    try:
        r = c.recv(timeout=5)
        print(f'20 MiB client: {result}, reply {r}')
        assert r == {'error': f'{IFACE}.MessageTooLarge', 'parameters': {'max': 2 * 1024 * 1024}}, r
        with pytest.raises((Closed, ConnectionResetError)):
            c.recv(timeout=5)
    except (ConnectionResetError, Closed):
        assert 'error' in result, result
    c.close()
    assert_responsive(d, 'after the 20 MiB client')


@pytest.mark.parametrize('data,reason', [
    (b'{"method": "io.bigtcpd.Manager.GetStatus",}\0', None),
    (b'not json\0', None),
    (b'[1, 2]\0', 'a call must be a JSON object'),
    (b'{"parameters": {}}\0', 'a call needs a "method" string'),
    (b'{"method": "org.varlink.service.GetInfo"} {}\0', None),
    (b'{"method": "org.varlink.service.GetInfo", "more": "yes"}\0', None),
    (b'{"method": "org.varlink.service.GetInfo", "parameters": []}\0', None),
    (b'{"method": "\xff\xfe"}\0', None),
    (b'[' * 100000 + b']' * 100000 + b'\0', 'JSON nested too deep'),
    (b'{"method": "org.varlink.service.GetInfo", "parameters": ' + b'{"a": ' * 70 + b'1' + b'}' * 71 + b'\0',
     'JSON nested too deep'),
], ids=['trailing-comma', 'not-json', 'array', 'no-method', 'trailing-data', 'more-not-bool',
        'parameters-not-object', 'invalid-utf8', 'deep-100000', 'deep-parameters'])
@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_invalid_input_gets_an_error_and_a_closed_connection(ns, daemon, confdir, data, reason):
    d, _ = start(ns, daemon, confdir)
    with Client(sock(d)) as c:
        # A good call first: its reply still comes, before the error.
        c.send_raw(Client.encode('org.varlink.service.GetInfo') + data + Client.encode(f'{IFACE}.GetStatus'))
        assert 'interfaces' in c.recv(timeout=5)['parameters']
        r = c.recv(timeout=5)
        assert r['error'] == f'{IFACE}.ProtocolError', r
        if reason:
            assert r['parameters']['reason'] == reason
        with pytest.raises(Closed):
            c.recv(timeout=5)
    assert_responsive(d, 'after invalid input')


NOBODY_FLOOD = r'''
import json, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
conns, refused = [], 0
for i in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    conns.append(s)
# A call on each: the refused ones answer TooManyConnections and are closed.
ok = 0
for s in conns:
    s.settimeout(5)
    try:
        s.sendall(b'{"method": "org.varlink.service.GetInfo"}\0')
        buf = b''
        while b'\0' not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        r = json.loads(buf.split(b'\0')[0]) if buf else {}
    except OSError:
        r = {}
    if 'parameters' in r and 'error' not in r:
        ok += 1
    else:
        refused += 1
print(json.dumps({'ok': ok, 'refused': refused}), flush=True)
sys.stdin.read()   # hold them until told
'''


@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_hundreds_of_connections(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    os.chmod(d.runtime_dir.parent, 0o755)
    flood = subprocess.Popen(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', sys.executable,
                              '-c', NOBODY_FLOOD, str(sock(d)), '300'],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = flood.stdout.readline()
        assert line, 'the flooding client died'
        counts = json.loads(line)
        assert counts == {'ok': 32, 'refused': 268}, counts
        # Root is not counted against that UID, and gets answered at once.
        assert_responsive(d, 'another UID holds 32 connections and was refused 268 more')
        # Root's own connections: up to the total.
        mine = [Client(sock(d)) for _ in range(200)]
        assert_responsive(d, f'{32 + 200} connections are open')
        for c in mine[:20]:
            assert c.call('org.varlink.service.GetInfo')['product']
        for c in mine:
            c.close()
    finally:
        flood.stdin.close()
        flood.wait(10)
        flood.stdout.close()
    assert d.log_lines(r'uid 65534 has 32 connections open, refusing more')
    assert_responsive(d, 'after the flood')


@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_oversized_message_with_its_nul(ns, daemon, confdir):
    d, _ = start(ns, daemon, confdir)
    with Client(sock(d)) as c:
        big = json.dumps({'method': f'{IFACE}.Validate', 'parameters': {'policy': 'x' * (3 << 20)}}).encode()
        try:
            c.send_raw(big + b'\0')
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            r = c.recv(timeout=5)
            assert r == {'error': f'{IFACE}.MessageTooLarge', 'parameters': {'max': 2 * 1024 * 1024}}, r
        except (ConnectionResetError, Closed):
            pass   # closed before the client could read the reason: also a refusal
        assert d.log_lines(r'sent a message over 2097152 bytes, closing')
    # Just under the cap is a call like any other (a policy of 1 MiB and more is refused by the parser).
    with Client(sock(d)) as c:
        v = c.call(f'{IFACE}.Validate', {'policy': '#' * ((2 << 20) - 200)})
        assert v['valid'] is False and 'too large' in v['errors'][0]['message']
    assert_responsive(d, 'after an oversized message')


def test_socket_activation(ns, confdir, tmp_path):
    """systemd passes the socket (FileDescriptorName=varlink); the daemon uses it and binds
    nothing itself. systemd-socket-activate plays systemd: it starts the daemon on the first
    connection."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    veth(ns, 'v0', 'v1')
    short = Path(tempfile.mkdtemp(prefix='bt-', dir='/tmp'))
    path, rundir = short / 'activated.sock', short / 'run'
    log = tmp_path / 'activated.log'
    env = {k: v for k, v in os.environ.items() if not k.startswith(('LISTEN_', 'NOTIFY_SOCKET'))}
    # The notify socket systemd would give: READY=1 says when the first reconcile is done.
    notify_path = short / 'notify'
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    notify.bind(str(notify_path))
    with open(log, 'wb') as out:
        proc = subprocess.Popen(['ip', 'netns', 'exec', ns, 'systemd-socket-activate', '-l', str(path),
                                 '--fdname=varlink', f'--setenv=NOTIFY_SOCKET={notify_path}', str(helpers.BIN),
                                 '--config', str(cfg), '--runtime-dir', str(rundir)], stdout=out,
                                stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def listening():
            assert proc.poll() is None, log.read_text()
            return path.exists()
        helpers.wait_file(short, listening, 10, lambda: f'{path} not created\n{log.read_text()}', directory=True)
        # bind(2) makes the path, listen(2) follows it and makes no event: refused in between
        until = time.monotonic() + T(5)
        while True:
            try:
                client = Client(path)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < until and proc.poll() is None, log.read_text()
                time.sleep(0.005)
        with client as c:   # the daemon starts now and answers on the passed socket
            assert c.call('org.varlink.service.GetInfo')['product'] == 'bigtcpd'
            deadline = time.monotonic() + T(10)
            notes = []
            while 'READY=1' not in notes:
                left = deadline - time.monotonic()
                assert left > 0 and proc.poll() is None, f'no READY=1; notify: {notes}\n{log.read_text()}'
                if select.select([notify], [], [], left)[0]:
                    notes += notify.recv(65536).decode(errors='replace').split('\n')
            assert c.call(f'{IFACE}.GetStatus')['ready'] is True
            assert c.call(f'{IFACE}.ListDevices', {'ifname': 'v0'})['devices'][0]['policy'] == 'big'
        assert not (rundir / IFACE).exists()
        assert 'listening on the socket passed by systemd' in log.read_text()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(T(10))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        notify.close()
        shutil.rmtree(short, ignore_errors=True)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert not [l for l in text.splitlines() if any(m in l for m in helpers.SANITIZER_MARKERS)], text


@pytest.mark.serial  # GetStatus within 100 ms (assert_responsive)
def test_random_garbage_does_not_hurt(ns, daemon, confdir):
    """Mutated calls and random bytes (a fixed seed): every connection ends with replies or a
    clean close, and the daemon answers everyone else throughout."""
    import random
    rnd = random.Random(4)
    d, _ = start(ns, daemon, confdir)
    good = [Client.encode(f'{IFACE}.ListDevices', {'ifname': 'v0'}), Client.encode(f'{IFACE}.Plan'),
            Client.encode(f'{IFACE}.Validate', {'policy': POLICY}), Client.encode('org.varlink.service.GetInfo'),
            Client.encode(f'{IFACE}.Monitor', more=True), Client.encode(f'{IFACE}.Retry', {'ifname': 'k0'})]
    for i in range(150):
        data = bytearray(rnd.choice(good))
        for _ in range(rnd.randrange(1, 6)):
            op, pos = rnd.randrange(4), rnd.randrange(len(data))
            if op == 0:
                data[pos] = rnd.randrange(256)
            elif op == 1:
                del data[pos]
            elif op == 2:
                data[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 8)))
            else:
                data[pos:pos] = rnd.choice(good)
        if i % 10 == 0:
            data = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 5000)))
        with Client(sock(d), timeout=5) as c:
            c.sock.sendall(bytes(data) + Client.encode(f'{IFACE}.GetStatus'))
            c.sock.shutdown(socket.SHUT_WR)
            try:
                while True:
                    c.recv(timeout=5)       # replies, then the end: never a hang
            except (Closed, ConnectionResetError):
                pass
            except socket.timeout:
                # Only a Monitor stream may stay open.
                assert b'Monitor' in data, bytes(data)[:200]
        if i % 25 == 0:
            assert_responsive(d, 'random input')
    assert d.running()
    assert_responsive(d, 'after random input')


def test_monitor_no_event_fails_on_a_closed_stream():
    """The suite's own Monitor.no_event: a stream that ended saw no event, which proves nothing;
    it must fail, not answer "nothing happened". A fake server answers the subscription, then
    closes the connection."""
    where = Path(tempfile.mkdtemp(prefix='bt-fake.', dir='/tmp'))
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        srv.bind(str(where / 'sock'))
        srv.listen(1)

        def serve():
            conn, _ = srv.accept()
            with conn:
                buf = b''
                while b'\0' not in buf:
                    buf += conn.recv(4096)
                conn.sendall(json.dumps({'parameters': {'event': 'subscribed'}, 'continues': True}).encode() + b'\0')
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        mon = helpers.Monitor(where / 'sock', seed=False)
        try:
            t.join(T(5))
            with pytest.raises(AssertionError, match='closed'):
                mon.no_event(lambda e: True, 5)
        finally:
            mon.close()
    finally:
        srv.close()
        shutil.rmtree(where, ignore_errors=True)
