/* test-json-scan.c — the JSON scanner reads what json-c reads (its oracle): valid documents of
 * every kind walked in both trees side by side (types, integers at their limits, doubles, strings
 * with every escape, surrogate pairs, raw bytes that are not UTF-8, "\u0000", duplicate keys);
 * what RFC 8259 does not allow is refused and leaves no root; depth at its limit and past it; a
 * scanner reused after a document, a failure and json_scan_done(), and grown by a large document;
 * and iteration over arrays of nested values. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "json-scan.h"

/* json-c's tree of `text` (the whole of it, which must be valid), or NULL for "null". The NUL
 * after it is passed too: json-c takes a number at the end of its input as one to be continued. */
static json_object *jsonc_parse(const char *text, size_t len) {
        json_tokener *tok = json_tokener_new_ex(JSON_SCAN_DEPTH_MAX + 8);
        assert_non_null(tok);
        assert_int_equal(text[len], '\0');
        json_object *o = json_tokener_parse_ex(tok, text, (int) len + 1);
        enum json_tokener_error e = json_tokener_get_error(tok);
        json_tokener_free(tok);
        if (e != json_tokener_success)
                print_error("json-c refused (%s): %.*s\n", json_tokener_error_desc(e), (int) len, text);
        assert_int_equal(e, json_tokener_success);
        return o;
}

static void assert_same(const JsonScan *s, const JsonValue *v, json_object *o);

static void assert_same_array(const JsonScan *s, const JsonValue *v, json_object *o) {
        size_t n = json_object_array_length(o);
        const JsonValue *item = json_first(s, v);

        assert_int_equal(v->n, n);
        for (size_t k = 0; k < n; k++) {
                assert_non_null(item);
                assert_same(s, item, json_object_array_get_idx(o, k));
                item = json_next(s, v, item);
        }
        assert_null(item);
}

static void assert_same_object(const JsonScan *s, const JsonValue *v, json_object *o, bool dup_keys) {
        if (!dup_keys)
                assert_int_equal(v->n, json_object_object_length(o));
        else
                assert_true(v->n >= (uint32_t) json_object_object_length(o));
        json_object_object_foreach(o, key, val) {
                const JsonValue *m = json_get(s, v, key);
                assert_non_null(m);
                assert_same(s, m, val);
        }
        assert_null(json_get(s, v, "no such key, surely"));
}

static bool has_dup_keys(const JsonScan *s, const JsonValue *v) {
        uint32_t i = (uint32_t) (v - s->values) + 1;
        for (uint32_t k = 0; k < v->n; k++) {
                const JsonValue *name = &s->values[i];
                /* the last one is the one read: an earlier with the same name is a duplicate */
                if (json_get(s, v, s->strings + name->str) != &s->values[i + 1])
                        return true;
                i = s->values[i + 1].end;
        }
        return false;
}

static void assert_same(const JsonScan *s, const JsonValue *v, json_object *o) {
        assert_non_null(v);
        switch (json_object_get_type(o)) {
        case json_type_null:
                assert_int_equal(v->type, JSON_SCAN_NULL);
                break;
        case json_type_boolean:
                assert_int_equal(v->type, JSON_SCAN_BOOL);
                assert_int_equal(v->boolean, json_object_get_boolean(o));
                break;
        case json_type_int:
                assert_int_equal(v->type, JSON_SCAN_INT);
                assert_true(v->i == json_object_get_int64(o));
                assert_true(json_double(v) == (double) json_object_get_int64(o));
                break;
        case json_type_double:
                assert_int_equal(v->type, JSON_SCAN_DOUBLE);
                assert_true(v->d == json_object_get_double(o));
                assert_true(json_double(v) == json_object_get_double(o));
                break;
        case json_type_string:
                assert_int_equal(v->type, JSON_SCAN_STRING);
                assert_non_null(json_string(s, v));
                assert_string_equal(json_string(s, v), json_object_get_string(o));
                break;
        case json_type_array:
                assert_int_equal(v->type, JSON_SCAN_ARRAY);
                assert_same_array(s, v, o);
                break;
        case json_type_object:
                assert_int_equal(v->type, JSON_SCAN_OBJECT);
                assert_same_object(s, v, o, has_dup_keys(s, v));
                break;
        }
}

