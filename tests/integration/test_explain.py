"""What bigtcpctl says is wrong and why (issue 12): a status that names rolled-back devices and a
refused reload (file:line:column), GetStatus/metrics/D-Bus-free views of the same; validate that
catches typos (unknown kind and key with a suggestion, a counter this host lacks as a warning,
standard input); plan and show that explain (clamps with numbers, policies scoped away, --all,
show by altname and ifindex with the match key). The CLI conventions (--json=pretty|short, ASCII
outside UTF-8, NO_COLOR, the pager, table width) are in test_cli_conventions.py."""

import json
import re
import time

import pytest

import nl
from helpers import T, ip, line_of, policy_text, sizes4, veth, write_file_atomic
from policies import standard_policy
from test_bigtcpctl import ctl, one_line_error, status_fields

POLICY = standard_policy('big', 'name: ["v*"]', ipv4=False, flow=False)

# One typo: gso_max_size for gso-max-size, so the policy is refused.
TYPO = POLICY.replace('gso-max-size', 'gso_max_size')


def wait_status(sock, pred, what, timeout=T(10)):
    deadline = time.monotonic() + timeout
    while True:
        s = json.loads(ctl('status', '--json', sock=sock, check_rc=0).stdout)
        if pred(s):
            return s
        assert time.monotonic() < deadline, f'{what}: {s}'
        time.sleep(0.05)


def start(ns, daemon, confdir, text=POLICY):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(text)
    d = daemon(ns, cfg)
    d.cfg = cfg
    d.sock = d.runtime_dir / 'io.bigtcpd.Manager'
    return d


# --- status --------------------------------------------------------------------------------------

def test_status_names_a_rolled_back_device_and_a_refused_reload(ns, daemon, confdir):
    veth(ns, 'v0', 'v1')
    d = start(ns, daemon, confdir)
    nl.wait_links(ns, lambda l: nl.sizes_of(l['v0'])[:2] == (185000, 185000), T(10), 'v0 written')
    s = json.loads(ctl('status', '--json', sock=d.sock, check_rc=0).stdout)
    assert s['state'] in ('ready', 'starting') and s['problems'] == [], s
    assert s['last_reload']['ok'] is True and s['last_reload']['errors'] == [], s

    ctl('rollback', 'v0', sock=d.sock, check_rc=0)
    write_file_atomic(d.cfg, TYPO)
    s = wait_status(d.sock, lambda s: not s['last_reload']['ok'], 'the typo refused')
    assert s['state'] == 'degraded', s
    assert [(p['ifname'], p['state'], p['last_rollback']['counter']) for p in s['problems']] == [
        ('v0', 'rolled-back', 'operator')], s
    line = line_of(TYPO, 'gso_max_size')
    col = TYPO.splitlines()[line - 1].index('gso_max_size') + 1
    err = s['last_reload']['errors']
    assert s['last_reload']['errors_total'] == len(err) >= 1, s
    assert {'file': str(d.cfg), 'line': line, 'column': col,
            'message': 'unknown key "gso_max_size" (did you mean "gso-max-size"?)'} in err, err
    assert time.time() - s['last_reload']['time_usec'] / 1e6 < T(30), s

    out = ctl('status', sock=d.sock, check_rc=0).stdout
    f = status_fields(out)
    # the policy's trouble first, then the devices'
    assert f['State'] == ['degraded (the policy files have errors, the last policy that ran runs on; '
                          '1 device rolled back)'], out
    assert f['Rolled back'] == ['v0 (by an operator)'], out
    assert re.fullmatch(r'refused at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: \d+ errors?; the policy before it runs on',
                        f['Last reload'][0]), out
    assert f'{d.cfg}:{line}:{col}: unknown key "gso_max_size" (did you mean "gso-max-size"?)' in f['Last reload'], out

    m = ctl('metrics', sock=d.sock, check_rc=0).stdout
    assert re.search(r'^bigtcpd_config_last_reload_successful 0$', m, re.M), m
    assert re.search(r'^bigtcpd_device_rollbacks_total\{ifname="v0",policy="big"\} 1$', m, re.M), m
    assert re.search(r'^bigtcpd_device_rollbacks_total\{ifname="v1",policy="big"\} 0$', m, re.M), m

    # The files back as they were: the refusal is over, though nothing new was loaded.
    write_file_atomic(d.cfg, POLICY)
    s = wait_status(d.sock, lambda s: s['last_reload']['ok'], 'the fix accepted')
    assert s['last_reload']['errors'] == [] and s['state'] == 'degraded', s
    assert re.fullmatch(r'ok at .*', status_fields(ctl('status', sock=d.sock, check_rc=0).stdout)['Last reload'][0])
    assert re.search(r'^bigtcpd_config_last_reload_successful 1$', ctl('metrics', sock=d.sock, check_rc=0).stdout,
                     re.M)
    ctl('retry', 'v0', sock=d.sock, check_rc=0)
    wait_status(d.sock, lambda s: s['state'] == 'ready' and s['problems'] == [], 'v0 retried: ready again')


