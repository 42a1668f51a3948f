"""Faults: the daemon killed at random points of an apply storm and in the middle of a rollback, devices and
namespaces vanishing under it, a corrupt state file, the policy directory swapped while it is
read, an unwritable runtime directory. The promise each time: every device ends at its desired
or its original sizes, the originals are never lost, the state file is never left corrupt."""

import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import time

import pytest

import inject
import nl
from helpers import NETNS_PREFIX, Monitor, T, at, ip, ip_batch, read_state, sizes4, veth, wait_file
from policies import standard_policy

# kills at random points of storms: not in the quick tier
pytestmark = pytest.mark.slow

BIG = sizes4(185000)
ORIG = sizes4(65536)

POLICY = standard_policy('all', rollback=('window: 30s', 'interval: 200ms', 'guards:', '  - {counter: Ip.InHdrErrors, max-increase: 5}'))


@pytest.fixture
def rng(request):
    """The random points of these tests, from a seed that is printed (shown with a failure) and
    can be given back: BIGTCPD_FAULT_SEED=N reruns a failed case with the same points."""
    seed = int(os.environ.get('BIGTCPD_FAULT_SEED', time.time_ns() % (1 << 32)))
    print(f'{request.node.name}: BIGTCPD_FAULT_SEED={seed}')
    return random.Random(seed)


def check_state_file(runtime_dir):
    """The state file parses (never half-written) and every original it records is the kernel
    default these tests start from."""
    state = read_state(runtime_dir)
    for e in state['devices']:
        assert nl.sizes_of(e['original']) == ORIG, f'original of {e["ifname"]} lost or wrong: {e}'
    return {e['ifname']: e for e in state['devices']}


def test_sigkill_at_random_points_of_an_apply_storm(ns, daemon, confdir, rng):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg)
    runtime = d.runtime_dir
    for round_ in range(3):
        first = round_ * 300
        ip_batch(ns, [f'link add f{i}a type veth peer name f{i}b' for i in range(first, first + 300)])
        time.sleep(rng.uniform(0, 0.15))   # a random point of the daemon's work on the burst
        d.kill(signal.SIGKILL)
        check_state_file(runtime)
        d = daemon(ns, cfg, runtime_dir=runtime)
    names = [f'f{i}{x}' for i in range(900) for x in 'ab']
    nl.wait_links(ns, at({n: BIG for n in names}), T(60), 'every device at the policy after the kills')
    recorded = check_state_file(runtime)
    missing = sorted(set(names) - set(recorded))
    assert not missing, f'{len(missing)} written devices have no recorded originals: {missing[:20]}'
    d.stop()


