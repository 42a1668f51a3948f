"""A device's lifecycle as issue 9 and /work/round-contract.md state it, one test (or more) per
problem of the issue: leaving the match ends the probation, an operator rollback of an applied
device, max-parallel for devices that waited unmatched, a rollout halted by a rollback, sizes the
new policy leaves out, `show` fresh from the kernel, and requests owned by their device.

Every size is read back from the kernel with nl.py; states come from ListDevices and the Monitor
stream. Where the contract adds a field or event (write `cause`, `owned`, `current_age_usec`,
GetStatus `rollouts`) it is checked after the behaviour the kernel shows, so that on a daemon
without the fix the failure is the bug itself."""

import errno
import time

import pytest

import helpers
import inject
import nl
from helpers import Monitor, T, at, ip, ip_batch, policy_text, sizes4, veth, write_file_atomic
from varlink_client import Client, VarlinkError, call

IFACE = 'io.bigtcpd.Manager'
BIG = sizes4(185000)
LEGACY = sizes4(65536)


def as_dict(sizes):
    return dict(zip(nl.SIZES, sizes))


def policy(name, match, guards=(), window='30s', interval='200ms', sizes='all', rollout=None, extra=''):
    """One policy. sizes='all': the four sizes at 185000; otherwise the YAML of ipv6/ipv4."""
    body = ('ipv6: {gso-max-size: 185000, gro-max-size: 185000}\n'
            '            ipv4: {gso-max-size: 185000, gro-max-size: 185000}') if sizes == 'all' else sizes
    text = policy_text(f'''
        version: 1
        policies:
          - name: {name}
            match: {match}
            {body}
            rollback:
              window: {window}
              interval: {interval}
              guards: {'[]' if not guards else ''}
        ''') + ''.join(f'          - {g}\n' for g in guards)
    if rollout:
        text += f'    rollout: {rollout}\n'
    return text + extra


def vcall(d, method, params=None):
    return call(d.runtime_dir / IFACE, f'{IFACE}.{method}', params, timeout=T(10))


def verror(d, method, params=None):
    """The error name of a call that must fail."""
    with pytest.raises(VarlinkError) as e:
        vcall(d, method, params)
    return e.value.error, e.value.parameters


def device(d, ifname, **params):
    devs = vcall(d, 'ListDevices', {'ifname': ifname, **params})['devices']
    assert len(devs) == 1 and devs[0]['ifname'] == ifname, devs
    return devs[0]


def kernel(ns, ifname):
    return nl.sizes_of(nl.read_links(ns)[ifname])


def is_write(e, ifname=None, to=None):
    """A write event (today's daemon also says "restore" for a restore)."""
    return (e.get('event') in ('write', 'restore') and (ifname is None or e.get('ifname') == ifname)
            and (to is None or e.get('to') == as_dict(to)))


def state_ev(e, ifname, state):
    return e.get('event') == 'state' and e.get('ifname') == ifname and e.get('state') == state


# --- 1. leaving the match during probation ---------------------------------------------------------

