#!/usr/bin/env bash
# Builds the Debian package (dpkg-buildpackage -us -uc -b, debian/) from a copy of this tree and
# checks it with lintian; puts the .deb, .buildinfo, .changes and lintian's report (lintian.txt)
# in OUTDIR (default: debs/ here). Fails when the build fails or lintian reports an error or a
# warning (overrides, each with its reason: debian/bigtcpd.lintian-overrides). The build runs in
# a temporary directory that is removed afterwards, because dpkg-buildpackage writes its results
# next to the source tree and its own files into it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

out=${1:-$root/debs}
mkdir -p "$out"
out=$(cd "$out" && pwd)

for tool in dpkg-buildpackage dh lintian; do
        command -v "$tool" >/dev/null || {
                echo "package.sh: $tool is missing (bash scripts/setup.sh installs it)" >&2
                exit 1
        }
done

work=$(mktemp -d /tmp/bigtcpd-package.XXXXXX)
trap 'rm -rf -- "$work"' EXIT

# The version: scripts/version.sh's (meson.build's project version, with the git description
# between releases). A release has its entry in debian/changelog already; a build between
# releases gets one of its own on top, in the copy: 0.2.0~git20261201.196.bff9c03-1 sorts
# after the previous release's package (0.1.0-1) and the previous snapshot's, and before 0.2.0-1.
upstream=$(BIGTCPD_VERSION_STRICT=1 sh scripts/version.sh "$root")
released=$(dpkg-parsechangelog -l debian/changelog -S Version)
if [[ ${released%-*} == "$upstream" ]]; then
        version=$released
else
        version=$upstream-1
fi
src=$work/bigtcpd-$upstream
mkdir "$src"
# The tracked files and the new ones not ignored, as a commit would have them; no build
# directories, no .git.
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$root" ls-files -z --cached --others --exclude-standard |
                (cd "$root" && xargs -0 cp --parents -a -t "$src" --)
else
        tar -C "$root" --exclude='./build*' --exclude=./debs --exclude=./.git -cf - . | tar -C "$src" -xf -
fi
# The copy has no .git: the build (vcs_tag, scripts/version.sh) reads the version from here.
echo "$upstream" >"$src/.tarball-version"
if [[ $version != "$released" ]]; then
        maintainer=$(dpkg-parsechangelog -l debian/changelog -S Maintainer)
        commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
        # The commit's date, not the build's: two builds of one commit are the same package.
        when=$(git -C "$root" log -1 --format=%cD HEAD 2>/dev/null || date -R)
        {
                printf 'bigtcpd (%s) UNRELEASED; urgency=medium\n\n' "$version"
                printf '  * Snapshot between releases (scripts/package.sh), commit\n'
                printf '    %s%s.\n' "$commit" "$([[ $upstream == *.dirty ]] && echo ' with uncommitted changes')"
                printf '    What changed for operators: /usr/share/doc/bigtcpd/NEWS.gz.\n\n'
                printf ' -- %s  %s\n\n' "$maintainer" "$when"
                cat debian/changelog
        } >"$src/debian/changelog"
fi

echo "== dpkg-buildpackage -us -uc -b (bigtcpd $version)"
start=$SECONDS
(cd "$src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1 || {
        tail -n 60 "$work/build.log" >&2
        echo "package.sh: dpkg-buildpackage failed (whole log above, last 60 lines)" >&2
        exit 1
}
echo "built in $((SECONDS - start)) s"

changes=$(ls "$work"/bigtcpd_"$version"_*.changes)
echo "== lintian $(basename "$changes")"
# --fail-on error,warning: lintian's exit status (with --show-overrides it would count the
# overridden tags too). Its report (stdout) is printed and kept either way; stderr apart
# (lintian's note that it runs as root).
lintian_rc=0
lintian --display-info --display-experimental --fail-on error,warning "$changes" \
        >"$work/lintian.txt" 2>"$work/lintian.stderr" || lintian_rc=$?
grep -v '^running with root privileges is not recommended!$' "$work/lintian.stderr" >&2 || true
if [[ -s $work/lintian.txt ]]; then
        cat "$work/lintian.txt"
else
        echo "(no tags; overridden, each with its reason: $(grep -c '^bigtcpd: ' debian/bigtcpd.lintian-overrides)" \
                "in debian/bigtcpd.lintian-overrides)"
fi

# The dbgsym package too: the .changes lists it.
cp "$work"/*.deb "$work"/bigtcpd_"$version"_*.buildinfo "$changes" "$work/lintian.txt" "$out/"
ls "$out"/bigtcpd_"$version"_*.deb
if [[ $lintian_rc -ne 0 ]]; then
        echo "package.sh: lintian reports errors or warnings (exit $lintian_rc)" >&2
        exit 1
fi
