"""Other network namespaces: pods made as a CNI plugin makes them (`ip netns add`, a veth whose
peer is moved into the pod), their pod ends written by the daemon that runs in the host's
namespace, read back inside each pod with the tests' own netlink code.

The daemon looks in /run/netns (where `ip netns add` puts them); the policies name only this
run's namespaces (BT_NETNS_PREFIX), so namespaces of other runs there are never entered."""

import errno
import json
import os
import re
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import nl
from helpers import (NETNS_PREFIX, Iperf, Monitor, T, assert_sizes, at, children, ip, ip_batch, policy_text, run,
                     set_and_check, sizes4, wait_file, write_file_atomic)
from policies import HDR_GUARD, standard_policy
from test_bigtcpctl import CTL
from test_dbus import bus, bus_factory, busdir  # noqa: F401  (the system bus of its own, as fixtures)
from test_dbus import Monitor as BusMonitor
from test_dbus import call, changed, prop, wait_serving
from test_evidence import cpu_seconds, packet_sockets
from inject import mac_of
from varlink_client import Client

# The daemon watches /run/netns, where every test makes its namespaces, and its policies name
# the pods of this module (POD_GLOB): two of its tests side by side would see each other's pods.
# One process runs them all, one after the other.
pytestmark = pytest.mark.xdist_group('netns')

HOST_SIZE = 150000
POD_SIZE = 185000
DISTINCT = sizes4(60000, 60001, 60002, 60003)

POD_GLOB = f'{NETNS_PREFIX}pod-*'


def policy(pod_size=POD_SIZE, pods=True):
    pod = f'''
      - name: pods
        match:
          netns: ["{POD_GLOB}"]
          name: [eth0]
        ipv6: {{gso-max-size: {pod_size}, gro-max-size: {pod_size}}}
        ipv4: {{gso-max-size: {pod_size}, gro-max-size: {pod_size}}}''' if pods else ''
    return policy_text(f'''
    version: 1
    policies:
      - name: host-ends
        match:
          name: ["vh*"]
        ipv6: {{gso-max-size: {HOST_SIZE}, gro-max-size: {HOST_SIZE}}}
        ipv4: {{gso-max-size: {HOST_SIZE}, gro-max-size: {HOST_SIZE}}}''' + pod + '\n')


def pods_only(**kw):
    """A policy of the pods' eth0 alone (nothing in the daemon's own namespace) at POD_SIZE
    (standard_policy's keywords: ipv4, rollback)."""
    return standard_policy('pods', (f'netns: ["{POD_GLOB}"]', 'name: [eth0]'), POD_SIZE, **kw)


