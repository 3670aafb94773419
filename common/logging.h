/* Internal: the one logger.
 *
 * The bottom of common/: it depends on nothing else of kiln (error.c logs
 * through it, params.c reads every other variable), so it reads its own
 * variable, KILN_LOG, itself. */
#ifndef KILN_COMMON_LOGGING_H
#define KILN_COMMON_LOGGING_H

#include "kiln/log.h"
#include "kiln/status.h"

void kiln_log(kiln_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kiln_log_enabled(kiln_log_level level);
/* KILN_LOG as set: KILN_ENOTFOUND when unset, KILN_EINVAL when it is not
 * error|warn|info|debug (the logger then says so once, at warn, and uses warn). */
kiln_status kiln_log_env_level(kiln_log_level *out);

#endif
