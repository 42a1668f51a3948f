"""Evidence that BIG TCP is in effect: while a device is in probation (or watched on request)
bigtcpd counts the packets above 64 KiB it really sends and receives, with a filtered packet
socket bound to that device alone. A veth pair across two namespaces, iperf3 between them; the
daemon's figures are checked against what the policy makes possible, its sockets against
/proc/net/packet of its namespace."""

import json
import os
import re
import select
import subprocess
import time

import pytest

import nl
import varlink_client
import varlink_idl
from helpers import BIN, REPO, Iperf, Monitor, T, ip, policy_text, wait_file
from varlink_client import Client, VarlinkError

# iperf3 through windows of counting: not in the quick tier
pytestmark = pytest.mark.slow

IFACE = 'io.bigtcpd.Manager'
BIG = 185000
IFF_RUNNING = 0x40
IPERF_SECONDS = 2


@pytest.fixture(params=['ebpf', 'packet-socket'])
def observer(request):
    """Every test runs with the eBPF observer and again with the packet sockets it falls back on."""
    return request.param


@pytest.fixture
def daemon(daemon, observer):
    def start(ns, config, **kw):
        kw['extra_args'] = (*kw.get('extra_args', ()), f'--observer={observer}')
        return daemon(ns, config, **kw)
    start.sockdir = daemon.sockdir
    return start


@pytest.fixture(scope='module')
def iface():
    return varlink_idl.parse((REPO / 'conf' / 'io.bigtcpd.Manager.varlink').read_text())


def policy(ipv6=None, ipv4=None, window='6s'):
    """e0 at these sizes (a family left out stays as it is), with a guard that never trips: a
    probation window needs one."""
    fam = ''.join(f'    {k}: {{gso-max-size: {v}, gro-max-size: {v}}}\n' for k, v in (('ipv6', ipv6), ('ipv4', ipv4))
                  if v)
    return policy_text(f'''
        version: 1
        policies:
          - name: evidence
            match: {{name: [e0]}}
            rollback:
              window: {window}
              interval: 500ms
              guards:
                - counter: link.tx_errors
                  max-increase: 1000000
        ''') + fam


def pair(netns, peer_sizes=None):
    """e0 in the daemon's namespace, its peer e1 in another, both with IPv4 and IPv6 addresses."""
    a, b = netns(), netns()
    ip(a, 'link', 'add', 'e0', 'type', 'veth', 'peer', 'name', 'e1', 'netns', b)
    ip(a, 'addr', 'add', '10.13.0.1/24', 'dev', 'e0')
    ip(a, 'addr', 'add', 'fd13::1/64', 'dev', 'e0', 'nodad')
    ip(b, 'addr', 'add', '10.13.0.2/24', 'dev', 'e1')
    ip(b, 'addr', 'add', 'fd13::2/64', 'dev', 'e1', 'nodad')
    if peer_sizes:
        # the peer sends big packets too, so that e0 receives some
        ip(b, 'link', 'set', 'e1', 'gso_max_size', str(peer_sizes), 'gro_max_size', str(peer_sizes))
    ip(a, 'link', 'set', 'e0', 'up')
    ip(b, 'link', 'set', 'e1', 'up')
    # The carrier comes up asynchronously (linkwatch); until it does, neighbour discovery fails
    # and iperf3 finds "no route to host". Its link event is what is waited for: linkwatch runs
    # under the RTNL lock, which other tests' thousands of devices may hold for seconds.
    for ns, name in ((a, 'e0'), (b, 'e1')):
        nl.wait_links(ns, lambda links: name in links and links[name]['flags'] & IFF_RUNNING, T(60),
                      f'{name} running')
    return a, b


def iperf(ns, server, *extra, seconds=IPERF_SECONDS):
    srv = Iperf(server[0])
    try:
        r = subprocess.run(['ip', 'netns', 'exec', ns, 'iperf3', '-c', server[1], '-t', str(seconds), '-J', *extra],
                           capture_output=True, text=True, timeout=seconds + 30)
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout)
        assert 'sum_received' in out['end'] or 'sum_sent' in out['end'], r.stdout[-3000:]
        return out
    finally:
        srv.close()


