/* operation.c — every operation of the control surface as one asynchronous object: it runs the
 * control.h call, follows what that call set going (the writes it queued, the reload's settling,
 * the worker, the watch, the read) through the daemon's events, and completes once with what
 * happened, or an error of one table. */
#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "evidence.h"
#include "log.h"
#include "operation.h"
#include "utf8.h"

static const char *const kind_table[_OPERATION_KIND_MAX] = {
        [OPERATION_RELOAD] = "Reload",     [OPERATION_TRY] = "Try",         [OPERATION_CONFIRM] = "Confirm",
        [OPERATION_REVERT] = "Revert",     [OPERATION_ROLLBACK] = "Rollback", [OPERATION_RETRY] = "Retry",
        [OPERATION_WATCH] = "Watch",       [OPERATION_READ] = "Read",       [OPERATION_PLAN] = "Plan",
        [OPERATION_VALIDATE] = "Validate",
};

const char *operation_kind_to_string(OperationKind k) {
        return k >= 0 && k < _OPERATION_KIND_MAX ? kind_table[k] : NULL;
}

/* The one table of errors: each one's name on varlink and on D-Bus. */
#define VL "io.bigtcpd.Manager."
#define DB "io.bigtcpd1.Manager."
static const struct {
        const char *varlink, *dbus;
} error_table[_OPERATION_ERROR_MAX] = {
        [OPERATION_NO_SUCH_DEVICE] = {VL "NoSuchDevice", DB "NoSuchDevice"},
        [OPERATION_POLICY_INVALID] = {VL "PolicyInvalid", DB "PolicyInvalid"},
        [OPERATION_NOTHING_TO_DO] = {VL "NothingToDo", DB "NothingToDo"},
        [OPERATION_TRY_RUNNING] = {VL "TryRunning", DB "TryRunning"},
        [OPERATION_NO_TRY] = {VL "NoTry", DB "NoTry"},
        [OPERATION_TARGET_NOT_READ] = {VL "TargetNotRead", DB "TargetNotRead"},
        [OPERATION_BUSY] = {VL "Busy", "org.freedesktop.DBus.Error.LimitsExceeded"},
        [OPERATION_INVALID_ARGUMENT] = {"org.varlink.service.InvalidParameter", "org.freedesktop.DBus.Error.InvalidArgs"},
        [OPERATION_FAILED] = {VL "Failed", DB "Failed"},
};

const char *operation_error_varlink(OperationError e) {
        return e > 0 && e < _OPERATION_ERROR_MAX ? error_table[e].varlink : NULL;
}

const char *operation_error_dbus(OperationError e) {
        return e > 0 && e < _OPERATION_ERROR_MAX ? error_table[e].dbus : NULL;
}

/* A device's writes since the operation began, merged. */
typedef struct Move {
        const Device *device; /* NULL once it went away */
        OperationMove m;
} Move;

static unsigned reads_in_flight;

unsigned operation_reads_in_flight(void) {
        return reads_in_flight;
}

struct Operation {
        Control *control;
        OperationKind kind;
        OperationArgs args;
        OperationFn fn;
        void *userdata;
        bool started, done, counted;

        /* what runs for it */
        ControlRequest *request;
        ControlJob *job;
        ControlWatch *watch;
        unsigned watch_id;      /* of the daemon's events, while it follows them */
        struct event *deferred; /* the completion, from the loop */
        struct event *timer;    /* the bound on waiting for writes */

        /* what it saw */
        bool reloading;    /* a reload began during its call: it waits for EVENT_SETTLED */
        bool settling;     /* … it does now */
        bool awaiting;     /* it waits for the writes of the devices in `waiting` */
        const Device **waiting; /* devices whose writes it waits for (rollback, retry) */
        size_t n_waiting;
        Move *moves;
        size_t n_moves;
        OperationList held, released;

        OperationResult result;
        PolicyErrors errs, warnings;
        char *target, *try_file, *ifname; /* copies, for the result: a reply owns what it says */
};

static void list_clear(OperationList *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->items[i]);
        free(l->items);
        *l = (OperationList){};
}

