/* test-state.c — the state file: snapshot and journal round trips, what the parser refuses, and
 * the store's choices (journal or snapshot, forgotten devices before their successors), and the
 * searches of `auto` kept in it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <event2/event.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "auto-size.h"
#include "durable.h"
#include "intern.h"
#include "netlink-link.h"
#include "probation.h"
#include "state.h"
#include "test-helpers.h"

typedef struct Dir {
        char path[64];
        struct event_base *base;
} Dir;

static void dir_open(Dir *d) {
        snprintf(d->path, sizeof(d->path), "/tmp/bigtcpd-test-state-XXXXXX");
        assert_non_null(mkdtemp(d->path));
        d->base = event_base_new();
        assert_non_null(d->base);
}

static void dir_close(Dir *d) {
        char p[128];
        const char *files[] = {"state.json", "state.journal", "state.json.corrupt", "state.journal.corrupt",
                               ".state.json.tmp"};
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                snprintf(p, sizeof(p), "%s/%s", d->path, files[i]);
                if (unlink(p) < 0 && errno == EISDIR)
                        (void) rmdir(p);
        }
        assert_int_equal(rmdir(d->path), 0);
        event_base_free(d->base);
}

static const char *dir_file(const Dir *d, const char *name, char *buf, size_t size) {
        snprintf(buf, size, "%s/%s", d->path, name);
        return buf;
}

static bool dir_has(const Dir *d, const char *name) {
        char p[128];
        struct stat st;
        return lstat(dir_file(d, name, p, sizeof(p)), &st) == 0;
}

static off_t dir_size(const Dir *d, const char *name) {
        char p[128];
        struct stat st;
        assert_int_equal(lstat(dir_file(d, name, p, sizeof(p)), &st), 0);
        return st.st_size;
}

static void put_file(const char *path, const char *text) {
        FILE *f = fopen(path, "we");
        assert_non_null(f);
        fputs(text, f);
        assert_int_equal(fclose(f), 0);
}

static char *get_file(const char *path) {
        char *text = NULL;
        size_t size;
        assert_int_equal(read_file_bounded(path, 1 << 20, READ_FILE_REGULAR, &text, &size), 0);
        return text;
}

/* A disk that fills up: writes take `budget` more bytes (-1: any), then fail with ENOSPC, the
 * write that reaches it cut short as the kernel cuts it; ftruncate fails while `truncate_fails`. */
typedef struct Disk {
        long budget;
        bool truncate_fails;
        unsigned writes_failed;
} Disk;

static ssize_t disk_write(void *userdata, int fd, const void *buf, size_t n) {
        Disk *d = userdata;
        if (d->budget < 0)
                return write(fd, buf, n);
        if (d->budget == 0) {
                d->writes_failed++;
                errno = ENOSPC;
                return -1;
        }
        size_t k = n < (size_t) d->budget ? n : (size_t) d->budget;
        ssize_t w = write(fd, buf, k);
        if (w > 0)
                d->budget -= w;
        return w;
}

static int disk_ftruncate(void *userdata, int fd, off_t length) {
        Disk *d = userdata;
        if (d->truncate_fails) {
                errno = EIO;
                return -1;
        }
        return ftruncate(fd, length);
}

static void on_recovered(void *userdata) {
        (*(unsigned *) userdata)++;
}

static StateEntry *find_entry(StateEntry *e, size_t n, int ifindex) {
        for (size_t i = 0; i < n; i++)
                if (e[i].ifindex == ifindex)
                        return &e[i];
        return NULL;
}

/* What the kernel would tell of a device, through the daemon's own path (device_update()). */
static void identify(Device *d, const char *name, const char *kind, const uint8_t *mac, size_t mac_len) {
        LinkMessage m = {.ifindex = d->ifindex, .ifname = name, .kind = kind, .addr = mac, .addr_len = mac_len};
        unsigned changes;
        assert_int_equal(device_update(d, &m, 0, &changes), 0);
}

static Device *written(DeviceTable *t, int ifindex, const char *name, Sizes original, unsigned mask) {
        Device *d;
        assert_int_equal(device_add(t, ifindex, &d), 0);
        identify(d, name, NULL, NULL, 0);
        d->record.has_original = true;
        d->record.original = original;
        d->record.written = mask;
        return d;
}

/* A test's start: an empty directory and device table; with a store on them. */
static void setup(Dir *dir, DeviceTable *t) {
        dir_open(dir);
        assert_int_equal(device_table_init(t), 0);
}

static StateStore *store_setup(Dir *dir, DeviceTable *t) {
        StateStore *s;
        setup(dir, t);
        assert_int_equal(state_store_new(dir->base, dir->path, t, &s), 0);
        return s;
}

static void load(const Dir *dir, const DeviceTable *t, StateEntry **e, size_t *n, int expect) {
        StateStore *s;
        assert_int_equal(state_store_new(dir->base, dir->path, t, &s), 0);
        assert_int_equal(state_store_load(s, e, n, NULL), expect);
        state_store_free(s);
}

/* A test's end: the device table, the directory and the files in it go. */
static void teardown(DeviceTable *t, Dir *dir) {
        device_table_done(t);
        dir_close(dir);
}

/* A test's end after what a restart would load now is `n_expected` entries. */
static void reload_and_teardown(DeviceTable *t, Dir *dir, size_t n_expected) {
        StateEntry *e = NULL;
        size_t n = 0;
        load(dir, t, &e, &n, 0);
        assert_int_equal(n, n_expected);
        state_entries_free(e, n);
        teardown(t, dir);
}

static void test_snapshot_roundtrip(void **state) {
        Dir dir;
        DeviceTable t;
        Device *d;
        StateEntry *e = NULL;
        size_t n = 0;
        char path[128];

        setup(&dir, &t);
        load(&dir, &t, &e, &n, 0); /* missing: fine, empty */
        assert_int_equal(n, 0);

        d = written(&t, 42, "eth0", (Sizes){65536, 65536, 60000, 60001}, SIZE_BITS_IPV4 | SIZE_BIT_GSO);
        identify(d, "eth0", "veth", (uint8_t[]){2, 0, 0, 0, 0, 0x2a}, 6);
        d->life.held = true;
        device_history(d)->held_desired = (Sizes){185000, 185000, 185000, 185000};
        d->life.state = DEVICE_ROLLED_BACK;
        assert_int_equal(device_add(&t, 43, &d), 0); /* never written: not in the file */
        /* a name is the kernel's bytes: quotes, backslashes and control characters are escaped */
        d = written(&t, 44, "a\"b\\c\001d\x7f", (Sizes){1, 2, 3, 4}, SIZE_BITS_ALL);
        /* the sizes that passed, the oldest first: one in the device, the others beside it */
        device_proven_set(d, &(ProvenSizes){.items = {{10, 11, 12, 13}, {20, 21, 22, 23}, {30, 31, 32, 33}}, .n = 3});
        assert_int_equal(state_write_snapshot(dir.path, &t, 1), 0);

        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 2);
        if (e[0].ifindex != 42) { /* entries come in table order */
                StateEntry x = e[0];
                e[0] = e[1];
                e[1] = x;
        }
        assert_int_equal(e[1].ifindex, 44);
        assert_string_equal(e[1].ifname, "a\"b\\c\001d\x7f");
        assert_int_equal(e[0].ifindex, 42);
        assert_string_equal(e[0].ifname, "eth0");
        /* who it is: kind and MAC ("" for none) */
        assert_true(e[0].has_identity);
        assert_string_equal(e[0].kind, "veth");
        assert_string_equal(e[0].mac, "02:00:00:00:00:2a");
        assert_true(e[1].has_identity);
        assert_string_equal(e[1].kind, "");
        assert_string_equal(e[1].mac, "");
        assert_int_equal(e[0].original.gro_ipv4_max_size, 60001);
        assert_int_equal(e[0].written, SIZE_BITS_IPV4 | SIZE_BIT_GSO);
        assert_int_equal(e[0].state, DEVICE_ROLLED_BACK);
        assert_true(e[0].held);
        assert_int_equal(e[0].held_desired.gso_max_size, 185000);
        assert_int_equal(e[0].proven.n, 0);
        assert_int_equal(e[1].proven.n, 3);
        for (unsigned i = 0; i < 3; i++) {
                Sizes want = {10 * (i + 1), 10 * (i + 1) + 1, 10 * (i + 1) + 2, 10 * (i + 1) + 3};
                assert_memory_equal(&e[1].proven.items[i], &want, sizeof(Sizes));
        }
        state_entries_free(e, n);
        device_table_done(&t);

        /* A snapshot that does not parse is loaded as far as it goes, and a copy kept aside. */
        snprintf(path, sizeof(path), "%s/state.json", dir.path);
        FILE *f = fopen(path, "we");
        fputs("{\"version\":1,\"devices\":[{\"ifindex\":", f); /* truncated */
        fclose(f);
        assert_int_equal(device_table_init(&t), 0);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 0);
        snprintf(path, sizeof(path), "%s/state.json.corrupt", dir.path);
        assert_int_equal(access(path, F_OK), 0);
        teardown(&t, &dir);
}

/* Probations through the state file: each guard written with its rule, the rules found again by
 * their content — one rule set for every device of one guard list, whether its probation came from
 * the policy or from the file — and each device's baselines its own. */
