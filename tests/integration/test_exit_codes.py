"""bigtcpctl's one exit-code table (bigtcpctl(8) EXIT STATUS), each code seen: 0 success; 1
failure (an unknown device, a try that was not kept); 2 a usage error, found before anything is
printed (watch's limit, try --to a file bigtcpd does not read); 3 not running (nothing listens,
or nobody answers: test_broken_start.py); 4 permission denied."""

import re

import pytest

from test_bigtcpctl import POLICY, ctl, running  # noqa: F401 (the fixture)


def check(r, rc, stderr_pattern=None):
    assert r.returncode == rc, (r.args, r.returncode, r.stdout, r.stderr)
    if rc != 0:
        assert r.stdout == '', f'{r.args}: exit {rc} after printing {r.stdout!r}'
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith('bigtcpctl: '), r.stderr
        if stderr_pattern:
            assert re.search(stderr_pattern, lines[0]), lines[0]


def test_exit_codes(running, tmp_path):
    d = running
    tried = tmp_path / 'tried.yaml'
    tried.write_text(POLICY)

    check(ctl('status', sock=d.sock), 0)
    # 1: it failed
    check(ctl('show', 'nosuch0', sock=d.sock), 1, 'no device "nosuch0"')
    check(ctl('watch', 'nosuch0', sock=d.sock), 1, 'no device "nosuch0"')
    check(ctl('retry', 'v0', sock=d.sock), 1, 'nothing to do')
    # 2: usage, before anything is printed or sent
    check(ctl('nosuchverb', sock=d.sock), 2)
    check(ctl('watch', 'v0', '--for', '2h', sock=d.sock), 2, r'--for 2h: at most 1h')
    check(ctl('watch', 'v0', '--for', 'soon', sock=d.sock), 2, r'--for wants a duration')
    check(ctl('try', tried, '--timeout', '0.5s', sock=d.sock), 2, r'--timeout')
    check(ctl('try', tried, '--to', tmp_path / 'elsewhere.yaml', sock=d.sock), 2, 'bigtcpd reads no policy there')
    check(ctl('monitor', 'extra', sock=d.sock), 2)
    check(ctl('metrics', '--json', sock=d.sock), 2, 'Prometheus text format only')
    # 3: not running
    check(ctl('status', sock=tmp_path / 'nobody.sock'), 3, 'bigtcpd is not running')
    # 4: not allowed
    check(ctl('reload', sock=d.sock, nobody=True), 4, 'permission denied')


@pytest.mark.slow
def test_networkctl_habits(running):
    """No command lists (as networkctl does); `help` is --help, which points at the man page;
    -q drops the messages of a success; -l/--full never cuts a cell; --json=off is text."""
    d = running
    assert ctl(sock=d.sock, check_rc=0).stdout == ctl('list', sock=d.sock, check_rc=0).stdout
    h = ctl('help', check_rc=0).stdout
    assert h == ctl('--help', check_rc=0).stdout
    assert h.splitlines()[-1] == 'See the bigtcpctl(8) man page for details.', h
    r = ctl('-q', 'reload', sock=d.sock, check_rc=0)
    assert r.stdout == '' and r.stderr == ''
    r = ctl('--quiet', 'rollback', 'v0', sock=d.sock, check_rc=0)
    assert r.stdout == ''
    ctl('-q', 'retry', 'v0', sock=d.sock, check_rc=0)
    check(ctl('-q', 'show', 'nosuch0', sock=d.sock), 1, 'no device "nosuch0"')  # errors stay
    narrow = ctl('-l', 'list', sock=d.sock, env={'COLUMNS': '20'}, check_rc=0).stdout
    assert '…' not in narrow and narrow == ctl('list', sock=d.sock, env={'COLUMNS': '1000'}, check_rc=0).stdout
    assert ctl('--full', 'list', sock=d.sock, env={'COLUMNS': '20'}, check_rc=0).stdout == narrow
    r = ctl('--json=off', 'status', sock=d.sock, check_rc=0)
    assert r.stdout.lstrip().startswith('State: '), r.stdout
    assert ctl('--json', '--json=off', 'list', sock=d.sock, check_rc=0).stdout == narrow
