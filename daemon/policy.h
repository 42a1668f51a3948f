/* policy.h — the policy model (format version 1) and parsing it from a buffer (policy-parse.c).
 * Parsing builds a new PolicySet; nothing global is touched, so reload and --check-config share
 * one path and the running set is swapped only when the new one is clean. The values inside are
 * parse-util.h's, the files policy-files.h's. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "parse-util.h"
#include "util.h"

typedef enum SizeKind {
        SIZE_UNSET,  /* key absent: leave this size as the device has it */
        SIZE_BYTES,  /* a number of bytes */
        SIZE_DEVICE_MAX, /* "max": the device's limit (not SIZE_MAX: <stdint.h> owns that name) */
        SIZE_LEGACY, /* "legacy": 65536 */
        SIZE_AUTO,   /* "auto": the largest size the device's path proves safe (auto-size.h) */
        _SIZE_KIND_MAX,
        _SIZE_KIND_INVALID = -1,
} SizeKind;

typedef struct SizeSpec {
        SizeKind kind;
        uint32_t bytes; /* SIZE_BYTES only */
        /* SIZE_AUTO only: the search's bounds. auto_max 0: the device's limit (tso_max_size for
         * GSO, 524280 for GRO). */
        uint32_t auto_min, auto_max;
        uint64_t ceiling_age_usec; /* a tripped size is tried again after this long */
} SizeSpec;

/* `auto`'s defaults and limits. */
#define AUTO_SIZE_MIN_DEFAULT 65536u /* the size before BIG TCP: min may not go below it */
#define AUTO_CEILING_AGE_DEFAULT_USEC (24 * 3600 * USEC_PER_SEC)
#define AUTO_CEILING_AGE_MIN_USEC (1 * USEC_PER_SEC)
#define AUTO_CEILING_AGE_MAX_USEC (30 * 24 * 3600 * USEC_PER_SEC)

/* One of `ipv6:` / `ipv4:`. `set` is false when the policy leaves the family out. */
typedef struct FamilySpec {
        bool set;
        SizeSpec gso;
        SizeSpec gro;
} FamilySpec;

typedef struct StrList {
        char **items;
        size_t n;
} StrList;

typedef struct PolicyMatch {
        StrList name;   /* globs, "!" prefix negates */
        StrList kind;   /* link kinds; "device" = no kind, "loopback" = the loopback device */
        StrList driver; /* globs on the ethtool driver name */
        StrList mac;    /* globs on the lower-case colon-separated address */
        StrList netns;  /* "host" or globs on namespace file names, "!" negates; empty = "host" */
        RoutePrefix *routes;
        size_t n_routes;
} PolicyMatch;

typedef struct Guard {
        char *counter;
        GuardCounterKind counter_kind;
        bool has_max_increase;
        uint64_t max_increase;
        bool has_max_ratio;
        double max_ratio;
        char *per; /* required with max-ratio, forbidden without */
        GuardCounterKind per_kind;
        /* where `counter` and `per` were written, for warnings about this host; file NULL for
         * the built-in guards */
        char *file;
        unsigned line, column, per_line, per_column;
} Guard;

typedef struct RollbackSpec {
        bool has_window;
        uint64_t window_usec;
        bool has_interval;
        uint64_t interval_usec;
        bool has_guards;
        Guard *guards;
        size_t n_guards;
} RollbackSpec;

/* Who this host is, as the policy's scope sees it. */
typedef struct HostIdentity {
        const char *hostname;       /* for `hosts`; the cohort's key where there is no machine id */
        const char *kernel_release; /* for `kernel` */
        const char *machine_id;     /* for cohorts: 32 lower-case hex digits
                                     * (machine_id_parse()), or NULL when the host has none */
} HostIdentity;

/* Whether a policy is in force on this host, and if not, which of its scoping keys says no. */
typedef enum PolicyScope {
        POLICY_SCOPE_HERE,
        POLICY_SCOPE_HOSTS,    /* no `hosts` glob matches the hostname */
        POLICY_SCOPE_KERNEL,   /* the kernel release does not satisfy `kernel` */
        POLICY_SCOPE_COHORT,   /* this host's cohort is not below rollout.hosts-percent */
        POLICY_SCOPE_UNSCOPED, /* parsed, not yet scoped (policy_set_scope()) */
        _POLICY_SCOPE_MAX,
        _POLICY_SCOPE_INVALID = -1,
} PolicyScope;

typedef struct Policy {
        char *name;
        char *file; /* where it was defined */
        unsigned line, column;
        StrList hosts;      /* empty = every host */
        char *kernel;       /* the text, for display; NULL = any kernel */
        KernelReq *kernel_reqs;
        size_t n_kernel_reqs;
        PolicyMatch match;
        FamilySpec ipv6;
        FamilySpec ipv4;
        RollbackSpec rollback; /* effective: the file's defaults with this policy's overrides */
        unsigned max_parallel; /* rollout.max-parallel: devices of this policy in probation at
                                * once when existing devices change; 0 = no limit */
        bool has_hosts_percent;
        unsigned hosts_percent; /* rollout.hosts-percent, 0..100: the policy is in force on the hosts
                                 * whose cohort for it is below this */
        unsigned cohort;        /* with has_hosts_percent: this host's, 0..99 (policy_set_scope()) */
        PolicyScope scope;      /* set by policy_set_scope() from hosts, kernel and the cohort */
        bool applies_here;      /* scope == POLICY_SCOPE_HERE */
} Policy;

