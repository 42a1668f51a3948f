/* control.c — the daemon's control surface: JSON views of its state, plan and validate, the
 * privileged operations, and the event fan-out that Monitor and D-Bus signals use. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "apply.h"
#include "guard.h"
#include "probation.h"
#include "control.h"
#include "log.h"
#include "match.h"
#include "reconcile.h"

json_object *control_sizes_json(const Sizes *s, bool ipv4) {
        json_object *o = json_object_new_object();
        if (!o)
                return NULL;
        json_object_object_add(o, "gso_max_size", json_object_new_int64(s->gso_max_size));
        json_object_object_add(o, "gro_max_size", json_object_new_int64(s->gro_max_size));
        if (ipv4) {
                json_object_object_add(o, "gso_ipv4_max_size", json_object_new_int64(s->gso_ipv4_max_size));
                json_object_object_add(o, "gro_ipv4_max_size", json_object_new_int64(s->gro_ipv4_max_size));
        }
        return o;
}

static json_object *string_or_null(const char *s) {
        return s ? json_object_new_string(s) : NULL;
}

static json_object *rollback_json(const RollbackRecord *r, bool ipv4) {
        json_object *o = json_object_new_object();
        if (!o)
                return NULL;
        json_object_object_add(o, "counter", json_object_new_string(r->counter ?: ""));
        json_object_object_add(o, "rise", json_object_new_int64((int64_t) r->rise));
        if (r->per) {
                json_object_object_add(o, "per", json_object_new_string(r->per));
                json_object_object_add(o, "per_rise", json_object_new_int64((int64_t) r->per_rise));
                json_object_object_add(o, "max_ratio", json_object_new_double(r->threshold));
        } else /* a uint64 max-increase held as a double (or what a state file said): clamp, a
                * double outside int64_t does not convert */
                json_object_object_add(o, "max_increase",
                                       json_object_new_int64(!(r->threshold > 0) ? 0
                                                             : r->threshold >= 0x1p63 ? INT64_MAX
                                                                                      : (int64_t) r->threshold));
        json_object_object_add(o, "namespace_wide", json_object_new_boolean(r->namespace_wide));
        json_object_object_add(o, "time_usec", json_object_new_int64((int64_t) r->realtime_usec));
        json_object_object_add(o, "from", control_sizes_json(&r->from, ipv4));
        json_object_object_add(o, "to", control_sizes_json(&r->to, ipv4));
        return o;
}

json_object *control_device_json(const Manager *m, const Device *d) {
        json_object *o = json_object_new_object();
        bool v4 = m->ipv4_supported;

        if (!o)
                return NULL;
        json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
        json_object_object_add(o, "ifname", json_object_new_string(d->ifname ?: ""));
        json_object_object_add(o, "kind", string_or_null(d->kind));
        json_object_object_add(o, "state", json_object_new_string(device_state_to_string(d->state)));
        json_object_object_add(o, "policy", string_or_null(d->policy_name));
        json_object_object_add(o, "current", control_sizes_json(&d->current, v4));
        json_object_object_add(o, "desired",
                               d->state != DEVICE_UNMANAGED && d->policy_name ? control_sizes_json(&d->desired, v4)
                                                                              : NULL);
        json_object_object_add(o, "original", d->has_original ? control_sizes_json(&d->original, v4) : NULL);
        json_object_object_add(o, "tso_max_size", json_object_new_int64(d->tso_max_size));
        if (d->probation) {
                uint64_t now = boottime_usec(), until = d->probation->until_usec;
                json_object_object_add(o, "probation_left_usec",
                                       json_object_new_int64((int64_t) (until > now ? until - now : 0)));
        }
        if (d->last_errno != 0) {
                json_object *e = json_object_new_object();
                json_object_object_add(e, "errno", json_object_new_int(d->last_errno < 0 ? -d->last_errno : d->last_errno));
                json_object_object_add(e, "message", json_object_new_string(strerror(abs(d->last_errno))));
                json_object_object_add(e, "extack", string_or_null(d->last_error));
                json_object_object_add(o, "last_error", e);
        } else
                json_object_object_add(o, "last_error", NULL);
        json_object_object_add(o, "last_rollback", d->last_rollback ? rollback_json(d->last_rollback, v4) : NULL);
        return o;
}

