"""bigtcpctl's one exit-code table (bigtcpctl(8) EXIT STATUS), each code seen: 0 success; 1
failure (an unknown device, a try that was not kept); 2 a usage error, found before anything is
printed (watch's limit, try --to a file bigtcpd does not read); 3 not running (nothing listens,
or nobody answers: test_broken_start.py); 4 permission denied."""

import pytest

from test_bigtcpctl import POLICY, ctl, running  # noqa: F401 (the fixture)


def check(r, rc, stderr_pattern=None):
    import re
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
