"""The eBPF observer: guards on the device's own counters (drop.<reason>, tcp.*), which trip for
the device that erred and no other; the fallback to packet sockets said out loud; validate's
checks of the observer's counters against the running kernel. Veth pairs across two namespaces,
iperf3 between them, an nftables rule that drops big packets on one receiver only."""

import json
import subprocess

import nl
import varlink_client
from helpers import BIN, Iperf, Monitor, T, children, ip, policy_text

IFACE = 'io.bigtcpd.Manager'
IFF_RUNNING = 0x40
BIG = 185000
CTL = str(BIN.parent.parent / 'cli' / 'bigtcpctl')


def policy(guards, window='10s', interval='250ms', match='{name: ["r*"]}'):
    return policy_text(f'''
        version: 1
        policies:
          - name: observed
            match: {match}
            ipv6: {{gso-max-size: {BIG}, gro-max-size: {BIG}}}
            rollback:
              window: {window}
              interval: {interval}
              guards:
        ''') + ''.join(f'          - {g}\n' for g in guards)


def receivers(netns, n=2):
    """r0..r(n-1) in the daemon's namespace `a` (fd3i::1), their peers s0.. in `b` (fd3i::2) sending
    packets of up to BIG bytes."""
    a, b = netns(), netns()
    for i in range(n):
        ip(a, 'link', 'add', f'r{i}', 'type', 'veth', 'peer', 'name', f's{i}', 'netns', b)
        ip(a, 'addr', 'add', f'fd3{i}::1/64', 'dev', f'r{i}', 'nodad')
        ip(b, 'addr', 'add', f'fd3{i}::2/64', 'dev', f's{i}', 'nodad')
        ip(b, 'link', 'set', f's{i}', 'gso_max_size', str(BIG), 'gro_max_size', str(BIG))
        ip(a, 'link', 'set', f'r{i}', 'up')
        ip(b, 'link', 'set', f's{i}', 'up')
    for ns, prefix in ((a, 'r'), (b, 's')):
        for i in range(n):
            name = f'{prefix}{i}'
            nl.wait_links(ns, lambda links, name=name: name in links and links[name]['flags'] & IFF_RUNNING, T(120),
                          f'{name} running')
    return a, b


def drop_big_on(ns, ifname, length=150000):
    """nftables in `ns`: packets longer than `length` that `ifname` received are dropped (input)."""
    rules = f'''table inet bt_obs {{
        chain input {{
            type filter hook input priority 0;
            iifname "{ifname}" meta length > {length} drop
        }}
    }}
    '''
    subprocess.run(['ip', 'netns', 'exec', ns, 'nft', '-f', '-'], input=rules, text=True, check=True)


def iperf(client_ns, server_ns, addr, seconds=2):
    """iperf3 from client_ns to a one-shot server in server_ns at addr; the server stopped by pid."""
    srv = Iperf(server_ns, bind=addr)
    try:
        r = subprocess.run(['ip', 'netns', 'exec', client_ns, 'iperf3', '-c', addr, '-t', str(seconds), '-J'],
                           capture_output=True, text=True, timeout=seconds + 30)
        return json.loads(r.stdout) if r.stdout.startswith('{') else {}
    finally:
        srv.close()


def ctl(d, *args, check=True):
    return subprocess.run([CTL, '--socket', str(d.runtime_dir / IFACE), *args], capture_output=True, text=True,
                          check=check)


def call(d, method, params=None):
    return varlink_client.call(d.runtime_dir / IFACE, f'{IFACE}.{method}', params, timeout=T(10))


def device(d, name):
    return call(d, 'ListDevices', {'ifname': name})['devices'][0]


