/* auto-size.c — the search of `auto`: its steps, its stopping rule, trips and ageing. No I/O, no
 * logging, no clock of its own: every time comes in as an argument. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto-size.h"
#include "intern.h"
#include "util.h"

static const char *const auto_phase_table[_AUTO_PHASE_MAX] = {
        [AUTO_NEW] = "new",
        [AUTO_WATCHING] = "watching",
        [AUTO_IDLE] = "idle",
        [AUTO_TRYING] = "trying",
        [AUTO_SETTLED] = "settled",
};

AutoDevice *auto_device_new(unsigned sizes) {
        AutoDevice *a = calloc(1, offsetof(AutoDevice, of) +
                                          (size_t) __builtin_popcount(sizes & SIZE_BITS_ALL) * sizeof(AutoSize));

        if (a)
                a->sizes = sizes & SIZE_BITS_ALL;
        return a;
}

void auto_device_free(AutoDevice *a) {
        if (!a)
                return;
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                if (a->sizes & (1u << i))
                        auto_search_done(auto_device_search(a, i));
        intern_put(a->peer_proof);
        free(a);
}

void auto_words_set(const char **dst, const char *src, size_t size) {
        char cut[AUTO_PROOF_MAX];

        if (size > sizeof(cut))
                size = sizeof(cut);
        if (src && strnlen(src, size) >= size) {
                /* cut as snprintf() cuts: the state file refuses longer ones */
                memcpy(cut, src, size - 1);
                cut[size - 1] = '\0';
                src = cut;
        }
        if (intern_set(dst, strempty(src) ? NULL : src, NULL) < 0) {
                intern_put(*dst); /* no memory: not said, rather than the words of before */
                *dst = NULL;
        }
}

AutoSearch auto_search_copy(const AutoSearch *s) {
        AutoSearch c = *s;

        intern_ref(c.proof);
        intern_ref(c.ceiling_counter);
        return c;
}

void auto_search_done(AutoSearch *s) {
        intern_put(s->proof);
        intern_put(s->ceiling_counter);
        *s = (AutoSearch){};
}

void auto_searches_done(AutoSearches *s) {
        for (unsigned i = 0; i < SIZES_COUNT; i++)
                auto_search_done(&s->size[i]);
        *s = (AutoSearches){};
}

const char *auto_phase_to_string(AutoPhase p) {
        if (p < 0 || p >= _AUTO_PHASE_MAX)
                return NULL;
        return auto_phase_table[p];
}

AutoPhase auto_phase_from_string(const char *s) {
        for (AutoPhase p = 0; p < _AUTO_PHASE_MAX; p++)
                if (streq_ptr(s, auto_phase_table[p]))
                        return p;
        return _AUTO_PHASE_INVALID;
}

static const char *const auto_change_table[_AUTO_CHANGE_MAX] = {
        [AUTO_CHANGE_NONE] = "none",         [AUTO_CHANGE_BEGUN] = "begun",   [AUTO_CHANGE_TRYING] = "trying",
        [AUTO_CHANGE_PROVEN] = "proven",     [AUTO_CHANGE_UNPROVEN] = "unproven",
        [AUTO_CHANGE_TRIPPED] = "tripped",   [AUTO_CHANGE_IDLE] = "idle",     [AUTO_CHANGE_SETTLED] = "settled",
        [AUTO_CHANGE_REPROBE] = "reprobe",
};

const char *auto_change_to_string(AutoChange c) {
        if (c < 0 || c >= _AUTO_CHANGE_MAX)
                return NULL;
        return auto_change_table[c];
}

AutoChange auto_search_change(const AutoSearch *before, const AutoSearch *after) {
        if (after->phase == AUTO_NEW)
                return AUTO_CHANGE_NONE;
        if (before->phase == AUTO_NEW || before->min != after->min || before->max != after->max)
                return AUTO_CHANGE_BEGUN;
        if (before->phase == AUTO_TRYING && after->phase != AUTO_TRYING) {
                if (after->proven == before->trying && after->steps > before->steps)
                        return AUTO_CHANGE_PROVEN;
                if (after->trips > before->trips)
                        return AUTO_CHANGE_TRIPPED;
                return AUTO_CHANGE_UNPROVEN;
        }
        if (before->phase == AUTO_TRYING && after->phase == AUTO_TRYING && after->steps > before->steps)
                return AUTO_CHANGE_PROVEN; /* and the next step follows at once */
        if (after->reprobe && !before->reprobe)
                return AUTO_CHANGE_REPROBE;
        if (after->phase == before->phase)
                return AUTO_CHANGE_NONE;
        switch (after->phase) {
        case AUTO_TRYING:
                return AUTO_CHANGE_TRYING;
        case AUTO_IDLE:
                return AUTO_CHANGE_IDLE;
        case AUTO_SETTLED:
                return AUTO_CHANGE_SETTLED;
        default:
                return AUTO_CHANGE_NONE; /* watched again */
        }
}

static uint32_t clamp_u32(uint32_t v, uint32_t lo, uint32_t hi) {
        return v < lo ? lo : v > hi ? hi : v;
}

