/* kiln — versions of the library and of the cache schema. */
#ifndef KILN_VERSION_H
#define KILN_VERSION_H

#include "kiln/api.h"

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 2
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.2.0"

/* Schema of index.sqlite (PRAGMA user_version). Bumped on incompatible change. */
#define KILN_CACHE_SCHEMA_VERSION 4

#ifdef __cplusplus
extern "C" {
#endif

KILN_API const char *kiln_version(void);

#ifdef __cplusplus
}
#endif
#endif