static void check_valid_len(JsonScan *s, const char *text, size_t len) {
        json_object *o = jsonc_parse(text, len);
        int r = json_scan(s, text, len);

        if (r != 0)
                print_error("json_scan refused (%d): %.*s\n", r, (int) len, text);
        assert_int_equal(r, 0);
        assert_non_null(json_scan_root(s));
        assert_same(s, json_scan_root(s), o);
        /* the whole document and nothing else */
        assert_int_equal(json_scan_root(s)->end, s->n);
        json_object_put(o);
}

static void check_valid(JsonScan *s, const char *text) {
        check_valid_len(s, text, strlen(text));
}

static void test_as_jsonc_reads(void **state) {
        static const char *const cases[] = {
                "null",
                "true",
                "false",
                "0",
                "-0",
                "7",
                "-7",
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775808",
                "18446744073709551615",
                "1.5",
                "-2e-3",
                "1E+2",
                "1e2",
                "0.1",
                "-0.0",
                "123456789.123456789e-5",
                "2.2250738585072014e-308",
                "1.7976931348623157e308",
                "\"\"",
                "\"eth0\"",
                "\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"",
                "\"\\u0041\\u00e9\\u20AC\\uffff\\u007f\\u0001\"",
                "\"\\uD83D\\uDE00 and \\ud800\\udc00 and \\uDBFF\\uDFFF\"",
                "\"raw \x80\xff\xc3\x28 \xed\xa0\x80 bytes \x7f\"",
                "\"caf\xc3\xa9\"",
                "\"before\\u0000after\"",
                "\"\\u0000\"",
                "{}",
                "[]",
                " { } ",
                " [ ] ",
                "\t\r\n [ \t\r\n1 \t\r\n, \t\r\n2 \t\r\n] \t\r\n",
                "[{}]",
                "[[]]",
                "[[], {}, [[]], {\"a\": {}}]",
                "{\"a\":1,\"b\":[1,2,{\"c\":null}],\"d\":{\"e\":{\"f\":\"g\"}},\"h\":true,\"i\":false}",
                "[1, -2, 3.5, \"x\", null, true, false, [], {}, [[1], [2, [3]]], {\"k\": [4]}]",
                "{\"\\u00e9t\\u00e9\": \"\\n\", \"\\\"q\\\"\": \"\\\\\", \"\": 0}",
                "{\"ifindex\": 2, \"name\": \"eth\\u0030\", \"sizes\": {\"gso_max_size\": 65536, "
                "\"gro_max_size\": 185000}, \"at\": 1.25e9}",
                "[9223372036854775807, -9223372036854775808, 9223372036854775808, 18446744073709551615, 0, "
                "-0]",
                "{\"a\": 1, \"a\": 2}",
                "{\"a\": {\"x\": 1}, \"b\": 2, \"a\": [3, 4]}",
                "{\"k\": \"nul\\u0000inside\"}",
        };
        JsonScan s = {};

        (void) state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                check_valid(&s, cases[i]);
        json_scan_done(&s);
}