def test_renamed_out_of_the_match_ends_its_probation(ns, daemon, confdir):
    """Renamed out of its `name` match in the middle of its window: originals back, unmanaged,
    no window left, and it never flips to applied when the window would have ended."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('renamed', '{name: ["m*"]}', ['{counter: link.tx_errors, max-increase: 0}'],
                          window='2s'))
    veth(ns, 'm0', 'q0')
    d = daemon(ns, cfg)
    with Monitor(d) as mon:
        mon.wait_state('m0', 'probation', 5)
        assert kernel(ns, 'm0') == BIG
        mark = mon.mark()
        ip(ns, 'link', 'set', 'dev', 'm0', 'name', 'z0')
        t_rename = time.monotonic()
        nl.wait_links(ns, at({'z0': LEGACY}), T(5), 'z0 (renamed out of the match) at its originals')
        mon.wait_state('z0', 'unmanaged', 5)
        x = device(d, 'z0')
        assert x['state'] == 'unmanaged' and x.get('policy') is None, x
        assert x.get('probation_left_usec') is None, \
            f'z0 is unmanaged but its probation window still runs: {x["probation_left_usec"]} us left'
        # Past the end of the window it would have had: nothing more happens to it (its restore
        # write may still be reported after the state; nothing else may come).
        def more(e):
            if e.get('ifname') != 'z0':
                return False
            if e.get('event') == 'state':
                return e.get('state') != 'unmanaged'
            return not (is_write(e, 'z0', LEGACY) and e.get('errno') is None)
        flip = mon.no_event(more, max(0.0, 2.0 + 1.0 - (time.monotonic() - t_rename)), since=mon.cursor)
        assert flip is None, f'z0 left the match, then: {flip}\nall of z0: {mon.device_events("z0", since=mark)}'
        assert kernel(ns, 'z0') == LEGACY
        assert device(d, 'z0')['state'] == 'unmanaged'
    d.stop()


def test_namespace_wide_rise_after_a_rename_out_trips_no_later_device(ns, daemon, confdir):
    """The issue's case: m0 renamed out of the match while in a 60 s window, then Ip.InHdrErrors
    rises in the namespace, then a new matching device appears. The new device's write came after
    the rise: it must stay in probation at the policy's sizes, never be rolled back by it."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('fabric', '{name: ["m*"]}', ['{counter: Ip.InHdrErrors, max-increase: 10}'],
                          window='60s'))
    veth(ns, 'm0', 'q0')
    veth(ns, 's0', 's1')               # the error source, matched by nothing
    for dev in ('s0', 's1'):
        ip(ns, 'link', 'set', dev, 'up')
    d = daemon(ns, cfg)
    problems = []
    with Monitor(d) as mon:
        mon.wait_state('m0', 'probation', 5)
        ip(ns, 'link', 'set', 'dev', 'm0', 'name', 'z0')
        nl.wait_links(ns, at({'z0': LEGACY}), T(5), 'z0 (renamed out of the match) at its originals')
        mon.wait_state('z0', 'unmanaged', 5)
        x = device(d, 'z0')
        if x.get('probation_left_usec') is not None:
            problems.append(f'z0 is unmanaged with {x["probation_left_usec"]} us of probation left')

        # The rise, while z0 would still be in its window; then the counter stands still.
        mark = mon.mark()
        before = inject.snmp_counter(ns, 'Ip.InHdrErrors')
        bad = inject.ipv4_frame(inject.mac_of(ns, 's1'), inject.mac_of(ns, 's0'), '10.9.0.1', '10.9.0.2',
                                bad_header=True)
        inject.send_frames(ns, 's0', [bad] * 50)
        assert inject.snmp_counter(ns, 'Ip.InHdrErrors') - before >= 40, 'the error source did not work'
        # A daemon still sampling z0 trips within an interval or two; give it that time to show.
        stale = mon.no_event(lambda e: e.get('event') == 'rollback', 1.0, since=mark)
        if stale is not None:
            problems.append(f'a rollback after the rise although no device was in probation: {stale}')

        # A new device, written after the rise.
        mark = mon.mark()
        veth(ns, 'm5', 'q5')
        mon.wait_for(lambda e: state_ev(e, 'm5', 'probation'), 5, 'm5 in probation', since=mark)
        hit = mon.no_event(lambda e: e.get('event') == 'rollback' and e.get('ifname') == 'm5', 3.0, since=mark)
        if hit is not None:
            problems.append(f'm5, written after the rise, was rolled back by it: {hit}')
        k = kernel(ns, 'm5')
        if k != BIG:
            problems.append(f'm5 holds {k} in the kernel, not the policy\'s {BIG}')
        x = device(d, 'm5')
        if x['state'] not in ('probation', 'applied'):
            problems.append(f'm5 is {x["state"]}, not in probation or applied (last rollback {x["last_rollback"]})')
        # z0 stays out of all of it.
        z = device(d, 'z0')
        if z['state'] != 'unmanaged' or z.get('probation_left_usec') is not None or kernel(ns, 'z0') != LEGACY:
            problems.append(f'z0 afterwards: {z}, kernel {kernel(ns, "z0")}')
    assert not problems, '\n'.join(problems)
    d.stop()