def call(d, method, params=None):
    return varlink_client.call(d.runtime_dir / IFACE, f'{IFACE}.{method}', params, timeout=T(10))


def cpu_seconds(pid):
    """The CPU time (user + system) of pid so far, from /proc/PID/stat."""
    with open(f'/proc/{pid}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def device(d, name='e0'):
    return call(d, 'ListDevices', {'ifname': name})['devices'][0]


def all_packet_sockets(ns):
    out = subprocess.run(['ip', 'netns', 'exec', ns, 'cat', '/proc/net/packet'], capture_output=True, text=True,
                         check=True).stdout.splitlines()[1:]
    return [line.split() for line in out]     # sk RefCnt Type Proto Iface R Rmem User Inode


def packet_sockets(ns, ifindex=None):
    """The packet sockets of `ns` (/proc/net/packet there) bound to a device, optionally to
    ifindex. The spares made ahead (bound to none, protocol 0, not running: they receive nothing)
    are not among them; spare_sockets() are those."""
    return [r for r in all_packet_sockets(ns) if int(r[4]) != 0 and (ifindex is None or int(r[4]) == ifindex)]


def spare_sockets(ns):
    rows = [r for r in all_packet_sockets(ns) if int(r[4]) == 0]
    assert all(r[3] == '0000' and r[5] == '0' for r in rows), f'a spare socket that receives: {rows}'
    return rows


def wait_evidence(mon, ifname, timeout, since=0):
    """The Monitor's "evidence" event of `ifname`: its watch ended."""
    return mon.wait_for(lambda e: e.get('event') == 'evidence' and e.get('ifname') == ifname, T(timeout),
                        'evidence event', since=since)


@pytest.mark.parametrize('family', ['ipv4', 'ipv6'])
def test_big_packets_counted_in_probation(netns, daemon, confdir, iface, family, observer):
    """At 185000 for one family only (the other stays at 65536: for IPv4 this is IPv4-only BIG TCP,
    gso_max_size 65536), iperf3 in both directions during probation: big packets sent and
    received, of that family, the largest above 65536; the window ends effective."""
    a, b = pair(netns, peer_sizes=BIG if family == 'ipv6' else None)
    if family == 'ipv4':
        nl.set_sizes(b, 'e1', gso_ipv4_max_size=BIG, gro_ipv4_max_size=BIG)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(**{family: BIG}))
    d = daemon(a, cfg)
    with Monitor(d) as mon:
        mon.wait_state('e0', ['probation'], T(10))
        e0 = device(d)
        assert e0['big_packets'] is not None and e0['big_packets']['watching'] is True, e0
        # its socket may come after the write (made by the child, when none was ready)
        wait_file(d.log_path, lambda: 'e0: evidence: counting' in d.log(), 10, 'e0 counted')
        # the observer counts in the kernel: no packet socket at all
        assert len(packet_sockets(a, e0['ifindex'])) == (1 if observer == 'packet-socket' else 0)
        server = (b, '10.13.0.2' if family == 'ipv4' else 'fd13::2')
        run = iperf(a, server, '--bidir')
        gbps = {k: round(v['bits_per_second'] / 1e9, 1) for k, v in run['end'].items() if 'bits_per_second' in v}
        e0 = device(d)
        varlink_idl.check_reply(iface, 'ListDevices', {'devices': [e0]})
        bp = e0['big_packets']
        assert e0['state'] == 'probation', 'counted while in probation'
        assert bp['tx'] > 0 and bp['tx_largest'] > 65536, (bp, gbps, packet_sockets(a, e0['ifindex']))
        assert bp['rx'] > 0 and bp['rx_largest'] > 65536, bp
        assert bp['tx_largest'] <= BIG + 14 and bp['rx_largest'] <= BIG + 14, bp
        other = 'ipv6' if family == 'ipv4' else 'ipv4'
        assert bp[family] == bp['tx'] + bp['rx'] and bp[other] == 0, bp
        print(f'{family}: {bp}')

        ev = wait_evidence(mon, 'e0', 15)
        varlink_idl.check_reply(iface, 'Monitor', ev)
        assert ev['effective'] is True, ev
        mon.wait_state('e0', ['applied'], T(10))
    e0 = device(d)
    assert e0['state'] == 'applied' and e0['effective'] is True, e0
    assert e0['big_packets']['watching'] is False and e0['big_packets']['raised'] == [family], e0
    assert packet_sockets(a, e0['ifindex']) == [], 'the window is over: nothing attached'
    assert not d.log_lines('not in effect')
    st = call(d, 'GetStatus')
    assert {k: st['evidence'][k] for k in ('watched', 'not_effective', 'not_effective_families')} == \
        {'watched': 0, 'not_effective': [], 'not_effective_families': []}, st['evidence']
    assert st['evidence']['observer'] == observer, st['evidence']
    assert ('observer_why' in st['evidence']) == (observer != 'ebpf'), st['evidence']
    d.stop()


