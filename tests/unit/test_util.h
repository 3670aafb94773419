/* Shared by the unit tests: a temp directory per test, removed afterwards. */
#ifndef KILN_TEST_UTIL_H
#define KILN_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void test_make_tmpdir(char *out, size_t cap) {
  const char *base = getenv("TMPDIR");
  snprintf(out, cap, "%s/kiln-unit-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(out)) abort();
}

/* Removes dir and everything under it; nonzero (and a line on stderr) when
 * that failed, for a test that counts a leftover directory as a failure. */
static inline int test_rm_rf(const char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
  if (system(cmd) == 0) return 0;
  fprintf(stderr, "could not remove %s\n", dir);
  return 1;
}

#endif
