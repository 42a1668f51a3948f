/* operation.h — what a transport (varlink, D-Bus) asks of the daemon, as one asynchronous object:
 * an Operation is made from a kind and its arguments, started, and completes once, from the
 * loop, with its result (OperationResult: which devices moved, from which sizes to which, which
 * are held or released now, which writes or devices were refused and why; and what the kind
 * answers besides) or an error of one table (operation_error_*), which both transports encode
 * under their own interface's names. Freeing an operation that has not completed cancels it:
 * that is what a transport does when its caller goes away. Transports keep no pending-call
 * state of their own: the operation is the call's, freed with it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "control.h"

typedef enum OperationKind {
        OPERATION_RELOAD,
        OPERATION_TRY,
        OPERATION_CONFIRM,
        OPERATION_REVERT,
        OPERATION_ROLLBACK,
        OPERATION_RETRY,
        OPERATION_WATCH,
        OPERATION_READ, /* the kernel read before the table answers (ListDevices, GetDevice) */
        OPERATION_PLAN,
        OPERATION_VALIDATE,
        _OPERATION_KIND_MAX,
        _OPERATION_KIND_INVALID = -EINVAL,
} OperationKind;

const char *operation_kind_to_string(OperationKind k); /* "Reload", … as the methods are named */

/* The arguments, checked by the transport for size and form; strings are the caller's, not
 * copied: they stay valid until the operation is freed (a caller's text is held once, in the
 * call that brought it). */
typedef struct OperationArgs {
        const char *ifname;   /* Rollback, Retry, Read (NULL: every device); Watch */
        const char *policy;   /* Try, Validate; Plan (NULL: the loaded one) */
        size_t policy_size;   /* Try */
        const char *source;   /* Plan, Validate: the name in errors; Try: its file */
        const char *target;   /* Try (NULL: the main policy file) */
        uint64_t usec;        /* Try's timeout (0: the default), Watch's duration (0: the default) */
        uid_t uid;            /* Plan, Validate: whose worker slots */
        /* what keeps the strings valid (a reference on the call's parameters), given up by
         * operation_free() (may be NULL) */
        void *keep;
        void (*keep_free)(void *keep);
} OperationArgs;

/* The errors, one table for both transports. */
typedef enum OperationError {
        OPERATION_OK,
        OPERATION_NO_SUCH_DEVICE,
        OPERATION_POLICY_INVALID, /* errors (and warnings) in the result */
        OPERATION_NOTHING_TO_DO,
        OPERATION_TRY_RUNNING,    /* try_file, deadline_usec in the result */
        OPERATION_NO_TRY,
        OPERATION_TARGET_NOT_READ,
        OPERATION_BUSY,           /* too many Plan and Validate of this caller queued */
        OPERATION_INVALID_ARGUMENT, /* parameter in the result */
        OPERATION_FAILED,         /* errno, and message, in the result */
        _OPERATION_ERROR_MAX,
        _OPERATION_ERROR_INVALID = -EINVAL,
} OperationError;

/* The error's names: "io.bigtcpd.Manager.NoSuchDevice" (varlink) and
 * "io.bigtcpd1.Manager.NoSuchDevice" (D-Bus), or a protocol's own where it has one
 * (org.varlink.service.InvalidParameter, org.freedesktop.DBus.Error.InvalidArgs, ….LimitsExceeded). */
const char *operation_error_varlink(OperationError e);
const char *operation_error_dbus(OperationError e);

/* A device an operation moved, or whose write was refused. */
typedef struct OperationMove {
        char *device; /* control_device_name(): "IFNAME", or "NETNS/IFNAME" */
        char *netns;  /* NULL: bigtcpd's own namespace */
        char *ifname;
        Sizes from, to;
        bool ipv4;
        int error;    /* refused: -errno (the kernel's, or -ENODEV: the device went away) */
        char *extack; /* the kernel's words for a refusal, if any */
} OperationMove;

