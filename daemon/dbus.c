/* dbus.c — the system bus connection: sd-bus driven from the libevent loop, reconnection, the
 * well-known name, and who sent a call: the check of calls only root may make, and the UID that
 * work done for a caller is counted against.
 *
 * Nothing here blocks the loop: the connection, its authentication and the name request are
 * asynchronous, and the caller's UID is asked of the bus asynchronously
 * (sd_bus_query_sender_creds() would make a synchronous round trip to dbus-daemon, which
 * attaches no credentials to messages). */
#include <event2/event.h>
#include <poll.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <systemd/sd-bus.h>

#include "dbus.h"
#include "log.h"

typedef struct PendingCall PendingCall;

struct Dbus {
        struct event_base *base;
        char *name;
        const DbusOps *ops;
        void *userdata;
        sd_bus *bus; /* NULL while disconnected */
        sd_bus_slot *name_slot;
        struct event *io;        /* the bus fd and sd-bus's own timeout */
        struct event *reconnect; /* timer while disconnected, when the socket cannot be watched */
        struct event *appear;    /* inotify: the bus socket's directory, while disconnected */
        int appear_fd;
        uint64_t backoff_usec;
        bool serving; /* the name is ours */
        bool ever_up; /* a connection was up once: a loss is worth a warning */
        bool logged_absent;
        TAILQ_HEAD(, PendingCall) pending;
        size_t n_pending;
};

static void bus_lost(Dbus *b, int error);
static void on_bus_io(evutil_socket_t fd, short what, void *userdata);

/* ---- who sent a call ---- */

/* A call waiting for the bus to say who sent it. Owned by Dbus; freed when the
 * answer comes or the connection goes. */
typedef struct PendingCall PendingCall;
struct PendingCall {
        Dbus *owner;
        sd_bus_message *call;
        sd_bus_slot *slot; /* the GetConnectionUnixUser() call */
        char *method;
        bool root_only;
        DbusIdentifiedFn run;
        void *userdata;
        void (*free_userdata)(void *userdata);
        TAILQ_ENTRY(PendingCall) link;
};

static void pending_call_free(PendingCall *p) {
        if (!p)
                return;
        if (p->owner) {
                TAILQ_REMOVE(&p->owner->pending, p, link);
                p->owner->n_pending--;
        }
        if (p->free_userdata)
                p->free_userdata(p->userdata);
        sd_bus_slot_unref(p->slot);
        sd_bus_message_unref(p->call);
        free(p->method);
        free(p);
}

static int on_sender_uid(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        PendingCall *p = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        uint32_t uid = UINT32_MAX;
        int r = 0;

        if (!e)
                r = sd_bus_message_read(reply, "u", &uid);
        if (e || r < 0) {
                /* NoReply: the connection went away (sd-bus answers every pending call so). */
                log_full_errno(e && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) ? LOG_DEBUG : LOG_WARNING, 0,
                               "D-Bus: cannot tell who called %s(): %s", p->method, e ? e->message : strerror(-r));
                (void) sd_bus_reply_method_errorf(p->call, SD_BUS_ERROR_ACCESS_DENIED,
                                                  "Cannot identify the caller of %s()", p->method);
        } else if (p->root_only && uid != 0) {
                static LogRateLimit rl = LOG_RATELIMIT_INIT(10 * USEC_PER_SEC, 10);
                unsigned suppressed;
                if (log_ratelimit(&rl, &suppressed))
                        log_notice("D-Bus: %s() refused to %s (uid %u): root only%s", p->method,
                                   sd_bus_message_get_sender(p->call) ?: "?", uid,
                                   suppressed ? " (more refusals not logged)" : "");
                (void) sd_bus_reply_method_errorf(p->call, SD_BUS_ERROR_ACCESS_DENIED, "%s() needs root", p->method);
        } else
                p->run(p->call, (uid_t) uid, p->userdata);
        pending_call_free(p);
        return 0;
}

