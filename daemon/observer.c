/* observer.c — loading the eBPF observer (the skeleton bpftool made of observer.bpf.c), reading
 * its maps into a sorted snapshot, and the kernel's drop reason names from BTF.
 *
 * A read is lazy: observer_read() starts a new snapshot, and each entry is read from the kernel
 * when it is first asked for in it, one lookup per key. A batch read walks every bucket of a map
 * (32768 of them, each in the kernel, on the daemon's CPU) whatever it holds: a tick that wants a
 * device or two in probation pays for all of them. Only when more than OBSERVER_FEW keys of a map
 * are asked for in one snapshot (a host at scale), or all of them (observer_entries()), is the map
 * read whole in batches; a map no one asks for (drops without a drop.* guard, thresholds without
 * a window) is not read at all. */
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "observer.h"
#include "log.h"
#include "observer.skel.h"
#include "util.h"

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
        struct observer_bpf *skel; /* NULL: fake, or still loading */
        /* while the loader thread runs (observer_start()): what it makes, the main thread does not
         * look at until observer_wait() joined it */
        pthread_t loader;
        bool loading;
        struct observer_bpf *loaded;
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
        uint64_t start_mono, load_mono; /* CLOCK_MONOTONIC: the loader thread began, it ended */
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

/* libbpf prints through this; its lines are not ours to log (they say "libbpf: …" on stderr
 * when a load fails, which the caller says once, in its own words). */
