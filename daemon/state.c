/* state.c — the store: when a device's entry is appended to state.journal and when a new
 * snapshot is written (state-format.c writes both), the retries of a save that failed, and
 * the load that reads them back (state-read.c) and keeps aside what is damaged. Every file is
 * opened relative to the runtime directory, never through a symlink, never blocking on a FIFO. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "log.h"
#include "state-internal.h"

#define STATE_CORRUPT ".corrupt"
#define STATE_SAVE_DELAY_USEC (50u * 1000u)
#define STATE_RETRY_MIN_USEC (1 * USEC_PER_SEC)
#define STATE_RETRY_MAX_USEC (60 * USEC_PER_SEC)
#define STATE_JOURNAL_BYTES_MIN (1u * 1024u * 1024u)
/* A journal longer than the snapshot (and STATE_JOURNAL_BYTES_MIN) is compacted once no line was
 * appended for this long: a burst's lines (two long ones for each device that enters probation) would otherwise stay until
 * twice the snapshot, and a restart after the burst replay them all (snapshot_due()). */
#define STATE_COMPACT_QUIET_USEC (500u * 1000u)

/* Move a file that cannot be ours (unreadable, not a regular file, a symlink) out of the way,
 * over whatever an earlier one left there. */
static int move_aside(int dir_fd, const char *name) {
        _cleanup_(freep) char *to = NULL;

        if (asprintf(&to, "%s" STATE_CORRUPT, name) < 0)
                return -ENOMEM;
        if (renameat(dir_fd, name, dir_fd, to) >= 0)
                return 0;
        if (errno != EEXIST && errno != ENOTEMPTY && errno != EISDIR && errno != ENOTDIR)
                return -errno;
        /* the one before is of another type (a directory over a file, or one not empty) */
        if (unlinkat(dir_fd, to, 0) < 0 && unlinkat(dir_fd, to, AT_REMOVEDIR) < 0)
                return -errno;
        return renameat(dir_fd, name, dir_fd, to) < 0 ? -errno : 0;
}

/* What a file the daemon writes may not be: a symlink (-ELOOP), a directory (-EISDIR), a FIFO
 * without a reader (-ENXIO: opened O_NONBLOCK, so open() does not wait for one) or anything else
 * but a regular file (-EBADF). */
static bool is_not_regular_error(int r) {
        return r == -ELOOP || r == -EISDIR || r == -ENXIO || r == -EBADF;
}

/* ---- the store ---- */

struct StateStore {
        char *dir;
        int dir_fd; /* -1 until opened */
        const DeviceTable *table;
        const StateIo *io;
        struct event *save_event;
        struct event *quiet_event; /* STATE_COMPACT_QUIET_USEC after the last append */
        uint64_t generation;
        size_t journal_lines;
        uint64_t journal_bytes;  /* the journal's size after the last append */
        uint64_t snapshot_bytes; /* the last snapshot's */
        bool compact;  /* the next save writes a snapshot */
        bool pending;  /* a save is owed */
        bool failing;  /* the last save failed: save_event is the retry */
        uint64_t retry_usec;
        StateRecoveredFn recovered;
        void *recovered_userdata;
        uint8_t key[16]; /* of entry_hash(): this run's, unknown to anyone else */
        Device **dirty; /* marked since the last save: perhaps changed */
        size_t n_dirty, cap_dirty;
        int *forgotten; /* ifindexes of devices that went away */
        size_t n_forgotten, cap_forgotten;
};

static void arm(StateStore *s, uint64_t usec) {
        struct timeval tv = {.tv_sec = (time_t) (usec / USEC_PER_SEC), .tv_usec = (suseconds_t) (usec % USEC_PER_SEC)};
        (void) evtimer_add(s->save_event, &tv);
}

