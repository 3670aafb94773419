/* kiln — status codes and the thread-local last error.
 *
 * Every fallible kiln function returns a kiln_status. KILN_OK is 0, failures
 * are negative and are never renumbered. The detail of the most recent failure
 * on the calling thread is kept in kiln_last_error(). */
#ifndef KILN_STATUS_H
#define KILN_STATUS_H

#include "kiln/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_EINVAL = -1,        /* invalid argument or input */
  KILN_ENOMEM = -2,        /* out of memory */
  KILN_EIO = -3,           /* file system error (errno text in the detail) */
  KILN_ENOTFOUND = -4,     /* no such record, unit, target or file */
  KILN_EEXISTS = -5,       /* already exists */
  KILN_ECORRUPT = -6,      /* digest mismatch, truncated blob, malformed record */
  KILN_EPERM = -7,         /* unsafe ownership or permissions */
  KILN_ENOSPC = -8,        /* no space left on the device */
  KILN_ECOMPILE = -9,      /* the kernel failed to compile (log in the record) */
  KILN_ENONVRTC = -10,     /* NVRTC could not be loaded */
  KILN_EDB = -11,          /* the sqlite index failed */
  KILN_EUNSUPPORTED = -12, /* unsupported target or feature */
  KILN_ELOCKED = -13,      /* held by another process */
  KILN_ETIMEDOUT = -14,    /* a bounded wait ran out */
  KILN_EPEER = -15,        /* a peer rank failed or went silent */
  KILN_EMISMATCH = -16,    /* ranks or layers disagree */
  KILN_EDRIVER = -17,      /* the CUDA driver failed */
  KILN_EREMOTE = -18,      /* the remote cache failed */
  KILN_EINTERNAL = -19,    /* a bug in kiln */
} kiln_status;

/* Short constant name of a status, e.g. "KILN_ENOSPC". Never NULL. */
KILN_API const char *kiln_status_str(kiln_status st);

/* One-line detail of the most recent failure on this thread ("" if none).
 * Valid until the next kiln call on this thread. */
KILN_API const char *kiln_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
