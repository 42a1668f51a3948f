/* probation.c — the probation set: its list of devices, its one timer, sampling, and verdicts
 * through ProbationOps. */
#include <linux/if_link.h>
#include <malloc.h>
#include <string.h>
#include <time.h>

#include "probation.h"

struct ProbationSet {
        struct event_base *base;
        Writer *writer;
        char *proc_net;
        const Clock *clock;
        const ProbationOps *ops;
        void *userdata;
        struct event *timer;
        TAILQ_HEAD(, Device) devices;
        size_t n;
};

int probation_new(const RollbackSpec *spec, const SnmpSnapshot *snap, uint64_t now_usec, Probation **ret) {
        _cleanup_(probation_freep) Probation *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return -ENOMEM;
        p->window_usec = spec->window_usec;
        p->interval_usec = spec->interval_usec ?: USEC_PER_SEC;
        p->until_usec = now_usec + spec->window_usec;
        p->next_usec = now_usec + p->interval_usec;
        r = guard_set_init(&p->guards, spec, snap);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(p);
        return 0;
}

void probation_free(Probation *p) {
        if (!p)
                return;
        guard_set_done(&p->guards);
        free(p);
}

static void on_timer(evutil_socket_t fd, short what, void *userdata) {
        probation_tick(userdata);
}

int probation_set_new(struct event_base *base, Writer *writer, const char *proc_net, const Clock *clock,
                      const ProbationOps *ops, void *userdata, ProbationSet **ret) {
        ProbationSet *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        *s = (ProbationSet){.base = base, .writer = writer, .clock = clock, .ops = ops, .userdata = userdata};
        TAILQ_INIT(&s->devices);
        s->proc_net = strdup(proc_net);
        s->timer = evtimer_new(base, on_timer, s);
        if (!s->proc_net || !s->timer) {
                probation_set_free(s);
                return -ENOMEM;
        }
        *ret = s;
        return 0;
}

void probation_set_free(ProbationSet *s) {
        Device *d;

        if (!s)
                return;
        while ((d = TAILQ_FIRST(&s->devices)))
                probation_end(s, d);
        if (s->timer)
                event_free(s->timer);
        free(s->proc_net);
        free(s);
}

static uint64_t now(const ProbationSet *s) {
        return clock_now(s->clock, CLOCK_BOOTTIME);
}

static void attach(ProbationSet *s, Device *d, Probation *p) {
        if (d->probation)
                probation_end(s, d);
        d->probation = p;
        TAILQ_INSERT_TAIL(&s->devices, d, probation_link);
        s->n++;
}

int probation_begin(ProbationSet *s, Device *d, const RollbackSpec *spec, const SnmpSnapshot *snap) {
        Probation *p;
        int r;

        if (spec->n_guards == 0 || spec->window_usec == 0) {
                probation_end(s, d);
                return 0;
        }
        r = probation_new(spec, snap, now(s), &p);
        if (r < 0)
                return r;
        attach(s, d, p);
        return 0;
}

void probation_resume(ProbationSet *s, Device *d, Probation *p) {
        p->next_usec = 0;
        p->sample_pending = false;
        attach(s, d, p);
}

void probation_end(ProbationSet *s, Device *d) {
        if (!d->probation)
                return;
        TAILQ_REMOVE(&s->devices, d, probation_link);
        s->n--;
        probation_free(d->probation);
        d->probation = NULL;
        probation_arm(s);
        /* The last window of a burst closed: the heap that thousands of probations held is
         * free now, give it back instead of keeping it as resident memory. */
        if (s->n == 0)
                (void) malloc_trim(0);
}

void probation_arm(ProbationSet *s) {
        uint64_t tick = UINT64_MAX;
        Device *d;

        if (s->n == 0) {
                evtimer_del(s->timer);
                return;
        }
        if (evtimer_pending(s->timer, NULL))
                return;
        TAILQ_FOREACH(d, &s->devices, probation_link) {
                if (d->probation->interval_usec < tick)
                        tick = d->probation->interval_usec;
                if (tick <= 100 * USEC_PER_MSEC)
                        break; /* no need to look further than the finest sensible tick */
        }
        struct timeval tv = {.tv_sec = (time_t) (tick / USEC_PER_SEC), .tv_usec = (suseconds_t) (tick % USEC_PER_SEC)};
        evtimer_add(s->timer, &tv);
}

/* A verdict waiting to go up once the walk over the list is over. */
typedef struct Verdict {
        Device *device;
        bool tripped;
        RollbackRecord why; /* strings owned here */
} Verdict;

