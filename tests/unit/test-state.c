/* test-state.c — the state file: snapshot and journal round trips, what the parser refuses, and
 * the store's choices (journal or snapshot, forgotten devices before their successors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <event2/event.h>
#include <stdio.h>
#include <sys/stat.h>

#include "state.h"

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
        const char *files[] = {"state.json", "state.journal", "state.json.corrupt"};
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                snprintf(p, sizeof(p), "%s/%s", d->path, files[i]);
                (void) unlink(p);
        }
        assert_int_equal(rmdir(d->path), 0);
        event_base_free(d->base);
}

static Device *written(DeviceTable *t, int ifindex, const char *name, Sizes original, unsigned mask) {
        Device *d;
        assert_int_equal(device_add(t, ifindex, &d), 0);
        d->ifname = strdup(name);
        d->has_original = true;
        d->original = original;
        d->written = mask;
        return d;
}

static void load(const Dir *dir, const DeviceTable *t, StateEntry **e, size_t *n, int expect) {
        StateStore *s;
        assert_int_equal(state_store_new(dir->base, dir->path, t, &s), 0);
        assert_int_equal(state_store_load(s, e, n), expect);
        state_store_free(s);
}

static void test_snapshot_roundtrip(void **state) {
        Dir dir;
        DeviceTable t;
        Device *d;
        StateEntry *e = NULL;
        size_t n = 0;
        char path[128];

        dir_open(&dir);
        assert_int_equal(device_table_init(&t), 0);
        load(&dir, &t, &e, &n, 0); /* missing: fine, empty */
        assert_int_equal(n, 0);

        d = written(&t, 42, "eth0", (Sizes){65536, 65536, 60000, 60001}, SIZE_BITS_IPV4 | SIZE_BIT_GSO);
        d->held = true;
        d->held_desired = (Sizes){185000, 185000, 185000, 185000};
        d->state = DEVICE_ROLLED_BACK;
        assert_int_equal(device_add(&t, 43, &d), 0); /* never written: not in the file */
        /* a name is the kernel's bytes: quotes, backslashes and control characters are escaped */
        written(&t, 44, "a\"b\\c\001d\x7f", (Sizes){1, 2, 3, 4}, SIZE_BITS_ALL);
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
        assert_int_equal(e[0].original.gro_ipv4_max_size, 60001);
        assert_int_equal(e[0].written, SIZE_BITS_IPV4 | SIZE_BIT_GSO);
        assert_int_equal(e[0].state, DEVICE_ROLLED_BACK);
        assert_true(e[0].held);
        assert_int_equal(e[0].held_desired.gso_max_size, 185000);
        state_entries_free(e, n);
        device_table_done(&t);

        /* A snapshot that does not parse is kept aside and reported. */
        snprintf(path, sizeof(path), "%s/state.json", dir.path);
        FILE *f = fopen(path, "we");
        fputs("{\"version\":1,\"devices\":[{\"ifindex\":", f); /* truncated */
        fclose(f);
        assert_int_equal(device_table_init(&t), 0);
        load(&dir, &t, &e, &n, -EBADMSG);
        assert_int_equal(n, 0);
        snprintf(path, sizeof(path), "%s/state.json.corrupt", dir.path);
        assert_int_equal(access(path, F_OK), 0);
        device_table_done(&t);
        dir_close(&dir);
}

/* Files of the version before the redesign said which families were written. */
static void test_old_families(void **state) {
        const char text[] = "{\"version\":1,\"generation\":3,\"devices\":[{\"ifindex\":7,\"ifname\":\"v7\","
                            "\"original\":{\"gso_max_size\":65536,\"gro_max_size\":65536,\"gso_ipv4_max_size\":65536,"
                            "\"gro_ipv4_max_size\":65536},\"families\":[\"ipv6\"],\"state\":\"applied\"}]}";
        StateEntry *e = NULL;
        size_t n = 0;
        uint64_t g = 0;

        assert_int_equal(state_parse(text, strlen(text), &e, &n, &g), 0);
        assert_int_equal(n, 1);
        assert_int_equal(g, 3);
        assert_int_equal(e[0].written, SIZE_BITS_IPV6);
        state_entries_free(e, n);
}

