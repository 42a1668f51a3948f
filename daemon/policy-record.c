/* policy-record.c — the last policy that ran, kept in the runtime directory as
 * {"digest": "…", "time_usec": …, "files": [{"path": "…", "text": "…"}, …]}. */
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "policy-record.h"
#include "util.h"

static int record_path(const char *dir, char **ret) {
        return asprintf(ret, "%s/" POLICY_RECORD_FILE, dir) < 0 ? -ENOMEM : 0;
}

int policy_record_save(const char *dir, const PolicySet *set) {
        _cleanup_(json_object_putp) json_object *o = json_object_new_object();
        _cleanup_(freep) char *path = NULL;
        json_object *files = json_object_new_array();
        uint64_t digest = POLICY_DIGEST_EMPTY;
        size_t total = 0, len;
        char hex[17];
        const char *text;
        int r;

        if (!o || !files || json_object_object_add(o, "files", files) < 0) {
                json_object_put(files);
                return -ENOMEM;
        }
        for (size_t i = 0; i < set->n_files; i++) {
                _cleanup_(freep) char *data = NULL;
                json_object *f;
                size_t size;

                r = read_file_bounded(set->files[i], POLICY_FILE_MAX, READ_FILE_REGULAR, &data, &size);
                if (r < 0)
                        return r == -ENOMEM ? r : -ESTALE; /* it parsed a moment ago: it changed */
                total += size;
                if (total > POLICY_RECORD_MAX)
                        return -EFBIG;
                digest = policy_digest_add(digest, set->files[i], data, size);
                f = json_object_new_object();
                if (!f || json_object_array_add(files, f) < 0) {
                        json_object_put(f);
                        return -ENOMEM;
                }
                json_object_object_add(f, "path", json_object_new_string(set->files[i]));
                json_object_object_add(f, "text", json_object_new_string_len(data, (int) size));
        }
        if (digest != set->digest)
                return -ESTALE;
        snprintf(hex, sizeof(hex), "%016" PRIx64, digest);
        json_object_object_add(o, "digest", json_object_new_string(hex));
        json_object_object_add(o, "time_usec", json_object_new_int64((int64_t) realtime_usec()));
        text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        if (!text)
                return -ENOMEM;
        if (len > POLICY_RECORD_MAX)
                return -EFBIG;
        r = record_path(dir, &path);
        if (r < 0)
                return r;
        return write_file_atomic(path, text, len, 0600);
}

static json_object *get(json_object *o, const char *key, json_type type) {
        json_object *v;
        return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, type) ? v : NULL;
}

int policy_record_load(const char *dir, PolicySet **ret, uint64_t *ret_realtime_usec) {
        _cleanup_(freep) char *path = NULL, *data = NULL;
        _cleanup_(json_object_putp) json_object *o = NULL;
        _cleanup_(policy_set_freep) PolicySet *set = NULL;
        json_tokener *tok;
        json_object *files, *digest, *when;
        uint64_t want;
        size_t size;
        char *end;
        int r;

        r = record_path(dir, &path);
        if (r < 0)
                return r;
        r = read_file_bounded(path, POLICY_RECORD_MAX, READ_FILE_REGULAR | READ_FILE_NOFOLLOW, &data, &size);
        if (r == -EFBIG)
                return -EBADMSG;
        if (r < 0)
                return r;
        tok = json_tokener_new_ex(JSON_TOKENER_DEFAULT_DEPTH);
        if (!tok)
                return -ENOMEM;
        o = json_tokener_parse_ex(tok, data, (int) size);
        r = json_tokener_get_error(tok) == json_tokener_success && json_tokener_get_parse_end(tok) == size;
        json_tokener_free(tok);
        if (!r || !o || !json_object_is_type(o, json_type_object))
                return -EBADMSG;
        files = get(o, "files", json_type_array);
        digest = get(o, "digest", json_type_string);
        when = get(o, "time_usec", json_type_int);
        if (!files || !digest || json_object_get_string_len(digest) != 16)
                return -EBADMSG;
        errno = 0;
        want = strtoull(json_object_get_string(digest), &end, 16);
        if (errno != 0 || *end)
                return -EBADMSG;

        set = policy_set_new();
        if (!set)
                return -ENOMEM;
        for (size_t i = 0; i < json_object_array_length(files); i++) {
                json_object *f = json_object_array_get_idx(files, i);
                json_object *p = get(f, "path", json_type_string), *t = get(f, "text", json_type_string);
                PolicyErrors errs = {};

                if (!p || !t || json_object_get_string_len(p) == 0 ||
                    strlen(json_object_get_string(p)) != (size_t) json_object_get_string_len(p) ||
                    (size_t) json_object_get_string_len(t) > POLICY_FILE_MAX)
                        return -EBADMSG;
                r = policy_parse_buffer(set, json_object_get_string(p), json_object_get_string(t),
                                        (size_t) json_object_get_string_len(t), &errs);
                policy_errors_clear(&errs);
                if (r < 0)
                        return r;
        }
        if (set->digest != want)
                return -EBADMSG;
        *ret = TAKE_PTR(set);
        if (ret_realtime_usec)
                *ret_realtime_usec = when && json_object_get_int64(when) > 0 ? (uint64_t) json_object_get_int64(when)
                                                                              : 0;
        return 0;
}