static void test_probation_roundtrip_shares_rules(void **state) {
        Guard g[] = {
                {.counter = (char *) "link.tx_errors",
                 .counter_kind = GUARD_COUNTER_LINK,
                 .has_max_increase = true},
                {.counter = (char *) "Tcp.RetransSegs",
                 .counter_kind = GUARD_COUNTER_SNMP,
                 .has_max_ratio = true,
                 .max_ratio = 0.02,
                 .per = (char *) "Tcp.OutSegs",
                 .per_kind = GUARD_COUNTER_SNMP},
        };
        RollbackSpec spec = {.window_usec = 30 * USEC_PER_SEC,
                             .interval_usec = USEC_PER_SEC,
                             .guards = g,
                             .n_guards = ELEMENTSOF(g)};
        size_t rule_sets = guard_rules_count();
        SnmpSnapshot snap = {};
        Probation *p[2];
        Device *d[2];
        StateEntry *e = NULL;
        size_t n = 0;
        DeviceTable t;
        Dir dir;

        setup(&dir, &t);
        assert_int_equal(snmp_parse(&snap, "Tcp: OutSegs RetransSegs\nTcp: 10000 50\n", false), 0);
        snmp_finish(&snap);
        for (int i = 0; i < 2; i++) {
                struct rtnl_link_stats64 st = {.tx_errors = 5 + 4 * (uint64_t) i};
                d[i] = written(&t, 2 + i, i ? "eth1" : "eth0", (Sizes){65536, 65536, 65536, 65536},
                               SIZE_BITS_ALL);
                assert_int_equal(probation_new(&spec, &snap, 1000, &p[i]), 0);
                guard_set_link_baseline(&p[i]->guards, &st, sizeof(st));
                d[i]->probation = p[i];
        }
        assert_ptr_equal(p[0]->guards.rules, p[1]->guards.rules);
        assert_int_equal(guard_rules_count(), rule_sets + 1);
        assert_int_equal(state_write_snapshot(dir.path, &t, 1), 0);

        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 2);
        for (int i = 0; i < 2; i++) {
                const Probation *x = find_entry(e, n, 2 + i)->probation;
                assert_non_null(x);
                assert_int_equal(x->until_usec, 1000 + 30 * USEC_PER_SEC);
                assert_int_equal(probation_window_usec(x), 30 * USEC_PER_SEC);
                assert_int_equal(probation_interval_usec(x), USEC_PER_SEC);
                /* the rules of the file's guards are those of the policy's: found, not made anew */
                assert_ptr_equal(x->guards.rules, p[0]->guards.rules);
                assert_int_equal(guard_set_n(&x->guards), 2);
                assert_true(guard_set_active(&x->guards, 0) && guard_set_have_base(&x->guards, 0));
                assert_true(guard_set_active(&x->guards, 1) && guard_set_have_base(&x->guards, 1));
                assert_int_equal(x->guards.items[0].base, 5 + 4 * i);
                assert_int_equal(x->guards.items[1].base, 50);
                assert_int_equal(x->guards.items[1].per_base, 10000);
        }
        assert_int_equal(guard_rules_count(), rule_sets + 1);
        state_entries_free(e, n);

        /* The same list with another threshold is another rule set; read from the file while the
         * policy's went (a restart), the file's devices share one made for them. */
        for (int i = 0; i < 2; i++) {
                d[i]->probation = NULL;
                probation_free(p[i]);
        }
        assert_int_equal(guard_rules_count(), rule_sets);
        g[0].max_increase = 3;
        for (int i = 0; i < 2; i++) {
                assert_int_equal(probation_new(&spec, &snap, 1000, &p[i]), 0);
                d[i]->probation = p[i];
        }
        assert_int_equal(state_write_snapshot(dir.path, &t, 2), 0);
        for (int i = 0; i < 2; i++) {
                d[i]->probation = NULL;
                probation_free(p[i]);
        }
        g[0].max_increase = 0;
        assert_int_equal(probation_new(&spec, &snap, 1000, &p[0]), 0);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 2);
        const Probation *x = find_entry(e, n, 2)->probation, *y = find_entry(e, n, 3)->probation;
        assert_ptr_equal(x->guards.rules, y->guards.rules);
        assert_ptr_not_equal(x->guards.rules, p[0]->guards.rules);
        assert_int_equal(x->guards.rules->items[0].max_increase, 3);
        assert_false(guard_set_have_base(&x->guards, 0)); /* no link baseline was taken */
        assert_int_equal(guard_rules_count(), rule_sets + 2);
        state_entries_free(e, n);
        probation_free(p[0]);
        assert_int_equal(guard_rules_count(), rule_sets);
        snmp_done(&snap);
        teardown(&t, &dir);
}

/* Files of the version before the redesign said which families were written. */
static void test_old_families(void **state) {
        const char text[] = "{\"version\":1,\"generation\":3,\"devices\":[{\"ifindex\":7,\"ifname\":\"v7\","
                            "\"original\":{\"gso_max_size\":65536,\"gro_max_size\":65536,\"gso_ipv4_max_size\":65536,"
                            "\"gro_ipv4_max_size\":65536},\"families\":[\"ipv6\"],\"state\":\"applied\"}]}";
        StateEntry *e = NULL;
        size_t n = 0;
        uint64_t g = 0;

        assert_int_equal(state_parse(text, strlen(text), &e, &n, &g, NULL), 0);
        assert_int_equal(n, 1);
        assert_int_equal(g, 3);
        assert_int_equal(e[0].written, SIZE_BITS_IPV6);
        /* no identity: taken to be whatever device has its ifindex now */
        assert_false(e[0].has_identity);
        assert_null(e[0].kind);
        DeviceTable t;
        Device *d;
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(device_add(&t, 7, &d), 0);
        identify(d, "renamed", "dummy", (uint8_t[]){2, 0, 0, 0, 0, 7}, 6);
        assert_true(state_entry_is_device(&e[0], d, NULL));
        device_table_done(&t);
        state_entries_free(e, n);
}

static void test_journal(void **state) {
        Dir dir;
        DeviceTable t;
        Device *a, *b;
        StateEntry *e = NULL;
        size_t n = 0;
        char path[128];

        setup(&dir, &t);
        a = written(&t, 10, "a", (Sizes){65536, 65536, 65536, 65536}, SIZE_BITS_ALL);
        b = written(&t, 11, "b", (Sizes){65536, 65536, 65536, 65536}, SIZE_BITS_ALL);
        (void) a;
        assert_int_equal(state_write_snapshot(dir.path, &t, 7), 0);

        /* b changes, a goes away, then an entry of an older generation that must be ignored */
        b->record.original.gso_max_size = 1000;
        const Device *devs[] = {b};
        const int gone[] = {10};
        assert_int_equal(state_write_journal(dir.path, 7, devs, 1, gone, 1), 0);
        b->record.original.gso_max_size = 2000;
        assert_int_equal(state_write_journal(dir.path, 6, devs, 1, NULL, 0), 0);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 1);
        assert_int_equal(e[0].ifindex, 11);
        assert_int_equal(e[0].original.gso_max_size, 1000);
        state_entries_free(e, n);

        /* a torn last line ends the replay without failing the load */
        snprintf(path, sizeof(path), "%s/state.journal", dir.path);
        FILE *f = fopen(path, "ae");
        fputs("{\"g\":7,\"device\":{\"ifindex\":", f);
        fclose(f);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 1);
        state_entries_free(e, n);

        /* a new snapshot drops the journal */
        assert_int_equal(state_write_snapshot(dir.path, &t, 8), 0);
        assert_int_equal(access(path, F_OK), -1);
        reload_and_teardown(&t, &dir, 2);
}

/* A device that went away while marked, and a new one with its ifindex: the new one's entry
 * survives (the old "forget" line is written before it, not after). */
static void test_store_forget_then_reuse(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        Device *old, *neu;
        StateEntry *e = NULL;
        size_t n = 0;

        s = store_setup(&dir, &t);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        assert_int_equal(state_store_save(s), 0); /* the first save after a load: a snapshot */

        old = written(&t, 5, "old", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        state_store_mark(s, old);
        assert_int_equal(state_store_save(s), 0);
        old->record.original.gso_max_size = 2;
        state_store_mark(s, old);
        state_store_forget(s, old);
        device_remove(&t, old);
        device_free(old);
        neu = written(&t, 5, "new", (Sizes){3, 3, 3, 3}, SIZE_BITS_ALL);
        state_store_mark(s, neu);
        assert_true(state_store_pending(s));
        assert_int_equal(state_store_save(s), 0); /* a journal append */
        assert_false(state_store_pending(s));
        state_store_free(s);

        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 1);
        assert_string_equal(e[0].ifname, "new");
        assert_int_equal(e[0].original.gso_max_size, 3);
        state_entries_free(e, n);

        /* A device that never had an entry leaves no line when it goes. */
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        Device *x;
        assert_int_equal(device_add(&t, 9, &x), 0);
        state_store_forget(s, x);
        assert_false(state_store_pending(s));
        device_remove(&t, x);
        device_free(x);
        state_store_free(s);
        teardown(&t, &dir);
}

/* Before a write only what it needs goes to disk; the rest waits for the next save. */
static void test_store_save_devices(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        Device *a, *b;
        StateEntry *e = NULL;
        size_t n = 0;

        s = store_setup(&dir, &t);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        assert_int_equal(state_store_save(s), 0); /* the snapshot after a load */

        a = written(&t, 1, "a", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        b = written(&t, 2, "b", (Sizes){2, 2, 2, 2}, SIZE_BITS_ALL);
        state_store_mark(s, a);
        state_store_mark(s, b);
        Device *batch[] = {a};
        assert_int_equal(state_store_save_devices(s, batch, 1), 0);
        assert_false(a->store.dirty);
        assert_true(b->store.dirty);
        assert_true(state_store_pending(s));

        /* what a restart would find now: a only */
        StateStore *peek;
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &peek), 0);
        assert_int_equal(state_store_load(peek, &e, &n, NULL), 0);
        assert_int_equal(n, 1);
        assert_string_equal(e[0].ifname, "a");
        state_entries_free(e, n);
        state_store_free(peek); /* nothing marked on it: it writes nothing */

        assert_int_equal(state_store_save(s), 0);
        assert_false(state_store_pending(s));
        state_store_free(s);
        reload_and_teardown(&t, &dir, 2);
}


/* The store's writes, counted (and made). */
typedef struct Counted {
        unsigned writes, syncs, renames;
} Counted;

static ssize_t counted_write(void *userdata, int fd, const void *buf, size_t n) {
        ((Counted *) userdata)->writes++;
        return write(fd, buf, n);
}

static int counted_sync(void *userdata, int fd, bool data_only) {
        ((Counted *) userdata)->syncs++;
        return data_only ? fdatasync(fd) : fsync(fd);
}

static int counted_rename(void *userdata, int dir_fd, const char *from, const char *to) {
        ((Counted *) userdata)->renames++;
        return renameat(dir_fd, from, dir_fd, to);
}

/* The store writes only what changes the state on disk (issue 34: 1000 idle devices that bigtcpd
 * never wrote had it write a new snapshot 880 times a minute; with one written, a "forget" line
 * for each of the others at every save): a device marked whose entry is on disk as it is, or that
 * has none there and no originals, costs no write; a change costs one line. */
