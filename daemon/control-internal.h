/* control-internal.h — what the files of the control surface (control.c, control-json.c,
 * control-plan.c) share, and no other file includes. */
#pragma once

#include "control.h"

/* The engines, for i < control_namespaces(): bigtcpd's own namespace's (0), then each other's. */
size_t control_namespaces(const Control *c);
Engine *control_engine_at(const Control *c, size_t i);
/* The engine of bigtcpd's own namespace, the set's first entry: the one of a device named without
 * a namespace, of GetStatus' top-level figures and of the loop. */
Engine *control_home(const Control *c);

/* What counts packets, as GetStatus and /metrics name it: "ebpf", "packet-socket" or "none". */
const char *control_observer_kind(const Engine *e);
/* A string from the kernel (a device name, an extended ack), made valid UTF-8 for JSON; NULL for
 * NULL. */
json_object *control_kernel_string(const char *s);
/* A string from the kernel, made valid UTF-8; NULL as null. */
void control_kernel_string_write(JsonWriter *w, const char *s);
/* `"key": {sizes}`: the IPv4 pair only when `ipv4`. */
void control_sizes_write(JsonWriter *w, const char *key, const Sizes *s, bool ipv4);
/* A device's big_packets (IDL BigPackets): its last or running watch's counts, else (`s` not
 * NULL) the eBPF observer's since it was loaded, else null (evidence_view()). `now`:
 * CLOCK_MONOTONIC. */
void control_big_packets_write(JsonWriter *w, uint64_t now, EvidenceSet *s, const Device *d);
/* A device's "effective": whether its watch found big packets effective, null without a verdict. */
void control_effective_write(JsonWriter *w, const Device *d);
/* Where size i's search of `auto` stands (IDL AutoSearch); `now_usec`: CLOCK_REALTIME. */
void control_auto_search_write(JsonWriter *w, const AutoSearch *s, unsigned i, uint64_t now_usec);
/* Where each policy of `s` is in force, and for a canary this host's cohort (Plan's and
 * GetStatus' "policies"). */
json_object *control_policy_scopes_json(const PolicySet *s);
/* One device of Plan's reply: what `p` (the policy of the plan's set it matches, NULL: none) would
 * make of it. */
json_object *control_plan_device(Device *d, const Policy *p, bool v4);
