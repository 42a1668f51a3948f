/* observer.c — the eBPF observer: its loader started (observer-loader.h: a program of its own, so
 * that libbpf and the kernel's BTF never weigh on the daemon) and its descriptors taken, its maps
 * read into a sorted snapshot, and the kernel's drop reason names from BTF.
 *
 * A read is lazy: observer_read() starts a new snapshot, and each entry is read from the kernel
 * when it is first asked for in it, one lookup per key. A batch read walks every bucket of a map
 * (32768 of them, each in the kernel, on the daemon's CPU) whatever it holds: a tick that wants a
 * device or two in probation pays for all of them. Only when more than OBSERVER_FEW keys of a map
 * are asked for in one snapshot (a host at scale), or all of them (observer_entries()), is the map
 * read whole in batches; a map no one asks for (drops without a drop.* guard, thresholds without
 * a window) is not read at all. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bpf-map.h"
#include "btf-enum.h"
#include "observer.h"
#include "log.h"
#include "observer-loader.h"
#include "sandbox.h"
#include "util.h"

#ifndef OBSERVER_LOADER_PATH
#error "OBSERVER_LOADER_PATH: where the package installs bigtcpd-observer-loader (meson.build)"
#endif
/* How long a start waits for the loader at most (the load takes 0.1 s): then it is killed, and
 * the observer does not run. */
#define OBSERVER_LOAD_TIMEOUT_MSEC (60 * 1000)

/* Where the kernel describes its types (CONFIG_DEBUG_INFO_BTF): what tp_btf programs attach by,
 * and where the drop reasons' names are. */
#define VMLINUX_BTF "/sys/kernel/btf/vmlinux"

#define BATCH 1024u      /* entries per lookup_batch call */
#define OBSERVER_FEW 64u /* keys of a map looked up one by one in a snapshot; beyond, one batch read */

/* Each entry: the kernel's key and value, and the snapshot (read_at) it was read in. */
typedef struct DevEntry {
        struct observer_key key;
        struct observer_dev v;
        uint64_t at;
} DevEntry;

typedef struct DropEntry {
        struct observer_drop_key key;
        uint64_t n;
        uint64_t at;
} DropEntry;

typedef struct NearEntry {
        struct observer_key key;
        struct observer_near v;
        uint64_t at;
} NearEntry;

/* A peer's delivery counts the daemon set (observer_deliv_set()): never part of a snapshot, each
 * looked up when asked for (once per step's window). For a fake observer, its counts too. */
typedef struct DelivEntry {
        struct observer_key key;
        struct observer_deliv v;
} DelivEntry;

/* How one map's entries lie in its snapshot array. */
typedef struct MapShape {
        size_t ksize, vsize, esize, voff, atoff;
        int (*cmp)(const void *, const void *);
} MapShape;


struct Observer {
        /* the maps (observer-loader.h's order) and the links that keep the programs attached, as
         * the loader sent them; maps[0] < 0: fake, or still loading */
        int maps[_OBSERVER_FD_MAPS];
        int links[OBSERVER_LINKS_MAX];
        size_t n_links;
        /* while the loader runs (observer_start()): its pid and socket, until observer_wait() */
        pid_t loader;
        int loader_fd;
        int load_error;
        char *load_why;
        uint32_t own_netns;
        DevEntry *devs;
        size_t n_devs, cap_devs;
        DropEntry *drops;
        size_t n_drops, cap_drops;
        NearEntry *nears;
        size_t n_nears, cap_nears;
        DelivEntry *delivs; /* what is in the kernel's map: the entries set, sorted */
        size_t n_delivs, cap_delivs;
        uint64_t devs_whole_at, drops_whole_at, nears_whole_at; /* the snapshot each was read whole in */
        size_t devs_asked, drops_asked, nears_asked;            /* keys looked up in this snapshot */
        uint64_t whole_reads, lookups;
        uint64_t read_at, read_cost;
        uint64_t loaded_usec;
        uint64_t start_mono, load_mono; /* CLOCK_MONOTONIC: the loader began, its answer came */
};

static const char *const mode_table[_OBSERVER_MODE_MAX] = {
        [OBSERVER_MODE_AUTO] = "auto",
        [OBSERVER_MODE_EBPF] = "ebpf",
        [OBSERVER_MODE_PACKET_SOCKET] = "packet-socket",
};

const char *observer_mode_to_string(ObserverMode m) {
        return m >= 0 && m < _OBSERVER_MODE_MAX ? mode_table[m] : NULL;
}

ObserverMode observer_mode_from_string(const char *s) {
        for (ObserverMode m = 0; s && m < _OBSERVER_MODE_MAX; m++)
                if (streq_ptr(s, mode_table[m]))
                        return m;
        return _OBSERVER_MODE_INVALID;
}

static uint64_t mono_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000u;
}

static int own_netns(uint32_t *ret) {
        struct stat st;
        if (stat("/proc/self/ns/net", &st) < 0)
                return -errno;
        *ret = (uint32_t) st.st_ino;
        return 0;
}

