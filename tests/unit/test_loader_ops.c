/* loader/ops_*.c: invalid arguments are refused with a clear error before
 * anything is resolved or launched, and an empty batch is KILN_OK with
 * nothing resolved or launched. Runs against tests/fakecuda (the
 * path in argv[1]); an offline loader on an empty cache, so a call that got
 * past its checks would fail with KILN_ENOTFOUND instead of KILN_EINVAL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/ops.h"
#include "loader/ops_internal.h"         /* kiln_op_entry_name */
#include "tests/unit/test_fake_loader.h" /* test_fake_loader_start */
#include "tests/unit/test_util.h"        /* test_rm_rf */

static kiln_loader *L;
static char dir[] = "/tmp/kiln-ops-XXXXXX";

static void einval(kiln_status st, const char *needle) {
  if (st != KILN_EINVAL || !strstr(kiln_last_error(), needle))
    fail_msg("got %s '%s', expected KILN_EINVAL naming '%s'", kiln_status_str(st),
             kiln_last_error(), needle);
}

static void test_softmax_rejects_bad_arguments(void **state) {
  char buf[64] = {0};
  void *p = buf; /* never dereferenced: the checks come first */
  const uint8_t *m = (const uint8_t *)buf;
  (void)state;
  einval(kiln_scaled_softmax_fwd(NULL, KILN_F32, p, p, 1, 1, 1.0f, NULL), "loader is NULL");
  einval(kiln_scaled_softmax_fwd(L, (kiln_dtype)7, p, p, 1, 1, 1.0f, NULL), "unsupported dtype 7");
  einval(kiln_scaled_softmax_fwd(L, KILN_F32, NULL, p, 1, 1, 1.0f, NULL), "y is NULL");
  einval(kiln_scaled_softmax_fwd(L, KILN_F32, p, p, -1, 1, 1.0f, NULL), "rows = -1, must be >= 0");
  einval(kiln_scaled_softmax_fwd(L, KILN_F32, p, p, 4, 0, 1.0f, NULL), "cols = 0, must be >= 1");
  einval(kiln_scaled_softmax_fwd(L, KILN_F32, p, p, 4, -3, 1.0f, NULL), "cols = -3");
  einval(kiln_scaled_softmax_fwd(L, KILN_BF16, p, p, 4, 4, 1.0f / 0.0f, NULL), "not finite");
  einval(kiln_scaled_softmax_bwd(L, KILN_F16, p, p, NULL, 4, 4, 1.0f, NULL), "dy is NULL");
  einval(kiln_scaled_masked_softmax_fwd(L, KILN_F16, p, p, NULL, 2, 4, 8, 8, 1, 1.0f, NULL),
         "mask is NULL");
  einval(kiln_scaled_masked_softmax_fwd(L, KILN_F16, p, p, m, 2, 4, 8, 8, 3, 1.0f, NULL),
         "does not broadcast");
  einval(kiln_scaled_masked_softmax_fwd(L, KILN_F16, p, p, m, 2, -2, 8, 8, 1, 1.0f, NULL),
         "heads = -2");
  einval(kiln_scaled_masked_softmax_fwd(L, KILN_F16, p, p, m, 2, 2, 8, 0, 1, 1.0f, NULL), "sk = 0");
  einval(kiln_scaled_masked_softmax_fwd(L, KILN_F16, p, p, m, 2147483647, 2147483647, 2147483647, 8,
                                        1, 1.0f, NULL),
         "overflow");
  einval(kiln_scaled_softmax_fwd(L, KILN_F32, p, p, 9223372036854775807LL, 2147483647, 1.0f, NULL),
         "overflows 64 bits");
  einval(kiln_scaled_softmax_bwd(L, KILN_BF16, p, p, p, 4611686018427387904LL, 2, 1.0f, NULL),
         "overflows 64 bits");
  einval(kiln_scaled_upper_triang_masked_softmax_fwd(L, KILN_F32, p, p, 9223372036854775807LL, 2, 2,
                                                     1.0f, NULL),
         "overflow");
  einval(kiln_scaled_masked_softmax_bwd(L, KILN_F32, p, p, p, 2, 4, -1, 8, 1.0f, NULL), "sq = -1");
  einval(kiln_scaled_upper_triang_masked_softmax_fwd(L, KILN_F32, p, p, -1, 8, 8, 1.0f, NULL),
         "attn_batches = -1");
  einval(kiln_scaled_upper_triang_masked_softmax_bwd(L, KILN_F32, p, NULL, p, 2, 8, 8, 1.0f, NULL),
         "y is NULL");
  /* valid arguments get past the checks: the (empty, offline) cache answers */
  assert_int_equal(kiln_scaled_softmax_fwd(L, KILN_F32, p, p, 4, 4, 1.0f, NULL), KILN_ENOTFOUND);
  assert_non_null(strstr(kiln_last_error(), "KILN_OFFLINE=1 forbids building it here"));
}

