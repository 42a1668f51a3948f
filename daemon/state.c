/* state.c — state.json and state.journal: their format, reading and writing, and the store
 * that decides when to append and when to write a new snapshot. Every file is opened relative to
 * the runtime directory, never through a symlink, never blocking on a FIFO. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <json-c/json.h>
#include <stdio.h>
#include <sys/stat.h>

#include "counters.h"
#include "durable.h"
#include "log.h"
#include "auto-size.h"
#include "state.h"

#define STATE_FILE "state.json"
#define STATE_TMP ".state.json.tmp"
#define STATE_JOURNAL "state.journal"
#define STATE_CORRUPT ".corrupt"
#define STATE_SAVE_DELAY_USEC (50u * 1000u)
#define STATE_RETRY_MIN_USEC (1 * USEC_PER_SEC)
#define STATE_RETRY_MAX_USEC (60 * USEC_PER_SEC)
#define STATE_JOURNAL_BYTES_MIN (1u * 1024u * 1024u)
/* A journal longer than the snapshot (and STATE_JOURNAL_BYTES_MIN) is compacted once no line was
 * appended for this long: a burst's lines (two long ones for each device that enters probation) would otherwise stay until
 * twice the snapshot, and a restart after the burst replay them all (snapshot_due()). */
#define STATE_COMPACT_QUIET_USEC (500u * 1000u)

static ssize_t io_write(const StateIo *io, int fd, const void *p, size_t n) {
        return io && io->write ? io->write(io->userdata, fd, p, n) : write(fd, p, n);
}

static int io_ftruncate(const StateIo *io, int fd, off_t length) {
        return io && io->ftruncate ? io->ftruncate(io->userdata, fd, length) : ftruncate(fd, length);
}

/* Bounded: a disk that takes longer than STATE_SYNC_TIMEOUT_USEC fails the save (the writes that
 * waited for it are refused until a save succeeds), the loop goes on (durable.h). */
static int io_fsync(const StateIo *io, int fd, bool data_only) {
        if (io && io->fsync)
                return io->fsync(io->userdata, fd, data_only);
        int r = durable_sync(fd, data_only, io && io->sync_timeout_usec ? io->sync_timeout_usec : STATE_SYNC_TIMEOUT_USEC,
                             io && io->sync_gate ? *io->sync_gate : -1);
        if (r < 0) {
                errno = -r;
                return -1;
        }
        return 0;
}

static int io_renameat(const StateIo *io, int dir_fd, const char *from, const char *to) {
        return io && io->renameat ? io->renameat(io->userdata, dir_fd, from, to) : renameat(dir_fd, from, dir_fd, to);
}

static int write_all(const StateIo *io, int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = io_write(io, fd, p, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EIO;
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

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

#define OUT_DRAIN (64u * 1024u)

static void out_reserve(Out *o, size_t n) {
        if (o->oom || o->len + n + 1 <= o->cap)
                return;
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n + 1)
                cap *= 2;
        char *b = realloc(o->buf, cap);
        if (!b) {
                o->oom = true;
                return;
        }
        o->buf = b;
        o->cap = cap;
}

/* Formats into the room left, and only when that is too small grows the buffer and formats
 * again: the state file is on the write path of every first write. */
_printf_(2, 3) static void out_printf(Out *o, const char *fmt, ...) {
        size_t room = o->cap - o->len;
        va_list ap;
        int n;

        if (o->oom)
                return;
        va_start(ap, fmt);
        n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->buf ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
                o->oom = true;
                return;
        }
        if ((size_t) n >= room) {
                out_reserve(o, (size_t) n);
                if (o->oom)
                        return;
                va_start(ap, fmt);
                vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
                va_end(ap);
        }
        o->len += (size_t) n;
}

static void out_bytes(Out *o, const char *p, size_t n) {
        out_reserve(o, n);
        if (o->oom)
                return;
        memcpy(o->buf + o->len, p, n);
        o->len += n;
        o->buf[o->len] = '\0';
}

/* A JSON string: names come from the kernel and may hold quotes or control characters. Runs of
 * plain characters are copied whole. */
static void out_string(Out *o, const char *s) {
        const char *p = s ?: "", *run = p;

        out_bytes(o, "\"", 1);
        for (; *p; p++) {
                unsigned char c = (unsigned char) *p;
                if (c != '"' && c != '\\' && c >= 0x20 && c != 0x7f)
                        continue;
                out_bytes(o, run, (size_t) (p - run));
                if (c == '"' || c == '\\')
                        out_printf(o, "\\%c", c);
                else
                        out_printf(o, "\\u%04x", c);
                run = p + 1;
        }
        out_bytes(o, run, (size_t) (p - run));
        out_bytes(o, "\"", 1);
}

static void out_sizes(Out *o, const char *key, const Sizes *s) {
        out_printf(o, ",\"%s\":{\"gso_max_size\":%u,\"gro_max_size\":%u,\"gso_ipv4_max_size\":%u,\"gro_ipv4_max_size\":%u}",
                   key, s->gso_max_size, s->gro_max_size, s->gso_ipv4_max_size, s->gro_ipv4_max_size);
}

static void out_probation(Out *o, const Probation *p) {
        out_printf(o, ",\"probation\":{\"until_boottime_usec\":%llu,\"window_usec\":%llu,\"interval_usec\":%llu,\"guards\":[",
                   (unsigned long long) p->until_usec, (unsigned long long) p->window_usec,
                   (unsigned long long) p->interval_usec);
        for (size_t i = 0; i < p->guards.n; i++) {
                const GuardState *g = &p->guards.items[i];
                out_printf(o, "%s{\"counter\":", i ? "," : "");
                out_string(o, g->counter);
                if (g->per) {
                        out_printf(o, ",\"per\":");
                        out_string(o, g->per);
                }
                if (g->has_max_increase)
                        out_printf(o, ",\"max_increase\":%llu", (unsigned long long) g->max_increase);
                if (g->has_max_ratio && isfinite(g->max_ratio)) /* JSON has no inf */
                        out_printf(o, ",\"max_ratio\":%.17g", g->max_ratio);
                out_printf(o, ",\"active\":%s,\"have_base\":%s,\"base\":%llu,\"per_base\":%llu}",
                           g->active ? "true" : "false", g->have_base ? "true" : "false",
                           (unsigned long long) g->base, (unsigned long long) g->per_base);
        }
        out_printf(o, "]}");
}

static void out_rollback(Out *o, const RollbackRecord *r) {
        out_printf(o, ",\"last_rollback\":{\"counter\":");
        out_string(o, r->counter);
        if (r->per) {
                out_printf(o, ",\"per\":");
                out_string(o, r->per);
        }
        out_printf(o, ",\"rise\":%llu,\"per_rise\":%llu,\"threshold\":%.17g,\"namespace_wide\":%s,\"time_usec\":%llu",
                   (unsigned long long) r->rise, (unsigned long long) r->per_rise,
                   isfinite(r->threshold) ? r->threshold : 0.0, r->namespace_wide ? "true" : "false",
                   (unsigned long long) r->realtime_usec);
        out_sizes(o, "from", &r->from);
        out_sizes(o, "to", &r->to);
        out_printf(o, "}");
}