def test_legacy_counts_zero_and_is_not_effective(netns, daemon, confdir, iface):
    """At 65536 the same traffic has not one packet above 64 KiB: zero, and after the window (with
    traffic) not effective — shown by ListDevices, status, show and metrics, logged once."""
    a, b = pair(netns)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(ipv6=65536, ipv4=65536))
    ip(a, 'link', 'set', 'e0', 'gso_max_size', str(BIG), 'gro_max_size', str(BIG))  # so that 65536 is a write
    d = daemon(a, cfg)
    with Monitor(d) as mon:
        mon.wait_state('e0', ['probation'], T(10))
        iperf(a, (b, '10.13.0.2'), '--bidir')
        iperf(a, (b, 'fd13::2'), '--bidir', seconds=1)
        bp = device(d)['big_packets']
        assert (bp['tx'], bp['rx'], bp['tx_largest'], bp['rx_largest']) == (0, 0, 0, 0), bp
        ev = wait_evidence(mon, 'e0', 15)
        assert ev['effective'] is False, ev
        mon.wait_state('e0', ['applied'], T(10))    # information, not a rollback
    e0 = device(d)
    varlink_idl.check_reply(iface, 'ListDevices', {'devices': [e0]})
    bp = e0['big_packets']
    assert e0['effective'] is False and bp['full_ipv4'] > 0 and bp['full_ipv6'] > 0, e0
    assert e0['state'] == 'applied', 'information, not a rollback'
    st = call(d, 'GetStatus')
    varlink_idl.check_reply(iface, 'GetStatus', st)
    assert st['evidence']['not_effective'] == ['e0'], st['evidence']
    # no family raised (65536): the device as a whole, no family named
    assert st['evidence']['not_effective_families'] == [{'device': 'e0', 'families': []}], st['evidence']
    assert len(d.log_lines(r'e0: BIG TCP not in effect')) == 1, d.log_tail()

    ctl = [str(BIN.parent.parent / 'cli' / 'bigtcpctl'), '--socket', str(d.runtime_dir / IFACE)]
    if True:
        show = subprocess.run([*ctl, 'show', 'e0'], capture_output=True, text=True, check=True).stdout
        assert '0 sent above 64 KiB' in show and 'In effect: no' in show, show
        status = subprocess.run([*ctl, 'status'], capture_output=True, text=True, check=True).stdout
        assert 'not in effect on e0 (bigtcpctl show DEV)' in status, status
        metrics = subprocess.run([*ctl, 'metrics'], capture_output=True, text=True, check=True).stdout
        assert 'bigtcpd_device_effective{ifname="e0",policy="evidence"} 0' in metrics, metrics
        assert 'bigtcpd_device_big_packets{ifname="e0",policy="evidence",direction="tx"} 0' in metrics
        assert 'bigtcpd_devices_not_effective 1' in metrics
    d.stop()


