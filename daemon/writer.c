/* writer.c — the write queue (a FIFO of devices), the ring of requests in flight with their
 * owners, and the matching of acks to requests. It sends what it is given and reports answers;
 * it decides nothing about them. */
#include <linux/rtnetlink.h>
#include <netlink/attr.h>
#include <netlink/msg.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "reconcile.h"
#include "writer.h"

struct Writer {
        WriterTransport transport;
        const WriterOps *ops;
        void *userdata;
        bool ipv4;
        TAILQ_HEAD(, Device) queue;
        TAILQ_HEAD(, Device) waiting; /* queued, waiting for their baselines */
        size_t n_queued;               /* in both */
        size_t n_unasked;              /* waiting for a dump not asked for yet */
        unsigned dump_for, dump_next;  /* whom the dump running serves; whom the one after it */
        unsigned dump_id;              /* of the one running, or the last */
        unsigned n_sent; /* writes in flight */
        /* grown as needed up to WRITER_INFLIGHT_MAX: a namespace with a handful of devices (a pod)
         * does not carry room for 256 requests */
        WriterRequest *ring;
        unsigned cap, head, count;
        uint64_t next_id;
};

int writer_new(const WriterTransport *transport, const WriterOps *ops, void *userdata, Writer **ret) {
        Writer *w = calloc(1, sizeof(*w));

        if (!w)
                return -ENOMEM;
        w->transport = *transport;
        w->ops = ops;
        w->userdata = userdata;
        TAILQ_INIT(&w->queue);
        TAILQ_INIT(&w->waiting);
        *ret = w;
        return 0;
}

void writer_free(Writer *w) {
        Device *d;

        if (!w)
                return;
        while ((d = TAILQ_FIRST(&w->queue)))
                writer_unqueue(w, d);
        while ((d = TAILQ_FIRST(&w->waiting)))
                writer_unqueue(w, d);
        free(w->ring);
        free(w);
}

void writer_set_ipv4(Writer *w, bool ipv4) {
        w->ipv4 = ipv4;
}

static void take_off(Writer *w, Device *d) {
        DeviceWrite *o = d->write.on;

        if (o->waiting) {
                TAILQ_REMOVE(&w->waiting, d, write.on->link);
                if (o->baseline_dump == 0)
                        w->n_unasked--;
                o->waiting = false;
                o->baseline_dump = 0;
        } else
                TAILQ_REMOVE(&w->queue, d, write.on->link);
}

/* Ready to go: at the queue's end. */
static void to_queue(Writer *w, Device *d) {
        take_off(w, d);
        TAILQ_INSERT_TAIL(&w->queue, d, write.on->link);
}

int writer_queue(Writer *w, Device *d, WriteCause cause, const Sizes *target, unsigned owned) {
        DeviceWrite *o;
        bool wait;

        if (d->write.phase == WRITE_SENT)
                return 0; /* the caller reconsiders the device when the ack is in */
        o = device_write_begin(d);
        if (!o)
                return -ENOMEM;
        d->write.cause = cause;
        d->write.owned = owned;
        o->target = *target;
        wait = o->baseline_size == 0 && w->ops->wants_baseline && w->ops->wants_baseline(w->userdata, d);
        if (d->write.phase == WRITE_IDLE) {
                w->n_queued++;
                d->write.phase = WRITE_QUEUED;
        } else if (o->waiting == wait)
                return 0; /* retargeted where it is */
        else
                take_off(w, d);
        if (wait) {
                TAILQ_INSERT_TAIL(&w->waiting, d, write.on->link);
                o->waiting = true;
                w->n_unasked++;
        } else
                TAILQ_INSERT_TAIL(&w->queue, d, write.on->link);
        return 0;
}

/* Out of the queue, the record kept (writer_send() sends from it). */
static void dequeue(Writer *w, Device *d) {
        take_off(w, d);
        w->n_queued--;
        d->write.phase = WRITE_IDLE;
        d->write.on->baseline_size = 0;
}

void writer_unqueue(Writer *w, Device *d) {
        if (d->write.phase != WRITE_QUEUED)
                return;
        dequeue(w, d);
        device_write_end(d);
}

/* ---- baselines and the statistics dump ---- */

static void set_baseline(Writer *w, Device *d, const void *stats, size_t size) {
        DeviceWrite *o = d->write.on;

        /* what a newer kernel adds at the end, no guard of this build reads */
        if (size > sizeof(o->baseline))
                size = sizeof(o->baseline);
        memcpy(o->baseline, stats, size);
        o->baseline_size = (uint16_t) size;
        to_queue(w, d);
}

static int dump_start(Writer *w, unsigned who) {
        int r;

        if (!w->transport.stats_dump)
                return -EOPNOTSUPP;
        r = w->transport.stats_dump(w->transport.userdata);
        if (r < 0)
                return r;
        w->dump_id++;
        w->dump_for = who;
        return 0;
}

