"""A storm of link creations while the daemon is not reading, with a small receive buffer: the
kernel drops notifications for it (ENOBUFS), it must re-dump, and still ends with every device at
the policy. The netlink-pause shim holds the daemon on a read of one device while the storm
comes, so that the drops happen whatever the machine's speed; the test fails when there were
none."""

import time

import pytest

import nl
from helpers import T, ip_batch, netlink_drops, sizes4, veth
from policies import standard_policy
from varlink_client import Client

# a storm of 5000 devices: not in the quick tier
pytestmark = pytest.mark.slow

PAIRS = 2500   # 5000 devices
IFACE = 'io.bigtcpd.Manager'


def test_storm_of_5000_links_with_enobufs(ns, daemon, confdir, pause):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(standard_policy('veths', ('kind: [veth]', 'name: ["s*"]')))
    veth(ns, 'z0', 'z1')      # matches nothing: the device whose read the shim holds the daemon on
    p = pause(nl.read_links(ns)['z0']['ifindex'], 'getlink')
    d = daemon(ns, cfg, env={'BIGTCPD_NETLINK_RCVBUF': '65536', **p.env})
    assert netlink_drops(d.pid) == 0

    with Client(d.runtime_dir / IFACE, timeout=T(30)) as c:
        p.arm()
        c.send(f'{IFACE}.ListDevices', {'ifname': 'z0'})   # reads z0 from the kernel first
        p.wait_paused(5, d)
        t0 = time.monotonic()
        ip_batch(ns, [f'link add s{i}a type veth peer name s{i}b' for i in range(PAIRS)])
        t_burst = time.monotonic() - t0
        # The kernel dropped notifications for the daemon while it was held: the point of the test.
        drops = netlink_drops(d.pid)
        assert drops > 0, 'the storm caused no netlink drops for the daemon: is BIGTCPD_NETLINK_RCVBUF honoured?'
        p.release()
        assert c.recv(timeout=T(30))['parameters']['devices'][0]['ifname'] == 'z0'
    names = [f's{i}{x}' for i in range(PAIRS) for x in 'ab']
    want = sizes4(185000)

    def done(links):
        return all(n in links and nl.sizes_of(links[n]) == want for n in names)

    with nl.LinkWatcher(ns) as w:
        try:
            w.wait(done, T(120), f'{len(names)} devices at the policy')
        except TimeoutError:
            links = w.links
            bad = [n for n in names if n not in links or nl.sizes_of(links[n]) != want]
            raise AssertionError(f'{len(bad)} of {len(names)} devices not at the policy, e.g. '
                                 f'{[(n, links.get(n) and nl.sizes_of(links[n])) for n in bad[:10]]}')
    lag = time.monotonic() - t0 - t_burst
    print(f'\nburst of {len(names)} devices took {t_burst:.2f}s; all at the policy {lag:.2f}s after it; '
          f'the kernel dropped {drops} notifications for the daemon')
    assert len(nl.read_links(ns)) == len(names) + 3
    assert d.log_lines(r'receive buffer overrun \(ENOBUFS\) on the event socket'), 'no re-dump after the drops'
    d.stop(timeout=30)
