#!/usr/bin/env python3
"""check-layering.py — the layering of daemon/ and cli/, kept: every file belongs to a layer,
includes only headers of its own layer or lower ones, and no two modules (a .c file and its .h)
include each other, directly or through others. Lower layers reach up only through ops structs
and events, never through a header. The transports keep no pending call of their own: what
completes later is an operation (operation.h). Run by meson test; prints every breach and exits 1.

    check-layering.py SOURCE-ROOT
    check-layering.py --self-test    (a clean tree passes; each breach planted in it is found as
                                      exactly what it is: SELF_TEST_CASES)
"""

import re
import sys
from pathlib import Path

# From the bottom up. The review's target layout, with the parts as they are named here.
LAYERS = [
    ('lib: base', ['util', 'log', 'linux-compat', 'utf8', 'intern', 'pool', 'json-scan', 'json-writer', 'bpf-map', 'btf-enum']),
    ('lib: protocols and children', ['parse-util', 'varlink', 'varlink-call', 'varlink-buffer', 'dbus', 'sandbox',
                                     'worker', 'closer', 'durable', 'packet-maker']),
    ('pure', ['sizes', 'log-fields', 'counters', 'netlink-link', 'policy', 'policy-yaml', 'policy-files',
              'policy-parse', 'policy-record', 'policy-watch', 'policy-match', 'reconcile', 'device', 'route',
              'ethtool', 'guard', 'netlink-stats', 'netlink', 'auto-size', 'auto-queue', 'json-read', 'metrics',
              'observer', 'observer.bpf', 'observer-map', 'observer-kernel', 'observer-loader']),
    ('engine parts', ['event', 'writer', 'rollout', 'probation', 'evidence', 'state', 'state-format',
                      'state-read']),
    ('engine', ['engine']),
    ('decisions', ['auto-apply', 'device-lifecycle', 'apply']),
    ('kernel side', ['sync']),
    ('namespace', ['netns']),
    ('policy reload', ['policy-reload', 'policy-try']),
    ('namespaces', ['netns-set', 'netns-set-scan', 'netns-set-problem', 'netns-set-peer', 'netns-peek']),
    ('control', ['control', 'control-json', 'control-metrics', 'control-plan', 'operation']),
    ('transports', ['manager-notify', 'manager-varlink', 'manager-dbus', 'metrics-http']),
    ('composition root', ['manager', 'main']),
]
# The layers of lib/ are the bottom ones, up to this module's: lib/ holds them and nothing else, and
# includes nothing above them (the headers of include/ are everybody's).
LIB_TOP = 'packet-maker'
SOURCE_DIRS = ('lib', 'daemon')
INCLUDE_ONLY = {'linux-compat'}
# The protocol halves and the worker pool know nothing of bigtcpd.
ONLY = {'varlink': {'util', 'log'}, 'varlink-call': {'util', 'log', 'varlink'},
        'varlink-buffer': {'util', 'log', 'varlink'}, 'dbus': {'util', 'log'}, 'sandbox': {'util'},
        'closer': {'util', 'sandbox'},
        'packet-maker': {'util', 'sandbox', 'closer'}, 'worker': {'util', 'log', 'sandbox'}, 'durable': {'util', 'sandbox'}}
# The running policy is one for every namespace, held above them all by the reloader (a try's
# previous one by the try): reload and try know no engine and no namespace, and reach what runs
# the policy through ReloaderOps.
APART = {m: {'engine', 'apply', 'device-lifecycle', 'sync', 'netns', 'netns-set'} for m in ('policy-reload', 'policy-try')}
# bigtcpctl shares the parser and the names of things, nothing of the engine.
CLI_MAX_LAYER = 'pure'
GENERATED = {'varlink-interface', 'observer.skel'}
# A module carved into several files shares its internals through one private header,
# <module>-internal.h: a part of the module itself (it includes the module's own header), which only
# the module's files (<module>.c, <module>-*.c) include.
INTERNAL = '-internal'


