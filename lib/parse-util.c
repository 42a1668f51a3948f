/* parse-util.c — the values a policy holds, parsed and checked without YAML: durations, kernel
 * version requirements, globs, route prefixes, guard counter names, and the one table of the
 * stats64 fields that link guards may watch (counters.c reads the same table). */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/if_link.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "parse-util.h"
#include "util.h"

#define USEC_PER_MINUTE (60 * USEC_PER_SEC)
#define USEC_PER_HOUR (60 * USEC_PER_MINUTE)

static bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

/* ---- string tables ---- */

static const char *const kernel_op_table[_KERNEL_OP_MAX] = {
        [KERNEL_OP_LT] = "<",  [KERNEL_OP_LE] = "<=", [KERNEL_OP_EQ] = "==",
        [KERNEL_OP_NE] = "!=", [KERNEL_OP_GE] = ">=", [KERNEL_OP_GT] = ">",
};

const char *kernel_op_to_string(KernelOp op) {
        if (op < 0 || op >= _KERNEL_OP_MAX)
                return NULL;
        return kernel_op_table[op];
}

static const char *const guard_counter_kind_table[_GUARD_COUNTER_KIND_MAX] = {
        [GUARD_COUNTER_LINK] = "link",
        [GUARD_COUNTER_SNMP] = "snmp",
        [GUARD_COUNTER_OBSERVER] = "observer",
};

const char *const observer_tcp_counters[_OBSERVER_TCP_MAX + 1] = {
        [OBSERVER_TCP_SENT] = "tcp.sent",
        [OBSERVER_TCP_SENT_BIG] = "tcp.sent-big",
        [OBSERVER_TCP_RETRANS] = "tcp.retrans",
        [OBSERVER_TCP_RETRANS_BIG] = "tcp.retrans-big",
};

int observer_tcp_counter(const char *name) {
        for (int i = 0; i < _OBSERVER_TCP_MAX; i++)
                if (name && strcmp(name, observer_tcp_counters[i]) == 0)
                        return i;
        return -ENOENT;
}

const char *guard_counter_kind_to_string(GuardCounterKind k) {
        if (k < 0 || k >= _GUARD_COUNTER_KIND_MAX)
                return NULL;
        return guard_counter_kind_table[k];
}

/* The fields of struct rtnl_link_stats64 that a link guard may watch ("link.<field>"). */
static const struct {
        const char *name;
        size_t offset;
} link_stats_fields[] = {
#define F(x) {#x, offsetof(struct rtnl_link_stats64, x)}
        F(rx_packets),         F(tx_packets),          F(rx_bytes),           F(tx_bytes),
        F(rx_errors),          F(tx_errors),           F(rx_dropped),         F(tx_dropped),
        F(multicast),          F(collisions),          F(rx_length_errors),   F(rx_over_errors),
        F(rx_crc_errors),      F(rx_frame_errors),     F(rx_fifo_errors),     F(rx_missed_errors),
        F(tx_aborted_errors),  F(tx_carrier_errors),   F(tx_fifo_errors),     F(tx_heartbeat_errors),
        F(tx_window_errors),   F(rx_compressed),       F(tx_compressed),      F(rx_nohandler),
        F(rx_otherhost_dropped),
#undef F
};

int link_stats_field_offset(const char *field) {
        for (size_t i = 0; i < ELEMENTSOF(link_stats_fields); i++)
                if (streq_ptr(link_stats_fields[i].name, field))
                        return (int) link_stats_fields[i].offset;
        return -ENOENT;
}

const char *link_stats_field_suggest(const char *field) {
        const char *names[ELEMENTSOF(link_stats_fields)];

        for (size_t i = 0; i < ELEMENTSOF(link_stats_fields); i++)
                names[i] = link_stats_fields[i].name;
        return nearest_word_n(field, names, ELEMENTSOF(names));
}

/* ---- numbers and durations ---- */