static int why(char **ret_why, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(ret_why, fmt, ap) < 0)
                *ret_why = NULL;
        va_end(ap);
        return 0;
}

static bool live(const Observer *o) {
        return o->maps[0] >= 0;
}

static void close_all(Observer *o) {
        for (size_t i = 0; i < _OBSERVER_FD_MAPS; i++)
                o->maps[i] = safe_close(o->maps[i]);
        for (size_t i = 0; i < o->n_links; i++)
                o->links[i] = safe_close(o->links[i]);
        o->n_links = 0;
}

static Observer *observer_alloc(void) {
        Observer *o = calloc(1, sizeof(*o));

        if (!o)
                return NULL;
        for (size_t i = 0; i < _OBSERVER_FD_MAPS; i++)
                o->maps[i] = -1;
        o->loader = -1;
        o->loader_fd = -1;
        return o;
}

/* The loader's program: $BIGTCPD_OBSERVER_LOADER (tests), else the one built beside the running
 * daemon (a build tree), else the package's. */
static char *loader_path(void) {
        const char *env = getenv("BIGTCPD_OBSERVER_LOADER");
        char self[PATH_MAX], *slash, *p = NULL;
        ssize_t n;

        if (env && *env)
                return strdup(env);
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n > 0) {
                self[n] = '\0';
                slash = strrchr(self, '/');
                if (slash) {
                        *slash = '\0';
                        if (asprintf(&p, "%s/" OBSERVER_LOADER_NAME, self) < 0)
                                return NULL;
                        if (access(p, X_OK) == 0)
                                return p;
                        free(p);
                }
        }
        return strdup(OBSERVER_LOADER_PATH);
}

/* In the child: the loader, with the socket as descriptor 3 and nothing else of the daemon's. */
__attribute__((noreturn)) static void run_loader(int fd, pid_t parent, const void *arg) {
        const char *path = arg;
        int fl;

        if (sandbox_detach(fd, parent) < 0)
                _exit(127);
        fl = fcntl(SANDBOX_OUTPUT_FD, F_GETFD);
        if (fl < 0 || fcntl(SANDBOX_OUTPUT_FD, F_SETFD, fl & ~FD_CLOEXEC) < 0)
                _exit(127);
        execl(path, OBSERVER_LOADER_NAME, (char *) NULL);
        _exit(127);
}

int observer_start(Observer **ret, char **ret_why) {
        _cleanup_(freep) Observer *o = observer_alloc();
        _cleanup_(freep) char *path = NULL;
        int r;

        *ret_why = NULL;
        if (!o)
                return -ENOMEM;
        r = own_netns(&o->own_netns);
        if (r < 0) {
                why(ret_why, "cannot read /proc/self/ns/net: %s", strerror(-r));
                return r;
        }
        if (access(VMLINUX_BTF, R_OK) < 0) {
                r = -errno;
                why(ret_why, "the kernel has no BTF (" VMLINUX_BTF ": %s)", strerror(-r));
                return r;
        }
        path = loader_path();
        if (!path)
                return -ENOMEM;
        if (access(path, X_OK) < 0) {
                r = -errno;
                why(ret_why, "cannot run its loader %s: %s", path, strerror(-r));
                return r;
        }
        o->start_mono = mono_usec();
        r = sandbox_spawn(NULL, run_loader, path, NULL, NULL, &o->loader_fd, &o->loader, &(SandboxReaper *){NULL});
        if (r < 0) {
                why(ret_why, "starting its loader: %s", strerror(-r));
                return r;
        }
        *ret = TAKE_PTR(o);
        return 0;
}

/* Each descriptor the loader sent is what observer-loader.h says it is: a map of the key and value
 * sizes the daemon reads (a loader of another build would not be). */
static int check_maps(const int fds[static _OBSERVER_FD_MAPS]) {
        static const struct {
                uint32_t key, value;
        } want[_OBSERVER_FD_MAPS] = {
                [OBSERVER_FD_DEVS] = {sizeof(struct observer_key), sizeof(struct observer_dev)},
                [OBSERVER_FD_DROPS] = {sizeof(struct observer_drop_key), sizeof(uint64_t)},
                [OBSERVER_FD_NEARS] = {sizeof(struct observer_key), sizeof(struct observer_near)},
                [OBSERVER_FD_DELIVS] = {sizeof(struct observer_key), sizeof(struct observer_deliv)},
                [OBSERVER_FD_BSS] = {sizeof(uint32_t), sizeof(uint32_t)},
        };

        for (size_t i = 0; i < _OBSERVER_FD_MAPS; i++) {
                struct bpf_map_info info;
                int r = bpf_map_fd_info(fds[i], &info);
                if (r < 0)
                        return r;
                if (info.key_size != want[i].key || info.value_size != want[i].value)
                        return -EPROTO;
        }
        return 0;
}

