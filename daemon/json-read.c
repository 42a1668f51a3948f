/* json-read.c — readers of JSON members of any type (see json-read.h). */
#include "json-read.h"

json_object *jget(json_object *o, const char *key) {
        json_object *v = NULL;
        if (!o || !json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
                return NULL;
        return v;
}

const char *jstr(json_object *o, const char *key) {
        json_object *v = jget(o, key);
        return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

bool jhas_int(json_object *o, const char *key) {
        json_object *v = jget(o, key);
        return v && (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double));
}

int64_t jint(json_object *o, const char *key, int64_t def) {
        return jhas_int(o, key) ? json_object_get_int64(jget(o, key)) : def;
}

bool jbool(json_object *o, const char *key) {
        json_object *v = jget(o, key);
        return v && json_object_get_boolean(v);
}

json_object *jarray(json_object *o, const char *key) {
        json_object *a = jget(o, key);
        return a && json_object_is_type(a, json_type_array) ? a : NULL;
}

size_t jlen(json_object *a) {
        return a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
}
