/* json-writer.h — JSON text written straight into a growing buffer, for replies too large to build
 * as a json-c tree first (ListDevices of 10000 devices). What it writes is byte for byte what
 * json-c prints for the same values with JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
 * so a reply written either way is the same. Strings are written as given: a caller repairs UTF-8
 * first (utf8.h). A writer made with JSON_WRITER_TREE_INIT builds the same values as a json-c
 * tree instead (json_writer_take_tree()), for a view that is one part of a tree: one writing of
 * a view serves both, never text parsed back. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct json_object;

typedef struct JsonWriter {
        char *buf;
        size_t len, size;
        int error;       /* the first failure (-ENOMEM), sticky: every write after it does nothing */
        bool need_comma; /* a value was written in the object or array still open */
        /* the tree backend */
        bool tree;
        struct json_object *root;
        struct json_object **open; /* the containers still open, the innermost last */
        size_t n_open, open_size;
        char *key; /* of the next value of the innermost object */
} JsonWriter;

#define JSON_WRITER_INIT ((JsonWriter){})
#define JSON_WRITER_TREE_INIT ((JsonWriter){.tree = true})

/* Frees the buffer (the tree); `_cleanup_(json_writer_done) JsonWriter w = JSON_WRITER_INIT;`. */
void json_writer_done(JsonWriter *w);
/* The tree backend's value, taken (NULL: a JSON null, or a failure). */
struct json_object *json_writer_take_tree(JsonWriter *w);
/* Forget what was written (the buffer is kept for what comes next). */
void json_writer_reset(JsonWriter *w);
/* The text so far is sent elsewhere: forget it, but not where the writer stands (the next value of
 * an open array still gets its comma). */
static inline void json_writer_sent(JsonWriter *w) {
        w->len = 0;
}
/* What was written, NUL-terminated; NULL after a failure (and from the tree backend). */
const char *json_writer_text(JsonWriter *w);
/* 0, or the first failure. */
static inline int json_writer_error(const JsonWriter *w) {
        return w->error;
}

void json_writer_object_begin(JsonWriter *w);
void json_writer_object_end(JsonWriter *w);
void json_writer_array_begin(JsonWriter *w);
void json_writer_array_end(JsonWriter *w);
/* An object's key; its value is written next. */
void json_writer_key(JsonWriter *w, const char *key);
/* A value (in an array, or after its key); a NULL string is null. */
void json_writer_string(JsonWriter *w, const char *s);
void json_writer_int64(JsonWriter *w, int64_t v);
void json_writer_double(JsonWriter *w, double v);
void json_writer_bool(JsonWriter *w, bool v);
void json_writer_null(JsonWriter *w);
/* One value given as JSON text (a caller's own writer's, say), written as it is. */
void json_writer_raw(JsonWriter *w, const char *json, size_t size);