/* The loader's message, waited for (at most OBSERVER_LOAD_TIMEOUT_MSEC), its descriptors taken. */
static int take_loaded(Observer *o) {
        int fds[SANDBOX_FDS_MAX];
        ObserverLoaded m;
        struct pollfd p = {.fd = o->loader_fd, .events = POLLIN};
        size_t n_fds = 0;
        ssize_t k;
        int r;

        do
                r = poll(&p, 1, OBSERVER_LOAD_TIMEOUT_MSEC);
        while (r < 0 && errno == EINTR);
        if (r == 0) {
                why(&o->load_why, "its loader did not answer within %u s", OBSERVER_LOAD_TIMEOUT_MSEC / 1000);
                return -ETIMEDOUT;
        }
        k = sandbox_recv_fds(o->loader_fd, 0, &m, sizeof(m), fds, ELEMENTSOF(fds), &n_fds);
        if (k < 0) {
                why(&o->load_why, "reading its loader's answer: %s", strerror((int) -k));
                return (int) k;
        }
        if (k == 0) {
                why(&o->load_why, "its loader exited without an answer (is %s installed?)", OBSERVER_LOADER_NAME);
                return -ECHILD;
        }
        r = 0;
        if ((size_t) k != sizeof(m) || m.n_links > OBSERVER_LINKS_MAX ||
            (m.error == 0 && n_fds != _OBSERVER_FD_MAPS + m.n_links) || (m.error < 0 && n_fds != 0) || m.error > 0) {
                why(&o->load_why, "its loader's answer is not one this bigtcpd reads");
                r = -EPROTO;
        } else if (m.error < 0) {
                m.why[sizeof(m.why) - 1] = '\0';
                o->load_why = strdup(m.why);
                r = m.error;
        } else if ((r = check_maps(fds)) < 0)
                why(&o->load_why, "its loader's maps are not those this bigtcpd reads: %s", strerror(-r));
        if (r < 0) {
                for (size_t i = 0; i < n_fds; i++)
                        safe_close(fds[i]);
                return r;
        }
        memcpy(o->maps, fds, sizeof(o->maps));
        memcpy(o->links, fds + _OBSERVER_FD_MAPS, m.n_links * sizeof(int));
        o->n_links = m.n_links;
        o->loaded_usec = m.loaded_usec;
        return 0;
}

int observer_wait(Observer *o, char **ret_why) {
        if (ret_why)
                *ret_why = NULL;
        if (o->loader > 0) {
                uint64_t t0 = mono_usec();
                o->load_error = take_loaded(o);
                /* it exits once it has sent its answer; one that did not is stopped */
                if (o->load_error < 0)
                        (void) kill(o->loader, SIGKILL);
                while (waitpid(o->loader, NULL, 0) < 0 && errno == EINTR)
                        ;
                o->loader = -1;
                o->loader_fd = safe_close(o->loader_fd);
                o->load_mono = mono_usec();
                if (o->load_error >= 0)
                        log_debug("observer: loaded in %llu ms, waited for %llu ms",
                                  (unsigned long long) (o->load_mono - o->start_mono) / 1000,
                                  (unsigned long long) (o->load_mono - t0) / 1000);
        }
        if (o->load_error < 0 && ret_why)
                *ret_why = TAKE_PTR(o->load_why);
        return o->load_error;
}

int observer_new(Observer **ret, char **ret_why) {
        Observer *o;
        int r;

        r = observer_start(&o, ret_why);
        if (r < 0)
                return r;
        r = observer_wait(o, ret_why);
        if (r < 0) {
                observer_free(o);
                return r;
        }
        *ret = o;
        return 0;
}

uint64_t observer_loaded_usec(const Observer *o) {
        return o->loaded_usec;
}

int observer_new_fake(uint32_t own, Observer **ret) {
        Observer *o = observer_alloc();
        if (!o)
                return -ENOMEM;
        o->own_netns = own;
        *ret = o;
        return 0;
}

void observer_free(Observer *o) {
        if (!o)
                return;
        (void) observer_wait(o, NULL);
        close_all(o);
        free(o->load_why);
        free(o->devs);
        free(o->drops);
        free(o->nears);
        free(o->delivs);
        free(o);
}

uint32_t observer_own_netns(const Observer *o) {
        return o->own_netns;
}

static int cmp_key(const void *a, const void *b) {
        const struct observer_key *x = a, *y = b;
        if (x->netns != y->netns)
                return x->netns < y->netns ? -1 : 1;
        return x->ifindex < y->ifindex ? -1 : x->ifindex > y->ifindex;
}

static int cmp_drop_key(const void *a, const void *b) {
        const struct observer_drop_key *x = a, *y = b;
        int c = cmp_key(a, b); /* netns and ifindex first, as in observer_key */
        if (c != 0)
                return c;
        return x->reason < y->reason ? -1 : x->reason > y->reason;
}

static int grow(void **p, size_t *cap, size_t want, size_t size) {
        if (want <= *cap)
                return 0;
        size_t c = *cap ? *cap : 64;
        while (c < want)
                c *= 2;
        void *n = reallocarray(*p, c, size);
        if (!n)
                return -ENOMEM;
        *p = n;
        *cap = c;
        return 0;
}

