/* policy.c — the policy model: string tables, built-in rollback defaults and their merge with a
 * file's and a policy's keys, the set's digest, lifetime, scoping to this host, error formatting.
 * The YAML walk is policy-parse.c, the files policy-files.c. */

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>

#include "parse-util.h"
#include "policy.h"
#include "util.h"


/* ---- string tables ---- */

static const char *const size_kind_table[_SIZE_KIND_MAX] = {
        [SIZE_UNSET] = "unset",
        [SIZE_BYTES] = "bytes",
        [SIZE_DEVICE_MAX] = "max",
        [SIZE_LEGACY] = "legacy",
        [SIZE_AUTO] = "auto",
};

const char *size_kind_to_string(SizeKind k) {
        if (k < 0 || k >= _SIZE_KIND_MAX)
                return NULL;
        return size_kind_table[k];
}

/* Used for every key a file leaves out. Errors on the wire and header errors in the stack are what
 * broken GSO/GRO segmentation shows first; retransmits alone are too noisy to guard by default. */
#define BUILTIN_WINDOW_USEC (30 * USEC_PER_SEC)
#define BUILTIN_INTERVAL_USEC (1 * USEC_PER_SEC)
/* With the eBPF observer, the device's own TCP retransmits of big packets, divided by the big
 * packets' segments it sent: a path that drops every big packet above a size retransmits a third
 * of them (measured: 8250 of 24827 behind a drop above 150000 bytes), one that drops only the few
 * between the break and the size a percent or more, a clean one none (a veth's backlog: 1e-4),
 * one with ordinary loss about its loss rate; 1 % lies between (guard.c judges it once 100 were
 * sent). Without the observer it is inactive. */
static const struct {
        const char *counter;
        uint64_t max_increase;
        const char *per;
        double max_ratio;
} builtin_guards[] = {
        {"link.tx_errors", 0, NULL, 0},
        {"link.rx_errors", 0, NULL, 0},
        {"Ip.InHdrErrors", 100, NULL, 0},
        {"Ip6.Ip6InHdrErrors", 100, NULL, 0},
        {"tcp.retrans-big", 0, "tcp.sent-big", 0.01},
};

const char *size_spec_format(const SizeSpec *s, char *buf, size_t size) {
        if (!s || !buf || size == 0)
                return NULL;
        switch (s->kind) {
        case SIZE_BYTES:
                snprintf(buf, size, "%" PRIu32, s->bytes);
                return buf;
        case SIZE_DEVICE_MAX:
        case SIZE_LEGACY:
                snprintf(buf, size, "%s", size_kind_to_string(s->kind));
                return buf;
        case SIZE_AUTO: {
                char age[32], mx[24] = "";
                bool bounded = s->auto_min != AUTO_SIZE_MIN_DEFAULT || s->auto_max != 0 ||
                               s->ceiling_age_usec != AUTO_CEILING_AGE_DEFAULT_USEC;

                if (!bounded) {
                        snprintf(buf, size, "auto");
                        return buf;
                }
                if (s->auto_max != 0)
                        snprintf(mx, sizeof(mx), ", max %" PRIu32, s->auto_max);
                snprintf(buf, size, "auto (min %" PRIu32 "%s, ceiling-age %s)", s->auto_min, mx,
                         format_duration_usec(s->ceiling_age_usec, age, sizeof(age)));
                return buf;
        }
        case SIZE_UNSET:
        case _SIZE_KIND_MAX:
        case _SIZE_KIND_INVALID:
                break;
        }
        snprintf(buf, size, "-");
        return buf;
}

int policy_error_format(const PolicyError *e, char **ret) {
        char *s;
        int n;

        if (!e || !ret)
                return -EINVAL;
        if (e->line == 0)
                n = asprintf(&s, "%s: %s", strempty(e->file) ? "-" : e->file, e->message ?: "");
        else
                n = asprintf(&s, "%s:%u:%u: %s", strempty(e->file) ? "-" : e->file, e->line, e->column,
                             e->message ?: "");
        if (n < 0)
                return -ENOMEM;
        *ret = s;
        return 0;
}

