"""Under a real systemd as PID 1, with a real system bus: the Debian package installed with apt in
a booted container (nspawn.py), then used as an operator would. The tests run in file order on
one container, each on what the ones before left:

  install       apt install ./bigtcpd_*.deb: both units enabled and running, the shipped policy
                created (no conffile) and applied, the package's version in bigtcpctl --version,
                STATUS= in `systemctl status`
  orders        `systemctl enable --now` of the service and the socket in every order, 10 times
                each: both come up every time, and systemd never refuses the socket
  masked socket the service alone; unmasked, `systemctl restart bigtcpd.socket` brings both up
  transports    status and list over varlink and over D-Bus on the real bus, busctl introspect
  journal       the decisions in `journalctl -u bigtcpd`; found by INTERFACE= and MESSAGE_ID=,
                explained by the package's catalog (journalctl -x), one line per rollback
  reload        `systemctl reload`: RELOADING=1, then READY=1, as systemd saw them
  watchdog      a SIGSTOPped daemon is killed by the watchdog and restarted, originals kept
  restart       `systemctl restart` writes nothing when the devices are converged
  activation    after `systemctl stop bigtcpd` the socket starts it again on a connection
  non-root      refused the root methods on both transports, allowed the rest
  security      `systemd-analyze security`: exposure at most 2.0
  not running   `bigtcpctl --dbus` exits 3 with the daemon disabled (systemd's NoSuchUnit), and
                D-Bus activation starts it once the service is enabled; exit 3 too when it is
                enabled but exits at once (the call times out with nobody on the bus)
  reboot        both units up after a reboot of the container
  varlink not running  `bigtcpctl status` exits 3 within seconds while the daemon does not come up
                (bigtcpd.socket accepts, nobody answers), pointing at the journal
  broken policy a typo and a restart: running, degraded, no crash loop; after a reboot with it, no
                policy and nothing written; the fixed file taken at once
  upgrade       to a rebuilt package: the state file and the operator's edited policy kept, the
                restarted daemon writes nothing
  purge         apt purge stops it, gives every device its original sizes back, leaves nothing
  policy-rc.d   with stops forbidden (images built with Docker): remove says bigtcpd runs on and
                keeps the devices, purge waits for it to give them back and says so

The package comes from BIGTCPD_DEB_DIR (scripts/test.sh builds it with scripts/package.sh), or
is built here. Needs systemd-container, dpkg-dev, debhelper, lintian (scripts/setup.sh)."""

import contextlib
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import nl
from helpers import REPO, T, sizes4
from nspawn import booted, journal_on_failure, package_deb

# a booted container each: one at a time, in one process
pytestmark = [pytest.mark.xdist_group('nspawn-boot'), pytest.mark.slow]

EXPOSURE_MAX = 2.0
BIG = sizes4(185000)       # the shipped policy (conf/bigtcpd.yaml): every veth at 185000
EDITED = sizes4(150000)    # the operator's edit
ORIG = sizes4(65536)
UNITS = ('bigtcpd.service', 'bigtcpd.socket')


@pytest.fixture(scope='module')
def deb(tmp_path_factory):
    return package_deb(tmp_path_factory)


@pytest.fixture(scope='module')
def box(deb, tmp_path_factory):
    """The container, booted, with two veth pairs and the package installed."""
    for tool in ('systemd-nspawn', 'dpkg-deb'):
        if not shutil.which(tool):
            pytest.fail(f'{tool} is missing: bash scripts/setup.sh installs it')
    with booted(tmp_path_factory.mktemp('nspawn'), 'real-systemd tests') as c:
        for a, b in (('va', 'vb'), ('wa', 'wb')):
            subprocess.run(['ip', '-n', c.name, 'link', 'add', a, 'type', 'veth', 'peer', 'name', b], check=True)
        shutil.copy(deb, c.path('/var/tmp') / deb.name)
        c.deb = deb
        c.install = c.run('apt-get', 'install', '-y', f'/var/tmp/{deb.name}', timeout=300)
        yield c


@pytest.fixture(autouse=True)
def journal_after_failure(request, box):
    yield
    journal_on_failure(request, box)


# --- helpers ------------------------------------------------------------------------------------

def unit_states(c, verb):
    """`systemctl VERB` of each of UNITS, in one call (a line each); one call a unit where the
    answer is not a line each (is-enabled of a unit that is not there says so on stderr alone)."""
    lines = c.run('systemctl', verb, *UNITS, check=False).stdout.splitlines()
    if len(lines) == len(UNITS):
        return tuple(line.strip() for line in lines)
    return tuple(c.run('systemctl', verb, u, check=False).stdout.strip() for u in UNITS)


def active(c):
    return unit_states(c, 'is-active')


def enabled(c):
    return unit_states(c, 'is-enabled')


def ctl(c, *args, user=None):
    return c.run('bigtcpctl', *args, user=user, check=False)


def status_json(c):
    r = ctl(c, 'status', '--json')
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def devices(c):
    r = ctl(c, 'list', '--json')
    assert r.returncode == 0, r.stderr
    return {d['ifname']: d for d in json.loads(r.stdout)['devices']}


def main_pid(c):
    return int(c.run('systemctl', 'show', '-P', 'MainPID', 'bigtcpd.service').stdout.strip())


def state_originals(c, into):
    """The original sizes in the container's state file (snapshot and journal), by device."""
    return {d['ifname']: d['original'] for d in c.state_devices(into)}


