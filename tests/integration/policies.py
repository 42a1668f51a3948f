"""policies.py — the policies the integration tests and the benches share: one policy that puts
its devices at 185000 (BIG TCP's usual size, above the 65536 of the kernel's default), written
out here once. Only the standard library: the benches (tests/bench/) import it too."""

SIZE = 185000


def standard_policy(name='veth', match='{kind: [veth]}', size=SIZE, ipv4=True, guards=None, rollback=None):
    """A policy file with one policy, `name`, for the devices of `match` (a YAML mapping, flow
    style), at `size` for IPv6's two sizes and, with `ipv4`, IPv4's two as well.
    `guards`: None, or the text of the file's rollback guards as one YAML flow sequence ('[]':
    none, a probation without guards). `rollback`: None, or the lines of the policy's own
    rollback: mapping (e.g. ['window: 30s', 'interval: 200ms'])."""
    text = 'version: 1\n'
    if guards is not None:
        text += f'rollback:\n  guards: {guards}\n'
    text += (f'policies:\n'
             f'  - name: {name}\n'
             f'    match: {match}\n'
             f'    ipv6: {{gso-max-size: {size}, gro-max-size: {size}}}\n')
    if ipv4:
        text += f'    ipv4: {{gso-max-size: {size}, gro-max-size: {size}}}\n'
    if rollback:
        text += '    rollback:\n' + ''.join(f'      {line}\n' for line in rollback)
    return text
