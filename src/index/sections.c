/* The section list of sections.h as data, for the code that loops over sections (open,
 * info, the tests) rather than naming them. */
#include <string.h>

#include "index/sections.h"

const ix_section_def ix_sections[IX_N_SECTIONS] = {
#define IX_SEC_DEF(name, dtype, shape, where, need, content)                                  \
    [IX_SEC_##name] = {#name, dtype, shape, content, where, need},
    IX_SECTIONS(IX_SEC_DEF)
#undef IX_SEC_DEF
};

const ix_section_def *ix_section_find(const char *name)
{
    for (int i = 0; i < IX_N_SECTIONS; i++)
        if (strcmp(ix_sections[i].name, name) == 0) return &ix_sections[i];
    return NULL;
}
