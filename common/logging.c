/* The library logger: level from KILN_LOG, lines to stderr or a callback. */
#include "common/logging.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int level = KILN_LOG_WARN;
static int level_forced = 0;
static kiln_log_fn callback;
static void *callback_user;
static pthread_mutex_t emit_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void emit(kiln_log_level l, const char *line) {
  pthread_mutex_lock(&emit_lock);
  if (callback)
    callback(l, line, callback_user);
  else
    fprintf(stderr, "kiln %s: %s\n", level_names[l], line);
  pthread_mutex_unlock(&emit_lock);
}

kiln_status kiln_log_env_level(kiln_log_level *out) {
  const char *v = getenv("KILN_LOG");
  if (!v || !*v) return KILN_ENOTFOUND;
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(v, level_names[i]) == 0) {
      *out = (kiln_log_level)i;
      return KILN_OK;
    }
  }
  return KILN_EINVAL;
}

static void init_level(void) {
  kiln_log_level env;
  kiln_status st = kiln_log_env_level(&env);
  if (!level_forced && st == KILN_OK) level = env;
  if (st == KILN_EINVAL) {
    char line[256];
    snprintf(line, sizeof line, "KILN_LOG='%s' is not one of error|warn|info|debug; using warn",
             getenv("KILN_LOG"));
    emit(KILN_LOG_WARN, line); /* not kiln_log: that would wait for this very once */
  }
}

void kiln_log_set_level(kiln_log_level l) {
  pthread_once(&level_once, init_level);
  level = l;
  level_forced = 1;
}

kiln_log_level kiln_log_get_level(void) {
  pthread_once(&level_once, init_level);
  return (kiln_log_level)level;
}

void kiln_log_set_callback(kiln_log_fn fn, void *user) {
  pthread_mutex_lock(&emit_lock);
  callback = fn;
  callback_user = user;
  pthread_mutex_unlock(&emit_lock);
}

int kiln_log_enabled(kiln_log_level l) {
  return (int)l <= (int)kiln_log_get_level();
}

void kiln_log(kiln_log_level l, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  if (!kiln_log_enabled(l)) return;
  va_start(ap, fmt);
  if (vsnprintf(line, sizeof line, fmt, ap) < 0) line[0] = '\0';
  va_end(ap);
  emit(l, line);
}
