/* evidence.h — proof that BIG TCP is in effect: the packets above 64 KiB that a device really
 * sends and receives, counted while it is watched (its probation window, or an operator's
 * `bigtcpctl watch`). A watched device has one AF_PACKET socket bound to it whose classic BPF
 * filter passes only packets longer than 65536 bytes, cut to 1 byte: a small packet is never
 * copied to user space, and a device that is not watched has nothing attached. What passes lands
 * in a small TPACKET_V3 ring (the packet's header only: its length before the cut, its type —
 * the direction — and its protocol — the family), read a block at a time: the daemon wakes when
 * a block is full or EVIDENCE_BLOCK_MSEC passed, not for every packet.
 *
 * At the end of a window the device is judged, if it carried traffic: its own tx+rx packet
 * counters, read by a statistics dump at the start and at the end of the window, rose by at least
 * EVIDENCE_TRAFFIC_MIN (an idle window says nothing and keeps the last verdict). It is not
 * effective when not one big packet came in a family its sizes raise above 65536 — with both
 * families raised, the counters cannot tell which family the traffic was, so only when neither
 * had one — and, with no family raised, when none came at all (BIG TCP is not in effect there
 * either; logged as information, not as a warning; a big packet received from a peer makes it
 * effective). Information, never a rollback. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "event.h"
#include "writer.h"

#define EVIDENCE_BIG 65536u               /* a packet longer than this is big */
#define EVIDENCE_TRAFFIC_MIN UINT64_C(1000) /* packets in a window that make it one with traffic */
#define EVIDENCE_DURATION_DEFAULT_USEC (30 * USEC_PER_SEC)
#define EVIDENCE_DURATION_MAX_USEC (3600 * USEC_PER_SEC) /* Watch(): at most an hour */
/* The ring of one watched device: 4 blocks of 4 KiB, about 42 packets each (96 bytes per packet
 * with its header); a block is handed over when full or after EVIDENCE_BLOCK_MSEC. At 10000 big
 * packets a second (15 Gbit/s) that is a wakeup every 4 ms and leaves the loop 16 ms to come
 * round before packets are missed (counted as such). The ring is resident memory of the daemon
 * (the kernel maps its pages in whole): it is kept small. */
#define EVIDENCE_BLOCK_SIZE (4u * 1024u)
#define EVIDENCE_BLOCKS 4u
#define EVIDENCE_BLOCK_MSEC 200u
/* A window is judged this long after its end, when the kernel has handed over its last block. */
#define EVIDENCE_SETTLE_USEC ((EVIDENCE_BLOCK_MSEC + 50u) * USEC_PER_MSEC)
/* Devices watched at once, at most (16 KiB of ring each, 1 MiB in all): beyond, a device is not
 * counted; of a burst of thousands written at once, the first 64 are. */
#define EVIDENCE_WATCHED_MAX 64u

typedef enum EvidenceFamily {
        EVIDENCE_IPV6, /* and every other protocol of the IPv6/legacy sizes */
        EVIDENCE_IPV4,
        _EVIDENCE_FAMILY_MAX,
        _EVIDENCE_FAMILY_INVALID = -EINVAL,
} EvidenceFamily;

const char *evidence_family_to_string(EvidenceFamily f);

/* What a watch counted (kept after it ends, until the device goes or is watched again). */
typedef struct EvidenceCounts {
        uint64_t tx, rx;                 /* packets above EVIDENCE_BIG */
        uint32_t tx_largest, rx_largest; /* bytes, with the link-layer header */
        uint64_t by_family[_EVIDENCE_FAMILY_MAX];
        uint64_t missed; /* big packets the socket had no room for: direction and family unknown */
} EvidenceCounts;

typedef enum EvidenceVerdict {
        EVIDENCE_UNKNOWN,       /* no window with traffic judged yet */
        EVIDENCE_EFFECTIVE,     /* big packets came in a raised family */
        EVIDENCE_NOT_EFFECTIVE, /* traffic, and not one big packet in a raised family (or none raised) */
        _EVIDENCE_VERDICT_MAX,
        _EVIDENCE_VERDICT_INVALID = -EINVAL,
} EvidenceVerdict;

