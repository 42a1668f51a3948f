/* test-auto-size.c — the search of `auto` on a fake clock: its step bounds, its stopping rule, trips,
 * idle devices, ageing ceilings and new bounds; and, for every size a path could break above, that
 * it settles at or below it within a bounded number of steps and trips. Its words are interned:
 * every test ends holding no reference (intern_none_left()). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "auto-size.h"
#include "intern.h"
#include "test-helpers.h"
#include "util.h"

#define SEC UINT64_C(1000000)
#define WINDOW (30 * SEC)
#define T0 (UINT64_C(1764633600) * SEC) /* CLOCK_REALTIME: the search keeps wall-clock times */

static const AutoBounds full = {
        .min = 65536,
        .max = 524280,
        .ceiling_age_usec = 24 * 3600 * SEC,
        .idle_wait_usec = WINDOW,
};

static void assert_format(const AutoSearch *s, uint64_t now, const char *want) {
        char buf[256];
        assert_string_equal(auto_search_format(s, now, buf, sizeof(buf)), want);
}

/* A clean path: the bound itself, at most doubling: 131072, 262144, 524280, each proven. */
static void test_clean_path(void **state) {
        AutoSearch s = {};
        uint64_t now = T0;

        (void) state;
        assert_true(auto_search_begin(&s, &full, 0));
        assert_int_equal(s.phase, AUTO_WATCHING);
        assert_int_equal(auto_search_target(&s), 65536);
        assert_true(auto_search_wants_watch(&s));
        assert_int_equal(auto_search_count_above(&s), 61440); /* 61-64 KiB fill 65536 */
        assert_format(&s, now, "auto: proven 65536, watching for traffic that fills it before trying 131072");

        auto_search_watched(&s, &full, 200, now);
        assert_int_equal(s.phase, AUTO_TRYING);
        assert_int_equal(auto_search_target(&s), 131072);
        assert_int_equal(auto_search_count_above(&s), 65536 + AUTO_LINK_MARGIN);
        assert_format(&s, now, "auto: proven 65536, trying 131072, ceiling 524280");

        now += WINDOW;
        auto_search_passed(&s, &full, 8123, now);
        assert_int_equal(s.proven, 131072);
        assert_int_equal(auto_search_target(&s), 262144);
        assert_format(&s, now, "auto: proven 131072 by 8123 big packets, trying 262144, ceiling 524280");

        now += WINDOW;
        auto_search_passed(&s, &full, 5000, now);
        assert_int_equal(auto_search_target(&s), 524280);
        now += WINDOW;
        auto_search_passed(&s, &full, 4000, now);
        assert_int_equal(s.phase, AUTO_SETTLED);
        assert_int_equal(auto_search_target(&s), 524280);
        assert_false(auto_search_wants_watch(&s));
        assert_int_equal(s.steps, 3);
        assert_int_equal(s.trips, 0);
        assert_int_equal(auto_search_next(&s), 0);
        assert_format(&s, now, "auto: settled at 524280 (the most it tries)");

        /* settled stays settled: time alone changes nothing without a ceiling */
        assert_false(auto_search_tick(&s, &full, now + 100 * 24 * 3600 * SEC));
        assert_int_equal(s.phase, AUTO_SETTLED);
}

/* A policy max: the last step is the max, less than twice the proven size. */
static void test_policy_max(void **state) {
        AutoBounds b = full;
        AutoSearch s = {};
        uint32_t seen[8];
        unsigned n = 0;

        (void) state;
        b.max = 300000;
        auto_search_begin(&s, &b, 0);
        auto_search_watched(&s, &b, AUTO_DEMAND_MIN, T0);
        while (s.phase == AUTO_TRYING && n < 8) {
                seen[n++] = s.trying;
                auto_search_passed(&s, &b, AUTO_PROOF_MIN, T0);
        }
        assert_int_equal(n, 3);
        assert_int_equal(seen[0], 131072);
        assert_int_equal(seen[1], 262144);
        assert_int_equal(seen[2], 300000);
        assert_int_equal(s.phase, AUTO_SETTLED);
        assert_int_equal(s.proven, 300000);

        /* min 200000: it starts there (the operator vouches for it), its first step is the max */
        b.min = 200000;
        assert_true(auto_search_begin(&s, &b, 0));
        assert_int_equal(auto_search_target(&s), 200000);
        assert_int_equal(auto_search_next(&s), 300000);
        /* min == max: nothing to search */
        b.min = b.max = 300000;
        assert_true(auto_search_begin(&s, &b, 0));
        assert_int_equal(s.phase, AUTO_SETTLED);
        assert_int_equal(auto_search_target(&s), 300000);
}

