"""A fleet host under a real systemd (nspawn.py: Debian 12, systemd 252, a real system bus), fed
from a local apt repository as a fleet's hosts are, in one booted container; the tests run in
file order, each on what the ones before left:

  previous      the previous release's package (built from its own commit, see below) installed
                from the repository: the policy a conffile there, edited by the operator, one
                device rolled back and held
  upgrade       this build added to the repository: apt offers it as an upgrade (its version
                sorts after the previous one), `apt-get install -y bigtcpd` with no terminal
                never stops at a prompt; during the upgrade no device's sizes change; originals
                and the hold kept, the operator's policy kept, the new version in --version,
                GetStatus on varlink and D-Bus
  remove        `apt-get remove`: every original back, the state emptied, the policy kept
  ansible       conf/ansible/bigtcpd.yml run with ansible-core (connection local, inside the
                container) with the fleet example policy (conf/fleet.yaml): the package installed
                from the repository again (the kept policy applies again, also to the device
                held before the removal), the policy validated, installed, the reload handler
                run; then --check --diff of a changed policy (the plan and the diff shown,
                nothing written), the change applied (the handler's reload returns its digest),
                a broken policy refused by the play's validate step with the host untouched

The previous build is the package of the commit that released the newest version in
debian/changelog (0.1.0-1 until the next release: a1862bc, the first package, the one fleets
run), built from that commit with its own scripts/package.sh (git archive, DEB_BUILD_OPTIONS=
nocheck: its unit tests are not under test here), once per machine (kept in
/var/cache/bigtcpd-tests/previous/COMMIT/) — not this tree re-stamped with an older version,
which would test none of what an upgrade meets: the old maintainer scripts, the policy as the
old package's conffile, the state file the old daemon wrote. BIGTCPD_PREVIOUS_DEB gives a
prebuilt one. The new package comes from BIGTCPD_DEB_DIR (scripts/test.sh), or is built here.
Needs systemd-container, dpkg-dev, debhelper, lintian, ansible-core, python3-apt, git and the
repository's history (scripts/setup.sh; CI clones in full)."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import nl
from helpers import REPO, T, sizes4
from nspawn import booted, journal_on_failure, package_deb

# a booted container each: one at a time, in one process
pytestmark = [pytest.mark.xdist_group('nspawn-fleet'), pytest.mark.slow]

BIG = sizes4(185000)       # the shipped policy: every veth at 185000; the fleet's k8s-pods too
EDITED = sizes4(150000)    # the operator's edit, and the fleet policy's change
ORIG = sizes4(65536)
SHIPPED = ('va', 'vb')     # veths that only the shipped policy matches
PODS = ('lxca', 'lxcb')    # veths that the fleet policy's k8s-pods matches (lxc*) too
ALL = SHIPPED + PODS
REPO_DIR = '/var/tmp/repo'
CACHE = Path('/var/cache/bigtcpd-tests/previous')   # the previous release's package, by commit
PLAY_DIR = '/var/tmp/play'  # conf/ as in the tree: ansible/bigtcpd.yml finds ../fleet.yaml
ANSIBLE_ENV = {'HOME': '/var/tmp/play-home', 'ANSIBLE_LOCAL_TEMP': '/var/tmp/play-home/tmp',
               'ANSIBLE_REMOTE_TEMP': '/var/tmp/play-home/tmp', 'ANSIBLE_NOCOLOR': '1',
               'ANSIBLE_STDOUT_CALLBACK': 'json_results', 'ANSIBLE_CALLBACK_PLUGINS': '/var/tmp/play-callbacks',
               'ANSIBLE_RETRY_FILES_ENABLED': '0',
               'ANSIBLE_PYTHON_INTERPRETER': '/usr/bin/python3'}


def deb_version(deb):
    return subprocess.run(['dpkg-deb', '-f', str(deb), 'Version'], capture_output=True, text=True,
                          check=True).stdout.strip()


def previous_release_commit():
    """The commit that added debian/changelog's newest entry: the last release's package."""
    top = (REPO / 'debian' / 'changelog').read_text().splitlines()[0]
    r = subprocess.run(['git', '-C', str(REPO), 'log', '-1', '--format=%H', f'-S{top}', '--', 'debian/changelog'],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        pytest.fail(f'no commit added {top!r} to debian/changelog (git: {r.stderr.strip()}); the test needs the '
                    'repository with its history, or BIGTCPD_PREVIOUS_DEB')
    return r.stdout.strip()


def previous_package(commit, tmp_path_factory):
    """The package of `commit`, built with that commit's own scripts/package.sh from `git archive`
    (no .git: the version its debian/changelog says), once per machine: kept in CACHE/<commit>/,
    which appears whole (a rename) or not at all."""
    cached = CACHE / commit
    found = sorted(cached.glob('bigtcpd_*.deb'))
    if found:
        print(f'previous package: {found[0].name} from {commit[:7]} ({cached})')
        return found[0]
    src = tmp_path_factory.mktemp('previous-src')
    started = time.monotonic()
    subprocess.run(f'git -C {REPO} archive {commit} | tar -x -C {src}', shell=True, check=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=f'.{commit}.', dir=CACHE))
    os.chmod(out, 0o755)
    try:
        r = subprocess.run(['bash', str(src / 'scripts' / 'package.sh'), str(out)], capture_output=True, text=True,
                           timeout=T(1200), stdin=subprocess.DEVNULL, env=dict(os.environ, DEB_BUILD_OPTIONS='nocheck'))
        assert r.returncode == 0, f'the package of {commit} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}'
        deb = sorted(out.glob('bigtcpd_*.deb'))[0]
        try:
            out.rename(cached)
        except OSError:
            pass   # another run put it there first: the same commit, the same package
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(f'previous package: {deb.name} from {commit[:7]}, built in {time.monotonic() - started:.0f} s')
    return sorted(cached.glob('bigtcpd_*.deb'))[0]


@pytest.fixture(scope='module')
def debs(tmp_path_factory):
    new = package_deb(tmp_path_factory)
    prev = os.environ.get('BIGTCPD_PREVIOUS_DEB')
    prev = Path(prev) if prev else previous_package(previous_release_commit(), tmp_path_factory)
    return prev, new


@pytest.fixture(scope='module')
def box(debs, tmp_path_factory):
    for tool in ('systemd-nspawn', 'dpkg-scanpackages', 'ansible-playbook'):
        if not shutil.which(tool):
            pytest.fail(f'{tool} is missing: bash scripts/setup.sh installs it')

    def prepare(c):
        # A Kubernetes node, as fleet.yaml's k8s-pods policy knows them by name.
        c.path('/etc/hostname').write_text(f'k8s-{c.id}\n')
        # Only the local repository: an offline host of the fleet.
        c.path('/etc/apt/sources.list').unlink(missing_ok=True)
        for p in c.path('/etc/apt/sources.list.d').iterdir():
            p.unlink()
        c.path('/etc/apt/sources.list.d/bigtcpd.list').write_text(f'deb [trusted=yes] file:{REPO_DIR} ./\n')
        c.path(REPO_DIR).mkdir()

    with booted(tmp_path_factory.mktemp('nspawn'), 'fleet tests', prepare) as c:
        for a, b in (('va', 'vb'), ('lxca', 'lxcb')):
            subprocess.run(['ip', '-n', c.name, 'link', 'add', a, 'type', 'veth', 'peer', 'name', b], check=True)
        c.prev, c.new = debs
        yield c


@pytest.fixture(autouse=True)
def journal_after_failure(request, box):
    yield
    journal_on_failure(request, box)


# --- helpers ------------------------------------------------------------------------------------

def publish(c, *debs):
    """The repository holds these packages; apt-get update reads it."""
    repo = c.path(REPO_DIR)
    for deb in debs:
        shutil.copy(deb, repo / deb.name)
    with open(repo / 'Packages', 'w') as f:
        subprocess.run(['dpkg-scanpackages', '--multiversion', '.'], cwd=repo, stdout=f, stderr=subprocess.DEVNULL,
                       check=True)
    c.run('apt-get', 'update', '-q', timeout=120)


def installed_version(c):
    return c.run('dpkg-query', '-W', '-f=${Version}', 'bigtcpd', check=False).stdout.strip()


def ctl_json(c, *args):
    return json.loads(c.run('bigtcpctl', *args, '--json').stdout)


def devices(c):
    return {d['ifname']: d for d in ctl_json(c, 'list')['devices']}


def main_pid(c):
    return int(c.run('systemctl', 'show', '-P', 'MainPID', 'bigtcpd.service').stdout.strip())


def state(c, into):
    """The container's state file (snapshot and journal), by device name."""
    return {d['ifname']: d for d in c.state_devices(into)}


