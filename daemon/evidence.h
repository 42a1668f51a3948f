/* evidence.h — proof that BIG TCP is in effect: the packets above 64 KiB that a device really
 * sends and receives, counted while it is watched (its probation window, or an operator's
 * `bigtcpctl watch`), in whichever namespace bigtcpd manages it. A watched device has one
 * AF_PACKET socket bound to it, made in its own namespace, whose classic BPF filter passes only
 * packets longer than 65536 bytes, and one in EVIDENCE_FULL_SAMPLE of those between
 * EVIDENCE_FULL and 65536 (the old ceiling's size), cut to 1 byte: a small packet is never copied
 * to user space, and a device that is not watched has nothing attached. What passes lands in a
 * small TPACKET_V3 ring (the packet's header only: its length before the cut, its type — the
 * direction — and its protocol — the family), read a block at a time: the daemon wakes when a
 * block is full or EVIDENCE_BLOCK_MSEC passed, not for every packet.
 *
 * The sockets are made away from the loop (packet-maker.h: the ring's set-up waits for the
 * kernel), EVIDENCE_SPARE of them ahead in the daemon's own namespace; a watch with none ready
 * starts when one comes. Their last close happens in the closer child (closer.h).
 *
 * At the end of a window each raised family (its sizes above 65536, GSO or GRO) is judged on its
 * own: in effect when a big packet of it came; not in effect only when packets at the old ceiling
 * came in it (traffic that could have been big) and not one above, with none missed; else the
 * window says nothing of it (idle, or app-limited: no traffic that could show it). The device is
 * not effective when a raised family is not in effect (that family is named), effective when one
 * is and none is not. With no family raised, a big packet (a peer's, received) makes it
 * effective, full-size packets and none big not effective (logged as information). A window that
 * shows nothing keeps the last verdict. Information, never a rollback. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "device.h"
#include "event.h"
#include "observer.h"
#include "writer.h"

#define EVIDENCE_BIG 65536u               /* a packet longer than this is big */
/* A packet of EVIDENCE_FULL bytes or more (and at most EVIDENCE_BIG) is at the old ceiling: what
 * TCP makes of a full send queue at 64 KiB, the largest multiple of its segment size that fits
 * (65226 bytes with the link-layer header on a 1500-byte MTU, 64346 for IPv6; 62702 and 62582 on
 * 9000). Paced or app-limited traffic makes smaller ones; only an application that writes
 * messages of 61-64 KiB one at a time makes such packets of its own. One in EVIDENCE_FULL_SAMPLE
 * of them passes the filter (SKF_AD_RANDOM): where BIG TCP is not in effect they are all there
 * is, at line rate. */
#define EVIDENCE_FULL 62464u
#define EVIDENCE_FULL_SAMPLE 16u
/* Full-size packets (counted, so 1/EVIDENCE_FULL_SAMPLE of those sent) that make a family one
 * that could have shown big packets. */
#define EVIDENCE_FULL_MIN UINT64_C(8)
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
/* Sockets made ahead in the daemon's own namespace (16 KiB of ring each, in the kernel): the two
 * ends of a new veth pair are watched at once. Pods keep none. */
#define EVIDENCE_SPARE 2u
/* With the observer, what a window or a total reads may be this old: one batch read of its maps
 * serves every device that asks within it. */
#define EVIDENCE_FRESH_USEC (100 * USEC_PER_MSEC)

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
        uint64_t full[_EVIDENCE_FAMILY_MAX]; /* at the old ceiling, of the 1/EVIDENCE_FULL_SAMPLE passed */
        uint64_t missed; /* big packets the socket had no room for: direction and family unknown */
} EvidenceCounts;

/* For `auto` (auto-size.h), per size (sizes.h's order: GSO IPv6 = sent IPv6, GRO IPv6 = received
 * IPv6, and the same for IPv4): the packets of its direction and family longer than len[i] (0: not
 * counted), since that was set. Only a device whose search counts has one (Evidence.above). */
typedef struct EvidenceAbove {
        uint32_t len[SIZES_COUNT];
        uint64_t count[SIZES_COUNT];
        /* with the observer, of count[] of the GRO sizes (received), per family ([i / 2]), those
         * dropped after on this host: delivered is the difference */
        uint64_t dropped[_EVIDENCE_FAMILY_MAX];
} EvidenceAbove;

typedef enum EvidenceVerdict {
        EVIDENCE_UNKNOWN,       /* no window that showed anything yet */
        EVIDENCE_EFFECTIVE,     /* big packets came in a raised family, and none is not in effect */
        EVIDENCE_NOT_EFFECTIVE, /* a raised family (or, none raised, the device) had full-size packets, no big one */
        _EVIDENCE_VERDICT_MAX,
        _EVIDENCE_VERDICT_INVALID = -EINVAL,
} EvidenceVerdict;

/* What a window over the observer's counts starts from: the part of its struct observer_dev that
 * a window's counts are made of (counts_of()). */
