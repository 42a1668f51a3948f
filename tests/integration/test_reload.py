"""Reload: SIGHUP and inotify (also the Kubernetes ConfigMap symlink swap); a broken file is
refused with file:line:column and the running policy stays; a policy removed restores."""

import os
import re
import shutil

import pytest

import nl
from helpers import (Monitor, assert_sizes, at, device_lines, line_of, policy_text, set_and_check, sizes4,
                     T, veth, write_file_atomic)
from policies import standard_policy

ORIG = sizes4(60000, 60001, 60002, 60003)


def policy_v(size, names='["v*"]'):
    return standard_policy('big', f'name: {names}', size)


# name -> (file text, the marker on the line the (first) error must be reported at, or None when
# the line is left to the YAML parser)
BROKEN = {
    'unknown-key': (policy_text('''
        version: 1
        policies:
          - name: big
            match:
              name: ["v*"]
              colour: blue
            ipv6: {gso-max-size: 100000, gro-max-size: 100000}
        '''), 'colour'),
    'out-of-range': (policy_text('''
        version: 1
        policies:
          - name: big
            match:
              name: ["v*"]
            ipv6:
              gso-max-size: 100000
              gro-max-size: 600000
        '''), '600000'),
    'wrong-type': (policy_text('''
        version: 1
        policies:
          - name: big
            match:
              name: ["v*"]
            ipv6:
              gso-max-size: [1, 2]
              gro-max-size: 100000
        '''), 'gso-max-size'),
    'yaml-syntax': (policy_text('''
        version: 1
        policies:
          - name: big
            match:
              name: ["v*"
            ipv6: {gso-max-size: 100000, gro-max-size: 100000}
        '''), None),
}


def error_lines(log, path):
    rx = re.compile(re.escape(str(path)) + r':(\d+):(\d+): \S')
    return [(int(m.group(1)), int(m.group(2)), l) for l in log.splitlines() if (m := rx.search(l))]


@pytest.mark.parametrize('case', BROKEN)
def test_reload_with_broken_file_keeps_old_policy(ns, daemon, confdir, case):
    text, marker = BROKEN[case]
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_v(185000))
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg)
    assert_sizes(ns, {'v0': sizes4(185000)})

    d.reload(lambda: write_file_atomic(cfg, text))
    errors = error_lines(d.log(), cfg)
    assert errors, f'no "{cfg}:LINE:COLUMN: message" in the log:\n{d.log_tail()}'
    if marker is not None:
        want = line_of(text, marker)
        assert want in [e[0] for e in errors], f'error not reported at line {want}: {errors}'
    assert all(e[1] >= 1 for e in errors), f'columns are 1-based: {errors}'

    # The old policy still runs: for devices already written and for new ones.
    veth(ns, 'v2', 'v3')
    nl.wait_links(ns, at({'v2': sizes4(185000), 'v3': sizes4(185000)}), T(10), 'new device, old policy')
    assert_sizes(ns, {'v0': sizes4(185000), 'v1': sizes4(185000)})
    d.stop()


def test_reload_without_the_policy_restores_originals(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_v(185000))
    veth(ns, 'v0', 'v1')
    veth(ns, 'w0', 'w1')
    set_and_check(ns, 'v0', ORIG)
    d = daemon(ns, cfg)
    assert_sizes(ns, {'v0': sizes4(185000), 'v1': sizes4(185000)})

    d.reload(lambda: write_file_atomic(cfg, policy_v(185000, '["w*"]')))
    # READY=1 after a reload promises the new policy's writes are acknowledged.
    assert_sizes(ns, {'v0': ORIG, 'v1': sizes4(65536), 'w0': sizes4(185000), 'w1': sizes4(185000)},
                 'after the policy for v* was removed')
    log = d.log()
    assert device_lines(log, 'v0', 'restoring') and device_lines(log, 'v1', 'restoring'), log

    # An empty policy list restores everything.
    d.reload(lambda: write_file_atomic(cfg, 'version: 1\npolicies: []\n'))
    assert_sizes(ns, {'v0': ORIG, 'w0': sizes4(65536), 'w1': sizes4(65536)}, 'after policies: []')
    d.stop()


def test_inotify_reload_on_rename_over(ns, daemon, confdir):
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_v(185000))
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg)
    assert_sizes(ns, {'v0': sizes4(185000)})
    for size in (100000, 150000):
        d.mark()
        write_file_atomic(cfg, policy_v(size))   # no SIGHUP
        d.wait_notify('RELOADING=1')
        d.wait_notify('READY=1')
        # A second event for the same change may start another reload: wait on the kernel state.
        nl.wait_links(ns, at({'v0': sizes4(size), 'v1': sizes4(size)}), T(10), f'policy {size}')
    d.stop()


