#!/usr/bin/env bash
# Builds bigtcpd: `release` (default) into build/, `asan` (ASan+UBSan) into build-asan/.
# Configures a build directory only when it is new or its options changed; ninja
# regenerates by itself when a meson.build changes.
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:-release}
case $flavour in
release)
        dir=build
        opts=(-Dbuildtype=debugoptimized)
        ;;
asan)
        dir=build-asan
        opts=(-Dbuildtype=debug '-Db_sanitize=address,undefined' -Db_lundef=false)
        ;;
*)
        echo "usage: $0 [release|asan]" >&2
        exit 2
        ;;
esac

stamp=$dir/.bigtcpd-build-options
want="${opts[*]}"

if [[ ! -f $dir/meson-private/coredata.dat ]]; then
        meson setup "${opts[@]}" "$dir"
elif [[ ! -f $dir/build.ninja || ! -f $stamp || $(<"$stamp") != "$want" ]]; then
        meson setup --reconfigure "${opts[@]}" "$dir" ||
                meson setup --wipe "${opts[@]}" "$dir"
fi
printf '%s\n' "$want" >"$stamp"

ninja -C "$dir"
