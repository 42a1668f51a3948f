/* json-writer.c — JSON text into a growing buffer, printed as json-c prints it. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-writer.h"

void json_writer_done(JsonWriter *w) {
        w->buf = mfree(w->buf);
        w->len = w->size = 0;
        json_object_put(w->root);
        w->root = NULL;
        w->open = mfree(w->open);
        w->n_open = w->open_size = 0;
        w->key = mfree(w->key);
}

struct json_object *json_writer_take_tree(JsonWriter *w) {
        json_object *o = w->error < 0 ? NULL : w->root;

        if (o)
                w->root = NULL;
        return o;
}

/* ---- the tree backend: each value a json-c object, added where the text would have it ---- */

static void tree_fail(JsonWriter *w, int error) {
        if (!w->error)
                w->error = error;
}

/* `o` (taken) as the next value; `made`: false when its constructor failed. */
static void tree_add(JsonWriter *w, json_object *o, bool made) {
        json_object *top;
        int r = 0;

        if (w->error || !made) {
                json_object_put(o);
                tree_fail(w, -ENOMEM);
                return;
        }
        if (w->n_open == 0) {
                json_object_put(w->root); /* one value: a second replaces it, as text would not */
                w->root = o;
                return;
        }
        top = w->open[w->n_open - 1];
        if (!json_object_is_type(top, json_type_array) && !w->key) {
                json_object_put(o); /* a value of an object without its key: the caller is wrong */
                tree_fail(w, -EINVAL);
                return;
        }
        if (json_object_is_type(top, json_type_array))
                r = json_object_array_add(top, o);
        else {
                r = json_object_object_add(top, w->key, o);
                w->key = mfree(w->key);
        }
        if (r < 0) {
                json_object_put(o);
                tree_fail(w, -ENOMEM);
        }
}

static void tree_open(JsonWriter *w, json_object *o) {
        if (o && !w->error && w->n_open == w->open_size) {
                size_t n = w->open_size ? 2 * w->open_size : 8;
                json_object **l = reallocarray(w->open, n, sizeof(*l));
                if (!l)
                        tree_fail(w, -ENOMEM);
                else {
                        w->open = l;
                        w->open_size = n;
                }
        }
        if (w->error) {
                json_object_put(o);
                return;
        }
        tree_add(w, o, o != NULL);
        if (!w->error)
                w->open[w->n_open++] = o; /* its parent's (or the root) holds it */
}

static void tree_close(JsonWriter *w) {
        if (w->n_open > 0)
                w->n_open--;
}

static void tree_key(JsonWriter *w, const char *key) {
        if (w->error)
                return;
        free(w->key);
        w->key = strdup(key);
        if (!w->key)
                tree_fail(w, -ENOMEM);
}

void json_writer_reset(JsonWriter *w) {
        w->len = 0;
        w->error = 0;
        w->need_comma = false;
        json_object_put(w->root);
        w->root = NULL;
        w->n_open = 0;
        w->key = mfree(w->key);
}

/* Room for `size` more bytes: false (and the error set) when there is none. */
static bool reserve(JsonWriter *w, size_t size) {
        if (w->error)
                return false;
        if (w->len + size <= w->size)
                return true;
        size_t n = w->size ? w->size : 4096;
        while (n < w->len + size)
                n *= 2;
        char *b = realloc(w->buf, n);
        if (!b) {
                w->error = -ENOMEM;
                return false;
        }
        w->buf = b;
        w->size = n;
        return true;
}

const char *json_writer_text(JsonWriter *w) {
        if (w->tree || !reserve(w, 1))
                return NULL;
        w->buf[w->len] = '\0';
        return w->buf;
}

static void put(JsonWriter *w, const char *s, size_t size) {
        if (!reserve(w, size))
                return;
        memcpy(w->buf + w->len, s, size);
        w->len += size;
}

/* Before a value or a key: the comma after the one before it. */
static void separate(JsonWriter *w) {
        if (w->need_comma)
                put(w, ",", 1);
        w->need_comma = true;
}

static void open_(JsonWriter *w, char c) {
        separate(w);
        put(w, &c, 1);
        w->need_comma = false;
}

static void close_(JsonWriter *w, char c) {
        put(w, &c, 1);
        w->need_comma = true;
}

void json_writer_object_begin(JsonWriter *w) {
        if (w->tree)
                tree_open(w, json_object_new_object());
        else
                open_(w, '{');
}

void json_writer_object_end(JsonWriter *w) {
        if (w->tree)
                tree_close(w);
        else
                close_(w, '}');
}

void json_writer_array_begin(JsonWriter *w) {
        if (w->tree)
                tree_open(w, json_object_new_array());
        else
                open_(w, '[');
}