# --- 2. operator rollback of an applied device -------------------------------------------------

def applied_devices(ns, daemon, confdir, names, window='1s'):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('ops', '{name: ["o*"]}', ['{counter: link.tx_errors, max-increase: 0}'], window=window))
    for a, b in zip(names[::2], names[1::2]):
        veth(ns, a, b)
    veth(ns, 'k0', 'k1')               # never matched, never written
    d = daemon(ns, cfg)
    return d, cfg


def test_rollback_of_an_applied_device_restores_and_holds(ns, daemon, confdir):
    d, _ = applied_devices(ns, daemon, confdir, ['o0', 'o1'])
    with Monitor(d) as mon:
        mon.wait_state('o0', 'applied', 5)
        mon.wait_state('o1', 'applied', 5)
        assert kernel(ns, 'o0') == BIG
        mark = mon.mark()
        r = vcall(d, 'Rollback', {'ifname': 'o0'})
        assert r['held'] == ['o0'] and [m['ifname'] for m in r['moved']] == ['o0'] and r['refused'] == [], r
        nl.wait_links(ns, at({'o0': LEGACY}), T(5), 'o0 back at its pre-change sizes after Rollback')
        mon.wait_state('o0', 'rolled-back', 5)
        # Held: no write of its own after the rollback's, past a whole window.
        rb = mon.wait_for(lambda e: is_write(e, 'o0', LEGACY), 5, 'the rollback write of o0', since=mark)
        after = mon.no_event(lambda e: is_write(e, 'o0'), 1.5, since=mon.cursor)
        assert after is None, f'o0 written again after its rollback: {after}'
        x = device(d, 'o0')
        assert x['state'] == 'rolled-back' and x['last_rollback']['counter'] == 'operator', x
        assert x['current'] == as_dict(LEGACY) and kernel(ns, 'o0') == LEGACY
        assert kernel(ns, 'o1') == BIG and device(d, 'o1')['state'] == 'applied'
        err, params = verror(d, 'Rollback', {'ifname': 'o0'})
        assert err == f'{IFACE}.NothingToDo', (err, params)
        assert kernel(ns, 'o0') == LEGACY
        # Never written: nothing to undo.
        assert verror(d, 'Rollback', {'ifname': 'k0'})[0] == f'{IFACE}.NothingToDo'
        # The contract's Monitor fields.
        assert rb.get('cause') == 'rollback', rb
        ev = [e for e in mon.device_events('o0', 'rollback', since=mark)]
        assert ev and ev[0]['counter'] == 'operator' and ev[0]['to'] == as_dict(LEGACY), ev
    d.stop()


def test_rollback_all_restores_every_applied_device(ns, daemon, confdir):
    names = ['o0', 'o1', 'o2', 'o3']
    d, _ = applied_devices(ns, daemon, confdir, names)
    with Monitor(d) as mon:
        for n in names:
            mon.wait_state(n, 'applied', 5)
        mark = mon.mark()
        r = vcall(d, 'Rollback', {})
        assert sorted(r['held']) == sorted(names) and r['refused'] == [], r
        nl.wait_links(ns, at({n: LEGACY for n in names}), T(5), 'every applied device back at its originals')
        for n in names:
            mon.wait_state(n, 'rolled-back', 5)
            mon.wait_for(lambda e: is_write(e, n, LEGACY), 5, f'the rollback write of {n}', since=mark)
        mark = mon.mark()
        assert kernel(ns, 'k0') == LEGACY and device(d, 'k0')['state'] == 'unmanaged'
        # Again: nothing is left to undo, and a rollback that would change nothing says so.
        err, params = verror(d, 'Rollback', {})
        assert err == f'{IFACE}.NothingToDo', (err, params)
        again = mon.no_event(lambda e: is_write(e) or e.get('event') == 'rollback', 1.5, since=mark)
        assert again is None, f'a second Rollback(null) did something: {again}'
        assert all(kernel(ns, n) == LEGACY for n in names)
        assert {device(d, n)['state'] for n in names} == {'rolled-back'}
    d.stop()