def module_of(stem, rank):
    """The module a file of this stem belongs to: its own, or the one whose private header it is."""
    if stem.endswith(INTERNAL) and stem[:-len(INTERNAL)] in rank:
        return stem[:-len(INTERNAL)]
    return stem

INCLUDE = re.compile(r'^\s*#\s*include\s+(?:"([^"]+)"|<([^>]+)>)', re.M)
# Where the compiler's -I finds the project's headers (meson.build: include_directories), before
# the system's: an #include <…> of one of them is the project's header too.
INCLUDE_DIRS = ['include', 'lib', 'daemon']


def includes(path, root):
    """The headers `path` includes that can be the project's: every "…" one, and each <…> one
    that names a file of INCLUDE_DIRS."""
    for quoted, angled in INCLUDE.findall(path.read_text()):
        if quoted:
            yield quoted
        elif any((root / d / angled).is_file() for d in INCLUDE_DIRS):
            yield angled
# What only operation.c calls: the control calls that complete later or change sizes (and their
# cancels). A transport that called them would keep the pending call itself.
TRANSPORTS = ('manager-varlink', 'manager-dbus')
PENDING_CALLS = ('control_read', 'control_request_cancel', 'control_plan', 'control_validate', 'control_job_cancel',
                 'control_watch', 'control_watch_cancel', 'control_reload', 'control_try', 'control_confirm',
                 'control_revert', 'control_rollback', 'control_retry')
# A namespace's sockets, engine and sync are made in one place, for bigtcpd's own namespace and
# every other one alike (the review's step 1: FRR's zebra_ns_new for the default and the others).
NAMESPACE_PARTS = ('netlink_new', 'engine_new', 'sync_new')
NAMESPACE_MAKER = 'netns'
# … and a namespace's engine is lent the policy it runs there alone (netns_run_policy), for
# bigtcpd's own namespace too: no engine keeps a policy of its own.
POLICY_LENT = re.compile(r'(?:\bengine|\be)->policy\s*=(?!=)')


# A device's step and records (Device.life, Device.record: its state, the hold, the originals, the
# rollback target) are changed by the lifecycle alone, so that the write's transaction can undo
# what it did in one place; device.c makes the device. Others read them.
LIFECYCLE_GROUPS = ('life', 'record')
LIFECYCLE_OWNERS = {'device-lifecycle', 'device'}
LIFECYCLE_WRITE = re.compile(r'(?:\+\+|--)\s*[\w\]\[()>.-]*(?:->|\.)(?:' + '|'.join(LIFECYCLE_GROUPS) +
                             r')\b|(?:->|\.)(' + '|'.join(LIFECYCLE_GROUPS) +
                             r')((?:\.\w+|\[[^]]*\])*)\s*(?:[-+*/|&^]?=(?!=)|\+\+|--)')


