/* state.h — the runtime state: the original sizes of every device bigtcpd has written, its
 * last-known-good sizes, a running probation and its last rollback, so that they survive a
 * restart or a kill. A snapshot, <dir>/state.json, plus a journal, <dir>/state.journal, of the
 * devices changed since: appending one line costs the same with 10 devices as with 10000. Each
 * snapshot carries a generation; journal lines of older generations are ignored, so a crash
 * between writing a snapshot and removing the journal loses nothing and replays nothing stale.
 *
 * The StateStore below is what the engine uses: devices are marked when their entry may have
 * changed and forgotten when they go; a save (soon, from the loop, or now, before a write that
 * needs its originals on disk) appends to the journal the entries of those whose entry differs
 * from the one on disk (the store keeps a keyed hash of each: a device marked without a change,
 * or without originals and with no entry there, costs no write), or writes a new snapshot once
 * the journal has grown past twice the device table (in lines) or twice the last snapshot (in
 * bytes). An append that fails (a full disk) is cut back to the last whole line, and the save
 * retried from the loop.
 *
 * The files are opened relative to the runtime directory, which must be the daemon's alone (its
 * user's, writable by no one else), never through a symlink and never waiting on a FIFO. */
#pragma once

#include <event2/event.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "device.h"
#include "probation.h"

typedef struct StateEntry {
        int ifindex;
        char *ifname;
        /* Which device it was, beyond the ifindex that the kernel hands out again once a device is
         * gone: its kind and MAC (the permanent one where the kernel reports one), "" for none.
         * Entries written before they were recorded have no identity. */
        bool has_identity;
        char *kind;
        char *mac;
        Sizes original;
        unsigned written;  /* SizeMask */
        DeviceState state; /* _DEVICE_STATE_INVALID when the file does not say */
        bool has_last_good;
        Sizes last_good;
        ProvenSizes proven;
        bool held;
        Sizes held_desired;
        Probation *probation; /* in probation when the daemon stopped */
        RollbackRecord *last_rollback;
        struct AutoDevice *autosize; /* the searches of `auto` (auto-size.h); NULL: none */
} StateEntry;

void state_entries_free(StateEntry *e, size_t n);
void state_entries_free_one(StateEntry *e);

/* Is `d` the device `e` was recorded for? Not when it is of another kind; when both have a MAC,
 * when it has the same one (a renamed device is the same device); otherwise when it has the same
 * name. An entry without identity (an earlier version's) is taken to be the device's. When not,
 * *ret_why (may be NULL) says what differs: "kind", "MAC" or "name". */
bool state_entry_is_device(const StateEntry *e, const Device *d, const char **ret_why);

/* The most either file may hold when it is read back. A journal is compacted into a new snapshot
 * long before it gets near this (STATE_JOURNAL_BYTES_MAX). Both are read a line at a time (the
 * snapshot has one entry a line): what a load holds at once is the entries, and one line of at
 * most STATE_LINE_MAX. */
#define STATE_READ_MAX (256u * 1024u * 1024u)
#define STATE_JOURNAL_BYTES_MAX (64u * 1024u * 1024u)
#define STATE_LINE_MAX (1024u * 1024u)

/* The most a size read back may be (what any kernel takes: 524280), and the least a GSO one may
 * be (the kernel refuses 0); a GRO size of 0 is one the kernel takes. An entry with an original
 * outside is damage: set aside, never written. */
#define STATE_SIZE_MAX 524280u

/* An entry (or a journal line) that was set aside, or of which a part was (`partial`: its
 * originals loaded, its last-good, hold or probation not). */
typedef struct StateAside {
        size_t line;        /* 1-based; 0: not known (a snapshot not written one entry a line) */
        int ifindex;        /* 0: not readable */
        bool partial;
        const char *reason; /* static */
} StateAside;

#define STATE_ASIDE_MAX 8u

/* How reading one file went. */
typedef struct StateReadReport {
        size_t lines;   /* whole lines read */
        size_t n_aside; /* entries or lines set aside (or partly), the first STATE_ASIDE_MAX of them: */
        StateAside aside[STATE_ASIDE_MAX];
        bool torn_tail;  /* it ends in a line without its newline (a write cut short) */
        bool truncated;  /* a snapshot that ends before its end ("]}"): its entries up to there loaded */
        bool bad_header; /* a snapshot whose first line is not a header of this version: its entries
                          * read all the same, each checked, and the journal's newest lines replayed */
        size_t trailing; /* lines after a snapshot's end, ignored */
} StateReadReport;

/* Journal lines are of this generation when the snapshot's is not known (its header is damaged):
 * the journal's newest lines are replayed. */
#define STATE_GENERATION_UNKNOWN UINT64_MAX

/* Parse a snapshot held in memory (for the loader's tests and the fuzzer). Each ifindex appears
 * once in the result: of several entries for one device, the last is kept (as in the journal).
 * A bad entry costs only itself: it is set aside (in `ret_report`, may be NULL) and the others
 * load. *ret_generation is STATE_GENERATION_UNKNOWN when the header is damaged. -EFBIG: larger
 * than a snapshot may be; -ENOMEM. */
int state_parse(const char *data, size_t size, StateEntry **ret, size_t *ret_n, uint64_t *ret_generation,
                StateReadReport *ret_report);

/* Replay journal text of `generation` onto `entries`, in order. A whole line that does not parse
 * is set aside and costs only its device (which keeps what it had before the line); a last line
 * without its newline is a write cut short and dropped (it never protected a write: the write
 * waits for the fdatasync). `ret_report` may be NULL. */
