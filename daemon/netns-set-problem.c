/* netns-set-problem.c — the namespace set's problems to report: namespaces it could not enter, left
 * for want of descriptors, or let go with devices not at their original sizes; announced from the
 * loop (EVENT_NETNS_PROBLEM) once each as they come and go, and listed for Monitor and D-Bus. */

#include <stdlib.h>
#include <string.h>

#include "netns-set-internal.h"

static const char *const problem_kind_table[_NETNS_PROBLEM_MAX] = {
        [NETNS_PROBLEM_CANNOT_ENTER] = "cannot-enter",
        [NETNS_PROBLEM_DESCRIPTORS] = "descriptors",
        [NETNS_PROBLEM_NOT_RESTORED] = "not-restored",
};

const char *netns_problem_kind_to_string(NetnsProblemKind k) {
        return k >= 0 && k < _NETNS_PROBLEM_MAX ? problem_kind_table[k] : NULL;
}

bool netns_set_is_refused(const NetnsSet *s, uint64_t ino) {
        for (size_t i = 0; i < s->n_problems; i++)
                if (s->problems[i].ino == ino && s->problems[i].blocks)
                        return true;
        return false;
}

static void problems_changed(NetnsSet *s) {
        if (s->problems_event)
                event_active(s->problems_event, EV_TIMEOUT, 0);
}

void netns_set_problem_drop(NetnsSet *s, size_t i) {
        free(s->problems[i].name);
        memmove(s->problems + i, s->problems + i + 1, (s->n_problems - i - 1) * sizeof(*s->problems));
        s->n_problems--;
        problems_changed(s);
}

static const NetnsProblem *problem_find(const NetnsProblem *l, size_t n, const NetnsProblem *p) {
        for (size_t i = 0; i < n; i++)
                if (l[i].ino == p->ino && l[i].kind == p->kind && !l[i].quiet)
                        return &l[i];
        return NULL;
}

static void announce(NetnsSet *s, const NetnsProblem *p, bool went) {
        event_emit(&s->events, &(Event){.type = EVENT_NETNS_PROBLEM, .netns = p->name,
                                        .problem = netns_problem_kind_to_string(p->kind),
                                        .error = went ? 0 : p->error, .ok = went});
}

void netns_set_announced_clear(NetnsSet *s) {
        for (size_t i = 0; i < s->n_announced; i++)
                free(s->announced[i].name);
        free(s->announced);
        s->announced = NULL;
        s->n_announced = 0;
}

/* From the loop, once the list changed: those that went, then those that came, each once. */
void netns_set_on_problems_changed(evutil_socket_t fd, short what, void *userdata) {
        NetnsSet *s = userdata;
        NetnsProblem *now = s->n_problems > 0 ? calloc(s->n_problems, sizeof(*now)) : NULL;
        size_t n = 0;

        for (size_t i = 0; i < s->n_announced; i++)
                if (!problem_find(s->problems, s->n_problems, &s->announced[i]))
                        announce(s, &s->announced[i], true);
        for (size_t i = 0; i < s->n_problems; i++) {
                const NetnsProblem *p = &s->problems[i];
                if (p->quiet)
                        continue;
                if (!problem_find(s->announced, s->n_announced, p))
                        announce(s, p, false);
                char *name = now ? strdup(p->name) : NULL;
                if (name)
                        now[n++] = (NetnsProblem){.name = name, .ino = p->ino, .kind = p->kind};
        }
        /* out of memory: what is missing from the copy is announced again, never lost */
        netns_set_announced_clear(s);
        s->announced = now;
        s->n_announced = n;
}

/* Drop those for which keep() says no. */
void netns_set_problems_filter(NetnsSet *s, bool (*keep)(NetnsProblem *p, const void *userdata),
                               const void *userdata) {
        for (size_t i = s->n_problems; i > 0; i--)
                if (!keep(&s->problems[i - 1], userdata))
                        netns_set_problem_drop(s, i - 1);
}

void netns_set_problem_add(NetnsSet *s, NetnsProblemKind kind, const char *name, uint64_t ino, int error,
                           size_t devices, bool blocks) {
        NetnsProblem *t;
        char *copy;

        for (size_t i = 0; i < s->n_problems; i++)
                if (s->problems[i].ino == ino && s->problems[i].kind == kind) {
                        netns_set_problem_drop(s, i);
                        break;
                }
        if (s->n_problems >= NETNS_MAX || !(copy = strdup(name)))
                return;
        t = realloc(s->problems, (s->n_problems + 1) * sizeof(*t));
        if (!t) {
                free(copy);
                return;
        }
        s->problems = t;
        s->problems[s->n_problems++] = (NetnsProblem){.name = copy, .ino = ino, .kind = kind, .error = error,
                                                      .devices = devices, .blocks = blocks,
                                                      .quiet = kind == NETNS_PROBLEM_CANNOT_ENTER && error == -EMEDIUMTYPE};
        problems_changed(s);
}

size_t netns_set_problem_count(const NetnsSet *s) {
        size_t n = 0;

        for (size_t i = 0; i < s->n_problems; i++)
                n += !s->problems[i].quiet;
        return n;
}

const NetnsProblem *netns_set_problem(const NetnsSet *s, size_t i) {
        for (size_t j = 0; j < s->n_problems; j++)
                if (!s->problems[j].quiet && i-- == 0)
                        return &s->problems[j];
        return NULL;
}

bool netns_set_keep_not_descriptors(NetnsProblem *p, const void *userdata) {
        return p->kind != NETNS_PROBLEM_DESCRIPTORS;
}

bool netns_set_keep_other_than(NetnsProblem *p, const void *userdata) {
        const uint64_t *ino = userdata;
        return !(p->kind == NETNS_PROBLEM_NOT_RESTORED && p->ino == *ino);
}

/* The operator's word: those that could not be entered are tried again. */
bool netns_set_keep_after_policy_change(NetnsProblem *p, const void *userdata) {
        p->blocks = false;
        return p->kind == NETNS_PROBLEM_NOT_RESTORED;
}
