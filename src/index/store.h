/* The index container: a crash-safe, versioned, checksummed directory of named sections
 * plus a JSON metadata object (format.h describes every byte).
 *
 * Writing
 *   ix_store_writer_begin()      creates "<out_dir>.tmp-XXXXXX" beside the target
 *   ix_store_writer_add()        a whole section from memory, or
 *   ix_store_section_begin() / ix_store_section_write()... / ix_store_section_end()   streamed
 *   ix_store_writer_commit()     syncs, writes the manifest last, swaps the directory in
 *   ix_store_writer_abort()      removes the temporary directory
 * An existing index at out_dir stays intact and loadable until the commit swaps it out;
 * a failed, aborted or killed build never damages it. See store_write.c for the
 * replace protocol and its one failure window.
 *
 * Reading
 *   ix_store_open()              parses the manifest, maps every section read-only, checks
 *                             headers and sizes (and, if asked, payload checksums)
 *   ix_store_info()              the manifest only, nothing mapped (for `chimera info`)
 *   ix_store_section(), ix_store_meta(), ix_store_section_at(): views into the store
 *   ix_store_close()
 *
 * Ownership: the writer copies nothing it does not need (section data is written as it
 * comes; `meta` is duplicated at commit, the caller keeps its own). Everything a store
 * returns points into the store and is valid until ix_store_close. Handles are not
 * thread-safe; distinct handles are independent.
 *
 * Changing an index: one writer at a time (the protocol every change goes through)
 *   Every change of an index (a build's begin and commit, ix_store_update_meta, and the
 *   coming add/delete/compact) holds the writer lock: an flock(2) on "<IDX>.lock" in
 *   the index's parent directory (not inside the index, which is swapped whole). The
 *   kernel drops it when its holder exits or is killed, so a dead writer never blocks
 *   the next one. A writer waits for the lock up to its timeout (STORE_LOCK_WAIT_MS by
 *   default; the holders keep it for milliseconds, so only a stuck holder is waited
 *   out), then fails with CHIMERA_ERR_BUSY: "index X is being changed by another
 *   process (pid N)". Waiting rather than failing at once: two commands that change
 *   one index should both succeed, one after the other, not fail at random.
 *   Under the lock a writer
 *     1. removes what killed writers left (store_write.c: the side names it removes,
 *        and only those; a temporary directory of a build still running is kept);
 *     2. reads the current manifest's "generation" (0 in indexes from before format
 *        1.1) and, if the caller asked, compares it with the generation the caller's
 *        change was based on (compare-and-swap: CHIMERA_ERR_CONFLICT if they differ);
 *     3. writes the new manifest with generation + 1 and replaces the old one by
 *        rename (meta update) or swaps the whole directory in (build).
 *   A build holds the lock only at begin (to create its temporary directory, marked
 *   live by an flock on it) and at commit, not while it computes, so a long build
 *   never blocks other writers: the last commit wins, as it did before.
 *   Readers take no lock (they may be on read-only media and must never wait for a
 *   writer): ix_store_open reads one directory through one descriptor and retries when
 *   the index was replaced under it (store_read.c).
 *
 * cJSON allocates with its own (libc) allocator: manifest trees are released with
 * cJSON_Delete and printed text with cJSON_free, never cm_free. cJSON_InitHooks would
 * route it through core/alloc.h, but the hooks are process-wide state shared with any
 * other cJSON user in the process, so the library does not install them; allocation
 * failure injection therefore covers the store's own allocations, not cJSON's. */
#ifndef CHIMERA_INDEX_STORE_H
#define CHIMERA_INDEX_STORE_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "chimera.h"
#include "index/format.h"

/* ---- writing ---------------------------------------------------------------------- */

typedef struct ix_store_writer ix_store_writer;

