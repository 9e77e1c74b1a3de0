/* The section list of sections.h as data, for the code that loops over sections (open,
 * info, the tests) rather than naming them. */
#include <string.h>

#include "index/sections.h"

const ix_section_def ix_sections[IX_N_SECTIONS] = {
#define IX_SEC_DEF(name, dtype, shape, where, need, scope, content)                           \
    [IX_SEC_##name] = {#name, dtype, shape, content, where, need, scope},
    IX_SECTIONS(IX_SEC_DEF)
#undef IX_SEC_DEF
};

static const ix_section_def tombstones = {"del", "u32", "[n]", "deleted documents", 1, 0,
                                          IX_SHARED};
static const ix_section_def metadata = {"meta", "u8", "[bytes]",
                                        "metadata records (index/metadata.h)", 0, 0, IX_SHARED};
static const ix_section_def deleted_ids = {"ids", "i64", "[n]",
                                           "ids whose metadata a delete removed (index/metadata.h)",
                                           0, 0, IX_SHARED};

const ix_section_def *ix_section_find(const char *name)
{
    /* "s<digits>_<name>" is a segment's copy of <name>; "t<digits>_del" a tombstone list;
     * "d<digits>_ids" a delete's ids (and every other "d..." a name of the list: d1_codes) */
    if ((name[0] == 's' || name[0] == 't' || name[0] == 'm' || name[0] == 'd') && name[1] >= '0' &&
        name[1] <= '9') {
        const char *p = name + 1;
        while (*p >= '0' && *p <= '9') p++;
        if (name[0] == 'd') {
            if (strcmp(p, "_ids") == 0) return &deleted_ids;
        } else if (*p == '_') {
            if (name[0] == 't') return strcmp(p + 1, "del") == 0 ? &tombstones : NULL;
            if (strcmp(p + 1, "meta") == 0) return &metadata; /* s<seq>_ or m<seq>_ */
            if (name[0] == 'm') return NULL;
            const ix_section_def *d = ix_section_find(p + 1);
            return d && d->scope == IX_SEGMENT ? d : NULL;
        }
    }
    for (int i = 0; i < IX_N_SECTIONS; i++)
        if (strcmp(ix_sections[i].name, name) == 0) return &ix_sections[i];
    return NULL;
}

int ix_section_is_metadata_change(const char *name)
{
    const ix_section_def *d = ix_section_find(name);
    return d == &metadata || d == &deleted_ids;
}