static size_t pending_of(const Dbus *b, const char *sender) {
        const PendingCall *p;
        size_t n = 0;
        TAILQ_FOREACH(p, &b->pending, link)
        n += streq_ptr(sd_bus_message_get_sender(p->call), sender);
        return n;
}

/* Ask the bus for the caller's UID (the effective UID it connected with, from SO_PEERCRED) and
 * answer once it is known. A unique name is never reused, so an answer about it is about the
 * caller even when the caller is gone by then. */
int dbus_call_identified(Dbus *b, sd_bus_message *call, const char *method, bool root_only, DbusIdentifiedFn run,
                         void *userdata, void (*free_userdata)(void *userdata), sd_bus_error *error) {
        const char *sender = sd_bus_message_get_sender(call);
        PendingCall *p;
        int r;

        if (!sender || b->n_pending >= DBUS_PENDING_CALLS_MAX || pending_of(b, sender) >= DBUS_PENDING_PER_SENDER_MAX) {
                if (free_userdata)
                        free_userdata(userdata);
                if (!sender)
                        return sd_bus_error_set(error, SD_BUS_ERROR_ACCESS_DENIED, "Caller without a bus name");
                return sd_bus_error_set(error, SD_BUS_ERROR_LIMITS_EXCEEDED, "Too many calls in progress, try again");
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                if (free_userdata)
                        free_userdata(userdata);
                return -ENOMEM;
        }
        *p = (PendingCall){.call = sd_bus_message_ref(call), .root_only = root_only, .run = run, .userdata = userdata,
                           .free_userdata = free_userdata, .method = strdup(method)};
        if (!p->method) {
                pending_call_free(p);
                return -ENOMEM;
        }
        r = sd_bus_call_method_async(b->bus, &p->slot, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetConnectionUnixUser", on_sender_uid, p, "s", sender);
        if (r < 0) {
                pending_call_free(p);
                return r;
        }
        p->owner = b;
        TAILQ_INSERT_TAIL(&b->pending, p, link);
        b->n_pending++;
        return 1; /* answered later */
}

/* ---- the connection ---- */

static void rearm(Dbus *b) {
        struct timeval tv, *timeout = NULL;
        uint64_t until, now;
        short what = 0;
        int fd, events, r;

        fd = sd_bus_get_fd(b->bus);
        if (fd < 0) {
                bus_lost(b, fd);
                return;
        }
        events = sd_bus_get_events(b->bus);
        if (events < 0) {
                bus_lost(b, events);
                return;
        }
        r = sd_bus_get_timeout(b->bus, &until);
        if (r < 0) {
                bus_lost(b, r);
                return;
        }
        if (events & POLLIN)
                what |= EV_READ;
        if (events & POLLOUT)
                what |= EV_WRITE;
        if (until != UINT64_MAX) {
                now = now_usec();
                until = until > now ? until - now : 0;
                tv.tv_sec = (time_t) (until / 1000000ull);
                tv.tv_usec = (suseconds_t) (until % 1000000ull);
                timeout = &tv;
        }
        event_del(b->io);
        if (event_assign(b->io, b->base, fd, what, on_bus_io, b) < 0 ||
            event_add(b->io, timeout) < 0)
                bus_lost(b, -ENOMEM);
}

static void on_bus_io(evutil_socket_t fd, short what, void *userdata) {
        Dbus *b = userdata;
        int r;

        if (!b->bus)
                return;
        for (unsigned i = 0; i < DBUS_MESSAGES_PER_WAKEUP; i++) {
                r = sd_bus_process(b->bus, NULL);
                if (r < 0) {
                        bus_lost(b, r);
                        return;
                }
                if (!b->bus) /* a handler lost the connection */
                        return;
                if (r == 0)
                        break;
        }
        /* A broken connection turns into a local Disconnected message, not an error. */
        if (sd_bus_is_open(b->bus) <= 0) {
                bus_lost(b, -ECONNRESET);
                return;
        }
        rearm(b);
}

static int on_name_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Dbus *b = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        uint32_t result = 0;
        int r = 0;

        b->name_slot = sd_bus_slot_unref(b->name_slot);
        if (!e)
                r = sd_bus_message_read(reply, "u", &result);
        if (e && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY)) {
                log_debug("D-Bus: no answer to RequestName(): %s", e->message);
                return 0;
        }
        if (e || r < 0 || (result != 1 && result != 4)) {
                /* 1: primary owner, 4: already the owner; 3: someone else has it. */
                log_warning("D-Bus: cannot own %s: %s; the D-Bus interface is off (is %s.conf installed in the "
                            "bus's system.d?)",
                            b->name,
                            e ? e->message : r < 0 ? strerror(-r) : result == 3 ? "another process has it" : "refused",
                            b->name);
                return 0;
        }
        b->serving = true;
        b->ever_up = true;
        b->backoff_usec = DBUS_RECONNECT_MIN_USEC;
        log_info("D-Bus: serving %s on the system bus", b->name);
        return 0;
}

