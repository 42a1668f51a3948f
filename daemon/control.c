/* control.c — the control surface: the engines of the namespaces, devices by name, reads of the
 * kernel before an answer, the privileged operations, watches, and events as Monitor's JSON. The
 * JSON views are control-json.c's, Plan and Validate control-plan.c's. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "apply.h"
#include "control-internal.h"
#include "evidence.h"
#include "device-lifecycle.h"

/* The engines, for i < control_namespaces(): bigtcpd's own namespace's (0), then each other's. */
size_t control_namespaces(const Control *c) {
        return netns_set_all_count(c->netns);
}

Engine *control_engine_at(const Control *c, size_t i) {
        return netns_set_all_at(c->netns, i)->engine;
}

static Sync *sync_at(const Control *c, size_t i) {
        return netns_set_all_at(c->netns, i)->sync;
}

/* The one rule for a device named without a namespace ("eth0", like "host/eth0"): it is one of
 * bigtcpd's own namespace, the set's first entry. Its engine also gives GetStatus its top-level
 * figures (the IDL's: the other namespaces are under "netns") and the loop. */
Engine *control_home(const Control *c) {
        return control_engine_at(c, 0);
}

const char *control_observer_kind(const Engine *e) {
        return e->cfg.observer ? "ebpf" : e->cfg.packet_sockets ? "packet-socket" : "none";
}

struct event_base *control_base(const Control *c) {
        return control_home(c)->base;
}

/* Every namespace runs the reloader's policy (netns_set_reloader_ops), bigtcpd's own as any
 * other, and its host is the one the reloader scopes it for (manager.c): the home engine's are
 * the running ones. */
const PolicySet *control_policy(const Control *c) {
        return control_home(c)->policy;
}

HostIdentity control_host(const Control *c) {
        return engine_host(control_home(c));
}

EventList *control_events(const Control *c) {
        return netns_set_events(c->netns);
}

bool control_ready(const Control *c) {
        return netns_set_ready(c->netns);
}

Engine *control_engine_of(const Control *c, const Device *d) {
        Netns *n = netns_of_device(d);
        return n ? n->engine : control_engine_at(c, 0);
}

char *control_device_name(const Device *d) {
        char *s;

        if (!d->netns)
                return strdup(d->ifname);
        if (asprintf(&s, "%s/%s", d->netns->name, d->ifname) < 0)
                return NULL;
        return s;
}

bool control_device_evidence(const Control *c, const Device *d, EvidenceView *ret) {
        const Engine *e = control_engine_of(c, d);

        return evidence_view(e->evidence, d, engine_now(e), ret) >= 0;
}

const char *control_state(const Control *c) {
        const Device *d;

        if (!control_ready(c))
                return "starting";
        if (netns_set_problem_count(c->netns) > 0)
                return "degraded";
        if (reloader_source(c->reloader) != POLICY_SOURCE_FILES)
                return "degraded"; /* the policy files have errors */
        for (size_t i = 0; i < control_namespaces(c); i++) {
                const Engine *e = control_engine_at(c, i);
                DEVICE_FOREACH(d, &e->devices, it)
                        if (lifecycle_counted_state(d) == DEVICE_ROLLED_BACK || d->life.state == DEVICE_FAILED)
                                return "degraded";
        }
        return "ready";
}

void control_counts(const Control *c, ControlCounts *ret) {
        *ret = (ControlCounts){};
        for (size_t i = 0; i < control_namespaces(c); i++) {
                const Engine *e = control_engine_at(c, i);
                lifecycle_count_states(e, ret->state);
                ret->total += e->devices.n_devices;
                ret->rollbacks += e->counters.rollbacks;
        }
}

Device *control_find_device(const Control *c, const char *name) {
        const char *slash = name ? strchr(name, '/') : NULL;
        _cleanup_(freep) char *ns = NULL;
        Netns *n;

        if (!slash)
                return device_find(&control_home(c)->devices, name);
        ns = strndup(name, (size_t) (slash - name));
        if (!ns)
                return NULL;
        if (streq_ptr(ns, "host"))
                return device_find(&control_home(c)->devices, slash + 1);
        n = netns_set_find(c->netns, ns);
        return n ? device_find(&n->engine->devices, slash + 1) : NULL;
}

