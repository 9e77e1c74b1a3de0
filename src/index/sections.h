/* The sections of a Chimera index, listed once.
 *
 * Each X(name, dtype, shape, where, need, scope, content) line is one section, in the order
 * the build writes them. The list drives the build (order and element types), open
 * (presence and element type of every section), info (device versus host bytes), the
 * tests' list of sections, and the table in docs/format.md, which tests/test_format_doc.sh
 * compares with this list (name, dtype, shape, residency), so the document cannot drift.
 * Adding a section is one line here, plus the code that fills it (build.c) and reads it
 * (open.c): both find it by its IX_SEC_<name> index.
 *
 *   dtype    element type, as the manifest records it (ix_fmt_dtype_size knows each)
 *   shape    in the counts of docs/format.md: K = clusters, N = tokens, D = documents,
 *            c1 = dim_pad / 8, cB = B-bit code bytes
 *   where    IX_DEVICE: the GPU backend uploads it as it is; IX_HOST: read on the host
 *            only (full-bit re-scoring, id mapping on output)
 *   need     IX_REQUIRED: open refuses an index without it; IX_OPTIONAL: absent reads
 *            as NULL (id_order: indexes from before it are sorted at open; post_cid:
 *            only segments whose lists are sparse have it; vectors_*: only an index
 *            built with --rerank has them, one of the three in every segment)
 *   scope    IX_SHARED: one per index; IX_SEGMENT: one per segment (docs/format.md,
 *            "Segments"): the base segment's under the plain name, an appended
 *            segment's under "s<seq>_<name>". D, N and K-lists count that segment's.
 *   content  one line for readers of this header; docs/format.md says more */
#ifndef CHIMERA_INDEX_SECTIONS_H
#define CHIMERA_INDEX_SECTIONS_H

#define IX_DEVICE 1
#define IX_HOST 0
#define IX_REQUIRED 1
#define IX_OPTIONAL 0
#define IX_SHARED 0
#define IX_SEGMENT 1
#define IX_BASE 2 /* the base segment only (the build's deletion bitmap) */

/* clang-format off */
#define IX_SECTIONS(X)                                                                        \
    X(rotation,    "u8",  "[bytes]",     IX_DEVICE, IX_REQUIRED, IX_SHARED,  "serialised quant_rotation (the index's P)") \
    X(centroids,   "f32", "[K, dim]",    IX_DEVICE, IX_REQUIRED, IX_SHARED,  "unit centroids of the fine IVF (original space)") \
    X(graph_adj,   "u32", "[K, degree]", IX_DEVICE, IX_REQUIRED, IX_SHARED,  "proximity graph over the centroids") \
    X(graph_entry, "u32", "[n_entry]",   IX_DEVICE, IX_REQUIRED, IX_SHARED,  "its entry points") \
    X(post_off,    "i64", "[L + 1]",     IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "posting list l = positions post_off[l] .. post_off[l+1]") \
    X(post_tok,    "u32", "[N]",         IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "token (doc-major row) at each posting position") \
    X(post_doc,    "u32", "[N]",         IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "document of each posting position") \
    X(c1_codes,    "u8",  "[N, c1]",     IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "1-bit planes, cluster-major (posting order)") \
    X(c1_fact,     "u16", "[N, 3]",      IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "their quant_f1 factors") \
    X(d1_codes,    "u8",  "[N, c1]",     IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "1-bit planes, doc-major (token order)") \
    X(d1_fact,     "u16", "[N, 3]",      IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "their quant_f1 factors") \
    X(tok_cid,     "u32", "[N]",         IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "centroid of each token (doc-major)") \
    X(dB_codes,    "u8",  "[N, cB]",     IX_HOST,   IX_REQUIRED, IX_SEGMENT, "full B-bit codes, doc-major") \
    X(dB_fact,     "u8",  "[N, 8]",      IX_HOST,   IX_REQUIRED, IX_SEGMENT, "their quant_fB factors") \
    X(doc_off,     "i64", "[D + 1]",     IX_DEVICE, IX_REQUIRED, IX_SEGMENT, "document d = tokens doc_off[d] .. doc_off[d+1]") \
    X(doc_ids,     "i64", "[D]",         IX_HOST,   IX_REQUIRED, IX_SEGMENT, "user id of each document") \
    X(deleted,     "u8",  "[ceil(D/8)]", IX_DEVICE, IX_REQUIRED, IX_BASE,    "deletion bitmap of the base segment (bit d % 8 of byte d / 8)") \
    X(post_cid,    "u32", "[L]",         IX_DEVICE, IX_OPTIONAL, IX_SEGMENT, "cluster of each posting list, increasing (absent: L = K, list l is cluster l)") \
    X(id_order,    "u32", "[D]",         IX_HOST,   IX_OPTIONAL, IX_SEGMENT, "documents in increasing user id (ties: increasing document)") \
    X(vectors_f32, "f32", "[N, dim]",    IX_HOST,   IX_OPTIONAL, IX_SEGMENT, "the original token vectors, doc-major, for the exact re-rank (build --rerank f32)") \
    X(vectors_bf16, "bf16", "[N, dim]",  IX_HOST,   IX_OPTIONAL, IX_SEGMENT, "the same in bfloat16 (--rerank bf16)") \
    X(vectors_f16, "f16", "[N, dim]",    IX_HOST,   IX_OPTIONAL, IX_SEGMENT, "the same in IEEE half (--rerank f16)")
/* clang-format on */

/* IX_SEC_rotation, IX_SEC_centroids, ...: a section's position in the list. */
enum ix_section_id {
#define IX_SEC_ENUM(name, dtype, shape, where, need, scope, content) IX_SEC_##name,
    IX_SECTIONS(IX_SEC_ENUM)
#undef IX_SEC_ENUM
    IX_N_SECTIONS
};

typedef struct ix_section_def {
    const char *name, *dtype, *shape, *content;
    int on_device, required, scope;
} ix_section_def;

/* The list as data, indexed by enum ix_section_id (defined in info.c). */
extern const ix_section_def ix_sections[IX_N_SECTIONS];

/* The entry for `name`, or NULL for a name that is not an index section. An appended
 * segment's "s<seq>_<name>", a tombstone list's "t<seq>_del", stored metadata records
 * ("m<seq>_meta", "s<seq>_meta") and a delete's ids ("d<seq>_ids") count as their kind
 * (the last two host-only). */
const ix_section_def *ix_section_find(const char *name);

/* Non-zero for a section that carries one metadata change to the database (records or
 * a delete's ids, named by an entry of meta.metadata.log: index/metadata.h). */
int ix_section_is_metadata_change(const char *name);

#endif