static void test_store_writes_only_changes(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        Counted disk = {};
        StateIo io = {.write = counted_write, .fsync = counted_sync, .renameat = counted_rename, .userdata = &disk};
        StateEntry *e = NULL;
        size_t n = 0;
        Device *idle[8], *a;

        s = store_setup(&dir, &t);
        state_store_set_io(s, &io);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        for (int i = 0; i < (int) ELEMENTSOF(idle); i++)
                assert_int_equal(device_add(&t, 10 + i, &idle[i]), 0);
        assert_int_equal(state_store_save(s), 0); /* the snapshot after a load */
        assert_int_equal(disk.renames, 1);

        /* none held, nothing written: marks of devices without originals are no write at all */
        disk = (Counted){};
        for (unsigned round = 0; round < 10; round++) {
                for (size_t i = 0; i < ELEMENTSOF(idle); i++)
                        state_store_mark(s, idle[i]);
                assert_int_equal(state_store_save(s), 0);
                assert_false(state_store_pending(s));
        }
        assert_int_equal(disk.writes + disk.syncs + disk.renames, 0);

        /* one held: its entry is one line; marked again unchanged, nothing; the others still nothing */
        a = written(&t, 1, "a", (Sizes){65536, 65536, 65536, 65536}, SIZE_BITS_ALL);
        state_store_mark(s, a);
        assert_int_equal(state_store_save(s), 0);
        assert_int_equal(disk.writes, 1);
        assert_int_equal(disk.syncs, 1);
        disk = (Counted){};
        for (unsigned round = 0; round < 10; round++) {
                state_store_mark(s, a);
                for (size_t i = 0; i < ELEMENTSOF(idle); i++)
                        state_store_mark(s, idle[i]);
                Device *batch[] = {a, idle[0]};
                assert_int_equal(state_store_save_devices(s, batch, ELEMENTSOF(batch)), 0);
                assert_int_equal(state_store_save(s), 0);
        }
        assert_int_equal(disk.writes + disk.syncs + disk.renames, 0);

        /* an idle search's next watch (and whether it is deferred) is not what a restart needs */
        a->autosize = auto_device_new(SIZE_BIT_GSO);
        assert_non_null(a->autosize);
        *auto_device_search(a->autosize, 0) = (AutoSearch){.min = 65536, .max = 524280, .phase = AUTO_WATCHING,
                                                           .proven = 65536, .idle_wait_usec = 60 * USEC_PER_SEC};
        state_store_mark(s, a);
        assert_int_equal(state_store_save(s), 0);
        assert_int_equal(disk.writes, 1);
        disk = (Counted){};
        for (unsigned round = 0; round < 10; round++) {
                AutoSearch *x = &(*auto_device_search(a->autosize, 0));
                x->phase = round % 2 ? AUTO_IDLE : AUTO_WATCHING;
                x->retry_usec = UINT64_C(1700000000000000) + round * 60 * USEC_PER_SEC;
                x->deferred = round % 3 == 0;
                state_store_mark(s, a);
                assert_int_equal(state_store_save(s), 0);
        }
        assert_int_equal(disk.writes + disk.syncs + disk.renames, 0);
        /* nor its wait while it doubles; once at its most (an hour), it is kept */
        for (uint64_t w = 2 * (*auto_device_search(a->autosize, 0)).idle_wait_usec; w < AUTO_IDLE_WAIT_MAX_USEC; w *= 2) {
                (*auto_device_search(a->autosize, 0)).idle_wait_usec = w;
                state_store_mark(s, a);
                assert_int_equal(state_store_save(s), 0);
        }
        assert_int_equal(disk.writes + disk.syncs + disk.renames, 0);
        (*auto_device_search(a->autosize, 0)).idle_wait_usec = AUTO_IDLE_WAIT_MAX_USEC;
        state_store_mark(s, a);
        assert_int_equal(state_store_save(s), 0);
        assert_int_equal(disk.writes, 1);

        /* its originals go (given back): one "forget" line, then nothing again */
        disk = (Counted){};
        a->record.has_original = false;
        for (unsigned round = 0; round < 3; round++) {
                state_store_mark(s, a);
                assert_int_equal(state_store_save(s), 0);
        }
        assert_int_equal(disk.renames, 1); /* none held any more: an empty snapshot says so */
        assert_int_equal(disk.writes, 1);
        disk = (Counted){};
        a->record.has_original = true;
        state_store_mark(s, a);
        assert_int_equal(state_store_save(s), 0);
        assert_int_equal(disk.writes, 1);
        /* a device with no entry on disk goes: nothing; one with an entry: a "forget" line */
        disk = (Counted){};
        state_store_forget(s, idle[0]);
        assert_false(state_store_pending(s));
        state_store_forget(s, a);
        assert_true(state_store_pending(s));
        device_remove(&t, a);
        device_free(a);
        assert_int_equal(state_store_save(s), 0);
        assert_int_equal(disk.writes, 1);
        state_store_free(s);

        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 0);
        state_entries_free(e, n);
        device_table_done(&t);
        dir_close(&dir);
}

/* SipHash-2-4's own test vector (the paper's appendix A): key 00..0f, message 00..0e. */
static void test_siphash(void **state) {
        uint8_t key[16], msg[15];

        for (unsigned i = 0; i < sizeof(key); i++)
                key[i] = (uint8_t) i;
        for (unsigned i = 0; i < sizeof(msg); i++)
                msg[i] = (uint8_t) i;
        assert_int_equal(siphash24(msg, sizeof(msg), key), UINT64_C(0xa129ca6149be45e5));
        assert_int_equal(siphash24(msg, 0, key), UINT64_C(0x726fdb47dd0e0e31));
        assert_int_equal(siphash24(msg, 8, key), UINT64_C(0x93f5f5799a932462));
}

/* Out of space in the middle of a line: the append is cut back, so that what comes after the space
 * is back is replayed (it was lost once: the torn line ended every later replay there). */
static void test_enospc_cut_back(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        Disk disk = {.budget = -1};
        StateIo io = {.write = disk_write, .ftruncate = disk_ftruncate, .userdata = &disk};
        StateEntry *e = NULL;
        size_t n = 0;
        unsigned recovered = 0;
        Device *a, *b, *c;

        s = store_setup(&dir, &t);
        state_store_set_io(s, &io);
        state_store_on_recovered(s, on_recovered, &recovered);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        assert_int_equal(state_store_save(s), 0); /* the snapshot after a load */

        a = written(&t, 1, "a", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        state_store_mark(s, a);
        assert_int_equal(state_store_save(s), 0);
        off_t before = dir_size(&dir, "state.journal");
        assert_true(before > 0);

        /* the disk is full 20 bytes into b's line */
        disk.budget = 20;
        b = written(&t, 2, "b", (Sizes){2, 2, 2, 2}, SIZE_BITS_ALL);
        Device *batch[] = {b};
        state_store_mark(s, b);
        assert_int_equal(state_store_save_devices(s, batch, 1), -ENOSPC);
        assert_int_equal(disk.writes_failed, 1);
        assert_int_equal(dir_size(&dir, "state.journal"), before); /* cut back */
        assert_true(state_store_pending(s));
        assert_int_equal(state_store_retry_usec(s), USEC_PER_SEC);
        assert_int_equal(recovered, 0);

        /* space again: b (still owed) and c after it */
        disk.budget = -1;
        c = written(&t, 3, "c", (Sizes){3, 3, 3, 3}, SIZE_BITS_ALL);
        state_store_mark(s, c);
        assert_int_equal(state_store_save(s), 0);
        assert_int_equal(recovered, 1);
        assert_int_equal(state_store_retry_usec(s), 0);
        state_store_free(s);

        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 3);
        assert_non_null(find_entry(e, n, 2));
        assert_int_equal(find_entry(e, n, 3)->original.gso_max_size, 3);
        state_entries_free(e, n);
        teardown(&t, &dir);
}

/* Out of space, and the journal cannot be cut back either: it may end in a torn line now, so no
 * line may follow it; the next save is a new snapshot. */