def wait_sizes(c, expected, what, timeout=20):
    nl.wait_links(c.name, lambda links: all(n in links and nl.sizes_of(links[n]) == s for n, s in expected.items()),
                  T(timeout), what)


def sizes_now(c, names):
    links = nl.read_links(c.name)
    return {n: nl.sizes_of(links[n]) for n in names}


def disable_both(c):
    c.run('systemctl', 'disable', '--now', '-q', *UNITS)
    assert active(c) == ('inactive', 'inactive'), active(c)


# --- the tests, in order ------------------------------------------------------------------------

def test_install(box):
    c = box
    version = c.run('systemctl', '--version').stdout.splitlines()[0]
    print(f'PID 1 of {c.name}: {version}')
    assert 'Setting up bigtcpd' in c.install.stdout, c.install.stdout
    assert active(c) == ('active', 'active'), f'{active(c)}\n{c.install.stdout}'
    assert enabled(c) == ('enabled', 'enabled')
    wait_sizes(c, {n: BIG for n in ('va', 'vb', 'wa', 'wb')}, 'the shipped policy applied')
    # The policy is the operator's, not a conffile (no prompt at an upgrade): created from the
    # shipped default on the first installation.
    conffiles = c.run('dpkg-query', '-W', '-f=${Conffiles}', 'bigtcpd').stdout
    assert not conffiles.strip(), conffiles
    assert c.path('/etc/bigtcpd/bigtcpd.yaml').read_bytes() == (REPO / 'conf/bigtcpd.yaml').read_bytes()
    assert c.run('cat', '/usr/share/bigtcpd/bigtcpd.yaml').stdout == (REPO / 'conf/bigtcpd.yaml').read_text()
    assert c.run('bigtcpctl', '--version').stdout.strip() == f'bigtcpctl {deb_version(c.deb).rsplit("-", 1)[0]}'
    for f in ('/usr/sbin/bigtcpd', '/usr/bin/bigtcpctl', '/lib/systemd/system/bigtcpd.service',
              '/lib/systemd/system/bigtcpd.socket', '/usr/share/dbus-1/system.d/io.bigtcpd1.conf',
              '/usr/share/dbus-1/system-services/io.bigtcpd1.service', '/usr/share/varlink/io.bigtcpd.Manager.varlink',
              '/usr/share/man/man8/bigtcpd.8.gz', '/usr/share/man/man8/bigtcpctl.8.gz',
              '/usr/share/man/man5/bigtcpd.yaml.5.gz', '/usr/share/bash-completion/completions/bigtcpctl'):
        c.run('test', '-f', f)
    out = c.run('systemctl', 'status', '--no-pager', 'bigtcpd.service').stdout
    assert re.search(r'^ +Status: "managing 4 of 5 devices(, \d+ in probation)?"$', out, re.M), out
    assert 'TriggeredBy: ● bigtcpd.socket' in out, out
    # The unit's sandbox lets the daemon run its observer's loader, a program of its own that the
    # package installs: the observer counts, or the kernel refused the load (a container's
    # capabilities), never a loader that could not run or answered nothing.
    c.run('test', '-x', '/usr/libexec/bigtcpd/bigtcpd-observer-loader')
    st = c.run('bigtcpctl', 'status').stdout
    m = re.search(r'^ *Observer: (\S+)(?: \(not ebpf: (.*)\))?$', st, re.M)
    assert m and (m.group(1) == 'ebpf' or m.group(2).startswith(('loading the eBPF object', 'attaching to'))), st
    print(f'{c.name}: {m.group(0).strip()}')


# The orders and how many rounds of each: one command at a time is one outcome every time (the
# order README once gave failed every time), a few rounds show it; both units in one command
# was a race, which takes more to show it is gone.
ORDERS = {
    'service, then socket': ([['bigtcpd'], ['bigtcpd.socket']], 3),
    'socket, then service': ([['bigtcpd.socket'], ['bigtcpd']], 3),
    'both, service first': ([['bigtcpd', 'bigtcpd.socket']], 10),
    'both, socket first': ([['bigtcpd.socket', 'bigtcpd']], 10),
}


def test_enable_now_in_every_order(box):
    """The order README once gave (service, then socket) failed every time, and both units in
    one command was a race: systemd refuses to start a socket whose service runs already."""
    c = box
    cursor = c.journal_cursor()
    up = {}
    for name, (commands, rounds) in ORDERS.items():
        up[name] = 0
        for _ in range(rounds):
            disable_both(c)
            results = [c.run('systemctl', 'enable', '--now', '-q', *units, check=False) for units in commands]
            if all(r.returncode == 0 for r in results) and active(c) == ('active', 'active') \
                    and enabled(c) == ('enabled', 'enabled'):
                up[name] += 1
            else:
                print(f'{name}: {active(c)} {enabled(c)} ' + ' '.join(r.stderr.strip() for r in results))
    print('socket and service up: ' + ', '.join(f'{k}: {v} of {ORDERS[k][1]}' for k, v in up.items()))
    refused = c.run('journalctl', f'--after-cursor={cursor}', '-q', '--no-pager', '-g', 'already active, refusing',
                    check=False).stdout
    assert not refused.strip(), refused
    assert up == {k: rounds for k, (_, rounds) in ORDERS.items()}, up
    wait_sizes(c, {n: BIG for n in ('va', 'vb', 'wa', 'wb')}, 'after the last round')