static int list_add(OperationList *l, const Device *d) {
        _cleanup_(freep) char *name = control_device_name(d);
        char **t;

        if (!name)
                return -ENOMEM;
        for (size_t i = 0; i < l->n; i++)
                if (streq_ptr(l->items[i], name))
                        return 0;
        t = realloc(l->items, (l->n + 1) * sizeof(*t));
        if (!t)
                return -ENOMEM;
        l->items = t;
        l->items[l->n++] = TAKE_PTR(name);
        return 0;
}

static void list_remove(OperationList *l, const Device *d) {
        _cleanup_(freep) char *name = control_device_name(d);

        for (size_t i = 0; name && i < l->n; i++)
                if (streq_ptr(l->items[i], name)) {
                        free(l->items[i]);
                        l->items[i] = l->items[--l->n];
                        return;
                }
}

static void move_clear(OperationMove *m) {
        free(m->device);
        free(m->netns);
        free(m->ifname);
        free(m->extack);
}

OperationKind operation_kind(const Operation *op) {
        return op->kind;
}

void operation_set_uid(Operation *op, uid_t uid) {
        op->args.uid = uid;
}

Control *operation_control(const Operation *op) {
        return op->control;
}

const OperationArgs *operation_args(const Operation *op) {
        return &op->args;
}

int operation_new(Control *c, OperationKind kind, const OperationArgs *args, Operation **ret) {
        Operation *op;

        if (kind < 0 || kind >= _OPERATION_KIND_MAX)
                return -EINVAL;
        op = calloc(1, sizeof(*op));
        if (!op) {
                if (args && args->keep_free)
                        args->keep_free(args->keep);
                return -ENOMEM;
        }
        *op = (Operation){.control = c, .kind = kind, .args = args ? *args : (OperationArgs){}};
        *ret = op;
        return 0;
}

static void stop_following(Operation *op) {
        if (op->watch_id != 0) {
                event_watch_remove(control_events(op->control), op->watch_id);
                op->watch_id = 0;
        }
        if (op->timer) {
                event_free(op->timer);
                op->timer = NULL;
        }
}

void operation_free(Operation *op) {
        if (!op)
                return;
        stop_following(op);
        control_request_cancel(op->request);
        control_job_cancel(op->job);
        control_watch_cancel(op->watch);
        if (op->deferred)
                event_free(op->deferred);
        if (op->counted)
                reads_in_flight--;
        for (size_t i = 0; i < op->n_moves; i++)
                move_clear(&op->moves[i].m);
        free(op->moves);
        free(op->waiting);
        list_clear(&op->held);
        list_clear(&op->released);
        list_clear(&op->result.pending);
        free(op->result.moved);
        free(op->result.refused);
        policy_errors_clear(&op->errs);
        policy_errors_clear(&op->warnings);
        free(op->target);
        free(op->try_file);
        free(op->ifname);
        if (op->args.keep_free)
                op->args.keep_free(op->args.keep);
        free(op);
}

/* ---- completion ---- */

/* The moves, split into those done and those refused (the arrays point into op->moves' items). */
static int split_moves(Operation *op) {
        OperationResult *r = &op->result;

        if (op->n_moves == 0)
                return 0;
        r->moved = calloc(op->n_moves, sizeof(*r->moved));
        r->refused = calloc(op->n_moves, sizeof(*r->refused));
        if (!r->moved || !r->refused)
                return -ENOMEM;
        for (size_t i = 0; i < op->n_moves; i++) {
                const OperationMove *m = &op->moves[i].m;
                if (m->error < 0)
                        r->refused[r->n_refused++] = *m;
                else
                        r->moved[r->n_moved++] = *m;
        }
        return 0;
}