def wait_sizes(c, expected, what, timeout=20):
    nl.wait_links(c.name, lambda links: all(n in links and nl.sizes_of(links[n]) == s for n, s in expected.items()),
                  T(timeout), what)


def sizes_now(c, names=ALL):
    links = nl.read_links(c.name)
    return {n: nl.sizes_of(links[n]) for n in names}


def journal_since(c, cursor, *args):
    return c.run('journalctl', f'--after-cursor={cursor}', '-o', 'cat', '--no-pager', *args).stdout


class SizeSampler:
    """Reads the devices' sizes over and over (the kernel notifies no change of the sizes alone)
    and keeps every reading that differs from the first."""

    def __init__(self, c, names=ALL):
        self.c, self.names = c, names
        self.first = sizes_now(c, names)
        self.changes, self.samples, self.error = [], 0, None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            while not self.stop.is_set():
                now = sizes_now(self.c, self.names)
                self.samples += 1
                if now != self.first:
                    self.changes.append(now)
                self.stop.wait(0.02)
        except Exception as e:  # noqa: BLE001 — reported by the test
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def play(c, policy=None, check=False):
    """ansible-playbook conf/ansible/bigtcpd.yml against the container, inside it (connection
    local), with tests/integration/ansible/json_results.py as its output; returns (exit status, {task name: [results]}, stdout)."""
    argv = ['env', *(f'{k}={v}' for k, v in ANSIBLE_ENV.items()), 'ansible-playbook', '-i', 'localhost,', '-c', 'local',
            f'{PLAY_DIR}/conf/ansible/bigtcpd.yml']
    if policy:
        argv += ['-e', f'bigtcpd_policy={policy}']
    if check:
        argv += ['--check', '--diff']
    started = time.monotonic()
    r = c.run(*argv, check=False, timeout=300)
    took = time.monotonic() - started
    try:
        out = json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f'ansible-playbook exited {r.returncode} without JSON:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}')
    tasks = {}
    for p in out['plays']:
        for t in p['tasks']:
            tasks.setdefault(t['task']['name'], []).append(t['hosts']['localhost'])
    print(f'ansible-playbook{" --check --diff" if check else ""} {policy or "(the fleet example)"}: exit '
          f'{r.returncode} in {took:.1f} s; stats {out["stats"]["localhost"]}')
    return r.returncode, tasks, r.stdout