def check(root):
    rank = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}
    layer_name = {i: name for i, (name, _) in enumerate(LAYERS)}
    cli_max = [name for name, _ in LAYERS].index(CLI_MAX_LAYER)
    problems = []
    edges = {}

    daemon = sorted(p for d in SOURCE_DIRS if (root / d).is_dir()
                    for p in (root / d).iterdir() if p.suffix in ('.c', '.h'))
    in_lib = {p.stem for p in daemon if p.parent.name == 'lib'}
    for path in daemon:
        mod = module_of(path.stem, rank)
        where = f'{path.parent.name}/{path.name}'
        if mod not in rank:
            problems.append(f'{where}: in no layer; add "{mod}" to LAYERS in {Path(__file__).name}')
            continue
        is_lib = path.parent.name == 'lib'
        if is_lib != (rank[mod] <= rank[LIB_TOP]):
            problems.append(f'{where}: in a layer of daemon/ ("{layer_name[rank[mod]]}"); lib/ holds the layers up '
                            f'to "{layer_name[rank[LIB_TOP]]}" alone' if is_lib else
                            f'{where}: in a layer of lib/ ("{layer_name[rank[mod]]}"); move it there')
        for inc in includes(path, root):
            dep = module_of(Path(inc).stem, rank)
            if dep != Path(inc).stem and path.stem != dep and not path.stem.startswith(dep + '-'):
                problems.append(f'{where}: includes {inc}, the private header of {dep}, which only its own files '
                                f'({dep}.c, {dep}-*.c) include')
            if dep in GENERATED or dep == mod:
                continue
            if dep not in rank:
                continue  # a header of the project's include/ checked below, or a system one
            edges.setdefault(mod, set()).add(dep)
            if is_lib and dep not in in_lib and dep not in INCLUDE_ONLY:
                problems.append(f'{where}: includes {inc}; lib/ knows nothing of bigtcpd and includes only lib/ '
                                f'and include/')
            if dep in APART.get(mod, ()):
                problems.append(f'{path.parent.name}/{path.name}: includes {inc}; the running policy is above every '
                                f'namespace: {mod} reaches them through ReloaderOps')
            if mod in ONLY and dep not in ONLY[mod]:
                problems.append(f'{path.parent.name}/{path.name}: includes {inc}; the protocol half includes only '
                                f'{", ".join(sorted(ONLY[mod]))}')
            if rank[dep] > rank[mod]:
                problems.append(f'{path.parent.name}/{path.name} ({layer_name[rank[mod]]}) includes {inc} '
                                f'({layer_name[rank[dep]]}): calls must point down')

    # Outside the files that define them, the constructors of a namespace's parts are called by
    # netns.c alone.
    for path in daemon:
        if path.suffix != '.c' or path.stem == NAMESPACE_MAKER:
            continue
        text = re.sub(r'/\*.*?\*/', '', path.read_text(), flags=re.S)
        for part in NAMESPACE_PARTS:
            if path.stem == part.rsplit('_', 1)[0]:
                continue  # its own definition
            if re.search(rf'\b{part}\s*\(', text):
                problems.append(f'{path.parent.name}/{path.name} calls {part}(): a namespace\'s netlink, engine and sync are '
                                f'made by {NAMESPACE_MAKER}.c alone (netns_new), for bigtcpd\'s own namespace too')
        if POLICY_LENT.search(text):
            problems.append(f'{path.parent.name}/{path.name} sets an engine\'s policy: every namespace runs the reloader\'s, '
                            f'lent to its engine by {NAMESPACE_MAKER}.c alone (netns_run_policy)')

    for path in daemon:
        if path.suffix != '.c' or path.stem in LIFECYCLE_OWNERS:
            continue
        text = re.sub(r'/\*.*?\*/', '', path.read_text(), flags=re.S)
        for m in LIFECYCLE_WRITE.finditer(text):
            line = text.count('\n', 0, m.start()) + 1
            problems.append(f'{path.parent.name}/{path.name}:{line} changes a device\'s {m.group(0).strip()}: a device\'s life and '
                            f'record are changed by device-lifecycle.c alone (ask it with a step of device-lifecycle.h)')

    # The transports keep no pending-call lifetimes of their own: a call that is not answered at
    # once is an operation (operation.h), which owns what runs for it and goes with the call.
    for path in daemon:
        if path.stem not in TRANSPORTS:
            continue
        text = re.sub(r'/\*.*?\*/', '', path.read_text(), flags=re.S)
        for m in re.finditer(r'\bstruct\s+(Pending\w*)', text):
            problems.append(f'{path.parent.name}/{path.name} defines struct {m.group(1)}: a transport keeps no pending call of '
                            f'its own; run an operation (operation.h), which goes with the call')
            break
        for fn in PENDING_CALLS:
            if re.search(rf'\b{fn}\s*\(', text):
                problems.append(f'{path.parent.name}/{path.name} calls {fn}(): transports run operations (operation.h), '
                                f'which own what runs for a call')

    for path in sorted((root / 'cli').glob('*.[ch]')):
        for inc in includes(path, root):
            dep = Path(inc).stem
            if dep in rank and rank[dep] > cli_max:
                problems.append(f'cli/{path.name} includes {inc} ({layer_name[rank[dep]]}): bigtcpctl shares '
                                f'only the {CLI_MAX_LAYER} layer of the daemon')

    # No circle between modules, also within a layer.
    state = {}

    def visit(m, stack):
        state[m] = 'open'
        for d in sorted(edges.get(m, ())):
            if state.get(d) == 'open':
                cycle = stack[stack.index(d):] + [d] if d in stack else [m, d]
                problems.append('include circle: ' + ' → '.join(cycle))
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 'done'

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])

    return problems, len(daemon)


