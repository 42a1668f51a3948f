/* bigtcpctl-evidence.h — `bigtcpctl watch DEV [--for T]`, and the big-packet counts in words. */
#pragma once

#include "bigtcpctl-util.h"

/* A device's big_packets ("54954 sent above 64 KiB, largest 183962; …") and its verdict ("yes, …",
 * "no: …"), each NULL when the daemon has none. 0, or -ENOMEM. */
int evidence_text(json_object *d, char **ret_packets, char **ret_effective);

/* "ipv4 and ipv6", from a list of family names, appended to *s. 0, or -ENOMEM. */
int evidence_families_text(json_object *a, char **s);

int verb_watch(Ctl *c, char **args, size_t n);