static void on_save(evutil_socket_t fd, short what, void *userdata) {
        StateStore *s = userdata;
        bool retry = s->failing;
        int r;

        if (!s->pending)
                return;
        r = state_store_save(s);
        if (r >= 0)
                return;
        if (retry) {
                s->retry_usec = s->retry_usec * 2 < STATE_RETRY_MAX_USEC ? s->retry_usec * 2 : STATE_RETRY_MAX_USEC;
                log_debug_errno(r, "Failed again to write the state file in %s: %m; next try in %llus", s->dir,
                                (unsigned long long) (s->retry_usec / USEC_PER_SEC));
        } else
                log_error_errno(r, "Failed to write the state file in %s: %m; trying again in %llus, then less often",
                                s->dir, (unsigned long long) (s->retry_usec / USEC_PER_SEC));
        arm(s, s->retry_usec);
}

/* The journal has had no line for a while: replaying it costs a restart more than the snapshot. */
static void on_quiet(evutil_socket_t fd, short what, void *userdata) {
        StateStore *s = userdata;

        if (s->journal_bytes > s->snapshot_bytes)
                state_store_compact(s);
}

int state_store_new(struct event_base *base, const char *dir, const DeviceTable *table, StateStore **ret) {
        StateStore *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        s->dir_fd = -1;
        s->table = table;
        random_bytes(s->key, sizeof(s->key));
        s->dir = strdup(dir);
        s->save_event = evtimer_new(base, on_save, s);
        s->quiet_event = evtimer_new(base, on_quiet, s);
        if (!s->dir || !s->save_event || !s->quiet_event) {
                state_store_free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

void state_store_free(StateStore *s) {
        if (!s)
                return;
        s->recovered = NULL; /* whoever listened is going away too */
        if (s->pending)
                (void) state_store_save(s);
        if (s->save_event)
                event_free(s->save_event);
        if (s->quiet_event)
                event_free(s->quiet_event);
        for (size_t i = 0; i < s->n_dirty; i++)
                s->dirty[i]->store.dirty = false;
        free(s->dirty);
        free(s->forgotten);
        closep(&s->dir_fd);
        free(s->dir);
        free(s);
}

void state_store_set_io(StateStore *s, const StateIo *io) {
        s->io = io;
}

const char *state_store_dir(const StateStore *s) {
        return s->dir;
}

void state_store_on_recovered(StateStore *s, StateRecoveredFn fn, void *userdata) {
        s->recovered = fn;
        s->recovered_userdata = userdata;
}

uint64_t state_store_retry_usec(const StateStore *s) {
        return s->failing ? s->retry_usec : 0;
}

int state_store_open_dir(StateStore *s, struct stat *ret_st) {
        _cleanup_(closep) int fd = state_open_dir(s->dir);
        struct stat st;

        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (ret_st)
                *ret_st = st;
        /* Whoever else may write there could put a symlink or a FIFO where the daemon writes, or a
         * state of their own making in place of the daemon's. */
        if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
                return -EPERM;
        closep(&s->dir_fd);
        s->dir_fd = TAKE_FD(fd);
        return 0;
}

static int store_dir(StateStore *s) {
        if (s->dir_fd < 0) {
                int r = state_store_open_dir(s, NULL);
                if (r < 0)
                        return r;
        }
        return s->dir_fd;
}

/* Every save ends here. A failure keeps what was owed pending and arms the retry (unless a save is
 * due already); the first success after failures says so to whoever listens. */
static int save_ended(StateStore *s, int r) {
        struct stat st;

        if (r < 0) {
                /* the directory was removed (and may come back): it is opened again next time */
                if (r == -ENOENT && s->dir_fd >= 0 && fstat(s->dir_fd, &st) >= 0 && st.st_nlink == 0)
                        closep(&s->dir_fd), s->dir_fd = -1;
                s->pending = true;
                if (!s->failing) {
                        s->failing = true;
                        s->retry_usec = STATE_RETRY_MIN_USEC;
                }
                if (!evtimer_pending(s->save_event, NULL))
                        arm(s, s->retry_usec);
                return r;
        }
        if (s->failing) {
                s->failing = false;
                s->retry_usec = 0;
                log_notice("The state file in %s is written again", s->dir);
                if (s->recovered)
                        s->recovered(s->recovered_userdata);
        }
        return r;
}

/* A copy of a damaged file for whoever investigates, over whatever an earlier one left there: a hard
 * link, so that the file itself stays where it is until a save replaces it (a kill before then
 * loads it again, with the same result). */
static int keep_aside(int dir_fd, const char *name) {
        _cleanup_(freep) char *to = NULL;

        if (asprintf(&to, "%s" STATE_CORRUPT, name) < 0)
                return -ENOMEM;
        if (unlinkat(dir_fd, to, 0) < 0 && errno == EISDIR)
                (void) unlinkat(dir_fd, to, AT_REMOVEDIR);
        return linkat(dir_fd, name, dir_fd, to, 0) < 0 ? -errno : 0;
}

/* Open one of the state files to read: a regular file of at most STATE_READ_MAX, never through a
 * symlink (-ELOOP), never waiting on a FIFO (-EBADF, as anything else that is not a regular file;
 * -EISDIR for a directory). */
static int open_state_file(int dir_fd, const char *name, size_t *ret_size) {
        struct stat st;
        int fd = open_file_bounded_at(dir_fd, name, STATE_READ_MAX, READ_FILE_REGULAR | READ_FILE_NOFOLLOW, &st);

        if (fd >= 0)
                *ret_size = (size_t) st.st_size;
        return fd;
}

static bool damaged(const StateReadReport *r) {
        return r->n_aside > 0 || r->truncated || r->bad_header || r->trailing > 0;
}

int state_store_load(StateStore *s, StateEntry **ret, size_t *ret_n, StateLoadReport *ret_report) {
        _cleanup_(closep) int fd = -1;
        StateLoadReport rep = {};
        Entries x = {};
        Lines l;
        size_t size = 0;
        uint64_t generation = 0;
        int dir_fd, r;

        /* the first save after a start compacts snapshot and journal into a new snapshot */
        s->compact = true;
        *ret = NULL;
        *ret_n = 0;
        dir_fd = store_dir(s);
        if (dir_fd == -ENOENT)
                goto finish; /* no directory, no state */
        if (dir_fd < 0)
                return dir_fd;

        fd = open_state_file(dir_fd, STATE_FILE, &size);
        r = fd;
        if (fd >= 0) {
                state_lines_init_fd(&l, fd);
                r = state_read_snapshot(&l, size, &x, &generation, &rep.snapshot);
                state_lines_done(&l);
        }
        if (r == -ENOMEM) {
                state_entries_index_free(&x);
                return r;
        }
        if (r < 0 && r != -ENOENT) {
                /* Not a file of the daemon's (a symlink or FIFO itself, never what it leads to), or
                 * one that cannot be read: kept for whoever investigates; a new snapshot takes its
                 * place at the next save. The journal's lines are of its generation: without it
                 * they say nothing, and the next snapshot drops them. */
                state_entries_index_free(&x);
                rep.snapshot_error = r;
                rep.snapshot_moved = move_aside(dir_fd, STATE_FILE) >= 0;
                if (ret_report)
                        *ret_report = rep;
                return r;
        }
        if (r >= 0 && damaged(&rep.snapshot))
                rep.snapshot_kept = keep_aside(dir_fd, STATE_FILE) >= 0;
        closep(&fd);

        fd = open_state_file(dir_fd, STATE_JOURNAL, &size);
        r = fd;
        if (fd >= 0) {
                state_lines_init_fd(&l, fd);
                r = state_read_journal(&l, generation, &x, &rep.journal);
                state_lines_done(&l);
                if (r >= 0 && damaged(&rep.journal))
                        rep.journal_kept = keep_aside(dir_fd, STATE_JOURNAL) >= 0;
        }
        if (r == -ENOMEM) {
                state_entries_index_free(&x);
                return r;
        }
        if (r < 0 && r != -ENOENT) {
                /* A directory, a FIFO, a symlink, more than a journal ever grows to, an I/O error:
                 * not the daemon's journal, and no reason to doubt the snapshot. */
                rep.journal_error = r;
                rep.journal_moved = move_aside(dir_fd, STATE_JOURNAL) >= 0;
        }
        s->generation = generation == STATE_GENERATION_UNKNOWN ? 0 : generation;
        state_entries_index_done(&x, ret, ret_n);
finish:
        if (ret_report)
                *ret_report = rep;
        return 0;
}

static void log_read(const char *dir, const char *name, const StateReadReport *r, bool kept) {
        const char *copy = kept ? ", a copy kept as " : "";

        for (size_t i = 0; i < r->n_aside && i < STATE_ASIDE_MAX; i++) {
                const StateAside *a = &r->aside[i];
                char where[64] = "", dev[32] = "";
                if (a->line > 0)
                        snprintf(where, sizeof(where), " line %zu", a->line);
                if (a->ifindex > 0)
                        snprintf(dev, sizeof(dev), " (ifindex %d)", a->ifindex);
                if (a->partial)
                        log_warning("%s/%s%s%s: damaged: %s; its original sizes are kept", dir, name, where, dev,
                                    a->reason);
                else
                        log_warning("%s/%s%s%s: entry set aside: %s; %s", dir, name, where, dev, a->reason,
                                    a->ifindex > 0 ? "the device keeps what it had before it, if anything"
                                                   : "the others are loaded");
        }
        if (r->n_aside > STATE_ASIDE_MAX)
                log_warning("%s/%s: %zu more entries set aside", dir, name, r->n_aside - STATE_ASIDE_MAX);
        if (r->bad_header)
                log_warning("%s/%s: its first line is not a header bigtcpd reads: its entries were read all the "
                            "same, each checked, and the journal's newest lines replayed", dir, name);
        if (r->truncated)
                log_warning("%s/%s is cut short after line %zu: the entries up to there are loaded", dir, name,
                            r->lines);
        if (r->trailing > 0)
                log_warning("%s/%s: %zu lines after its end ignored", dir, name, r->trailing);
        if (r->torn_tail && !r->truncated)
                log_info("%s/%s ends in a line cut short by a crash: dropped it", dir, name);
        if (damaged(r))
                log_notice("%s/%s: damaged%s%s%s", dir, name, copy, kept ? name : "", kept ? STATE_CORRUPT : "");
}

void state_load_log(const char *dir, const StateLoadReport *rep) {
        if (rep->snapshot_error >= 0)
                log_read(dir, STATE_FILE, &rep->snapshot, rep->snapshot_kept);
        if (rep->journal_error >= 0)
                log_read(dir, STATE_JOURNAL, &rep->journal, rep->journal_kept);
}

/* What must be on disk before a write is saved then (state_store_save_devices()); everything
 * else a moment later, so that the changes of a burst (a state, then baselines, then an ack)
 * are one journal line, not three. */
static void schedule(StateStore *s) {
        s->pending = true;
        if (!evtimer_pending(s->save_event, NULL))
                arm(s, STATE_SAVE_DELAY_USEC);
}

/* Everything marked is on disk: the lists are empty, and a burst's room goes with it (10000
 * devices marked at a start kept 128 KiB resident for a list of none). */
static void lists_clear(StateStore *s) {
        for (size_t i = 0; i < s->n_dirty; i++)
                s->dirty[i]->store.dirty = false;
        s->n_dirty = s->n_forgotten = 0;
        if (s->cap_dirty > 64) {
                s->dirty = mfree(s->dirty);
                s->cap_dirty = 0;
        }
        if (s->cap_forgotten > 64) {
                s->forgotten = mfree(s->forgotten);
                s->cap_forgotten = 0;
        }
}

static void unmark(StateStore *s, Device *d) {
        size_t i = d->store.dirty_index;
        s->dirty[i] = s->dirty[--s->n_dirty];
        s->dirty[i]->store.dirty_index = (uint32_t) i;
        d->store.dirty = false;
}

void state_store_mark(StateStore *s, Device *d) {
        if (!d->store.dirty) {
                if (s->n_dirty == s->cap_dirty) {
                        size_t cap = s->cap_dirty ? s->cap_dirty * 2 : 64;
                        Device **x = reallocarray(s->dirty, cap, sizeof(Device *));
                        if (!x) {
                                s->compact = true; /* no memory for the list: write everything */
                                schedule(s);
                                return;
                        }
                        s->dirty = x;
                        s->cap_dirty = cap;
                }
                d->store.dirty = true;
                d->store.dirty_index = (uint32_t) s->n_dirty; /* at most one per device */
                s->dirty[s->n_dirty++] = d;
        }
        schedule(s);
}

void state_store_forget(StateStore *s, Device *d) {
        /* an entry on disk: a "forget" line (one only owed to it is not written now) */
        bool owed = d->store.saved != 0;

        if (d->store.dirty)
                unmark(s, d); /* the list holds pointers: this one must not outlive its device */
        if (!owed)
                return;
        if (s->n_forgotten == s->cap_forgotten) {
                size_t cap = s->cap_forgotten ? s->cap_forgotten * 2 : 64;
                int *x = reallocarray(s->forgotten, cap, sizeof(int));
                if (!x) {
                        s->compact = true;
                        schedule(s);
                        return;
                }
                s->forgotten = x;
                s->cap_forgotten = cap;
        }
        s->forgotten[s->n_forgotten++] = d->ifindex;
        schedule(s);
}

void state_store_compact(StateStore *s) {
        s->compact = true;
        schedule(s);
}

static bool holds_any(const DeviceTable *t) {
        const Device *d;
        DEVICE_FOREACH(d, t, it)
                if (d->record.has_original)
                        return true;
        return false;
}

/* A new snapshot once the journal has as many lines as twice the table, or as many bytes as twice
 * the last snapshot (lines of devices in probation are long): replaying it never costs more than
 * a few snapshots' worth, and it stays far below what a load reads (STATE_READ_MAX). And when no
 * device is held any more (the last one restored or gone): an empty snapshot and no journal say
 * outright that no original sizes are held (the package's postrm reads that of a bigtcpd that
 * was not stopped). */
static bool snapshot_due(const StateStore *s, size_t more) {
        size_t limit = s->table->n_devices * 2 > 1024 ? s->table->n_devices * 2 : 1024;
        uint64_t bytes = s->snapshot_bytes * 2;

        if (bytes < STATE_JOURNAL_BYTES_MIN)
                bytes = STATE_JOURNAL_BYTES_MIN;
        if (bytes > STATE_JOURNAL_BYTES_MAX)
                bytes = STATE_JOURNAL_BYTES_MAX;
        return s->compact || s->journal_lines + more > limit || s->journal_bytes >= bytes ||
               (more > 0 && !holds_any(s->table));
}

static int save_snapshot(StateStore *s) {
        size_t size;
        int fd, r;

        fd = store_dir(s);
        if (fd < 0)
                return fd;
        r = state_write_snapshot_at(fd, s->table, s->generation + 1, s->io, s->key, &size);
        if (r < 0) {
                /* its hashes are in the devices, but it is not on disk: no line may count on them */
                s->compact = true;
                return r;
        }
        s->generation++;
        s->journal_lines = 0;
        s->journal_bytes = 0;
        s->snapshot_bytes = size;
        s->compact = false;
        lists_clear(s);
        s->pending = false;
        return 0;
}

/* Append the lines of every forgotten device and of those of `devices` whose entry changed since
 * it was last written (*ret_written: whether there was any). 1: a snapshot must be written instead,
 * because one is due (snapshot_due()) or the journal is not a file the daemon can append to (a
 * symlink, a FIFO, a directory put in its place: moved aside). */
static int save_journal(StateStore *s, const Device *const *devices, size_t n_devices, bool *ret_written) {
        _cleanup_(freep) uint64_t *hashes = NULL;
        Out o = {};
        uint64_t size;
        size_t lines;
        bool torn = false;
        int fd, r;

        *ret_written = false;
        hashes = calloc(n_devices + 1, sizeof(uint64_t));
        if (!hashes)
                return -ENOMEM;
        r = state_format_journal(s->generation, devices, n_devices, s->forgotten, s->n_forgotten, s->key,
                                 hashes, &o, &lines);
        if (r < 0 || lines == 0 || snapshot_due(s, lines)) {
                free(o.buf);
                return r < 0 ? r : lines > 0;
        }
        fd = store_dir(s);
        if (fd < 0) {
                free(o.buf);
                return fd;
        }
        r = state_journal_append(fd, o.buf, o.len, s->io, &size, &torn);
        free(o.buf);
        if (torn)
                s->compact = true; /* the journal may end in a torn line: no line may follow it */
        if (is_not_regular_error(r)) {
                int k = move_aside(fd, STATE_JOURNAL);
                if (k < 0)
                        log_warning_errno(k, "Failed to move %s/" STATE_JOURNAL " aside, which is not a regular "
                                             "file (%s): %m", s->dir, strerror(-r));
                else
                        log_warning("%s/" STATE_JOURNAL " is not a regular file (%s): moved aside as " STATE_JOURNAL
                                    STATE_CORRUPT ", writing a new snapshot instead", s->dir, strerror(-r));
                return 1;
        }
        if (r < 0)
                return r;
        for (size_t i = 0; i < n_devices; i++)
                ((Device *) devices[i])->store.saved = hashes[i];
        s->journal_lines += lines;
        s->journal_bytes = size;
        *ret_written = true;
        if (s->journal_bytes > s->snapshot_bytes && s->journal_bytes >= STATE_JOURNAL_BYTES_MIN) {
                struct timeval tv = {.tv_usec = STATE_COMPACT_QUIET_USEC};
                (void) evtimer_add(s->quiet_event, &tv); /* (again: from this line on) */
        }
        return 0;
}

int state_store_save(StateStore *s) {
        bool written = false;
        int r;

        if (s->compact)
                return save_ended(s, save_snapshot(s));
        if (s->n_dirty + s->n_forgotten > 0) {
                r = save_journal(s, (const Device *const *) s->dirty, s->n_dirty, &written);
                if (r > 0)
                        return save_ended(s, save_snapshot(s));
                if (r < 0)
                        return save_ended(s, r);
        }
        if (!written && s->failing)
                /* Nothing changed since the save that failed, or nothing that is not on disk
                 * already (a device refused for it lost the originals it never saved): a snapshot
                 * proves the disk takes a write again before whoever waits for that is told. */
                return save_ended(s, save_snapshot(s));
        lists_clear(s);
        s->pending = false;
        return save_ended(s, 0);
}

int state_store_save_devices(StateStore *s, Device *const *devices, size_t n) {
        _cleanup_(freep) const Device **l = NULL;
        bool written = false;
        size_t k = 0;
        int r;

        if (s->compact)
                return save_ended(s, save_snapshot(s));
        l = calloc(n + 1, sizeof(Device *));
        if (!l)
                return save_ended(s, -ENOMEM);
        for (size_t i = 0; i < n; i++)
                if (devices[i]->store.dirty)
                        l[k++] = devices[i];
        if (k + s->n_forgotten == 0)
                return 0;
        r = save_journal(s, l, k, &written);
        if (r > 0)
                return save_ended(s, save_snapshot(s));
        if (r < 0)
                return save_ended(s, r);
        s->n_forgotten = 0;
        for (size_t i = 0; i < k; i++)
                unmark(s, (Device *) l[i]);
        s->pending = s->n_dirty > 0 || (!written && s->failing);
        return written ? save_ended(s, 0) : 0;
}

bool state_store_pending(const StateStore *s) {
        return s->pending;
}