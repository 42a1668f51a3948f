/* state.h — the runtime state file: the original sizes of every device bigtcpd has written, so
 * that they survive a restart. Written atomically (temporary file, fsync, rename). */
#pragma once

#include <stddef.h>

#include "device.h"
#include "guard.h"

typedef struct StateEntry {
        int ifindex;
        char *ifname;
        Sizes original;
        unsigned written_families;
        DeviceState state;       /* _DEVICE_STATE_INVALID when the file does not say */
        bool has_last_good;
        Sizes last_good;
        Sizes held_desired;      /* rolled-back */
        Probation *probation;    /* in probation when the daemon stopped */
        RollbackRecord *last_rollback;
} StateEntry;

/* The state is a snapshot, <dir>/state.json, plus a journal, <dir>/state.journal, of the
 * devices changed since: appending one line costs the same with 10 devices as with 10000. Each
 * snapshot carries a generation; journal lines of older generations are ignored, so a crash
 * between writing a snapshot and removing the journal loses nothing and replays nothing stale. */

/* Write every device with recorded originals to a new snapshot (write, fsync, rename) of
 * `generation`, then drop the journal. */
int state_save(const char *dir, const DeviceTable *t, uint64_t generation);
/* Append the current entries of `devices` (a "forget" line for those without originals) and
 * "forget" lines for `forgotten` ifindexes to the journal, then fdatasync. */
int state_append(const char *dir, uint64_t generation, const Device *const *devices, size_t n_devices,
                 const int *forgotten, size_t n_forgotten);

/* Read the snapshot and replay the journal. Missing files yield no entries and 0; a corrupt
 * snapshot -EBADMSG (a torn journal line ends the replay). */
int state_load(const char *dir, StateEntry **ret, size_t *ret_n, uint64_t *ret_generation);
void state_entries_free(StateEntry *e, size_t n);
void state_entries_free_one(StateEntry *e);

/* Parse a state file held in memory (for the loader and the fuzzer). Each ifindex appears once
  * in the result: of several entries for one device, the last is kept (as in the journal). */
int state_parse(const char *data, size_t size, StateEntry **ret, size_t *ret_n);
int state_parse_full(const char *data, size_t size, StateEntry **ret, size_t *ret_n, uint64_t *ret_generation);
/* Replay journal text of `generation` onto `entries`. */
int state_journal_apply(const char *data, size_t size, uint64_t generation, StateEntry **entries, size_t *n);