def test_masked_socket(box):
    """With the socket masked the service binds it itself; unmasked while the daemon runs, the
    socket comes up with `systemctl restart bigtcpd.socket` (PartOf= restarts the daemon too),
    as README says."""
    c = box
    disable_both(c)
    c.run('systemctl', 'mask', '-q', 'bigtcpd.socket')
    try:
        c.run('systemctl', 'start', 'bigtcpd')
        assert active(c) == ('active', 'inactive')
        assert ctl(c, 'status').returncode == 0
    finally:
        c.run('systemctl', 'unmask', '-q', 'bigtcpd.socket')
    cursor = c.journal_cursor()
    c.run('systemctl', 'restart', 'bigtcpd.socket')
    # the daemon's restart is a job of its own: enable --now waits for it
    c.run('systemctl', 'enable', '--now', '-q', *UNITS)
    assert active(c) == ('active', 'active')
    log = c.run('journalctl', f'--after-cursor={cursor}', '-u', 'bigtcpd', '-o', 'cat', '--no-pager').stdout
    assert 'varlink: listening on the socket passed by systemd' in log, log


def test_transports(box):
    c = box
    for dbus in ([], ['--dbus']):
        r = ctl(c, *dbus, 'status')
        assert r.returncode == 0, r.stderr
        assert re.search(r'^ +State: ready$', r.stdout, re.M) and 'Devices: 5 total' in r.stdout, r.stdout
        assert re.search(r'^ +Hostname: ' + c.name + '$', r.stdout, re.M), r.stdout
        r = ctl(c, *dbus, 'list')
        assert r.returncode == 0, r.stderr
        for dev in ('va', 'vb', 'wa', 'wb'):
            assert re.search(rf'^host +\d+ {dev} +veth +(probation|applied) +veth +185000 +185000 +185000 +185000 ', r.stdout,
                             re.M), r.stdout
    a = json.loads(ctl(c, 'status', '--json').stdout)
    b = json.loads(ctl(c, '--dbus', 'status', '--json').stdout)
    assert a['policy'] == b['policy'] and a['version'] == b['version'], (a, b)
    intro = c.run('busctl', 'introspect', '--no-pager', 'io.bigtcpd1', '/io/bigtcpd1').stdout
    assert re.search(r'^io\.bigtcpd1\.Manager +interface', intro, re.M), intro
    for member in ('.GetStatusJSON', '.ListDevicesJSON', '.Reload', '.Rollback', '.Retry', '.RolledBack'):
        assert re.search(rf'^{re.escape(member)} +(method|signal)', intro, re.M), f'{member} missing:\n{intro}'


def test_journal_has_the_decisions(box):
    log = box.run('journalctl', '-u', 'bigtcpd', '-o', 'cat', '--no-pager').stdout
    for line in ('va: matched policy "veth"', 'lo: matches no policy',
                 'va: writing gso_max_size 65536→185000 gro_max_size 65536→185000 gso_ipv4_max_size 65536→185000 '
                 'gro_ipv4_max_size 65536→185000 (policy)',
                 'initial reconcile done: 5 devices', 'D-Bus: serving io.bigtcpd1 on the system bus',
                 'varlink: listening on the socket passed by systemd'):
        assert line in log, f'{line!r} not in journalctl -u bigtcpd:\n{log[-3000:]}'


LOG_ID_WRITE = '2a9fb0c4cdfd484aafda54bda68aa087'     # lib/log.h
LOG_ID_ROLLBACK = 'dead71caba744ee4a84e55d96f6e3464'


def test_journal_can_be_queried(box):
    """Each decision is a journal entry with fields: found by `journalctl INTERFACE=va` and by its
    MESSAGE_ID, with the policy and the sizes; `journalctl -x` explains it from the catalog the
    package installed; a rollback is one line, with its counter."""
    c = box

    def entries(*match):
        out = c.run('journalctl', '-b', '-o', 'json', '--no-pager', *match).stdout
        return [json.loads(l) for l in out.splitlines() if l.strip()]

    writes = entries('INTERFACE=va', f'MESSAGE_ID={LOG_ID_WRITE}')
    assert writes, entries('INTERFACE=va')
    w = writes[0]
    assert (w['_SYSTEMD_UNIT'], w['PRIORITY'], w['BIGTCPD_POLICY'], w['BIGTCPD_TO_GSO_MAX_SIZE'],
            w['BIGTCPD_FROM_GSO_MAX_SIZE'], w['BIGTCPD_TO_GRO_IPV4_MAX_SIZE']) == (
        'bigtcpd.service', '6', 'veth', '185000', '65536', '185000'), w
    assert w['MESSAGE'].startswith('va: writing gso_max_size 65536→185000'), w
    assert {e.get('INTERFACE') for e in entries(f'MESSAGE_ID={LOG_ID_WRITE}')} >= {'va', 'vb', 'wa', 'wb'}
    # by call site: `journalctl CODE_FUNC=log_write` finds the writes (log_write() in
    # daemon/device-lifecycle.c logs them), and no entry names the logger itself
    by_site = entries('CODE_FUNC=log_write')
    assert {e['MESSAGE'] for e in by_site} >= {e['MESSAGE'] for e in entries(f'MESSAGE_ID={LOG_ID_WRITE}')}, by_site
    assert {e['CODE_FILE'] for e in by_site} == {'daemon/device-lifecycle.c'}, by_site
    assert entries('_SYSTEMD_UNIT=bigtcpd.service', 'CODE_FUNC=send_journal') == []
    assert c.run('journalctl', '--list-catalog', LOG_ID_WRITE).stdout == (
        f'{LOG_ID_WRITE} bigtcpd: bigtcpd changed the BIG TCP sizes of @INTERFACE@\n')

    cursor = c.journal_cursor()
    r = ctl(c, 'rollback', 'va')
    assert r.returncode == 0, r.stderr
    wait_sizes(c, {'va': ORIG}, 'va rolled back')
    c.journal_wait(cursor, [r'va: rolling back on request'])
    after = [json.loads(l) for l in c.run('journalctl', f'--after-cursor={cursor}', '-o', 'json',
                                          '--no-pager').stdout.splitlines() if l.strip()]
    rolls = [e for e in after if e.get('MESSAGE_ID') == LOG_ID_ROLLBACK]
    assert len(rolls) == 1 and rolls[0]['BIGTCPD_COUNTER'] == 'operator', [
        {k: v for k, v in e.items() if not k.startswith('_')} for e in after if 'bigtcpd' in str(e.get('_COMM'))]
    assert [e['MESSAGE'] for e in entries('INTERFACE=va', f'MESSAGE_ID={LOG_ID_ROLLBACK}')] == [rolls[0]['MESSAGE']]
    assert rolls[0]['BIGTCPD_TO_GSO_MAX_SIZE'] == '65536' and rolls[0]['BIGTCPD_FROM_GSO_MAX_SIZE'] == '185000'
    # one line per rollback at the default level
    lines = [e['MESSAGE'] for e in after if e.get('INTERFACE') == 'va']
    assert [l for l in lines if 'roll' in l] == [l for l in lines if 'rolling back on request' in l], lines
    explained = c.run('journalctl', '-x', '--no-pager', '-n', '1', f'MESSAGE_ID={LOG_ID_ROLLBACK}').stdout
    assert 'Subject: bigtcpd rolled va back (operator)' in explained, explained
    assert ctl(c, 'retry', 'va').returncode == 0
    wait_sizes(c, {'va': BIG}, 'va retried')


