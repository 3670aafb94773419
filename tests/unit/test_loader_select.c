/* loader/select.c: which cached artifacts a device loads, in which order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loader/select.h"

static kiln_record rec(const char *target, const char *toolchain, int layer) {
  kiln_record r;
  memset(&r, 0, sizeof r);
  snprintf(r.target, sizeof r.target, "%s", target);
  snprintf(r.kind, sizeof r.kind, "%s", strncmp(target, "compute_", 8) == 0 ? "ptx" : "cubin");
  snprintf(r.toolchain, sizeof r.toolchain, "%s", toolchain);
  r.layer = layer;
  return r;
}

/* "target:source ..." for the selection, and the reasons for the rest */
static const char *order(const kiln_record *recs, size_t n, int cc, int driver, char *why) {
  static char out[512];
  kiln_candidate c[16];
  size_t m = kiln_select(recs, n, cc, driver, "nvrtc-13.0", c, why, 512);
  out[0] = '\0';
  for (size_t i = 0; i < m; i++)
    snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s:%d", i ? " " : "", c[i].rec->target,
             (int)c[i].source);
  return out;
}

static void test_exact_then_compatible_then_ptx(void **state) {
  kiln_record r[] = {rec("compute_80", "nvrtc-13.0", 0), rec("sm_80", "nvrtc-13.0", 0),
                     rec("sm_86", "nvrtc-13.0", 0),      rec("compute_86", "nvrtc-13.0", 0),
                     rec("sm_89", "nvrtc-13.0", 0),      rec("sm_90", "nvrtc-13.0", 0)};
  char why[512];
  (void)state;
  assert_string_equal(order(r, 6, 89, 13000, why),
                      "sm_89:1 sm_86:2 sm_80:2 compute_86:3 compute_80:3");
  assert_string_equal(order(r, 6, 87, 13000, why), "sm_86:2 sm_80:2 compute_86:3 compute_80:3");
  assert_string_equal(why, "sm_89: CUBIN for 8.9 cannot run on 8.7; sm_90: CUBIN for 9.0 cannot "
                           "run on 8.7 (another major)");
  /* a new major: PTX only */
  assert_string_equal(order(r, 6, 100, 13000, why), "compute_86:3 compute_80:3");
}

static void test_arch_specific_cubin_only_on_its_own_arch(void **state) {
  kiln_record r[] = {rec("sm_90a", "nvrtc-13.0", 0), rec("sm_90", "nvrtc-13.0", 0)};
  char why[512];
  (void)state;
  assert_string_equal(order(r, 2, 90, 13000, why), "sm_90:1 sm_90a:1");
  assert_string_equal(order(r, 2, 91, 13000, why), "sm_90:2");
}

static void test_ptx_newer_than_the_driver_is_left_out(void **state) {
  /* CUDA 12.8 writes PTX ISA 8.7; a 12.4 driver JITs up to 8.4 */
  kiln_record r[] = {rec("compute_80", "nvrtc-12.8", 0), rec("compute_80", "nvrtc-12.2", 1),
                     rec("compute_100", "nvrtc-12.2", 0)};
  char why[512];
  (void)state;
  assert_string_equal(order(r, 3, 90, 12040, why), "compute_80:3");
  assert_non_null(strstr(why, "compute_80: PTX ISA 8.7 is newer than the driver accepts (8.4)"));
  assert_non_null(strstr(why, "compute_100: PTX for 10.0 is newer than the GPU's 9.0"));
}

static void test_output_of_a_newer_cuda_major_is_left_out(void **state) {
  kiln_record r[] = {rec("sm_90", "nvrtc-13.0", 0), rec("sm_90", "nvrtc-12.8", 1)};
  char why[512];
  (void)state;
  assert_string_equal(order(r, 2, 90, 12080, why), "sm_90:1");
  assert_string_equal(why, "sm_90: built by CUDA 13.0, newer than the driver (12.8)");
}

static void test_same_target_prefers_the_current_toolchain(void **state) {
  kiln_record r[] = {rec("sm_90", "nvrtc-12.8", 0), rec("sm_90", "nvrtc-13.0", 1),
                     rec("sm_90", "nvrtc-12.9", 0)};
  kiln_candidate c[3];
  (void)state;
  assert_int_equal(kiln_select(r, 3, 90, 13000, "nvrtc-13.0", c, NULL, 0), 3);
  assert_string_equal(c[0].rec->toolchain, "nvrtc-13.0");
  assert_string_equal(c[1].rec->toolchain, "nvrtc-12.9");
  assert_string_equal(c[2].rec->toolchain, "nvrtc-12.8");
}

/* A build helps only where this NVRTC can build the arch and the driver can
 * load its output: the loader and `kiln probe` both ask kiln_build_fits. */
static void test_a_build_fits_only_a_driver_of_its_major_or_newer(void **state) {
  static const int archs[] = {80, 90, 100};
  char why[600];
  (void)state;
  assert_int_equal(kiln_build_fits(90, 13000, 13, 0, archs, 3, why, sizeof why), 1);
  assert_string_equal(why, "");
  assert_int_equal(kiln_build_fits(90, 0, 13, 0, archs, 3, why, sizeof why), 1); /* any driver */
  assert_int_equal(kiln_build_fits(90, 12080, 12, 9, archs, 3, why, sizeof why), 1);
  assert_int_equal(kiln_build_fits(100, 12080, 13, 0, archs, 3, why, sizeof why), 0);
  assert_non_null(strstr(why, "NVRTC 13.0 builds code that this driver (CUDA 12.8) cannot load"));
  assert_int_equal(kiln_build_fits(120, 13000, 13, 0, archs, 3, why, sizeof why), 0);
  assert_non_null(strstr(why, "cannot build for sm_120"));
  assert_int_equal(kiln_build_fits(90, 13000, 0, 0, NULL, 0, why, sizeof why), 0);
  assert_string_equal(why, "no NVRTC to build with");
}