/* The same values known without json-c: a test of the oracle's reading as much as the scanner's. */
static void test_values(void **state) {
        JsonScan s = {};
        const JsonValue *v;

        (void) state;
        assert_int_equal(json_scan(&s, "\"\\uD83D\\uDE00\"", 14), 0);
        assert_string_equal(json_string(&s, json_scan_root(&s)), "\xf0\x9f\x98\x80");
        assert_int_equal(json_scan(&s, "\"\\u00e9\\u20ac\\u0041\"", 20), 0);
        assert_string_equal(json_string(&s, json_scan_root(&s)), "\xc3\xa9\xe2\x82\xac"
                                                                 "A");
        assert_int_equal(json_scan(&s, "\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"", 18), 0);
        assert_string_equal(json_string(&s, json_scan_root(&s)), "/\b\f\n\r\t\"\\");
        assert_int_equal(json_scan(&s,
                                   "\"a\x80\xff"
                                   "b\"",
                                   6),
                         0);
        assert_string_equal(json_string(&s, json_scan_root(&s)), "a\x80\xff"
                                                                 "b");
        assert_int_equal(json_scan(&s, "\"ab\\u0000cd\"", 12), 0);
        assert_string_equal(json_string(&s, json_scan_root(&s)), "ab");

        static const struct {
                const char *text;
                int64_t i;
        } ints[] = {
                {"0", 0},
                {"-0", 0},
                {"9223372036854775807", INT64_MAX},
                {"-9223372036854775808", INT64_MIN},
                {"9223372036854775808", INT64_MAX},
                {"18446744073709551615", INT64_MAX},
                /* beyond the range, its end, as json_object_get_int64() has it */
                {"-9223372036854775809", INT64_MIN},
                {"18446744073709551616", INT64_MAX},
                {"-1234567890123456789012345678901234567890123456789012345678901234567890", INT64_MIN},
                {"-1", -1},
        };
        for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
                assert_int_equal(json_scan(&s, ints[i].text, strlen(ints[i].text)), 0);
                v = json_scan_root(&s);
                assert_int_equal(v->type, JSON_SCAN_INT);
                assert_true(v->i == ints[i].i);
        }
        static const struct {
                const char *text;
                double d;
        } doubles[] = {
                {"1.5", 1.5},
                {"-2e-3", -2e-3},
                {"1E+2", 100.0},
                {"0.1", 0.1},
        };
        for (size_t i = 0; i < sizeof(doubles) / sizeof(doubles[0]); i++) {
                assert_int_equal(json_scan(&s, doubles[i].text, strlen(doubles[i].text)), 0);
                v = json_scan_root(&s);
                assert_int_equal(v->type, JSON_SCAN_DOUBLE);
                assert_true(v->d == doubles[i].d);
        }

        /* a key given twice reads as its last, as json-c has it */
        const char *dup = "{\"a\": 1, \"b\": \"x\", \"a\": 2}";
        assert_int_equal(json_scan(&s, dup, strlen(dup)), 0);
        v = json_get(&s, json_scan_root(&s), "a");
        assert_true(json_is(v, JSON_SCAN_INT));
        assert_true(v->i == 2);
        json_object *o = jsonc_parse(dup, strlen(dup)), *a;
        assert_true(json_object_object_get_ex(o, "a", &a));
        assert_true(json_object_get_int64(a) == 2);
        json_object_put(o);
        assert_string_equal(json_string(&s, json_get(&s, json_scan_root(&s), "b")), "x");
        json_scan_done(&s);
}

static void check_refused_len(const char *text, size_t len, int error) {
        JsonScan s = {};

        /* something read before: a failure must not leave it, nor a part of the new one */
        assert_int_equal(json_scan(&s, "[1, {\"a\": 2}]", 13), 0);
        assert_non_null(json_scan_root(&s));
        int r = json_scan(&s, text, len);
        if (r != error)
                print_error("json_scan gave %d, not %d, for: %.*s\n", r, error, (int) len, text);
        assert_int_equal(r, error);
        assert_null(json_scan_root(&s));
        json_scan_done(&s);
}

static void check_refused(const char *text) {
        check_refused_len(text, strlen(text), -EBADMSG);
}

static void test_refused(void **state) {
        static const char *const cases[] = {
                "",
                " ",
                " \t\r\n ",
                "{} x",
                "{}{}",
                "[] []",
                "1 2",
                "\"a\" \"b\"",
                "truex",
                "nullnull",
                "[1,]",
                "[1,,2]",
                "[,1]",
                "[,]",
                "{\"a\":1,}",
                "{,}",
                "{\"a\" 1}",
                "{\"a\"}",
                "{\"a\":}",
                "{\"a\"::1}",
                "{a:1}",
                "{1:1}",
                "{null:1}",
                "{'a':1}",
                "['a']",
                "'a'",
                "[1 2]",
                "{\"a\":1 \"b\":2}",
                "[1]]",
                "[[1]",
                "{\"a\":1}}",
                "{\"a\":[1}",
                "[1}",
                "{\"a\":1]",
                "[",
                "{",
                "]",
                "}",
                ":",
                ",",
                "/* c */ 1",
                "1 /* c */",
                "// c\n1",
                "[1, // c\n2]",
                "# c\n1",
                "NaN",
                "nan",
                "Infinity",
                "-Infinity",
                "inf",
                "-inf",
                "[NaN]",
                "+1",
                "[+1]",
                "01",
                "-01",
                "00",
                "[01]",
                "1.",
                "1.e5",
                ".5",
                "-.5",
                "1e",
                "1e+",
                "1E-",
                "[1e]",
                "-",
                "[-]",
                "--1",
                "0x10",
                "1_000",
                "\"",
                "\"abc",
                "[\"abc]",
                "{\"abc",
                "\"abc\\\"",
                "\"a\x01"
                "b\"",
                "\"a\nb\"",
                "\"a\tb\"",
                "\"\x1f\"",
                "{\"a\x01\": 1}",
                "\"\\x\"",
                "\"\\a\"",
                "\"\\'\"",
                "\"\\U0041\"",
                "\"\\u12\"",
                "\"\\u\"",
                "\"\\u12G4\"",
                "\"\\u-123\"",
                "\"\\ \"",
                "\"\\\"",
                "\"\\\x01\"",
                "\"\\uDC00\"",
                "\"\\udfff\"",
                "\"a\\uDC00b\"",
                "\"\\uD800\"",
                "\"\\uD800x\"",
                "\"\\uD800\\n\"",
                "\"\\uD800\\u0041\"",
                "\"\\uD800\\uD800\"",
                "\"\\uD800\\uDC0\"",
                "\"\\uD800\\\"",
                "\"\\uD800\\\\uDC00\"",
                "tru",
                "t",
                "True",
                "TRUE",
                "fals",
                "falsee",
                "nul",
                "Null",
                "None",
                "[tru]",
                "{\"a\":nul}",
                "\f1",
                "1\f",
                "\v1",
                "[1,\v2]",
                "\xef\xbb\xbf{}",
                "\xa0"
                "1",
        };

        (void) state;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                check_refused(cases[i]);

        /* a NUL byte inside the text, with the length past it */
        static const struct {
                const char *text;
                size_t len;
        } nul[] = {
                {"{}\0", 3},     {"{}\0 ", 4},       {"\0{}", 3},  {"[1,\0 2]", 7}, {"[1\0]", 4},
                {"\"a\0b\"", 5}, {"{\"a\0\":1}", 8}, {"tr\0e", 4}, {"1\0", 2},      {"\0", 1},
        };
        for (size_t i = 0; i < sizeof(nul) / sizeof(nul[0]); i++)
                check_refused_len(nul[i].text, nul[i].len, -EBADMSG);

        /* beyond what it reads, refused without a byte read */
        static const char tiny[] = "{}";
        check_refused_len(tiny, (size_t) INT32_MAX + 1, -E2BIG);
}

/* `len` bytes of `text` only, in a buffer of their own (ASan sees a read past them). */
static int scan_exact(JsonScan *s, const char *text, size_t len) {
        char *copy = malloc(len ? len : 1);
        assert_non_null(copy);
        memcpy(copy, text, len);
        int r = json_scan(s, copy, len);
        free(copy);
        return r;
}

static void test_not_nul_terminated(void **state) {
        static const char buf[] = "{\"a\":1}garbage";
        JsonScan s = {};

        (void) state;
        assert_int_equal(json_scan(&s, buf, 7), 0);
        assert_true(json_is(json_scan_root(&s), JSON_SCAN_OBJECT));
        const JsonValue *a = json_get(&s, json_scan_root(&s), "a");
        assert_true(json_is(a, JSON_SCAN_INT));
        assert_true(a->i == 1);
        assert_int_equal(json_scan(&s, buf, sizeof(buf) - 1), -EBADMSG);
        assert_null(json_scan_root(&s));

        /* prefixes of a longer text: a number, a literal or a string cut where the length ends */
        static const struct {
                const char *buf;
                size_t len;
                int r;
        } cuts[] = {
                {"123456", 3, 0},
                {"truex", 4, 0},
                {"nullx", 4, 0},
                {"falsey", 5, 0},
                {"\"ab\"cd", 4, 0},
                {"[1,2]]", 5, 0},
                {"1.5e3", 3, 0},
                {"1.5e3", 4, -EBADMSG},
                {"1.5e3", 2, -EBADMSG},
                {"true", 3, -EBADMSG},
                {"null", 2, -EBADMSG},
                {"\"ab\"", 3, -EBADMSG},
                {"\"\\u0041\"", 6, -EBADMSG},
                {"\"\\uD83D\\uDE00\"", 9, -EBADMSG},
                {"\"\\uD83D\\uDE00\"", 13, -EBADMSG},
                {"\"\\n\"", 2, -EBADMSG},
                {"-5", 1, -EBADMSG},
                {"[1]", 2, -EBADMSG},
                {"{\"a\":1}", 6, -EBADMSG},
        };
        for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
                int r = scan_exact(&s, cuts[i].buf, cuts[i].len);
                if (r != cuts[i].r)
                        print_error("json_scan gave %d, not %d, for %zu bytes of: %s\n", r, cuts[i].r,
                                    cuts[i].len, cuts[i].buf);
                assert_int_equal(r, cuts[i].r);
        }
        assert_int_equal(json_scan(&s, "123456", 3), 0);
        assert_true(json_scan_root(&s)->i == 123);
        assert_int_equal(json_scan(&s, "1.5e3", 3), 0);
        assert_true(json_scan_root(&s)->d == 1.5);
        assert_int_equal(json_scan(&s, "\"ab\"cd", 4), 0);
        assert_string_equal(json_string(&s, json_scan_root(&s)), "ab");

        /* every valid document read from a buffer of exactly its size */
        static const char *const docs[] = {
                "0",     "-1",    "1.5",
                "1e5",   "true",  "false",
                "null",  "\"x\"", "\"\\uD83D\\uDE00\"",
                "[]",    "{}",    "[1, [2], {\"a\": \"b\"}]",
                "  7  ",
        };
        for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
                assert_int_equal(scan_exact(&s, docs[i], strlen(docs[i])), 0);
        json_scan_done(&s);
}