def test_dbus_plan_try_monitor(box):
    """bigtcpctl --dbus plan, try and monitor on the system bus of a real systemd, with the
    shipped bus policy: the same plan as varlink's, a try that says what it moved, and the
    monitor's Event signals of it, as varlink's monitor prints them."""
    c = box
    a, b = ctl(c, 'plan'), ctl(c, '--dbus', 'plan')
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout, (a, b)
    tried = c.path('/var/tmp') / 'tried.yaml'
    tried.write_text((REPO / 'conf/bigtcpd.yaml').read_text().replace('185000', '150000'))
    r = ctl(c, '--dbus', 'plan', '--json', '/var/tmp/tried.yaml')
    assert r.returncode == 0, r.stderr
    plan = {d['ifname']: d for d in json.loads(r.stdout)['devices']}
    assert plan['va']['desired']['gso_max_size'] == 150000, plan['va']
    argv = ['nsenter', '-t', str(c.leader), '-a', '--root', '--wd', '--', 'bigtcpctl', '--dbus', 'monitor', '--json']
    mon = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    buf = b''

    def event(pred, what):
        nonlocal buf
        deadline = time.monotonic() + T(20)
        while True:
            while b'\n' in buf:
                line, _, buf = buf.partition(b'\n')
                e = json.loads(line)
                if pred(e):
                    return e
            left = deadline - time.monotonic()
            assert left > 0 and select.select([mon.stdout], [], [], left)[0], f'monitor --dbus: no {what}'
            chunk = os.read(mon.stdout.fileno(), 65536)
            assert chunk, f'monitor --dbus ended: {mon.stderr.read()!r}'
            buf += chunk

    try:
        event(lambda e: e['event'] == 'subscribed', 'subscribed line')
        r = ctl(c, '--dbus', 'try', '/var/tmp/tried.yaml', '--timeout', '60s')
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith('Trying /var/tmp/tried.yaml (digest '), r.stdout
        moved = sorted(l.split(':')[0] for l in r.stdout.splitlines() if re.match(r'^[vw][ab]: gso_max_size', l))
        assert moved == ['va', 'vb', 'wa', 'wb'], r.stdout
        assert sizes_now(c, ['va', 'wb']) == {'va': sizes4(150000), 'wb': sizes4(150000)}
        e = event(lambda e: e['event'] == 'try', 'try event')
        assert e['action'] == 'started' and e['file'] == '/var/tmp/tried.yaml', e
        e = event(lambda e: e['event'] == 'write' and e['ifname'] == 'va', 'write of va')
        assert e['to']['gso_max_size'] == 150000 and e['cause'] == 'policy', e
        r = ctl(c, '--dbus', '--json', 'revert')
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert sorted(m['ifname'] for m in j['moved']) == ['va', 'vb', 'wa', 'wb'], j
        assert all(m['to']['gso_max_size'] == 185000 for m in j['moved']), j
        e = event(lambda e: e['event'] == 'try', 'revert event')
        assert e['action'] == 'reverted' and e['reason'] == 'revert', e
        # Subscribe is for everyone, as Monitor is on varlink; the privileged verbs are not
        r = ctl(c, '--dbus', 'try', '/var/tmp/tried.yaml', user='nobody')
        assert r.returncode == 4 and 'permission denied' in r.stderr, (r.returncode, r.stderr)
    finally:
        mon.terminate()
        mon.wait(10)
        mon.stdout.close()
        mon.stderr.close()
    # a user other than root may monitor too (it runs until stopped: 3 s here)
    sub = c.sh('timeout 3 bigtcpctl --dbus monitor --json; test $? = 124', user='nobody', check=False)
    assert sub.returncode == 0 and json.loads(sub.stdout.splitlines()[0]) == {'event': 'subscribed'}, sub
    wait_sizes(c, {n: BIG for n in ('va', 'vb', 'wa', 'wb')}, 'the policy before the try')


