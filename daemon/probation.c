/* probation.c — the probation set: its list of devices, its one timer, sampling, and verdicts
 * through ProbationOps. */
#include <linux/if_link.h>
#include <malloc.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "pool.h"
#include "probation.h"

struct ProbationSet {
        struct event_base *base;
        Writer *writer;
        char *proc_net; /* snmp.dir's copy */
        SnmpFiles snmp;
        const Clock *clock;
        const ProbationOps *ops;
        void *userdata;
        struct event *timer;
        TAILQ_HEAD(, Device) devices;
        size_t n;
        LIST_HEAD(, Probation) shelved;
        bool dumping;      /* a statistics dump for the samples of a tick runs */
        bool tick_missed;  /* a tick came while it ran: it runs when the dump is over */
        size_t n_sampling; /* devices waiting for it */
        struct Verdict *verdicts; /* of the devices sampled by it, sent when it is over */
        size_t n_verdicts;
        uint64_t dump_tick_usec; /* the tick that asked for the dump running: the devices waiting
                                  * for it (PROBATION_SAMPLING) count their next sample from it */
        uint64_t gap_max_usec; /* since the set was last empty: the longest gap between samples */
        uint64_t dumps;        /* … and the statistics dumps asked for */
        Observer *observer;    /* the devices' own counters (drop.*, tcp.*); NULL: none */
};

/* The record, then each guard's baselines: its rules are the spec's, shared (GuardRules). */
#define PROBATION_SIZE(n) (sizeof(Probation) + (n) * sizeof(GuardBase))
_Static_assert(offsetof(Probation, guards.items) == sizeof(Probation), "the baselines end the record");
_Static_assert(sizeof(void *) != 8 || sizeof(Probation) <= 64, "a probation in 64 bytes and its guards' (issue 37)");
static Pool pools[PROBATION_POOLED_GUARDS + 1] = {
#define P(n) POOL_INIT_SIZE(PROBATION_SIZE(n), _Alignof(Probation))
        P(0), P(1), P(2), P(3), P(4), P(5), P(6), P(7), P(8),
#undef P
};
_Static_assert(PROBATION_POOLED_GUARDS == 8,
               "a pool for each count of guards up to PROBATION_POOLED_GUARDS");
_Static_assert(sizeof(GuardBase) <= 24, "a device's own part of a guard: its baselines alone");

/* It waits for its link statistics from the dump running. */
static bool sampling(const Probation *p) {
        return p->next_usec == PROBATION_SAMPLING;
}

Probation *probation_alloc(GuardRules *rules) {
        Probation *p = rules->n <= PROBATION_POOLED_GUARDS ? pool_alloc(&pools[rules->n])
                                                           : calloc(1, PROBATION_SIZE(rules->n));

        if (!p) {
                guard_rules_unref(rules);
                return NULL;
        }
        p->guards.rules = rules;
        return p;
}

/* `t` + `d`, short of PROBATION_SAMPLING however large `d` is (an interval of the state file's). */
static uint64_t later(uint64_t t, uint64_t d) {
        return d < PROBATION_SAMPLING - t ? t + d : PROBATION_SAMPLING - 1;
}

int probation_new(const RollbackSpec *spec, const SnmpSnapshot *snap, uint64_t now_usec, Probation **ret) {
        RollbackSpec timed = *spec;
        GuardRules *rules;
        Probation *p;
        int r;

        timed.interval_usec = spec->interval_usec ?: USEC_PER_SEC;
        r = guard_rules_get(&timed, &rules); /* the rules keep the window and interval */
        if (r < 0)
                return r;
        p = probation_alloc(rules);
        if (!p)
                return -ENOMEM;
        guard_set_init(&p->guards, rules, snap);
        p->until_usec = now_usec + spec->window_usec;
        p->next_usec = later(now_usec, timed.interval_usec);
        p->last_usec = now_usec;
        *ret = p;
        return 0;
}

void probation_free(Probation *p) {
        size_t room;

        if (!p)
                return;
        room = guard_set_n(&p->guards);
        guard_set_done(&p->guards);
        if (room <= PROBATION_POOLED_GUARDS)
                pool_free(&pools[room], p);
        else
                free(p);
}

static void on_timer(evutil_socket_t fd, short what, void *userdata) {
        probation_tick(userdata);
}