/* Room for `n` of `size` kept in proportion: a burst's thousand windows end, and their entries'
 * array (a megabyte at ten thousand) goes with them rather than stay resident while none is set. */
static void shrink(void **p, size_t n, size_t *cap, size_t size) {
        size_t c = *cap;

        if (n == 0) {
                *p = mfree(*p);
                *cap = 0;
                return;
        }
        while (c > 64 && n <= c / 4)
                c /= 2;
        if (c == *cap)
                return;
        void *smaller = reallocarray(*p, c, size);
        if (!smaller)
                return; /* it keeps its room */
        *p = smaller;
        *cap = c;
}

static const MapShape dev_shape = {
        .ksize = sizeof(struct observer_key), .vsize = sizeof(struct observer_dev), .esize = sizeof(DevEntry),
        .voff = offsetof(DevEntry, v), .atoff = offsetof(DevEntry, at), .cmp = cmp_key,
};
static const MapShape drop_shape = {
        .ksize = sizeof(struct observer_drop_key), .vsize = sizeof(uint64_t), .esize = sizeof(DropEntry),
        .voff = offsetof(DropEntry, n), .atoff = offsetof(DropEntry, at), .cmp = cmp_drop_key,
};
static const MapShape near_shape = {
        .ksize = sizeof(struct observer_key), .vsize = sizeof(struct observer_near), .esize = sizeof(NearEntry),
        .voff = offsetof(NearEntry, v), .atoff = offsetof(NearEntry, at), .cmp = cmp_key,
};

/* Every entry of map `fd` into *entries, BATCH at a time, sorted, stamped `at`; with `entries`
 * NULL only counted into *n. */
static int read_map(int fd, const MapShape *m, uint64_t at, void **entries, size_t *n, size_t *cap) {
        _cleanup_(freep) uint8_t *keys = malloc(BATCH * m->ksize), *values = malloc(BATCH * m->vsize);
        uint8_t in[16], out[16]; /* the hash maps' batch token is a u32 bucket index */
        bool first = true;
        size_t total = 0;

        if (!keys || !values)
                return -ENOMEM;
        for (;;) {
                uint32_t count = BATCH;
                int err = bpf_map_fd_lookup_batch(fd, first ? NULL : in, out, keys, values, &count);
                if (err < 0 && err != -ENOENT)
                        return err;
                if (entries && grow(entries, cap, total + count, m->esize) < 0)
                        return -ENOMEM;
                for (uint32_t i = 0; entries && i < count; i++) {
                        uint8_t *e = (uint8_t *) *entries + (total + i) * m->esize;
                        memset(e, 0, m->esize);
                        memcpy(e, keys + i * m->ksize, m->ksize);
                        memcpy(e + m->voff, values + i * m->vsize, m->vsize);
                        memcpy(e + m->atoff, &at, sizeof(at));
                }
                total += count;
                if (err == -ENOENT)
                        break;
                memcpy(in, out, sizeof(in));
                first = false;
        }
        *n = total;
        if (entries && total > 1)
                qsort(*entries, total, m->esize, m->cmp);
        return 0;
}

int observer_read(Observer *o, uint64_t now_usec, uint64_t max_age_usec) {
        return observer_read_for(o, now_usec, max_age_usec, 0);
}

int observer_read_for(Observer *o, uint64_t now_usec, uint64_t max_age_usec, size_t devices) {
        if (max_age_usec > 0 && o->read_at > 0 && now_usec >= o->read_at && now_usec - o->read_at < max_age_usec)
                return 0;
        /* a new snapshot: its entries are read when asked for (a fake one's are what tests set) */
        o->read_at = now_usec ?: 1;
        o->devs_asked = o->drops_asked = o->nears_asked = 0;
        if (devices > OBSERVER_FEW)
                o->devs_asked = OBSERVER_FEW; /* the first one asked reads the map whole */
        return 0;
}

static void *upsert(void **arr, size_t *n, size_t *cap, size_t esize, const void *key, size_t ksize,
                    int (*cmp)(const void *, const void *));
static void remove_at(void *arr, size_t *n, size_t esize, size_t i);

/* Map `fd` read whole into the snapshot, unless it was in this one. */
static int fresh_whole(Observer *o, int fd, const MapShape *m, void **entries, size_t *n, size_t *cap,
                       uint64_t *whole_at) {
        uint64_t t0;
        int r;

        if (!live(o) || (*whole_at == o->read_at && o->read_at > 0))
                return 0;
        t0 = mono_usec();
        r = read_map(fd, m, o->read_at, entries, n, cap);
        if (r < 0)
                return r;
        *whole_at = o->read_at;
        o->read_cost = mono_usec() - t0;
        o->whole_reads++;
        return 0;
}

/* A snapshot's stamp on an entry the kernel did not have when asked in it: the entry (zero) stays
 * in the array, and the snapshot's next question for its key costs no lookup. Snapshots are
 * microseconds of CLOCK_MONOTONIC: the bit is never theirs. */
#define ABSENT (UINT64_C(1) << 63)

