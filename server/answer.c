/* answer.c — the JSON answers of `chimera serve` and its one error shape.
 *
 * Every error a handler answers is {"code": "UPPER_CASE", "message": "...",
 * "details": {...}?} with an HTTP status: NextPlaid's shape, so clients written for it
 * read ours. The code is stable (clients switch on it); the message is for people and
 * may change. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

int srv_fail(srv_error *e, int status, const char *code, const char *fmt, ...)
{
    if (e->status) return -1;
    e->status = status;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

void srv_error_details(srv_error *e, void *details)
{
    if (!e->status || e->details) {
        cJSON_Delete(details);
        return;
    }
    e->details = details;
}

void srv_error_clear(srv_error *e)
{
    cJSON_Delete(e->details);
    memset(e, 0, sizeof *e);
}

char *srv_error_json(const srv_error *e)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "code", e->code ? e->code : "INTERNAL");
    cJSON_AddStringToObject(o, "message", e->message);
    if (e->details) cJSON_AddItemReferenceToObject(o, "details", e->details);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

int srv_status_of(chimera_status s)
{
    switch (s) {
    case CHIMERA_OK: return 200;
    case CHIMERA_ERR_INVALID_ARG:
    case CHIMERA_ERR_DIM:
    case CHIMERA_ERR_VALUE:
    case CHIMERA_ERR_EMPTY:
    case CHIMERA_ERR_FORMAT:
    case CHIMERA_ERR_UNSUPPORTED:
    case CHIMERA_ERR_CANCELLED: return 422;
    case CHIMERA_ERR_CONFLICT: return 409;
    case CHIMERA_ERR_BUSY: return 503;
    case CHIMERA_ERR_NOMEM: return 503;
    default: return 500;
    }
}

void srv_answer_json(srv_answer *a, int status, void *json)
{
    a->status = status;
    a->body = json ? cJSON_PrintUnformatted(json) : NULL;
    a->len = a->body ? strlen(a->body) : 0;
    cJSON_Delete(json);
}

void srv_answer_error(srv_answer *a, const srv_error *e)
{
    a->status = e->status ? e->status : 500;
    a->lasting = e->code && strcmp(e->code, "SHARDS_LOST") == 0;
    a->body = srv_error_json(e);
    a->len = a->body ? strlen(a->body) : 0;
}
