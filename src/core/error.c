/* Error messages: formatted into the caller's fixed buffer, never allocated. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

chimera_status cm_fail(chimera_error *err, chimera_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

chimera_status cm_fail_prefix(chimera_error *err, const char *fmt, ...)
{
    if (!err) return CHIMERA_ERR_INTERNAL;
    char prefix[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* "prefix: old", truncated to the buffer */
    size_t cap = sizeof err->msg - 1, np = strlen(prefix), no = strlen(err->msg);
    if (np + 2 > cap) np = cap - 2;
    if (np + 2 + no > cap) no = cap - np - 2;
    memmove(err->msg + np + 2, err->msg, no);
    memcpy(err->msg, prefix, np);
    err->msg[np] = ':';
    err->msg[np + 1] = ' ';
    err->msg[np + 2 + no] = '\0';
    return err->code;
}

void cm_error_clear(chimera_error *err)
{
    if (!err) return;
    err->code = CHIMERA_OK;
    err->msg[0] = '\0';
}
