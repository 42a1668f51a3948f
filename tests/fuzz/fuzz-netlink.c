/* fuzz-netlink — rtnetlink link and route messages, a datagram's worth of them, into one device
 * table the way sync.c feeds it; then what the daemon derives from that table: matching (names,
 * kinds, altnames, MACs, routes), the desired sizes, the write message, the JSON view.
 *
 * The input is what recvmsg() returns: nlmsghdr-framed messages back to back, walked with
 * nlmsg_ok()/nlmsg_next() like daemon/netlink.c read_socket(). Each message is handed over in a
 * heap copy of exactly nlmsg_len bytes, so that a read past the message is caught (in the
 * daemon it would read the next message or stale bytes of the receive buffer). */
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netlink/msg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "control.h"
#include "counters.h"
#include "fuzz.h"
#include "linux-compat.h"
#include "match.h"
#include "reconcile.h"
#include "route.h"

/* Matching on everything a link or route message can carry. */
static const char policy_yaml[] =
        "version: 1\n"
        "policies:\n"
        "  - name: routed\n"
        "    match: { route: [default, \"10.0.0.0/8\", \"2001:db8::/32\", \"fd00::/8\"] }\n"
        "    ipv6: { gso-max-size: max, gro-max-size: max }\n"
        "    ipv4: { gso-max-size: max, gro-max-size: 185000 }\n"
        "  - name: by-mac\n"
        "    match: { mac: [\"02:*\", \"0c:42:a1:*\"], kind: [device, veth] }\n"
        "    ipv6: { gso-max-size: 185000, gro-max-size: 185000 }\n"
        "  - name: by-name\n"
        "    match: { name: [\"veth*\", \"br*\", \"!*-mgmt\", \"alt-*\"], kind: [veth, bridge, vxlan, tun, "
        "dummy] }\n"
        "    ipv6: { gso-max-size: legacy, gro-max-size: 524280 }\n"
        "    ipv4: { gso-max-size: 100000 }\n"
        "  - name: loopback\n"
        "    match: { kind: loopback }\n"
        "    ipv6: { gro-max-size: max }\n"
        "  - name: rest\n"
        "    match: { driver: [\"virtio*\"] }\n"
        "    ipv4: { gso-max-size: legacy, gro-max-size: legacy }\n";

static PolicySet *policy;
static Manager manager; /* control_device_json reads only ipv4_supported */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        PolicyErrors errs = {};

        fuzz_quiet();
        policy = policy_set_new();
        FUZZ_ASSERT(policy);
        FUZZ_ASSERT(policy_parse_buffer(policy, "fuzz-netlink.yaml", policy_yaml, strlen(policy_yaml),
                                        &errs) == 0);
        policy_set_scope(policy, "fuzz", "6.8.0");
        return 0;
}

static const char *get_driver(void *userdata) {
        const Device *d = userdata;
        return d->ifindex % 2 ? "virtio_net" : NULL;
}

static bool has_route(void *userdata, const RoutePrefix *p) {
        return device_has_route(userdata, p);
}

static void route_changed(Device *d, void *userdata) {
        (*(unsigned *) userdata)++;
}

static void handle_link(DeviceTable *t, struct nlmsghdr *nlh) {
        LinkMessage lm;
        unsigned changes = 0;
        Device *d;
        int r;

        r = link_message_parse(nlh, &lm);
        if (r == -EAFNOSUPPORT || r == -EBADMSG)
                return;
        FUZZ_ASSERT(r == 0);
        FUZZ_ASSERT(lm.ifindex > 0);
        FUZZ_ASSERT(lm.n_altnames <= ELEMENTSOF(lm.altnames));
        if (lm.ifname)
                FUZZ_ASSERT(strlen(lm.ifname) < IFNAMSIZ);
        if (lm.kind)
                FUZZ_USE(strlen(lm.kind));
        for (size_t i = 0; i < lm.n_altnames; i++)
                FUZZ_USE(strlen(lm.altnames[i]));
        if (lm.stats64) {
                /* what a probation sample reads */
                uint64_t v;
                for (int off = 0; off < 32 * 8; off += 8)
                        if (link_counter_get(lm.stats64, lm.stats64_len, off, &v) >= 0)
                                FUZZ_USE(v);
        }

        d = device_get(t, lm.ifindex);
        if (nlh->nlmsg_type == RTM_DELLINK) {
                if (d) {
                        device_remove(t, d);
                        device_free(d);
                        FUZZ_ASSERT(!device_get(t, lm.ifindex));
                }
                return;
        }
        if (!d) {
                r = device_add(t, lm.ifindex, &d);
                if (r == -ENOMEM)
                        return;
                FUZZ_ASSERT(r == 0);
                d->driver_looked_up = true; /* no ioctl: get_driver() above answers */
        }
        r = device_update(d, &lm, &changes);
        FUZZ_ASSERT(r == 0 || r == -ENOMEM);
        FUZZ_ASSERT(memchr(d->mac, '\0', sizeof(d->mac)));
        FUZZ_ASSERT(device_get(t, lm.ifindex) == d);
}

