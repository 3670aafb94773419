/* emu_check.h — the small harness of the emulator tests that call kernel
 * entry points directly (test_norm_bwd_emu.cpp, test_embedding_bwd_emu.cpp):
 * a failure counter, CHECK (prints the failed condition's message and
 * counts it, then goes on), a uniform random number (xorshift64*) and a
 * launch that counts a deadlock or divergence as a failure. One copy per
 * test program (static state). */
#ifndef KILN_EMU_CHECK_H
#define KILN_EMU_CHECK_H

#include <stdint.h> /* uint64_t */
#include <stdio.h>  /* printf */

#include <functional> /* std::function */
#include <string>     /* std::string */

#include "runtime.h" /* kiln_emu::launch */

static int g_failed = 0;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
      g_failed++;                                                                                  \
    }                                                                                              \
  } while (0)

/* [0, 1) with 53 random bits, from *state (xorshift64*). */
static inline double emu_unit(uint64_t *state) {
  *state ^= *state >> 12, *state ^= *state << 25, *state ^= *state >> 27;
  return (double)((*state * 0x2545f4914f6cdd1dull) >> 11) * 0x1p-53;
}

/* Runs k on grid x block threads with the seed's schedule; false (counted) on
 * a deadlock or divergence. */
static inline bool emu_run(unsigned grid, unsigned block, uint64_t seed,
                           const std::function<void()> &k) {
  kiln_emu::launch_options o;
  o.grid = grid, o.block = block, o.seed = seed;
  std::string err;
  if (kiln_emu::launch(o, k, &err)) return true;
  printf("FAIL launch: %s\n", err.c_str());
  g_failed++;
  return false;
}

/* "ok"/"FAIL" and the count; the exit status. */
static inline int emu_report() {
  printf("%s: %d failed checks\n", g_failed ? "FAIL" : "ok", g_failed);
  return g_failed ? 1 : 0;
}

#endif /* KILN_EMU_CHECK_H */
