"""The version: one place (meson.build's project version), the git description between releases
(scripts/version.sh), the same string from bigtcpd --version, bigtcpctl --version and GetStatus,
and versions that dpkg orders as the commits are ordered.

scripts/version.sh runs here on scratch repositories (copies of meson.build and the script, with
commits of their own) and on a copy without .git, as a tarball is built."""

import os
import re
import shutil
import subprocess

import pytest

from helpers import BIN, REPO

CTL = BIN.parent.parent / 'cli' / 'bigtcpctl'
SNAPSHOT = re.compile(r'^(\d+\.\d+\.\d+)~git(\d{8})\.(\d+)\.([0-9a-f]{7})(\.dirty)?$')


def base_version():
    m = re.search(r"^\s*version\s*:\s*'([^']+)'", (REPO / 'meson.build').read_text(), re.M)
    assert m, 'no version in meson.build'
    return m.group(1)


def version(root):
    r = subprocess.run(['sh', str(root / 'scripts' / 'version.sh'), str(root)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def newer(a, b):
    return subprocess.run(['dpkg', '--compare-versions', a, 'gt', b]).returncode == 0


def git(root, *args, date='2026-12-01T10:00:00Z'):
    env = dict(os.environ, GIT_AUTHOR_NAME='t', GIT_AUTHOR_EMAIL='t@example.org', GIT_COMMITTER_NAME='t',
               GIT_COMMITTER_EMAIL='t@example.org', GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date,
               GIT_CONFIG_GLOBAL='/dev/null', GIT_CONFIG_NOSYSTEM='1')
    return subprocess.run(['git', '-C', str(root), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A repository with this tree's meson.build and scripts/version.sh, one commit."""
    root = tmp_path / 'src'
    (root / 'scripts').mkdir(parents=True)
    shutil.copy(REPO / 'meson.build', root / 'meson.build')
    shutil.copy(REPO / 'scripts' / 'version.sh', root / 'scripts' / 'version.sh')
    git(root, 'init', '-q', '-b', 'main')
    git(root, 'add', '.')
    git(root, 'commit', '-q', '-m', 'one')
    return root


def test_binaries_say_the_build_version():
    """bigtcpd and bigtcpctl say the version of the tree they were built from (the build runs
    scripts/version.sh again at each build: a commit since the last build shows once rebuilt)."""
    want = version(REPO)
    assert want.startswith(base_version()), (want, base_version())
    for binary, name in ((BIN, 'bigtcpd'), (CTL, 'bigtcpctl')):
        said = subprocess.run([str(binary), '--version'], capture_output=True, text=True).stdout
        assert said == f'{name} {want}\n', f'{binary} says {said!r}, the tree is {want} (built before a commit? ninja rebuilds it)'


def test_snapshots_of_later_commits_sort_later(repo):
    base = base_version()
    first = version(repo)
    m = SNAPSHOT.match(first)
    assert m, first
    assert m.group(1) == base and m.group(2) == '20261201' and m.group(3) == '1' and not m.group(5), first
    assert m.group(4) == git(repo, 'rev-parse', '--short=7', 'HEAD')
    # Two more commits the same day: ordered by their count, whatever their hashes.
    seen = [first]
    for i in range(2):
        (repo / 'f').write_text(str(i))
        git(repo, 'add', 'f')
        git(repo, 'commit', '-q', '-m', f'c{i}', date='2026-12-01T11:00:00Z')
        seen.append(version(repo))
    # And one the next day.
    (repo / 'f').write_text('next day')
    git(repo, 'commit', '-qam', 'next', date='2026-12-02T00:30:00Z')
    seen.append(version(repo))
    assert len(set(seen)) == 4, seen
    for a, b in zip(seen, seen[1:]):
        assert newer(f'{b}-1', f'{a}-1'), (a, b)
    assert SNAPSHOT.match(seen[-1]).group(2) == '20261202', seen[-1]
    # Every snapshot of the release being prepared sorts after 0.1.0-1 (the first package) and
    # before the release itself.
    for v in seen:
        assert newer(f'{v}-1', '0.1.0-1') and newer(f'{base}-1', f'{v}-1'), v


def test_uncommitted_changes_say_dirty(repo):
    clean = version(repo)
    (repo / 'meson.build').write_text((repo / 'meson.build').read_text() + '\n# edited\n')
    dirty = version(repo)
    assert dirty == clean + '.dirty', (clean, dirty)
    assert newer(f'{dirty}-1', f'{clean}-1')


def test_the_tagged_release_is_the_plain_version(repo):
    base = base_version()
    git(repo, 'tag', f'v{base}')
    assert version(repo) == base
    # A tag of another version says nothing of this one.
    (repo / 'f').write_text('after')
    git(repo, 'add', 'f')
    git(repo, 'commit', '-q', '-m', 'after')
    git(repo, 'tag', 'v9.9.9')
    assert SNAPSHOT.match(version(repo)), version(repo)


def test_a_snapshot_after_its_release_is_refused_where_it_matters(repo):
    """After the tag v<version>, a snapshot of <version> would sort before the release: said on
    standard error, and an error with BIGTCPD_VERSION_STRICT (scripts/package.sh)."""
    git(repo, 'tag', f'v{base_version()}')
    (repo / 'f').write_text('after the release')
    git(repo, 'add', 'f')
    git(repo, 'commit', '-q', '-m', 'after')
    argv = ['sh', str(repo / 'scripts' / 'version.sh'), str(repo)]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0 and SNAPSHOT.match(r.stdout.strip()), r
    assert f'v{base_version()} is released' in r.stderr, r.stderr
    r = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, BIGTCPD_VERSION_STRICT='1'))
    assert r.returncode == 1 and not r.stdout and 'make meson.build' in r.stderr, r


def test_without_git_the_tarball_version_else_the_plain_one(repo, tmp_path):
    tree = tmp_path / 'tarball'
    (tree / 'scripts').mkdir(parents=True)
    for f in ('meson.build', 'scripts/version.sh'):
        shutil.copy(repo / f, tree / f)
    assert version(tree) == base_version()
    (tree / '.tarball-version').write_text('0.2.0~git20261201.7.abcdef0\n')
    assert version(tree) == '0.2.0~git20261201.7.abcdef0'
    # A tree inside another repository is not that repository's HEAD.
    inside = repo / 'unpacked'
    shutil.copytree(tree, inside)
    (inside / '.tarball-version').unlink()
    assert version(inside) == base_version()


def test_shallow_clone_leaves_the_count_out(repo, tmp_path):
    (repo / 'f').write_text('2')
    git(repo, 'add', 'f')
    git(repo, 'commit', '-q', '-m', 'two')
    clone = tmp_path / 'shallow'
    git(tmp_path, 'clone', '-q', '--depth=1', f'file://{repo}', str(clone))
    v = version(clone)
    assert re.match(r'^\d+\.\d+\.\d+~git20261201\.[0-9a-f]{7}$', v), v
