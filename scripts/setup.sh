#!/usr/bin/env bash
# Installs what bigtcpd needs to build, test and run its demo on Debian 12.
# Idempotent: asks apt only for what dpkg says is missing, and updates the
# package lists only when something is.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
        echo "setup.sh: must run as root (try: sudo bash scripts/setup.sh)" >&2
        exit 1
fi

# clang and libclang-rt-14-dev (libFuzzer, the sanitizer runtimes): scripts/fuzz.sh
packages=(
        meson ninja-build pkg-config gcc clang libclang-rt-14-dev
        libnl-3-dev libnl-route-3-dev libsystemd-dev libyaml-dev libevent-dev libjson-c-dev
        libcmocka-dev python3-pytest
        iperf3 iproute2 socat procps util-linux strace
        dbus dbus-daemon systemd scdoc man-db bash-completion python3-yaml
)

missing=()
for p in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
        echo "setup.sh: all ${#packages[@]} packages present"
        exit 0
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup.sh: done"
