"""Matching that changes at run time (rename, routes) and policy scope (hosts, kernel)."""

import pytest

import nl
from helpers import (assert_sizes, at, device_lines, ip, policy_text, run, set_and_check,
                     sizes4, T, veth)
from policies import standard_policy

ORIG = sizes4(60000, 60001, 60002, 60003)
BIG = sizes4(185000)


def test_rename_into_and_out_of_a_name_match(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(standard_policy('big', 'name: ["big*"]'))
    veth(ns, 'v0', 'v1')
    set_and_check(ns, 'v0', ORIG)
    d = daemon(ns, cfg)
    assert_sizes(ns, {'v0': ORIG})

    with nl.LinkWatcher(ns) as w:
        ip(ns, 'link', 'set', 'v0', 'name', 'big0')   # veths are created down: rename allowed
        w.wait(at({'big0': BIG}), T(10), 'renamed into the match')
        ifindex = w.links['big0']['ifindex']
        orig = {x['ifindex']: x for x in d.state()['devices']}
        assert ifindex in orig, f'state.json does not list big0 (ifindex {ifindex}): {d.state()}'
        assert nl.sizes_of(orig[ifindex]['original']) == ORIG

        ip(ns, 'link', 'set', 'big0', 'name', 'v0')
        w.wait(at({'v0': ORIG}), T(10), 'renamed out of the match: originals back')
    assert device_lines(d.log(), 'v0', 'restoring') or device_lines(d.log(), 'big0', 'restoring'), \
        'no "restoring" line'

    # And in again, to see that a restored device is managed afresh.
    ip(ns, 'link', 'set', 'v0', 'name', 'big1')
    nl.wait_links(ns, at({'big1': BIG}), T(10), 'renamed into the match again')
    d.stop()


ROUTE_POLICY = standard_policy('uplink', 'route: [default]')


@pytest.mark.parametrize('family', ['-4', '-6'])
def test_route_default_follows_the_default_route(ns, daemon, confdir, family):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(ROUTE_POLICY)
    veth(ns, 'a0', 'a1')
    veth(ns, 'b0', 'b1')
    for dev in ('a0', 'b0'):
        set_and_check(ns, dev, ORIG)
    ip(ns, 'addr', 'add', '10.1.0.1/24', 'dev', 'a0')
    ip(ns, 'addr', 'add', '10.2.0.1/24', 'dev', 'b0')
    for dev in ('a0', 'a1', 'b0', 'b1'):
        ip(ns, 'link', 'set', dev, 'up')
    ip(ns, family, 'route', 'replace', 'default', 'dev', 'a0')

    d = daemon(ns, cfg, strace=True)
    untouched = sizes4(65536)
    assert_sizes(ns, {'a0': BIG, 'b0': ORIG, 'a1': untouched, 'b1': untouched}, 'default via a0')

    with nl.LinkWatcher(ns) as w:
        ip(ns, family, 'route', 'replace', 'default', 'dev', 'b0')
        w.wait(at({'b0': BIG, 'a0': ORIG}), T(10), 'default moved to b0')
        ip(ns, family, 'route', 'replace', 'default', 'dev', 'a0')
        w.wait(at({'a0': BIG, 'b0': ORIG}), T(10), 'default moved back to a0')
        ip(ns, family, 'route', 'del', 'default')
        w.wait(at({'a0': ORIG, 'b0': ORIG}), T(10), 'default route gone')
    links = nl.read_links(ns)
    d.stop()
    peers = {k for n in ('a1', 'b1') for k in (n, links[n]['ifindex'])}
    assert not peers & set(d.netlink_writes()), f'peers written: {d.netlink_writes()}'


SCOPE_POLICY = policy_text('''
    version: 1
    policies:
      - name: db-hosts
        hosts: ["db-*"]
        match: {name: ["a*"]}
        ipv6: {gso-max-size: 100000, gro-max-size: 100000}
      - name: web-hosts
        hosts: ["web-*"]
        match: {name: ["a*"]}
        ipv6: {gso-max-size: 150000, gro-max-size: 150000}
      - name: future-kernel
        kernel: ">= 99"
        match: {name: ["b*"]}
        ipv6: {gso-max-size: 100000, gro-max-size: 100000}
      - name: any-kernel
        kernel: ">= 3.0"
        match: {name: ["b*"]}
        ipv6: {gso-max-size: 150000, gro-max-size: 150000}
      - name: db-only
        hosts: ["db-*", "mail-*"]
        match: {name: ["c*"]}
        ipv6: {gso-max-size: 100000, gro-max-size: 100000}
      - name: future-only
        kernel: ">= 99.1"
        match: {name: ["d*"]}
        ipv6: {gso-max-size: 100000, gro-max-size: 100000}
      - name: web-and-kernel
        hosts: ["web-*"]
        kernel: ">= 3.0, < 99"
        match: {name: ["e*"]}
        ipv6: {gso-max-size: 120000, gro-max-size: 120000}
    ''')


def test_hosts_and_kernel_scope(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(SCOPE_POLICY)
    for x in 'abcde':
        veth(ns, f'{x}0', f'{x}1')
    d = daemon(ns, cfg, hostname='web-1')
    # Check that the harness really gave the daemon its own hostname (and left ours alone).
    got = run('nsenter', '-t', d.pid, '-u', 'hostname').stdout.strip()
    assert got == 'web-1', f'daemon runs with hostname {got!r}'
    assert run('hostname').stdout.strip() != 'web-1'

    web = sizes4(150000, 150000, 65536, 65536)
    assert_sizes(ns, {'a0': web, 'a1': web, 'b0': web, 'b1': web,
                      'c0': sizes4(65536), 'd0': sizes4(65536),
                      'e0': sizes4(120000, 120000, 65536, 65536)})
    d.stop()


def test_altname_mac_driver_and_negation(ns, daemon, confdir):
    """Each policy sets a distinct GRO size, so the size tells which policy matched. The driver
    comes from ethtool (an ioctl on the daemon's netlink socket), the rest from link messages."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_text('''
        version: 1
        policies:
          - name: by-altname
            match: {name: ["uplink*"]}
            ipv6: {gro-max-size: 100000}
          - name: by-mac
            match: {mac: ["02:00:00:AA:*"]}
            ipv6: {gro-max-size: 110000}
          - name: by-driver
            match: {driver: [bridge]}
            ipv6: {gro-max-size: 120000}
          - name: negated
            match: {name: ["m*", "!m3"], kind: [veth]}
            ipv6: {gro-max-size: 130000}
        '''))
    veth(ns, 'm0', 'm1')
    veth(ns, 'm2', 'm3')
    ip(ns, 'link', 'property', 'add', 'dev', 'm1', 'altname', 'uplink0')
    ip(ns, 'link', 'add', 'br0', 'type', 'bridge')
    ip(ns, 'tuntap', 'add', 't0', 'mode', 'tap')
    ip(ns, 'link', 'set', 't0', 'address', '02:00:00:aa:bb:cc')
    before = nl.read_links(ns)
    d = daemon(ns, cfg)

    def gro(n):
        return nl.sizes_of(nl.read_links(ns)[n])[1]
    assert gro('m1') == 100000        # only by its altname
    assert gro('t0') == 110000        # mac glob, case-insensitive
    assert gro('br0') == 120000       # ethtool driver "bridge"
    assert gro('m0') == 130000 and gro('m2') == 130000
    assert nl.sizes_of(nl.read_links(ns)['m3']) == nl.sizes_of(before['m3'])   # "!m3"
    # GRO only: the GSO sizes stayed.
    for n in ('m0', 'm1', 'm2', 't0', 'br0'):
        assert nl.sizes_of(nl.read_links(ns)[n])[0] == nl.sizes_of(before[n])[0]
    d.stop()