bool auto_search_begin(AutoSearch *s, const AutoBounds *b, uint32_t hint) {
        if (s->phase != AUTO_NEW && s->min == b->min && s->max == b->max)
                return false;
        auto_search_done(s);
        *s = (AutoSearch){
                .min = b->min,
                .max = b->max,
                .phase = AUTO_WATCHING,
                .proven = clamp_u32(hint > b->min ? hint : b->min, b->min, b->max),
        };
        if (auto_search_next(s) == 0)
                s->phase = AUTO_SETTLED;
        return true;
}

uint32_t auto_search_next(const AutoSearch *s) {
        uint32_t p = s->proven, t;
        /* twice the proven size, without overflow (sizes are at most 524280) */
        uint32_t twice = p > UINT32_MAX / 2 ? UINT32_MAX : 2 * p;

        if (p == 0 || p >= s->max)
                return 0;
        if (s->ceiling == 0)
                /* nothing tripped: the bound itself, which a clean path takes in the fewest steps */
                t = s->max;
        else if (s->reprobe)
                t = s->ceiling; /* aged: is the path mended? */
        else {
                if (s->ceiling <= p || s->ceiling - p <= p >> AUTO_STOP_SHIFT)
                        return 0;
                t = p + (s->ceiling - p) / 2;
        }
        if (t > twice)
                t = twice;
        return t > p ? t : 0;
}

bool auto_search_wants_watch(const AutoSearch *s) {
        return s->phase == AUTO_WATCHING || s->phase == AUTO_TRYING;
}

uint32_t auto_search_count_above(const AutoSearch *s) {
        if (s->phase == AUTO_TRYING)
                return s->proven + AUTO_LINK_MARGIN;
        return s->proven - (s->proven >> AUTO_STOP_SHIFT);
}

uint32_t auto_search_count_near(const AutoSearch *s) {
        uint32_t floor, slack, t;

        if (s->phase != AUTO_TRYING)
                return auto_search_count_above(s);
        floor = s->proven + AUTO_LINK_MARGIN;
        t = s->trying;
        slack = (t - s->proven) / 4;
        if (slack < AUTO_NEAR_SLACK)
                slack = AUTO_NEAR_SLACK;
        return t > floor + slack ? t - slack : floor;
}

/* Nothing in flight: step if there is one, else settle. */
static void step_or_settle(AutoSearch *s) {
        uint32_t t = auto_search_next(s);

        if (t == 0) {
                s->phase = AUTO_SETTLED;
                s->trying = 0;
                return;
        }
        s->phase = AUTO_TRYING;
        s->trying = t;
}

static void go_idle(AutoSearch *s, const AutoBounds *b, uint64_t now_usec) {
        uint64_t w = s->idle_wait_usec == 0 ? b->idle_wait_usec : s->idle_wait_usec * 2;

        if (w == 0)
                w = 1;
        if (w > AUTO_IDLE_WAIT_MAX_USEC)
                w = AUTO_IDLE_WAIT_MAX_USEC;
        s->idle_wait_usec = w;
        s->retry_usec = now_usec + w;
        s->phase = AUTO_IDLE;
        s->deferred = false;
        s->trying = 0;
}

void auto_search_deferred(AutoSearch *s, const AutoBounds *b, uint64_t now_usec) {
        if (s->phase != AUTO_WATCHING)
                return;
        s->retry_usec = now_usec + (b->idle_wait_usec ?: 1);
        s->phase = AUTO_IDLE;
        s->deferred = true;
        s->trying = 0;
}

bool auto_search_tick(AutoSearch *s, const AutoBounds *b, uint64_t now_usec) {
        AutoPhase was = s->phase;

        /* a ceiling from the future (CLOCK_REALTIME set back by others, or a state file from a
         * host whose clock was ahead) ages from now: else it would wait out the jump, or never */
        if (s->ceiling != 0 && s->ceiling_usec > now_usec)
                s->ceiling_usec = now_usec;
        /* a clock that went back never makes a ceiling older */
        if (s->ceiling != 0 && !s->reprobe && now_usec >= s->ceiling_usec &&
            now_usec - s->ceiling_usec >= b->ceiling_age_usec) {
                /* the ceiling itself is tried once more; it ages again from now */
                s->reprobe = true;
                s->ceiling_usec = now_usec;
                if (s->phase == AUTO_SETTLED && auto_search_next(s) != 0)
                        s->phase = AUTO_WATCHING;
        }
        /* the wait is bounded even when the clock jumped back: at most AUTO_IDLE_WAIT_MAX_USEC */
        if (s->phase == AUTO_IDLE && (now_usec >= s->retry_usec || s->retry_usec - now_usec > AUTO_IDLE_WAIT_MAX_USEC)) {
                s->phase = AUTO_WATCHING;
                s->deferred = false;
        }
        return s->phase != was;
}