/* Writer options; zero means default. */
typedef struct ix_store_write_opts {
    int no_sync;           /* 1: skip the fsync of section files and of the parent
                              directory (scratch indexes, tests); the manifest is still
                              synced and the replace stays atomic, but after a power
                              failure the new index may be lost or fail its checksums */
    int no_exchange;       /* 1: never use renameat2(RENAME_EXCHANGE), always the
                              rename-aside fallback (tests use it to cover that path) */
    int lock_timeout_ms;   /* wait for the writer lock: 0 STORE_LOCK_WAIT_MS, < 0 not
                              at all (CHIMERA_ERR_BUSY at once if it is held) */
    int check_generation;  /* 1: commit only if the index at out_dir is still at
                              expect_generation (an absent or empty target is at 0);
                              otherwise CHIMERA_ERR_CONFLICT and nothing changes. For
                              writers that derive the new index from the current one
                              (add, delete, compact); a build replaces whatever is there */
    uint64_t expect_generation;
    struct ix_store_lock *lock; /* the writer lock, when the caller holds it around a
                                   longer change (add, compact): begin and commit then
                                   use it instead of taking it themselves */
} ix_store_write_opts;

/* Element type and shape of a section, recorded in the manifest (optional). */
typedef struct ix_store_type {
    const char *dtype;             /* a name ix_fmt_dtype_size knows: "f32", "u8", ... */
    uint32_t ndim;                 /* 1..FMT_MAX_DIMS */
    uint64_t shape[FMT_MAX_DIMS];  /* product * dtype size must equal the section bytes */
} ix_store_type;

/* Starts writing an index that will replace whatever index is at `out_dir`.
 * @param out_dir  target directory; its parent must exist and be writable. It may be
 *                 absent, an empty directory, or an existing index (a directory whose
 *                 manifest has the index magic and that holds only index files).
 *                 Anything else (a file, a symbolic link, a non-empty directory that is
 *                 not an index) is refused and left alone.
 * @param opts     may be NULL (defaults)
 * @param out      receives the writer; NULL on failure
 * @return CHIMERA_OK; CHIMERA_ERR_INVALID_ARG (bad path or target),
 *         CHIMERA_ERR_IO (parent missing or unwritable), CHIMERA_ERR_NOMEM,
 *         CHIMERA_ERR_BUSY (the writer lock stayed held past the timeout),
 *         CHIMERA_ERR_UNSUPPORTED (a big-endian host). Messages name the path.
 * @note Takes the writer lock for a moment (to clean up after killed writers and to
 *       create the temporary directory), not for the whole build. */
chimera_status ix_store_writer_begin(const char *out_dir, const ix_store_write_opts *opts,
                                     ix_store_writer **out, chimera_error *err);

/* Writes a whole section `name` (see ix_fmt_name_valid; unique within the index) from
 * `data` (may be NULL when bytes == 0). `type` may be NULL.
 * @return CHIMERA_OK; CHIMERA_ERR_INVALID_ARG (bad or duplicate name, a section still
 *         open, a type that disagrees with bytes), CHIMERA_ERR_IO (with the file's path:
 *         ENOSPC, EFBIG, ...), CHIMERA_ERR_NOMEM.
 * @note An error once a section's file exists (I/O, memory, a size that disagrees with
 *       the type) fails the writer: later calls return the same error, and commit or
 *       abort cleans up. Argument errors caught before that leave it usable. */
chimera_status ix_store_writer_add(ix_store_writer *w, const char *name, const void *data,
                                   uint64_t bytes, chimera_error *err);
chimera_status ix_store_writer_add_typed(ix_store_writer *w, const char *name,
                                         const ix_store_type *type, const void *data,
                                         uint64_t bytes, chimera_error *err);

/* Streams a section: begin, any number of writes (checksummed as they go), end. Only one
 * section may be open at a time. `type` may be NULL; if given, its size is checked
 * against the total at end. Same statuses as ix_store_writer_add. */
chimera_status ix_store_section_begin(ix_store_writer *w, const char *name,
                                      const ix_store_type *type, chimera_error *err);
chimera_status ix_store_section_write(ix_store_writer *w, const void *data, size_t bytes,
                                      chimera_error *err);
