/* engine.c — building and freeing the engine of one namespace. */
#include <time.h>

#include "engine.h"

int engine_new(struct event_base *base, const EngineConfig *cfg, const Clock *clock, int ioctl_fd,
               const WriterTransport *transport, const WriterOps *writer_ops, const ProbationOps *probation_ops,
               Engine **ret) {
        Engine *e = calloc(1, sizeof(*e));
        int r;

        if (!e)
                return -ENOMEM;
        e->base = base;
        e->cfg = *cfg;
        e->clock = clock;
        e->ioctl_fd = ioctl_fd;
        e->routes_complete = true;
        SnmpFiles snmp = engine_snmp_files(e);
        r = device_table_init(&e->devices);
        if (r >= 0)
                r = writer_new(transport, writer_ops, e, &e->writer);
        if (r >= 0)
                r = probation_set_new(base, e->writer, &snmp, clock, probation_ops, e,
                                      &e->probation);
        if (r >= 0)
                r = evidence_set_new(base, e->writer, &e->events, clock, cfg->packet_sockets,
                                     cfg->packet_sockets ? cfg->netns_socket : -1, &e->evidence);
        if (r >= 0 && cfg->observer) {
                evidence_set_observer(e->evidence, cfg->observer);
                probation_set_observer(e->probation, cfg->observer);
        }
        if (r >= 0)
                r = state_store_new(base, cfg->runtime_dir, &e->devices, &e->state);
        if (r < 0) {
                engine_free(e);
                return r;
        }
        *ret = e;
        return 0;
}

void engine_observer_gone(Engine *e, EvidenceSockets *k, const char *why) {
        engine_config_without_observer(&e->cfg, k, why);
        evidence_set_observer(e->evidence, NULL);
        probation_set_observer(e->probation, NULL);
        evidence_set_use_sockets(e->evidence, k, k ? e->cfg.netns_socket : -1);
}

void engine_free(Engine *e) {
        if (!e)
                return;
        /* Saved while the devices are still there; the others hold pointers into the table. */
        state_store_free(e->state);
        probation_set_free(e->probation);
        evidence_set_free(e->evidence);
        rollout_table_done(&e->rollouts);
        writer_free(e->writer);
        if (e->throttle_timer)
                event_free(e->throttle_timer);
        if (e->state_retry_event)
                event_free(e->state_retry_event);
        if (e->auto_timer)
                event_free(e->auto_timer);
        auto_queue_done(&e->auto_queue);
        Device *d;
        DEVICE_FOREACH(d, &e->devices, it)
                evidence_release(d); /* from evidence.c's pool, which device_free() does not know */
        device_table_done(&e->devices);
        strv_free(e->guard_warnings);
        event_list_done(&e->events);
        for (size_t i = 0; i < e->counters.n_by_policy; i++)
                free(e->counters.by_policy[i].policy);
        free(e->counters.by_policy);
        free(e);
}

uint64_t engine_now(const Engine *e) {
        return clock_now(e->clock, CLOCK_MONOTONIC);
}

uint64_t engine_boottime(const Engine *e) {
        return clock_now(e->clock, CLOCK_BOOTTIME);
}

const Policy *engine_policy(const Engine *e, const char *name) {
        for (size_t i = 0; name && e->policy && i < e->policy->n_policies; i++)
                if (streq_ptr(e->policy->policies[i].name, name))
                        return &e->policy->policies[i];
        return NULL;
}

int engine_count_rollback(Engine *e, const char *policy) {
        EngineCounters *c = &e->counters;
        PolicyCounter *t;
        char *name;

        for (size_t i = 0; i < c->n_by_policy; i++)
                if (streq_ptr(c->by_policy[i].policy, policy ?: "")) {
                        c->by_policy[i].rollbacks++;
                        return 0;
                }
        if (c->n_by_policy >= ENGINE_POLICY_COUNTERS_MAX)
                return -E2BIG;
        name = strdup(policy ?: "");
        if (!name)
                return -ENOMEM;
        t = realloc(c->by_policy, (c->n_by_policy + 1) * sizeof(*t));
        if (!t) {
                free(name);
                return -ENOMEM;
        }
        c->by_policy = t;
        c->by_policy[c->n_by_policy++] = (PolicyCounter){.policy = name, .rollbacks = 1};
        return 0;
}

void engine_check_settled(Engine *e) {
        if (!e->settle_pending || e->sync_running || !writer_idle(e->writer))
                return;
        e->settle_pending = false;
        e->settled_once = true;
        event_emit(&e->events, &(Event){.type = EVENT_SETTLED});
}