static int bus_connect(Dbus *b) {
        _cleanup_(sd_bus_close_unrefp) sd_bus *bus = NULL;
        int r;

        r = sd_bus_open_system_with_description(&bus, "bigtcpd");
        if (r < 0)
                return r;
        r = b->ops->attach(b->userdata, bus);
        if (r < 0)
                return r;
        r = sd_bus_request_name_async(bus, &b->name_slot, b->name, 0, on_name_reply, b);
        if (r < 0) {
                b->ops->detach(b->userdata);
                return r;
        }
        b->bus = TAKE_PTR(bus);
        rearm(b);
        return 0;
}

/* Drop the connection and everything tied to it. Calls waiting for their caller's UID go
 * unanswered: their callers lose the bus too, or get a disconnect error from it. */
static void bus_disconnect(Dbus *b) {
        PendingCall *p;

        event_del(b->io);
        while ((p = TAILQ_FIRST(&b->pending)))
                pending_call_free(p);
        b->ops->detach(b->userdata);
        b->name_slot = sd_bus_slot_unref(b->name_slot);
        b->bus = sd_bus_close_unref(b->bus);
        b->serving = false;
}

/* The system bus socket's path, from $DBUS_SYSTEM_BUS_ADDRESS ("unix:path=…") or the default. */
static char *bus_socket_path(void) {
        const char *a = getenv("DBUS_SYSTEM_BUS_ADDRESS");
        const char *p;

        if (!a)
                return strdup("/run/dbus/system_bus_socket");
        p = strstr(a, "unix:path=");
        if (!p)
                return NULL; /* abstract sockets, tcp, …: nothing to watch */
        p += strlen("unix:path=");
        return strndup(p, strcspn(p, ",;"));
}

static void stop_watching(Dbus *b) {
        if (b->appear) {
                event_free(b->appear);
                b->appear = NULL;
        }
        closep(&b->appear_fd);
        b->appear_fd = -1;
}

static void try_connect(Dbus *b);
static bool watch_for_socket(Dbus *b);

static void on_appear(evutil_socket_t fd, short what, void *userdata) {
        Dbus *b = userdata;
        uint8_t buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

        while (read(fd, buf, sizeof(buf)) > 0)
                ;
        /* Something was created on the way to the socket: look again (connect, or watch the
         * next directory down). */
        stop_watching(b);
        _cleanup_(freep) char *path = bus_socket_path();
        if (path && access(path, F_OK) == 0)
                try_connect(b);
        else if (!watch_for_socket(b))
                try_connect(b);
}

/* Wait for the bus socket without waking up: an inotify watch on the deepest existing
 * directory of its path. False when that is not possible (then a timer retries). */