def test_sigkill_during_a_rollback(ns, daemon, confdir, pause):
    """Killed in the middle of ~400 rollback writes, at a point that does not depend on timing:
    the netlink-pause shim holds the daemon right after it sent the rollback write of one device
    (r100a), and the test checks that the kill lands there: that device back at its originals,
    others still at the policy's sizes."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    ip(ns, 'link', 'add', 'src', 'type', 'veth', 'peer', 'name', 'dst')
    for dev in ('src', 'dst'):
        ip(ns, 'link', 'set', dev, 'up')
    ip_batch(ns, [f'link add r{i}a type veth peer name r{i}b' for i in range(200)])
    names = ['src', 'dst'] + [f'r{i}{x}' for i in range(200) for x in 'ab']
    p = pause(nl.read_links(ns)['r100a']['ifindex'], 'write')
    d = daemon(ns, cfg, env=p.env)
    nl.wait_links(ns, at({n: BIG for n in names}), T(20), 'all written')
    with Monitor(d) as mon:
        mon.wait_until(lambda m: all(m.state(n) == 'probation' for n in names), 10, 'all in probation')
    # What the kill below tests is the state file: it must know every window before the kill.
    seen = {}

    def all_on_disk():
        seen.clear()
        seen.update({n: e.get('state') for n, e in check_state_file(d.runtime_dir).items()})
        return len(seen) == len(names) and set(seen.values()) == {'probation'}
    try:
        wait_file(d.runtime_dir, all_on_disk, 10, 'every device in probation in the state file', directory=True)
    except AssertionError as e:
        raise AssertionError(f'{e}: {len(seen)} of {len(names)}, {set(names) - set(seen)} missing, '
                             f'{set(seen.values())}') from None

    p.arm()
    bad = inject.ipv4_frame(inject.mac_of(ns, 'dst'), inject.mac_of(ns, 'src'), '10.9.0.1', '10.9.0.2',
                            bad_header=True)
    inject.send_frames(ns, 'src', [bad] * 20)
    p.wait_paused(10, d)
    # Where the kill lands: r100a's rollback write done, ack unread; some devices back, some not.
    links = nl.read_links(ns)
    back = [n for n in names if nl.sizes_of(links[n]) == ORIG]
    ahead = [n for n in names if nl.sizes_of(links[n]) == BIG]
    assert 'r100a' in back, f'the write the shim holds on is not r100a\'s rollback: {nl.sizes_of(links["r100a"])}'
    assert ahead and len(back) + len(ahead) == len(names), \
        f'not in the middle of the rollback: {len(back)} back, {len(ahead)} still at the policy'
    recorded = check_state_file(d.runtime_dir)
    assert 'held' in recorded['r100a'], f'r100a\'s rollback is not on disk before its write: {recorded["r100a"]}'
    print(f'killed with {len(back)} of {len(names)} devices rolled back')
    d.kill(signal.SIGKILL)
    p.held = False   # the process it held is gone
    check_state_file(d.runtime_dir)

    d2 = daemon(ns, cfg, runtime_dir=d.runtime_dir)
    # READY=1 comes once the restart has converged: those rolled back before the kill are held.
    links = nl.read_links(ns)
    rewritten = [n for n in back if nl.sizes_of(links[n]) != ORIG]
    assert not rewritten, f'{len(rewritten)} devices rolled back before the kill written again, e.g. {rewritten[:5]}'
    nl.wait_links(ns, at({n: ORIG for n in names}), T(20), 'every device rolled back after the restart')
    # The kernel holds them; the state file follows within the daemon's save delay: wait for it.
    states = {}

    def all_rolled_back():
        states.clear()
        states.update(check_state_file(d2.runtime_dir))
        return all(states.get(n, {}).get('state') == 'rolled-back' for n in names)
    wait_file(d2.runtime_dir, all_rolled_back, 10,
              lambda: str({n: states.get(n, {}).get('state') for n in names
                           if states.get(n, {}).get('state') != 'rolled-back'}),
              directory=True)
    # Held: the devices rolled back before the kill are not written the policy's sizes again.
    assert not [n for n in back if d2.log_lines(rf'(^|\s){n}: writing')], 'a rolled-back device written again'
    d2.stop()


def test_devices_deleted_while_their_writes_are_in_flight(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    d = daemon(ns, cfg)
    for _ in range(3):
        ip_batch(ns, [f'link add x{i}a type veth peer name x{i}b' for i in range(300)])
        ip_batch(ns, [f'link del x{i}a' for i in range(300)])
    ip_batch(ns, [f'link add y{i}a type veth peer name y{i}b' for i in range(50)])
    nl.wait_links(ns, at({f'y{i}{x}': BIG for i in range(50) for x in 'ab'}), T(20), 'survivors written')
    # The state file is what is checked here; no event says "forgotten on disk": inotify on it.
    wait_file(d.runtime_dir, lambda: not any(n.startswith('x') for n in check_state_file(d.runtime_dir)), 10,
              'deleted devices still in the state file', directory=True)
    assert d.running()
    d.stop()


def test_peer_namespace_deleted_under_the_daemon(netns, daemon, confdir):
    a = netns()
    b = f'{NETNS_PREFIX}gone-{os.getpid()}-{secrets.token_hex(4)}'   # ours to delete, not the fixture's
    subprocess.run(['ip', 'netns', 'add', b], check=True)
    try:
        _peer_namespace_deleted(a, b, daemon, confdir)
    finally:
        subprocess.run(['ip', 'netns', 'del', b], capture_output=True)


def _peer_namespace_deleted(a, b, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    for i in range(20):
        ip(a, 'link', 'add', f'p{i}', 'type', 'veth', 'peer', 'name', f'q{i}', 'netns', b)
    d = daemon(a, cfg)
    nl.wait_links(a, at({f'p{i}': BIG for i in range(20)}), T(10), 'written')
    subprocess.run(['ip', 'netns', 'del', b], check=True)   # takes the peers, and so the p* devices
    wait_file(d.runtime_dir, lambda: not check_state_file(d.runtime_dir), 10,
              'vanished devices still in the state file', directory=True)
    assert d.running()
    veth(a, 'late0', 'late1')
    nl.wait_links(a, at({'late0': BIG}), T(10), 'still working afterwards')
    d.stop()


def test_corrupt_and_truncated_state_file(ns, daemon, confdir, tmp_path):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    veth(ns, 'c0', 'c1')
    for n, junk in enumerate(['{"version":1,"devices":[{"ifindex":', '\x00\xff garbage', '[]']):
        runtime = tmp_path / f'run{n}'
        runtime.mkdir()
        (runtime / 'state.json').write_text(junk)
        d = daemon(ns, cfg, runtime_dir=runtime)
        assert 'state.json' in d.log() and 'corrupt' in d.log()
        assert (runtime / 'state.json.corrupt').read_text() == junk
        assert nl.sizes_of(nl.read_links(ns)['c0']) == BIG
        d.stop()
        if (runtime / 'state.json').exists():   # written again only when a write needs it
            json.loads((runtime / 'state.json').read_text())


def test_policy_directory_swapped_while_reloading(ns, daemon, tmp_path):
    """ConfigMap-style swaps in a tight loop, with SIGHUPs among them: the daemon ends with the
    last version, whatever it read in between."""
    cm = tmp_path / 'cm'
    cm.mkdir()

    def publish(n, size):
        ts = cm / f'..ts{n}'
        ts.mkdir()
        (ts / 'bigtcpd.yaml').write_text(POLICY.replace('185000', str(size)))
        os.symlink(ts.name, cm / '..tmp')
        os.rename(cm / '..tmp', cm / '..data')
        return ts

    old = publish(0, 100000)
    os.symlink('..data/bigtcpd.yaml', cm / 'bigtcpd.yaml')
    veth(ns, 'w0', 'w1')
    d = daemon(ns, cm / 'bigtcpd.yaml')
    for n in range(1, 40):
        new = publish(n, 100000 + n * 1000)
        shutil.rmtree(old)
        old = new
        if n % 5 == 0:
            d.signal(signal.SIGHUP)
    last = 100000 + 39 * 1000
    nl.wait_links(ns, at({'w0': sizes4(last)}), T(20), 'the last policy in force')
    assert d.running()
    d.stop()


def test_unwritable_runtime_directory(ns, daemon, confdir, tmp_path):
    """Originals that cannot be recorded are not risked: the device is not written."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    veth(ns, 'u0', 'u1')
    runtime = tmp_path / 'ro'
    runtime.mkdir()
    # A read-only tmpfs over the runtime dir, in a mount namespace of the daemon's own.
    d = daemon(ns, cfg, runtime_dir=runtime, wrapper=['unshare', '-m', 'sh', '-c',
                                                      f'mount -t tmpfs -o ro,mode=0755 none {runtime} && exec "$@"', 'sh'])
    assert nl.sizes_of(nl.read_links(ns)['u0']) == ORIG
    assert d.log_lines('failed to record (the original sizes|what a restart needs)')
    assert d.running()
    d.stop()