/* A path that breaks above 150000 (each step above trips, each at or below passes): bisection
 * below the first trip, settling once the ceiling is within 1/16 of the proven size. */
static void test_broken_path(void **state) {
        static const uint32_t want[] = {131072, 262144, 196608, 163840, 147456, 155648};
        AutoSearch s = {};
        uint64_t now = T0;
        unsigned n = 0;

        (void) state;
        auto_search_begin(&s, &full, 0);
        auto_search_watched(&s, &full, 100, now);
        while (s.phase != AUTO_SETTLED) {
                assert_true(n < ELEMENTSOF(want));
                if (s.phase == AUTO_WATCHING) {
                        /* after a trip: at the proven size again, watched before the next step */
                        assert_int_equal(auto_search_target(&s), s.proven);
                        auto_search_watched(&s, &full, 100, now);
                        continue;
                }
                assert_int_equal(s.phase, AUTO_TRYING);
                assert_int_equal(s.trying, want[n]);
                assert_true(s.trying <= 2 * s.proven);
                n++;
                now += WINDOW;
                if (s.trying > 150000)
                        auto_search_tripped(&s, &full, "Tcp.RetransSegs", 412 + n, now);
                else
                        auto_search_passed(&s, &full, 1000, now);
        }
        assert_int_equal(n, ELEMENTSOF(want));
        assert_int_equal(s.proven, 147456);
        assert_int_equal(s.ceiling, 155648);
        assert_int_equal(s.trips, 4);
        assert_int_equal(s.steps, 2);
        assert_format(&s, now, "auto: settled at 147456 (155648 tripped Tcp.RetransSegs +418)");

        /* a trip in the middle of the search, as show says it */
        AutoSearch m = {};
        auto_search_begin(&m, &full, 131072);
        m.proven_packets = 8123;
        auto_search_watched(&m, &full, 100, now);
        auto_search_tripped(&m, &full, "Tcp.RetransSegs", 412, now);
        assert_format(&m, now,
                      "auto: proven 131072 by 8123 big packets, watching for traffic that fills it before trying 196608");
        auto_search_watched(&m, &full, 100, now);
        assert_format(&m, now,
                      "auto: proven 131072 by 8123 big packets, trying 196608, ceiling 262144 tripped Tcp.RetransSegs +412");
        /* a trip never raises the ceiling; the first one's counter stays with it */
        m.trying = 300000;
        auto_search_tripped(&m, &full, "Ip.InHdrErrors", 1, now);
        assert_int_equal(m.ceiling, 262144);
        assert_string_equal(m.ceiling_counter, "Tcp.RetransSegs");
        auto_search_done(&m);
        auto_search_done(&s);
}

/* Every size a path could break above: the search settles at or below it, near enough (the
 * ceiling within 1/16 of the proven size, or the bound), never more than doubling, within a
 * bounded number of steps and trips (no retry storm). */