def test_status_names_the_first_ten_then_a_count(ns, daemon, confdir):
    """Twelve devices rolled back: GetStatus names the ten of the lowest ifindexes, status says
    how many more."""
    for i in range(6):
        veth(ns, f'v{i}a', f'v{i}b')
    d = start(ns, daemon, confdir)
    ctl('rollback', '--all', sock=d.sock, check_rc=0)
    s = wait_status(d.sock, lambda s: s['devices'].get('rolled-back') == 12, 'all twelve rolled back')
    index = {n: l['ifindex'] for n, l in nl.read_links(ns).items()}
    want = sorted((i, n) for n, i in index.items() if n != 'lo')[:10]
    assert [(p['ifindex'], p['ifname']) for p in s['problems']] == want, s['problems']
    f = status_fields(ctl('status', sock=d.sock, check_rc=0).stdout)
    assert f['State'] == ['degraded (12 devices rolled back)'], f
    assert f['Rolled back'] == [f'{n} (by an operator)' for _, n in want] + ['… and 2 more (bigtcpctl list)'], f


def test_status_rollout_progress(ns, daemon, confdir):
    """A staged rollout says how far it is: applied, active (in probation), waiting; halted, by
    which device and which counter."""
    text = POLICY.replace('    ipv6:', '    rollout: { max-parallel: 1 }\n    rollback: { window: 30s }\n    ipv6:')
    for a, b in (('v0', 'w0'), ('v1', 'w1'), ('v2', 'w2')):
        veth(ns, a, b)
    d = start(ns, daemon, confdir, text)
    s = wait_status(d.sock, lambda s: s['rollouts'] and s['rollouts'][0]['probation'] == 1, 'one in probation')
    r = s['rollouts'][0]
    assert (r['policy'], r['active'], r['waiting'], r['applied'], r['halted']) == ('big', 1, 2, 0, False), r
    line = status_fields(ctl('status', sock=d.sock, check_rc=0).stdout)['Rollouts']
    assert line == ['big: 0 applied, 1/1 active (1 in probation), 2 waiting'], line
    probing = [x['ifname'] for x in json.loads(ctl('list', '--json', sock=d.sock, check_rc=0).stdout)['devices']
               if x['state'] == 'probation']
    ctl('rollback', probing[0], sock=d.sock, check_rc=0)
    s = wait_status(d.sock, lambda s: s['rollouts'][0]['halted'], 'halted')
    assert s['rollouts'][0]['halted_by'] == probing[0] and s['rollouts'][0]['halted_counter'] == 'operator', s
    line = status_fields(ctl('status', sock=d.sock, check_rc=0).stdout)['Rollouts']
    assert re.fullmatch(rf'big: 0 applied, 0/1 active \(0 in probation\), 2 waiting, halted by {probing[0]} '
                        r'\(rolled back by an operator\)', line[0]), line


