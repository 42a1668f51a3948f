/* control.h — what the transports (varlink, D-Bus) may read from the daemon and ask of it:
 * queries as JSON in the schema of io.bigtcpd.Manager.varlink, reads of the kernel before an
 * answer, plan and validate, and the privileged operations. Transports parse and check a call,
 * call one of these and send back what it returns; events reach them as typed Events, which
 * control_event_write() writes as Monitor's JSON. Everything runs in the daemon's one loop. */
#pragma once

#include <json-c/json.h>

#include "engine.h"
#include "json-writer.h"
#include "metrics.h"
#include "netns-set.h"
#include "policy-reload.h"
#include "sync.h"
#include "policy-try.h"
#include "worker.h"

/* The daemon's (manager.c); the unit tests and the fuzzers build one the same way around their
 * played kernel (netns_new_played(), netns_set_new_alone()), without what they do not call. */
typedef struct Control {
        NetnsSet *netns; /* every namespace, bigtcpd's own first */
        /* Where the running policy comes from, and Reload (NULL, a test's: "files", no reload);
         * the policy itself is every namespace's. */
        Reloader *reloader;
        WorkerPool *workers; /* Plan and Validate (NULL: -EOPNOTSUPP) */
        PolicyTry *trial;    /* Try, Confirm, Revert (NULL: Try -EOPNOTSUPP, no try runs) */
} Control;

/* The daemon in one word, as networkctl says of a link: "starting" (before the first full
 * reconcile), "degraded" (a device is rolled back or failed, in any namespace it manages, or the
 * policy files have errors), else "ready". */
const char *control_state(const Control *c);

/* The daemon's events (the namespace set's: every namespace's devices, reloads, tries), and
 * whether every namespace has settled once. */
EventList *control_events(const Control *c);
bool control_ready(const Control *c);

/* The loop everything of control's runs on (the home namespace's). */
struct event_base *control_base(const Control *c);
/* The running policy (NULL before the first load) and this host as its scope sees it: the
 * reloader's, one for every namespace. */
const PolicySet *control_policy(const Control *c);
HostIdentity control_host(const Control *c);

/* Every namespace's devices by state, summed, with their number and the rollbacks since start. */
typedef struct ControlCounts {
        unsigned state[_DEVICE_STATE_MAX];
        size_t total;
        unsigned long long rollbacks;
} ControlCounts;
void control_counts(const Control *c, ControlCounts *ret);
/* GetStatus names at most this many rolled-back or failed devices. */
#define CONTROL_PROBLEMS_MAX 10u
/* The namespaces GetStatus counts one by one (by name); `managed` says how many there are. */
#define CONTROL_NAMESPACES_MAX 64u

/* The engine of the namespace the device lives in. */
Engine *control_engine_of(const Control *c, const Device *d);
/* d's big packets as ListDevices shows them (evidence_view(): its watch's, else the eBPF
 * observer's since it was loaded). false: nothing counted it. */
bool control_device_evidence(const Control *c, const Device *d, EvidenceView *ret);
/* The device's name as control_find_device() takes it back: "eth0" in the daemon's own
 * namespace, "cni-1/eth0" in another. NULL when out of memory. */
char *control_device_name(const Device *d);

/* JSON building blocks. */
json_object *control_sizes_json(const Sizes *s, bool ipv4);
json_object *control_device_json(const Control *c, const Device *d);
/* The same as JSON text, written into `w` (the value after what `w` holds); 0 or -ENOMEM. */
int control_device_write(const Control *c, const Device *d, JsonWriter *w);
json_object *control_status_json(const Control *c);
json_object *control_errors_json(const PolicyErrors *errs);
/* The same as JSON text, written into `w`. */
void control_errors_write(JsonWriter *w, const PolicyErrors *errs);
json_object *control_warnings_json(const PolicyErrors *warnings); /* without their "warning: " */
/* An event as Monitor sends it, written into `w`: 1, or 0 (nothing written) for events that are
 * not for operators, or -ENOMEM. */
int control_event_write(const Event *e, JsonWriter *w);
/* GetStatus' "try": the running try (file, target, deadline), or NULL when none runs. */
json_object *control_try_json(const Control *c);

/* A device by name, altname or ifindex; "NETNS/DEV" in another namespace ("host/DEV": the
 * daemon's own, as a bare name is). */
Device *control_find_device(const Control *c, const char *name);
/* Every device, sorted by ifindex; free the array, not the devices. */
int control_sorted_devices(const Control *c, Device ***ret, size_t *ret_n);
/* ListDevices' parameters, {"devices": [...]}: the one named, or (NULL) every device. -ENODEV
 * for an unknown name. */
int control_devices_json(const Control *c, const char *name, json_object **ret);
/* The same for every device, as JSON text written into `w`. */
int control_devices_write(const Control *c, JsonWriter *w);