/* An empty batch (rows, tokens, b, heads, sq, s or h = 0) is KILN_OK with
 * NULL tensors: the offline, empty cache would fail any resolve or launch
 * with KILN_ENOTFOUND, so KILN_OK shows nothing was launched. The other
 * arguments are still checked. */
static void test_empty_batch_is_ok_without_a_launch(void **state) {
  char buf[64] = {0};
  void *p = buf;
  (void)state;
  assert_int_equal(kiln_scaled_softmax_fwd(L, KILN_F32, NULL, NULL, 0, 8, 1.0f, NULL), KILN_OK);
  assert_int_equal(kiln_scaled_softmax_bwd(L, KILN_F16, NULL, NULL, NULL, 0, 8, 1.0f, NULL),
                   KILN_OK);
  assert_int_equal(
      kiln_scaled_masked_softmax_fwd(L, KILN_F16, NULL, NULL, NULL, 0, 4, 8, 8, 1, 1.0f, NULL),
      KILN_OK);
  assert_int_equal(
      kiln_scaled_masked_softmax_bwd(L, KILN_BF16, NULL, NULL, NULL, 2, 4, 0, 8, 1.0f, NULL),
      KILN_OK);
  assert_int_equal(
      kiln_scaled_upper_triang_masked_softmax_fwd(L, KILN_F32, NULL, NULL, 0, 8, 8, 1.0f, NULL),
      KILN_OK);
  assert_int_equal(kiln_scaled_upper_triang_masked_softmax_bwd(L, KILN_F32, NULL, NULL, NULL, 3, 0,
                                                               8, 1.0f, NULL),
                   KILN_OK);
  assert_int_equal(kiln_layer_norm_fwd(L, KILN_F16, KILN_F32, NULL, NULL, NULL, NULL, NULL, NULL, 0,
                                       40, 1e-5f, NULL),
                   KILN_OK);
  assert_int_equal(
      kiln_rms_norm_fwd(L, KILN_F32, KILN_F32, NULL, NULL, NULL, NULL, 0, 40, 1e-5f, NULL),
      KILN_OK);
  assert_int_equal(kiln_layer_norm_bwd_workspace_size(0, 40), 0);
  assert_int_equal(kiln_embedding_fwd(L, KILN_F32, NULL, NULL, NULL, 0, 16, 0, 30, 30, 0, NULL),
                   KILN_OK);
  assert_int_equal(
      kiln_embedding_bwd(L, KILN_F32, NULL, NULL, NULL, 0, 16, 0, 30, 1, NULL, 0, NULL), KILN_OK);
  assert_int_equal(kiln_bias_gelu_fwd(L, KILN_F16, NULL, NULL, NULL, 0, 24, NULL), KILN_OK);
  assert_int_equal(kiln_bias_gelu_bwd(L, KILN_F16, NULL, NULL, NULL, NULL, 0, 24, NULL), KILN_OK);
  assert_int_equal(kiln_bias_swiglu_fwd(L, KILN_BF16, NULL, NULL, NULL, 0, 24, NULL), KILN_OK);
  assert_int_equal(kiln_bias_swiglu_bwd(L, KILN_BF16, NULL, NULL, NULL, NULL, 0, 24, NULL),
                   KILN_OK);
  assert_int_equal(
      kiln_bias_dropout_add_fwd(L, KILN_F32, NULL, NULL, NULL, NULL, 0, 16, 0.3f, 1, 0, 1, NULL),
      KILN_OK);
  assert_int_equal(kiln_bias_dropout_add_bwd(L, KILN_F32, NULL, NULL, 0, 16, 0.3f, 1, 0, 1, NULL),
                   KILN_OK);
  assert_int_equal(kiln_rope_fwd(L, KILN_F16, KILN_ROPE_SBHD, KILN_ROPE_ROTATE_HALF, NULL, NULL,
                                 NULL, 0, 2, 2, 8, 8, NULL),
                   KILN_OK);
  assert_int_equal(kiln_rope_bwd(L, KILN_F16, KILN_ROPE_BSHD, KILN_ROPE_INTERLEAVED, NULL, NULL,
                                 NULL, 4, 2, 0, 8, 8, NULL),
                   KILN_OK);
  assert_int_equal(
      kiln_cross_entropy_fwd(L, KILN_F32, NULL, NULL, NULL, NULL, 0, 50, -100, 0, NULL), KILN_OK);
  assert_int_equal(kiln_cross_entropy_stats(L, KILN_F32, NULL, NULL, NULL, NULL, NULL, 0, 25, 25,
                                            50, -100, 0, NULL),
                   KILN_OK);
  assert_int_equal(kiln_cross_entropy_rescale(L, NULL, NULL, NULL, 0, NULL), KILN_OK);
  assert_int_equal(kiln_cross_entropy_loss(L, NULL, NULL, NULL, NULL, NULL, NULL, 0, -100, NULL),
                   KILN_OK);
  assert_int_equal(
      kiln_cross_entropy_bwd(L, KILN_F16, NULL, NULL, NULL, NULL, 0, 50, 0, -100, NULL), KILN_OK);
  /* the other arguments are checked all the same */
  einval(kiln_scaled_softmax_fwd(L, KILN_F32, NULL, NULL, 0, 8, 1.0f / 0.0f, NULL), "not finite");
  einval(kiln_layer_norm_fwd(L, KILN_F16, KILN_F32, NULL, NULL, NULL, NULL, NULL, NULL, 0, 40,
                             -1.0f, NULL),
         "eps");
  einval(kiln_bias_gelu_fwd(L, KILN_F16, NULL, NULL, NULL, 0, 0, NULL), "cols = 0");
  einval(kiln_embedding_fwd(L, KILN_F32, NULL, NULL, NULL, 0, 16, 0, 40, 30, 0, NULL),
         "past vocab_size");
  einval(kiln_rope_fwd(L, KILN_F16, KILN_ROPE_SBHD, KILN_ROPE_ROTATE_HALF, NULL, NULL, NULL, 0, 2,
                       2, 8, 9, NULL),
         "rot_dim = 9");
  einval(kiln_cross_entropy_fwd(L, KILN_F32, NULL, NULL, NULL, NULL, 0, 50, -100, 4, NULL),
         "unknown bits");
  einval(kiln_bias_dropout_add_fwd(L, KILN_F32, NULL, NULL, NULL, NULL, 0, 16, 1.5f, 1, 0, 0, NULL),
         "p = 1.5");
  /* the norms' backward: dgamma (and dbeta) are the sum over no rows, zeros,
   * written by the reduction's launch alone (here: the empty cache's answer) */
  einval(kiln_rms_norm_bwd(L, KILN_F32, KILN_F32, NULL, NULL, NULL, NULL, NULL, NULL, 0, 40, NULL,
                           0, NULL),
         "dgamma is NULL");
  einval(kiln_layer_norm_bwd(L, KILN_F32, KILN_F32, NULL, p, NULL, NULL, NULL, NULL, NULL, NULL, 0,
                             40, NULL, 0, NULL),
         "dbeta is NULL");
  assert_int_equal(kiln_layer_norm_bwd(L, KILN_F32, KILN_F32, NULL, p, p, NULL, NULL, NULL, NULL,
                                       NULL, 0, 40, NULL, 0, NULL),
                   KILN_ENOTFOUND);
  assert_non_null(strstr(kiln_last_error(), "layer_norm"));
  assert_int_equal(kiln_rms_norm_bwd(L, KILN_F32, KILN_F32, NULL, p, NULL, NULL, NULL, NULL, 0, 40,
                                     NULL, 0, NULL),
                   KILN_ENOTFOUND);
}

