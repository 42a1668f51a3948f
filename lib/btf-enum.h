/* btf-enum.h — one enum's names and values from a raw BTF file (the kernel's own description of
 * its types, /sys/kernel/btf/vmlinux), read a piece at a time: the kernel's is megabytes, and none
 * of it is kept but what was asked for. The file is checked as it is read: a type or a string
 * beyond its section, an unknown kind, a name without its end is -EBADMSG. */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct BtfEnumValue {
        char *name;
        int64_t value;
} BtfEnumValue;

/* The values of the enum (or 64-bit enum) named `type_name` in the BTF file `path`, in the file's
 * order, into *ret (*ret_n of them; free with btf_enum_free()). -ENOENT: the file has no such
 * enum; -EBADMSG: not BTF as this reader knows it; -errno of reading it. */
int btf_enum_read(const char *path, const char *type_name, BtfEnumValue **ret, size_t *ret_n);
void btf_enum_free(BtfEnumValue *v, size_t n);
