#!/usr/bin/env bash
# The demo: two throwaway namespaces joined by a veth pair, iperf3 between them with
# BIG TCP off (the kernel's default 65536), then bigtcpd in both namespaces with the
# shipped conf/bigtcpd.yaml, and iperf3 again. Everything it creates is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

bt_require_root
bash scripts/setup.sh
bash scripts/build.sh release >/dev/null || bash scripts/build.sh release

NS_A=${BT_NETNS_PREFIX:-bt-}demo-a
NS_B=${BT_NETNS_PREFIX:-bt-}demo-b
A6=2001:db8:b16::1 B6=2001:db8:b16::2
A4=192.0.2.1 B4=192.0.2.2
SECONDS_PER_RUN=${DEMO_SECONDS:-5}
CONFIG=${DEMO_CONFIG:-conf/bigtcpd.yaml}
bt_mktemp tmp

bt_log "namespaces $NS_A and $NS_B, veth-a <-> veth-b, $A6/$A4 <-> $B6/$B4"
bt_netns_add "$NS_A"
bt_netns_add "$NS_B"
ip -n "$NS_A" link add veth-a type veth peer name veth-b netns "$NS_B"
ip -n "$NS_A" addr add "$A6/64" dev veth-a nodad
ip -n "$NS_B" addr add "$B6/64" dev veth-b nodad
ip -n "$NS_A" addr add "$A4/24" dev veth-a
ip -n "$NS_B" addr add "$B4/24" dev veth-b
ip -n "$NS_A" link set veth-a up
ip -n "$NS_B" link set veth-b up
# Carrier and qdisc come up asynchronously (linkwatch, which waits for the RTNL lock when the
# machine is busy); until then packets are dropped, so wait for both ends to be UP.
for ((i = 0; i < 200; i++)); do
        [[ $(ip -n "$NS_A" -o link show dev veth-a) == *"state UP"* &&
                $(ip -n "$NS_B" -o link show dev veth-b) == *"state UP"* ]] && break
        sleep 0.05
done

ip netns exec "$NS_B" iperf3 --server >"$tmp/iperf3-server.log" 2>&1 &
bt_pids+=("$!")
for ((i = 0; i < 100; i++)); do
        [[ -n $(ip netns exec "$NS_B" ss -Hltn 'sport = :5201') ]] && break
        sleep 0.05
done

# iperf_gbps DST: one client run from NS_A, prints the receiver's Gbit/s. Tries twice: on a
# busy machine the first connection can time out.
iperf_gbps() {
        local try
        for try in 1 2; do
                ip netns exec "$NS_A" timeout $((SECONDS_PER_RUN + 30)) \
                        iperf3 --client "$1" --time "$SECONDS_PER_RUN" --connect-timeout 10000 \
                        --json >"$tmp/iperf3.json" 2>&1 || true
                "$BT_PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r:
    sys.exit("iperf3: " + r["error"])
print("%.1f" % (r["end"]["sum_received"]["bits_per_second"] / 1e9))' "$tmp/iperf3.json" && return 0
                echo "iperf3 to $1 failed (try $try of 2)" >&2
        done
        bt_die "iperf3 to $1 failed"
}

# big_packets NS DEV: what bigtcpd in NS counted of DEV's packets above 64 KiB (during its
# probation window, in which the runs after the change fall), in one line.
big_packets() {
        "${BIGTCPCTL_BIN:-$BT_ROOT/build/cli/bigtcpctl}" --socket "$tmp/run-$1/io.bigtcpd.Manager" --json \
                show "$2" | "$BT_PY" -c 'import json, sys
d = json.load(sys.stdin)
b = d.get("big_packets")
if not b:
    sys.exit(print("not counted (no probation window?)"))
e = d.get("effective")
print("%d sent above 64 KiB (largest %d), %d received (largest %d); IPv6 %d, IPv4 %d; in effect: %s" % (
    b["tx"], b["tx_largest"], b["rx"], b["rx_largest"], b["ipv6"], b["ipv4"],
    "window still open" if e is None and b["watching"] else {True: "yes", False: "NO", None: "-"}[e]))'
}

# sizes NS DEV: "gso/gro ipv4 gso/gro" as read back from the kernel.
sizes() {
        "$BT_PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import nl
l = nl.read_links(sys.argv[2])[sys.argv[3]]
print("%d/%d, ipv4 %d/%d" % (l["gso_max_size"], l["gro_max_size"], l["gso_ipv4_max_size"], l["gro_ipv4_max_size"]))' \
                "$(dirname "$BT_NL")" "$1" "$2"
}

bt_log "before: every device's sizes"
for ns in "$NS_A" "$NS_B"; do
        echo "-- $ns"
        bt_show "$ns"
done
before_sizes=$(sizes "$NS_A" veth-a)

bt_log "iperf3 $NS_A -> $NS_B, ${SECONDS_PER_RUN}s each, BIG TCP off"
off6=$(iperf_gbps "$B6")
echo "IPv6: $off6 Gbit/s"
off4=$(iperf_gbps "$B4")
echo "IPv4: $off4 Gbit/s"

bt_log "starting bigtcpd in both namespaces with $CONFIG"
for ns in "$NS_A" "$NS_B"; do
        bt_start_daemon "$ns" "$tmp/bigtcpd-$ns.log" "$tmp/run-$ns" "$CONFIG"
        echo "bigtcpd in $ns: pid $BT_DAEMON_PID, ready; its log:"
        sed 's/^/    /' "$tmp/bigtcpd-$ns.log" | head -n 20
done

bt_log "after: every device's sizes"
for ns in "$NS_A" "$NS_B"; do
        echo "-- $ns"
        bt_show "$ns"
done
after_sizes=$(sizes "$NS_A" veth-a)
[[ $after_sizes != "$before_sizes" ]] ||
        echo "warning: veth-a's sizes did not change; does $CONFIG match veth devices?" >&2

bt_log "iperf3 $NS_A -> $NS_B, ${SECONDS_PER_RUN}s each, BIG TCP on"
on6=$(iperf_gbps "$B6")
echo "IPv6: $on6 Gbit/s"
on4=$(iperf_gbps "$B4")
echo "IPv4: $on4 Gbit/s"

echo
echo "veth-a sizes (gso/gro):  before $before_sizes;  after $after_sizes"
printf '%-6s %14s %14s %8s\n' "" "before Gbit/s" "after Gbit/s" "change"
for fam in 6 4; do
        b=off$fam a=on$fam
        printf '%-6s %14s %14s %7s%%\n' "IPv$fam" "${!b}" "${!a}" \
                "$(awk -v b="${!b}" -v a="${!a}" 'BEGIN { printf "%+.0f", (b > 0) ? (a - b) * 100 / b : 0 }')"
done
echo "(one ${SECONDS_PER_RUN}-second run each; expect a few percent of noise between runs)"
echo
echo "Packets above 64 KiB that bigtcpd counted during the runs after the change (its probation window):"
echo "  veth-a ($NS_A, sends): $(big_packets "$NS_A" veth-a)"
echo "  veth-b ($NS_B, receives): $(big_packets "$NS_B" veth-b)"
