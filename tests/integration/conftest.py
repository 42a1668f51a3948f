"""conftest.py — fixtures of the integration suite: throwaway network namespaces and the daemon
running inside them. Everything a test creates is removed at teardown, also when it fails."""

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import helpers  # noqa: E402
from helpers import Attacker, Daemon, ip, run  # noqa: E402
from pause import Pause  # noqa: E402


def pytest_configure(config):
    if os.geteuid() != 0:
        raise pytest.UsageError('the integration tests need root (network namespaces)')
    # The ASan build's UBSan traps (scripts/build.sh): AddressSanitizer prints the trap's stack,
    # file and line, only when told to; every process the tests start inherits it.
    asan = os.environ.get('ASAN_OPTIONS', '')
    if 'handle_sigill=' not in asan:
        os.environ['ASAN_OPTIONS'] = ':'.join(filter(None, [asan, 'handle_sigill=1']))


# The order of the tests, longest first: with pytest-xdist (scripts/test.sh) each process takes
# the next test (or xdist_group) when it is almost done, so a long one collected last keeps one
# process busy while the others are idle. First the xdist_groups that take longest, in this
# order, then the tests marked slow, then the rest, each in file order. The two containers'
# groups wait for the Debian package (scripts/test.sh builds it beside them): one starts at once,
# the other once a process is free, when the package is nearer.
LONGEST_FIRST = ('nspawn-boot', 'netns', 'install-tree', 'nspawn-fleet')


def pytest_collection_modifyitems(config, items):
    def rank(item):
        m = item.get_closest_marker('xdist_group')
        group = m.args[0] if m and m.args else None
        if group in LONGEST_FIRST:
            return LONGEST_FIRST.index(group)
        return len(LONGEST_FIRST) + (0 if item.get_closest_marker('slow') else 1)
    items.sort(key=rank)


# BT_TEST_TIMELINE=FILE: each test's phases (setup, call, teardown) appended to FILE as one line
# "WORKER START END PHASE NODEID" (seconds since the epoch), from every xdist process: where the
# suite's wall time goes, per process (timeline.py adds it up).
_TIMELINE = os.environ.get('BT_TEST_TIMELINE')


def pytest_runtest_logreport(report):
    # the process that ran the test writes it (an xdist controller only relays the report)
    if _TIMELINE and report.when in ('setup', 'call', 'teardown') \
            and not hasattr(report, 'node'):
        worker = os.environ.get('PYTEST_XDIST_WORKER', 'main')
        stop = time.time()
        line = f'{worker} {stop - report.duration:.3f} {stop:.3f} {report.when} {report.nodeid}\n'
        with open(_TIMELINE, 'a') as f:
            f.write(line)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, 'rep_' + rep.when, rep)


def _failed(request):
    rep = getattr(request.node, 'rep_call', None)
    setup = getattr(request.node, 'rep_setup', None)
    return (rep is not None and rep.failed) or (setup is not None and setup.failed)


@pytest.fixture
def netns():
    """Factory: netns() -> name of a new namespace 'bt-<random>' (helpers.NETNS_PREFIX) with lo
    up."""
    created = []

    def make():
        name = helpers.NETNS_PREFIX + secrets.token_hex(4)
        run('ip', 'netns', 'add', name)
        created.append(name)
        ip(name, 'link', 'set', 'lo', 'up')
        return name

    yield make
    errors = []
    for name in reversed(created):
        # Processes the tests started there are stopped by their own fixtures (by pid) first.
        r = subprocess.run(['ip', 'netns', 'del', name], capture_output=True, text=True)
        if r.returncode != 0:
            errors.append(f'ip netns del {name}: {r.stderr.strip()}')
    assert not errors, errors


@pytest.fixture
def ns(netns):
    """One namespace for the common case."""
    return netns()


@pytest.fixture
def confdir(tmp_path):
    """A directory for policy files (kept by pytest after the run for inspection)."""
    d = tmp_path / 'etc'
    d.mkdir()
    return d


@pytest.fixture
def daemon(netns, tmp_path, request):
    """Factory: daemon(ns, config, env=None, hostname=None, machine_id=None, runtime_dir=None,
    ready=True, strace=False) starts
    bigtcpd in `ns` and, unless ready=False, waits for READY=1. Teardown stops every daemon it
    started by pid, then checks exit codes and sanitizer output if the test itself passed."""
    # Unix socket paths are limited to 108 bytes: keep sockets (notify, the daemon's varlink
    # socket in its runtime dir) under a short directory.
    sockdir = tempfile.mkdtemp(prefix='bt-', dir='/tmp')
    started = []

    def start(ns, config, *, env=None, hostname=None, machine_id=None, runtime_dir=None, ready=True,
              ready_timeout=20, log_level='debug', extra_args=(), strace=False, wrapper=()):
        if runtime_dir is None:
            runtime_dir = Path(sockdir) / f'run{len(started)}'
            runtime_dir.mkdir()
        d = Daemon(ns, config, tmp_path, sockdir, runtime_dir, env=env, hostname=hostname,
                   machine_id=machine_id, log_level=log_level, extra_args=extra_args, strace=strace,
                   wrapper=wrapper)
        started.append(d)
        if ready:
            d.wait_notify('READY=1', ready_timeout)
        return d

    start.sockdir = Path(sockdir)
    try:
        yield start
    finally:
        problems = []
        for d in started:
            if d.returncode is None:
                clean = d._terminate(10)
                d._recv_notes()
                d.close()
                if not clean:
                    problems.append(f'{d.log_path}: did not exit on SIGTERM, killed')
                elif not _failed(request):
                    try:
                        d.check_exit()
                    except AssertionError as e:
                        problems.append(str(e))
            if _failed(request):
                print(f'\n===== bigtcpd log {d.log_path} (exit {d.returncode}) =====')
                print(d.log_tail(120))
                print(f'notify: {d.notes}')
        shutil.rmtree(sockdir, ignore_errors=True)
        assert not problems, '\n'.join(problems)


@pytest.fixture
def pause(tmp_path):
    """Factory: pause(ifindex, on) -> a Pause (pause.py) for one daemon, its `env` to pass to
    daemon(). Requested after `daemon`, it is torn down first: a daemon still held is released
    before it is stopped."""
    made = []

    def make(ifindex, on):
        p = Pause(tmp_path, ifindex, on)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def attackers():
    """Factory: attackers(script, target, uid, *args) -> a helpers.Attacker, running `script`
    under `uid` against the socket `target`; each is stopped (by pid) at teardown. Modules
    narrow it to their own script and target (test_untrusted.py, test_dbus_untrusted.py)."""
    started = []

    def start(script, target, uid, *args):
        a = Attacker(script, target, uid, *args)
        started.append(a)
        return a
    yield start
    for a in started:
        a.stop()


@pytest.fixture(scope='session')
def tree(tmp_path_factory):
    """bigtcpd configured, built and installed with prefix /usr under a directory of the session's
    (test_install.install_tree): once for test_install.py and test_systemd.py, which are one
    xdist_group for it."""
    from test_install import install_tree
    return install_tree(tmp_path_factory.mktemp('install'))


@pytest.fixture(scope='session')
def bigtcpd_bin():
    if not helpers.BIN.exists():
        pytest.fail(f'daemon binary {helpers.BIN} does not exist: build it or set BIGTCPD_BIN')
    return helpers.BIN