json_object *control_status_json(const Manager *m) {
        json_object *o = json_object_new_object(), *files, *counts, *pol, *kern;
        char digest[17];
        unsigned n[_DEVICE_STATE_MAX] = {};
        const Device *d;

        if (!o)
                return NULL;
        DEVICE_FOREACH(d, &m->devices, it)
                if (d->state >= 0 && d->state < _DEVICE_STATE_MAX)
                        n[d->state]++;

        json_object_object_add(o, "version", json_object_new_string(BIGTCPD_VERSION));
        json_object_object_add(o, "hostname", json_object_new_string(m->hostname ?: ""));
        pol = json_object_new_object();
        files = json_object_new_array();
        for (size_t i = 0; m->policy && i < m->policy->n_files; i++)
                json_object_array_add(files, json_object_new_string(m->policy->files[i]));
        json_object_object_add(pol, "files", files);
        snprintf(digest, sizeof(digest), "%016llx", m->policy ? (unsigned long long) m->policy->digest : 0ull);
        json_object_object_add(pol, "digest", json_object_new_string(digest));
        json_object_object_add(pol, "policies", json_object_new_int((int) (m->policy ? m->policy->n_policies : 0)));
        json_object_object_add(o, "policy", pol);
        kern = json_object_new_object();
        json_object_object_add(kern, "release", json_object_new_string(m->uts.release));
        json_object_object_add(kern, "ipv4_sizes", json_object_new_boolean(m->ipv4_supported));
        json_object_object_add(o, "kernel", kern);
        counts = json_object_new_object();
        for (int i = 0; i < _DEVICE_STATE_MAX; i++)
                json_object_object_add(counts, device_state_to_string((DeviceState) i), json_object_new_int((int) n[i]));
        json_object_object_add(o, "devices", counts);
        json_object_object_add(o, "devices_total", json_object_new_int((int) m->devices.n_devices));
        json_object_object_add(o, "writes", json_object_new_int64((int64_t) m->n_writes));
        json_object_object_add(o, "write_failures", json_object_new_int64((int64_t) m->n_write_failures));
        json_object_object_add(o, "restores", json_object_new_int64((int64_t) m->n_restores));
        json_object_object_add(o, "rollbacks", json_object_new_int64((int64_t) m->n_rollbacks));
        json_object_object_add(o, "ready", json_object_new_boolean(m->ready_sent));
        json_object *w = json_object_new_array();
        for (size_t i = 0; i < m->n_guard_warnings; i++)
                json_object_array_add(w, json_object_new_string(m->guard_warnings[i]));
        json_object_object_add(o, "inactive_guard_counters", w);
        return o;
}

static int compare_ifindex(const void *a, const void *b) {
        const Device *x = *(const Device *const *) a, *y = *(const Device *const *) b;
        return (x->ifindex > y->ifindex) - (x->ifindex < y->ifindex);
}

int control_sorted_devices(const Manager *m, Device ***ret, size_t *ret_n) {
        Device **l = calloc(m->devices.n_devices + 1, sizeof(Device *)), *d;
        size_t n = 0;
        if (!l)
                return -ENOMEM;
        DEVICE_FOREACH(d, &m->devices, it)
                l[n++] = d;
        qsort(l, n, sizeof(Device *), compare_ifindex);
        *ret = l;
        *ret_n = n;
        return 0;
}

int control_list_devices(const Manager *m, const char *ifname, json_object **ret) {
        _cleanup_(freep) Device **l = NULL;
        json_object *a;
        size_t n;
        int r;

        if (ifname) {
                Device *d = device_get_by_name(&m->devices, ifname);
                if (!d)
                        return -ENODEV;
                a = json_object_new_array();
                if (!a)
                        return -ENOMEM;
                json_object_array_add(a, control_device_json(m, d));
                *ret = a;
                return 0;
        }
        r = control_sorted_devices(m, &l, &n);
        if (r < 0)
                return r;
        a = json_object_new_array_ext((int) n);
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                json_object_array_add(a, control_device_json(m, l[i]));
        *ret = a;
        return 0;
}

