/* The mapping registry (mapreg.h).
 *
 * Each slot's `state` is 0 (free), 1 (being filled) or a published generation (an even
 * number >= 2, unique per registration). Publishing is a release store after the range
 * and name are written, so a reader that acquires a generation sees them complete; a
 * reader re-reads the state after copying and drops the slot if the generation moved,
 * which covers a slot unregistered and reused while it was being read. Every field is an
 * atomic (the name byte by byte), so the concurrent reads are not data races in C11
 * terms, and all of them are lock-free on every target Chimera builds for (checked
 * below): a signal handler may use them.
 *
 * Tried and rejected: a mutex around the table (not async-signal-safe: a handler that
 * interrupts the owner deadlocks) and a linked list (allocation, and a reader could follow
 * a freed node). */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/mapreg.h"

#if ATOMIC_INT_LOCK_FREE != 2 || ATOMIC_POINTER_LOCK_FREE != 2 || ATOMIC_CHAR_LOCK_FREE != 2
#error "the mapping registry needs lock-free atomics to be async-signal-safe"
#endif

#define ST_FREE 0u
#define ST_BUSY 1u

typedef struct slot {
    atomic_uint state;
    atomic_uintptr_t start;
    atomic_size_t len;
    _Atomic unsigned char name[CM_MAP_NAME];
} slot;

static slot table[CM_MAP_SLOTS];
static atomic_uint generation = 2;

int cm_map_register(const void *addr, size_t len, const char *path)
{
    if (!addr || len == 0) return 0;
    for (int i = 0; i < CM_MAP_SLOTS; i++) {
        unsigned expect = ST_FREE;
        if (!atomic_compare_exchange_strong_explicit(&table[i].state, &expect, ST_BUSY,
                                                     memory_order_acquire, memory_order_relaxed))
            continue;
        slot *s = &table[i];
        atomic_store_explicit(&s->start, (uintptr_t)addr, memory_order_relaxed);
        atomic_store_explicit(&s->len, len, memory_order_relaxed);
        /* keep the tail of a long path: the file name says more than the directories */
        size_t n = path ? strlen(path) : 0, skip = n >= CM_MAP_NAME ? n - (CM_MAP_NAME - 1) : 0;
        size_t k = 0;
        for (; k + skip < n; k++)
            atomic_store_explicit(&s->name[k], (unsigned char)path[k + skip], memory_order_relaxed);
        atomic_store_explicit(&s->name[k], 0, memory_order_relaxed);
        unsigned g = atomic_fetch_add_explicit(&generation, 2, memory_order_relaxed);
        if (g < 2) g = 2; /* after 2^31 registrations the counter wraps past 0 and 1 */
        atomic_store_explicit(&s->state, g, memory_order_release);
        return i + 1;
    }
    return 0;
}

void cm_map_unregister(int h)
{
    if (h <= 0 || h > CM_MAP_SLOTS) return;
    atomic_store_explicit(&table[h - 1].state, ST_FREE, memory_order_release);
}

size_t cm_map_describe(const void *addr, char *buf, size_t n)
{
    if (n > 0) buf[0] = '\0';
    uintptr_t a = (uintptr_t)addr;
    for (int i = 0; i < CM_MAP_SLOTS; i++) {
        slot *s = &table[i];
        unsigned g = atomic_load_explicit(&s->state, memory_order_acquire);
        if (g == ST_FREE || g == ST_BUSY) continue;
        uintptr_t start = atomic_load_explicit(&s->start, memory_order_relaxed);
        size_t len = atomic_load_explicit(&s->len, memory_order_relaxed);
        if (a < start || a - start >= len) continue;
        size_t k = 0;
        for (; n > 0 && k < n - 1 && k < CM_MAP_NAME; k++) {
            unsigned char c = atomic_load_explicit(&s->name[k], memory_order_relaxed);
            if (!c) break;
            buf[k] = (char)c;
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&s->state, memory_order_relaxed) != g) continue;
        if (n > 0) buf[k] = '\0';
        return k;
    }
    if (n > 0) buf[0] = '\0';
    return 0;
}
