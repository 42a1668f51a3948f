/* dbus.c — the system bus connection: sd-bus driven from the libevent loop, reconnection, the
 * well-known name, and who sent a call: the check of calls only root may make, and the UID that
 * work done for a caller is counted against.
 *
 * Nothing here blocks the loop: the connection, its authentication and the name request are
 * asynchronous, and the caller's UID is asked of the bus asynchronously
 * (sd_bus_query_sender_creds() would make a synchronous round trip to dbus-daemon, which
 * attaches no credentials to messages). It is asked on a second connection that serves nothing:
 * its answers never wait behind the calls queued for the first, so the first may stop reading
 * while calls wait for their UID. */
#include <event2/event.h>
#include <poll.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <systemd/sd-bus.h>

#include "dbus.h"
#include "log.h"

#define UNIQUE_NAME_CACHED_MAX 32u /* longer unique names are asked for every time */

typedef struct Lookup Lookup;
typedef struct UidShare UidShare;

struct Dbus {
        struct event_base *base;
        char *name;
        const DbusOps *ops;
        void *userdata;
        sd_bus *bus; /* NULL while disconnected */
        sd_bus *ident; /* the second connection, for GetConnectionUnixUser(); with `bus` */
        sd_bus_slot *name_slot;
        sd_bus_slot *filter_slot;
        struct event *io;        /* the bus fd and sd-bus's own timeout */
        struct event *ident_io;  /* the same of `ident` */
        struct event *reconnect; /* timer while disconnected, when the socket cannot be watched */
        struct event *appear;    /* inotify: the bus socket's directory, while disconnected */
        int appear_fd;
        uint64_t backoff_usec;
        bool serving; /* the name is ours */
        bool ever_up; /* a connection was up once: a loss is worth a warning */
        bool logged_absent;
        /* who sent a call */
        TAILQ_HEAD(, Lookup) lookups; /* a UID asked of the bus, with the calls that wait for it */
        size_t n_waiting, waiting_bytes;
        TAILQ_HEAD(, DbusCall) running; /* identified, in progress */
        LIST_HEAD(, UidShare) shares;   /* of UIDs other than 0 with calls in progress */
        size_t unprivileged_calls, unprivileged_bytes;
        /* direct-mapped: a newer name takes its slot; made at the first name cached (36 KiB: a
         * host without a bus, or without a caller on it, keeps none) */
        struct SenderSlot *senders;
};

typedef struct SenderSlot {
        char name[UNIQUE_NAME_CACHED_MAX];
        uid_t uid;
} SenderSlot;

static void bus_lost(Dbus *b, int error);
static void on_bus_io(evutil_socket_t fd, short what, void *userdata);
static void on_ident_io(evutil_socket_t fd, short what, void *userdata);

/* ---- who sent a call ---- */

/* Every line a caller's call makes here, whoever calls: ten per ten seconds. */
static LogRateLimit call_log_rl = LOG_RATELIMIT_INIT(10 * USEC_PER_SEC, 10);
#define log_call(level, fmt, ...)                                                                  \
        do {                                                                                       \
                unsigned _suppressed;                                                              \
                if (log_ratelimit(&call_log_rl, &_suppressed))                                     \
                        log_full_errno(level, 0, "D-Bus: " fmt "%s", ##__VA_ARGS__,                \
                                       _suppressed ? " (more such lines not logged)" : "");        \
        } while (0)

/* What the calls of one UID other than 0 hold. */
struct UidShare {
        uid_t uid;
        size_t calls, bytes;
        LIST_ENTRY(UidShare) link;
};

/* One call, from its arrival until dbus_call_end(): first in its Lookup's list, waiting for the
 * UID, then in `running`. */
struct DbusCall {
        Dbus *owner;
        Lookup *lookup; /* while waiting for the UID */
        UidShare *share; /* while running, for a UID other than 0 */
        bool running;
        sd_bus_message *call;
        const char *method;
        bool root_only;
        size_t bytes;
        DbusIdentifiedFn run;
        void *userdata;
        void (*free_userdata)(void *userdata);
        TAILQ_ENTRY(DbusCall) link;
};

/* GetConnectionUnixUser() of one sender, and the calls that wait for its answer. */
struct Lookup {
        Dbus *owner;
        char *sender;
        sd_bus_slot *slot;
        unsigned attempts;
        TAILQ_HEAD(, DbusCall) calls;
        TAILQ_ENTRY(Lookup) link;
};

static size_t sender_slot(const char *sender) {
        return fnv1a32_string(sender, NULL) % DBUS_SENDERS_CACHED;
}