/* The id of the dump that serves `who`: the one started now, or the one after the one running. */
static int dump_request(Writer *w, unsigned who, unsigned *ret_id) {
        int r;

        if (w->dump_for) {
                w->dump_next |= who;
                *ret_id = w->dump_id + 1;
                return 0;
        }
        r = dump_start(w, who);
        if (r < 0)
                return r;
        *ret_id = w->dump_id;
        return 0;
}

int writer_request_stats_dump(Writer *w, StatsDumpFor who) {
        unsigned id;
        return dump_request(w, who, &id);
}

unsigned writer_stats_dump_serves(const Writer *w) {
        return w->dump_for;
}

void writer_stats_entry(Writer *w, Device *d, const void *stats, size_t size) {
        if ((w->dump_for & STATS_DUMP_BASELINES) && d->write.phase == WRITE_QUEUED && d->write.on->waiting &&
            d->write.on->baseline_dump == w->dump_id)
                set_baseline(w, d, stats, size);
}

/* The writes that waited for dump `id` and were not in it go as they are. */
static void baselines_missing(Writer *w, unsigned id) {
        Device *d, *next;

        for (d = TAILQ_FIRST(&w->waiting); d; d = next) {
                next = TAILQ_NEXT(d, write.on->link);
                if (d->write.on->baseline_dump == id)
                        to_queue(w, d);
        }
}

unsigned writer_stats_dump_done(Writer *w, unsigned *ret_failed, int *ret_error) {
        unsigned done = w->dump_for, next = w->dump_next;
        int r = 0;

        w->dump_for = w->dump_next = 0;
        if (done & STATS_DUMP_BASELINES)
                baselines_missing(w, w->dump_id);
        if (next) {
                r = dump_start(w, next);
                if (r < 0 && (next & STATS_DUMP_BASELINES))
                        baselines_missing(w, w->dump_id + 1);
        }
        *ret_failed = r < 0 ? next : 0;
        *ret_error = r;
        return done;
}

void writer_offer_baseline(Writer *w, Device *d, const void *stats, size_t size) {
        if (d->write.phase == WRITE_QUEUED && d->write.on->waiting)
                set_baseline(w, d, stats, size);
}

/* The writes waiting for baselines not asked for yet: one dump for all of them. */
static void ask_baselines(Writer *w) {
        unsigned id = 0;
        Device *d, *next;

        if (w->n_unasked == 0)
                return;
        /* no dump (id stays 0): they go without; their first samples take the baselines' place */
        (void) dump_request(w, STATS_DUMP_BASELINES, &id);
        for (d = TAILQ_FIRST(&w->waiting); d; d = next) {
                next = TAILQ_NEXT(d, write.on->link);
                if (d->write.on->baseline_dump != 0)
                        continue;
                if (id == 0)
                        to_queue(w, d);
                else
                        d->write.on->baseline_dump = id;
        }
        w->n_unasked = 0;
}

/* Room for one more request in the ring. */
static int ring_reserve(Writer *w) {
        WriterRequest *t;
        unsigned cap;

        if (w->count < w->cap)
                return 0;
        if (w->cap >= WRITER_INFLIGHT_MAX)
                return -EBUSY;
        cap = w->cap ? w->cap * 2 : 8;
        if (cap > WRITER_INFLIGHT_MAX)
                cap = WRITER_INFLIGHT_MAX;
        t = calloc(cap, sizeof(*t));
        if (!t)
                return -ENOMEM;
        for (unsigned i = 0; i < w->count; i++)
                t[i] = w->ring[(w->head + i) % w->cap];
        free(w->ring);
        w->ring = t;
        w->cap = cap;
        w->head = 0;
        return 0;
}

static int ring_push(Writer *w, uint32_t seq, RequestKind kind, Device *d, WriterReadFn fn, void *userdata,
                     uint64_t *ret_id) {
        WriterRequest *r = &w->ring[(w->head + w->count) % w->cap];

        *r = (WriterRequest){.seq = seq, .kind = kind, .device = d, .fn = fn, .userdata = userdata,
                             .id = ++w->next_id};
        w->count++;
        d->write.n_requests++;
        if (ret_id)
                *ret_id = r->id;
        return 0;
}

static int send_request(Writer *w, struct nl_msg *msg, RequestKind kind, Device *d, WriterReadFn fn,
                        void *userdata, uint64_t *ret_id, uint32_t *ret_seq) {
        uint32_t seq;
        int r;

        if (w->count >= WRITER_INFLIGHT_MAX)
                return -EBUSY;
        r = ring_reserve(w); /* before the send: a request sent must have its place */
        if (r < 0)
                return r;
        r = w->transport.send(w->transport.userdata, msg, &seq);
        if (r < 0)
                return r;
        if (ret_seq)
                *ret_seq = seq;
        return ring_push(w, seq, kind, d, fn, userdata, ret_id);
}

