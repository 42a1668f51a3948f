/* json-read.h — small readers of JSON objects that may be anything: a missing member, a JSON
 * null and a wrong type read as absent. Shared by bigtcpctl and the metrics text. */
#pragma once

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

json_object *jget(json_object *o, const char *key);
const char *jstr(json_object *o, const char *key);
bool jhas_int(json_object *o, const char *key);
int64_t jint(json_object *o, const char *key, int64_t def);
bool jbool(json_object *o, const char *key);
/* An array member, or NULL; and the length of an array that may be NULL. */
json_object *jarray(json_object *o, const char *key);
size_t jlen(json_object *a);
