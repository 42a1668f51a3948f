/* observer-read.c — what reading the eBPF observer costs the daemon at N devices: loads the
 * observer, fills its maps with N made-up devices (and a drop reason each), then reads them as
 * a tick does (observer_read(), then the counts, drops and thresholds of the ASKED devices in
 * probation or watched; ASKED 0: the maps whole, as status does), and prints the median wall time
 * and the CPU time per read, the kernel memory of the maps (memlock) and the snapshot the daemon
 * keeps. Not a test: run as root, `observer-read [N] [READS] [ASKED]` (default 10000, 50, 1). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "observer.h"

static uint64_t usec(clockid_t c) {
        struct timespec ts;
        clock_gettime(c, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

static int cmp(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
        size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 10000, reads = argc > 2 ? strtoul(argv[2], NULL, 10) : 50;
        size_t asked = argc > 3 ? strtoul(argv[3], NULL, 10) : 1;
        Observer *o;
        char *why = NULL;
        int r = observer_new(&o, &why);

        if (r < 0) {
                fprintf(stderr, "observer-read: the observer does not load: %s\n", why ? why : "?");
                return 1;
        }
        r = observer_bench_fill(o, 1, n);
        if (r < 0) {
                fprintf(stderr, "observer-read: filling the maps: %d\n", r);
                return 1;
        }
        uint64_t *wall = calloc(reads ? reads : 1, sizeof(uint64_t));
        struct rusage r0, r1;
        size_t devs, drops, nears;
        getrusage(RUSAGE_SELF, &r0);
        for (size_t i = 0; i < reads; i++) {
                uint64_t t = usec(CLOCK_MONOTONIC);
                if (observer_read(o, t, 0) < 0)
                        return 1;
                for (size_t d = 1; d <= asked; d++) {
                        struct observer_dev v;
                        struct observer_near near;
                        (void) observer_get(o, 1, (int) d, &v);
                        (void) observer_drops(o, 1, (int) d, 2);
                        (void) observer_near_get(o, 1, (int) d, &near);
                }
                if (asked == 0)
                        observer_entries(o, &devs, &drops, &nears);
                wall[i] = usec(CLOCK_MONOTONIC) - t;
        }
        getrusage(RUSAGE_SELF, &r1);
        qsort(wall, reads, sizeof(uint64_t), cmp);
        observer_entries(o, &devs, &drops, &nears);
        double cpu = ((double) (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (double) (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                      ((double) (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) + (double) (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec)) / 1e6) /
                     (double) reads;
        printf("observer at %zu devices (%zu in the snapshot, %zu drop entries), %zu asked for per read (0: all): "
               "read %.2f ms (median of %zu), "
               "CPU %.2f ms per read; maps %.1f MiB of kernel memory (memlock), snapshot %.1f MiB\n",
               n, devs, drops, asked, (double) wall[reads / 2] / 1000.0, reads, cpu * 1000.0,
               (double) observer_map_bytes(o) / 1048576.0,
               (double) (devs * (sizeof(struct observer_key) + sizeof(struct observer_dev)) + drops * 24) / 1048576.0);
        free(wall);
        free(why);
        observer_free(o);
        return 0;
}