def res(tasks, name):
    assert name in tasks, f'task {name!r} did not run: {sorted(tasks)}'
    return tasks[name][-1]


# --- the tests, in order ------------------------------------------------------------------------

def test_previous_release_installed_from_the_repository(box, tmp_path):
    c = box
    publish(c, c.prev)
    r = c.run('apt-get', 'install', '-y', 'bigtcpd', timeout=300)
    assert installed_version(c) == deb_version(c.prev), r.stdout
    print(f'previous: {c.run("bigtcpctl", "--version").stdout.strip()} (package {installed_version(c)})')
    wait_sizes(c, {n: BIG for n in ALL}, 'the shipped policy of the previous release')
    conffiles = c.run('dpkg-query', '-W', '-f=${Conffiles}', 'bigtcpd').stdout
    assert '/etc/bigtcpd/bigtcpd.yaml' in conffiles, f'the previous release had the policy as a conffile: {conffiles}'
    # The operator's edit of the conffile (the case where dpkg would ask), then a hold.
    policy = c.path('/etc/bigtcpd/bigtcpd.yaml')
    policy.write_text(policy.read_text().replace('185000', '150000'))
    c.run('systemctl', 'reload', 'bigtcpd')
    wait_sizes(c, {n: EDITED for n in ALL}, 'the edited policy')
    c.run('bigtcpctl', 'rollback', 'va')
    wait_sizes(c, {'va': ORIG}, 'va rolled back')
    assert devices(c)['va']['state'] == 'rolled-back'
    held = state(c, tmp_path / 's')['va']
    assert 'held' in held, held


