"""test_k8s.py — the DaemonSet of conf/k8s run for real: the image scripts/image.sh builds from this
tree's Debian package, the Pod the DaemonSet stamps out (its template as written: security
context, probes, hostPath volumes, the ConfigMap) run by `podman kube play --configmap` inside a
node namespace of the test's own (its hostNetwork), with pods made by the reference CNI bridge
plugin in that node. Slow (it builds the image; `-m 'not slow'` leaves it out), and part of the
suite CI runs.

In order, every size read back with nl.py, never through the daemon:
  - kube play: the node's veths, the bridge and every pod end reach the policy's sizes (timed)
  - the probes answer by exit code: 0 while the daemon is up and ready; liveness 3 and readiness 1
    with the daemon gone
  - a ConfigMap edit, as the kubelet swaps the mounted files (a new ..TIMESTAMP directory, ..data
    renamed onto it): a good one is applied, a bad one refused with its errors (the sizes stay)
  - a rolling update: SIGTERM (kube play --down), then a new pod with the same hostPath state:
    no size changes, every original is kept
  - the documented uninstall: a policy that matches nothing, wait until status holds nothing,
    delete: every device has its original sizes back

Podman on this kind of machine (issue 35): run it with `nsenter --net=/run/netns/NODE` (not `ip
netns exec`, whose fresh /sys hides the cgroups), runc with cgroupfs, no default ulimits (no
CAP_SYS_RESOURCE): a containers.conf of the test's own through CONTAINERS_CONF. Its storage,
runroot and tmpdir are the test's too, and everything is removed at the end, also on failure.
The base image is made once by mmdebstrap and kept as a tarball in /var/cache/bigtcpd-tests
(BIGTCPD_IMAGE_BASE_TAR), like the suite's other caches."""

import copy
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

import nl
from helpers import REPO, T, read_state
from nspawn import package_deb
from test_cni import BRIDGE, POD_GLOB, Cni

pytestmark = pytest.mark.slow

MANIFEST = REPO / 'conf' / 'k8s' / 'bigtcpd-daemonset.yaml'
BASE_TAR = Path(os.environ.get('BIGTCPD_IMAGE_BASE_TAR', '/var/cache/bigtcpd-tests/debian-bookworm-minbase.tar'))
SIZE = 185000
EDITED = 150000
ALL = (SIZE,) * 4
ORIG = (65536,) * 4
PODS = 3


class Podman:
    """podman with the test's own configuration and storage, run in the node's namespace."""

    def __init__(self, node):
        # short: conmon's attach sockets live below the runroot (108 bytes at most)
        self.dir = Path(tempfile.mkdtemp(prefix='bt-pm-', dir='/tmp'))
        self.node = node
        self.conf = self.dir / 'containers.conf'
        self.conf.write_text(f'''
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{self.dir}/events.log"
[network]
network_config_dir = "{self.dir}/cni"
''')
        self.store = ['--root', str(self.dir / 'root'), '--runroot', str(self.dir / 'run'),
                      '--tmpdir', str(self.dir / 'tmp')]
        self.env = {**os.environ, 'CONTAINERS_CONF': str(self.conf)}
        # cgroupfs: podman makes libpod_parent/<pod> in each hierarchy and leaves some behind
        self.cgroup_parents = set(glob.glob('/sys/fs/cgroup/*/libpod_parent'))
        self.pods = set()

    def cmd(self, *args):
        return ['nsenter', f'--net=/run/netns/{self.node}', 'podman', *self.store, *args]

    def __call__(self, *args, check=True, timeout=120):
        r = subprocess.run(self.cmd(*args), capture_output=True, text=True, env=self.env, timeout=T(timeout),
                           stdin=subprocess.DEVNULL)
        if check:
            assert r.returncode == 0, f'podman {" ".join(args)}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}'
        return r

    def close(self):
        """Every pod, container, volume and image of this store gone, its mounts unmounted, its
        directory removed."""
        problems = []
        for args in (('pod', 'rm', '--all', '--force'), ('rm', '--all', '--force'),
                     ('volume', 'rm', '--all', '--force'), ('rmi', '--all', '--force')):
            r = self(*args, check=False, timeout=120)
            if r.returncode != 0:
                problems.append(f'podman {" ".join(args)}: {r.stderr.strip()[-500:]}')
        for parent in glob.glob('/sys/fs/cgroup/*/libpod_parent'):
            mine = parent not in self.cgroup_parents
            for d in sorted(Path(parent).rglob('*'), key=lambda p: len(p.parts), reverse=True):
                if d.is_dir() and (mine or any(part in self.pods for part in d.relative_to(parent).parts)):
                    try:
                        d.rmdir()
                    except OSError as e:
                        problems.append(f'rmdir {d}: {e}')
            if mine:
                try:
                    os.rmdir(parent)
                except OSError as e:
                    problems.append(f'rmdir {parent}: {e}')
        mounts = subprocess.run(['findmnt', '-rn', '-o', 'TARGET'], capture_output=True, text=True).stdout.split()
        for m in sorted((m for m in mounts if m.startswith(str(self.dir))), key=len, reverse=True):
            r = subprocess.run(['umount', '-l', m], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f'umount {m}: {r.stderr.strip()}')
        shutil.rmtree(self.dir, ignore_errors=True)
        assert not problems, problems


