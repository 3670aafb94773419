/* cache/lease.c: the "holder pid is gone" rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/lease.h"

/* A child that has exited and been reaped. */
static pid_t reaped_child(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  assert_true(pid > 0);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  return pid;
}

static void test_pid_gone_only_for_a_process_that_is_no_more(void **state) {
  (void)state;
  assert_int_equal(kiln_pid_gone((long)getpid()), 0);
  assert_int_equal(kiln_pid_gone(1), 0); /* alive, even when not ours to signal */
  assert_int_equal(kiln_pid_gone(0), 0); /* names no process */
  assert_int_equal(kiln_pid_gone(-1), 0);
  assert_int_equal(kiln_pid_gone((long)reaped_child()), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pid_gone_only_for_a_process_that_is_no_more),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