static bool sender_cached(const Dbus *b, const char *sender, uid_t *ret) {
        size_t i = sender_slot(sender);
        if (!b->senders || !streq_ptr(b->senders[i].name, sender))
                return false;
        *ret = b->senders[i].uid;
        return true;
}

static void sender_cache(Dbus *b, const char *sender, uid_t uid) {
        size_t i = sender_slot(sender), n = strlen(sender);
        if (n == 0 || n >= UNIQUE_NAME_CACHED_MAX)
                return;
        if (!b->senders)
                b->senders = calloc(DBUS_SENDERS_CACHED, sizeof(SenderSlot));
        if (!b->senders)
                return; /* asked of the bus again next time */
        memcpy(b->senders[i].name, sender, n + 1);
        b->senders[i].uid = uid;
}

static void kick_reading(Dbus *b) {
        if (b->bus)
                event_active(b->io, EV_TIMEOUT, 0);
}

void dbus_call_end(DbusCall *dc) {
        Dbus *b;

        if (!dc)
                return;
        b = dc->owner;
        if (dc->lookup) {
                TAILQ_REMOVE(&dc->lookup->calls, dc, link);
                b->n_waiting--;
                b->waiting_bytes -= dc->bytes;
                kick_reading(b); /* it may have stopped for the calls waiting */
        } else if (dc->running)
                TAILQ_REMOVE(&b->running, dc, link);
        if (dc->share) {
                dc->share->calls--;
                dc->share->bytes -= dc->bytes;
                b->unprivileged_calls--;
                b->unprivileged_bytes -= dc->bytes;
                if (dc->share->calls == 0) {
                        LIST_REMOVE(dc->share, link);
                        free(dc->share);
                }
        }
        if (dc->free_userdata)
                dc->free_userdata(dc->userdata);
        sd_bus_message_unref(dc->call);
        free(dc);
        kick_reading(b);
}

sd_bus_message *dbus_call_message(const DbusCall *dc) {
        return dc->call;
}

static UidShare *share_of(Dbus *b, uid_t uid) {
        UidShare *s;
        LIST_FOREACH(s, &b->shares, link)
                if (s->uid == uid)
                        return s;
        s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->uid = uid;
        LIST_INSERT_HEAD(&b->shares, s, link);
        return s;
}

/* The caller is known: refuse, or run the call (which answers it, now or later). */
static void call_start(DbusCall *dc, uid_t uid) {
        Dbus *b = dc->owner;
        const char *sender = sd_bus_message_get_sender(dc->call) ?: "?";
        int r;

        if (dc->root_only && uid != 0) {
                log_call(LOG_NOTICE, "%s() refused to %s (uid %u): root only", dc->method, sender, (unsigned) uid);
                r = sd_bus_reply_method_errorf(dc->call, SD_BUS_ERROR_ACCESS_DENIED, "%s() needs root", dc->method);
                goto refused;
        }
        if (uid != 0) {
                UidShare *s = share_of(b, uid);
                if (!s) {
                        r = sd_bus_reply_method_errorf(dc->call, SD_BUS_ERROR_NO_MEMORY, "Out of memory");
                        goto refused;
                }
                if (s->calls >= DBUS_CALLS_PER_UID_MAX || s->bytes + dc->bytes > DBUS_BYTES_PER_UID_MAX ||
                    b->unprivileged_calls >= DBUS_CALLS_UNPRIVILEGED_MAX ||
                    b->unprivileged_bytes + dc->bytes > DBUS_BYTES_UNPRIVILEGED_MAX) {
                        if (s->calls == 0) {
                                LIST_REMOVE(s, link);
                                free(s);
                        }
                        log_call(LOG_NOTICE, "%s() refused to %s (uid %u): too many calls in progress", dc->method,
                                 sender, (unsigned) uid);
                        r = sd_bus_reply_method_errorf(dc->call, SD_BUS_ERROR_LIMITS_EXCEEDED,
                                                       "Too many calls in progress (max %u, %u MiB for a user), "
                                                       "try again after an answer",
                                                       DBUS_CALLS_PER_UID_MAX, DBUS_BYTES_PER_UID_MAX >> 20);
                        goto refused;
                }
                s->calls++;
                s->bytes += dc->bytes;
                b->unprivileged_calls++;
                b->unprivileged_bytes += dc->bytes;
                dc->share = s;
        }
        dc->running = true;
        TAILQ_INSERT_TAIL(&b->running, dc, link);
        dc->run(dc, dc->call, uid, dc->userdata);
        return;
refused:
        if (r < 0)
                log_debug_errno(r, "D-Bus: failed to refuse %s(): %m, ignoring", dc->method);
        dbus_call_end(dc);
}

