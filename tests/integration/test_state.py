"""The state file against what a full disk and a hostile runtime directory do to it (issue 15):
a runtime directory that fills up during a burst of new devices and then has room again, symlinks
planted where the daemon writes, FIFOs where it reads, and runtime directories it must not trust.
The promise each time: every device whose originals were recorded gets them back, and nothing
outside the runtime directory is written. Sizes are read back from the kernel (nl.py)."""

import errno
import json
import os
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import nl
from helpers import BIN, Monitor, T, at, children, current, ip, vm, ip_batch, read_state, run, sizes4, veth, write_file_atomic
from policies import standard_policy
from varlink_client import call

IFACE = 'io.bigtcpd.Manager'
BIG = sizes4(185000)
PAGE = 4096


def policy(names, ipv4=True):
    """All four sizes at 185000 (or the IPv6 ones only), no guards."""
    return standard_policy('big', f'name: {names}', ipv4=ipv4, rollback=('guards: []',))


def runtime_dir(daemon, name):
    """A runtime directory of the test's making, short enough for the varlink socket's path."""
    d = daemon.sockdir / name
    d.mkdir()
    d.chmod(0o755)
    return d


def wait_refused(d, timeout=10):
    """The daemon must exit (nonzero) instead of starting; returns its log."""
    try:
        d.proc.wait(T(timeout))
    except subprocess.TimeoutExpired:
        raise AssertionError(f'bigtcpd did not refuse to start within {T(timeout)}s\n{d.log_tail()}')
    d.returncode = d.proc.returncode
    d.close()
    assert d.returncode != 0, f'bigtcpd exited 0\n{d.log_tail()}'
    return d.log()


@pytest.fixture
def small_tmpfs():
    """A 1 MiB tmpfs (mode 0755, as a runtime directory must be) on a directory of its own under
    /tmp, unmounted at teardown: lazily if a process still holds it."""
    mnt = Path(tempfile.mkdtemp(prefix='bt-', dir='/tmp'))
    run('mount', '-t', 'tmpfs', '-o', 'size=1m,mode=0755', 'bt-test', mnt)
    try:
        yield mnt
    finally:
        if subprocess.run(['umount', mnt], capture_output=True).returncode != 0:
            run('umount', '-l', mnt)
        mnt.rmdir()


def fill(path):
    """Fill the filesystem of `path` with a file until one page is left free; returns the file."""
    filler = path / 'filler'
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    n = 0
    try:
        while True:
            n += os.write(fd, b'\0' * PAGE)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    os.ftruncate(fd, n - PAGE)
    os.close(fd)
    st = os.statvfs(path)
    assert st.f_bavail * st.f_bsize == PAGE, f'{st.f_bavail} blocks of {st.f_bsize} free, not one page'
    return filler


def pairs(prefix, first, count):
    """`count` veth pairs, each end with sizes of its own (the IPv4 ones follow: <= 65536), as one
    ip batch; returns {ifname: original sizes}."""
    lines, originals = [], {}
    for i in range(first, first + count):
        a, b = f'{prefix}{i}a', f'{prefix}{i}b'
        ga, gb = 20000 + 20 * i, 20010 + 20 * i
        lines.append(f'link add {a} gso_max_size {ga} gro_max_size {ga + 1} type veth peer name {b} '
                     f'gso_max_size {gb} gro_max_size {gb + 1}')
        originals[a] = (ga, ga + 1, ga, ga + 1)
        originals[b] = (gb, gb + 1, gb, gb + 1)
    return lines, originals