/* Eval mode (training = 0) is the identity for any p in [0, 1], 1 included;
 * training with p = 1 is refused. */
static void test_dropout_eval_accepts_p_1(void **state) {
  char buf[64] = {0};
  void *p = buf;
  (void)state;
  einval(kiln_bias_dropout_add_fwd(L, KILN_F32, p, p, NULL, p, 4, 4, 1.0f, 1, 0, 1, NULL),
         "p = 1 is outside [0, 1) when training");
  einval(kiln_bias_dropout_add_bwd(L, KILN_F32, p, p, 4, 4, 1.0f, 1, 0, 1, NULL), "p = 1");
  einval(kiln_bias_dropout_add_fwd(L, KILN_F32, p, p, NULL, p, 4, 4, 1.01f, 1, 0, 0, NULL),
         "outside [0, 1]");
  /* past the checks: the (empty, offline) cache answers */
  assert_int_equal(kiln_bias_dropout_add_fwd(L, KILN_F32, p, p, NULL, p, 4, 4, 1.0f, 1, 0, 0, NULL),
                   KILN_ENOTFOUND);
  assert_int_equal(kiln_bias_dropout_add_bwd(L, KILN_F32, p, p, 4, 4, 1.0f, 1, 0, 0, NULL),
                   KILN_ENOTFOUND);
}

