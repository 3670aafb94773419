/* Library version string. */
#include "kiln/version.h"

const char *kiln_version(void) {
  return KILN_VERSION_STRING;
}
