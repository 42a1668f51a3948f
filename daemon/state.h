/* state.h — the runtime state: the original sizes of every device bigtcpd has written, its
 * last-known-good sizes, a running probation and its last rollback, so that they survive a
 * restart or a kill. A snapshot, <dir>/state.json, plus a journal, <dir>/state.journal, of the
 * devices changed since: appending one line costs the same with 10 devices as with 10000. Each
 * snapshot carries a generation; journal lines of older generations are ignored, so a crash
 * between writing a snapshot and removing the journal loses nothing and replays nothing stale.
 *
 * The StateStore below is what the engine uses: devices are marked when their entry changes
 * and forgotten when they go; a save (soon, from the loop, or now, before a write that needs its
 * originals on disk) appends them to the journal, or writes a new snapshot once the journal has
 * grown past twice the device table. */
#pragma once

#include <event2/event.h>
#include <stddef.h>

#include "device.h"
#include "probation.h"

typedef struct StateEntry {
        int ifindex;
        char *ifname;
        Sizes original;
        unsigned written;  /* SizeMask */
        DeviceState state; /* _DEVICE_STATE_INVALID when the file does not say */
        bool has_last_good;
        Sizes last_good;
        bool held;
        Sizes held_desired;
        Probation *probation; /* in probation when the daemon stopped */
        RollbackRecord *last_rollback;
} StateEntry;

void state_entries_free(StateEntry *e, size_t n);
void state_entries_free_one(StateEntry *e);

/* Parse a snapshot held in memory (for the loader and the fuzzer). Each ifindex appears once in
 * the result: of several entries for one device, the last is kept (as in the journal). */
int state_parse(const char *data, size_t size, StateEntry **ret, size_t *ret_n, uint64_t *ret_generation);
/* Replay journal text of `generation` onto `entries`. A line that does not parse (a torn last
 * write) ends the replay. */
int state_journal_apply(const char *data, size_t size, uint64_t generation, StateEntry **entries, size_t *n);

/* Write every device with recorded originals to a new snapshot (write, fsync, rename) of
 * `generation`, then drop the journal. */
int state_write_snapshot(const char *dir, const DeviceTable *t, uint64_t generation);
/* Append the entries of `devices` (a "forget" line for those without originals) after "forget"
 * lines for `forgotten` ifindexes to the journal, then fdatasync. */
int state_write_journal(const char *dir, uint64_t generation, const Device *const *devices, size_t n_devices,
                        const int *forgotten, size_t n_forgotten);

typedef struct StateStore StateStore;

int state_store_new(struct event_base *base, const char *dir, const DeviceTable *table, StateStore **ret);
/* Saves what is pending first (errors ignored: nothing is left to tell). */
void state_store_free(StateStore *s);

/* Read the snapshot and replay the journal. Missing files: no entries. A snapshot that cannot be
 * read is moved aside as state.json.corrupt and -EBADMSG (or the read error) returned with no
 * entries; the daemon then starts from what the kernel shows. The first save after a load writes
 * a new snapshot. */
int state_store_load(StateStore *s, StateEntry **ret, size_t *ret_n);

/* The device's entry changed (or it lost its originals): journal it at the next save. */
void state_store_mark(StateStore *s, Device *d);
/* The device is going away: its entry goes at the next save. */
void state_store_forget(StateStore *s, Device *d);
/* The next save writes a whole new snapshot. */
void state_store_compact(StateStore *s);
/* Save what is pending now. */
int state_store_save(StateStore *s);
/* Save now what must be on disk before these devices are written (their entries, and every
 * device forgotten since the last save); the rest stays pending for the next save. A whole new
 * snapshot when one is due. */
int state_store_save_devices(StateStore *s, Device *const *devices, size_t n);
bool state_store_pending(const StateStore *s);
const char *state_store_dir(const StateStore *s);