def kubelet_swap(directory, data):
    """What the kubelet does to a ConfigMap volume on an edit (AtomicWriter): the new files in a
    new ..TIMESTAMP directory, ..data renamed onto it in one step, each key a symlink through
    ..data (made once), the old directory removed."""
    directory = Path(directory)
    old = os.readlink(directory / '..data') if (directory / '..data').is_symlink() else None
    ts = directory / f'..{time.strftime("%Y_%m_%d_%H_%M_%S")}.{time.monotonic_ns()}'
    ts.mkdir()
    for key, text in data.items():
        (ts / key).write_text(text)
    os.symlink(ts.name, directory / '..data_tmp')
    os.rename(directory / '..data_tmp', directory / '..data')
    for key in data:
        if not (directory / key).is_symlink():
            os.symlink(f'..data/{key}', directory / f'.{key}.tmp')
            os.rename(directory / f'.{key}.tmp', directory / key)
    if old:
        shutil.rmtree(directory / old)


def manifests(image, state_dir):
    """The ConfigMap, and the Pod the DaemonSet stamps out on a node: its template as written, the
    image the test built, the state's hostPath in the test's tmp (the node's /run/bigtcpd, of
    this node alone), the pod-ends policy naming this run's CNI namespaces."""
    docs = {d['kind']: d for d in yaml.safe_load_all(MANIFEST.read_text()) if d}
    cm, ds = copy.deepcopy(docs['ConfigMap']), docs['DaemonSet']
    policy = cm['data']['bigtcpd.yaml']
    assert 'netns: ["cni-*"]' in policy, 'the ConfigMap names the CNI namespaces as cni-*'
    cm['data']['bigtcpd.yaml'] = policy.replace('netns: ["cni-*"]', f'netns: ["{POD_GLOB}"]')
    tmpl = copy.deepcopy(ds['spec']['template'])
    pod = {'apiVersion': 'v1', 'kind': 'Pod',
           'metadata': {'name': 'bigtcpd-node', 'namespace': ds['metadata']['namespace'], **tmpl['metadata']},
           'spec': tmpl['spec']}
    (c,) = pod['spec']['containers']
    c['image'] = image
    # podman 4.3 refuses port declarations beside the host's network ("PortMappings can only be
    # used with Bridge or slirp4netns networking"); Kubernetes takes them (they name the port the
    # PodMonitor scrapes) and binds nothing for them either
    assert c.pop('ports')
    for v in pod['spec']['volumes']:
        if v.get('hostPath', {}).get('path') == '/run/bigtcpd':
            v['hostPath']['path'] = str(state_dir)
    return cm, pod


def recorded(state_dir):
    """Every original the state holds: {(namespace, ifindex): sizes}, the node's (namespace None)
    and each pod's (its directory under netns/)."""
    out = {(None, e['ifindex']): e.get('original') for e in read_state(state_dir)['devices']}
    ns_dir = Path(state_dir) / 'netns'
    for d in (ns_dir.iterdir() if ns_dir.is_dir() else ()):
        out.update({(d.name, e['ifindex']): e.get('original') for e in read_state(d)['devices']})
    return out


def policy_of(cm):
    return cm['data']['bigtcpd.yaml']