int control_sorted_devices(const Control *c, Device ***ret, size_t *ret_n) {
        _cleanup_(freep) Device **all = NULL;
        size_t n_all = 0, total = 0;
        int r;

        for (size_t i = 0; i < control_namespaces(c); i++)
                total += control_engine_at(c, i)->devices.n_devices;
        all = calloc(total + 1, sizeof(Device *));
        if (!all)
                return -ENOMEM;
        /* the daemon's own namespace first, then the others by name; in each, by ifindex */
        for (size_t i = 0; i < control_namespaces(c); i++) {
                const DeviceTable *t = &control_engine_at(c, i)->devices;
                _cleanup_(freep) Device **l = NULL;
                size_t n = 0;

                r = device_table_sorted(t, &l, &n);
                if (r < 0)
                        return r;
                for (size_t j = 0; j < n && n_all < total; j++)
                        all[n_all++] = l[j];
        }
        *ret = TAKE_PTR(all);
        *ret_n = n_all;
        return 0;
}

/* ---- reads before an answer ---- */

/* A dump of one namespace's links that a request waits for. */
typedef struct ControlWait {
        ControlRequest *request;
        Sync *sync;
        uint64_t id; /* 0 once answered */
} ControlWait;

struct ControlRequest {
        Control *control;
        ControlReadFn fn;
        void *userdata;
        Writer *writer;   /* … of the device's namespace */
        uint64_t read_id; /* the writer's, for one device */
        ControlWait *waits; /* the dumps, of the device's namespace or of every one */
        size_t n_waits, n_pending;
        struct event *deferred; /* answers from the loop, never from inside the caller's call */
        int error;
};

static void request_free(ControlRequest *r) {
        if (r->deferred)
                event_free(r->deferred);
        free(r->waits);
        free(r);
}

static void on_deferred(evutil_socket_t fd, short what, void *userdata) {
        ControlRequest *r = userdata;
        ControlReadFn fn = r->fn;
        void *ud = r->userdata;
        int error = r->error;

        request_free(r);
        fn(error, ud);
}

static void finish_request(ControlRequest *r, int error) {
        r->error = error;
        r->read_id = 0;
        for (size_t i = 0; i < r->n_waits; i++)
                if (r->waits[i].id != 0) {
                        sync_cancel_wait(r->waits[i].sync, r->waits[i].id);
                        r->waits[i].id = 0;
                }
        r->n_pending = 0;
        event_active(r->deferred, EV_TIMEOUT, 0);
}

static void on_device_read(Device *d, int error, void *userdata) {
        finish_request(userdata, d ? error : -ENODEV);
}

/* One namespace's dump is done (or its namespace went, sync_free): the last one answers. */
static void on_links_read(void *userdata) {
        ControlWait *w = userdata;
        ControlRequest *r = w->request;

        w->id = 0;
        if (r->n_pending > 0 && --r->n_pending == 0)
                finish_request(r, 0);
}

static int wait_links(ControlRequest *r, Sync *sync) {
        ControlWait *w = &r->waits[r->n_waits];
        int k;

        *w = (ControlWait){.request = r, .sync = sync};
        k = sync_wait_links(sync, on_links_read, w, &w->id);
        if (k < 0)
                return k;
        r->n_waits++;
        r->n_pending++;
        return 0;
}