json_object *control_errors_json(const PolicyErrors *errs) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < errs->n; i++) {
                const PolicyError *e = &errs->items[i];
                json_object *o = json_object_new_object();
                json_object_object_add(o, "file", json_object_new_string(e->file ?: ""));
                json_object_object_add(o, "line", json_object_new_int((int) e->line));
                json_object_object_add(o, "column", json_object_new_int((int) e->column));
                json_object_object_add(o, "message", json_object_new_string(e->message ?: ""));
                json_object_array_add(a, o);
        }
        return a;
}

int control_validate(const char *policy_yaml, const char *source, PolicyErrors *errs) {
        PolicySet *s = policy_set_new();
        int r;

        if (!s)
                return -ENOMEM;
        r = policy_parse_buffer(s, source ?: "<policy>", policy_yaml, strlen(policy_yaml), errs);
        policy_set_free(s);
        return r;
}

static json_object *plan_device(Manager *m, const PolicySet *set, Device *d) {
        json_object *o = json_object_new_object();
        const Policy *p = device_match_in(m, set, d);
        const char *action = "none";
        bool v4 = m->ipv4_supported;

        json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
        json_object_object_add(o, "ifname", json_object_new_string(d->ifname ?: ""));
        json_object_object_add(o, "policy", string_or_null(p ? p->name : NULL));
        json_object_object_add(o, "current", control_sizes_json(&d->current, v4));
        if (p) {
                Desired want;
                compute_desired(p, &d->current, d->tso_max_size, v4, &want);
                json_object_object_add(o, "desired", control_sizes_json(&want.sizes, v4));
                json_object *cl = json_object_new_array();
                if (want.clamped & (CLAMP_GSO | CLAMP_GSO_IPV4))
                        json_object_array_add(cl, json_object_new_string("gso to tso_max_size"));
                if (want.clamped & (CLAMP_GRO | CLAMP_GRO_IPV4))
                        json_object_array_add(cl, json_object_new_string("gro to 524280"));
                json_object_object_add(o, "clamped", cl);
                if (want.families == 0)
                        action = "unsupported";
                else if (!sizes_equal(&want.sizes, &d->current, v4))
                        action = "write";
        } else if (d->has_original) {
                Sizes target;
                compute_restore(&d->original, d->written_families, &d->current, d->tso_max_size, v4, &target);
                json_object_object_add(o, "desired", control_sizes_json(&target, v4));
                if (!sizes_equal(&target, &d->current, v4))
                        action = "restore";
        } else
                json_object_object_add(o, "desired", NULL);
        json_object_object_add(o, "action", json_object_new_string(action));
        return o;
}

int control_plan(const Manager *cm, const char *policy_yaml, const char *source, json_object **ret,
                 PolicyErrors *errs) {
        Manager *m = (Manager *) cm; /* driver names are looked up and cached on the way */
        PolicySet *own = NULL;
        const PolicySet *set = m->policy;
        _cleanup_(freep) Device **l = NULL;
        size_t n;
        int r;

        if (policy_yaml) {
                own = policy_set_new();
                if (!own)
                        return -ENOMEM;
                r = policy_parse_buffer(own, source ?: "<policy>", policy_yaml, strlen(policy_yaml), errs);
                if (r < 0) {
                        policy_set_free(own);
                        return r;
                }
                policy_set_scope(own, m->hostname, m->uts.release);
                set = own;
        }
        r = control_sorted_devices(m, &l, &n);
        if (r < 0) {
                policy_set_free(own);
                return r;
        }
        json_object *a = json_object_new_array_ext((int) n);
        for (size_t i = 0; a && i < n; i++)
                json_object_array_add(a, plan_device(m, set, l[i]));
        policy_set_free(own);
        if (!a)
                return -ENOMEM;
        *ret = a;
        return 0;
}

int control_reload(Manager *m, PolicyErrors *errs) {
        return manager_reload(m, true, errs);
}

