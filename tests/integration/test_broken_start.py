"""A policy broken while bigtcpd was down never takes it down: the start runs the last policy that
ran (recorded beside the state), or with none writes nothing and keeps what an earlier run
wrote; it says `degraded` with every error at file:line:column in status and the log, and takes
the fixed file when it appears (inotify) or on SIGHUP. --check-config still exits 1."""

import json
import os
import select
import socket
import subprocess
import time
from pathlib import Path

import pytest

import helpers
import nl
from helpers import assert_sizes, at, policy_text, set_and_check, sizes4, T, veth, write_file_atomic

CTL = Path(os.environ.get('BIGTCPCTL_BIN', helpers.BIN.parent.parent / 'cli' / 'bigtcpctl'))
ORIG = sizes4(60000, 60001, 60002, 60003)


def policy(size):
    return policy_text(f'''
        version: 1
        policies:
          - name: big
            match:
              name: ["v*"]
            ipv6: {{gso-max-size: {size}, gro-max-size: {size}}}
            ipv4: {{gso-max-size: {size}, gro-max-size: {size}}}
        ''')


# two errors, at 6:26 and 7:5
BROKEN = policy_text('''
    version: 1
    policies:
      - name: big
        match:
          name: ["v*"]
        ipv6: {gso-max-size: lots, gro-max-size: 185000}
        colour: blue
    ''')
BROKEN_ERRORS = [(6, 26, 'gso-max-size: expected a number of bytes, "max", "legacy" or "auto"'),
                 (7, 5, 'unknown key "colour"')]