static void lookup_free(Lookup *lk) {
        DbusCall *dc;

        if (!lk)
                return;
        while ((dc = TAILQ_FIRST(&lk->calls)))
                dbus_call_end(dc);
        if (lk->owner)
                TAILQ_REMOVE(&lk->owner->lookups, lk, link);
        sd_bus_slot_unref(lk->slot);
        free(lk->sender);
        free(lk);
}

static int on_sender_uid(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error);

static int lookup_send(Lookup *lk) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        lk->slot = sd_bus_slot_unref(lk->slot);
        lk->attempts++;
        r = sd_bus_message_new_method_call(lk->owner->ident, &m, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                           "org.freedesktop.DBus", "GetConnectionUnixUser");
        if (r >= 0)
                r = sd_bus_message_append(m, "s", lk->sender);
        if (r >= 0)
                r = sd_bus_call_async(lk->owner->ident, &lk->slot, m, on_sender_uid, lk, DBUS_LOOKUP_TIMEOUT_USEC);
        return r;
}

static int on_sender_uid(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Lookup *lk = userdata;
        Dbus *b = lk->owner;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        uint32_t uid = UINT32_MAX;
        bool timeout = false;
        DbusCall *dc;
        int r = 0;

        if (!e)
                r = sd_bus_message_read(reply, "u", &uid);
        if (e && sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY)) {
                /* sd-bus answers NoReply both to a call that timed out and to every call when the
                 * connection closes: then the whole connection goes, and with it the calls
                 * waiting (bus_lost()) */
                if (sd_bus_is_open(b->ident) <= 0)
                        return 0;
                timeout = true;
                if (lk->attempts < DBUS_LOOKUP_ATTEMPTS) {
                        /* the bus is slow: ask again rather than refuse someone it did not name */
                        log_debug("D-Bus: no answer in time to who %s is, asking again", lk->sender);
                        r = lookup_send(lk);
                        if (r >= 0)
                                return 0;
                }
        }
        if (e && sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER)) {
                /* the caller is gone: no one to answer, nothing worth a line */
                dc = TAILQ_FIRST(&lk->calls);
                log_debug("D-Bus: %s left before it was known who called %s()", lk->sender, dc ? dc->method : "?");
                lookup_free(lk);
                return 0;
        }
        if (e || r < 0) {
                dc = TAILQ_FIRST(&lk->calls);
                log_call(LOG_WARNING, "failed to tell who called %s() (%s): %s", dc ? dc->method : "?", lk->sender,
                         e ? e->message : strerror(-r));
                while ((dc = TAILQ_FIRST(&lk->calls))) {
                        r = timeout ? sd_bus_reply_method_errorf(dc->call, SD_BUS_ERROR_TIMEOUT,
                                                                 "The bus did not say who called %s(), try again",
                                                                 dc->method)
                                    : sd_bus_reply_method_errorf(dc->call, SD_BUS_ERROR_ACCESS_DENIED,
                                                                 "Cannot identify the caller of %s()", dc->method);
                        if (r < 0)
                                log_debug_errno(r, "D-Bus: failed to answer %s(): %m, ignoring", dc->method);
                        dbus_call_end(dc);
                }
                lookup_free(lk);
                kick_reading(b);
                return 0;
        }
        sender_cache(b, lk->sender, (uid_t) uid);
        while ((dc = TAILQ_FIRST(&lk->calls))) {
                TAILQ_REMOVE(&lk->calls, dc, link);
                dc->lookup = NULL;
                b->n_waiting--;
                b->waiting_bytes -= dc->bytes;
                call_start(dc, (uid_t) uid);
        }
        lookup_free(lk);
        kick_reading(b);
        return 0;
}

static Lookup *lookup_of(Dbus *b, const char *sender) {
        Lookup *lk;
        TAILQ_FOREACH(lk, &b->lookups, link)
                if (streq_ptr(lk->sender, sender))
                        return lk;
        return NULL;
}

/* The calls waiting for their UID hold as much as they may: no more calls are read. */
static bool waiting_full(const Dbus *b) {
        return b->n_waiting >= DBUS_WAITING_MAX || b->waiting_bytes >= DBUS_WAITING_BYTES_MAX;
}