static char *nested(unsigned depth, const char *inner) {
        size_t n = strlen(inner);
        char *t = malloc(2 * depth + n + 1);
        assert_non_null(t);
        memset(t, '[', depth);
        memcpy(t + depth, inner, n);
        memset(t + depth + n, ']', depth);
        t[2 * depth + n] = '\0';
        return t;
}

static void test_depth(void **state) {
        JsonScan s = {};

        (void) state;
        char *max = nested(JSON_SCAN_DEPTH_MAX, "1"), *over = nested(JSON_SCAN_DEPTH_MAX + 1, "1"),
             *over_empty = nested(JSON_SCAN_DEPTH_MAX + 1, ""), *deep = nested(10000, "");
        assert_int_equal(json_scan(&s, max, strlen(max)), 0);
        check_valid(&s, max);
        const JsonValue *v = json_scan_root(&s);
        for (unsigned d = 0; d < JSON_SCAN_DEPTH_MAX; d++) {
                assert_true(json_is(v, JSON_SCAN_ARRAY));
                assert_int_equal(v->n, 1);
                v = json_first(&s, v);
        }
        assert_true(json_is(v, JSON_SCAN_INT));
        assert_int_equal(json_scan(&s, over, strlen(over)), -E2BIG);
        assert_null(json_scan_root(&s));
        assert_int_equal(json_scan(&s, over_empty, strlen(over_empty)), -E2BIG);
        assert_null(json_scan_root(&s));
        assert_int_equal(json_scan(&s, deep, strlen(deep)), -E2BIG);
        assert_null(json_scan_root(&s));

        /* objects count as arrays do */
        char *obj = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&obj, &len);
        assert_non_null(f);
        for (unsigned d = 0; d < JSON_SCAN_DEPTH_MAX; d++)
                fputs(d % 2 ? "[" : "{\"k\":", f);
        fputs("0", f);
        for (unsigned d = JSON_SCAN_DEPTH_MAX; d-- > 0;)
                fputs(d % 2 ? "]" : "}", f);
        fclose(f);
        check_valid(&s, obj);
        char *obj_over = NULL;
        assert_true(asprintf(&obj_over, "{\"x\":%s}", obj) > 0);
        assert_int_equal(json_scan(&s, obj_over, strlen(obj_over)), -E2BIG);
        assert_null(json_scan_root(&s));

        /* depth is of nesting, not of containers seen: many siblings at the limit are fine */
        char *wide = NULL, *inner = nested(JSON_SCAN_DEPTH_MAX - 1, "1");
        assert_true(asprintf(&wide, "[%s,%s,%s]", inner, inner, inner) > 0);
        check_valid(&s, wide);
        assert_int_equal(json_scan_root(&s)->n, 3);

        free(inner);
        free(wide);
        free(obj_over);
        free(obj);
        free(max);
        free(over);
        free(over_empty);
        free(deep);
        json_scan_done(&s);
}