@pytest.mark.slow
@pytest.mark.serial  # a guard's rise within a window of its own: a loaded machine stretches the window
def test_status_counts_are_right_at_every_moment_of_a_halt(ns, daemon, confdir):
    """Issue 24: the counts at the moment a rollout halts (a guard trips on the one in probation
    while two are applied) are the counts a second later: sampled all along, no sample says
    otherwise."""
    import inject
    text = POLICY.replace('    ipv6:', '    rollout: { max-parallel: 1 }\n    rollback:\n      window: 2s\n'
                          '      interval: 200ms\n      guards: [{counter: link.tx_dropped, max-increase: 0}]\n'
                          '    ipv6:')
    for a, b in (('v0', 'w0'), ('v1', 'w1'), ('v2', 'w2')):
        veth(ns, a, b)
    d = start(ns, daemon, confdir, text)

    def counts(s):
        r = s['rollouts'][0]
        return (r['applied'], r['active'], r['probation'], r['waiting'], r['halted'], s['devices']['rolled-back'])

    s = wait_status(d.sock, lambda s: counts(s)[:4] == (2, 1, 1, 0), 'two applied, one in probation', T(30))
    victim = [x['ifname'] for x in json.loads(ctl('list', '--json', sock=d.sock, check_rc=0).stdout)['devices']
              if x['state'] == 'probation'][0]
    ip(ns, 'link', 'set', victim, 'up')   # its peer stays down: every frame sent into it is dropped
    frame = inject.ipv4_frame(b'\xff' * 6, inject.mac_of(ns, victim), '10.9.0.1', '10.9.0.2')
    assert inject.send_frames(ns, victim, [frame] * 5) == 5
    seen, halted_at = [], None
    deadline = time.monotonic() + T(10)
    while halted_at is None or time.monotonic() < halted_at + 2:
        s = json.loads(ctl('status', '--json', sock=d.sock, check_rc=0).stdout)
        seen.append(counts(s))
        if halted_at is None and s['rollouts'][0]['halted']:
            halted_at = time.monotonic()
        assert time.monotonic() < deadline, f'no halt: {seen[-1]}'
    # before: 2 applied, 1/1 active (1 in probation); from the halt on: 2 applied, none active or
    # waiting, the victim rolled back — at every sample
    assert set(seen) <= {(2, 1, 1, 0, False, 0), (2, 0, 0, 0, True, 1)}, seen
    assert seen[-1] == (2, 0, 0, 0, True, 1), seen
    line = status_fields(ctl('status', sock=d.sock, check_rc=0).stdout)['Rollouts']
    assert line[0].startswith(f'big: 2 applied, 0/1 active (0 in probation), 0 waiting, halted by {victim}'), line


# --- validate ------------------------------------------------------------------------------------

def test_validate_refuses_unknown_kind_and_key_with_a_suggestion(tmp_path):
    f = tmp_path / 'p.yaml'
    text = POLICY.replace('name: ["v*"]', 'kind: [ethernet, vteh]').replace('gro-max-size', 'gro_max_size')
    f.write_text(text)
    r = ctl('validate', f, check_rc=1)
    k, g = line_of(text, 'kind:'), line_of(text, 'gro_max_size')
    kl = text.splitlines()[k - 1]
    e, v = kl.index('ethernet') + 1, kl.index('vteh') + 1
    assert f'{f}:{k}:{e}: kind: unknown kind "ethernet" (did you mean "device"? a physical NIC has no link kind)' \
        in r.stderr.splitlines(), r.stderr
    assert f'{f}:{k}:{v}: kind: unknown kind "vteh" (did you mean "veth"?)' in r.stderr.splitlines(), r.stderr
    gc = text.splitlines()[g - 1].index('gro_max_size') + 1
    assert f'{f}:{g}:{gc}: unknown key "gro_max_size" (did you mean "gro-max-size"?)' in r.stderr.splitlines()
    assert r.stdout == ''