static void test_journal(void **state) {
        Dir dir;
        DeviceTable t;
        Device *a, *b;
        StateEntry *e = NULL;
        size_t n = 0;
        char path[128];

        dir_open(&dir);
        assert_int_equal(device_table_init(&t), 0);
        a = written(&t, 10, "a", (Sizes){65536, 65536, 65536, 65536}, SIZE_BITS_ALL);
        b = written(&t, 11, "b", (Sizes){65536, 65536, 65536, 65536}, SIZE_BITS_ALL);
        (void) a;
        assert_int_equal(state_write_snapshot(dir.path, &t, 7), 0);

        /* b changes, a goes away, then an entry of an older generation that must be ignored */
        b->original.gso_max_size = 1000;
        const Device *devs[] = {b};
        const int gone[] = {10};
        assert_int_equal(state_write_journal(dir.path, 7, devs, 1, gone, 1), 0);
        b->original.gso_max_size = 2000;
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
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 2);
        state_entries_free(e, n);
        device_table_done(&t);
        dir_close(&dir);
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

        dir_open(&dir);
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        assert_int_equal(state_store_load(s, &e, &n), 0);
        assert_int_equal(state_store_save(s), 0); /* the first save after a load: a snapshot */

        old = written(&t, 5, "old", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        state_store_mark(s, old);
        assert_int_equal(state_store_save(s), 0);
        old->original.gso_max_size = 2;
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
        device_table_done(&t);
        dir_close(&dir);
}

/* Before a write only what it needs goes to disk; the rest waits for the next save. */
static void test_store_save_devices(void **state) {
        Dir dir;
        DeviceTable t;
        StateStore *s;
        Device *a, *b;
        StateEntry *e = NULL;
        size_t n = 0;

        dir_open(&dir);
        assert_int_equal(device_table_init(&t), 0);
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &s), 0);
        assert_int_equal(state_store_load(s, &e, &n), 0);
        assert_int_equal(state_store_save(s), 0); /* the snapshot after a load */

        a = written(&t, 1, "a", (Sizes){1, 1, 1, 1}, SIZE_BITS_ALL);
        b = written(&t, 2, "b", (Sizes){2, 2, 2, 2}, SIZE_BITS_ALL);
        state_store_mark(s, a);
        state_store_mark(s, b);
        Device *batch[] = {a};
        assert_int_equal(state_store_save_devices(s, batch, 1), 0);
        assert_false(a->state_dirty);
        assert_true(b->state_dirty);
        assert_true(state_store_pending(s));

        /* what a restart would find now: a only */
        StateStore *peek;
        assert_int_equal(state_store_new(dir.base, dir.path, &t, &peek), 0);
        assert_int_equal(state_store_load(peek, &e, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(e[0].ifname, "a");
        state_entries_free(e, n);
        state_store_free(peek); /* nothing marked on it: it writes nothing */

        assert_int_equal(state_store_save(s), 0);
        assert_false(state_store_pending(s));
        state_store_free(s);
        load(&dir, &t, &e, &n, 0);
        assert_int_equal(n, 2);
        state_entries_free(e, n);
        device_table_done(&t);
        dir_close(&dir);
}

static void test_parse_rejects(void **state) {
        const char *bad[] = {
                "",
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
                StateEntry *e = NULL;
                size_t n = 0;
                assert_int_equal(state_parse(bad[i], strlen(bad[i]), &e, &n, NULL), -EBADMSG);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_snapshot_roundtrip),
                cmocka_unit_test(test_old_families),
                cmocka_unit_test(test_journal),
                cmocka_unit_test(test_store_forget_then_reuse),
                cmocka_unit_test(test_store_save_devices),
                cmocka_unit_test(test_parse_rejects),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