int parse_duration_usec(const char *s, uint64_t *ret) {
        static const struct {
                const char *suffix;
                uint64_t usec;
        } units[] = {
                {"ms", USEC_PER_MSEC},
                {"s", USEC_PER_SEC},
                {"m", USEC_PER_MINUTE},
                {"h", USEC_PER_HOUR},
        };
        uint64_t n = 0;
        const char *e;

        if (!s || !isdigit((unsigned char) *s))
                return -EINVAL;
        for (e = s; isdigit((unsigned char) *e); e++) {
                unsigned d = (unsigned) (*e - '0');
                if (n > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                n = n * 10 + d;
        }
        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                if (!streq(e, units[i].suffix))
                        continue;
                if (n == 0)
                        return -ERANGE;
                if (n > UINT64_MAX / units[i].usec)
                        return -ERANGE;
                if (ret)
                        *ret = n * units[i].usec;
                return 0;
        }
        return -EINVAL;
}

const char *format_duration_usec(uint64_t usec, char *buf, size_t size) {
        if (usec % USEC_PER_HOUR == 0)
                snprintf(buf, size, "%" PRIu64 "h", usec / USEC_PER_HOUR);
        else if (usec % USEC_PER_MINUTE == 0)
                snprintf(buf, size, "%" PRIu64 "m", usec / USEC_PER_MINUTE);
        else if (usec % USEC_PER_SEC == 0)
                snprintf(buf, size, "%" PRIu64 "s", usec / USEC_PER_SEC);
        else
                snprintf(buf, size, "%" PRIu64 "ms", usec / USEC_PER_MSEC);
        return buf;
}