def test_reload(box):
    """systemctl reload (ExecReload: SIGHUP): the daemon announces RELOADING=1 and ends it with
    READY=1, as systemd (at debug level) logs them."""
    c = box
    pid = main_pid(c)
    c.run('systemd-analyze', 'log-level', 'debug')
    try:
        cursor = c.journal_cursor()
        c.run('systemctl', 'reload', 'bigtcpd')
        # ExecReload (kill -HUP) puts the unit in "reload"; the daemon's RELOADING=1 and READY=1
        # frame its reload; the unit is "running" again once READY=1 came and kill exited.
        lines = c.journal_wait(cursor, [r'bigtcpd\.service: Changed running -> reload',
                                        rf'Got notification message from PID {pid} \(RELOADING=1',
                                        rf'Got notification message from PID {pid} \(READY=1',
                                        r'bigtcpd\.service: Changed reload -> running'])
    finally:
        c.run('systemd-analyze', 'log-level', 'info')
    assert main_pid(c) == pid
    assert active(c) == ('active', 'active')
    print('\n'.join(l for l in lines if re.search(r'bigtcpd\.service: (Changed|Got notification)', l)))


def test_watchdog_restarts_a_stopped_daemon(box):
    """A SIGSTOPped daemon stops feeding the watchdog: systemd kills it and Restart=on-failure
    brings it back, with the original sizes still known and nothing written again. WatchdogSec
    is 2 s here (a runtime drop-in) instead of the shipped 30 s, to keep the test short.

    TimeoutAbortSec is 5 s too: systemd in this container cannot use the unit's cgroup ("Failed to
    kill control group … Input/output error"), and once in a CI run here it stopped at "Main process
    exited, code=killed, status=6/ABRT" with nothing of the unit left, waiting, it seems, for an
    empty-cgroup event that never came (the daemon's helpers die with it, SIGABRT and their
    parent-death signal, a moment after it): the abort's timeout (90 s by default) ends that wait."""
    c = box
    dropin = Path('/run/systemd/system/bigtcpd.service.d')
    c.run('mkdir', '-p', dropin)
    c.run('sh', '-c', f'printf "[Service]\\nWatchdogSec=2s\\nTimeoutAbortSec=5s\\n" >{dropin}/watchdog.conf')
    try:
        c.run('systemctl', 'daemon-reload')
        c.run('systemctl', 'restart', 'bigtcpd')
        assert c.run('systemctl', 'show', '-P', 'WatchdogUSec', 'bigtcpd').stdout.strip() == '2s'
        before = devices(c)
        assert before['va']['original']['gso_max_size'] == 65536, before['va']
        pid = main_pid(c)
        cursor = c.journal_cursor()
        c.run('kill', '-STOP', pid)
        lines = c.journal_wait(cursor, [r'bigtcpd\.service: Watchdog timeout',
                                        r'bigtcpd\.service: Scheduled restart job', r'Started bigtcpd\.service'],
                               timeout=30)
        print('\n'.join(l for l in lines if 'timed out' in l or 'Killing' in l or 'Failed with' in l))
        assert main_pid(c) not in (0, pid)
        after = devices(c)
        for dev in ('va', 'vb', 'wa', 'wb'):
            assert after[dev]['original'] == before[dev]['original'], (dev, before[dev], after[dev])
            assert tuple(after[dev]['current'][k] for k in nl.SIZES) == BIG, after[dev]
        assert status_json(c)['writes'] == 0, 'the restarted daemon wrote'
    finally:
        c.run('rm', '-rf', dropin)
        c.run('systemctl', 'daemon-reload')


def test_restart_writes_nothing_when_converged(box):
    c = box
    pid = main_pid(c)
    cursor = c.journal_cursor()
    c.run('systemctl', 'restart', 'bigtcpd')
    assert main_pid(c) != pid
    assert c.run('systemctl', 'show', '-P', 'WatchdogUSec', 'bigtcpd').stdout.strip() == '30s'
    st = status_json(c)
    assert st['writes'] == 0, st
    log = c.run('journalctl', f'--after-cursor={cursor}', '-u', 'bigtcpd', '-o', 'cat', '--no-pager').stdout
    assert 'initial reconcile done: 5 devices' in log, log
    assert not re.search(r': writing ', log), log
    assert sizes_now(c, ('va', 'wb')) == {'va': BIG, 'wb': BIG}


def test_socket_activation_after_stop(box):
    c = box
    c.run('systemctl', 'stop', 'bigtcpd')
    assert active(c) == ('inactive', 'active')
    r = ctl(c, 'status')
    assert r.returncode == 0, r.stderr
    assert active(c) == ('active', 'active')
    log = c.run('journalctl', '-u', 'bigtcpd', '-o', 'cat', '--no-pager', '-n', '30').stdout
    assert 'varlink: listening on the socket passed by systemd' in log