def test_inotify_reload_on_in_place_edit(ns, daemon, confdir):
    """Editors and `cat >` rewrite the file in place; the daemon may see a partial file first,
    but must end with the final one."""
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_v(185000))
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg)
    d.mark()
    with open(cfg, 'w') as f:
        f.write(policy_v(100000))
    d.wait_notify('RELOADING=1')
    nl.wait_links(ns, at({'v0': sizes4(100000)}), T(10), 'after an in-place edit')
    d.stop()


def test_inotify_reload_on_configmap_symlink_swap(ns, daemon, tmp_path):
    """Kubernetes mounts a ConfigMap as dir/KEY -> ..data/KEY, ..data -> ..<timestamp>/, and
    updates it by creating a new timestamped dir and renaming a new ..data symlink over the old.
    The file the daemon was given never changes: only a symlink in its path does."""
    cm = tmp_path / 'configmap'
    cm.mkdir()

    def publish(n, text):
        ts = cm / f'..2024_01_01_00_00_0{n}.{n:06d}'
        ts.mkdir()
        (ts / 'bigtcpd.yaml').write_text(text)
        tmp_link = cm / '..data_tmp'
        os.symlink(ts.name, tmp_link)
        os.rename(tmp_link, cm / '..data')
        return ts

    old = publish(1, policy_v(185000))
    os.symlink('..data/bigtcpd.yaml', cm / 'bigtcpd.yaml')
    cfg = cm / 'bigtcpd.yaml'
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg)
    assert_sizes(ns, {'v0': sizes4(185000)})

    for n, size in ((2, 100000), (3, 150000)):   # twice: the watch must survive a swap
        d.mark()
        new = publish(n, policy_v(size))
        shutil.rmtree(old)
        old = new
        d.wait_notify('RELOADING=1')
        d.wait_notify('READY=1')
        nl.wait_links(ns, at({'v0': sizes4(size), 'v1': sizes4(size)}), T(10), f'ConfigMap swap {n}')
    d.stop()


@pytest.mark.serial  # GetStatus within 1 s
def test_fifo_renamed_over_the_policy(ns, daemon, confdir):
    """A FIFO where the policy file was: the reload it triggers refuses it at once (opened
    without blocking, named as what it is); the daemon answers within a second; the running
    policy stays."""
    import varlink_client
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_v(185000))
    veth(ns, 'v0', 'v1')
    d = daemon(ns, cfg)
    fifo = confdir / '.fifo'
    os.mkfifo(fifo)
    with Monitor(d, seed=False) as m:
        os.rename(fifo, cfg)
        ev = m.wait_for(lambda e: e['event'] == 'reload', 10, 'the reload of the FIFO')
    assert ev['ok'] is False and [e['message'] for e in ev['errors']] == ['not a regular file (a FIFO)'], ev
    assert d.log_lines(re.escape(f'{cfg}: not a regular file (a FIFO)')), d.log_tail()
    dt, status = varlink_client.timed_call(d.runtime_dir / 'io.bigtcpd.Manager', timeout=T(5))
    assert dt < T(1.0), f'GetStatus took {dt:.3f} s with a FIFO for a policy'
    veth(ns, 'v2', 'v3')
    nl.wait_links(ns, at({'v2': sizes4(185000)}), T(10), 'new device, old policy')
    d.stop()


@pytest.mark.parametrize('kind', ['fifo', 'dangling', 'loop', 'directory'])
def test_dropin_that_is_not_a_file_is_an_error(ns, daemon, tmp_path, kind):
    """A drop-in name (*.yaml) for something other than a regular file is not skipped without a
    word: the reload is refused with its path and what it is, and the running policy stays."""
    root = tmp_path / 'root'
    dropins = root / 'etc/bigtcpd/bigtcpd.d'
    dropins.mkdir(parents=True)
    (root / 'etc/bigtcpd/bigtcpd.yaml').write_text(policy_v(185000))
    veth(ns, 'v0', 'v1')
    d = daemon(ns, None, env={'BIGTCPD_ROOT': str(root)})
    bad = dropins / '50-bad.yaml'
    with Monitor(d, seed=False) as m:
        if kind == 'fifo':
            os.mkfifo(bad)
        elif kind == 'dangling':
            os.symlink('/nonexistent/x.yaml', bad)
        elif kind == 'loop':
            os.symlink('50-bad.yaml', bad)
        else:
            bad.mkdir()
        ev = m.wait_for(lambda e: e['event'] == 'reload', 10, f'the reload for the {kind}')
    why = {'fifo': 'not a regular file (a FIFO)', 'dangling': 'dangling symlink', 'loop': 'symlink loop',
           'directory': 'Is a directory'}[kind]
    assert ev['ok'] is False and [(e['file'], e['message']) for e in ev['errors']] == [(str(bad), why)], ev
    assert d.log_lines(re.escape(f'{bad}: {why}')), d.log_tail()
    veth(ns, 'v2', 'v3')
    nl.wait_links(ns, at({'v2': sizes4(185000)}), T(10), 'new device, old policy')
    d.stop()
