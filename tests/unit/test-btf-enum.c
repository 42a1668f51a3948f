/* test-btf-enum.c — an enum read from raw BTF: the kernel's own file read as libbpf reads it (its
 * oracle, every name and value of skb_drop_reason), and small files made here, well formed and
 * not: a type or a name past its section, an unknown kind, a wrong magic. */
#include <bpf/btf.h>
#include <errno.h>
#include <linux/btf.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "btf-enum.h"
#include "util.h"

#define VMLINUX "/sys/kernel/btf/vmlinux"

static void test_kernel_as_libbpf_reads_it(void **state) {
        BtfEnumValue *v = NULL;
        size_t n = 0;

        (void) state;
        if (access(VMLINUX, R_OK) < 0)
                skip();
        assert_int_equal(btf_enum_read(VMLINUX, "skb_drop_reason", &v, &n), 0);
        struct btf *btf = btf__load_vmlinux_btf();
        assert_non_null(btf);
        int id = btf__find_by_name_kind(btf, "skb_drop_reason", BTF_KIND_ENUM);
        assert_true(id > 0);
        const struct btf_type *t = btf__type_by_id(btf, (uint32_t) id);
        const struct btf_enum *en = btf_enum(t);
        assert_int_equal(n, btf_vlen(t));
        assert_true(n > 10);
        for (size_t i = 0; i < n; i++) {
                assert_string_equal(v[i].name, btf__name_by_offset(btf, en[i].name_off));
                /* an unsigned enum's value as the kernel means it (SKB_DROP_REASON_SUBSYS_MASK
                 * is 0xffff0000, not -65536) */
                int64_t want = btf_kflag(t) ? (int64_t) en[i].val : (int64_t) (uint32_t) en[i].val;
                assert_int_equal(v[i].value, want);
        }
        btf__free(btf);
        btf_enum_free(v, n);
        assert_int_equal(btf_enum_read(VMLINUX, "no_such_enum_here", &v, &n), -ENOENT);
        assert_int_equal(btf_enum_read("/nonexistent/btf", "skb_drop_reason", &v, &n), -ENOENT);
}

/* A BTF file in the making: its types and strings, and the header put before them. */
typedef struct Blob {
        uint8_t types[512];
        size_t n_types;
        char strs[256];
        size_t n_strs;
} Blob;

static uint32_t str(Blob *b, const char *s) {
        uint32_t off = (uint32_t) b->n_strs;
        memcpy(b->strs + b->n_strs, s, strlen(s) + 1);
        b->n_strs += strlen(s) + 1;
        return off;
}

static void put(Blob *b, const void *p, size_t n) {
        memcpy(b->types + b->n_types, p, n);
        b->n_types += n;
}

static void type(Blob *b, uint32_t name_off, unsigned kind, unsigned vlen, bool kflag, uint32_t size) {
        struct btf_type t = {.name_off = name_off,
                             .info = (kflag ? 1u << 31 : 0) | (kind << 24) | vlen,
                             .size = size};
        put(b, &t, sizeof(t));
}

/* The usual blob: an int, a struct of one member, enum color {RED = 1, BLUE = -2} (signed),
 * enum64 big {HUGE = 2^40 + 3}, and a function prototype of two parameters. */
static void usual(Blob *b) {
        memset(b, 0, sizeof(*b));
        b->n_strs = 1; /* offset 0: "" */
        uint32_t s_int = str(b, "int"), s_s = str(b, "s"), s_m = str(b, "m"), s_color = str(b, "color"),
                 s_red = str(b, "RED"), s_blue = str(b, "BLUE"), s_big = str(b, "big"), s_huge = str(b, "HUGE");
        uint32_t enc = 32;
        type(b, s_int, BTF_KIND_INT, 0, false, 4);
        put(b, &enc, sizeof(enc));
        type(b, s_s, BTF_KIND_STRUCT, 1, false, 4);
        struct btf_member m = {.name_off = s_m, .type = 1, .offset = 0};
        put(b, &m, sizeof(m));
        type(b, 0, BTF_KIND_FUNC_PROTO, 2, false, 1);
        struct btf_param p[2] = {{.name_off = 0, .type = 1}, {.name_off = 0, .type = 1}};
        put(b, p, sizeof(p));
        type(b, s_color, BTF_KIND_ENUM, 2, true, 4);
        struct btf_enum e[2] = {{.name_off = s_red, .val = 1}, {.name_off = s_blue, .val = -2}};
        put(b, e, sizeof(e));
        type(b, s_big, BTF_KIND_ENUM64, 1, false, 8);
        struct btf_enum64 e64 = {.name_off = s_huge, .val_lo32 = 3, .val_hi32 = 1u << 8};
        put(b, &e64, sizeof(e64));
}

/* Written as a file (its header's lengths may lie: `type_len`, `str_len` 0 for the true ones),
 * `cut` bytes short; read for `name`. */