static void test_reuse(void **state) {
        JsonScan s = {};
        const char *one =
                "{\"name\": \"first-device-with-a-long-name\", \"list\": [1, 2, 3, \"x\"], \"n\": 5}";
        const char *two = "[\"b\", 7]";
        const JsonValue *v;

        (void) state;
        assert_null(json_scan_root(&s));
        check_valid(&s, one);
        size_t strings_one = s.n_strings;
        assert_int_equal(json_scan(&s, two, strlen(two)), 0);
        v = json_scan_root(&s);
        assert_true(json_is(v, JSON_SCAN_ARRAY));
        assert_int_equal(s.n, 3);
        assert_int_equal(v->n, 2);
        assert_int_equal(v->end, 3);
        assert_string_equal(json_string(&s, json_first(&s, v)), "b");
        assert_true(json_next(&s, v, json_first(&s, v))->i == 7);
        assert_int_equal(s.n_strings, 2); /* "b" and its NUL: the first document's are gone */
        assert_true(s.n_strings < strings_one);
        assert_null(json_get(&s, v, "name"));
        check_valid(&s, two);

        /* a failure leaves no root, and what comes after it reads as if first */
        assert_int_equal(json_scan(&s, "[1, 2", 5), -EBADMSG);
        assert_null(json_scan_root(&s));
        char *deep = nested(JSON_SCAN_DEPTH_MAX + 1, "\"s\"");
        assert_int_equal(json_scan(&s, deep, strlen(deep)), -E2BIG);
        free(deep);
        assert_null(json_scan_root(&s));
        check_valid(&s, one);
        v = json_get(&s, json_scan_root(&s), "name");
        assert_string_equal(json_string(&s, v), "first-device-with-a-long-name");

        /* done, then scanned into again */
        json_scan_done(&s);
        assert_null(json_scan_root(&s));
        assert_null(s.values);
        assert_null(s.strings);
        check_valid(&s, two);
        json_scan_done(&s);
        json_scan_done(&s); /* twice: harmless */

        /* a failure first of all, into a scanner that never held anything */
        assert_int_equal(json_scan(&s, "x", 1), -EBADMSG);
        assert_null(json_scan_root(&s));
        check_valid(&s, one);
        json_scan_done(&s);
}