typedef struct PolicySet {
        Policy *policies; /* in order of precedence: the first that matches wins */
        size_t n_policies;
        char **files; /* the files read, in order */
        size_t n_files;
        RollbackSpec defaults; /* built-in defaults overridden by the first file's `rollback` */
        uint64_t digest;       /* FNV-1a 64 over the files' names and contents, in order */
        unsigned n_ref;        /* the engines of every namespace run one set */
        /* No policy: the files have errors and no policy ran before (policy-reload.c). The engine
         * decides nothing and writes nothing, not even a restore: what an earlier run wrote
         * stays as it is until a policy runs. */
        bool frozen;
        /* Set before parsing: a file with errors adds what of it did parse (its guards, for the
         * counter warnings that go beside the errors), and the set is only for that: never run. */
        bool partial;
} PolicySet;

typedef struct PolicyError {
        char *file;
        unsigned line, column; /* 1-based; 0 when the error is about the file as a whole */
        char *message;
} PolicyError;

typedef struct PolicyErrors {
        PolicyError *items;
        size_t n;
} PolicyErrors;

/* Limits on what a policy may hold (a fleet-wide file must not be able to exhaust the daemon). */
#define POLICY_FILE_MAX (1024u * 1024u)
#define POLICY_POLICIES_MAX 1024u
#define POLICY_LIST_MAX 256u
#define POLICY_GUARDS_MAX 64u
#define POLICY_STRING_MAX 256u
#define POLICY_DEPTH_MAX 16u /* collections inside collections; the format needs 6 */
#define POLICY_MAX_PARALLEL_MAX 100000u
#define POLICY_COHORTS 100u /* cohorts are 0..99: hosts-percent N takes those below N */
/* The bounds of a try's timeout (bigtcpctl try --timeout, Try()). */
#define TRY_TIMEOUT_MIN_USEC (1 * USEC_PER_SEC)
#define TRY_TIMEOUT_MAX_USEC (24 * 3600 * USEC_PER_SEC)
#define TRY_TIMEOUT_DEFAULT_USEC (120 * USEC_PER_SEC)

_Static_assert(POLICY_STRING_MAX == GLOB_LENGTH_MAX, "a glob is a policy string: one limit for both");

PolicySet *policy_set_new(void);
/* One more holder; policy_set_free() drops one and frees with the last. */
PolicySet *policy_set_ref(PolicySet *s);
void policy_set_free(PolicySet *s);
static inline void policy_set_freep(PolicySet **s) {
        policy_set_free(*s);
}
void policy_errors_clear(PolicyErrors *e);
/* Append an error; `message` is taken on success only. */
int policy_errors_append(PolicyErrors *e, const char *file, unsigned line, unsigned column, char *message);

/* What the parser builds with. Every _done() accepts a zeroed object and leaves one behind. */
void strlist_done(StrList *l);
void rollback_spec_done(RollbackSpec *r);
void policy_done(Policy *p);
/* The built-in rollback defaults: every key set. */
int rollback_spec_builtin(RollbackSpec *ret);
/* `dst` is complete; take from `over` every key that it sets. Guards are replaced as a whole. */
int rollback_spec_merge(RollbackSpec *dst, const RollbackSpec *over);
int rollback_spec_copy(const RollbackSpec *src, RollbackSpec *ret);
/* Add a file that parsed clean: its name and content to the digest, its policies (moved out of
 * `policies`, each left zeroed) after those of the files before it and — for the set's first
 * file — its rollback defaults (moved out of `defaults`). On failure nothing has changed. */
int policy_set_add_file(PolicySet *s, const char *file, const char *data, size_t size, Policy *policies,
                        size_t n_policies, RollbackSpec *defaults);
/* The digest a set has after one more file: policy_set_new()'s starts at POLICY_DIGEST_EMPTY. */
#define POLICY_DIGEST_EMPTY FNV1A64_OFFSET
uint64_t policy_digest_add(uint64_t digest, const char *file, const char *data, size_t size);

/* Parse one YAML document held in memory and append its policies to `s`. `file` names it in
 * errors. Returns 0 when it parsed clean, -EINVAL when errors were appended to `errs` (all of
 * them, not only the first, sorted by position), or another -errno. On any failure `s` is left
 * as it was. */
int policy_parse_buffer(PolicySet *s, const char *file, const char *data, size_t size, PolicyErrors *errs);

/* Decide which policies apply to this host: `hosts`, `kernel` and rollout.hosts-percent. */
void policy_set_scope(PolicySet *s, const HostIdentity *host);

/* This host's cohort for the policy named `policy_name`: 0..99, the same on every call, edit and
 * boot, from nothing but the host's key (its machine id, or its hostname folded to lower case
 * where it has none) and the name:
 *   H = fmix64(FNV-1a-64("bigtcpd-cohort" NUL kind NUL key NUL policy_name))
 *   cohort = ((H >> 32) * 100) >> 32
 * kind is "machine-id" or "hostname"; fmix64 is MurmurHash3's 64-bit finalizer. */
unsigned policy_cohort(const HostIdentity *host, const char *policy_name);
/* What the cohorts of `host` come from: "machine-id" or "hostname". */
const char *host_identity_cohort_source(const HostIdentity *host);
/* machine-id(5): 32 hex digits and at most a newline after them, not all zero. `ret` gets them
 * in lower case. -EINVAL for anything else (an empty file, "uninitialized"). */
int machine_id_parse(const char *text, size_t size, char ret[static 33]);

const char *policy_scope_to_string(PolicyScope s);

const char *size_kind_to_string(SizeKind k);
/* Format a size spec into buf: "185000", "max", "legacy", "auto" (with its bounds when they are
 * not the defaults: "auto (min 100000, max 300000, ceiling-age 1h)") or "-" for unset. */
const char *size_spec_format(const SizeSpec *s, char *buf, size_t size);
/* "file:line:column: message", or "file: message" for an error about the whole file. */
int policy_error_format(const PolicyError *e, char **ret);
