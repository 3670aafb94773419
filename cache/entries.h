/* Internal: whether an image holds a unit's entry points, read from its own
 * bytes (no driver): a CUBIN's ELF symbol table, a PTX's `.entry` lines.
 *
 * A record may name a valid blob of another unit (a hostile index, a
 * writable layer, an unsigned remote): its digest verifies, and only the
 * entry points tell. kiln cache verify, kiln check and the loader ask. */
#ifndef KILN_CACHE_ENTRIES_H
#define KILN_CACHE_ENTRIES_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/kernels.h" /* kiln_unit_info */

/* NULL when img (kind "cubin" or "ptx", size bytes, no NUL needed) defines
 * every entry point of unit: in a CUBIN a global, defined STT_FUNC symbol of
 * that name, in a PTX an `.entry NAME` directive. Else the first name it
 * lacks (static storage, the unit's). A CUBIN whose symbol table cannot be
 * read is not judged (NULL): its shape is loader/image.c's to check. */
const char *kiln_image_missing_entry(const uint8_t *img, size_t size, const char *kind,
                                     const kiln_unit_info *unit);

#endif
