/* policy-try.h — a tried policy: run a policy text instead of the configured one until it is confirmed
 * (then installed where the daemon reads its policy), reverted, or its deadline passes. The try
 * is recorded in the runtime directory before it takes effect, so that a daemon that stops or
 * crashes during it comes back on the policy that ran before. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "policy-reload.h"

/* The record in the runtime directory. */
#define TRY_RECORD_FILE "try.json"

typedef struct PolicyTry {
        const Clock *clock; /* NULL: the system's */
        EventList *events;  /* EVENT_TRY goes to the daemon's */
        Reloader *reloader; /* holds the running policy */
        char *record_path;
        struct event *timer;

        bool running;
        char *file;   /* the tried file, as the caller named it */
        char *target; /* where a confirm installs it */
        char *text;
        size_t size;
        uint64_t deadline;          /* CLOCK_MONOTONIC */
        uint64_t deadline_realtime; /* for people: CLOCK_REALTIME */
        PolicySet *previous;        /* what ran before, put back by a revert */
} PolicyTry;

int policy_try_new(struct event_base *base, const Clock *clock, EventList *events, Reloader *r,
                   const char *runtime_dir, PolicyTry **ret);
/* A try that still runs stays recorded: the next start reverts it. */
void policy_try_free(PolicyTry *t);

/* At start, once the configured policy is loaded: a try recorded by an earlier run that stopped
 * during it is over. It was confirmed when the target holds the tried text (the install is the
 * step that commits: a crash came between it and the record's removal), otherwise the
 * configured policy that is loaded is the revert. Returns 2 for a confirmed try, 1 for a
 * reverted one (an unreadable record too), 0 when there was none; the record is removed. */
int policy_try_recover(PolicyTry *t);

/* Run `text` (named `file` in errors) instead of the configured policy, for `timeout_usec`.
 * `target` (NULL: the main policy file) is where a confirm installs it; the tried policy is the
 * configured one with `text` in that file's place. Returns once the tried policy is in force.
 * -EBUSY a try runs already; -ERANGE timeout out of bounds; -EXDEV the daemon does not read a
 * file at `target`; -EINVAL with every error in `errs`; or the -errno of writing the record
 * (then nothing changed). */
int policy_try_start(PolicyTry *t, const char *text, size_t size, const char *file, const char *target,
                     uint64_t timeout_usec, PolicyErrors *errs);
/* Keep the tried policy: installed at its target atomically, and the try ends. -ENOENT when no
 * try runs; the -errno of the install (then the try goes on, to be confirmed again or reverted). */
int policy_try_confirm(PolicyTry *t);
/* What a confirm's error says of its target, in words, for those the install refuses (a symlink,
 * a directory others may write, a directory); NULL for any other. */
const char *policy_try_install_problem(int r);
/* Go back to the policy that ran before. -ENOENT when no try runs. */
int policy_try_revert(PolicyTry *t, TryReason why);
/* The deadline's timer: reverts once the try's clock says the deadline passed, re-arms for the
 * rest otherwise (libevent's clock and the try's may differ). */
void policy_try_check(PolicyTry *t);
