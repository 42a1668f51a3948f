"""Trying a policy: `bigtcpctl try FILE` runs it instead of the configured policy until `confirm`
(installed, in force after a restart), `revert`, its deadline, or a daemon restart (a SIGKILL too)
— the last three go back to the configured policy, read back from the kernel. And `retry --all`
releasing every device a guard rolled back. Waits are on Monitor events and link dumps."""

import json
import os
import re
import select
import signal
import stat
import subprocess
import time

import pytest

import inject
import nl
from helpers import Monitor, T, at, ip, policy_text, sizes4, veth
from policies import HDR_GUARD, standard_policy
from test_bigtcpctl import ALL_SIZES, CTL, IFACE, ctl, ctl_binary, one_line_error, start_on_pairs  # noqa: F401 (fixture)

CONFIGURED = standard_policy('configured', 'name: ["v*"]', 150000)

# Other sizes for the configured devices, and devices the configured policy leaves alone.
TRIED_K = standard_policy('tried-k', 'name: ["k*"]', 100000)
TRIED = standard_policy('tried', 'name: ["v*"]', 185000) + TRIED_K.split('policies:\n', 1)[1]

BROKEN = policy_text('''
    version: 1
    policies:
      - name: broken
        match: {name: ["v*"]}
        ipv6: {gso-max-size: lots}
    ''')

DEVS = ('v0', 'v1', 'k0', 'k1')
AS_CONFIGURED = {'v0': sizes4(150000), 'v1': sizes4(150000), 'k0': sizes4(65536), 'k1': sizes4(65536)}
AS_TRIED = {'v0': sizes4(185000), 'v1': sizes4(185000), 'k0': sizes4(100000), 'k1': sizes4(100000)}


@pytest.fixture
def configured(ns, daemon, confdir, tmp_path):
    d = start_on_pairs(ns, daemon, confdir, CONFIGURED)
    d.tried = tmp_path / 'tried.yaml'
    d.tried.write_text(TRIED)
    nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'the configured policy')
    return d


def status(d):
    return json.loads(ctl('status', '--json', sock=d.runtime_dir / IFACE, check_rc=0).stdout)


def is_try(action, reason=None):
    return lambda e: e.get('event') == 'try' and e.get('action') == action and e.get('reason') == reason


def test_unconfirmed_try_is_reverted_at_its_deadline(configured, ns):
    d = configured
    with Monitor(d) as mon:
        start = time.time()   # before the try is asked for: its deadline is 3 s after it began
        r = ctl('try', d.tried, '--timeout', '3s', sock=d.sock, check_rc=0)
        assert r.stdout.startswith(f'Trying {d.tried} (digest '), r.stdout
        assert f'Once confirmed, it is installed as {d.cfg}.' in r.stdout
        assert 'Keep it with "bigtcpctl confirm"' in r.stdout and r.stderr == ''
        started = mon.wait_for(is_try('started'), 5, 'try started')
        assert started['file'] == str(d.tried) and started['target'] == str(d.cfg)
        # try returns once the tried policy runs: its writes are queued, the kernel has them soon
        nl.wait_links(ns, at(AS_TRIED), T(10), 'the tried policy')
        t = status(d)['try']
        assert t['file'] == str(d.tried) and t['target'] == str(d.cfg)
        assert t['deadline_usec'] == started['deadline_usec'] and 0 < t['remaining_usec'] <= 3_000_000
        assert (d.runtime_dir / 'try.json').exists()

        ended = mon.wait_for(lambda e: e.get('event') == 'try' and e.get('action') != 'started', 10, 'try end')
        assert is_try('reverted', 'timeout')(ended), ended
        # not before its deadline (the wall clock, in µs; the event is sent after the revert)
        assert time.time() * 1e6 >= started['deadline_usec'] and time.time() - start >= 2.9
    nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'back on the configured policy')
    assert status(d)['try'] is None
    assert not (d.runtime_dir / 'try.json').exists()
    assert d.cfg.read_text() == CONFIGURED
    one_line_error(ctl('confirm', sock=d.sock), 1, r'^bigtcpctl: no try runs$')