typedef struct EvidenceBase {
        uint64_t big[2][2];  /* [direction][family], as observer_dev's */
        uint64_t full[2][2];
} EvidenceBase;

/* A watch's packet socket and its ring (without the observer: at most EVIDENCE_WATCHED_MAX). */
typedef struct EvidenceRing {
        int fd;         /* -1: waiting for it */
        unsigned block; /* the next to read */
        uint64_t duration_usec; /* while waiting: how long it lasts once its socket comes */
        uint64_t settle_usec;   /* ending: when the kernel has handed over its last block (CLOCK_MONOTONIC) */
        struct event *io;
        uint8_t *ring; /* EVIDENCE_BLOCKS blocks, mapped */
} EvidenceRing;

/* One device's record (device.h holds a pointer), made when it is first watched. With the
 * observer, a window is its base (or none: from zero) and its end, counted in the kernel, and
 * read when someone asks or it ends; a window that counted nothing and judged nothing leaves
 * nothing behind (the record goes). 72 bytes: its counts, its base and its ring are apart, made
 * only when there is something to keep in them. */
typedef struct Evidence {
        Device *device;
        /* what its last window counted, or its window over a socket so far: NULL while that is
         * nothing (read it through evidence_counts()) */
        EvidenceCounts *counts;
        uint64_t since_usec; /* CLOCK_REALTIME: when this count began */
        uint64_t until_usec; /* while watched and not waiting: when its window ends (CLOCK_MONOTONIC) */
        union {
                /* with the observer, while watched: where its window starts in the observer's
                 * counts (NULL: from zero: a device new, or that carried no big or full-size
                 * packet since the observer loaded) */
                EvidenceBase *base;
                /* without, while watched: its socket (waiting for it, or counting) */
                EvidenceRing *socket;
        } of;
        /* `auto`'s counts above a length: NULL while its search counts none (evidence_above()) */
        EvidenceAbove *above;
        TAILQ_ENTRY(Evidence) link; /* among the set's watched, or those waiting (while watched) */

        /* the last verdict, and what it was made of */
        EvidenceVerdict verdict : 8;
        uint8_t raised; /* 1 << EvidenceFamily: the families its sizes raised in that window */
        uint8_t quiet;  /* … and those of them not in effect (full-size packets, no big one) */
        bool logged : 1;  /* "not effective" was logged; again only after an effective window */
        bool watched : 1; /* a window runs (or waits for its socket) */
        bool waiting : 1; /* for a socket to be made: the window starts when it comes */
        bool ending : 1;  /* its window is over: waits for the last block of its ring */
} Evidence;

/* Frees d's record (not watched: after evidence_forget(), or its set freed); NULL is a no-op. */
void evidence_release(Device *d);

/* Which families sizes raise above 65536 (GSO or GRO), 1 << EvidenceFamily. */
unsigned evidence_raised(const Sizes *s, bool ipv4);

/* Account one packet that passed the filter: `outgoing` from the packet type, `protocol` the
 * ethertype (host order), `len` its length before the cut. */
void evidence_count(EvidenceCounts *c, bool outgoing, uint16_t protocol, uint32_t len);

/* The same packet for `auto`: which size's direction and family it is of, and whether it is
 * longer than that size's a->len (0: that size is not counted). */
void evidence_count_above(EvidenceAbove *a, bool outgoing, uint16_t protocol, uint32_t len);

/* The verdict of a window (pure), from its counts and the families raised; *ret_quiet gets the
 * raised families not in effect. */
EvidenceVerdict evidence_judge(const EvidenceCounts *c, unsigned raised, unsigned *ret_quiet);

/* The filter the socket carries: accept packets longer than EVIDENCE_BIG, and one in
 * EVIDENCE_FULL_SAMPLE of those of EVIDENCE_FULL bytes or more, cut to one byte. */
struct sock_fprog;
const struct sock_fprog *evidence_filter(void);

/* What the sets of every namespace share: the child that makes their sockets, the one that
 * closes them. Without either (they could not be made) the set does that work in the loop. */
typedef struct EvidenceSockets EvidenceSockets;
int evidence_sockets_new(struct event_base *base, EvidenceSockets **ret);
/* After every set that uses them. NULL is a no-op. */
void evidence_sockets_free(EvidenceSockets *k);
/* The children's pids (tests); -1 without one. */
pid_t evidence_sockets_maker_pid(const EvidenceSockets *k);
pid_t evidence_sockets_closer_pid(const EvidenceSockets *k);

typedef struct EvidenceSet EvidenceSet;

/* `events` gets EVENT_EVIDENCE at the end of each window. The sockets are made in the namespace
 * of the socket `netns_socket` (-1: the daemon's own; it is not taken, and must stay open while
 * the set lives), named by SIOCGSKNS for each request: no descriptor of the namespace is kept.
 * Without `sockets`, nothing is ever watched (-EOPNOTSUPP). */
int evidence_set_new(struct event_base *base, Writer *writer, EventList *events, const Clock *clock,
                     EvidenceSockets *sockets, int netns_socket, EvidenceSet **ret);