/* The entry of `key` in the snapshot as the kernel has it in this one: looked up in the kernel
 * when it was not yet (a whole read of the map once more than OBSERVER_FEW keys were). Returns
 * the entry, NULL when the kernel has none (when the kernel cannot be asked, the last snapshot's
 * entry stays). */
static void *fresh_key(Observer *o, int fd, const MapShape *m, void **entries, size_t *n, size_t *cap,
                       uint64_t *whole_at, size_t *asked, const void *key) {
        uint8_t value[sizeof(struct observer_dev)];
        bool value_absent = false;
        uint8_t *e;
        int r;

        _Static_assert(sizeof(struct observer_dev) >= sizeof(struct observer_near), "value buffer");
        uint64_t at = 0, absent_at = o->read_at | ABSENT;

        e = *n ? bsearch(key, *entries, *n, m->esize, m->cmp) : NULL;
        if (e)
                memcpy(&at, e + m->atoff, sizeof(at));
        if (!live(o) || (*whole_at == o->read_at && o->read_at > 0))
                return e;
        if (e && at == o->read_at)
                return e;
        if (e && at == absent_at)
                return NULL; /* asked already in this snapshot: the kernel had none */
        if (++*asked > OBSERVER_FEW) {
                r = fresh_whole(o, fd, m, entries, n, cap, whole_at);
                if (r < 0)
                        log_debug_errno(r, "observer: reading a map whole failed: %m");
                e = *n ? bsearch(key, *entries, *n, m->esize, m->cmp) : NULL;
                if (e)
                        memcpy(&at, e + m->atoff, sizeof(at));
                return e && !(at & ABSENT) ? e : NULL;
        }
        o->lookups++;
        r = bpf_map_fd_lookup(fd, key, value);
        if (r < 0) {
                if (r != -ENOENT) {
                        log_debug_errno(r, "observer: looking up an entry failed: %m");
                        return e && !(at & ABSENT) ? e : NULL;
                }
                /* none: remembered as such for the rest of the snapshot (a device without
                 * traffic is asked for a guard's counter and for its `per`) */
                value_absent = true;
                memset(value, 0, sizeof(value));
        }
        e = upsert(entries, n, cap, m->esize, key, m->ksize, m->cmp);
        if (!e)
                return NULL;
        memcpy(e + m->voff, value, m->vsize);
        memcpy(e + m->atoff, value_absent ? &absent_at : &o->read_at, sizeof(o->read_at));
        return value_absent ? NULL : e;
}

static const DevEntry *fresh_dev(Observer *o, const struct observer_key *k) {
        return fresh_key(o, o->maps[OBSERVER_FD_DEVS], &dev_shape, (void **) &o->devs, &o->n_devs,
                         &o->cap_devs, &o->devs_whole_at, &o->devs_asked, k);
}

static const DropEntry *fresh_drop(Observer *o, const struct observer_drop_key *k) {
        return fresh_key(o, o->maps[OBSERVER_FD_DROPS], &drop_shape, (void **) &o->drops,
                         &o->n_drops, &o->cap_drops, &o->drops_whole_at, &o->drops_asked, k);
}

static const NearEntry *fresh_near(Observer *o, const struct observer_key *k) {
        return fresh_key(o, o->maps[OBSERVER_FD_NEARS], &near_shape, (void **) &o->nears,
                         &o->n_nears, &o->cap_nears, &o->nears_whole_at, &o->nears_asked, k);
}

uint64_t observer_read_at(const Observer *o) {
        return o->read_at;
}

uint64_t observer_read_cost_usec(const Observer *o) {
        return o->read_cost;
}

uint64_t observer_whole_reads(const Observer *o) {
        return o->whole_reads;
}

uint64_t observer_lookups(const Observer *o) {
        return o->lookups;
}

size_t observer_snapshot_bytes(const Observer *o) {
        return o->cap_devs * sizeof(DevEntry) + o->cap_drops * sizeof(DropEntry) + o->cap_nears * sizeof(NearEntry);
}

void observer_entries(Observer *o, size_t *ret_devs, size_t *ret_drops, size_t *ret_nears) {
        int r = 0;

        *ret_devs = o->n_devs;
        *ret_drops = o->n_drops;
        *ret_nears = o->n_nears;
        if (!live(o))
                return;
        /* counted in the kernel, the snapshot left as it is: status asks often, and a copy of every
         * entry kept for a count (ten thousand thresholds of windows in probation: 1.6 MB) stayed
         * until its entries went */
        r = read_map(o->maps[OBSERVER_FD_DEVS], &dev_shape, 0, NULL, ret_devs, NULL);
        if (r >= 0)
                r = read_map(o->maps[OBSERVER_FD_DROPS], &drop_shape, 0, NULL, ret_drops, NULL);
        if (r >= 0)
                r = read_map(o->maps[OBSERVER_FD_NEARS], &near_shape, 0, NULL, ret_nears, NULL);
        if (r < 0)
                log_debug_errno(r, "observer: counting the maps' entries failed: %m");
}

