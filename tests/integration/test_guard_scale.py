"""Guards at scale (issue 10): with 2000 devices in probation, each is still sampled every
interval — a rise on one device in the middle of the list rolls back that device within two
intervals, and no other device is touched."""

import time

import pytest

import inject
import nl
from helpers import Monitor, T, ip, ip_batch, run, sizes4
from policies import standard_policy

# a rollback within two intervals of the rise, among 2000 devices: alone, after the parallel tests
pytestmark = [pytest.mark.serial, pytest.mark.slow]

PAIRS = 1000          # 2000 devices in probation
ROGUE = 'r500a'       # in the middle of the list
INTERVAL = 1.0
BIG = sizes4(185000)
LEGACY = sizes4(65536)


def test_rise_among_2000_in_probation_rolls_back_only_its_device(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(standard_policy('pods', ('kind: [veth]', 'name: ["r*"]'), rollback=('window: 120s', 'interval: 1s', 'guards:', '  - {counter: link.tx_dropped, max-increase: 10}')))
    # No IPv6 in the namespace: no router solicitations or DAD into the veth whose peer is down,
    # only the test's own frames.
    for k in ('all', 'default'):
        run('ip', 'netns', 'exec', ns, 'sysctl', '-qw', f'net.ipv6.conf.{k}.disable_ipv6=1')
    ip_batch(ns, [f'link add r{i}a type veth peer name r{i}b' for i in range(PAIRS)])
    ip(ns, 'link', 'set', ROGUE, 'up')   # its peer stays down: what it sends is dropped
    names = [f'r{i}{x}' for i in range(PAIRS) for x in 'ab']
    d = daemon(ns, cfg, ready_timeout=60, log_level='info')
    with Monitor(d) as mon:
        mon.wait_until(lambda m: all(m.state(n) == 'probation' for n in names), 60,
                       f'{len(names)} devices in probation')
        # A few ticks pass with every device quiet: nothing is rolled back.
        mark = mon.mark()
        assert mon.no_event(lambda e: e.get('event') == 'rollback', 3 * INTERVAL) is None
        pr = mon.call('GetStatus')['probation']
        assert pr['devices'] == len(names) and pr['dumps'] >= 3, pr
        print(f'\nGetStatus probation after 3 quiet intervals: {pr}')

        frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, ROGUE), '10.9.0.1', '10.9.0.2')
        assert inject.send_frames(ns, ROGUE, [frame] * 50) == 50
        t_rise = time.monotonic()
        rb = mon.wait_for(lambda e: e.get('event') == 'rollback' and e.get('ifname') == ROGUE, 10,
                          f'{ROGUE} rolled back')
        took = time.monotonic() - t_rise
        print(f'\n{ROGUE} among {len(names)} in probation rolled back {took:.2f}s after its rise')
        assert rb['counter'] == 'link.tx_dropped' and rb['rise'] >= 50, rb
        assert took <= T(2 * INTERVAL) + 0.5, \
            f'rolled back {took:.2f}s after the rise: more than two intervals ({INTERVAL}s)'
        mon.wait_state(ROGUE, 'rolled-back', 5)

        # No one else: no rollback, no write, still in probation, still at the policy's sizes.
        others = [e for e in mon.device_events(since=mark)
                  if e.get('ifname') != ROGUE and e.get('event') in ('rollback', 'write', 'state')]
        assert others == [], others[:10]
        links = nl.read_links(ns)
        assert nl.sizes_of(links[ROGUE]) == LEGACY
        wrong = [n for n in names if n != ROGUE and nl.sizes_of(links[n]) != BIG]
        assert wrong == [], wrong[:10]
        assert all(mon.state(n) == 'probation' for n in names if n != ROGUE)
        assert mon.call('GetStatus')['probation']['devices'] == len(names) - 1
    d.stop(timeout=30)