def test_full_runtime_dir_during_a_burst(ns, small_tmpfs, daemon, confdir):
    """The runtime directory fills up (one free page) during a burst of new devices, then has room
    again: the devices refused meanwhile are written once the state file can be written, and after
    a SIGKILL every device written after the space came back gets its true originals back. (Once,
    the append that hit ENOSPC left a torn line mid-journal, every later line was ignored at the
    next start, and the refused devices stayed failed.)"""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["s*", "t*"]'))
    d = daemon(ns, cfg, runtime_dir=small_tmpfs)
    mon = Monitor(d)
    try:
        filler = fill(small_tmpfs)
        lines, full = pairs('s', 0, 40)
        ip_batch(ns, lines)
        mon.wait_until(lambda m: all(m.state(n) in ('applied', 'failed') for n in full), T(30),
                       'every device of the burst written or refused')
        refused = [n for n in full if mon.state(n) == 'failed']
        assert refused, 'no device was refused: the disk never filled up'
        assert d.log_lines('failed to record (the original sizes|what a restart needs)')
        os.unlink(filler)

        # Nothing else happens: the store's own retry finds the room.
        nl.wait_links(ns, at({n: BIG for n in full}), T(40), 'the refused devices written once there is room')
        lines, later = pairs('t', 40, 10)
        ip_batch(ns, lines)
        nl.wait_links(ns, at({n: BIG for n in later}), T(20), 'devices created after the space came back')
    finally:
        mon.close()
    d.kill()

    cfg.write_text(policy('["nomatch"]'))
    d2 = daemon(ns, cfg, runtime_dir=small_tmpfs)
    originals = {**full, **later}
    nl.wait_links(ns, at(originals), T(20), 'every device back at its own originals after the SIGKILL')
    d2.stop()


def test_full_runtime_dir_when_a_policy_owns_more(ns, small_tmpfs, daemon, confdir):
    """Every device's originals are on disk and its IPv6 sizes written; the runtime directory fills
    up (one free page) and a reload has the policy name the IPv4 sizes too. A device whose entry
    owning them cannot be saved is not written; after a SIGKILL and with the room back, a restart
    with a policy that matches nothing gives every size of every device back. (The IPv4 sizes
    were written all the same once, with the entry on disk owning IPv6 only: the restart gave back
    IPv6 and left IPv4 at 185000 for good.)"""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["o*"]', ipv4=False))
    lines, originals = pairs('o', 0, 30)
    ip_batch(ns, lines)
    d = daemon(ns, cfg, runtime_dir=small_tmpfs)
    v6 = {n: (185000, 185000, o[2], o[3]) for n, o in originals.items()}
    nl.wait_links(ns, at(v6), T(20), 'the IPv6 sizes written')
    mon = Monitor(d)
    try:
        mon.wait_until(lambda m: all(m.state(n) == 'applied' for n in originals), T(20), 'every device applied')
        filler = fill(small_tmpfs)
        d.reload(lambda: write_file_atomic(cfg, policy('["o*"]')))
        mon.wait_until(lambda m: all(m.state(n) == 'failed' or (m.state(n) == 'applied' and
                                                                current(ns, [n])[n] == BIG) for n in originals),
                       T(30), 'every device written or refused')
        refused = [n for n in originals if mon.state(n) == 'failed']
        assert refused, 'no device was refused: the disk never filled up'
        assert d.log_lines('failed to record (the original sizes|what a restart needs)')
        now = current(ns, refused)
        for n in refused:
            assert now[n] == v6[n], f'{n}: refused, but its sizes are {now[n]}, not {v6[n]}'
    finally:
        mon.close()
    d.kill()
    os.unlink(filler)

    cfg.write_text(policy('["nomatch"]'))
    d2 = daemon(ns, cfg, runtime_dir=small_tmpfs)
    nl.wait_links(ns, at(originals), T(20), 'every size of every device back at its original after the SIGKILL')
    d2.stop()


def snapshot_lines(entries, generation=1):
    """A snapshot as the daemon writes it: its header line, then one entry a line."""
    head = json.dumps({'version': 1, 'generation': generation}, separators=(',', ':'))[:-1] + ',"devices":['
    body = ',\n'.join(json.dumps(e, separators=(',', ':')) for e in entries)
    return [head] + body.split('\n'), ']}'


DAMAGE = {
    'a wrong type': lambda e: e['original'].update(gso_max_size='x'),
    'a negative size': lambda e: e['original'].update(gro_max_size=-1),
    '2^40': lambda e: e['original'].update(gso_ipv4_max_size=2 ** 40),
    'a GRO size the kernel refuses': lambda e: e['original'].update(gro_max_size=600000),
    'a GSO size of 0': lambda e: e['original'].update(gso_max_size=0),
    'a null': None,
}


