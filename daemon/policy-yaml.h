/* policy-yaml.h — what the policy parser reads YAML with: a Parser that keeps every error with its
 * position, node accessors, mappings with their keys checked, and typed values read from nodes.
 * Only the parser (policy-parse.c) includes it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "policy.h"
#include "util.h"

/* Room for a user string quoted into a message (parser_quote()); longer ones are cut. */
#define QUOTE_MAX 96u

/* One file being parsed: its text, its document, and where its errors go. */
typedef struct Parser {
        const char *file;
        const char *data;
        size_t size;
        yaml_document_t *doc;
        PolicyErrors *errs;
        size_t n_start; /* errs->n when this file began */
        size_t n_errors;
        int r; /* a hard failure (-ENOMEM) ends everything */
} Parser;

/* Append an error at a position (line 0: about the whole file), or at a node. Past the cap one
 * "too many errors" stands for the rest; running out of memory sets p->r. */
_printf_(4, 5) void parser_error_at(Parser *p, unsigned line, unsigned column, const char *fmt, ...);
_printf_(3, 4) void parser_error(Parser *p, const yaml_node_t *n, const char *fmt, ...);
/* A user string as it goes into a message: quoted, escaped, cut when long. `size` is QUOTE_MAX. */
const char *parser_quote(const char *s, char *buf, size_t size);

/* Load p->data into p->doc, after a pass over its events that rejects aliases and a second
 * document. Returns 0, -EINVAL when errors were reported, or the hard failure also kept in p->r. */
int parser_load(Parser *p);
/* The errors of this file by position, stable. */
void parser_sort_errors(Parser *p);
/* Forget the errors of this file (after a hard failure: no half-reported file). */
void parser_drop_errors(Parser *p);

#define MAPPING_FOREACH(pair, node)                                                                         \
        for (yaml_node_pair_t *pair = (node)->data.mapping.pairs.start;                                     \
             pair < (node)->data.mapping.pairs.top; pair++)
#define SEQUENCE_FOREACH(item, node)                                                                        \
        for (yaml_node_item_t *item = (node)->data.sequence.items.start;                                    \
             item < (node)->data.sequence.items.top; item++)

static inline size_t sequence_length(const yaml_node_t *n) {
        return (size_t) (n->data.sequence.items.top - n->data.sequence.items.start);
}

static inline const char *scalar(const yaml_node_t *n) {
        return n && n->type == YAML_SCALAR_NODE ? (const char *) n->data.scalar.value : NULL;
}

static inline bool scalar_is_plain(const yaml_node_t *n) {
        return n && n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* YAML's null: an empty plain scalar, "~" or "null". */
static inline bool node_is_null(const yaml_node_t *n) {
        const char *v = scalar(n);
        if (!v || !scalar_is_plain(n))
                return false;
        return streq_ptr(v, "") || streq_ptr(v, "~") || streq_ptr(v, "null") || streq_ptr(v, "Null") ||
               streq_ptr(v, "NULL");
}

/* Collect the values of a mapping by key; unknown and repeated keys are reported. Returns -EINVAL
 * (reported) when the node is no mapping. `what` names it in that error (NULL at the top). */
int parser_mapping(Parser *p, yaml_node_t *n, const char *what, const char *const *keys, size_t n_keys,
                   yaml_node_t **values);
/* A scalar string of sane length without NUL bytes; borrowed from the document. Reports and
 * returns -EINVAL otherwise. */
int parser_string(Parser *p, yaml_node_t *n, const char *key, const char **ret);

typedef enum ListKind {
        LIST_NAME,   /* interface name globs, "!" negates */
        LIST_HOSTS,  /* hostname globs */
        LIST_KIND,   /* link kinds */
        LIST_DRIVER, /* driver globs */
        LIST_MAC,    /* address globs, folded to lower case */
        LIST_ROUTE,  /* "default" or prefixes */
        LIST_NETNS,  /* "host" or namespace file name globs, "!" negates */
        _LIST_KIND_MAX,
        _LIST_KIND_INVALID = -1,
} ListKind;

/* A list of strings, or one string standing for a list of one; each item checked for `kind`.
 * Valid items are appended to `l` (MAC globs folded to lower case). */
void parser_strlist(Parser *p, yaml_node_t *n, const char *key, ListKind kind, StrList *l);
/* A number of bytes (1..524280, from a plain scalar), "max" or "legacy". */
void parser_size(Parser *p, yaml_node_t *n, const char *key, SizeSpec *ret);
/* A duration; *has is set when it parsed. */
void parser_duration(Parser *p, yaml_node_t *n, const char *key, bool *has, uint64_t *ret);
/* A guard counter name, copied into *ret. */
void parser_counter(Parser *p, yaml_node_t *n, const char *key, char **ret, GuardCounterKind *ret_kind);