def test_non_root_refused_on_both_transports(box):
    c = box
    for dbus in ([], ['--dbus']):
        for cmd in (['reload'], ['rollback', 'va'], ['retry', '--all']):
            r = ctl(c, *dbus, *cmd, user='nobody')
            assert r.returncode == 4 and 'permission denied' in r.stderr, (dbus, cmd, r.returncode, r.stderr)
        for cmd in (['status'], ['list'], ['show', 'va']):
            r = ctl(c, *dbus, *cmd, user='nobody')
            assert r.returncode == 0, (dbus, cmd, r.stderr)
    assert sizes_now(c, ('va',)) == {'va': BIG}, 'a refused rollback changed something'


def test_security_exposure(box):
    r = box.run('systemd-analyze', 'security', '--no-pager', 'bigtcpd.service')
    m = re.search(r'Overall exposure level for bigtcpd\.service: (\d+\.\d+)', r.stdout)
    assert m, r.stdout
    level = float(m.group(1))
    print(f'systemd-analyze security (systemd 252, PID 1): exposure {level}')
    assert level <= EXPOSURE_MAX, r.stdout


def test_dbus_not_running_exits_3(box):
    c = box
    disable_both(c)
    r = ctl(c, '--dbus', 'status')
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert r.stderr.strip() == ('bigtcpctl: bigtcpd is not running (io.bigtcpd1 is not on the system bus, and the '
                                'bus starts it only while bigtcpd.service is enabled)'), r.stderr
    r = ctl(c, 'status')
    assert r.returncode == 3 and 'not running' in r.stderr, r.stderr
    assert active(c) == ('inactive', 'inactive'), 'a call started a disabled bigtcpd'
    # Enabled but not started: a bus call starts it (dbus-io.bigtcpd1.service), socket and all.
    c.run('systemctl', 'enable', '-q', 'bigtcpd')
    assert active(c) == ('inactive', 'inactive')
    r = ctl(c, '--dbus', 'status')
    assert r.returncode == 0, r.stderr
    assert active(c) == ('active', 'active')


@contextlib.contextmanager
def exiting_at_once(c):
    """For the block, bigtcpd.service runs /bin/false (a drop-in in /run); then the drop-in goes,
    the units are stopped and reset, and bigtcpd starts again."""
    dropin = Path('/run/systemd/system/bigtcpd.service.d')
    c.run('mkdir', '-p', dropin)
    c.run('sh', '-c', f'printf "[Service]\\nExecStart=\\nExecStart=/bin/false\\n" >{dropin}/false.conf')
    try:
        c.run('systemctl', 'daemon-reload')
        yield
    finally:
        c.run('rm', '-rf', dropin)
        c.run('systemctl', 'daemon-reload')
        c.run('systemctl', 'stop', *UNITS)
        c.run('systemctl', 'reset-failed', *UNITS, check=False)
    c.run('systemctl', 'start', 'bigtcpd')
    assert active(c) == ('active', 'active')


def test_dbus_daemon_that_does_not_come_up_exits_3(box):
    """Enabled, but the daemon exits at once: systemd sends the bus no answer for a failed start,
    so the call times out (SYSTEMD_BUS_TIMEOUT=3 here instead of sd-bus's 25 s) with nobody on
    io.bigtcpd1, which is "not running" too, not a D-Bus failure."""
    c = box
    with exiting_at_once(c):
        c.run('systemctl', 'stop', *UNITS)
        r = c.run('env', 'SYSTEMD_BUS_TIMEOUT=3', 'bigtcpctl', '--dbus', 'status', check=False)
        assert r.returncode == 3, (r.returncode, r.stderr)
        assert r.stderr.strip() == ('bigtcpctl: bigtcpd is not running (the system bus could not start it: no answer '
                                    'within 3 s (journalctl -u bigtcpd says why))'), r.stderr


def test_reboot(box):
    c = box
    c.reboot()
    assert active(c) == ('active', 'active'), c.run('systemctl', 'status', '--no-pager', *UNITS, check=False).stdout
    # A new boot, a new network namespace: new devices, written by the daemon as they come.
    for a, b in (('va', 'vb'), ('wa', 'wb')):
        subprocess.run(['ip', '-n', c.name, 'link', 'add', a, 'type', 'veth', 'peer', 'name', b], check=True)
    wait_sizes(c, {n: BIG for n in ('va', 'vb', 'wa', 'wb')}, 'new devices after the reboot')


def test_varlink_daemon_that_does_not_come_up_exits_3(box):
    """Enabled, but the daemon exits at once: systemd's bigtcpd.socket accepts bigtcpctl's
    connection and nobody answers. bigtcpctl says bigtcpd is not running (exit 3) within seconds,
    pointing at the journal; it does not wait 60 s."""
    c = box
    with exiting_at_once(c):
        c.run('systemctl', 'restart', 'bigtcpd.socket', check=False)
        start = time.monotonic()
        r = ctl(c, 'status')
        took = time.monotonic() - start
        assert r.returncode == 3, (r.returncode, r.stderr)
        assert took < T(10), took
        assert r.stderr == ('bigtcpctl: bigtcpd does not answer on /run/bigtcpd/io.bigtcpd.Manager within 5 s: it '
                            'is not running, or stuck (see journalctl -u bigtcpd)\n'), r.stderr
        print(f'bigtcpctl status with a daemon that does not come up: {took:.1f} s: {r.stderr.strip()}')