static void test_enospc_not_cut_back(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        Disk disk = {.budget = -1};
        StateIo io = {.write = disk_write, .ftruncate = disk_ftruncate, .userdata = &disk};
        StateEntry *e = NULL;
        size_t n = 0;
        Device *a, *b;

        s = store_setup(&dir, &t);
        state_store_set_io(s, &io);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        assert_int_equal(state_store_save(s), 0);
        a = written(&t, 1, "a", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        state_store_mark(s, a);
        assert_int_equal(state_store_save(s), 0);

        disk.budget = 10;
        disk.truncate_fails = true;
        b = written(&t, 2, "b", (Sizes){2, 2, 2, 2}, SIZE_BITS_ALL);
        state_store_mark(s, b);
        assert_int_equal(state_store_save(s), -ENOSPC);
        assert_true(dir_size(&dir, "state.journal") > 0);

        disk.budget = -1;
        disk.truncate_fails = false;
        assert_int_equal(state_store_save(s), 0);
        assert_false(dir_has(&dir, "state.journal")); /* a snapshot, which drops the journal */
        state_store_free(s);
        reload_and_teardown(&t, &dir, 2);
}

/* A failed save is retried from the loop: 1 s after, then twice as long each time. */
static void test_retry_backoff(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        Disk disk = {.budget = 0};
        StateIo io = {.write = disk_write, .ftruncate = disk_ftruncate, .userdata = &disk};
        StateEntry *e = NULL;
        size_t n = 0;
        unsigned recovered = 0;

        s = store_setup(&dir, &t);
        state_store_set_io(s, &io);
        state_store_on_recovered(s, on_recovered, &recovered);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        state_store_mark(s, written(&t, 1, "a", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL));
        assert_int_equal(state_store_save(s), -ENOSPC); /* the snapshot after the load */
        assert_int_equal(state_store_retry_usec(s), USEC_PER_SEC);

        /* the retry timer's turn: fails again, waits longer */
        unsigned failed = disk.writes_failed;
        assert_int_equal(event_base_loop(dir.base, EVLOOP_ONCE), 0);
        assert_int_equal(disk.writes_failed, failed + 1);
        assert_int_equal(state_store_retry_usec(s), 2 * USEC_PER_SEC);
        assert_true(state_store_pending(s));

        disk.budget = -1;
        assert_int_equal(state_store_save(s), 0);
        assert_int_equal(recovered, 1);
        assert_int_equal(state_store_retry_usec(s), 0);
        assert_false(state_store_pending(s));
        state_store_free(s);
        reload_and_teardown(&t, &dir, 1);
}

/* A line in the middle that does not parse costs only itself: what is before it and what is after
 * it are replayed. (Its device keeps what it had before: here, device 1 keeps its entry, whose
 * "forget" line was in the damaged one.) A torn last line is dropped. */
static void test_bad_journal_line_costs_itself(void **state) {
        const char snap[] = "{\"version\":1,\"generation\":4,\"devices\":[{\"ifindex\":1,\"ifname\":\"a\",\"original\":"
                            "{\"gso_max_size\":1,\"gro_max_size\":1,\"gso_ipv4_max_size\":1,\"gro_ipv4_max_size\":1},"
                            "\"written\":[]}]}";
#define LINE(i) "{\"g\":4,\"device\":{\"ifindex\":" #i ",\"original\":{\"gso_max_size\":" #i ",\"gro_max_size\":1," \
                "\"gso_ipv4_max_size\":1,\"gro_ipv4_max_size\":1},\"written\":[]}}\n"
        const char journal[] = LINE(2) "{\"g\":3,\"ifindex\":2,\"forget\":true}\n" /* older: passed over */
                "{\"g\":4,\"devi{\"g\":4,\"ifindex\":1,\"forget\":true}\n" LINE(3) LINE(5);
        const char torn[] = LINE(2) "{\"g\":4,\"device\":{\"ifindex\":3";
        StateReadReport rep;
        StateEntry *e = NULL;
        size_t n = 0;

        assert_int_equal(state_parse(snap, strlen(snap), &e, &n, NULL, NULL), 0);
        assert_int_equal(state_journal_apply(journal, strlen(journal), 4, &e, &n, &rep), 0);
        assert_int_equal(n, 4);
        assert_non_null(find_entry(e, n, 1));
        assert_non_null(find_entry(e, n, 2));
        assert_non_null(find_entry(e, n, 3));
        assert_non_null(find_entry(e, n, 5));
        assert_int_equal(rep.n_aside, 1);
        assert_int_equal(rep.aside[0].line, 3);
        assert_string_equal(rep.aside[0].reason, "not a JSON object");
        assert_int_equal(rep.lines, 5);
        assert_false(rep.torn_tail);
        state_entries_free(e, n);

        assert_int_equal(state_parse(snap, strlen(snap), &e, &n, NULL, NULL), 0);
        assert_int_equal(state_journal_apply(torn, strlen(torn), 4, &e, &n, &rep), 0);
        assert_int_equal(n, 2);
        assert_int_equal(rep.n_aside, 0);
        assert_int_equal(rep.lines, 1);
        assert_true(rep.torn_tail);
        state_entries_free(e, n);

        /* through the store: the snapshot stays, a copy of the damaged journal is kept aside, and
         * the journal itself until the first save replaces both */
        Dir dir;
        DeviceTable t;
        StateStore *s;
        StateLoadReport lr;
        char p[128];
        setup(&dir, &t);
        put_file(dir_file(&dir, "state.json", p, sizeof(p)), snap);
        put_file(dir_file(&dir, "state.journal", p, sizeof(p)), journal);
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        assert_int_equal(state_store_load(s, &e, &n, &lr), 0);
        assert_int_equal(n, 4);
        assert_int_equal(lr.snapshot_error, 0);
        assert_int_equal(lr.journal.n_aside, 1);
        assert_int_equal(lr.journal.aside[0].line, 3);
        assert_true(lr.journal_kept);
        assert_false(lr.journal_moved);
        assert_true(dir_has(&dir, "state.journal.corrupt"));
        assert_true(dir_has(&dir, "state.journal"));
        assert_true(dir_has(&dir, "state.json"));
        assert_false(dir_has(&dir, "state.json.corrupt"));
        state_entries_free(e, n);
        assert_int_equal(state_store_save(s), 0);
        assert_false(dir_has(&dir, "state.journal"));
        state_store_free(s);
        teardown(&t, &dir);
#undef LINE
}

/* ---- a bad entry of the snapshot costs only itself ---- */

#define SIZES_OF(v) "{\"gso_max_size\":" v ",\"gro_max_size\":" v ",\"gso_ipv4_max_size\":" v ",\"gro_ipv4_max_size\":" v "}"
#define ENTRY_WITH(i, orig, more) \
        "{\"ifindex\":" #i ",\"ifname\":\"v" #i "\",\"original\":" orig ",\"written\":[\"gso_max_size\",\"gro_max_size\"]" more "}"
#define ENTRY(i) ENTRY_WITH(i, SIZES_OF("6000" #i), "")
#define HEADER "{\"version\":1,\"generation\":5,\"devices\":[\n"

typedef struct BadEntryCase {
        const char *what;
        const char *middle; /* line 3, between device 1's and device 3's */
        int ifindex;        /* what the report says of it (0: not readable) */
        bool partial;       /* … its originals loaded all the same */
} BadEntryCase;

static const BadEntryCase bad_entry_cases[] = {
        {"a wrong type", ENTRY_WITH(2, "{\"gso_max_size\":\"x\",\"gro_max_size\":1,\"gso_ipv4_max_size\":1,"
                                       "\"gro_ipv4_max_size\":1}", ""), 2, false},
        {"a negative size", ENTRY_WITH(2, SIZES_OF("-1"), ""), 2, false},
        {"2^40", ENTRY_WITH(2, SIZES_OF("1099511627776"), ""), 2, false},
        {"4294967295", ENTRY_WITH(2, SIZES_OF("4294967295"), ""), 2, false},
        {"a GRO size of 600000", ENTRY_WITH(2, "{\"gso_max_size\":65536,\"gro_max_size\":600000,"
                                               "\"gso_ipv4_max_size\":65536,\"gro_ipv4_max_size\":65536}", ""), 2, false},
        {"a GSO size of 0", ENTRY_WITH(2, SIZES_OF("0"), ""), 2, false},
        {"a null", "null", 0, false},
        {"no ifindex", "{\"original\":" SIZES_OF("1") ",\"written\":[]}", 0, false},
        {"ifindex 0", ENTRY_WITH(0, SIZES_OF("1"), ""), 0, false},
        {"a size written that is not one", "{\"ifindex\":2,\"original\":" SIZES_OF("1") ",\"written\":[\"mtu\"]}", 2, false},
        {"not JSON", "{\"ifindex\":2,\"orig", 0, false},
        {"a bad last-good: dropped alone", ENTRY_WITH(2, SIZES_OF("60002"), ",\"last_good\":" SIZES_OF("700000")), 2, true},
        {"a bad probation: dropped alone", ENTRY_WITH(2, SIZES_OF("60002"), ",\"probation\":{\"guards\":7}"), 2, true},
        {"a probation sampled every 0 s", ENTRY_WITH(2, SIZES_OF("60002"), ",\"probation\":{\"until_boottime_usec\":9,"
                                          "\"window_usec\":30000000,\"interval_usec\":0,\"guards\":[]}"), 2, true},
        {"a probation of a negative window", ENTRY_WITH(2, SIZES_OF("60002"), ",\"probation\":{\"until_boottime_usec\":9,"
                                             "\"window_usec\":-1,\"interval_usec\":1000000,\"guards\":[]}"), 2, true},
        {"a probation without its window", ENTRY_WITH(2, SIZES_OF("60002"), ",\"probation\":{\"until_boottime_usec\":9,"
                                           "\"interval_usec\":1000000,\"guards\":[]}"), 2, true},
};

/* Each through the parser and through the store (a file read in pieces). */
static void load_text(const char *text, StateEntry **e, size_t *n, uint64_t *g, StateReadReport *rep, bool file) {
        if (!file) {
                assert_int_equal(state_parse(text, strlen(text), e, n, g, rep), 0);
                return;
        }
        Dir dir;
        DeviceTable t;
        StateStore *s;
        StateLoadReport lr;
        char p[128];
        setup(&dir, &t);
        put_file(dir_file(&dir, "state.json", p, sizeof(p)), text);
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        assert_int_equal(state_store_load(s, e, n, &lr), 0);
        assert_int_equal(lr.snapshot_error, 0);
        *rep = lr.snapshot;
        *g = lr.snapshot.bad_header ? STATE_GENERATION_UNKNOWN : 5;
        assert_true(lr.snapshot_kept == (rep->n_aside > 0 || rep->truncated || rep->bad_header));
        assert_true(dir_has(&dir, "state.json")); /* still there until a save replaces it */
        state_store_free(s);
        teardown(&t, &dir);
}

static void check_bad_entry(const BadEntryCase *c) {
        _cleanup_(freep) char *text = NULL;

        print_message("case: %s\n", c->what);
        assert_true(asprintf(&text, HEADER ENTRY(1) ",\n%s,\n" ENTRY(3) "]}\n", c->middle) > 0);
        for (int file = 0; file <= 1; file++) {
                StateReadReport rep;
                StateEntry *e = NULL;
                size_t n = 0;
                uint64_t g = 0;
                load_text(text, &e, &n, &g, &rep, file);
                assert_int_equal(g, 5);
                assert_int_equal(n, c->partial ? 3 : 2);
                assert_int_equal(find_entry(e, n, 1)->original.gso_max_size, 60001);
                assert_int_equal(find_entry(e, n, 3)->original.gso_max_size, 60003);
                assert_int_equal(rep.n_aside, 1);
                assert_int_equal(rep.aside[0].line, 3);
                assert_int_equal(rep.aside[0].ifindex, c->ifindex);
                assert_true(rep.aside[0].partial == c->partial);
                assert_non_null(rep.aside[0].reason);
                print_message("%s: %s\n", file ? "file" : "text", rep.aside[0].reason);
                if (c->partial) {
                        StateEntry *x = find_entry(e, n, 2);
                        assert_int_equal(x->original.gso_max_size, 60002);
                        assert_false(x->has_last_good);
                        assert_null(x->probation);
                }
                assert_false(rep.truncated);
                assert_false(rep.bad_header);
                state_entries_free(e, n);
        }
}

static void test_bad_entry_costs_itself(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(bad_entry_cases); i++)
                check_bad_entry(&bad_entry_cases[i]);
}

/* A state file as the daemon wrote it before the window and interval went with the rules: each
 * probation resumes with its own, to the microsecond and past 2^32 ms, and devices share rules only
 * where their guards, window and interval are all the same. */
static void test_probation_windows_resume(void **state) {
#define PROBATION_OF(w, i) \
        ",\"probation\":{\"until_boottime_usec\":123456789,\"window_usec\":" w ",\"interval_usec\":" i \
        ",\"guards\":[{\"counter\":\"link.tx_errors\",\"max_increase\":0,\"active\":true,\"have_base\":true," \
        "\"base\":5,\"per_base\":0}]}"
        const char text[] = HEADER ENTRY_WITH(2, SIZES_OF("60002"), PROBATION_OF("30000000", "1000000")) ",\n"
                ENTRY_WITH(3, SIZES_OF("60003"), PROBATION_OF("30000000", "1000000")) ",\n"
                ENTRY_WITH(4, SIZES_OF("60004"), PROBATION_OF("7200000000001", "250001")) ",\n"
                ENTRY_WITH(5, SIZES_OF("60005"), PROBATION_OF("30000000", "250001")) "]}\n";
#undef PROBATION_OF
        size_t rule_sets = guard_rules_count();
        StateReadReport rep;
        StateEntry *e = NULL;
        size_t n = 0;
        uint64_t g = 0;

        assert_int_equal(state_parse(text, strlen(text), &e, &n, &g, &rep), 0);
        assert_int_equal(rep.n_aside, 0);
        assert_int_equal(n, 4);
        const Probation *a = find_entry(e, n, 2)->probation, *b = find_entry(e, n, 3)->probation,
                        *c = find_entry(e, n, 4)->probation, *d = find_entry(e, n, 5)->probation;
        assert_true(a && b && c && d);
        assert_int_equal(probation_window_usec(a), 30 * USEC_PER_SEC);
        assert_int_equal(probation_interval_usec(a), USEC_PER_SEC);
        assert_ptr_equal(a->guards.rules, b->guards.rules);
        /* 2000 h and a microsecond; a quarter of a second and a microsecond */
        assert_int_equal(probation_window_usec(c), UINT64_C(7200000000001));
        assert_int_equal(probation_interval_usec(c), 250001);
        assert_int_equal(c->until_usec, 123456789);
        assert_int_equal(c->guards.items[0].base, 5);
        assert_int_equal(probation_window_usec(d), 30 * USEC_PER_SEC);
        assert_int_equal(probation_interval_usec(d), 250001);
        assert_ptr_not_equal(c->guards.rules, a->guards.rules);
        assert_ptr_not_equal(d->guards.rules, a->guards.rules);
        assert_ptr_not_equal(d->guards.rules, c->guards.rules);
        assert_int_equal(guard_rules_count(), rule_sets + 3);
        state_entries_free(e, n);
        assert_int_equal(guard_rules_count(), rule_sets);
}

/* The file's other damage: a header this version does not read (a later version's, garbage, cut
 * off), a file cut in half, lines after its end. What it holds is loaded as far as it goes. */