/* ---- lifetime ---- */

void strlist_done(StrList *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->items[i]);
        free(l->items);
        *l = (StrList){};
}

static void guard_done(Guard *g) {
        free(g->counter);
        free(g->per);
        free(g->file);
        *g = (Guard){};
}

void rollback_spec_done(RollbackSpec *r) {
        for (size_t i = 0; i < r->n_guards; i++)
                guard_done(&r->guards[i]);
        free(r->guards);
        *r = (RollbackSpec){};
}

void policy_done(Policy *p) {
        free(p->name);
        free(p->file);
        strlist_done(&p->hosts);
        free(p->kernel);
        free(p->kernel_reqs);
        strlist_done(&p->match.name);
        strlist_done(&p->match.kind);
        strlist_done(&p->match.driver);
        strlist_done(&p->match.mac);
        strlist_done(&p->match.netns);
        free(p->match.routes);
        rollback_spec_done(&p->rollback);
        *p = (Policy){};
}

static int guards_copy(const Guard *src, size_t n, Guard **ret) {
        Guard *g;

        if (n == 0) {
                *ret = NULL;
                return 0;
        }
        g = calloc(n, sizeof(*g));
        if (!g)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                g[i] = src[i];
                g[i].counter = src[i].counter ? strdup(src[i].counter) : NULL;
                g[i].per = src[i].per ? strdup(src[i].per) : NULL;
                g[i].file = src[i].file ? strdup(src[i].file) : NULL;
                if ((src[i].counter && !g[i].counter) || (src[i].per && !g[i].per) || (src[i].file && !g[i].file)) {
                        for (size_t j = 0; j <= i; j++)
                                guard_done(&g[j]);
                        free(g);
                        return -ENOMEM;
                }
        }
        *ret = g;
        return 0;
}

int rollback_spec_merge(RollbackSpec *dst, const RollbackSpec *over) {
        if (over->has_window) {
                dst->has_window = true;
                dst->window_usec = over->window_usec;
        }
        if (over->has_interval) {
                dst->has_interval = true;
                dst->interval_usec = over->interval_usec;
        }
        if (over->has_guards) {
                Guard *g;
                int r = guards_copy(over->guards, over->n_guards, &g);
                if (r < 0)
                        return r;
                for (size_t i = 0; i < dst->n_guards; i++)
                        guard_done(&dst->guards[i]);
                free(dst->guards);
                dst->guards = g;
                dst->n_guards = over->n_guards;
                dst->has_guards = true;
        }
        return 0;
}

int rollback_spec_copy(const RollbackSpec *src, RollbackSpec *ret) {
        RollbackSpec r = {};
        int k = rollback_spec_merge(&r, src);
        if (k < 0)
                return k;
        *ret = r;
        return 0;
}

int rollback_spec_builtin(RollbackSpec *ret) {
        RollbackSpec r = {
                .has_window = true,
                .window_usec = BUILTIN_WINDOW_USEC,
                .has_interval = true,
                .interval_usec = BUILTIN_INTERVAL_USEC,
                .has_guards = true,
        };

        r.guards = calloc(ELEMENTSOF(builtin_guards), sizeof(Guard));
        if (!r.guards)
                return -ENOMEM;
        for (size_t i = 0; i < ELEMENTSOF(builtin_guards); i++) {
                Guard *g = &r.guards[r.n_guards++];
                g->counter = strdup(builtin_guards[i].counter);
                if (!g->counter) {
                        rollback_spec_done(&r);
                        return -ENOMEM;
                }
                (void) guard_counter_parse(g->counter, &g->counter_kind);
                if (builtin_guards[i].per) {
                        g->per = strdup(builtin_guards[i].per);
                        if (!g->per) {
                                rollback_spec_done(&r);
                                return -ENOMEM;
                        }
                        (void) guard_counter_parse(g->per, &g->per_kind);
                        g->has_max_ratio = true;
                        g->max_ratio = builtin_guards[i].max_ratio;
                        continue;
                }
                g->has_max_increase = true;
                g->max_increase = builtin_guards[i].max_increase;
        }
        *ret = r;
        return 0;
}