class Pods:
    """Pod namespaces named PREFIX<kind>-<random>, each with eth0, the peer of a veth whose other
    end (vh<n>) stays in the host's namespace; every one removed at the end."""

    def __init__(self, host):
        self.host = host
        self.names = []
        self.n = 0

    def add(self, kind='pod', distinct=True):
        name = f'{NETNS_PREFIX}{kind}-{secrets.token_hex(3)}'
        run('ip', 'netns', 'add', name)
        self.names.append(name)
        host_if = f'vh{self.n}'
        self.n += 1
        ip(self.host, 'link', 'add', host_if, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', name)
        if distinct:
            set_and_check(name, 'eth0', DISTINCT)
            set_and_check(self.host, host_if, DISTINCT)
        return name, host_if

    def delete(self, name):
        run('ip', 'netns', 'del', name)
        self.names.remove(name)

    def close(self):
        errors = []
        for name in self.names:
            r = subprocess.run(['ip', 'netns', 'del', name], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f'ip netns del {name}: {r.stderr.strip()}')
        self.names = []
        assert not errors, errors


@pytest.fixture
def pods(ns):
    p = Pods(ns)
    try:
        yield p
    finally:
        p.close()


def start(daemon, ns, cfg, packet_sockets=False, **kw):
    """The daemon watching /run/netns; with packet_sockets, counting with the packet sockets made in
    each namespace (--observer=packet-socket: the fallback, what these tests are about) rather than
    with the eBPF observer, which needs none."""
    args = ('--netns-dir', '/run/netns') + (('--observer', 'packet-socket') if packet_sockets else ())
    return daemon(ns, cfg, extra_args=args, **kw)


def eth0(name):
    return nl.sizes_of(nl.read_links(name)['eth0'])


def wait_eth0(name, sizes, what):
    nl.wait_links(name, at({'eth0': sizes}), T(10), what)


def one_pod(ns, pods, daemon, confdir):
    """The standard policy, one pod, the daemon started and the pod end written."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, h1 = pods.add()
    d = start(daemon, ns, cfg)
    wait_eth0(p1, sizes4(POD_SIZE), p1)
    return d, p1, h1


def ctl(d, ns, *args):
    """bigtcpctl against the daemon, run in its namespace."""
    r = subprocess.run(['ip', 'netns', 'exec', ns, str(CTL), '--socket', str(d.runtime_dir / 'io.bigtcpd.Manager'),
                        *args], capture_output=True, text=True, timeout=T(20))
    assert r.returncode == 0, r.stderr
    return r.stdout


def list_devices(d):
    with Monitor(d, seed=False) as m:
        return m.call('io.bigtcpd.Manager.ListDevices')['devices']


def test_pods_at_start_and_later_host_ends_and_unmatched(ns, pods, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, h1 = pods.add()
    p2, h2 = pods.add()
    other, h3 = pods.add('other')

    d = start(daemon, ns, cfg)
    # READY=1 comes once every namespace's first reconcile is acknowledged: no waiting here
    for p in (p1, p2):
        assert eth0(p) == sizes4(POD_SIZE), f'the pod end in {p} right after READY=1'
    assert_sizes(ns, {h1: sizes4(HOST_SIZE), h2: sizes4(HOST_SIZE), h3: sizes4(HOST_SIZE)},
                 'host ends follow the host policy')

    # a pod made while the daemon runs: its namespace file is made, then mounted on
    p4, h4 = pods.add(distinct=False)
    wait_eth0(p4, sizes4(POD_SIZE), 'a pod created after start')
    nl.wait_links(ns, at({h4: sizes4(HOST_SIZE)}), T(10), 'its host end')

    # the unmatched namespace was never entered, so never written
    assert eth0(other) == DISTINCT
    log = d.log()
    assert f'netns {other}' not in log, log
    assert f'netns {p4}: managing it' in log
    devs = list_devices(d)
    by = {(x['netns'], x['ifname']): x for x in devs}
    for p in (p1, p2, p4):
        assert by[(p, 'eth0')]['state'] in ('probation', 'applied'), by[(p, 'eth0')]
        assert by[(p, 'eth0')]['policy'] == 'pods'
        assert by[(p, 'eth0')]['original']['gso_max_size'] == (DISTINCT[0] if p != p4 else 65536)
    assert (other, 'eth0') not in by
    assert by[('host', h1)]['policy'] == 'host-ends'
    # the pod's own lo is not taken by a name glob there either
    assert by[(p1, 'lo')]['state'] == 'unmanaged'


def running_pods(ns, pods, daemon, confdir, n):
    """`n` pods, the daemon on policy(), every pod's eth0 at POD_SIZE: the policy file, the pods'
    names, the daemon."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    names = [pods.add()[0] for _ in range(n)]
    d = start(daemon, ns, cfg)
    for p in names:
        wait_eth0(p, sizes4(POD_SIZE), p)
    return cfg, names, d


def test_policy_edit_reaches_every_running_pod(ns, pods, daemon, confdir):
    cfg, names, d = running_pods(ns, pods, daemon, confdir, 3)
    d.reload(lambda: write_file_atomic(cfg, policy(pod_size=120000)))
    # the reload's READY=1 waits for every namespace too
    for p in names:
        assert eth0(p) == sizes4(120000), f'{p} right after the reload'
    # taking the pods out of the policy gives each pod end its original back
    d.reload(lambda: write_file_atomic(cfg, policy(pods=False)))
    for p in names:
        wait_eth0(p, DISTINCT, f'{p} restored')
    assert d.running()


def test_pod_deleted_while_managed(ns, pods, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, _ = pods.add()
    p2, _ = pods.add()
    d = start(daemon, ns, cfg)
    wait_eth0(p1, sizes4(POD_SIZE), p1)
    wait_eth0(p2, sizes4(POD_SIZE), p2)
    with Monitor(d) as m:
        pods.delete(p1)
        m.wait_until(lambda m: not any(x.get('netns') == p1 for x in
                                     m.call('io.bigtcpd.Manager.ListDevices')['devices']),
                     T(10), f'{p1} forgotten')
    wait_file(d.log_path, lambda: d.log_lines(f'netns {p1}: let go'), 10, f'{p1} let go')
    # the other pod is still managed: a size changed there is put back by a reload's re-read
    set_and_check(p2, 'eth0', DISTINCT)
    d.reload()
    wait_eth0(p2, sizes4(POD_SIZE), f'{p2} still managed')
    assert d.running()
    lines = d.log_lines(f'netns {p1}: its file is gone')
    assert len(lines) == 1, d.log()
    # its device was given its originals back (it lived on in bigtcpd's sockets), and its state went
    assert d.log_lines(f'{p1}/eth0: original sizes restored'), d.log()
    assert len(os.listdir(d.runtime_dir / 'netns')) == 1


class Kept:
    """A namespace's file bind-mounted at `path` as well, so that it lives on without /run/netns."""

    def __init__(self, name, path):
        self.path = path
        path.touch()
        run('mount', '--bind', f'/run/netns/{name}', path)

    def close(self):
        run('umount', self.path)


def test_pod_file_gone_while_the_namespace_lives_gets_its_originals_back(ns, pods, daemon, confdir, tmp_path):
    """ip netns del while the namespace lives on (here: a bind-mount elsewhere): bigtcpd's sockets
    are still in it, so what it wrote goes back before it lets the namespace go."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    kept = Kept(p1, tmp_path / 'kept')
    try:
        pods.delete(p1)
        nl.wait_links(str(kept.path), at({'eth0': DISTINCT}), T(10), 'the originals back once the file went')
        wait_file(d.log_path, lambda: d.log_lines(f'netns {p1}: let go'), 10, f'{p1} let go')
        assert not os.listdir(d.runtime_dir / 'netns')   # every device restored: no state to keep
        assert d.running()
    finally:
        kept.close()


def test_state_of_a_pod_not_visible_at_start_is_kept_and_used_when_it_appears(ns, pods, daemon, confdir, tmp_path):
    """A namespace bigtcpd wrote to, whose file is not there when bigtcpd starts (mounted later,
    elsewhere): its state survives the start and gives its devices their originals when it is."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    cfg = confdir / 'bigtcpd.yaml'
    runtime = d.runtime_dir
    d.stop()
    kept = Kept(p1, tmp_path / 'kept')
    try:
        run('umount', f'/run/netns/{p1}')   # an empty file is left: not a namespace
        cfg.write_text(policy(pods=False))
        d2 = start(daemon, ns, cfg, runtime_dir=runtime)
        assert len(os.listdir(runtime / 'netns')) == 1, 'the state of a namespace not visible survives the start'
        assert len(d2.log_lines('keeping its state for when it is')) == 1, d2.log()
        run('mount', '--bind', kept.path, f'/run/netns/{p1}')
        wait_eth0(p1, DISTINCT, 'its originals, from the state kept, once it appeared')
        assert f'netns {p1}: original sizes of 1 device recorded by an earlier run' in d2.log()
        # no policy names it: once restored it is let go, with its state
        wait_file(d2.log_path, lambda: d2.log_lines(f'netns {p1}: let go'), 10, f'{p1} let go')
        assert not os.listdir(runtime / 'netns')
    finally:
        kept.close()


def test_restart_keeps_pod_originals(ns, pods, daemon, confdir):
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    cfg = confdir / 'bigtcpd.yaml'
    runtime = d.runtime_dir
    d.stop()
    assert eth0(p1) == sizes4(POD_SIZE)   # a stop leaves the sizes as they are
    cfg.write_text(policy(pods=False))
    d2 = start(daemon, ns, cfg, runtime_dir=runtime)
    wait_eth0(p1, DISTINCT, 'the original back after a restart without the pod policy')
    assert f'netns {p1}: original sizes of 1 device recorded by an earlier run' in d2.log()


def test_state_of_a_pod_gone_while_stopped_is_kept(ns, pods, daemon, confdir):
    """Nothing tells a namespace that went from one that lives on without its file: the state of
    one that is not there at start stays (and the others' originals are known)."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    p2, _ = pods.add(distinct=False)   # made while the daemon runs: written at once, from 65536
    wait_eth0(p2, sizes4(POD_SIZE), p2)
    runtime = d.runtime_dir
    assert len(os.listdir(runtime / 'netns')) == 2
    d.stop()
    pods.delete(p1)
    d2 = start(daemon, ns, confdir / 'bigtcpd.yaml', runtime_dir=runtime)
    assert len(d2.log_lines('keeping its state for when it is')) == 1, d2.log()
    assert len(os.listdir(runtime / 'netns')) == 2
    assert f'netns {p2}: original sizes of 1 device recorded by an earlier run' in d2.log()
    dev = [x for x in list_devices(d2) if x['netns'] == p2 and x['ifname'] == 'eth0'][0]
    assert dev['original']['gso_max_size'] == 65536


def test_pod_recreated_under_the_same_name_while_stopped_gets_no_originals_of_the_old(ns, pods, daemon, confdir):
    """p1 (eth0, originals DISTINCT) is written; bigtcpd stops; p1 is deleted and a new pod made
    under the same name, its eth0 with the same name, ifindex and MAC as the old one (a device
    that looks the same in every way but its namespace) and other originals. The restarted
    daemon must not take the old pod's records for the new one: the new eth0's originals are its
    own, and it gets them back when the policy stops matching."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    cfg = confdir / 'bigtcpd.yaml'
    runtime = d.runtime_dir
    old = nl.read_links(p1)['eth0']
    old_mac = mac_of(p1, 'eth0')
    d.stop()
    pods.delete(p1)

    run('ip', 'netns', 'add', p1)
    pods.names.append(p1)
    ip(ns, 'link', 'add', 'vhnew', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', p1)
    ip(p1, 'link', 'set', 'eth0', 'address', old_mac.hex(':'))
    mine = sizes4(50000, 50001, 50002, 50003)
    set_and_check(p1, 'eth0', mine)
    assert nl.read_links(p1)['eth0']['ifindex'] == old['ifindex'] and mac_of(p1, 'eth0') == old_mac

    d2 = start(daemon, ns, cfg, runtime_dir=runtime)
    assert eth0(p1) == sizes4(POD_SIZE), 'the new pod end right after READY=1'
    dev = [x for x in list_devices(d2) if x.get('netns') == p1 and x['ifname'] == 'eth0'][0]
    assert nl.sizes_of(dev['original']) == mine, f'the new eth0 took the old pod\'s originals: {dev}'
    d2.reload(lambda: write_file_atomic(cfg, policy(pods=False)))
    wait_eth0(p1, mine, f'the new eth0 of {p1} back at its own originals, not the old pod\'s')
    d2.stop()


def test_plan_names_the_namespace(ns, pods, daemon, confdir):
    d, p1, h1 = one_pod(ns, pods, daemon, confdir)
    with Monitor(d, seed=False) as m:
        plan = m.call('Plan', {'policy': policy(pod_size=120000)})
    by = {(x['netns'], x['ifname']): x for x in plan['devices']}
    assert by[(p1, 'eth0')]['action'] == 'write', by[(p1, 'eth0')]
    assert by[(p1, 'eth0')]['desired']['gso_max_size'] == 120000
    assert by[('host', h1)]['action'] == 'none'
    assert by[(p1, 'lo')]['policy'] is None


def test_bigtcpctl_names_the_namespace(ns, pods, daemon, confdir):
    d, p1, h1 = one_pod(ns, pods, daemon, confdir)
    out = ctl(d, ns, 'list')
    header = out.splitlines()[0].split()
    assert header[0] == 'NETNS', out
    assert any(line.split()[0] == p1 and line.split()[2] == 'eth0' for line in out.splitlines()[1:]), out
    # the columns of --no-legend are those of a host without namespaces (test_bigtcpctl.py):
    # NETNS IDX LINK KIND STATE POLICY GSO GRO GSO4 GRO4 TSO, "host" for bigtcpd's own
    rows = [l.split() for l in ctl(d, ns, '--no-legend', 'list').splitlines()]
    assert rows and all(len(r) == 11 for r in rows), rows
    assert {r[0] for r in rows} >= {'host', p1} and [r[2] for r in rows if r[0] == p1].count('eth0') == 1, rows
    plan = ctl(d, ns, 'plan', '--all').split('\n\n')[0].splitlines()
    assert plan[0].split()[:3] == ['NETNS', 'IDX', 'LINK'], plan
    assert any(l.split()[0] == p1 and l.split()[2] == 'eth0' for l in plan[1:]), plan
    shown = ctl(d, ns, 'show', f'{p1}/eth0')
    assert p1 in shown and f'pods (matched by netns {POD_GLOB}, name eth0)' in shown, shown
    j = json.loads(ctl(d, ns, '--json', 'show', f'{p1}/eth0'))
    devs = j['devices'] if isinstance(j, dict) and 'devices' in j else [j]
    assert devs[0]['netns'] == p1 and devs[0]['ifname'] == 'eth0', j
    j = json.loads(ctl(d, ns, '--json', 'list'))
    devs = j['devices'] if isinstance(j, dict) else j
    assert {(x['netns'], x['ifname']) for x in devs} >= {(p1, 'eth0'), ('host', h1)}


def test_show_reads_a_pod_device_first(ns, pods, daemon, confdir):
    """The kernel sends no event when only a size changes: show reads the device before it
    answers, a pod's through the pod's own socket. The pod's lo is unmanaged (no put-back)."""
    d, p1, h1 = one_pod(ns, pods, daemon, confdir)
    before = json.loads(ctl(d, ns, '--json', 'show', f'{p1}/lo'))
    before = (before['devices'] if isinstance(before, dict) and 'devices' in before else [before])[0]
    assert before['state'] == 'unmanaged' and before['current']['gso_max_size'] != DISTINCT[0], before
    set_and_check(p1, 'lo', DISTINCT)
    j = json.loads(ctl(d, ns, '--json', 'show', f'{p1}/lo'))
    dev = (j['devices'] if isinstance(j, dict) and 'devices' in j else [j])[0]
    assert sizes4(*[dev['current'][k] for k in nl.SIZES]) == DISTINCT, dev
    assert eth0(p1) == sizes4(POD_SIZE)


def guarded_policy():
    return pods_only(rollback=('window: 20s', 'interval: 200ms', *HDR_GUARD))


def test_guard_rise_in_one_pod_rolls_back_that_pod_only(ns, pods, daemon, confdir):
    import inject
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(guarded_policy())
    p1, h1 = pods.add()
    p2, h2 = pods.add()
    for p, h in ((p1, h1), (p2, h2)):
        ip(ns, 'link', 'set', h, 'up')
        ip(p, 'link', 'set', 'eth0', 'up')
    d = start(daemon, ns, cfg, packet_sockets=True)
    for p in (p1, p2):
        wait_eth0(p, sizes4(POD_SIZE), p)
    with Monitor(d, seed=False) as m:
        def states(m):
            return {(x['netns'], x['ifname']): x['state'] for x in m.call('ListDevices')['devices']}
        m.wait_until(lambda m: states(m).get((p1, 'eth0')) == 'probation' and
                     states(m).get((p2, 'eth0')) == 'probation', T(10), 'both pod ends in probation')
        # Evidence counts a pod's devices from a socket made in the pod (its ifindexes are its
        # own there): one bound in each pod, none in the daemon's namespace for them
        assert packet_sockets(ns) == [], f'a packet socket in {ns} for a pod end in probation'
        for p in (p1, p2):
            # its socket may come after the write (made by the child, when none was ready)
            wait_file(d.log_path, lambda: f'{p}/eth0: evidence: counting' in d.log(), 10, f'{p}/eth0 counted')
            assert len(packet_sockets(p)) == 1, f'no packet socket in {p} for its end in probation'

        before = inject.snmp_counter(p1, 'Ip.InHdrErrors')
        bad = inject.ipv4_frame(inject.mac_of(p1, 'eth0'), inject.mac_of(ns, h1), '10.9.0.1', '10.9.0.2',
                                bad_header=True)
        inject.send_frames(ns, h1, [bad] * 50)
        assert inject.snmp_counter(p1, 'Ip.InHdrErrors') - before >= 40, 'the error source did not work'
        assert inject.snmp_counter(p2, 'Ip.InHdrErrors') == 0

        wait_eth0(p1, DISTINCT, f'{p1} rolled back')
        m.wait_until(lambda m: states(m).get((p1, 'eth0')) == 'rolled-back', T(10), f'{p1} rolled back')
        dev = [x for x in m.call('ListDevices')['devices'] if x['netns'] == p1 and x['ifname'] == 'eth0'][0]
        assert dev['last_rollback']['counter'] == 'Ip.InHdrErrors'
        assert dev['last_rollback']['namespace_wide'] is True
        # the other pod, whose counters did not move, stays where the policy put it
        assert states(m)[(p2, 'eth0')] == 'probation'
    assert eth0(p2) == sizes4(POD_SIZE)
    # status counts the other namespaces apart and names the device rolled back
    with Monitor(d, seed=False) as m:
        status = m.call('GetStatus')
    assert status['netns']['managed'] == 2
    assert status['netns']['devices']['rolled-back'] == 1 and status['netns']['rollbacks'] == 1, status['netns']
    assert status['devices']['rolled-back'] == 0
    assert status['state'] == 'degraded', 'a pod end rolled back is a device rolled back'
    out = ctl(d, ns, 'status')
    assert any(l.split(':', 1)[0].strip() == 'Namespaces' and '2 other namespaces' in l and '1 rolled-back' in l
               for l in out.splitlines()), out
    assert any(l.split(':', 1)[0].strip() == 'Rolled back' and f'{p1}/eth0' in l for l in out.splitlines()), out


def test_device_moved_between_namespaces_keeps_its_originals(ns, pods, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    moving = policy().replace('name: [eth0]', 'name: [eth0, "m*"]')
    cfg.write_text(moving)
    a, _ = pods.add()
    b, _ = pods.add()
    other, _ = pods.add('other')
    ip(a, 'link', 'add', 'm0', 'type', 'veth', 'peer', 'name', 'm1')
    ip(a, 'link', 'add', 'm2', 'type', 'veth', 'peer', 'name', 'm3')
    for dev in ('m0', 'm1', 'm2', 'm3'):
        set_and_check(a, dev, DISTINCT)
    d = start(daemon, ns, cfg)
    nl.wait_links(a, at({dev: sizes4(POD_SIZE) for dev in ('m0', 'm1', 'm2', 'm3')}), T(10), 'written in a')

    ip(a, 'link', 'set', 'm0', 'netns', b)
    nl.wait_links(b, at({'m0': sizes4(POD_SIZE)}), T(10), 'm0 arrived in b')
    with Monitor(d, seed=False) as m:
        def dev(m, netns, name):
            for x in m.call('ListDevices')['devices']:
                if x['netns'] == netns and x['ifname'] == name:
                    return x
            return None
        m.wait_until(lambda m: (dev(m, b, 'm0') or {}).get('original') is not None and
                     dev(m, b, 'm0')['original']['gso_max_size'] == DISTINCT[0], T(10),
                     'm0 in b with its original from a')
        assert dev(m, a, 'm0') is None

    # to a namespace no policy names: logged with what is lost
    ip(a, 'link', 'set', 'm2', 'netns', other)
    lost = (rf'{a}/m2: moved to a namespace bigtcpd does not manage; its original sizes are lost '
            r'\(gso_max_size 60000, gro_max_size 60001')
    wait_file(d.log_path, lambda: d.log_lines(lost), 10, 'the lost originals of m2 logged')
    assert eth0(other) == DISTINCT   # that namespace still is not entered

    # no policy for pods any more: each device gets its originals back where it lives now
    d.reload(lambda: write_file_atomic(cfg, policy(pods=False)))
    nl.wait_links(b, at({'m0': DISTINCT}), T(10), 'm0 restored in b')
    nl.wait_links(a, at({'m1': DISTINCT, 'm3': DISTINCT}), T(10), 'm1 and m3 restored in a')


def test_metrics_label_the_namespace(ns, pods, daemon, confdir):
    d, p1, h1 = one_pod(ns, pods, daemon, confdir)
    out = ctl(d, ns, 'metrics')
    lines = out.splitlines()
    assert any(l.startswith(f'bigtcpd_device_size_bytes{{netns="{p1}",ifname="eth0",policy="pods",') for l in lines), out
    # the daemon's own namespace's series are as they were
    assert any(l.startswith(f'bigtcpd_device_size_bytes{{ifname="{h1}",policy="host-ends",') for l in lines), out


def test_pod_deleted_with_writes_in_flight(ns, pods, daemon, confdir):
    """A pod with many devices, deleted as soon as the daemon begins writing them: its writes are
    queued or in flight (and the first ones in probation) when the namespace goes."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy().replace('name: [eth0]', 'name: [eth0, "w*"]'))
    p1, _ = pods.add(distinct=False)
    p2, _ = pods.add(distinct=False)
    run('ip', '-n', p1, '-batch', '-', input=''.join(f'link add w{i}a type veth peer name w{i}b\n'
                                                      for i in range(200)))
    d = start(daemon, ns, cfg, ready=False)
    wait_file(d.log_path, lambda: d.log_lines(rf'{p1}/w\d+[ab]: writing'), 20, f'writes into {p1} begun')
    pods.delete(p1)
    wait_file(d.log_path, lambda: d.log_lines(rf'netns {p1}: let go'), 20, f'{p1} let go')
    d.wait_notify('READY=1', T(20))
    wait_eth0(p2, sizes4(POD_SIZE), f'{p2} still managed')
    assert d.running()
    assert len(d.log_lines(rf'netns {p1}: its file is gone')) == 1
    # nothing about the gone namespace's devices after it was let go: no error loop, no retries
    log = d.log().splitlines()
    gone_at = next(i for i, l in enumerate(log) if f'netns {p1}: let go' in l)
    later = [l for l in log[gone_at + 1:] if p1 in l]
    assert not later, later
    assert not [l for l in log if 'error' in l.split(':', 2)[1]], log


def test_dbus_names_pod_devices_netns_slash_ifname(ns, pods, daemon, confdir, bus):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, h1 = pods.add()
    d = start(daemon, ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
    wait_serving(d, bus)
    typed = {row[1]: row for row in call(bus, 'ListDevices', user='nobody')[0]}
    assert f'{p1}/eth0' in typed and h1 in typed, sorted(typed)
    assert typed[f'{p1}/eth0'][4] == 'pods' and tuple(typed[f'{p1}/eth0'][6]) == sizes4(POD_SIZE)
    one = call(bus, 'GetDevice', 's', f'{p1}/eth0')[0]
    assert one[1] == f'{p1}/eth0' and one[4] == 'pods', one
    j = json.loads(call(bus, 'ListDevicesJSON', 's', f'{p1}/eth0')[0])['devices']
    assert [(x['netns'], x['ifname']) for x in j] == [(p1, 'eth0')]
    # an operator's rollback by that name reaches the pod's device
    call(bus, 'Rollback', 's', f'{p1}/eth0')
    wait_eth0(p1, DISTINCT, f'{p1}/eth0 rolled back over D-Bus')


def test_dbus_counts_cover_every_namespace(ns, pods, daemon, confdir, bus):
    """The D-Bus count properties sum every namespace: a pod's devices are in DevicesTotal, and the
    rollback of a pod's device is in DevicesRolledBack and Rollbacks (announced)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, _ = pods.add()
    d = start(daemon, ns, cfg, env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
    wait_eth0(p1, sizes4(POD_SIZE), p1)
    wait_serving(d, bus)
    devs = list_devices(d)
    assert any(x.get('netns') == p1 for x in devs), devs
    assert prop(bus, 'DevicesTotal') == len(devs)
    assert prop(bus, 'DevicesManaged') == len([x for x in devs if x['state'] != 'unmanaged'])
    mon = BusMonitor(bus)
    try:
        call(bus, 'Rollback', 's', f'{p1}/eth0')
        mon.wait(changed({'DevicesRolledBack': 1, 'Rollbacks': 1, 'State': 'degraded'}), 10)
    finally:
        mon.stop()
    assert prop(bus, 'DevicesRolledBack') == 1 and prop(bus, 'Rollbacks') == 1


def test_namespace_problem_coming_and_going_is_announced(ns, pods, daemon, confdir, bus):
    """Without CAP_SYS_ADMIN, a namespace that appears cannot be entered: Monitor says so at once
    ("netns-problem") and D-Bus announces State degraded; when its file goes, both say it is over.
    The namespace has no veth, so no device event comes along to carry the news."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    d = start(daemon, ns, cfg, wrapper=('setpriv', '--inh-caps=-sys_admin', '--bounding-set=-sys_admin', '--'),
              env={'DBUS_SYSTEM_BUS_ADDRESS': bus.address})
    wait_serving(d, bus)
    assert prop(bus, 'State') == 'ready'
    name = f'{NETNS_PREFIX}pod-{secrets.token_hex(3)}'
    bm = BusMonitor(bus)
    try:
        with Monitor(d, seed=False) as m:
            run('ip', 'netns', 'add', name)
            pods.names.append(name)
            ev = m.wait_for(lambda e: e.get('event') == 'netns-problem', 10, 'the problem announced')
            assert (ev['netns'], ev['problem'], ev['ok'], ev['errno']) == (name, 'cannot-enter', False,
                                                                           errno.EPERM), ev
            bm.wait(changed({'State': 'degraded'}), 10)
            pods.delete(name)
            ev = m.wait_for(lambda e: e.get('event') == 'netns-problem', 10, 'the end of the problem')
            assert (ev['netns'], ev['problem'], ev['ok']) == (name, 'cannot-enter', True), ev
            assert 'errno' not in ev, ev
            bm.wait(changed({'State': 'ready'}), 10)
            # each once
            assert len([e for e in m.events if e.get('event') == 'netns-problem']) == 2, m.events
            assert not [e for e in m.events if e.get('netns') == name and e.get('event') != 'netns-problem']
    finally:
        bm.stop()
    out = subprocess.run(['ip', 'netns', 'exec', ns, str(CTL), '--socket', str(d.runtime_dir / 'io.bigtcpd.Manager'),
                          'status'], capture_output=True, text=True, timeout=T(20)).stdout
    assert 'ready' in out, out


def test_try_and_revert_reach_every_pod(ns, pods, daemon, confdir, tmp_path):
    """bigtcpctl try runs a policy on the pods too, and its revert gives them the running one back."""
    cfg, names, d = running_pods(ns, pods, daemon, confdir, 2)
    tried = tmp_path / 'tried.yaml'
    tried.write_text(policy(pod_size=120000))
    ctl(d, ns, 'try', str(tried), '--timeout', '5m')
    for p in names:
        wait_eth0(p, sizes4(120000), f'{p} under the tried policy')
    ctl(d, ns, 'revert')
    for p in names:
        wait_eth0(p, sizes4(POD_SIZE), f'{p} after the revert')
    assert cfg.read_text() == policy()   # nothing was installed


IDLE_CPU_MAX = 0.05   # seconds of CPU over IDLE_WINDOW with nothing happening
IDLE_WINDOW = 5    # a loop on the always-readable mount table would take most of it


def idle_cpu(d):
    cpu0 = cpu_seconds(d.pid)
    time.sleep(IDLE_WINDOW)   # the measurement itself: nothing happens, and nothing is waited for
    return cpu_seconds(d.pid) - cpu0


@pytest.mark.slow
@pytest.mark.serial  # the daemon's CPU seconds while idle: no namespaces of other tests coming and going
def test_discovery_rests_with_a_netns_policy(ns, pods, daemon, confdir, tmp_path):
    """The mount table polls as readable always: the daemon watches it for its "priority" alone,
    scans once per change and uses no CPU while nothing changes, before and after a change."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    busy = idle_cpu(d)
    assert busy < IDLE_CPU_MAX, f'{busy:.2f} s of CPU in {IDLE_WINDOW} s idle with a netns policy'
    # a mount of nothing bigtcpd looks at, then a pod (ip netns add mounts its file): found, then rest
    with tempfile.TemporaryDirectory(dir=tmp_path) as where:
        run('mount', '-t', 'tmpfs', 'none', where)
        run('umount', where)
    p2, _ = pods.add(distinct=False)   # written as soon as it is found: left at 65536 until then
    wait_eth0(p2, sizes4(POD_SIZE), f'{p2}, found by the mount that made it')
    busy = idle_cpu(d)
    assert busy < IDLE_CPU_MAX, f'{busy:.2f} s of CPU in {IDLE_WINDOW} s idle after mount changes'
    assert d.running()


def add_many(pods, n):
    """n pods from two batches (the namespaces, then one veth each, whose host ends vm<i> no policy
    names): eth0 in each at 65536."""
    names = [f'{NETNS_PREFIX}pod-{secrets.token_hex(4)}' for _ in range(n)]
    run('ip', '-batch', '-', input=''.join(f'netns add {x}\n' for x in names))
    pods.names.extend(names)
    ip_batch(pods.host, [f'link add vm{i} type veth peer name eth0 netns {x}' for i, x in enumerate(names)])
    return names


def pods_at(d, names, size):
    """The names of those pods whose eth0 the daemon knows at `size` (read from the kernel)."""
    want = set(names)
    return {x['netns'] for x in list_devices(d)
            if x.get('netns') in want and x['ifname'] == 'eth0' and set(x['current'].values()) == {size}}


def status(d):
    with Monitor(d, seed=False) as m:
        return m.call('io.bigtcpd.Manager.GetStatus')


@pytest.mark.slow
def test_300_pods_under_a_soft_nofile_of_1024(ns, pods, daemon, confdir):
    """systemd's default soft RLIMIT_NOFILE (1024) holds about 140 namespaces: the daemon raises it to
    the hard limit at start, and every pod is managed."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    names = add_many(pods, 300)
    d = start(daemon, ns, cfg, wrapper=('prlimit', '--nofile=1024:8192', '--'))
    with Monitor(d, seed=False) as m:
        m.wait_until(lambda m: pods_at(d, names, POD_SIZE) == set(names), 30, 'all 300 pod ends written')
    assert status(d)['netns']['managed'] == 300
    assert not d.log_lines('not managed for now'), d.log_tail()


@pytest.mark.slow
def test_pods_beyond_the_descriptors_wait_and_are_taken_when_some_go(ns, pods, daemon, confdir):
    """With a hard limit of 320 descriptors, the pods that would eat into the reserve kept for
    control connections wait (status and control still answer), and are taken once others go."""
    limit = 280  # about 27 namespaces of NETNS_FDS (7) fit beside the reserve (64) and the rest
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    names = add_many(pods, int(os.environ.get('NSF_N', '40')))
    d = start(daemon, ns, cfg, wrapper=('prlimit', f'--nofile={limit}:{limit}', '--'))
    def budget_reached(m):
        # every pod entered has its eth0 written and every other one waits: the set is stable
        st = status(d)['netns']
        return (st['managed'] > 0 and len(pods_at(d, names, POD_SIZE)) == st['managed']
                and st['namespace_problems_total'] == 40 - st['managed'])
    with Monitor(d, seed=False) as m:
        m.wait_until(budget_reached, 10, 'some pod ends written and the others waiting')
    managed = pods_at(d, names, POD_SIZE)
    # the set is stable (no namespace is entered past the budget), and far from all of them
    st = status(d)
    assert st['netns']['managed'] == len(managed) < 30, len(managed)
    # the others are problems of the status, by name
    assert st['state'] == 'degraded'
    assert st['netns']['namespace_problems_total'] == 40 - len(managed)
    waiting = {p['netns'] for p in st['netns']['namespace_problems']}
    assert len(waiting) == 10 and not waiting & managed
    assert all(p['problem'] == 'descriptors' and 'LimitNOFILE' in p['message']
               for p in st['netns']['namespace_problems'])
    assert len(d.log_lines('not managed for now')) == 1, d.log_tail()
    # the reserve: many control connections at once still get answers
    monitors = [Monitor(d, seed=False) for _ in range(20)]
    try:
        for m in monitors:
            assert m.call('io.bigtcpd.Manager.GetStatus')['netns']['managed'] == len(managed)
    finally:
        for m in monitors:
            m.close()
    gone = sorted(managed)[:len(managed) - 2]
    run('ip', '-batch', '-', input=''.join(f'netns del {x}\n' for x in gone))
    for x in gone:
        pods.names.remove(x)
    left = [x for x in names if x not in gone]
    assert len(left) * 7 < limit - 64 - 40, 'the test must leave room for every pod left (NETNS_FDS 7)'
    with Monitor(d, seed=False) as m:
        m.wait_until(lambda m: pods_at(d, left, POD_SIZE) == set(left), 20, 'the waiting pods taken once others went')
    assert d.log_lines('no namespace waits for descriptors any more'), d.log_tail()
    st = status(d)
    assert st['state'] == 'ready' and st['netns']['namespace_problems'] == [], st['netns']


def test_pod_policy_removed_gives_back_and_lets_go(ns, pods, daemon, confdir):
    """A reload that names no namespace any more: every pod end gets its originals, the namespaces
    are let go (their sockets closed) and the directories are not watched any more."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    d.reload(write=lambda: write_file_atomic(confdir / 'bigtcpd.yaml', policy(pods=False)))
    wait_eth0(p1, DISTINCT, 'the original back once no policy names the pod')
    wait_file(d.log_path, lambda: d.log_lines(f'netns {p1}: let go'), 10, f'{p1} let go')
    wait_file(d.log_path, lambda: d.log_lines('namespace directories are not watched any more'), 10, 'the watch ended')
    assert not os.listdir(d.runtime_dir / 'netns')
    assert status(d)['netns']['managed'] == 0
    # a pod made now is not looked at (its host end vh1 is the host's: bigtcpd writes it at once)
    p2, _ = pods.add(distinct=False)
    set_and_check(p2, 'eth0', DISTINCT)
    d.reload()
    assert eth0(p2) == DISTINCT
    assert not d.log_lines(f'netns {p2}')


def test_without_cap_sys_admin_status_is_degraded_and_names_the_namespace(ns, pods, daemon, confdir):
    """The unit without the netns drop-in: a pod a policy names cannot be entered. GetStatus, bigtcpctl
    status and the metrics say so, with the namespace and the fix."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, _ = pods.add()
    d = start(daemon, ns, cfg, wrapper=('setpriv', '--inh-caps=-sys_admin', '--bounding-set=-sys_admin', '--'))
    st = status(d)
    assert st['state'] == 'degraded', st
    [p] = st['netns']['namespace_problems']
    assert (p['netns'], p['problem'], p['errno']) == (p1, 'cannot-enter', errno.EPERM), p
    assert 'CAP_SYS_ADMIN' in p['message'] and 'bigtcpd-netns.conf' in p['message'], p
    assert st['netns']['managed'] == 0 and eth0(p1) == DISTINCT
    out = ctl(d, ns, 'status')
    assert 'degraded (1 namespace not managed as it should be)' in out, out
    assert p1 in out and 'bigtcpd-netns.conf' in out, out
    assert 'bigtcpd_netns_problems 1' in ctl(d, ns, 'metrics').splitlines()
    # logged once, however many scans follow
    pods.add(distinct=False)   # the daemon runs: it writes vh1 at once (a set of ours could land before or after)
    d.reload()
    assert len(d.log_lines(f'netns {p1}: failed to enter it')) == 2   # the reload is the operator's word: tried again


def test_list_refresh_and_show_read_every_namespace_first(ns, pods, daemon, confdir):
    """The kernel sends no event when only a size changes: ListDevices with refresh dumps every
    namespace before it answers, a pod's included, and show NETNS/DEV after an outside
    `ip -n NS link set` matches the kernel."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    p2, _ = pods.add(distinct=False)
    wait_eth0(p2, sizes4(POD_SIZE), p2)
    for p in (p1, p2):
        set_and_check(p, 'lo', DISTINCT)   # unmanaged: bigtcpd puts nothing back
    with Monitor(d, seed=False) as m:
        devs = m.call('io.bigtcpd.Manager.ListDevices', {'refresh': True})['devices']
    for p in (p1, p2):
        [lo] = [x for x in devs if x.get('netns') == p and x['ifname'] == 'lo']
        assert sizes4(*[lo['current'][k] for k in nl.SIZES]) == DISTINCT, lo
    ip(p2, 'link', 'set', 'lo', 'gso_max_size', '61000')
    j = json.loads(ctl(d, ns, '--json', 'show', f'{p2}/lo'))
    dev = (j['devices'] if isinstance(j, dict) and 'devices' in j else [j])[0]
    assert dev['current']['gso_max_size'] == 61000 == nl.sizes_of(nl.read_links(p2)['lo'])[0], dev


def test_status_counts_each_namespace(ns, pods, daemon, confdir):
    """GetStatus sums the other namespaces and counts each one by name: its devices by state and its
    writes."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    p2, _ = pods.add(distinct=False)
    wait_eth0(p2, sizes4(POD_SIZE), p2)
    st = status(d)['netns']
    each = {x['netns']: x for x in st['namespaces']}
    assert set(each) == {p1, p2} and [x['netns'] for x in st['namespaces']] == sorted(each), st
    for p in (p1, p2):
        assert each[p]['devices_total'] == 2 and each[p]['writes'] == 1, each[p]   # lo and eth0; eth0 written
        assert each[p]['devices']['unmanaged'] == 1, each[p]
    assert sum(x['writes'] for x in each.values()) == st['writes']


def fds(d):
    """The daemon's descriptors and what each is."""
    out = {}
    for fd in os.listdir(f'/proc/{d.pid}/fd'):
        try:
            out[fd] = os.readlink(f'/proc/{d.pid}/fd/{fd}')
        except OSError:
            pass
    return out


def socket_inodes(d, namespaces):
    """The inodes of the daemon's unix sockets (its own namespace: the varlink connections, the
    children's socket pairs) and of the packet sockets there and in `namespaces` (evidence's)."""
    def table(ns, name):
        if ns is None:
            with open(f'/proc/{d.pid}/net/{name}') as f:
                return f.read()
        return subprocess.run(['ip', 'netns', 'exec', ns, 'cat', f'/proc/net/{name}'], capture_output=True,
                              text=True, check=True).stdout
    inodes = {int(c[6]) for c in (line.split() for line in table(None, 'unix').splitlines()[1:]) if len(c) >= 7}
    for ns in (None, *namespaces):
        inodes |= {int(c[8]) for c in (line.split() for line in table(ns, 'packet').splitlines()[1:]) if len(c) >= 9}
    return inodes


def wait_fds(m, d, before, namespaces=()):
    """Every descriptor the daemon opened since `before` closed again: the worker's pipe, and the
    plan's namespace files and sockets, once the answer is out. Unix sockets (a child of the
    daemon started meanwhile, a varlink connection) and packet sockets (evidence's, in the daemon's
    namespace and in the pods it runs: `namespaces`) come and go on their own: not counted."""
    def new():
        extra = set(fds(d).items()) - set(before.items())
        if not extra:
            return extra
        theirs = socket_inodes(d, namespaces)
        return {(fd, t) for fd, t in extra if not (t.startswith('socket:[') and int(t[8:-1]) in theirs)}
    m.wait_until(lambda m: not new(), 5, f'the descriptors opened since closed again: {new()} left')


def lone_pod(pods, kind='other'):
    """A namespace with eth0 (DISTINCT) whose peer is there too: nothing of it in the host's."""
    name = f'{NETNS_PREFIX}{kind}-{secrets.token_hex(3)}'
    run('ip', 'netns', 'add', name)
    pods.names.append(name)
    ip(name, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1')
    set_and_check(name, 'eth0', DISTINCT)
    return name


def netlink_sockets_in(netns, d):
    """The daemon's sockets that are netlink sockets of `netns` (/proc/net/netlink there)."""
    mine = {int(t[8:-1]) for t in fds(d).values() if t.startswith('socket:[')}
    out = subprocess.run(['ip', 'netns', 'exec', netns, 'cat', '/proc/net/netlink'], capture_output=True,
                         text=True, check=True).stdout.splitlines()[1:]
    return [int(c[9]) for c in (line.split() for line in out) if len(c) >= 10 and int(c[9]) in mine]


def wider_policy():
    """The standard policy, its pods policy also naming the namespaces PREFIXother-*."""
    return policy().replace(f'netns: ["{POD_GLOB}"]', f'netns: ["{POD_GLOB}", "{NETNS_PREFIX}other-*"]')


def plan_lines(out, netns, ifname):
    return [line for line in out.splitlines() if line.split()[:1] == [netns] and ifname in line.split()]


def test_plan_looks_into_namespaces_it_has_not_entered(ns, pods, daemon, confdir, tmp_path):
    """A policy that names a namespace the running policy does not: Plan looks into it read-only
    (one socket, one dump) and shows what it would write on its eth0, writes nothing, keeps
    nothing of it (its descriptors as before), and bigtcpctl plan shows it in the NETNS column."""
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    other = lone_pod(pods)
    d.reload()   # a scan has seen it (the running policy does not name it)
    with Monitor(d, seed=False) as m:
        m.call('GetStatus')   # the calls' connection is open
        before = fds(d)
        plan = m.call('Plan', {'policy': wider_policy()})
        loaded = m.call('Plan')
        wait_fds(m, d, before, [p1])
    assert not netlink_sockets_in(other, d), 'a socket of the daemon is left in the namespace it looked into'
    assert len(netlink_sockets_in(p1, d)) == 3   # … as those of the one it runs are: events, writes, stats

    assert plan['netns_not_entered'] == [], plan['netns_not_entered']
    by = {(x['netns'], x['ifname']): x for x in plan['devices']}
    e = by[(other, 'eth0')]
    assert e['policy'] == 'pods' and e['action'] == 'write', e
    assert sizes4(*[e['current'][k] for k in nl.SIZES]) == DISTINCT, e
    assert sizes4(*[e['desired'][k] for k in nl.SIZES]) == sizes4(POD_SIZE), e
    assert by[(other, 'lo')]['action'] == 'none' and by[(other, 'lo')]['policy'] is None
    assert by[(p1, 'eth0')]['action'] == 'none'   # already at the policy's sizes
    # the loaded policy does not take it: neither looked at nor named
    assert not any(x.get('netns') == other for x in loaded['devices']) and loaded['netns_not_entered'] == []
    f = tmp_path / 'wider.yaml'
    f.write_text(wider_policy())
    out = ctl(d, ns, 'plan', str(f))
    [line] = plan_lines(out, other, 'eth0')
    assert 'pods' in line and 'write' in line and str(POD_SIZE) in line, out
    assert 'Not in this plan' not in out, out
    # nothing written, nothing entered
    assert eth0(other) == DISTINCT
    assert not d.log_lines(f'netns {other}: managing it'), d.log()
    assert len(d.log_lines(f'netns {other}: looking at its devices for a plan')) == 2, d.log()   # varlink, ctl
    assert status(d)['netns']['managed'] == 1
    with Monitor(d, seed=False) as m:
        assert not any(x.get('netns') == other for x in m.call('io.bigtcpd.Manager.ListDevices')['devices'])


def test_plan_of_another_user_does_not_look(ns, pods, daemon, confdir):
    """Entering a namespace is root's: a plan asked by another UID names the namespaces bigtcpd
    does not run (caller-not-root) and does not look into them; root's plan of the same text does."""
    from test_varlink import NOBODY_CLIENT, as_nobody, sock
    d, p1, _ = one_pod(ns, pods, daemon, confdir)
    other = lone_pod(pods)
    d.reload()
    os.chmod(d.runtime_dir.parent, 0o755)   # the harness makes it 0700
    r = as_nobody(sys.executable, '-c', NOBODY_CLIENT, str(sock(d)),
                  'io.bigtcpd.Manager.Plan ' + json.dumps({'policy': wider_policy()}))
    assert r.returncode == 0, r.stderr
    [reply] = json.loads(r.stdout)
    plan = reply['parameters']
    assert plan['netns_not_entered'] == [{'netns': other, 'reason': 'caller-not-root'}], plan['netns_not_entered']
    assert not any(x.get('netns') == other for x in plan['devices'])
    assert any(x.get('netns') == p1 for x in plan['devices'])   # what bigtcpd runs, it shows
    assert not d.log_lines(f'netns {other}: looking at its devices for a plan'), d.log()
    with Monitor(d, seed=False) as m:
        assert m.call('Plan', {'policy': wider_policy()})['netns_not_entered'] == []


def test_plan_looks_while_no_running_policy_names_a_namespace(ns, pods, daemon, confdir):
    """No policy in force names another namespace, so the directories are not watched: a plan of
    one that does reads their names itself, and looks into the pods it takes."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(pods=False))
    p1, _ = pods.add()
    d = start(daemon, ns, cfg)
    with Monitor(d, seed=False) as m:
        plan = m.call('Plan', {'policy': policy()})
    assert plan['netns_not_entered'] == [], plan
    [e] = [x for x in plan['devices'] if x.get('netns') == p1 and x['ifname'] == 'eth0']
    assert e['action'] == 'write' and sizes4(*[e['desired'][k] for k in nl.SIZES]) == sizes4(POD_SIZE), e
    assert eth0(p1) == DISTINCT
    assert status(d)['netns']['managed'] == 0


def test_plan_looks_at_the_routes_of_a_namespace_for_match_route(ns, pods, daemon, confdir):
    """A plan's policy with match.route: the look reads the namespace's routes too, and the device
    a route leaves through is the one it would write."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(pods=False))
    other = lone_pod(pods)
    for dev in ('eth0', 'eth1'):
        ip(other, 'link', 'set', dev, 'up')
    ip(other, 'addr', 'add', '10.99.0.1/24', 'dev', 'eth0')
    d = start(daemon, ns, cfg)
    routed = policy_text(f'''
    version: 1
    policies:
      - name: routed
        match:
          netns: ["{NETNS_PREFIX}other-*"]
          route: ["10.99.0.0/16"]
        ipv6: {{gso-max-size: {POD_SIZE}, gro-max-size: {POD_SIZE}}}
        ipv4: {{gso-max-size: {POD_SIZE}, gro-max-size: {POD_SIZE}}}
    ''')
    with Monitor(d, seed=False) as m:
        plan = m.call('Plan', {'policy': routed})
    assert plan['netns_not_entered'] == [], plan
    by = {x['ifname']: x for x in plan['devices'] if x.get('netns') == other}
    assert by['eth0']['policy'] == 'routed' and by['eth0']['action'] == 'write', by['eth0']
    assert by['eth1']['policy'] is None and by['lo']['policy'] is None, by
    assert eth0(other) == DISTINCT


def test_plan_names_the_namespaces_it_cannot_look_into(ns, pods, daemon, confdir, tmp_path):
    """Without CAP_SYS_ADMIN no namespace can be entered, not even to look: Plan names each one its
    policy takes in netns_not_entered with the reason, and bigtcpctl plan says so."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, _ = pods.add()
    other = lone_pod(pods)
    d = start(daemon, ns, cfg, wrapper=('setpriv', '--inh-caps=-sys_admin', '--bounding-set=-sys_admin', '--'))
    with Monitor(d, seed=False) as m:
        m.call('GetStatus')
        before = fds(d)
        plan = m.call('Plan', {'policy': wider_policy()})
        wait_fds(m, d, before)
    got = {x['netns']: x for x in plan['netns_not_entered']}
    assert set(got) == {p1, other}, plan['netns_not_entered']
    for x in got.values():
        assert x['reason'] == 'cannot-enter' and x['errno'] == errno.EPERM, x
    assert not any(x.get('netns') in (p1, other) for x in plan['devices'])
    f = tmp_path / 'wider.yaml'
    f.write_text(wider_policy())
    out = ctl(d, ns, 'plan', str(f))
    assert f'namespace {sorted([p1, other])[0]} (cannot-enter: Operation not permitted)' in out, out


def test_plan_does_not_look_with_the_descriptors_kept_for_root(ns, pods, daemon, confdir):
    """A look's socket never takes one of the descriptors kept for root's control connections:
    with RLIMIT_NOFILE at what is open plus that reserve, the pod is named ("descriptors") and the
    plan still answers; with room again, the plan looks into it."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(pods=False))
    p1 = lone_pod(pods, kind='pod')
    d = start(daemon, ns, cfg)
    with Monitor(d, seed=False) as m:
        m.call('GetStatus')
        n = len(fds(d))
        hard = resource.prlimit(d.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (n + 64, hard))   # the reserve (FDS_RESERVE) alone free
        plan = m.call('Plan', {'policy': policy()})
        assert plan['netns_not_entered'] == [{'netns': p1, 'reason': 'descriptors', 'errno': errno.EMFILE,
                                              'error': os.strerror(errno.EMFILE)}], plan['netns_not_entered']
        resource.prlimit(d.pid, resource.RLIMIT_NOFILE, (hard, hard))
        plan = m.call('Plan', {'policy': policy()})
    assert plan['netns_not_entered'] == [], plan['netns_not_entered']
    assert any(x.get('netns') == p1 and x['ifname'] == 'eth0' and x['action'] == 'write' for x in plan['devices'])


@pytest.mark.slow
def test_plan_looks_into_64_namespaces_at_most(ns, pods, daemon, confdir):
    """A plan looks into at most 64 namespaces; the others its policy takes are named ("limit")."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(pods=False))
    names = sorted(f'{NETNS_PREFIX}other-{secrets.token_hex(4)}' for _ in range(66))
    run('ip', '-batch', '-', input=''.join(f'netns add {x}\n' for x in names))
    pods.names.extend(names)
    d = start(daemon, ns, cfg)
    with Monitor(d, seed=False) as m:
        m.call('GetStatus')
        before = fds(d)
        plan = m.call('Plan', {'policy': wider_policy()})
        wait_fds(m, d, before)
    assert plan['netns_not_entered'] == [{'netns': x, 'reason': 'limit'} for x in names[64:]], plan['netns_not_entered']
    looked = {x['netns'] for x in plan['devices'] if x.get('netns', 'host') != 'host'}
    assert looked == set(names[:64])   # each has its lo
    assert not [x for x in names if netlink_sockets_in(x, d)], 'a socket of the daemon is left in a namespace it looked into'
    assert status(d)['netns']['managed'] == 0
    # callers that hang up at once: 12 plans' looks interleave, and each closes what it opened
    def accounted():
        """The namespaces looked into, those a plan could not look into (its socket refused), and
        those not begun when its 3 s ran out (a loaded host: the 12 plans share one loop) or when
        its call went with its caller (a plan goes with its call: the daemon saw the hang-up)."""
        return len(d.log_lines('looking at its devices for a plan')) + len(d.log_lines(
            'not looked into for a plan')) + sum(
            int(x) for x in re.findall(r"a plan's looks (?:took over \d+ s|ended with its call): (\d+) "
                                       r"namespaces? not looked into", d.log()))

    looks = accounted()
    for i in range(12):
        with Client(str(d.runtime_dir / 'io.bigtcpd.Manager'), T(5)) as c:
            c.send('io.bigtcpd.Manager.Plan', {'policy': wider_policy()})
    # a bound on a hang, not a speed: 768 looks by ASan workers, four at a time, took over 20 s once
    # beside the other tests' processes
    wait_file(d.log_path, lambda: accounted() == looks + 12 * 64, 60,
              lambda: f"the 12 plans looked ({accounted() - looks} of {12 * 64} looks, or ran out of time)")
    with Monitor(d, seed=False) as m:
        m.wait_until(lambda m: not [x for x in names if netlink_sockets_in(x, d)], 5,
                     'no socket of the daemon left in the namespaces after its callers went')
        assert m.call('GetStatus')['netns']['managed'] == 0
    # stopped while plans look: the looks are cancelled with their calls (the sanitizers and a
    # clean exit say nothing was left or used after it was freed)
    clients = [Client(str(d.runtime_dir / 'io.bigtcpd.Manager'), T(5)) for _ in range(4)]
    try:
        looks = len(d.log_lines('looking at its devices for a plan'))
        for c in clients:
            c.send('io.bigtcpd.Manager.Plan', {'policy': wider_policy()})
        wait_file(d.log_path, lambda: len(d.log_lines('looking at its devices for a plan')) > looks, 10,
                  'a plan looking')
        d.stop()
    finally:
        for c in clients:
            c.close()


def ctl_watch_during(d, target, set_up, what, server_ns, client_ns, *client):
    """`bigtcpctl --json watch TARGET --for 4s`, and once set_up(watch) holds (the watch set up,
    or over), iperf3 from client_ns (`client`: its arguments) to a one-shot server in server_ns;
    the watch's exit status, output and errors."""
    watch = subprocess.Popen([str(CTL), '--socket', str(d.runtime_dir / 'io.bigtcpd.Manager'), '--json', 'watch',
                              target, '--for', '4s'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_file(d.log_path, lambda: set_up(watch), 10, what)
        srv = Iperf(server_ns)
        try:
            r = subprocess.run(['ip', 'netns', 'exec', client_ns, 'iperf3', *client],
                               capture_output=True, text=True, timeout=40)
            assert r.returncode == 0, r.stdout + r.stderr
        finally:
            srv.close()
        out, err = watch.communicate(timeout=T(20))
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    return watch.returncode, out, err


@pytest.mark.slow
def test_watch_of_a_pod_end_counts_its_big_packets(ns, pods, daemon, confdir):
    """`bigtcpctl watch POD/eth0` while iperf3 runs between the pod and the host: the pod end's big
    packets are counted, from a packet socket made inside the pod (the daemon's own namespace has
    another device at that ifindex, or none)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(pods_only(ipv4=False, rollback=('window: 1s', 'interval: 500ms')))
    p1, h1 = pods.add(distinct=False)
    ip(ns, 'link', 'set', h1, 'gso_max_size', str(POD_SIZE), 'gro_max_size', str(POD_SIZE))
    ip(ns, 'addr', 'add', 'fd19::1/64', 'dev', h1, 'nodad')
    ip(p1, 'addr', 'add', 'fd19::2/64', 'dev', 'eth0', 'nodad')
    ip(ns, 'link', 'set', h1, 'up')
    ip(p1, 'link', 'set', 'eth0', 'up')
    for where, name in ((ns, h1), (p1, 'eth0')):
        # the carrier (linkwatch, under the RTNL lock that other tests' many devices may hold)
        nl.wait_links(where, lambda links: name in links and links[name]['flags'] & 0x40, T(60), f'{name} running')
    d = start(daemon, ns, cfg)
    with Monitor(d, seed=False) as m:
        # applied, and its probation's count is over: the watch below starts one of its own
        m.wait_until(lambda m: any(x['netns'] == p1 and x['ifname'] == 'eth0' and x['state'] == 'applied' and
                                   x['big_packets'] and not x['big_packets']['watching']
                                   for x in m.call('ListDevices')['devices']), T(15), 'the pod end applied')
    # counted in probation once, and now for the watch
    rc, out, err = ctl_watch_during(d, f'{p1}/eth0', lambda _: d.log().count(f'{p1}/eth0: evidence: counting') >= 2,
                                    'the watch set up', p1, ns, '-6', '-c', 'fd19::2', '-t', '2', '--bidir')
    assert rc == 0, out + err
    dev = json.loads(out)
    bp = dev['big_packets']
    assert dev['netns'] == p1 and dev['ifname'] == 'eth0', dev
    assert bp['tx'] > 0 and bp['rx'] > 0 and bp['ipv6'] == bp['tx'] + bp['rx'], bp
    assert 65536 < bp['tx_largest'] <= POD_SIZE + 14, bp
    assert dev['effective'] is True, dev
    d.stop()


def described(d):
    """The daemon's descriptors, {fd: what}: a socket as its /proc/PID/net table's kind (unix,
    packet, netlink), with a unix socket's peer process (ss -xp), else the file it is."""
    out = {}
    ss = subprocess.run(['nsenter', '-t', str(d.pid), '-n', 'ss', '-xpH'], capture_output=True, text=True).stdout
    tables = {}
    for table, col in (('unix', 6), ('packet', 8), ('netlink', 9)):
        with open(f'/proc/{d.pid}/net/{table}') as f:
            tables.update({c[col]: table for c in (line.split() for line in f) if len(c) > col})
    for fd, t in fds(d).items():
        if t.startswith('socket:['):
            ino = t[8:-1]
            t = f'{tables.get(ino, "socket")} {ino}'
            if t.startswith('unix'):
                t += ' ' + ' | '.join(x.split('users:')[-1] for x in ss.splitlines() if f' {ino} ' in x)
        out[fd] = t
    return out


def test_descriptors_after_a_burst_of_pods_come_back_to_the_start(ns, pods, daemon, confdir):
    """From READY=1 on, the daemon holds what it holds while it runs: 40 pods made at once, their
    ends written (their state saved), then all deleted at once; once every pod is let go, the daemon
    holds the descriptors it held at READY=1, and its children are the same processes (the state's
    syncs' child was made by the first save, after READY=1: one socket more at the end). The spare
    packet sockets of its own namespace (made ahead, in flight at READY=1, taken by a watch and made
    again) are not counted. Only pods are named (nothing of the daemon's own namespace to save at
    its start), as in tests/bench/netns.py."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(pods_only())
    d = start(daemon, ns, cfg)

    def held():
        """fds(d) but the spares (/proc/PID/net/packet: bound to no device), read at once: no
        process started, so that what the daemon does right after READY=1 comes after it."""
        with open(f'/proc/{d.pid}/net/packet') as f:
            spares = {c[8] for c in (line.split() for line in f) if len(c) > 8 and c[4] == '0'}
        return {fd: t for fd, t in fds(d).items() if not (t.startswith('socket:[') and t[8:-1] in spares)}
    before, kids = held(), children(d.pid)
    with Monitor(d, seed=False) as m:
        names = add_many(pods, 40)
        m.wait_until(lambda m: pods_at(d, names, POD_SIZE) == set(names), 30, 'all 40 pod ends written')
        run('ip', '-batch', '-', input=''.join(f'netns del {x}\n' for x in names))
        pods.names = [x for x in pods.names if x not in names]
        m.wait_until(lambda m: status(d)['netns']['managed'] == 0, 30, 'every pod let go')
        try:
            # the Monitor's connection is one more
            m.wait_until(lambda m: len(held()) <= len(before) + 1, 10, 'the descriptors of READY=1 again')
        except AssertionError:
            pass   # said below, with what they are
        after, what = held(), described(d)
        # the daemon's end of the Monitor's connection: the peer of a unix socket of this process
        ss = subprocess.run(['ss', '-xpH'], capture_output=True, text=True).stdout.splitlines()
        peers = {f'socket:[{x.split()[7]}]' for x in ss if len(x.split()) > 8 and f'pid={os.getpid()},' in x}
    extra = {fd: what.get(fd, t) for fd, t in after.items() if before.get(fd) != t and t not in peers}
    gone = {fd: t for fd, t in before.items() if after.get(fd) != t}
    assert len([t for t in after.values() if t in peers]) == 1, (after, peers)
    assert len(after) - 1 == len(before), f'{len(after) - 1} descriptors, not {len(before)}: more {extra}, less {gone}'
    assert children(d.pid) == kids, (kids, children(d.pid))
    d.stop()


def child_of(d, comm):
    [pid] = [k for k, c in children(d.pid).items() if c == comm]
    return pid


def test_dead_packet_children_are_reaped_made_again_and_a_pod_watch_never_counts_the_host(ns, pods, daemon,
                                                                                          confdir):
    """bigtcpd-packets and bigtcpd-closer killed (by pid): each is reaped at once (no zombie) and
    logged; a watch of a pod's lo then counts that idle lo alone, not the busy lo of bigtcpd's own
    namespace (the same ifindex, 1), whose big packets a socket made in the daemon's namespace would
    count; both children are made again when next needed (the watch's start and its end)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, _ = pods.add(distinct=False)
    ip(ns, 'link', 'set', 'lo', 'gso_max_size', str(POD_SIZE), 'gro_max_size', str(POD_SIZE))
    d = start(daemon, ns, cfg, packet_sockets=True)
    wait_eth0(p1, sizes4(POD_SIZE), p1)
    maker, closer = child_of(d, 'bigtcpd-packets'), child_of(d, 'bigtcpd-closer')
    os.kill(maker, signal.SIGKILL)
    os.kill(closer, signal.SIGKILL)
    for name, pid in (('bigtcpd-packets', maker), ('bigtcpd-closer', closer)):
        wait_file(d.log_path, lambda: f'{name} (pid {pid}) was killed by signal KILL' in d.log(), 10,
                  f'{name} reaped and logged')
        assert not os.path.exists(f'/proc/{pid}'), f'{name} (pid {pid}) left a zombie'
    rc, out, err = ctl_watch_during(d, f'{p1}/lo', lambda watch: f'{p1}/lo: evidence:' in d.log() or
                                    watch.poll() is not None, 'the watch set up, or refused', ns, ns,
                                    '-6', '-c', '::1', '-t', '2')
    if rc == 0:
        bp = json.loads(out)['big_packets']
        assert bp['tx'] == 0 and bp['rx'] == 0, f"the pod's idle lo counted another device's packets: {bp}"
    else:   # refused: loudly
        assert 'evidence: not counting' in d.log(), out + err + d.log_tail()
    # made again: the maker for the watch, the closer for the socket's end
    wait_file(d.log_path, lambda: d.log().count('made again') >= 2, 10, 'both made again')
    kids = children(d.pid)
    assert sorted(kids.values()).count('bigtcpd-packets') == 1 and maker not in kids, kids
    assert sorted(kids.values()).count('bigtcpd-closer') == 1 and closer not in kids, kids
    d.stop()


def test_a_packet_child_that_keeps_dying_is_not_made_again_at_once_and_a_pod_watch_fails_loudly(
        ns, pods, daemon, confdir):
    """bigtcpd-packets killed again each time it is made again: within a minute it is made again
    at most 5 times (and with a backoff), then a watch of a pod's device is refused, logged, rather
    than counted from a socket made in the daemon's own namespace; one of the daemon's own devices
    is still counted (its socket made in the loop, in its own namespace)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    p1, _ = pods.add(distinct=False)
    d = start(daemon, ns, cfg, packet_sockets=True)
    wait_eth0(p1, sizes4(POD_SIZE), p1)

    def watch(name):
        return subprocess.run([str(CTL), '--socket', str(d.runtime_dir / 'io.bigtcpd.Manager'), '--json', 'watch',
                               name, '--for', '1s'], capture_output=True, text=True, timeout=T(20))
    def windows():
        return len(re.findall(rf'{re.escape(p1)}/lo: evidence: \d+ sent above', d.log()))

    refused = None
    for i in range(7):
        pid = child_of(d, 'bigtcpd-packets')
        os.kill(pid, signal.SIGKILL)
        wait_file(d.log_path, lambda: f'bigtcpd-packets (pid {pid}) was killed' in d.log(), 10, 'reaped')
        r = watch(f'{p1}/lo')
        if r.returncode != 0:
            refused = i
            break
        # the call ends at its own second; the window, begun when the child's socket came, may go
        # on up to WATCH_OUTLASTS_USEC more (a slow child): the next watch would then be served by
        # that window's socket, made in the pod before this kill, and need no child
        wait_file(d.log_path, lambda: windows() >= i + 1, 10, f'window {i + 1} over')
    assert refused is not None and refused <= 5, f'the watches after {i + 1} kills all went through'
    assert d.log().count('bigtcpd-packets made again') == refused <= 5, d.log_tail()
    assert 'bigtcpd-packets was made again 5 times within a minute, or just now: not again for a while' in d.log(), \
        d.log_tail()
    assert f'{p1}/lo: evidence: not counting its packets' in d.log(), d.log_tail()
    assert not [k for k, c in children(d.pid).items() if c == 'bigtcpd-packets']
    r = watch('lo')   # the daemon's own: made in the loop, there
    assert r.returncode == 0, r.stdout + r.stderr
    assert d.running()
    d.stop()


class NamesDir:
    """A namespace directory of the test's own (--netns-dir): a tmpfs, shared so that the names
    bound in it later reach the daemon's mount namespace (ip netns exec makes it a slave), where
    every name is a bind-mount of a namespace of /run/netns. Unmounted whole at the end."""

    def __init__(self, path):
        self.path = path
        path.mkdir()
        run('mount', '-t', 'tmpfs', '-o', 'size=1m', 'bt-names', str(path))
        try:
            run('mount', '--make-shared', str(path))
        except Exception:
            self.close()
            raise

    def bind(self, source, name):
        """`name` here names the namespace whose file is `source` (over what it named: a stack).
        The new mount is made a slave of the source's (a bind of a shared mount is its peer: a
        mount over one of them would be over every other name of that namespace too, /run/netns's
        included) and shared anew, for the daemon's mount namespace if it starts after this."""
        target = self.path / name
        if not target.exists():
            target.touch()
        run('mount', '--bind', str(source), str(target))
        run('mount', '--make-slave', str(target))
        run('mount', '--make-shared', str(target))
        return target

    def close(self):
        run('umount', '--recursive', '--lazy', str(self.path))


@pytest.fixture
def names_dir(tmp_path):
    n = NamesDir(tmp_path / 'netns')
    try:
        yield n
    finally:
        n.close()


def start_in(daemon, ns, cfg, names):
    return daemon(ns, cfg, extra_args=('--netns-dir', str(names.path)))


def test_a_namespace_is_managed_by_any_of_its_names_whatever_their_order(ns, pods, daemon, confdir, names_dir):
    """Two namespaces with two names each, one a pods policy names (PREFIXpod-…) and one it does not
    (PREFIXaux-…), bound in opposite orders (a directory lists its names in the order they came,
    or the reverse): both are managed, under their pod name."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    a, b = lone_pod(pods, 'x'), lone_pod(pods, 'x')
    names_dir.bind(f'/run/netns/{a}', f'{NETNS_PREFIX}aux-a')
    names_dir.bind(f'/run/netns/{a}', f'{NETNS_PREFIX}pod-a')
    names_dir.bind(f'/run/netns/{b}', f'{NETNS_PREFIX}pod-b')
    names_dir.bind(f'/run/netns/{b}', f'{NETNS_PREFIX}aux-b')
    d = start_in(daemon, ns, cfg, names_dir)
    for x in (a, b):
        wait_eth0(x, sizes4(POD_SIZE), f'{x} managed under its pod name')
    managed = {x['netns'] for x in list_devices(d) if x.get('netns') not in (None, 'host')}
    assert managed == {f'{NETNS_PREFIX}pod-a', f'{NETNS_PREFIX}pod-b'}, managed
    # and a third, named in both orders while the daemon runs
    c = lone_pod(pods, 'x')
    names_dir.bind(f'/run/netns/{c}', f'{NETNS_PREFIX}aux-c')
    names_dir.bind(f'/run/netns/{c}', f'{NETNS_PREFIX}pod-c')
    wait_eth0(c, sizes4(POD_SIZE), f'{c} managed under its pod name')
    d.stop()


def test_a_name_that_now_names_another_namespace_is_a_new_namespace(ns, pods, daemon, confdir, names_dir):
    """pod-a, managed, is bound over with another namespace (aux-b, which no policy names): the one
    it named is let go, its eth0 given its originals back, although it keeps another name (aux-a)
    and lives on; the one pod-a names now is managed under that name."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    old, new = lone_pod(pods, 'x'), lone_pod(pods, 'x')
    ip(new, 'link', 'set', 'eth1', 'name', 'new-peer')   # the new one's devices told from the old one's
    pod_a, aux_a, aux_b = (f'{NETNS_PREFIX}{n}' for n in ('pod-a', 'aux-a', 'aux-b'))
    names_dir.bind(f'/run/netns/{old}', pod_a)
    names_dir.bind(f'/run/netns/{new}', aux_b)
    d = start_in(daemon, ns, cfg, names_dir)
    wait_eth0(old, sizes4(POD_SIZE), 'the first pod-a managed')
    assert eth0(new) == DISTINCT
    names_dir.bind(f'/run/netns/{old}', aux_a)
    names_dir.bind(f'/run/netns/{new}', pod_a)   # over the old one's
    wait_eth0(old, DISTINCT, 'the namespace pod-a named before given its originals back')
    wait_eth0(new, sizes4(POD_SIZE), 'the namespace pod-a names now managed')
    wait_file(d.log_path, lambda: d.log_lines(f'netns {pod_a}: let go'), 10, 'the old one let go')
    devices = sorted((x['netns'], x['ifname']) for x in list_devices(d) if x.get('netns') not in (None, 'host'))
    assert devices == [(pod_a, 'eth0'), (pod_a, 'lo'), (pod_a, 'new-peer')], devices
    assert d.running()
    d.stop()
    assert eth0(old) == DISTINCT