static void test_every_break(void **state) {
        unsigned most_trips = 0, most_windows = 0;

        (void) state;
        for (uint32_t brk = 65536; brk <= 524280 + 1000; brk += 97) {
                AutoSearch s = {};
                unsigned windows = 0;

                auto_search_begin(&s, &full, 0);
                auto_search_watched(&s, &full, 100, T0);
                while (s.phase != AUTO_SETTLED) {
                        if (s.phase == AUTO_WATCHING) {
                                auto_search_watched(&s, &full, 100, T0);
                                continue;
                        }
                        assert_int_equal(s.phase, AUTO_TRYING);
                        assert_true(s.trying > s.proven && s.trying <= 2 * s.proven && s.trying <= full.max);
                        assert_true(s.ceiling == 0 || s.trying < s.ceiling);
                        windows++;
                        if (s.trying > brk)
                                auto_search_tripped(&s, &full, "Tcp.RetransSegs", 1, T0);
                        else
                                auto_search_passed(&s, &full, AUTO_PROOF_MIN, T0);
                        assert_true(windows < 20);
                }
                assert_true(s.proven <= brk);
                if (brk >= full.max)
                        assert_int_equal(s.proven, full.max);
                else
                        assert_true(s.ceiling > brk && s.ceiling - s.proven <= s.proven >> AUTO_STOP_SHIFT);
                assert_int_equal(s.steps + s.trips, windows);
                most_trips = s.trips > most_trips ? s.trips : most_trips;
                most_windows = windows > most_windows ? windows : most_windows;
                auto_search_done(&s);
        }
        /* 3 doublings at most; after the first trip the gap is at most the proven size, and each
         * window halves it until 1/16 of the size: 1 + 4 trips, 3 + 4 windows + the trip's */
        assert_true(most_trips <= 5);
        assert_true(most_windows <= 8);
        print_message("every break: at most %u trips, %u windows\n", most_trips, most_windows);
}

/* An idle device does not step: a watch without traffic that fills the proven size waits, the
 * window first, then twice as long each time, up to an hour; traffic resets the wait. */
static void test_idle(void **state) {
        AutoSearch s = {};
        uint64_t now = T0;

        (void) state;
        auto_search_begin(&s, &full, 0);
        auto_search_watched(&s, &full, AUTO_DEMAND_MIN - 1, now);
        assert_int_equal(s.phase, AUTO_IDLE);
        assert_int_equal(auto_search_target(&s), 65536);
        assert_false(auto_search_wants_watch(&s));
        assert_int_equal(s.retry_usec, now + WINDOW);
        assert_format(&s, now + SEC / 2,
                      "auto: proven 65536, idle (no traffic that fills it; watched again in 30s)");
        assert_false(auto_search_tick(&s, &full, now + WINDOW - 1));
        assert_true(auto_search_tick(&s, &full, now + WINDOW));
        assert_int_equal(s.phase, AUTO_WATCHING);

        uint64_t wait = 2 * WINDOW;
        for (unsigned i = 0; i < 12; i++) {
                now = s.retry_usec > now ? s.retry_usec : now;
                auto_search_tick(&s, &full, now);
                assert_int_equal(s.phase, AUTO_WATCHING);
                auto_search_watched(&s, &full, 0, now);
                assert_int_equal(s.idle_wait_usec, wait);
                assert_int_equal(s.retry_usec, now + wait);
                wait = wait * 2 > AUTO_IDLE_WAIT_MAX_USEC ? AUTO_IDLE_WAIT_MAX_USEC : wait * 2;
        }
        assert_int_equal(s.idle_wait_usec, AUTO_IDLE_WAIT_MAX_USEC);
        assert_int_equal(s.steps, 0);

        /* a clock set back by hours does not make the wait longer than the longest */
        assert_true(auto_search_tick(&s, &full, now - 5 * 3600 * SEC));
        assert_int_equal(s.phase, AUTO_WATCHING);

        /* busy at last: it steps, and the next idle watch waits the window again */
        auto_search_watched(&s, &full, AUTO_DEMAND_MIN, now);
        assert_int_equal(s.phase, AUTO_TRYING);
        assert_int_equal(s.idle_wait_usec, 0);

        /* a window that passes without proof is no step: back to the proven size, as idle */
        auto_search_passed(&s, &full, AUTO_PROOF_MIN - 1, now);
        assert_int_equal(s.phase, AUTO_IDLE);
        assert_int_equal(s.proven, 65536);
        assert_int_equal(auto_search_target(&s), 65536);
        assert_int_equal(s.steps, 0);
        assert_int_equal(s.retry_usec, now + WINDOW);
}