/* What is still on its way: the devices waited for, or (a reload's) every device being written. */
static void collect_pending(Operation *op) {
        _cleanup_(freep) Device **l = NULL;
        size_t n = 0;

        if (!op->settling) {
                for (size_t i = 0; i < op->n_waiting; i++)
                        (void) list_add(&op->result.pending, op->waiting[i]);
                return;
        }
        if (control_sorted_devices(op->control, &l, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                if (control_device_writing(l[i]))
                        (void) list_add(&op->result.pending, l[i]);
}

/* Calls fn: the last thing done with `op`, which fn may free. */
static void complete(Operation *op) {
        OperationResult *r = &op->result;

        op->done = true;
        stop_following(op);
        if (r->error == OPERATION_OK && split_moves(op) < 0)
                *r = (OperationResult){.kind = op->kind, .error = OPERATION_FAILED, .errno_ = -ENOMEM};
        r->kind = op->kind;
        r->held = op->held;
        r->released = op->released;
        if (!r->errors)
                r->errors = &op->errs;
        if (!r->warnings)
                r->warnings = &op->warnings;
        op->fn(op, r, op->userdata);
}

/* The devices waited for whose writes are all answered are no longer waited for. */
static void check_waiting(Operation *op) {
        for (size_t i = op->n_waiting; i > 0; i--)
                if (!control_device_writing(op->waiting[i - 1]))
                        op->waiting[i - 1] = op->waiting[--op->n_waiting];
}

/* From the loop: done, unless it still waits for writes or for the reload to settle. */
static void on_deferred(evutil_socket_t fd, short what, void *userdata) {
        Operation *op = userdata;

        if (op->awaiting) {
                check_waiting(op);
                if (op->n_waiting > 0)
                        return;
                op->awaiting = false;
        }
        if (op->settling)
                return;
        complete(op);
}

/* Complete (or check whether it is complete) from the loop, never from inside
 * operation_start()'s caller. */
static void complete_later(Operation *op) {
        if (!op->done)
                event_active(op->deferred, EV_TIMEOUT, 0);
}

/* An error: -errno as this kind means it. */
static void fail(Operation *op, int error) {
        OperationResult *r = &op->result;
        const PolicyTry *t = op->control->trial;

        r->errno_ = error;
        switch (error) {
        case -ENODEV:
                r->error = OPERATION_NO_SUCH_DEVICE;
                r->ifname = op->args.ifname;
                break;
        case -EALREADY:
                r->error = OPERATION_NOTHING_TO_DO;
                r->ifname = op->args.ifname;
                break;
        case -EBUSY:
                if (op->kind == OPERATION_PLAN || op->kind == OPERATION_VALIDATE)
                        r->error = OPERATION_BUSY;
                else {
                        /* a copy: the try may end (and free its name) before the reply is made */
                        free(op->try_file);
                        op->try_file = t && t->file ? strdup(t->file) : NULL;
                        if (t && t->file && !op->try_file) {
                                r->error = OPERATION_FAILED;
                                r->errno_ = -ENOMEM;
                                break;
                        }
                        r->error = OPERATION_TRY_RUNNING;
                        r->try_file = op->try_file ?: "";
                        r->deadline_usec = t ? t->deadline_realtime : 0;
                }
                break;
        case -ENOENT:
                r->error = op->kind == OPERATION_CONFIRM || op->kind == OPERATION_REVERT ? OPERATION_NO_TRY
                                                                                         : OPERATION_FAILED;
                break;
        case -EXDEV:
                r->error = OPERATION_TARGET_NOT_READ;
                r->target = op->args.target ?: "";
                break;
        case -ERANGE:
                r->error = OPERATION_INVALID_ARGUMENT;
                r->parameter = op->kind == OPERATION_WATCH ? "duration_usec" : "timeout_usec";
                break;
        case -EINVAL:
                r->error = (r->errors ? r->errors->n : op->errs.n) > 0 ? OPERATION_POLICY_INVALID : OPERATION_FAILED;
                break;
        default:
                r->error = OPERATION_FAILED;
                break;
        }
}

/* ---- following what the call set going ---- */

static Move *move_of(Operation *op, const Device *d) {
        for (size_t i = 0; i < op->n_moves; i++)
                if (op->moves[i].device == d)
                        return &op->moves[i];
        return NULL;
}

static int move_add(Operation *op, const Device *d, const Sizes *from, const Sizes *to, bool ipv4, int error,
                    const char *extack) {
        Move *m = move_of(op, d), *t;

        if (!m) {
                t = realloc(op->moves, (op->n_moves + 1) * sizeof(*t));
                if (!t)
                        return -ENOMEM;
                op->moves = t;
                m = &op->moves[op->n_moves];
                *m = (Move){.device = d, .m = {.from = from ? *from : d->current, .ipv4 = ipv4}};
                m->m.device = control_device_name(d);
                m->m.netns = d->netns ? strdup(d->netns->name) : NULL;
                m->m.ifname = strdup(d->ifname);
                if (!m->m.device || !m->m.ifname || (d->netns && !m->m.netns)) {
                        move_clear(&m->m);
                        return -ENOMEM;
                }
                op->n_moves++;
        }
        m->m.to = to ? *to : d->current;
        m->m.error = error;
        free(m->m.extack);
        m->m.extack = extack ? strdup(extack) : NULL;
        return 0;
}

static void on_event(const Event *e, void *userdata) {
        Operation *op = userdata;

        switch (e->type) {
        case EVENT_RELOADING:
                op->reloading = true;
                break;
        case EVENT_WRITE:
                if (move_add(op, e->device, e->from, e->to, e->ipv4, e->error, e->extack) < 0)
                        log_debug("operation: out of memory, its result will miss a device");
                if (op->awaiting)
                        complete_later(op); /* checked from the loop, once the ack is handled */
                break;
        case EVENT_ROLLBACK:
                if (list_add(&op->held, e->device) < 0)
                        log_debug("operation: out of memory, its result will miss a device");
                break;
        case EVENT_REMOVED:
                for (size_t i = 0; i < op->n_waiting; i++)
                        if (op->waiting[i] == e->device) {
                                /* its write, if it had none answered yet, is refused: it went */
                                Move *m = move_of(op, e->device);
                                if (!m && move_add(op, e->device, NULL, NULL, false, -ENODEV, NULL) < 0)
                                        log_debug("operation: out of memory, its result will miss a device");
                                op->waiting[i] = op->waiting[--op->n_waiting];
                                if (op->awaiting)
                                        complete_later(op);
                                break;
                        }
                for (size_t i = 0; i < op->n_moves; i++)
                        if (op->moves[i].device == e->device)
                                op->moves[i].device = NULL;
                /* a device that went is neither held nor released any more */
                list_remove(&op->held, e->device);
                list_remove(&op->released, e->device);
                break;
        case EVENT_SETTLED:
                if (op->settling) {
                        op->settling = false;
                        complete_later(op);
                }
                break;
        default:
                break;
        }
}

static void on_timer(evutil_socket_t fd, short what, void *userdata) {
        Operation *op = userdata;

        collect_pending(op);
        op->n_waiting = 0;
        op->awaiting = op->settling = false;
        complete_later(op);
}

static int follow(Operation *op) {
        op->watch_id = event_watch_add(control_events(op->control), on_event, op);
        return op->watch_id == 0 ? -ENOMEM : 0;
}

/* After the call: wait for what it set going, at most OPERATION_WRITES_WAIT_USEC. */
static int wait_for_writes(Operation *op) {
        struct timeval tv = {.tv_sec = OPERATION_WRITES_WAIT_USEC / USEC_PER_SEC};

        op->settling = op->reloading;
        op->awaiting = op->n_waiting > 0;
        if (!op->awaiting && !op->settling) {
                complete_later(op);
                return 0;
        }
        op->timer = evtimer_new(control_base(op->control), on_timer, op);
        if (!op->timer || evtimer_add(op->timer, &tv) < 0)
                return -ENOMEM;
        return 0;
}

static void on_device_tried(Device *d, int r, void *userdata) {
        Operation *op = userdata;
        const Device **t;

        if (r < 0)
                return;
        if (op->kind == OPERATION_RETRY && list_add(&op->released, d) < 0)
                log_debug("operation: out of memory, its result will miss a device");
        if (!control_device_writing(d))
                return;
        t = realloc(op->waiting, (op->n_waiting + 1) * sizeof(*t));
        if (!t) {
                log_debug("operation: out of memory, its result will miss a device");
                return;
        }
        op->waiting = t;
        op->waiting[op->n_waiting++] = d;
}

/* Rollback, Retry. */
static int run_device_op(Operation *op) {
        int r;

        r = follow(op);
        if (r < 0)
                return r;
        r = (op->kind == OPERATION_ROLLBACK ? control_rollback : control_retry)(op->control, op->args.ifname,
                                                                              on_device_tried, op);
        if (r < 0 && r != -ENOMEM) {
                fail(op, r);
                complete_later(op);
                return 0;
        }
        if (r < 0)
                return r;
        return wait_for_writes(op);
}

static uint64_t policy_digest(const Operation *op) {
        const PolicySet *set = control_policy(op->control);
        return set ? set->digest : 0;
}

/* Reload, Try, Confirm, Revert. */
static int run_policy_op(Operation *op) {
        Control *c = op->control;
        const OperationArgs *a = &op->args;
        int r;

        const PolicySet *before = control_policy(c);

        r = follow(op);
        if (r < 0)
                return r;
        switch (op->kind) {
        case OPERATION_RELOAD:
                r = control_reload(c, &op->errs, &op->warnings);
                break;
        case OPERATION_TRY:
                r = control_try(c, a->policy, a->policy_size, a->source ?: "<policy>", a->target,
                                a->usec ?: TRY_TIMEOUT_DEFAULT_USEC, &op->errs);
                if (r >= 0 && c->trial && (!(op->target = strdup(c->trial->target)) ||
                                           !(op->try_file = strdup(c->trial->file))))
                        r = -ENOMEM;
                if (r >= 0 && c->trial)
                        op->result.deadline_usec = c->trial->deadline_realtime;
                break;
        case OPERATION_CONFIRM:
                if (c->trial && c->trial->running && !(op->target = strdup(c->trial->target)))
                        return -ENOMEM;
                r = control_confirm(c);
                if (r < 0)
                        op->result.message = policy_try_install_problem(r);
                break;
        case OPERATION_REVERT:
                r = control_revert(c);
                break;
        default:
                return -EINVAL;
        }
        if (r < 0) {
                if (op->kind != OPERATION_RELOAD)
                        policy_errors_clear(&op->warnings);
                fail(op, r);
                complete_later(op);
                return 0;
        }
        /* a new policy runs (a try's too, which announces no reload): every namespace settles on it */
        op->reloading = op->reloading || control_policy(c) != before;
        op->result.digest = policy_digest(op);
        op->result.target = op->target;
        op->result.try_file = op->try_file;
        return wait_for_writes(op);
}

static void on_read(int error, void *userdata) {
        Operation *op = userdata;

        op->request = NULL; /* over: control.c freed it */
        op->result.ifname = op->args.ifname;
        /* a read that failed still has the table to answer from; a device that went is gone */
        if (error == -ENODEV)
                fail(op, error);
        else if (op->args.ifname && !(op->result.device = control_find_device(op->control, op->args.ifname)))
                fail(op, -ENODEV);
        complete(op);
}

static void on_job(int error, const PolicyErrors *errs, const PolicyErrors *warnings, const char *plan, size_t size,
                   void *userdata) {
        Operation *op = userdata;
        OperationResult *r = &op->result;

        op->job = NULL; /* over: control.c frees it */
        r->errors = errs;
        r->warnings = warnings;
        if (error == -EINVAL && errs->n > 0 && op->kind == OPERATION_VALIDATE)
                ; /* Validate answers with the errors */
        else if (error < 0)
                fail(op, error);
        else {
                r->plan = plan;
                r->plan_size = size;
        }
        complete(op);
}

static void on_watch(int error, const Device *d, void *userdata) {
        Operation *op = userdata;

        op->watch = NULL; /* over: control.c freed it */
        if (error < 0) {
                fail(op, error);
                /* a copy: the device goes once its watchers are told */
                free(op->ifname);
                op->ifname = strdup(d->ifname);
                op->result.ifname = op->ifname ?: op->args.ifname;
        } else
                op->result.device = d;
        complete(op);
}

int operation_start(Operation *op, OperationFn fn, void *userdata) {
        Control *c = op->control;
        const OperationArgs *a = &op->args;
        int r;

        if (op->started)
                return -EBUSY;
        op->fn = fn;
        op->userdata = userdata;
        op->result.kind = op->kind;
        op->deferred = event_new(control_base(c), -1, 0, on_deferred, op);
        if (!op->deferred)
                return -ENOMEM;
        op->started = true;
        switch (op->kind) {
        case OPERATION_ROLLBACK:
        case OPERATION_RETRY:
                return run_device_op(op);
        case OPERATION_RELOAD:
        case OPERATION_TRY:
        case OPERATION_CONFIRM:
        case OPERATION_REVERT:
                return run_policy_op(op);
        case OPERATION_READ:
                r = control_read(c, a->ifname, on_read, op, &op->request);
                if (r >= 0) {
                        op->counted = true;
                        reads_in_flight++;
                }
                break;
        case OPERATION_PLAN:
        case OPERATION_VALIDATE:
                r = (op->kind == OPERATION_PLAN ? control_plan : control_validate)(
                        c, a->uid, a->policy, a->source, on_job, op, &op->job);
                break;
        case OPERATION_WATCH:
                r = control_watch(c, a->ifname, a->usec ?: EVIDENCE_DURATION_DEFAULT_USEC, on_watch, op,
                                  &op->watch);
                if (r == -ENODEV)
                        op->result.ifname = a->ifname;
                break;
        default:
                return -EINVAL;
        }
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                fail(op, r);
                complete_later(op);
        }
        return 0;
}

/* ---- JSON ---- */

static json_object *name_json(const char *s) {
        _cleanup_(freep) char *buf = NULL;
        const char *safe = s ? utf8_safe(s, &buf) : NULL;
        return safe ? json_object_new_string(safe) : NULL;
}

static json_object *move_json(const OperationMove *m) {
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        if (m->netns)
                json_object_object_add(o, "netns", name_json(m->netns));
        json_object_object_add(o, "ifname", name_json(m->ifname));
        json_object_object_add(o, "from", control_sizes_json(&m->from, m->ipv4));
        json_object_object_add(o, "to", control_sizes_json(&m->to, m->ipv4));
        if (m->error < 0) {
                json_object_object_add(o, "errno", json_object_new_int(-m->error));
                json_object_object_add(o, "message", json_object_new_string(strerror(-m->error)));
                if (m->extack)
                        json_object_object_add(o, "extack", name_json(m->extack));
        }
        return o;
}

static json_object *moves_json(const OperationMove *m, size_t n) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < n; i++)
                json_object_array_add(a, move_json(&m[i]));
        return a;
}

