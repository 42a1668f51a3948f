/* policy-record.h — the last policy that ran, kept beside the state in the runtime directory:
 * every file's name and text, and the set's digest. A start whose policy files have errors runs
 * it instead of refusing to start (policy-reload.c); nothing else reads it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define POLICY_RECORD_FILE "policy.json"
/* A record larger than this is neither written nor read (a policy of many large files). */
#define POLICY_RECORD_MAX (16u * 1024u * 1024u)

/* Record `set` in `dir`: its files are read again, and recorded only when they still make up
 * its digest (-ESTALE otherwise: one changed meanwhile, and the reload that follows records it).
 * -EFBIG above POLICY_RECORD_MAX; the -errno of reading or writing. Does not log. */
int policy_record_save(const char *dir, const PolicySet *set);

/* The recorded policy, parsed again into a new set (not scoped yet), and when it was recorded
 * (CLOCK_REALTIME, µs). -ENOENT when there is none; -EBADMSG when the record is damaged or its
 * texts do not make up its digest; -EINVAL when its texts do not parse (a record of another
 * version); another -errno. Does not log. */
int policy_record_load(const char *dir, PolicySet **ret, uint64_t *ret_realtime_usec);
