"""Install: a distribution-style build (prefix /usr) installed with `meson install --destdir`
puts every file where Debian expects it and never overwrites an existing policy; the man pages
render and document every key, counter and error of the format; the fleet examples (policy,
Kubernetes DaemonSet, Ansible playbook) are valid; bash completion completes commands, options
and the daemon's device names."""

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

import helpers
from helpers import REPO, T, policy_text, veth

# the install tree (conftest.tree), built once for both modules
pytestmark = [pytest.mark.xdist_group('install-tree'), pytest.mark.slow]


def pkg_config_var(package, var, default):
    r = subprocess.run(['pkg-config', f'--variable={var}', package], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else default


def run_step(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=T(300))
    assert r.returncode == 0, f'{shlex.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}'
    return r


def installed_targets(build):
    """The build's targets that `meson install` installs (the daemon, the CLI, the man pages), as
    ninja names them: what the install needs built. The unit tests, the layering check's and the
    preload shim's targets are not installed, and the ASan build compiles and runs them."""
    targets = json.loads(run_step(['meson', 'introspect', '--targets', str(build)]).stdout)
    return sorted({os.path.relpath(f, build) for t in targets if t['installed'] for f in t['filename']})


def install_tree(base):
    """Configure, build what is installed and install bigtcpd with prefix /usr into base/dest.
    Returns the tree."""
    build, dest = base / 'build', base / 'dest'
    run_step(['meson', 'setup', '-Dprefix=/usr', '-Dbuildtype=plain', str(REPO), str(build)])
    wanted = installed_targets(build)
    assert {'daemon/bigtcpd', 'cli/bigtcpctl'} <= set(wanted), wanted
    run_step(['ninja', '-C', str(build), *wanted])
    run_step(['meson', 'install', '-C', str(build), '--destdir', str(dest), '--no-rebuild'])
    return {
        'build': build,
        'dest': dest,
        'unitdir': pkg_config_var('systemd', 'systemdsystemunitdir', '/usr/lib/systemd/system'),
        'completionsdir': pkg_config_var('bash-completion', 'completionsdir', '/usr/share/bash-completion/completions'),
    }


def expected_files(t):
    return {
        '/usr/sbin/bigtcpd': 0o755,
        '/usr/bin/bigtcpctl': 0o755,
        '/usr/libexec/bigtcpd/bigtcpd-observer-loader': 0o755,
        '/etc/bigtcpd/bigtcpd.yaml': 0o644,
        f'{t["unitdir"]}/bigtcpd.service': 0o644,
        f'{t["unitdir"]}/bigtcpd.socket': 0o644,
        '/usr/share/dbus-1/system.d/io.bigtcpd1.conf': 0o644,
        '/usr/share/dbus-1/system-services/io.bigtcpd1.service': 0o644,
        '/usr/share/varlink/io.bigtcpd.Manager.varlink': 0o644,
        '/usr/lib/systemd/catalog/bigtcpd.catalog': 0o644,
        '/usr/share/man/man8/bigtcpd.8': 0o644,
        '/usr/share/man/man8/bigtcpctl.8': 0o644,
        '/usr/share/man/man5/bigtcpd.yaml.5': 0o644,
        f'{t["completionsdir"]}/bigtcpctl': 0o644,
        '/usr/share/doc/bigtcpd/examples/bigtcpd.yaml': 0o644,
        '/usr/share/doc/bigtcpd/examples/fleet.yaml': 0o644,
        '/usr/share/doc/bigtcpd/examples/bigtcpd-daemonset.yaml': 0o644,
        '/usr/share/doc/bigtcpd/examples/bigtcpd-podmonitor.yaml': 0o644,
        '/usr/share/doc/bigtcpd/examples/bigtcpd.yml': 0o644,
        '/usr/share/doc/bigtcpd/examples/bigtcpd.rules.yml': 0o644,
        '/usr/share/doc/bigtcpd/NEWS': 0o644,
        '/usr/share/bigtcpd/bigtcpd.yaml': 0o644,   # the shipped default, as Debian's postinst copies it
    }


def installed(dest):
    return {'/' + str(p.relative_to(dest)) for p in dest.rglob('*') if p.is_file() or p.is_symlink()}


def test_files_in_place(tree):
    dest = tree['dest']
    want = expected_files(tree)
    have = installed(dest)
    missing = sorted(set(want) - have)
    assert not missing, f'not installed: {missing}\ninstalled: {sorted(have)}'
    for path, mode in want.items():
        got = stat.S_IMODE((dest / path.lstrip('/')).stat().st_mode)
        assert got == mode, f'{path}: mode {got:o}, expected {mode:o}'
    # Everything below the standard trees, nothing in the build's own idea of a place.
    stray = sorted(p for p in have if not re.match(r'^/(usr|etc|lib)/', p))
    assert not stray, stray
    unexpected = sorted(have - set(want))
    assert not unexpected or all(p.startswith('/usr/share/') for p in unexpected), unexpected


def test_installed_contents(tree):
    dest = tree['dest']
    unit = (dest / tree['unitdir'].lstrip('/') / 'bigtcpd.service').read_text()
    assert re.search(r'^ExecStart=/usr/sbin/bigtcpd$', unit, re.M), unit
    assert '@SBINDIR@' not in unit, 'unsubstituted @SBINDIR@'
    for line in ('Type=notify', 'ExecReload=/bin/kill -HUP $MAINPID', 'Restart=on-failure', 'WatchdogSec=30s',
                 'RuntimeDirectory=bigtcpd', 'RuntimeDirectoryPreserve=yes',
                 # AF_PACKET and CAP_NET_RAW: the evidence's packet sockets; CAP_BPF, CAP_PERFMON and
                 # bpf(): the eBPF observer; nothing more
                 'CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW CAP_BPF CAP_PERFMON', 'SystemCallFilter=bpf',
                 'RestrictAddressFamilies=AF_UNIX AF_NETLINK AF_PACKET', 'NoNewPrivileges=yes', 'ProtectSystem=strict',
                 'ProtectHome=yes', 'PrivateTmp=yes', 'SystemCallFilter=@system-service',
                 # the socket comes with the service, in any order (test_systemd_boot.py boots it)
                 'Wants=bigtcpd.socket', 'After=bigtcpd.socket', 'PartOf=bigtcpd.socket', 'Also=bigtcpd.socket'):
        assert re.search(rf'^{re.escape(line)}$', unit, re.M), f'{line} missing from bigtcpd.service'
    sock = (dest / tree['unitdir'].lstrip('/') / 'bigtcpd.socket').read_text()
    for line in ('ListenStream=/run/bigtcpd/io.bigtcpd.Manager', 'FileDescriptorName=varlink', 'SocketMode=0666'):
        assert re.search(rf'^{re.escape(line)}$', sock, re.M), f'{line} missing from bigtcpd.socket'
    activation = (dest / 'usr/share/dbus-1/system-services/io.bigtcpd1.service').read_text()
    assert 'Name=io.bigtcpd1' in activation and 'SystemdService=dbus-io.bigtcpd1.service' in activation
    assert 'Alias=dbus-io.bigtcpd1.service' in unit
    # the eBPF observer's loader alone links libbpf (and libelf, and the kernel's BTF at a load), and
    # the daemon runs it where it was installed
    needed = {p: re.findall(r'\(NEEDED\)\s+Shared library: \[([^]]+)\]',
                            run_step(['readelf', '-d', str(dest / p)]).stdout)
              for p in ('usr/sbin/bigtcpd', 'usr/libexec/bigtcpd/bigtcpd-observer-loader')}
    assert not [n for n in needed['usr/sbin/bigtcpd'] if n.startswith(('libbpf', 'libelf'))], needed
    assert [n for n in needed['usr/libexec/bigtcpd/bigtcpd-observer-loader'] if n.startswith('libbpf')], needed
    assert b'/usr/libexec/bigtcpd/bigtcpd-observer-loader' in (dest / 'usr/sbin/bigtcpd').read_bytes()
    for name in ('bigtcpd.yaml', 'io.bigtcpd.Manager.varlink'):
        src = REPO / 'conf' / name
        got = dest / ('etc/bigtcpd' if name.endswith('.yaml') else 'usr/share/varlink') / name
        assert got.read_bytes() == src.read_bytes(), f'{got} differs from {src}'


def test_policy_never_overwritten(tree, tmp_path):
    """A second install keeps an operator's /etc/bigtcpd/bigtcpd.yaml; a missing one comes back.
    The real /etc is not touched (DESTDIR)."""
    real = Path('/etc/bigtcpd/bigtcpd.yaml')
    real_before = real.read_bytes() if real.exists() else None
    policy = tree['dest'] / 'etc/bigtcpd/bigtcpd.yaml'
    mine = '# the operator\'s own\nversion: 1\npolicies: []\n'
    policy.write_text(mine)
    cmd = ['meson', 'install', '-C', str(tree['build']), '--destdir', str(tree['dest']), '--no-rebuild']
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=T(120))
    assert r.returncode == 0, r.stderr
    assert policy.read_text() == mine, 'meson install overwrote the policy'
    policy.unlink()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=T(120))
    assert r.returncode == 0, r.stderr
    assert policy.read_bytes() == (REPO / 'conf/bigtcpd.yaml').read_bytes()
    assert (real.read_bytes() if real.exists() else None) == real_before, 'DESTDIR was not honoured'


