/* policy-reload.h — the running policy, one for every namespace: finding and reading its files, checking
 * them, holding the one that runs and handing a new one to the namespaces only when it is clean
 * (then every link is read again and reconciled), watching the files with inotify, and
 * --check-config, which takes the same path without a daemon. The reloader knows no namespace and
 * no engine: what runs the policy is above it, reached through ReloaderOps. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>

#include "event.h"
#include "policy.h"
#include "policy-files.h"

typedef struct ReloadConfig {
        const char *config_path; /* NULL: the standard files and drop-ins */
        const char *root;        /* prefix for the standard paths; "" in production */
        const char *runtime_dir; /* where the last policy that ran is recorded; NULL: nowhere */
        HostIdentity host;       /* this host, as the policy's scope sees it (its strings outlive the
                                  * reloader) */
} ReloadConfig;

/* Where the running policy comes from. */
typedef enum PolicySource {
        POLICY_SOURCE_FILES,    /* the policy files, as they are */
        POLICY_SOURCE_RECORDED, /* the files have errors: the last policy that ran runs on */
        POLICY_SOURCE_NONE,     /* the files have errors and no policy ran before: nothing is
                                 * decided or written until they are fixed */
        _POLICY_SOURCE_MAX,
        _POLICY_SOURCE_INVALID = -EINVAL,
} PolicySource;

const char *policy_source_to_string(PolicySource s);

typedef struct Reloader Reloader;

/* The outcome of the last reload (or of the first load, when there was none since): what status
 * reports, so that a refused policy leaves a trace after its log lines scroll away. */
typedef struct ReloadResult {
        bool ok;
        uint64_t realtime_usec; /* when (CLOCK_REALTIME) */
        uint64_t digest;        /* of the policy that runs after it */
        size_t n_errors;        /* refused: how many errors the new policy had */
        PolicyErrors errors;    /* the first RELOAD_ERRORS_KEPT of them */
} ReloadResult;

/* A refused reload keeps at most this many of its errors for status; the log has every one. */
#define RELOAD_ERRORS_KEPT 20u

/* What runs the policy: every namespace (netns-set.c), or a test's one engine. */
typedef struct ReloaderOps {
        /* `set` is the running policy from now on (the first, a reload's, a try's, a revert's):
         * every namespace runs it, its writes queued, and every link is read again. The reloader
         * keeps its own reference; take one to keep `set`. */
        void (*run)(void *userdata, PolicySet *set);
        /* A forced reload was refused: the running policy runs on, and the READY=1 that its
         * EVENT_RELOADING owes follows once every namespace has settled. NULL: nothing to do. */
        void (*unchanged)(void *userdata);
} ReloaderOps;

/* EVENT_RELOAD and EVENT_RELOADING go to `events`, the daemon's (the namespace set's); the policy
 * goes to `ops` (with `userdata`). */
int reloader_new(struct event_base *base, const ReloadConfig *cfg, EventList *events, const ReloaderOps *ops,
                 void *userdata, Reloader **ret);
void reloader_free(Reloader *r);
/* The running policy (NULL before reloader_load()): one for every namespace; never NULL after. */
const PolicySet *reloader_policy(const Reloader *r);
/* This host, as the policy's scope sees it. */
const HostIdentity *reloader_host(const Reloader *r);

/* The first policy, before any namespace starts. Files with errors never stop the daemon: every
 * error is logged, and the last policy that ran (recorded in the runtime directory) runs instead,
 * or none (PolicySource NONE) when there is no record; the files are watched, and the fixed ones
 * run as a reload. Fails only for want of memory. */
int reloader_load(Reloader *r);
/* Where the running policy comes from (NULL: a test's Control without a reloader, "files"). */
PolicySource reloader_source(const Reloader *r);
/* Re-read the policy. `forced` (SIGHUP, Reload()) always reloads and is announced before the
 * files are read; a file change reloads only when the contents differ from the running policy.
 * -EINVAL with every error in `ret_errs` (if given) when the new policy is refused and the running
 * one stays, and beside them in `ret_warnings` (if given) the counters this host lacks. */
int reloader_reload(Reloader *r, bool forced, PolicyErrors *ret_errs, PolicyErrors *ret_warnings);

/* The last reload's outcome (a try's start and end are not reloads); NULL before the first load. */
const ReloadResult *reloader_last(const Reloader *r);
/* A try (policy-try.c) holds the running policy: while held, a forced reload (SIGHUP, Reload()) is
 * refused with -EBUSY and a file change is only noted; both are done, as one reload of the files,
 * when the hold ends. */
void reloader_hold(Reloader *r, bool hold);
bool reloader_held(const Reloader *r);
/* Read the files again soon, from the loop, as a file change would (only a change of their
 * contents changes the policy); the files to watch are found again too. */
void reloader_reread(Reloader *r);
/* A confirmed try installed the running policy in the files: status's last reload is that one
 * (its time and digest), as if the files had been reloaded to it. */
void reloader_installed(Reloader *r);

/* Where a confirmed try is installed when the caller names no place: the main policy file (or
 * --config's), below the root. */
int reloader_default_target(const Reloader *r, char **ret);
/* The policy as a reload would read it, with `o->data` in place of the file `o->path` (which need
 * not exist yet; -EXDEV when the daemon does not read a file there). Does not log. -EINVAL with
 * every error in `errs` (the override's named by `o->source`). */
int reloader_read_with(Reloader *r, const PolicyOverride *o, PolicySet **ret, PolicyErrors *errs);
/* Put `set` in force as a clean reload would (every link read again and reconciled); the policy
 * that ran is handed back in `ret_old` (or freed when that is NULL). */
void reloader_swap(Reloader *r, PolicySet *set, PolicySet **ret_old);

/* --check-config: read and check the policy as a reload would; 0 when clean, -EINVAL with every
 * error printed as file:line:column: message on stderr. */
int reload_check_config(const ReloadConfig *cfg, const HostIdentity *host);

/* Read the policy files (found as `cfg` says) into a new, scoped set. Does not log: -EINVAL with
 * every error in `errs`, or another -errno. `ret_paths` (if given): the files read, for watching.
 * `warnings` (if given): with -EINVAL, the guard counters this host lacks that what of the files
 * did parse names (they go beside the errors; a valid set's are the engine's to find). */
int reload_read_policy(const ReloadConfig *cfg, const HostIdentity *host, PolicySet **ret, char ***ret_paths,
                       size_t *ret_n, PolicyErrors *errs, PolicyErrors *warnings);
