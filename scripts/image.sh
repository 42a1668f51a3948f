#!/usr/bin/env bash
# image.sh [--deb-dir DIR] [--root DIR --runroot DIR [--tmpdir DIR]] [--base-only] — builds the bigtcpd image
# (conf/k8s/Containerfile) with podman from this tree's own Debian package, tagged
# localhost/bigtcpd:VERSION (the package's version, which is scripts/version.sh's; "~", which an
# image tag cannot hold, becomes "-": 0.2.0~git20261205.385.4ca0f42 ->
# 0.2.0-git20261205.385.4ca0f42). Prints the tag and the image's size last.
#
#   --deb-dir DIR   take the one bigtcpd_*.deb in DIR (default: BIGTCPD_DEB_DIR, else build it
#                   with scripts/package.sh into a temporary directory)
#   --root, --runroot, --tmpdir
#                   podman's storage (default: podman's own); the tests keep theirs in their tmp
#   --base-only     make sure the base image is there, build nothing
#
# The base, docker.io/library/debian:bookworm-slim, is used from podman's store when it is there.
# When it is not, and no registry answers (BIGTCPD_IMAGE_PULL=0 skips asking), it is made from
# Debian's archive with the host's apt sources (mmdebstrap --variant=minbase bookworm, without
# man pages, docs and locales, as the slim image is) and imported under that same name: the same
# Containerfile then builds offline here and online anywhere. The build's RUN reaches the archive
# through the host's network (--network=host), as apt on the host does. BIGTCPD_IMAGE_BASE_TAR=FILE
# keeps the base's tarball there once made, and imports it from there next time (the tests cache
# it in /var/cache/bigtcpd-tests: mmdebstrap takes minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=docker.io/library/debian:bookworm-slim
deb_dir=${BIGTCPD_DEB_DIR:-}
store=()
base_only=0
while [[ $# -gt 0 ]]; do
        case $1 in
        --deb-dir) deb_dir=$2; shift 2 ;;
        --root | --runroot | --tmpdir) store+=("$1" "$2"); shift 2 ;;
        --base-only) base_only=1; shift ;;
        *) echo "image.sh: unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
        esac
done

for tool in podman; do
        command -v "$tool" >/dev/null || {
                echo "image.sh: $tool is missing (bash scripts/setup.sh installs it)" >&2
                exit 1
        }
done

work=$(mktemp -d /tmp/bigtcpd-image.XXXXXX)
trap 'rm -rf -- "$work"' EXIT

pod() {
        podman "${store[@]}" "$@"
}

make_base() {
        local sources cache=${BIGTCPD_IMAGE_BASE_TAR:-}
        if [[ -n $cache && -s $cache ]]; then
                echo "== $BASE: imported from $cache (made earlier by mmdebstrap)"
                pod import --quiet --change 'CMD ["bash"]' "$cache" "$BASE" >/dev/null
                return
        fi
        command -v mmdebstrap >/dev/null || {
                echo "image.sh: $BASE is not in podman's store, no registry gave it, and mmdebstrap is missing" \
                        "(bash scripts/setup.sh installs it)" >&2
                exit 1
        }
        sources=${BIGTCPD_IMAGE_SOURCES:-}
        if [[ -z $sources ]]; then
                for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
                        if [[ -s $f ]]; then
                                sources=$f
                                break
                        fi
                done
        fi
        echo "== $BASE: mmdebstrap --variant=minbase bookworm (apt sources: ${sources:-those mmdebstrap picks})"
        # merged-usr: /usr merged by the hook, as Debian's own images are, not by the usrmerge package
        # (which would bring perl in)
        mmdebstrap --quiet --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
                --dpkgopt='path-exclude=/usr/share/man/*' \
                --dpkgopt='path-exclude=/usr/share/doc/*' \
                --dpkgopt='path-include=/usr/share/doc/*/copyright' \
                --dpkgopt='path-exclude=/usr/share/info/*' \
                --dpkgopt='path-exclude=/usr/share/locale/*' \
                --dpkgopt='path-include=/usr/share/locale/locale.alias' \
                --aptopt='APT::Install-Recommends "false"' \
                bookworm "$work/base.tar" ${sources:+"$sources"}
        pod import --quiet --change 'CMD ["bash"]' "$work/base.tar" "$BASE" >/dev/null
        if [[ -n $cache ]]; then
                mkdir -p "$(dirname "$cache")"
                mv -f "$work/base.tar" "$cache.tmp.$$" && mv -f "$cache.tmp.$$" "$cache"
        fi
        rm -f "$work/base.tar"
}

if ! pod image exists "$BASE"; then
        if [[ ${BIGTCPD_IMAGE_PULL:-1} != 0 ]] && timeout 120 podman "${store[@]}" pull --quiet "$BASE" >/dev/null 2>&1; then
                echo "== $BASE: pulled"
        else
                make_base
        fi
fi
echo "== base: $BASE ($(pod image inspect --format '{{.Size}}' "$BASE") bytes)"
[[ $base_only -eq 0 ]] || exit 0

if [[ -z $deb_dir ]]; then
        deb_dir=$work/debs
        bash scripts/package.sh "$deb_dir"
fi
debs=("$deb_dir"/bigtcpd_*_*.deb)
if [[ ${#debs[@]} -ne 1 || ! -e ${debs[0]} ]]; then
        echo "image.sh: expected one bigtcpd_*.deb in $deb_dir (scripts/package.sh makes it): ${debs[*]}" >&2
        exit 1
fi
# The package's version is the image's (scripts/version.sh's, as package.sh gave it; without the
# Debian revision)
version=$(dpkg-deb -f "${debs[0]}" Version)
upstream=${version%-*}
tag=localhost/bigtcpd:${upstream//\~/-}
mkdir "$work/context"
cp "${debs[@]}" "$work/context/"

echo "== podman build $tag"
pod build --quiet --network=host --pull=never --build-arg "VERSION=$upstream" \
        -f conf/k8s/Containerfile -t "$tag" "$work/context" >/dev/null
echo "$tag $(pod image inspect --format '{{.Size}}' "$tag") bytes"
