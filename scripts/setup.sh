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
# build-essential, dpkg-dev, debhelper, lintian: scripts/package.sh (the Debian package);
# systemd-container (systemd-nspawn): tests/integration/test_systemd_boot.py
# ansible-core, python3-apt (its apt module), git: test_systemd_fleet.py runs conf/ansible/ and
# builds the previous release's package from its commit; libnl-route-3-dev: that release's
# Build-Depends (0.1.0 names it; today's needs libnl-3-dev alone)
# nftables: tests/integration/test_evidence.py (an IPv4 path that drops big packets)
# containernetworking-plugins: tests/integration/test_cni.py (the reference bridge plugin, host-local)
# podman, runc, catatonit (the pause of a pod's infra container), mmdebstrap, uidmap:
# scripts/image.sh (the image; its base made from Debian's archive when no registry answers)
# and tests/integration/test_k8s.py (the DaemonSet's pod, podman kube play)
# clang, bpftool, libbpf-dev: the eBPF observer (daemon/observer.bpf.c, its skeleton, libbpf)
packages=(
        meson ninja-build pkg-config gcc clang libclang-rt-14-dev
        libnl-3-dev libsystemd-dev libyaml-dev libevent-dev libjson-c-dev
        libcmocka-dev python3-pytest python3-pytest-xdist
        iperf3 iproute2 socat procps util-linux strace nftables
        dbus dbus-daemon systemd scdoc man-db bash-completion python3-yaml
        build-essential dpkg-dev debhelper lintian systemd-container
        ansible-core python3-apt git libnl-route-3-dev
        containernetworking-plugins podman runc catatonit mmdebstrap uidmap
        bpftool libbpf-dev
)

missing=()
for p in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] || missing+=("$p")
done

export DEBIAN_FRONTEND=noninteractive
if [[ ${#missing[@]} -eq 0 ]]; then
        echo "setup.sh: all ${#packages[@]} packages present"
else
        echo "setup.sh: installing ${missing[*]}"
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# promtool checks conf/prometheus/ (tests/integration/test_prometheus.py). It comes only in
# Debian's prometheus package, whose installation would also start a Prometheus server: the
# package is downloaded and promtool alone unpacked into a cache (19 MB, once).
promtool_dir=/var/cache/bigtcpd-tests
if ! command -v promtool >/dev/null && [[ ! -x $promtool_dir/promtool ]]; then
        echo "setup.sh: unpacking promtool from Debian's prometheus package into $promtool_dir"
        tmp=$(mktemp -d)
        trap 'rm -rf -- "$tmp"' EXIT
        apt-cache show prometheus >/dev/null 2>&1 || apt-get update -q
        (cd "$tmp" && apt-get download -q prometheus 2>&1 | grep -v 'couldn.t be accessed by user ._apt.' || true)
        deb=$(ls "$tmp"/prometheus_*.deb)
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" ./usr/bin/promtool
        mkdir -p "$promtool_dir"
        install -m 0755 "$tmp/usr/bin/promtool" "$promtool_dir/promtool"
fi
echo "setup.sh: done"