static void test_driver_ptx_isa_table(void **state) {
  (void)state;
  assert_int_equal(kiln_driver_ptx_isa(10020), 0);
  assert_int_equal(kiln_driver_ptx_isa(11080), 78);
  assert_int_equal(kiln_driver_ptx_isa(12000), 80);
  assert_int_equal(kiln_driver_ptx_isa(12060), 85);
  assert_int_equal(kiln_driver_ptx_isa(12080), 87);
  assert_int_equal(kiln_driver_ptx_isa(12090), 88);
  assert_int_equal(kiln_driver_ptx_isa(13000), 90);
  assert_int_equal(kiln_driver_ptx_isa(13010), 91);
  assert_int_equal(kiln_toolchain_ptx_isa("nvrtc-12.4"), 84);
  assert_int_equal(kiln_toolchain_ptx_isa("gcc"), 0);
}

/* NVRTC 13.5 (the nvidia-cuda-nvrtc 13.5.37 wheel) writes `.version 9.5`: a
 * release past the last one kiln has measured in a major is estimated from
 * it, never reaching the next entry, and a newer major follows the pattern of
 * 11.0 (7.0), 12.0 (8.0) and 13.0 (9.0). */
static void test_ptx_isa_of_releases_between_and_after_the_entries(void **state) {
  (void)state;
  assert_int_equal(kiln_driver_ptx_isa(13050), 95);
  assert_int_equal(kiln_toolchain_ptx_isa("nvrtc-13.5"), 95);
  assert_int_equal(kiln_driver_ptx_isa(13020), 92);
  assert_int_equal(kiln_driver_ptx_isa(13040), 94);
  assert_int_equal(kiln_driver_ptx_isa(13090), 99);
  assert_int_equal(kiln_driver_ptx_isa(12070), 86); /* below 12.8's 8.7 */
  assert_int_equal(kiln_driver_ptx_isa(11090), 79); /* below 12.0's 8.0 */
  assert_int_equal(kiln_driver_ptx_isa(14000), 100);
  assert_int_equal(kiln_driver_ptx_isa(14010), 101);
  /* monotonic: a newer driver never accepts less */
  for (int v = 11000, last = 0; v <= 15990; v += 10) {
    assert_true(kiln_driver_ptx_isa(v) >= last);
    last = kiln_driver_ptx_isa(v);
  }
}

/* What a 13.5 PTX needs: a 13.1 driver (9.1) refuses it, a 13.5 driver takes
 * it, and a 12.9 driver is of another major. */
static void test_ptx_of_nvrtc_13_5_needs_a_driver_of_13_5(void **state) {
  kiln_record r[] = {rec("compute_90", "nvrtc-13.5", 0), rec("compute_90", "nvrtc-13.0", 0)};
  char why[512];
  (void)state;
  assert_string_equal(order(r, 2, 100, 13010, why), "compute_90:3");
  assert_string_equal(why, "compute_90: PTX ISA 9.5 is newer than the driver accepts (9.1)");
  assert_string_equal(order(r, 2, 100, 13050, why), "compute_90:3 compute_90:3");
  assert_string_equal(why, "");
  assert_string_equal(order(r, 2, 100, 12090, why), "");
  assert_non_null(strstr(why, "compute_90: built by CUDA 13.5, newer than the driver (12.9)"));
}

static int text_isa(const char *s) {
  return kiln_ptx_text_isa(s, strlen(s));
}

static void test_ptx_text_isa_reads_the_version_directive(void **state) {
  static const char ptx[] = "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 9.5\n"
                            ".target sm_90\n.address_size 64\n";
  (void)state;
  assert_int_equal(text_isa(ptx), 95);
  assert_int_equal(text_isa(".version 8.8\n.target sm_90\n"), 88); /* first line */
  assert_int_equal(text_isa(".version\t8.7\n"), 87);
  assert_int_equal(text_isa("// .version 9.9\n.version 8.0\n"),
                   80); /* a comment is no line start */
  assert_int_equal(text_isa(".target sm_90\n"), 0);
  assert_int_equal(text_isa(".version 8.10\n"), 0); /* not an ISA kiln can compare */
  assert_int_equal(text_isa(".version x.5\n"), 0);
  assert_int_equal(text_isa(".versionless 9.0\n"), 0);
  assert_int_equal(kiln_ptx_text_isa(ptx, (size_t)(strstr(ptx, "9.5") - ptx) + 2), 0); /* "9." */
  assert_int_equal(kiln_ptx_text_isa(ptx, (size_t)(strstr(ptx, "9.5") - ptx) + 3), 95);
  assert_int_equal(kiln_ptx_text_isa(NULL, 0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exact_then_compatible_then_ptx),
      cmocka_unit_test(test_arch_specific_cubin_only_on_its_own_arch),
      cmocka_unit_test(test_ptx_newer_than_the_driver_is_left_out),
      cmocka_unit_test(test_output_of_a_newer_cuda_major_is_left_out),
      cmocka_unit_test(test_same_target_prefers_the_current_toolchain),
      cmocka_unit_test(test_driver_ptx_isa_table),
      cmocka_unit_test(test_ptx_isa_of_releases_between_and_after_the_entries),
      cmocka_unit_test(test_ptx_of_nvrtc_13_5_needs_a_driver_of_13_5),
      cmocka_unit_test(test_ptx_text_isa_reads_the_version_directive),
      cmocka_unit_test(test_a_build_fits_only_a_driver_of_its_major_or_newer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