/* What reconcile and `bigtcpctl list` make of one device. */
static void derive(Device *d) {
        void *ud = d;
        MatchDevice md = {
                .ifname = d->ifname,
                .altnames = d->altnames,
                .n_altnames = d->n_altnames,
                .kind = d->kind,
                .loopback = d->flags & IFF_LOOPBACK,
                .mac = d->mac[0] ? d->mac : NULL,
                .get_driver = get_driver,
                .has_route = has_route,
                .userdata = ud,
        };
        const Policy *p = policy_set_match(policy, &md);
        char buf[256];

        if (p) {
                Desired want;
                struct nl_msg *msg = NULL;

                compute_desired(p, &d->current, d->tso_max_size, d->has_ipv4_sizes, &want);
                /* never a write the kernel refuses */
                FUZZ_ASSERT(want.sizes.gso_max_size <= gso_limit(d->tso_max_size));
                FUZZ_ASSERT(want.sizes.gro_max_size <= BT_GRO_MAX_SIZE);
                FUZZ_ASSERT(!d->has_ipv4_sizes ||
                            (want.sizes.gso_ipv4_max_size <= gso_limit(d->tso_max_size) &&
                             want.sizes.gro_ipv4_max_size <= BT_GRO_MAX_SIZE));
                FUZZ_USE(strlen(
                        sizes_change_format(&d->current, &want.sizes, d->has_ipv4_sizes, buf, sizeof(buf))));
                /* the write must say what was decided, and nothing else */
                if (link_write_message(d->ifindex, &want.sizes, d->has_ipv4_sizes, &msg) >= 0) {
                        LinkMessage back;
                        FUZZ_ASSERT(link_message_parse(nlmsg_hdr(msg), &back) == 0);
                        FUZZ_ASSERT(back.ifindex == d->ifindex && back.has_sizes);
                        FUZZ_ASSERT(sizes_equal(&back.sizes, &want.sizes, d->has_ipv4_sizes));
                        nlmsg_free(msg);
                }
        }
        json_object *o = control_device_json(&manager, d);
        if (o) {
                fuzz_check_json(o);
                FUZZ_USE(strlen(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)));
                json_object_put(o);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        DeviceTable t;
        unsigned route_changes = 0;
        Device *d;

        if (size > 256 * 1024) /* the daemon's receive buffer */
                return 0;
        if (device_table_init(&t) < 0)
                return 0;
        manager.ipv4_supported = false;

        /* aligned like the daemon's malloc'd receive buffer */
        uint8_t *buf = malloc(size ? size : 1);
        FUZZ_ASSERT(buf);
        memcpy(buf, data, size);

        int left = (int) size;
        for (struct nlmsghdr *nlh = (struct nlmsghdr *) buf; nlmsg_ok(nlh, left);
             nlh = nlmsg_next(nlh, &left)) {
                struct nlmsghdr *m = malloc(nlh->nlmsg_len);
                FUZZ_ASSERT(m);
                memcpy(m, nlh, nlh->nlmsg_len);
                switch (m->nlmsg_type) {
                case RTM_NEWLINK:
                case RTM_DELLINK:
                        handle_link(&t, m);
                        break;
                case RTM_NEWROUTE:
                case RTM_DELROUTE: {
                        int r = route_message_handle(&t, m, route_changed, &route_changes);
                        FUZZ_ASSERT(r == 0 || r == -EBADMSG);
                        break;
                }
                case NLMSG_DONE:
                        /* stands for the re-dump after lost events: routes are read again */
                        route_forget_all(&t, route_changed, &route_changes);
                        break;
                default:
                        break;
                }
                free(m);
        }

        DEVICE_FOREACH(d, &t, it) {
                manager.ipv4_supported = manager.ipv4_supported || d->has_ipv4_sizes;
                FUZZ_ASSERT(d->ifindex > 0 && device_get(&t, d->ifindex) == d);
                if (d->ifname)
                        FUZZ_ASSERT(device_get_by_name(&t, d->ifname));
        }
        DEVICE_FOREACH(d, &t, it) {
                derive(d);
        }

        device_table_done(&t);
        free(buf);
        return 0;
}