def man(path, width=100):
    r = subprocess.run(['man', '--warnings', '-l', str(path)], capture_output=True, text=True,
                       env=dict(os.environ, MANWIDTH=str(width), MANROFFOPT='-rHY=0', PAGER='cat',
                                MANPAGER='cat', LC_ALL='C.UTF-8'), timeout=T(60))
    assert r.returncode == 0, f'man -l {path}: {r.stderr}'
    warnings = [l for l in r.stderr.splitlines() if l.strip()]
    assert not warnings, f'man -l {path} warns:\n' + '\n'.join(warnings)
    # Undo overstriking, should the formatter use it.
    return re.sub(r'.\x08', '', r.stdout)


def test_man_pages_render(tree):
    base = tree['dest'] / 'usr/share/man'
    for page, title, sections in (
            ('man8/bigtcpd.8', 'bigtcpd(8)', ('NAME', 'SYNOPSIS', 'OPTIONS', 'FILES', 'SIGNALS', 'INTERFACES',
                                               'SYSTEMD', 'EXIT STATUS', 'SEE ALSO')),
            ('man8/bigtcpctl.8', 'bigtcpctl(8)', ('NAME', 'SYNOPSIS', 'COMMANDS', 'OPTIONS', 'EXIT STATUS',
                                                   'EXAMPLES')),
            ('man5/bigtcpd.yaml.5', 'bigtcpd.yaml(5)', ('NAME', 'TOP-LEVEL KEYS', 'POLICY KEYS', 'MATCH', 'SIZES',
                                                         'ROLLBACK', 'GUARD COUNTERS', 'LIMITS', 'ERRORS',
                                                         'EXAMPLES'))):
        text = man(base / page)
        assert text.splitlines()[0].startswith(title), text[:200]
        for s in sections:
            assert re.search(rf'^{s}$', text, re.M), f'{page}: no section {s}'