static int read_blob(const Blob *b, uint32_t magic, uint32_t type_len, uint32_t str_len, size_t cut, const char *name,
                     BtfEnumValue **ret, size_t *ret_n) {
        char path[] = "/tmp/test-btf-enum.XXXXXX";
        struct btf_header h = {
                .magic = (uint16_t) magic,
                .version = BTF_VERSION,
                .hdr_len = sizeof(h),
                .type_off = 0,
                .type_len = type_len ?: (uint32_t) b->n_types,
                .str_off = (uint32_t) b->n_types,
                .str_len = str_len ?: (uint32_t) b->n_strs,
        };
        uint8_t file[sizeof(h) + sizeof(b->types) + sizeof(b->strs)];
        size_t n = 0;
        int fd, r;

        memcpy(file, &h, sizeof(h));
        n += sizeof(h);
        memcpy(file + n, b->types, b->n_types);
        n += b->n_types;
        memcpy(file + n, b->strs, b->n_strs);
        n += b->n_strs;
        fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, file, n - cut), (ssize_t) (n - cut));
        close(fd);
        r = btf_enum_read(path, name, ret, ret_n);
        unlink(path);
        return r;
}

static void test_small_file(void **state) {
        BtfEnumValue *v = NULL;
        size_t n = 0;
        Blob b;

        (void) state;
        usual(&b);
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 0, 0, "color", &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0].name, "RED");
        assert_int_equal(v[0].value, 1);
        assert_string_equal(v[1].name, "BLUE");
        assert_int_equal(v[1].value, -2);
        btf_enum_free(v, n);
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 0, 0, "big", &v, &n), 0);
        assert_int_equal(n, 1);
        assert_string_equal(v[0].name, "HUGE");
        assert_int_equal(v[0].value, (INT64_C(1) << 40) + 3);
        btf_enum_free(v, n);
        /* a struct or an int of that name is not an enum; a name no type has is none */
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 0, 0, "s", &v, &n), -ENOENT);
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 0, 0, "int", &v, &n), -ENOENT);
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 0, 0, "RED", &v, &n), -ENOENT);
}

static void test_hostile_files(void **state) {
        BtfEnumValue *v = NULL;
        size_t n = 0;
        Blob b;

        (void) state;
        usual(&b);
        /* not BTF */
        assert_int_equal(read_blob(&b, 0x1234, 0, 0, 0, "color", &v, &n), -EBADMSG);
        /* shorter than its header says: the strings, then the types cut */
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 0, b.n_strs, "big", &v, &n), -EBADMSG);
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 0, b.n_strs + 20, "big", &v, &n), -EBADMSG);
        /* a type section that ends inside a type */
        assert_int_equal(read_blob(&b, BTF_MAGIC, (uint32_t) b.n_types - 4, 0, 0, "big", &v, &n), -EBADMSG);
        assert_int_equal(read_blob(&b, BTF_MAGIC, (uint32_t) b.n_types - 2, 0, 0, "big", &v, &n), -EBADMSG);
        /* a string section that ends inside a name, or before the names */
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, (uint32_t) b.n_strs - 2, 0, "big", &v, &n), -EBADMSG);
        assert_int_equal(read_blob(&b, BTF_MAGIC, 0, 3, 0, "color", &v, &n), -EBADMSG);
        /* a kind this reader does not know: nothing after it can be read */
        Blob k = b;
        k.types[7] = 31;
        assert_int_equal(read_blob(&k, BTF_MAGIC, 0, 0, 0, "big", &v, &n), -EBADMSG);
        /* an enum value's name past the strings */
        Blob e = b;
        size_t color_at = sizeof(struct btf_type) + 4 + sizeof(struct btf_type) + sizeof(struct btf_member) +
                          sizeof(struct btf_type) + 2 * sizeof(struct btf_param);
        struct btf_enum bad = {.name_off = 10000, .val = 1};
        memcpy(e.types + color_at + sizeof(struct btf_type), &bad, sizeof(bad));
        assert_int_equal(read_blob(&e, BTF_MAGIC, 0, 0, 0, "color", &v, &n), -EBADMSG);
        /* a vlen past the section */
        Blob l = b;
        struct btf_type t;
        memcpy(&t, l.types + color_at, sizeof(t));
        t.info = (t.info & ~0xffffu) | 0xffffu;
        memcpy(l.types + color_at, &t, sizeof(t));
        assert_int_equal(read_blob(&l, BTF_MAGIC, 0, 0, 0, "color", &v, &n), -EBADMSG);
        assert_int_equal(read_blob(&l, BTF_MAGIC, 0, 0, 0, "big", &v, &n), -EBADMSG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_kernel_as_libbpf_reads_it),
                cmocka_unit_test(test_small_file),
                cmocka_unit_test(test_hostile_files),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
