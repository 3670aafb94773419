/* kiln — the library logger. Level from KILN_LOG (error|warn|info|debug),
 * default warn; output to stderr or to a host callback. */
#ifndef KILN_LOG_H
#define KILN_LOG_H

#include "kiln/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_log_level {
  KILN_LOG_ERROR = 0,
  KILN_LOG_WARN = 1,
  KILN_LOG_INFO = 2,
  KILN_LOG_DEBUG = 3,
} kiln_log_level;

typedef void (*kiln_log_fn)(kiln_log_level level, const char *line, void *user);

/* Sets the level; overrides KILN_LOG. */
KILN_API void kiln_log_set_level(kiln_log_level level);
KILN_API kiln_log_level kiln_log_get_level(void);
/* Routes log lines to fn (NULL restores stderr). Lines carry no newline. */
KILN_API void kiln_log_set_callback(kiln_log_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
