/* metrics-http.c — GET /metrics over evhttp (metrics-http.h): each scrape reads every device from
 * the kernel first (as `bigtcpctl metrics` asks ListDevices to: a size changed behind bigtcpd's
 * back sends no event), then answers with metrics_print()'s text of the daemon's tables
 * (control_metrics_new()): the same text `bigtcpctl metrics` prints from GetStatus and
 * ListDevices. The text is sent as the socket takes it: a chunk of it printed each time the one
 * before is out, never the whole text of 10000 devices (17 MB) held at once. */
#include <assert.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <stdio.h>
#include <sys/queue.h>
#include <unistd.h>

#include "log.h"
#include "metrics-http.h"
#include "metrics.h"
#include "operation.h"

typedef struct Scrape Scrape;
typedef struct Accepted Accepted;

struct MetricsHttp {
        Control *control;
        struct evhttp *http;
        unsigned n_connections;
        LIST_HEAD(, Scrape) scrapes;   /* waiting for their read of the kernel */
        unsigned n_scrapes;
        LIST_HEAD(, Scrape) streams;   /* sending their text (one a connection at most) */
        LIST_HEAD(, Accepted) fresh;   /* accepted in this round of the loop, not yet counted */
        struct event *count_event;     /* counts them, right after the accept */
};

/* A request waiting for its operation, then sending its text. evhttp keeps the request until it
 * is answered, even when its client went away meanwhile; once its reply has started, the close of
 * its connection ends it (on_connection_close()). */
struct Scrape {
        MetricsHttp *owner;
        struct evhttp_request *req;
        Operation *op;
        /* while its text is sent */
        struct evhttp_connection *evcon;
        ControlMetrics *metrics;
        MetricsCursor cursor;
        LIST_ENTRY(Scrape) link;
};

/* A chunk of the text: at least this much (or the rest), printed this many devices at a time (a
 * part may have no line for many devices: the desired sizes of devices no policy matches). */
#define CHUNK_BYTES (128u * 1024u)
#define CHUNK_DEVICES 64u

/* libevent 2.1 has no bound on an evhttp's connections (2.2's evhttp_set_max_connections): the
 * bufferevent of every new connection is made here (evhttp_set_bevcb), held by a reference until
 * evhttp has made the connection around it, and counted then, in the same round of the loop,
 * before any of its I/O runs. The connection is the argument evhttp gives the bufferevent's
 * callbacks; its close callback uncounts it. */
struct Accepted {
        struct bufferevent *bev;
        LIST_ENTRY(Accepted) link;
};

/* Scrapes waiting at once; more are answered 503 (each connection has at most one, but a client
 * that went away leaves its scrape to finish). */
#define SCRAPES_MAX (2 * METRICS_HTTP_CONNECTIONS_MAX)

