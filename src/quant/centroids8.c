/* The shared 8-bit centroid tables (centroids8.h). */
#include <pthread.h>

#include "core/alloc.h"
#include "core/error.h"
#include "quant/centroids8.h"
#include "quant/kernels.h"

static pthread_mutex_t tables_mu = PTHREAD_MUTEX_INITIALIZER;
static quant_c8_table *tables; /* under tables_mu */

static void table_free(quant_c8_table *t)
{
    if (!t) return;
    cm_free(t->codes);
    cm_free(t->scale);
    cm_free(t->sum);
    cm_free(t);
}

static quant_c8_table *table_new(uint64_t key, uint32_t n, uint32_t dim_pad)
{
    quant_c8_table *t = cm_calloc(1, sizeof *t);
    if (!t) return NULL;
    *t = (quant_c8_table){.key = key, .n = n, .dim_pad = dim_pad, .refs = 1};
    t->codes = cm_malloc((size_t)n * dim_pad + 1);
    t->scale = cm_malloc((size_t)n * sizeof(float) + 1);
    t->sum = cm_malloc((size_t)n * sizeof(int32_t) + 1);
    if (!t->codes || !t->scale || !t->sum) {
        table_free(t);
        return NULL;
    }
    return t;
}

quant_c8_table *quant_c8_table_new(uint32_t n, uint32_t dim_pad)
{
    return table_new(0, n, dim_pad);
}

/* Unlinks and frees every unreferenced table but `keep`; under tables_mu. */
static void prune(const quant_c8_table *keep)
{
    for (quant_c8_table **pp = &tables; *pp;) {
        quant_c8_table *t = *pp;
        if (t != keep && t->refs == 0) {
            *pp = t->next;
            table_free(t);
        } else {
            pp = &t->next;
        }
    }
}

static quant_c8_table *find(uint64_t key, uint32_t n, uint32_t dim_pad)
{
    for (quant_c8_table *t = tables; t; t = t->next)
        if (t->key == key && t->n == n && t->dim_pad == dim_pad) return t;
    return NULL;
}

void quant_c8_table_release(quant_c8_table *t)
{
    if (!t) return;
    if (!t->key) {
        table_free(t);
        return;
    }
    pthread_mutex_lock(&tables_mu);
    if (--t->refs == 0) prune(t);
    pthread_mutex_unlock(&tables_mu);
}

chimera_status quant_c8_table_get(uint64_t key, const quant_rotation *rot, const float *c,
                                  uint32_t n, quant_c8_table **out, chimera_error *err)
{
    uint32_t dp = rot->dim_pad;
    *out = NULL;
    if (key) {
        pthread_mutex_lock(&tables_mu);
        quant_c8_table *t = find(key, n, dp);
        if (t) t->refs++;
        pthread_mutex_unlock(&tables_mu);
        if (t) {
            *out = t;
            return CHIMERA_OK;
        }
    }
    quant_c8_table *t = table_new(key, n, dp);
    if (!t) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory for the 8-bit centroids");
    quant_c8_encode(rot, c, n, t->codes, t->scale, t->sum);
    if (key) {
        pthread_mutex_lock(&tables_mu);
        quant_c8_table *o = find(key, n, dp); /* made meanwhile by another holder */
        if (o) {
            o->refs++;
        } else {
            t->next = tables;
            tables = t;
            prune(t);
        }
        pthread_mutex_unlock(&tables_mu);
        if (o) {
            table_free(t);
            t = o;
        }
    }
    *out = t;
    return CHIMERA_OK;
}
