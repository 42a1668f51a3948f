/* state.h — the runtime state file: the original sizes of every device bigtcpd has written, so
 * that they survive a restart. Written atomically (temporary file, fsync, rename). */
#pragma once

#include <stddef.h>

#include "device.h"
#include "guard.h"

typedef struct StateEntry {
        int ifindex;
        char *ifname;
        Sizes original;
        unsigned written_families;
        DeviceState state;       /* _DEVICE_STATE_INVALID when the file does not say */
        bool has_last_good;
        Sizes last_good;
        Sizes held_desired;      /* rolled-back */
        Probation *probation;    /* in probation when the daemon stopped */
        RollbackRecord *last_rollback;
} StateEntry;

/* Write every device with recorded originals to <dir>/state.json. */
int state_save(const char *dir, const DeviceTable *t);

/* Read <dir>/state.json. A missing file yields no entries and 0; a corrupt one -EBADMSG. */
int state_load(const char *dir, StateEntry **ret, size_t *ret_n);
void state_entries_free(StateEntry *e, size_t n);

/* Parse a state file held in memory (for the loader and the fuzzer). Each ifindex appears once
 * in the result: of several entries for one device, the first is kept. */
int state_parse(const char *data, size_t size, StateEntry **ret, size_t *ret_n);