static uint64_t map_bytes(int fd) {
        _cleanup_(freep) char *path = NULL;
        char buf[4096];
        size_t n;
        FILE *f;

        if (asprintf(&path, "/proc/self/fdinfo/%d", fd) < 0)
                return 0;
        f = fopen(path, "re");
        if (!f)
                return 0;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *p = strstr(buf, "memlock:");
        return p ? strtoull(p + strlen("memlock:"), NULL, 10) : 0;
}

uint64_t observer_map_bytes(const Observer *o) {
        if (!live(o))
                return 0;
        return map_bytes(o->maps[OBSERVER_FD_DEVS]) + map_bytes(o->maps[OBSERVER_FD_DROPS]) +
               map_bytes(o->maps[OBSERVER_FD_NEARS]) + map_bytes(o->maps[OBSERVER_FD_DELIVS]);
}

static const DevEntry *find_dev(const Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        return o->n_devs ? bsearch(&k, o->devs, o->n_devs, sizeof(DevEntry), cmp_key) : NULL;
}

static const NearEntry *find_near(const Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        return o->n_nears ? bsearch(&k, o->nears, o->n_nears, sizeof(NearEntry), cmp_key) : NULL;
}

int observer_get(Observer *o, uint32_t netns, int ifindex, struct observer_dev *ret) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        const DevEntry *e = fresh_dev(o, &k);

        *ret = e ? e->v : (struct observer_dev){};
        return e ? 0 : -ENOENT;
}

uint64_t observer_drops(Observer *o, uint32_t netns, int ifindex, uint32_t reason) {
        struct observer_drop_key k = {.netns = netns, .ifindex = (uint32_t) ifindex, .reason = reason};
        uint64_t sum = 0;

        if (reason != UINT32_MAX) {
                const DropEntry *e = fresh_drop(o, &k);
                return e ? e->n : 0;
        }
        /* every reason of it: only a whole read finds them all */
        if (live(o)) {
                int r = fresh_whole(o, o->maps[OBSERVER_FD_DROPS], &drop_shape, (void **) &o->drops,
                                    &o->n_drops, &o->cap_drops, &o->drops_whole_at);
                if (r < 0)
                        log_debug_errno(r, "observer: reading the drops failed: %m");
        }
        for (size_t i = 0; i < o->n_drops; i++)
                if (cmp_key(&o->drops[i].key, &k) == 0)
                        sum += o->drops[i].n;
        return sum;
}

int observer_near_get(Observer *o, uint32_t netns, int ifindex, struct observer_near *ret) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        const NearEntry *e = fresh_near(o, &k);

        if (!e)
                return -ENOENT;
        *ret = e->v;
        return 0;
}

/* The snapshot's entry of `k` in a sorted array, inserted (zeroed) when missing. */
static void *upsert(void **arr, size_t *n, size_t *cap, size_t esize, const void *key, size_t ksize,
                    int (*cmp)(const void *, const void *)) {
        size_t lo = 0, hi = *n;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                int c = cmp((uint8_t *) *arr + mid * esize, key);
                if (c == 0)
                        return (uint8_t *) *arr + mid * esize;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (grow(arr, cap, *n + 1, esize) < 0)
                return NULL;
        uint8_t *e = (uint8_t *) *arr + lo * esize;
        memmove(e + esize, e, (*n - lo) * esize);
        memset(e, 0, esize);
        memcpy(e, key, ksize);
        (*n)++;
        return e;
}

static void remove_at(void *arr, size_t *n, size_t esize, size_t i) {
        memmove((uint8_t *) arr + i * esize, (uint8_t *) arr + (i + 1) * esize, (*n - i - 1) * esize);
        (*n)--;
}

/* The snapshot's copy of a device's thresholds goes (none: nothing to do); the room with it. */
static void drop_near_copy(Observer *o, uint32_t netns, int ifindex) {
        const NearEntry *e = find_near(o, netns, ifindex);

        if (!e)
                return;
        remove_at(o->nears, &o->n_nears, sizeof(NearEntry), (size_t) (e - o->nears));
        shrink((void **) &o->nears, o->n_nears, &o->cap_nears, sizeof(NearEntry));
}

int observer_near_set(Observer *o, uint32_t netns, int ifindex, const uint32_t len[static 4]) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        struct observer_near v = {};
        NearEntry *e;

        memcpy(v.len, len, sizeof(v.len));
        if (live(o)) {
                int r = bpf_map_fd_update(o->maps[OBSERVER_FD_NEARS], &k, &v, BPF_ANY);
                if (r < 0)
                        return r;
        }
        if (live(o) && !(o->nears_whole_at == o->read_at && o->read_at > 0)) {
                /* Kept in the kernel alone until asked for: a burst sets thresholds on every device
                 * in probation and reads them at the windows' ends (a copy of each here was 1.6 MB
                 * at ten thousand). An entry of an earlier snapshot is stale now; a snapshot that
                 * read the map whole must have it, for it asks the kernel no more. */
                drop_near_copy(o, netns, ifindex);
                return 0;
        }
        e = upsert((void **) &o->nears, &o->n_nears, &o->cap_nears, sizeof(NearEntry), &k, sizeof(k), cmp_key);
        if (!e)
                return -ENOMEM;
        e->v = v;
        e->at = o->read_at; /* what the kernel has now */
        return 0;
}