static int link_get_message(int ifindex, struct nl_msg **ret) {
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
        _cleanup_(nlmsg_freep) struct nl_msg *msg = nlmsg_alloc_simple(RTM_GETLINK, NLM_F_REQUEST);

        if (!msg || nlmsg_append(msg, &ifi, sizeof(ifi), NLMSG_ALIGNTO) < 0 ||
            nla_put_u32(msg, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(msg);
        return 0;
}

int writer_request_read(Writer *w, Device *d, WriterReadFn fn, void *userdata, uint64_t *ret_id) {
        _cleanup_(nlmsg_freep) struct nl_msg *msg = NULL;
        int r;

        if (w->count >= WRITER_INFLIGHT_MAX)
                return -EBUSY;
        r = link_get_message(d->ifindex, &msg);
        if (r < 0)
                return r;
        return send_request(w, msg, REQUEST_READ, d, fn, userdata, ret_id, NULL);
}

void writer_cancel_read(Writer *w, uint64_t id) {
        for (unsigned i = 0; i < w->count; i++) {
                WriterRequest *r = &w->ring[(w->head + i) % w->cap];
                if (r->id == id) {
                        r->fn = NULL;
                        r->userdata = NULL;
                        return;
                }
        }
}

void writer_cancel_device(Writer *w, Device *d) {
        writer_unqueue(w, d);
        if (d->write.phase == WRITE_SENT) {
                w->n_sent--;
                d->write.phase = WRITE_IDLE;
        }
        device_write_end(d);
        for (unsigned i = 0; i < w->count && d->write.n_requests > 0; i++) {
                WriterRequest *r = &w->ring[(w->head + i) % w->cap];
                if (r->device != d)
                        continue;
                WriterReadFn fn = r->fn;
                void *userdata = r->userdata;
                r->device = NULL;
                r->fn = NULL;
                d->write.n_requests--;
                if (fn)
                        fn(NULL, -ENODEV, userdata);
        }
}

size_t writer_ready(Writer *w, Device *ret[static WRITER_INFLIGHT_MAX]) {
        size_t n = 0, room;
        Device *d;

        ask_baselines(w);
        room = WRITER_INFLIGHT_MAX - w->count;
        TAILQ_FOREACH(d, &w->queue, write.on->link) {
                if (n >= room)
                        break;
                ret[n++] = d;
        }
        return n;
}

int writer_send(Writer *w, Device *d) {
        _cleanup_(nlmsg_freep) struct nl_msg *msg = NULL;
        int r;

        if (d->write.phase != WRITE_QUEUED)
                return -EINVAL;
        if (w->count >= WRITER_INFLIGHT_MAX)
                return -EBUSY;
        dequeue(w, d);
        r = link_write_message(d->ifindex, &d->write.on->target, w->ipv4, &msg);
        if (r >= 0)
                r = send_request(w, msg, REQUEST_WRITE, d, NULL, NULL, NULL, &d->write.on->seq);
        if (r < 0)
                return r;
        d->write.phase = WRITE_SENT;
        d->write.on->before = d->current;
        w->n_sent++;
        return 0;
}

const WriterRequest *writer_lookup(const Writer *w, uint32_t seq) {
        for (unsigned i = 0; i < w->count; i++) {
                const WriterRequest *r = &w->ring[(w->head + i) % w->cap];
                if (r->seq == seq)
                        return r;
        }
        return NULL;
}

static WriterRequest ring_pop(Writer *w) {
        WriterRequest r = w->ring[w->head];
        w->head = (w->head + 1) % w->cap;
        w->count--;
        if (r.device)
                r.device->write.n_requests--;
        return r;
}

/* One request is over: answered (lost == false) or not. */
static void request_done(Writer *w, const WriterRequest *r, int error, const char *extack, bool lost) {
        Device *d = r->device;

        if (!d)
                return; /* its device went away: the answer is no one's */
        switch (r->kind) {
        case REQUEST_WRITE:
                if (d->write.phase == WRITE_SENT && d->write.on->seq == r->seq) {
                        d->write.phase = WRITE_IDLE;
                        w->n_sent--;
                        w->ops->write_done(w->userdata, d, error, extack, lost);
                        if (d->write.phase == WRITE_IDLE)
                                device_write_end(d); /* not queued again meanwhile */
                }
                break;
        case REQUEST_READ:
                if (r->fn)
                        r->fn(d, lost ? -EIO : error, r->userdata);
                break;
        case _REQUEST_KIND_MAX:
        case _REQUEST_KIND_INVALID:
                break;
        }
}

void writer_ack(Writer *w, uint32_t seq, int error, const char *extack) {
        /* An ack of nothing we sent (or sent and forgotten after a loss) is ignored, rather than
         * taken as the loss of everything in flight. */
        if (!writer_lookup(w, seq))
                return;
        while (w->count > 0) {
                WriterRequest r = ring_pop(w);
                if (r.seq == seq) {
                        request_done(w, &r, error, extack, false);
                        return;
                }
                request_done(w, &r, 0, NULL, true);
        }
}

void writer_acks_lost(Writer *w) {
        while (w->count > 0) {
                WriterRequest r = ring_pop(w);
                request_done(w, &r, 0, NULL, true);
        }
}

bool writer_idle(const Writer *w) {
        return w->n_queued == 0 && w->n_sent == 0;
}

size_t writer_queued(const Writer *w) {
        return w->n_queued;
}

unsigned writer_inflight(const Writer *w) {
        return w->count;
}
