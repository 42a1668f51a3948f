"""canary.py — what the canary tests share: the fleet file, hosts (machine ids and the files that
stand for /etc/machine-id), and the cohort of bigtcpd.yaml(5) written again from its description,
independently of the daemon's C."""

import hashlib
import os

import pytest

CANARY = 'web-ipv4-canary'

# IPv4 BIG TCP on N % of the web hosts; the other web hosts keep IPv6 BIG TCP alone (their IPv4
# sizes stay as the devices have them).
FLEET = '''\
version: 1
policies:
  - name: web-ipv4-canary
    hosts: ["web-*"]
    match: {kind: [veth]}
    ipv6: {gso-max-size: 185000, gro-max-size: 185000}
    ipv4: {gso-max-size: 185000, gro-max-size: 185000}
    rollout: {hosts-percent: PERCENT}
  - name: web
    hosts: ["web-*"]
    match: {kind: [veth]}
    ipv6: {gso-max-size: 185000, gro-max-size: 185000}
'''


def fleet(percent):
    return FLEET.replace('PERCENT', str(percent))


# --- the documented cohort, written again from bigtcpd.yaml(5) --------------------------------

M64 = (1 << 64) - 1


def _fnv1a64(h, data):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & M64
    return h


def _fmix64(k):
    k ^= k >> 33
    k = (k * 0xff51afd7ed558ccd) & M64
    k ^= k >> 33
    k = (k * 0xc4ceb9fe1a85ec53) & M64
    return k ^ (k >> 33)


def cohort(policy, machine_id=None, hostname=''):
    kind, key = ('machine-id', machine_id) if machine_id else ('hostname', hostname.lower())
    h = _fnv1a64(0xcbf29ce484222325, b'bigtcpd-cohort\0' + kind.encode() + b'\0' + key.encode() + b'\0'
                 + policy.encode())
    return ((_fmix64(h) >> 32) * 100) >> 32


def machine_id_of(i):
    """Host i's machine id: 32 hex digits, the same on every run (counts in the report repeat)."""
    return hashlib.sha256(f'bigtcpd-test-host-{i}'.encode()).hexdigest()[:32]


def host_file(tmp_path, machine_id):
    f = tmp_path / f'machine-id-{machine_id}'
    f.write_text(machine_id + '\n')
    f.chmod(0o444)
    return f


def pick_ids(n, inside, percent=50):
    """n machine ids whose cohort for the canary is below `percent` (inside) or not."""
    out, i = [], 0
    while len(out) < n:
        mid = machine_id_of(10000 + i)
        if (cohort(CANARY, mid) < percent) == inside:
            out.append(mid)
        i += 1
    return out


def needs_machine_id():
    # A file can only be bind-mounted over a file: the tests never create /etc/machine-id.
    if not os.path.isfile('/etc/machine-id'):
        pytest.skip('no /etc/machine-id on this machine to bind-mount over')