chimera_status ix_store_section_end(ix_store_writer *w, chimera_error *err);

/* Commits: every section file is already synced (at its end); under the writer lock,
 * writes manifest.json last with `meta` (an object, duplicated; NULL means {}) and the
 * generation of the index it replaces + 1 (1 for a new index), syncs it and the
 * directory, then puts the new directory in place of the old one and deletes the old
 * one.
 * Always consumes the writer: on failure the temporary directory is removed and the
 * previous index (if any) is untouched, except in the fallback window store_write.c
 * describes, which ix_store_open reports.
 * @return CHIMERA_OK; CHIMERA_ERR_INVALID_ARG (a section still open, meta not an object,
 *         the target changed into something that may not be replaced), CHIMERA_ERR_IO,
 *         CHIMERA_ERR_NOMEM, CHIMERA_ERR_BUSY (lock timeout), CHIMERA_ERR_CONFLICT
 *         (check_generation, and the index is at another generation), or the error
 *         that failed the writer earlier. */
/* Writes the manifest the commit would write (with meta, at generation 0) into the
 * writer's temporary directory and returns that directory in *dir (owned by the writer),
 * so that the index can be opened and measured before it is committed (the build's
 * calibration). Every section must be complete. The commit rewrites the manifest. */
chimera_status ix_store_writer_preview(ix_store_writer *w, const cJSON *meta, const char **dir,
                                       chimera_error *err);
chimera_status ix_store_writer_commit(ix_store_writer *w, const cJSON *meta, chimera_error *err);

/* Removes the temporary directory and frees the writer. NULL is a no-op. */
void ix_store_writer_abort(ix_store_writer *w);

/* Copies the file `src` into the index being written under `name`, which must be a side
 * file (ix_store_is_side_file: the metadata database), fsynced like a section; an absent
 * src copies nothing. The caller keeps src from changing meanwhile (the writer lock).
 * @return CHIMERA_OK, _INVALID_ARG (another name), _IO, _NOMEM. */
chimera_status ix_store_writer_copy_file(ix_store_writer *w, const char *name, const char *src,
                                         chimera_error *err);

/* 1 for the files besides manifest.json and the sections that an index directory may
 * hold: the metadata database ("meta.sqlite", index/metadata.h) and its journal. They
 * are not listed in the manifest and are kept in step with it by the index layer. */
int ix_store_is_side_file(const char *name);

/* ---- changing an index in place ------------------------------------------------------ */

/* Starts a change committed into the index directory itself (add, delete, update): new
 * sections are written next to the current ones under names no manifest lists, and
 * ix_store_delta_commit then writes a manifest that lists the current sections (minus
 * those it drops) plus the new ones, and renames it over manifest.json. Sections are
 * never written twice under one name: every change uses fresh names (index/update.c
 * numbers them). Until the rename, readers and a crash see the old index; files of a
 * killed writer are removed by the next one (ix_store_clean_stale).
 * @param current  the index as it is, opened (ix_store_open or ix_store_info) by the
 *                 caller while holding `lock`, which it keeps until the commit or abort
 * The manifest is written as format FMT_LIVING_MAJOR (format.h says why). Abort removes
 * the sections written so far. Same statuses as ix_store_writer_begin. */
struct ix_store_lock;
typedef struct store store;
chimera_status ix_store_delta_begin(const char *dir, const store *current,
                                    struct ix_store_lock *lock, const ix_store_write_opts *opts,
                                    ix_store_writer **out, chimera_error *err);

/* Commits an in-place change: the manifest (generation + 1, `meta`, the current sections
 * but the n_drop named ones, then the new ones), synced and renamed into place; then
 * the dropped sections' files are deleted. Consumes the writer; on failure the new
 * files are removed and the index is as it was. */
chimera_status ix_store_delta_commit(ix_store_writer *w, const cJSON *meta,
                                     const char *const *drop, uint32_t n_drop, chimera_error *err);

