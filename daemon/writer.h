/* writer.h — the one queue of writes to the kernel and the ring of requests in flight. Every
 * request belongs to a device: the ring records the device itself, not its ifindex, and a device
 * that goes away takes its requests with it (writer_cancel_device()), so an ack or a reply can
 * never reach another device that got the same ifindex. Requests are pipelined up to a bound; the
 * kernel answers them in order. What an answer means is decided above, through WriterOps. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "device.h"

#define WRITER_INFLIGHT_MAX 256u

struct nl_msg;

typedef enum RequestKind {
        REQUEST_WRITE, /* RTM_NEWLINK with the four sizes */
        REQUEST_READ,  /* RTM_GETLINK: the link's attributes again */
        _REQUEST_KIND_MAX,
        _REQUEST_KIND_INVALID = -EINVAL,
} RequestKind;

/* A read asked for by someone waiting for it (show): `d` is NULL with -ENODEV when the device
 * went away first; error -EIO when the answer was lost. */
typedef void (*WriterReadFn)(Device *d, int error, void *userdata);

typedef struct WriterRequest {
        uint32_t seq;
        RequestKind kind;
        Device *device; /* NULL once its device went away */
        WriterReadFn fn;
        void *userdata;
        uint64_t id;
} WriterRequest;

typedef struct WriterOps {
        /* The kernel answered the write of `d` (0 or -errno, with its extended ack text), or the
         * answer was lost (`lost`: what the write did is unknown). d->write.phase is WRITE_IDLE.
         * (A write that could not be sent is its sender's to end: writer_send().) */
        void (*write_done)(void *userdata, Device *d, int error, const char *extack, bool lost);
        /* The queued write of `d` must carry the device's link counters from just before it (its
         * guards' baselines). Asked whenever the write is queued or retargeted. */
        bool (*wants_baseline)(void *userdata, const Device *d);
} WriterOps;


/* How requests reach the kernel: netlink_send() and netlink_stats_dump() in the daemon, a
 * recorder in the tests. A statistics dump's entries come back through sync.c, which hands each
 * to writer_stats_entry() and to probation. */
typedef struct WriterTransport {
        int (*send)(void *userdata, struct nl_msg *msg, uint32_t *ret_seq);
        void *userdata;
        int (*stats_dump)(void *userdata); /* -EBUSY while one runs */
} WriterTransport;

/* Who a statistics dump (RTM_GETSTATS, every device's IFLA_STATS_LINK_64) is for. One runs at a
 * time; asked for while one runs, it runs right after it. */
typedef enum StatsDumpFor {
        STATS_DUMP_SAMPLES = 1u << 0,   /* probation's samples of a tick */
        STATS_DUMP_BASELINES = 1u << 1, /* the writes waiting for their baselines */
        STATS_DUMP_EVIDENCE = 1u << 2,  /* the packet counters of watched windows (evidence.c) */
} StatsDumpFor;

typedef struct Writer Writer;

int writer_new(const WriterTransport *transport, const WriterOps *ops, void *userdata, Writer **ret);
void writer_free(Writer *w);
/* Whether writes carry the IPv4 sizes (the kernel has them). */
void writer_set_ipv4(Writer *w, bool ipv4);

/* Queue (or, when queued already, retarget in place) the write of `target`; `owned` is the set of
 * sizes of its policy it sets. Not for a device whose write is in flight (WRITE_SENT): 0, and
 * nothing done. -ENOMEM: no room for the write's record, nothing queued. */
int writer_queue(Writer *w, Device *d, WriteCause cause, const Sizes *target, unsigned owned);
void writer_unqueue(Writer *w, Device *d);
/* The queued writes that can go now (not waiting for baselines), oldest first, up to the bound of
 * requests in flight: at most WRITER_INFLIGHT_MAX, in `ret` (asks for the dump of the baselines
 * that writes wait for first). d->write.on->baseline (baseline_size 0: none) holds the link
 * counters from just before each. Whoever sends them decides what must happen first. */
size_t writer_ready(Writer *w, Device *ret[static WRITER_INFLIGHT_MAX]);
/* Send d's queued write: -EBUSY with the ring full, -errno when it cannot go (it is taken out of
 * the queue, its record kept: the caller ends it), 0 once in flight (WRITE_SENT); -EINVAL when
 * nothing is queued. */
int writer_send(Writer *w, Device *d);

/* Ask for a statistics dump that starts now, or right after the one running. */
int writer_request_stats_dump(Writer *w, StatsDumpFor who);
/* Whom the dump running serves (0: none runs). */
unsigned writer_stats_dump_serves(const Writer *w);
/* An entry of it: a write waiting for its baselines takes them. */
void writer_stats_entry(Writer *w, Device *d, const void *stats, size_t size);
/* It is over (error: failed); the one asked for meanwhile starts. Returns whom it served, and in
 * *ret_failed whom the next one should have served when it cannot start (its error in
 * *ret_error). Writes that waited for it and were not in it go without baselines. */
unsigned writer_stats_dump_done(Writer *w, unsigned *ret_failed, int *ret_error);
/* Link counters read just now, from a link message handled while its write waits for them:
 * they serve as its baselines. */
void writer_offer_baseline(Writer *w, Device *d, const void *stats, size_t size);
/* Ask for one device's attributes again; `fn` (may be NULL) is told when the answer is in. The
 * id (if asked for) cancels `fn` when its caller goes away. -EBUSY when the ring is full. */
int writer_request_read(Writer *w, Device *d, WriterReadFn fn, void *userdata, uint64_t *ret_id);
void writer_cancel_read(Writer *w, uint64_t id);

/* The device is going away: unqueue its write and disown its requests in flight (their answers
 * are dropped; waiting readers are told -ENODEV now). */
void writer_cancel_device(Writer *w, Device *d);

/* The request a reply belongs to (the reply precedes its ack), or NULL. */
const WriterRequest *writer_lookup(const Writer *w, uint32_t seq);
/* NetlinkOps.ack and .acks_lost. Acks come in order: requests before `seq` were lost. */
void writer_ack(Writer *w, uint32_t seq, int error, const char *extack);
void writer_acks_lost(Writer *w);

/* No write queued nor sent. */
bool writer_idle(const Writer *w);
size_t writer_queued(const Writer *w);
unsigned writer_inflight(const Writer *w);

/* Is request `a` older than `b` (sequence numbers wrap)? */
static inline bool seq_before(uint32_t a, uint32_t b) {
        return (int32_t) (a - b) < 0;
}