static bool watch_for_socket(Dbus *b) {
        _cleanup_(freep) char *path = bus_socket_path();
        struct stat st;

        if (!path || path[0] != '/')
                return false;
        b->appear_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (b->appear_fd < 0)
                return false;
        for (char *slash = strrchr(path, '/'); slash; slash = strrchr(path, '/')) {
                if (slash == path)
                        slash[1] = '\0';
                else
                        *slash = '\0';
                if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                        if (inotify_add_watch(b->appear_fd, path, IN_CREATE | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR) < 0)
                                break;
                        b->appear = event_new(b->base, b->appear_fd, EV_READ | EV_PERSIST, on_appear, b);
                        if (!b->appear || event_add(b->appear, NULL) < 0)
                                break;
                        return true;
                }
                if (slash == path)
                        break;
        }
        stop_watching(b);
        return false;
}

static void schedule_reconnect(Dbus *b) {
        _cleanup_(freep) char *path = bus_socket_path();

        /* No socket yet: wait for it to appear. A socket that refuses us (the broker is
         * stopping or starting): retry with a growing delay. */
        if (path && access(path, F_OK) < 0 && errno == ENOENT && watch_for_socket(b))
                return;
        struct timeval tv = {
                .tv_sec = (time_t) (b->backoff_usec / 1000000ull),
                .tv_usec = (suseconds_t) (b->backoff_usec % 1000000ull),
        };
        (void) evtimer_add(b->reconnect, &tv);
        b->backoff_usec = b->backoff_usec * 2 > DBUS_RECONNECT_MAX_USEC ? DBUS_RECONNECT_MAX_USEC : b->backoff_usec * 2;
}

static void bus_lost(Dbus *b, int error) {
        if (!b->bus)
                return;
        if (b->ever_up && b->serving)
                log_warning_errno(error, "D-Bus: lost the system bus: %m; reconnecting in the background");
        else
                log_debug_errno(error, "D-Bus: connection failed: %m");
        bus_disconnect(b);
        schedule_reconnect(b);
}

static void try_connect(Dbus *b) {
        stop_watching(b);
        int r = bus_connect(b);
        if (r >= 0)
                return;
        if (!b->logged_absent && !b->ever_up) {
                /* Said once: a host without a system bus is normal; varlink is the interface. */
                log_full_errno(LOG_NOTICE, r,
                               "D-Bus: no system bus (%m); running on varlink alone, connecting when one appears");
                b->logged_absent = true;
        } else
                log_debug_errno(r, "D-Bus: still no system bus: %m");
        schedule_reconnect(b);
}

static void on_reconnect_timer(evutil_socket_t fd, short what, void *userdata) {
        try_connect(userdata);
}

int dbus_new(struct event_base *base, const char *name, const DbusOps *ops, void *userdata, Dbus **ret) {
        Dbus *b = calloc(1, sizeof(*b));

        if (!b)
                return -ENOMEM;
        b->base = base;
        b->ops = ops;
        b->userdata = userdata;
        TAILQ_INIT(&b->pending);
        b->backoff_usec = DBUS_RECONNECT_MIN_USEC;
        b->name = strdup(name);
        b->io = event_new(base, -1, 0, on_bus_io, b);
        b->appear_fd = -1;
        b->reconnect = evtimer_new(base, on_reconnect_timer, b);
        if (!b->name || !b->io || !b->reconnect) {
                dbus_free(b);
                return -ENOMEM;
        }
        try_connect(b);
        *ret = b;
        return 0;
}

void dbus_free(Dbus *b) {
        if (!b)
                return;
        if (b->bus)
                bus_disconnect(b);
        if (b->io)
                event_free(b->io);
        if (b->reconnect)
                event_free(b->reconnect);
        stop_watching(b);
        free(b->name);
        free(b);
}

bool dbus_serving(const Dbus *b) {
        return b && b->serving;
}

void dbus_kick(Dbus *b) {
        event_active(b->io, EV_TIMEOUT, 0);
}
