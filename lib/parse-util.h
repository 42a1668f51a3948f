/* parse-util.h — the values a policy holds, parsed and checked without YAML: durations, kernel
 * version requirements, globs, route prefixes, guard counter names, the one stats64 field table. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest glob glob_is_valid() accepts. */
#define GLOB_LENGTH_MAX 256u
/* The most comparisons one kernel requirement may hold. */
#define KERNEL_REQS_MAX 256u

typedef enum KernelOp {
        KERNEL_OP_LT,
        KERNEL_OP_LE,
        KERNEL_OP_EQ,
        KERNEL_OP_NE,
        KERNEL_OP_GE,
        KERNEL_OP_GT,
        _KERNEL_OP_MAX,
        _KERNEL_OP_INVALID = -1,
} KernelOp;

/* One comparison of `kernel:`; several separated by commas must all hold. */
typedef struct KernelReq {
        KernelOp op;
        unsigned version[3]; /* major, minor, patch; missing parts are 0 */
} KernelReq;

typedef enum GuardCounterKind {
        GUARD_COUNTER_LINK, /* link.<stats64 field> */
        GUARD_COUNTER_SNMP, /* <Group>.<Name> from /proc/net/{snmp,netstat,snmp6} */
        GUARD_COUNTER_OBSERVER, /* drop.<reason>, drop.any, tcp.<…>: the device's own, from the eBPF observer */
        _GUARD_COUNTER_KIND_MAX,
        _GUARD_COUNTER_KIND_INVALID = -1,
} GuardCounterKind;

/* The observer's TCP counters, "tcp.sent" …: their index in observer_tcp_counters, or -ENOENT. */
typedef enum ObserverTcpCounter {
        OBSERVER_TCP_SENT,
        OBSERVER_TCP_SENT_BIG,
        OBSERVER_TCP_RETRANS,
        OBSERVER_TCP_RETRANS_BIG,
        _OBSERVER_TCP_MAX,
} ObserverTcpCounter;
extern const char *const observer_tcp_counters[_OBSERVER_TCP_MAX + 1]; /* NULL-terminated */
int observer_tcp_counter(const char *name);

/* An item of match.route: `default`, or an IPv4/IPv6 prefix. */
typedef struct RoutePrefix {
        bool is_default; /* the default route of either family */
        int family;      /* AF_INET or AF_INET6; 0 with is_default */
        uint8_t addr[16];
        uint8_t prefixlen;
} RoutePrefix;

/* "500ms", "30s", "5m", "1h": a positive whole number and one unit. -EINVAL when malformed,
 * -ERANGE for zero or an overflow. */
int parse_duration_usec(const char *s, uint64_t *ret);
/* The largest unit that divides it exactly: what parse_duration_usec() reads back. */
const char *format_duration_usec(uint64_t usec, char *buf, size_t size);
/* Decimal digits only, no sign: -EINVAL when malformed, -ERANGE above UINT64_MAX. */
int parse_uint64(const char *s, uint64_t *ret);
/* A non-negative number in plain decimal notation ("0.02", ".5", "1e-3"): no sign, "inf", "nan" or
 * hex floats. */
int parse_ratio(const char *s, double *ret);

/* A kernel release, leniently: "6.18.44-fc-v595" is 6.18.44. */
int parse_kernel_version(const char *s, unsigned ret[3]);
/* ">= 6.3, < 7.0": comparisons separated by commas, each with 1-3 numeric parts. -EINVAL when
 * malformed, -E2BIG past KERNEL_REQS_MAX. */
int parse_kernel_reqs(const char *s, KernelReq **ret, size_t *ret_n);
/* Does the release satisfy all `n` comparisons? A release that does not parse satisfies none. */
bool kernel_req_holds(const KernelReq *reqs, size_t n, const char *kernel_release);
const char *kernel_op_to_string(KernelOp op);

/* An fnmatch() pattern with balanced brackets and escapes, 1..GLOB_LENGTH_MAX long. */
bool glob_is_valid(const char *pattern);

/* Parse "default", "10.0.0.0/8", "2001:db8::/32" or a bare address (a host prefix). Returns
 * -EINVAL when malformed, -EDOM when host bits are set beyond the prefix length. */
int route_prefix_parse(const char *s, RoutePrefix *ret);

/* The byte offset of the field `field` ("tx_errors") in struct rtnl_link_stats64, or -ENOENT when
 * it is no field a link guard may watch. */
int link_stats_field_offset(const char *field);
/* The field a misspelt one ("tx_erors") most likely meant, or NULL. */
const char *link_stats_field_suggest(const char *field);
/* Is `name` a valid guard counter ("link.tx_errors", "Tcp.RetransSegs")? Returns 0 and its kind,
 * or -EINVAL. */
int guard_counter_parse(const char *name, GuardCounterKind *ret);
const char *guard_counter_kind_to_string(GuardCounterKind k);

/* The link kinds a policy may name: the kernel's (IFLA_INFO_KIND of every rtnl_link_ops in
 * Linux 6.18), "device" (no kind: a physical NIC) and "loopback". NULL-terminated. */
extern const char *const link_kinds[];
bool link_kind_is_known(const char *s);
/* What an unknown kind most likely meant: "device" for the words people use for a physical NIC
 * ("ethernet", "physical", "nic"), else the nearest known kind, or NULL when none is near. */
const char *link_kind_suggest(const char *s);

/* The word of `words` (NULL-terminated) nearest to `s` in edit distance, counting '_' and '-' and
 * upper and lower case as the same: NULL when even the nearest is more than a third of `s` away
 * (at least 1, at most 3 edits). For "did you mean": gso_max_size gives gso-max-size. */
const char *nearest_word(const char *s, const char *const *words);
/* The same over `n` words. */
const char *nearest_word_n(const char *s, const char *const *words, size_t n);