static json_object *list_json(const OperationList *l) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < l->n; i++)
                json_object_array_add(a, name_json(l->items[i]));
        return a;
}

static void changes_add(json_object *o, const OperationResult *r) {
        json_object_object_add(o, "moved", moves_json(r->moved, r->n_moved));
        json_object_object_add(o, "refused", moves_json(r->refused, r->n_refused));
        json_object_object_add(o, "held", list_json(&r->held));
        json_object_object_add(o, "released", list_json(&r->released));
        json_object_object_add(o, "pending", list_json(&r->pending));
}

json_object *operation_changes_json(const OperationResult *r) {
        json_object *o = json_object_new_object();
        if (o)
                changes_add(o, r);
        return o;
}

static json_object *digest_json(uint64_t digest) {
        char buf[17];
        snprintf(buf, sizeof(buf), "%016llx", (unsigned long long) digest);
        return json_object_new_string(buf);
}

json_object *operation_reply_json(const OperationResult *r) {
        json_object *o;

        if (r->kind == OPERATION_WATCH || r->kind == OPERATION_READ || r->kind == OPERATION_PLAN)
                return NULL;
        o = json_object_new_object();
        if (!o)
                return NULL;
        switch (r->kind) {
        case OPERATION_VALIDATE:
                json_object_object_add(o, "valid", json_object_new_boolean(r->errors->n == 0));
                json_object_object_add(o, "errors", control_errors_json(r->errors));
                json_object_object_add(o, "warnings", control_warnings_json(r->warnings));
                return o;
        case OPERATION_RELOAD:
                json_object_object_add(o, "digest", digest_json(r->digest));
                break;
        case OPERATION_TRY:
                json_object_object_add(o, "digest", digest_json(r->digest));
                json_object_object_add(o, "target", json_object_new_string(r->target ?: ""));
                json_object_object_add(o, "deadline_usec", json_object_new_int64((int64_t) r->deadline_usec));
                break;
        case OPERATION_CONFIRM:
                json_object_object_add(o, "target", json_object_new_string(r->target ?: ""));
                break;
        default:
                break;
        }
        changes_add(o, r);
        return o;
}