int control_read(Control *c, const char *name, ControlReadFn fn, void *userdata, ControlRequest **ret) {
        ControlRequest *r;
        Device *d = NULL;
        int k;

        if (name) {
                d = control_find_device(c, name);
                if (!d)
                        return -ENODEV;
        }
        r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        *r = (ControlRequest){.control = c, .fn = fn, .userdata = userdata};
        r->deferred = event_new(control_home(c)->base, -1, 0, on_deferred, r);
        r->waits = calloc(d ? 1 : control_namespaces(c), sizeof(*r->waits));
        if (!r->deferred || !r->waits) {
                request_free(r);
                return -ENOMEM;
        }
        /* One device: one request, through its namespace's writer (a namespace that goes ends
         * its devices' reads with -ENODEV first: netns-set.c); when the ring is full, a new dump of
         * its namespace. Every device: a new dump of every namespace. */
        if (d) {
                Netns *n = netns_of_device(d);
                r->writer = control_engine_of(c, d)->writer;
                k = writer_request_read(r->writer, d, on_device_read, r, &r->read_id);
                if (k == -EBUSY)
                        k = wait_links(r, n ? n->sync : sync_at(c, 0));
        } else {
                k = 0;
                for (size_t i = 0; k >= 0 && i < control_namespaces(c); i++)
                        k = wait_links(r, sync_at(c, i));
        }
        if (k < 0) {
                control_request_cancel(r); /* takes back the waits made */
                return k;
        }
        *ret = r;
        return 0;
}

void control_request_cancel(ControlRequest *r) {
        if (!r)
                return;
        if (r->read_id)
                writer_cancel_read(r->writer, r->read_id);
        for (size_t i = 0; i < r->n_waits; i++)
                if (r->waits[i].id != 0)
                        sync_cancel_wait(r->waits[i].sync, r->waits[i].id);
        request_free(r);
}

/* ---- privileged ---- */

int control_reload(Control *c, PolicyErrors *errs, PolicyErrors *warnings) {
        return reloader_reload(c->reloader, true, errs, warnings);
}

int control_try(Control *c, const char *policy_yaml, size_t size, const char *file, const char *target,
                uint64_t timeout_usec, PolicyErrors *errs) {
        if (!c->trial)
                return -EOPNOTSUPP;
        return policy_try_start(c->trial, policy_yaml, size, file, target, timeout_usec, errs);
}

int control_confirm(Control *c) {
        return c->trial ? policy_try_confirm(c->trial) : -ENOENT;
}

int control_revert(Control *c) {
        return c->trial ? policy_try_revert(c->trial, TRY_REASON_OPERATOR) : -ENOENT;
}

/* One device by name, or (NULL) every device `op` has something to do with; `each` (may be NULL)
 * is told of every device tried and what `op` said. */
static int device_op(Control *c, const char *name, int (*op)(Engine *e, Device *d, const RollbackRecord *why),
                     ControlDeviceFn each, void *userdata) {
        Device *d;
        int r, n = 0;

        if (name) {
                d = control_find_device(c, name);
                if (!d)
                        return -ENODEV;
                Engine *e = control_engine_of(c, d);
                r = op(e, d, NULL);
                if (each)
                        each(d, r, userdata);
                apply_flush(e);
                return r;
        }
        for (size_t i = 0; i < control_namespaces(c); i++) {
                Engine *e = control_engine_at(c, i);
                DEVICE_FOREACH(d, &e->devices, it) {
                        r = op(e, d, NULL);
                        if (each)
                                each(d, r, userdata);
                        if (r >= 0)
                                n++;
                }
                apply_flush(e);
        }
        return n > 0 ? 0 : -EALREADY;
}

static int retry(Engine *e, Device *d, const RollbackRecord *unused) {
        return apply_retry(e, d);
}

int control_rollback(Control *c, const char *name, ControlDeviceFn each, void *userdata) {
        return device_op(c, name, apply_rollback, each, userdata);
}

int control_retry(Control *c, const char *name, ControlDeviceFn each, void *userdata) {
        return device_op(c, name, retry, each, userdata);
}

bool control_device_writing(const Device *d) {
        return d->write.phase != WRITE_IDLE;
}

/* A window that outlasts a call's own by more than this is not waited for. */
#define WATCH_OUTLASTS_USEC (200 * USEC_PER_MSEC)

struct ControlWatch {
        Control *control;
        Device *device;
        uint64_t until_usec; /* CLOCK_MONOTONIC of the engine's clock: the end of the call's own time */
        unsigned watch_id;
        struct event *timer;
        ControlWatchFn fn;
        void *userdata;
};

void control_watch_cancel(ControlWatch *w) {
        if (!w)
                return;
        if (w->watch_id != 0)
                event_watch_remove(control_events(w->control), w->watch_id);
        if (w->timer)
                event_free(w->timer);
        free(w);
}