def test_drop_guard_rolls_back_only_the_receiver_behind_the_drop(netns, daemon, confdir):
    """r0 and r1 receive big packets in one namespace; nftables drops those above 150000 bytes
    that r1 receives. A guard on drop.netfilter_drop rolls back r1, named as the device's own
    counter, and r0 passes its window: a namespace-wide counter would have taken both."""
    a, b = receivers(netns)
    drop_big_on(a, 'r1')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(['{counter: drop.netfilter_drop, max-increase: 10}']))
    d = daemon(a, cfg)
    with Monitor(d) as mon:
        mon.wait_state('r0', ['probation'], T(10))
        mon.wait_state('r1', ['probation'], T(10))
        iperf(b, a, 'fd30::1')
        iperf(b, a, 'fd31::1')
        mon.wait_state('r1', ['rolled-back'], T(10))
        mon.wait_state('r0', ['applied'], T(20))
    r1, r0 = device(d, 'r1'), device(d, 'r0')
    assert r1['last_rollback']['counter'] == 'drop.netfilter_drop', r1
    assert r1['last_rollback']['namespace_wide'] is False and r1['last_rollback']['rise'] > 10, r1
    assert r0['state'] == 'applied' and r0.get('last_rollback') is None, r0
    assert r0['big_packets']['rx'] > 0, r0
    d.stop()


def test_fallback_to_packet_sockets_is_said_and_drop_guards_inactive(netns, daemon, confdir):
    """--observer=packet-socket: status, GetStatus and metrics name the packet sockets and why;
    a guard on the device's own counters cannot be counted (inactive, listed)."""
    a, _ = receivers(netns, n=1)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(['{counter: drop.any, max-increase: 0}', '{counter: link.tx_errors, max-increase: 0}']))
    d = daemon(a, cfg, extra_args=('--observer=packet-socket',))
    ev = call(d, 'GetStatus')['evidence']
    assert ev['observer'] == 'packet-socket' and ev['observer_why'] == '--observer=packet-socket', ev
    status = ctl(d, 'status').stdout
    assert 'Observer: packet-socket (not ebpf: --observer=packet-socket)' in status, status
    metrics = ctl(d, 'metrics').stdout
    assert 'bigtcpd_observer{kind="packet-socket",why="--observer=packet-socket"} 1' in metrics, metrics
    d.stop()

    d = daemon(a, cfg)
    ev = call(d, 'GetStatus')['evidence']
    # the maps were made at this start: they hold the devices that carried a packet since
    assert ev['observer'] == 'ebpf' and 'observer_why' not in ev and ev['observer_devices'] >= 0, ev
    assert ev['observer_map_bytes'] > 0, ev
    assert 'bigtcpd_observer{kind="ebpf",why=""} 1' in ctl(d, 'metrics').stdout
    d.stop()


# The capabilities the object's load needs (CAP_SYS_ADMIN stands in for both), gone from the
# daemon's: as root otherwise, in its own namespace, its load refused by the kernel.
NO_BPF = ('setpriv', '--bounding-set=-bpf,-perfmon,-sys_admin', '--')


def test_a_load_the_kernel_refuses_falls_back_to_packet_sockets(netns, daemon, confdir):
    """The object loads beside the start, by its loader (a program of its own, which inherits the
    daemon's capabilities); when the kernel refuses it (here: no CAP_BPF, CAP_PERFMON or
    CAP_SYS_ADMIN), that is known before the first device, and the daemon runs as
    it would have with the load refused up front: packet sockets (their two children started),
    said in the log, status, GetStatus and metrics with the kernel's reason, and its devices
    written. With --observer=ebpf the same refusal stops the start, with the reason."""
    a, _ = receivers(netns, n=1)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(['{counter: link.tx_errors, max-increase: 0}']))
    d = daemon(a, cfg, wrapper=NO_BPF)
    why = 'loading the eBPF object: Operation not permitted (CAP_BPF and CAP_PERFMON needed, or lockdown forbids it)'
    ev = call(d, 'GetStatus')['evidence']
    assert ev['observer'] == 'packet-socket' and ev['observer_why'] == why, ev
    assert f'Observer: packet-socket (not ebpf: {why})' in ctl(d, 'status').stdout
    assert f'bigtcpd_observer{{kind="packet-socket",why="{why}"}} 1' in ctl(d, 'metrics').stdout
    assert d.log_lines(r'warning: The eBPF observer cannot run \(loading the eBPF object: Operation not permitted'), \
        d.log_tail()
    assert {'bigtcpd-packets', 'bigtcpd-closer'} <= set(children(d.pid).values()), children(d.pid)
    assert device(d, 'r0')['state'] in ('probation', 'applied'), device(d, 'r0')
    d.stop()

    rc, out = daemon_exit(a, cfg, NO_BPF, '--observer=ebpf')
    assert rc == 1 and f'--observer=ebpf: the eBPF observer cannot run: {why}' in out, (rc, out)


