/* test-intern.c — the shared strings: one copy for equal strings, as many as the devices (a proof
 * of `auto` for each peer), each gone with its last reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "intern.h"

#define MANY 10000

static void test_one_copy(void **state) {
        char buf[16];
        bool changed = false;

        (void) state;
        assert_null(intern_get(NULL));
        assert_null(intern_ref(NULL));
        intern_put(NULL);
        const char *a = intern_get("veth");
        snprintf(buf, sizeof(buf), "%s", "veth");
        const char *b = intern_get(buf);
        assert_ptr_equal(a, b);
        assert_ptr_not_equal(a, buf);
        assert_ptr_equal(intern_ref(a), a);
        assert_int_equal(intern_refs(), 3);
        const char *other = intern_get("");
        assert_ptr_not_equal(other, a);
        assert_string_equal(other, "");
        intern_put(other);
        intern_put(a);
        intern_put(b);
        assert_string_equal(a, "veth"); /* one reference left */
        intern_put(a);
        assert_int_equal(intern_refs(), 0);

        const char *s = NULL;
        assert_int_equal(intern_set(&s, "bridge", &changed), 0);
        assert_true(changed);
        changed = false;
        assert_int_equal(intern_set(&s, "bridge", &changed), 0);
        assert_false(changed);
        assert_int_equal(intern_refs(), 1);
        assert_int_equal(intern_set(&s, NULL, &changed), 0);
        assert_true(changed);
        assert_null(s);
        assert_int_equal(intern_refs(), 0);
}

/* As many strings as devices, each found again as the one copy, in any order of their going. */
static void test_many(void **state) {
        static const char *s[MANY];
        char buf[64];

        (void) state;
        for (unsigned k = 0; k < MANY; k++) {
                snprintf(buf, sizeof(buf), "delivered to peer eth0 in ns pod-%u", k);
                s[k] = intern_get(buf);
                assert_non_null(s[k]);
        }
        for (unsigned k = 0; k < MANY; k++) {
                snprintf(buf, sizeof(buf), "delivered to peer eth0 in ns pod-%u", k);
                const char *again = intern_get(buf);
                assert_ptr_equal(again, s[k]);
                intern_put(again);
        }
        assert_int_equal(intern_refs(), MANY);
        /* every other one goes, then the rest: the others stay whole meanwhile */
        for (unsigned k = 0; k < MANY; k += 2)
                intern_put(s[k]);
        for (unsigned k = 1; k < MANY; k += 2) {
                snprintf(buf, sizeof(buf), "delivered to peer eth0 in ns pod-%u", k);
                assert_string_equal(s[k], buf);
                const char *again = intern_get(buf);
                assert_ptr_equal(again, s[k]);
                intern_put(again);
        }
        for (unsigned k = 1; k < MANY; k += 2)
                intern_put(s[k]);
        assert_int_equal(intern_refs(), 0);
        /* and a set emptied is a set again */
        const char *a = intern_get("veth");
        assert_string_equal(a, "veth");
        intern_put(a);
        assert_int_equal(intern_refs(), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_one_copy),
                cmocka_unit_test(test_many),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