def test_broken_policy_never_takes_it_down(box):
    """A typo in the policy, then `systemctl restart`: the daemon starts (no crash loop) on the
    last policy that ran, degraded with the error's place; after a reboot with the typo (the
    record in /run is gone) it runs with no policy and writes nothing; the fixed file is taken
    when it is written."""
    c = box
    policy = c.path('/etc/bigtcpd/bigtcpd.yaml')
    good = policy.read_text()
    broken = good + 'colour: blue\n'
    line = len(broken.splitlines())
    where = f'/etc/bigtcpd/bigtcpd.yaml:{line}:1'

    def degraded(source):
        start = time.monotonic()
        s = status_json(c)
        took = time.monotonic() - start
        assert took < T(1), f'status took {took:.2f} s'
        assert s['state'] == 'degraded' and s['policy']['source'] == source, s
        errors = [(e['file'], e['line'], e['column']) for e in s['last_reload']['errors']]
        assert errors == [('/etc/bigtcpd/bigtcpd.yaml', line, 1)], s['last_reload']
        assert c.run('systemctl', 'show', '-P', 'NRestarts', 'bigtcpd.service').stdout.strip() == '0'
        assert active(c) == ('active', 'active')

    try:
        policy.write_text(broken)
        c.run('systemctl', 'restart', 'bigtcpd')
        degraded('recorded')
        assert sizes_now(c, ('va', 'vb', 'wa', 'wb')) == {n: BIG for n in ('va', 'vb', 'wa', 'wb')}
        log = c.run('journalctl', '-u', 'bigtcpd', '-b', '-o', 'cat', '--no-pager').stdout
        assert f'{where}: unknown key "colour"' in log, log[-3000:]
        assert 'running the policy that ran last' in log, log[-3000:]

        c.reboot()
        degraded('none')
        for a, b in (('va', 'vb'), ('wa', 'wb')):
            subprocess.run(['ip', '-n', c.name, 'link', 'add', a, 'type', 'veth', 'peer', 'name', b], check=True)
        nl.wait_links(c.name, lambda links: 'wb' in links, T(10), 'the veths')
        deadline = time.monotonic() + T(10)
        while not {'va', 'vb', 'wa', 'wb'} <= set(devices(c)):
            assert time.monotonic() < deadline, devices(c)
        assert sizes_now(c, ('va', 'vb', 'wa', 'wb')) == {n: ORIG for n in ('va', 'vb', 'wa', 'wb')}

        policy.write_text(good)
        wait_sizes(c, {n: BIG for n in ('va', 'vb', 'wa', 'wb')}, 'the fixed policy')
        s = status_json(c)
        assert s['policy']['source'] == 'files' and s['last_reload']['ok'], s
    finally:
        policy.write_text(good)


def rebuilt(deb, version, into):
    """The package rebuilt as another version: the same files, a new version in its control."""
    tree = into / 'tree'
    subprocess.run(['dpkg-deb', '-R', str(deb), str(tree)], check=True)
    control = tree / 'DEBIAN' / 'control'
    control.write_text(re.sub(r'^Version: .*$', f'Version: {version}', control.read_text(), flags=re.M))
    out = into / f'bigtcpd_{version}_amd64.deb'
    subprocess.run(['dpkg-deb', '--root-owner-group', '-Zxz', '-b', str(tree), str(out)], check=True,
                   capture_output=True)
    shutil.rmtree(tree)
    return out


