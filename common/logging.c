/* The library logger: level from KILN_LOG, lines to stderr or a callback. */
#include "common/logging.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "common/params.h"

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int level = KILN_LOG_WARN;
static int level_forced = 0;
static kiln_log_fn callback;
static void *callback_user;
static pthread_mutex_t emit_lock = PTHREAD_MUTEX_INITIALIZER;

static void init_level(void) {
  kiln_log_level env;
  if (!level_forced && kiln_param_log_level(&env) == KILN_OK) level = env;
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
  static const char *names[] = {"error", "warn", "info", "debug"};
  char line[1024];
  va_list ap;
  if (!kiln_log_enabled(l)) return;
  va_start(ap, fmt);
  if (vsnprintf(line, sizeof line, fmt, ap) < 0) line[0] = '\0';
  va_end(ap);
  pthread_mutex_lock(&emit_lock);
  if (callback) callback(l, line, callback_user);
  else fprintf(stderr, "kiln %s: %s\n", names[l], line);
  pthread_mutex_unlock(&emit_lock);
}
