/* counters.c — reading guard counters. /proc/net/{snmp,netstat} hold pairs of lines, a header
 * "Group: Name1 Name2 …" and its values "Group: 1 2 …"; /proc/net/snmp6 holds "Name value" lines
 * whose group is the name up to its "6" (Ip6InHdrErrors → Ip6.Ip6InHdrErrors). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "counters.h"
#include "parse-util.h"
#include "util.h"

#define SNMP_FILE_MAX (1024u * 1024u)

int link_counter_offset(const char *name) {
        return link_stats_field_offset(name);
}

int link_counter_get(const void *stats, size_t size, int offset, uint64_t *ret) {
        uint64_t v;

        if (offset < 0 || (size_t) offset + sizeof(uint64_t) > size)
                return -ENOENT;
        memcpy(&v, (const uint8_t *) stats + offset, sizeof(v));
        *ret = v;
        return 0;
}

void snmp_done(SnmpSnapshot *s) {
        free(s->entries);
        free(s->keys);
        *s = (SnmpSnapshot){};
}

/* Keys go one after the other into one buffer (a reading holds some 300 of them, read on every
 * tick of a probation: not an allocation each); entries point into it from snmp_finish() on. */
static int add(SnmpSnapshot *s, const char *group, size_t glen, const char *name, size_t nlen, uint64_t v) {
        size_t klen = glen + nlen + 2;

        if (glen == 0 || nlen == 0 || glen + nlen > 256)
                return 0;
        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 256;
                void *e = reallocarray(s->entries, cap, sizeof(*s->entries));
                if (!e)
                        return -ENOMEM;
                s->entries = e;
                s->cap = cap;
        }
        if (s->keys_len + klen > s->keys_cap) {
                size_t cap = s->keys_cap ? s->keys_cap * 2 : 8192;
                while (cap < s->keys_len + klen)
                        cap *= 2;
                char *k = realloc(s->keys, cap);
                if (!k)
                        return -ENOMEM;
                s->keys = k;
                s->keys_cap = cap;
        }
        char *k = s->keys + s->keys_len;
        memcpy(k, group, glen);
        k[glen] = '.';
        memcpy(k + glen + 1, name, nlen);
        k[glen + nlen + 1] = '\0';
        s->entries[s->n] = (struct SnmpEntry){.key_at = s->keys_len, .value = v};
        s->keys_len += klen;
        s->n++;
        return 0;
}

/* Counters are unsigned, a few gauges (Tcp MaxConn) are -1: those read as 0. */
static uint64_t parse_value(const char *s, size_t len) {
        uint64_t v = 0;
        if (len == 0 || s[0] == '-')
                return 0;
        for (size_t i = 0; i < len && s[i] >= '0' && s[i] <= '9'; i++)
                v = v * 10 + (uint64_t) (s[i] - '0');
        return v;
}

static const char *next_token(const char **p, const char *end, size_t *len) {
        const char *s = *p;
        while (s < end && (*s == ' ' || *s == '\t'))
                s++;
        const char *t = s;
        while (s < end && *s != ' ' && *s != '\t')
                s++;
        *len = (size_t) (s - t);
        *p = s;
        return *len ? t : NULL;
}

static int parse_pairs(SnmpSnapshot *s, const char *text) {
        const char *p = text;

        while (*p) {
                const char *h = p, *he = strchr(h, '\n');
                if (!he)
                        break;
                const char *v = he + 1, *ve = strchr(v, '\n');
                if (!ve)
                        ve = v + strlen(v);
                const char *hc = memchr(h, ':', (size_t) (he - h)), *vc = memchr(v, ':', (size_t) (ve - v));
                if (!hc || !vc || hc - h != vc - v || memcmp(h, v, (size_t) (hc - h)) != 0) {
                        p = v; /* not a pair: resynchronize on the next line */
                        continue;
                }
                size_t glen = (size_t) (hc - h);
                const char *hp = hc + 1, *vp = vc + 1;
                for (;;) {
                        size_t nl, vl;
                        const char *name = next_token(&hp, he, &nl), *val = next_token(&vp, ve, &vl);
                        if (!name || !val)
                                break;
                        int r = add(s, h, glen, name, nl, parse_value(val, vl));
                        if (r < 0)
                                return r;
                }
                p = *ve ? ve + 1 : ve;
        }
        return 0;
}

