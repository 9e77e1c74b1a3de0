/* The on-disk container of a Chimera index: every byte (docs/format.md says the same in
 * prose).
 *
 * An index is a directory holding one file per section plus a manifest:
 *
 *     IDX/
 *       manifest.json      the commit point: written last, fsynced, then the directory
 *       <name>.bin         one per section: a 64-byte header, then the payload
 *
 * This layer is generic: a section is a named run of bytes (optionally typed with an
 * element type and a shape), and the manifest carries a free-form "meta" object. What the
 * sections hold is defined by the index build.
 *
 * Byte order. Every header field below is little-endian and fixed-width, encoded and
 * decoded byte by byte (never a cast of a struct, never size_t or an enum). Payloads are
 * arrays that readers map and use in place, so they are in the byte order of the machine
 * that wrote them; the writer refuses to run on a big-endian host, which makes the whole
 * format little-endian. The endianness mark is the 32-bit value 0x01020304 stored in
 * native order: on disk it reads 04 03 02 01, and a file that reads 01 02 03 04 came from
 * a big-endian writer (CHIMERA_ERR_UNSUPPORTED); anything else is corruption.
 *
 * Section file (<name>.bin), 64-byte header, all offsets in bytes:
 *
 *     off size  field
 *       0    8  magic            "CHIMSEC\0"  (43 48 49 4D 53 45 43 00)
 *       8    2  format_major     u16, FMT_VERSION_MAJOR of the writer
 *      10    2  format_minor     u16, FMT_VERSION_MINOR of the writer
 *      12    4  endian_mark      04 03 02 01 (see above)
 *      16    8  payload_bytes    u64, bytes after the header; the file is exactly
 *                                64 + payload_bytes long
 *      24    8  payload_xxh3     u64, XXH3-64 (seed 0) of the payload bytes
 *      32   24  name             section name, NUL-padded: 1..23 bytes of
 *                                [A-Za-z0-9_-], first byte a letter or digit; at least
 *                                one NUL; every byte after the first NUL is NUL
 *      56    4  reserved         u32, zero (a reader refuses non-zero)
 *      60    4  header_check     u32, low 32 bits of XXH3-64 (seed 0) of bytes 0..59
 *      64    -  payload          payload_bytes bytes; 64-byte aligned in a mapping
 *
 * The header checksum lets a reader catch a damaged header at open without hashing the
 * payload; the payload checksum (recomputed only when verification is asked for) is
 * stored twice, here and in the manifest, and the two must agree.
 *
 * Manifest (manifest.json), UTF-8 JSON, at most FMT_MANIFEST_MAX_BYTES, one object:
 *
 *     {
 *       "magic": "chimera-index",
 *       "format_major": 1,            integer
 *       "format_minor": 0,            integer
 *       "library_version": "0.1.0",   CHIMERA_VERSION_STRING of the writer (informative)
 *       "endian": "little",
 *       "generation": 3,              integer in [0, 2^53], since 1.1 (absent: 0): 1 for
 *                                     a new index, + 1 for every change committed
 *                                     (store.h: the writer protocol)
 *       "meta": { ... },              free-form object supplied by the index build
 *       "sections": [                 at most FMT_MAX_SECTIONS, names unique
 *         { "name": "centroids",
 *           "file": "centroids.bin",  always name + ".bin" (nothing else is accepted,
 *                                     so a manifest cannot point outside the directory)
 *           "offset": 64,             payload offset in the file (always FMT_HEADER_BYTES)
 *           "bytes": 524288,          payload bytes, an integer <= 2^53
 *           "xxh3": "9f0c...",        payload XXH3-64 as 16 lowercase hex digits
 *           "dtype": "f32",           optional: element type (ix_fmt_dtype_size lists them)
 *           "shape": [1024, 128] },   optional, only with dtype: 1..FMT_MAX_DIMS
 *         ... ],                      integers whose product * dtype size == bytes
 *       "manifest_xxh3": "..."        XXH3-64 of the canonical text of this object
 *     }
 *
 * "manifest_xxh3" is always the last member. Its value is the XXH3-64 of the manifest
 * object *without* that member, printed by cJSON_PrintUnformatted (the canonical form:
 * no whitespace, members in file order, numbers as cJSON prints them). A reader parses
 * the file, detaches the member, re-prints and compares, which catches any change to
 * the manifest's content (whitespace aside). 64-bit values (checksums) are hex strings
 * because JSON numbers are doubles; sizes and shapes stay numbers, so they are capped at
 * 2^53, where doubles are still exact.
 *
 * Versions. A reader refuses a different major (CHIMERA_ERR_VERSION, "index format X.Y,
 * this library reads A.x") before checking anything else about the manifest, since a new
 * major may change any of it. Minor versions only add: new optional manifest members or
 * new sections that an older reader may ignore; such a reader accepts any minor of its
 * major, and a newer reader upgrades older minors (the index build decides what a
 * missing optional part means). A change an older reader cannot ignore bumps the major.
 *
 * Version history
 *   1.0  (Chimera 0.1.0) first version: the layout above.
 *   1.1  (Chimera 0.2.0) the manifest member "generation" (optional; a 1.0 reader
 *        ignores it, a 1.1 reader reads its absence as 0). Nothing else changed.
 *   1.1  (Chimera 0.3.0) adds the optional per-segment section id_order; a build writes
 *        it, a reader computes it for indexes without.
 *   2.0  (Chimera 0.3.0) a living index: documents appended as segments and deletions
 *        as tombstone lists (meta "segments", "tombstones"; sections "s<seq>_<name>",
 *        "t<seq>_del"). A 1.x reader could not ignore them (it would miss documents
 *        or bring deleted ones back), hence the major. The container is unchanged; a
 *        section file's header carries the major of the writer that made it (1 or 2),
 *        at most the manifest's. A compaction writes 1.1 again. This library reads
 *        both majors.
 *   1.2, 2.1 (Chimera 0.4.0) the optional per-segment sections vectors_f32,
 *        vectors_bf16, vectors_f16: the original token vectors of an index built with
 *        --rerank (one element type per index, in every segment), for the exact
 *        re-rank. Older readers ignore them (they search without re-rank), hence a
 *        minor. An older writer's add appends a segment without them and its compaction
 *        drops them; this reader then refuses only a re-rank (the tier is incomplete)
 *        and its own compaction and merges leave such segments without.
 */
