"""Restart: the originals survive in state.json, a converged host is not written again, and a
device that stops matching after the restart gets its pre-first-start sizes back."""

import nl
from helpers import (assert_sizes, device_lines, ip, set_and_check, sizes4,
                     state_devices, veth, write_file_atomic)
from policies import standard_policy

ORIG0 = sizes4(60000, 60001, 60002, 60003)
ORIG1 = sizes4(50000, 50001, 50002, 50003)
BIG = sizes4(185000)


def policy(names):
    return standard_policy('big', f'name: {names}')


def check_originals(state, expected):
    devs = state_devices(state)
    for name, sizes in expected.items():
        assert name in devs, f'state.json does not list {name}: {state}'
        assert nl.sizes_of(devs[name]['original']) == sizes, f'{name}: {devs[name]}'
        assert isinstance(devs[name]['ifindex'], int)


def test_restart_keeps_originals_and_writes_nothing_when_converged(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["v*"]'))
    veth(ns, 'v0', 'v1')
    set_and_check(ns, 'v0', ORIG0)
    set_and_check(ns, 'v1', ORIG1)

    d1 = daemon(ns, cfg)
    assert_sizes(ns, {'v0': BIG, 'v1': BIG})
    check_originals(d1.state(), {'v0': ORIG0, 'v1': ORIG1})
    rundir = d1.runtime_dir
    d1.stop()
    # Stopping is not un-configuring: the sizes stay (otherwise a restart could not be quiet).
    assert_sizes(ns, {'v0': BIG, 'v1': BIG}, 'after the first daemon stopped')
    check_originals(d1.state(), {'v0': ORIG0, 'v1': ORIG1})

    # A write of the values a device already has changes nothing the kernel would report (and
    # the kernel does not notify size changes at all), so watch what the daemon sends instead.
    d2 = daemon(ns, cfg, runtime_dir=rundir, strace=True)
    assert_sizes(ns, {'v0': BIG, 'v1': BIG})
    writes = d2.log_lines(r'writing')
    assert not writes, 'the second run wrote:\n' + '\n'.join(writes)
    sent = d2.netlink_writes()
    assert sent == [], f'the second run sent RTM_NEWLINK for {sent} although converged'
    check_originals(d2.state(), {'v0': ORIG0, 'v1': ORIG1})

    # v1 stops matching after the restart: back to what it had before the *first* start.
    d2.reload(lambda: write_file_atomic(cfg, policy('["v0"]')))
    assert_sizes(ns, {'v0': BIG, 'v1': ORIG1}, 'v1 no longer matches')
    assert device_lines(d2.log(), 'v1', 'restoring')
    d2.stop()


def test_restart_after_device_renamed_while_down(ns, daemon, confdir):
    """While the daemon is down a written device is renamed out of the match: the next start
    finds it by ifindex in state.json and restores it."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["v*"]'))
    veth(ns, 'v0', 'v1')
    set_and_check(ns, 'v0', ORIG0)
    d1 = daemon(ns, cfg)
    assert_sizes(ns, {'v0': BIG})
    rundir = d1.runtime_dir
    d1.stop()
    ip(ns, 'link', 'set', 'v0', 'name', 'x0')
    d2 = daemon(ns, cfg, runtime_dir=rundir)
    assert_sizes(ns, {'x0': ORIG0, 'v1': BIG}, 'renamed out of the match while the daemon was down')
    d2.stop()
