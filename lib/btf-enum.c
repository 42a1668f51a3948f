/* btf-enum.c — a raw BTF file walked once through its types, a buffer at a time (pread): each
 * enum's name is compared where the string section has it, and only the one asked for has its
 * values' names read. The layout is the kernel's (Documentation/bpf/btf.rst, <linux/btf.h>): a
 * header, then the types (struct btf_type, each followed by what its kind carries), then the
 * strings, the sections' offsets counted from the header's end. */
#include <errno.h>
#include <fcntl.h>
#include <linux/btf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "btf-enum.h"
#include "util.h"

#define NAME_MAX_LEN 256u      /* a name longer is not one this reader takes */
#define READ_CHUNK (16u * 1024u)

typedef struct Reader {
        int fd;
        uint64_t pos, end; /* the next byte to hand out, the end of the section */
        uint8_t buf[READ_CHUNK];
        uint64_t buf_at;   /* the file offset of buf[0] */
        size_t buf_len;
} Reader;

/* `n` bytes at the reader's position into `out`, which moves past them. */
static int take(Reader *r, void *out, size_t n) {
        uint8_t *o = out;

        if (n > r->end - r->pos)
                return -EBADMSG; /* past the section */
        while (n > 0) {
                if (r->pos < r->buf_at || r->pos >= r->buf_at + r->buf_len) {
                        ssize_t k = pread(r->fd, r->buf, sizeof(r->buf), (off_t) r->pos);
                        if (k < 0)
                                return -errno;
                        if (k == 0)
                                return -EBADMSG; /* the file is shorter than its header says */
                        r->buf_at = r->pos;
                        r->buf_len = (size_t) k;
                }
                size_t have = (size_t) (r->buf_at + r->buf_len - r->pos);
                size_t c = have < n ? have : n;
                memcpy(o, r->buf + (r->pos - r->buf_at), c);
                o += c;
                r->pos += c;
                n -= c;
        }
        return 0;
}

static int skip(Reader *r, uint64_t n) {
        if (n > r->end - r->pos)
                return -EBADMSG;
        r->pos += n;
        return 0;
}

/* The string at `off` of the string section [str_at, str_at + str_len), into buf (NUL-terminated,
 * at most NAME_MAX_LEN bytes with its end). */
static int string_at(int fd, uint64_t str_at, uint32_t str_len, uint32_t off, char buf[static NAME_MAX_LEN]) {
        size_t want = str_len - off < NAME_MAX_LEN ? str_len - off : NAME_MAX_LEN;
        ssize_t k;

        if (off >= str_len)
                return -EBADMSG;
        k = pread(fd, buf, want, (off_t) (str_at + off));
        if (k < 0)
                return -errno;
        if (memchr(buf, '\0', (size_t) k) == NULL)
                return -EBADMSG; /* no end within the section, or too long */
        return 0;
}

/* Bytes after a struct btf_type of this kind and vlen; -EBADMSG for a kind this reader does not
 * know (a newer kernel's: its size is unknown, so nothing after it can be read). */
static int64_t extra_size(unsigned kind, unsigned vlen) {
        switch (kind) {
        case BTF_KIND_INT:
        case BTF_KIND_VAR:
        case BTF_KIND_DECL_TAG:
                return 4;
        case BTF_KIND_PTR:
        case BTF_KIND_FWD:
        case BTF_KIND_TYPEDEF:
        case BTF_KIND_VOLATILE:
        case BTF_KIND_CONST:
        case BTF_KIND_RESTRICT:
        case BTF_KIND_FUNC:
        case BTF_KIND_FLOAT:
        case BTF_KIND_TYPE_TAG:
                return 0;
        case BTF_KIND_ARRAY:
                return sizeof(struct btf_array);
        case BTF_KIND_STRUCT:
        case BTF_KIND_UNION:
                return (int64_t) vlen * sizeof(struct btf_member);
        case BTF_KIND_ENUM:
                return (int64_t) vlen * sizeof(struct btf_enum);
        case BTF_KIND_FUNC_PROTO:
                return (int64_t) vlen * sizeof(struct btf_param);
        case BTF_KIND_DATASEC:
                return (int64_t) vlen * sizeof(struct btf_var_secinfo);
        case BTF_KIND_ENUM64:
                return (int64_t) vlen * sizeof(struct btf_enum64);
        default:
                return -EBADMSG;
        }
}

