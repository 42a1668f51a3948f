"""test_cni.py — pods made by the reference CNI `bridge` plugin (Debian's containernetworking-
plugins, /usr/lib/cni/bridge with host-local IPAM), called as a container runtime calls it:
CNI_COMMAND=ADD/DEL, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_PATH and the network's config
on stdin, run inside a node namespace of the test's own (nsenter --net, as the kubelet's
runtime runs it in the node's). bigtcpd runs in the node namespace with --netns-dir /run/netns,
where the test makes each pod's namespace, as a runtime does. Every size is read back with
nl.py, never through the daemon: the pod ends (eth0 in each pod), the node ends (the plugin's
veth<random>) and the bridge converge to the policy's sizes, IPv4 and IPv6; iperf3 pod to pod
is counted as big packets (bigtcpctl show); DEL leaves no descriptor, namespace or record
behind. host-local's state stays in the test's tmp dir (dataDir)."""

import concurrent.futures
import json
import os
import secrets
import subprocess
import time

import pytest

import nl
from helpers import NETNS_PREFIX, Iperf, T, policy_text, read_state, run, wait_file
from test_evidence import show, watch_during
from test_netns import fds

PLUGIN_DIR = '/usr/lib/cni'
BRIDGE = 'cni0'
SIZE = 185000
# The pods of one pytest-xdist process: its daemons manage its own pods alone, never those that
# test_cni.py or test_k8s.py make beside them in another process (the glob is a policy's).
POD_PREFIX = f"{NETNS_PREFIX}cni{os.environ.get('PYTEST_XDIST_WORKER', '').removeprefix('gw')}-"
POD_GLOB = f'{POD_PREFIX}*'
V4 = '10.88.0.0/16'
V6 = 'fd88::/64'
BURST = 50

POLICY = policy_text(f'''
    version: 1
    rollback:
      window: 5s
    policies:
      - name: pod-ends
        match:
          netns: ["{POD_GLOB}"]
          kind: [veth]
        ipv6: {{gso-max-size: {SIZE}, gro-max-size: {SIZE}}}
        ipv4: {{gso-max-size: {SIZE}, gro-max-size: {SIZE}}}
      - name: node
        match:
          kind: [veth, bridge]
        ipv6: {{gso-max-size: {SIZE}, gro-max-size: {SIZE}}}
        ipv4: {{gso-max-size: {SIZE}, gro-max-size: {SIZE}}}
    ''')
ALL = (SIZE, SIZE, SIZE, SIZE)


class Cni:
    """The bridge plugin in node namespace `node`; pods are namespaces POD_PREFIX<hex> in
    /run/netns. close() DELs every pod still there and removes its namespace."""

    def __init__(self, node, tmp_path):
        if not os.access(f'{PLUGIN_DIR}/bridge', os.X_OK):
            pytest.fail(f'{PLUGIN_DIR}/bridge missing: scripts/setup.sh installs containernetworking-plugins')
        self.node = node
        self.data_dir = tmp_path / 'cni-ipam'
        self.data_dir.mkdir()
        self.config = json.dumps({
            'cniVersion': '1.0.0', 'name': 'bt-cni', 'type': 'bridge', 'bridge': BRIDGE,
            'isGateway': True, 'ipMasq': False,
            'ipam': {'type': 'host-local', 'ranges': [[{'subnet': V4}], [{'subnet': V6}]],
                     'dataDir': str(self.data_dir)}})
        self.pods = {}   # netns name -> ADD's result

    def _call(self, command, name):
        env = {'PATH': os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin'), 'CNI_COMMAND': command,
               'CNI_CONTAINERID': name, 'CNI_NETNS': f'/run/netns/{name}', 'CNI_IFNAME': 'eth0',
               'CNI_PATH': PLUGIN_DIR}
        r = subprocess.run(['nsenter', f'--net=/run/netns/{self.node}', f'{PLUGIN_DIR}/bridge'], input=self.config,
                           env=env, capture_output=True, text=True, timeout=T(60))
        assert r.returncode == 0, f'bridge {command} {name}: {r.stdout} {r.stderr}'
        return json.loads(r.stdout) if r.stdout.strip() else None

    def add(self):
        """A pod: its namespace, then CNI ADD. (name, node end, IPv4, IPv6, time ADD began)."""
        name = f'{POD_PREFIX}{secrets.token_hex(4)}'
        run('ip', 'netns', 'add', name)
        self.pods[name] = None
        t0 = time.monotonic()
        res = self._call('ADD', name)
        self.pods[name] = res
        host = next(i['name'] for i in res['interfaces'] if 'sandbox' not in i and i['name'] != BRIDGE)
        ips = [ip['address'].split('/')[0] for ip in res['ips']]
        v4 = next(a for a in ips if '.' in a)
        v6 = next(a for a in ips if ':' in a)
        return name, host, v4, v6, t0

    def delete(self, name):
        """CNI DEL, then the namespace goes (as a runtime removes the pod's sandbox)."""
        self._call('DEL', name)
        run('ip', 'netns', 'del', name)
        del self.pods[name]

    def close(self):
        errors = []
        for name in list(self.pods):
            try:
                self._call('DEL', name)
            except (AssertionError, subprocess.TimeoutExpired, ValueError) as e:
                errors.append(str(e))
            r = subprocess.run(['ip', 'netns', 'del', name], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f'ip netns del {name}: {r.stderr.strip()}')
        self.pods = {}
        assert not errors, errors