/* A ceiling ages out: a settled search watches again and tries the ceiling once more (one trip per
 * age if the path is still broken; the search goes on up if it is mended); until then it stays. A
 * clock set back does not age it; a ceiling from the future ages from when it is seen. */
static void test_ceiling_ages_out(void **state) {
        AutoBounds b = full;
        AutoSearch s = {};
        uint64_t now = T0;

        (void) state;
        b.ceiling_age_usec = 3600 * SEC;
        auto_search_begin(&s, &b, 131072);
        auto_search_watched(&s, &b, 100, now);
        assert_int_equal(s.trying, 262144);
        now += WINDOW;
        auto_search_tripped(&s, &b, "Tcp.RetransSegs", 412, now);
        assert_int_equal(s.ceiling, 262144);
        assert_int_equal(s.ceiling_usec, now);
        /* say the rest of the search settled it just below */
        s.proven = 250000;
        s.phase = AUTO_SETTLED;
        assert_int_equal(auto_search_next(&s), 0);

        assert_false(auto_search_tick(&s, &b, now + b.ceiling_age_usec - 1));
        /* the clock set back a week: not aged, and it ages from then (not a week and an age) */
        AutoSearch back = s;
        assert_false(auto_search_tick(&back, &b, now - 7 * 24 * 3600 * SEC));
        assert_false(back.reprobe);
        assert_int_equal(back.ceiling_usec, now - 7 * 24 * 3600 * SEC);
        assert_false(auto_search_tick(&back, &b, now - 7 * 24 * 3600 * SEC + b.ceiling_age_usec - 1));
        assert_true(auto_search_tick(&back, &b, now - 7 * 24 * 3600 * SEC + b.ceiling_age_usec));
        assert_true(back.reprobe);
        /* a time far ahead (a damaged file): it ages from the first tick that sees it */
        back = s;
        back.ceiling_usec = UINT64_MAX - 1;
        assert_false(auto_search_tick(&back, &b, now));
        assert_int_equal(back.ceiling_usec, now);
        assert_true(auto_search_tick(&back, &b, now + b.ceiling_age_usec));
        assert_false(s.reprobe);
        now += b.ceiling_age_usec;
        assert_true(auto_search_tick(&s, &b, now));
        assert_int_equal(s.phase, AUTO_WATCHING);
        assert_true(s.reprobe);
        assert_int_equal(s.ceiling, 262144); /* kept: it is what is tried */
        assert_int_equal(auto_search_next(&s), 262144);
        assert_false(auto_search_tick(&s, &b, now + b.ceiling_age_usec)); /* once per age */

        /* still broken: one trip, settled again, the ceiling aging from now */
        AutoSearch broken = auto_search_copy(&s);
        auto_search_watched(&broken, &b, 100, now);
        assert_int_equal(broken.trying, 262144);
        auto_search_tripped(&broken, &b, "Tcp.RetransSegs", 9, now + WINDOW);
        assert_int_equal(broken.phase, AUTO_SETTLED);
        assert_int_equal(broken.ceiling, 262144);
        assert_int_equal(broken.ceiling_usec, now + WINDOW);
        assert_int_equal(broken.trips, s.trips + 1);
        assert_false(broken.reprobe);
        assert_false(auto_search_tick(&broken, &b, now + WINDOW + b.ceiling_age_usec - 1));
        assert_true(auto_search_tick(&broken, &b, now + WINDOW + b.ceiling_age_usec));
        auto_search_done(&broken);

        /* mended: proven at the old ceiling, the ceiling goes, the search goes on up */
        auto_search_watched(&s, &b, 100, now);
        auto_search_passed(&s, &b, 500, now + WINDOW);
        assert_int_equal(s.proven, 262144);
        assert_int_equal(s.ceiling, 0);
        assert_null(s.ceiling_counter); /* and its reference dropped */
        assert_int_equal(intern_refs(), 0);
        assert_false(s.reprobe);
        assert_int_equal(s.phase, AUTO_TRYING);
        assert_int_equal(s.trying, 524280);

        /* a search in probation keeps its step when its ceiling ages */
        AutoSearch t = {};
        auto_search_begin(&t, &b, 131072);
        t.ceiling = 200000;
        t.ceiling_usec = now;
        auto_search_watched(&t, &b, 100, now);
        assert_int_equal(t.trying, 165536);
        auto_search_tick(&t, &b, now + b.ceiling_age_usec);
        assert_int_equal(t.phase, AUTO_TRYING);
        assert_int_equal(t.trying, 165536);
        assert_true(t.reprobe);
        /* … and proven there, the aged ceiling is what comes next */
        auto_search_passed(&t, &b, 100, now + b.ceiling_age_usec);
        assert_int_equal(t.trying, 200000);
        auto_search_done(&t);
        auto_search_done(&s);
}