def test_revert_at_once_and_what_a_try_refuses(configured, ns, tmp_path):
    d = configured
    broken = tmp_path / 'broken.yaml'
    broken.write_text(BROKEN)

    # Validated first: every error as file:line:column, and nothing tried.
    r = ctl('try', broken, sock=d.sock, check_rc=1)
    assert r.stderr.splitlines() == [
        f'{broken}:5:26: gso-max-size: expected a number of bytes, "max", "legacy" or "auto"',
        'bigtcpctl: the policy has errors; nothing was tried'], r.stderr
    assert status(d)['try'] is None
    one_line_error(ctl('try', d.tried, '--timeout', '0.5s', sock=d.sock), 2, '--timeout: "0.5s" is not a duration')
    one_line_error(ctl('try', d.tried, '--to', tmp_path / 'elsewhere.yaml', sock=d.sock), 2,
                   r'--to .*elsewhere\.yaml: bigtcpd reads no policy there')
    one_line_error(ctl('revert', sock=d.sock), 1, r'^bigtcpctl: no try runs$')
    one_line_error(ctl('status', '--timeout', '3s', sock=d.sock), 2, '--timeout and --to go with try only')

    with Monitor(d) as mon:
        ctl('try', d.tried, sock=d.sock, check_rc=0)   # 120 s by default
        started = mon.wait_for(is_try('started'), 5, 'try started')
        assert started['deadline_usec'] - time.time() * 1e6 > 100e6
        nl.wait_links(ns, at(AS_TRIED), T(10), 'the tried policy')

        out = ctl('status', sock=d.sock, check_rc=0).stdout
        assert re.search(rf'^ +Trying: {re.escape(str(d.tried))}, reverted in 1min \d+s unless confirmed '
                         rf'\(bigtcpctl confirm installs it as {re.escape(str(d.cfg))}\)$', out, re.M), out

        # During the try: no second try, no reload (the files are read when it ends).
        one_line_error(ctl('try', d.tried, sock=d.sock), 1, rf'a try of {d.tried} runs')
        one_line_error(ctl('reload', sock=d.sock), 1, rf'a try of {d.tried} runs')

        # revert says what moved going back: answered once the kernel took the writes
        r = ctl('revert', sock=d.sock, check_rc=0)
        lines = r.stdout.splitlines()
        assert lines[0] == 'Reverted: the policy that ran before is back.' and len(lines) > 1, r.stdout
        assert all(re.fullmatch(r'\w+: (\w+ \d+ → \d+(, )?)+', l) for l in lines[1:]), r.stdout
        assert at(AS_CONFIGURED)(nl.read_links(ns)), r.stdout
        mon.wait_for(is_try('reverted', 'revert'), 5, 'try reverted by the operator')
    nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'back on the configured policy')
    assert status(d)['try'] is None and not (d.runtime_dir / 'try.json').exists()
    assert d.cfg.read_text() == CONFIGURED
    assert 'Trying:' not in ctl('status', sock=d.sock, check_rc=0).stdout


def test_sigterm_during_a_try_reverts_before_the_daemon_exits(configured, ns):
    d = configured
    ctl('try', d.tried, sock=d.sock, check_rc=0)
    nl.wait_links(ns, at(AS_TRIED), T(10), 'the tried policy')
    d.stop()
    # nothing runs any more: what the kernel holds is what the daemon left
    links = nl.read_links(ns)
    assert {n: nl.sizes_of(links[n]) for n in DEVS} == AS_CONFIGURED
    assert 'is over (stop)' in d.log() and 'not answered after' not in d.log()
    assert not (d.runtime_dir / 'try.json').exists()