/* The searches of `auto`, one object for each size searched: what a restart needs of each. An idle
 * search is written as one watching, without the time of its next watch: that time moves at every
 * watch (and a deferred one's at every window), and an entry that moved with it was written again
 * each time — the state file of 1000 idle devices, none of them ever written, 900 times a minute.
 * Its wait is written only once it is at its most (AUTO_IDLE_WAIT_MAX_USEC), else as none: it
 * doubles at every idle watch, a dozen times in its first hour. A restart watches it once more,
 * and its wait doubles again from the window, a few more short watches in the hour after. */
static void out_auto(Out *o, const AutoDevice *a) {
        bool first = true;

        out_printf(o, ",\"auto\":[");
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (!(a->sizes & (1u << i)) || auto_device_search(a, i)->phase == AUTO_NEW)
                        continue;
                const AutoSearch *s = auto_device_search(a, i);
                AutoPhase phase = s->phase == AUTO_IDLE ? AUTO_WATCHING : s->phase;
                uint64_t idle_wait = s->idle_wait_usec >= AUTO_IDLE_WAIT_MAX_USEC ? AUTO_IDLE_WAIT_MAX_USEC : 0;
                out_printf(o, "%s{\"size\":\"%s\",\"phase\":\"%s\",\"min\":%u,\"max\":%u,\"proven\":%u,"
                              "\"proven_packets\":%llu,\"trying\":%u,\"ceiling\":%u,\"ceiling_usec\":%llu,\"counter\":",
                           first ? "" : ",", size_name(i), auto_phase_to_string(phase), s->min, s->max, s->proven,
                           (unsigned long long) s->proven_packets, s->trying, s->ceiling,
                           (unsigned long long) s->ceiling_usec);
                out_string(o, s->ceiling_counter);
                out_printf(o, ",\"rise\":%llu,\"reprobe\":%s,\"retry_usec\":0,\"idle_wait_usec\":%llu,\"steps\":%u,"
                              "\"trips\":%u}",
                           (unsigned long long) s->ceiling_rise, s->reprobe ? "true" : "false",
                           (unsigned long long) idle_wait, s->steps, s->trips);
                first = false;
        }
        out_printf(o, "]");
}

/* The sizes bigtcpd owns on the device, and those a write of its policy queued or in flight will
 * own once it lands: the entry saved before that write must have them given back should a kill
 * come after the write and before the entry saved after its ack. (Giving back a size the write
 * never reached writes its original, which it most likely still holds.) */
static unsigned written_or_writing(const Device *d) {
        unsigned w = d->record.written;

        if (d->write.phase != WRITE_IDLE && write_cause_is_policy(d->write.cause))
                w |= d->write.owned;
        return w;
}

static void out_device(Out *o, const Device *d) {
        unsigned written = written_or_writing(d);
        bool first = true;

        out_printf(o, "{\"ifindex\":%d,\"ifname\":", d->ifindex);
        out_string(o, d->ifname);
        out_printf(o, ",\"kind\":");
        out_string(o, d->kind ?: "");
        char mac[DEVICE_MAC_STRLEN];
        out_printf(o, ",\"mac\":");
        out_string(o, device_identity_mac(d, mac));
        out_sizes(o, "original", &d->record.original);
        out_printf(o, ",\"written\":[");
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (written & (1u << i)) {
                        out_printf(o, "%s\"%s\"", first ? "" : ",", size_name(i));
                        first = false;
                }
        out_printf(o, "]");
        out_printf(o, ",\"state\":\"%s\"", device_state_to_string(d->life.state));
        if (d->record.has_last_good)
                out_sizes(o, "last_good", &d->record.last_good);
        if (d->record.proven.n > 0) {
                out_printf(o, ",\"proven\":[");
                for (unsigned i = 0; i < d->record.proven.n; i++) {
                        const Sizes *p = &d->record.proven.items[i];
                        out_printf(o, "%s{\"gso_max_size\":%u,\"gro_max_size\":%u,\"gso_ipv4_max_size\":%u,\"gro_ipv4_max_size\":%u}",
                                   i ? "," : "", p->gso_max_size, p->gro_max_size, p->gso_ipv4_max_size,
                                   p->gro_ipv4_max_size);
                }
                out_printf(o, "]");
        }
        if (d->life.held)
                out_sizes(o, "held", &device_history_get(d)->held_desired);
        if (d->probation)
                out_probation(o, d->probation);
        if (device_history_get(d)->last_rollback)
                out_rollback(o, d->history->last_rollback);
        if (d->autosize)
                out_auto(o, d->autosize);
        out_printf(o, "}");
}

/* What is in the buffer goes to the sink (with one: `all`, or once there is OUT_DRAIN of it). */
static void out_drain(Out *o, bool all) {
        int r;

        if (!o->sink || o->oom || o->error < 0 || o->len == 0 || (!all && o->len < OUT_DRAIN))
                return;
        r = write_all(o->io, o->fd, o->buf, o->len);
        if (r < 0) {
                o->error = r;
                return;
        }
        o->flushed += o->len;
        o->len = 0;
}

/* The store's hash of an entry's text (a device's object, as both files have it): what it compares
 * a device's entry with before it writes it again. Keyed: a name that a pod chooses is in it. 0 is
 * no entry. */
static uint64_t entry_hash(const uint8_t *key, const char *entry, size_t size) {
        return siphash24(entry, size, key) ?: 1;
}

/* With `key`, each device's Device.store.saved becomes its entry's hash in this snapshot (0: none;
 * the store's bookkeeping, in a table it is lent as const), as the snapshot is formatted: one
 * that fails leaves them saying what is not on disk, and is followed by another before any line
 * of the journal counts on them (save_snapshot()). */
static int state_format(const DeviceTable *t, uint64_t generation, const uint8_t *key, Out *o) {
        const Device *d;
        bool first = true;

        out_printf(o, "{\"version\":1,\"generation\":%llu,\"devices\":[", (unsigned long long) generation);
        DEVICE_FOREACH(d, t, it) {
                if (!d->record.has_original) {
                        if (key)
                                ((Device *) d)->store.saved = 0;
                        continue;
                }
                out_printf(o, "%s\n", first ? "" : ",");
                first = false;
                size_t entry = o->len;
                out_device(o, d);
                if (key && !o->oom)
                        ((Device *) d)->store.saved = entry_hash(key, o->buf + entry, o->len - entry);
                out_drain(o, false);
                if (o->error < 0)
                        return o->error;
        }
        out_printf(o, "]}\n");
        out_drain(o, true);
        return o->oom ? -ENOMEM : o->error;
}

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

