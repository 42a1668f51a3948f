/* table.c — aligned text tables for bigtcpctl (see table.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"

typedef struct Cell {
        char *text;
        const char *color;
} Cell;

struct Table {
        size_t n_columns;
        char **headers;
        TableAlign *align;
        bool *keep; /* never cut */
        Cell *cells;
        size_t n_cells, size;
        size_t width;         /* what the whole table may take; 0: no limit */
        const char *ellipsis; /* marks a cell cut to fit */
};

/* A column is not cut below this (or its header, if shorter). */
#define COLUMN_MIN 6u

size_t utf8_width(const char *s) {
        size_t n = 0;
        for (; s && *s; s++)
                n += ((unsigned char) *s & 0xC0) != 0x80;
        return n;
}

int table_new(const char *const *headers, Table **ret) {
        Table *t = calloc(1, sizeof(*t));
        size_t n = 0;

        if (!t)
                return -ENOMEM;
        while (headers[n])
                n++;
        t->n_columns = n;
        t->headers = calloc(n, sizeof(char *));
        t->align = calloc(n, sizeof(TableAlign));
        t->keep = calloc(n, sizeof(bool));
        if (!t->headers || !t->align || !t->keep) {
                table_free(t);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                t->headers[i] = strdup(headers[i]);
                if (!t->headers[i]) {
                        table_free(t);
                        return -ENOMEM;
                }
        }
        *ret = t;
        return 0;
}

void table_free(Table *t) {
        if (!t)
                return;
        for (size_t i = 0; t->headers && i < t->n_columns; i++)
                free(t->headers[i]);
        for (size_t i = 0; i < t->n_cells; i++)
                free(t->cells[i].text);
        free(t->headers);
        free(t->align);
        free(t->keep);
        free(t->cells);
        free(t);
}

void table_set_width(Table *t, size_t width, const char *ellipsis) {
        t->width = width;
        t->ellipsis = ellipsis;
}

/* Cuts the widest left-aligned columns (names, policies, notes; numbers are right-aligned, and
 * they and the columns kept whole are never cut) until the table fits t->width, or nothing more
 * can go. */
static void fit_width(const Table *t, size_t *width, const size_t *floor) {
        size_t total = t->n_columns > 0 ? t->n_columns - 1 : 0;

        for (size_t i = 0; i < t->n_columns; i++)
                total += width[i];
        while (t->width > 0 && total > t->width) {
                size_t widest = t->n_columns;
                for (size_t i = 0; i < t->n_columns; i++)
                        if (t->align[i] == TABLE_LEFT && !t->keep[i] && width[i] > floor[i] &&
                            (widest == t->n_columns || width[i] > width[widest]))
                                widest = i;
                if (widest == t->n_columns)
                        return;
                width[widest]--;
                total--;
        }
}

/* The first `n` code points of `s`. */
static size_t utf8_prefix_bytes(const char *s, size_t n) {
        size_t b = 0;
        for (size_t cp = 0; s[b]; b++) {
                if (((unsigned char) s[b] & 0xC0) != 0x80 && cp++ == n)
                        break;
        }
        return b;
}

void table_set_align(Table *t, size_t column, TableAlign align) {
        if (column < t->n_columns)
                t->align[column] = align;
}

void table_set_keep(Table *t, size_t column) {
        if (column < t->n_columns)
                t->keep[column] = true;
}

int table_add(Table *t, const char *text, const char *color) {
        if (t->n_cells == t->size) {
                size_t want = t->size ? t->size * 2 : 64;
                Cell *c = reallocarray(t->cells, want, sizeof(Cell));
                if (!c)
                        return -ENOMEM;
                t->cells = c;
                t->size = want;
        }
        t->cells[t->n_cells].text = strdup(text ?: "");
        if (!t->cells[t->n_cells].text)
                return -ENOMEM;
        t->cells[t->n_cells].color = color;
        t->n_cells++;
        return 0;
}

int table_addf(Table *t, const char *color, const char *format, ...) {
        va_list ap;
        char *s;
        int r;

        va_start(ap, format);
        r = vasprintf(&s, format, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        r = table_add(t, s, color);
        free(s);
        return r;
}

size_t table_rows(const Table *t) {
        return t->n_columns ? (t->n_cells + t->n_columns - 1) / t->n_columns : 0;
}

static void print_cell(FILE *f, const Table *t, const char *text, const char *color, size_t width,
                       TableAlign align, bool last, bool use_color) {
        size_t w = utf8_width(text), pad = width > w ? width - w : 0;
        const char *ellipsis = t->ellipsis ?: "...";
        size_t ew = utf8_width(ellipsis), keep = w, ellipsis_w = 0;

        if (w > width) { /* cut to fit the terminal */
                keep = width > ew ? width - ew : 0;
                ellipsis_w = width - keep;
        }
        if (align == TABLE_RIGHT)
                fprintf(f, "%*s", (int) pad, "");
        if (use_color && color)
                fputs(color, f);
        fwrite(text, 1, keep < w ? utf8_prefix_bytes(text, keep) : strlen(text), f);
        if (ellipsis_w > 0)
                fwrite(ellipsis, 1, utf8_prefix_bytes(ellipsis, ellipsis_w), f);
        if (use_color && color)
                fputs("\033[0m", f);
        if (align == TABLE_LEFT && !last)
                fprintf(f, "%*s", (int) pad, "");
}

int table_print(const Table *t, FILE *f, bool header, bool color) {
        size_t *width = calloc(t->n_columns ? t->n_columns : 1, sizeof(size_t));
        size_t *floor = calloc(t->n_columns ? t->n_columns : 1, sizeof(size_t));

        if (!width || !floor) {
                free(width);
                free(floor);
                return -ENOMEM;
        }
        for (size_t i = 0; i < t->n_columns; i++) {
                size_t hw = utf8_width(t->headers[i]);
                floor[i] = hw > COLUMN_MIN ? hw : COLUMN_MIN;
                if (header)
                        width[i] = hw;
        }
        for (size_t i = 0; i < t->n_cells; i++) {
                size_t w = utf8_width(t->cells[i].text);
                if (w > width[i % t->n_columns])
                        width[i % t->n_columns] = w;
        }
        for (size_t i = 0; i < t->n_columns; i++)
                if (floor[i] > width[i])
                        floor[i] = width[i];
        fit_width(t, width, floor);
        if (header) {
                for (size_t i = 0; i < t->n_columns; i++) {
                        if (i > 0)
                                fputc(' ', f);
                        print_cell(f, t, t->headers[i], color ? "\033[4m" : NULL, width[i], t->align[i],
                                   i + 1 == t->n_columns, color);
                }
                fputc('\n', f);
        }
        for (size_t i = 0; i < t->n_cells; i++) {
                size_t col = i % t->n_columns;
                /* no trailing blank for an empty last cell */
                if (col > 0 && !(col + 1 == t->n_columns && t->align[col] == TABLE_LEFT && !*t->cells[i].text))
                        fputc(' ', f);
                print_cell(f, t, t->cells[i].text, t->cells[i].color, width[col], t->align[col],
                           col + 1 == t->n_columns, color);
                if (col + 1 == t->n_columns)
                        fputc('\n', f);
        }
        if (t->n_cells % (t->n_columns ? t->n_columns : 1))
                fputc('\n', f);
        free(width);
        free(floor);
        return 0;
}