int dbus_call_identified(Dbus *b, sd_bus_message *call, const char *method, bool root_only, size_t bytes,
                         DbusIdentifiedFn run, void *userdata, void (*free_userdata)(void *userdata),
                         sd_bus_error *error) {
        const char *sender = sd_bus_message_get_sender(call);
        DbusCall *dc;
        Lookup *lk;
        uid_t uid;
        int r;

        if (!sender) {
                if (free_userdata)
                        free_userdata(userdata);
                return sd_bus_error_set(error, SD_BUS_ERROR_ACCESS_DENIED, "Caller without a bus name");
        }
        dc = calloc(1, sizeof(*dc));
        if (!dc) {
                if (free_userdata)
                        free_userdata(userdata);
                return -ENOMEM;
        }
        *dc = (DbusCall){.owner = b, .call = sd_bus_message_ref(call), .method = method, .root_only = root_only,
                         .bytes = bytes, .run = run, .userdata = userdata, .free_userdata = free_userdata};
        if (sender_cached(b, sender, &uid)) {
                call_start(dc, uid);
                return 1;
        }
        lk = lookup_of(b, sender);
        if (!lk) {
                lk = calloc(1, sizeof(*lk));
                if (!lk || !(lk->sender = strdup(sender))) {
                        free(lk);
                        dbus_call_end(dc);
                        return -ENOMEM;
                }
                lk->owner = b;
                TAILQ_INIT(&lk->calls);
                r = lookup_send(lk);
                if (r < 0) {
                        lk->owner = NULL;
                        lookup_free(lk);
                        dbus_call_end(dc);
                        return r;
                }
                TAILQ_INSERT_TAIL(&b->lookups, lk, link);
        }
        dc->lookup = lk;
        TAILQ_INSERT_TAIL(&lk->calls, dc, link);
        b->n_waiting++;
        b->waiting_bytes += bytes;
        return 1; /* answered later */
}

/* Calls that expect no reply cost nothing: dropped as they are read, before anything is done. */
static int on_message(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        if (sd_bus_message_is_method_call(m, NULL, NULL) > 0 && sd_bus_message_get_expect_reply(m) == 0) {
                log_debug("D-Bus: %s.%s() from %s expects no reply, dropped", sd_bus_message_get_interface(m) ?: "?",
                          sd_bus_message_get_member(m) ?: "?", sd_bus_message_get_sender(m) ?: "?");
                return 1;
        }
        return 0;
}

/* ---- the connection ---- */

/* What the main connection may do now. */
typedef enum Reading {
        READING,
        READING_WRITES_ONLY, /* sd-bus holds DBUS_WRITE_QUEUE_MAX replies: when the bus takes some */
        READING_STOPPED,     /* calls wait for their UID, or what is served is busy: until a kick */
} Reading;

static Reading reading(Dbus *b) {
        uint64_t queued = 0;

        if (waiting_full(b) || (b->ops->busy && b->ops->busy(b->userdata)))
                return READING_STOPPED;
        if (sd_bus_get_n_queued_write(b->bus, &queued) >= 0 && queued >= DBUS_WRITE_QUEUE_MAX)
                return READING_WRITES_ONLY;
        return READING;
}

/* Wait for what `bus` waits for: its events, cut to `allowed`, and its timeout unless it may not
 * read (sd-bus's timeout is 0 while it holds a message read, which is not to be processed then). */
static int arm(Dbus *b, sd_bus *bus, struct event *io, event_callback_fn fn, short allowed) {
        struct timeval tv, *timeout = NULL;
        uint64_t until, now;
        short what = 0;
        int fd, events, r;

        fd = sd_bus_get_fd(bus);
        if (fd < 0)
                return fd;
        events = sd_bus_get_events(bus);
        if (events < 0)
                return events;
        r = sd_bus_get_timeout(bus, &until);
        if (r < 0)
                return r;
        if (events & POLLIN)
                what |= EV_READ;
        if (events & POLLOUT)
                what |= EV_WRITE;
        what &= allowed;
        if (until != UINT64_MAX && (allowed & EV_READ)) {
                now = now_usec();
                until = until > now ? until - now : 0;
                tv.tv_sec = (time_t) (until / 1000000ull);
                tv.tv_usec = (suseconds_t) (until % 1000000ull);
                timeout = &tv;
        }
        event_del(io);
        if (event_assign(io, b->base, fd, what, fn, b) < 0)
                return -ENOMEM;
        if ((what || timeout) && event_add(io, timeout) < 0)
                return -ENOMEM;
        return 0;
}

static void rearm(Dbus *b) {
        Reading now = reading(b);
        int r;

        r = arm(b, b->bus, b->io, on_bus_io,
                now == READING ? EV_READ | EV_WRITE : now == READING_WRITES_ONLY ? EV_WRITE : 0);
        if (r >= 0)
                r = arm(b, b->ident, b->ident_io, on_ident_io, EV_READ | EV_WRITE);
        if (r < 0)
                bus_lost(b, r);
}

