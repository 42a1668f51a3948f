"""Guards and rollback against real error sources: every write is watched for a probation
window and undone when a counter rises too much."""

import signal
import time

import pytest

import inject
import nl
from helpers import Monitor, T, at, ip, policy_text, sizes4, veth, wait_file, write_file_atomic
from varlink_client import call

BIG = sizes4(185000)
LEGACY = sizes4(65536)


def policy(match, guards, window='3s', interval='200ms', extra=''):
    return policy_text(f'''
        version: 1
        policies:
          - name: guarded
            match: {match}
            ipv6: {{gso-max-size: 185000, gro-max-size: 185000}}
            ipv4: {{gso-max-size: 185000, gro-max-size: 185000}}
            rollback:
              window: {window}
              interval: {interval}
              guards:
        ''') + ''.join(f'          - {g}\n' for g in guards) + extra


def state_of(d, ifname):
    for e in d.state()['devices']:
        if e['ifname'] == ifname:
            return e
    return None


def wait_state(d, ifname, state, timeout):
    """Wait for the device's state on the daemon's Monitor stream, then for the state file (which
    follows the event, written atomically) to say so too: the entries these tests check are the
    state file's. Events and inotify, no polling."""
    with Monitor(d) as mon:
        mon.wait_state(ifname, state, timeout)

    def on_disk():
        e = state_of(d, ifname)
        return e if e and e.get('state') == state else None
    return wait_file(d.runtime_dir, on_disk, timeout, f'{ifname} {state} in the state file', directory=True)


@pytest.mark.serial  # a rollback within 1.4 s of the rise
def test_tx_dropped_rolls_back_and_stays_across_reload(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('{name: ["g0"]}', ['{counter: link.tx_dropped, max-increase: 0}'], window='20s'))
    veth(ns, 'g0', 'g1')
    ip(ns, 'link', 'set', 'g0', 'up')          # its peer stays down: every frame is dropped
    d = daemon(ns, cfg)
    assert nl.sizes_of(nl.read_links(ns)['g0']) == BIG
    wait_state(d, 'g0', 'probation', 5)

    before = inject.link_stat(ns, 'g0', 'tx_dropped')
    frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, 'g0'), '10.9.0.1', '10.9.0.2')
    assert inject.send_frames(ns, 'g0', [frame] * 5) == 5
    t_rise = time.monotonic()
    assert inject.link_stat(ns, 'g0', 'tx_dropped') > before, 'the error source did not work'

    nl.wait_links(ns, at({'g0': LEGACY}), T(5), 'rolled back to its previous sizes')
    took = time.monotonic() - t_rise
    e = wait_state(d, 'g0', 'rolled-back', 5)
    assert e['last_rollback']['counter'] == 'link.tx_dropped'
    assert e['last_rollback']['rise'] >= 1
    assert took < T(1.0 + 0.2 * 2), f'rollback took {took:.2f}s, more than one interval after the rise'
    assert 'rolling back' in d.log()

    # A reload that does not change its policy keeps it where it is.
    d.reload(lambda: cfg.write_text(cfg.read_text() + '\n# touched\n'))
    assert nl.sizes_of(nl.read_links(ns)['g0']) == LEGACY
    assert state_of(d, 'g0')['state'] == 'rolled-back'
    d.stop()


def test_ip_inhdrerrors_rolls_back_every_device_in_probation(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('{name: ["x*", "y*"]}', ['{counter: Ip.InHdrErrors, max-increase: 10}'],
                          window='20s'))
    veth(ns, 'x0', 'x1')
    veth(ns, 'y0', 'y1')
    for dev in ('x0', 'x1'):
        ip(ns, 'link', 'set', dev, 'up')
    d = daemon(ns, cfg)
    for dev in ('x0', 'x1', 'y0', 'y1'):
        wait_state(d, dev, 'probation', 5)

    before = inject.snmp_counter(ns, 'Ip.InHdrErrors')
    bad = inject.ipv4_frame(inject.mac_of(ns, 'x1'), inject.mac_of(ns, 'x0'), '10.9.0.1', '10.9.0.2',
                            bad_header=True)
    inject.send_frames(ns, 'x0', [bad] * 50)
    assert inject.snmp_counter(ns, 'Ip.InHdrErrors') - before >= 40, 'the error source did not work'

    nl.wait_links(ns, at({dev: LEGACY for dev in ('x0', 'x1', 'y0', 'y1')}), T(5), 'all rolled back')
    for dev in ('x0', 'x1', 'y0', 'y1'):
        e = wait_state(d, dev, 'rolled-back', 5)
        assert e['last_rollback']['counter'] == 'Ip.InHdrErrors'
        assert e['last_rollback']['namespace_wide'] is True
    assert 'every device in probation' in d.log()
    d.stop()