def test_sigkill_during_a_try_comes_back_on_the_configured_policy(configured, ns, daemon):
    d = configured
    ctl('try', d.tried, sock=d.sock, check_rc=0)
    nl.wait_links(ns, at(AS_TRIED), T(10), 'the tried policy')
    record = json.loads((d.runtime_dir / 'try.json').read_text())
    assert record['file'] == str(d.tried) and record['policy'] == TRIED
    d.kill()
    assert nl.sizes_of(nl.read_links(ns)['v0']) == sizes4(185000)   # nobody reverted it yet

    d2 = daemon(ns, d.cfg, runtime_dir=d.runtime_dir)
    # READY=1 follows the first full reconcile: the kernel holds the configured sizes, and the
    # devices only the tried policy matched have their originals back
    nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'the configured policy after the restart')
    assert 'restarted during the try' in d2.log()
    assert not (d2.runtime_dir / 'try.json').exists()
    assert status(d2)['try'] is None
    assert d.cfg.read_text() == CONFIGURED


def test_confirmed_try_is_installed_and_in_force_after_a_restart(configured, ns, daemon):
    d = configured
    os.chmod(d.cfg, 0o640)
    with Monitor(d) as mon:
        ctl('try', d.tried, '--timeout', '4s', sock=d.sock, check_rc=0)
        mon.wait_for(is_try('started'), 5, 'try started')
        nl.wait_links(ns, at(AS_TRIED), T(10), 'the tried policy')
        confirmed_at = int(time.time() * 1e6)
        r = ctl('confirm', sock=d.sock, check_rc=0)
        assert r.stdout == f'Confirmed: the tried policy is installed as {d.cfg}.\n', r.stdout
        mon.wait_for(is_try('confirmed'), 5, 'try confirmed')
        # installed whole, keeping the file's mode, no temporary file left beside it
        assert d.cfg.read_text() == TRIED
        assert stat.S_IMODE(d.cfg.stat().st_mode) == 0o640
        assert sorted(p.name for p in d.cfg.parent.iterdir()) == ['bigtcpd.yaml']
        # the deadline passes: nothing reverts a confirmed try
        assert mon.no_event(lambda e: e.get('event') == 'try', 5) is None
    st = status(d)
    assert st['try'] is None and not (d.runtime_dir / 'try.json').exists()
    # the last reload is the confirm's: the installed policy's digest, not the one before the try
    assert st['last_reload']['ok'] and st['last_reload']['digest'] == st['policy']['digest'], st['last_reload']
    assert st['last_reload']['time_usec'] >= confirmed_at, (st['last_reload'], confirmed_at)
    assert nl.sizes_of(nl.read_links(ns)['k0']) == sizes4(100000)
    one_line_error(ctl('revert', sock=d.sock), 1, r'^bigtcpctl: no try runs$')

    d.stop()
    d2 = daemon(ns, d.cfg, runtime_dir=d.runtime_dir)
    nl.wait_links(ns, at(AS_TRIED), T(10), 'the confirmed policy after the restart')
    assert 'during the try' not in d2.log()


def test_try_to_a_dropin_is_installed_there(ns, daemon, tmp_path):
    """--to names a drop-in: the tried policy is the main file plus that drop-in; confirmed, the
    drop-in directory is made and the file installed there."""
    root = tmp_path / 'root'
    (root / 'etc/bigtcpd').mkdir(parents=True)
    (root / 'etc/bigtcpd/bigtcpd.yaml').write_text(CONFIGURED)
    veth(ns, 'v0', 'v1')
    veth(ns, 'k0', 'k1')
    d = daemon(ns, None, env={'BIGTCPD_ROOT': str(root)})
    sock = d.runtime_dir / IFACE
    nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'the configured policy')
    dropin = root / 'etc/bigtcpd/bigtcpd.d/50-k.yaml'
    tried = tmp_path / 'k.yaml'
    tried.write_text(TRIED_K)

    one_line_error(ctl('try', tried, '--to', root / 'etc/bigtcpd/other.yaml', sock=sock), 2,
                   'bigtcpd reads no policy there')
    ctl('try', tried, '--to', dropin, sock=sock, check_rc=0)
    # the main file's policy still runs beside the tried drop-in
    want = {'v0': sizes4(150000), 'k0': sizes4(100000)}
    nl.wait_links(ns, at(want), T(10), 'main file and tried drop-in')
    r = ctl('confirm', sock=sock, check_rc=0)
    assert r.stdout == f'Confirmed: the tried policy is installed as {dropin}.\n'
    assert dropin.read_text() == tried.read_text()
    d.stop()
    daemon(ns, None, env={'BIGTCPD_ROOT': str(root)}, runtime_dir=d.runtime_dir)
    nl.wait_links(ns, at(want), T(10), 'the drop-in in force after a restart')