def test_format_man_page_is_complete(tree):
    """bigtcpd.yaml(5) names every key the parser knows, every link counter, and the built-in
    defaults, taken from the parser's sources (daemon/policy*.c, lib/parse-util.c) so that a new
    key cannot go undocumented."""
    text = man(tree['dest'] / 'usr/share/man/man5/bigtcpd.yaml.5', width=200)
    # Words that the formatter hyphenated at a line end anyway are joined again.
    flat = re.sub(r'\s+', ' ', re.sub(r'\u2010\n\s*', '', text).replace('\u2010', '-'))
    sources = sorted((REPO / 'daemon').glob('policy*.c')) + [REPO / 'lib/parse-util.c']
    src = ''.join(f.read_text() for f in sources)
    keys = set()
    for table in re.findall(r'_keys\[[^\]]*\] = \{(.*?)\};', src, re.S):
        keys |= set(re.findall(r'"([a-z-]+)"', table))
    assert {'version', 'policies', 'name', 'hosts', 'kernel', 'match', 'rollback', 'max-parallel'} <= keys, keys
    for k in sorted(keys):
        assert f'{k}:' in flat, f'key {k} undocumented'
    fields = re.search(r'link_stats_fields\[\] = \{(.*?)\};', src, re.S).group(1)
    fields = re.findall(r'F\((\w+)\)', fields)
    assert 'tx_errors' in fields, fields
    for f in fields:
        assert f in flat, f'link.{f} undocumented'
    for word in ('device', 'loopback', 'default', 'max', 'legacy', '524280', '65536', '30s', '1s',
                 'link.tx_errors', 'link.rx_errors', 'Ip.InHdrErrors', 'Ip6.Ip6InHdrErrors', '/proc/net/snmp',
                 '/proc/net/netstat', '/proc/net/snmp6', '100000', 'guards: []'):
        assert word in flat, f'{word} not in bigtcpd.yaml(5)'
    # Every message the parser can give, with its placeholders as the page writes them.
    for fmt in set(re.findall(r'parser_error\(p, [^,]+,\s*"((?:[^"\\]|\\.)*)"', src)):
        words = [w for w in re.split(r'%[a-z]+|\\"', fmt) if w.strip()]
        for w in words:
            assert w.strip() in flat, f'error message part {w.strip()!r} (of {fmt!r}) undocumented'


