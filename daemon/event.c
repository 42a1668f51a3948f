/* event.c — the watch list of typed events: add, remove (also from inside a notification, where
 * the entry is only marked stale and pruned once the outermost notification returns), emit. */
#include "event.h"
#include "util.h"

static const char *const event_type_table[_EVENT_TYPE_MAX] = {
        [EVENT_ADDED] = "added",         [EVENT_REMOVED] = "removed", [EVENT_STATE] = "state",
        [EVENT_WRITE] = "write",         [EVENT_ROLLBACK] = "rollback", [EVENT_RELOAD] = "reload",
        [EVENT_ROLLOUT] = "rollout",     [EVENT_RELOADING] = "reloading",
        [EVENT_SETTLED] = "settled",     [EVENT_TRY] = "try",
        [EVENT_EVIDENCE] = "evidence",   [EVENT_NETNS_PROBLEM] = "netns-problem",
        [EVENT_AUTO] = "auto",
};

static const char *const try_action_table[_TRY_ACTION_MAX] = {
        [TRY_STARTED] = "started",
        [TRY_CONFIRMED] = "confirmed",
        [TRY_REVERTED] = "reverted",
};

static const char *const try_reason_table[_TRY_REASON_MAX] = {
        [TRY_REASON_NONE] = NULL,
        [TRY_REASON_TIMEOUT] = "timeout",
        [TRY_REASON_OPERATOR] = "revert",
        [TRY_REASON_STOP] = "stop",
};

const char *try_action_to_string(TryAction a) {
        if (a < 0 || a >= _TRY_ACTION_MAX)
                return NULL;
        return try_action_table[a];
}

const char *try_reason_to_string(TryReason r) {
        if (r < 0 || r >= _TRY_REASON_MAX)
                return NULL;
        return try_reason_table[r];
}

const char *event_type_to_string(EventType t) {
        if (t < 0 || t >= _EVENT_TYPE_MAX)
                return NULL;
        return event_type_table[t];
}

unsigned event_watch_add(EventList *l, EventFn fn, void *userdata) {
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 8;
                EventWatch *x = reallocarray(l->items, cap, sizeof(EventWatch));
                if (!x)
                        return 0;
                l->items = x;
                l->cap = cap;
        }
        if (++l->next_id == 0)
                l->next_id = 1;
        l->items[l->n++] = (EventWatch){.id = l->next_id, .fn = fn, .userdata = userdata};
        return l->next_id;
}

static void prune(EventList *l) {
        size_t k = 0;
        for (size_t i = 0; i < l->n; i++)
                if (!l->items[i].stale)
                        l->items[k++] = l->items[i];
        l->n = k;
        l->has_stale = false;
}

void event_watch_remove(EventList *l, unsigned id) {
        for (size_t i = 0; i < l->n; i++) {
                if (l->items[i].id != id || l->items[i].stale)
                        continue;
                if (l->depth > 0) {
                        l->items[i].stale = true;
                        l->has_stale = true;
                        return;
                }
                memmove(&l->items[i], &l->items[i + 1], (l->n - i - 1) * sizeof(EventWatch));
                l->n--;
                return;
        }
}

void event_emit(EventList *l, const Event *e) {
        /* By index and up to the count at the start: a watcher may add (which may move the array)
         * or remove watchers while it runs. */
        size_t n = l->n;

        l->depth++;
        for (size_t i = 0; i < n && i < l->n; i++) {
                EventWatch w = l->items[i];
                if (!w.stale)
                        w.fn(e, w.userdata);
        }
        if (--l->depth == 0 && l->has_stale)
                prune(l);
}

bool event_watched(const EventList *l) {
        return event_watch_count(l) > 0;
}

size_t event_watch_count(const EventList *l) {
        size_t n = 0;

        for (size_t i = 0; i < l->n; i++)
                n += !l->items[i].stale;
        return n;
}

void event_list_done(EventList *l) {
        free(l->items);
        *l = (EventList){};
}
