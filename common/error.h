/* Internal: setting the thread-local last error and the check macros. */
#ifndef KILN_COMMON_ERROR_H
#define KILN_COMMON_ERROR_H

#include "kiln/status.h"

/* Records a one-line detail for the calling thread and returns st. */
kiln_status kiln_fail(kiln_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like kiln_fail, appending ": <strerror(err)>", and mapping ENOSPC/EDQUOT to
 * KILN_ENOSPC and EACCES/EPERM/EROFS to KILN_EPERM when st is KILN_EIO. */
kiln_status kiln_fail_errno(kiln_status st, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Propagates a failing kiln_status: rc = (expr); on failure, goto out. */
#define KILN_CHECK(expr)                                                                           \
  do {                                                                                             \
    rc = (expr);                                                                                   \
    if (rc != KILN_OK) goto out;                                                                   \
  } while (0)

#endif