def test_a_loader_that_fails_falls_back_to_packet_sockets(netns, daemon, confdir, tmp_path):
    """The object's loader is a program of its own, and the daemon takes nothing it says on trust:
    one that is not there, one that exits without a word, one killed by a signal, one that
    answers what no loader sends. Each time the daemon runs on packet sockets with the reason
    (status, log) and its devices written, no loader is left behind, and --observer=ebpf stops the
    start with the same reason."""
    a, _ = receivers(netns, n=1)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(['{counter: link.tx_errors, max-increase: 0}']))
    scripts = {'garbage': '#!/usr/bin/python3\nimport os\nos.write(3, b"no answer of a loader")\n',
               'killed': '#!/bin/sh\nkill -KILL $$\n'}
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    cases = [(tmp_path / 'missing', f'cannot run its loader {tmp_path}/missing: No such file or directory'),
             ('/bin/true', 'its loader exited without an answer (is bigtcpd-observer-loader installed?)'),
             (tmp_path / 'killed', 'its loader exited without an answer (is bigtcpd-observer-loader installed?)'),
             (tmp_path / 'garbage', "its loader's answer is not one this bigtcpd reads")]
    for loader, why in cases:
        env = {'BIGTCPD_OBSERVER_LOADER': str(loader)}
        d = daemon(a, cfg, env=env)
        ev = call(d, 'GetStatus')['evidence']
        assert ev['observer'] == 'packet-socket' and ev['observer_why'] == why, (loader, ev)
        assert d.log_lines(r'warning: The eBPF observer cannot run'), d.log_tail()
        assert set(children(d.pid).values()) <= {'bigtcpd-packets', 'bigtcpd-closer', 'bigtcpd-sync'}, \
            children(d.pid)
        assert device(d, 'r0')['state'] in ('probation', 'applied'), device(d, 'r0')
        d.stop()
        rc, out = daemon_exit(a, cfg, ('env', f'BIGTCPD_OBSERVER_LOADER={loader}'), '--observer=ebpf')
        assert rc == 1 and f'--observer=ebpf: the eBPF observer cannot run: {why}' in out, (loader, rc, out)


def daemon_exit(ns, cfg, wrapper, *args):
    """Run the daemon to its exit (one that cannot start): its exit code and output."""
    r = subprocess.run(['ip', 'netns', 'exec', ns, *wrapper, str(BIN), '--config', str(cfg), '--runtime-dir',
                        str(cfg.parent / 'run-exit'), *args], capture_output=True, text=True, timeout=T(30))
    return r.returncode, r.stdout + r.stderr


def test_validate_checks_drop_reasons_against_this_kernel(tmp_path):
    """A drop reason this kernel does not have is an error with the nearest it has; the TCP
    counters are spelled as the observer names them; one of them divided by a counter that is not
    the observer's is refused."""
    f = tmp_path / 'p.yaml'
    f.write_text(policy(['{counter: drop.netfilter_drp, max-increase: 0}']))
    r = subprocess.run([CTL, 'validate', str(f)], capture_output=True, text=True)
    assert r.returncode != 0 and 'did you mean "drop.netfilter_drop"?' in r.stdout + r.stderr, r
    f.write_text(policy(['{counter: tcp.retrans-bgi, max-ratio: 0.1, per: tcp.sent-big}']))
    r = subprocess.run([CTL, 'validate', str(f)], capture_output=True, text=True)
    assert r.returncode != 0 and 'did you mean "tcp.retrans-big"?' in r.stdout + r.stderr, r
    f.write_text(policy(['{counter: tcp.retrans-big, max-ratio: 0.1, per: Tcp.OutSegs}']))
    r = subprocess.run([CTL, 'validate', str(f)], capture_output=True, text=True)
    assert r.returncode != 0 and 'divided by another of the observer' in r.stdout + r.stderr, r
    f.write_text(policy(['{counter: drop.netfilter_drop, max-increase: 0}',
                         '{counter: tcp.retrans-big, max-ratio: 0.1, per: tcp.sent-big}',
                         '{counter: drop.any, max-increase: 100}']))
    r = subprocess.run([CTL, 'validate', str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r
