/* config.h — watching the policy files with inotify: every directory that holds one of them,
 * the directories their symlinks point into, and the drop-in directories. */
#pragma once

#include <event2/event.h>
#include <stddef.h>

typedef struct ConfigWatch ConfigWatch;
typedef void (*ConfigChangedFn)(void *userdata);

int config_watch_new(struct event_base *base, ConfigChangedFn changed, void *userdata, ConfigWatch **ret);
void config_watch_free(ConfigWatch *w);

/* Watch what makes up the policy now: the files `paths`, and — when `config` is NULL — the
 * standard directories under `root`, so that a drop-in that appears is seen. Returns the number
 * of directories watched. */
int config_watch_set(ConfigWatch *w, char *const *paths, size_t n_paths, const char *config, const char *root);