PolicySet *policy_set_new(void) {
        PolicySet *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        if (rollback_spec_builtin(&s->defaults) < 0) {
                free(s);
                return NULL;
        }
        s->digest = FNV1A64_OFFSET;
        s->n_ref = 1;
        return s;
}

PolicySet *policy_set_ref(PolicySet *s) {
        if (s)
                s->n_ref++;
        return s;
}

void policy_set_free(PolicySet *s) {
        if (!s)
                return;
        if (s->n_ref > 1) {
                s->n_ref--;
                return;
        }
        for (size_t i = 0; i < s->n_policies; i++)
                policy_done(&s->policies[i]);
        free(s->policies);
        for (size_t i = 0; i < s->n_files; i++)
                free(s->files[i]);
        free(s->files);
        rollback_spec_done(&s->defaults);
        free(s);
}

void policy_errors_clear(PolicyErrors *e) {
        if (!e)
                return;
        for (size_t i = 0; i < e->n; i++) {
                free(e->items[i].file);
                free(e->items[i].message);
        }
        free(e->items);
        *e = (PolicyErrors){};
}

/* ---- errors ---- */

int policy_errors_append(PolicyErrors *e, const char *file, unsigned line, unsigned column, char *message) {
        PolicyError *t;
        char *f;

        f = strdup(file ?: "");
        if (!f)
                return -ENOMEM;
        t = realloc(e->items, (e->n + 1) * sizeof(*t));
        if (!t) {
                free(f);
                return -ENOMEM;
        }
        e->items = t;
        e->items[e->n++] = (PolicyError){.file = f, .line = line, .column = column, .message = message};
        return 0;
}

int policy_set_add_file(PolicySet *s, const char *file, const char *data, size_t size, Policy *policies,
                        size_t n_policies, RollbackSpec *defaults) {
        Policy *pt;
        char **ft, *fn;

        fn = strdup(file);
        if (!fn)
                return -ENOMEM;
        ft = realloc(s->files, (s->n_files + 1) * sizeof(char *));
        if (!ft) {
                free(fn);
                return -ENOMEM;
        }
        s->files = ft;
        if (n_policies > 0) {
                pt = realloc(s->policies, (s->n_policies + n_policies) * sizeof(Policy));
                if (!pt) {
                        free(fn);
                        return -ENOMEM;
                }
                s->policies = pt;
        }

        /* nothing fails from here on */
        for (size_t i = 0; i < n_policies; i++) {
                s->policies[s->n_policies++] = policies[i];
                policies[i] = (Policy){};
        }
        if (s->n_files == 0) {
                rollback_spec_done(&s->defaults);
                s->defaults = *defaults;
                *defaults = (RollbackSpec){};
        }
        s->files[s->n_files++] = fn;
        s->digest = policy_digest_add(s->digest, file, data, size);
        return 0;
}

uint64_t policy_digest_add(uint64_t digest, const char *file, const char *data, size_t size) {
        digest = fnv1a64(digest, file, strlen(file) + 1); /* with the NUL: name and content stay apart */
        return fnv1a64(digest, data, size);
}

/* ---- scope: hosts, kernel, cohorts ---- */

static const char *const policy_scope_table[_POLICY_SCOPE_MAX] = {
        [POLICY_SCOPE_HERE] = "here",         [POLICY_SCOPE_HOSTS] = "hosts",
        [POLICY_SCOPE_KERNEL] = "kernel",     [POLICY_SCOPE_COHORT] = "cohort",
        [POLICY_SCOPE_UNSCOPED] = "unscoped",
};