def test_rollback_goes_back_one_change_not_to_the_originals(ns, daemon, confdir):
    """Two changes (185000, then 150000 by a reload): Rollback undoes the most recent one."""
    d, cfg = applied_devices(ns, daemon, confdir, ['o0', 'o1'])
    with Monitor(d) as mon:
        mon.wait_state('o0', 'applied', 5)
        mark = mon.mark()
        d.reload(lambda: write_file_atomic(cfg, cfg.read_text().replace('185000', '150000')))
        nl.wait_links(ns, at({'o0': sizes4(150000)}), T(5), 'the second policy in force')
        mon.wait_for(lambda e: state_ev(e, 'o0', 'applied'), 5, 'o0 applied at 150000', since=mark)
        mark = mon.mark()
        r = vcall(d, 'Rollback', {'ifname': 'o0'})
        assert r['held'] == ['o0'] and r['refused'] == [], r
        assert [(m['ifname'], tuple(m['to'][k] for k in nl.SIZES)) for m in r['moved']] == [('o0', BIG)], r
        nl.wait_links(ns, at({'o0': BIG}), T(5), 'o0 back at the sizes before the most recent change')
        mon.wait_state('o0', 'rolled-back', 5)
        mon.wait_for(lambda e: is_write(e, 'o0', BIG), 5, 'the rollback write of o0', since=mark)
        x = device(d, 'o0')
        assert x['original'] == as_dict(LEGACY), x
        assert mon.no_event(lambda e: is_write(e, 'o0'), 1.5, since=mon.cursor) is None
        assert kernel(ns, 'o0') == BIG
    d.stop()


# --- 3. max-parallel for devices that waited unmatched -----------------------------------------

def concurrency(events, names, big):
    """From Monitor events in order: the most devices in probation at once, and the most
    written-or-in-probation at once (a device counts from its write of the policy's sizes until
    it leaves probation)."""
    in_probation, active = set(), set()
    most_probation = most_active = 0
    for e in events:
        n = e.get('ifname')
        if n not in names:
            continue
        if is_write(e, n, big) and e.get('errno') is None:
            active.add(n)
        elif e.get('event') == 'state':
            if e['state'] == 'probation':
                in_probation.add(n)
                active.add(n)
            elif e.get('previous') == 'probation':
                in_probation.discard(n)
                active.discard(n)
        most_probation = max(most_probation, len(in_probation))
        most_active = max(most_active, len(active))
    return most_probation, most_active


def test_max_parallel_holds_for_devices_that_waited_unmatched(ns, daemon, confdir):
    names = [f'n{i}' for i in range(6)]
    guards = ['{counter: link.tx_errors, max-increase: 0}']
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('staged', '{name: ["nothing-yet"]}', guards, window='1s'))
    d = daemon(ns, cfg)
    with Monitor(d) as mon:
        ip_batch(ns, [f'link add n{i} type veth peer name n{i + 1}' for i in range(0, 6, 2)])
        # Unmatched for longer than "moments ago" (5 s): no longer new. Nothing writes them meanwhile.
        w = mon.no_event(lambda e: e.get('ifname') in names and is_write(e), 6.5)
        assert w is None, f'an unmatched device was written: {w}'
        assert all(kernel(ns, n) == LEGACY for n in names)
        mark = mon.mark()
        d.reload(lambda: write_file_atomic(cfg, policy('staged', '{name: ["n*"]}', guards, window='1s',
                                                       rollout='{max-parallel: 2}')))
        mon.wait_until(lambda m: all(m.state(n) == 'applied' for n in names), 20, 'all six applied')
        events = mon.events[mark:]
    nl.wait_links(ns, at({n: BIG for n in names}), T(5), 'all six at the policy')
    most_probation, most_active = concurrency(events, set(names), BIG)
    assert most_probation <= 2, f'{most_probation} devices in probation at once under max-parallel 2'
    assert most_active <= 2, f'{most_active} devices written or in probation at once under max-parallel 2'
    st = vcall(d, 'GetStatus')
    ro = {r['policy']: r for r in st.get('rollouts', [])}
    assert ro.get('staged', {}).get('max_parallel') == 2, st.get('rollouts')
    assert ro['staged']['active'] == 0 and ro['staged']['waiting'] == 0 and ro['staged']['halted'] is False
    d.stop()