def sizes(node, pods):
    """{device: sizes} of the node's veths and bridge and of each pod's eth0, from the kernel."""
    links = nl.read_links(node)
    out = {n: nl.sizes_of(l) for n, l in links.items() if l.get('kind') in ('veth', 'bridge')}
    for p in pods:
        out[f'{p}/eth0'] = nl.sizes_of(nl.read_links(p)['eth0'])
    return out


def wait_sizes(node, pods, want, timeout, what):
    """Until every device of sizes() is at `want` (a tuple, or {device: tuple}); the seconds it
    took. The kernel sends no event for a size alone: read again."""
    t0 = time.monotonic()
    while True:
        got = sizes(node, pods)
        target = want if isinstance(want, dict) else {n: want for n in got}
        if got == target:
            return time.monotonic() - t0
        if time.monotonic() - t0 > T(timeout):
            raise AssertionError(f'{what}: not within {timeout}s:\n' +
                                 '\n'.join(f'  {n}: {got.get(n)} (want {target.get(n)})' for n in sorted(set(got) | set(target))))
        time.sleep(0.1)


@pytest.fixture
def podman(netns):
    node = netns()
    p = Podman(node)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def cni(podman, tmp_path):
    c = Cni(podman.node, tmp_path)
    try:
        yield c
    finally:
        c.close()


