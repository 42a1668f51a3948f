/* log-fields.c — a LogFields as the fields of a journal entry. */
#include "log-fields.h"

void log_fields_add(LogEntry *e, const void *fields) {
        const LogFields *f = fields;

        if (f->message_id)
                log_entry_field(e, "MESSAGE_ID=%s", f->message_id);
        if (f->ifname)
                log_entry_field(e, "INTERFACE=%s", f->ifname);
        if (f->ifindex > 0)
                log_entry_field(e, "BIGTCPD_IFINDEX=%d", f->ifindex);
        if (f->netns)
                log_entry_field(e, "BIGTCPD_NETNS=%s", f->netns);
        if (f->policy)
                log_entry_field(e, "BIGTCPD_POLICY=%s", f->policy);
        if (f->cause)
                log_entry_field(e, "BIGTCPD_CAUSE=%s", f->cause);
        for (unsigned i = 0; i < SIZES_COUNT; i++) {
                if (i >= 2 && !f->ipv4)
                        break;
                if (f->from)
                        log_entry_field(e, "BIGTCPD_FROM_%s=%u", size_field_name(i), sizes_get(f->from, i));
                if (f->to)
                        log_entry_field(e, "BIGTCPD_TO_%s=%u", size_field_name(i), sizes_get(f->to, i));
        }
        if (f->counter) {
                log_entry_field(e, "BIGTCPD_COUNTER=%s", f->counter);
                log_entry_field(e, "BIGTCPD_RISE=%llu", f->rise);
                log_entry_field(e, "BIGTCPD_THRESHOLD=%g", f->threshold);
        }
        if (f->has_digest)
                log_entry_field(e, "BIGTCPD_POLICY_DIGEST=%016llx", (unsigned long long) f->digest);
}