@pytest.mark.serial  # the daemon's CPU seconds against a watch's time
def test_unwatched_device_has_nothing_attached(netns, daemon, confdir, observer):
    """A device that matches no policy (never in probation) and is not watched has no packet
    socket; one in probation has exactly one, bound to it; a Watch() attaches one for its time,
    answers with the counts when it is over, and leaves nothing behind."""
    a, b = pair(netns)
    ip(a, 'link', 'add', 'u0', 'type', 'veth', 'peer', 'name', 'u1')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(ipv6=BIG, ipv4=BIG, window='3s'))
    d = daemon(a, cfg)
    u0 = device(d, 'u0')
    ebpf = observer == 'ebpf'
    assert u0['state'] == 'unmanaged' and u0.get('effective') is None, u0
    # the observer counts every device always (nothing yet on u0); packet sockets only the watched
    if ebpf:
        assert u0['big_packets']['tx'] == 0 and u0['big_packets']['watching'] is False, u0
    else:
        assert u0.get('big_packets') is None, u0
    e0 = device(d)
    if e0['state'] == 'probation':
        wait_file(d.log_path, lambda: 'e0: evidence: counting' in d.log(), 10, 'e0 counted')
    socks = packet_sockets(a)
    assert [int(r[4]) for r in socks] == ([e0['ifindex']] if e0['state'] == 'probation' and not ebpf else []), socks
    assert packet_sockets(a, u0['ifindex']) == []
    # made ahead, so that a watch's start does not wait for the kernel: at most EVIDENCE_SPARE,
    # receiving nothing; none with the observer
    assert len(spare_sockets(a)) <= (0 if ebpf else 2)

    # A watch on request: attached for its time, an answer when it is over, then nothing. u0 is
    # down: its socket holds ENETDOWN from the bind, which the daemon must read and not spin on
    # (it did: epoll said readable until the error was read).
    c = Client(d.runtime_dir / IFACE, timeout=T(20))
    cpu0 = cpu_seconds(d.proc.pid)
    c.send(f'{IFACE}.Watch', {'ifname': 'u0', 'duration_usec': 1500000})
    wait_file(d.log_path, lambda: 'u0: evidence: counting' in d.log(), 5, 'the watch set up')
    assert len(packet_sockets(a, u0['ifindex'])) == (0 if ebpf else 1), 'Watch attached one socket to u0'
    t0 = time.monotonic()
    reply = c.recv(timeout=T(20))
    took = time.monotonic() - t0
    dev = reply['parameters']['device']
    assert dev['ifname'] == 'u0' and dev['big_packets']['watching'] is False, reply
    busy = cpu_seconds(d.proc.pid) - cpu0
    assert busy < 0.5 * took, f'the daemon was busy {busy:.2f} s of the {took:.2f} s a watch of a down device took'

    assert dev['big_packets']['tx'] == 0 and dev.get('effective') is None, 'idle: no verdict'
    assert took < T(5), f'Watch answered {took:.1f}s after it attached, for a 1.5 s window'
    assert packet_sockets(a, u0['ifindex']) == [], 'the watch is over: nothing attached'

    with pytest.raises(VarlinkError) as ex:
        c.call(f'{IFACE}.Watch', {'ifname': 'nosuch0'})
    assert ex.value.error == f'{IFACE}.NoSuchDevice'
    with pytest.raises(VarlinkError) as ex:
        c.call(f'{IFACE}.Watch', {'ifname': 'u0', 'duration_usec': 0})
    assert ex.value.error == 'org.varlink.service.InvalidParameter'
    c.close()
    assert packet_sockets(a, u0['ifindex']) == []
    assert len(spare_sockets(a)) <= 2
    d.stop()


@pytest.mark.serial  # a 1 s watch answers within 2 s
def test_watch_in_probation_answers_after_its_own_duration(netns, daemon, confdir):
    """e0 in a 60 s probation is watched already, longer than a Watch of 1 s asks: the call
    answers after its own second, with what the running window counted so far, which goes on."""
    a, _ = pair(netns)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(ipv6=BIG, ipv4=BIG, window='60s'))
    d = daemon(a, cfg)
    assert device(d)['state'] == 'probation'
    t0 = time.monotonic()
    with Client(d.runtime_dir / IFACE, timeout=T(20)) as c:
        dev = c.call(f'{IFACE}.Watch', {'ifname': 'e0', 'duration_usec': 1000000})['device']
    took = time.monotonic() - t0
    assert 1.0 <= took < 1.0 + T(1), f'answered after {took:.2f}s for a 1 s watch'
    assert dev['state'] == 'probation' and dev['big_packets']['watching'] is True, dev
    assert dev['big_packets']['watch_left_usec'] > 50_000_000, dev
    again = device(d)
    assert again['state'] == 'probation' and again['big_packets']['watching'] is True, again