def deb_version(deb):
    return subprocess.run(['dpkg-deb', '-f', str(deb), 'Version'], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_upgrade_keeps_state_and_edited_policy(box, tmp_path):
    c = box
    policy = c.path('/etc/bigtcpd/bigtcpd.yaml')
    mine = policy.read_text().replace('185000', '150000').replace('policies:\n', '# edited by the operator\npolicies:\n')
    policy.write_text(mine)
    c.run('systemctl', 'reload', 'bigtcpd')
    wait_sizes(c, {n: EDITED for n in ('va', 'vb', 'wa', 'wb')}, 'the edited policy')
    state_before = state_originals(c, tmp_path / 'before')
    originals = {d['ifname']: d['original'] for d in devices(c).values() if d.get('original')}
    assert set(originals) == {'va', 'vb', 'wa', 'wb'}, originals
    pid = main_pid(c)
    old = deb_version(c.deb)
    newer = old + '+rebuilt'   # a later Debian revision of the same upstream version
    new = rebuilt(c.deb, newer, tmp_path)
    shutil.copy(new, c.path('/var/tmp') / new.name)
    cursor = c.journal_cursor()
    r = c.run('apt-get', 'install', '-y', f'/var/tmp/{new.name}', timeout=300)
    assert f'Unpacking bigtcpd ({newer}) over ({old})' in r.stdout, r.stdout
    assert c.run('dpkg-query', '-W', '-f=${Version}', 'bigtcpd').stdout == newer
    assert policy.read_text() == mine, 'the upgrade changed the operator\'s policy'
    assert active(c) == ('active', 'active')
    assert main_pid(c) != pid, 'the upgrade did not restart the daemon'
    starts = c.run('journalctl', f'--after-cursor={cursor}', '-u', 'bigtcpd', '-o', 'cat', '--no-pager', '-g',
                   'initial reconcile done', check=False).stdout.strip().splitlines()
    print(f'daemon starts during the upgrade: {len(starts)}')
    log = c.run('journalctl', f'--after-cursor={cursor}', '-u', 'bigtcpd', '-o', 'cat', '--no-pager').stdout
    assert starts and not re.search(r': writing ', log), log
    assert 'state: original sizes of 4 devices recorded by an earlier run' in log, log
    after = {d['ifname']: d['original'] for d in devices(c).values() if d.get('original')}
    assert after == originals
    assert state_originals(c, tmp_path / 'after') == state_before == originals
    assert sizes_now(c, ('va', 'vb', 'wa', 'wb')) == {n: EDITED for n in ('va', 'vb', 'wa', 'wb')}


def test_purge_restores_originals(box):
    c = box
    r = c.run('apt-get', 'purge', '-y', 'bigtcpd', timeout=300)
    assert 'giving the devices it changed their original sizes back' in r.stdout + r.stderr, r.stdout + r.stderr
    assert sizes_now(c, ('va', 'vb', 'wa', 'wb')) == {n: ORIG for n in ('va', 'vb', 'wa', 'wb')}
    for u in UNITS:
        assert c.run('systemctl', 'is-active', u, check=False).stdout.strip() in ('inactive', 'unknown')
    assert c.run('dpkg-query', '-W', '-f=${Status}', 'bigtcpd', check=False).stdout.strip() in ('', 'unknown ok not-installed')
    left = c.run('sh', '-c', 'ls -d /run/bigtcpd /etc/bigtcpd /usr/sbin/bigtcpd /lib/systemd/system/bigtcpd.* '
                             '$(find /etc/systemd/system -name "*bigtcpd*") 2>/dev/null', check=False).stdout
    assert not left.strip(), f'left behind: {left}'
    log = c.run('journalctl', '-u', 'bigtcpd-restore', '-o', 'cat', '--no-pager').stdout
    assert 'va: original sizes restored' in log, log
    # Nobody answers for io.bigtcpd1 any more.
    r = c.run('busctl', 'call', 'io.bigtcpd1', '/io/bigtcpd1', 'io.bigtcpd1.Manager', 'GetStatusJSON', check=False)
    assert r.returncode != 0 and 'was not provided by any .service files' in r.stderr, r.stderr


def test_stops_forbidden_by_policy_rc_d(box):
    """Docker's policy-rc.d (exit 101) left in an image: dh's stop is skipped. The removal says
    that bigtcpd runs on without its package and keeps the devices (it does, served by the unit
    kept in /run: its watchdog pings are still taken), not that it restored them; the purge waits
    for the running bigtcpd to give them back (its policy goes) and says it did, with the pid that
    still runs; the next installation's unit is its own again."""
    c = box
    c.run('apt-get', 'install', '-y', f'/var/tmp/{c.deb.name}', timeout=300)
    wait_sizes(c, {n: BIG for n in ('va', 'vb', 'wa', 'wb')}, 'the shipped policy applied again')
    pid = main_pid(c)
    try:
        c.sh("printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d")
        r = c.run('apt-get', 'remove', '-y', 'bigtcpd', timeout=300)
        out = r.stdout + r.stderr
        assert (f'bigtcpd.service was not stopped (/usr/sbin/policy-rc.d forbids stopping services here): '
                f'bigtcpd (pid {pid}) runs on without its package and keeps the devices') in out, out
        assert 'giving the devices it changed their original sizes back' not in out, out
        assert c.run('systemctl', 'is-active', 'bigtcpd.service', check=False).stdout.strip() == 'active'
        assert sizes_now(c, ('va', 'vb', 'wa', 'wb')) == {n: BIG for n in ('va', 'vb', 'wa', 'wb')}
        # and it is still served: with its unit file gone, systemd refused its notifications but
        # kept its watchdog, and killed it 30 s later (SIGABRT). Its next ping (every 15 s) is
        # taken: the unit kept in /run says NotifyAccess=main.
        def show(prop):
            return c.run('systemctl', 'show', '--value', '-p', prop, 'bigtcpd.service').stdout.strip()
        assert show('NotifyAccess') == 'main', show('FragmentPath')
        pinged = show('WatchdogTimestampMonotonic')
        deadline = time.monotonic() + T(40)
        while show('WatchdogTimestampMonotonic') == pinged:
            assert time.monotonic() < deadline, ('no watchdog ping taken since the removal\n' + c.run(
                'journalctl', '-u', 'bigtcpd.service', '-n', '20', '--no-pager', check=False).stdout)
            time.sleep(1)   # systemd says nothing when it takes a ping: asked again
        assert main_pid(c) == pid

        r = c.run('apt-get', 'purge', '-y', 'bigtcpd', timeout=300)
        out = r.stdout + r.stderr
        assert (f'bigtcpd (pid {pid}) was not stopped and runs on without its package, managing nothing: it gave '
                'every device its original sizes back') in out, out
        assert 'not given back' not in out and 'did not say' not in out, out
        assert sizes_now(c, ('va', 'vb', 'wa', 'wb')) == {n: ORIG for n in ('va', 'vb', 'wa', 'wb')}

        # the next installation's unit is its own: the copy kept for the one that ran on goes
        c.run('rm', '-f', '/usr/sbin/policy-rc.d')
        c.run('apt-get', 'install', '-y', f'/var/tmp/{c.deb.name}', timeout=300)
        assert not show('FragmentPath').startswith('/run/'), show('FragmentPath')
        assert c.run('test', '-e', '/run/systemd/system/bigtcpd.service', check=False).returncode != 0
        c.run('apt-get', 'purge', '-y', 'bigtcpd', timeout=300)
    finally:
        c.run('rm', '-f', '/usr/sbin/policy-rc.d')
        c.run('systemctl', 'stop', 'bigtcpd.service', 'bigtcpd.socket', check=False)
        c.run('rm', '-f', '/run/systemd/system/bigtcpd.service')
        c.run('systemctl', 'daemon-reload', check=False)
        c.run('rm', '-rf', '/run/bigtcpd')