def test_ratio_trips_on_the_ratio_not_the_count(ns, daemon, confdir):
    """Ip.InReceives counts every packet, good or broken: 20 broken among 400 good stay under a
    max-ratio of 0.5 (while an absolute guard of 10 would have tripped); 50 broken alone do not."""
    guard = '{counter: Ip.InHdrErrors, max-ratio: 0.5, per: Ip.InReceives}'
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('{name: ["r0", "r1"]}', [guard], window='2s'))
    veth(ns, 'r0', 'r1')
    for dev in ('r0', 'r1'):
        ip(ns, 'link', 'set', dev, 'up')
    src, dst = inject.mac_of(ns, 'r0'), inject.mac_of(ns, 'r1')
    good = inject.ipv4_frame(dst, src, '10.9.0.1', '10.9.0.2')
    bad = inject.ipv4_frame(dst, src, '10.9.0.1', '10.9.0.2', bad_header=True)

    d = daemon(ns, cfg)
    wait_state(d, 'r0', 'probation', 5)
    inject.send_frames(ns, 'r0', [good] * 200 + [bad] * 20 + [good] * 200)
    e = wait_state(d, 'r0', 'applied', 10)
    assert e.get('last_rollback') is None
    assert nl.sizes_of(nl.read_links(ns)['r0']) == BIG
    d.stop()

    # Again from the start, with only broken packets.
    nl.set_sizes(ns, 'r0', **dict(zip(('gso_max_size', 'gro_max_size', 'gso_ipv4_max_size',
                                       'gro_ipv4_max_size'), LEGACY)))
    nl.set_sizes(ns, 'r1', **dict(zip(('gso_max_size', 'gro_max_size', 'gso_ipv4_max_size',
                                       'gro_ipv4_max_size'), LEGACY)))
    for f in ('state.json', 'state.journal'):
        (d.runtime_dir / f).unlink(missing_ok=True)
    d = daemon(ns, cfg)
    wait_state(d, 'r0', 'probation', 5)
    inject.send_frames(ns, 'r0', [bad] * 50)
    e = wait_state(d, 'r0', 'rolled-back', 5)
    assert e['last_rollback']['per'] == 'Ip.InReceives'
    d.stop()


def test_max_parallel_one_writes_one_after_another(ns, daemon, confdir):
    names = ['p0', 'p1', 'p2', 'p3']
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('{name: ["nothing-yet"]}', ['{counter: link.tx_errors, max-increase: 0}']))
    veth(ns, 'p0', 'p1')
    veth(ns, 'p2', 'p3')
    d = daemon(ns, cfg)

    window = 1.0
    reached = {}
    d.reload(lambda: cfg.write_text(policy('{name: ["p*"]}', ['{counter: link.tx_errors, max-increase: 0}'],
                                           window='1s', extra='    rollout: {max-parallel: 1}\n')))
    deadline = time.monotonic() + T(20)
    while len(reached) < len(names) and time.monotonic() < deadline:
        links = nl.read_links(ns)
        for n in names:
            if n not in reached and nl.sizes_of(links[n]) == BIG:
                reached[n] = time.monotonic()
        time.sleep(0.02)  # the kernel sends no event for a size change; read it back
    assert len(reached) == len(names), f'only {sorted(reached)} reached the policy'
    times = sorted(reached.values())
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(g >= window * 0.8 for g in gaps), f'writes were not one window apart: {gaps}'
    d.stop()


