/* fake_kernels.cpp — the table of runnable entry points over every family of
 * KILN_FAKE_FAMILIES (fake_kernels.h). */
#include <string.h> /* strcmp */

#include "fake_kernels.h"

namespace kiln_fake {

/* Empty until a fake_<family>.cpp defines the family (a strong definition
 * wins at link time). */
#define KILN_FAKE_FAMILY_WEAK_(f)                                                                  \
  __attribute__((weak)) extern const family kFamily_##f = {nullptr, 0};
KILN_FAKE_FAMILIES(KILN_FAKE_FAMILY_WEAK_)
#undef KILN_FAKE_FAMILY_WEAK_

const entry *find_entry(const char *name) {
  static const family *const families[] = {
#define KILN_FAKE_FAMILY_REF_(f) &kFamily_##f,
      KILN_FAKE_FAMILIES(KILN_FAKE_FAMILY_REF_)
#undef KILN_FAKE_FAMILY_REF_
  };
  for (const family *f : families)
    for (int i = 0; i < f->count; ++i)
      if (!strcmp(f->entries[i].name, name)) return &f->entries[i];
  return nullptr;
}

} // namespace kiln_fake
