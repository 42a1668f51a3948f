/* state-format.c — state.json and state.journal as they are written: the Out buffer and the entries
 * formatted into it, a snapshot written whole (write, fsync, rename) and lines appended to the
 * journal, through the StateIo a test may put in place of the system calls. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

#include "durable.h"
#include "auto-size.h"
#include "state-internal.h"

#define STATE_TMP ".state.json.tmp"

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
                   (unsigned long long) p->until_usec, (unsigned long long) probation_window_usec(p),
                   (unsigned long long) probation_interval_usec(p));
        /* each guard with its rule: the file says all a restart needs (state-read.c finds the
         * rules again by their content) */
        for (size_t i = 0; i < guard_set_n(&p->guards); i++) {
                const GuardRule *g = &p->guards.rules->items[i];
                const GuardBase *b = &p->guards.items[i];
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
                           guard_set_active(&p->guards, i) ? "true" : "false",
                           guard_set_have_base(&p->guards, i) ? "true" : "false",
                           (unsigned long long) b->base, (unsigned long long) b->per_base);
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
                              "\"trips\":%u,\"proof\":",
                           (unsigned long long) s->ceiling_rise, s->reprobe ? "true" : "false",
                           (unsigned long long) idle_wait, s->steps, s->trips);
                out_string(o, s->proof);
                out_printf(o, "}");
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
        if (device_proven_n(d) > 0) {
                out_printf(o, ",\"proven\":[");
                for (unsigned i = 0; i < device_proven_n(d); i++) {
                        const Sizes *p = device_proven_at(d, i);
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

int state_write_snapshot_at(int dir_fd, const DeviceTable *t, uint64_t generation, const StateIo *io,
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
int state_format_journal(uint64_t generation, const Device *const *devices, size_t n_devices,
                         const int *forgotten, size_t n_forgotten, const uint8_t *key, uint64_t *hashes,
                         Out *o, size_t *ret_lines) {
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
int state_journal_append(int dir_fd, const char *buf, size_t len, const StateIo *io, uint64_t *ret_size,
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

int state_open_dir(const char *dir) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int state_write_snapshot(const char *dir, const DeviceTable *t, uint64_t generation) {
        _cleanup_(closep) int dir_fd = state_open_dir(dir);

        if (dir_fd < 0)
                return dir_fd;
        return state_write_snapshot_at(dir_fd, t, generation, NULL, NULL, NULL);
}

int state_write_journal(const char *dir, uint64_t generation, const Device *const *devices, size_t n_devices,
                        const int *forgotten, size_t n_forgotten) {
        _cleanup_(closep) int dir_fd = -1;
        Out o = {};
        uint64_t size;
        size_t lines;
        bool torn = false;
        int r;

        r = state_format_journal(generation, devices, n_devices, forgotten, n_forgotten, NULL, NULL, &o,
                                 &lines);
        if (r < 0 || o.len == 0) {
                free(o.buf);
                return r;
        }
        dir_fd = state_open_dir(dir);
        if (dir_fd < 0) {
                free(o.buf);
                return dir_fd;
        }
        r = state_journal_append(dir_fd, o.buf, o.len, NULL, &size, &torn);
        free(o.buf);
        return r;
}
