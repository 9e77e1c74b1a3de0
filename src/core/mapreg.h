/* A process-wide registry of the file mappings the library holds (index sections, .npy
 * inputs): address range plus file name, so that a front end's SIGBUS handler can say
 * which file was truncated under a mapping instead of dying with "Bus error".
 *
 * The library never installs signal handlers (they are process state that belongs to
 * the application); it only keeps this table and offers cm_map_describe, which is
 * async-signal-safe: a fixed array, no locks, no allocation, only lock-free atomics.
 * A slot is claimed by a compare-and-swap, filled, then published with a release
 * store; a reader (the handler) acquires the slot state, copies the range and the name,
 * and re-reads the state, discarding a slot that changed meanwhile. Unregistering
 * happens before munmap, so a published range never outlives its mapping.
 *
 * The table holds CM_MAP_SLOTS mappings; when it is full a mapping simply goes
 * unregistered (a fault in it is then reported without a file name). */
#ifndef CHIMERA_CORE_MAPREG_H
#define CHIMERA_CORE_MAPREG_H

#include <stddef.h>

/* An index maps 17 sections, a corpus one .npy; 256 covers a dozen open indexes. */
#define CM_MAP_SLOTS 256
#define CM_MAP_NAME 192 /* bytes kept of a file name, its tail when longer */

/* Registers [addr, addr + len) as a mapping of `path`. Returns a handle for
 * cm_map_unregister: > 0, or 0 when the table is full (nothing to unregister). */
int cm_map_register(const void *addr, size_t len, const char *path);

/* Forgets handle h (0 is a no-op). Call it before munmap. */
void cm_map_unregister(int h);

/* When addr lies in a registered mapping, writes its file name (NUL-terminated,
 * truncated to n - 1 bytes) into buf and returns the bytes written before the NUL;
 * otherwise returns 0 and leaves buf empty (when n > 0). Async-signal-safe. */
size_t cm_map_describe(const void *addr, char *buf, size_t n);

#endif