int parse_uint64(const char *s, uint64_t *ret) {
        uint64_t x = 0;

        if (!s || !isdigit((unsigned char) *s))
                return -EINVAL;
        for (; *s; s++) {
                unsigned d = (unsigned) (*s - '0');
                if (!isdigit((unsigned char) *s))
                        return -EINVAL;
                if (x > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                x = x * 10 + d;
        }
        *ret = x;
        return 0;
}

int parse_ratio(const char *s, double *ret) {
        char *e;
        double d;

        /* plain decimal notation only: no sign, no "inf", "nan" or hex floats */
        if (!s || !(isdigit((unsigned char) s[0]) || (s[0] == '.' && isdigit((unsigned char) s[1]))))
                return -EINVAL;
        if (s[strspn(s, "0123456789.eE+-")] != '\0')
                return -EINVAL;
        errno = 0;
        d = strtod(s, &e);
        if (errno == ERANGE)
                return -ERANGE;
        if (errno != 0 || *e != '\0' || !isfinite(d) || d < 0)
                return -EINVAL;
        *ret = d;
        return 0;
}

/* ---- kernel versions ---- */

/* One numeric part of a version; kernel parts are small, so anything huge is a typo. */
static const char *parse_version_part(const char *s, unsigned *ret) {
        unsigned long v = 0;
        size_t n = 0;

        for (; isdigit((unsigned char) *s); s++, n++) {
                v = v * 10 + (unsigned long) (*s - '0');
                if (n >= 6)
                        return NULL;
        }
        if (n == 0)
                return NULL;
        *ret = (unsigned) v;
        return s;
}

/* Lenient on purpose: a release such as "6.18.44-fc-v595" or "6.8.0rc1" carries a suffix that
 * says nothing about the version. */
int parse_kernel_version(const char *s, unsigned ret[3]) {
        unsigned v[3] = {};
        const char *e;

        if (!s)
                return -EINVAL;
        e = parse_version_part(s, &v[0]);
        if (!e)
                return -EINVAL;
        for (size_t i = 1; i < 3 && e[0] == '.' && isdigit((unsigned char) e[1]); i++) {
                e = parse_version_part(e + 1, &v[i]);
                if (!e)
                        return -EINVAL;
        }
        if (ret)
                memcpy(ret, v, sizeof(v));
        return 0;
}

/* Strict: exactly 1-3 numeric parts, nothing else. */
static int parse_kernel_version_strict(const char *s, size_t len, unsigned ret[3]) {
        unsigned v[3] = {};
        const char *e = s, *end = s + len;

        for (size_t i = 0; i < 3; i++) {
                e = parse_version_part(e, &v[i]);
                if (!e || e > end)
                        return -EINVAL;
                if (e == end)
                        break;
                if (*e != '.' || i == 2)
                        return -EINVAL;
                e++;
        }
        if (e != end)
                return -EINVAL;
        memcpy(ret, v, sizeof(v));
        return 0;
}

static int version_compare(const unsigned a[3], const unsigned b[3]) {
        for (size_t i = 0; i < 3; i++)
                if (a[i] != b[i])
                        return a[i] < b[i] ? -1 : 1;
        return 0;
}

static bool kernel_op_holds(KernelOp op, int c) {
        switch (op) {
        case KERNEL_OP_LT:
                return c < 0;
        case KERNEL_OP_LE:
                return c <= 0;
        case KERNEL_OP_EQ:
                return c == 0;
        case KERNEL_OP_NE:
                return c != 0;
        case KERNEL_OP_GE:
                return c >= 0;
        case KERNEL_OP_GT:
                return c > 0;
        case _KERNEL_OP_MAX:
        case _KERNEL_OP_INVALID:
                break;
        }
        return false;
}

bool kernel_req_holds(const KernelReq *reqs, size_t n, const char *kernel_release) {
        unsigned v[3];

        if (n == 0)
                return true;
        if (parse_kernel_version(kernel_release, v) < 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!kernel_op_holds(reqs[i].op, version_compare(v, reqs[i].version)))
                        return false;
        return true;
}

int parse_kernel_reqs(const char *s, KernelReq **ret, size_t *ret_n) {
        static const struct {
                const char *text;
                KernelOp op;
        } ops[] = {
                /* two-character operators first */
                {"<=", KERNEL_OP_LE}, {">=", KERNEL_OP_GE}, {"==", KERNEL_OP_EQ}, {"!=", KERNEL_OP_NE},
                {"<", KERNEL_OP_LT},  {">", KERNEL_OP_GT},  {"=", KERNEL_OP_EQ},
        };
        _cleanup_(freep) KernelReq *reqs = NULL;
        size_t n = 0;
        const char *p = s;

        for (;;) {
                KernelReq req = {.op = _KERNEL_OP_INVALID};
                const char *v, *ve;
                KernelReq *t;

                while (*p == ' ' || *p == '\t')
                        p++;
                for (size_t i = 0; i < ELEMENTSOF(ops); i++) {
                        size_t l = strlen(ops[i].text);
                        if (strncmp(p, ops[i].text, l) == 0) {
                                req.op = ops[i].op;
                                p += l;
                                break;
                        }
                }
                if (req.op == _KERNEL_OP_INVALID)
                        return -EINVAL;
                while (*p == ' ' || *p == '\t')
                        p++;
                v = p;
                while (*p && *p != ',' && *p != ' ' && *p != '\t')
                        p++;
                ve = p;
                if (parse_kernel_version_strict(v, (size_t) (ve - v), req.version) < 0)
                        return -EINVAL;
                while (*p == ' ' || *p == '\t')
                        p++;
                if (n >= KERNEL_REQS_MAX)
                        return -E2BIG;
                t = realloc(reqs, (n + 1) * sizeof(*reqs));
                if (!t)
                        return -ENOMEM;
                reqs = t;
                reqs[n++] = req;
                if (*p == '\0')
                        break;
                if (*p != ',')
                        return -EINVAL;
                p++;
        }
        *ret = TAKE_PTR(reqs);
        *ret_n = n;
        return 0;
}

/* ---- globs, prefixes, counter names ---- */

/* One member of a bracket expression at p[*j]: a character (its byte, escaped or not), or a class
 * ([:alpha:], -1). -EINVAL when malformed: an unknown class, a collating element or equivalence
 * class of more than one character, or the pattern ends. */
static int bracket_member(const char *p, size_t len, size_t *j) {
        static const char *const classes[] = {"alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower",
                                              "print", "punct", "space", "upper", "xdigit"};

        if (*j >= len)
                return -EINVAL;
        if (p[*j] == '\\') {
                if (*j + 1 >= len)
                        return -EINVAL;
                *j += 2;
                return (unsigned char) p[*j - 1];
        }
        if (p[*j] == '[' && *j + 1 < len && strchr(":.=", p[*j + 1])) {
                char close[3] = {p[*j + 1], ']', 0};
                const char *start = p + *j + 2, *e = strstr(start, close);
                size_t n;

                if (!e)
                        return -EINVAL;
                n = (size_t) (e - start);
                *j = (size_t) (e - p) + 2;
                if (close[0] != ':') /* [.c.], [=c=]: one character, as itself */
                        return n == 1 ? (unsigned char) start[0] : -EINVAL;
                for (size_t k = 0; k < ELEMENTSOF(classes); k++)
                        if (strlen(classes[k]) == n && strncmp(start, classes[k], n) == 0)
                                return -1;
                return -EINVAL;
        }
        return (unsigned char) p[(*j)++];
}

/* fnmatch() treats a malformed pattern as literal text, an unknown class as matching nothing and
 * a reversed range as empty; reject them instead, so that a typo is an error rather than a policy
 * that silently matches nothing. */
bool glob_is_valid(const char *pattern) {
        size_t len;

        if (strempty(pattern))
                return false;
        len = strlen(pattern);
        if (len > GLOB_LENGTH_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                if (pattern[i] == '\\') {
                        if (i + 1 >= len)
                                return false;
                        i++;
                        continue;
                }
                if (pattern[i] != '[')
                        continue;

                size_t j = i + 1;
                if (j < len && (pattern[j] == '!' || pattern[j] == '^'))
                        j++;
                for (bool first = true;; first = false) {
                        if (j >= len)
                                return false;
                        if (pattern[j] == ']' && !first) /* a leading ']' is a member */
                                break;
                        int lo = bracket_member(pattern, len, &j);
                        if (lo == -EINVAL)
                                return false;
                        /* a range, unless the '-' is the last member */
                        if (j + 1 < len && pattern[j] == '-' && pattern[j + 1] != ']') {
                                j++;
                                int hi = bracket_member(pattern, len, &j);
                                if (lo < 0 || hi < 0 || hi < lo)
                                        return false;
                        }
                }
                i = j;
        }
        return true;
}

int guard_counter_parse(const char *name, GuardCounterKind *ret) {
        const char *p;

        if (!name)
                return -EINVAL;
        if (strncmp(name, "link.", 5) == 0) {
                if (link_stats_field_offset(name + 5) < 0)
                        return -EINVAL;
                if (ret)
                        *ret = GUARD_COUNTER_LINK;
                return 0;
        }

        /* the observer's, lower case (no SNMP group is): drop.<kernel drop reason>, drop.any, and
         * four of TCP; whether this kernel has the reason is a question for the host (guard.c) */
        if (strncmp(name, "drop.", 5) == 0) {
                p = name + 5;
                if (!islower((unsigned char) *p))
                        return -EINVAL;
                while (islower((unsigned char) *p) || isdigit((unsigned char) *p) || *p == '_')
                        p++;
                if (*p != '\0' || p - name > 64)
                        return -EINVAL;
                if (ret)
                        *ret = GUARD_COUNTER_OBSERVER;
                return 0;
        }
        if (strncmp(name, "tcp.", 4) == 0) {
                if (observer_tcp_counter(name) < 0)
                        return -EINVAL;
                if (ret)
                        *ret = GUARD_COUNTER_OBSERVER;
                return 0;
        }

        /* <Group>.<Name>, as the headers of /proc/net/{snmp,netstat} and the prefixes of snmp6 */
        p = name;
        if (!isalpha((unsigned char) *p))
                return -EINVAL;
        while (isalnum((unsigned char) *p))
                p++;
        if (*p != '.')
                return -EINVAL;
        p++;
        if (!isalpha((unsigned char) *p))
                return -EINVAL;
        while (isalnum((unsigned char) *p) || *p == '_')
                p++;
        if (*p != '\0')
                return -EINVAL;
        if (ret)
                *ret = GUARD_COUNTER_SNMP;
        return 0;
}

int route_prefix_parse(const char *s, RoutePrefix *ret) {
        RoutePrefix r = {};
        char addr[INET6_ADDRSTRLEN + 1];
        const char *slash;
        size_t alen;
        unsigned maxlen, plen;

        if (!s)
                return -EINVAL;
        if (streq(s, "default")) {
                r.is_default = true;
                if (ret)
                        *ret = r;
                return 0;
        }

        slash = strchr(s, '/');
        alen = slash ? (size_t) (slash - s) : strlen(s);
        if (alen == 0 || alen >= sizeof(addr))
                return -EINVAL;
        memcpy(addr, s, alen);
        addr[alen] = '\0';
        r.family = strchr(addr, ':') ? AF_INET6 : AF_INET;
        if (inet_pton(r.family, addr, r.addr) != 1)
                return -EINVAL;
        maxlen = r.family == AF_INET6 ? 128 : 32;

        if (slash) {
                const char *p = slash + 1;
                size_t n = 0;

                plen = 0;
                for (; isdigit((unsigned char) *p); p++, n++) {
                        if (n >= 3)
                                return -EINVAL;
                        plen = plen * 10 + (unsigned) (*p - '0');
                }
                if (n == 0 || *p != '\0' || plen > maxlen)
                        return -EINVAL;
        } else
                plen = maxlen;
        r.prefixlen = (uint8_t) plen;

        for (unsigned bit = plen; bit < maxlen; bit++)
                if (r.addr[bit / 8] & (0x80u >> (bit % 8)))
                        return -EDOM;

        if (ret)
                *ret = r;
        return 0;
}

const char *const link_kinds[] = {
        "device",    "loopback",  "amt",       "bareudp",  "batadv",   "bond",      "bridge",   "can",
        "caif",      "dsa",       "dummy",     "erspan",   "geneve",   "gre",       "gretap",   "gtp",
        "hsr",       "ifb",       "ip6erspan", "ip6gre",   "ip6gretap", "ip6tnl",   "ipip",     "ipoib",
        "ipvlan",    "ipvtap",    "lowpan",    "macsec",   "macvlan",  "macvtap",   "netdevsim", "netkit",
        "nlmon",     "openvswitch", "ovpn",    "pfcp",     "ppp",      "rmnet",     "sit",      "team",
        "tun",       "vcan",      "veth",      "virt_wifi", "vlan",    "vrf",       "vsockmon", "vti",
        "vti6",      "vxcan",     "vxlan",     "wireguard", "wwan",    "xfrm",      NULL,
};

bool link_kind_is_known(const char *s) {
        for (size_t i = 0; link_kinds[i]; i++)
                if (strcmp(link_kinds[i], s) == 0)
                        return true;
        return false;
}

const char *link_kind_suggest(const char *s) {
        static const char *const nic_words[] = {"ethernet", "ether", "eth", "physical", "phys", "nic",
                                                "hardware", "hw", "none", "real"};
        for (size_t i = 0; i < sizeof(nic_words) / sizeof(nic_words[0]); i++)
                if (strcasecmp(s, nic_words[i]) == 0)
                        return "device";
        if (strcasecmp(s, "lo") == 0)
                return "loopback";
        return nearest_word(s, link_kinds);
}

static char fold(char c) {
        return c == '_' ? '-' : (char) tolower((unsigned char) c);
}

/* Edit distance (optimal string alignment: insert, delete, replace, swap two neighbours) with
 * folded characters, or `cap` + 1 when it is above `cap`. Words past 63 characters are never near. */
static size_t edit_distance(const char *a, const char *b, size_t cap) {
        size_t la = strlen(a), lb = strlen(b);
        uint8_t m[64][64];

        if (la >= 64 || lb >= 64 || (la > lb ? la - lb : lb - la) > cap)
                return cap + 1;
        for (size_t i = 0; i <= la; i++)
                m[i][0] = (uint8_t) i;
        for (size_t j = 0; j <= lb; j++)
                m[0][j] = (uint8_t) j;
        for (size_t i = 1; i <= la; i++)
                for (size_t j = 1; j <= lb; j++) {
                        size_t v = m[i - 1][j - 1] + (fold(a[i - 1]) != fold(b[j - 1]));
                        if (m[i - 1][j] + 1u < v)
                                v = m[i - 1][j] + 1u;
                        if (m[i][j - 1] + 1u < v)
                                v = m[i][j - 1] + 1u;
                        if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) && fold(a[i - 2]) == fold(b[j - 1]) &&
                            m[i - 2][j - 2] + 1u < v)
                                v = m[i - 2][j - 2] + 1u;
                        m[i][j] = (uint8_t) v;
                }
        return m[la][lb] <= cap ? m[la][lb] : cap + 1;
}

const char *nearest_word_n(const char *s, const char *const *words, size_t n) {
        size_t cap = strlen(s) / 3, best = SIZE_MAX;
        const char *hit = NULL;

        if (cap < 1)
                cap = 1;
        if (cap > 3)
                cap = 3;
        for (size_t i = 0; i < n; i++) {
                size_t d = edit_distance(s, words[i], cap);
                if (d <= cap && d < best) {
                        best = d;
                        hit = words[i];
                }
        }
        return hit;
}

const char *nearest_word(const char *s, const char *const *words) {
        size_t n = 0;
        while (words[n])
                n++;
        return nearest_word_n(s, words, n);
}
