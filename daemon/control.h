/* control.h — what the control plane (varlink.c, dbus.c) may read from the daemon and ask of
 * it. Transports stay thin: they parse and check a call, call one of these, and send back what
 * it returns. Everything here runs in the daemon's one event loop. */
#pragma once

#include <json-c/json.h>

#include "manager.h"

/* JSON building blocks; the schema is the one of io.bigtcpd.Manager.varlink. */
json_object *control_sizes_json(const Sizes *s, bool ipv4);
json_object *control_device_json(const Manager *m, const Device *d);
json_object *control_status_json(const Manager *m);

/* Every device, sorted by ifindex so that output is stable; free the array (not the devices). */
int control_sorted_devices(const Manager *m, Device ***ret, size_t *ret_n);

/* Devices by ifname (NULL: all), sorted by ifindex. -ENODEV when `ifname` is unknown. */
int control_list_devices(const Manager *m, const char *ifname, json_object **ret);

/* What a policy would do on this host, device by device: the loaded one when `policy_yaml` is
 * NULL, else the YAML text given (parsed as file `source`). -EINVAL with `errs` filled when the
 * text has errors. */
int control_plan(const Manager *m, const char *policy_yaml, const char *source, json_object **ret,
                 PolicyErrors *errs);

/* Parse `policy_yaml` like a policy file; 0 when clean, -EINVAL with every error in `errs`. */
int control_validate(const char *policy_yaml, const char *source, PolicyErrors *errs);
json_object *control_errors_json(const PolicyErrors *errs);

/* Privileged operations. Reload returns once the new policy is in force (its writes are
 * queued), -EINVAL with `errs` when refused. Rollback: one device (or all managed ones when
 * `ifname` is NULL) back to its last-known-good sizes now, held there. Retry releases a
 * rolled-back or failed device. -ENODEV unknown device; -EALREADY nothing to do. */
int control_reload(Manager *m, PolicyErrors *errs);
int control_rollback(Manager *m, const char *ifname);
int control_retry(Manager *m, const char *ifname);

/* An event as Monitor sends it (the schema of io.bigtcpd.Manager.varlink), or NULL for events
 * that are not for operators. */
json_object *control_event_json(const Event *e);
