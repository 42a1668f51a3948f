/* rollout.c — the rollouts of the policies with max-parallel: slots, waiting lines, halts. */
#include "reconcile.h"
#include "rollout.h"

static const char *const rollout_verdict_table[_ROLLOUT_VERDICT_MAX] = {
        [ROLLOUT_GO] = "go",
        [ROLLOUT_NO_SLOT] = "no-slot",
        [ROLLOUT_HALTED] = "halted",
};

const char *rollout_verdict_to_string(RolloutVerdict v) {
        if (v < 0 || v >= _ROLLOUT_VERDICT_MAX)
                return NULL;
        return rollout_verdict_table[v];
}

static void detach(Device *d) {
        d->rollout = mfree(d->rollout);
}

static void rollout_free(Rollout *r) {
        Device *d;

        if (!r)
                return;
        while ((d = TAILQ_FIRST(&r->waiting_list))) {
                TAILQ_REMOVE(&r->waiting_list, d, rollout->link);
                detach(d);
        }
        while ((d = TAILQ_FIRST(&r->active_list))) {
                TAILQ_REMOVE(&r->active_list, d, rollout->link);
                detach(d);
        }
        free(r->policy);
        free(r->halted_by);
        free(r);
}

void rollout_table_done(RolloutTable *t) {
        for (size_t i = 0; i < t->n; i++)
                rollout_free(t->items[i]);
        free(t->items);
        *t = (RolloutTable){};
}

Rollout *rollout_find(const RolloutTable *t, const char *policy) {
        for (size_t i = 0; policy && i < t->n; i++)
                if (streq_ptr(t->items[i]->policy, policy))
                        return t->items[i];
        return NULL;
}

static Rollout *rollout_new(const Policy *p, uint64_t digest) {
        Rollout *r = calloc(1, sizeof(*r));

        if (!r)
                return NULL;
        r->policy = strdup(p->name);
        if (!r->policy) {
                free(r);
                return NULL;
        }
        r->max_parallel = p->max_parallel;
        r->sizes_digest = digest;
        TAILQ_INIT(&r->waiting_list);
        TAILQ_INIT(&r->active_list);
        return r;
}

int rollout_table_update(RolloutTable *t, const PolicySet *set) {
        _cleanup_(freep) Rollout **items = calloc(set ? set->n_policies + 1 : 1, sizeof(Rollout *));
        size_t n = 0;

        if (!items)
                return -ENOMEM;
        /* First every allocation, so that a failure leaves the table as it was. */
        for (size_t i = 0; set && i < set->n_policies; i++) {
                const Policy *p = &set->policies[i];
                if (!p->applies_here || p->max_parallel == 0)
                        continue;
                if (!rollout_find(t, p->name) && !(items[n] = rollout_new(p, policy_sizes_digest(p)))) {
                        for (size_t k = 0; k < n; k++)
                                if (items[k])
                                        rollout_free(items[k]);
                        return -ENOMEM;
                }
                n++;
        }
        /* Then the policies that stay keep their rollout: its slots, its line, and its halt while
         * the sizes it halted on stay the same. */
        n = 0;
        for (size_t i = 0; set && i < set->n_policies; i++) {
                const Policy *p = &set->policies[i];
                if (!p->applies_here || p->max_parallel == 0)
                        continue;
                if (!items[n]) {
                        Rollout *old = rollout_find(t, p->name);
                        uint64_t digest = policy_sizes_digest(p);
                        for (size_t k = 0; k < t->n; k++)
                                if (t->items[k] == old)
                                        t->items[k] = t->items[--t->n];
                        if (old->sizes_digest != digest)
                                rollout_resume(old);
                        old->max_parallel = p->max_parallel;
                        old->sizes_digest = digest;
                        items[n] = old;
                }
                n++;
        }
        rollout_table_done(t); /* what is left there: policies that are gone */
        t->items = TAKE_PTR(items);
        t->n = n;
        return 0;
}

RolloutVerdict rollout_check(const Rollout *r, const Device *d) {
        if (r->halted)
                return ROLLOUT_HALTED;
        const DeviceRollout *x = device_rollout_get(d);
        if (x->of == r && x->phase == ROLLOUT_ACTIVE)
                return ROLLOUT_GO;
        return r->active < r->max_parallel ? ROLLOUT_GO : ROLLOUT_NO_SLOT;
}

/* Takes d out of its rollout's lists, keeping its record (NULL: in none). */
static DeviceRollout *unlink_device(Device *d) {
        DeviceRollout *x = d->rollout;

        if (!x)
                return NULL;
        switch (x->phase) {
        case ROLLOUT_ACTIVE:
                TAILQ_REMOVE(&x->of->active_list, d, rollout->link);
                x->of->active--;
                break;
        case ROLLOUT_WAITING:
                TAILQ_REMOVE(&x->of->waiting_list, d, rollout->link);
                x->of->waiting--;
                break;
        case ROLLOUT_NONE:
        case _ROLLOUT_PHASE_MAX:
        case _ROLLOUT_PHASE_INVALID:
                break;
        }
        d->rollout = NULL;
        return x;
}

/* d in r, `phase`, at the head or the tail of its list; its record is made when it had none. */
static int attach(Rollout *r, Device *d, RolloutPhase phase, bool head) {
        DeviceRollout *x = unlink_device(d) ?: calloc(1, sizeof(DeviceRollout));

        if (!x)
                return -ENOMEM;
        *x = (DeviceRollout){.of = r, .phase = phase};
        d->rollout = x;
        struct RolloutDevices *list = phase == ROLLOUT_ACTIVE ? &r->active_list : &r->waiting_list;
        if (head)
                TAILQ_INSERT_HEAD(list, d, rollout->link);
        else
                TAILQ_INSERT_TAIL(list, d, rollout->link);
        if (phase == ROLLOUT_ACTIVE)
                r->active++;
        else
                r->waiting++;
        return 0;
}

int rollout_take_slot(Rollout *r, Device *d) {
        if (d->rollout && d->rollout->of == r && d->rollout->phase == ROLLOUT_ACTIVE)
                return 0;
        return attach(r, d, ROLLOUT_ACTIVE, false);
}

int rollout_wait(Rollout *r, Device *d) {
        if (d->rollout && d->rollout->of == r && d->rollout->phase == ROLLOUT_WAITING)
                return 0;
        return attach(r, d, ROLLOUT_WAITING, false);
}

int rollout_wait_first(Rollout *r, Device *d) {
        return attach(r, d, ROLLOUT_WAITING, true);
}

bool rollout_leave(Device *d) {
        DeviceRollout *x = unlink_device(d);
        bool freed = x && x->phase == ROLLOUT_ACTIVE;

        free(x);
        return freed;
}

Device *rollout_next(const Rollout *r) {
        if (r->halted || r->active >= r->max_parallel)
                return NULL;
        return TAILQ_FIRST(&r->waiting_list);
}

void rollout_halt(Rollout *r, const Device *by) {
        char *name = strdup(by->ifname);

        r->halted = true;
        if (name) {
                free(r->halted_by);
                r->halted_by = name;
        }
        r->halted_by_ifindex = by->ifindex;
}

void rollout_resume(Rollout *r) {
        r->halted = false;
        r->halted_by = mfree(r->halted_by);
        r->halted_by_ifindex = 0;
}
