/* What include/kiln/comm.h offers the writers of communicators, outside any
 * one transport: the error a failed collective reports. common/ knows nothing
 * of communicators; this sits with them. */
#include <stdarg.h> /* va_list */
#include <stdio.h>  /* vsnprintf */

#include "common/error.h" /* kiln_fail */
#include "kiln/comm.h"

KILN_API kiln_status kiln_comm_error(kiln_status st, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  if (vsnprintf(line, sizeof line, fmt, ap) < 0) line[0] = '\0';
  va_end(ap);
  return kiln_fail(st, "%s", line);
}