def test_sigkill_during_probation_then_restart_finishes_the_window(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('{name: ["k0"]}', ['{counter: link.tx_dropped, max-increase: 0}'], window='2s'))
    veth(ns, 'k0', 'k1')
    d = daemon(ns, cfg)
    wait_state(d, 'k0', 'probation', 5)
    d.kill(signal.SIGKILL)
    e = state_of(d, 'k0')
    assert e['state'] == 'probation' and 'probation' in e
    assert nl.sizes_of(e['original']) == LEGACY

    d2 = daemon(ns, cfg, runtime_dir=d.runtime_dir)
    e = wait_state(d2, 'k0', 'applied', 10)
    assert nl.sizes_of(e['original']) == LEGACY, 'originals lost across the restart'
    assert nl.sizes_of(nl.read_links(ns)['k0']) == BIG
    assert 'resuming probation' in d2.log()
    d2.stop()


def test_sigkill_then_guard_trips_while_down_rolls_back_on_restart(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('{name: ["k0"]}', ['{counter: link.tx_dropped, max-increase: 0}'], window='30s'))
    veth(ns, 'k0', 'k1')
    ip(ns, 'link', 'set', 'k0', 'up')
    d = daemon(ns, cfg)
    e = wait_state(d, 'k0', 'probation', 5)
    # the baseline must be on disk before the kill
    wait_file(d.runtime_dir, lambda: all(g.get('have_base') for g in state_of(d, 'k0')['probation']['guards']),
              5, 'the baselines of k0 in the state file', directory=True)
    d.kill(signal.SIGKILL)
    frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, 'k0'), '10.9.0.1', '10.9.0.2')
    inject.send_frames(ns, 'k0', [frame] * 3)

    d2 = daemon(ns, cfg, runtime_dir=d.runtime_dir)
    nl.wait_links(ns, at({'k0': LEGACY}), T(5), 'rolled back after the restart')
    e = wait_state(d2, 'k0', 'rolled-back', 5)
    assert nl.sizes_of(e['original']) == LEGACY
    d2.stop()


@pytest.mark.slow
def test_clean_run_under_iperf3_load_ends_applied(netns, daemon, tmp_path):
    """iperf3 at full speed through the changed devices for the whole window: no false positive."""
    a, b = netns(), netns()
    ip(a, 'link', 'add', 'ca', 'type', 'veth', 'peer', 'name', 'cb', 'netns', b)
    ip(a, 'addr', 'add', '10.66.0.1/24', 'dev', 'ca')
    ip(b, 'addr', 'add', '10.66.0.2/24', 'dev', 'cb')
    ip(a, 'link', 'set', 'ca', 'up')
    ip(b, 'link', 'set', 'cb', 'up')
    guards = ['{counter: link.tx_errors, max-increase: 0}', '{counter: link.rx_errors, max-increase: 0}',
              '{counter: Ip.InHdrErrors, max-increase: 0}', '{counter: IpExt.InTruncatedPkts, max-increase: 0}',
              '{counter: Tcp.InErrs, max-increase: 0}']
    cfgs = []
    for n, dev in ((a, 'ca'), (b, 'cb')):
        c = tmp_path / f'{dev}.yaml'
        c.write_text(policy(f'{{name: ["{dev}"]}}', guards, window='4s', interval='500ms'))
        cfgs.append(c)
    server = inject.popen_in(b, ['iperf3', '-s', '-1', '-B', '10.66.0.2'])
    try:
        da = daemon(a, cfgs[0])
        db = daemon(b, cfgs[1])
        client = inject.run_in(a, ['iperf3', '-c', '10.66.0.2', '-t', '5', '-J'], timeout=30)
        assert client.returncode == 0, client.stderr
        for d, dev in ((da, 'ca'), (db, 'cb')):
            e = wait_state(d, dev, 'applied', 10)
            assert e.get('last_rollback') is None, e
        da.stop()
        db.stop()
    finally:
        inject.stop(server)


