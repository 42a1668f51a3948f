/* metrics-http.h — bigtcpd --metrics-listen: GET /metrics over HTTP (libevent's evhttp), the text
 * `bigtcpctl metrics` prints (metrics.h), for Prometheus to scrape. Nothing else is served, and
 * everything a client controls is bounded: connections, request and header sizes, and how long
 * a request may take to come in or its answer to go out. */
#pragma once

#include <event2/event.h>
#include <sys/socket.h>

#include "control.h"

#define METRICS_HTTP_CONNECTIONS_MAX 16u /* open at once; one more is closed as it comes */
#define METRICS_HTTP_HEADERS_MAX 8192    /* the request line and headers, in bytes */
#define METRICS_HTTP_TIMEOUT_SEC 10      /* to read a request, and to write an answer out */

typedef struct MetricsHttp MetricsHttp;

/* "ADDR:PORT" ("127.0.0.1:9437", "[::1]:9437", "0.0.0.0:9437"; a port from 1 to 65535) as a
 * socket address; -EINVAL otherwise. */
int metrics_http_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len);

/* Listens on `listen` (as metrics_http_parse_listen() takes it) and serves its scrapes from the
 * loop of `base`. */
int metrics_http_new(struct event_base *base, Control *control, const char *listen, MetricsHttp **ret);
/* Scrapes still waiting for the kernel's answer are answered 503 first. */
void metrics_http_free(MetricsHttp *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(MetricsHttp *, metrics_http_free);
