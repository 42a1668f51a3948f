"""`gso-max-size: auto`: each device searches for the largest size its path proves, a step per
probation window, proven by big packets in that window. A veth pair across two namespaces with
bounded iperf3 traffic from the daemon's end (so e0's own GSO packets are what prove a step); a
short window so that a search settles in seconds. The clean path settles at the bound; a path whose
receiver drops packets above 150000 bytes (nftables in the peer's namespace) settles at or below
150000 with a bounded number of trips; an idle device does not step; a restart resumes."""

import os
import re
import signal
import subprocess
import time

import nl
from helpers import T, current, ip, policy_text, wait_file
from test_evidence import pair

WINDOW = '2s'
BROKEN_ABOVE = 150000


def policy(max_=None, guard='link.tx_errors', increase=1000000):
    bound = f'{{auto: {{max: {max_}}}}}' if max_ else 'auto'
    return policy_text(f'''
        version: 1
        policies:
          - name: auto
            match: {{name: [e0]}}
            ipv6: {{gso-max-size: {bound}}}
            rollback:
              window: {WINDOW}
              interval: 200ms
              guards:
                - counter: {guard}
                  max-increase: {increase}
        ''')


class Traffic:
    """iperf3 from e0's namespace to the peer, one second per connection, for at most `seconds`:
    a socket takes its device's gso_max_size when it connects, so only new connections show a step.
    The server and the client loop (its own process group) are stopped by pid."""

    def __init__(self, ns, server, seconds):
        self.server = subprocess.Popen(['ip', 'netns', 'exec', server[0], 'iperf3', '-s', '--forceflush'],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = [self.server.stdout.readline() for _ in range(2)]
        assert any('listening' in line for line in lines), lines
        loop = (f'end=$((SECONDS+{seconds})); while [ $SECONDS -lt $end ]; do '
                f'iperf3 -c {server[1]} -t 1 >/dev/null 2>&1 || sleep 0.1; done')
        self.client = subprocess.Popen(['ip', 'netns', 'exec', ns, 'bash', '-c', loop], start_new_session=True,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self):
        if self.client.poll() is None:
            os.killpg(self.client.pid, signal.SIGTERM)
            self.client.wait(timeout=10)
        if self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.server.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def gso(ns):
    return current(ns, ['e0'])['e0'][0]


def steps(d, what):
    """The journal's lines of the search of e0 that say `what` (proven, tripped, …)."""
    return d.log_lines(rf'e0: auto: gso_max_size \d+ {what}')


def wait_settled(d, timeout):
    wait_file(d.log_path, lambda: re.search(r'e0: auto: .*settled at', d.log()), timeout, 'e0 settled')
    m = re.findall(r'e0: auto: .*settled at (\d+)', d.log())
    return int(m[-1])


def test_clean_path_settles_at_the_bound(netns, daemon, confdir):
    """From 65536: 131072, 262144, 524280, each proven by e0's packets; nothing trips."""
    a, b = pair(netns)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    t0 = time.monotonic()
    with Traffic(a, (b, 'fd13::2'), 60):
        d = daemon(a, cfg)
        at = wait_settled(d, 40)
        took = time.monotonic() - t0
    assert at == 524280, d.log_tail()
    assert gso(a) == 524280
    proven = [int(re.search(r'gso_max_size (\d+) proven', line).group(1)) for line in steps(d, 'proven')]
    assert proven == [131072, 262144, 524280], d.log_tail()
    assert steps(d, 'tripped') == []
    print(f'clean path: settled at {at} in {len(proven)} steps, {took:.1f}s')
    d.stop()


def test_idle_device_does_not_step(netns, daemon, confdir):
    """No traffic: the watch of 65536 sees nothing that fills it, and the device stays there,
    watched again after the window, then twice as long."""
    a, b = pair(netns)
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy())
    d = daemon(a, cfg)
    wait_file(d.log_path, lambda: len(d.log_lines(r'e0: auto: gso_max_size: auto: proven 65536, idle')) >= 2,
              20, 'e0 idle twice')
    assert gso(a) == 65536
    assert steps(d, 'proven') == [] and d.log_lines('e0: auto: gso_max_size busy') == []
    # the writes of the log: none for e0
    assert not d.log_lines(r'e0: writing gso_max_size'), d.log_tail()
    d.stop()