static void watch_done(ControlWatch *w, int error) {
        ControlWatchFn fn = w->fn;
        void *userdata = w->userdata;
        const Device *d = w->device;

        control_watch_cancel(w);
        fn(error, d, userdata);
}

static int watch_arm(ControlWatch *w, uint64_t usec) {
        struct timeval tv = {.tv_sec = (time_t) (usec / USEC_PER_SEC), .tv_usec = (suseconds_t) (usec % USEC_PER_SEC)};
        return evtimer_add(w->timer, &tv) < 0 ? -ENOMEM : 0;
}

static void on_watch_event(const Event *e, void *userdata) {
        ControlWatch *w = userdata;

        if (e->device != w->device || (e->type != EVENT_EVIDENCE && e->type != EVENT_REMOVED))
                return;
        watch_done(w, e->type == EVENT_REMOVED ? -ENODEV : 0);
}

/* The call's own time is over: a window that goes on longer is not waited for. */
static void on_watch_timer(evutil_socket_t fd, short what, void *userdata) {
        ControlWatch *w = userdata;
        Engine *e = control_engine_of(w->control, w->device);
        uint64_t now = clock_now(e->clock, CLOCK_MONOTONIC);

        /* libevent's clock is coarse: its timer may come a few ms early */
        if (now < w->until_usec && watch_arm(w, w->until_usec - now) >= 0)
                return;
        if (!evidence_watching_after(w->device, w->until_usec + WATCH_OUTLASTS_USEC))
                return; /* it ends about now: EVENT_EVIDENCE comes with the verdict */
        evidence_drain(e->evidence);
        watch_done(w, 0);
}

int control_watch(Control *c, const char *name, uint64_t duration_usec, ControlWatchFn fn, void *userdata,
                  ControlWatch **ret) {
        Device *d = name ? control_find_device(c, name) : NULL;
        ControlWatch *w;
        int r;

        if (!d)
                return -ENODEV;
        if (duration_usec == 0 || duration_usec > EVIDENCE_DURATION_MAX_USEC)
                return -ERANGE;
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        Engine *e = control_engine_of(c, d);
        *w = (ControlWatch){.control = c, .device = d, .fn = fn, .userdata = userdata,
                            .until_usec = clock_now(e->clock, CLOCK_MONOTONIC) + duration_usec};
        /* an earlier window that closes now says so before this call listens: it waits for its own */
        r = evidence_watch(e->evidence, d, duration_usec);
        if (r >= 0) {
                w->watch_id = event_watch_add(control_events(c), on_watch_event, w);
                w->timer = evtimer_new(e->base, on_watch_timer, w);
                r = w->watch_id == 0 || !w->timer ? -ENOMEM : watch_arm(w, duration_usec);
        }
        if (r < 0) {
                control_watch_cancel(w);
                return r;
        }
        *ret = w;
        return 0;
}

/* ---- events ---- */

/* `{"event": TYPE, "netns", "ifindex", "ifname"`, the object left open. */
static void device_event_begin(JsonWriter *w, const char *type, const Device *d) {
        json_writer_object_begin(w);
        json_writer_key(w, "event");
        json_writer_string(w, type);
        /* events of the daemon's own namespace stay as they were before namespaces */
        if (d->netns) {
                json_writer_key(w, "netns");
                control_kernel_string_write(w, d->netns->name);
        }
        json_writer_key(w, "ifindex");
        json_writer_int64(w, d->ifindex);
        json_writer_key(w, "ifname");
        control_kernel_string_write(w, d->ifname);
}

static void key_string(JsonWriter *w, const char *key, const char *value) {
        json_writer_key(w, key);
        json_writer_string(w, value);
}

static void key_int(JsonWriter *w, const char *key, int64_t value) {
        json_writer_key(w, key);
        json_writer_int64(w, value);
}

static void key_bool(JsonWriter *w, const char *key, bool value) {
        json_writer_key(w, key);
        json_writer_bool(w, value);
}

