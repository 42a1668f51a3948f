/* json-scan.c — a JSON text read into a flat array of values (json-scan.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-scan.h"

typedef struct Parser {
        JsonScan *s;
        const char *p, *end;
        unsigned depth;
} Parser;

static void skip_space(Parser *x) {
        while (x->p < x->end && (*x->p == ' ' || *x->p == '\n' || *x->p == '\r' || *x->p == '\t'))
                x->p++;
}

/* A new value at the end of the array: its index (a pointer would not outlive the next one). */
static int value_new(Parser *x, JsonScanType type, uint32_t *ret) {
        JsonScan *s = x->s;

        if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 64;
                if (cap > UINT32_MAX)
                        return -E2BIG;
                JsonValue *v = reallocarray(s->values, cap, sizeof(*v));
                if (!v)
                        return -ENOMEM;
                s->values = v;
                s->cap = cap;
        }
        s->values[s->n] = (JsonValue){.type = type};
        *ret = (uint32_t) s->n++;
        return 0;
}

static int strings_reserve(JsonScan *s, size_t more) {
        size_t cap = s->cap_strings ? s->cap_strings : 256;

        if (s->cap_strings - s->n_strings >= more)
                return 0;
        while (cap - s->n_strings < more) {
                if (cap > UINT32_MAX)
                        return -E2BIG;
                cap *= 2;
        }
        char *p = realloc(s->strings, cap);
        if (!p)
                return -ENOMEM;
        s->strings = p;
        s->cap_strings = cap;
        return 0;
}

static int hex4(const char *p, uint32_t *ret) {
        uint32_t v = 0;

        for (unsigned i = 0; i < 4; i++) {
                char c = p[i];
                v <<= 4;
                if (c >= '0' && c <= '9')
                        v |= (uint32_t) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        v |= (uint32_t) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        v |= (uint32_t) (c - 'A' + 10);
                else
                        return -EBADMSG;
        }
        *ret = v;
        return 0;
}