void observer_near_clear(Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};

        if (live(o))
                (void) bpf_map_fd_delete(o->maps[OBSERVER_FD_NEARS], &k);
        drop_near_copy(o, netns, ifindex);
}

static DelivEntry *find_deliv(const Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        return o->n_delivs ? bsearch(&k, o->delivs, o->n_delivs, sizeof(DelivEntry), cmp_key) : NULL;
}

/* The programs look into `delivs` only while it holds an entry. */
static void delivs_on(Observer *o) {
        static const uint32_t zero = 0;
        uint32_t on = (uint32_t) o->n_delivs;

        /* the object's global data is one entry: delivs_on alone (check_maps()) */
        if (live(o))
                (void) bpf_map_fd_update(o->maps[OBSERVER_FD_BSS], &zero, &on, BPF_ANY);
}

int observer_deliv_set(Observer *o, uint32_t netns, int ifindex, const uint32_t len[static 2]) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        struct observer_deliv v = {};
        DelivEntry *e;

        if (!find_deliv(o, netns, ifindex) && o->n_delivs >= OBSERVER_DELIVS_MAX)
                return -ENOSPC;
        memcpy(v.len, len, sizeof(v.len));
        if (live(o)) {
                int r = bpf_map_fd_update(o->maps[OBSERVER_FD_DELIVS], &k, &v, BPF_ANY);
                if (r < 0)
                        return r;
        }
        e = upsert((void **) &o->delivs, &o->n_delivs, &o->cap_delivs, sizeof(DelivEntry), &k, sizeof(k), cmp_key);
        if (!e) {
                if (live(o))
                        (void) bpf_map_fd_delete(o->maps[OBSERVER_FD_DELIVS], &k);
                return -ENOMEM;
        }
        e->v = v;
        delivs_on(o);
        return 0;
}

int observer_deliv_get(Observer *o, uint32_t netns, int ifindex, struct observer_deliv *ret) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        DelivEntry *e = find_deliv(o, netns, ifindex);

        if (!e)
                return -ENOENT;
        if (live(o)) {
                o->lookups++;
                int r = bpf_map_fd_lookup(o->maps[OBSERVER_FD_DELIVS], &k, &e->v);
                if (r < 0)
                        return r;
        }
        *ret = e->v;
        return 0;
}

void observer_deliv_clear(Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        DelivEntry *e = find_deliv(o, netns, ifindex);

        if (!e)
                return;
        if (live(o))
                (void) bpf_map_fd_delete(o->maps[OBSERVER_FD_DELIVS], &k);
        remove_at(o->delivs, &o->n_delivs, sizeof(DelivEntry), (size_t) (e - o->delivs));
        delivs_on(o);
}

size_t observer_delivs(const Observer *o) {
        return o->n_delivs;
}

void observer_forget(Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        const DevEntry *e = find_dev(o, netns, ifindex);

        observer_near_clear(o, netns, ifindex);
        observer_deliv_clear(o, netns, ifindex);
        if (live(o))
                (void) bpf_map_fd_delete(o->maps[OBSERVER_FD_DEVS], &k);
        if (e) {
                remove_at(o->devs, &o->n_devs, sizeof(DevEntry), (size_t) (e - o->devs));
                shrink((void **) &o->devs, o->n_devs, &o->cap_devs, sizeof(DevEntry));
        }
        if (live(o)) {
                /* its drops of every reason, in the kernel now: a device gone is rare, a batch read
                 * for it cheap enough (a new device of its ifindex must not inherit them) */
                o->drops_whole_at = 0;
                int r = fresh_whole(o, o->maps[OBSERVER_FD_DROPS], &drop_shape, (void **) &o->drops,
                                    &o->n_drops, &o->cap_drops, &o->drops_whole_at);
                if (r < 0)
                        log_debug_errno(r, "observer: reading the drops of a device gone failed: %m");
        }
        for (size_t i = o->n_drops; i > 0; i--)
                if (cmp_key(&o->drops[i - 1].key, &k) == 0) {
                        if (live(o))
                                (void) bpf_map_fd_delete(o->maps[OBSERVER_FD_DROPS], &o->drops[i - 1].key);
                        remove_at(o->drops, &o->n_drops, sizeof(DropEntry), i - 1);
                }
}

/* ---- drop reasons ---- */

static char **reason_names;  /* NULL-terminated, lower case */
static uint32_t *reason_values;
static size_t n_reasons;
static int reasons_error;    /* 0: not read yet; <0: could not be */