static void test_function_lookup(void **state) {
  struct CUfunc_st *f = NULL;
  (void)state;
  assert_int_equal(kiln_loader_function(&f, L, "kiln_no_such_entry"), KILN_ENOTFOUND);
  assert_int_equal(kiln_loader_function(&f, L, "kiln_scaled_softmax_fwd_bf16_w8"), KILN_ENOTFOUND);
  assert_non_null(strstr(kiln_last_error(), "no loadable scaled_softmax"));
  assert_int_equal(kiln_loader_resolve(L, "nope"), KILN_ENOTFOUND);
  assert_non_null(strstr(kiln_last_error(), "units are: "));
}

/* The launchers' entry point names: joined by '_', cut (never overrun) at
 * the buffer's end. */
static void test_entry_names(void **state) {
  char buf[32], tiny[8];
  (void)state;
  assert_string_equal(KILN_OP_ENTRY(buf, "kiln", "scaled_softmax", "fwd", "f16", "w8"),
                      "kiln_scaled_softmax_fwd_f16_w8");
  assert_string_equal(KILN_OP_ENTRY(buf, "kiln_rope", "bwd", "bf16", "il"),
                      "kiln_rope_bwd_bf16_il");
  assert_string_equal(KILN_OP_ENTRY(tiny, "kiln", "layer", "norm"), "kiln_la");
  assert_string_equal(KILN_OP_ENTRY(tiny, "kiln_bias", "x"), "kiln_bi");
  assert_string_equal(KILN_OP_ENTRY(tiny, "kiln", "ab"), "kiln_ab");
  memset(tiny, 'x', sizeof tiny);
  kiln_op_entry_name(tiny, 1, (const char *const[]){"kiln"}, 1);
  assert_int_equal(tiny[0], '\0');
  assert_int_equal(tiny[1], 'x');
  kiln_op_entry_name(tiny, 0, (const char *const[]){"kiln"}, 1);
  assert_int_equal(tiny[1], 'x');
}

int main(int argc, char **argv) {
  kiln_loader_options o = KILN_LOADER_OPTIONS_INIT;
  kiln_cache_options co = KILN_CACHE_OPTIONS_INIT;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax_rejects_bad_arguments),
      cmocka_unit_test(test_empty_batch_is_ok_without_a_launch),
      cmocka_unit_test(test_dropout_eval_accepts_p_1),
      cmocka_unit_test(test_function_lookup),
      cmocka_unit_test(test_entry_names),
  };
  int rc;
  if ((rc = test_fake_loader_start(argc, argv, dir, &co)) != 0) return rc;
  o.cache = &co;
  o.offline = 1;
  if (kiln_loader_open(&L, &o) != KILN_OK) {
    printf("kiln_loader_open: %s\n", kiln_last_error());
    return 1;
  }
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  kiln_loader_close(L);
  if (test_rm_rf(dir) != 0 && !rc) rc = 1;
  return rc;
}
