#!/bin/sh
# version.sh [SOURCE-ROOT] — bigtcpd's version, as every part of it says it (bigtcpd --version,
# bigtcpctl --version, GetStatus on varlink and D-Bus, the Debian package's version): printed on
# standard output, one line. There is one place to change it, meson.build's project() version,
# which is the release being prepared:
#
#   - a build of the commit tagged v<version>, from a clean tree: <version>, e.g. 0.2.0
#   - a build of any other commit: <version>~git<date>.<n>.<commit>, e.g.
#     0.2.0~git20261201.196.bff9c03 — date: the commit's (committer, UTC); n: the number of
#     commits in its history, which orders two commits of one day; commit: its abbreviated hash.
#     With "~" it sorts before the release <version> itself (dpkg --compare-versions) and after
#     every earlier snapshot of the same line of history. A clone without the full history
#     (--depth) cannot count: there n is left out.
#   - uncommitted changes to tracked files add ".dirty" (which sorts after the clean build)
#   - no git repository here (a tarball, or the copy scripts/package.sh builds): the version
#     in .tarball-version at SOURCE-ROOT, which `meson dist` and scripts/package.sh write, else
#     the plain <version>.
#
# After a release is tagged, meson.build's version becomes the next one (0.2.0 -> 0.3.0), so that
# the snapshots after the release sort after it; until it does, this says so on standard error
# (and fails with BIGTCPD_VERSION_STRICT=1, as scripts/package.sh runs it). meson's vcs_tag() runs this at every build
# (daemon/meson.build), so a new commit is a new version without reconfiguring.
set -eu
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}

base=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$root/meson.build" | head -n 1)
case $base in
'' | *[!0-9.]* | .* | *.)
        echo "version.sh: no version X.Y.Z in project() of $root/meson.build" >&2
        exit 1
        ;;
esac

# Only a repository whose top is this very tree: a tarball unpacked inside someone's checkout is
# not a build of that checkout's HEAD.
top=$(git -C "$root" rev-parse --show-toplevel 2>/dev/null || true)
if [ -z "$top" ] || [ "$(cd "$top" && pwd -P)" != "$(cd "$root" && pwd -P)" ] ||
        ! git -C "$root" rev-parse --verify -q HEAD >/dev/null; then
        if [ -s "$root/.tarball-version" ]; then
                head -n 1 "$root/.tarball-version"
        else
                echo "$base"
        fi
        exit 0
fi

dirty=
# Refresh the index's stat data first, or a touched but unchanged file would count.
git -C "$root" update-index -q --refresh >/dev/null 2>&1 || true
git -C "$root" diff-index --quiet HEAD -- 2>/dev/null || dirty=.dirty

if [ -z "$dirty" ] && [ "$(git -C "$root" tag --points-at HEAD -l "v$base")" = "v$base" ]; then
        echo "$base"
        exit 0
fi

# A snapshot after the release it names would sort before that release: meson.build's version
# was not moved on after the tag.
if git -C "$root" rev-parse -q --verify "refs/tags/v$base" >/dev/null &&
        git -C "$root" merge-base --is-ancestor "refs/tags/v$base" HEAD; then
        echo "version.sh: v$base is released (tag v$base is in HEAD's history): make meson.build's version the next one," \
                "or this build's version sorts before the release" >&2
        [ -z "${BIGTCPD_VERSION_STRICT:-}" ] || exit 1
fi

date=$(TZ=UTC0 git -C "$root" log -1 --date=format-local:%Y%m%d --format=%cd HEAD)
hash=$(git -C "$root" rev-parse --short=7 HEAD)
if [ "$(git -C "$root" rev-parse --is-shallow-repository)" = true ]; then
        echo "$base~git$date.$hash$dirty"
else
        echo "$base~git$date.$(git -C "$root" rev-list --count HEAD).$hash$dirty"
fi