/* New bounds start the search over, from the largest size proven before within them; the same
 * bounds leave it as it is (a restart, a reload that changed something else). */
static void test_bounds(void **state) {
        AutoBounds b = full;
        AutoSearch s = {};

        (void) state;
        auto_search_begin(&s, &b, 0);
        auto_search_watched(&s, &b, 100, T0);
        auto_search_passed(&s, &b, 100, T0);
        auto_search_tripped(&s, &b, "x", 1, T0);
        AutoSearch before = s;
        assert_false(auto_search_begin(&s, &b, 65536));
        assert_memory_equal(&s, &before, sizeof(s));

        b.max = 200000;
        assert_true(auto_search_begin(&s, &b, s.proven));
        assert_int_equal(s.proven, 131072);
        assert_int_equal(s.ceiling, 0);
        assert_int_equal(s.trips, 0);
        assert_int_equal(auto_search_next(&s), 200000);
        assert_int_equal(s.phase, AUTO_WATCHING);

        /* a hint above the new max: at the max, nothing to search */
        b.max = 100000;
        assert_true(auto_search_begin(&s, &b, 131072));
        assert_int_equal(s.proven, 100000);
        assert_int_equal(s.phase, AUTO_SETTLED);
        assert_format(&s, T0, "auto: settled at 100000 (the most it tries)");
        /* below the min: the min */
        b = full;
        b.min = 90000;
        assert_true(auto_search_begin(&s, &b, 70000));
        assert_int_equal(s.proven, 90000);
        auto_search_done(&s);
}

