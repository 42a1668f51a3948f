#!/usr/bin/python3
"""timeline.py FILE [N] — where a run's wall time went, from the file that BT_TEST_TIMELINE=FILE
made conftest.py write (one line per test phase: WORKER START END PHASE NODEID): each process's
first start, last end and busy seconds; the N longest tests (default 25) with their process; the
seconds of each module. What a process did last is where a parallel run's tail comes from."""

import collections
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit('usage: timeline.py FILE [N]')
    rows = []
    with open(sys.argv[1]) as f:
        for line in f:
            worker, start, end, phase, nodeid = line.rstrip('\n').split(' ', 4)
            rows.append((worker, float(start), float(end), phase, nodeid))
    if not rows:
        sys.exit(f'{sys.argv[1]}: no tests')
    n = int(sys.argv[2]) if len(sys.argv) == 3 else 25
    t0 = min(r[1] for r in rows)
    by_worker = collections.defaultdict(list)
    per_test = collections.Counter()
    where = {}
    for r in rows:
        by_worker[r[0]].append(r)
        per_test[r[4]] += r[2] - r[1]
        where[r[4]] = r[0]
    print('process  first   last   busy  tests   (seconds from the first test\'s start)')
    for w in sorted(by_worker):
        rs = by_worker[w]
        print(f'{w:7} {min(r[1] for r in rs) - t0:6.0f} {max(r[2] for r in rs) - t0:6.0f} '
              f'{sum(r[2] - r[1] for r in rs):6.0f} {len({r[4] for r in rs}):6}')
    last = max(rows, key=lambda r: r[2])
    print(f'last to end: {last[4]} ({last[0]}, {last[2] - t0:.0f} s)')
    print(f'\nthe {n} longest tests (setup, call and teardown):')
    for nodeid, s in per_test.most_common(n):
        print(f'{s:7.1f} {where[nodeid]:7} {nodeid}')
    modules = collections.Counter()
    for nodeid, s in per_test.items():
        modules[nodeid.split('::')[0]] += s
    print('\nseconds by module:')
    for m, s in modules.most_common():
        print(f'{s:7.1f} {m}')


if __name__ == '__main__':
    main()
