/* manager-notify.c — sd_notify as a watcher of the daemon's events (the namespace set's), and the watchdog. */
#include <linux/sockios.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "device-lifecycle.h"
#include "log.h"
#include "manager-notify.h"

struct Notify {
        struct event_base *base;
        NetnsSet *set;
        const Reloader *reloader;
        unsigned watch_id;
        struct event *watchdog_timer; /* only when WatchdogSec= is set */
        struct event *status_timer;
        char *status_sent; /* the STATUS= text last sent */
        int fd;            /* connected to $NOTIFY_SOCKET, non-blocking; -1 */
        struct event *writable; /* while `queued` waits for room in the receiver's queue */
        char *queued;      /* READY=1, RELOADING=1, STOPPING=1 not sent yet: the queue was full */
        bool ready_sent;
        bool dropping;     /* a WATCHDOG=1 was dropped, and said so; until one goes again */
};

char *notify_status_text(const NetnsSet *s, PolicySource source) {
        static const struct {
                DeviceState state;
                const char *what;
        } parts[] = {
                {DEVICE_PROBATION, "in probation"}, {DEVICE_PENDING, "pending"},
                {DEVICE_ROLLED_BACK, "rolled back"}, {DEVICE_FAILED, "failed"},
                {DEVICE_UNSUPPORTED, "unsupported"},
        };
        unsigned n[_DEVICE_STATE_MAX] = {};
        char *text = NULL;
        size_t size = 0, total = 0;
        FILE *f;

        for (size_t i = 0; i < netns_set_all_count(s); i++) {
                const Engine *e = netns_set_all_at(s, i)->engine;
                total += e->devices.n_devices;
                lifecycle_count_states(e, n);
        }
        f = open_memstream(&text, &size);
        if (!f)
                return NULL;
        fprintf(f, "managing %zu of %zu devices", total - n[DEVICE_UNMANAGED], total);
        for (size_t i = 0; i < ELEMENTSOF(parts); i++)
                if (n[parts[i].state] > 0)
                        fprintf(f, ", %u %s", n[parts[i].state], parts[i].what);
        if (source == POLICY_SOURCE_RECORDED)
                fputs("; the policy files have errors: the last policy that ran runs on", f);
        else if (source == POLICY_SOURCE_NONE)
                fputs("; the policy files have errors: no policy runs", f);
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
}

/* Every notification goes out on a socket of the daemon's own, connected to $NOTIFY_SOCKET and
 * non-blocking: sd_notify() blocks while the receiver's queue is full (net.unix.max_dgram_qlen
 * datagrams, 10 by default), and a service manager that stops reading would freeze the loop.
 * -ENOTCONN: no service manager, or one we cannot reach (nothing to say). */
static int notify_socket(Notify *n) {
        const char *path = getenv("NOTIFY_SOCKET");
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t len = path ? strlen(path) : 0;

        if (n && n->fd >= 0)
                return n->fd;
        if (len < 2 || (path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path))
                return -ENOTCONN;
        memcpy(sa.sun_path, path, len);
        if (path[0] == '@')
                sa.sun_path[0] = '\0';
        _cleanup_(closep) int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *) &sa, (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len)) < 0)
                return -ENOTCONN;
        if (n)
                n->fd = fd;
        return TAKE_FD(fd);
}

/* 0: sent (or nowhere to send it), -EAGAIN: the receiver's queue is full. */
static int send_now(int fd, const char *msg) {
        if (send(fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
                return 0;
        return errno == EAGAIN ? -EAGAIN : 0;
}

/* What must reach the service manager (READY=1, RELOADING=1, STOPPING=1) and found its queue
 * full waits, in order, until the socket is writable again (a connected datagram socket is
 * writable once its peer's queue has room). */
#define QUEUED_MAX 4096u

static void on_writable(evutil_socket_t fd, short what, void *userdata) {
        Notify *n = userdata;

        if (!n->queued)
                return;
        if (send_now(n->fd, n->queued) == -EAGAIN) {
                (void) event_add(n->writable, NULL);
                return;
        }
        n->queued = mfree(n->queued);
        log_info("notify: the service manager reads its notifications again; what waited is sent");
}

static void send_or_queue(Notify *n, const char *msg) {
        int fd = notify_socket(n);

        if (fd < 0)
                return;
        if (!n->queued && send_now(fd, msg) != -EAGAIN)
                return;
        if (!n->writable && !(n->writable = event_new(n->base, fd, EV_WRITE, on_writable, n))) {
                log_warning("notify: no memory to wait for room: dropped %s", msg);
                return;
        }
        size_t have = n->queued ? strlen(n->queued) : 0;
        if (have + strlen(msg) + 1 > QUEUED_MAX || (n->queued ? strextendf(&n->queued, "\n%s", msg) : strextendf(&n->queued, "%s", msg)) < 0) {
                log_warning("notify: the service manager does not read its notifications; dropped %s", msg);
                return;
        }
        if (have == 0)
                log_warning("notify: the service manager does not read its notifications; %s waits until it does",
                            msg);
        (void) event_add(n->writable, NULL);
}

/* A STATUS= update must not fill the receiver's queue either (what waits behind it would wait
 * longer): it goes only when the previous one has been read (SIOCOUTQ: the kernel charges an
 * unread datagram to its sender); otherwise it waits. */
static int send_status_only(Notify *n, const char *text) {
        _cleanup_(freep) char *msg = NULL;
        int unread = 0, fd = notify_socket(n);

        if (fd < 0)
                return 0;
        if (n->queued || ioctl(fd, SIOCOUTQ, &unread) < 0 || unread > 0)
                return -EAGAIN;
        if (asprintf(&msg, "STATUS=%s", text) < 0)
                return -ENOMEM;
        return send_now(fd, msg);
}

static void schedule_status(Notify *n, unsigned usec) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = (suseconds_t) usec};
        if (!evtimer_pending(n->status_timer, NULL))
                (void) evtimer_add(n->status_timer, &tv);
}

