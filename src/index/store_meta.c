/* Updating an index's metadata in place (tuned search profiles): a new manifest with
 * the new "meta" object, written to a temporary file, synced and renamed over
 * manifest.json. The rename is the commit point, as in a build: a reader sees the old
 * manifest or the new one, never a mix, and the section files are not touched. */
#include <string.h>

#include "core/error.h"
#include "core/fileio.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

chimera_status store_update_meta(const char *dir, const cJSON *meta, chimera_error *err)
{
    if (!cJSON_IsObject(meta))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: meta must be a JSON object", dir);
    store *st;
    CM_TRY(store_info(dir, &st, err)); /* validates the manifest as it stands */
    chimera_status s = CHIMERA_OK;
    cJSON *root = cJSON_Duplicate(store_manifest(st), 1), *canon = NULL, *m = NULL;
    char *text = NULL, *path = NULL;
    store_close(st);
    if (!root) goto nomem;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "manifest_xxh3");
    m = cJSON_Duplicate(meta, 1);
    if (!m || !cJSON_ReplaceItemInObjectCaseSensitive(root, "meta", m)) {
        cJSON_Delete(m);
        goto nomem;
    }
    text = cJSON_PrintUnformatted(root);
    canon = text ? cJSON_Parse(text) : NULL;
    cJSON_free(text);
    text = NULL;
    uint64_t digest;
    char hex[17];
    if (!canon || store_manifest_digest(canon, &digest) != 0) goto nomem;
    fmt_hex_format(hex, digest);
    if (!cJSON_AddStringToObject(canon, "manifest_xxh3", hex)) goto nomem;
    text = cJSON_Print(canon);
    path = cm_path_join(dir, FMT_MANIFEST_NAME);
    if (!text || !path) goto nomem;
    cm_writer w;
    s = cm_writer_open(&w, path, err);
    if (s == CHIMERA_OK) {
        s = cm_writer_write(&w, text, strlen(text), err);
        if (s == CHIMERA_OK) s = cm_writer_write(&w, "\n", 1, err);
        if (s == CHIMERA_OK) s = cm_writer_commit(&w, err);
        else cm_writer_abort(&w);
    }
    goto done;
nomem:
    s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory updating the manifest", dir);
done:
    cJSON_Delete(root);
    cJSON_Delete(canon);
    cJSON_free(text);
    cm_free(path);
    return s;
}