# --- 4. a rollout halted by a rollback ----------------------------------------------------------

@pytest.mark.parametrize('parallel', [1, 2])
def test_rollback_halts_the_rollout_at_once(ns, daemon, confdir, parallel):
    names = [f'h{i}' for i in range(4)]
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('canary', '{name: ["h*"]}', ['{counter: link.tx_dropped, max-increase: 0}'],
                          window='5s', rollout=f'{{max-parallel: {parallel}}}'))
    for i, n in enumerate(names):
        veth(ns, n, f'p{i}')
        ip(ns, 'link', 'set', n, 'up')   # its peer stays down: every frame sent into it is dropped
    d = daemon(ns, cfg)
    with Monitor(d) as mon:
        mon.wait_until(lambda m: sum(m.state(n) == 'probation' for n in names) == parallel, 5,
                       f'{parallel} devices in probation')
        first = [n for n in names if mon.state(n) == 'probation']
        rest = [n for n in names if n not in first]
        assert all(kernel(ns, n) == BIG for n in first) and all(kernel(ns, n) == LEGACY for n in rest)
        victim = first[0]
        mark = mon.mark()
        frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, victim), '10.9.0.1', '10.9.0.2')
        assert inject.send_frames(ns, victim, [frame] * 5) == 5
        nl.wait_links(ns, at({victim: LEGACY}), T(5), f'{victim} rolled back')
        mon.wait_state(victim, 'rolled-back', 5)
        # Halted: none of the rest gets the same sizes, not even one already queued.
        w = mon.no_event(lambda e: e.get('ifname') in rest and is_write(e, to=BIG), 3.0, since=mark)
        links = nl.read_links(ns)
        got = {n: nl.sizes_of(links[n]) for n in rest}
        assert w is None and all(s == LEGACY for s in got.values()), \
            f'rollout went on after {victim} was rolled back: event {w}, kernel {got}'
        for n in rest:
            assert device(d, n)['state'] == 'pending', device(d, n)
        st = vcall(d, 'GetStatus')
        ro = {r['policy']: r for r in st.get('rollouts', [])}
        assert ro.get('canary', {}).get('halted') is True, st.get('rollouts')
        assert ro['canary']['halted_by'] == victim and ro['canary']['max_parallel'] == parallel
        halted = mon.device_events(kind='rollout', since=mark)
        assert halted and halted[0]['policy'] == 'canary' and halted[0]['halted'] is True \
            and halted[0]['ifname'] == victim, halted
        assert d.log_lines(r'halt'), 'the halt is not logged'
        assert {device(d, n).get('pending') for n in rest} == {'rollout-halted'}, [device(d, n) for n in rest]
    d.stop()


# --- 5. sizes the new policy leaves out ---------------------------------------------------------

def test_sizes_the_new_policy_leaves_out_go_back_to_the_originals(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('four', '{name: ["e0"]}'))
    veth(ns, 'e0', 'e1')
    d = daemon(ns, cfg)
    assert kernel(ns, 'e0') == BIG
    d.reload(lambda: write_file_atomic(cfg, policy('one', '{name: ["e0"]}', sizes='ipv6: {gso-max-size: 150000}')))
    want = (150000, 65536, 65536, 65536)
    nl.wait_links(ns, at({'e0': want}), T(5), 'gso_max_size from the new policy, the three it leaves out original')
    x = device(d, 'e0')
    assert x['policy'] == 'one' and x['current'] == as_dict(want), x
    assert x['original'] == as_dict(LEGACY), x
    assert x.get('owned') == ['gso_max_size'], x
    d.stop()


# --- 6. show and list report what the kernel holds ----------------------------------------------

def outside_change(ns, ifname):
    """Another tool changes the sizes (the kernel sends no event); returns the kernel's sizes."""
    helpers.set_and_check(ns, ifname, sizes4(100000))
    return kernel(ns, ifname)