static void test_damaged_snapshot(void **state) {
        static const struct {
                const char *what, *text;
                int loaded[4];  /* the ifindexes loaded, 0-terminated */
                bool bad_header, truncated;
        } cases[] = {
                {"version 999", "{\"version\":999,\"generation\":5,\"devices\":[\n" ENTRY(1) ",\n" ENTRY(2) "]}\n", {1, 2},
                 true, false},
                {"a garbage header", "{\"versi#@!\n" ENTRY(1) ",\n" ENTRY(2) "]}\n", {1, 2}, true, false},
                {"cut in half", HEADER ENTRY(1) ",\n" ENTRY(2) ",\n{\"ifindex\":3,\"ifname\":\"v", {1, 2}, false, true},
                {"cut after a whole entry", HEADER ENTRY(1) ",\n", {1}, false, true},
                {"devices not a list (one line)", "{\"version\":1,\"generation\":5,\"devices\":7}\n", {0}, true, false},
                {"version 999 on one line", "{\"version\":999,\"devices\":[" ENTRY(1) "]}", {1}, true, false},
                {"an earlier version's, before generations", "{\"version\":1,\"devices\":[\n" ENTRY(1) ",\n" ENTRY(2)
                 "]}\n", {1, 2}, false, false},
                {"an earlier version's layout, pretty", "{\n  \"version\": 1,\n  \"generation\": 5,\n  \"devices\": [\n    "
                 ENTRY(1) ",\n    " ENTRY(2) "\n  ]\n}\n", {1, 2}, false, false},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                for (int file = 0; file <= 1; file++) {
                        StateReadReport rep;
                        StateEntry *e = NULL;
                        size_t n = 0, want = 0;
                        uint64_t g = 0;
                        print_message("%s (%s)\n", cases[i].what, file ? "file" : "text");
                        load_text(cases[i].text, &e, &n, &g, &rep, file);
                        for (; want < 4 && cases[i].loaded[want]; want++)
                                assert_non_null(find_entry(e, n, cases[i].loaded[want]));
                        assert_int_equal(n, want);
                        assert_true(rep.bad_header == cases[i].bad_header);
                        assert_true(rep.truncated == cases[i].truncated);
                        if (!file)
                                assert_true(g == (cases[i].bad_header                       ? STATE_GENERATION_UNKNOWN
                                                  : strstr(cases[i].text, "generation") ? 5
                                                                                          : 0));
                        state_entries_free(e, n);
                }
}

/* With the snapshot's generation unknown, the journal's newest lines are replayed (not those of a
 * generation before them, which the snapshot already holds). */
static void test_unknown_generation_takes_newest_journal(void **state) {
        const char snap[] = "garbage\n" ENTRY(1) "]}\n";
        const char journal[] = "{\"g\":4,\"device\":" ENTRY_WITH(1, SIZES_OF("1"), "") "}\n"
                               "{\"g\":5,\"device\":" ENTRY_WITH(2, SIZES_OF("2"), "") "}\n"
                               "{\"g\":4,\"ifindex\":1,\"forget\":true}\n";
        StateEntry *e = NULL;
        size_t n = 0;
        uint64_t g;

        assert_int_equal(state_parse(snap, strlen(snap), &e, &n, &g, NULL), 0);
        assert_true(g == STATE_GENERATION_UNKNOWN);
        assert_int_equal(state_journal_apply(journal, strlen(journal), g, &e, &n, NULL), 0);
        assert_int_equal(n, 2);
        assert_int_equal(find_entry(e, n, 1)->original.gso_max_size, 60001);
        assert_int_equal(find_entry(e, n, 2)->original.gso_max_size, 2);
        state_entries_free(e, n);
}

/* Lines longer than a read (64 KiB) are whole entries all the same; one longer than any entry
 * (STATE_LINE_MAX) is set aside, and the lines after it read. */
static void test_long_lines(void **state) {
        size_t big = 200 * 1024, huge = STATE_LINE_MAX + 4096;
        _cleanup_(freep) char *name = malloc(huge + 1), *text = NULL;
        StateReadReport rep;
        StateEntry *e = NULL;
        size_t n = 0;
        uint64_t g;

        assert_non_null(name);
        memset(name, 'x', huge);
        name[huge] = '\0';
        assert_true(asprintf(&text, HEADER ENTRY_WITH(1, SIZES_OF("1"), ",\"kind\":\"%.*s\",\"mac\":\"\"") ",\n"
                                    ENTRY_WITH(2, SIZES_OF("2"), ",\"kind\":\"%s\",\"mac\":\"\"") ",\n" ENTRY(3) "]}\n",
                             (int) big, name, name) > 0);
        for (int file = 0; file <= 1; file++) {
                load_text(text, &e, &n, &g, &rep, file);
                assert_int_equal(n, 2);
                assert_int_equal(strlen(find_entry(e, n, 1)->kind), big);
                assert_non_null(find_entry(e, n, 3));
                assert_int_equal(rep.n_aside, 1);
                assert_int_equal(rep.aside[0].line, 3);
                state_entries_free(e, n);
        }
}

/* A journal the daemon cannot have written never costs the snapshot: moved aside, the snapshot's
 * entries loaded. */
static void test_bad_journal_keeps_snapshot(void **state) {
        enum { DIRECTORY, TOO_LARGE, SYMLINK, FIFO, UNREADABLE, _MAX };
        static const char *const what[] = {"directory", "too large", "symlink", "FIFO", "unreadable"};

        for (int k = 0; k < _MAX; k++) {
                Dir dir;
                DeviceTable t;
                StateStore *s;
                StateLoadReport rep;
                StateEntry *e = NULL;
                size_t n = 0;
                char p[128], target[160];
                int fd;

                if (k == UNREADABLE && geteuid() == 0)
                        continue; /* root reads it all the same */
                print_message("journal: %s\n", what[k]);
                setup(&dir, &t);
                written(&t, 7, "v7", (Sizes){60000, 60000, 60000, 60000}, SIZE_BITS_ALL);
                assert_int_equal(state_write_snapshot(dir.path, &t, 3), 0);
                device_table_done(&t);
                assert_int_equal(device_table_init(&t), 0);
                dir_file(&dir, "state.journal", p, sizeof(p));
                snprintf(target, sizeof(target), "%s.target", dir.path);
                switch (k) {
                case DIRECTORY:
                        assert_int_equal(mkdir(p, 0755), 0);
                        break;
                case TOO_LARGE:
                        fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                        assert_true(fd >= 0);
                        assert_int_equal(ftruncate(fd, (off_t) STATE_READ_MAX + 1), 0); /* sparse */
                        close(fd);
                        break;
                case SYMLINK:
                        /* even a good journal is not read through a symlink */
                        put_file(target, "{\"g\":3,\"ifindex\":7,\"forget\":true}\n");
                        assert_int_equal(symlink(target, p), 0);
                        break;
                case FIFO:
                        assert_int_equal(mkfifo(p, 0644), 0);
                        break;
                case UNREADABLE:
                        put_file(p, "{\"g\":3,\"ifindex\":7,\"forget\":true}\n");
                        assert_int_equal(chmod(p, 0), 0);
                        break;
                }
                assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
                assert_int_equal(state_store_load(s, &e, &n, &rep), 0);
                assert_int_equal(n, 1);
                assert_int_equal(e[0].ifindex, 7);
                assert_int_equal(e[0].original.gso_max_size, 60000);
                assert_int_equal(rep.snapshot_error, 0);
                assert_true(rep.journal_error < 0);
                assert_true(rep.journal_moved);
                assert_true(dir_has(&dir, "state.json"));
                assert_false(dir_has(&dir, "state.json.corrupt"));
                assert_false(dir_has(&dir, "state.journal"));
                assert_true(dir_has(&dir, "state.journal.corrupt"));
                state_entries_free(e, n);

                /* and the daemon goes on: a new snapshot, and lines after it */
                assert_int_equal(state_store_save(s), 0);
                Device *d = written(&t, 8, "v8", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
                state_store_mark(s, d);
                assert_int_equal(state_store_save(s), 0);
                state_store_free(s);
                load(&dir, &t, &e, &n, 0);
                assert_int_equal(n, 1);
                state_entries_free(e, n);
                if (k == SYMLINK) {
                        _cleanup_(freep) char *text = get_file(target);
                        assert_string_equal(text, "{\"g\":3,\"ifindex\":7,\"forget\":true}\n");
                        assert_int_equal(unlink(target), 0);
                }
                teardown(&t, &dir);
        }
}

/* Symlinks and FIFOs planted in the runtime directory while the daemon runs: never written
 * through, never waited on. */
static void test_planted_files(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        StateLoadReport rep;
        StateEntry *e = NULL;
        size_t n = 0;
        char p[128], target[160];
        Device *a, *b;

        dir_open(&dir);
        snprintf(target, sizeof(target), "%s.target", dir.path);
        put_file(target, "precious\n");
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);

        /* the snapshot's temporary file */
        assert_int_equal(symlink(target, dir_file(&dir, ".state.json.tmp", p, sizeof(p))), 0);
        a = written(&t, 1, "a", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        state_store_mark(s, a);
        assert_int_equal(state_store_save(s), 0);
        assert_false(dir_has(&dir, ".state.json.tmp"));

        /* the journal, a symlink: moved aside, a snapshot instead */
        assert_int_equal(symlink(target, dir_file(&dir, "state.journal", p, sizeof(p))), 0);
        b = written(&t, 2, "b", (Sizes){2, 2, 2, 2}, SIZE_BITS_ALL);
        state_store_mark(s, b);
        Device *batch[] = {b};
        assert_int_equal(state_store_save_devices(s, batch, 1), 0);
        assert_true(dir_has(&dir, "state.journal.corrupt"));
        assert_false(dir_has(&dir, "state.journal"));

        /* the journal, a FIFO with no reader: open() would wait for one */
        assert_int_equal(mkfifo(dir_file(&dir, "state.journal", p, sizeof(p)), 0644), 0);
        b->record.original.gso_max_size = 3;
        state_store_mark(s, b);
        assert_int_equal(state_store_save(s), 0);
        assert_false(dir_has(&dir, "state.journal"));
        state_store_free(s);

        _cleanup_(freep) char *text = get_file(target);
        assert_string_equal(text, "precious\n");
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 2);
        assert_int_equal(find_entry(e, n, 2)->original.gso_max_size, 3);
        state_entries_free(e, n);

        /* state.json a symlink, or a FIFO: not read, moved aside */
        for (int k = 0; k < 2; k++) {
                assert_int_equal(unlink(dir_file(&dir, "state.json", p, sizeof(p))), 0);
                if (k == 0)
                        assert_int_equal(symlink(target, p), 0);
                else
                        assert_int_equal(mkfifo(p, 0644), 0);
                assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
                assert_int_equal(state_store_load(s, &e, &n, &rep), k == 0 ? -ELOOP : -EBADF);
                assert_int_equal(n, 0);
                assert_true(rep.snapshot_moved);
                assert_true(dir_has(&dir, "state.json.corrupt"));
                assert_int_equal(state_store_save(s), 0);
                state_store_free(s);
        }
        free(text);
        text = get_file(target);
        assert_string_equal(text, "precious\n");
        assert_int_equal(unlink(target), 0);
        teardown(&t, &dir);
}

/* Writable by others, or someone else's: not trusted with the state. */
static void test_untrusted_dir(void **state) {
        static const struct {
                mode_t mode;
                int expect;
        } cases[] = {
                {0700, 0}, {0755, 0}, {01777, -EPERM}, {0777, -EPERM}, {0775, -EPERM}, {0757, -EPERM},
        };
        Dir dir;
        DeviceTable t;
        StateStore *s;
        struct stat st;

        setup(&dir, &t);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                print_message("mode %04o\n", (unsigned) cases[i].mode);
                assert_int_equal(chmod(dir.path, cases[i].mode), 0);
                assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
                assert_int_equal(state_store_open_dir(s, &st), cases[i].expect);
                assert_int_equal(st.st_mode & 07777, cases[i].mode);
                state_store_free(s);
        }
        assert_int_equal(chmod(dir.path, 0755), 0);
        if (geteuid() == 0) {
                assert_int_equal(chown(dir.path, 65534, 65534), 0);
                assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
                assert_int_equal(state_store_open_dir(s, &st), -EPERM);
                assert_int_equal(st.st_uid, 65534);
                state_store_free(s);
                assert_int_equal(chown(dir.path, 0, 0), 0);
        }
        teardown(&t, &dir);
}

