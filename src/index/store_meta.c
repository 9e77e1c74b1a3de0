/* Updating an index's metadata in place (tuned search profiles): a read-modify-write of
 * the manifest under the writer lock (store.h gives the protocol). The new manifest,
 * with the edited "meta" object and generation + 1, is written to a temporary file,
 * synced and renamed over manifest.json. The rename is the commit point, as in a build:
 * a reader sees the old manifest or the new one, never a mix, and the section files are
 * not touched.
 *
 * Why the read happens under the lock: before, the manifest was read, edited and
 * written back with no lock, so a build that swapped a new index in meanwhile got the
 * old index's manifest written over its own (an index whose manifest lists another
 * index's sections: unreadable), and of two updates racing, one was lost. Reading under
 * the lock and letting the caller edit what is there now makes concurrent updates merge
 * (two tunes saving two profiles keep both), and the caller's edit function can refuse
 * an index that is no longer the one it measured (chimera.c checks the data id). */
#include <string.h>

#include "core/error.h"
#include "core/fileio.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

/* The manifest `root` (consumed) rebuilt with "generation" = gen where a writer puts it,
 * before "meta", and with format_minor raised to this library's if it was older (an
 * index from format 1.0 gets its first generation here, a 1.1 member). NULL when out of
 * memory. */
static cJSON *with_generation(cJSON *root, uint64_t gen)
{
    cJSON *out = cJSON_CreateObject();
    int ok = out != NULL, placed = 0;
    const cJSON *major = cJSON_GetObjectItemCaseSensitive(root, "format_major");
    int is_1x = cJSON_IsNumber(major) && major->valuedouble == 1;
    while (ok && root->child) {
        cJSON *c = cJSON_DetachItemViaPointer(root, root->child);
        if (!c->string || strcmp(c->string, "generation") == 0) {
            cJSON_Delete(c);
            continue;
        }
        if (is_1x && strcmp(c->string, "format_minor") == 0 && cJSON_IsNumber(c) &&
            c->valuedouble < FMT_VERSION_MINOR)
            cJSON_SetNumberValue(c, FMT_VERSION_MINOR);
        if (!placed && strcmp(c->string, "meta") == 0) {
            ok = cJSON_AddNumberToObject(out, "generation", (double)gen) != NULL;
            placed = 1;
        }
        if (!ok || !cJSON_AddItemToObject(out, c->string, c)) { /* the key is copied first */
            cJSON_Delete(c);
            ok = 0;
        }
    }
    if (ok && !placed) ok = cJSON_AddNumberToObject(out, "generation", (double)gen) != NULL;
    cJSON_Delete(root);
    if (!ok) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

chimera_status ix_store_update_meta(const char *dir, const ix_store_update_opts *opts,
                                    ix_store_meta_edit_fn edit, void *user, chimera_error *err)
{
    ix_store_update_opts o = {0};
    if (opts) o = *opts;
    if (!dir || !dir[0]) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index path is empty");
    if (!edit) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: no edit given", dir);
    /* the lock's and the clean-up's idea of the index's name: no trailing slashes */
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    char *target = cm_malloc(n + 1);
    if (!target) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    memcpy(target, dir, n);
    target[n] = '\0';

    ix_store_lock *lock = NULL;
    store *st = NULL;
    cJSON *root = NULL, *canon = NULL, *m = NULL;
    char *text = NULL, *path = NULL;
    chimera_status s = ix_store_require_dir(target, err);
    if (s == CHIMERA_OK) s = ix_store_lock_acquire(target, o.lock_timeout_ms, &lock, err);
    if (s != CHIMERA_OK) goto done;
    if ((s = ix_store_info(target, &st, err)) != CHIMERA_OK) goto done; /* validates it */
    ix_store_clean_stale(target, 1);
    uint64_t gen = ix_store_generation(st);
    if (o.check_generation && gen != o.expect_generation) {
        s = cm_fail(err, CHIMERA_ERR_CONFLICT,
                    "%s changed since it was read (generation %llu, expected %llu); its "
                    "metadata was not updated", target, (unsigned long long)gen,
                    (unsigned long long)o.expect_generation);
        goto done;
    }
    m = cJSON_Duplicate(ix_store_meta(st), 1);
    if (!m) goto nomem;
    if ((s = edit(m, st, user, err)) != CHIMERA_OK) goto done;
    if (!cJSON_IsObject(m)) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: meta must be a JSON object", target);
        goto done;
    }
    root = cJSON_Duplicate(ix_store_manifest(st), 1);
    if (!root) goto nomem;
    cJSON_DeleteItemFromObjectCaseSensitive(root, "manifest_xxh3");
    if (!cJSON_ReplaceItemInObjectCaseSensitive(root, "meta", m)) goto nomem;
    m = NULL; /* owned by root now */
    uint64_t next = gen < (uint64_t)FMT_MAX_JSON_INT ? gen + 1 : 1;
    if (!(root = with_generation(root, next))) goto nomem;
    text = cJSON_PrintUnformatted(root);
    canon = text ? cJSON_Parse(text) : NULL;
    cJSON_free(text);
    text = NULL;
    uint64_t digest;
    char hex[17];
    if (!canon || ix_store_manifest_digest(canon, &digest) != 0) goto nomem;
    ix_fmt_hex_format(hex, digest);
    if (!cJSON_AddStringToObject(canon, "manifest_xxh3", hex)) goto nomem;
    text = cJSON_Print(canon);
    path = cm_path_join(target, FMT_MANIFEST_NAME);
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
    s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory updating the manifest", target);
done:
    cJSON_Delete(m);
    cJSON_Delete(root);
    cJSON_Delete(canon);
    cJSON_free(text);
    cm_free(path);
    ix_store_close(st);
    ix_store_lock_release(lock);
    cm_free(target);
    return s;
}
