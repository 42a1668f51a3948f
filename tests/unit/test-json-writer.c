/* test-json-writer.c — the JSON writer prints what json-c prints for the same values (PLAIN,
 * NOSLASHESCAPE): every byte of a string (quotes, backslashes, control characters, DEL, bytes of
 * invalid UTF-8, which it leaves to the caller as json-c does), integers at their limits, doubles
 * through json-c's own format, and random nestings of objects, arrays, nulls and booleans; its
 * tree backend builds the trees json-c builds for them. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json-writer.h"
#include "utf8.h"

#define FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* What json-c prints of `o` (taken). */
static char *jsonc_text(json_object *o) {
        char *s = strdup(json_object_to_json_string_ext(o, FLAGS));
        json_object_put(o);
        assert_non_null(s);
        return s;
}

static void assert_written(JsonWriter *w, json_object *expected) {
        char *want = jsonc_text(expected);
        const char *got = json_writer_text(w);

        assert_non_null(got);
        assert_int_equal(json_writer_error(w), 0);
        assert_string_equal(got, want);
        assert_int_equal(w->len, strlen(want));
        free(want);
}

static void check_string(const char *s) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;

        json_writer_string(&w, s);
        assert_written(&w, json_object_new_string(s));
}

static void test_every_byte(void **state) {
        for (unsigned c = 1; c < 256; c++) {
                char one[2] = {(char) c, 0}, mid[8] = {'a', (char) c, 'b', (char) c, (char) c, 'z', 0};
                check_string(one);
                check_string(mid);
        }
}

static void test_strings(void **state) {
        static const char *const cases[] = {
                "",
                "eth0",
                "a\"b\\c/d",
                "\"\"\\\\//",
                "tab\tnl\nret\rff\fbs\b",
                "\x01\x02\x1e\x1f\x7f",
                "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",  /* valid UTF-8, left as it is */
                "bad \xff\xfe \xc3 \xed\xa0\x80 \xf5\x80\x80\x80", /* invalid: json-c leaves bytes too */
                "ends in an escape\n",
                "\\",
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                check_string(cases[i]);

                /* a kernel string is repaired first, then written: the same as json-c of the repair */
                char *buf = NULL;
                const char *safe = utf8_safe(cases[i], &buf);
                assert_non_null(safe);
                assert_true(utf8_is_valid(safe));
                check_string(safe);
                free(buf);
        }
}

static void test_null_string(void **state) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;

        json_writer_string(&w, NULL);
        assert_string_equal(json_writer_text(&w), "null");
}

static void test_integers(void **state) {
        static const int64_t cases[] = {0, 1, -1, 9, 10, -10, 65536, 524280, INT32_MAX, INT32_MIN,
                                        (int64_t) 1796476047320368, INT64_MAX, INT64_MIN, INT64_MIN + 1};

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
                json_writer_int64(&w, cases[i]);
                assert_written(&w, json_object_new_int64(cases[i]));
        }
}

static void test_doubles(void **state) {
        static const double cases[] = {0, 0.1, 0.5, 1, 2.5, 1e-7, 1e300, -3.25, 123456789.125, NAN, INFINITY, -INFINITY};

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
                json_writer_double(&w, cases[i]);
                assert_written(&w, json_object_new_double(cases[i]));
        }
}

static void test_empty_containers(void **state) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
        json_object *o = json_object_new_object();

        json_writer_object_begin(&w);
        json_writer_key(&w, "a");
        json_writer_array_begin(&w);
        json_writer_array_end(&w);
        json_writer_key(&w, "o");
        json_writer_object_begin(&w);
        json_writer_object_end(&w);
        json_writer_key(&w, "n");
        json_writer_null(&w);
        json_writer_key(&w, "t");
        json_writer_bool(&w, true);
        json_writer_key(&w, "f");
        json_writer_bool(&w, false);
        json_writer_key(&w, "we\"ird\n");
        json_writer_int64(&w, 1);
        json_writer_object_end(&w);
        json_object_object_add(o, "a", json_object_new_array());
        json_object_object_add(o, "o", json_object_new_object());
        json_object_object_add(o, "n", NULL);
        json_object_object_add(o, "t", json_object_new_boolean(true));
        json_object_object_add(o, "f", json_object_new_boolean(false));
        json_object_object_add(o, "we\"ird\n", json_object_new_int64(1));
        assert_written(&w, o);
}