json_object *operation_error_json(const OperationResult *r) {
        json_object *o = json_object_new_object();

        if (!o)
                return NULL;
        switch (r->error) {
        case OPERATION_NO_SUCH_DEVICE:
                json_object_object_add(o, "ifname", name_json(r->ifname ?: ""));
                break;
        case OPERATION_POLICY_INVALID:
                json_object_object_add(o, "errors", control_errors_json(r->errors));
                if (r->kind == OPERATION_RELOAD)
                        json_object_object_add(o, "warnings", control_warnings_json(r->warnings));
                break;
        case OPERATION_NOTHING_TO_DO:
                json_object_object_add(o, "ifname", r->ifname ? name_json(r->ifname) : NULL);
                break;
        case OPERATION_TRY_RUNNING:
                json_object_object_add(o, "file", json_object_new_string(r->try_file ?: ""));
                json_object_object_add(o, "deadline_usec", json_object_new_int64((int64_t) r->deadline_usec));
                break;
        case OPERATION_TARGET_NOT_READ:
                json_object_object_add(o, "target", json_object_new_string(r->target ?: ""));
                break;
        case OPERATION_BUSY:
                json_object_object_add(o, "max", json_object_new_int(WORKER_QUEUED_PER_UID_MAX));
                break;
        case OPERATION_INVALID_ARGUMENT:
                json_object_object_add(o, "parameter", json_object_new_string(r->parameter ?: ""));
                break;
        case OPERATION_FAILED:
                json_object_object_add(o, "errno", json_object_new_int(abs(r->errno_)));
                json_object_object_add(o, "message", json_object_new_string(
                                                             r->message ?: strerror(abs(r->errno_))));
                break;
        case OPERATION_NO_TRY:
        default:
                json_object_put(o);
                return NULL;
        }
        return o;
}