@pytest.fixture
def node(netns):
    return netns()


@pytest.fixture
def cni(node, tmp_path):
    c = Cni(node, tmp_path)
    try:
        yield c
    finally:
        c.close()


def start(daemon, node, tmp_path):
    cfg = tmp_path / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    return daemon(node, cfg, extra_args=('--netns-dir', '/run/netns'))


def pooled(pid):
    """The inodes of the daemon's unix sockets (varlink connections, its children's socket pairs)
    and packet sockets (evidence's spares) in its own namespace: these come and go by themselves."""
    inodes = set()
    for table, col in (('unix', 6), ('packet', 8)):
        with open(f'/proc/{pid}/net/{table}') as f:
            inodes |= {int(c[col]) for c in (line.split() for line in f.read().splitlines()[1:]) if len(c) > col}
    return inodes


def assert_no_descriptor_left(d, before):
    """Nothing the daemon opened for the pods stays open: their namespace files, their netlink and
    packet sockets (which no table of the node's namespace lists)."""
    extra = set(fds(d).items()) - set(before.items())
    theirs = pooled(d.pid)
    left = {(fd, t) for fd, t in extra if not (t.startswith('socket:[') and int(t[8:-1]) in theirs)}
    assert not left, f'descriptors left: {left}'


def both_set(node, pods):
    """The pods (name, node end) whose two ends are at the policy's sizes now, read back from the
    kernel; and whether the bridge is."""
    links = nl.read_links(node)
    done = set()
    for name, host in pods:
        if host in links and nl.sizes_of(links[host]) == ALL:
            pod = nl.read_links(name).get('eth0')
            if pod and nl.sizes_of(pod) == ALL:
                done.add(name)
    return done, BRIDGE in links and nl.sizes_of(links[BRIDGE]) == ALL


def wait_both(node, pods, timeout, what):
    deadline = time.monotonic() + T(timeout)
    while True:
        done, bridge = both_set(node, pods)
        if len(done) == len(pods) and bridge:
            return
        if time.monotonic() > deadline:
            links = nl.read_links(node)
            raise AssertionError(f'{what}: {len(done)} of {len(pods)} pods and the bridge ({bridge}) set\n'
                                 f'{nl.format_table(links)}')
        time.sleep(0.05)  # the kernel sends no event when only a size changes: read again