/* With a prefix (READY=1) always sent; alone only when the text changed. */
static void send_status(Notify *n, const char *prefix) {
        char *text = notify_status_text(n->set, reloader_source(n->reloader));

        if (!text || (!prefix && streq_ptr(text, n->status_sent))) {
                free(text);
                return;
        }
        if (prefix) {
                _cleanup_(freep) char *msg = NULL;
                if (asprintf(&msg, "%sSTATUS=%s", prefix, text) < 0) {
                        free(text);
                        return;
                }
                send_or_queue(n, msg);
        } else if (send_status_only(n, text) == -EAGAIN) {
                /* The last update is still unread: say it later, once. */
                free(text);
                schedule_status(n, 1000000 - 1);
                return;
        }
        free(n->status_sent);
        n->status_sent = text;
}

static void on_status_timer(evutil_socket_t fd, short what, void *userdata) {
        send_status(userdata, NULL);
}

static size_t count_devices(const NetnsSet *s) {
        size_t total = 0;
        for (size_t i = 0; i < netns_set_all_count(s); i++)
                total += netns_set_all_at(s, i)->engine->devices.n_devices;
        return total;
}

static void on_event(const Event *e, void *userdata) {
        Notify *n = userdata;

        switch (e->type) {
        case EVENT_SETTLED:
                if (!n->ready_sent)
                        log_info("initial reconcile done: %zu %s", count_devices(n->set),
                                 PLURAL(count_devices(n->set), "device", "devices"));
                n->ready_sent = true;
                send_status(n, "READY=1\n");
                return;
        case EVENT_RELOADING: {
                char msg[64];
                snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long) now_usec());
                send_or_queue(n, msg);
                return;
        }
        case EVENT_ADDED:
        case EVENT_REMOVED:
        case EVENT_STATE:
        case EVENT_WRITE:
        case EVENT_ROLLBACK:
        case EVENT_RELOAD:
        case EVENT_ROLLOUT:
        case EVENT_TRY:
        case EVENT_EVIDENCE:
        case EVENT_NETNS_PROBLEM:
                /* the counts may have changed: look again soon, once for a burst */
                if (n->ready_sent)
                        schedule_status(n, 250000);
                return;
        case EVENT_AUTO: /* STATUS= counts states, not searches */
                return;
        case _EVENT_TYPE_MAX:
        case _EVENT_TYPE_INVALID:
                break;
        }
}

/* A WATCHDOG=1 that finds the queue full is dropped (a late one says nothing), and said once, not
 * at every tick; the next that goes says so. */
static void on_watchdog(evutil_socket_t fd, short what, void *userdata) {
        Notify *n = userdata;
        int s = notify_socket(n);

        if (s < 0)
                return;
        if (send_now(s, "WATCHDOG=1") == -EAGAIN) {
                if (!n->dropping)
                        log_warning("notify: the service manager does not read its notifications: WATCHDOG=1 "
                                    "dropped (said once, until one goes again)");
                n->dropping = true;
                return;
        }
        if (n->dropping)
                log_info("notify: WATCHDOG=1 goes again");
        n->dropping = false;
}

/* WATCHDOG=1 from a loop timer at half the interval systemd asks for: a stuck loop misses it. */
static int start_watchdog(struct event_base *base, Notify *n) {
        uint64_t usec = 0;
        struct timeval tv;

        if (sd_watchdog_enabled(false, &usec) <= 0 || usec == 0)
                return 0;
        usec /= 2;
        tv.tv_sec = (time_t) (usec / USEC_PER_SEC);
        tv.tv_usec = (suseconds_t) (usec % USEC_PER_SEC);
        n->watchdog_timer = event_new(base, -1, EV_PERSIST, on_watchdog, n);
        if (!n->watchdog_timer || event_add(n->watchdog_timer, &tv) < 0)
                return -ENOMEM;
        log_debug("watchdog: WATCHDOG=1 every %llu ms", (unsigned long long) (usec / USEC_PER_MSEC));
        return 0;
}

int notify_new(struct event_base *base, NetnsSet *set, const Reloader *reloader, Notify **ret) {
        Notify *n = calloc(1, sizeof(*n));
        int r;

        if (!n)
                return -ENOMEM;
        n->base = base;
        n->set = set;
        n->reloader = reloader;
        n->fd = -1;
        *ret = n;
        r = start_watchdog(base, n);
        if (r < 0)
                return r;
        if (!getenv("NOTIFY_SOCKET"))
                return 0;
        n->status_timer = evtimer_new(base, on_status_timer, n);
        n->watch_id = n->status_timer ? event_watch_add(netns_set_events(set), on_event, n) : 0;
        return n->watch_id ? 0 : -ENOMEM;
}

void notify_free(Notify *n) {
        if (!n)
                return;
        if (n->watch_id)
                event_watch_remove(netns_set_events(n->set), n->watch_id);
        if (n->watchdog_timer)
                event_free(n->watchdog_timer);
        if (n->status_timer)
                event_free(n->status_timer);
        if (n->writable)
                event_free(n->writable);
        free(n->queued);
        free(n->status_sent);
        if (n->fd >= 0)
                close(n->fd);
        free(n);
}

void notify_stopping(Notify *n) {
        if (n) {
                send_or_queue(n, "STOPPING=1");
                return;
        }
        _cleanup_(closep) int fd = notify_socket(NULL);
        if (fd >= 0)
                (void) send_now(fd, "STOPPING=1");
}
