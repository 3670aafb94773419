/* Status names and the thread-local last error. */
#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/logging.h"

/* Room for a build log's tail (a compile error reaches every rank whole). */
static _Thread_local char last_error[4096];

const char *kiln_status_str(kiln_status st) {
  switch (st) {
  case KILN_OK: return "KILN_OK";
  case KILN_EINVAL: return "KILN_EINVAL";
  case KILN_ENOMEM: return "KILN_ENOMEM";
  case KILN_EIO: return "KILN_EIO";
  case KILN_ENOTFOUND: return "KILN_ENOTFOUND";
  case KILN_EEXISTS: return "KILN_EEXISTS";
  case KILN_ECORRUPT: return "KILN_ECORRUPT";
  case KILN_EPERM: return "KILN_EPERM";
  case KILN_ENOSPC: return "KILN_ENOSPC";
  case KILN_ECOMPILE: return "KILN_ECOMPILE";
  case KILN_ENONVRTC: return "KILN_ENONVRTC";
  case KILN_EDB: return "KILN_EDB";
  case KILN_EUNSUPPORTED: return "KILN_EUNSUPPORTED";
  case KILN_ELOCKED: return "KILN_ELOCKED";
  case KILN_ETIMEDOUT: return "KILN_ETIMEDOUT";
  case KILN_EPEER: return "KILN_EPEER";
  case KILN_EMISMATCH: return "KILN_EMISMATCH";
  case KILN_EDRIVER: return "KILN_EDRIVER";
  case KILN_EREMOTE: return "KILN_EREMOTE";
  case KILN_EINTERNAL: return "KILN_EINTERNAL";
  }
  return "KILN_E?";
}

const char *kiln_last_error(void) {
  return last_error;
}

static void set_error(const char *fmt, va_list ap) {
  if (vsnprintf(last_error, sizeof last_error, fmt, ap) < 0) last_error[0] = '\0';
}

kiln_status kiln_fail(kiln_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_error(fmt, ap);
  va_end(ap);
  kiln_log(KILN_LOG_DEBUG, "%s: %s", kiln_status_str(st), last_error);
  return st;
}

kiln_status kiln_fail_errno(kiln_status st, int err, const char *fmt, ...) {
  char head[768];
  va_list ap;
  va_start(ap, fmt);
  if (vsnprintf(head, sizeof head, fmt, ap) < 0) head[0] = '\0';
  va_end(ap);
  if (st == KILN_EIO) {
    if (err == ENOSPC || err == EDQUOT)
      st = KILN_ENOSPC;
    else if (err == EACCES || err == EPERM || err == EROFS)
      st = KILN_EPERM;
    else if (err == ENOMEM)
      st = KILN_ENOMEM;
  }
  return kiln_fail(st, "%s: %s", head, strerror(err));
}