def test_validate_reads_stdin_and_warns_of_counters_this_host_lacks(tmp_path):
    text = policy_text('''
        version: 1
        rollback:
          guards:
            - counter: Tcp.RetransSeg
              max-ratio: 0.02
              per: Tcp.OutSegs
        policies:
          - name: big
            match: {kind: [veth]}
            ipv6: {gso-max-size: 185000}
        ''')
    r = ctl_stdin(['validate', '-'], text)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        '<stdin>:4:16: warning: guard counter "Tcp.RetransSeg" is not on this host (did you mean '
        '"Tcp.RetransSegs"?): guards on it never trip'], r.stderr
    assert r.stdout == '1 file valid: 1 policy, 1 warning.\n'
    j = json.loads(ctl_stdin(['validate', '--json', '-'], text).stdout)
    assert j['valid'] is True and [w['line'] for w in j['warnings']] == [4], j
    # a warning is a warning by its field; its message is the words alone
    assert j['warnings'][0]['message'] == ('guard counter "Tcp.RetransSeg" is not on this host (did you mean '
                                           '"Tcp.RetransSegs"?): guards on it never trip'), j
    # and the link counters have their did-you-mean too (a parse error: their names are fixed)
    r = ctl_stdin(['validate', '-'], text.replace('Tcp.RetransSeg', 'link.tx_erors'))
    assert r.returncode == 1 and r.stderr.splitlines()[0] == (
        '<stdin>:4:16: counter: bad counter "link.tx_erors" (did you mean "link.tx_errors"?)'), r.stderr
    r = ctl_stdin(['validate', '-'], TYPO)
    assert r.returncode == 1 and r.stderr.startswith('<stdin>:'), r.stderr


def test_validate_shows_a_files_warnings_beside_its_errors():
    # an error in one policy does not hide a counter the host lacks in another part of the file
    text = policy_text('''
        version: 1
        rollback:
          guards:
            - counter: Tcp.RetransSeg
              max-increase: 10
        policies:
          - name: big
            match: {kind: [veth]}
            ipv6: {gso-max-size: lots}
        ''')
    r = ctl_stdin(['validate', '-'], text)
    assert r.returncode == 1 and r.stdout == '', r
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith('<stdin>:9:26: gso-max-size:') and 'warning' not in lines[0], lines
    assert lines[1] == ('<stdin>:4:16: warning: guard counter "Tcp.RetransSeg" is not on this host (did you mean '
                        '"Tcp.RetransSegs"?): guards on it never trip'), lines
    j = json.loads(ctl_stdin(['validate', '--json', '-'], text).stdout)
    assert j['valid'] is False and [e['line'] for e in j['errors']] == [9], j
    assert [(w['line'], w['column']) for w in j['warnings']] == [(4, 16)], j
    assert j['warnings'][0]['message'].startswith('guard counter "Tcp.RetransSeg" is not on this host'), j
    # a guard whose own counter is the error gives no warning for it (the error says it)
    r = ctl_stdin(['validate', '--json', '-'], text.replace('Tcp.RetransSeg', 'link.tx_erors'))
    j = json.loads(r.stdout)
    assert r.returncode == 1 and j['warnings'] == [] and len(j['errors']) == 2, j


def ctl_stdin(args, text):
    import subprocess
    from test_bigtcpctl import CTL
    return subprocess.run([str(CTL), *args], input=text, capture_output=True, text=True, timeout=60)


# --- plan and show -------------------------------------------------------------------------------

def test_plan_says_what_clamps_what_is_scoped_away_and_all(ns, daemon, confdir, tmp_path):
    ip(ns, 'link', 'add', 'vbr', 'type', 'bridge')   # no ports: tso_max_size 65536
    veth(ns, 'v0', 'v1')
    d = start(ns, daemon, confdir, POLICY.replace('185000', '300000').replace('gro-max-size: 300000', ''))
    out = ctl('plan', '--all', sock=d.sock, check_rc=0).stdout
    table = out.split('\n\n')[0].splitlines()   # the header, a row per device, then a blank line
    assert table[0].split() == ['NETNS', 'IDX', 'LINK', 'POLICY', 'ACTION', 'CHANGES'], out
    rows = {l.split()[2]: l for l in table[1:]}
    assert all(l.split()[0] == 'host' for l in table[1:]), out
    assert set(rows) == {'lo', 'vbr', 'v0', 'v1'}, out
    assert re.search(r'vbr\s+big\s+none\s+\(clamped: gso_max_size asked 300000, the device takes 65536\)$',
                     rows['vbr']), out
    assert re.search(r'lo\s+-\s+none\s+-$', rows['lo']), out
    assert ctl('plan', sock=d.sock, check_rc=0).stdout == '0 of 4 devices would change.\n'
    j = json.loads(ctl('plan', '--json', sock=d.sock, check_rc=0).stdout)
    vbr = next(x for x in j['devices'] if x['ifname'] == 'vbr')
    assert vbr['clamps'] == [{'size': 'gso_max_size', 'asked': 300000, 'limit': 65536}], vbr

    scoped = tmp_path / 'fleet.yaml'
    scoped.write_text(POLICY.replace('  - name: big\n', '  - name: big\n    hosts: ["db-*"]\n'))
    out = ctl('plan', scoped, sock=d.sock, check_rc=0).stdout
    assert 'Not in force on this host: big (no hosts glob matches the hostname).\n' in out, out
    assert 'Every policy is scoped away from this host: its devices match none.\n' in out, out
    # the same from standard input (what the Ansible play's --check --diff runs)
    r = ctl_stdin(['--socket', d.sock, 'plan', '-'], scoped.read_text())
    assert r.returncode == 0 and r.stdout == out, (r.stdout, r.stderr)