# The self-test: a small tree that keeps every rule, then one breach planted in it at a time, with
# exactly what the check must say about it (and nothing else). A new rule adds its case here.
CLEAN_TREE = {
    'lib/util.h': '',
    'lib/util.c': '#include <util.h>\n#include <stdio.h>\n',
    'daemon/device.h': '#include "util.h"\n',
    'daemon/device.c': '#include "device.h"\n#include <errno.h>\n',
    'daemon/writer.h': '#include "device.h"\n',
    'daemon/writer.c': '#include "writer.h"\n#include "writer-internal.h"\n#include <event2/event.h>\n',
    'daemon/writer-internal.h': '#include "writer.h"\n',
    'daemon/engine.h': '#include "writer.h"\n',
    'daemon/control.h': '#include "engine.h"\n',
    'lib/varlink.h': '#include "util.h"\n',
    'lib/varlink.c': '#include "varlink.h"\n#include "log.h"\n',
    'lib/log.h': '',
    'daemon/device-lifecycle.h': '#include "engine.h"\n',
    'daemon/device-lifecycle.c': '#include "device-lifecycle.h"\n',
    'daemon/apply.h': '#include "engine.h"\n',
    'daemon/apply.c': '#include "apply.h"\n#include "device-lifecycle.h"\n',
    'daemon/policy-reload.h': '#include "device.h"\n',
    'daemon/policy-reload.c': '#include "policy-reload.h"\n',
    'daemon/netns.c': '#include "engine.h"\nn->engine->policy = set;\n',
    'daemon/manager-varlink.c': '#include "control.h"\n',
    'cli/x.c': '#include "device.h"\n#include <util.h>\n',
}