def ctl(*args, sock):
    start = time.monotonic()
    r = subprocess.run([str(CTL), '--socket', str(sock), *map(str, args)], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    return r, time.monotonic() - start


def sock_of(d):
    return d.runtime_dir / 'io.bigtcpd.Manager'


def check_degraded(d, cfg, source):
    """status answers at once with `degraded`, the source of the running policy and every
    error at file:line:column, in JSON and in words; the log has every error too."""
    r, took = ctl('status', '--json', sock=sock_of(d))
    assert r.returncode == 0, r.stderr
    assert took < 1.0, f'status took {took:.2f}s'
    s = json.loads(r.stdout)
    assert s['state'] == 'degraded' and s['policy']['source'] == source, s
    last = s['last_reload']
    assert last['ok'] is False and last['errors_total'] == len(BROKEN_ERRORS), last
    got = [(e['line'], e['column'], e['message']) for e in last['errors']]
    assert [(l, c) for l, c, _ in got] == [(l, c) for l, c, _ in BROKEN_ERRORS], got
    assert all(e['file'] == str(cfg) for e in last['errors'])

    r, _ = ctl('status', sock=sock_of(d))
    assert r.returncode == 0, r.stderr
    (state,) = [l for l in r.stdout.splitlines() if l.strip().startswith('State:')]
    assert state.split(': ', 1)[1] == ('degraded (the policy files have errors, ' + (
        'no policy runs: bigtcpd writes no device)' if source == 'none' else 'the last policy that ran runs on)')), \
        r.stdout
    for line, column, _ in BROKEN_ERRORS:
        assert f'{cfg}:{line}:{column}: ' in r.stdout, r.stdout
        assert d.log_lines(rf'{cfg}:{line}:{column}: '), d.log_tail()

    r, _ = ctl('metrics', sock=sock_of(d))
    assert r.returncode == 0, r.stderr
    assert 'bigtcpd_policy_errors 2' in r.stdout.splitlines(), r.stdout
    assert f'bigtcpd_policy_error{{file="{cfg}",line="6",column="26",message="gso-max-size: expected a number ' \
        'of bytes, \\"max\\", \\"legacy\\" or \\"auto\\""} 1' in r.stdout, r.stdout


def ran_once(ns, daemon, confdir):
    """A daemon that put v0 and v1 at 185000 and stopped: its policy file and runtime directory."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(185000))
    veth(ns, 'v0', 'v1')
    set_and_check(ns, 'v0', ORIG)
    d1 = daemon(ns, cfg)
    assert_sizes(ns, {'v0': sizes4(185000), 'v1': sizes4(185000)})
    rundir = d1.runtime_dir
    d1.stop()
    return cfg, rundir


@pytest.mark.serial  # status answers within 1 s
def test_broken_at_start_runs_the_last_policy_that_ran(ns, daemon, confdir):
    cfg, rundir = ran_once(ns, daemon, confdir)
    assert (rundir / 'policy.json').exists()

    # Broken while bigtcpd was down: --check-config says so, and the start runs anyway.
    cfg.write_text(BROKEN)
    r = subprocess.run([str(helpers.BIN), '--check-config', '--config', str(cfg)], capture_output=True,
                       text=True, timeout=T(30))
    assert r.returncode == 1, r
    d2 = daemon(ns, cfg, runtime_dir=rundir)
    assert d2.running()
    check_degraded(d2, cfg, 'recorded')
    assert d2.log_lines(r'the policy has 2 errors: running the policy that ran last \(digest [0-9a-f]{16}'), \
        d2.log_tail()
    # The policy that ran runs on: for the devices it wrote, and for a new one.
    veth(ns, 'v2', 'v3')
    nl.wait_links(ns, at({'v2': sizes4(185000), 'v3': sizes4(185000)}), T(10), 'a new device, the recorded policy')
    assert_sizes(ns, {'v0': sizes4(185000), 'v1': sizes4(185000)})

    # The fixed file is taken when it appears (inotify), and the state is ready again.
    write_file_atomic(cfg, policy(150000))
    nl.wait_links(ns, at({n: sizes4(150000) for n in ('v0', 'v1', 'v2', 'v3')}), T(10), 'the fixed policy')
    deadline = time.monotonic() + T(10)
    while True:
        s = json.loads(ctl('status', '--json', sock=sock_of(d2))[0].stdout)
        if s['state'] == 'ready':
            break
        assert time.monotonic() < deadline, s
        time.sleep(0.05)
    assert s['policy']['source'] == 'files' and s['last_reload']['ok'] is True, s
    # … and recorded as the last policy that ran
    rec = json.loads((rundir / 'policy.json').read_text())
    assert rec['digest'] == s['policy']['digest'] and rec['files'] == [{'path': str(cfg),
                                                                         'text': policy(150000)}]
    d2.stop()


@pytest.mark.serial  # status answers within 1 s
def test_broken_at_start_with_no_record_writes_nothing(ns, daemon, confdir):
    cfg, rundir = ran_once(ns, daemon, confdir)
    (rundir / 'policy.json').unlink()  # a record lost, or written by a bigtcpd from before it

    cfg.write_text(BROKEN)
    d2 = daemon(ns, cfg, runtime_dir=rundir, strace=True)
    check_degraded(d2, cfg, 'none')
    assert d2.log_lines(r'the policy has 2 errors and no policy ran before: bigtcpd writes no device'), \
        d2.log_tail()
    # Nothing is written, not even the originals recorded by the run before: what it wrote stays,
    # and so do the originals in the state file.
    assert_sizes(ns, {'v0': sizes4(185000), 'v1': sizes4(185000)})
    assert d2.netlink_writes() == []
    assert 'v0' in helpers.state_devices(d2.state()), d2.state()

    # Fixed, with SIGHUP: the policy runs.
    d2.reload(lambda: cfg.write_text(policy(150000)))
    assert_sizes(ns, {'v0': sizes4(150000), 'v1': sizes4(150000)})
    s = json.loads(ctl('status', '--json', sock=sock_of(d2))[0].stdout)
    assert s['state'] == 'ready' and s['policy']['source'] == 'files', s
    d2.stop()


@pytest.mark.serial  # status answers within 1 s
def test_a_record_that_does_not_add_up_is_not_run(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(185000))
    veth(ns, 'v0', 'v1')
    d1 = daemon(ns, cfg)
    rundir = d1.runtime_dir
    d1.stop()
    # Someone's edit of the record: its texts no longer make up its digest.
    rec = json.loads((rundir / 'policy.json').read_text())
    rec['files'][0]['text'] = policy(300000)
    (rundir / 'policy.json').write_text(json.dumps(rec))

    cfg.write_text(BROKEN)
    d2 = daemon(ns, cfg, runtime_dir=rundir)
    check_degraded(d2, cfg, 'none')
    assert d2.log_lines(r'Failed to read the last policy that ran from .*policy\.json: .*ignoring'), d2.log_tail()
    assert_sizes(ns, {'v0': sizes4(185000), 'v1': sizes4(185000)})
    d2.stop()


@pytest.mark.slow
@pytest.mark.serial  # gives up after its 5 s, within 2 s more
def test_a_socket_nobody_answers_is_not_running(tmp_path):
    """What systemd's bigtcpd.socket is while the service is down: it accepts, nobody reads.
    bigtcpctl says so within seconds, exit 3, and where to look; not a 60 s wait and exit 1."""
    path = tmp_path / 'io.bigtcpd.Manager'
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        srv.bind(str(path))
        srv.listen(16)
        for args in (['status'], ['list'], ['reload'], ['monitor']):
            r, took = ctl(*args, sock=path)
            assert r.returncode == 3, (args, r)
            assert r.stderr == (f'bigtcpctl: bigtcpd does not answer on {path} within 5 s: it is not running, '
                                'or stuck (see journalctl -u bigtcpd)\n'), (args, r.stderr)
            assert r.stdout == ''
            assert 4.5 < took < 5 + T(2), (args, took)
    finally:
        srv.close()


def test_monitor_follows_a_restart(ns, daemon, confdir):
    """monitor goes on across a restart of bigtcpd, saying when it lost it and when it is back,
    and shows the new daemon's events."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy(185000))
    d1 = daemon(ns, cfg)
    rundir = d1.runtime_dir
    p = subprocess.Popen([str(CTL), '--socket', str(sock_of(d1)), 'monitor'], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    # lines read with os.read, not a buffered file's readline(): select() says nothing of lines
    # a file object has read ahead already
    pending = {}

    def line(f, what):
        buf = pending.setdefault(f.fileno(), bytearray())
        while b'\n' not in buf:
            assert select.select([f], [], [], T(10))[0], f'{what}: nothing'
            chunk = os.read(f.fileno(), 65536)
            assert chunk, f'{what}: bigtcpctl closed its output'
            buf += chunk
        end = buf.index(b'\n') + 1
        text = bytes(buf[:end]).decode()
        del buf[:end]
        return text

    try:
        assert line(p.stdout, 'legend') == 'Monitoring bigtcpd (Ctrl-C to stop).\n'
        d1.stop()
        assert line(p.stderr, 'gone') == 'bigtcpctl: bigtcpd closed the connection; waiting for it to come back\n'
        d2 = daemon(ns, cfg, runtime_dir=rundir)
        assert line(p.stderr, 'back') == \
            'bigtcpctl: bigtcpd is back; monitoring again (events meanwhile are not shown)\n'
        veth(ns, 'v0', 'v1')
        seen = []
        deadline = time.monotonic() + T(10)
        while not any(' v0: added (ifindex ' in l for l in seen):
            assert time.monotonic() < deadline, seen
            seen.append(line(p.stdout, 'v0 added'))
        # the legend once, not again after the restart
        assert not any('Monitoring bigtcpd' in l for l in seen), seen
        d2.stop()
    finally:
        p.terminate()
        p.wait(T(10))
        p.stdout.close()
        p.stderr.close()