int state_journal_apply(const char *data, size_t size, uint64_t generation, StateEntry **entries, size_t *n,
                        StateReadReport *ret_report);

/* Write every device with recorded originals to a new snapshot (write, fsync, rename) of
 * `generation`, then drop the journal. */
int state_write_snapshot(const char *dir, const DeviceTable *t, uint64_t generation);
/* Append the entries of `devices` (a "forget" line for those without originals) after "forget"
 * lines for `forgotten` ifindexes to the journal, then fdatasync. A failed append is truncated
 * back. */
int state_write_journal(const char *dir, uint64_t generation, const Device *const *devices, size_t n_devices,
                        const int *forgotten, size_t n_forgotten);

typedef struct StateStore StateStore;

/* What the store writes with: write(2), ftruncate(2), fsync(2) (fdatasync(2) for the journal) and
 * renameat(2), unless a test puts in its own (to run out of space halfway through a line, or fail
 * at any other point of a save). They return what the system calls do, errno set; a NULL one is
 * the system call (fsync(2) and fdatasync(2) bounded, in durable.c's child). */
typedef struct StateIo {
        ssize_t (*write)(void *userdata, int fd, const void *buf, size_t n);
        int (*ftruncate)(void *userdata, int fd, off_t length);
        int (*fsync)(void *userdata, int fd, bool data_only); /* in the loop, in place of durable.c's */
        int (*renameat)(void *userdata, int dir_fd, const char *from, const char *to);
        void *userdata;
        uint64_t sync_timeout_usec; /* 0: STATE_SYNC_TIMEOUT_USEC */
        const int *sync_gate;       /* durable.c's syncs wait on this gate (durable.h); NULL: none */
} StateIo;

/* How long a save waits for the disk to sync, at most (fsync of a snapshot, fdatasync of an
 * append): a sync still running then fails the save (-ETIMEDOUT), and every save fails at once
 * (-EBUSY) until it returns; the loop never waits longer. Far below WatchdogSec= (30 s). */
#define STATE_SYNC_TIMEOUT_USEC (2u * 1000000u)

int state_store_new(struct event_base *base, const char *dir, const DeviceTable *table, StateStore **ret);
/* Saves what is pending first (errors ignored: nothing is left to tell). */
void state_store_free(StateStore *s);
/* For tests: NULL puts the system calls back. `io` must outlive the store. */
void state_store_set_io(StateStore *s, const StateIo *io);

/* Open the runtime directory (done by the first load or save otherwise, and again when the
 * directory was removed): -EPERM when it cannot be trusted with the state, because it is owned by
 * another user than the daemon's or writable by its group or others; `ret_st` (may be NULL) then
 * says how it is. */
int state_store_open_dir(StateStore *s, struct stat *ret_st);

/* How a load went, for the log. */
typedef struct StateLoadReport {
        int snapshot_error;  /* state.json could not be read at all (not a regular file, too large, an
                              * I/O error); moved aside: */
        bool snapshot_moved; /* … as state.json.corrupt */
        bool snapshot_kept;  /* it was read, but damaged: a copy kept as state.json.corrupt */
        StateReadReport snapshot;
        int journal_error;   /* state.journal could not be read (not a regular file, too large): not replayed, */
        bool journal_moved;  /* … and moved aside as state.journal.corrupt */
        bool journal_kept;   /* it was replayed, but had damaged lines: a copy kept as state.journal.corrupt */
        StateReadReport journal;
} StateLoadReport;

/* Read the snapshot and replay the journal, a line at a time. Missing files: no entries. A bad
 * entry costs only itself; a snapshot cut short or with a damaged header gives what it has (and
 * the journal's newest lines). A damaged file is kept as <name>.corrupt for whoever investigates
 * (a hard link: the file itself stays until the first save replaces it). A snapshot that cannot
 * be read at all (a symlink, a FIFO, larger than STATE_READ_MAX, an I/O error) is moved aside as
 * state.json.corrupt and its error returned with no entries; the daemon then starts from what the
 * kernel shows. A journal that cannot be read never costs the snapshot: moved aside, the
 * snapshot's entries returned. -ENOMEM: nothing was moved. The first save after a load writes a
 * new snapshot. `ret_report` may be NULL. */
int state_store_load(StateStore *s, StateEntry **ret, size_t *ret_n, StateLoadReport *ret_report);

/* Say in the log what of the files was damaged: each entry or line set aside (its line and why,
 * the first STATE_ASIDE_MAX of them), a snapshot cut short, a damaged header. Not the files
 * that could not be read at all (snapshot_error, journal_error): the caller says what follows. */
void state_load_log(const char *dir, const StateLoadReport *rep);

/* The device's entry may have changed (or it lost its originals): journaled at the next save if
 * it differs from the one on disk. */
void state_store_mark(StateStore *s, Device *d);
/* The device is going away: its entry on disk, if it has one, goes at the next save. */
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

/* A save that fails is retried from the loop, 1 s later, then twice as long each time up to 60 s,
 * until one succeeds. `fn` is called (from within that save: it must not write to the kernel
 * itself) by the first save that succeeds after one failed. */
typedef void (*StateRecoveredFn)(void *userdata);
void state_store_on_recovered(StateStore *s, StateRecoveredFn fn, void *userdata);
/* The delay before the next retry; 0 while saves succeed. */
uint64_t state_store_retry_usec(const StateStore *s);