/* Count with the eBPF observer (shared by every set, kept by its owner) instead of packet sockets:
 * every device is counted always, a watch is a window over its counts, and any number of devices
 * are watched at once. */
void evidence_set_observer(EvidenceSet *s, Observer *o);
/* Packet sockets after all (the observer could not load), as evidence_set_new() would have been
 * given them; before anything is watched. */
void evidence_set_use_sockets(EvidenceSet *s, EvidenceSockets *sockets, int netns_socket);
Observer *evidence_set_get_observer(const EvidenceSet *s);
/* The observer's key of d: the inode of its namespace and its ifindex. */
uint32_t evidence_netns_of(const EvidenceSet *s, const Device *d);
/* What the observer counted on d since it was loaded (the window fields: tx, rx, largest,
 * by_family, full unsampled), read afresh when older than EVIDENCE_FRESH_USEC. -EOPNOTSUPP without
 * an observer. */
int evidence_totals(EvidenceSet *s, const Device *d, EvidenceCounts *ret);
/* d's counts: its running window's as counted up to now (over the observer: read afresh when
 * older than EVIDENCE_FRESH_USEC; over a socket: as far as its ring was read), else its last
 * window's; zeros when it has no record. `s` NULL: nothing is read afresh (what the record kept). */
void evidence_counts(EvidenceSet *s, const Device *d, EvidenceCounts *ret);

/* What a reader (show, list, metrics, D-Bus) says of d's big packets. */
typedef struct EvidenceView {
        EvidenceCounts counts;  /* evidence_counts()'s */
        uint64_t since_usec;    /* CLOCK_REALTIME: when they began */
        bool watching;
        uint64_t left_usec;     /* watching: the time left of its window (waiting for its socket: all of it) */
        EvidenceVerdict verdict;
        unsigned raised, quiet; /* of the verdict */
} EvidenceView;
/* d's record as a reader sees it at `now_usec` (CLOCK_MONOTONIC); without one, with the observer,
 * what it counted since the observer loaded (since: the load) as a window would, no verdict.
 * -ENOENT: nothing counted it. `s` NULL: nothing is read afresh (a window over the observer's
 * counts shows what it kept: nothing while it runs), and no record, nothing to say. */
int evidence_view(EvidenceSet *s, const Device *d, uint64_t now_usec, EvidenceView *ret);
/* Stops every watch (the records stay with their devices). */
void evidence_set_free(EvidenceSet *s);

/* Watch `d` for `duration_usec` from now — from when its socket comes, if none is ready (a watch
 * running is extended, never shortened; a new one starts a new count). -errno when the socket
 * cannot be set up (nothing is left attached),
 * -EUSERS when EVIDENCE_WATCHED_MAX devices are watched already, -EOPNOTSUPP when counting is off. */
int evidence_watch(EvidenceSet *s, Device *d, uint64_t duration_usec);
/* End d's watch now, without a verdict (a rollback, leaving its policy); EVENT_EVIDENCE goes out. */
void evidence_stop(EvidenceSet *s, Device *d);
/* d goes away: its watch ends silently and its record is freed. */
void evidence_forget(EvidenceSet *s, Device *d);
static inline bool evidence_watching(const Device *d) {
        return d->evidence && d->evidence->watched;
}
/* d's window runs and ends after `t` (CLOCK_MONOTONIC): not over, nor waiting for its last block. */
static inline bool evidence_watching_after(const Device *d, uint64_t t) {
        const Evidence *ev = d->evidence;
        return ev && ev->watched && !ev->waiting && !ev->ending && ev->until_usec > t;
}
size_t evidence_watched(const EvidenceSet *s);
/* Count d's packets longer than above_len[i] for size i from now (evidence_above()'s counts from
 * 0; all 0: none counted, and its room goes); d is watched (its record exists). -ENOENT when it
 * has no record, -ENOMEM. */
int evidence_count_above_from_now(EvidenceSet *s, Device *d, const uint32_t above_len[static SIZES_COUNT]);
/* … what they counted: NULL when nothing is counted. */
static inline const EvidenceAbove *evidence_above(const Device *d) {
        return d->evidence ? d->evidence->above : NULL;
}

/* Read what is queued on every watched socket now (tests, and before a verdict). */
void evidence_drain(EvidenceSet *s);

/* For tests (the engine harness), whose clock is their own: watches without packet sockets. Each
 * watch's descriptor is `make(userdata, d)`'s, one that maps EVIDENCE_BLOCKS blocks of
 * EVIDENCE_BLOCK_SIZE (a memfd) and that the test fills as the kernel fills a TPACKET_V3 ring; it
 * is neither bound nor polled, but read as a socket's ring is, by evidence_drain() and at the
 * window's end. -errno from `make`: the watch fails with it. */
typedef int (*EvidenceTestRing)(void *userdata, const Device *d);
void evidence_set_test_rings(EvidenceSet *s, EvidenceTestRing make, void *userdata);
/* What the window timer does when it fires, now (the fake clock moved). */
void evidence_tick(EvidenceSet *s);
