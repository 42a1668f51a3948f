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
        # UBSan traps (ud2) instead of calling libubsan: the check is the same, and ASan prints
        # the trap's stack, file and line (ASAN_OPTIONS=handle_sigill=1, as the tests set it);
        # without libubsan, whose 6 MB of BSS LeakSanitizer read at every ASan process's exit,
        # each process of the suite's thousands costs ~12 ms of CPU less
        opts=(-Dbuildtype=debug '-Db_sanitize=address,undefined' -Db_lundef=false
              -Dc_args=-fsanitize-undefined-trap-on-error -Dc_link_args=-fsanitize-undefined-trap-on-error)
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
        # wiped, not reconfigured: meson 1.0's --reconfigure keeps the c_args it had
        meson setup --wipe "${opts[@]}" "$dir"
fi
printf '%s\n' "$want" >"$stamp"

ninja -C "$dir"