void auto_search_watched(AutoSearch *s, const AutoBounds *b, uint64_t packets, uint64_t now_usec) {
        if (s->phase != AUTO_WATCHING)
                return;
        if (auto_search_next(s) == 0) {
                s->phase = AUTO_SETTLED;
                return;
        }
        if (packets < AUTO_DEMAND_MIN) {
                go_idle(s, b, now_usec);
                return;
        }
        s->idle_wait_usec = 0;
        step_or_settle(s);
}

void auto_search_passed(AutoSearch *s, const AutoBounds *b, uint64_t packets, uint64_t now_usec) {
        if (s->phase != AUTO_TRYING)
                return;
        if (packets < AUTO_PROOF_MIN) {
                /* a window without traffic proves nothing: not a step, not a trip */
                go_idle(s, b, now_usec);
                return;
        }
        s->proven = s->trying;
        s->proven_packets = packets;
        auto_search_set_proof(s, NULL); /* the caller says how */
        s->steps++;
        if (s->ceiling != 0 && s->proven >= s->ceiling) {
                /* the aged ceiling passed: the path is mended, nothing above is known to trip */
                s->ceiling = 0;
                s->ceiling_usec = 0;
                auto_words_set(&s->ceiling_counter, NULL, AUTO_COUNTER_MAX);
                s->ceiling_rise = 0;
                s->reprobe = false;
        }
        s->trying = 0;
        s->idle_wait_usec = 0;
        step_or_settle(s);
}

void auto_search_tripped(AutoSearch *s, const AutoBounds *b, const char *counter, uint64_t rise,
                         uint64_t now_usec) {
        if (s->phase != AUTO_TRYING)
                return;
        if (s->ceiling == 0 || s->trying < s->ceiling) {
                s->ceiling = s->trying;
                auto_words_set(&s->ceiling_counter, counter, AUTO_COUNTER_MAX);
                s->ceiling_rise = rise;
        }
        s->ceiling_usec = now_usec; /* ages from its last trip */
        s->reprobe = false;
        s->trips++;
        s->trying = 0;
        s->phase = auto_search_next(s) == 0 ? AUTO_SETTLED : AUTO_WATCHING;
}

static const char *format(const AutoSearch *s, uint64_t now_usec, char *buf, size_t size) {
        char proven[64], ceiling[AUTO_COUNTER_MAX + 64];

        if (s->phase == AUTO_NEW) {
                snprintf(buf, size, "auto: not begun");
                return buf;
        }
        if (s->proven_packets > 0)
                snprintf(proven, sizeof(proven), "%" PRIu32 " by %" PRIu64 " big packets", s->proven, s->proven_packets);
        else
                snprintf(proven, sizeof(proven), "%" PRIu32, s->proven);
        if (s->ceiling != 0)
                snprintf(ceiling, sizeof(ceiling), "%" PRIu32 " tripped %s +%" PRIu64, s->ceiling,
                         s->ceiling_counter ?: "a guard", s->ceiling_rise);

        switch (s->phase) {
        case AUTO_SETTLED:
                if (s->proven >= s->max)
                        snprintf(buf, size, "auto: settled at %" PRIu32 " (the most it tries)", s->proven);
                else if (s->ceiling != 0)
                        snprintf(buf, size, "auto: settled at %" PRIu32 " (%s)", s->proven, ceiling);
                else
                        snprintf(buf, size, "auto: settled at %" PRIu32, s->proven);
                return buf;
        case AUTO_TRYING:
                snprintf(buf, size, "auto: proven %s, trying %" PRIu32 ", ceiling %s", proven, s->trying,
                         s->ceiling != 0 ? ceiling : "");
                if (s->ceiling == 0)
                        snprintf(buf + strlen(buf), size - strlen(buf), "%" PRIu32, s->max);
                return buf;
        case AUTO_IDLE: {
                uint64_t left = s->retry_usec > now_usec ? s->retry_usec - now_usec : 0;
                snprintf(buf, size,
                         s->deferred ? "auto: proven %s, waiting for a watch (every one is taken; tried again in %" PRIu64 "s)"
                                     : "auto: proven %s, idle (no traffic that fills it; watched again in %" PRIu64 "s)",
                         proven, (left + USEC_PER_SEC - 1) / USEC_PER_SEC);
                return buf;
        }
        case AUTO_WATCHING:
                snprintf(buf, size, "auto: proven %s, watching for traffic that fills it before trying %" PRIu32,
                         proven, auto_search_next(s));
                return buf;
        case AUTO_NEW:
        case _AUTO_PHASE_MAX:
        case _AUTO_PHASE_INVALID:
                break;
        }
        snprintf(buf, size, "auto: ?");
        return buf;
}

/* The search's words, then how its proven size was proven. */
static const char *with_proof(const AutoSearch *s, char *buf, size_t size) {
        size_t n = strlen(buf);

        if (s->proof && s->proven_packets > 0 && n + 1 < size)
                snprintf(buf + n, size - n, "; proof: %s", s->proof);
        return buf;
}

const char *auto_search_format(const AutoSearch *s, uint64_t now_usec, char *buf, size_t size) {
        format(s, now_usec, buf, size);
        return with_proof(s, buf, size);
}