def test_bad_guards_refused_at_check_config_and_absent_counter_reported(ns, daemon, confdir):
    from test_check_config import check_config
    bad = confdir / 'bad.yaml'
    bad.write_text(policy_text('''
        version: 1
        rollback:
          guards:
            - counter: link.tx_droped
              max-increase: 0
            - counter: Ip.InHdrErrors
              max-increase: -3
            - counter: "Tcp."
              max-ratio: 0.1
              per: Tcp.OutSegs
            - counter: Tcp.RetransSegs
              max-ratio: lots
              per: Tcp.OutSegs
        policies: []
        '''))
    r = check_config(bad)
    assert r.returncode == 1
    for line, col in ((4, 16), (7, 21), (8, 16), (12, 18)):
        assert f'{bad}:{line}:{col}: ' in r.stderr, r.stderr

    # Well-formed but not on this kernel: accepted, and reported, never silently ignored.
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('{name: ["a0", "a1"]}', ['{counter: IpExt.NoSuchCounterHere, max-increase: 0}',
                                                   '{counter: link.tx_dropped, max-increase: 0}']))
    veth(ns, 'a0', 'a1')
    d = daemon(ns, cfg)
    wait_state(d, 'a0', 'probation', 5)
    wait_state(d, 'a1', 'probation', 5)
    guards = {g['counter']: g for g in state_of(d, 'a0')['probation']['guards']}
    assert guards['IpExt.NoSuchCounterHere']['active'] is False
    assert guards['link.tx_dropped']['active'] is True
    # Said once, when the policy is loaded, not at each of the two probations that carry it.
    assert len(d.log_lines('IpExt.NoSuchCounterHere does not exist on this kernel')) == 1
    d.stop()


# --- last good after a guard trip: policy A passed its window, policy B's window trips ----------

SMALLER = sizes4(150000)


def listed(d, ifname):
    devs = call(d.runtime_dir / 'io.bigtcpd.Manager', 'io.bigtcpd.Manager.ListDevices', {'ifname': ifname},
                timeout=T(10))['devices']
    assert len(devs) == 1, devs
    return devs[0]


def a_passed_then_b(ns, daemon, confdir, ifname, env=None):
    """Policy A (185000, a 1s window) passes on `ifname`; a reload puts policy B (150000, a 30s
    window) on it. Its peer is down: frames sent into it are dropped (the guard's error source)."""
    cfg = confdir / 'bigtcpd.yaml'
    guards = ['{counter: link.tx_dropped, max-increase: 0}']
    cfg.write_text(policy(f'{{name: ["{ifname}"]}}', guards, window='1s'))
    ip(ns, 'link', 'set', ifname, 'up')
    d = daemon(ns, cfg, env=env)
    wait_state(d, ifname, 'applied', 5)
    assert nl.sizes_of(nl.read_links(ns)[ifname]) == BIG
    d.reload(lambda: write_file_atomic(cfg, policy(f'{{name: ["{ifname}"]}}', guards, window='30s')
                                       .replace('185000', '150000')))
    nl.wait_links(ns, at({ifname: SMALLER}), T(5), 'policy B in force')
    wait_state(d, ifname, 'probation', 5)
    return d, cfg


def drop_frames(ns, ifname):
    before = inject.link_stat(ns, ifname, 'tx_dropped')
    frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, ifname), '10.9.0.1', '10.9.0.2')
    assert inject.send_frames(ns, ifname, [frame] * 5) == 5
    assert inject.link_stat(ns, ifname, 'tx_dropped') > before, 'the error source did not work'


def check_held(ns, d, ifname, sizes):
    """Held at `sizes`: in the kernel, in ListDevices, and in the state file (the hold is what a
    restart reads)."""
    assert nl.sizes_of(nl.read_links(ns)[ifname]) == sizes
    x = listed(d, ifname)
    assert x['state'] == 'rolled-back' and x['held'] is True, x
    assert nl.sizes_of(x['current']) == sizes and nl.sizes_of(x['original']) == LEGACY, x
    seen = {}

    def on_disk():
        seen['entry'] = state_of(d, ifname)
        return seen['entry'] and seen['entry'].get('state') == 'rolled-back' and 'held' in seen['entry']
    wait_file(d.runtime_dir, on_disk, 5, lambda: f'{ifname} held in the state file: {seen.get("entry")}',
              directory=True)


def guards_on_disk(d, ifname):
    e = state_of(d, ifname)
    return e['probation']['guards'] if e and 'probation' in e else None