def test_confirm_into_a_configmap_mount_is_refused(ns, daemon, tmp_path):
    """The configured file is a symlink, as in a Kubernetes ConfigMap mount (bigtcpd.yaml ->
    ..data/bigtcpd.yaml -> ..<timestamp>/bigtcpd.yaml): confirm neither replaces the link by a file
    (the ConfigMap's next update would never be seen) nor writes through it (the kubelet puts its
    own back); it says so, and the try goes on until reverted. Once, the link became a file."""
    cm = tmp_path / 'cm'
    ts = cm / '..2024_01_01_00_00_00.1'
    ts.mkdir(parents=True)
    (ts / 'bigtcpd.yaml').write_text(CONFIGURED)
    os.symlink(ts.name, cm / '..data')
    os.symlink('..data/bigtcpd.yaml', cm / 'bigtcpd.yaml')
    veth(ns, 'v0', 'v1')
    veth(ns, 'k0', 'k1')
    d = daemon(ns, cm / 'bigtcpd.yaml')
    sock = d.runtime_dir / IFACE
    nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'the configured policy')
    tried = tmp_path / 'tried.yaml'
    tried.write_text(TRIED)
    ctl('try', tried, '--timeout', '60s', sock=sock, check_rc=0)
    nl.wait_links(ns, at(AS_TRIED), T(10), 'the tried policy')
    one_line_error(ctl('confirm', sock=sock), 1, r'symlink, which bigtcpd neither replaces nor writes through.*'
                                                 r'ConfigMap')
    assert (cm / 'bigtcpd.yaml').is_symlink() and os.readlink(cm / 'bigtcpd.yaml') == '..data/bigtcpd.yaml'
    assert (ts / 'bigtcpd.yaml').read_text() == CONFIGURED
    assert sorted(p.name for p in cm.iterdir()) == ['..2024_01_01_00_00_00.1', '..data', 'bigtcpd.yaml']
    assert sorted(p.name for p in ts.iterdir()) == ['bigtcpd.yaml']
    assert status(d)['try'] is not None, 'the try goes on'
    ctl('revert', sock=sock, check_rc=0)
    nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'reverted')


@pytest.mark.parametrize('mode', [0o777, 0o1777, 0o775])
def test_confirm_into_a_directory_others_may_write_is_refused(ns, daemon, tmp_path, mode):
    """A drop-in directory that another user may write: they could put a file of theirs where the
    policy goes (once, the temporary file's name was .#NAME.<daemon pid>, opened without O_EXCL:
    theirs, if they made it first, became the installed policy, owned by them). Refused, nothing
    left behind."""
    root = tmp_path / 'root'
    (root / 'etc/bigtcpd/bigtcpd.d').mkdir(parents=True)
    (root / 'etc/bigtcpd/bigtcpd.yaml').write_text(CONFIGURED)
    dropins = root / 'etc/bigtcpd/bigtcpd.d'
    os.chmod(dropins, mode)
    veth(ns, 'k0', 'k1')
    d = daemon(ns, None, env={'BIGTCPD_ROOT': str(root)})
    sock = d.runtime_dir / IFACE
    tried = tmp_path / 'k.yaml'
    tried.write_text(TRIED_K)
    ctl('try', tried, '--to', dropins / '50-k.yaml', sock=sock, check_rc=0)
    nl.wait_links(ns, at({'k0': sizes4(100000)}), T(10), 'the tried drop-in')
    one_line_error(ctl('confirm', sock=sock), 1, r'directory may be written by others than root')
    assert list(dropins.iterdir()) == []
    ctl('revert', sock=sock, check_rc=0)