/* ---- reading ---------------------------------------------------------------------- */

typedef struct store store;

/* What the manifest says about one section. Strings point into the store. */
typedef struct ix_store_section_desc {
    const char *name;
    const char *file;       /* "<name>.bin", relative to the index directory */
    uint64_t bytes;         /* payload bytes */
    uint64_t xxh3;          /* payload checksum */
    const char *dtype;      /* NULL when the section is untyped */
    uint32_t ndim;          /* 0 when untyped */
    uint64_t shape[FMT_MAX_DIMS];
    const void *data; /* payload, 64-byte aligned; NULL when not mapped (ix_store_info) */
} ix_store_section_desc;

/* Opens the index at `dir`: validates the manifest as hostile input, maps every section
 * read-only, checks each header against the manifest and each file's size, and with
 * `verify_checksums` recomputes every payload checksum (reads all the data).
 * The manifest and the sections are read through one descriptor of the directory, so
 * they come from one index even if a writer swaps another in meanwhile; when an attempt
 * fails and the directory at `dir` (or its generation) changed under it, the open is
 * retried (twice at most), so a concurrent writer never causes a spurious error.
 * @param out  receives the store; NULL on failure
 * @return CHIMERA_OK; CHIMERA_ERR_IO (no directory or manifest; if an interrupted
 *         replace left the index under a side name, the message says where),
 *         CHIMERA_ERR_VERSION ("index format X.Y, this library reads A.x"),
 *         CHIMERA_ERR_UNSUPPORTED (another byte order), CHIMERA_ERR_CORRUPT (anything
 *         else wrong; the message names the section and what was expected vs found),
 *         CHIMERA_ERR_NOMEM. */
chimera_status ix_store_open(const char *dir, int verify_checksums, store **out,
                             chimera_error *err);

/* Reads and validates only the manifest; maps nothing (sections have data == NULL and
 * ix_store_section returns CHIMERA_ERR_INVALID_ARG). Same statuses as ix_store_open. */
chimera_status ix_store_info(const char *dir, store **out, chimera_error *err);

/* Recomputes every payload checksum of an opened store (for `chimera check`).
 * @return CHIMERA_OK, CHIMERA_ERR_CORRUPT naming the first bad section, or
 *         CHIMERA_ERR_INVALID_ARG on a store from ix_store_info. */
chimera_status ix_store_verify(const store *s, chimera_error *err);

/* The payload of section `name`.
 * @return CHIMERA_OK; CHIMERA_ERR_CORRUPT when the index has no such section (the caller,
 *         which knows why it needs it, names it in its own message);
 *         CHIMERA_ERR_INVALID_ARG on a store from ix_store_info.
 * @note *data points into the mapping (64-byte aligned; not NULL even when empty) and is
 *       valid until ix_store_close. */
chimera_status ix_store_section(const store *s, const char *name, const void **data,
                                uint64_t *bytes);

/* Number of sections, and the i-th (0 <= i < n) in manifest order, or by name (returns
 * -1 when absent). */
uint32_t ix_store_n_sections(const store *s);
const ix_store_section_desc *ix_store_section_at(const store *s, uint32_t i);
int64_t ix_store_find(const store *s, const char *name);

/* The caller's "meta" object and the whole manifest, owned by the store. */
const cJSON *ix_store_meta(const store *s);
const cJSON *ix_store_manifest(const store *s);

/* Format version of the opened index (to upgrade older minors). */
void ix_store_format_version(const store *s, uint32_t *major, uint32_t *minor);

/* The manifest's generation: 1 for a new index, + 1 for every change committed since
 * (a rebuild continues from the index it replaced); 0 for indexes from before format
 * 1.1, which did not record it. */
uint64_t ix_store_generation(const store *s);

/* An identity of the index's data: a hash of every section's name, size and payload
 * checksum, in manifest order. Equal ids mean the same section bytes (a meta update
 * keeps it; a rebuild from other input or settings changes it), so a result measured
 * on one index (a tuned profile) can be checked to still describe the current one. */