SELF_TEST_CASES = [
    ('a call up two layers', {'daemon/writer.c': '#include "writer.h"\n#include "control.h"\n'},
     ['daemon/writer.c (engine parts) includes control.h (control): calls must point down',
      'include circle: engine → writer → control → engine']),
    ('a call up, written #include <…>', {'daemon/writer.c': '#include "writer.h"\n#include <control.h>\n'},
     ['daemon/writer.c (engine parts) includes control.h (control): calls must point down',
      'include circle: engine → writer → control → engine']),
    ('a protocol half that knows of bigtcpd', {'lib/varlink.c': '#include "varlink.h"\n#include "device.h"\n'},
     ['lib/varlink.c: includes device.h; lib/ knows nothing of bigtcpd and includes only lib/ and include/',
      'lib/varlink.c: includes device.h; the protocol half includes only log, util',
      'lib/varlink.c (lib: protocols and children) includes device.h (pure): calls must point down']),
    ('a circle within a layer', {'daemon/device-lifecycle.c': '#include "device-lifecycle.h"\n#include "apply.h"\n'},
     ['include circle: apply → device-lifecycle → apply']),
    ('a file of lib/ kept in daemon/', {'daemon/pool.c': ''},
     ['daemon/pool.c: in a layer of lib/ ("lib: base"); move it there']),
    ('a file of the daemon put in lib/', {'lib/device.c': ''},
     ['lib/device.c: in a layer of daemon/ ("pure"); lib/ holds the layers up to "lib: protocols and children" '
      'alone']),
    ('another module\'s private header', {'daemon/apply.c': '#include "apply.h"\n#include "device-lifecycle.h"\n'
                                                               '#include "writer-internal.h"\n'},
     ['daemon/apply.c: includes writer-internal.h, the private header of writer, which only its own files '
      '(writer.c, writer-*.c) include']),
    ('a file in no layer', {'daemon/frobnicate.c': ''},
     ['daemon/frobnicate.c: in no layer; add "frobnicate" to LAYERS in check-layering.py']),
    ('bigtcpctl reaching into the engine', {'cli/x.c': '#include "engine.h"\n'},
     ['cli/x.c includes engine.h (engine): bigtcpctl shares only the pure layer of the daemon']),
    ('bigtcpctl reaching into the engine, written #include <…>', {'cli/x.c': '#include <engine.h>\n'},
     ['cli/x.c includes engine.h (engine): bigtcpctl shares only the pure layer of the daemon']),
    ('a transport that keeps a pending call',
     {'daemon/manager-varlink.c': '#include "control.h"\ntypedef struct PendingJob { int x; } PendingJob;\n'
                                  'r = control_plan(c, 0, p, s, fn, j, &j->job);\n'},
     ['daemon/manager-varlink.c defines struct PendingJob: a transport keeps no pending call of its own; run an '
      'operation (operation.h), which goes with the call',
      'daemon/manager-varlink.c calls control_plan(): transports run operations (operation.h), which own what '
      'runs for a call']),
    ('a second place that makes a namespace\'s engine',
     {'daemon/apply.c': '#include "apply.h"\n#include "device-lifecycle.h"\nr = engine_new(b, &c, NULL, -1, &t, &w, &p, &e);\n'},
     ["daemon/apply.c calls engine_new(): a namespace's netlink, engine and sync are made by netns.c alone "
      "(netns_new), for bigtcpd's own namespace too"]),
    ('the reloader reaching into an engine', {'daemon/policy-reload.c': '#include "policy-reload.h"\n#include "engine.h"\n'},
     ['daemon/policy-reload.c: includes engine.h; the running policy is above every namespace: policy-reload '
      'reaches them through ReloaderOps']),
    ('a policy given to an engine elsewhere',
     {'daemon/apply.c': '#include "apply.h"\n#include "device-lifecycle.h"\ne->policy = set;\n'},
     ["daemon/apply.c sets an engine's policy: every namespace runs the reloader's, lent to its engine by "
      "netns.c alone (netns_run_policy)"]),
    ('a decision that moves the rollback target itself',
     {'daemon/apply.c': '#include "apply.h"\n#include "device-lifecycle.h"\nif (d->life.held == x)\n'
                        '        d->record.last_good = d->life.desired;\n'},
     ["daemon/apply.c:4 changes a device's ->record.last_good =: a device's life and record are changed by "
      "device-lifecycle.c alone (ask it with a step of device-lifecycle.h)"]),
    ('a decision that counts in a device\'s record',
     {'daemon/apply.c': '#include "apply.h"\n#include "device-lifecycle.h"\nd->record.proven.n++;\n'},
     ["daemon/apply.c:3 changes a device's ->record.proven.n++: a device's life and record are changed by "
      "device-lifecycle.c alone (ask it with a step of device-lifecycle.h)"]),
]


def self_test():
    """The clean tree passes; each planted breach is found as exactly what it is."""
    import tempfile
    failures = []
    for what, change, expect in [('the clean tree', {}, [])] + SELF_TEST_CASES:
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            for d in ('lib', 'daemon', 'cli', 'include'):
                (t / d).mkdir()
            for name, text in {**CLEAN_TREE, **change}.items():
                (t / name).write_text(text)
            problems, _ = check(t)
        if problems != expect:
            failures.append(f'{what}: expected {expect}, found {problems}')
    if failures:
        print('check-layering --self-test:\n  ' + '\n  '.join(failures))
        return 1
    print(f'check-layering --self-test: the clean tree passes, {len(SELF_TEST_CASES)} planted breaches found '
          f'as planted')
    return 0


def main():
    if sys.argv[1:] == ['--self-test']:
        return self_test()
    problems, n = check(Path(sys.argv[1]))
    if problems:
        print('\n'.join(problems))
        print(f'check-layering: {len(problems)} problems')
        return 1
    print(f'check-layering: {n} files of lib/ and daemon/ in {len(LAYERS)} layers, calls point down')
    return 0


if __name__ == '__main__':
    sys.exit(main())