static void on_bus_io(evutil_socket_t fd, short what, void *userdata) {
        Dbus *b = userdata;
        uint64_t start = now_usec();
        Reading now;
        int r;

        if (!b->bus)
                return;
        /* Bounded in time too: a large message read costs sd-bus's validation of every byte (a
         * 30 MB string: ~0.1 s), and other connections — root's own among them — and the rest
         * of the loop get their turn before the next. What is left is read next turn: the socket
         * stays readable, or sd-bus's timeout is 0 while it holds a message. */
        for (unsigned i = 0; i < DBUS_MESSAGES_PER_WAKEUP && now_usec() - start < DBUS_WAKEUP_BUDGET_USEC; i++) {
                now = reading(b);
                /* Writing means processing, which reads one message too: while the queue is
                 * long, one per time the bus takes replies. */
                if (now == READING_STOPPED || (now == READING_WRITES_ONLY && (i > 0 || !(what & EV_WRITE))))
                        break;
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

static void on_ident_io(evutil_socket_t fd, short what, void *userdata) {
        Dbus *b = userdata;
        int r;

        if (!b->bus)
                return;
        for (unsigned i = 0; i < DBUS_MESSAGES_PER_WAKEUP; i++) {
                r = sd_bus_process(b->ident, NULL);
                if (r < 0) {
                        bus_lost(b, r);
                        return;
                }
                if (!b->bus)
                        return;
                if (r == 0)
                        break;
        }
        if (sd_bus_is_open(b->ident) <= 0) {
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
                log_warning("D-Bus: failed to own %s: %s; the D-Bus interface is off (is %s.conf installed in the "
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
        _cleanup_(sd_bus_close_unrefp) sd_bus *bus = NULL, *ident = NULL;
        int r;

        r = sd_bus_open_system_with_description(&bus, "bigtcpd");
        if (r < 0)
                return r;
        r = sd_bus_open_system_with_description(&ident, "bigtcpd-identify");
        if (r < 0)
                return r;
        r = sd_bus_add_filter(bus, &b->filter_slot, on_message, b);
        if (r < 0)
                return r;
        r = b->ops->attach(b->userdata, bus);
        if (r < 0) {
                b->filter_slot = sd_bus_slot_unref(b->filter_slot);
                return r;
        }
        r = sd_bus_request_name_async(bus, &b->name_slot, b->name, 0, on_name_reply, b);
        if (r < 0) {
                b->ops->detach(b->userdata);
                b->filter_slot = sd_bus_slot_unref(b->filter_slot);
                return r;
        }
        b->bus = TAKE_PTR(bus);
        b->ident = TAKE_PTR(ident);
        rearm(b);
        return 0;
}

/* Drop the connection and everything tied to it. Calls waiting for their caller's UID or in
 * progress go unanswered: their callers lose the bus too, or get a disconnect error from it. */
static void bus_disconnect(Dbus *b) {
        Lookup *lk;

        event_del(b->io);
        event_del(b->ident_io);
        while ((lk = TAILQ_FIRST(&b->lookups)))
                lookup_free(lk);
        while (!TAILQ_EMPTY(&b->running))
                dbus_call_end(TAILQ_FIRST(&b->running));
        b->ops->detach(b->userdata);
        b->name_slot = sd_bus_slot_unref(b->name_slot);
        b->filter_slot = sd_bus_slot_unref(b->filter_slot);
        b->bus = sd_bus_close_unref(b->bus);
        b->ident = sd_bus_close_unref(b->ident);
        b->serving = false;
        /* unique names are never reused on one bus; the next may be another bus */
        b->senders = mfree(b->senders);
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
        if (b->ever_up && b->serving && !b->ops->second)
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
        if (!b->logged_absent && !b->ever_up && !b->ops->second) {
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
        TAILQ_INIT(&b->lookups);
        TAILQ_INIT(&b->running);
        LIST_INIT(&b->shares);
        b->backoff_usec = DBUS_RECONNECT_MIN_USEC;
        b->name = strdup(name);
        b->io = event_new(base, -1, 0, on_bus_io, b);
        b->ident_io = event_new(base, -1, 0, on_ident_io, b);
        b->appear_fd = -1;
        b->reconnect = evtimer_new(base, on_reconnect_timer, b);
        if (!b->name || !b->io || !b->ident_io || !b->reconnect) {
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
        if (b->ident_io)
                event_free(b->ident_io);
        if (b->reconnect)
                event_free(b->reconnect);
        stop_watching(b);
        free(b->senders);
        free(b->name);
        free(b);
}

bool dbus_serving(const Dbus *b) {
        return b && b->serving;
}

void dbus_kick(Dbus *b) {
        kick_reading(b);
}