static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list ap) {
        (void) level;
        (void) fmt;
        (void) ap;
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

/* The loader thread: the object opened, loaded (libbpf reads the kernel's BTF, the verifier checks
 * each program, the maps are made) and attached, into o->loaded or o->load_error and
 * o->load_why. It touches nothing else of o, and nothing of the daemon's: libbpf prints nowhere
 * (quiet_print, set before it starts). */
static void *load_main(void *userdata) {
        Observer *o = userdata;
        struct observer_bpf *skel;
        char buf[128];
        int r;

        skel = observer_bpf__open();
        if (!skel) {
                r = errno > 0 ? -errno : -EINVAL;
                why(&o->load_why, "opening the eBPF object: %s", strerror_r(-r, buf, sizeof(buf)));
                o->load_error = r;
                return NULL;
        }
        r = observer_bpf__load(skel);
        if (r < 0) {
                why(&o->load_why, "loading the eBPF object: %s%s", strerror_r(-r, buf, sizeof(buf)),
                    r == -EPERM || r == -EACCES ? " (CAP_BPF and CAP_PERFMON needed, or lockdown forbids it)" : "");
                observer_bpf__destroy(skel);
                o->load_error = r;
                return NULL;
        }
        r = observer_bpf__attach(skel);
        if (r < 0) {
                why(&o->load_why, "attaching to the tracepoints: %s", strerror_r(-r, buf, sizeof(buf)));
                observer_bpf__destroy(skel);
                o->load_error = r;
                return NULL;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o->loaded_usec = (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000u;
        o->load_mono = mono_usec();
        o->loaded = skel;
        return NULL;
}

int observer_start(Observer **ret, char **ret_why) {
        _cleanup_(freep) Observer *o = calloc(1, sizeof(*o));
        int r;

        *ret_why = NULL;
        if (!o)
                return -ENOMEM;
        r = own_netns(&o->own_netns);
        if (r < 0) {
                why(ret_why, "cannot read /proc/self/ns/net: %s", strerror(-r));
                return r;
        }
        if (access("/sys/kernel/btf/vmlinux", R_OK) < 0) {
                r = -errno;
                why(ret_why, "the kernel has no BTF (/sys/kernel/btf/vmlinux: %s)", strerror(-r));
                return r;
        }
        libbpf_set_print(quiet_print);
        o->start_mono = mono_usec();
        r = -pthread_create(&o->loader, NULL, load_main, o);
        if (r < 0) {
                why(ret_why, "starting the thread that loads it: %s", strerror(-r));
                return r;
        }
        o->loading = true;
        *ret = TAKE_PTR(o);
        return 0;
}

int observer_wait(Observer *o, char **ret_why) {
        if (ret_why)
                *ret_why = NULL;
        if (o->loading) {
                uint64_t t0 = mono_usec();
                (void) pthread_join(o->loader, NULL);
                uint64_t waited = mono_usec() - t0;
                o->loading = false;
                o->skel = TAKE_PTR(o->loaded);
                if (o->skel)
                        log_debug("observer: loaded in %llu ms, waited for %llu ms",
                                  (unsigned long long) (o->load_mono - o->start_mono) / 1000,
                                  (unsigned long long) waited / 1000);
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
        Observer *o = calloc(1, sizeof(*o));
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
        if (o->skel)
                observer_bpf__destroy(o->skel);
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
                __u32 count = BATCH;
                int r = bpf_map_lookup_batch(fd, first ? NULL : in, out, keys, values, &count, NULL);
                int err = r < 0 ? -errno : 0;
                if (err < 0 && err != -ENOENT)
                        return err;
                if (entries && grow(entries, cap, total + count, m->esize) < 0)
                        return -ENOMEM;
                for (__u32 i = 0; entries && i < count; i++) {
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

        if (!o->skel || (*whole_at == o->read_at && o->read_at > 0))
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
        if (!o->skel || (*whole_at == o->read_at && o->read_at > 0))
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
        if (bpf_map_lookup_elem(fd, key, value) < 0) {
                if (errno != ENOENT) {
                        log_debug_errno(-errno, "observer: looking up an entry failed: %m");
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
        return fresh_key(o, o->skel ? bpf_map__fd(o->skel->maps.devs) : -1, &dev_shape, (void **) &o->devs, &o->n_devs,
                         &o->cap_devs, &o->devs_whole_at, &o->devs_asked, k);
}

static const DropEntry *fresh_drop(Observer *o, const struct observer_drop_key *k) {
        return fresh_key(o, o->skel ? bpf_map__fd(o->skel->maps.drops) : -1, &drop_shape, (void **) &o->drops,
                         &o->n_drops, &o->cap_drops, &o->drops_whole_at, &o->drops_asked, k);
}

static const NearEntry *fresh_near(Observer *o, const struct observer_key *k) {
        return fresh_key(o, o->skel ? bpf_map__fd(o->skel->maps.nears) : -1, &near_shape, (void **) &o->nears,
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
        if (!o->skel)
                return;
        /* counted in the kernel, the snapshot left as it is: status asks often, and a copy of every
         * entry kept for a count (ten thousand thresholds of windows in probation: 1.6 MB) stayed
         * until its entries went */
        r = read_map(bpf_map__fd(o->skel->maps.devs), &dev_shape, 0, NULL, ret_devs, NULL);
        if (r >= 0)
                r = read_map(bpf_map__fd(o->skel->maps.drops), &drop_shape, 0, NULL, ret_drops, NULL);
        if (r >= 0)
                r = read_map(bpf_map__fd(o->skel->maps.nears), &near_shape, 0, NULL, ret_nears, NULL);
        if (r < 0)
                log_debug_errno(r, "observer: counting the maps' entries failed: %m");
}

static uint64_t map_bytes(const struct bpf_map *m) {
        _cleanup_(freep) char *path = NULL;
        char buf[4096];
        size_t n;
        FILE *f;

        if (asprintf(&path, "/proc/self/fdinfo/%d", bpf_map__fd(m)) < 0)
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
        if (!o->skel)
                return 0;
        return map_bytes(o->skel->maps.devs) + map_bytes(o->skel->maps.drops) + map_bytes(o->skel->maps.nears) +
               map_bytes(o->skel->maps.delivs);
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
        if (o->skel) {
                int r = fresh_whole(o, bpf_map__fd(o->skel->maps.drops), &drop_shape, (void **) &o->drops,
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
        if (o->skel && bpf_map_update_elem(bpf_map__fd(o->skel->maps.nears), &k, &v, BPF_ANY) < 0)
                return -errno;
        if (o->skel && !(o->nears_whole_at == o->read_at && o->read_at > 0)) {
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

        if (o->skel)
                (void) bpf_map_delete_elem(bpf_map__fd(o->skel->maps.nears), &k);
        drop_near_copy(o, netns, ifindex);
}

static DelivEntry *find_deliv(const Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        return o->n_delivs ? bsearch(&k, o->delivs, o->n_delivs, sizeof(DelivEntry), cmp_key) : NULL;
}

/* The programs look into `delivs` only while it holds an entry. */
static void delivs_on(Observer *o) {
        if (o->skel && o->skel->bss)
                __atomic_store_n(&o->skel->bss->delivs_on, (__u32) o->n_delivs, __ATOMIC_RELAXED);
}

int observer_deliv_set(Observer *o, uint32_t netns, int ifindex, const uint32_t len[static 2]) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        struct observer_deliv v = {};
        DelivEntry *e;

        if (!find_deliv(o, netns, ifindex) && o->n_delivs >= OBSERVER_DELIVS_MAX)
                return -ENOSPC;
        memcpy(v.len, len, sizeof(v.len));
        if (o->skel && bpf_map_update_elem(bpf_map__fd(o->skel->maps.delivs), &k, &v, BPF_ANY) < 0)
                return -errno;
        e = upsert((void **) &o->delivs, &o->n_delivs, &o->cap_delivs, sizeof(DelivEntry), &k, sizeof(k), cmp_key);
        if (!e) {
                if (o->skel)
                        (void) bpf_map_delete_elem(bpf_map__fd(o->skel->maps.delivs), &k);
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
        if (o->skel) {
                o->lookups++;
                if (bpf_map_lookup_elem(bpf_map__fd(o->skel->maps.delivs), &k, &e->v) < 0)
                        return -errno;
        }
        *ret = e->v;
        return 0;
}

void observer_deliv_clear(Observer *o, uint32_t netns, int ifindex) {
        struct observer_key k = {.netns = netns, .ifindex = (uint32_t) ifindex};
        DelivEntry *e = find_deliv(o, netns, ifindex);

        if (!e)
                return;
        if (o->skel)
                (void) bpf_map_delete_elem(bpf_map__fd(o->skel->maps.delivs), &k);
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
        if (o->skel)
                (void) bpf_map_delete_elem(bpf_map__fd(o->skel->maps.devs), &k);
        if (e) {
                remove_at(o->devs, &o->n_devs, sizeof(DevEntry), (size_t) (e - o->devs));
                shrink((void **) &o->devs, o->n_devs, &o->cap_devs, sizeof(DevEntry));
        }
        if (o->skel) {
                /* its drops of every reason, in the kernel now: a device gone is rare, a batch read
                 * for it cheap enough (a new device of its ifindex must not inherit them) */
                o->drops_whole_at = 0;
                int r = fresh_whole(o, bpf_map__fd(o->skel->maps.drops), &drop_shape, (void **) &o->drops,
                                    &o->n_drops, &o->cap_drops, &o->drops_whole_at);
                if (r < 0)
                        log_debug_errno(r, "observer: reading the drops of a device gone failed: %m");
        }
        for (size_t i = o->n_drops; i > 0; i--)
                if (cmp_key(&o->drops[i - 1].key, &k) == 0) {
                        if (o->skel)
                                (void) bpf_map_delete_elem(bpf_map__fd(o->skel->maps.drops), &o->drops[i - 1].key);
                        remove_at(o->drops, &o->n_drops, sizeof(DropEntry), i - 1);
                }
}

/* ---- drop reasons ---- */

static char **reason_names;  /* NULL-terminated, lower case */
static uint32_t *reason_values;
static size_t n_reasons;
static int reasons_error;    /* 0: not read yet; <0: could not be */

static int read_reasons(void) {
        struct btf *btf;
        int id;

        if (reason_names || reasons_error < 0)
                return reasons_error;
        libbpf_set_print(quiet_print);
        btf = btf__load_vmlinux_btf();
        if (!btf)
                return (reasons_error = -EOPNOTSUPP);
        id = btf__find_by_name_kind(btf, "skb_drop_reason", BTF_KIND_ENUM);
        const struct btf_type *t = id > 0 ? btf__type_by_id(btf, (__u32) id) : NULL;
        if (!t) {
                btf__free(btf);
                return (reasons_error = -EOPNOTSUPP);
        }
        size_t vlen = btf_vlen(t);
        const struct btf_enum *en = btf_enum(t);
        reason_names = calloc(vlen + 1, sizeof(char *));
        reason_values = calloc(vlen + 1, sizeof(uint32_t));
        if (!reason_names || !reason_values) {
                btf__free(btf);
                return -ENOMEM;
        }
        for (size_t i = 0; i < vlen; i++) {
                const char *name = btf__name_by_offset(btf, en[i].name_off);
                static const char prefix[] = "SKB_DROP_REASON_";
                if (!name || strncmp(name, prefix, strlen(prefix)) != 0 || streq_ptr(name, "SKB_DROP_REASON_MAX"))
                        continue; /* SKB_CONSUMED (no drop), the last one's _MAX */
                char *s = strdup(name + strlen(prefix));
                if (!s)
                        break;
                for (char *p = s; *p; p++)
                        *p = (char) tolower((unsigned char) *p);
                reason_names[n_reasons] = s;
                reason_values[n_reasons++] = (uint32_t) en[i].val;
        }
        btf__free(btf);
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
        return access("/sys/kernel/btf/vmlinux", R_OK) == 0;
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
        if (!o->skel)
                return -EOPNOTSUPP;
        for (size_t i = 1; i <= n; i++) {
                struct observer_key k = {.netns = netns, .ifindex = (uint32_t) i};
                struct observer_dev v = {.tcp_sent = i, .big[OBSERVER_TX][OBSERVER_IPV6] = i};
                struct observer_drop_key dk = {.netns = netns, .ifindex = (uint32_t) i, .reason = 2};
                uint64_t one = 1;
                if (bpf_map_update_elem(bpf_map__fd(o->skel->maps.devs), &k, &v, BPF_ANY) < 0 ||
                    bpf_map_update_elem(bpf_map__fd(o->skel->maps.drops), &dk, &one, BPF_ANY) < 0)
                        return -errno;
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