def test_cni_pods_converge_carry_big_packets_and_leave_nothing(node, daemon, cni, tmp_path):
    d = start(daemon, node, tmp_path)
    fds_before = fds(d)
    p1, h1, a4, a6, _ = cni.add()
    p2, h2, b4, b6, _ = cni.add()
    wait_both(node, [(p1, h1), (p2, h2)], 20, 'two CNI pods')

    # pod to pod through the bridge, both families: big packets counted on the pod end
    for dst in (b4, b6):
        srv = Iperf(p2)
        try:
            def traffic():
                r = subprocess.run(['ip', 'netns', 'exec', p1, 'iperf3', '-c', dst, '-t', '2', '-J'],
                                   capture_output=True, text=True, timeout=T(40))
                assert r.returncode == 0, r.stdout[-2000:] + r.stderr
                gbit = json.loads(r.stdout)['end']['sum_received']['bits_per_second'] / 1e9
                print(f'\niperf3 {p1} -> {p2} ({dst}): {gbit:.1f} Gbit/s')
            dev = watch_during(d, f'{p1}/eth0', 4, traffic, mark=f'{p1}/eth0: watching for 4s')
        finally:
            srv.close()
        bp = dev['big_packets']
        assert bp['tx'] > 0 and bp['tx_largest'] > 65536, (dst, bp)
    text = show(d, f'{p1}/eth0')
    print(text)
    line = next(l for l in text.splitlines() if 'Big packets' in l)
    assert 'not counted' not in line and 'sent' in line, text

    # DEL: the pods' namespaces, devices, descriptors and records all go
    for p in (p1, p2):
        cni.delete(p)
        wait_file(d.log_path, lambda p=p: d.log_lines(f'netns {p}: let go'), T(20), f'{p} let go')
    links = nl.read_links(node)
    assert h1 not in links and h2 not in links, nl.format_table(links)
    assert not [n for n in os.listdir('/run/netns') if n in (p1, p2)]
    ns_dir = d.runtime_dir / 'netns'
    assert not (ns_dir.exists() and [n for n in os.listdir(ns_dir) if n in (p1, p2)]), os.listdir(ns_dir)
    # the node ends' removal is an event of the node's namespace, not of the pods': its records
    # go with the state file's next save, which may come after the pods' "let go"
    def records_left():
        state = read_state(d.runtime_dir)
        return [e for e in state['devices'] if e.get('ifname') in (h1, h2)]
    wait_file(d.runtime_dir, lambda: not records_left(), 10,
              lambda: f'the node ends\' records still on disk: {records_left()}', directory=True)
    assert_no_descriptor_left(d, fds_before)
    # nothing of host-local's left either: every address is free again
    left = [f for f in os.listdir(cni.data_dir / 'bt-cni') if f[0].isdigit() or ':' in f]
    assert not left, left


def started_of(added, name):
    return next(a[4] for a in added if a[0] == name)


def test_cni_burst_of_pods(node, daemon, cni, tmp_path):
    """BURST pods added at once (8 ADDs in flight, as a busy kubelet): the time from each ADD to
    both its ends set, read back from the kernel; then all deleted at once, every descriptor
    back."""
    d = start(daemon, node, tmp_path)
    fds_before = fds(d)
    t_burst = time.monotonic()
    returned = {}

    def add(_):
        a = cni.add()
        returned[a[0]] = time.monotonic()
        return a

    latency, after_add = {}, {}
    deadline = time.monotonic() + T(90)
    # read back while the ADDs go on (8 at a time, as a busy kubelet's runtime): each pod from the
    # moment its ADD returned
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        futures = [ex.submit(add, i) for i in range(BURST)]
        t_added = None
        while len(latency) < BURST:
            if t_added is None and all(f.done() for f in futures):
                t_added = time.monotonic()
            ready = [f.result() for f in futures if f.done()]
            pending = {(a[0], a[1]) for a in ready if a[0] not in latency}
            done, _bridge = both_set(node, pending) if pending else (set(), False)
            now = time.monotonic()
            for name in done:
                latency[name] = now - started_of(ready, name)
                after_add[name] = now - returned[name]
            assert now < deadline, f'{BURST - len(latency)} pods not set after 90 s'
            if len(latency) < BURST:
                time.sleep(0.05)  # no event for a size: read again
        added = [f.result() for f in futures]
    t_added = t_added or time.monotonic()
    wait_both(node, [(n, h) for n, h, _4, _6, _t in added], 10, 'the bridge')
    t_all = time.monotonic() - t_burst
    lat, aft = sorted(latency.values()), sorted(after_add.values())
    adds = sorted(returned[a[0]] - a[4] for a in added)
    print(f'\n{BURST} CNI pods, 8 ADDs in flight: the {BURST} ADDs took {t_added - t_burst:.2f} s (one ADD: median '
          f'{adds[len(adds) // 2]:.2f} s); from an ADD\'s start to both its ends set: median '
          f'{lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s; from its return: median {aft[len(aft) // 2]:.2f} s, '
          f'max {aft[-1]:.2f} s (read back in rounds of one dump per pod not yet set); all set {t_all:.2f} s after the '
          f'first ADD')

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda a: cni._call('DEL', a[0]), added))
    for name, *_ in added:
        run('ip', 'netns', 'del', name)
        del cni.pods[name]
    for name, *_ in added:
        wait_file(d.log_path, lambda n=name: d.log_lines(f'netns {n}: let go'), T(30), f'{name} let go')
    assert_no_descriptor_left(d, fds_before)
    links = nl.read_links(node)
    assert [n for n in links if n.startswith('veth')] == [], nl.format_table(links)