const char *policy_scope_to_string(PolicyScope s) {
        if (s < 0 || s >= _POLICY_SCOPE_MAX)
                return NULL;
        return policy_scope_table[s];
}

int machine_id_parse(const char *text, size_t size, char ret[static 33]) {
        char id[33];
        bool zero = true;

        if (!text)
                return -EINVAL;
        if (size == 33 && text[32] == '\n')
                size = 32;
        if (size != 32)
                return -EINVAL;
        for (size_t i = 0; i < 32; i++) {
                char c = text[i];
                if (c >= 'A' && c <= 'F')
                        c = (char) (c - 'A' + 'a');
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                        return -EINVAL;
                zero = zero && c == '0';
                id[i] = c;
        }
        if (zero) /* systemd's SD_ID128_NULL: no id at all */
                return -EINVAL;
        id[32] = '\0';
        memcpy(ret, id, sizeof(id));
        return 0;
}

const char *host_identity_cohort_source(const HostIdentity *host) {
        return host && host->machine_id ? "machine-id" : "hostname";
}

/* MurmurHash3's finalizer: every input bit reaches every output bit. FNV-1a alone leaves its low
 * bits depending only on the low bits of the input, and its last bytes barely mixed. */
static uint64_t fmix64(uint64_t k) {
        k ^= k >> 33;
        k *= UINT64_C(0xff51afd7ed558ccd);
        k ^= k >> 33;
        k *= UINT64_C(0xc4ceb9fe1a85ec53);
        k ^= k >> 33;
        return k;
}

unsigned policy_cohort(const HostIdentity *host, const char *policy_name) {
        static const char tag[] = "bigtcpd-cohort";
        const char *kind = host_identity_cohort_source(host);
        const char *key = host ? (host->machine_id ?: host->hostname) : NULL;
        uint64_t h = FNV1A64_OFFSET;

        h = fnv1a64(h, tag, sizeof(tag)); /* with the NUL after each part: parts stay apart */
        h = fnv1a64(h, kind, strlen(kind) + 1);
        /* hostnames are case-insensitive (as `hosts` globs match them): fold, byte by byte */
        for (const char *c = key ?: ""; *c; c++) {
                uint8_t b = (uint8_t) (*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
                h = fnv1a64(h, &b, 1);
        }
        h = fnv1a64(h, "", 1);
        h = fnv1a64(h, policy_name ?: "", strlen(policy_name ?: ""));
        /* the high half scaled to 0..99 (Lemire's multiply-shift: no modulo bias worth a word) */
        return (unsigned) (((fmix64(h) >> 32) * POLICY_COHORTS) >> 32);
}

void policy_set_scope(PolicySet *s, const HostIdentity *host) {
        const HostIdentity none = {};

        if (!s)
                return;
        if (!host)
                host = &none;
        for (size_t i = 0; i < s->n_policies; i++) {
                Policy *p = &s->policies[i];
                bool host_ok = p->hosts.n == 0;

                for (size_t j = 0; j < p->hosts.n && !host_ok; j++)
                        host_ok = host->hostname &&
                                  fnmatch(p->hosts.items[j], host->hostname, FNM_CASEFOLD) == 0;
                if (p->has_hosts_percent)
                        p->cohort = policy_cohort(host, p->name);
                if (!host_ok)
                        p->scope = POLICY_SCOPE_HOSTS;
                else if (!kernel_req_holds(p->kernel_reqs, p->n_kernel_reqs, host->kernel_release))
                        p->scope = POLICY_SCOPE_KERNEL;
                else if (p->has_hosts_percent && p->cohort >= p->hosts_percent)
                        p->scope = POLICY_SCOPE_COHORT;
                else
                        p->scope = POLICY_SCOPE_HERE;
                p->applies_here = p->scope == POLICY_SCOPE_HERE;
        }
}