static int write_snapshot_at(int dir_fd, const DeviceTable *t, uint64_t generation, const StateIo *io,
                             const uint8_t *key, size_t *ret_size) {
        _cleanup_(closep) int fd = -1;
        Out o = {};
        size_t size;
        int r;

        /* Whatever has the temporary name goes (a symlink itself, not what it points to), then the
         * file is made anew: O_EXCL refuses whatever is planted in between, symlinks included. */
        if (unlinkat(dir_fd, STATE_TMP, 0) < 0 && errno == EISDIR)
                (void) unlinkat(dir_fd, STATE_TMP, AT_REMOVEDIR);
        fd = openat(dir_fd, STATE_TMP, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        o.sink = true;
        o.fd = fd;
        o.io = io;
        r = state_format(t, generation, key, &o);
        free(o.buf);
        size = o.flushed;
        if (r >= 0 && io_fsync(io, fd, false) < 0)
                r = -errno;
        if (r >= 0 && io_renameat(io, dir_fd, STATE_TMP, STATE_FILE) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlinkat(dir_fd, STATE_TMP, 0);
                return r;
        }
        /* The journal holds only older generations now: gone, or ignored if this fails. */
        (void) unlinkat(dir_fd, STATE_JOURNAL, 0);
        /* make the rename itself durable */
        (void) io_fsync(io, dir_fd, false);
        if (ret_size)
                *ret_size = size;
        return 0;
}

/* The journal's lines: a "forget" line for each of `forgotten`, then one for each of `devices`, its
 * entry or, without originals, a "forget" line. With `key`, only the lines that change what is on
 * disk: none for a device whose entry is there as it is now (Device.store.saved) or that has none
 * there and no originals; `hashes` (one for each device) gets what each one's Device.store.saved
 * is once they are appended. *ret_lines: how many. */
static int format_journal(uint64_t generation, const Device *const *devices, size_t n_devices, const int *forgotten,
                          size_t n_forgotten, const uint8_t *key, uint64_t *hashes, Out *o, size_t *ret_lines) {
        size_t lines = n_forgotten;

        /* Forgotten devices first: a device that took a forgotten one's ifindex comes after. */
        for (size_t i = 0; i < n_forgotten; i++)
                out_printf(o, "{\"g\":%llu,\"ifindex\":%d,\"forget\":true}\n", (unsigned long long) generation,
                           forgotten[i]);
        for (size_t i = 0; i < n_devices; i++) {
                const Device *d = devices[i];

                if (!d->record.has_original) {
                        if (key && d->store.saved == 0)
                                continue;
                        out_printf(o, "{\"g\":%llu,\"ifindex\":%d,\"forget\":true}\n", (unsigned long long) generation,
                                   d->ifindex);
                        if (key)
                                hashes[i] = 0;
                        lines++;
                        continue;
                }
                size_t line = o->len;
                out_printf(o, "{\"g\":%llu,\"device\":", (unsigned long long) generation);
                size_t entry = o->len;
                out_device(o, d);
                if (key && !o->oom) {
                        hashes[i] = entry_hash(key, o->buf + entry, o->len - entry);
                        if (hashes[i] == d->store.saved) {
                                o->len = line; /* on disk as it is */
                                continue;
                        }
                }
                out_printf(o, "}\n");
                lines++;
        }
        *ret_lines = lines;
        return o->oom ? -ENOMEM : 0;
}

/* Append whole lines to the journal and fdatasync. An append that fails is cut back to where the
 * journal ended before it, so that no torn line is left in front of the next one; when even that
 * fails, *torn is set: the journal may end in a torn line, and only a new snapshot (which drops it)
 * may follow. On success *ret_size is the journal's size now. */
static int journal_append(int dir_fd, const char *buf, size_t len, const StateIo *io, uint64_t *ret_size,
                          bool *torn) {
        _cleanup_(closep) int fd = -1;
        struct stat st;
        int r;

        fd = openat(dir_fd, STATE_JOURNAL, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADF;
        r = write_all(io, fd, buf, len);
        if (r >= 0 && io_fsync(io, fd, true) < 0)
                r = -errno;
        if (r < 0) {
                if (io_ftruncate(io, fd, st.st_size) < 0 || io_fsync(io, fd, true) < 0)
                        *torn = true;
                return r;
        }
        *ret_size = (uint64_t) st.st_size + len;
        return 0;
}

static int open_dir(const char *dir) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int state_write_snapshot(const char *dir, const DeviceTable *t, uint64_t generation) {
        _cleanup_(closep) int dir_fd = open_dir(dir);

        if (dir_fd < 0)
                return dir_fd;
        return write_snapshot_at(dir_fd, t, generation, NULL, NULL, NULL);
}

int state_write_journal(const char *dir, uint64_t generation, const Device *const *devices, size_t n_devices,
                        const int *forgotten, size_t n_forgotten) {
        _cleanup_(closep) int dir_fd = -1;
        Out o = {};
        uint64_t size;
        size_t lines;
        bool torn = false;
        int r;

        r = format_journal(generation, devices, n_devices, forgotten, n_forgotten, NULL, NULL, &o, &lines);
        if (r < 0 || o.len == 0) {
                free(o.buf);
                return r;
        }
        dir_fd = open_dir(dir);
        if (dir_fd < 0) {
                free(o.buf);
                return dir_fd;
        }
        r = journal_append(dir_fd, o.buf, o.len, NULL, &size, &torn);
        free(o.buf);
        return r;
}

static int get_u32(json_object *o, const char *key, uint32_t *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
                return -EBADMSG;
        int64_t x = json_object_get_int64(v);
        if (x < 0 || x > UINT32_MAX)
                return -EBADMSG;
        *ret = (uint32_t) x;
        return 0;
}

void state_entries_free_one(StateEntry *e) {
        free(e->autosize);
        free(e->ifname);
        free(e->kind);
        free(e->mac);
        probation_free(e->probation);
        rollback_record_free(e->last_rollback);
        *e = (StateEntry){};
}

void state_entries_free(StateEntry *e, size_t n) {
        for (size_t i = 0; e && i < n; i++) {
                free(e[i].autosize);
                free(e[i].ifname);
                free(e[i].kind);
                free(e[i].mac);
                probation_free(e[i].probation);
                rollback_record_free(e[i].last_rollback);
        }
        free(e);
}

/* Four sizes, each within what a kernel takes (GSO never 0): what a write may be given. */
static int get_sizes_of(json_object *v, Sizes *ret) {
        Sizes s;

        if (!json_object_is_type(v, json_type_object))
                return -EBADMSG;
        if (get_u32(v, "gso_max_size", &s.gso_max_size) < 0 || get_u32(v, "gro_max_size", &s.gro_max_size) < 0 ||
            get_u32(v, "gso_ipv4_max_size", &s.gso_ipv4_max_size) < 0 ||
            get_u32(v, "gro_ipv4_max_size", &s.gro_ipv4_max_size) < 0)
                return -EBADMSG;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (sizes_get(&s, i) > STATE_SIZE_MAX || (i % 2 == 0 && sizes_get(&s, i) == 0))
                        return -ERANGE;
        *ret = s;
        return 0;
}

static int get_sizes(json_object *o, const char *key, Sizes *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v))
                return -EBADMSG;
        return get_sizes_of(v, ret);
}

static int get_u64(json_object *o, const char *key, uint64_t *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
                return -EBADMSG;
        int64_t x = json_object_get_int64(v);
        if (x < 0)
                return -EBADMSG;
        *ret = (uint64_t) x;
        return 0;
}