def build_image(podman, tmp_path_factory):
    deb = package_deb(tmp_path_factory)
    env = {**podman.env, 'BIGTCPD_IMAGE_BASE_TAR': str(BASE_TAR), 'BIGTCPD_IMAGE_PULL': '0'}
    t0 = time.monotonic()
    r = subprocess.run(['bash', str(REPO / 'scripts' / 'image.sh'), '--deb-dir', str(deb.parent), *podman.store],
                       capture_output=True, text=True, env=env, timeout=T(1800), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f'scripts/image.sh failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}'
    tag, size, _ = r.stdout.strip().splitlines()[-1].split()
    print(f'\nimage {tag}: {int(size) / 1e6:.1f} MB, built in {time.monotonic() - t0:.0f} s')
    return tag, int(size)


def container_of(podman):
    r = podman('ps', '--format', '{{.Names}}', '--filter', 'pod=bigtcpd-node')
    names = [n for n in r.stdout.split() if not n.endswith('-infra')]
    assert len(names) == 1, r.stdout
    return names[0]


def probe(podman, ctr, kind, pod):
    cmd = pod['spec']['containers'][0][f'{kind}Probe']['exec']['command']
    return podman('exec', ctr, *cmd, check=False, timeout=30).returncode


def play(podman, tmp_path, cm, pod):
    (tmp_path / 'configmap.yaml').write_text(yaml.safe_dump(cm))
    (tmp_path / 'pod.yaml').write_text(yaml.safe_dump(pod))
    podman('kube', 'play', '--configmap', str(tmp_path / 'configmap.yaml'), str(tmp_path / 'pod.yaml'), timeout=300)
    podman.pods.update(podman('pod', 'ps', '--no-trunc', '--format', '{{.ID}}').stdout.split())


def test_daemonset_pod_under_podman(podman, cni, tmp_path, tmp_path_factory):
    node = podman.node
    tag, size = build_image(podman, tmp_path_factory)
    assert size < 200e6, f'the image is {size} bytes'
    pods = [cni.add()[0] for _ in range(PODS)]
    state_dir = tmp_path / 'run-bigtcpd'
    cm, pod = manifests(tag, state_dir)
    originals = sizes(node, pods)
    assert set(originals.values()) == {ORIG}, originals

    t0 = time.monotonic()
    play(podman, tmp_path, cm, pod)
    returned = time.monotonic() - t0
    wait_sizes(node, pods, ALL, 60, 'every size set after kube play')
    took = time.monotonic() - t0
    ctr = container_of(podman)
    started = podman('inspect', '--format', '{{.State.StartedAt}}', ctr).stdout.strip()
    print(f'kube play to every size set ({len(sizes(node, pods))} devices: the bridge, {PODS} node '
          f'veths, {PODS} pod ends): {took:.2f} s (kube play itself returned after {returned:.2f} s; '
          f'the container started at {started})')
    # both probes answer 0 once the daemon is up and ready
    deadline = time.monotonic() + T(30)
    while probe(podman, ctr, 'readiness', pod) != 0:
        assert time.monotonic() < deadline, podman('logs', ctr).stderr[-3000:]
        time.sleep(0.5)
    assert probe(podman, ctr, 'liveness', pod) == 0

    # /metrics on the node's port, as the annotations say
    port = pod['metadata']['annotations']['prometheus.io/port']
    r = subprocess.run(['nsenter', f'--net=/run/netns/{node}', 'python3', '-c',
                        f'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:{port}/metrics", '
                        f'timeout=10).read().decode())'], capture_output=True, text=True, timeout=T(30))
    assert r.returncode == 0 and 'bigtcpd_ready 1' in r.stdout, r.stderr

    # a ConfigMap edit, swapped in as the kubelet does: applied
    vol = podman('volume', 'inspect', '--format', '{{.Mountpoint}}', cm['metadata']['name']).stdout.strip()
    edited = policy_of(cm).replace(str(SIZE), str(EDITED))
    kubelet_swap(vol, {'bigtcpd.yaml': edited})
    wait_sizes(node, pods, (EDITED,) * 4, 30, 'the edited ConfigMap applied')
    # a bad one: refused with its errors, every size stays
    kubelet_swap(vol, {'bigtcpd.yaml': edited.replace('gso-max-size', 'gso-max-sise', 1)})
    deadline = time.monotonic() + T(30)
    while 'gso-max-sise' not in (logs := podman('logs', ctr).stderr + podman('logs', ctr).stdout):
        assert time.monotonic() < deadline, logs[-3000:]
        time.sleep(0.5)
    metrics = podman('exec', ctr, '/usr/bin/bigtcpctl', 'metrics').stdout
    assert 'bigtcpd_config_last_reload_successful 0' in metrics, metrics
    assert set(sizes(node, pods).values()) == {(EDITED,) * 4}
    kubelet_swap(vol, {'bigtcpd.yaml': policy_of(cm)})
    wait_sizes(node, pods, ALL, 30, 'the ConfigMap back')

    # a rolling update: SIGTERM, then a new pod with the same hostPath state
    before = sizes(node, pods)
    state_before = recorded(state_dir)
    assert len(state_before) == len(before), (state_before, before)
    podman('kube', 'play', '--down', str(tmp_path / 'pod.yaml'), timeout=120)
    assert sizes(node, pods) == before, 'the stop changed a size'
    # with the daemon gone, the probes fail by exit code (a container of the same image, the same
    # hostPath state)
    for kind, code in (('liveness', 3), ('readiness', 1)):
        cmd = pod['spec']['containers'][0][f'{kind}Probe']['exec']['command']
        r = podman('run', '--rm', '--network=host', '-v', f'{state_dir}:/run/bigtcpd', '--entrypoint', cmd[0], tag,
                   *cmd[1:], check=False, timeout=60)
        assert r.returncode == code, (kind, r.returncode, r.stdout, r.stderr)
    play(podman, tmp_path, cm, pod)
    ctr = container_of(podman)
    deadline = time.monotonic() + T(30)
    while probe(podman, ctr, 'readiness', pod) != 0:
        assert time.monotonic() < deadline, podman('logs', ctr).stderr[-3000:]
        time.sleep(0.5)
    assert sizes(node, pods) == before, 'the new pod changed a size'
    st = json.loads(podman('exec', ctr, '/usr/bin/bigtcpctl', 'status', '--json').stdout)
    assert st['writes'] == 0, f'the new pod wrote {st["writes"]} sizes'
    assert recorded(state_dir) == state_before

    # the documented uninstall: a policy that matches nothing, wait until status holds nothing,
    # delete
    kubelet_swap(vol, {'bigtcpd.yaml': 'version: 1\npolicies: []\n'})
    t_uninstall = time.monotonic()
    deadline = time.monotonic() + T(60)
    while True:
        st = json.loads(podman('exec', ctr, '/usr/bin/bigtcpctl', 'status', '--json').stdout)
        if not recorded(state_dir) and not any(
                st['devices'].get(k) for k in ('applied', 'probation', 'pending', 'rolled-back', 'failed')):
            break
        assert time.monotonic() < deadline, st
        time.sleep(0.5)
    print(f'uninstall: the state held nothing {time.monotonic() - t_uninstall:.2f} s after the policy matching '
          f'nothing was swapped in')
    podman('kube', 'play', '--down', str(tmp_path / 'pod.yaml'), timeout=120)
    assert sizes(node, pods) == originals
    assert BRIDGE in nl.read_links(node)