typedef struct OperationList {
        char **items; /* control_device_name()s */
        size_t n;
} OperationList;

typedef struct OperationResult {
        OperationKind kind;
        OperationError error;
        int errno_;            /* OPERATION_FAILED, and the -errno behind any error */
        const char *parameter; /* OPERATION_INVALID_ARGUMENT */
        const char *message;   /* OPERATION_FAILED: in words, when strerror() does not say it */
        const PolicyErrors *errors, *warnings; /* Plan, Validate, Reload, Try (PolicyInvalid; Validate always) */
        /* what changed (Reload, Try, Confirm, Revert, Rollback, Retry): each device's writes
         * since the operation began, merged (the first write's from, the last one's to) */
        OperationMove *moved;   /* written, answered by the kernel */
        size_t n_moved;
        OperationMove *refused; /* refused by the kernel, or the device went away */
        size_t n_refused;
        OperationList held;     /* rolled back and held (Rollback, and a guard meanwhile) */
        OperationList released; /* Retry: no longer held or failed */
        OperationList pending;  /* writes still on their way when the operation stopped waiting */
        /* Reload, Try, Confirm: the digest of the policy in force */
        uint64_t digest;
        /* Try (and TryRunning): the file and where it goes, its deadline (CLOCK_REALTIME µs);
         * Confirm: where it was installed */
        const char *try_file, *target;
        uint64_t deadline_usec;
        /* Plan: its reply object as JSON text (not NUL-terminated) */
        const char *plan;
        size_t plan_size;
        /* Watch, and Read of one device: the device (valid during the callback) */
        const Device *device;
        const char *ifname; /* NoSuchDevice, NothingToDo: the name asked for (NULL: every device) */
} OperationResult;

/* How long an operation that changes sizes waits for the kernel to answer its writes; writes
 * still on their way then are listed as pending (Monitor tells how they end). */
#define OPERATION_WRITES_WAIT_USEC (5 * USEC_PER_SEC)

typedef struct Operation Operation;
/* Called once. `r` is valid during the call only; the operation may be freed from inside. */
typedef void (*OperationFn)(Operation *op, const OperationResult *r, void *userdata);

/* Make an operation (nothing runs yet); -ENOMEM. */
int operation_new(Control *c, OperationKind kind, const OperationArgs *args, Operation **ret);
/* Run it: `fn` is called once, from the loop, never from inside this call. Errors of the kind's
 * own (an unknown device, a refused policy) come through `fn` too; < 0 only when it cannot
 * start at all (out of memory), then `fn` is never called. */
int operation_start(Operation *op, OperationFn fn, void *userdata);
/* Cancels it when it has not completed (its callback is never called then). */
void operation_free(Operation *op);
DEFINE_TRIVIAL_CLEANUP_FUNC(Operation *, operation_free);
static inline void operation_freep_void(void *op) {
        operation_free(op);
}
OperationKind operation_kind(const Operation *op);
Control *operation_control(const Operation *op);
/* Plan, Validate: the caller, once known (D-Bus asks the bus first). */
void operation_set_uid(Operation *op, uid_t uid);
const OperationArgs *operation_args(const Operation *op);

/* The part of a result that says what changed, as JSON (the Change fields of
 * io.bigtcpd.Manager.varlink): {"moved": [...], "refused": [...], "held": [...], "released":
 * [...], "pending": [...]}. */
json_object *operation_changes_json(const OperationResult *r);
/* The result's own fields, as varlink's reply parameters of its method (a Watch or Read reply is
 * the transport's: NULL). */
json_object *operation_reply_json(const OperationResult *r);
/* An error's parameters as varlink sends them. */
json_object *operation_error_json(const OperationResult *r);
/* An error in words (D-Bus' error message). NULL when out of memory. */
char *operation_error_message(const OperationResult *r);

/* Reads of the kernel (OPERATION_READ) in flight, of every transport. */
unsigned operation_reads_in_flight(void);