def test_confirm_installs_through_an_unguessable_temporary_file(configured):
    """What another process plants at any name beside the target is never written to nor
    installed: the temporary file is made anew (O_EXCL) under a name of 64 random bits."""
    d = configured
    planted = [d.cfg.parent / f'.#bigtcpd.yaml.{d.pid}', d.cfg.parent / '.#bigtcpd.yaml.tmp']
    for p in planted:
        p.write_text('planted\n')
    ctl('try', d.tried, '--timeout', '60s', sock=d.sock, check_rc=0)
    ctl('confirm', sock=d.sock, check_rc=0)
    assert d.cfg.read_text() == TRIED
    assert d.cfg.stat().st_uid == 0
    for p in planted:
        assert p.read_text() == 'planted\n'
    assert sorted(p.name for p in d.cfg.parent.iterdir()) == sorted(['bigtcpd.yaml', *(p.name for p in planted)])


def test_try_confirm_revert_need_root(configured):
    d = configured
    os.chmod(d.runtime_dir.parent, 0o755)   # the harness makes it 0700
    tried = d.runtime_dir.parent / 'tried.yaml'   # where nobody may read it
    tried.write_text(TRIED)
    tried.chmod(0o644)
    for cmd in (['try', tried], ['confirm'], ['revert']):
        one_line_error(ctl(*cmd, sock=d.sock, nobody=True), 4, f'permission denied: {cmd[0]} needs root')
    assert status(d)['try'] is None


def guarded(glob, sizes):
    return standard_policy('guarded', f'name: ["{glob}"]', sizes, rollback=('window: 30s', 'interval: 200ms', *HDR_GUARD))


def trip_inhdrerrors(ns):
    before = inject.snmp_counter(ns, 'Ip.InHdrErrors')
    bad = inject.ipv4_frame(inject.mac_of(ns, 'x1'), inject.mac_of(ns, 'x0'), '10.9.0.1', '10.9.0.2',
                            bad_header=True)
    inject.send_frames(ns, 'x0', [bad] * 50)
    assert inject.snmp_counter(ns, 'Ip.InHdrErrors') - before >= 40, 'the error source did not work'


