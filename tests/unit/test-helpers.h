/* test-helpers.h — small helpers shared by the unit tests: parse a policy from a string, format
 * the errors the way the daemon prints them, a process's seccomp mode, a teardown that finds every
 * interned string's reference dropped, a guard set made from a spec. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "guard.h"
#include "intern.h"
#include "policy.h"

/* A teardown (cmocka_unit_test_teardown()): what the test took of an interned string (a link's
 * kind, a policy's name, a guard's counter, the words of a search of auto) was dropped with what
 * held it. LeakSanitizer cannot tell: the set keeps every string it holds reachable. */
static inline int intern_none_left(void **state) {
        (void) state;
        if (intern_refs() == 0)
                return 0;
        fprintf(stderr, "%zu interned references left\n", intern_refs());
        return -1;
}

/* The "Seccomp:" mode of /proc/PID/status (2 is a filter; -1: no such line). */
static inline int seccomp_mode(pid_t pid) {
        char path[64], line[256];
        int mode = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        f = fopen(path, "re");
        if (!f)
                abort();
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "Seccomp: %d", &mode) == 1)
                        break;
        fclose(f);
        return mode;
}

static inline int streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

/* All errors as "file:line:column: message" lines, each ending in "\n". */
static inline char *errors_to_string(const PolicyErrors *e) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        if (!f)
                abort();
        for (size_t i = 0; i < e->n; i++) {
                char *m;
                if (policy_error_format(&e->items[i], &m) < 0)
                        abort();
                fprintf(f, "%s\n", m);
                free(m);
        }
        fclose(f);
        return buf;
}

/* Parse `yaml` as file "t.yaml" into a new set. Returns the set (NULL on errors) and the errors
 * in *ret_errors (never NULL; "" when clean). */
static inline PolicySet *parse_string(const char *yaml, char **ret_errors) {
        PolicySet *s = policy_set_new();
        PolicyErrors e = {};
        int r;

        if (!s)
                abort();
        r = policy_parse_buffer(s, "t.yaml", yaml, strlen(yaml), &e);
        *ret_errors = errors_to_string(&e);
        policy_errors_clear(&e);
        if (r < 0) {
                policy_set_free(s);
                return NULL;
        }
        return s;
}

static inline char *read_all(const char *path, size_t *ret_size) {
        FILE *f = fopen(path, "re");
        char *buf = NULL;
        size_t size = 0, n;
        char chunk[4096];
        FILE *m;

        if (!f)
                return NULL;
        m = open_memstream(&buf, &size);
        if (!m)
                abort();
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                fwrite(chunk, 1, n, m);
        fclose(f);
        fclose(m);
        if (ret_size)
                *ret_size = size;
        return buf;
}

/* The guards of `spec` in `s` (room for them, GUARD_SET_SIZE()): its rules, then the set, as
 * probation_new() makes them. */
static inline int guard_set_init_spec(GuardSet *s, const RollbackSpec *spec, const SnmpSnapshot *snap) {
        GuardRules *rules;
        int r = guard_rules_get(spec, &rules);

        if (r < 0)
                return r;
        guard_set_init(s, rules, snap);
        return 0;
}