static int verdict_push(Verdict **v, size_t *n, Device *d, const RollbackRecord *why) {
        Verdict *x = reallocarray(*v, *n + 1, sizeof(Verdict));
        if (!x)
                return -ENOMEM;
        *v = x;
        x[*n] = (Verdict){.device = d, .tripped = why != NULL};
        if (why) {
                x[*n].why = *why;
                x[*n].why.counter = strdup(why->counter ?: "");
                x[*n].why.per = why->per ? strdup(why->per) : NULL;
        }
        (*n)++;
        return 0;
}

static void verdicts_send(ProbationSet *s, Verdict *v, size_t n) {
        for (size_t i = 0; i < n; i++) {
                Device *d = v[i].device;
                /* an earlier verdict's consequences may have ended this one's probation */
                if (d->probation) {
                        if (v[i].tripped)
                                s->ops->tripped(s->userdata, d, &v[i].why);
                        else
                                s->ops->passed(s->userdata, d);
                }
                free(v[i].why.counter);
                free(v[i].why.per);
        }
        free(v);
}

void probation_tick(ProbationSet *s) {
        SnmpSnapshot snap = {};
        bool have_snap = false;
        uint64_t t = now(s);
        Verdict *verdicts = NULL;
        size_t n_verdicts = 0;
        RollbackRecord rec;
        Device *d, *next;

        TAILQ_FOREACH(d, &s->devices, probation_link)
                if (d->probation->next_usec <= t && d->write.phase != WRITE_SENT &&
                    guard_set_has_snmp(&d->probation->guards)) {
                        /* one reading of the files for every device due */
                        have_snap = snmp_read(s->proc_net, &snap) >= 0;
                        break;
                }

        /* Devices sampled now go to the end of the list: when there are more than the requests in
         * flight allow, the ones left over come first at the next tick. */
        TAILQ_HEAD(, Device) sampled = TAILQ_HEAD_INITIALIZER(sampled);
        for (d = TAILQ_FIRST(&s->devices); d; d = next) {
                Probation *p = d->probation;
                next = TAILQ_NEXT(d, probation_link);
                if (p->next_usec > t || d->write.phase == WRITE_SENT)
                        continue; /* not due, or its write is not answered yet */
                if (have_snap && guard_set_check(&p->guards, &snap, NULL, 0, &rec) > 0) {
                        (void) verdict_push(&verdicts, &n_verdicts, d, &rec);
                        continue;
                }
                if (guard_set_has_link(&p->guards) && !p->sample_pending) {
                        if (writer_request_stats(s->writer, d) < 0)
                                break; /* no room for more requests: the rest at the next tick */
                        p->sample_pending = true;
                } else if (!p->sample_pending && t >= p->until_usec) {
                        (void) verdict_push(&verdicts, &n_verdicts, d, NULL);
                        continue;
                }
                p->next_usec = t + p->interval_usec;
                if (p->next_usec > p->until_usec && t < p->until_usec)
                        p->next_usec = p->until_usec; /* one last sample at the window's end */
                TAILQ_REMOVE(&s->devices, d, probation_link);
                TAILQ_INSERT_TAIL(&sampled, d, probation_link);
        }
        while ((d = TAILQ_FIRST(&sampled))) {
                TAILQ_REMOVE(&sampled, d, probation_link);
                TAILQ_INSERT_TAIL(&s->devices, d, probation_link);
        }
        snmp_done(&snap);
        verdicts_send(s, verdicts, n_verdicts);
        probation_arm(s);
}

void probation_stats(ProbationSet *s, Device *d, const void *stats, size_t size) {
        Probation *p = d->probation;

        if (!p || !stats)
                return;
        size = size < sizeof(p->stats) ? size : sizeof(p->stats);
        memcpy(p->stats, stats, size);
        p->stats_len = size;
        bool had = guard_set_has_baselines(&p->guards);
        guard_set_link_baseline(&p->guards, p->stats, p->stats_len);
        if (!had)
                s->ops->changed(s->userdata, d); /* the baselines, for a restart */
}

void probation_stats_done(ProbationSet *s, Device *d, bool lost) {
        Probation *p = d->probation;
        RollbackRecord rec;

        if (!p || !p->sample_pending)
                return; /* a baseline, or its probation ended meanwhile */
        p->sample_pending = false;
        if (!lost && p->stats_len > 0 && guard_set_check(&p->guards, NULL, p->stats, p->stats_len, &rec) > 0) {
                s->ops->tripped(s->userdata, d, &rec);
                return;
        }
        if (!lost && now(s) >= p->until_usec)
                s->ops->passed(s->userdata, d);
        probation_arm(s);
}

size_t probation_count(const ProbationSet *s) {
        return s->n;
}

uint64_t probation_left_usec(const ProbationSet *s, const Device *d) {
        uint64_t t = now(s);
        if (!d->probation)
                return 0;
        return d->probation->until_usec > t ? d->probation->until_usec - t : 0;
}
