/* probation.c — after a write, the device is watched through its policy's guards for a window;
 * a sample is taken every interval (the SNMP files read once for every device due, link stats
 * by one RTM_GETLINK per device), and the device becomes applied when the window ends clean,
 * or goes back to its last-known-good sizes when a guard trips. No timer runs while nothing is
 * in probation. */
#include <linux/if_link.h>
#include <malloc.h>
#include <string.h>
#include <time.h>

#include "apply.h"
#include "guard.h"
#include "log.h"
#include "probation.h"
#include "reconcile.h"

#define PROC_NET "/proc/net"

const Policy *policy_by_name(const Manager *m, const char *name) {
        for (size_t i = 0; name && m->policy && i < m->policy->n_policies; i++)
                if (streq_ptr(m->policy->policies[i].name, name))
                        return &m->policy->policies[i];
        return NULL;
}

int probation_start(Manager *m, Device *d, const Policy *p, const SnmpSnapshot *snap) {
        Probation *pr;
        int r;

        if (!p || p->rollback.n_guards == 0 || p->rollback.window_usec == 0) {
                probation_stop(m, d);
                d->last_good = d->current;
                d->has_last_good = true;
                return 0;
        }
        r = probation_new(&p->rollback, snap, boottime_usec(), &pr);
        if (r < 0)
                return r;
        if (d->probation) {
                /* a new write before the last one proved itself: last_good stays the older one */
                probation_free(d->probation);
                TAILQ_REMOVE(&m->probation, d, probation_link);
        } else {
                d->last_good = d->current;
                d->has_last_good = true;
        }
        d->probation = pr;
        TAILQ_INSERT_TAIL(&m->probation, d, probation_link);
        for (size_t i = 0; i < pr->n_guards; i++)
                if (!pr->guards[i].active)
                        log_dev_warning(d, "guard on %s%s%s is inactive: this kernel does not expose it",
                                        pr->guards[i].counter, pr->guards[i].per ? " per " : "",
                                        pr->guards[i].per ?: "");
        return 0;
}

void probation_stop(Manager *m, Device *d) {
        if (!d->probation)
                return;
        TAILQ_REMOVE(&m->probation, d, probation_link);
        probation_free(d->probation);
        d->probation = NULL;
        probation_arm(m);
        /* The last window of a burst closed: the heap that thousands of probations held is
         * free now, give it back instead of keeping it as resident memory. */
        if (TAILQ_EMPTY(&m->probation))
                (void) malloc_trim(0);
}

/* One timer for all devices in probation, ticking at the shortest interval among them: each
 * tick samples the devices that are due. Nothing ticks while the list is empty. */
void probation_arm(Manager *m) {
        uint64_t tick = UINT64_MAX;
        Device *d;

        if (TAILQ_EMPTY(&m->probation)) {
                evtimer_del(m->probation_timer);
                return;
        }
        if (evtimer_pending(m->probation_timer, NULL))
                return;
        TAILQ_FOREACH(d, &m->probation, probation_link) {
                if (d->probation->interval_usec < tick)
                        tick = d->probation->interval_usec;
                if (tick <= 100000)
                        break; /* no need to look further than the finest sensible tick */
        }
        struct timeval tv = {.tv_sec = (time_t) (tick / 1000000ull), .tv_usec = (suseconds_t) (tick % 1000000ull)};
        evtimer_add(m->probation_timer, &tv);
}

static void probation_pass(Manager *m, Device *d) {
        char buf[256];

        log_dev_info(d, "probation passed, no guard tripped in %llus: %s is applied",
                     (unsigned long long) (d->probation->window_usec / 1000000ull),
                     sizes_format(&d->current, m->ipv4_supported, buf, sizeof(buf)));
        probation_stop(m, d);
        d->last_good = d->current;
        d->has_last_good = true;
        device_set_state(m, d, DEVICE_APPLIED);
        state_mark(m, d);
        rollout_release(m);
}

/* One guard tripped. A namespace-wide counter cannot say which device caused it: every device
 * in probation goes back. */
static void trip(Manager *m, Device *d, const RollbackRecord *why) {
        RollbackRecord copy = *why;
        Device *x, *next;

        /* the strings belong to d's probation, which the rollback frees */
        copy.counter = strdup(why->counter ?: "");
        copy.per = why->per ? strdup(why->per) : NULL;
        if (!why->namespace_wide)
                (void) apply_rollback(m, d, &copy);
        else {
                log_warning("%s rose by %llu (threshold %g) in the network namespace: it cannot tell which device "
                            "caused it, so every device in probation is rolled back",
                            copy.counter, (unsigned long long) copy.rise, copy.threshold);
                for (x = TAILQ_FIRST(&m->probation); x; x = next) {
                        next = TAILQ_NEXT(x, probation_link);
                        (void) apply_rollback(m, x, &copy);
                }
        }
        free(copy.counter);
        free(copy.per);
        manager_flush(m);
        rollout_release(m);
}

