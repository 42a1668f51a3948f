/* fuzz.h — what every fuzz target shares: libFuzzer's entry points, a quiet log, and checks
 * that stop the run (a broken promise of the API is a finding, like a crash). */
#pragma once

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The daemon's log goes to stderr, which is libFuzzer's. Off unless FUZZ_LOG_LEVEL names a
 * level ("debug" also runs every log line's formatting on fuzzed data). */
static inline void fuzz_quiet(void) {
        static bool done;
        if (done)
                return;
        done = true;
        const char *e = getenv("FUZZ_LOG_LEVEL");
        int l = e ? log_level_from_string(e) : -EINVAL;
        log_max_level = l >= 0 ? l : -1;
}

#define FUZZ_ASSERT(expr)                                                                                   \
        do {                                                                                                \
                if (!(expr)) {                                                                              \
                        fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", __FILE__, __LINE__, __func__,  \
                                #expr);                                                                     \
                        abort();                                                                            \
                }                                                                                           \
        } while (0)

/* Keep a value alive so that the read that produced it is not optimized away. */
#define FUZZ_USE(x)                                                                                         \
        do {                                                                                                \
                __typeof__(x) _v_ = (x);                                                                    \
                __asm__ volatile("" : : "r"(_v_) : "memory");                                               \
        } while (0)

/* JSON the daemon sends (varlink, D-Bus, state file) holds no NaN or Infinity: json-c prints
 * them as bare words that other JSON parsers refuse. */
static inline void fuzz_check_json(json_object *o) {
        switch (json_object_get_type(o)) {
        case json_type_double:
                if (!isfinite(json_object_get_double(o))) {
                        fprintf(stderr, "non-finite number in daemon output: %s\n",
                                json_object_to_json_string(o));
                        abort();
                }
                break;
        case json_type_object: {
                json_object_object_foreach(o, key, val) {
                        (void) key;
                        fuzz_check_json(val);
                }
                break;
        }
        case json_type_array:
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        fuzz_check_json(json_object_array_get_idx(o, i));
                break;
        case json_type_null:
        case json_type_boolean:
        case json_type_int:
        case json_type_string:
                break;
        }
}