def test_reload_that_changes_only_the_guards_leaves_the_window_to_its_old_guards(ns, daemon, confdir):
    """Issue 37: the guards of a probation are its policy's rules, shared by its devices. A reload
    that changes only the guards (and the window) writes nothing: g0's window goes on, judged by
    the guards it began under (max-increase 0: their rules outlive the policy that is gone), while
    h0, written after the reload, is judged by the new ones (max-increase 1000, a 2 s window). Five
    drops on each: g0 rolls back, h0 passes its window."""
    cfg = confdir / 'bigtcpd.yaml'
    match = '{name: ["g0", "h0"]}'
    cfg.write_text(policy(match, ['{counter: link.tx_dropped, max-increase: 0}'], window='60s'))
    veth(ns, 'g0', 'g1')
    ip(ns, 'link', 'set', 'g0', 'up')          # its peer stays down: every frame is dropped
    d = daemon(ns, cfg)
    wait_state(d, 'g0', 'probation', 5)
    d.reload(lambda: write_file_atomic(cfg, policy(match, ['{counter: link.tx_dropped, max-increase: 1000}'],
                                                   window='2s')))
    assert nl.sizes_of(nl.read_links(ns)['g0']) == BIG
    assert listed(d, 'g0')['state'] == 'probation'
    veth(ns, 'h0', 'h1')
    ip(ns, 'link', 'set', 'h0', 'up')
    wait_state(d, 'h0', 'probation', 5)
    # the state file writes each window's guards with their rules: g0's are still the old ones
    assert [g['max_increase'] for g in guards_on_disk(d, 'g0')] == [0]
    assert [g['max_increase'] for g in guards_on_disk(d, 'h0')] == [1000]

    with Monitor(d) as mon:
        drop_frames(ns, 'h0')
        drop_frames(ns, 'g0')
        mon.wait_state('g0', 'rolled-back', T(5))
        mon.wait_state('h0', 'applied', T(5))
    assert nl.sizes_of(nl.read_links(ns)['g0']) == LEGACY
    assert nl.sizes_of(nl.read_links(ns)['h0']) == BIG
    x = listed(d, 'g0')
    assert x['last_rollback']['counter'] == 'link.tx_dropped', x
    assert listed(d, 'h0')['rollbacks'] == 0
    d.stop()


def test_guard_trip_goes_back_to_the_last_policy_that_passed_and_holds_across_a_restart(ns, daemon, confdir):
    veth(ns, 'lg0', 'lg1')
    d, cfg = a_passed_then_b(ns, daemon, confdir, 'lg0')
    drop_frames(ns, 'lg0')
    e = wait_state(d, 'lg0', 'rolled-back', 5)
    assert e['last_rollback']['counter'] == 'link.tx_dropped'
    assert nl.sizes_of(e['last_rollback']['to']) == BIG, \
        f'rolled back to {e["last_rollback"]["to"]}, not to policy A\'s sizes (the last that passed)'
    check_held(ns, d, 'lg0', BIG)
    d.stop()

    # A clean restart on the same policy: READY=1 comes once it has converged, so what the
    # kernel holds then is what the restart decided.
    d2 = daemon(ns, cfg, runtime_dir=d.runtime_dir)
    check_held(ns, d2, 'lg0', BIG)
    assert not d2.log_lines(r'lg0: writing'), d2.log_lines(r'lg0: ')
    d2.stop()


def test_sigkill_on_the_rollback_write_keeps_the_hold(ns, daemon, confdir, pause):
    """The shim holds the daemon right after it sent lg0's rollback write (the kernel has done
    it, the ack is unread); the daemon is killed there. The state file had the hold before the
    write: the restart keeps lg0 at policy A's sizes and does not write policy B again."""
    idx = 4411
    ip(ns, 'link', 'add', 'lg0', 'index', str(idx), 'type', 'veth', 'peer', 'name', 'lg1')
    p = pause(idx, 'write')
    d, cfg = a_passed_then_b(ns, daemon, confdir, 'lg0', env=p.env)
    p.arm()
    drop_frames(ns, 'lg0')
    p.wait_paused(5, d)
    # Where the kill lands: right after the rollback write, B -> A, and with the hold on disk.
    assert nl.sizes_of(nl.read_links(ns)['lg0']) == BIG, 'the write the shim holds on is not the rollback'
    e = state_of(d, 'lg0')
    assert 'held' in e and nl.sizes_of(e['original']) == LEGACY, e
    assert d.log_lines(r'lg0: rolling back: link.tx_dropped rose')
    d.kill(signal.SIGKILL)
    p.held = False   # the process it held is gone

    d2 = daemon(ns, cfg, runtime_dir=d.runtime_dir)
    check_held(ns, d2, 'lg0', BIG)
    assert not d2.log_lines(r'lg0: writing'), d2.log_lines(r'lg0: ')
    d2.stop()