# ---- the verdict: per family, and never a false alarm ----

def both_raised(netns, daemon, confdir):
    """e0 (the daemon's) and its peer e1, both families at BIG on e1 (so that big packets come
    both ways), e0 written by the policy, its probation over: the namespaces and the daemon."""
    a, b = pair(netns, peer_sizes=BIG)
    nl.set_sizes(b, 'e1', gso_ipv4_max_size=BIG, gro_ipv4_max_size=BIG)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(ipv6=BIG, ipv4=BIG, window='1s'))
    d = daemon(a, cfg)
    with Monitor(d) as mon:
        settled(d, mon)
    return a, b, d


def settled(d, mon, ifname='e0'):
    """Applied, its probation's count over: a Watch starts a count of its own."""
    mon.wait_until(lambda m: (lambda x: x['state'] == 'applied' and x.get('big_packets') is not None and
                              not x['big_packets']['watching'])(device(d, ifname)), T(20),
                   f'{ifname} applied, its count over')


def watch_during(d, ifname, seconds, traffic, mark=None):
    """Watch() `ifname` for `seconds`, run traffic() once its count started (the log's `mark`,
    by default its count's start; a watch that extends a probation's count says "watching for");
    the device of the answer."""
    mark = mark or f'{ifname}: evidence: counting'
    before = d.log().count(mark)
    c = Client(d.runtime_dir / IFACE, timeout=T(seconds + 30))
    try:
        c.send(f'{IFACE}.Watch', {'ifname': ifname, 'duration_usec': int(seconds * 1e6)})
        wait_file(d.log_path, lambda: d.log().count(mark) > before, 10, 'the count started')
        traffic()
        reply = c.recv(timeout=T(seconds + 30))
    finally:
        c.close()
    return reply['parameters']['device']


def show(d, ifname='e0'):
    ctl = [str(BIN.parent.parent / 'cli' / 'bigtcpctl'), '--socket', str(d.runtime_dir / IFACE)]
    return subprocess.run([*ctl, 'show', ifname], capture_output=True, text=True, check=True).stdout


def test_ipv6_only_traffic_is_named_ipv6_only(netns, daemon, confdir, iface):
    """Both families raised, IPv6 traffic only: in effect, by big packets of IPv6 — the words name
    IPv6 alone, and the idle IPv4 is neither named in effect nor not in effect."""
    a, b, d = both_raised(netns, daemon, confdir)
    dev = watch_during(d, 'e0', 4, lambda: iperf(a, (b, 'fd13::2'), '--bidir', '-b', '2G'))
    varlink_idl.check_reply(iface, 'ListDevices', {'devices': [dev]})
    bp = dev['big_packets']
    assert bp['ipv6'] > 0 and bp['ipv4'] == 0, bp
    assert dev['effective'] is True and bp['quiet'] == [] and sorted(bp['raised']) == ['ipv4', 'ipv6'], dev
    text = show(d)
    assert 'In effect: yes, big packets in IPv6\n' in text, text
    assert 'IPv4' not in text.split('In effect:')[1], text
    assert not d.log_lines('not in effect')
    d.stop()