int metrics_http_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len) {
        struct sockaddr_storage ss = {};
        int len = sizeof(ss);
        uint16_t port;

        if (!s || strlen(s) > 64)
                return -EINVAL;
        if (evutil_parse_sockaddr_port(s, (struct sockaddr *) &ss, &len) < 0)
                return -EINVAL;
        if (ss.ss_family == AF_INET)
                port = ntohs(((struct sockaddr_in *) &ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
                port = ntohs(((struct sockaddr_in6 *) &ss)->sin6_port);
        else
                return -EINVAL;
        if (port == 0)
                return -EINVAL;
        *ret = ss;
        *ret_len = (socklen_t) len;
        return 0;
}

static void scrape_free(Scrape *s) {
        if (!s)
                return;
        LIST_REMOVE(s, link);
        s->owner->n_scrapes--;
        operation_free(s->op);
        control_metrics_free(s->metrics);
        free(s);
}

/* A FILE that appends to an evbuffer: the text goes into the reply's chains as it is printed,
 * never one buffer of it all to be copied again. */
static ssize_t evbuffer_cookie_write(void *cookie, const char *buf, size_t size) {
        return evbuffer_add(cookie, buf, size) < 0 ? -1 : (ssize_t) size;
}

/* The next chunk of the text into `out`, never empty; true once it is all there. */
static int print_some(Scrape *s, struct evbuffer *out, bool *ret_done) {
        FILE *f = fopencookie(out, "w", (cookie_io_functions_t){.write = evbuffer_cookie_write});
        bool done = false;
        int r;

        if (!f)
                return -ENOMEM;
        (void) setvbuf(f, NULL, _IOFBF, 64 * 1024);
        /* an empty chunk is not sent, and its callback never comes */
        while (!done && fflush(f) == 0 && evbuffer_get_length(out) < CHUNK_BYTES)
                done = metrics_print_some(f, control_metrics_source(s->metrics), &s->cursor, CHUNK_DEVICES);
        r = ferror(f) ? -ENOMEM : 0;
        if (fclose(f) != 0 && r == 0)
                r = -ENOMEM;
        if (r < 0)
                return r;
        *ret_done = done;
        return 0;
}

static void on_chunk_sent(struct evhttp_connection *evcon, void *userdata);

/* The next chunk, when the one before is out; the end after the last. */
static void send_some(Scrape *s) {
        struct evbuffer *out = evbuffer_new();
        bool done = false;
        int r;

        r = out ? print_some(s, out, &done) : -ENOMEM;
        if (r < 0) {
                /* half a text is out: only the connection's close tells the client it is not all */
                log_warning_errno(r, "metrics: failed to print the text: %m; closing the connection");
                if (out)
                        evbuffer_free(out);
                evhttp_connection_free(s->evcon); /* on_connection_close() ends the scrape */
                return;
        }
        if (done) {
                evhttp_send_reply_chunk(s->req, out);
                evhttp_send_reply_end(s->req); /* its own callback replaces ours */
                scrape_free(s);
        } else
                evhttp_send_reply_chunk_with_cb(s->req, out, on_chunk_sent, s);
        evbuffer_free(out);
}

static void on_chunk_sent(struct evhttp_connection *evcon, void *userdata) {
        send_some(userdata);
}

/* The read of the kernel is in: the text goes out from the tables as they are now. */
static void start_text(Scrape *s) {
        MetricsHttp *m = s->owner;
        struct evhttp_request *req = s->req;
        int r;

        s->evcon = evhttp_request_get_connection(req);
        if (!s->evcon) { /* the client went away: the request is all that is left */
                evhttp_send_reply_end(req);
                scrape_free(s);
                return;
        }
        r = control_metrics_new(m->control, &s->metrics);
        if (r < 0) {
                log_warning_errno(r, "metrics: failed to read the figures: %m; answering 500");
                scrape_free(s);
                evhttp_send_error(req, HTTP_INTERNAL, NULL);
                return;
        }
        LIST_REMOVE(s, link);
        LIST_INSERT_HEAD(&m->streams, s, link);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "text/plain; version=0.0.4; charset=utf-8");
        evhttp_send_reply_start(req, HTTP_OK, "OK");
        send_some(s);
}

static void on_read_done(Operation *op, const OperationResult *r, void *userdata) {
        Scrape *s = userdata;
        struct evhttp_request *req = s->req;
        int error = r->error == OPERATION_OK ? 0 : r->errno_ > 0 ? r->errno_ : EIO;

        operation_free(TAKE_PTR(s->op)); /* allowed from here, and `r` with it */
        if (error != 0) {
                scrape_free(s);
                log_warning_errno(error, "metrics: the read of the devices failed: %m; answering 503");
                evhttp_send_error(req, 503, "Service Unavailable");
                return;
        }
        start_text(s);
}

/* 405 with its Allow (evhttp_send_error() would drop every header of ours). */
static void reply_not_allowed(struct evhttp_request *req) {
        static const char text[] = "405 Method Not Allowed: GET /metrics only\n";
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        struct evbuffer *out = evbuffer_new();

        if (!out || evbuffer_add(out, text, sizeof(text) - 1) < 0) {
                if (out)
                        evbuffer_free(out);
                evhttp_send_error(req, HTTP_INTERNAL, NULL);
                return;
        }
        evhttp_add_header(h, "Allow", "GET");
        evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
        evhttp_add_header(h, "Connection", "close");
        evhttp_send_reply(req, 405, "Method Not Allowed", out);
        evbuffer_free(out);
}

static void on_request(struct evhttp_request *req, void *userdata) {
        MetricsHttp *m = userdata;
        const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
        Scrape *s;
        int r;

        if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
                reply_not_allowed(req);
                return;
        }
        if (!uri || !streq_ptr(evhttp_uri_get_path(uri), "/metrics")) {
                evhttp_send_error(req, HTTP_NOTFOUND, NULL);
                return;
        }
        if (m->n_scrapes >= SCRAPES_MAX) {
                evhttp_send_error(req, 503, "Service Unavailable");
                return;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                evhttp_send_error(req, HTTP_INTERNAL, NULL);
                return;
        }
        s->owner = m;
        s->req = req;
        LIST_INSERT_HEAD(&m->scrapes, s, link);
        m->n_scrapes++;
        r = operation_new(m->control, OPERATION_READ, &(OperationArgs){}, &s->op);
        if (r >= 0)
                r = operation_start(s->op, on_read_done, s);
        if (r < 0) {
                scrape_free(s);
                evhttp_send_error(req, HTTP_INTERNAL, NULL);
        }
}

/* A connection closes: its text, if one was on its way, ends there. A request the connection
 * still holds goes with it; one it let go (its client went away) is ours to free. */