/* The journal is compacted by its bytes too, not only by its lines: a few long lines (here, 1000
 * devices changed at once, one line of them all) must not grow it past twice the snapshot (at
 * least 1 MiB). */
static void test_compact_by_bytes(void **state) {
        enum { N = 1000 };
        Dir dir;
        DeviceTable t;
        StateStore *s;
        StateEntry *e = NULL;
        size_t n = 0;
        off_t largest = 0, line = 0;
        bool compacted = false;
        Device *d[N];

        setup(&dir, &t);
        for (int k = 0; k < N; k++) {
                char name[16];
                snprintf(name, sizeof(name), "veth%d", k);
                d[k] = written(&t, k + 1, name, (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        }
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        assert_int_equal(state_store_save(s), 0);
        for (int i = 0; i < 40; i++) {
                off_t before = dir_has(&dir, "state.journal") ? dir_size(&dir, "state.journal") : 0;
                for (int k = 0; k < N; k++) {
                        d[k]->record.original.gso_max_size = (uint32_t) i;
                        state_store_mark(s, d[k]);
                }
                assert_int_equal(state_store_save(s), 0);
                off_t size = dir_has(&dir, "state.journal") ? dir_size(&dir, "state.journal") : 0;
                if (size > before && size - before > line)
                        line = size - before;
                compacted = compacted || size < largest;
                largest = size > largest ? size : largest;
        }
        assert_true(line > 50 * N); /* the lines are long ones */
        assert_true(compacted);
        assert_true(largest <= 1024 * 1024 + line);
        state_store_free(s);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, N);
        for (size_t k = 0; k < n; k++)
                assert_int_equal(e[k].original.gso_max_size, 39);
        state_entries_free(e, n);
        teardown(&t, &dir);
}

/* The loop waits for a sync at most its bound: a sync that takes longer fails the save at the
 * bound (-ETIMEDOUT), and every save fails at once (-EBUSY) until it returns; then they succeed
 * again, and what was owed is saved. The disk is held on durable.h's gate, in its child. */
static void test_sync_bounded(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        StateEntry *e = NULL;
        size_t n = 0;
        int gate[2];
        StateIo io = {.sync_timeout_usec = 50 * 1000};
        struct timespec a, b;
        char c;

        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gate), 0);
        setup(&dir, &t);
        Device *d = written(&t, 5, "v5", (Sizes){60000, 60000, 60000, 60000}, SIZE_BITS_ALL);
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        state_store_set_io(s, &io);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        assert_int_equal(state_store_save(s), 0); /* a snapshot */
        assert_true(durable_pid() > 0);           /* synced in the child */

        io.sync_gate = &gate[1];
        d->record.original.gso_max_size = 60001;
        state_store_mark(s, d);
        clock_gettime(CLOCK_MONOTONIC, &a);
        assert_int_equal(state_store_save(s), -ETIMEDOUT);
        clock_gettime(CLOCK_MONOTONIC, &b);
        /* signed: the nanoseconds go back when a second is crossed */
        int64_t waited = ((int64_t) b.tv_sec - a.tv_sec) * 1000000 + ((int64_t) b.tv_nsec - a.tv_nsec) / 1000;
        assert_true(waited >= 50 * 1000);
        assert_true(waited < 1000 * 1000); /* the bound, not the disk */
        io.sync_gate = NULL; /* the held sync has its gate; the next ones do not wait */
        assert_int_equal(state_store_save(s), -EBUSY); /* it still runs */
        assert_true(state_store_pending(s));

        assert_int_equal(write(gate[0], "x", 1), 1);
        assert_int_equal(read(gate[0], &c, 1), 1); /* synced */
        io.sync_timeout_usec = 0;                  /* the default bound: a loaded machine's disk */
        /* the child answers right after it said so: a save may find it a moment before that
         * (-EBUSY), never after */
        int r;
        for (unsigned i = 0; (r = state_store_save(s)) == -EBUSY; i++)
                assert_true(i < 1000000);
        assert_int_equal(r, 0);
        assert_false(state_store_pending(s));
        state_store_set_io(s, NULL);
        state_store_free(s);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 1);
        assert_int_equal(e[0].original.gso_max_size, 60001);
        state_entries_free(e, n);
        teardown(&t, &dir);
        close(gate[0]);
        close(gate[1]);
}

/* At exit the sync's child is killed and reaped (durable_stop()): gone before the daemon is, also
 * while a sync is held in it (here at the gate, which a signal ends, as it does not end an
 * fsync); the next sync makes another child. */
static void test_sync_child_stopped(void **state) {
        int gate[2], fd, status;
        char c;

        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gate), 0);
        char path[] = "/tmp/bigtcpd-test-sync-XXXXXX";
        fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(unlink(path), 0);
        for (int held = 0; held < 2; held++) {
                assert_int_equal(durable_sync(fd, true, 1000 * 1000, -1), 0);
                pid_t pid = durable_pid();
                assert_true(pid > 0);
                if (held)
                        assert_int_equal(durable_sync(fd, true, 10 * 1000, gate[1]), -ETIMEDOUT);
                durable_stop(1000 * 1000);
                assert_int_equal(durable_pid(), -1);
                /* reaped: no zombie of it left to wait for */
                assert_int_equal(waitpid(pid, &status, WNOHANG), -1);
                assert_int_equal(errno, ECHILD);
                durable_stop(1000 * 1000); /* again: nothing to do */
        }
        assert_int_equal(durable_sync(fd, true, 1000 * 1000, -1), 0); /* a new child */
        assert_true(durable_pid() > 0);
        /* the killed child never answered the gate */
        assert_int_equal(recv(gate[0], &c, 1, MSG_DONTWAIT), -1);
        durable_stop(1000 * 1000);
        close(fd);
        close(gate[0]);
        close(gate[1]);
}

/* What earlier versions refused whole: each loads what it can (here, nothing), and says why. */
static void test_parse_damage(void **state) {
        const char *bad[] = {
                "[]",
                "{\"version\":2,\"devices\":[]}",
                "{\"version\":1}",
                "{\"version\":1,\"devices\":[{\"ifindex\":-1}]}",
                "{\"version\":1,\"devices\":[{\"ifindex\":3,\"original\":{\"gso_max_size\":\"x\"}}]}",
                ("{\"version\":1,\"devices\":[{\"ifindex\":3,\"original\":{\"gso_max_size\":1,\"gro_max_size\":1,"
                 "\"gso_ipv4_max_size\":1,\"gro_ipv4_max_size\":99999999999},\"written\":[]}]}"),
                ("{\"version\":1,\"devices\":[{\"ifindex\":3,\"original\":{\"gso_max_size\":1,\"gro_max_size\":1,"
                 "\"gso_ipv4_max_size\":1,\"gro_ipv4_max_size\":1}}]}"),
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                StateReadReport rep;
                StateEntry *e = NULL;
                size_t n = 0;
                assert_int_equal(state_parse(bad[i], strlen(bad[i]), &e, &n, NULL, &rep), 0);
                assert_int_equal(n, 0);
                assert_true(rep.n_aside > 0 || rep.bad_header || rep.truncated);
                state_entries_free(e, n);
        }
        /* nothing at all: no entries, no damage */
        StateReadReport rep;
        StateEntry *e = NULL;
        size_t n = 0;
        assert_int_equal(state_parse("", 0, &e, &n, NULL, &rep), 0);
        assert_int_equal(n, 0);
        assert_int_equal(rep.n_aside, 0);
        assert_false(rep.bad_header);
        free(e);
}

/* ---- the searches of `auto` ---- */

static void assert_search_equal(const AutoSearch *a, const AutoSearch *b) {
        assert_int_equal(a->min, b->min);
        assert_int_equal(a->max, b->max);
        assert_string_equal(auto_phase_to_string(a->phase), auto_phase_to_string(b->phase));
        assert_int_equal(a->proven, b->proven);
        assert_int_equal(a->proven_packets, b->proven_packets);
        assert_int_equal(a->trying, b->trying);
        assert_int_equal(a->ceiling, b->ceiling);
        assert_int_equal(a->ceiling_usec, b->ceiling_usec);
        /* words: the same ones, and so the same interned string */
        assert_string_equal(a->ceiling_counter ?: "(none)", b->ceiling_counter ?: "(none)");
        assert_ptr_equal(a->ceiling_counter, b->ceiling_counter);
        assert_int_equal(a->ceiling_rise, b->ceiling_rise);
        assert_int_equal(a->reprobe, b->reprobe);
        assert_int_equal(a->retry_usec, b->retry_usec);
        assert_int_equal(a->idle_wait_usec, b->idle_wait_usec);
        assert_int_equal(a->steps, b->steps);
        assert_int_equal(a->trips, b->trips);
        assert_string_equal(a->proof ?: "(none)", b->proof ?: "(none)");
        assert_ptr_equal(a->proof, b->proof);
}

/* A proof of AUTO_PROOF_MAX - 1 bytes, the most one may have: a namespace's name may be any bytes
 * but '/' (a control character, a quote, a backslash, UTF-8). */
static const char LONGEST_PROOF[] = "delivered to peer e1 in ns \001\"\\\xc3\xbc"
                                    "-pod-with-a-long-name-0123456789-0123456789-0123456789-0123456789"
                                    "-0123456789-0123456789-0123456";

/* One search in each phase a search can be kept in, every field set (a counter with a quote). */
static AutoDevice *searches_of_every_phase(void) {
        AutoDevice *a = auto_device_new(SIZE_BITS_ALL);
        assert_non_null(a);
        *auto_device_search(a, 0) = (AutoSearch){.min = 65536, .max = 524280, .phase = AUTO_WATCHING, .proven = 131072,
                                  .proven_packets = 812, .steps = 1};
        *auto_device_search(a, 1) = (AutoSearch){.min = 65536, .max = 524280, .phase = AUTO_IDLE, .proven = 65536,
                                  .retry_usec = UINT64_C(1700000090000000), .idle_wait_usec = 60000000};
        *auto_device_search(a, 2) = (AutoSearch){.min = 65536, .max = 400000, .phase = AUTO_TRYING, .proven = 150000,
                                  .proven_packets = 99, .trying = 300000, .ceiling = 300000, /* twice proven */
                                  .ceiling_usec = UINT64_C(1690000000000000), .ceiling_rise = 7, .reprobe = true,
                                  .steps = 3, .trips = 2};
        auto_words_set(&auto_device_search(a, 2)->ceiling_counter, "link.\"rx_crc_errors\"",
                       AUTO_COUNTER_MAX);
        auto_search_set_proof(auto_device_search(a, 2), LONGEST_PROOF);
        *auto_device_search(a, 3) = (AutoSearch){.min = 100000, .max = 524280, .phase = AUTO_SETTLED, .proven = 150000,
                                  .proven_packets = 4096, .ceiling = 155000, /* within 1/16: settled */
                                  .ceiling_usec = UINT64_C(1700000000000000), .ceiling_rise = 412, .steps = 2,
                                  .trips = 4};
        auto_words_set(&auto_device_search(a, 3)->ceiling_counter, "Tcp.RetransSegs", AUTO_COUNTER_MAX);
        auto_search_set_proof(auto_device_search(a, 0), "delivered to peer \"e1\" in ns pod-1");
        auto_search_set_proof(auto_device_search(a, 3), AUTO_PROOF_SENT);
        return a;
}