/* What comes in the wrong phase changes nothing. */
static void test_out_of_phase(void **state) {
        AutoSearch s = {};

        (void) state;
        assert_format(&s, T0, "auto: not begun");
        assert_int_equal(auto_search_next(&s), 0);
        auto_search_begin(&s, &full, 0);
        AutoSearch before = s;
        auto_search_passed(&s, &full, 1000, T0);
        auto_search_tripped(&s, &full, "x", 1, T0);
        assert_memory_equal(&s, &before, sizeof(s));
        auto_search_watched(&s, &full, 100, T0);
        before = s;
        auto_search_watched(&s, &full, 100, T0);
        assert_memory_equal(&s, &before, sizeof(s));

        /* a long counter name is cut, never overflows */
        char name[200];
        memset(name, 'a', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        auto_search_tripped(&s, &full, name, 1, T0);
        assert_int_equal(strlen(s.ceiling_counter), AUTO_COUNTER_MAX - 1);
        char buf[32];
        auto_search_format(&s, T0, buf, sizeof(buf)); /* cut to the buffer */
        assert_int_equal(strlen(buf), sizeof(buf) - 1);
        auto_search_done(&s);
}

static void test_phase_names(void **state) {
        (void) state;
        for (AutoPhase p = 0; p < _AUTO_PHASE_MAX; p++) {
                assert_non_null(auto_phase_to_string(p));
                assert_int_equal(auto_phase_from_string(auto_phase_to_string(p)), p);
        }
        assert_null(auto_phase_to_string(_AUTO_PHASE_MAX));
        assert_int_equal(auto_phase_from_string("bogus"), _AUTO_PHASE_INVALID);
        assert_int_equal(auto_phase_from_string(NULL), _AUTO_PHASE_INVALID);
}

/* No watch could begin (every one taken): the search waits one window, not found idle — its wait
 * does not double, and the first real idle watch after it waits one window too. */
static void test_deferred(void **state) {
        AutoSearch s = {};
        uint64_t now = T0;

        (void) state;
        auto_search_begin(&s, &full, 0);
        for (unsigned k = 0; k < 5; k++) {
                auto_search_deferred(&s, &full, now);
                assert_int_equal(s.phase, AUTO_IDLE);
                assert_true(s.deferred);
                assert_int_equal(s.retry_usec, now + WINDOW);
                assert_int_equal(s.idle_wait_usec, 0);
                assert_format(&s, now, "auto: proven 65536, waiting for a watch (every one is taken; tried again in 30s)");
                assert_false(auto_search_tick(&s, &full, now + WINDOW - 1));
                now += WINDOW;
                assert_true(auto_search_tick(&s, &full, now));
                assert_int_equal(s.phase, AUTO_WATCHING);
                assert_false(s.deferred);
        }
        auto_search_watched(&s, &full, 0, now);
        assert_int_equal(s.idle_wait_usec, WINDOW);
        assert_false(s.deferred);
        /* only a watching search defers */
        AutoSearch t = s;
        auto_search_deferred(&t, &full, now);
        assert_int_equal(t.retry_usec, s.retry_usec);
        assert_false(t.deferred);
}

/* What each decision did, as the journal and Monitor name it. */
static void test_changes(void **state) {
        AutoSearch s = {}, before;
        uint64_t now = T0;
        AutoBounds b = full;

        (void) state;
#define STEP(call, want)                                                     \
        do {                                                                 \
                before = auto_search_numbers(&s);                            \
                call;                                                        \
                assert_int_equal(auto_search_change(&before, &s), (want));   \
        } while (0)
        STEP(auto_search_begin(&s, &b, 0), AUTO_CHANGE_BEGUN);
        STEP(auto_search_watched(&s, &b, 0, now), AUTO_CHANGE_IDLE);
        STEP(auto_search_tick(&s, &b, now + WINDOW), AUTO_CHANGE_NONE); /* watched again: no news */
        assert_int_equal(s.phase, AUTO_WATCHING);
        STEP(auto_search_watched(&s, &b, 100, now), AUTO_CHANGE_TRYING);
        STEP(auto_search_passed(&s, &b, 0, now), AUTO_CHANGE_UNPROVEN);
        s.phase = AUTO_WATCHING;
        STEP(auto_search_watched(&s, &b, 100, now), AUTO_CHANGE_TRYING);
        STEP(auto_search_passed(&s, &b, 1000, now), AUTO_CHANGE_PROVEN); /* and 262144 follows */
        assert_int_equal(s.phase, AUTO_TRYING);
        STEP(auto_search_tripped(&s, &b, "Tcp.RetransSegs", 9, now), AUTO_CHANGE_TRIPPED);
        STEP(auto_search_watched(&s, &b, 100, now), AUTO_CHANGE_TRYING);
        assert_int_equal(s.trying, 196608);
        STEP(auto_search_passed(&s, &b, 1000, now), AUTO_CHANGE_PROVEN);
        STEP(auto_search_tripped(&s, &b, "Tcp.RetransSegs", 9, now), AUTO_CHANGE_TRIPPED);
        while (s.phase != AUTO_SETTLED) {
                if (s.phase == AUTO_WATCHING)
                        auto_search_watched(&s, &b, 100, now);
                else
                        STEP(auto_search_tripped(&s, &b, "Tcp.RetransSegs", 9, now), AUTO_CHANGE_TRIPPED);
        }
        /* the ceiling ages: it is tried once more */
        STEP(auto_search_tick(&s, &b, now + b.ceiling_age_usec), AUTO_CHANGE_REPROBE);
        /* other bounds: a new search */
        b.max = 300000;
        STEP(auto_search_begin(&s, &b, s.proven), AUTO_CHANGE_BEGUN);
        /* nothing at all */
        before = auto_search_numbers(&s);
        assert_int_equal(auto_search_change(&before, &s), AUTO_CHANGE_NONE);
        auto_search_done(&s);
        assert_string_equal(auto_change_to_string(AUTO_CHANGE_REPROBE), "reprobe");
        assert_null(auto_change_to_string(_AUTO_CHANGE_MAX));
#undef STEP
}

/* A search's words are interned and its own: one reference each, taken as a decision sets them and
 * dropped as one clears them, by a new beginning and by auto_search_done(); a copy made with
 * auto_search_copy() holds its own and outlives the search it came from. */
static void test_words_are_held(void **state) {
        AutoBounds b = full;
        AutoSearch s = {};
        char proof[AUTO_PROOF_MAX + 10];

        (void) state;
        auto_search_begin(&s, &b, 131072);
        auto_search_watched(&s, &b, 100, T0);
        auto_search_tripped(&s, &b, "Tcp.RetransSegs", 412, T0);
        auto_search_set_proof(&s, AUTO_PROOF_SENT);
        assert_int_equal(intern_refs(), 2);
        /* the words are the shared copies: one string for every search that says them */
        const char *shared = intern_get("Tcp.RetransSegs");
        assert_ptr_equal(s.ceiling_counter, shared);
        intern_put(shared);
        /* the same words again: no other reference */
        auto_search_set_proof(&s, AUTO_PROOF_SENT);
        assert_int_equal(intern_refs(), 2);
        /* a copy of its own outlives the search */
        AutoSearch copy = auto_search_copy(&s);
        assert_int_equal(intern_refs(), 4);
        auto_search_done(&s);
        assert_null(s.proof);
        assert_int_equal(s.phase, AUTO_NEW);
        assert_string_equal(copy.proof, AUTO_PROOF_SENT);
        assert_string_equal(copy.ceiling_counter, "Tcp.RetransSegs");
        assert_format(&copy, T0,
                      "auto: proven 131072, watching for traffic that fills it before trying 196608");
        /* a copy of its numbers holds nothing */
        AutoSearch numbers = auto_search_numbers(&copy);
        assert_null(numbers.proof);
        assert_null(numbers.ceiling_counter);
        assert_int_equal(numbers.ceiling, copy.ceiling);
        assert_int_equal(intern_refs(), 2);
        /* begun again under other bounds: no ceiling, no proof, nothing held */
        b.max = 200000;
        assert_true(auto_search_begin(&copy, &b, 131072));
        assert_null(copy.proof);
        assert_null(copy.ceiling_counter);
        assert_int_equal(intern_refs(), 0);

        /* words are cut as they were when they were arrays: what a state file may hold */
        memset(proof, 'p', sizeof(proof) - 1);
        proof[sizeof(proof) - 1] = '\0';
        auto_search_set_proof(&s, proof);
        assert_int_equal(strlen(s.proof), AUTO_PROOF_MAX - 1);
        assert_memory_equal(s.proof, proof, AUTO_PROOF_MAX - 1);
        /* none said is none held */
        auto_search_set_proof(&s, "");
        assert_null(s.proof);
        auto_words_set(&s.ceiling_counter, "x", AUTO_COUNTER_MAX);
        auto_words_set(&s.ceiling_counter, NULL, AUTO_COUNTER_MAX);
        assert_null(s.ceiling_counter);
        assert_int_equal(intern_refs(), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_teardown(test_clean_path, intern_none_left),
                cmocka_unit_test_teardown(test_policy_max, intern_none_left),
                cmocka_unit_test_teardown(test_broken_path, intern_none_left),
                cmocka_unit_test_teardown(test_every_break, intern_none_left),
                cmocka_unit_test_teardown(test_idle, intern_none_left),
                cmocka_unit_test_teardown(test_ceiling_ages_out, intern_none_left),
                cmocka_unit_test_teardown(test_bounds, intern_none_left),
                cmocka_unit_test_teardown(test_out_of_phase, intern_none_left),
                cmocka_unit_test_teardown(test_phase_names, intern_none_left),
                cmocka_unit_test_teardown(test_changes, intern_none_left),
                cmocka_unit_test_teardown(test_deferred, intern_none_left),
                cmocka_unit_test_teardown(test_words_are_held, intern_none_left),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
