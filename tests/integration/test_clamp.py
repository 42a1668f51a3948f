"""Clamping: GSO never above the device's tso_max_size, and it follows tso_max_size when that
changes at run time. Nothing may be refused by the kernel."""

import pytest

import nl
from helpers import assert_sizes, at, ip, policy_text, sizes4, T, veth
from policies import standard_policy

REFUSAL_MARKERS = ('refused', 'EINVAL', 'Invalid argument')


def refusals(log):
    return [l for l in log.splitlines() if any(m in l for m in REFUSAL_MARKERS)]


BRIDGE_POLICY = standard_policy('bridges', 'kind: [bridge]')


@pytest.mark.parametrize('links_up', [False, True], ids=['down', 'up'])
def test_portless_bridge_clamped_then_rises_when_veth_joins(ns, daemon, confdir, links_up):
    """The kernel sends no notification for the bridge when its tso_max_size rises as a port
    joins (verified on 6.18: the bridge's RTM_NEWLINK is sent before the change). With the
    devices down nothing else follows, so the daemon has to look at the master itself."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(BRIDGE_POLICY)
    ip(ns, 'link', 'add', 'br0', 'type', 'bridge')
    veth(ns, 'v0', 'v1')
    if links_up:
        for dev in ('br0', 'v0', 'v1'):
            ip(ns, 'link', 'set', dev, 'up')
    assert nl.read_links(ns)['br0']['tso_max_size'] == 65536, 'premise: a portless bridge has tso 65536'

    d = daemon(ns, cfg)
    clamped = sizes4(65536, 185000, 65536, 185000)
    assert_sizes(ns, {'br0': clamped, 'v0': sizes4(65536), 'v1': sizes4(65536)}, 'portless bridge')

    with nl.LinkWatcher(ns) as w:
        ip(ns, 'link', 'set', 'v0', 'master', 'br0')
        links = w.wait(at({'br0': sizes4(185000)}), T(10), 'bridge after a veth joined')
    assert links['br0']['tso_max_size'] == 524280
    assert_sizes(ns, {'v0': sizes4(65536), 'v1': sizes4(65536)}, 'ports are not matched')
    assert not refusals(d.log()), '\n'.join(refusals(d.log()))
    d.stop()


def test_tap_and_vxlan_clamped(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_text('''
        version: 1
        policies:
          - name: all-tunnels
            match:
              name: ["t*", "vx*"]
            ipv6: {gso-max-size: 185000, gro-max-size: 185000}
            ipv4: {gso-max-size: 185000, gro-max-size: 185000}
        '''))
    ip(ns, 'tuntap', 'add', 't0', 'mode', 'tap')
    ip(ns, 'link', 'add', 'vx0', 'type', 'vxlan', 'id', '5', 'dstport', '4789')
    links = nl.read_links(ns)
    assert links['t0']['tso_max_size'] == 65536 and links['vx0']['tso_max_size'] == 65536, 'premise'
    clamped = sizes4(65536, 185000, 65536, 185000)
    d = daemon(ns, cfg)
    assert_sizes(ns, {'t0': clamped, 'vx0': clamped})
    # One created while running, too.
    ip(ns, 'tuntap', 'add', 't1', 'mode', 'tap')
    nl.wait_links(ns, at({'t1': clamped}), T(10), 'tap created after start')
    assert not refusals(d.log()), '\n'.join(refusals(d.log()))
    d.stop()