#define LARGE 100000

static void test_large(void **state) {
        JsonScan s = {};
        char *text = NULL;
        size_t len = 0, cap = 0;

        (void) state;
        for (int i = 0; i < LARGE; i++) {
                char *item = NULL;
                int n = asprintf(&item, "%s{\"i\":%d,\"s\":\"dev\\u0041%d\",\"d\":%d.5,\"a\":[%d,null]}",
                                 i ? "," : "[", i, i, i, -i);
                assert_true(n > 0);
                if (len + (size_t) n + 2 > cap) {
                        cap = cap ? cap * 2 : 4096;
                        text = realloc(text, cap);
                        assert_non_null(text);
                }
                memcpy(text + len, item, (size_t) n);
                len += (size_t) n;
                free(item);
        }
        text[len++] = ']';
        text[len] = '\0';

        assert_int_equal(json_scan(&s, text, len), 0);
        const JsonValue *root = json_scan_root(&s);
        assert_true(json_is(root, JSON_SCAN_ARRAY));
        assert_int_equal(root->n, LARGE);
        assert_int_equal(root->end, s.n);
        /* per item: the object, 4 keys, 3 values, the array and its 2 */
        assert_int_equal(s.n, 1 + (size_t) LARGE * 11);
        int i = 0;
        for (const JsonValue *o = json_first(&s, root); o; o = json_next(&s, root, o), i++) {
                if (i % 9973 != 0 && i != LARGE - 1)
                        continue;
                char want[32];
                assert_true(json_is(o, JSON_SCAN_OBJECT));
                assert_int_equal(o->n, 4);
                assert_true(json_get(&s, o, "i")->i == i);
                snprintf(want, sizeof(want), "devA%d", i);
                assert_string_equal(json_string(&s, json_get(&s, o, "s")), want);
                assert_true(json_get(&s, o, "d")->d == i + 0.5);
                const JsonValue *a = json_get(&s, o, "a");
                assert_int_equal(a->n, 2);
                assert_true(json_first(&s, a)->i == -i);
                assert_true(json_is(json_next(&s, a, json_first(&s, a)), JSON_SCAN_NULL));
        }
        assert_int_equal(i, LARGE);
        check_valid_len(&s, text, len);

        /* and the grown arrays serve a small one after */
        check_valid(&s, "{\"small\": [1]}");
        free(text);
        json_scan_done(&s);
}