def scd_examples(path):
    """The YAML examples (``` blocks that start with `version: 1`) of a scdoc page."""
    blocks = re.findall(r'^```\n(.*?)^```', Path(path).read_text(), re.S | re.M)
    return [b for b in blocks if b.startswith('version: 1')]


def check_config(path):
    return subprocess.run([str(helpers.BIN), '--check-config', '--config', str(path)], capture_output=True, text=True,
                          timeout=T(60))


def bigtcpctl_bin():
    """bigtcpctl next to the daemon under test: part of the product, so a test that needs it
    fails (never skips) when it is not built."""
    ctl = helpers.BIN.parent.parent / 'cli' / 'bigtcpctl'
    if not ctl.exists():
        pytest.fail(f'{ctl} not built (meson builds it with the daemon)')
    return ctl


def test_man_examples_validate(tmp_path):
    examples = scd_examples(REPO / 'man/bigtcpd.yaml.5.scd')
    assert len(examples) >= 3
    for i, text in enumerate(examples):
        f = tmp_path / f'example{i}.yaml'
        f.write_text(text)
        r = check_config(f)
        assert r.returncode == 0, f'example {i} of bigtcpd.yaml(5) does not validate:\n{r.stderr}\n{text}'


def test_fleet_policy_validates():
    for f in ('conf/fleet.yaml', 'conf/bigtcpd.yaml'):
        r = check_config(REPO / f)
        assert r.returncode == 0, f'{f}: {r.stderr}'
    ctl = bigtcpctl_bin()
    r = subprocess.run([str(ctl), 'validate', str(REPO / 'conf/fleet.yaml')], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_daemonset_manifest(tmp_path):
    docs = [d for d in yaml.safe_load_all((REPO / 'conf/k8s/bigtcpd-daemonset.yaml').read_text()) if d]
    kinds = {d['kind']: d for d in docs}
    assert set(kinds) == {'ConfigMap', 'DaemonSet'}, list(kinds)
    ds, cm = kinds['DaemonSet'], kinds['ConfigMap']
    assert ds['apiVersion'] == 'apps/v1'
    spec = ds['spec']['template']['spec']
    assert spec['hostNetwork'] is True
    assert ds['spec']['selector']['matchLabels'].items() <= ds['spec']['template']['metadata']['labels'].items()
    (c,) = spec['containers']
    caps = c['securityContext'].get('capabilities', {}).get('add', [])
    assert c['securityContext'].get('privileged') or 'NET_ADMIN' in caps, c['securityContext']
    mounts = {m['mountPath']: m['name'] for m in c['volumeMounts']}
    volumes = {v['name']: v for v in spec['volumes']}
    assert volumes[mounts['/etc/bigtcpd']]['configMap']['name'] == cm['metadata']['name']
    assert volumes[mounts['/run/bigtcpd']]['hostPath']['path'] == '/run/bigtcpd'
    # The image of this release (scripts/image.sh tags it with the version), the capabilities of
    # today's daemon and of the eBPF observer, both probes, the metrics port and its annotations
    version = re.search(r"version : '([^']+)'", (REPO / 'meson.build').read_text()).group(1)
    assert c['image'] == f'localhost/bigtcpd:{version}', c['image']
    assert {'NET_ADMIN', 'SYS_ADMIN', 'NET_RAW', 'BPF', 'PERFMON'} <= set(caps), caps
    assert c['securityContext']['capabilities']['drop'] == ['ALL']
    assert c['livenessProbe']['exec']['command'] and c['readinessProbe']['exec']['command']
    args = c['args']
    listen = args[args.index('--metrics-listen') + 1]
    port = int(listen.rsplit(':', 1)[1])
    assert {'name': 'metrics', 'containerPort': port, 'protocol': 'TCP'} in c['ports'], c['ports']
    notes = ds['spec']['template']['metadata']['annotations']
    assert notes['prometheus.io/scrape'] == 'true' and notes['prometheus.io/port'] == str(port), notes
    pm = yaml.safe_load((REPO / 'conf/k8s/bigtcpd-podmonitor.yaml').read_text())
    assert pm['spec']['podMetricsEndpoints'][0]['port'] == 'metrics'
    assert pm['spec']['selector']['matchLabels'] == ds['spec']['selector']['matchLabels']
    # The ConfigMap's policy is one the daemon takes.
    f = tmp_path / 'bigtcpd.yaml'
    f.write_text(cm['data']['bigtcpd.yaml'])
    r = check_config(f)
    assert r.returncode == 0, r.stderr


def test_ansible_playbook():
    plays = yaml.safe_load((REPO / 'conf/ansible/bigtcpd.yml').read_text())
    assert isinstance(plays, list) and plays
    tasks = [t for p in plays for t in p['tasks']]
    copies = [t['ansible.builtin.copy'] for t in tasks if 'ansible.builtin.copy' in t]
    assert copies and all(c.get('validate', '').startswith('bigtcpctl validate') for c in copies), copies
    assert any(c['dest'] == '{{ bigtcpd_policy_path }}' for c in copies)
    assert plays[0]['vars']['bigtcpd_policy_path'] == '/etc/bigtcpd/bigtcpd.yaml'
    # --check --diff previews with what check mode has: the controller's file on stdin, not a
    # file staged on the host (check mode stages nothing)
    commands = [t for t in tasks if 'ansible.builtin.command' in t]
    for verb in ('validate', 'plan'):
        t = next(t for t in commands if f' {verb} -' in t['ansible.builtin.command'])
        assert t['check_mode'] is False and 'bigtcpd_policy' in t['args']['stdin'], t
    assert not any('remote_src' in c for c in copies), 'the installed file is the one validated'
    handlers = [h for p in plays for h in p.get('handlers', [])]
    assert any('bigtcpctl reload' in h.get('ansible.builtin.command', '') for h in handlers), handlers


# --- bash completion ----------------------------------------------------------------------------

def complete(words, cword=None, with_bash_completion=False, path_dir=None):
    """COMPREPLY of the shipped completion for `words` (the word under the cursor last)."""
    cword = len(words) - 1 if cword is None else cword
    line = ' '.join(words)
    script = '\n'.join([
        'source /usr/share/bash-completion/bash_completion' if with_bash_completion else '',
        f'source {shlex.quote(str(REPO / "completion/bigtcpctl"))}',
        f'COMP_WORDS=({" ".join(shlex.quote(w) for w in words)})',
        f'COMP_CWORD={cword}',
        f'COMP_LINE={shlex.quote(line)}',
        f'COMP_POINT={len(line)}',
        '_bigtcpctl bigtcpctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"',
        'printf "%s\\n" "${COMPREPLY[@]}"',
    ])
    env = dict(os.environ)
    if path_dir:
        env['PATH'] = f'{path_dir}:{env["PATH"]}'
    r = subprocess.run(['bash', '--norc', '--noprofile', '-c', script], capture_output=True, text=True, env=env,
                       timeout=T(30))
    assert r.returncode == 0 and not r.stderr.strip(), f'completion failed: {r.stderr}'
    return sorted(l for l in r.stdout.splitlines() if l)


@pytest.mark.parametrize('with_bc', [False, True], ids=['plain', 'bash-completion'])
def test_completion_commands_and_options(with_bc, tmp_path):
    if with_bc and not Path('/usr/share/bash-completion/bash_completion').exists():
        pytest.fail('bash-completion not installed (scripts/setup.sh installs it)')
    assert complete(['bigtcpctl', 're'], with_bash_completion=with_bc) == ['reload', 'retry', 'revert']
    assert complete(['bigtcpctl', ''], with_bash_completion=with_bc) == sorted(
        'status list show plan reload rollback retry try confirm revert watch monitor validate metrics help'.split())
    assert complete(['bigtcpctl', '--j'], with_bash_completion=with_bc) == ['--json', '--json=off', '--json=pretty',
                                                                             '--json=short']
    assert complete(['bigtcpctl', 'status', '--no'], with_bash_completion=with_bc) == ['--no-legend', '--no-pager']
    assert complete(['bigtcpctl', 'plan', '--a'], with_bash_completion=with_bc) == ['--all']
    assert complete(['bigtcpctl', 'status', '--a'], with_bash_completion=with_bc) == []
    assert complete(['bigtcpctl', 'try', 'x.yaml', '--t'], with_bash_completion=with_bc) == ['--timeout', '--to']
    assert complete(['bigtcpctl', 'status', '--t'], with_bash_completion=with_bc) == []
    assert complete(['bigtcpctl', 'watch', 'x', '--f'], with_bash_completion=with_bc) == ['--for', '--full']
    assert complete(['bigtcpctl', 'status', '--f'], with_bash_completion=with_bc) == ['--full']
    assert {'-l', '-q', '--quiet', '--full'} <= set(complete(['bigtcpctl', '-'], with_bash_completion=with_bc))
    assert complete(['bigtcpctl', 'watch', '--for', ''], with_bash_completion=with_bc) == ['10s', '1min', '30s', '5min']
    # --to: the places a confirm may install, not the whole file system
    assert complete(['bigtcpctl', 'try', 'x.yaml', '--to', ''], with_bash_completion=with_bc) == [
        '/etc/bigtcpd/bigtcpd.d/', '/etc/bigtcpd/bigtcpd.yaml']
    assert complete(['bigtcpctl', 'try', 'x.yaml', '--to', '/'], with_bash_completion=with_bc) == [
        '/etc/bigtcpd/bigtcpd.d/', '/etc/bigtcpd/bigtcpd.yaml']
    assert complete(['bigtcpctl', 'try', 'x.yaml', '--to', '/etc/bigtcpd/bigtcpd.d'],
                    with_bash_completion=with_bc) == ['/etc/bigtcpd/bigtcpd.d/']
    (tmp_path / 'a.yaml').write_text('')
    (tmp_path / 'b.txt').write_text('')
    got = complete(['bigtcpctl', 'validate', f'{tmp_path}/'], with_bash_completion=with_bc)
    assert f'{tmp_path}/a.yaml' in got and f'{tmp_path}/b.txt' not in got, got
    got = complete(['bigtcpctl', 'try', '--timeout', '30s', f'{tmp_path}/'], with_bash_completion=with_bc)
    assert f'{tmp_path}/a.yaml' in got and f'{tmp_path}/b.txt' not in got, got
    # No daemon: nothing, silently.
    assert complete(['bigtcpctl', '--socket', f'{tmp_path}/none', 'show', ''], with_bash_completion=with_bc,
                    path_dir=bigtcpctl_bin().parent) == []


def test_completion_device_names(ns, confdir, daemon):
    ctl = bigtcpctl_bin()
    veth(ns, 'va', 'vb')
    cfg = confdir / 'bigtcpd.yaml'
    cfg.write_text(policy_text('''
        version: 1
        policies:
          - name: veth
            match: {kind: [veth]}
            ipv6: {gso-max-size: 100000}
        '''))
    d = daemon(ns, cfg)
    sock = str(d.runtime_dir / 'io.bigtcpd.Manager')
    assert complete(['bigtcpctl', '--socket', sock, 'show', 'v'], path_dir=ctl.parent) == ['va', 'vb']
    assert complete(['bigtcpctl', f'--socket={sock}', 'retry', ''], path_dir=ctl.parent) == ['--all', 'lo', 'va', 'vb']
    assert complete(['bigtcpctl', '-s', sock, 'rollback', ''], path_dir=ctl.parent) == ['--all', 'lo', 'va', 'vb']
    # One device only.
    assert complete(['bigtcpctl', '--socket', sock, 'show', 'va', ''], path_dir=ctl.parent) == []
