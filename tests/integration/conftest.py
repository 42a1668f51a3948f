"""conftest.py — fixtures of the integration suite: throwaway network namespaces and the daemon
running inside them. Everything a test creates is removed at teardown, also when it fails."""

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import helpers  # noqa: E402
from helpers import Attacker, Daemon, ip, run  # noqa: E402
from pause import Pause  # noqa: E402


def pytest_configure(config):
    if os.geteuid() != 0:
        raise pytest.UsageError('the integration tests need root (network namespaces)')


# The xdist_groups that take longest, in this order before every other test: with pytest-xdist
# (scripts/test.sh) a process takes them first, and the others share the rest, instead of one
# process starting them when the rest is almost done.
LONGEST_FIRST = ('nspawn', 'netns', 'install-tree')


def pytest_collection_modifyitems(config, items):
    def rank(item):
        m = item.get_closest_marker('xdist_group')
        group = m.args[0] if m and m.args else None
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=rank)


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
