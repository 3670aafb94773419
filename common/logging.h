/* Internal: the one logger. */
#ifndef KILN_COMMON_LOGGING_H
#define KILN_COMMON_LOGGING_H

#include "kiln/log.h"

void kiln_log(kiln_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kiln_log_enabled(kiln_log_level level);

#endif