/* "errno" and "error" of a failure (`error` < 0). */
static void write_errno(JsonWriter *w, int error) {
        if (error < 0) {
                key_int(w, "errno", -error);
                key_string(w, "error", strerror(-error));
        }
}

int control_event_write(const Event *e, JsonWriter *w) {
        char digest[17];

        switch (e->type) {
        case EVENT_ADDED:
        case EVENT_REMOVED:
                device_event_begin(w, event_type_to_string(e->type), e->device);
                break;
        case EVENT_STATE:
                device_event_begin(w, "state", e->device);
                key_string(w, "state", device_state_to_string(e->state));
                key_string(w, "previous", device_state_to_string(e->previous));
                break;
        case EVENT_WRITE:
                device_event_begin(w, "write", e->device);
                key_string(w, "cause", write_cause_to_string(e->cause) ?: "");
                control_sizes_write(w, "from", e->from, e->ipv4);
                control_sizes_write(w, "to", e->to, e->ipv4);
                write_errno(w, e->error);
                if (e->error < 0 && e->extack) {
                        json_writer_key(w, "extack");
                        control_kernel_string_write(w, e->extack);
                }
                break;
        case EVENT_ROLLBACK:
                device_event_begin(w, "rollback", e->device);
                key_string(w, "counter", e->rollback->counter ?: "");
                key_int(w, "rise", (int64_t) e->rollback->rise);
                json_writer_key(w, "threshold");
                json_writer_double(w, e->rollback->threshold);
                control_sizes_write(w, "from", e->from, e->ipv4);
                control_sizes_write(w, "to", e->to, e->ipv4);
                break;
        case EVENT_RELOAD:
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) e->digest);
                json_writer_object_begin(w);
                key_string(w, "event", "reload");
                key_bool(w, "ok", e->ok);
                key_string(w, "digest", digest);
                if (!e->ok && e->errors) {
                        json_writer_key(w, "errors");
                        control_errors_write(w, e->errors);
                }
                break;
        case EVENT_ROLLOUT:
                if (e->device)
                        device_event_begin(w, "rollout", e->device);
                else {
                        json_writer_object_begin(w);
                        key_string(w, "event", "rollout");
                }
                key_string(w, "policy", e->policy ?: "");
                key_bool(w, "halted", true);
                break;
        case EVENT_TRY:
                snprintf(digest, sizeof(digest), "%016llx", (unsigned long long) e->digest);
                json_writer_object_begin(w);
                key_string(w, "event", "try");
                key_string(w, "action", try_action_to_string(e->try_action) ?: "");
                if (try_reason_to_string(e->try_reason))
                        key_string(w, "reason", try_reason_to_string(e->try_reason));
                key_string(w, "file", e->file ?: "");
                key_string(w, "target", e->target ?: "");
                key_int(w, "deadline_usec", (int64_t) e->deadline);
                key_string(w, "digest", digest);
                break;
        case EVENT_EVIDENCE:
                device_event_begin(w, "evidence", e->device);
                json_writer_key(w, "big_packets");
                control_big_packets_write(w, now_usec(), NULL, e->device);
                json_writer_key(w, "effective");
                control_effective_write(w, e->device);
                break;
        case EVENT_AUTO:
                device_event_begin(w, "auto", e->device);
                key_string(w, "change", auto_change_to_string(e->auto_change) ?: "?");
                json_writer_key(w, "search");
                control_auto_search_write(w, e->auto_search, e->auto_size, realtime_usec());
                break;
        case EVENT_NETNS_PROBLEM:
                json_writer_object_begin(w);
                key_string(w, "event", "netns-problem");
                json_writer_key(w, "netns");
                control_kernel_string_write(w, e->netns);
                key_string(w, "problem", e->problem ?: "");
                key_bool(w, "ok", e->ok);
                write_errno(w, e->error);
                break;
        case EVENT_RELOADING:
        case EVENT_SETTLED:
                return 0; /* for sd_notify, not for operators */
        case _EVENT_TYPE_MAX:
        case _EVENT_TYPE_INVALID:
                return 0;
        }
        json_writer_object_end(w);
        return json_writer_error(w) < 0 ? json_writer_error(w) : 1;
}