def test_retry_all_releases_every_rolled_back_device(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(guarded('x*", "y*', 185000))
    veth(ns, 'x0', 'x1')
    veth(ns, 'y0', 'y1')
    for dev in ('x0', 'x1'):
        ip(ns, 'link', 'set', dev, 'up')
    d = daemon(ns, cfg)
    sock = d.runtime_dir / IFACE
    devs = ('x0', 'x1', 'y0', 'y1')
    with Monitor(d) as mon:
        for dev in devs:
            mon.wait_state(dev, 'probation', 10)
        trip_inhdrerrors(ns)   # namespace-wide: every device in probation goes back
        for dev in devs:
            mon.wait_state(dev, 'rolled-back', 10)
    nl.wait_links(ns, at({dev: sizes4(65536) for dev in devs}), T(10), 'all rolled back')

    r = ctl('retry', '--all', sock=sock, check_rc=0)
    up = ', '.join(f'{k} 65536 → 185000' for k in nl.SIZES)
    assert sorted(r.stdout.splitlines()) == sorted([f'{dev} is released: bigtcpd applies its policy again.'
                                                    for dev in devs] + [f'{dev}: {up}' for dev in devs]), r.stdout
    nl.wait_links(ns, at({dev: sizes4(185000) for dev in devs}), T(10), 'all released')
    one_line_error(ctl('retry', '--all', sock=sock), 1, 'nothing to retry: no device is rolled back or failed')


@pytest.mark.parametrize('configured_passed', [False, True], ids=['configured-in-probation', 'configured-passed'])
def test_guards_work_during_a_try_and_revert_goes_back(ns, daemon, confdir, tmp_path, configured_passed):
    """A guard of the tried policy trips during the try and rolls its devices back to their last
    good sizes; the revert then takes them to the configured policy, device by device, as a
    reload would. The last good sizes are the configured policy's once its window passed, the
    originals while it had not."""
    cfg = confdir / 'bigtcpd.yaml'
    configured = CONFIGURED.replace('"v*"', '"x*"')
    if configured_passed:
        configured += ('    rollback: {window: 1s, interval: 200ms,\n'
                       '               guards: [{counter: Ip.InHdrErrors, max-increase: 1000000}]}\n')
    cfg.write_text(configured)
    veth(ns, 'x0', 'x1')
    for dev in ('x0', 'x1'):
        ip(ns, 'link', 'set', dev, 'up')
    d = daemon(ns, cfg)
    sock = d.runtime_dir / IFACE
    nl.wait_links(ns, at({'x0': sizes4(150000)}), T(10), 'the configured policy')
    tried = tmp_path / 'guarded.yaml'
    tried.write_text(guarded('x*', 185000))
    last_good = sizes4(150000) if configured_passed else sizes4(65536)
    with Monitor(d) as mon:
        if configured_passed:
            for dev in ('x0', 'x1'):
                mon.wait_state(dev, 'applied', 10)
        ctl('try', tried, sock=sock, check_rc=0)
        for dev in ('x0', 'x1'):
            mon.wait_state(dev, 'probation', 10)
        mark = mon.mark()
        trip_inhdrerrors(ns)
        for dev in ('x0', 'x1'):
            mon.wait_state(dev, 'rolled-back', 10)
        # back to their last good sizes, in one step, and held
        nl.wait_links(ns, at({'x0': last_good, 'x1': last_good}), T(10), 'rolled back in the try')
        for dev in ('x0', 'x1'):
            rb = mon.device_events(dev, 'rollback', since=mark)
            assert len(rb) == 1 and nl.sizes_of(rb[0]['to']) == last_good, rb
        assert status(d)['try']['file'] == str(tried)
        ctl('revert', sock=sock, check_rc=0)
        mon.wait_for(is_try('reverted', 'revert'), 5, 'reverted')
    nl.wait_links(ns, at({'x0': sizes4(150000), 'x1': sizes4(150000)}), T(10), 'the configured policy')


def windowed(sizes):
    """v* at `sizes`, with a window short enough to pass within the test."""
    return standard_policy('windowed', 'name: ["v*"]', sizes, rollback=(
        'window: 2s', 'interval: 200ms', 'guards: [{counter: Ip.InHdrErrors, max-increase: 1000000}]'))


def test_rollback_after_a_timed_out_try_and_a_confirmed_one_goes_to_the_last_good(ns, daemon, confdir, tmp_path):
    """185000 passed its window; a try of 100000 passes its own and times out (back to 185000,
    whose new window is cut short by the next try); the same try again, confirmed, passes; after a
    restart, `rollback --all` takes v0 back to 185000, which passed its window before: the revert
    and the second try must not leave the rollback pointing at the sizes it is at (it said "no
    size changes" and held v0 at 100000)."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(windowed(185000))
    tried = tmp_path / 'p2.yaml'
    tried.write_text(windowed(100000))
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg)
    sock = d.runtime_dir / IFACE
    both = ('v0', 'v1')

    def passed(since):
        for dev in both:
            mon.wait_for(lambda e: e.get('event') == 'state' and e.get('ifname') == dev and e.get('state') == 'applied',
                         10, f'{dev} passed its window', since=since)

    with Monitor(d) as mon:
        passed(0)
        ctl('try', tried, '--timeout', '3s', sock=sock, check_rc=0)
        nl.wait_links(ns, at({dev: sizes4(100000) for dev in both}), T(10), 'the first try')
        passed(mon.mark())
        mon.wait_for(is_try('reverted', 'timeout'), 10, 'the first try timed out')
        nl.wait_links(ns, at({dev: sizes4(185000) for dev in both}), T(10), 'reverted')
        mark = mon.mark()
        ctl('try', tried, '--timeout', '5s', sock=sock, check_rc=0)
        ctl('confirm', sock=sock, check_rc=0)
        mon.wait_for(is_try('confirmed'), 5, 'the second try confirmed', since=mark)
        nl.wait_links(ns, at({dev: sizes4(100000) for dev in both}), T(10), 'the second try')
        passed(mon.mark())
    d.stop()

    d2 = daemon(ns, cfg, runtime_dir=d.runtime_dir)
    sock = d2.runtime_dir / IFACE
    with Monitor(d2) as mon:
        for dev in both:
            mon.wait_state(dev, 'applied', 10)  # its records taken over
        r = ctl('rollback', '--all', sock=sock, check_rc=0)
        assert sorted(r.stdout.splitlines()[:2]) == [
            f'{dev} goes back: ' + ', '.join(f'{s} 100000 → 185000' for s in ALL_SIZES) for dev in both], r.stdout
        for dev in both:
            mon.wait_state(dev, 'rolled-back', 10)
    nl.wait_links(ns, at({dev: sizes4(185000) for dev in both}), T(10), 'back at its last good sizes')


class Terminal:
    """bigtcpctl with a pseudo-terminal for stdin and stdout, as an operator runs it."""

    def __init__(self, *args):
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen([str(CTL), *map(str, args)], stdin=slave, stdout=slave, stderr=slave,
                                     env={k: v for k, v in os.environ.items() if k != 'NO_COLOR'})
        os.close(slave)
        self.out = b''

    def expect(self, text, timeout):
        deadline = time.monotonic() + T(timeout)
        while text.encode() not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f'no {text!r} from bigtcpctl within {T(timeout)}s: {self.out!r}'
            r, _, _ = select.select([self.master], [], [], left)
            if r:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:   # EIO: the other end closed
                    chunk = b''
                assert chunk, f'bigtcpctl closed the terminal before {text!r}: {self.out!r}'
                self.out += chunk

    def finish(self, timeout=10):
        """Its exit code; it is killed (by pid) when it does not exit in time. Once only: the
        second call (a cleanup) returns the same."""
        if self.master is None:
            return self.proc.returncode
        try:
            return self.proc.wait(T(timeout) if timeout else 0.001)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            os.close(self.master)
            self.master = None


def test_terminal_countdown_enter_confirms_ctrl_c_reverts_or_it_times_out(configured, ns):
    d = configured
    with Monitor(d) as mon:
        # Ctrl-C reverts
        t = Terminal('--socket', d.sock, 'try', d.tried)
        try:
            t.expect('Press ENTER before the timeout to accept the new configuration', 10)
            t.expect('Changes will revert in 120 seconds', 10)
            nl.wait_links(ns, at(AS_TRIED), T(10), 'the tried policy')
            t.proc.send_signal(signal.SIGINT)
            t.expect('Reverted: the policy that ran before is back.', 10)
            assert t.finish() == 1, 'try exits 0 only when the tried policy is kept'
        finally:
            t.finish(0)
        mon.wait_for(is_try('reverted', 'revert'), 5, 'reverted by Ctrl-C')
        nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'back on the configured policy')

        # the deadline passes on screen
        t = Terminal('--socket', d.sock, 'try', d.tried, '--timeout', '2s')
        try:
            t.expect('Changes will revert in', 10)
            t.expect('The try ended: reverted timeout.', 15)
            assert t.finish() == 1
        finally:
            t.finish(0)
        nl.wait_links(ns, at(AS_CONFIGURED), T(10), 'back on the configured policy')

        # Enter confirms
        t = Terminal('--socket', d.sock, 'try', d.tried)
        try:
            t.expect('Changes will revert in', 10)
            os.write(t.master, b'\n')
            t.expect(f'Confirmed: the tried policy is installed as {d.cfg}.', 10)
            assert t.finish() == 0
        finally:
            t.finish(0)
        mon.wait_for(is_try('confirmed'), 5, 'confirmed by Enter')
    assert d.cfg.read_text() == TRIED
    nl.wait_links(ns, at(AS_TRIED), T(10), 'the confirmed policy')


def test_try_parameters_are_checked(configured, ns):
    """What a caller sends is checked before anything changes; the replies have the declared shape."""
    import varlink_client
    import varlink_idl
    from test_varlink import SHIPPED
    d = configured
    iface = varlink_idl.parse(SHIPPED.read_text())

    def error_of(params):
        with pytest.raises(varlink_client.VarlinkError) as e:
            varlink_client.call(d.sock, f'{IFACE}.Try', params, timeout=T(10))
        if e.value.error.startswith(IFACE + '.'):
            varlink_idl.check_error(iface, e.value.error, e.value.parameters)
        return e.value.error, e.value.parameters

    inval = 'org.varlink.service.InvalidParameter'
    assert error_of({'policy': TRIED, 'timeout_usec': 999_999}) == (inval, {'parameter': 'timeout_usec'})
    assert error_of({'policy': TRIED, 'timeout_usec': 24 * 3600 * 10**6 + 1}) == (inval, {'parameter': 'timeout_usec'})
    assert error_of({'policy': TRIED, 'timeout_usec': 'soon'}) == (inval, {'parameter': 'timeout_usec'})
    assert error_of({'policy': 'version: 1\u0000'}) == (inval, {'parameter': 'policy'})
    assert error_of({'policy': TRIED, 'target': 'relative.yaml'}) == (inval, {'parameter': 'target'})
    assert error_of({'policy': TRIED, 'target': '/etc/passwd'}) == (f'{IFACE}.TargetNotRead', {'target': '/etc/passwd'})
    assert error_of({'policy': TRIED, 'file': 'x' * 5000}) == (inval, {'parameter': 'file'})
    name, p = error_of({'policy': BROKEN})
    assert name == f'{IFACE}.PolicyInvalid' and p['errors'][0]['file'] == '<policy>', p
    assert status(d)['try'] is None
    assert nl.sizes_of(nl.read_links(ns)['v0']) == sizes4(150000)

    reply = varlink_client.call(d.sock, f'{IFACE}.Try', {'policy': TRIED, 'timeout_usec': 60 * 10**6}, timeout=T(10))
    varlink_idl.check_reply(iface, 'Try', reply)
    assert reply['target'] == str(d.cfg) and reply['digest'] == status(d)['policy']['digest']
    varlink_idl.check_reply(iface, 'GetStatus', status(d))
    name, p = error_of({'policy': TRIED})
    assert name == f'{IFACE}.TryRunning' and p == {'file': '<policy>', 'deadline_usec': reply['deadline_usec']}
    varlink_idl.check_reply(iface, 'Revert', varlink_client.call(d.sock, f'{IFACE}.Revert', timeout=T(10)))
    with pytest.raises(varlink_client.VarlinkError) as e:
        varlink_client.call(d.sock, f'{IFACE}.Confirm', timeout=T(10))
    assert e.value.error == f'{IFACE}.NoTry'


def test_try_running_reply_owns_the_file_name_the_try_ends_meanwhile(configured):
    """A Reload refused with TryRunning names the running try's file; a Revert read in the same
    wakeup ends that try (and frees its name) before the refusal is answered. The reply says the
    name it saw, whole (it read freed memory: ASan aborted the daemon, a release build sent
    bytes that were not UTF-8)."""
    import varlink_client
    d = configured
    name = 'a-tried-file-whose-name-is-long-enough-to-be-its-own-allocation.yaml'
    for round_ in range(5):
        varlink_client.call(d.sock, f'{IFACE}.Try', {'policy': TRIED, 'file': name}, timeout=T(10))
        with varlink_client.Client(d.sock, timeout=T(10)) as reload, \
                varlink_client.Client(d.sock, timeout=T(10)) as revert:
            # Both accepted and read once before the daemon stops; Reload's last, so that it is
            # ahead in epoll's ready list whether or not the daemon was back in epoll_wait() when
            # it stopped (a level-triggered descriptor just handled stays listed until then).
            for c in (revert, reload):
                c.call(f'{IFACE}.GetStatus')
            d.signal(signal.SIGSTOP)
            try:
                os.waitid(os.P_PID, d.pid, os.WSTOPPED | os.WNOWAIT)   # stopped: both sends wait
                reload.send(f'{IFACE}.Reload')
                revert.send(f'{IFACE}.Revert')
            finally:
                d.signal(signal.SIGCONT)
            got = reload.recv()
            assert 'parameters' in revert.recv()
        assert got.get('error') == f'{IFACE}.TryRunning', (round_, got)
        assert got['parameters']['file'] == name, (round_, got)
        assert d.running(), d.log_tail()
        assert status(d)['try'] is None
