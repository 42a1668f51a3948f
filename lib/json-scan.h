/* json-scan.h — one JSON text read into a flat array of values, for a reader of many small
 * documents (the state file: ten thousand lines at a restart over ten thousand devices). A tree
 * of json_object costs an allocation or two per value and a hash table per object; here a
 * document is one pass into the scanner's two arrays (its values, and its strings unescaped),
 * which the next document reuses.
 *
 * What it takes is RFC 8259, strictly: one value and nothing after it but white space; no
 * comments, no trailing comma, no NaN. Depth at most JSON_SCAN_DEPTH_MAX. A string is bytes
 * between quotes with JSON's escapes, as json-c reads it (bytes that are not UTF-8 are kept as
 * they are: a device's name is the kernel's bytes); it is read as a C string, so one with
 * "\u0000" reads as what comes before it, as json_object_get_string() gives it. A number without a
 * fraction or an exponent is an int64, one beyond the range its end (INT64_MAX, INT64_MIN), as
 * json_object_get_int64() has it; any other a double. An object's members are looked up in order
 * (objects are small); a key given twice reads as its last. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_SCAN_DEPTH_MAX 32u

typedef enum JsonScanType {
        JSON_SCAN_NULL,
        JSON_SCAN_BOOL,
        JSON_SCAN_INT,
        JSON_SCAN_DOUBLE,
        JSON_SCAN_STRING,
        JSON_SCAN_ARRAY,
        JSON_SCAN_OBJECT,
} JsonScanType;

/* One value. Within its array or object, the next one is at `end`: a container holds the values
 * after it up to there (an object: a key, a string, before each of its values). */
typedef struct JsonValue {
        uint8_t type;  /* JsonScanType */
        bool boolean;
        uint32_t n;    /* an array's items, an object's members */
        uint32_t end;  /* the index after this value and all it holds */
        union {
                int64_t i;
                double d;
                uint32_t str; /* a string: its offset in JsonScan.strings, NUL-terminated */
        };
} JsonValue;

typedef struct JsonScan {
        JsonValue *values;
        size_t n, cap;
        char *strings;
        size_t n_strings, cap_strings;
} JsonScan;

/* Read `text` (`len` bytes; it need not be NUL-terminated) into `s`, in place of what it held.
 * 0; -EBADMSG: not one JSON value; -E2BIG: deeper than
 * JSON_SCAN_DEPTH_MAX, or larger than 2^31 bytes; -ENOMEM. */
int json_scan(JsonScan *s, const char *text, size_t len);
/* Frees its arrays; `s` may be scanned into again. */
void json_scan_done(JsonScan *s);

/* The value read; NULL before a successful json_scan(). */
static inline const JsonValue *json_scan_root(const JsonScan *s) {
        return s->n > 0 ? &s->values[0] : NULL;
}
static inline bool json_is(const JsonValue *v, JsonScanType type) {
        return v && v->type == type;
}
/* A member of object `o` (NULL: `o` is NULL or not an object, or has no such member). */
const JsonValue *json_get(const JsonScan *s, const JsonValue *o, const char *key);
/* The first item of array `a` (NULL: none, or not an array), and the one after `v` within `a`. */
const JsonValue *json_first(const JsonScan *s, const JsonValue *a);
const JsonValue *json_next(const JsonScan *s, const JsonValue *a, const JsonValue *v);
/* A string's bytes (NULL: not a string). */
const char *json_string(const JsonScan *s, const JsonValue *v);
/* A number as a double (an integer converted); 0 for anything else. */
double json_double(const JsonValue *v);