void btf_enum_free(BtfEnumValue *v, size_t n) {
        for (size_t i = 0; v && i < n; i++)
                free(v[i].name);
        free(v);
}

/* The `vlen` values of the enum at the reader's position (64-bit ones when `wide`). */
static int read_values(Reader *r, uint64_t str_at, uint32_t str_len, unsigned vlen, bool wide, bool is_signed,
                       BtfEnumValue **ret, size_t *ret_n) {
        BtfEnumValue *v = calloc(vlen ? vlen : 1, sizeof(*v));
        char name[NAME_MAX_LEN];
        int k = 0;

        if (!v)
                return -ENOMEM;
        for (unsigned i = 0; i < vlen; i++) {
                uint32_t name_off;
                if (wide) {
                        struct btf_enum64 e;
                        k = take(r, &e, sizeof(e));
                        name_off = e.name_off;
                        v[i].value = (int64_t) (((uint64_t) e.val_hi32 << 32) | e.val_lo32);
                } else {
                        struct btf_enum e;
                        k = take(r, &e, sizeof(e));
                        name_off = e.name_off;
                        v[i].value = is_signed ? (int64_t) e.val : (int64_t) (uint32_t) e.val;
                }
                if (k >= 0)
                        k = string_at(r->fd, str_at, str_len, name_off, name);
                if (k >= 0 && !(v[i].name = strdup(name)))
                        k = -ENOMEM;
                if (k < 0) {
                        btf_enum_free(v, i + 1);
                        return k;
                }
        }
        *ret = v;
        *ret_n = vlen;
        return 0;
}

int btf_enum_read(const char *path, const char *type_name, BtfEnumValue **ret, size_t *ret_n) {
        _cleanup_(closep) int fd = open(path, O_RDONLY | O_CLOEXEC);
        _cleanup_(freep) Reader *r = NULL;
        struct btf_header h;
        char name[NAME_MAX_LEN];
        size_t want = strlen(type_name) + 1;
        ssize_t k;

        if (fd < 0)
                return -errno;
        if (want > NAME_MAX_LEN)
                return -ENOENT;
        k = pread(fd, &h, sizeof(h), 0);
        if (k < 0)
                return -errno;
        if ((size_t) k < sizeof(h) || h.magic != BTF_MAGIC || h.version != BTF_VERSION || h.hdr_len < sizeof(h))
                return -EBADMSG;
        /* the sections, from the header's end; their ends are checked as they are read (a file of
         * sysfs says no size) */
        uint64_t types_at = (uint64_t) h.hdr_len + h.type_off, str_at = (uint64_t) h.hdr_len + h.str_off;
        if (h.type_len % 4 != 0)
                return -EBADMSG;
        r = malloc(sizeof(*r));
        if (!r)
                return -ENOMEM;
        *r = (Reader){.fd = fd, .pos = types_at, .end = types_at + h.type_len};
        while (r->pos < r->end) {
                struct btf_type t;
                int e = take(r, &t, sizeof(t));
                if (e < 0)
                        return e;
                unsigned kind = BTF_INFO_KIND(t.info), vlen = BTF_INFO_VLEN(t.info);
                int64_t extra = extra_size(kind, vlen);
                if (extra < 0)
                        return (int) extra;
                if ((kind == BTF_KIND_ENUM || kind == BTF_KIND_ENUM64) && t.name_off != 0) {
                        e = string_at(fd, str_at, h.str_len, t.name_off, name);
                        if (e < 0)
                                return e;
                        if (strcmp(name, type_name) == 0)
                                return read_values(r, str_at, h.str_len, vlen, kind == BTF_KIND_ENUM64,
                                                   BTF_INFO_KFLAG(t.info), ret, ret_n);
                }
                e = skip(r, (uint64_t) extra);
                if (e < 0)
                        return e;
        }
        return -ENOENT;
}