void probation_timer(evutil_socket_t fd, short what, void *userdata) {
        Manager *m = userdata;
        SnmpSnapshot snap = {};
        bool have_snap = false;
        uint64_t now = boottime_usec();
        Device *d, *next;
        RollbackRecord rec;

        TAILQ_FOREACH(d, &m->probation, probation_link)
                if (d->probation->next_usec <= now && !d->inflight && probation_has_snmp_guards(d->probation)) {
                        int r = snmp_read(PROC_NET, &snap);
                        if (r < 0)
                                log_warning_errno(r, "Failed to read %s/{snmp,netstat,snmp6}: %m; SNMP guards skip this sample", PROC_NET);
                        have_snap = r >= 0;
                        break;
                }

        /* Devices sampled now go to the end of the list: when there are more than the requests
         * in flight allow, the ones left over come first at the next tick. */
        TAILQ_HEAD(, Device) sampled = TAILQ_HEAD_INITIALIZER(sampled);
        for (d = TAILQ_FIRST(&m->probation); d; d = next) {
                next = TAILQ_NEXT(d, probation_link);
                Probation *p = d->probation;
                if (p->next_usec > now || d->inflight)
                        continue;
                if (have_snap && probation_check(p, &snap, NULL, 0, &rec) > 0) {
                        trip(m, d, &rec);
                        break; /* the list changed under us; the next tick goes on */
                }
                if (probation_has_link_guards(p) && !p->sample_pending) {
                        if (request_refresh(m, d->ifindex, INFLIGHT_SAMPLE) < 0)
                                break; /* no room for more requests: the rest at the next tick */
                        p->sample_pending = true;
                } else if (!p->sample_pending && now >= p->until_usec) {
                        probation_pass(m, d);
                        continue;
                }
                p->next_usec = now + p->interval_usec;
                if (p->next_usec > p->until_usec && now < p->until_usec)
                        p->next_usec = p->until_usec; /* one last sample at the window's end */
                TAILQ_REMOVE(&m->probation, d, probation_link);
                TAILQ_INSERT_TAIL(&sampled, d, probation_link);
        }
        while ((d = TAILQ_FIRST(&sampled))) {
                TAILQ_REMOVE(&sampled, d, probation_link);
                TAILQ_INSERT_TAIL(&m->probation, d, probation_link);
        }
        snmp_done(&snap);
        probation_arm(m);
}

void probation_stats(Manager *m, Device *d, const void *stats, size_t size) {
        Probation *p = d->probation;

        if (!p || !stats)
                return;
        size = size < sizeof(p->stats) ? size : sizeof(p->stats);
        memcpy(p->stats, stats, size);
        p->stats_len = size;
        bool had = true;
        for (size_t i = 0; i < p->n_guards; i++)
                had = had && p->guards[i].have_base;
        probation_link_baseline(p, p->stats, p->stats_len);
        if (!had)
                state_mark(m, d); /* the baselines, for a restart */
}

void probation_sample_done(Manager *m, Device *d) {
        Probation *p = d->probation;
        RollbackRecord rec;

        if (!p || !p->sample_pending)
                return;
        p->sample_pending = false;
        if (p->stats_len > 0 && probation_check(p, NULL, p->stats, p->stats_len, &rec) > 0) {
                trip(m, d, &rec);
                return;
        }
        if (boottime_usec() >= p->until_usec)
                probation_pass(m, d);
        probation_arm(m);
}

static bool sizes_same(const Manager *m, const Sizes *a, const Sizes *b) {
        return sizes_equal(a, b, m->ipv4_supported);
}

bool rollout_must_wait(Manager *m, Device *d, const Policy *p, const Sizes *want) {
        unsigned busy = 0;
        Device *x;

        DEVICE_FOREACH(x, &m->devices, it) {
                if (x == d || !streq_ptr(x->policy_name, p->name))
                        continue;
                if (x->state == DEVICE_ROLLED_BACK && sizes_same(m, &x->held_desired, want)) {
                        if (!d->staged)
                                log_dev_notice(d, "rollout of policy \"%s\" halted: %s was rolled back with the same sizes",
                                               p->name, x->ifname);
                        return true;
                }
                if (p->max_parallel == 0)
                        continue;
                if (x->probation || ((x->queued || x->inflight) && !x->restoring && !x->rolling_back))
                        busy++;
        }
        if (p->max_parallel > 0 && busy >= p->max_parallel) {
                if (!d->staged)
                        log_dev_info(d, "waiting for a rollout slot of policy \"%s\" (max-parallel %u)", p->name,
                                     p->max_parallel);
                return true;
        }
        return false;
}

void rollout_release(Manager *m) {
        Device *d;

        /* O(devices), and called at the end of every window: only when something waits. */
        if (m->staged_pending) {
                m->staged_pending = false;
                DEVICE_FOREACH(d, &m->devices, it)
                        if (d->staged)
                                device_reconcile(m, d, REASON_SYNC);
        }
        manager_flush(m);
}

void guard_warnings_refresh(Manager *m) {
        SnmpSnapshot snap = {};
        char **w = NULL;
        size_t n = 0;

        if (snmp_read(PROC_NET, &snap) < 0)
                log_warning_errno(errno, "Failed to read the SNMP counters of this namespace, ignoring");
        if (m->policy)
                (void) guard_spec_check(&m->policy->defaults, &snap, sizeof(struct rtnl_link_stats64), &w, &n);
        for (size_t i = 0; m->policy && i < m->policy->n_policies; i++)
                if (m->policy->policies[i].applies_here)
                        (void) guard_spec_check(&m->policy->policies[i].rollback, &snap,
                                                sizeof(struct rtnl_link_stats64), &w, &n);
        snmp_done(&snap);
        for (size_t i = 0; i < n; i++) {
                bool known = false;
                for (size_t j = 0; j < m->n_guard_warnings && !known; j++)
                        known = streq_ptr(m->guard_warnings[j], w[i]);
                if (!known)
                        log_warning("guard counter %s does not exist on this kernel: guards on it are inactive", w[i]);
        }
        strv_free(m->guard_warnings);
        m->guard_warnings = w;
        m->n_guard_warnings = n;
}
