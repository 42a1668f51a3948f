/* varlink-buffer.c — what a varlink connection holds: its buffers of calls read and of replies not
 * sent yet, grown and trimmed, the replies queued and sent without waiting, and every byte of them
 * counted against the connection's UID and against all UIDs other than 0 together, with the marks
 * that hold a UID's calls and the release once it is below them again (varlink.c says why). */
#include <json-c/json.h>
#include <sys/socket.h>

#include <malloc.h>

#include "varlink-internal.h"

#define BUFFER_KEEP_MAX (256u * 1024u) /* root's larger buffers are freed once empty; others' all */
#define BUFFER_SHRINK_MIN (64u * 1024u) /* others' buffers above this shrink once less than half full */
#define BUFFER_SLACK_MAX (1024u * 1024u) /* growth: a quarter more than needed, at most this more */
/* A reply written piece by piece (ListDevices of 10000 devices: 7 MB) goes out while it is made
 * once this much of it waits: the buffer stays small and warm instead of growing (and faulting in)
 * to the whole reply. */
#define FLUSH_AT (64u * 1024u)
#define TRIM_AFTER (4u * 1024u * 1024u)   /* others' buffers once held this much: trimmed when freed */

size_t varlink_out_pending(const Connection *c) {
        return c->out_len - c->out_start;
}

/* Unread replies of the connection's UID, or of everyone but root, over their marks: its calls
 * wait. Root's are never held for others. */
bool varlink_uid_over_output(const Connection *c) {
        return c->uid != 0 && (c->usage->out_bytes >= VARLINK_OUTPUT_UID_HIGH_WATER ||
                               c->server->unprivileged_out >= VARLINK_OUTPUT_UNPRIVILEGED_HIGH_WATER);
}

/* The same for calls read and not handled yet: nothing more is read. Below its own share a UID is
 * read whatever the others hold. */
static bool input_over(size_t mine, size_t all) {
        return mine >= VARLINK_INPUT_UID_MAX || (mine >= VARLINK_INPUT_UID_SHARE && all >= VARLINK_INPUT_UNPRIVILEGED_MAX);
}

bool varlink_uid_over_input(const Connection *c) {
        return c->uid != 0 && input_over(c->usage->in_bytes, c->server->unprivileged_in);
}

/* Connections held for their UID's share (uid 0: of every UID): let them go on. */
static void release_held(VarlinkServer *s, uid_t uid) {
        Connection *c;
        LIST_FOREACH(c, &s->connections, link)
        if (c->held && (uid == 0 || c->uid == uid) && !varlink_uid_over_output(c) &&
            !varlink_uid_over_input(c)) {
                c->held = false;
                event_active(c->process_event, EV_TIMEOUT, 0);
        }
}

/* Bytes of the buffer of replies (`out`) or calls (`in`) allocated or freed. */
void varlink_account(Connection *c, bool out, size_t added, size_t removed) {
        VarlinkServer *s = c->server;
        size_t *mine = out ? &c->usage->out_bytes : &c->usage->in_bytes;
        size_t *all = out ? &s->unprivileged_out : &s->unprivileged_in;
        size_t mark = out ? VARLINK_OUTPUT_UID_HIGH_WATER : VARLINK_INPUT_UID_MAX;
        size_t all_mark = out ? VARLINK_OUTPUT_UNPRIVILEGED_HIGH_WATER : VARLINK_INPUT_UNPRIVILEGED_MAX;
        bool was_over = out ? *mine >= mark : input_over(*mine, *all), all_was_over = *all >= all_mark;

        *mine = *mine + added - removed;
        if (c->uid == 0)
                return;
        *all = *all + added - removed;
        if (s->unprivileged_in + s->unprivileged_out >= TRIM_AFTER)
                s->trim_owed = true;
        if (removed == 0)
                return;
#ifdef __GLIBC__
        /* Everything others than root made the daemon hold is freed: give it back to the system
         * (malloc keeps freed memory below its mmap threshold, which grows with what was freed). */
        if (s->trim_owed && s->unprivileged_in + s->unprivileged_out == 0) {
                s->trim_owed = false;
                (void) malloc_trim(0);
        }
#endif
        if (all_was_over && *all < all_mark)
                release_held(s, 0);
        else if (was_over && (out ? *mine < mark : !input_over(*mine, *all)))
                release_held(s, c->uid);
}

/* A buffer's size for `needed` bytes: a quarter more (at most BUFFER_SLACK_MAX), in pages; never
 * twice what is needed, which would let a UID's allocations reach twice its caps. */
