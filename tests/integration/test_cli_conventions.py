"""bigtcpctl's manners, as systemd's tools have them (issue 12): --json=pretty|short, ASCII outside
a UTF-8 locale, NO_COLOR only when set and not empty, a pager on a terminal only ($SYSTEMD_PAGER,
$PAGER, --no-pager), tables that fit the terminal ($COLUMNS into a pipe). The terminal is a pty
the test makes; the pager a shell command that copies what it is given into a file."""

import fcntl
import json
import os
import select
import struct
import subprocess
import termios
import time

import pytest

from helpers import T, veth
from policies import standard_policy
from test_bigtcpctl import CTL, ctl, one_line_error

POLICY = standard_policy('a-policy-with-a-rather-long-name-for-a-narrow-terminal', 'name: ["v*"]', ipv4=False, flow=False)


@pytest.fixture
def running(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(POLICY)
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg)
    d.sock = d.runtime_dir / 'io.bigtcpd.Manager'
    return d


def on_pty(args, env, cols=200):
    """bigtcpctl with stdout on a new pty of `cols` columns: (exit code, what the terminal got)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack('HHHH', 24, cols, 0, 0))
    full = {k: v for k, v in os.environ.items() if k not in ('NO_COLOR', 'PAGER', 'SYSTEMD_PAGER', 'COLUMNS')}
    full.update(env)
    p = subprocess.Popen([str(CTL), *map(str, args)], stdin=subprocess.DEVNULL, stdout=slave,
                         stderr=subprocess.PIPE, env=full)
    os.close(slave)
    out, deadline = b'', time.monotonic() + T(20)
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:   # EIO: every writer closed the pty
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        rc = p.wait(timeout=T(10))
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()
        os.close(master)
    assert rc == 0 or err, f'exit {rc} without a word'
    return rc, out.decode()


def test_json_modes(running):
    sock = running.sock
    short = ctl('--json=short', 'status', sock=sock, check_rc=0).stdout
    assert short.count('\n') == 1 and json.loads(short)['ready'] is True
    pretty = ctl('--json=pretty', 'status', sock=sock, check_rc=0).stdout
    assert pretty.count('\n') > 10 and set(json.loads(pretty)) == set(json.loads(short))
    assert ctl('--json', 'status', sock=sock, check_rc=0).stdout.count('\n') == 1   # plain --json into a pipe
    assert json.loads(ctl('--json=pretty', 'list', sock=sock, check_rc=0).stdout)['devices']
    one_line_error(ctl('--json=long', 'status', sock=sock), 2, r'--json takes pretty or short, not "long"')


@pytest.mark.slow
def test_ascii_outside_utf8(running, tmp_path):
    sock = running.sock
    other = tmp_path / 'other.yaml'
    other.write_text(POLICY.replace('185000', '100000'))
    for args in (['status'], ['list'], ['show', 'v0'], ['plan', other]):
        out = ctl(*args, sock=sock, env={'LC_ALL': 'C'}, check_rc=0).stdout
        assert out.isascii(), (args, out)
    assert ctl('show', 'v0', sock=sock, env={'LC_ALL': 'C'}).stdout.startswith('* ')
    assert '185000->100000' in ctl('plan', other, sock=sock, env={'LC_ALL': 'C'}).stdout
    utf8 = {'LC_ALL': 'C.UTF-8'}
    assert ctl('show', 'v0', sock=sock, env=utf8).stdout.startswith('● ')
    assert '185000→100000' in ctl('plan', other, sock=sock, env=utf8).stdout


def test_color_only_without_a_nonempty_no_color(running):
    base = {'SYSTEMD_PAGER': 'cat', 'TERM': 'xterm', 'LC_ALL': 'C.UTF-8'}
    rc, out = on_pty(['--socket', running.sock, 'list'], base)
    assert rc == 0 and '\x1b[' in out, out
    rc, out = on_pty(['--socket', running.sock, 'list'], base | {'NO_COLOR': ''})
    assert rc == 0 and '\x1b[' in out, 'NO_COLOR set but empty: colour stays (no-color.org)'
    rc, out = on_pty(['--socket', running.sock, 'list'], base | {'NO_COLOR': '1'})
    assert rc == 0 and '\x1b[' not in out and 'v0' in out, out


def test_pager_on_a_terminal_only(running, tmp_path):
    sock = running.sock
    got = tmp_path / 'paged'
    pager = f'cat > {got}'
    rc, out = on_pty(['--socket', sock, 'status'], {'PAGER': pager, 'NO_COLOR': '1'})
    assert rc == 0 and 'State:' not in out, out
    assert 'State:' in got.read_text() and 'Devices:' in got.read_text()

    got.unlink()
    rc, out = on_pty(['--socket', sock, '--no-pager', 'status'], {'PAGER': pager, 'NO_COLOR': '1'})
    assert rc == 0 and 'State:' in out and not got.exists(), out
    rc, out = on_pty(['--socket', sock, 'status'], {'PAGER': pager, 'SYSTEMD_PAGER': '', 'NO_COLOR': '1'})
    assert rc == 0 and 'State:' in out and not got.exists(), '$SYSTEMD_PAGER="" turns the pager off'
    rc, out = on_pty(['--socket', sock, 'status'], {'PAGER': 'cat', 'NO_COLOR': '1'})
    assert rc == 0 and 'State:' in out and not got.exists(), out
    rc, out = on_pty(['--socket', sock, 'status'], {'PAGER': pager, 'TERM': 'dumb'})
    assert rc == 0 and 'State:' in out and not got.exists(), 'no pager on a dumb terminal'
    other = tmp_path / 'other'
    rc, out = on_pty(['--socket', sock, 'list'], {'PAGER': pager, 'SYSTEMD_PAGER': f'cat > {other}', 'NO_COLOR': '1'})
    assert rc == 0 and 'v0' in other.read_text() and not got.exists(), '$SYSTEMD_PAGER wins over $PAGER'
    # Short verbs and a pipe: never.
    rc, out = on_pty(['--socket', sock, 'rollback', 'v0'], {'PAGER': pager})
    assert rc == 0 and 'goes back' in out and not got.exists(), out
    r = ctl('status', sock=sock, env={'PAGER': pager}, check_rc=0)
    assert 'State:' in r.stdout and not got.exists()


def test_tables_fit_the_terminal(running):
    sock = running.sock
    wide = ctl('list', sock=sock, env={'COLUMNS': '300'}, check_rc=0).stdout
    assert 'a-policy-with-a-rather-long-name-for-a-narrow-terminal' in wide
    # 69 columns at the least: NETNS, IDX, LINK, KIND at their widths, STATE and the numbers whole
    for env, cols, via in (({'COLUMNS': '72', 'LC_ALL': 'C.UTF-8'}, 72, 'pipe'), ({}, 70, 'pty')):
        if via == 'pipe':
            out = ctl('list', sock=sock, env=env, check_rc=0).stdout
        else:
            rc, out = on_pty(['--socket', sock, 'list'], {'NO_COLOR': '1', 'SYSTEMD_PAGER': 'cat',
                                                         'LC_ALL': 'C.UTF-8'}, cols=cols)
            out = out.replace('\r\n', '\n')
            assert rc == 0
        table = out.split('\n\n')[0].splitlines()
        assert all(len(l) <= cols for l in table), (cols, out)
        row = next(l for l in table if ' v0 ' in l)
        assert 'a-policy-with-a-rather' not in row or '…' in row, row
        assert row.split()[-5:] == ['185000', '185000', '65536', '65536', '524280'], row   # numbers never cut
        assert row.split()[4] in ('probation', 'applied'), row   # nor the state
        assert '…' in row.split()[5], row   # the widest text column is the one cut
    # narrower than the least: the lines overflow rather than cut STATE (it was "appli…")
    out = ctl('list', sock=sock, env={'COLUMNS': '60', 'LC_ALL': 'C.UTF-8'}, check_rc=0).stdout
    row = next(l for l in out.splitlines() if ' v0 ' in l)
    assert row.split()[4] in ('probation', 'applied') and row.split()[-5:] == [
        '185000', '185000', '65536', '65536', '524280'], row
