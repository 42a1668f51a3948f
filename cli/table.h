/* table.h — aligned text tables for bigtcpctl's human output, networkctl style: a header row,
 * columns padded to their widest cell, optional colour per cell (only when asked for). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum TableAlign {
        TABLE_LEFT,
        TABLE_RIGHT,
        _TABLE_ALIGN_MAX,
        _TABLE_ALIGN_INVALID = -1,
} TableAlign;

typedef struct Table Table;

/* `headers` is NULL-terminated; `n_columns` of them. */
int table_new(const char *const *headers, Table **ret);
void table_free(Table *t);
static inline void table_freep(Table **t) {
        table_free(*t);
}
void table_set_align(Table *t, size_t column, TableAlign align);
/* Never cut this column to fit a width: a word that scripts and eyes compare (a state, an
 * action), or a short name that tells rows apart. */
void table_set_keep(Table *t, size_t column);
/* Appends a cell to the current row (a new row starts after the last column). `color` is an
 * ANSI SGR sequence or NULL; it is printed only when the table prints colour. */
int table_add(Table *t, const char *text, const char *color);
int table_addf(Table *t, const char *color, const char *format, ...) __attribute__((format(printf, 3, 4)));
size_t table_rows(const Table *t);
/* The table takes at most `width` columns (0: no limit): the widest left-aligned columns are cut,
 * their cells ending in `ellipsis` ("…", or "..." outside UTF-8); numbers and the columns kept
 * (table_set_keep()) are never cut. */
void table_set_width(Table *t, size_t width, const char *ellipsis);
/* `header`: print the header row; `color`: print cell colours and a bold-less underlined header. */
int table_print(const Table *t, FILE *f, bool header, bool color);

/* Display width of UTF-8 text (code points; every one counts 1). */
size_t utf8_width(const char *s);
