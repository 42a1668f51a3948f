/* fuzz-policy — the YAML policy parser on arbitrary bytes, as a drop-in pushed fleet-wide would
 * reach it; then scope and matching of what parsed clean against a few fixed devices. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fuzz.h"
#include "policy-match.h"
#include "policy.h"

typedef struct FakeRoute {
        int family;
        unsigned dst_len;
        uint8_t dst[16];
} FakeRoute;

typedef struct FakeDevice {
        const char *ifname;
        const char *altnames[2];
        size_t n_altnames;
        const char *kind;
        bool loopback;
        const char *mac;
        const char *driver;
        FakeRoute routes[3];
        size_t n_routes;
} FakeDevice;

static FakeDevice devices[] = {
        {.ifname = "lo", .loopback = true},
        {.ifname = "eth0",
         .altnames = {"enp1s0f0np0"},
         .n_altnames = 1,
         .mac = "0c:42:a1:12:34:56",
         .driver = "mlx5_core",
         .n_routes = 2,
         .routes = {{AF_INET, 0, {0}}, {AF_INET6, 32, {0x20, 0x01, 0x0d, 0xb8}}}},
        {.ifname = "ens9",
         .mac = "52:54:00:aa:bb:cc",
         .driver = "virtio_net",
         .n_routes = 1,
         .routes = {{AF_INET, 8, {10}}}},
        {.ifname = "veth1a2b", .kind = "veth", .mac = "ae:01:02:03:04:05", .driver = "veth"},
        {.ifname = "br0",
         .altnames = {"bridge-main", "br-lan"},
         .n_altnames = 2,
         .kind = "bridge",
         .mac = "02:00:00:00:00:01",
         .driver = "bridge",
         .n_routes = 1,
         .routes = {{AF_INET6, 64, {0xfd, 0x00, 0, 0, 0, 0, 0, 1}}}},
        {.ifname = "vxlan42", .kind = "vxlan"},
};

static const char *get_driver(void *userdata) {
        return ((const FakeDevice *) userdata)->driver;
}

static bool has_route(void *userdata, const RoutePrefix *p) {
        const FakeDevice *d = userdata;
        for (size_t i = 0; i < d->n_routes; i++)
                if (route_prefix_covers(p, d->routes[i].family, d->routes[i].dst, d->routes[i].dst_len))
                        return true;
        return false;
}

/* A scoped set: every cohort in 0..99, and a policy with hosts-percent in force only below it. */
static void check_scope(const PolicySet *s) {
        for (size_t i = 0; i < s->n_policies; i++) {
                const Policy *p = &s->policies[i];
                FUZZ_ASSERT(p->applies_here == (p->scope == POLICY_SCOPE_HERE));
                FUZZ_ASSERT(policy_scope_to_string(p->scope));
                if (!p->has_hosts_percent)
                        continue;
                FUZZ_ASSERT(p->hosts_percent <= POLICY_COHORTS && p->cohort < POLICY_COHORTS);
                FUZZ_ASSERT(!p->applies_here || p->cohort < p->hosts_percent);
        }
}

static void match_all(const PolicySet *s) {
        for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
                FakeDevice *f = &devices[i];
                MatchDevice d = {
                        .ifname = f->ifname,
                        .altnames = (char *const *) f->altnames,
                        .n_altnames = f->n_altnames,
                        .kind = f->kind,
                        .loopback = f->loopback,
                        .mac = f->mac,
                        .get_driver = get_driver,
                        .has_route = has_route,
                        .userdata = f,
                };
                const Policy *p = policy_set_match(s, &d);
                if (p) {
                        char buf[32];
                        /* what the daemon prints about a match: every field must be readable */
                        FUZZ_USE(strlen(p->name));
                        FUZZ_USE(strlen(size_spec_format(&p->ipv6.gso, buf, sizeof(buf))));
                        FUZZ_USE(strlen(size_spec_format(&p->ipv4.gro, buf, sizeof(buf))));
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        PolicyErrors errs = {};
        PolicySet *s;
        char *copy;
        int r;

        fuzz_quiet();
        /* exactly `size` bytes and no NUL after them: an over-read is caught */
        copy = malloc(size ? size : 1);
        if (!copy)
                return 0;
        memcpy(copy, data, size);

        s = policy_set_new();
        if (!s) {
                free(copy);
                return 0;
        }
        r = policy_parse_buffer(s, "fuzz.yaml", copy, size, &errs);
        FUZZ_ASSERT(r == 0 || r == -EINVAL || r == -ENOMEM);
        FUZZ_ASSERT((r == -EINVAL) == (errs.n > 0));
        FUZZ_ASSERT(r == 0 || s->n_policies == 0); /* a failed parse leaves the set as it was */
        for (size_t i = 0; i < errs.n; i++) {
                char *text = NULL;
                FUZZ_ASSERT(errs.items[i].message);
                if (policy_error_format(&errs.items[i], &text) >= 0)
                        FUZZ_USE(strlen(text));
                free(text);
        }
        if (r == 0) {
                policy_set_scope(s, &(HostIdentity){.hostname = "web-01.example.net",
                                                    .kernel_release = "6.1.0-18-amd64",
                                                    .machine_id = "3d1219c7c4c5404aaa1f6d2a48adfda4"});
                check_scope(s);
                match_all(s);
                policy_set_scope(s, &(HostIdentity){.kernel_release = "5.15.0"});
                check_scope(s);
                match_all(s);
        }
        policy_errors_clear(&errs);
        policy_set_free(s);
        free(copy);
        return 0;
}