def test_show_reads_the_device_from_the_kernel(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('fresh', '{name: ["f0"]}'))
    veth(ns, 'f0', 'f1')
    d = daemon(ns, cfg, extra_args=('--verify-interval', '1h'))
    assert kernel(ns, 'f0') == BIG and device(d, 'f0')['current'] == as_dict(BIG)
    k1 = outside_change(ns, 'f0')
    x = device(d, 'f0')
    k2 = kernel(ns, 'f0')   # the daemon may put its sizes back right after reading them
    assert x['current'] in (as_dict(k1), as_dict(k2)), \
        f'ListDevices(f0) says {x["current"]}; the kernel held {k1} (and {k2} right after)'
    d.stop()


def test_list_says_how_old_its_sizes_are_or_reads_them(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('fresh', '{name: ["f0"]}'))
    veth(ns, 'f0', 'f1')
    d = daemon(ns, cfg, extra_args=('--verify-interval', '1h'))
    k1 = outside_change(ns, 'f0')
    t_change = time.monotonic()
    since = time.monotonic() - t_change   # less than the age of any value read before the change
    devs = {x['ifname']: x for x in vcall(d, 'ListDevices')['devices']}
    assert all(isinstance(x.get('current_age_usec'), int) and x['current_age_usec'] >= 0 for x in devs.values()), \
        f'ListDevices without ifname has no current_age_usec: {devs["f0"]}'
    f0 = devs['f0']
    if f0['current'] != as_dict(k1):
        # stale is allowed only when it says so: read before the outside change
        assert f0['current_age_usec'] >= since * 1e6, \
            f'f0 says {f0["current"]}, read {f0["current_age_usec"]} us ago, but the kernel has held {k1} for {since:.3f}s'
    x = {x['ifname']: x for x in vcall(d, 'ListDevices', {'refresh': True})['devices']}['f0']
    k2 = kernel(ns, 'f0')
    assert x['current'] in (as_dict(k1), as_dict(k2)), f'ListDevices(refresh) says {x["current"]}, kernel {k1}/{k2}'
    d.stop()


# --- 7. requests owned by their device -----------------------------------------------------------

def wait_written(ns, d, ifname, ifindex, what):
    """Wait for the policy's sizes on the successor; on failure say what the daemon believes of
    that ifindex (an ack or sample that reached it shows as a device "at" the sizes)."""
    try:
        nl.wait_links(ns, at({ifname: BIG}), T(5), what)
    except TimeoutError as e:
        seen = [x for x in vcall(d, 'ListDevices')['devices'] if x['ifindex'] == ifindex]
        raise AssertionError(f'{e}\nthe daemon\'s view of ifindex {ifindex}: {seen}') from None


def recreate_under(ns, old, new, peer, ifindex):
    """Delete `old`, create `new` with the same ifindex; check the kernel did both."""
    ip(ns, 'link', 'del', old)
    ip(ns, 'link', 'add', new, 'index', str(ifindex), 'type', 'veth', 'peer', 'name', peer)
    links = nl.read_links(ns)
    assert old not in links and links[new]['ifindex'] == ifindex, nl.format_table(links)
    assert nl.sizes_of(links[new]) == LEGACY


