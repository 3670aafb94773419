/* kernels/softmax_launch.c: the variant and launch shape for (rows, cols). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/softmax_launch.h"
#include "kiln/kernels.h"

static void expect_es(long long rows, int cols, unsigned es, int aligned, const char *variant,
                      unsigned block, unsigned long long grid) {
  kiln_softmax_launch l;
  assert_int_equal(kiln_softmax_pick_launch(&l, rows, cols, es, aligned), 0);
  assert_string_equal(l.variant, variant);
  assert_int_equal(l.block, block);
  assert_int_equal(l.grid, grid);
}

/* The scalar variants: unaligned tensors, any element size. */
static void expect(long long rows, int cols, const char *variant, unsigned block,
                   unsigned long long grid) {
  expect_es(rows, cols, 2, 0, variant, block, grid);
  expect_es(rows, cols, 4, 0, variant, block, grid);
}

static void test_row_length_picks_the_smallest_variant_that_holds_it(void **state) {
  (void)state;
  expect(1, 1, "w1", 128, 1);
  expect(8, 32, "w1", 128, 2);
  expect(9, 33, "w2", 128, 3);
  expect(4, 1000, "w32", 128, 1);
  expect(4, 1024, "w32", 128, 1);
  expect(3, 1025, "b4", 512, 3);
  expect(3, 2048, "b4", 512, 3);
  expect(3, 2049, "b8", 512, 3);
  expect(3, 16384, "b32", 512, 3);
  expect(3, 16385, "g", 512, 3);
  expect(2, 1 << 30, "g", 512, 2);
}

/* 16-byte aligned tensors and cols a whole number of 16-byte vectors: the
 * vector variant that holds the row, for every row length. */
static void test_aligned_rows_of_whole_vectors_pick_vector_variants(void **state) {
  (void)state;
  expect_es(1, 8, 2, 1, "v256", 128, 1);
  expect_es(5, 256, 2, 1, "v256", 128, 2);
  expect_es(1, 4, 4, 1, "v256", 128, 1);
  expect_es(1, 264, 2, 1, "v512", 128, 1);
  expect_es(1, 1000, 4, 1, "v1k", 128, 1);
  expect_es(1, 1024, 2, 1, "v1k", 128, 1);
  expect_es(3, 2048, 2, 1, "v2k", 256, 3);
  expect_es(3, 4096, 4, 1, "v4k", 256, 3);
  expect_es(3, 8192, 2, 1, "v8k", 512, 3);
  expect_es(1, 8200, 2, 1, "v16k", 1024, 1);
  expect_es(3, 12288, 2, 1, "v16k", 1024, 3);
  expect_es(3, 16384, 4, 1, "v16k", 1024, 3);
  expect_es(3, 16392, 2, 1, "vg", 512, 3);
  expect_es(2, 1 << 30, 4, 1, "vg", 512, 2);
}

/* The scalar path where a vector would not fit: a misaligned tensor (the
 * caller says so), or cols not a whole number of vectors (1000 halves are
 * 125 vectors, 1000 floats 250; 1004 halves are not, 1002 floats are not). */
static void test_misaligned_or_ragged_rows_take_the_scalar_path(void **state) {
  (void)state;
  expect_es(1, 1024, 2, 0, "w32", 128, 1);
  expect_es(1, 16384, 2, 0, "b32", 512, 1);
  expect_es(1, 1004, 2, 1, "w32", 128, 1);
  expect_es(1, 1002, 4, 1, "w32", 128, 1);
  expect_es(1, 4, 2, 1, "w1", 128, 1);
  expect_es(1, 16388, 2, 1, "g", 512, 1);
  expect_es(1, 1000, 2, 1, "v1k", 128, 1);
  expect_es(1, 16388, 4, 1, "vg", 512, 1);
}
static void test_grid_is_capped_for_huge_row_counts(void **state) {
  (void)state;
  kiln_softmax_launch l;
  assert_int_equal(kiln_softmax_pick_launch(&l, 1LL << 40, 7, 2, 0), 0);
  assert_int_equal(l.grid, KILN_SOFTMAX_GRID_MAX);
}

static void test_invalid_shapes_are_refused(void **state) {
  (void)state;
  kiln_softmax_launch l;
  assert_int_equal(kiln_softmax_pick_launch(&l, 0, 8, 2, 1), -1);
  assert_int_equal(kiln_softmax_pick_launch(&l, 8, 0, 2, 1), -1);
  assert_int_equal(kiln_softmax_pick_launch(&l, -1, 8, 2, 1), -1);
  assert_int_equal(kiln_softmax_pick_launch(NULL, 1, 1, 2, 1), -1);
  assert_int_equal(kiln_softmax_pick_launch(&l, 1, 8, 8, 1), -1);
  assert_int_equal(kiln_softmax_pick_launch(&l, 1, 8, 0, 0), -1);
}

/* Every variant the picker can return has an entry point in every softmax
 * unit (and there are three of them). */
static void test_picked_variants_exist_in_every_unit(void **state) {
  (void)state;
  static const int cols[] = {1, 33,  65,  129,  257,  513,  1025, 2049,  4097, 8193, 16385,
                             8, 264, 520, 1032, 2056, 4104, 8200, 16392, 16,   12288};
  int softmax_units = 0;
  for (size_t u = 0; u < kiln_unit_count(); u++) {
    const kiln_unit_info *unit = kiln_unit_at(u);
    if (strncmp(unit->main_file->path, "softmax/", 8) != 0) continue;
    softmax_units++;
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) {
      kiln_softmax_launch l;
      char want[160];
      int found = 0;
      assert_int_equal(kiln_softmax_pick_launch(&l, 1, cols[i], 2, 1), 0);
      snprintf(want, sizeof want, "kiln_%s_fwd_bf16_%s", unit->name, l.variant);
      for (size_t e = 0; e < unit->n_entries; e++)
        found |= strcmp(unit->entries[e].name, want) == 0;
      assert_true(found);
    }
  }
  assert_int_equal(softmax_units, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_row_length_picks_the_smallest_variant_that_holds_it),
      cmocka_unit_test(test_aligned_rows_of_whole_vectors_pick_vector_variants),
      cmocka_unit_test(test_misaligned_or_ragged_rows_take_the_scalar_path),
      cmocka_unit_test(test_grid_is_capped_for_huge_row_counts),
      cmocka_unit_test(test_invalid_shapes_are_refused),
      cmocka_unit_test(test_picked_variants_exist_in_every_unit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