@pytest.mark.parametrize('damage', [*DAMAGE, 'version 999', 'a garbage header', 'cut in half'])
def test_a_bad_entry_costs_only_itself(ns, daemon, confdir, damage):
    """The state file of 10 devices, one entry damaged (or the header, or the file cut in half
    through an entry): a restart with a policy that matches nothing gives every device whose entry
    is whole its originals back, and says which line it set aside and why. Once, any of these sent
    the whole file to state.json.corrupt and no device got its originals back."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["e*"]'))
    lines, originals = pairs('e', 0, 5)
    ip_batch(ns, lines)
    d = daemon(ns, cfg)
    nl.wait_links(ns, at({n: BIG for n in originals}), T(20), 'written')
    rd = d.runtime_dir
    d.kill()
    entries = sorted(read_state(rd)['devices'], key=lambda e: e['ifname'])
    assert len(entries) == len(originals)
    victim = entries[3]['ifname']
    if damage in DAMAGE:
        if DAMAGE[damage] is None:
            entries[3] = None
        else:
            DAMAGE[damage](entries[3])
    head, tail = snapshot_lines(entries)
    text = head + [tail]
    if damage == 'version 999':
        text[0] = text[0].replace('"version":1', '"version":999')
    elif damage == 'a garbage header':
        text[0] = '{"vers\x01#'
    body = '\n'.join(text[:-2]) + '\n' + text[-2] + text[-1] + '\n'
    if damage == 'cut in half':
        # through the line of the fourth entry (line 5: the header is line 1)
        cut = body.index('\n'.join(text[:5])) + len('\n'.join(text[:4])) + 1 + len(text[4]) // 2
        body = body[:cut]
    (rd / 'state.json').write_text(body)
    (rd / 'state.journal').unlink(missing_ok=True)

    cfg.write_text(policy('["nomatch"]'))
    d2 = daemon(ns, cfg, runtime_dir=rd)
    if damage in DAMAGE or damage == 'cut in half':
        lost = {victim} if damage in DAMAGE else {e['ifname'] for e in entries[3:]}
        back = {n: o for n, o in originals.items() if n not in lost}
        nl.wait_links(ns, at(back), T(20), 'every device of a whole entry back at its originals')
        # the others' are not known: left as they are (nothing restored blindly)
        assert all(current(ns, [n])[n] == BIG for n in lost), current(ns, lost)
        if damage in DAMAGE:
            assert d2.log_lines(r'state\.json line 5.*entry set aside'), d2.log_tail()
        else:
            assert d2.log_lines(r'state\.json is cut short'), d2.log_tail()
    else:
        nl.wait_links(ns, at(originals), T(20), 'every device back at its originals')
        assert d2.log_lines(r'state\.json: its first line is not a header'), d2.log_tail()
    assert (rd / 'state.json.corrupt').read_text() == body
    d2.stop()


@pytest.fixture
def memory_cgroup():
    """A memory cgroup of the test's own (cgroup v2 memory.max, or v1 memory.limit_in_bytes):
    set(limit) puts the limit, join(pid) moves a process in; removed at teardown."""
    v2 = os.path.exists('/sys/fs/cgroup/cgroup.controllers')
    path = Path('/sys/fs/cgroup' if v2 else '/sys/fs/cgroup/memory') / f'bt-test-{os.getpid()}'
    path.mkdir()

    class Cgroup:
        def set(self, limit):
            (path / ('memory.max' if v2 else 'memory.limit_in_bytes')).write_text(str(limit))

        def join(self, pid):
            (path / 'cgroup.procs').write_text(str(pid))

        def oom_kills(self):
            if v2:
                ev = dict(l.split() for l in (path / 'memory.events').read_text().splitlines())
                return int(ev.get('oom_kill', 0))
            return int((path / 'memory.failcnt').read_text())

    try:
        yield Cgroup()
    finally:
        for _ in range(200):
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.05)   # its last process is still being reaped: no event for that


def test_restart_under_a_memory_limit(ns, daemon, confdir, memory_cgroup, tmp_path):
    """10000 devices, all in probation (the longest entries), then a SIGKILL: the restart, in a
    memory cgroup of 32 MiB (a DaemonSet's limit; for a sanitizer build, the first daemon's peak
    and 8 MiB), gets to READY=1 and resumes every probation. Once, the load made the whole
    snapshot a json-c tree first: 60 MB from a 4.4 MB file, and every restart was OOM-killed."""
    pairs = 5000
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(standard_policy('big', 'name: ["m*"]', rollback=('window: 1h', 'interval: 1s', 'guards:', '  - {counter: link.tx_dropped, max-increase: 10}')))
    for k in ('all', 'default'):   # no router solicitations into 10000 veths
        run('ip', 'netns', 'exec', ns, 'sysctl', '-qw', f'net.ipv6.conf.{k}.disable_ipv6=1')
    ip_batch(ns, [f'link add m{i}a type veth peer name m{i}b' for i in range(pairs)])
    names = [f'm{i}{e}' for i in range(pairs) for e in 'ab']
    # a sanitizer's quarantine keeps what is freed: kept small, as the release build keeps none
    env = {'ASAN_OPTIONS': ':'.join(filter(None, [os.environ.get('ASAN_OPTIONS'), 'quarantine_size_mb=1']))}
    d = daemon(ns, cfg, env=env, ready_timeout=60)
    with Monitor(d) as mon:
        mon.wait_until(lambda m: all(m.state(n) == 'probation' for n in names), T(120), 'all in probation')
    peak = vm(d.pid, 'VmHWM')
    rd = d.runtime_dir
    d.kill()

    sanitized = b'__asan_init' in BIN.read_bytes()
    limit = peak + (8 << 20) if sanitized else 32 << 20
    memory_cgroup.set(limit)
    fifo = tmp_path / 'go'
    os.mkfifo(fifo)
    # joins the cgroup before it execs the daemon: the test moves it in, then lets it go on
    d2 = daemon(ns, cfg, env=env, runtime_dir=rd, ready=False, wrapper=['sh', '-c', 'read _ < "$0"; exec "$@"', str(fifo)])
    memory_cgroup.join(d2.pid)
    with open(fifo, 'w') as f:
        f.write('go\n')
    d2.wait_notify('READY=1', T(60))
    with Monitor(d2) as mon:
        mon.wait_until(lambda m: all(m.state(n) == 'probation' for n in names), T(120), 'every probation resumed')
    again = vm(d2.pid, 'VmHWM')
    print(f'first daemon VmHWM {peak >> 10} kB; restart in {limit >> 20} MiB: VmHWM {again >> 10} kB')
    assert d2.running()
    assert again <= peak + (4 << 20), f'the restart peaked at {again >> 10} kB, the daemon before it at {peak >> 10} kB'
    d2.stop()


def test_planted_symlinks_are_not_followed(ns, daemon, confdir, tmp_path):
    """A `.state.json.tmp` symlink (before the start and while it runs) and a `state.journal`
    symlink planted while it runs: their targets are never written, the links are moved aside or
    replaced, and what the daemon recorded meanwhile survives a SIGKILL."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["v*", "w*"]'))
    rd = runtime_dir(daemon, 'rsym')
    tmp_target, journal_target = tmp_path / 'tmp-target', tmp_path / 'journal-target'
    tmp_target.write_text('precious\n')
    journal_target.write_text('precious too\n')
    os.symlink(tmp_target, rd / '.state.json.tmp')
    veth(ns, 'v0', 'v1')
    orig_v = nl.sizes_of(nl.read_links(ns)['v0'])

    d = daemon(ns, cfg, runtime_dir=rd)
    nl.wait_links(ns, at({'v0': BIG, 'v1': BIG}), T(10), 'v0 and v1 written')
    assert (rd / 'state.json').is_file() and not (rd / 'state.json').is_symlink()
    assert tmp_target.read_text() == 'precious\n'

    # While it runs: both again, the journal swapped atomically for a symlink.
    os.symlink(tmp_target, rd / '.state.json.tmp')
    os.symlink(journal_target, rd / 'planted')
    os.rename(rd / 'planted', rd / 'state.journal')
    ip_batch(ns, ['link add w0 gso_max_size 30000 gro_max_size 30001 type veth peer name w1'])
    nl.wait_links(ns, at({'w0': BIG, 'w1': BIG}), T(10), 'w0 and w1 written')
    assert tmp_target.read_text() == 'precious\n'
    assert journal_target.read_text() == 'precious too\n'
    assert not (rd / 'state.journal').is_symlink()
    assert (rd / 'state.journal.corrupt').is_symlink(), sorted(os.listdir(rd))
    assert d.log_lines(r'state\.journal is not a regular file')
    d.kill()

    cfg.write_text(policy('["nomatch"]'))
    d2 = daemon(ns, cfg, runtime_dir=rd)
    nl.wait_links(ns, at({'v0': orig_v, 'w0': (30000, 30001, 30000, 30001)}), T(10),
                  'originals recorded around the planted links restored')
    d2.stop()
    assert tmp_target.read_text() == 'precious\n'
    assert journal_target.read_text() == 'precious too\n'


