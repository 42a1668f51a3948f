"""test_prometheus.py — what Prometheus sees of a fleet: `bigtcpctl metrics` (policy names on every
per-device series and on the rollback counter, the canaries' cohorts) and the example rules of
conf/prometheus/, checked with promtool (`check rules`, `test rules` on
tests/prometheus/bigtcpd.rules.test.yml, `check metrics` on the real output).

promtool is in Debian's prometheus package only; scripts/setup.sh unpacks it from there into
/var/cache/bigtcpd-tests (installing the package would start a Prometheus server). The promtool
checks are part of what the rules promise: without promtool they fail (run scripts/setup.sh, or
point BIGTCPD_PROMTOOL at one)."""

import os
import re
import shutil
import subprocess

import pytest
import yaml

from canary import CANARY, cohort, fleet, host_file, needs_machine_id, pick_ids
from helpers import BIN, REPO, T, policy_text, veth, wait_file, write_file_atomic
from varlink_client import Client

RULES = sorted((REPO / 'conf' / 'prometheus').glob('*.yml'))
RULE_TESTS = sorted((REPO / 'tests' / 'prometheus').glob('*.test.yml'))
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
    pytest.fail('promtool not found: scripts/setup.sh unpacks it from Debian\'s prometheus package into '
                '/var/cache/bigtcpd-tests (or set BIGTCPD_PROMTOOL)')


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


def one(s, text, name, **labels):
    """The value of the one sample of `name` with exactly `labels` in samples `s` (of `text`)."""
    got = [v for n, l, v in s if n == name and l == labels]
    assert len(got) == 1, (name, labels, got, text)
    return got[0]


def test_rules_are_yaml_and_use_what_bigtcpctl_exports():
    """Parsed as YAML (no promtool needed): groups of named rules, alerts with a severity and a
    summary, and every bigtcpd_* metric they use is one `bigtcpctl metrics` prints."""
    assert RULES, 'no rule file in conf/prometheus/'
    exported = set(re.findall(r'"(bigtcpd_[a-z_]+)', (REPO / 'daemon' / 'metrics.c').read_text()))
    assert {'bigtcpd_rollbacks_total', 'bigtcpd_policy_applies', 'bigtcpd_policy_hosts_percent'} <= exported
    alerts = set()
    for f in RULES:
        doc = yaml.safe_load(f.read_text())
        assert set(doc) == {'groups'}, f
        for g in doc['groups']:
            assert g['name'] and g['rules'], g
            for r in g['rules']:
                assert ('record' in r) != ('alert' in r), r
                assert isinstance(r['expr'], str) and r['expr'].strip(), r
                used = set(re.findall(r'\b(bigtcpd_[a-z_]+)', r['expr']))
                assert used <= exported, f'{f.name}: {r.get("alert") or r.get("record")} uses {used - exported}'
                if 'alert' in r:
                    alerts.add(r['alert'])
                    assert r['labels']['severity'] in ('page', 'warning'), r
                    assert r['annotations']['summary'], r
    assert 'BigtcpdCanaryRolledBack' in alerts, alerts


def test_promtool_checks_the_rules():
    tool = promtool()
    for f in RULES:
        r = subprocess.run([tool, 'check', 'rules', str(f)], capture_output=True, text=True, timeout=T(60))
        assert r.returncode == 0, f'{f}:\n{r.stdout}{r.stderr}'
        assert 'SUCCESS' in r.stdout, r.stdout


def test_promtool_unit_tests_of_the_rules():
    """A canary's rollback pages for the canary alone, a stable policy's warns, both clear."""
    tool = promtool()
    assert RULE_TESTS
    r = subprocess.run([tool, 'test', 'rules', *map(str, RULE_TESTS)], capture_output=True, text=True,
                       timeout=T(60))
    assert r.returncode == 0, r.stdout + r.stderr


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
        return one(s, text, name, **labels)

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


def test_metrics_of_a_search_of_auto(netns, daemon, tmp_path):
    """An idle veth on a policy of `gso-max-size: auto`: its search shows as gauges of the device
    and the size, proven 65536, its ceiling the device's limit (nothing tripped), no trip, and
    exactly one phase at 1 (watching or idle: no traffic steps it). promtool lints the output."""
    ns = netns()
    veth(ns, 'v0', 'v1')
    cfg = tmp_path / 'etc' / 'auto.yaml'
    cfg.parent.mkdir()
    cfg.write_text(policy_text('''
        version: 1
        policies:
          - name: auto
            match: {name: [v0]}
            ipv6: {gso-max-size: auto}
            rollback:
              window: 2s
              guards:
                - {counter: link.tx_errors, max-increase: 1000}
        '''))
    d = daemon(ns, cfg)
    wait_file(d.log_path, lambda: d.log_lines(r'v0: auto: gso_max_size searched from 65536'), 20, 'v0 searching')
    sock = d.runtime_dir / IFACE
    with Client(sock) as c:
        dev = next(x for x in c.call(f'{IFACE}.ListDevices')['devices'] if x['ifname'] == 'v0')
    limit = min(dev['tso_max_size'] or 65536, 524280)
    assert limit > 65536, dev  # a veth takes BIG TCP: there is a step to try

    text = metrics(sock)
    s = samples(text)

    def value(name, **labels):
        return one(s, text, name, **labels)

    labels = dict(ifname='v0', policy='auto', size='gso_max_size')
    assert value('bigtcpd_device_auto_proven_bytes', **labels) == 65536
    assert value('bigtcpd_device_auto_ceiling_bytes', **labels) == limit
    assert value('bigtcpd_device_auto_trips', **labels) == 0
    phases = {p: value('bigtcpd_device_auto_phase', phase=p, **labels) for p in ('watching', 'idle', 'trying', 'settled')}
    assert sorted(phases.values()) == [0, 0, 0, 1], phases
    assert phases['watching'] == 1 or phases['idle'] == 1, phases
    # only the size searched, only the device searched
    for name in ('bigtcpd_device_auto_proven_bytes', 'bigtcpd_device_auto_ceiling_bytes', 'bigtcpd_device_auto_trips',
                 'bigtcpd_device_auto_phase'):
        assert {(l['ifname'], l['size']) for n, l, v in s if n == name} == {('v0', 'gso_max_size')}, text
    assert value('bigtcpd_device_size_bytes', ifname='v0', policy='auto', size='gso_max_size') == 65536
    lint = subprocess.run([promtool(), 'check', 'metrics'], input=text, capture_output=True, text=True,
                          timeout=T(60))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    d.stop()