/* The figures of /metrics (metrics.h), read from the tables: the status when made (copied), each
 * device when the source asks for it, also rounds of the loop later (the devices of the moment
 * it was made; one gone since is left out). */
typedef struct ControlMetrics ControlMetrics;
int control_metrics_new(Control *c, ControlMetrics **ret);
const MetricsSource *control_metrics_source(const ControlMetrics *m);
void control_metrics_free(ControlMetrics *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(ControlMetrics *, control_metrics_free);

/* Reads of the kernel before an answer (it sends no event when only a size changes). `fn` is
 * called once, from the loop, when the read is in (error 0), the device went away (-ENODEV) or the
 * read failed; then the caller builds its answer from the table. A request is cancelled (and
 * `fn` never called) when its caller goes away first. */
typedef struct ControlRequest ControlRequest;
typedef void (*ControlReadFn)(int error, void *userdata);
/* One device, by name (NULL: every device, by a new link dump). -ENODEV for an unknown name. */
int control_read(Control *c, const char *name, ControlReadFn fn, void *userdata, ControlRequest **ret);
void control_request_cancel(ControlRequest *r);

/* Plan and Validate run in a worker (worker.h): the text a caller sends is parsed, and a plan
 * computed against the device table as it is when the worker starts, outside the loop. `fn` is
 * called once, from the loop, with 0; -EINVAL and `errs` when the policy has errors; -EBUSY when
 * `uid` has too many jobs queued; or another -errno (the worker failed, ran too long). For Plan,
 * `plan` is Plan's reply as JSON text, an object: "devices", the array ListDevices' "devices"
 * would hold for it — what the given policy (the loaded one when `policy_yaml` is NULL) would do
 * on this host, device by device — and "policies", where each of its policies is in force here
 * (a canary's cohort included). A job is cancelled (and `fn` never called) when its caller goes
 * away first. `policy_yaml` is the caller's, not copied: it stays valid until `fn` is called or
 * the job is cancelled (a caller's text is held once, where it came in). */
typedef struct ControlJob ControlJob;
typedef void (*ControlJobFn)(int error, const PolicyErrors *errs, const PolicyErrors *warnings, const char *plan,
                             size_t size, void *userdata);
int control_plan(Control *c, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                 void *userdata, ControlJob **ret);
/* Parse `policy_yaml` like a policy file; 0 when clean, -EINVAL with every error in `errs`; in
 * `warnings` (also beside errors) the guard counters this namespace lacks. */
int control_validate(Control *c, uid_t uid, const char *policy_yaml, const char *source, ControlJobFn fn,
                     void *userdata, ControlJob **ret);
void control_job_cancel(ControlJob *j);

/* Privileged operations. Reload returns once the new policy is in force (its writes are queued),
 * -EINVAL with `errs` when refused. Rollback takes one device (or, `name` NULL, every device
 * bigtcpd has written) back to the sizes before bigtcpd's most recent change and holds it; Retry
 * releases a rolled-back or failed device (NULL: all of them). -ENODEV unknown device; -EALREADY
 * nothing to do. */
int control_reload(Control *c, PolicyErrors *errs, PolicyErrors *warnings);
/* Try, Confirm, Revert (policy-try.h): -EBUSY a try runs (Try, and Reload during one); -ENOENT no try
 * runs (Confirm, Revert). */
int control_try(Control *c, const char *policy_yaml, size_t size, const char *file, const char *target,
                uint64_t timeout_usec, PolicyErrors *errs);
int control_confirm(Control *c);
int control_revert(Control *c);
/* `each` (may be NULL) is told of every device tried, with what the step said of it (< 0: not
 * done, -EALREADY: nothing to do), before the writes are sent. */
typedef void (*ControlDeviceFn)(Device *d, int r, void *userdata);
int control_rollback(Control *c, const char *name, ControlDeviceFn each, void *userdata);
int control_retry(Control *c, const char *name, ControlDeviceFn each, void *userdata);
/* A write of the device is queued or on its way. */
bool control_device_writing(const Device *d);
/* Count the device's packets above 64 KiB for `duration_usec` (1 µs to an hour: else -ERANGE)
 * from now; a watch running is extended. `fn` is called once: with the device when its window
 * ends (its counts and verdict), or when `duration_usec` is over and the window goes on longer
 * (its probation, a longer watch: the counts so far; the window goes on); with -ENODEV when the
 * device goes away (`d` valid during the call). -ENODEV unknown device, -EUSERS too many devices
 * watched, -EOPNOTSUPP counting is off. control_watch_cancel() before `fn`: the caller went
 * away. */
typedef struct ControlWatch ControlWatch;
typedef void (*ControlWatchFn)(int error, const Device *d, void *userdata);
int control_watch(Control *c, const char *name, uint64_t duration_usec, ControlWatchFn fn, void *userdata,
                  ControlWatch **ret);
void control_watch_cancel(ControlWatch *w);
