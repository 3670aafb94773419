/* registry.h — internal lookups over the unit registry (kiln/kernels.h is
 * the public side). */
#ifndef KILN_KERNELS_REGISTRY_H
#define KILN_KERNELS_REGISTRY_H

#include <stddef.h>

/* The unit index (kiln_unit_at order) and entry index of the entry point
 * called name; 0, or -1 when no registered unit has it. A hash lookup, cheap
 * enough for every launch. */
int kiln_entry_find(const char *name, size_t *unit, size_t *entry);

#endif