size_t varlink_buffer_size_for(size_t needed) {
        size_t slack = needed / 4 < BUFFER_SLACK_MAX ? needed / 4 : BUFFER_SLACK_MAX;
        return (needed + slack + 4095) & ~(size_t) 4095;
}

/* Make the buffer `size` bytes (0: free it), its contents kept (they must fit), and account for it. */
int varlink_buffer_resize(Connection *c, bool out, size_t size) {
        char **buf = out ? &c->out : &c->in;
        size_t *cur = out ? &c->out_size : &c->in_size;

        if (size == *cur)
                return 0;
        if (size == 0) {
                *buf = mfree(*buf);
        } else {
                char *n = realloc(*buf, size);
                if (!n)
                        return -ENOMEM;
                *buf = n;
        }
        if (size > *cur)
                varlink_account(c, out, size - *cur, 0);
        else
                varlink_account(c, out, 0, *cur - size);
        *cur = size;
        return 0;
}

/* An empty buffer of others than root goes (root's is kept up to BUFFER_KEEP_MAX); a large one
 * less than half full shrinks to what it holds. `start` and `len` bound what it holds. */
void varlink_buffer_trim(Connection *c, bool out) {
        char *buf = out ? c->out : c->in;
        size_t *start = out ? &c->out_start : &c->in_start, *len = out ? &c->out_len : &c->in_len;
        size_t size = out ? c->out_size : c->in_size, held = *len - *start;

        if (held == 0 && (c->uid != 0 || size > BUFFER_KEEP_MAX)) {
                *start = *len = 0;
                if (!out)
                        c->in_scanned = 0;
                (void) varlink_buffer_resize(c, out, 0);
                return;
        }
        if (c->uid == 0 || size <= BUFFER_SHRINK_MIN || held * 2 >= size)
                return;
        if (*start > 0) {
                memmove(buf, buf + *start, held);
                if (!out)
                        c->in_scanned -= *start;
                *len = held;
                *start = 0;
        }
        (void) varlink_buffer_resize(
                c, out, varlink_buffer_size_for(held)); /* a failed shrink keeps the larger one */
}

/* Sends what it can without waiting. 0, or -errno when the connection is broken. */
int varlink_connection_flush(Connection *c) {
        while (varlink_out_pending(c) > 0) {
                ssize_t n = send(c->fd, c->out + c->out_start, varlink_out_pending(c),
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        return -errno;
                }
                c->out_start += (size_t) n;
        }
        if (c->out_start == c->out_len)
                c->out_start = c->out_len = 0;
        /* An idle connection keeps no big buffer from a big reply. */
        varlink_buffer_trim(c, true);
        return 0;
}

/* Queues bytes of a message; `varlink_connection_append()` queues a whole one, with its NUL. */
int varlink_connection_write(Connection *c, const char *data, size_t size) {
        if (size == 0)
                return 0;
        if (varlink_out_pending(c) >= (c->flush_at ?: FLUSH_AT)) {
                (void) varlink_connection_flush(c); /* a broken connection is found where it is waited on */
                /* a client that does not read is tried again only after as much more */
                c->flush_at = varlink_out_pending(c) + FLUSH_AT;
        }
        /* Compact first: the start of the buffer is sent already. Root's only once what is sent is
         * at least what waits, so that each byte moved was paid for by one sent (a slow reader of
         * a 7 MB reply made every write move megabytes); others' always, as their caps count what
         * their buffers hold allocated (root's cap counts what waits). */
        if (c->out_start > 0 && c->out_len + size > c->out_size &&
            (c->uid != 0 || c->out_start >= varlink_out_pending(c))) {
                memmove(c->out, c->out + c->out_start, varlink_out_pending(c));
                c->out_len -= c->out_start;
                c->out_start = 0;
        }
        if (c->out_len + size > c->out_size) {
                int r = varlink_buffer_resize(c, true, varlink_buffer_size_for(c->out_len + size));
                if (r < 0)
                        return r;
        }
        memcpy(c->out + c->out_len, data, size);
        c->out_len += size;
        return 0;
}

int varlink_connection_append(Connection *c, const char *data, size_t size) {
        int r = varlink_connection_write(c, data, size);
        return r < 0 ? r : varlink_connection_write(c, "", 1);
}

/* Appends one message; takes ownership of `msg`. */
int varlink_connection_send(Connection *c, json_object *msg) {
        _cleanup_(json_object_putp) json_object *o = msg;
        const char *text;
        size_t len;

        if (!o)
                return -ENOMEM;
        text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                 &len);
        if (!text)
                return -ENOMEM;
        return varlink_connection_append(c, text, len);
}
