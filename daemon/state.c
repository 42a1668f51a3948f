/* state.c — state.json: which devices bigtcpd changed and what they held before. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <sys/stat.h>

#include "state.h"

#define STATE_FILE "state.json"
#define STATE_MAX_SIZE (64u * 1024u * 1024u)

static inline void json_object_putp(json_object **o) {
        if (*o)
                json_object_put(*o);
}

static json_object *sizes_to_json(const Sizes *s) {
        json_object *o = json_object_new_object();
        if (!o)
                return NULL;
        json_object_object_add(o, "gso_max_size", json_object_new_int64(s->gso_max_size));
        json_object_object_add(o, "gro_max_size", json_object_new_int64(s->gro_max_size));
        json_object_object_add(o, "gso_ipv4_max_size", json_object_new_int64(s->gso_ipv4_max_size));
        json_object_object_add(o, "gro_ipv4_max_size", json_object_new_int64(s->gro_ipv4_max_size));
        return o;
}

static int write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

int state_save(const char *dir, const DeviceTable *t) {
        _cleanup_(json_object_putp) json_object *root = json_object_new_object();
        json_object *list = json_object_new_array();
        _cleanup_(freep) char *tmp = NULL, *path = NULL;
        _cleanup_(closep) int fd = -1, dfd = -1;
        const Device *d;
        int r;

        if (!root || !list) {
                json_object_put(list);
                return -ENOMEM;
        }
        json_object_object_add(root, "version", json_object_new_int(1));
        json_object_object_add(root, "devices", list);
        DEVICE_FOREACH(d, t, it) {
                if (!d->has_original)
                        continue;
                json_object *e = json_object_new_object();
                if (!e)
                        return -ENOMEM;
                json_object_array_add(list, e);
                json_object_object_add(e, "ifindex", json_object_new_int(d->ifindex));
                json_object_object_add(e, "ifname", json_object_new_string(d->ifname ?: ""));
                json_object_object_add(e, "original", sizes_to_json(&d->original));
                json_object *fam = json_object_new_array();
                if (d->written_families & FAMILY_IPV6)
                        json_object_array_add(fam, json_object_new_string("ipv6"));
                if (d->written_families & FAMILY_IPV4)
                        json_object_array_add(fam, json_object_new_string("ipv4"));
                json_object_object_add(e, "families", fam);
        }

        size_t len;
        const char *text = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN, &len);
        if (!text)
                return -ENOMEM;
        if (asprintf(&tmp, "%s/.%s.tmp", dir, STATE_FILE) < 0 || asprintf(&path, "%s/%s", dir, STATE_FILE) < 0)
                return -ENOMEM;
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        r = write_all(fd, text, len);
        if (r >= 0)
                r = write_all(fd, "\n", 1);
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        if (r >= 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlink(tmp);
                return r;
        }
        /* make the rename itself durable */
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0)
                (void) fsync(dfd);
        return 0;
}

void state_entries_free(StateEntry *e, size_t n) {
        for (size_t i = 0; e && i < n; i++)
                free(e[i].ifname);
        free(e);
}

static int get_u32(json_object *o, const char *key, uint32_t *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
                return -EBADMSG;
        int64_t x = json_object_get_int64(v);
        if (x < 0 || x > UINT32_MAX)
                return -EBADMSG;
        *ret = (uint32_t) x;
        return 0;
}

int state_parse(const char *data, size_t size, StateEntry **ret, size_t *ret_n) {
        _cleanup_(json_object_putp) json_object *root = NULL;
        json_tokener *tok;
        json_object *list, *v;
        StateEntry *entries = NULL;
        size_t n = 0;

        if (size > STATE_MAX_SIZE || size > INT32_MAX)
                return -EFBIG;
        tok = json_tokener_new_ex(32);
        if (!tok)
                return -ENOMEM;
        root = json_tokener_parse_ex(tok, data, (int) size);
        bool ok = json_tokener_get_error(tok) == json_tokener_success;
        json_tokener_free(tok);
        if (!ok || !root || !json_object_is_type(root, json_type_object))
                return -EBADMSG;
        if (!json_object_object_get_ex(root, "version", &v) || !json_object_is_type(v, json_type_int) ||
            json_object_get_int(v) != 1)
                return -EBADMSG;
        if (!json_object_object_get_ex(root, "devices", &list) || !json_object_is_type(list, json_type_array))
                return -EBADMSG;

        size_t len = json_object_array_length(list);
        if (len > 0) {
                entries = calloc(len, sizeof(StateEntry));
                if (!entries)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < len; i++) {
                json_object *e = json_object_array_get_idx(list, i), *orig, *fam, *name;
                StateEntry *s = &entries[n];
                uint32_t ifindex;

                if (!json_object_is_type(e, json_type_object) || get_u32(e, "ifindex", &ifindex) < 0 ||
                    ifindex == 0 || ifindex > INT32_MAX || !json_object_object_get_ex(e, "original", &orig) ||
                    !json_object_is_type(orig, json_type_object) ||
                    get_u32(orig, "gso_max_size", &s->original.gso_max_size) < 0 ||
                    get_u32(orig, "gro_max_size", &s->original.gro_max_size) < 0 ||
                    get_u32(orig, "gso_ipv4_max_size", &s->original.gso_ipv4_max_size) < 0 ||
                    get_u32(orig, "gro_ipv4_max_size", &s->original.gro_ipv4_max_size) < 0 ||
                    !json_object_object_get_ex(e, "families", &fam) || !json_object_is_type(fam, json_type_array)) {
                        state_entries_free(entries, n);
                        return -EBADMSG;
                }
                s->ifindex = (int) ifindex;
                for (size_t j = 0; j < json_object_array_length(fam); j++) {
                        const char *f = json_object_get_string(json_object_array_get_idx(fam, j));
                        if (streq_ptr(f, "ipv6"))
                                s->written_families |= FAMILY_IPV6;
                        else if (streq_ptr(f, "ipv4"))
                                s->written_families |= FAMILY_IPV4;
                }
                if (json_object_object_get_ex(e, "ifname", &name) && json_object_is_type(name, json_type_string))
                        s->ifname = strdup(json_object_get_string(name));
                n++;
        }
        *ret = entries;
        *ret_n = n;
        return 0;
}

int state_load(const char *dir, StateEntry **ret, size_t *ret_n) {
        _cleanup_(freep) char *path = NULL, *data = NULL;
        _cleanup_(closep) int fd = -1;
        struct stat st;
        size_t got = 0;

        if (asprintf(&path, "%s/%s", dir, STATE_FILE) < 0)
                return -ENOMEM;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT) {
                        *ret = NULL;
                        *ret_n = 0;
                        return 0;
                }
                return -errno;
        }
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADMSG;
        if ((uint64_t) st.st_size > STATE_MAX_SIZE)
                return -EFBIG;
        data = malloc((size_t) st.st_size + 1);
        if (!data)
                return -ENOMEM;
        while (got < (size_t) st.st_size) {
                ssize_t k = read(fd, data + got, (size_t) st.st_size - got);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                got += (size_t) k;
        }
        return state_parse(data, got, ret, ret_n);
}
