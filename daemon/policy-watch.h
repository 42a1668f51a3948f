/* policy-watch.h — watching the policy files with inotify: every directory that holds one of
 * them, the directories their symlinks point into, and the drop-in directories. */
#pragma once

#include <event2/event.h>
#include <stddef.h>

typedef struct PolicyWatch PolicyWatch;
typedef void (*PolicyChangedFn)(void *userdata);

int policy_watch_new(struct event_base *base, PolicyChangedFn changed, void *userdata, PolicyWatch **ret);
void policy_watch_free(PolicyWatch *w);

/* Watch what makes up the policy now: the files `paths`, and — when `config` is NULL — the
 * standard directories under `root`, so that a drop-in that appears is seen. Returns the number
 * of directories watched. */
int policy_watch_set(PolicyWatch *w, char *const *paths, size_t n_paths, const char *config,
                     const char *root);
