/* counters.h — the error counters guards watch: the fields of a link's stats64, and the
 * namespace-wide counters of /proc/net/snmp, /proc/net/netstat and /proc/net/snmp6. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* link.<field>: the byte offset of the field in struct rtnl_link_stats64, or -ENOENT (from
 * parse-util.c's table, the one that policy validation uses). */
int link_counter_offset(const char *name);
/* The field's value from a stats64 blob of `size` bytes (older kernels send shorter ones):
 * -ENOENT when the blob does not reach the field. */
int link_counter_get(const void *stats, size_t size, int offset, uint64_t *ret);

/* One reading of the namespace's SNMP counters, "Group.Name" → value. The keys lie in `keys`, the
 * entries point into it once snmp_finish() ran. */
typedef struct SnmpSnapshot {
        struct SnmpEntry {
                const char *key;
                uint64_t value;
                size_t key_at; /* its offset in keys */
        } *entries;
        size_t n, cap;
        char *keys;
        size_t keys_len, keys_cap;
} SnmpSnapshot;

/* Where a namespace's three files are: below a directory ("/proc/net", or a test directory),
 * or — another namespace's — opened while inside it (snmp, netstat, snmp6; -1: absent there).
 * Such a file reads its own namespace's counters wherever the reader is now: it is read again
 * with pread() from its start, never reopened. */
typedef struct SnmpFiles {
        const char *dir; /* used when `opened` is false */
        bool opened;
        int fd[3];
} SnmpFiles;

/* Read the three files below `proc_net` ("/proc/net", or a test directory). Files that do not
 * exist are skipped (a kernel without IPv6 has no snmp6). */
int snmp_read(const char *proc_net, SnmpSnapshot *ret);
int snmp_read_files(const SnmpFiles *f, SnmpSnapshot *ret);
/* The files' names below /proc/thread-self/net, in the order of SnmpFiles.fd. */
extern const char *const snmp_file_names[3];
/* Parse one file's text into `s` (appending); `six` for the snmp6 "Name value" format. */
int snmp_parse(SnmpSnapshot *s, const char *text, bool six);
/* Sort after appending, before lookups. */
void snmp_finish(SnmpSnapshot *s);
int snmp_get(const SnmpSnapshot *s, const char *key, uint64_t *ret);
void snmp_done(SnmpSnapshot *s);