def test_upgrade_from_the_repository_unattended(box, tmp_path):
    c = box
    old, new = deb_version(c.prev), deb_version(c.new)
    mine = c.path('/etc/bigtcpd/bigtcpd.yaml').read_text()
    before = state(c, tmp_path / 'before')
    originals = {n: d['original'] for n, d in devices(c).items() if d.get('original')}
    assert set(originals) == set(ALL), originals
    pid = main_pid(c)

    publish(c, c.new)
    # apt offers it: its version sorts after the installed one.
    r = c.run('apt-get', '-s', 'upgrade')
    assert re.search(rf'^Inst bigtcpd \[{re.escape(old)}\] \({re.escape(new)} ', r.stdout, re.M), r.stdout
    cursor = c.journal_cursor()
    with SizeSampler(c) as sampler:
        # As unattended-upgrades or a fleet tool runs it: no terminal, no answers (nspawn.run's
        # stdin is /dev/null, DEBIAN_FRONTEND=noninteractive).
        r = c.run('apt-get', 'install', '-y', 'bigtcpd', timeout=300, check=False)
    assert r.returncode == 0, f'apt-get install -y exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}'
    assert 'conffile' not in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
    assert f'Unpacking bigtcpd ({new}) over ({old})' in r.stdout, r.stdout
    assert installed_version(c) == new
    assert c.run('dpkg', '--audit').stdout.strip() == ''   # nothing half-configured
    print(f'sizes read {sampler.samples} times during the upgrade; changes: {sampler.changes[:3]}')
    assert sampler.error is None, sampler.error
    assert sampler.samples >= 5 and not sampler.changes, sampler.changes[:5]

    # The policy: the operator's, as it was; no longer the package's conffile (an obsolete one).
    assert c.path('/etc/bigtcpd/bigtcpd.yaml').read_text() == mine
    conffiles = c.run('dpkg-query', '-W', '-f=${Conffiles}', 'bigtcpd').stdout
    assert re.search(r'^ /etc/bigtcpd/bigtcpd\.yaml [0-9a-f]{32} obsolete$', conffiles, re.M), conffiles

    # One restart, nothing written, originals and the hold kept. The daemon's own word that it
    # runs is waited for: systemd 252 in this container (cgroup v1) now and then cannot attach a
    # unit started right after its stop to its cgroup (status 219/CGROUP, nspawn.py), and the
    # unit's Restart=on-failure starts it again 2 s later — the package's restart is then that one.
    c.journal_wait(cursor, [r'initial reconcile done'], timeout=30, args=('-u', 'bigtcpd'))
    assert main_pid(c) not in (0, pid)
    log = journal_since(c, cursor, '-u', 'bigtcpd')
    assert not re.search(r': writing ', log), log
    assert len(re.findall(r'initial reconcile done', log)) == 1, log
    after = state(c, tmp_path / 'after')
    for n in ALL:
        assert after[n]['original'] == before[n]['original'], (n, before[n], after[n])
    assert after['va'].get('held') == before['va']['held'], (before['va'], after['va'])
    now = devices(c)
    assert {n: d['original'] for n, d in now.items() if d.get('original')} == originals
    assert now['va']['state'] == 'rolled-back' and now['vb']['state'] in ('applied', 'probation'), now
    assert sizes_now(c) == {'va': ORIG, 'vb': EDITED, 'lxca': EDITED, 'lxcb': EDITED}
    assert ctl_json(c, 'status')['writes'] == 0

    # The running build says its version everywhere.
    upstream = new.rsplit('-', 1)[0]
    assert c.run('bigtcpctl', '--version').stdout == f'bigtcpctl {upstream}\n'
    assert c.run('bigtcpd', '--version').stdout == f'bigtcpd {upstream}\n'
    assert ctl_json(c, 'status')['version'] == upstream
    assert ctl_json(c, '--dbus', 'status')['version'] == upstream
    print(f'upgraded {old} -> {new} unattended; bigtcpctl status: version {upstream}')