static void on_connection_close(struct evhttp_connection *evcon, void *userdata) {
        MetricsHttp *m = userdata;
        Scrape *s, *next;

        assert(m->n_connections > 0);
        m->n_connections--;
        for (s = LIST_FIRST(&m->streams); s; s = next) {
                next = LIST_NEXT(s, link);
                if (s->evcon != evcon)
                        continue;
                if (!evhttp_request_get_connection(s->req))
                        evhttp_request_free(s->req);
                scrape_free(s);
        }
}

static struct bufferevent *on_new_connection(struct event_base *base, void *userdata) {
        MetricsHttp *m = userdata;
        struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
        Accepted *a;

        if (!bev)
                return NULL; /* evhttp makes one, or drops the connection */
        a = calloc(1, sizeof(*a));
        if (!a) {
                bufferevent_free(bev);
                return NULL;
        }
        bufferevent_incref(bev);
        a->bev = bev;
        LIST_INSERT_HEAD(&m->fresh, a, link);
        event_active(m->count_event, EV_TIMEOUT, 1);
        return bev;
}

/* After the accepts of this round: each new connection counted, or closed when there are as many
 * as allowed already. */
static void on_count(evutil_socket_t fd, short what, void *userdata) {
        MetricsHttp *m = userdata;
        Accepted *a;

        while ((a = LIST_FIRST(&m->fresh))) {
                struct bufferevent *bev = a->bev;
                bufferevent_data_cb read_cb;
                bufferevent_event_cb event_cb;
                void *arg = NULL;

                LIST_REMOVE(a, link);
                free(a);
                bufferevent_getcb(bev, &read_cb, NULL, &event_cb, &arg);
                /* NULL callbacks: evhttp gave the connection up already */
                if (arg && read_cb && evhttp_connection_get_bufferevent(arg) == bev) {
                        struct evhttp_connection *evcon = arg;
                        if (m->n_connections >= METRICS_HTTP_CONNECTIONS_MAX) {
                                log_debug("metrics: %u connections open already, closing a new one",
                                          m->n_connections);
                                evhttp_connection_free(evcon);
                        } else {
                                m->n_connections++;
                                evhttp_connection_set_closecb(evcon, on_connection_close, m);
                        }
                }
                bufferevent_decref(bev);
        }
}

static int listen_socket(const char *listen_on, int *ret) {
        struct sockaddr_storage ss;
        socklen_t len;
        int fd, r;

        r = metrics_http_parse_listen(listen_on, &ss, &len);
        if (r < 0)
                return r;
        fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){1}, sizeof(int)) < 0 ||
            (ss.ss_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){1}, sizeof(int)) < 0) ||
            bind(fd, (struct sockaddr *) &ss, len) < 0 || listen(fd, (int) METRICS_HTTP_CONNECTIONS_MAX) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        *ret = fd;
        return 0;
}

int metrics_http_new(struct event_base *base, Control *control, const char *listen_on, MetricsHttp **ret) {
        _cleanup_(metrics_http_freep) MetricsHttp *m = calloc(1, sizeof(*m));
        int fd = -1, r;

        if (!m)
                return -ENOMEM;
        m->control = control;
        LIST_INIT(&m->scrapes);
        LIST_INIT(&m->streams);
        LIST_INIT(&m->fresh);
        m->count_event = event_new(base, -1, 0, on_count, m);
        m->http = evhttp_new(base);
        if (!m->count_event || !m->http)
                return -ENOMEM;
        evhttp_set_max_headers_size(m->http, METRICS_HTTP_HEADERS_MAX);
        evhttp_set_max_body_size(m->http, 0);
        evhttp_set_timeout(m->http, METRICS_HTTP_TIMEOUT_SEC);
        /* every method evhttp knows reaches on_request, which answers 405 to all but GET (evhttp
         * itself would answer 501 to those not allowed here) */
        evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                                    EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                                    EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
        evhttp_set_gencb(m->http, on_request, m);
        evhttp_set_bevcb(m->http, on_new_connection, m);
        r = listen_socket(listen_on, &fd);
        if (r < 0)
                return r;
        if (!evhttp_accept_socket_with_handle(m->http, fd)) {
                close(fd);
                return -ENOMEM;
        }
        *ret = TAKE_PTR(m);
        return 0;
}

void metrics_http_free(MetricsHttp *m) {
        Scrape *s;
        Accepted *a;

        if (!m)
                return;
        while ((s = LIST_FIRST(&m->scrapes))) {
                struct evhttp_request *req = s->req;
                scrape_free(s);
                evhttp_send_error(req, 503, "Service Unavailable");
        }
        while ((a = LIST_FIRST(&m->fresh))) {
                LIST_REMOVE(a, link);
                bufferevent_decref(a->bev);
                free(a);
        }
        if (m->http)
                evhttp_free(m->http); /* closes every connection: on_connection_close still runs */
        while ((s = LIST_FIRST(&m->streams))) /* a connection that closed without saying so */
                scrape_free(s);
        if (m->count_event)
                event_free(m->count_event);
        free(m);
}
