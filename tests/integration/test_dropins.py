"""The standard policy paths (under BIGTCPD_ROOT): the main file, then drop-ins from
/etc, /run and /usr/lib (same basename: /etc over /run over /usr/lib), and a drop-in that
appears at run time is picked up by inotify."""

import nl
from helpers import policy_text, veth, write_file_atomic, T, at


def gro_policy(name, glob, gro):
    return policy_text(f'''
        version: 1
        policies:
          - name: {name}
            match: {{name: ["{glob}"]}}
            ipv6: {{gro-max-size: {gro}}}
        ''')


def test_dropin_precedence_and_new_dropin(ns, daemon, tmp_path):
    root = tmp_path / 'root'
    etc, run, lib = (root / 'etc/bigtcpd/bigtcpd.d', root / 'run/bigtcpd/bigtcpd.d',
                     root / 'usr/lib/bigtcpd/bigtcpd.d')
    for d in (etc, run, lib):
        d.mkdir(parents=True)
    (root / 'etc/bigtcpd/bigtcpd.yaml').write_text(gro_policy('main', 'v*', 100000))
    (lib / '10-w.yaml').write_text(gro_policy('lib-w', 'w*', 110000))   # shadowed by /etc's
    (etc / '10-w.yaml').write_text(gro_policy('etc-w', 'w*', 120000))
    (lib / '20-u.yaml').write_text(gro_policy('lib-u', 'u*', 115000))   # only in /usr/lib
    (run / '30-v.yaml').write_text(gro_policy('run-v', 'v*', 125000))   # main file comes first
    for a, b in (('v0', 'v1'), ('w0', 'w1'), ('u0', 'u1'), ('x0', 'x1')):
        veth(ns, a, b)

    d = daemon(ns, None, env={'BIGTCPD_ROOT': str(root)})
    links = nl.read_links(ns)
    gro = {n: nl.sizes_of(links[n])[1] for n in ('v0', 'w0', 'u0', 'x0')}
    assert gro == {'v0': 100000, 'w0': 120000, 'u0': 115000, 'x0': 65536}, gro

    # A new drop-in in /run is seen without SIGHUP.
    d.mark()
    write_file_atomic(run / '40-x.yaml', gro_policy('run-x', 'x*', 130000))
    d.wait_notify('RELOADING=1')
    d.wait_notify('READY=1')
    nl.wait_links(ns, at({'x0': (65536, 130000, 65536, 65536)}), T(10), 'new drop-in applied')
    d.stop()