def test_remove_gives_originals_back_and_keeps_the_policy(box, tmp_path):
    c = box
    mine = c.path('/etc/bigtcpd/bigtcpd.yaml').read_text()
    r = c.run('apt-get', 'remove', '-y', 'bigtcpd', timeout=300)
    assert 'giving the devices it changed their original sizes back' in r.stdout + r.stderr, r.stdout + r.stderr
    assert sizes_now(c) == {n: ORIG for n in ALL}
    assert state(c, tmp_path / 's') == {}
    assert c.path('/etc/bigtcpd/bigtcpd.yaml').read_text() == mine


def test_ansible_play_with_the_fleet_policy(box):
    c = box
    shutil.copytree(REPO / 'conf', c.path(PLAY_DIR) / 'conf')
    shutil.copytree(Path(__file__).parent / 'ansible', c.path('/var/tmp/play-callbacks'))
    fleet = (REPO / 'conf' / 'fleet.yaml').read_text()
    cursor = c.journal_cursor()
    rc, tasks, out = play(c)
    assert rc == 0, out[-4000:]
    assert res(tasks, 'Install bigtcpd')['changed'], 'the play did not install bigtcpd from the repository'
    assert installed_version(c) == deb_version(c.new)
    assert res(tasks, 'Install the policy')['changed']
    assert res(tasks, 'Reload bigtcpd')['changed']
    assert c.path('/etc/bigtcpd/bigtcpd.yaml').read_text() == fleet
    # The reinstallation applied the policy kept through the removal, the device held before it
    # too (bigtcpd(8), PACKAGE); then the fleet's took over.
    log = journal_since(c, cursor, '-u', 'bigtcpd')
    assert re.search(r'va: writing gso_max_size 65536→150000', log), log
    # k8s-pods: lxc* at 185000 on a k8s-* host; va and vb match nothing there: their originals.
    wait_sizes(c, {'lxca': BIG, 'lxcb': BIG, 'va': ORIG, 'vb': ORIG}, 'the fleet policy')
    st = ctl_json(c, 'status')
    assert json.loads(res(tasks, 'Reload bigtcpd')['stdout'])['digest'] == st['policy']['digest'], st['policy']