static void test_iteration(void **state) {
        JsonScan s = {};
        const char *text = "[1, [2, [3, [4]], {\"x\": [5, 6]}], {\"a\": [7, {\"b\": 8}], \"c\": {}}, \"s\", "
                           "null, true, false, "
                           "{}, [], 9.5, [[]]]";
        static const JsonScanType want[] = {
                JSON_SCAN_INT,   JSON_SCAN_ARRAY,  JSON_SCAN_OBJECT, JSON_SCAN_STRING,
                JSON_SCAN_NULL,  JSON_SCAN_BOOL,   JSON_SCAN_BOOL,   JSON_SCAN_OBJECT,
                JSON_SCAN_ARRAY, JSON_SCAN_DOUBLE, JSON_SCAN_ARRAY,
        };
        const JsonValue *root, *v, *inner;
        size_t k = 0;

        (void) state;
        check_valid(&s, text);
        root = json_scan_root(&s);
        assert_int_equal(root->n, sizeof(want) / sizeof(want[0]));
        for (v = json_first(&s, root); v; v = json_next(&s, root, v), k++) {
                assert_true(k < sizeof(want) / sizeof(want[0]));
                assert_int_equal(v->type, want[k]);
        }
        assert_int_equal(k, sizeof(want) / sizeof(want[0]));

        v = json_first(&s, root);
        assert_true(v->i == 1);
        inner = json_next(&s, root, v); /* [2, [3, [4]], {"x": [5, 6]}] */
        assert_int_equal(inner->n, 3);
        v = json_first(&s, inner);
        assert_true(v->i == 2);
        v = json_next(&s, inner, v);
        assert_true(json_is(v, JSON_SCAN_ARRAY));
        assert_int_equal(v->n, 2);
        v = json_next(&s, inner, v);
        assert_true(json_is(v, JSON_SCAN_OBJECT));
        const JsonValue *x = json_get(&s, v, "x");
        assert_int_equal(x->n, 2);
        assert_true(json_first(&s, x)->i == 5);
        assert_true(json_next(&s, x, json_first(&s, x))->i == 6);
        assert_null(json_next(&s, x, json_next(&s, x, json_first(&s, x))));
        assert_null(json_next(&s, inner, v));

        v = json_next(&s, root, inner); /* {"a": [7, {"b": 8}], "c": {}} */
        assert_true(
                json_get(&s, json_next(&s, json_get(&s, v, "a"), json_first(&s, json_get(&s, v, "a"))), "b")
                        ->i == 8);
        assert_true(json_is(json_get(&s, v, "c"), JSON_SCAN_OBJECT));
        assert_null(json_get(&s, v, "b")); /* a key inside a member is not a member */
        assert_null(json_get(&s, v, "x"));

        /* json_get: only on an object */
        assert_null(json_get(&s, NULL, "a"));
        assert_null(json_get(&s, root, "a"));
        assert_null(json_get(&s, json_first(&s, root), "a"));
        check_valid(&s, "{\"k\": \"v\", \"s\": \"k\"}");
        assert_null(json_get(&s, json_get(&s, json_scan_root(&s), "k"), "k"));
        assert_null(json_get(&s, json_scan_root(&s), "v")); /* a value is not a key */
        assert_null(json_get(&s, json_scan_root(&s), "K"));
        assert_null(json_get(&s, json_scan_root(&s), ""));
        assert_null(json_get(&s, json_scan_root(&s), "k "));

        /* json_first: only on an array with items */
        assert_null(json_first(&s, NULL));
        assert_null(json_first(&s, json_scan_root(&s))); /* an object */
        check_valid(&s, "[]");
        assert_null(json_first(&s, json_scan_root(&s)));
        check_valid(&s, "{}");
        assert_null(json_first(&s, json_scan_root(&s)));
        assert_null(json_get(&s, json_scan_root(&s), "a"));
        check_valid(&s, "\"[1]\"");
        assert_null(json_first(&s, json_scan_root(&s)));
        check_valid(&s, "[[], [[]], {}]");
        root = json_scan_root(&s);
        assert_null(json_first(&s, json_first(&s, root)));
        assert_non_null(json_first(&s, json_next(&s, root, json_first(&s, root))));

        /* json_double: a number as a double; anything else 0 */
        check_valid(&s, "[3, -4, 1.5, \"2\", null, true, [], {}, 9223372036854775807]");
        root = json_scan_root(&s);
        static const double doubles[] = {3.0, -4.0, 1.5, 0, 0, 0, 0, 0, 9223372036854775807.0};
        k = 0;
        for (v = json_first(&s, root); v; v = json_next(&s, root, v), k++)
                assert_true(json_double(v) == doubles[k]);
        assert_int_equal(k, 9);
        assert_true(json_double(NULL) == 0);

        /* json_string: only on a string */
        assert_null(json_string(&s, root));
        assert_null(json_string(&s, json_first(&s, root)));
        assert_null(json_string(&s, NULL));
        assert_true(json_is(json_first(&s, root), JSON_SCAN_INT));
        assert_false(json_is(NULL, JSON_SCAN_NULL));
        json_scan_done(&s);
}