static bool get_bool(json_object *o, const char *key) {
        json_object *v;
        return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_boolean) &&
               json_object_get_boolean(v);
}

static const char *get_str(json_object *o, const char *key) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return NULL;
        return json_object_get_string(v);
}

/* One search of `auto` read back; anything out of what a search can be drops it (it begins again). */
static int auto_search_from_json(json_object *v, unsigned *ret_index, AutoSearch *ret) {
        AutoSearch s = {};
        const char *size = get_str(v, "size"), *counter = get_str(v, "counter");
        unsigned index = SIZES_COUNT;
        uint32_t steps, trips;

        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (streq_ptr(size, size_name(i)))
                        index = i;
        s.phase = auto_phase_from_string(get_str(v, "phase"));
        if (index == SIZES_COUNT || s.phase < 0 || s.phase == AUTO_NEW || get_u32(v, "min", &s.min) < 0 ||
            get_u32(v, "max", &s.max) < 0 || get_u32(v, "proven", &s.proven) < 0 ||
            get_u64(v, "proven_packets", &s.proven_packets) < 0 || get_u32(v, "trying", &s.trying) < 0 ||
            get_u32(v, "ceiling", &s.ceiling) < 0 || get_u64(v, "ceiling_usec", &s.ceiling_usec) < 0 ||
            get_u64(v, "rise", &s.ceiling_rise) < 0 || get_u64(v, "retry_usec", &s.retry_usec) < 0 ||
            get_u64(v, "idle_wait_usec", &s.idle_wait_usec) < 0 || get_u32(v, "steps", &steps) < 0 ||
            get_u32(v, "trips", &trips) < 0 || !counter || strlen(counter) >= sizeof(s.ceiling_counter))
                return -EBADMSG;
        s.reprobe = s.ceiling != 0 && get_bool(v, "reprobe");
        /* min is the policy's (65536 or more), unless the device's limit is below it: then the
         * bounds are that limit alone */
        if (s.min == 0 || s.min > s.max || s.max > STATE_SIZE_MAX || (s.min < AUTO_SIZE_MIN_DEFAULT && s.min != s.max) ||
            s.proven < s.min || s.proven > s.max || (s.ceiling != 0 && (s.ceiling <= s.proven || s.ceiling > s.max)))
                return -ERANGE;
        /* The size tried is the one a restart writes: checked as whole as a step makes it — above
         * the proven size, at most twice it (auto_search_next()), within the bound and below the
         * ceiling (the ceiling itself only when it is tried once more); none outside a step. */
        if (s.phase == AUTO_TRYING) {
                if (s.trying <= s.proven || s.trying > s.max || s.trying > UINT64_C(2) * s.proven ||
                    (s.ceiling != 0 && (s.trying > s.ceiling || (s.trying == s.ceiling && !s.reprobe))))
                        return -ERANGE;
        } else if (s.trying != 0)
                return -ERANGE;
        snprintf(s.ceiling_counter, sizeof(s.ceiling_counter), "%s", counter);
        /* settled with a step left: nothing would ever step it again under the same bounds */
        if (s.phase == AUTO_SETTLED && auto_search_next(&s) != 0)
                return -ERANGE;
        s.steps = steps;
        s.trips = trips;
        *ret_index = index;
        *ret = s;
        return 0;
}

/* 0, or 1 when some of them were dropped (what a search cannot be): the others kept. */
static int auto_from_json(json_object *a, AutoDevice **ret) {
        AutoSearch all[SIZES_COUNT];
        unsigned sizes = 0;
        bool dropped = false;
        AutoDevice *d;

        if (!json_object_is_type(a, json_type_array))
                return -EBADMSG;
        for (size_t k = 0; k < json_object_array_length(a) && k < SIZES_COUNT; k++) {
                AutoSearch s;
                unsigned i;

                if (auto_search_from_json(json_object_array_get_idx(a, k), &i, &s) < 0) {
                        dropped = true;
                        continue;
                }
                all[i] = s;
                sizes |= 1u << i;
        }
        if (sizes == 0)
                return -EBADMSG;
        d = auto_device_new(sizes); /* room for these alone */
        if (!d)
                return -ENOMEM;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (sizes & (1u << i))
                        *auto_device_search(d, i) = all[i];
        *ret = d;
        return dropped;
}

static int probation_from_json(json_object *o, Probation **ret) {
        json_object *a;
        Probation *p;
        int r = -EBADMSG;

        if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "guards", &a) ||
            !json_object_is_type(a, json_type_array) || json_object_array_length(a) > POLICY_GUARDS_MAX)
                return -EBADMSG;
        size_t n = json_object_array_length(a);
        p = probation_alloc(n);
        if (!p)
                return -ENOMEM;
        if (get_u64(o, "until_boottime_usec", &p->until_usec) < 0 || get_u64(o, "window_usec", &p->window_usec) < 0 ||
            get_u64(o, "interval_usec", &p->interval_usec) < 0 || p->interval_usec == 0)
                goto fail;
        for (size_t i = 0; i < n; i++) {
                json_object *j = json_object_array_get_idx(a, i), *v;
                GuardState *g = &p->guards.items[p->guards.n++];
                if (!json_object_is_type(j, json_type_object))
                        goto fail;
                r = guard_counter_load(get_str(j, "counter"), &g->counter, &g->kind, &g->offset);
                if (r < 0)
                        goto fail;
                r = -EBADMSG;
                if (json_object_object_get_ex(j, "per", &v) &&
                    guard_counter_load(get_str(j, "per"), &g->per, &g->per_kind, &g->per_offset) < 0)
                        goto fail;
                if (json_object_object_get_ex(j, "max_increase", &v)) {
                        if (get_u64(j, "max_increase", &g->max_increase) < 0)
                                goto fail;
                        g->has_max_increase = true;
                }
                if (json_object_object_get_ex(j, "max_ratio", &v)) {
                        if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
                                goto fail;
                        g->max_ratio = json_object_get_double(v);
                        /* json-c reads 1e400 as inf, which a policy never gives and JSON cannot
                         * say: such a guard is taken as having no ratio */
                        g->has_max_ratio = g->per != NULL && isfinite(g->max_ratio) && g->max_ratio >= 0;
                }
                g->active = get_bool(j, "active");
                /* the observer's counters began again with this run's: baselines again */
                g->have_base = get_bool(j, "have_base") && g->kind != GUARD_COUNTER_OBSERVER &&
                               !(g->per && g->per_kind == GUARD_COUNTER_OBSERVER);
                (void) get_u64(j, "base", &g->base);
                (void) get_u64(j, "per_base", &g->per_base);
        }
        *ret = p;
        return 0;
fail:
        probation_free(p);
        return r == -ENOMEM ? r : -EBADMSG;
}

