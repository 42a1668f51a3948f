/* bigtcpctl-operate.h — the operator's verbs on devices: rollback, retry. */
#pragma once

#include "bigtcpctl-util.h"

/* What an operation's reply says it did, a line per device: "v0 MOVED_VERB: gso_max_size 185000
 * → 65536, …" (MOVED_VERB NULL: "v0: …"), then the writes refused and those still on their way.
 * EXIT_FAILED when a write was refused, else EXIT_OK. */
int print_changes(json_object *reply, const char *moved_verb);

int verb_rollback(Ctl *c, char **args, size_t n);
int verb_retry(Ctl *c, char **args, size_t n);