/* One device's record, allocated the first time it is watched (device.h holds a pointer). */
typedef struct Evidence {
        Device *device;
        EvidenceCounts counts;
        uint64_t since_usec; /* CLOCK_REALTIME: when this count began */

        /* the last verdict, and what it was made of */
        EvidenceVerdict verdict;
        unsigned raised;  /* 1 << EvidenceFamily: the families its sizes raised in that window */
        unsigned quiet;   /* … and those of them without a big packet */
        uint64_t traffic; /* packets (tx+rx) the device carried in that window */
        bool logged;      /* "not effective" was logged; again only after an effective window */

        /* while watched */
        int fd; /* -1: not watched */
        struct event *io;
        uint8_t *ring; /* EVIDENCE_BLOCKS blocks, mapped */
        unsigned block; /* the next to read */
        uint64_t until_usec; /* CLOCK_MONOTONIC */
        bool have_start;     /* the packet counters at the window's start came */
        uint64_t start_packets;
        bool ending;    /* its window is over: waits for the closing statistics dump */
        bool dumped;    /* … which came (or failed); and for the last block of its ring: */
        uint64_t settle_usec; /* CLOCK_MONOTONIC */
        bool have_end;
        uint64_t end_packets;
        TAILQ_ENTRY(Evidence) link;
} Evidence;

/* Which families sizes raise above 65536 (GSO or GRO), 1 << EvidenceFamily. */
unsigned evidence_raised(const Sizes *s, bool ipv4);

/* Account one packet that passed the filter: `outgoing` from the packet type, `protocol` the
 * ethertype (host order), `len` its length before the cut. */
void evidence_count(EvidenceCounts *c, bool outgoing, uint16_t protocol, uint32_t len);

/* The verdict of a window (pure): `traffic` packets (UINT64_MAX: unknown), the families raised;
 * *ret_quiet gets the raised families without a big packet. */
EvidenceVerdict evidence_judge(const EvidenceCounts *c, uint64_t traffic, unsigned raised, unsigned *ret_quiet);

/* The filter the socket carries: accept packets longer than EVIDENCE_BIG, cut to one byte. */
struct sock_fprog;
const struct sock_fprog *evidence_filter(void);

typedef struct EvidenceSet EvidenceSet;

/* `events` gets EVENT_EVIDENCE at the end of each window. Without `enabled`, nothing is ever
 * watched (-EOPNOTSUPP). */
int evidence_set_new(struct event_base *base, Writer *writer, EventList *events, const Clock *clock, bool enabled,
                     EvidenceSet **ret);
/* Stops every watch (the records stay with their devices). */
void evidence_set_free(EvidenceSet *s);

/* Watch `d` for `duration_usec` from now (a watch running is extended, never shortened; a new
 * one starts a new count). -errno when the socket cannot be set up (nothing is left attached),
 * -EUSERS when EVIDENCE_WATCHED_MAX devices are watched already, -EOPNOTSUPP when counting is off. */
int evidence_watch(EvidenceSet *s, Device *d, uint64_t duration_usec);
/* End d's watch now, without a verdict (a rollback, leaving its policy); EVENT_EVIDENCE goes out. */
void evidence_stop(EvidenceSet *s, Device *d);
/* d goes away: its watch ends silently and its record is freed. */
void evidence_forget(EvidenceSet *s, Device *d);
static inline bool evidence_watching(const Device *d) {
        return d->evidence && d->evidence->fd >= 0;
}
size_t evidence_watched(const EvidenceSet *s);

/* Read what is queued on every watched socket now (tests, and before a verdict). */
void evidence_drain(EvidenceSet *s);

/* The entries of a statistics dump that serves STATS_DUMP_EVIDENCE, then its end. */
void evidence_stats_entry(EvidenceSet *s, Device *d, const void *stats, size_t size);
void evidence_stats_done(EvidenceSet *s, int error);