static char *put_utf8(char *out, uint32_t c) {
        if (c < 0x80)
                *out++ = (char) c;
        else if (c < 0x800) {
                *out++ = (char) (0xc0 | (c >> 6));
                *out++ = (char) (0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
                *out++ = (char) (0xe0 | (c >> 12));
                *out++ = (char) (0x80 | ((c >> 6) & 0x3f));
                *out++ = (char) (0x80 | (c & 0x3f));
        } else {
                *out++ = (char) (0xf0 | (c >> 18));
                *out++ = (char) (0x80 | ((c >> 12) & 0x3f));
                *out++ = (char) (0x80 | ((c >> 6) & 0x3f));
                *out++ = (char) (0x80 | (c & 0x3f));
        }
        return out;
}

/* The string at x->p (its opening quote) into the strings, NUL-terminated: its offset. No escape
 * makes a string longer than it is written, so room for what is between the quotes is enough. */
static int parse_string(Parser *x, uint32_t *ret) {
        JsonScan *s = x->s;
        const char *q;
        int r;

        x->p++;
        for (q = x->p; q < x->end && *q != '"'; q++) {
                if ((unsigned char) *q < 0x20)
                        return -EBADMSG;
                if (*q == '\\' && ++q == x->end)
                        return -EBADMSG;
        }
        if (q == x->end)
                return -EBADMSG;
        r = strings_reserve(s, (size_t) (q - x->p) + 1);
        if (r < 0)
                return r;
        char *start = s->strings + s->n_strings, *out = start;
        while (x->p < q) {
                char c = *x->p++;
                uint32_t u, low;

                if (c != '\\') {
                        *out++ = c;
                        continue;
                }
                switch (*x->p++) {
                case '"':
                        *out++ = '"';
                        break;
                case '\\':
                        *out++ = '\\';
                        break;
                case '/':
                        *out++ = '/';
                        break;
                case 'b':
                        *out++ = '\b';
                        break;
                case 'f':
                        *out++ = '\f';
                        break;
                case 'n':
                        *out++ = '\n';
                        break;
                case 'r':
                        *out++ = '\r';
                        break;
                case 't':
                        *out++ = '\t';
                        break;
                case 'u':
                        if (q - x->p < 4 || hex4(x->p, &u) < 0)
                                return -EBADMSG;
                        x->p += 4;
                        if (u >= 0xdc00 && u <= 0xdfff)
                                return -EBADMSG; /* the second half of a pair, alone */
                        if (u >= 0xd800 && u <= 0xdbff) {
                                if (q - x->p < 6 || x->p[0] != '\\' || x->p[1] != 'u' || hex4(x->p + 2, &low) < 0 ||
                                    low < 0xdc00 || low > 0xdfff)
                                        return -EBADMSG;
                                x->p += 6;
                                u = 0x10000 + ((u - 0xd800) << 10) + (low - 0xdc00);
                        }
                        out = put_utf8(out, u); /* "\u0000" ends the C string there, as json-c's does */
                        break;
                default:
                        return -EBADMSG;
                }
        }
        *out++ = '\0';
        *ret = (uint32_t) s->n_strings;
        s->n_strings += (size_t) (out - start);
        x->p = q + 1;
        return 0;
}

static bool is_digit(char c) {
        return c >= '0' && c <= '9';
}

static int parse_number(Parser *x, JsonValue *v) {
        const char *start = x->p, *p = x->p;
        bool negative = false, integer = true;

        if (*p == '-') {
                negative = true;
                p++;
        }
        if (p == x->end || !is_digit(*p))
                return -EBADMSG;
        if (*p == '0')
                p++;
        else
                while (p < x->end && is_digit(*p))
                        p++;
        if (p < x->end && *p == '.') {
                integer = false;
                if (++p == x->end || !is_digit(*p))
                        return -EBADMSG;
                while (p < x->end && is_digit(*p))
                        p++;
        }
        if (p < x->end && (*p == 'e' || *p == 'E')) {
                integer = false;
                if (++p < x->end && (*p == '+' || *p == '-'))
                        p++;
                if (p == x->end || !is_digit(*p))
                        return -EBADMSG;
                while (p < x->end && is_digit(*p))
                        p++;
        }
        x->p = p;
        if (integer) {
                /* as json_object_get_int64() has it: beyond the range, its end */
                uint64_t u = 0;
                bool overflow = false;
                for (const char *d = start + negative; d < p && !overflow; d++) {
                        unsigned digit = (unsigned) (*d - '0');
                        overflow = u > (UINT64_MAX - digit) / 10;
                        u = u * 10 + digit;
                }
                v->type = JSON_SCAN_INT;
                if (!negative)
                        v->i = overflow || u > INT64_MAX ? INT64_MAX : (int64_t) u;
                else
                        v->i = overflow || u >= (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) u;
                return 0;
        }
        /* strtod() wants a C string, and the text may go on past `len` */
        size_t n = (size_t) (p - start);
        char buf[64], *copy = n < sizeof(buf) ? buf : malloc(n + 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, start, n);
        copy[n] = '\0';
        v->type = JSON_SCAN_DOUBLE;
        v->d = strtod(copy, NULL);
        if (copy != buf)
                free(copy);
        return 0;
}

static bool literal(Parser *x, const char *word, size_t n) {
        if ((size_t) (x->end - x->p) < n || memcmp(x->p, word, n) != 0)
                return false;
        x->p += n;
        return true;
}

static int parse_value(Parser *x);

/* After an item of an array or a member of an object: 1 for another (a comma), 0 at `close`. */
static int item_end(Parser *x, char close) {
        skip_space(x);
        if (x->p == x->end)
                return -EBADMSG;
        if (*x->p == ',') {
                x->p++;
                return 1;
        }
        if (*x->p != close)
                return -EBADMSG;
        x->p++;
        return 0;
}

static int parse_container(Parser *x, uint32_t k, char close) {
        JsonScan *s = x->s;
        int r;

        if (++x->depth > JSON_SCAN_DEPTH_MAX)
                return -E2BIG;
        x->p++;
        skip_space(x);
        if (x->p < x->end && *x->p == close)
                x->p++;
        else
                do {
                        if (close == '}') {
                                uint32_t key;
                                skip_space(x);
                                if (x->p == x->end || *x->p != '"')
                                        return -EBADMSG;
                                r = value_new(x, JSON_SCAN_STRING, &key);
                                if (r < 0)
                                        return r;
                                r = parse_string(x, &s->values[key].str);
                                if (r < 0)
                                        return r;
                                s->values[key].end = key + 1;
                                skip_space(x);
                                if (x->p == x->end || *x->p != ':')
                                        return -EBADMSG;
                                x->p++;
                        }
                        r = parse_value(x);
                        if (r < 0)
                                return r;
                        s->values[k].n++;
                        r = item_end(x, close);
                        if (r < 0)
                                return r;
                } while (r > 0);
        x->depth--;
        return 0;
}

static int parse_value(Parser *x) {
        JsonScan *s = x->s;
        uint32_t k;
        int r;

        skip_space(x);
        if (x->p == x->end)
                return -EBADMSG;
        switch (*x->p) {
        case '{':
        case '[':
                r = value_new(x, *x->p == '{' ? JSON_SCAN_OBJECT : JSON_SCAN_ARRAY, &k);
                if (r >= 0)
                        r = parse_container(x, k, *x->p == '{' ? '}' : ']');
                break;
        case '"':
                r = value_new(x, JSON_SCAN_STRING, &k);
                if (r >= 0)
                        r = parse_string(x, &s->values[k].str);
                break;
        case 't':
        case 'f':
                r = value_new(x, JSON_SCAN_BOOL, &k);
                if (r >= 0) {
                        s->values[k].boolean = *x->p == 't';
                        r = literal(x, "true", 4) || literal(x, "false", 5) ? 0 : -EBADMSG;
                }
                break;
        case 'n':
                r = value_new(x, JSON_SCAN_NULL, &k);
                if (r >= 0)
                        r = literal(x, "null", 4) ? 0 : -EBADMSG;
                break;
        default:
                r = value_new(x, JSON_SCAN_NULL, &k);
                if (r >= 0)
                        r = parse_number(x, &s->values[k]);
                break;
        }
        if (r < 0)
                return r;
        s->values[k].end = (uint32_t) s->n;
        return 0;
}

int json_scan(JsonScan *s, const char *text, size_t len) {
        Parser x = {.s = s, .p = text, .end = text + len};
        int r;

        s->n = 0;
        s->n_strings = 0;
        if (len > INT32_MAX)
                return -E2BIG;
        r = parse_value(&x);
        if (r >= 0) {
                skip_space(&x);
                if (x.p != x.end)
                        r = -EBADMSG; /* a second value, or anything else after the first */
        }
        if (r < 0)
                s->n = 0;
        return r;
}

void json_scan_done(JsonScan *s) {
        free(s->values);
        free(s->strings);
        *s = (JsonScan){};
}

const JsonValue *json_get(const JsonScan *s, const JsonValue *o, const char *key) {
        const JsonValue *found = NULL;

        if (!json_is(o, JSON_SCAN_OBJECT))
                return NULL;
        for (uint32_t i = (uint32_t) (o - s->values) + 1, k = 0; k < o->n; k++) {
                const JsonValue *name = &s->values[i], *v = &s->values[i + 1];
                if (strcmp(s->strings + name->str, key) == 0)
                        found = v; /* the last of a key given twice, as json-c has it */
                i = v->end;
        }
        return found;
}

const JsonValue *json_first(const JsonScan *s, const JsonValue *a) {
        return json_is(a, JSON_SCAN_ARRAY) && a->n > 0 ? a + 1 : NULL;
}

const JsonValue *json_next(const JsonScan *s, const JsonValue *a, const JsonValue *v) {
        return v->end < a->end ? &s->values[v->end] : NULL;
}

const char *json_string(const JsonScan *s, const JsonValue *v) {
        return json_is(v, JSON_SCAN_STRING) ? s->strings + v->str : NULL;
}

double json_double(const JsonValue *v) {
        return json_is(v, JSON_SCAN_DOUBLE) ? v->d : json_is(v, JSON_SCAN_INT) ? (double) v->i : 0;
}