static int read_reasons(void) {
        static const char prefix[] = "SKB_DROP_REASON_";
        BtfEnumValue *v = NULL;
        size_t n = 0;
        int r;

        if (reason_names || reasons_error < 0)
                return reasons_error;
        r = btf_enum_read(VMLINUX_BTF, "skb_drop_reason", &v, &n);
        if (r == -ENOMEM)
                return r; /* asked again next time */
        if (r < 0)
                return (reasons_error = -EOPNOTSUPP); /* no BTF, or no such enum: this kernel says none */
        reason_names = calloc(n + 1, sizeof(char *));
        reason_values = calloc(n + 1, sizeof(uint32_t));
        if (!reason_names || !reason_values) {
                reason_names = mfree(reason_names);
                reason_values = mfree(reason_values);
                btf_enum_free(v, n);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                char *name = v[i].name;
                if (strncmp(name, prefix, strlen(prefix)) != 0 || streq_ptr(name, "SKB_DROP_REASON_MAX"))
                        continue; /* SKB_CONSUMED (no drop), the last one's _MAX */
                memmove(name, name + strlen(prefix), strlen(name + strlen(prefix)) + 1);
                for (char *p = name; *p; p++)
                        *p = (char) tolower((unsigned char) *p);
                reason_names[n_reasons] = TAKE_PTR(v[i].name);
                reason_values[n_reasons++] = (uint32_t) v[i].value;
        }
        btf_enum_free(v, n);
        return 0;
}

int observer_drop_reason(const char *name, uint32_t *ret) {
        int r = read_reasons();
        if (r < 0)
                return r;
        for (size_t i = 0; i < n_reasons; i++)
                if (streq_ptr(reason_names[i], name)) {
                        *ret = reason_values[i];
                        return 0;
                }
        return -ENOENT;
}

bool observer_kernel_has_btf(void) {
        if (reason_names || reasons_error < 0)
                return reasons_error == 0;
        /* where the kernel describes itself (CONFIG_DEBUG_INFO_BTF), what tp_btf programs attach by */
        return access(VMLINUX_BTF, R_OK) == 0;
}

const char *const *observer_drop_reason_names(size_t *ret_n) {
        if (read_reasons() < 0)
                return NULL;
        if (ret_n)
                *ret_n = n_reasons;
        return (const char *const *) reason_names;
}

/* ---- benchmarks and tests ---- */

int observer_bench_fill(Observer *o, uint32_t netns, size_t n) {
        if (!live(o))
                return -EOPNOTSUPP;
        for (size_t i = 1; i <= n; i++) {
                struct observer_key k = {.netns = netns, .ifindex = (uint32_t) i};
                struct observer_dev v = {.tcp_sent = i, .big[OBSERVER_TX][OBSERVER_IPV6] = i};
                struct observer_drop_key dk = {.netns = netns, .ifindex = (uint32_t) i, .reason = 2};
                uint64_t one = 1;
                int r = bpf_map_fd_update(o->maps[OBSERVER_FD_DEVS], &k, &v, BPF_ANY);
                if (r >= 0)
                        r = bpf_map_fd_update(o->maps[OBSERVER_FD_DROPS], &dk, &one, BPF_ANY);
                if (r < 0)
                        return r;
        }
        return 0;
}

int observer_test_set(Observer *o, uint32_t netns, int ifindex, const struct observer_dev *v) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        DevEntry *e = upsert((void **) &o->devs, &o->n_devs, &o->cap_devs, sizeof(DevEntry), &k, sizeof(k), cmp_key);
        if (!e)
                return -ENOMEM;
        e->v = *v;
        return 0;
}

int observer_test_set_drops(Observer *o, uint32_t netns, int ifindex, uint32_t reason, uint64_t n) {
        struct observer_drop_key k = {.netns = netns, .ifindex = (uint32_t) ifindex, .reason = reason};
        DropEntry *e = upsert((void **) &o->drops, &o->n_drops, &o->cap_drops, sizeof(DropEntry), &k, sizeof(k),
                              cmp_drop_key);
        if (!e)
                return -ENOMEM;
        e->n = n;
        return 0;
}

int observer_test_set_deliv(Observer *o, uint32_t netns, int ifindex, const uint64_t received[static 2],
                            const uint64_t dropped[static 2]) {
        DelivEntry *e = find_deliv(o, netns, ifindex);
        if (!e)
                return -ENOENT;
        memcpy(e->v.received, received, sizeof(e->v.received));
        memcpy(e->v.dropped, dropped, sizeof(e->v.dropped));
        return 0;
}

int observer_test_set_near(Observer *o, uint32_t netns, int ifindex, const uint64_t count[static 4],
                           const uint32_t largest[static 4]) {
        NearEntry *e = (NearEntry *) find_near(o, netns, ifindex);
        if (!e)
                return -ENOENT;
        memcpy(e->v.count, count, sizeof(e->v.count));
        memcpy(e->v.largest, largest, sizeof(e->v.largest));
        return 0;
}

int observer_test_set_near_dropped(Observer *o, uint32_t netns, int ifindex, const uint64_t dropped[static 2]) {
        NearEntry *e = (NearEntry *) find_near(o, netns, ifindex);
        if (!e)
                return -ENOENT;
        memcpy(e->v.dropped, dropped, sizeof(e->v.dropped));
        return 0;
}