int probation_set_new(struct event_base *base, Writer *writer, const SnmpFiles *snmp, const Clock *clock,
                      const ProbationOps *ops, void *userdata, ProbationSet **ret) {
        ProbationSet *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        *s = (ProbationSet){.base = base, .writer = writer, .clock = clock, .ops = ops, .userdata = userdata};
        TAILQ_INIT(&s->devices);
        LIST_INIT(&s->shelved);
        s->snmp = *snmp;
        s->snmp.dir = s->proc_net = snmp->dir ? strdup(snmp->dir) : NULL;
        s->timer = evtimer_new(base, on_timer, s);
        if ((snmp->dir && !s->proc_net) || !s->timer) {
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
        while (!LIST_EMPTY(&s->shelved))
                probation_drop(s, LIST_FIRST(&s->shelved));
        if (s->timer)
                event_free(s->timer);
        free(s->proc_net);
        free(s);
}

static uint64_t now(const ProbationSet *s) {
        return clock_now(s->clock, CLOCK_BOOTTIME);
}

void probation_set_observer(ProbationSet *s, Observer *o) {
        s->observer = o;
}

static GuardObserver guard_observer(const ProbationSet *s, const Device *d) {
        return (GuardObserver){
                .observer = s->observer,
                .netns = d->netns ? (uint32_t) d->netns->ino : s->observer ? observer_own_netns(s->observer) : 0,
                .ifindex = d->ifindex,
        };
}

/* The observer's maps as they are now, once for every device that asks within a tick (about
 * `devices` of them). */
static void observer_fresh(ProbationSet *s, uint64_t max_age_usec, size_t devices) {
        int r;

        if (!s->observer)
                return;
        r = observer_read_for(s->observer, clock_now(s->clock, CLOCK_MONOTONIC), max_age_usec, devices);
        if (r < 0)
                log_debug_errno(r, "probation: reading the observer's maps failed: %m");
}

static void attach(ProbationSet *s, Device *d, Probation *p) {
        if (d->probation)
                probation_end(s, d);
        if (s->n == 0) {
                /* a new episode: its figures start afresh */
                s->gap_max_usec = 0;
                s->dumps = 0;
        }
        d->probation = p;
        TAILQ_INSERT_TAIL(&s->devices, d, probation->link);
        s->n++;
}

int probation_begin(ProbationSet *s, Device *d, const RollbackSpec *spec, const SnmpSnapshot *snap,
                    const void *stats, size_t size) {
        Probation *p;
        int r;

        if (spec->n_guards == 0 || spec->window_usec == 0) {
                probation_end(s, d);
                return 0;
        }
        r = probation_new(spec, snap, now(s), &p);
        if (r < 0)
                return r;
        if (stats)
                guard_set_link_baseline(&p->guards, stats, size);
        if (guard_set_has_observer(&p->guards)) {
                GuardObserver g = guard_observer(s, d);
                observer_fresh(s, 0, 1); /* the baseline is the counts just before the write */
                guard_set_observer_baseline(&p->guards, &g);
        }
        attach(s, d, p);
        return 0;
}

void probation_resume(ProbationSet *s, Device *d, Probation *p) {
        p->next_usec = 0; /* (and not sampling) */
        p->last_usec = now(s);
        attach(s, d, p);
}

static void verdicts_drop(ProbationSet *s, const Device *d);

/* Out of the set, unjudged: its verdicts of the dump running are dropped. */
static Probation *detach(ProbationSet *s, Device *d) {
        Probation *p = d->probation;

        TAILQ_REMOVE(&s->devices, d, probation->link);
        s->n--;
        if (sampling(p)) {
                s->n_sampling--;
                p->next_usec = 0;
        }
        verdicts_drop(s, d);
        d->probation = NULL;
        return p;
}

void probation_end(ProbationSet *s, Device *d) {
        if (!d->probation)
                return;
        probation_free(detach(s, d));
        probation_arm(s);
        /* The last window of a burst closed: the heap that thousands of probations held is
         * free now, give it back instead of keeping it as resident memory. */
        if (s->n == 0)
                (void) malloc_trim(0);
}

Probation *probation_shelve(ProbationSet *s, Device *d) {
        Probation *p;

        if (!d->probation)
                return NULL;
        p = detach(s, d);
        LIST_INSERT_HEAD(&s->shelved, p, shelf);
        probation_arm(s);
        return p;
}

void probation_unshelve(ProbationSet *s, Device *d, Probation *p) {
        LIST_REMOVE(p, shelf);
        probation_resume(s, d, p); /* (ends the window d has) */
        probation_arm(s);
}

void probation_drop(ProbationSet *s, Probation *p) {
        if (!p)
                return;
        LIST_REMOVE(p, shelf);
        probation_free(p);
}

static uint64_t tick_usec(const ProbationSet *s) {
        uint64_t tick = UINT64_MAX;
        const Device *d;

        TAILQ_FOREACH(d, &s->devices, probation->link) {
                if (probation_interval_usec(d->probation) < tick)
                        tick = probation_interval_usec(d->probation);
                if (tick <= 100 * USEC_PER_MSEC)
                        break; /* no need to look further than the finest sensible tick */
        }
        return tick;
}

void probation_arm(ProbationSet *s) {
        uint64_t tick;

        if (s->n == 0) {
                evtimer_del(s->timer);
                return;
        }
        if (evtimer_pending(s->timer, NULL))
                return;
        tick = tick_usec(s);
        struct timeval tv = {.tv_sec = (time_t) (tick / USEC_PER_SEC), .tv_usec = (suseconds_t) (tick % USEC_PER_SEC)};
        evtimer_add(s->timer, &tv);
}

/* A verdict waiting to go up once the walk over the list (or the dump) is over. */
typedef struct Verdict {
        Device *device; /* NULL once its probation ended meanwhile */
        bool tripped;
        RollbackRecord why; /* strings owned here */
} Verdict;

static int verdict_push(ProbationSet *s, Device *d, const RollbackRecord *why) {
        Verdict *x = reallocarray(s->verdicts, s->n_verdicts + 1, sizeof(Verdict));
        if (!x)
                return -ENOMEM;
        s->verdicts = x;
        x += s->n_verdicts;
        *x = (Verdict){.device = d, .tripped = why != NULL};
        if (why) {
                x->why = *why;
                x->why.counter = strdup(why->counter ?: "");
                x->why.per = why->per ? strdup(why->per) : NULL;
        }
        s->n_verdicts++;
        return 0;
}

static void verdicts_drop(ProbationSet *s, const Device *d) {
        for (size_t i = 0; i < s->n_verdicts; i++)
                if (s->verdicts[i].device == d)
                        s->verdicts[i].device = NULL;
}

static void verdicts_send(ProbationSet *s) {
        Verdict *v = TAKE_PTR(s->verdicts);
        size_t n = s->n_verdicts;

        s->n_verdicts = 0;
        for (size_t i = 0; i < n; i++) {
                Device *d = v[i].device;
                /* an earlier verdict's consequences may have ended this one's probation */
                if (d && d->probation) {
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

static void sampled(ProbationSet *s, Probation *p, uint64_t t) {
        if (t > p->last_usec && t - p->last_usec > s->gap_max_usec)
                s->gap_max_usec = t - p->last_usec;
        p->last_usec = t;
}

/* Due at the tick at `t`: its sample time is less than 3/4 of a tick away. A device written at
 * any moment between two ticks is then sampled first at most 1.25 ticks after its write (1.5 with
 * "nearer this tick than the next"), which leaves a quarter of a tick for a loop that is late —
 * busy with the burst that wrote it; a sample up to 3/4 tick early costs nothing. */
static bool due(const Probation *p, uint64_t t, uint64_t tick) {
        return !sampling(p) && p->next_usec <= t + tick / 4 * 3;
}

/* The sample after one at the tick at `t`: an interval on, and one last at the window's end. */
static uint64_t next_after(const Probation *p, uint64_t t) {
        uint64_t next = later(t, probation_interval_usec(p));

        if (next > p->until_usec && t < p->until_usec)
                next = p->until_usec; /* one last sample at the window's end */
        return next;
}

void probation_tick(ProbationSet *s) {
        SnmpSnapshot snap = {};
        bool have_snap = false;
        uint64_t t = now(s), tick = tick_usec(s);
        RollbackRecord rec;
        Device *d;
        bool want_dump = false;
        size_t n_observed = 0;
        unsigned files = 0;

        if (s->dumping) {
                /* The dump running serves only the devices waiting for it when it was asked for:
                 * a device that took an ifindex since must not be judged by its predecessor's
                 * counters. This tick's samples wait for its end. */
                s->tick_missed = true;
                probation_arm(s);
                return;
        }
        TAILQ_FOREACH(d, &s->devices, probation->link)
                if (due(d->probation, t, tick) && d->write.phase != WRITE_SENT)
                        files |= guard_set_snmp_files(&d->probation->guards);
        /* one reading for every device due, of the files their guards name (the built-in set names
         * none of netstat's, the largest) */
        if (files != 0)
                have_snap = snmp_read_some(&s->snmp, files, &snap) >= 0;
        if (s->observer)
                TAILQ_FOREACH(d, &s->devices, probation->link)
                        if (due(d->probation, t, tick) && d->write.phase != WRITE_SENT &&
                            guard_set_has_observer(&d->probation->guards))
                                n_observed++;

        TAILQ_FOREACH(d, &s->devices, probation->link) {
                Probation *p = d->probation;
                if (!due(p, t, tick) || d->write.phase == WRITE_SENT)
                        continue; /* not due (or still waiting), or its write is not answered yet */
                bool link = guard_set_has_link(&p->guards);
                if (!link)
                        sampled(s, p, t);
                if (have_snap && guard_set_check(&p->guards, &snap, NULL, 0, &rec) > 0) {
                        (void) verdict_push(s, d, &rec);
                        continue;
                }
                if (s->observer && guard_set_has_observer(&p->guards)) {
                        GuardObserver g = guard_observer(s, d);
                        observer_fresh(s, tick / 2, n_observed); /* one read serves every device of the tick */
                        if (guard_set_check_observer(&p->guards, &g, &rec) > 0) {
                                (void) verdict_push(s, d, &rec);
                                continue;
                        }
                }
                if (link) {
                        p->next_usec = PROBATION_SAMPLING; /* judged when its statistics come */
                        s->n_sampling++;
                        want_dump = true;
                        continue;
                }
                if (t >= p->until_usec) {
                        (void) verdict_push(s, d, NULL);
                        continue;
                }
                p->next_usec = next_after(p, t);
        }
        snmp_done(&snap);
        if (want_dump) {
                int r;
                s->dump_tick_usec = t;
                r = writer_request_stats_dump(s->writer, STATS_DUMP_SAMPLES);
                if (r >= 0) {
                        s->dumping = true;
                        s->dumps++;
                } else {
                        probation_samples_done(s, r); /* nothing comes: they wait for the next tick */
                        return;
                }
        }
        if (!s->dumping)
                verdicts_send(s);
        probation_arm(s);
}

void probation_sample(ProbationSet *s, Device *d, const void *stats, size_t size) {
        Probation *p = d->probation;
        RollbackRecord rec;
        uint64_t t = now(s);

        if (!p || !sampling(p) || !stats)
                return;
        p->next_usec = next_after(p, s->dump_tick_usec);
        s->n_sampling--;
        sampled(s, p, t);
        if (!guard_set_has_baselines(&p->guards)) {
                /* its write went without them (none could be read): this sample takes their place */
                guard_set_link_baseline(&p->guards, stats, size);
                s->ops->changed(s->userdata, d);
        }
        if (guard_set_check(&p->guards, NULL, stats, size, &rec) > 0)
                (void) verdict_push(s, d, &rec);
        else if (t >= p->until_usec)
                (void) verdict_push(s, d, NULL);
}

void probation_samples_done(ProbationSet *s, int error) {
        Device *d;

        s->dumping = false;
        if (error < 0)
                log_debug_errno(error, "probation: the statistics dump failed: %m; sampling again at the next tick");
        /* devices the dump did not show (gone meanwhile), or all of them when it failed: the
         * next tick samples them again */
        if (s->n_sampling > 0)
                TAILQ_FOREACH(d, &s->devices, probation->link)
                        if (sampling(d->probation))
                                d->probation->next_usec = 0;
        s->n_sampling = 0;
        verdicts_send(s);
        if (s->tick_missed && s->n > 0) {
                s->tick_missed = false;
                probation_tick(s); /* the one that came while the dump ran; arms the timer */
                return;
        }
        s->tick_missed = false;
        probation_arm(s);
}

bool probation_armed(const ProbationSet *s) {
        return evtimer_pending(s->timer, NULL);
}

void probation_figures(const ProbationSet *s, uint64_t *ret_gap_max_usec, uint64_t *ret_dumps) {
        *ret_gap_max_usec = s->gap_max_usec;
        *ret_dumps = s->dumps;
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