@pytest.mark.parametrize('how', ['retry', 'rollback'])
def test_ack_of_a_deleted_devices_write_never_reaches_its_successor(ns, daemon, confdir, pause, how):
    """w0's write is out (a Retry's policy write, or an operator rollback's), its ack unread; w0
    goes and w9 comes under the same ifindex. The write is sent from a varlink call, so the
    daemon next reads the link events and the ack in one go: the order in which an ack without
    an owner lands on w9. (A write sent while the daemon reads link events is followed at once
    by the events in the same read, and then the successor's own write hides a misrouted ack.)"""
    idx = 4242
    p = pause(idx, 'write')
    cfg = confdir / 'bigtcpd.yaml'
    # A namespace-wide guard: probation without per-link stats requests, only the write is in play.
    cfg.write_text(policy('owned', '{name: ["w*"]}', ['{counter: Ip.InHdrErrors, max-increase: 1000}'],
                          window='30s'))
    ip(ns, 'link', 'add', 'w0', 'index', str(idx), 'type', 'veth', 'peer', 'name', 'q0')
    d = daemon(ns, cfg, env=p.env)
    with Monitor(d) as mon, Client(d.runtime_dir / IFACE, timeout=T(20)) as c:
        mon.wait_state('w0', 'probation', 5)
        if how == 'retry':
            assert vcall(d, 'Rollback', {'ifname': 'w0'})['held'] == ['w0']
            nl.wait_links(ns, at({'w0': LEGACY}), T(5), 'w0 rolled back')
            mon.wait_state('w0', 'rolled-back', 5)
        in_flight = BIG if how == 'retry' else LEGACY
        p.arm()
        c.send(f'{IFACE}.Retry' if how == 'retry' else f'{IFACE}.Rollback', {'ifname': 'w0'})
        p.wait_paused(5, d)
        # The kernel did w0's write; its ack waits in the daemon's socket.
        assert kernel(ns, 'w0') == in_flight
        recreate_under(ns, 'w0', 'w9', 'q9', idx)
        p.release()
        # the reply says what became of the write: w0 went before its ack was handled
        r = c.recv(timeout=T(10))['parameters']
        assert [(m['ifname'], m['errno']) for m in r['refused']] == [('w0', errno.ENODEV)], r
        assert r['moved'] == r['held'] == r['released'] == r['pending'] == [], r
        wait_written(ns, d, 'w9', idx, f'w9 (ifindex {idx}, created while w0\'s {how} write was unacked) written')
        mon.wait_state('w9', 'probation', 5)
        x = device(d, 'w9')
        assert x['ifindex'] == idx and x['current'] == as_dict(kernel(ns, 'w9')), x
        assert x['state'] == 'probation' and x['original'] == as_dict(LEGACY), x
    d.stop()


def test_sample_of_a_deleted_device_never_reaches_its_successor(ns, daemon, confdir, pause):
    idx = 4343
    p = pause(idx, 'getstats')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('owned', '{name: ["g*"]}', ['{counter: link.tx_dropped, max-increase: 0}'],
                          window='30s'))
    ip(ns, 'link', 'add', 'g0', 'index', str(idx), 'type', 'veth', 'peer', 'name', 'q0')
    ip(ns, 'link', 'set', 'g0', 'up')          # q0 stays down: frames sent into g0 are dropped
    # g0 has dropped a lot before bigtcpd wrote it: its sample carries counters the new device
    # has never had.
    frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, 'g0'), '10.9.0.1', '10.9.0.2')
    inject.send_frames(ns, 'g0', [frame] * 300)
    assert inject.link_stat(ns, 'g0', 'tx_dropped') >= 300
    d = daemon(ns, cfg, env=p.env)
    with Monitor(d) as mon:
        mon.wait_state('g0', 'probation', 5)
        p.arm()
        p.wait_paused(5, d)    # a tick's statistics dump is out, g0's entry in it waits unread
        recreate_under(ns, 'g0', 'g9', 'q9', idx)
        ip(ns, 'link', 'set', 'g9', 'up')
        p.release()
        wait_written(ns, d, 'g9', idx, f'g9 (ifindex {idx}, created while g0\'s sample was unread) written')
        mon.wait_state('g9', 'probation', 5)
        x = device(d, 'g9')
        assert x['ifindex'] == idx and x['current'] == as_dict(kernel(ns, 'g9')), x
        # The guard of the new device works on its own counters.
        mark = mon.mark()
        frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, 'g9'), '10.9.0.1', '10.9.0.2')
        assert inject.send_frames(ns, 'g9', [frame] * 5) == 5
        nl.wait_links(ns, at({'g9': LEGACY}), T(5), 'g9 rolled back by its own dropped frames')
        mon.wait_state('g9', 'rolled-back', 5)
        rb = mon.device_events('g9', 'rollback', since=mark)
        assert rb and rb[0]['counter'] == 'link.tx_dropped' and 1 <= rb[0]['rise'] <= 10, rb
    d.stop()