void json_writer_array_end(JsonWriter *w) {
        if (w->tree)
                tree_close(w);
        else
                close_(w, ']');
}

/* `s` quoted and escaped as json-c's json_escape_str() does with JSON_C_TO_STRING_NOSLASHESCAPE:
 * the short escapes for \b \n \r \t \f " and \, \u00xx (lower-case hex) for the other control
 * characters, every other byte as it is. */
static void quoted(JsonWriter *w, const char *s) {
        static const char hex[] = "0123456789abcdef";
        size_t n = strlen(s);
        const char *run = s;

        /* at most 6 bytes for each, and the quotes: one reservation for the common case */
        if (!reserve(w, n + 2))
                return;
        w->buf[w->len++] = '"';
        for (const char *p = s; *p; p++) {
                unsigned char c = (unsigned char) *p;
                char esc[6];
                size_t k;

                if (c >= 0x20 && c != '"' && c != '\\')
                        continue;
                switch (c) {
                case '\b': memcpy(esc, "\\b", k = 2); break;
                case '\n': memcpy(esc, "\\n", k = 2); break;
                case '\r': memcpy(esc, "\\r", k = 2); break;
                case '\t': memcpy(esc, "\\t", k = 2); break;
                case '\f': memcpy(esc, "\\f", k = 2); break;
                case '"': memcpy(esc, "\\\"", k = 2); break;
                case '\\': memcpy(esc, "\\\\", k = 2); break;
                default:
                        memcpy(esc, "\\u00", 4);
                        esc[4] = hex[c >> 4];
                        esc[5] = hex[c & 0xf];
                        k = 6;
                }
                put(w, run, (size_t) (p - run));
                put(w, esc, k);
                run = p + 1;
        }
        put(w, run, strlen(run));
        put(w, "\"", 1);
}

void json_writer_key(JsonWriter *w, const char *key) {
        if (w->tree) {
                tree_key(w, key);
                return;
        }
        separate(w);
        quoted(w, key);
        put(w, ":", 1);
        w->need_comma = false;
}

void json_writer_string(JsonWriter *w, const char *s) {
        if (!s) {
                json_writer_null(w);
                return;
        }
        if (w->tree) {
                json_object *o = json_object_new_string(s);
                tree_add(w, o, o != NULL);
                return;
        }
        separate(w);
        quoted(w, s);
}

/* As json-c's "%" PRId64, without printf: numbers are most of a device's fields. */
void json_writer_int64(JsonWriter *w, int64_t v) {
        char text[24], *p = text + sizeof(text);
        uint64_t u = v < 0 ? -(uint64_t) v : (uint64_t) v;

        if (w->tree) {
                json_object *o = json_object_new_int64(v);
                tree_add(w, o, o != NULL);
                return;
        }
        do
                *--p = (char) ('0' + u % 10);
        while ((u /= 10) > 0);
        if (v < 0)
                *--p = '-';
        separate(w);
        put(w, p, (size_t) (text + sizeof(text) - p));
}

/* json-c's own formatting (its "%.17g", its ".0", its NaN and Infinity, a format set with
 * json_c_set_serialization_double_format()): doubles are rare here, and printed alike. */
void json_writer_double(JsonWriter *w, double v) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_double(v);
        const char *text;
        size_t len;

        if (w->tree) {
                json_object *t = TAKE_PTR(o);
                tree_add(w, t, t != NULL);
                return;
        }
        text = o ? json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len)
                 : NULL;
        if (!text) {
                if (!w->error)
                        w->error = -ENOMEM;
                return;
        }
        json_writer_raw(w, text, len);
}

void json_writer_bool(JsonWriter *w, bool v) {
        if (w->tree) {
                json_object *o = json_object_new_boolean(v);
                tree_add(w, o, o != NULL);
                return;
        }
        separate(w);
        if (v)
                put(w, "true", 4);
        else
                put(w, "false", 5);
}

void json_writer_null(JsonWriter *w) {
        if (w->tree) {
                tree_add(w, NULL, true);
                return;
        }
        separate(w);
        put(w, "null", 4);
}

void json_writer_raw(JsonWriter *w, const char *json, size_t size) {
        if (w->tree) { /* rare: parsed */
                json_tokener *tok = size <= INT_MAX ? json_tokener_new() : NULL;
                json_object *o = tok ? json_tokener_parse_ex(tok, json, (int) size) : NULL;
                bool ok = tok && json_tokener_get_error(tok) == json_tokener_success;
                if (tok)
                        json_tokener_free(tok);
                if (!ok)
                        tree_fail(w, -EINVAL);
                tree_add(w, o, ok);
                return;
        }
        separate(w);
        put(w, json, size);
}
