"""test_prometheus.py — what Prometheus sees of a fleet: `bigtcpctl metrics` (policy names on every
per-device series and on the rollback counter, the canaries' cohorts), linted with
`promtool check metrics`.

promtool is in Debian's prometheus package only; scripts/setup.sh unpacks it from there into
/var/cache/bigtcpd-tests (installing the package would start a Prometheus server). Without it the
lint is left out, except under CI, where setup.sh always provides it and its absence is a
failure."""

import os
import re
import shutil
import subprocess

import pytest

from canary import CANARY, cohort, fleet, host_file, needs_machine_id, pick_ids
from helpers import BIN, T, veth, write_file_atomic
from varlink_client import Client

CTL = BIN.parent.parent / 'cli' / 'bigtcpctl'
IFACE = 'io.bigtcpd.Manager'


def find_promtool():
    for p in (os.environ.get('BIGTCPD_PROMTOOL'), shutil.which('promtool'), '/var/cache/bigtcpd-tests/promtool'):
        if p and os.access(p, os.X_OK):
            return p
    return None


def promtool():
    p = find_promtool()
    if p:
        return p
    if os.environ.get('CI'):
        pytest.fail('promtool not found: scripts/setup.sh unpacks it into /var/cache/bigtcpd-tests')
    pytest.skip('promtool not found (scripts/setup.sh unpacks it from Debian\'s prometheus package)')


def metrics(sock):
    r = subprocess.run([str(CTL), '--socket', str(sock), 'metrics'], capture_output=True, text=True, timeout=T(30))
    assert r.returncode == 0, r.stderr
    return r.stdout


SAMPLE = re.compile(r'^([a-z_]+)(?:\{(.*)\})? (\S+)$')


def samples(text):
    out = []
    for line in text.splitlines():
        if line.startswith('#'):
            continue
        m = SAMPLE.match(line)
        assert m, line
        out.append((m.group(1), dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or '')), float(m.group(3))))
    return out


def test_metrics_name_the_policy_and_count_rollbacks_by_it(netns, daemon, tmp_path):
    """A host inside a canary: every per-device series names the policy, the canary's cohort and
    percentage are gauges, an operator's rollback counts under the canary's name — and still does
    after the canary leaves the file (a counter never goes back). promtool lints the output."""
    needs_machine_id()
    ns = netns()
    veth(ns, 'v0', 'v1')
    mid = pick_ids(1, True, percent=25)[0]
    cfg = tmp_path / 'etc' / 'fleet.yaml'
    cfg.parent.mkdir()
    cfg.write_text(fleet(25))
    d = daemon(ns, cfg, hostname='web-3', machine_id=host_file(tmp_path, mid))
    sock = d.runtime_dir / IFACE

    text = metrics(sock)
    s = samples(text)

    def value(name, **labels):
        got = [v for n, l, v in s if n == name and l == labels]
        assert len(got) == 1, (name, labels, got, text)
        return got[0]

    per_device = [l for n, l, v in s if n.startswith('bigtcpd_device_')]
    assert per_device and all('policy' in l for l in per_device), text
    assert value('bigtcpd_device_size_bytes', ifname='v0', policy=CANARY, size='gso_ipv4_max_size') == 185000
    assert value('bigtcpd_device_state', ifname='lo', policy='', state='unmanaged') == 1
    assert value('bigtcpd_policy_applies', policy=CANARY) == 1
    assert value('bigtcpd_policy_applies', policy='web') == 1
    assert value('bigtcpd_policy_hosts_percent', policy=CANARY) == 25
    assert value('bigtcpd_policy_cohort', policy=CANARY) == cohort(CANARY, mid)
    assert value('bigtcpd_rollbacks_total', policy=CANARY) == 0
    assert value('bigtcpd_rollbacks_total', policy='web') == 0
    if find_promtool() or os.environ.get('CI'):
        lint = subprocess.run([promtool(), 'check', 'metrics'], input=text, capture_output=True, text=True,
                              timeout=T(60))
        assert lint.returncode == 0, lint.stdout + lint.stderr

    r = subprocess.run([str(CTL), '--socket', str(sock), 'rollback', 'v0'], capture_output=True, text=True,
                       timeout=T(30))
    assert r.returncode == 0, r.stderr
    s = samples(metrics(sock))
    assert value('bigtcpd_rollbacks_total', policy=CANARY) == 1
    assert value('bigtcpd_rollbacks_total', policy='web') == 0

    # The canary goes (an operator takes it out after the rollback): its count stays.
    write_file_atomic(cfg, fleet(25).split('  - name: web\n')[0].replace(CANARY, 'web-only')
                      .replace('    rollout: {hosts-percent: 25}\n', ''))
    with Client(sock) as c:
        c.call(f'{IFACE}.Reload')
        st = c.call(f'{IFACE}.GetStatus')
    assert st['rollbacks_by_policy'] == {CANARY: 1}, st['rollbacks_by_policy']
    s = samples(metrics(sock))
    assert value('bigtcpd_rollbacks_total', policy=CANARY) == 1
    assert value('bigtcpd_rollbacks_total', policy='web-only') == 0
    assert not [l for n, l, v in s if n == 'bigtcpd_policy_cohort'], 'no canary left'