def test_paced_traffic_gives_no_verdict(netns, daemon, confdir):
    """App-limited traffic (iperf3 -N -l 1000 -b 200M) makes (almost) no packet near 64 KiB:
    never "not in effect" — neither the words, the log nor the status."""
    a, b, d = both_raised(netns, daemon, confdir)
    dev = watch_during(d, 'e0', 4, lambda: iperf(a, (b, 'fd13::2'), '-6', '-N', '-l', '1000', '-b', '200M'))
    bp = dev['big_packets']
    # a few writes may still coalesce into a big packet (then it is in effect, rightly); what
    # may never come is "not in effect"
    assert dev.get('effective') is not False and bp.get('quiet') in (None, []), dev
    assert not d.log_lines('not in effect'), d.log_tail()
    text = show(d)
    assert 'In effect: no' not in text, text
    if bp['tx'] + bp['rx'] == 0:
        assert dev.get('effective') is None and 'no traffic that could show it' in text, text
    st = call(d, 'GetStatus')
    assert st['evidence']['not_effective'] == [], st['evidence']
    d.stop()


@pytest.mark.serial  # what GRO makes of the traffic depends on the receiver's timing
def test_ipv4_not_big_on_the_path_names_ipv4(netns, daemon, confdir, iface):
    """Both families raised on e0; its peer sends IPv6 above 64 KiB but IPv4 at 64 KiB at most
    (its gso_ipv4_max_size stays 65536: a peer without IPv4 BIG TCP, or a 6.7 kernel that
    segments IPv4 above gso_max_size in software). e0 receives both: IPv4 — packets at the
    ceiling, none above — is the family named not in effect; IPv6 (big ones) is not.

    (A path that drops IPv4 packets above 64 KiB, nftables `meta length > 65536` at the receiver
    or a router, is not this: the packet socket sees a received packet before netfilter drops it,
    and TCP through such a path collapses to a crawl of small packets, 20 Mbit/s here, that make
    no packet at the ceiling: no verdict, rightly not a false one.)"""
    a, b = pair(netns, peer_sizes=BIG)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(ipv6=BIG, ipv4=BIG, window='1s'))
    d = daemon(a, cfg)
    with Monitor(d) as mon:
        settled(d, mon)
    runs = []

    def traffic():
        # paced below what the ring takes on a busy machine: a missed packet could have been a big
        # one, and a family with missed packets is never called not in effect. The ring holds
        # ~170 packets; at 1 Gbit/s of 185000-byte packets (~700 a second), and 1 in 16 of the
        # ~2900 a second at the IPv4 ceiling, it is full after ~200 ms without a read (at 2 and
        # 3 Gbit/s an ASan daemon beside CI's package build missed 177)
        runs.append(iperf(b, (a, '10.13.0.1'), '-b', '1500M', seconds=2)['end']['sum_received']['bits_per_second'] / 1e9)
        runs.append(iperf(b, (a, 'fd13::1'), '-b', '1G', seconds=2)['end']['sum_received']['bits_per_second'] / 1e9)
    # A window whose ring overflowed (`missed`, said by the daemon: the loop away for a few hundred
    # ms, 177 and 667 of ~1900 in two CI runs of eight, the package building beside) judges no
    # family not in effect, rightly; the verdict asked for needs one that missed nothing: up to
    # three windows.
    for attempt in range(3):
        runs.clear()
        dev = watch_during(d, 'e0', 6, traffic)
        if dev['big_packets']['missed'] == 0:
            break
        print(f'window {attempt + 1}: {dev["big_packets"]["missed"]} packets missed by the ring; again')
    varlink_idl.check_reply(iface, 'ListDevices', {'devices': [dev]})
    bp = dev['big_packets']
    assert bp['ipv4'] == 0 and bp['full_ipv4'] > 0, (bp, 'Gbit/s', runs)
    assert bp['ipv6'] > 0 and bp['missed'] == 0, (bp, 'Gbit/s', runs)
    assert dev['effective'] is False and bp['quiet'] == ['ipv4'], (bp, 'Gbit/s', runs)
    assert len(d.log_lines(r'e0: BIG TCP not in effect for IPv4:')) == 1, d.log_tail()
    text = show(d)
    assert 'In effect: no for ipv4' in text, text
    # status names the family too
    st = call(d, 'GetStatus')
    varlink_idl.check_reply(iface, 'GetStatus', st)
    assert st['evidence']['not_effective'] == ['e0'], st['evidence']
    assert st['evidence']['not_effective_families'] == [{'device': 'e0', 'families': ['ipv4']}], st['evidence']
    ctl = [str(BIN.parent.parent / 'cli' / 'bigtcpctl'), '--socket', str(d.runtime_dir / IFACE)]
    status = subprocess.run([*ctl, 'status'], capture_output=True, text=True, check=True).stdout
    assert 'not in effect on e0 (ipv4) (bigtcpctl show DEV)' in status, status
    d.stop()


