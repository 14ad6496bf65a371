/* cjson_calls.h - every cJSON function the server calls, routed through
 * the table that cjson.c fills with dlsym (libcjson.so.1 is loaded when a
 * server starts, not linked).  Included after introspect.h by the sources
 * that build or parse JSON, and by no header: a program that includes
 * introspect.h and links cJSON itself keeps calling it directly. */
#ifndef SEFER_CJSON_CALLS_H
#define SEFER_CJSON_CALLS_H

#include "introspect.h"

#define cJSON_CreateObject (sf_cjson.cJSON_CreateObject)
#define cJSON_CreateArray (sf_cjson.cJSON_CreateArray)
#define cJSON_CreateRaw (sf_cjson.cJSON_CreateRaw)
#define cJSON_CreateString (sf_cjson.cJSON_CreateString)
#define cJSON_CreateBool (sf_cjson.cJSON_CreateBool)
#define cJSON_CreateNull (sf_cjson.cJSON_CreateNull)
#define cJSON_AddItemToArray (sf_cjson.cJSON_AddItemToArray)
#define cJSON_AddItemToObjectCS (sf_cjson.cJSON_AddItemToObjectCS)
#define cJSON_Delete (sf_cjson.cJSON_Delete)
#define cJSON_Print (sf_cjson.cJSON_Print)
#define cJSON_PrintUnformatted (sf_cjson.cJSON_PrintUnformatted)
#define cJSON_ParseWithLength (sf_cjson.cJSON_ParseWithLength)
#define cJSON_GetObjectItemCaseSensitive (sf_cjson.cJSON_GetObjectItemCaseSensitive)
#define cJSON_IsArray (sf_cjson.cJSON_IsArray)
#define cJSON_IsBool (sf_cjson.cJSON_IsBool)
#define cJSON_IsNumber (sf_cjson.cJSON_IsNumber)
#define cJSON_IsObject (sf_cjson.cJSON_IsObject)
#define cJSON_IsString (sf_cjson.cJSON_IsString)
#define cJSON_IsTrue (sf_cjson.cJSON_IsTrue)

#endif /* SEFER_CJSON_CALLS_H */