/* Numbers and strings of any length RFC 8259 allows. */
static void test_long_tokens(void **state) {
        JsonScan s = {};
        char *t = NULL;

        (void) state;
        check_valid(&s, "1.00000000000000000000000000000000000000000000000000000000000e2"); /* 63 bytes */
        check_valid(&s, "0.1000000000000000000000000000000000000000000000000000000000000000000000001");
        check_valid(&s, "1.00000000000000000000000000000000000000000000000000000000000000000000000e2");
        /* an integer beyond UINT64_MAX reads as INT64_MAX, however long, as json-c has it */
        const char *big = "1234567890123456789012345678901234567890123456789012345678901234567890";
        assert_int_equal(json_scan(&s, big, strlen(big)), 0);
        assert_true(json_is(json_scan_root(&s), JSON_SCAN_INT));
        assert_true(json_scan_root(&s)->i == INT64_MAX);
        check_valid(&s, big);
        assert_true(asprintf(&t, "\"%0*d\"", 100000, 7) > 0);
        check_valid(&s, t);
        free(t);
        json_scan_done(&s);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_as_jsonc_reads), cmocka_unit_test(test_values),
                cmocka_unit_test(test_refused),        cmocka_unit_test(test_not_nul_terminated),
                cmocka_unit_test(test_depth),          cmocka_unit_test(test_reuse),
                cmocka_unit_test(test_large),          cmocka_unit_test(test_iteration),
                cmocka_unit_test(test_long_tokens),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