def test_ansible_check_diff_shows_the_plan_and_writes_nothing(box):
    c = box
    changed = (REPO / 'conf' / 'fleet.yaml').read_text().replace(
        '      window: 30s              # pods come and go; keep probation short',
        '      window: 30s              # pods come and go; keep probation short\n    # changed').replace(
        '    ipv4:\n      gso-max-size: 185000\n      gro-max-size: 185000\n    rollback:\n      window: 30s',
        '    ipv4:\n      gso-max-size: 150000\n      gro-max-size: 150000\n    rollback:\n      window: 30s')
    assert changed.count('150000') == 2, 'the k8s-pods policy of conf/fleet.yaml is not as this test knows it'
    c.path(PLAY_DIR + '/changed.yaml').write_text(changed)
    before = c.path('/etc/bigtcpd/bigtcpd.yaml').read_text()
    sizes = sizes_now(c)
    digest = ctl_json(c, 'status')['policy']['digest']
    cursor = c.journal_cursor()
    rc, tasks, out = play(c, f'{PLAY_DIR}/changed.yaml', check=True)
    assert rc == 0, out[-4000:]
    plan = '\n'.join(res(tasks, 'Plan')['bigtcpd_plan.stdout_lines'])
    print(f'the plan the play showed:\n{plan}')
    for dev in PODS:
        assert re.search(rf'^.*{dev}\b.*gso_ipv4_max_size 185000→150000', plan, re.M), plan
    copy = res(tasks, 'Install the policy')
    assert copy['changed'] and copy['diff'], copy
    diff = copy['diff'][0] if isinstance(copy['diff'], list) else copy['diff']
    assert '150000' in diff.get('after', '') and '150000' not in diff.get('before', ''), diff
    assert 'Reload bigtcpd' not in tasks or res(tasks, 'Reload bigtcpd').get('skipped'), tasks.get('Reload bigtcpd')
    # Nothing written: the file, the sizes, the running policy as they were.
    assert c.path('/etc/bigtcpd/bigtcpd.yaml').read_text() == before
    assert sizes_now(c) == sizes
    assert ctl_json(c, 'status')['policy']['digest'] == digest
    log = journal_since(c, cursor, '-u', 'bigtcpd')
    assert not re.search(r': writing |policy reloaded|reload', log), log


def test_ansible_applies_the_change_and_the_handler_sees_it(box):
    c = box
    digest = ctl_json(c, 'status')['policy']['digest']
    rc, tasks, out = play(c, f'{PLAY_DIR}/changed.yaml')
    assert rc == 0, out[-4000:]
    assert res(tasks, 'Install the policy')['changed']
    assert c.path('/etc/bigtcpd/bigtcpd.yaml').read_text() == c.path(PLAY_DIR + '/changed.yaml').read_text()
    reload = res(tasks, 'Reload bigtcpd')
    new_digest = json.loads(reload['stdout'])['digest']
    assert new_digest != digest
    assert ctl_json(c, 'status')['policy']['digest'] == new_digest
    want = sizes4(185000)[:2] + sizes4(150000)[2:]   # IPv6 185000, IPv4 150000
    wait_sizes(c, {n: want for n in PODS}, 'the changed policy')
    assert sizes_now(c, SHIPPED) == {n: ORIG for n in SHIPPED}


def test_ansible_refuses_a_broken_policy_host_untouched(box):
    c = box
    broken = c.path(PLAY_DIR + '/changed.yaml').read_text().replace('gso-max-size: 150000', 'gso-max-size: lots', 1)
    c.path(PLAY_DIR + '/broken.yaml').write_text(broken)
    before = c.path('/etc/bigtcpd/bigtcpd.yaml').read_text()
    sizes = sizes_now(c)
    pid = main_pid(c)
    digest = ctl_json(c, 'status')['policy']['digest']
    cursor = c.journal_cursor()
    rc, tasks, out = play(c, f'{PLAY_DIR}/broken.yaml')
    assert rc != 0, 'the play accepted a broken policy'
    v = res(tasks, 'Validate the policy on this host (the daemon\'s own parser; counters it lacks warn)')
    assert v.get('failed') and 'gso-max-size' in v['stderr'], v
    print(f'refused: {v["stderr"].strip()}')
    assert 'Install the policy' not in tasks and 'Reload bigtcpd' not in tasks, sorted(tasks)
    assert c.path('/etc/bigtcpd/bigtcpd.yaml').read_text() == before
    assert sizes_now(c) == sizes
    assert main_pid(c) == pid and ctl_json(c, 'status')['policy']['digest'] == digest
    assert not re.search(r': writing ', journal_since(c, cursor, '-u', 'bigtcpd'))