#ifndef CHIMERA_INDEX_FORMAT_H
#define CHIMERA_INDEX_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"

#define FMT_VERSION_MAJOR 1 /* what a build or a compaction writes */
#define FMT_VERSION_MINOR 2
#define FMT_LIVING_MAJOR 2  /* an index with appended segments or tombstone lists */
#define FMT_LIVING_MINOR 1
#define FMT_MAX_MAJOR 2     /* this library reads majors 1 .. FMT_MAX_MAJOR */

#define FMT_MANIFEST_NAME "manifest.json"
#define FMT_MANIFEST_MAGIC "chimera-index"
#define FMT_SECTION_SUFFIX ".bin"

#define FMT_HEADER_BYTES 64
#define FMT_SECTION_MAGIC "CHIMSEC" /* 7 chars + NUL = the 8 magic bytes */
#define FMT_ENDIAN_MARK 0x01020304u
#define FMT_ENDIAN_MARK_SWAPPED 0x04030201u /* as read from a big-endian writer's file */
#define FMT_NAME_BYTES 24 /* name field; names are 1..FMT_NAME_BYTES-1 bytes */
#define FMT_NAME_MAX (FMT_NAME_BYTES - 1)

/* Caps a reader applies before allocating anything (manifests are hostile input). A
 * manifest is a few KiB in practice; 16 MiB leaves room for a large "meta". */
#define FMT_MANIFEST_MAX_BYTES (16u << 20)
#define FMT_MAX_SECTIONS 1024
#define FMT_MAX_DIMS 4
#define FMT_MAX_JSON_INT 9007199254740992.0 /* 2^53 */

/* A decoded section header (host representation; the disk form is the table above). */
typedef struct ix_fmt_section_header {
    uint16_t format_major, format_minor;
    uint32_t endian_mark;  /* read little-endian: FMT_ENDIAN_MARK when the order is ours */
    uint64_t payload_bytes;
    uint64_t payload_xxh3;
    char name[FMT_NAME_BYTES]; /* NUL-terminated after decoding */
    uint32_t reserved;
    uint32_t header_check;     /* as stored */
    uint32_t header_check_calc; /* recomputed over bytes 0..59 by ix_fmt_header_decode */
    int magic_ok;              /* the 8 magic bytes matched */
    int name_ok;               /* the name field is well formed (see the table) */
} ix_fmt_section_header;

/* Little-endian stores and loads. */
static inline void ix_fmt_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void ix_fmt_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ix_fmt_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t ix_fmt_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t ix_fmt_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t ix_fmt_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Encodes a header for section `name` (valid per ix_fmt_name_valid) into out[64], with
 * format version major.minor, the native endianness mark and the header checksum. */
void ix_fmt_header_encode(uint8_t out[FMT_HEADER_BYTES], const char *name, uint16_t major,
                          uint16_t minor, uint64_t payload_bytes, uint64_t payload_xxh3);

/* Decodes in[64] field by field; never fails (the reader judges the fields). */
void ix_fmt_header_decode(const uint8_t in[FMT_HEADER_BYTES], ix_fmt_section_header *h);

/* 1 when `name` is a valid section name: 1..FMT_NAME_MAX bytes of [A-Za-z0-9_-], the
 * first a letter or digit (so "<name>.bin" is a plain file name inside the index). */
int ix_fmt_name_valid(const char *name);

/* Size in bytes of an element type name ("u8" "i8" "u16" "i16" "f16" "bf16" "u32" "i32"
 * "f32" "u64" "i64" "f64"); 0 for anything else. */
size_t ix_fmt_dtype_size(const char *dtype);

/* XXH3-64 as 16 lowercase hex digits plus NUL; ix_fmt_hex_parse reads exactly that form
 * (returns 0 on success, -1 otherwise). */
void ix_fmt_hex_format(char out[17], uint64_t v);
int ix_fmt_hex_parse(const char *s, uint64_t *v);

/* 1 when this host stores integers little-endian (the only byte order written). */
int ix_fmt_host_little_endian(void);

#endif