def test_show_by_altname_and_ifindex_explains_the_match_and_the_clamp(ns, daemon, confdir):
    veth(ns, 'v0', 'v1')
    ip(ns, 'link', 'add', 'vbr', 'type', 'bridge')
    ip(ns, 'link', 'property', 'add', 'dev', 'v0', 'altname', 'fabric0')
    text = POLICY.replace('name: ["v*"]', 'name: ["v*"]\n      kind: [veth, bridge]')
    d = start(ns, daemon, confdir, text)
    ifindex = nl.read_links(ns)['v0']['ifindex']
    by_name = ctl('show', 'v0', sock=d.sock, check_rc=0).stdout
    by_alt = ctl('show', 'fabric0', sock=d.sock, check_rc=0).stdout
    by_index = ctl('show', ifindex, sock=d.sock, check_rc=0).stdout
    # the time left of the window, and of its big-packet count
    strip = lambda s: re.sub(r'(probation|counting) \(\d+\.\ds left\)', r'\1', s)
    assert strip(by_name) == strip(by_alt) == strip(by_index), (by_name, by_alt, by_index)
    assert re.search(r'^\s+Altnames: fabric0$', by_name, re.M), by_name
    assert re.search(r'^\s+Policy: big \(matched by name v\*, kind veth\)$', by_name, re.M), by_name
    j = json.loads(ctl('show', '--json', 'fabric0', sock=d.sock, check_rc=0).stdout)
    assert j['altnames'] == ['fabric0'] and j['matched_by'] == 'name v*, kind veth' and j['clamps'] == [], j

    br = ctl('show', 'vbr', sock=d.sock, check_rc=0).stdout
    assert re.search(r'^\s+Policy: big \(matched by name v\*, kind bridge\)$', br, re.M), br
    assert re.search(r'^SIZE\s+CURRENT\s+DESIRED\s+ORIGINAL\s+WHY$', br, re.M), br
    assert re.search(r'^gso_max_size\s+65536 \(64K\)\s+65536 \(64K\)\s+65536 \(64K\)\s+'
                     r'clamped: the policy asks 185000, the device takes 65536$', br, re.M), br
    assert re.search(r'^gro_max_size\s+185000 \(180\.6K\)\s+185000 \(180\.6K\)\s+65536 \(64K\)$', br, re.M), br
    one_line_error(ctl('show', '99999', sock=d.sock), 1, 'no device "99999"')

    # Rolled back: held at the sizes from before, though the policy asks for others.
    ctl('rollback', 'fabric0', sock=d.sock, check_rc=0)
    nl.wait_links(ns, lambda l: nl.sizes_of(l['v0'])[:2] == (65536, 65536), T(10), 'v0 rolled back')
    held = ctl('show', ifindex, sock=d.sock, check_rc=0).stdout
    for size in ('gso_max_size', 'gro_max_size'):
        assert re.search(rf'^{size}\s+65536 \(64K\)\s+65536 \(64K\)\s+65536 \(64K\)\s+'
                         r'held after a rollback \(the policy asks 185000\)$', held, re.M), held
    j = json.loads(ctl('show', '--json', 'v0', sock=d.sock, check_rc=0).stdout)
    assert j['held'] is True and j['asked']['gso_max_size'] == 185000 and j['rollbacks'] == 1, j
