/* state-internal.h — what the state module's own files share (state.c, the store;
 * state-format.c, the files written; state-read.c, the files read back), and no one else
 * includes: the buffer a file is formatted into, the entries and lines being read, and the steps
 * the store runs a save and a load with. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state.h"

#define STATE_FILE "state.json"
#define STATE_JOURNAL "state.journal"

/* The file is written on every batch of first writes, so it is produced straight into a buffer
 * rather than through a json-c object tree (which costs several allocations per field). */
typedef struct Out {
        char *buf;
        size_t len, cap;
        bool oom;
        /* A snapshot goes to its file as it is formatted, in pieces of OUT_DRAIN bytes: it is the
         * whole table (tens of MB at tens of thousands of devices), never held whole. */
        bool sink; /* false: all in buf */
        int fd;
        const StateIo *io; /* NULL: write(2) */
        size_t flushed;
        int error;
} Out;

/* The entries being read, indexed by ifindex (open addressing; 0 is no ifindex): each line of a
 * journal looked its device up in the whole list once, and 37000 devices with a journal of twice
 * as many lines took 10 s to load. A dropped entry leaves a hole (all zero, ifindex 0) that a later
 * entry of its device fills, and state_entries_index_done() closes up. One entry per device: a restart hands
 * each entry's probation and rollback record to its device, which a second entry would corrupt. */
typedef struct EntrySlot {
        int ifindex;
        size_t pos;
} EntrySlot;

typedef struct Entries {
        StateEntry *items;
        size_t n, cap;
        EntrySlot *slots;
        size_t n_slots, used;
} Entries;

/* Text from a file (read in pieces of READ_CHUNK) or from memory, cut into lines. */
typedef struct Lines {
        int fd; /* -1: from memory */
        const char *mem;
        size_t mem_size, mem_off;
        char *buf;
        size_t start, len, cap; /* the unread text is buf[start, len) */
        bool eof;
        size_t line; /* 1-based, of the last line returned */
} Lines;

/* ---- state-format.c ---- */

/* Write every device with recorded originals to a new snapshot in `dir_fd` (write, fsync, rename),
 * then drop the journal; with `key`, each device's Device.store.saved becomes its entry's hash.
 * *ret_size (may be NULL): the snapshot's size. */
int state_write_snapshot_at(int dir_fd, const DeviceTable *t, uint64_t generation, const StateIo *io,
                            const uint8_t *key, size_t *ret_size);
/* Format the journal's lines for `forgotten` and `devices` into `o` (with `key`, only those that
 * change what is on disk, their hashes in `hashes`); *ret_lines: how many. */
int state_format_journal(uint64_t generation, const Device *const *devices, size_t n_devices,
                         const int *forgotten, size_t n_forgotten, const uint8_t *key, uint64_t *hashes,
                         Out *o, size_t *ret_lines);
/* Append whole lines to the journal in `dir_fd` and fdatasync; one that fails is cut back (*torn
 * when even that failed). *ret_size: the journal's size after it. */
int state_journal_append(int dir_fd, const char *buf, size_t len, const StateIo *io, uint64_t *ret_size,
                         bool *torn);
/* The runtime directory, opened to write and read relative to it: an fd, or -errno. */
int state_open_dir(const char *dir);

/* ---- state-read.c ---- */

/* Read `fd` a line at a time (from its current offset); state_lines_done() frees what was read. */
void state_lines_init_fd(Lines *l, int fd);
void state_lines_done(Lines *l);
/* Read a whole snapshot (`size`: the file's) into `x`: its generation (STATE_GENERATION_UNKNOWN
 * for a damaged header) and in *rep what was set aside. Only -ENOMEM and I/O errors fail. */
int state_read_snapshot(Lines *l, size_t size, Entries *x, uint64_t *ret_generation, StateReadReport *rep);
/* Replay the journal's lines of `generation` onto `x` (of its newest when it is
 * STATE_GENERATION_UNKNOWN); *rep: what was set aside. */
int state_read_journal(Lines *l, uint64_t generation, Entries *x, StateReadReport *rep);
/* Hand the entries out, holes closed up, and empty `x`. */
void state_entries_index_done(Entries *x, StateEntry **ret, size_t *ret_n);
/* Free the entries and empty `x`. */
void state_entries_index_free(Entries *x);