static int parse_six(SnmpSnapshot *s, const char *text) {
        const char *p = text;

        while (*p) {
                const char *e = strchr(p, '\n');
                if (!e)
                        e = p + strlen(p);
                size_t nl, vl;
                const char *q = p;
                const char *name = next_token(&q, e, &nl), *val = next_token(&q, e, &vl);
                if (name && val) {
                        const char *six = memchr(name, '6', nl);
                        if (six) {
                                int r = add(s, name, (size_t) (six - name) + 1, name, nl, parse_value(val, vl));
                                if (r < 0)
                                        return r;
                        }
                }
                p = *e ? e + 1 : e;
        }
        return 0;
}

int snmp_parse(SnmpSnapshot *s, const char *text, bool six) {
        return six ? parse_six(s, text) : parse_pairs(s, text);
}

static int compare_entries(const void *a, const void *b) {
        return strcmp(((const struct SnmpEntry *) a)->key, ((const struct SnmpEntry *) b)->key);
}

void snmp_finish(SnmpSnapshot *s) {
        for (size_t i = 0; i < s->n; i++)
                s->entries[i].key = s->keys + s->entries[i].key_at;
        if (s->n > 1)
                qsort(s->entries, s->n, sizeof(*s->entries), compare_entries);
}

int snmp_get(const SnmpSnapshot *s, const char *key, uint64_t *ret) {
        struct SnmpEntry k = {.key = (char *) key};
        const struct SnmpEntry *e;

        if (s->n == 0)
                return -ENOENT;
        e = bsearch(&k, s->entries, s->n, sizeof(*s->entries), compare_entries);
        if (!e)
                return -ENOENT;
        *ret = e->value;
        return 0;
}

const char *const snmp_file_names[3] = {"snmp", "netstat", "snmp6"};

int snmp_read(const char *proc_net, SnmpSnapshot *ret) {
        return snmp_read_files(&(SnmpFiles){.dir = proc_net}, ret);
}

unsigned snmp_files_of(const char *key) {
        static const char *const snmp_groups[] = {"Ip", "Icmp", "IcmpMsg", "Tcp", "Udp", "UdpLite"};
        const char *dot = key ? strchr(key, '.') : NULL;
        size_t glen = dot ? (size_t) (dot - key) : 0;

        if (glen == 0)
                return SNMP_FILES_ALL;
        if (key[glen - 1] == '6')
                return 1u << 2; /* snmp6: Ip6, Icmp6, Udp6, UdpLite6 */
        for (size_t i = 0; i < ELEMENTSOF(snmp_groups); i++)
                if (strlen(snmp_groups[i]) == glen && memcmp(key, snmp_groups[i], glen) == 0)
                        return 1u << 0;
        return 1u << 1 | 1u << 0; /* netstat's (TcpExt, IpExt, MPTcpExt), or a group not known here */
}

int snmp_read_files(const SnmpFiles *f, SnmpSnapshot *ret) {
        return snmp_read_some(f, SNMP_FILES_ALL, ret);
}

int snmp_read_some(const SnmpFiles *f, unsigned files, SnmpSnapshot *ret) {
        _cleanup_(freep) char *text = NULL;
        SnmpSnapshot s = {};
        size_t cap = 0;

        for (size_t i = 0; i < ELEMENTSOF(snmp_file_names); i++) {
                _cleanup_(closep) int opened = -1;
                size_t len;
                int fd, r;

                if (!(files & 1u << i))
                        continue;
                if (f->opened)
                        fd = f->fd[i];
                else {
                        _cleanup_(freep) char *path = NULL;
                        if (asprintf(&path, "%s/%s", f->dir, snmp_file_names[i]) < 0) {
                                snmp_done(&s);
                                return -ENOMEM;
                        }
                        fd = opened = open_file_bounded_at(AT_FDCWD, path, SNMP_FILE_MAX, READ_FILE_REGULAR, NULL);
                        if (fd == -ENOENT)
                                continue;
                }
                if (fd < 0 && f->opened)
                        continue; /* absent in its namespace */
                /* pread from offset 0 has a seq_file (/proc/net/snmp and its siblings) generate its
                 * text afresh: a descriptor kept open reads the counters as they are now, those of
                 * the namespace it was opened in, without opening anything again; the three are
                 * generated whole, and a test directory's regular file reads short only at its end */
                r = fd < 0 ? fd : read_fd_bounded(fd, 0, SNMP_FILE_MAX, 8192, true, &text, &cap, &len);
                if (r >= 0)
                        r = snmp_parse(&s, text, i == 2);
                if (r < 0) {
                        snmp_done(&s);
                        return r;
                }
        }
        snmp_finish(&s);
        *ret = s;
        return 0;
}