/* A random value, written into `w` and built as a json-c tree alike. */
static json_object *random_value(JsonWriter *w, unsigned *seed, int depth) {
        static const char *const words[] = {"eth0", "", "q\"", "b\\s", "c\x01", "\xff", "ü", "/"};
        unsigned kind = (unsigned) rand_r(seed) % (depth > 3 ? 5 : 7);
        const char *word = words[(unsigned) rand_r(seed) % 8];
        int64_t n = (int64_t) (((uint64_t) rand_r(seed) << 33) ^ (uint64_t) rand_r(seed));
        json_object *o;

        switch (kind) {
        case 0:
                json_writer_string(w, word);
                return json_object_new_string(word);
        case 1:
                json_writer_int64(w, n);
                return json_object_new_int64(n);
        case 2:
                json_writer_bool(w, n & 1);
                return json_object_new_boolean(n & 1);
        case 3:
                json_writer_null(w);
                return NULL;
        case 4:
                json_writer_double(w, (double) n / 7);
                return json_object_new_double((double) n / 7);
        case 5:
                o = json_object_new_array();
                json_writer_array_begin(w);
                for (int i = rand_r(seed) % 4; i > 0; i--)
                        json_object_array_add(o, random_value(w, seed, depth + 1));
                json_writer_array_end(w);
                return o;
        default:
                o = json_object_new_object();
                json_writer_object_begin(w);
                for (int i = rand_r(seed) % 4; i > 0; i--) {
                        char key[16];
                        snprintf(key, sizeof(key), "k%d%s", i, words[i % 8]);
                        json_writer_key(w, key);
                        json_object_object_add(o, key, random_value(w, seed, depth + 1));
                }
                json_writer_object_end(w);
                return o;
        }
}

static void test_random_nesting(void **state) {
        for (unsigned i = 0; i < 2000; i++) {
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
                unsigned seed = i;
                json_object *o = random_value(&w, &seed, 0);

                if (!o) { /* json-c prints a NULL value as null */
                        assert_string_equal(json_writer_text(&w), "null");
                        continue;
                }
                assert_written(&w, o);
        }
}

/* The tree backend builds what json-c builds: printed, the same text. */
static void test_tree_backend(void **state) {
        for (unsigned i = 0; i < 2000; i++) {
                _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;
                unsigned seed = i;
                json_object *o = random_value(&w, &seed, 0), *tree;

                assert_int_equal(json_writer_error(&w), 0);
                assert_null(json_writer_text(&w));
                tree = json_writer_take_tree(&w);
                if (!o) {
                        assert_null(tree);
                        continue;
                }
                char *want = jsonc_text(o), *got = jsonc_text(tree);
                assert_string_equal(got, want);
                free(want);
                free(got);
        }
}

/* A value of an object without its key is the caller's mistake: -EINVAL, no tree. */
static void test_tree_without_key(void **state) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_TREE_INIT;

        json_writer_object_begin(&w);
        json_writer_int64(&w, 1);
        json_writer_object_end(&w);
        assert_int_equal(json_writer_error(&w), -EINVAL);
        assert_null(json_writer_take_tree(&w));
}

/* A long array sent in pieces: what `sent` forgets, the next value's comma is still there. */
static void test_sent_in_pieces(void **state) {
        _cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;
        json_object *a = json_object_new_array();
        char *all = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&all, &size);

        assert_non_null(f);
        json_writer_array_begin(&w);
        for (int i = 0; i < 10000; i++) {
                json_writer_object_begin(&w);
                json_writer_key(&w, "ifindex");
                json_writer_int64(&w, i);
                json_writer_object_end(&w);
                json_object *o = json_object_new_object();
                json_object_object_add(o, "ifindex", json_object_new_int64(i));
                json_object_array_add(a, o);
                if (w.len > 1000) {
                        fwrite(w.buf, 1, w.len, f);
                        json_writer_sent(&w);
                }
        }
        json_writer_array_end(&w);
        fwrite(w.buf, 1, w.len, f);
        fclose(f);
        char *want = jsonc_text(a);
        assert_string_equal(all, want);
        free(want);
        free(all);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_every_byte),     cmocka_unit_test(test_strings),
                cmocka_unit_test(test_tree_backend),   cmocka_unit_test(test_tree_without_key),
                cmocka_unit_test(test_null_string),    cmocka_unit_test(test_integers),
                cmocka_unit_test(test_doubles),        cmocka_unit_test(test_empty_containers),
                cmocka_unit_test(test_random_nesting), cmocka_unit_test(test_sent_in_pieces),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
