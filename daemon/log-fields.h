/* log-fields.h — what bigtcpd's journal entries say beyond their line: the kind of decision
 * (MESSAGE_ID=) and the device, policy, sizes and counter it names (INTERFACE=, BIGTCPD_…), and
 * the device-scoped log lines that carry them (journalctl INTERFACE=eth0, MESSAGE_ID=…). */
#pragma once

#include "log.h"
#include "sizes.h"

/* The kinds of decision, as MESSAGE_ID= of their journal entries; conf/bigtcpd.catalog explains
 * each (journalctl -x). Never change one: operators' queries and alerts name them. */
#define LOG_ID_WRITE "2a9fb0c4cdfd484aafda54bda68aa087"          /* sizes written for a policy */
#define LOG_ID_RESTORE "0702783efb2246289309866350485889"        /* original sizes given back */
#define LOG_ID_ROLLBACK "dead71caba744ee4a84e55d96f6e3464"       /* a guard tripped, or an operator */
#define LOG_ID_WRITE_REFUSED "3fba7c4304b84ea4bde8f1c41c783336"  /* the kernel refused a write */
#define LOG_ID_APPLIED "72d1b1559ad14069a32800168d2cc2bb"        /* probation passed */
#define LOG_ID_ROLLOUT_HALTED "d3663512cc3f4aedb40316fcd238eb9c" /* a rollout stopped by a rollback */
#define LOG_ID_POLICY_REFUSED "fd75e126c40349528329d57c71003684" /* a new policy with errors */
#define LOG_ID_POLICY_BROKEN "fc9081acc4d445a1bc5ac9bf4c79d080"  /* started with a policy with errors */
#define LOG_ID_POLICY_LOADED "5507a56662bc4cc79f8195230d4c6f35"  /* a policy in force */

/* What a journal entry carries beyond MESSAGE and PRIORITY; every member may be unset. */
typedef struct LogFields {
        const char *message_id; /* LOG_ID_… */
        const char *ifname;     /* INTERFACE= */
        int ifindex;            /* BIGTCPD_IFINDEX= when > 0 */
        const char *netns;      /* BIGTCPD_NETNS= (a device of another namespace) */
        const char *policy;     /* BIGTCPD_POLICY= */
        const char *cause;      /* BIGTCPD_CAUSE= (of a write) */
        const Sizes *from, *to; /* BIGTCPD_FROM_GSO_MAX_SIZE=, BIGTCPD_TO_… (the IPv4 two with `ipv4`) */
        bool ipv4;
        const char *counter;      /* a rollback's: BIGTCPD_COUNTER=, BIGTCPD_RISE=, BIGTCPD_THRESHOLD= */
        unsigned long long rise;
        double threshold;
        uint64_t digest; /* BIGTCPD_POLICY_DIGEST= when `has_digest` */
        bool has_digest;
} LogFields;

/* Adds the fields of a LogFields (the LogFieldsFn of the macros below). */
void log_fields_add(LogEntry *e, const void *fields);

/* Device-scoped: every line starts with the device name, after its namespace's ("cni-1/eth0")
 * when that is not the daemon's own. */
#define log_fields_full_errno(level, error, fields, ...)                                          \
        ({                                                                                       \
                int _l_ = (level), _e_ = (error);                                                \
                (log_max_level >= _l_) ? log_fields_internal(_l_, _e_, __FILE__, __LINE__, __func__, log_fields_add, \
                                                             (fields), __VA_ARGS__)              \
                                       : -(_e_ < 0 ? -_e_ : _e_);                                \
        })
/* A device's fields, with more set by the caller: LOG_DEV_FIELDS(d, .message_id = …). */
#define LOG_DEV_FIELDS(d, ...)                                                                   \
        (&(LogFields){.ifname = (d)->ifname[0] ? (d)->ifname : NULL,                             \
                      .ifindex = (d)->ifindex,                                                   \
                      .netns = (d)->netns ? (d)->netns->name : NULL,                             \
                      .policy = (d)->match.policy_name,                                                \
                      __VA_ARGS__})
#define log_dev_fields_errno(d, level, e, fields, fmt, ...)                                      \
        log_fields_full_errno(level, e, fields, "%s%s%s: " fmt, (d)->netns ? (d)->netns->name : "", \
                              (d)->netns ? "/" : "", (d)->ifname[0] ? (d)->ifname : "?", ##__VA_ARGS__)
#define log_dev_full_errno(d, level, e, fmt, ...)                                                \
        log_dev_fields_errno(d, level, e, LOG_DEV_FIELDS(d), fmt, ##__VA_ARGS__)
#define log_dev_debug(d, fmt, ...) log_dev_full_errno(d, LOG_DEBUG, 0, fmt, ##__VA_ARGS__)
#define log_dev_info(d, fmt, ...) log_dev_full_errno(d, LOG_INFO, 0, fmt, ##__VA_ARGS__)
#define log_dev_notice(d, fmt, ...) log_dev_full_errno(d, LOG_NOTICE, 0, fmt, ##__VA_ARGS__)
#define log_dev_warning(d, fmt, ...) log_dev_full_errno(d, LOG_WARNING, 0, fmt, ##__VA_ARGS__)
#define log_dev_warning_errno(d, e, fmt, ...) log_dev_full_errno(d, LOG_WARNING, e, fmt, ##__VA_ARGS__)
#define log_dev_error(d, fmt, ...) log_dev_full_errno(d, LOG_ERR, 0, fmt, ##__VA_ARGS__)
#define log_dev_error_errno(d, e, fmt, ...) log_dev_full_errno(d, LOG_ERR, e, fmt, ##__VA_ARGS__)
