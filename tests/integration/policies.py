"""policies.py — the policy the integration tests and the benches share, written out here once:
one policy that puts its devices at 185000 (BIG TCP's usual size, above the kernel's default
65536). Tests that edit the text (str.replace) rely on its layout: `match` and, with
`flow=False`, each family's sizes as block mappings, one key a line. Only the standard library:
the benches (tests/bench/) import it too."""

SIZE = 185000

# A policy with one error: "lots" for gso-max-size, at line 7, column 21.
BROKEN = """\
version: 1
policies:
  - name: broken
    match:
      name: ["v*"]
    ipv6:
      gso-max-size: lots
"""

# A policy's own guard (standard_policy's `rollback` lines): a rise of IPv4 header errors above 10.
HDR_GUARD = ('guards:', '  - {counter: Ip.InHdrErrors, max-increase: 10}')


def standard_policy(name='veth', match='kind: [veth]', size=SIZE, ipv4=True, guards=None, flow=True,
                    rollback=()):
    """A policy file with one policy, `name`, for the devices `match` names (one line of a
    block mapping, or a tuple of them), at `size` for IPv6's two sizes and, with `ipv4`, IPv4's
    two as well: each family a flow mapping (`{gso-max-size: …, gro-max-size: …}`), or with
    flow=False a block mapping. `guards`: None, or the file's rollback guards as one YAML flow
    sequence ('[]': none, a probation without guards). `rollback`: lines of the policy's own
    rollback mapping (e.g. ('window: 30s', 'interval: 200ms'))."""
    lines = ['version: 1']
    if guards is not None:
        lines += ['rollback:', f'  guards: {guards}']
    lines += ['policies:', f'  - name: {name}', '    match:']
    lines += [f'      {m}' for m in ((match,) if isinstance(match, str) else match)]
    for family in ('ipv6', 'ipv4') if ipv4 else ('ipv6',):
        if flow:
            lines.append(f'    {family}: {{gso-max-size: {size}, gro-max-size: {size}}}')
        else:
            lines += [f'    {family}:', f'      gso-max-size: {size}', f'      gro-max-size: {size}']
    if rollback:
        lines += ['    rollback:', *(f'      {line}' for line in rollback)]
    return '\n'.join(lines) + '\n'