/* One "file:line:column: message" a line; then a refused reload's warnings. */
static char *errors_text(const PolicyErrors *errs, const PolicyErrors *warnings) {
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        if (!f)
                return NULL;
        for (size_t i = 0; i < errs->n; i++) {
                _cleanup_(freep) char *line = NULL;
                if (policy_error_format(&errs->items[i], &line) >= 0)
                        fprintf(f, "%s%s", i > 0 ? "\n" : "", line);
        }
        for (size_t i = 0; warnings && errs->n > 0 && i < warnings->n; i++) {
                _cleanup_(freep) char *line = NULL;
                if (policy_error_format(&warnings->items[i], &line) >= 0)
                        fprintf(f, "\n%s", line);
        }
        if (errs->n == 0)
                fputs("the policy has errors", f);
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
}

char *operation_error_message(const OperationResult *r) {
        _cleanup_(freep) char *buf = NULL;
        const char *name = r->ifname ? utf8_safe(r->ifname, &buf) : NULL;
        char *m = NULL;
        int k = 0;

        if (r->ifname && !name)
                return NULL;
        switch (r->error) {
        case OPERATION_NO_SUCH_DEVICE:
                k = asprintf(&m, "No device \"%s\"", name ?: "");
                break;
        case OPERATION_POLICY_INVALID:
                m = errors_text(r->errors, r->kind == OPERATION_RELOAD ? r->warnings : NULL);
                if (m && !utf8_safe(m, &buf)) {
                        free(m);
                        return NULL;
                }
                if (m && buf) {
                        free(m);
                        m = TAKE_PTR(buf);
                }
                return m;
        case OPERATION_NOTHING_TO_DO:
                k = name ? asprintf(&m, "Nothing to do for \"%s\" in its state", name) : asprintf(&m, "Nothing to do");
                break;
        case OPERATION_TRY_RUNNING:
                k = asprintf(&m, "A try runs: confirm or revert it first");
                break;
        case OPERATION_NO_TRY:
                k = asprintf(&m, "No try runs");
                break;
        case OPERATION_TARGET_NOT_READ:
                k = asprintf(&m, "bigtcpd reads no policy file there");
                break;
        case OPERATION_BUSY:
                k = asprintf(&m, "Too many Plan and Validate calls waiting (max %u), try again",
                             WORKER_QUEUED_PER_UID_MAX);
                break;
        case OPERATION_INVALID_ARGUMENT:
                k = streq_ptr(r->parameter, "timeout_usec") ? asprintf(&m, "timeout out of range (1s to 24h)")
                                                            : asprintf(&m, "%s: out of range", r->parameter ?: "?");
                break;
        case OPERATION_FAILED:
                k = asprintf(&m, "%s", r->message ?: strerror(abs(r->errno_)));
                break;
        default:
                k = asprintf(&m, "%s", strerror(abs(r->errno_)));
                break;
        }
        return k < 0 ? NULL : m;
}