@pytest.mark.parametrize('name', ['state.json', 'state.journal'])
def test_fifo_state_file_does_not_block_startup(ns, daemon, confdir, name):
    """A FIFO as state.json or state.journal: start-up goes on (READY=1 within the deadline), the
    FIFO is moved aside; a FIFO as the journal never costs the snapshot. A FIFO planted as the
    journal while the daemon runs does not stop it either."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["v*", "w*"]'))
    rd = runtime_dir(daemon, 'rfifo')
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg, runtime_dir=rd)
    nl.wait_links(ns, at({'v0': BIG}), T(10), 'v0 written')
    d.stop()
    (rd / name).unlink(missing_ok=True)
    os.mkfifo(rd / name)

    # Devices left at the policy's sizes by the first run: whether their originals are still
    # known shows whether the snapshot was kept.
    d2 = daemon(ns, cfg, runtime_dir=rd, ready_timeout=10)
    assert stat.S_ISFIFO(os.lstat(rd / f'{name}.corrupt').st_mode)
    assert d2.log_lines(rf'{name.replace(".", r"[.]")} is not a regular file')
    devs = {x['ifname']: x for x in call(rd / IFACE, f'{IFACE}.ListDevices', timeout=T(10))['devices']}
    if name == 'state.journal':
        assert devs['v0'].get('original'), f'the snapshot was lost for a FIFO journal: {devs["v0"]}'

    (rd / 'state.journal').unlink(missing_ok=True)
    os.mkfifo(rd / 'state.journal')
    veth(ns, 'w0', 'w1')
    nl.wait_links(ns, at({'w0': BIG}), T(10), 'w0 written with a FIFO planted as the journal')
    assert call(rd / IFACE, f'{IFACE}.GetStatus', timeout=T(2))['version']
    journal = rd / 'state.journal'
    assert not journal.exists() or journal.is_file(), 'the FIFO is still the journal'
    d2.stop()


@pytest.mark.parametrize('mode', [0o1777, 0o777, 0o775])
def test_runtime_dir_writable_by_others_is_refused(ns, daemon, confdir, mode):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["v*"]'))
    veth(ns, 'v0', 'v1')
    rd = runtime_dir(daemon, 'rmode')
    rd.chmod(mode)
    log = wait_refused(daemon(ns, cfg, runtime_dir=rd, ready=False))
    assert f'Runtime directory {rd} is writable by' in log and 'refusing' in log, log
    assert nl.sizes_of(nl.read_links(ns)['v0']) == sizes4(65536), 'written although it refused to start'
    assert not (rd / 'state.json').exists()


def test_runtime_dir_of_another_user_is_refused(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["v*"]'))
    veth(ns, 'v0', 'v1')
    rd = runtime_dir(daemon, 'rowner')
    os.chown(rd, 65534, 65534)
    log = wait_refused(daemon(ns, cfg, runtime_dir=rd, ready=False))
    assert f'Runtime directory {rd} is owned by uid 65534' in log and 'refusing' in log, log
    assert nl.sizes_of(nl.read_links(ns)['v0']) == sizes4(65536), 'written although it refused to start'


def mac_of(ns, ifname):
    return json.loads(run('ip', '-n', ns, '-j', 'link', 'show', 'dev', ifname).stdout)[0]['address']


@pytest.mark.parametrize('stop', ['sigterm', 'sigkill'])
def test_reused_ifindex_gets_no_one_elses_originals(ns, daemon, confdir, stop):
    """old0 (ifindex 4242, originals 60000) is written; bigtcpd stops; old0 is deleted and new0
    (another MAC, originals 50000) created with ifindex 4242. The restarted daemon drops old0's
    entry as stale, and when the policy stops matching new0 gets its own originals back. (Once it
    "resumed probation begun by an earlier run" and wrote old0's 60000 into new0.)"""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["old0", "new0"]'))
    rd = runtime_dir(daemon, 'rreuse')
    ip(ns, 'link', 'add', 'old0', 'index', '4242', 'gso_max_size', '60000', 'gro_max_size', '60000',
       'type', 'veth', 'peer', 'name', 'old0p')
    d = daemon(ns, cfg, runtime_dir=rd)
    nl.wait_links(ns, at({'old0': BIG}), T(10), 'old0 written')
    old_mac = mac_of(ns, 'old0')
    if stop == 'sigterm':
        d.stop()
    else:
        d.kill()
    entry = {e['ifindex']: e for e in read_state(rd)['devices']}[4242]
    assert nl.sizes_of(entry['original']) == sizes4(60000) and entry['mac'] == old_mac, entry

    ip(ns, 'link', 'del', 'old0')
    ip(ns, 'link', 'add', 'new0', 'index', '4242', 'gso_max_size', '50000', 'gro_max_size', '50000',
       'type', 'veth', 'peer', 'name', 'new0p')
    assert mac_of(ns, 'new0') != old_mac
    d2 = daemon(ns, cfg, runtime_dir=rd)
    nl.wait_links(ns, at({'new0': BIG}), T(10), 'new0 written')
    d2.reload(lambda: write_file_atomic(cfg, policy('["nomatch"]')))
    nl.wait_links(ns, at({'new0': sizes4(50000)}), T(10), "new0 back at its own originals, not old0's")
    stale = d2.log_lines(r'new0: not the device that had ifindex 4242 .*old0.*stale entry')
    assert stale, d2.log_tail()
    assert not d2.log_lines(r'new0: resuming probation'), d2.log_tail()
    d2.stop()