uint64_t ix_store_data_id(const store *s);

/* Options of ix_store_update_meta; zero means default. */
typedef struct ix_store_update_opts {
    int lock_timeout_ms;        /* as in ix_store_write_opts */
    int check_generation;       /* 1: CHIMERA_ERR_CONFLICT unless the index is still at
                                   expect_generation when the lock is held */
    uint64_t expect_generation;
} ix_store_update_opts;

/* Edits a copy of the current "meta" object in place, under the writer lock. `current`
 * is the index as it is now (ix_store_info: manifest only), so the edit can merge into
 * what other writers committed and check that the data is what it expects. Return
 * CHIMERA_OK to commit, anything else (with a message in err) to change nothing. */
typedef chimera_status (*ix_store_meta_edit_fn)(cJSON *meta, const store *current, void *user,
                                                chimera_error *err);

/* Read-modify-write of the "meta" object of the index at `dir` (tuned profiles, notes),
 * under the writer lock: reads the current manifest, checks the generation if asked,
 * lets `edit` change a copy of its meta, then writes a new manifest (generation + 1)
 * beside the old one, syncs it and renames it over, so readers see one or the other;
 * section files are untouched. An index open elsewhere keeps its view.
 * @return CHIMERA_OK; the statuses of ix_store_info (the index must exist and be valid);
 *         _BUSY (lock timeout); _CONFLICT (check_generation); what `edit` returned;
 *         _INVALID_ARG (no edit, or it left meta not an object); _IO; _NOMEM. */
chimera_status ix_store_update_meta(const char *dir, const ix_store_update_opts *opts,
                                    ix_store_meta_edit_fn edit, void *user, chimera_error *err);

/* ---- the writer lock ------------------------------------------------------------------ */

/* Default wait for the lock. Holders keep it for a manifest write and a rename, or a
 * directory swap and the deletion of the old index's files: well under a second even
 * for large indexes on slow disks; 30 s only gives up on a holder that is stuck
 * (stopped, or on a hung network file system). */
#define STORE_LOCK_WAIT_MS 30000

typedef struct ix_store_lock ix_store_lock; /* declared above as struct ix_store_lock */

/* Takes the writer lock of the index at `dir` (whether or not it exists yet): creates
 * "<dir>.lock" if needed (it is never deleted: removing a lock file races with a
 * process about to lock it), waits for it up to timeout_ms (0: STORE_LOCK_WAIT_MS;
 * < 0: not at all) and records this process's id in it for other waiters' messages.
 * Every writer (ix_store_writer_begin/commit, ix_store_update_meta) takes it itself; a writer
 * that needs several steps to be atomic holds it around them.
 * @return CHIMERA_OK; CHIMERA_ERR_BUSY ("index X is being changed by another process
 *         (pid N)"), CHIMERA_ERR_IO (the lock file cannot be created: the parent is
 *         missing or read-only), CHIMERA_ERR_INVALID_ARG (bad path), _NOMEM.
 * @note The lock excludes other processes and other threads alike (it belongs to the
 *       open file, not the process). A child forked while it is held shares it. */
chimera_status ix_store_lock_acquire(const char *dir, int timeout_ms, ix_store_lock **out,
                                     chimera_error *err);

/* CHIMERA_OK where dir is a directory that opens, or is missing while its lock file
 * exists (a replace in progress: the writer waits for the lock, then opens); else
 * ix_store_open's error for it (a missing one named with what an interrupted replace
 * left beside it). The writers of an existing index ask it before taking the lock, whose
 * file beside the directory a mistyped path would otherwise leave behind. */
chimera_status ix_store_require_dir(const char *dir, chimera_error *err);

/* Releases the lock and frees it. NULL is a no-op. */
void ix_store_lock_release(ix_store_lock *l);

/* Unmaps everything and frees the store. NULL is a no-op. */
void ix_store_close(store *s);

#endif