static int rollback_from_json(json_object *o, RollbackRecord **ret) {
        RollbackRecord *r = calloc(1, sizeof(*r));
        json_object *v;
        const char *c, *per;

        if (!r)
                return -ENOMEM;
        c = get_str(o, "counter");
        per = get_str(o, "per");
        r->counter = strdup(c ?: "");
        r->per = per ? strdup(per) : NULL;
        (void) get_u64(o, "rise", &r->rise);
        (void) get_u64(o, "per_rise", &r->per_rise);
        (void) get_u64(o, "time_usec", &r->realtime_usec);
        /* as written: state_format() puts 0 for a non-finite threshold (json-c reads NaN) */
        if (json_object_object_get_ex(o, "threshold", &v) && isfinite(json_object_get_double(v)))
                r->threshold = json_object_get_double(v);
        r->namespace_wide = get_bool(o, "namespace_wide");
        (void) get_sizes(o, "from", &r->from);
        (void) get_sizes(o, "to", &r->to);
        if (!r->counter || (per && !r->per)) {
                rollback_record_free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

/* One device's entry. -EBADMSG when what a restart needs to give its sizes back (the ifindex, the
 * originals, the sizes written) is missing or malformed, or an original out of what a kernel takes
 * (*ret_why says which); a damaged last-good, hold or probation is dropped alone (*ret_partial,
 * *ret_why). */
static int parse_entry(json_object *e, StateEntry *ret_entry, const char **ret_why, bool *ret_partial) {
        json_object *fam, *name, *pv;
        uint32_t ifindex;
        int r;

        *ret_entry = (StateEntry){};
        *ret_partial = false;
        if (!json_object_is_type(e, json_type_object)) {
                *ret_why = "not an object";
                return -EBADMSG;
        }
        if (get_u32(e, "ifindex", &ifindex) < 0 || ifindex == 0 || ifindex > INT32_MAX) {
                *ret_why = "no ifindex, or not one (1..2147483647)";
                return -EBADMSG;
        }
        ret_entry->ifindex = (int) ifindex;
        r = get_sizes(e, "original", &ret_entry->original);
        if (r < 0) {
                *ret_why = r == -ERANGE ? "an original size out of what the kernel takes (GSO 1..524280, GRO 0..524280)"
                                    : "no original sizes, or not four numbers 0..4294967295";
                return -EBADMSG;
        }
        bool families = !json_object_object_get_ex(e, "written", &fam);
        if ((families && !json_object_object_get_ex(e, "families", &fam)) || !json_object_is_type(fam, json_type_array)) {
                *ret_why = "no list of the sizes written";
                return -EBADMSG;
        }
        for (size_t j = 0; j < json_object_array_length(fam); j++) {
                json_object *f = json_object_array_get_idx(fam, j);
                const char *size = json_object_is_type(f, json_type_string) ? json_object_get_string(f) : NULL;
                unsigned bit = 0;
                if (families) {
                        /* written by an earlier version: whole families */
                        bit = streq_ptr(size, "ipv6") ? SIZE_BITS_IPV6 : streq_ptr(size, "ipv4") ? SIZE_BITS_IPV4 : 0;
                } else
                        for (unsigned i = 0; i < SIZES_COUNT; i++)
                                if (streq_ptr(size, size_name(i)))
                                        bit = 1u << i;
                if (bit == 0) {
                        /* giving back less than was written is what this reader is there to prevent */
                        *ret_why = "a size written that is not one of the four";
                        return -EBADMSG;
                }
                ret_entry->written |= bit;
        }
        if (json_object_object_get_ex(e, "ifname", &name) && json_object_is_type(name, json_type_string) &&
            !(ret_entry->ifname = strdup(json_object_get_string(name))))
                goto oom;
        /* Written since entries carry an identity; an entry without one is of an earlier version
         * and taken to be its ifindex's device, as it always was (state_entry_is_device()). */
        const char *kind = get_str(e, "kind"), *mac = get_str(e, "mac");
        if (kind && mac) {
                ret_entry->has_identity = true;
                ret_entry->kind = strdup(kind);
                ret_entry->mac = strdup(mac);
                if (!ret_entry->kind || !ret_entry->mac)
                        goto oom;
        }
        const char *st = get_str(e, "state");
        ret_entry->state = st ? device_state_from_string(st) : _DEVICE_STATE_INVALID;
        /* What follows only says where a rollback goes and what runs: without it the device is
         * resumed as applied, its originals kept. */
        if (json_object_object_get_ex(e, "last_good", &pv)) {
                ret_entry->has_last_good = get_sizes(e, "last_good", &ret_entry->last_good) >= 0;
                if (!ret_entry->has_last_good)
                        *ret_partial = true, *ret_why = "its last-good sizes (dropped: a rollback goes to the originals)";
        }
        if (json_object_object_get_ex(e, "proven", &pv) && json_object_is_type(pv, json_type_array)) {
                size_t np = json_object_array_length(pv);
                /* the most recent are last: a longer list (a later version's) keeps those; one
                 * that does not read is only fewer proven sizes */
                for (size_t i = np > PROVEN_SIZES_MAX ? np - PROVEN_SIZES_MAX : 0; i < np; i++) {
                        Sizes p;
                        if (get_sizes_of(json_object_array_get_idx(pv, i), &p) >= 0)
                                ret_entry->proven.items[ret_entry->proven.n++] = p;
                }
        }
        if (json_object_object_get_ex(e, "held", &pv)) {
                ret_entry->held = get_sizes(e, "held", &ret_entry->held_desired) >= 0;
                if (!ret_entry->held)
                        *ret_partial = true, *ret_why = "its hold (dropped)";
        }
        if (json_object_object_get_ex(e, "probation", &pv)) {
                r = probation_from_json(pv, &ret_entry->probation);
                if (r == -ENOMEM)
                        goto oom;
                if (r < 0)
                        *ret_partial = true, *ret_why = "its probation (dropped: resumed as applied)";
        }
        if (json_object_object_get_ex(e, "last_rollback", &pv) && json_object_is_type(pv, json_type_object) &&
            rollback_from_json(pv, &ret_entry->last_rollback) < 0)
                goto oom;
        if (json_object_object_get_ex(e, "auto", &pv)) {
                r = auto_from_json(pv, &ret_entry->autosize);
                if (r == -ENOMEM)
                        goto oom;
                if (r < 0)
                        *ret_partial = true, *ret_why = "its searches of auto (dropped: they begin again)";
                else if (r > 0)
                        *ret_partial = true, *ret_why = "a search of auto (dropped: it begins again)";
        }
        return 0;
oom:
        state_entries_free_one(ret_entry);
        return -ENOMEM;
}

/* A JSON object of its own: a line of the journal, an entry of the snapshot, a header. */
static json_object *parse_json(const char *data, size_t size) {
        json_tokener *tok;
        json_object *root;

        if (size > STATE_READ_MAX || size > INT32_MAX)
                return NULL;
        tok = json_tokener_new_ex(32);
        if (!tok)
                return NULL;
        root = json_tokener_parse_ex(tok, data, (int) size);
        bool ok = json_tokener_get_error(tok) == json_tokener_success;
        /* nothing after it but white space: a line is one object, not the start of two */
        for (size_t i = ok ? json_tokener_get_parse_end(tok) : size; i < size; i++)
                if (!strchr(" \t\r\n", data[i]) || data[i] == '\0') {
                        ok = false;
                        break;
                }
        json_tokener_free(tok);
        if (!ok || !root || !json_object_is_type(root, json_type_object)) {
                json_object_put(root);
                return NULL;
        }
        return root;
}

/* The entries being read, indexed by ifindex (open addressing; 0 is no ifindex): each line of a
 * journal looked its device up in the whole list once, and 37000 devices with a journal of twice
 * as many lines took 10 s to load. A dropped entry leaves a hole (all zero, ifindex 0) that a later
 * entry of its device fills, and entries_done() closes up. One entry per device: a restart hands
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

static size_t slot_of(const Entries *x, int ifindex) {
        size_t mask = x->n_slots - 1, i = ((unsigned) ifindex * 2654435761u) & mask;

        while (x->slots[i].ifindex != 0 && x->slots[i].ifindex != ifindex)
                i = (i + 1) & mask;
        return i;
}

/* Room for one more slot, at most half of them used. */
static int entries_reserve(Entries *x) {
        EntrySlot *old = x->slots;
        size_t n_old = x->n_slots;

        if (x->n_slots > 0 && (x->used + 1) * 2 <= x->n_slots)
                return 0;
        x->n_slots = n_old ? n_old * 2 : 128;
        x->slots = calloc(x->n_slots, sizeof(EntrySlot));
        if (!x->slots) {
                x->slots = old;
                x->n_slots = n_old;
                return -ENOMEM;
        }
        for (size_t i = 0; i < n_old; i++)
                if (old[i].ifindex != 0)
                        x->slots[slot_of(x, old[i].ifindex)] = old[i];
        free(old);
        return 0;
}

/* Replace the entry of the same device, or add it. Takes *e on success. The list grows by half
 * (not twice) its size: at 10000 devices it is the largest thing a load holds. */
static int entries_put(Entries *x, StateEntry *e) {
        size_t k;

        if (entries_reserve(x) < 0)
                return -ENOMEM;
        k = slot_of(x, e->ifindex);
        if (x->slots[k].ifindex == e->ifindex) {
                StateEntry *old = &x->items[x->slots[k].pos];
                state_entries_free_one(old);
                *old = *e;
                return 0;
        }
        if (x->n == x->cap) {
                size_t c = x->cap < 64 ? 64 : x->cap + x->cap / 2;
                StateEntry *items = reallocarray(x->items, c, sizeof(StateEntry));
                if (!items)
                        return -ENOMEM;
                x->items = items;
                x->cap = c;
        }
        x->slots[k] = (EntrySlot){e->ifindex, x->n};
        x->used++;
        x->items[x->n++] = *e;
        return 0;
}

static void entries_drop(Entries *x, int ifindex) {
        size_t k;

        if (ifindex <= 0 || x->n_slots == 0)
                return;
        k = slot_of(x, ifindex);
        if (x->slots[k].ifindex == ifindex)
                state_entries_free_one(&x->items[x->slots[k].pos]); /* a hole; the slot stays */
}

/* Index entries that are one per device already. */
static int entries_init(Entries *x, StateEntry *items, size_t n) {
        *x = (Entries){.items = items, .n = n, .cap = n};
        for (size_t i = 0; i < n; i++) {
                if (entries_reserve(x) < 0)
                        return -ENOMEM;
                x->slots[slot_of(x, items[i].ifindex)] = (EntrySlot){items[i].ifindex, i};
                x->used++;
        }
        return 0;
}

/* Close up the holes, in order, and hand the list out. */
static void entries_done(Entries *x, StateEntry **ret, size_t *ret_n) {
        size_t k = 0;

        for (size_t i = 0; i < x->n; i++)
                if (x->items[i].ifindex != 0)
                        x->items[k++] = x->items[i];
        free(x->slots);
        *ret = x->items;
        *ret_n = k;
        *x = (Entries){};
}

static void entries_free(Entries *x) {
        state_entries_free(x->items, x->n);
        free(x->slots);
        *x = (Entries){};
}

/* ---- reading a line at a time ---- */

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

#define READ_CHUNK (64u * 1024u)

static void lines_init_fd(Lines *l, int fd) {
        *l = (Lines){.fd = fd};
}

static void lines_init_mem(Lines *l, const char *data, size_t size) {
        *l = (Lines){.fd = -1, .mem = data, .mem_size = size};
}

static void lines_done(Lines *l) {
        free(l->buf);
        l->buf = NULL;
}

/* The next line, without its newline, in *ret (not NUL-terminated), *ret_whole when a newline ended
 * it. 1: a line; 0: the end; -errno. A line longer than STATE_LINE_MAX comes back as *ret NULL
 * (the rest of it skipped): no entry is ever that long. */
static int lines_next(Lines *l, const char **ret, size_t *ret_len, bool *ret_whole) {
        bool too_long = false;

        if (l->fd < 0) {
                const char *p = l->mem + l->mem_off, *end = l->mem + l->mem_size, *nl;
                if (p >= end)
                        return 0;
                nl = memchr(p, '\n', (size_t) (end - p));
                *ret_len = (size_t) ((nl ?: end) - p);
                *ret = *ret_len > STATE_LINE_MAX ? NULL : p;
                *ret_whole = nl != NULL;
                l->mem_off = nl ? (size_t) (nl - l->mem) + 1 : l->mem_size;
                l->line++;
                return 1;
        }
        for (;;) {
                char *p = l->buf + l->start, *nl = l->len > l->start ? memchr(p, '\n', l->len - l->start) : NULL;
                if (nl || (l->eof && l->len > l->start)) {
                        size_t n = (size_t) ((nl ?: l->buf + l->len) - p);
                        *ret = too_long || n > STATE_LINE_MAX ? NULL : p;
                        *ret_len = n;
                        *ret_whole = nl != NULL;
                        l->start += n + (nl != NULL);
                        l->line++;
                        return 1;
                }
                if (l->eof && !too_long)
                        return 0;
                if (l->eof) {
                        /* the end of a line too long to keep */
                        *ret = NULL;
                        *ret_len = 0;
                        *ret_whole = false;
                        l->line++;
                        return 1;
                }
                if (l->len - l->start > STATE_LINE_MAX) {
                        too_long = true; /* what is read of it goes */
                        l->start = l->len;
                }
                if (l->start > 0) {
                        memmove(l->buf, l->buf + l->start, l->len - l->start);
                        l->len -= l->start;
                        l->start = 0;
                }
                if (l->cap - l->len < READ_CHUNK) {
                        size_t cap = l->len + READ_CHUNK;
                        char *b = realloc(l->buf, cap);
                        if (!b)
                                return -ENOMEM;
                        l->buf = b;
                        l->cap = cap;
                }
                ssize_t k = read(l->fd, l->buf + l->len, l->cap - l->len);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        l->eof = true;
                l->len += (size_t) k;
        }
}

static int lines_rewind(Lines *l) {
        if (l->fd < 0) {
                l->mem_off = 0;
        } else {
                if (lseek(l->fd, 0, SEEK_SET) < 0)
                        return -errno;
                l->start = l->len = 0;
                l->eof = false;
        }
        l->line = 0;
        return 0;
}

static void set_aside(StateReadReport *rep, size_t line, int ifindex, bool partial, const char *reason) {
        if (rep->n_aside < STATE_ASIDE_MAX)
                rep->aside[rep->n_aside] = (StateAside){line, ifindex, partial, reason};
        rep->n_aside++;
}

/* Parse and keep one entry; a bad one is set aside. Only -ENOMEM fails. */
static int take_entry(Entries *x, json_object *o, size_t line, StateReadReport *rep) {
        const char *why = NULL;
        bool partial;
        uint32_t ifindex = 0;
        StateEntry s;
        int r;

        r = parse_entry(o, &s, &why, &partial);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                if (json_object_is_type(o, json_type_object))
                        (void) get_u32(o, "ifindex", &ifindex);
                set_aside(rep, line, ifindex <= INT32_MAX ? (int) ifindex : 0, false, why);
                return 0;
        }
        if (partial)
                set_aside(rep, line, s.ifindex, true, why);
        r = entries_put(x, &s);
        if (r < 0)
                state_entries_free_one(&s);
        return r;
}

/* ---- the snapshot ----
 *
 * As state_format() writes it, one entry a line:
 *   {"version":1,"generation":7,"devices":[
 *   {…entry…},
 *   {…entry…}]}
 * (an empty one all on its first line). A file of another layout (all on one line, as earlier
 * versions wrote it, or reformatted by hand) is read whole, if it is small enough to be: a json-c
 * tree costs some 13 times the text. */

#define SNAPSHOT_TREE_MAX (4u * 1024u * 1024u)
#define HEADER_TAIL "\"devices\":["

static int header_of(json_object *o, uint64_t *ret_generation) {
        json_object *v;
        uint64_t g = 0;

        if (!json_object_object_get_ex(o, "version", &v) || !json_object_is_type(v, json_type_int) ||
            json_object_get_int64(v) != 1)
                return -EBADMSG;
        if (json_object_object_get_ex(o, "generation", &v) && get_u64(o, "generation", &g) < 0)
                return -EBADMSG;
        *ret_generation = g;
        return 0;
}

/* A document read whole: its header, then each entry of "devices" on its own. */
static int snapshot_tree(json_object *root, Entries *x, uint64_t *ret_generation, StateReadReport *rep) {
        json_object *list;
        int r;

        if (header_of(root, ret_generation) < 0) {
                rep->bad_header = true;
                *ret_generation = STATE_GENERATION_UNKNOWN;
        }
        if (!json_object_object_get_ex(root, "devices", &list) || !json_object_is_type(list, json_type_array)) {
                rep->bad_header = true;
                *ret_generation = STATE_GENERATION_UNKNOWN;
                return 0;
        }
        size_t len = json_object_array_length(list);
        for (size_t i = 0; i < len; i++) {
                r = take_entry(x, json_object_array_get_idx(list, i), 0, rep);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The text of the first line up to its "devices":[ as an object of its own: {"version":1,…}. */
static json_object *parse_header_line(const char *p, size_t n) {
        _cleanup_(freep) char *h = NULL;
        size_t tail = strlen(HEADER_TAIL);

        if (n < tail + 1 || memcmp(p + n - tail, HEADER_TAIL, tail) != 0)
                return NULL;
        n -= tail;
        h = malloc(n + 1);
        if (!h)
                return NULL;
        memcpy(h, p, n);
        if (n > 1 && h[n - 1] == ',')
                n--;
        h[n++] = '}';
        return parse_json(h, n);
}

static void trim(const char **p, size_t *n) {
        while (*n > 0 && (**p == ' ' || **p == '\t' || **p == '\r'))
                (*p)++, (*n)--;
        while (*n > 0 && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t' || (*p)[*n - 1] == '\r'))
                (*n)--;
}

/* A whole snapshot, a line at a time. `size` is the file's (a tree is read only of a small one). */
static int read_snapshot(Lines *l, size_t size, Entries *x, uint64_t *ret_generation, StateReadReport *rep) {
        const char *p;
        size_t n;
        bool whole, ended = false;
        int r;

        *rep = (StateReadReport){};
        *ret_generation = 0;
        r = lines_next(l, &p, &n, &whole);
        if (r <= 0)
                return r; /* empty: no entries */
        rep->lines += whole;
        {
                _cleanup_(json_object_putp) json_object *o = p ? parse_json(p, n) : NULL;
                if (o) {
                        /* all of it on one line: an empty table, or an earlier version's file */
                        r = snapshot_tree(o, x, ret_generation, rep);
                        ended = true;
                        goto rest;
                }
        }
        {
                _cleanup_(json_object_putp) json_object *h = p ? parse_header_line(p, n) : NULL;
                if (h && header_of(h, ret_generation) >= 0)
                        goto entries;
        }
        if (size <= SNAPSHOT_TREE_MAX) {
                /* another layout of the whole document? */
                _cleanup_(freep) char *all = NULL;
                size_t len = 0;
                if (l->fd >= 0) {
                        r = lines_rewind(l);
                        if (r < 0)
                                return r;
                        all = malloc(size + 1);
                        if (!all)
                                return -ENOMEM;
                        while (len < size) {
                                ssize_t k = read(l->fd, all + len, size - len);
                                if (k < 0 && errno == EINTR)
                                        continue;
                                if (k < 0)
                                        return -errno;
                                if (k == 0)
                                        break;
                                len += (size_t) k;
                        }
                }
                _cleanup_(json_object_putp) json_object *o = l->fd >= 0 ? parse_json(all, len)
                                                                         : parse_json(l->mem, l->mem_size);
                if (o) {
                        *rep = (StateReadReport){};
                        return snapshot_tree(o, x, ret_generation, rep);
                }
                r = lines_rewind(l);
                if (r < 0)
                        return r;
                r = lines_next(l, &p, &n, &whole);
                if (r <= 0)
                        return r;
        }
        /* Not a header this version reads (damaged, or a later version's): the entries that follow
         * are read all the same, each checked as any is. */
        rep->bad_header = true;
        *ret_generation = STATE_GENERATION_UNKNOWN;

entries:
        while (!ended) {
                r = lines_next(l, &p, &n, &whole);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                rep->lines += whole;
                if (!whole)
                        rep->torn_tail = true;
                if (!p) {
                        set_aside(rep, l->line, 0, false, "longer than any entry");
                        continue;
                }
                trim(&p, &n);
                if (n > 0 && *p == ',')
                        p++, n--;
                if (n >= 2 && memcmp(p + n - 2, "]}", 2) == 0)
                        n -= 2, ended = true;
                else if (n > 0 && p[n - 1] == ',')
                        n--;
                trim(&p, &n);
                if (n == 0)
                        continue;
                _cleanup_(json_object_putp) json_object *o = parse_json(p, n);
                if (!o) {
                        set_aside(rep, l->line, 0, false, whole ? "not a JSON object" : "cut short");
                        continue;
                }
                r = take_entry(x, o, l->line, rep);
                if (r < 0)
                        return r;
        }
        rep->truncated = !ended;
        r = 0;
rest:
        /* whatever follows the end was not written with it */
        while (r >= 0 && (r = lines_next(l, &p, &n, &whole)) > 0) {
                if (p)
                        trim(&p, &n);
                if (p && n == 0)
                        continue;
                rep->trailing++;
        }
        return r < 0 ? r : 0;
}

int state_parse(const char *data, size_t size, StateEntry **ret, size_t *ret_n, uint64_t *ret_generation,
                StateReadReport *ret_report) {
        StateReadReport rep;
        Entries x = {};
        Lines l;
        uint64_t generation;
        int r;

        if (size > STATE_READ_MAX)
                return -EFBIG;
        lines_init_mem(&l, data, size);
        r = read_snapshot(&l, size, &x, &generation, &rep);
        lines_done(&l);
        if (r < 0) {
                entries_free(&x);
                return r;
        }
        entries_done(&x, ret, ret_n);
        if (ret_generation)
                *ret_generation = generation;
        if (ret_report)
                *ret_report = rep;
        return 0;
}

/* ---- the journal ---- */

/* One whole line of the journal: 0 when applied, of another generation (a whole line from before
 * the last snapshot, safely passed over) or set aside. */
static int journal_line_apply(const char *line, size_t len, size_t line_no, uint64_t generation, Entries *x,
                              StateReadReport *rep) {
        _cleanup_(json_object_putp) json_object *o = line ? parse_json(line, len) : NULL;
        uint64_t g;
        uint32_t ifindex;
        json_object *e;

        if (!o || get_u64(o, "g", &g) < 0) {
                set_aside(rep, line_no, 0, false, !line ? "longer than any line" : !o ? "not a JSON object" : "no generation");
                return 0;
        }
        if (g != generation)
                return 0;
        if (get_bool(o, "forget")) {
                if (get_u32(o, "ifindex", &ifindex) >= 0 && ifindex > 0 && ifindex <= INT32_MAX)
                        entries_drop(x, (int) ifindex);
                else
                        set_aside(rep, line_no, 0, false, "a forget line without an ifindex");
                return 0;
        }
        if (!json_object_object_get_ex(o, "device", &e)) {
                set_aside(rep, line_no, 0, false, "neither an entry nor a forget line");
                return 0;
        }
        return take_entry(x, e, line_no, rep);
}

/* The generation of the journal's last line that has one: its newest. */
static int journal_newest(Lines *l, uint64_t *ret) {
        const char *p;
        size_t n;
        bool whole;
        int r;

        *ret = 0;
        while ((r = lines_next(l, &p, &n, &whole)) > 0) {
                if (!whole || !p)
                        continue;
                _cleanup_(json_object_putp) json_object *o = parse_json(p, n);
                uint64_t g;
                if (o && get_u64(o, "g", &g) >= 0 && g > *ret)
                        *ret = g;
        }
        return r < 0 ? r : lines_rewind(l);
}

static int read_journal(Lines *l, uint64_t generation, Entries *x, StateReadReport *rep) {
        const char *p = NULL;
        size_t n = 0;
        bool whole;
        int r;

        *rep = (StateReadReport){};
        if (generation == STATE_GENERATION_UNKNOWN) {
                r = journal_newest(l, &generation);
                if (r < 0)
                        return r;
        }
        while ((r = lines_next(l, &p, &n, &whole)) > 0) {
                if (!whole) {
                        rep->torn_tail = true; /* a write cut short: it never protected a write */
                        break;
                }
                rep->lines++;
                r = journal_line_apply(p, n, l->line, generation, x, rep);
                if (r < 0)
                        return r;
        }
        return r;
}

int state_journal_apply(const char *data, size_t size, uint64_t generation, StateEntry **entries, size_t *n,
                        StateReadReport *ret_report) {
        StateReadReport rep;
        Entries x;
        Lines l;
        int r;

        if (entries_init(&x, *entries, *n) < 0) {
                free(x.slots);
                return -ENOMEM;
        }
        lines_init_mem(&l, data, size);
        r = read_journal(&l, generation, &x, &rep);
        lines_done(&l);
        entries_done(&x, entries, n);
        if (r < 0)
                return r;
        if (ret_report)
                *ret_report = rep;
        return 0;
}

bool state_entry_is_device(const StateEntry *e, const Device *d, const char **ret_why) {
        char buf[DEVICE_MAC_STRLEN];
        const char *why = NULL, *mac = device_identity_mac(d, buf);

        if (!e->has_identity)
                return true;
        if (!streq_ptr(e->kind, d->kind ?: ""))
                why = "kind";
        else if (!strempty(e->mac) && !strempty(mac))
                why = streq_ptr(e->mac, mac) ? NULL : "MAC";
        else if (!streq_ptr(e->ifname, d->ifname))
                why = "name"; /* nothing else tells them apart */
        if (why && ret_why)
                *ret_why = why;
        return !why;
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
        _cleanup_(closep) int fd = open_dir(s->dir);
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
                lines_init_fd(&l, fd);
                r = read_snapshot(&l, size, &x, &generation, &rep.snapshot);
                lines_done(&l);
        }
        if (r == -ENOMEM) {
                entries_free(&x);
                return r;
        }
        if (r < 0 && r != -ENOENT) {
                /* Not a file of the daemon's (a symlink or FIFO itself, never what it leads to), or
                 * one that cannot be read: kept for whoever investigates; a new snapshot takes its
                 * place at the next save. The journal's lines are of its generation: without it
                 * they say nothing, and the next snapshot drops them. */
                entries_free(&x);
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
                lines_init_fd(&l, fd);
                r = read_journal(&l, generation, &x, &rep.journal);
                lines_done(&l);
                if (r >= 0 && damaged(&rep.journal))
                        rep.journal_kept = keep_aside(dir_fd, STATE_JOURNAL) >= 0;
        }
        if (r == -ENOMEM) {
                entries_free(&x);
                return r;
        }
        if (r < 0 && r != -ENOENT) {
                /* A directory, a FIFO, a symlink, more than a journal ever grows to, an I/O error:
                 * not the daemon's journal, and no reason to doubt the snapshot. */
                rep.journal_error = r;
                rep.journal_moved = move_aside(dir_fd, STATE_JOURNAL) >= 0;
        }
        s->generation = generation == STATE_GENERATION_UNKNOWN ? 0 : generation;
        entries_done(&x, ret, ret_n);
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
        r = write_snapshot_at(fd, s->table, s->generation + 1, s->io, s->key, &size);
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
        for (size_t i = 0; i < s->n_dirty; i++)
                s->dirty[i]->store.dirty = false;
        s->n_dirty = s->n_forgotten = 0;
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
        r = format_journal(s->generation, devices, n_devices, s->forgotten, s->n_forgotten, s->key, hashes, &o, &lines);
        if (r < 0 || lines == 0 || snapshot_due(s, lines)) {
                free(o.buf);
                return r < 0 ? r : lines > 0;
        }
        fd = store_dir(s);
        if (fd < 0) {
                free(o.buf);
                return fd;
        }
        r = journal_append(fd, o.buf, o.len, s->io, &size, &torn);
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
        for (size_t i = 0; i < s->n_dirty; i++)
                s->dirty[i]->store.dirty = false;
        s->n_dirty = s->n_forgotten = 0;
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