int control_rollback(Manager *m, const char *ifname) {
        Device *d;
        int r, n = 0;

        if (ifname) {
                d = device_get_by_name(&m->devices, ifname);
                if (!d)
                        return -ENODEV;
                r = apply_rollback(m, d, NULL);
                manager_flush(m);
                return r;
        }
        DEVICE_FOREACH(d, &m->devices, it)
                if (apply_rollback(m, d, NULL) >= 0)
                        n++;
        manager_flush(m);
        return n > 0 ? 0 : -EALREADY;
}

int control_retry(Manager *m, const char *ifname) {
        Device *d = device_get_by_name(&m->devices, ifname);
        int r;

        if (!d)
                return -ENODEV;
        r = apply_retry(m, d);
        manager_flush(m);
        return r;
}

static json_object *device_event_json(const char *type, const Device *d) {
        json_object *o = json_object_new_object();
        if (!o)
                return NULL;
        json_object_object_add(o, "event", json_object_new_string(type));
        json_object_object_add(o, "ifindex", json_object_new_int(d->ifindex));
        json_object_object_add(o, "ifname", json_object_new_string(d->ifname ?: ""));
        return o;
}

json_object *control_event_json(const Event *e) {
        json_object *o = NULL;
        char digest[17];

        switch (e->type) {
        case EVENT_ADDED:
        case EVENT_REMOVED:
                return device_event_json(event_type_to_string(e->type), e->device);
        case EVENT_STATE:
                o = device_event_json("state", e->device);
                if (o) {
                        json_object_object_add(o, "state", json_object_new_string(device_state_to_string(e->state)));
                        json_object_object_add(o, "previous",
                                               json_object_new_string(device_state_to_string(e->previous)));
                }
                return o;
        case EVENT_WRITE:
                o = device_event_json("write", e->device);
                if (!o)
                        return NULL;
                json_object_object_add(o, "cause", json_object_new_string(write_cause_to_string(e->cause) ?: ""));
                json_object_object_add(o, "from", control_sizes_json(e->from, e->ipv4));
                json_object_object_add(o, "to", control_sizes_json(e->to, e->ipv4));
                if (e->error < 0) {
                        json_object_object_add(o, "errno", json_object_new_int(-e->error));
                        json_object_object_add(o, "error", json_object_new_string(strerror(-e->error)));
                        if (e->extack)
                                json_object_object_add(o, "extack", json_object_new_string(e->extack));
                }
                return o;
        case EVENT_ROLLBACK:
                o = device_event_json("rollback", e->device);
                if (!o)
                        return NULL;
                json_object_object_add(o, "counter", json_object_new_string(e->rollback->counter ?: ""));
                json_object_object_add(o, "rise", json_object_new_int64((int64_t) e->rollback->rise));
                json_object_object_add(o, "threshold", json_object_new_double(e->rollback->threshold));
                json_object_object_add(o, "from", control_sizes_json(e->from, e->ipv4));
                json_object_object_add(o, "to", control_sizes_json(e->to, e->ipv4));
                return o;
        case EVENT_RELOAD:
                o = json_object_new_object();
                if (!o)
                        return NULL;
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) e->digest);
                json_object_object_add(o, "event", json_object_new_string("reload"));
                json_object_object_add(o, "ok", json_object_new_boolean(e->ok));
                json_object_object_add(o, "digest", json_object_new_string(digest));
                if (!e->ok && e->errors)
                        json_object_object_add(o, "errors", control_errors_json(e->errors));
                return o;
        case EVENT_ROLLOUT:
                o = e->device ? device_event_json("rollout", e->device) : json_object_new_object();
                if (!o)
                        return NULL;
                if (!e->device)
                        json_object_object_add(o, "event", json_object_new_string("rollout"));
                json_object_object_add(o, "policy", json_object_new_string(e->policy ?: ""));
                json_object_object_add(o, "halted", json_object_new_boolean(true));
                return o;
        case EVENT_RELOADING:
        case EVENT_SETTLED:
                return NULL; /* for sd_notify, not for operators */
        case _EVENT_TYPE_MAX:
        case _EVENT_TYPE_INVALID:
                break;
        }
        return NULL;
}