def test_monitor_says_a_count_in_words(netns, daemon, confdir):
    """`bigtcpctl monitor` prints the end of a count as `show` says it, not as JSON."""
    a, b = pair(netns)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(ipv6=BIG, window='1s'))
    d = daemon(a, cfg)
    ctl = [str(BIN.parent.parent / 'cli' / 'bigtcpctl'), '--socket', str(d.runtime_dir / IFACE)]
    mon = subprocess.Popen([*ctl, 'monitor'], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_file(d.log_path, lambda: f'pid {mon.pid} uid 0 is monitoring' in d.log(), 10, 'the monitor subscribed')
        call(d, 'Watch', {'ifname': 'e0', 'duration_usec': 500000})
        out = b''
        deadline = time.monotonic() + T(20)
        while b'e0: evidence: ' not in out or not out.endswith(b'\n'):
            left = deadline - time.monotonic()
            assert left > 0 and select.select([mon.stdout], [], [], left)[0], f'no count in the monitor: {out}'
            chunk = os.read(mon.stdout.fileno(), 65536)
            assert chunk, mon.stderr.read()
            out += chunk
        line = next(x for x in out.decode().splitlines() if 'e0: evidence: ' in x)
    finally:
        mon.terminate()
        mon.wait(timeout=10)
        mon.stdout.close()
        mon.stderr.close()
    assert 'e0: evidence: 0 sent above 64 KiB; 0 received; since ' in line and '{' not in line, line
    d.stop()


def test_device_never_watched_shows_its_big_packets(netns, daemon, confdir, observer):
    """With the observer every device is counted always: e0, matched by no policy (never in
    probation, never watched) but raised by hand, shows the big packets iperf3 sent through it in
    ListDevices and `bigtcpctl show`; its peer's namespace is counted too (the same object)."""
    if observer != 'ebpf':
        pytest.skip('packet sockets count watched devices only')
    a, b = pair(netns, peer_sizes=BIG)
    ip(a, 'link', 'set', 'e0', 'gso_max_size', str(BIG), 'gro_max_size', str(BIG))
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(ipv6=BIG).replace('name: [e0]', 'name: [nothing0]'))
    d = daemon(a, cfg)
    e0 = device(d)
    assert e0['state'] == 'unmanaged' and e0['big_packets']['tx'] == 0, e0
    iperf(a, (b, 'fd13::2'), '--bidir')
    e0 = device(d)
    bp = e0['big_packets']
    assert e0['state'] == 'unmanaged' and bp['watching'] is False, e0
    assert bp['tx'] > 0 and 65536 < bp['tx_largest'] <= BIG + 14, bp
    assert bp['rx'] > 0 and 65536 < bp['rx_largest'] <= BIG + 14, bp
    assert bp['ipv6'] == bp['tx'] + bp['rx'] and bp['ipv4'] == 0, bp
    ctl = [str(BIN.parent.parent / 'cli' / 'bigtcpctl'), '--socket', str(d.runtime_dir / IFACE)]
    show = subprocess.run([*ctl, 'show', 'e0'], capture_output=True, text=True, check=True).stdout
    # The last segments of the run may still be counted between the two reads: show's count lies
    # between the list before it and a list after it.
    shown = re.search(r'Big packets: (\d+) sent above 64 KiB', show)
    assert shown, show
    after = device(d)['big_packets']['tx']
    assert bp['tx'] <= int(shown.group(1)) <= after, (bp['tx'], show, after)
    assert packet_sockets(a) == [] and spare_sockets(a) == [], 'no packet socket with the observer'
    d.stop()