def children_named(pid, comm):
    return [k for k, c in children(pid).items() if c == comm]


def private_dirty(pid):
    for line in Path(f'/proc/{pid}/smaps_rollup').read_text().splitlines():
        if line.startswith('Private_Dirty:'):
            return int(line.split()[1]) * 1024
    raise KeyError(f'no Private_Dirty for pid {pid}')


def test_the_sync_child_is_made_before_the_devices(ns, daemon, confdir):
    """The child that syncs the state file (durable.h) is forked at the start, while the daemon is
    small, and is the one that syncs every save after. Once it was forked by the first save, in
    the middle of a burst: it shared every page the daemon held then, and each one the daemon
    changed or freed afterwards became a private copy of its own (7.5 MiB of private memory
    beside a 9 MiB daemon at 10000 devices)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["c*"]'))
    d = daemon(ns, cfg)
    kids = children_named(d.pid, 'bigtcpd-sync')
    assert len(kids) == 1, f'no sync child at READY=1 (before any save): {kids}'
    child = kids[0]
    dirty = private_dirty(child)

    lines, burst = pairs('c', 0, 500)
    ip_batch(ns, lines)
    mon = Monitor(d)
    try:
        mon.wait_until(lambda m: all(m.state(n) in ('probation', 'applied') for n in burst), T(60),
                       'the burst written')
    finally:
        mon.close()
    assert children_named(d.pid, 'bigtcpd-sync') == [child], 'another sync child was made'
    grew = private_dirty(child) - dirty
    print(f'sync child: Private_Dirty grew by {grew >> 10} kB over a burst of {len(burst)} devices')
    assert grew < (256 << 10), f'the sync child holds {grew >> 10} kB more of its own after the burst'
    d.stop()


def test_no_child_outlives_the_daemon(ns, daemon, confdir):
    """When the daemon has exited, its children are gone: not running, not even waiting to be
    reaped. systemd in a container that may not kill the unit's cgroup ("Failed to kill control
    group … Input/output error") counts the service as stopping while any process of it is left:
    the sync child, left to its parent-death signal, was sometimes still there, and `systemctl stop`
    waited out the 90 s of TimeoutStopSec (test_systemd_boot, under load)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy('["c*"]'))
    d = daemon(ns, cfg)
    kids = children(d.pid)
    assert 'bigtcpd-sync' in kids.values(), f'no sync child: {kids}'
    d.stop()
    left = {}
    for k in kids:
        try:
            pid_name, rest = Path(f'/proc/{k}/stat').read_text().rsplit(')', 1)
        except OSError:
            continue
        left[k] = f'{pid_name}) {rest.split()[0]}'   # pid (name) and its state
    assert not left, f'children of the daemon left after its exit: {left}'