/* What the writer puts down, the reader gives back: through a snapshot and through the journal
 * (of an idle search, what a restart needs). */
static void test_auto_roundtrip(void **state) {
        Dir dir;
        DeviceTable t;
        Device *d, *fresh;
        StateEntry *e = NULL;
        size_t n = 0;

        assert_int_equal(strlen(LONGEST_PROOF), AUTO_PROOF_MAX - 1);
        setup(&dir, &t);
        d = written(&t, 42, "eth0", ((Sizes){65536, 65536, 65536, 65536}), SIZE_BITS_ALL);
        d->autosize = searches_of_every_phase();
        /* a search not begun yet (AUTO_NEW) is not written: the next reconcile begins it */
        fresh = written(&t, 43, "eth1", ((Sizes){65536, 65536, 65536, 65536}), SIZE_BITS_ALL);
        fresh->autosize = auto_device_new(SIZE_BIT_GSO);
        assert_non_null(fresh->autosize);

        for (int through_journal = 0; through_journal < 2; through_journal++) {
                if (through_journal) {
                        const Device *devs[] = {d, fresh};
                        auto_device_search(d->autosize, 0)->proven_packets++; /* the journal's line is the newer */
                        assert_int_equal(state_write_journal(dir.path, 1, devs, 2, NULL, 0), 0);
                } else
                        assert_int_equal(state_write_snapshot(dir.path, &t, 1), 0);
                load(&dir, &t, &e, &n, 0);
                assert_int_equal(n, 2);
                StateEntry *x = find_entry(e, n, 42);
                assert_non_null(x);
                assert_non_null(x->autosize);
                assert_int_equal(x->autosize->sizes, SIZE_BITS_ALL);
                for (unsigned i = 0; i < SIZES_COUNT; i++) {
                        /* an idle search is kept as one watching, without the time of its next
                         * watch (which moves at every watch): a restart watches it once more
                         * (`kept` borrows d's words: d's search outlives it) */
                        AutoSearch kept = *auto_device_search(d->autosize, i);
                        if (kept.phase == AUTO_IDLE)
                                kept.phase = AUTO_WATCHING;
                        kept.retry_usec = 0;
                        kept.idle_wait_usec = 0; /* below its most: it doubles again after a restart */
                        assert_search_equal(auto_device_search(x->autosize, i), &kept);
                }
                assert_null(find_entry(e, n, 43)->autosize);
                state_entries_free(e, n);
        }
        teardown(&t, &dir);
}

/* A snapshot of one device whose "auto" is `searches` (JSON text). */
static void parse_searches(const char *searches, StateEntry **ret, StateReadReport *rep) {
        char *text = NULL;
        size_t n = 0;

        assert_true(asprintf(&text,
                             "{\"version\":1,\"generation\":1,\"devices\":[\n{\"ifindex\":3,\"ifname\":\"v3\","
                             "\"original\":{\"gso_max_size\":65536,\"gro_max_size\":65536,\"gso_ipv4_max_size\":65536,"
                             "\"gro_ipv4_max_size\":65536},\"written\":[\"gso_max_size\"],\"auto\":%s}]}\n",
                             searches) > 0);
        assert_int_equal(state_parse(text, strlen(text), ret, &n, NULL, rep), 0);
        free(text);
        /* the entry itself always loads: its originals are what a restart needs */
        assert_int_equal(n, 1);
        assert_int_equal((*ret)[0].ifindex, 3);
        assert_int_equal((*ret)[0].original.gso_max_size, 65536);
}

/* A search as the writer writes it, with one field replaced (`value` JSON text) or, `value` NULL,
 * left out. */
static char *search_with(const char *size, const char *key, const char *value) {
        json_object *o = json_tokener_parse(
                "{\"size\":\"gso_max_size\",\"phase\":\"trying\",\"min\":65536,\"max\":524280,\"proven\":131072,"
                "\"proven_packets\":100,\"trying\":200000,\"ceiling\":262144,\"ceiling_usec\":1700000000000000,"
                "\"counter\":\"Tcp.RetransSegs\",\"rise\":9,\"reprobe\":false,\"retry_usec\":0,"
                "\"idle_wait_usec\":0,\"steps\":1,\"trips\":1}");
        char *text;

        assert_non_null(o);
        json_object_object_add(o, "size", json_object_new_string(size));
        if (key && value) {
                json_object *v = json_tokener_parse(value);
                assert_true(v || streq_ptr(value, "null"));
                json_object_object_add(o, key, v);
        } else if (key)
                json_object_object_del(o, key);
        text = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        assert_non_null(text);
        json_object_put(o);
        return text;
}

static const char AUTO_DROPPED[] = "its searches of auto (dropped: they begin again)";

/* search_with()'s search with every field of `fields` (a JSON object's text) put in. */
static char *search_over(const char *size, const char *fields) {
        char *base = search_with(size, NULL, NULL), *text;
        json_object *o = json_tokener_parse(base), *f = json_tokener_parse(fields);

        assert_non_null(o);
        assert_non_null(f);
        json_object_object_foreach(f, key, value)
                json_object_object_add(o, key, json_object_get(value));
        text = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        assert_non_null(text);
        json_object_put(f);
        json_object_put(o);
        free(base);
        return text;
}

/* What a search cannot be is dropped (the search begins again at the next reconcile), never the
 * entry: its originals load. The searches of the other sizes stay. */
static void test_auto_hostile(void **state) {
        static const char long_counter[] = "\"Tcp.RetransSegsRetransSegsRetransSegsRetransSegsRetransSegsRetra\"";
        static const char long_proof[] =
                "\"delivered to peer e1 in ns pod-with-a-long-name-0123456789-0123456789-0123456789"
                "-0123456789-0123456789-0123456789-0123456789-012\"";
        static const struct {
                const char *key, *value; /* value NULL: left out */
        } bad[] = {
                {"size", "\"gso_max_sizes\""}, /* an unknown size (see search_with's caller) */
                {"phase", "\"bogus\""},
                {"phase", "\"new\""}, /* never written: a search not begun is not kept */
                {"phase", "3"},
                {"phase", NULL},
                {"phase", "\"settled\""}, /* with a step left: it would never step again */
                {"min", "0"},
                {"min", "300000"},     /* above proven */
                {"min", "16384"},      /* below 65536: only a device's limit (then min = max) is */
                {"min", "600000"},     /* above max, and above what a kernel takes */
                {"max", "524281"},     /* above what a kernel takes */
                {"max", "100000"},     /* below proven */
                {"min", "-65536"},
                {"min", "\"65536\""},
                {"proven", "65535"},   /* below min */
                {"proven", "600000"},  /* above max */
                {"proven", "4294967296"},
                {"proven", "131072.5"},
                {"proven", "null"},
                {"proven", NULL},
                {"trying", "131072"},  /* trying, but not above proven */
                {"trying", "524288"},  /* above max */
                {"ceiling", "131072"}, /* at proven */
                {"ceiling", "524281"}, /* above max */
                {"ceiling_usec", "-1"},
                {"proven_packets", "-5"},
                {"rise", "\"9\""},
                {"retry_usec", "true"},
                {"idle_wait_usec", "[]"},
                {"steps", "-1"},
                {"steps", "4294967296"},
                {"trips", "{}"},
                {"counter", "null"},
                {"counter", "7"},
                {"counter", long_counter}, /* 64 bytes: one more than a counter may have */
                {"proof", long_proof},     /* 128 bytes: one more than a proof may have */
        };
        for (size_t k = 0; k < ELEMENTSOF(bad); k++) {
                bool size_bad = streq_ptr(bad[k].key, "size");
                char *one = search_with(size_bad ? "gso_max_sizes" : "gso_max_size", size_bad ? NULL : bad[k].key,
                                        bad[k].value);
                char *other = search_with("gro_max_size", NULL, NULL), *both = NULL;
                StateReadReport rep;
                StateEntry *e = NULL;

                print_message("%s: %s\n", bad[k].key, bad[k].value ?: "(left out)");
                /* alone: the device has no search, and the load says it dropped them */
                assert_true(asprintf(&both, "[%s]", one) > 0);
                parse_searches(both, &e, &rep);
                assert_null(e[0].autosize);
                assert_int_equal(rep.n_aside, 1);
                assert_true(rep.aside[0].partial);
                assert_string_equal(rep.aside[0].reason, AUTO_DROPPED);
                state_entries_free(e, 1);
                free(both);

                /* beside a good one: that one stays */
                assert_true(asprintf(&both, "[%s,%s]", one, other) > 0);
                parse_searches(both, &e, &rep);
                assert_non_null(e[0].autosize);
                assert_int_equal(e[0].autosize->sizes, SIZE_BIT_GRO);
                assert_int_equal(auto_device_search(e[0].autosize, 1)->proven, 131072);
                state_entries_free(e, 1);
                free(both);
                free(one);
                free(other);
        }
}

/* A search is checked whole: the size it tries is the one a restart writes, so it must be one a step
 * of that search could try (above the proven size, at most twice it, within the bound, below the
 * ceiling or the ceiling itself tried once more), and a search in no step tries nothing. One that
 * is not is dropped alone: the device's entry and its other searches load. */
static void test_auto_checked_whole(void **state) {
        static const char *const bad[] = {
                /* the state file of issue 34: 524280 written above the ceiling of 300000 */
                "{\"proven\":262144,\"ceiling\":300000,\"trying\":524280,\"max\":524280}",
                "{\"proven\":262144,\"ceiling\":300000,\"trying\":300001,\"reprobe\":true}",
                /* the ceiling itself, but not as a ceiling tried once more */
                "{\"proven\":131072,\"ceiling\":200000,\"trying\":200000,\"reprobe\":false}",
                /* more than twice the proven size */
                "{\"proven\":131072,\"ceiling\":0,\"trying\":262145}",
                "{\"proven\":65536,\"ceiling\":0,\"trying\":524280}",
                /* a size tried outside a step */
                "{\"phase\":\"watching\",\"trying\":200000}",
                "{\"phase\":\"idle\",\"trying\":200000}",
                "{\"phase\":\"settled\",\"proven\":250000,\"trying\":262000}",
        };
        static const char *const good[] = {
                "{\"proven\":262144,\"ceiling\":300000,\"trying\":281072}",
                "{\"proven\":262144,\"ceiling\":300000,\"trying\":300000,\"reprobe\":true}",
                "{\"proven\":131072,\"ceiling\":0,\"trying\":262144}",
                "{\"proven\":262144,\"ceiling\":0,\"trying\":524280}",
                "{\"phase\":\"watching\",\"trying\":0}",
        };
        StateReadReport rep;
        StateEntry *e = NULL;
        char *one, *other, *text;

        for (size_t k = 0; k < ELEMENTSOF(bad); k++) {
                print_message("bad: %s\n", bad[k]);
                one = search_over("gso_max_size", bad[k]);
                other = search_with("gro_max_size", NULL, NULL);
                assert_true(asprintf(&text, "[%s,%s]", one, other) > 0);
                parse_searches(text, &e, &rep);
                assert_int_equal(rep.n_aside, 1);
                assert_true(rep.aside[0].partial);
                assert_string_equal(rep.aside[0].reason, "a search of auto (dropped: it begins again)");
                assert_non_null(e[0].autosize);
                assert_int_equal(e[0].autosize->sizes, SIZE_BIT_GRO); /* the other stays */
                state_entries_free(e, 1);
                free(text);
                free(one);
                free(other);
        }
        for (size_t k = 0; k < ELEMENTSOF(good); k++) {
                print_message("good: %s\n", good[k]);
                one = search_over("gso_max_size", good[k]);
                assert_true(asprintf(&text, "[%s]", one) > 0);
                parse_searches(text, &e, &rep);
                assert_int_equal(rep.n_aside, 0);
                assert_non_null(e[0].autosize);
                assert_int_equal(e[0].autosize->sizes, SIZE_BIT_GSO);
                state_entries_free(e, 1);
                free(text);
                free(one);
        }
}

/* The edges of what a search may be, and how the reader takes what is not its own. */
static void test_auto_edges(void **state) {
        static const char counter63[] = "\"Tcp.RetransSegsRetransSegsRetransSegsRetransSegsRetransSegsRetr\"";
        StateReadReport rep;
        StateEntry *e = NULL;
        char *a, *b, *text;

        /* a counter of 63 bytes fits; sizes at the kernel's most; the largest numbers JSON-C reads */
        a = search_with("gso_max_size", "counter", counter63);
        assert_true(asprintf(&text, "[%s]", a) > 0);
        parse_searches(text, &e, &rep);
        assert_int_equal(rep.n_aside, 0);
        assert_non_null(e[0].autosize);
        assert_int_equal(strlen(auto_device_search(e[0].autosize, 0)->ceiling_counter), 63);
        state_entries_free(e, 1);
        free(text);
        free(a);
        a = search_with("gso_max_size", "max", "524280");
        b = search_with("gso_max_size", "steps", "4294967295");
        free(a);
        assert_true(asprintf(&text, "[%s]", b) > 0);
        parse_searches(text, &e, &rep);
        assert_non_null(e[0].autosize);
        assert_int_equal(auto_device_search(e[0].autosize, 0)->steps, UINT32_MAX);
        state_entries_free(e, 1);
        free(text);
        free(b);

        /* a device whose limit is below 65536 searches within it alone (min = max): kept, settled */
        text = strdup("[{\"size\":\"gso_max_size\",\"phase\":\"settled\",\"min\":16384,\"max\":16384,\"proven\":16384,"
                      "\"proven_packets\":0,\"trying\":0,\"ceiling\":0,\"ceiling_usec\":0,\"counter\":\"\",\"rise\":0,"
                      "\"reprobe\":false,\"retry_usec\":0,\"idle_wait_usec\":0,\"steps\":0,\"trips\":0}]");
        parse_searches(text, &e, &rep);
        assert_non_null(e[0].autosize);
        assert_int_equal(auto_device_search(e[0].autosize, 0)->proven, 16384);
        state_entries_free(e, 1);
        free(text);

        /* reprobe without a ceiling means nothing: read as false */
        a = search_with("gso_max_size", "ceiling", "0");
        b = search_with("gro_max_size", "reprobe", "true");
        char *c = search_with("gso_ipv4_max_size", "reprobe", "\"yes\""); /* not a boolean: false */
        assert_true(asprintf(&text, "[%s,%s,%s]", a, b, c) > 0);
        free(a);
        free(b);
        free(c);
        parse_searches(text, &e, &rep);
        free(text);
        assert_int_equal(e[0].autosize->sizes, SIZE_BIT_GSO | SIZE_BIT_GRO | SIZE_BIT_GSO_IPV4);
        assert_false(auto_device_search(e[0].autosize, 0)->reprobe);
        assert_true(auto_device_search(e[0].autosize, 1)->reprobe);
        assert_false(auto_device_search(e[0].autosize, 2)->reprobe);
        state_entries_free(e, 1);

        /* a size twice: the last is kept, as of the entries of one device (the first one's words
         * dropped: the test's teardown finds no reference left) */
        a = search_over("gso_max_size", "{\"proven\":65536,\"trying\":131072,\"proof\":\"first\","
                                        "\"counter\":\"link.tx_errors\"}");
        b = search_over("gso_max_size", "{\"proven\":131072,\"proof\":\"second\"}");
        assert_true(asprintf(&text, "[%s,%s]", a, b) > 0);
        free(a);
        free(b);
        parse_searches(text, &e, &rep);
        free(text);
        assert_int_equal(rep.n_aside, 0);
        assert_int_equal(e[0].autosize->sizes, SIZE_BIT_GSO);
        assert_int_equal(auto_device_search(e[0].autosize, 0)->proven, 131072);
        assert_string_equal(auto_device_search(e[0].autosize, 0)->proof, "second");
        assert_string_equal(auto_device_search(e[0].autosize, 0)->ceiling_counter, "Tcp.RetransSegs");
        assert_int_equal(intern_refs(), 2);
        state_entries_free(e, 1);
        assert_int_equal(intern_refs(), 0);

        /* a proof of the most bytes it may have loads; one that is not a string is none, as a
         * proof left out (a run before proofs were said); "" is none */
        const char *proofs[][2] = {
                {"\"delivered to peer e1 in ns pod-with-a-long-name-0123456789-0123456789-0123456789"
                 "-0123456789-0123456789-0123456789-0123456789-01\"",
                 NULL},
                {"7", NULL},
                {"null", NULL},
                {"\"\"", NULL},
                {"\"sent\"", "sent"},
                /* as a C string: up to its first NUL, as when it was copied into an array */
                {"\"sent\\u0000, and a tail of any length past the most a proof may have "
                 "0123456789-0123456789-0123456789-0123456789-0123456789-0123456789-0123456789\"",
                 "sent"}};
        for (size_t k = 0; k < ELEMENTSOF(proofs); k++) {
                a = search_with("gso_max_size", "proof", proofs[k][0]);
                assert_true(asprintf(&text, "[%s]", a) > 0);
                free(a);
                parse_searches(text, &e, &rep);
                free(text);
                assert_int_equal(rep.n_aside, 0);
                assert_non_null(e[0].autosize);
                const char *proof = auto_device_search(e[0].autosize, 0)->proof;
                if (k == 0)
                        assert_int_equal(strlen(proof), AUTO_PROOF_MAX - 1);
                else if (proofs[k][1])
                        assert_string_equal(proof, proofs[k][1]);
                else
                        assert_null(proof);
                state_entries_free(e, 1);
        }

        /* not a list, an empty one, a list of what are not searches: none, said */
        const char *none[] = {"{}", "\"auto\"", "7", "null", "[]", "[1,\"x\",[],null]"};
        for (size_t k = 0; k < ELEMENTSOF(none); k++) {
                parse_searches(none[k], &e, &rep);
                assert_null(e[0].autosize);
                assert_int_equal(rep.n_aside, 1);
                assert_string_equal(rep.aside[0].reason, AUTO_DROPPED);
                state_entries_free(e, 1);
        }
        /* more than four: the first four are read */
        a = search_with("gso_max_size", NULL, NULL);
        assert_true(asprintf(&text, "[1,2,3,4,%s]", a) > 0);
        free(a);
        parse_searches(text, &e, &rep);
        free(text);
        assert_null(e[0].autosize);
        state_entries_free(e, 1);
}

/* A journal longer than the snapshot (a burst: a line for each device written, another as it enters
 * probation) is compacted once no line came for a while, so that a restart after the burst reads
 * one snapshot and no journal. Once it stayed until twice the snapshot: a restart over 10000
 * devices in probation parsed 10.5 MB where one over applied devices parsed 7 MB. */
static void test_long_journal_compacted_when_quiet(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        StateEntry *e = NULL;
        size_t n = 0;
        char path[128];
        struct stat st;
        Device *devs[3000];

        (void) state;
        setup(&dir, &t);
        for (int i = 0; i < 3000; i++) {
                char name[16];
                snprintf(name, sizeof(name), "v%d", i);
                devs[i] = written(&t, 10 + i, name, (Sizes){60000, 60000, 60000, 60000}, SIZE_BITS_ALL);
        }
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        assert_int_equal(state_store_load(s, &e, &n, NULL), 0);
        state_entries_free(e, n);
        assert_int_equal(state_store_save(s), 0); /* a snapshot */
        for (int round = 0; round < 2; round++) {
                for (int i = 0; i < 3000; i++) {
                        devs[i]->record.original.gso_max_size = (uint32_t) (61000 + round);
                        state_store_mark(s, devs[i]);
                }
                assert_int_equal(state_store_save(s), 0); /* journal lines */
        }
        snprintf(path, sizeof(path), "%s/state.journal", dir.path);
        assert_int_equal(stat(path, &st), 0);
        assert_true(st.st_size >= 1024 * 1024);
        /* nothing else happens: the loop runs what is due, and ends when nothing is */
        assert_int_equal(event_base_dispatch(dir.base), 1);
        assert_true(stat(path, &st) < 0 || st.st_size == 0);
        state_store_free(s);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 3000);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(e[i].original.gso_max_size, 61001);
        state_entries_free(e, n);
        device_table_done(&t);
        dir_close(&dir);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_snapshot_roundtrip, intern_none_left),
                cmocka_unit_test_teardown(test_probation_roundtrip_shares_rules, intern_none_left),
                cmocka_unit_test_teardown(test_old_families, intern_none_left),
                cmocka_unit_test_teardown(test_journal, intern_none_left),
                cmocka_unit_test_teardown(test_long_journal_compacted_when_quiet, intern_none_left),
                cmocka_unit_test_teardown(test_store_forget_then_reuse, intern_none_left),
                cmocka_unit_test_teardown(test_store_save_devices, intern_none_left),
                cmocka_unit_test_teardown(test_store_writes_only_changes, intern_none_left),
                cmocka_unit_test_teardown(test_siphash, intern_none_left),
                cmocka_unit_test_teardown(test_parse_damage, intern_none_left),
                cmocka_unit_test_teardown(test_sync_bounded, intern_none_left),
                cmocka_unit_test_teardown(test_sync_child_stopped, intern_none_left),
                cmocka_unit_test_teardown(test_bad_entry_costs_itself, intern_none_left),
                cmocka_unit_test_teardown(test_probation_windows_resume, intern_none_left),
                cmocka_unit_test_teardown(test_damaged_snapshot, intern_none_left),
                cmocka_unit_test_teardown(test_unknown_generation_takes_newest_journal, intern_none_left),
                cmocka_unit_test_teardown(test_long_lines, intern_none_left),
                cmocka_unit_test_teardown(test_enospc_cut_back, intern_none_left),
                cmocka_unit_test_teardown(test_enospc_not_cut_back, intern_none_left),
                cmocka_unit_test_teardown(test_retry_backoff, intern_none_left),
                cmocka_unit_test_teardown(test_bad_journal_line_costs_itself, intern_none_left),
                cmocka_unit_test_teardown(test_bad_journal_keeps_snapshot, intern_none_left),
                cmocka_unit_test_teardown(test_planted_files, intern_none_left),
                cmocka_unit_test_teardown(test_untrusted_dir, intern_none_left),
                cmocka_unit_test_teardown(test_compact_by_bytes, intern_none_left),
                cmocka_unit_test_teardown(test_auto_roundtrip, intern_none_left),
                cmocka_unit_test_teardown(test_auto_hostile, intern_none_left),
                cmocka_unit_test_teardown(test_auto_checked_whole, intern_none_left),
                cmocka_unit_test_teardown(test_auto_edges, intern_none_left),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
