/* tests/emu/runtime.cpp and host_prelude.h: the emulator itself behaves like
 * the hardware it stands for (conversions, ex2, warp shuffles, block
 * barriers), reports divergent barriers instead of hanging, and exposes a
 * missing barrier — so that a passing kernel test means what it says. */
#include <math.h>   /* INFINITY, NAN, isnan */
#include <stdio.h>  /* printf */
#include <string.h> /* memcpy */

#include <functional> /* std::function */
#include <random>     /* std::mt19937_64 */
#include <string>     /* std::string */
#include <vector>     /* std::vector */

#include "runtime.h" /* kiln_emu::launch */

/* Last, in this order: the prelude defines `asm`, then the kernel header. */
#include "host_prelude.h"

#include "common/kiln_types.cuh" /* its PTX statements, through the prelude */

using namespace kiln_emu;

namespace {

int g_failures = 0;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      ++g_failures;                                                                                \
    }                                                                                              \
  } while (0)

float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- conversions and ex2 ------------------------------------------------- */

void test_f16_rounds_to_nearest_even_with_subnormals_and_overflow() {
  static const struct {
    float in;
    unsigned short out;
  } cases[] = {
      {1.f, 0x3c00},
      {-2.f, 0xc000},
      {65504.f, 0x7bff},
      {65519.99f, 0x7bff},
      {65520.f, 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000}, /* a tie: to even 0 */
      {0x1.000002p-25f, 0x0001},
      {1023 * 0x1p-24f, 0x03ff},
      {0x1p-14f, 0x0400},
      {1.f + 0x1p-10f, 0x3c01},
      {1.f + 0x1p-11f, 0x3c00}, /* tie, even */
      {1.f + 3 * 0x1p-11f, 0x3c02},
      {-0.f, 0x8000},
  };
  for (const auto &c : cases)
    CHECK(f32_to_f16_bits(c.in) == c.out, "f16(%a) = %#x, want %#x", (double)c.in,
          f32_to_f16_bits(c.in), c.out);
  CHECK((f32_to_f16_bits(NAN) & 0x7fff) > 0x7c00, "f16(NaN) is not NaN");
  for (const auto &c : cases)
    if (c.out != 0x7c00 && c.out != 0xfc00 && c.in == c.in)
      CHECK(f16_bits_to_f32(c.out) == f16_bits_to_f32(f32_to_f16_bits(c.in)), "round trip");
  CHECK(f16_bits_to_f32(0x0001) == 0x1p-24f && f16_bits_to_f32(0x7bff) == 65504.f &&
            f16_bits_to_f32(0xfc00) == -INFINITY && isnan(f16_bits_to_f32(0x7e00)),
        "f16 widening");
#ifdef __FLT16_MAX__
  /* Where the compiler has an IEEE half type, agree with it bit for bit. */
  const auto bits_of = [](float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
  };
  for (uint32_t h = 0; h < 0x10000; ++h) {
    _Float16 v;
    const unsigned short hb = (unsigned short)h;
    memcpy(&v, &hb, 2);
    const float want = (float)v, got = f16_bits_to_f32(hb);
    CHECK(bits_of(got) == bits_of(want) || (isnan(got) && isnan(want)), "widen %#x", h);
  }
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000000; ++i) {
    /* half the draws near f16's range, where rounding is interesting */
    uint32_t u = (uint32_t)rng();
    if (i & 1) u = (u & 0x807fffffu) | ((uint32_t)(98 + rng() % 50) << 23);
    const float f = float_of(u);
    const _Float16 v = (_Float16)f;
    unsigned short want;
    memcpy(&want, &v, 2);
    const unsigned short got = f32_to_f16_bits(f);
    if (isnan(f))
      CHECK((got & 0x7fff) > 0x7c00, "narrow NaN %#x", u);
    else
      CHECK(got == want, "narrow %#x (%a): %#x, want %#x", u, (double)f, got, want);
  }
#endif
}

void test_bf16_rounds_to_nearest_even_and_keeps_nan() {
  static const struct {
    uint32_t in;
    unsigned short out;
  } cases[] = {
      {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, /* tie: to even */
      {0x3f818000u, 0x3f82},                        /* tie: to even, up */
      {0x3f808001u, 0x3f81}, {0x7f7fffffu, 0x7f80}, /* rounds to inf */
      {0x00010000u, 0x0001},                        /* subnormal kept */
      {0xff800000u, 0xff80}, {0x80000000u, 0x8000},
  };
  for (const auto &c : cases)
    CHECK(f32_to_bf16_bits(float_of(c.in)) == c.out, "bf16(%#x) = %#x, want %#x", c.in,
          f32_to_bf16_bits(float_of(c.in)), c.out);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7f80ffffu})
    CHECK((f32_to_bf16_bits(float_of(nan)) & 0x7fff) > 0x7f80, "bf16(%#x) is not NaN", nan);
}

void test_ex2_flushes_below_2_pow_minus_126() {
  CHECK(ex2_approx_ftz(0.f) == 1.f && ex2_approx_ftz(1.f) == 2.f && ex2_approx_ftz(-1.f) == 0.5f,
        "ex2 of small integers");
  CHECK(ex2_approx_ftz(-126.f) == 0x1p-126f, "ex2(-126)");
  CHECK(ex2_approx_ftz(-126.5f) == 0.f && ex2_approx_ftz(-149.f) == 0.f, "subnormal results flush");
  CHECK(ex2_approx_ftz(-INFINITY) == 0.f && ex2_approx_ftz(INFINITY) == INFINITY, "ex2(+-inf)");
  CHECK(isnan(ex2_approx_ftz(NAN)), "ex2(NaN)");
  CHECK(ex2_approx_ftz(0x1p-140f) == 1.f, "subnormal argument flushes to 0");
  CHECK(fabsf(ex2_approx_ftz(0.5f) - 1.41421356f) < 1e-6f, "ex2(0.5)");
}

/* kiln_types.cuh's four PTX helpers reach the emulation meant for each. */
void test_kernel_ptx_helpers_run_their_host_versions() {
  CHECK(kiln_f16_to_f32(kiln_f16{0x3c00}) == 1.f, "cvt.f32.f16");
  CHECK(kiln_f32_to_f16(-2.f).bits == 0xc000, "cvt.rn.f16.f32");
  CHECK(kiln_f32_to_bf16(1.f).bits == 0x3f80, "cvt.rn.bf16.f32");
  CHECK(kiln_bf16_to_f32(kiln_bf16{0x4040}) == 3.f, "bf16 widening");
  CHECK(kiln_exp2f(3.f) == 8.f && kiln_exp2f(-130.f) == 0.f, "ex2.approx.ftz.f32");
}

/* ---- scheduling ------------------------------------------------------------ */

bool run(unsigned grid, unsigned block, int policy, uint64_t seed,
         const std::function<void()> &kernel, std::string *err) {
  launch_options opt;
  opt.grid = grid;
  opt.block = block;
  opt.policy = policy;
  opt.seed = seed;
  return launch(opt, kernel, err);
}

void test_shuffle_returns_the_partner_lanes_value() {
  for (int policy = 0; policy < kPolicyCount; ++policy) {
    long wrong = 0;
    std::string err;
    const bool ok = run(
        2, 128, policy, 11,
        [&] {
          const unsigned t = threadIdx.x;
          for (int o = 0; o < 32; ++o)
            wrong += __shfl_xor_sync(0xffffffffu, (float)t, o) != (float)(t ^ (unsigned)o);
        },
        &err);
    CHECK(ok && wrong == 0, "policy %s: %ld wrong (%s)", policy_name(policy), wrong, err.c_str());
  }
}

void test_syncthreads_orders_shared_memory_and_every_thread_runs_once() {
  for (unsigned block : {32u, 64u, 1024u})
    for (int policy = 0; policy < kPolicyCount; ++policy) {
      std::vector<unsigned> shared(block), runs(3 * block, 0);
      long wrong = 0;
      std::string err;
      const bool ok = run(
          3, block, policy, 12,
          [&] {
            const unsigned t = threadIdx.x, b = blockIdx.x;
            wrong += gridDim.x != 3 || blockDim.x != block;
            ++runs[b * block + t];
            for (unsigned round = 0; round < 3; ++round) {
              shared[t] = t + 1000 * b + 100000 * round;
              __syncthreads();
              wrong += shared[(t + 37) % block] != (t + 37) % block + 1000 * b + 100000 * round;
              __syncthreads();
            }
          },
          &err);
      bool once = true;
      for (unsigned r : runs)
        once = once && r == 1;
      CHECK(ok && wrong == 0 && once, "block %u policy %s: %ld wrong, once %d (%s)", block,
            policy_name(policy), wrong, once, err.c_str());
    }
}

void test_divergent_barriers_and_shuffles_are_reported() {
  std::string err;
  bool ok = run(
      1, 128, kPolicyRandom, 13,
      [] {
        if (threadIdx.x < 64) __syncthreads();
      },
      &err);
  CHECK(!ok && err.find("deadlock") != std::string::npos, "half-block barrier: %s", err.c_str());
  ok = run(
      1, 64, kPolicyRandom, 14,
      [] {
        if ((threadIdx.x & 31) < 16) (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
      },
      &err);
  CHECK(!ok && err.find("deadlock") != std::string::npos, "half-warp shuffle: %s", err.c_str());
  ok = run(
      1, 32, kPolicyRandom, 15, [] { (void)__shfl_xor_sync(0xffffu, 1.f, 1); }, &err);
  CHECK(!ok && err.find("partial mask") != std::string::npos, "partial mask: %s", err.c_str());
  ok = run(
      1, 48, kPolicyRandom, 16, [] {}, &err);
  CHECK(!ok, "a block of 48 threads was accepted");
  long wrong = 0; /* and the runtime recovers for the next launch */
  ok = run(
      2, 64, kPolicyRandom, 17,
      [&] {
        __syncthreads();
        wrong += __shfl_xor_sync(0xffffffffu, 1.f, 3) != 1.f;
      },
      &err);
  CHECK(ok && wrong == 0, "launch after failures: %s", err.c_str());
}

/* Two block reductions through one buffer: with the barrier between them
 * every policy gets it right; without it, some policy lets a warp overwrite
 * the buffer before another has read it. */
void test_a_missing_barrier_is_exposed() {
  for (bool barrier : {true, false}) {
    int wrong_launches = 0;
    for (int policy = 0; policy < kPolicyCount; ++policy)
      for (uint64_t seed = 0; seed < 4; ++seed) {
        float buf[8];
        long wrong = 0;
        std::string err;
        const bool ok = run(
            1, 256, policy, seed,
            [&] {
              const unsigned lane = threadIdx.x & 31, w = threadIdx.x >> 5;
              if (lane == 0) buf[w] = 1.f; /* round 1: every warp writes 1 */
              __syncthreads();
              float s = 0.f;
              for (int i = 0; i < 8; ++i)
                s += buf[i];
              wrong += s != 8.f;
              if (barrier) __syncthreads();
              if (lane == 0) buf[w] = 2.f; /* round 2 reuses the buffer */
              __syncthreads();
              s = 0.f;
              for (int i = 0; i < 8; ++i)
                s += buf[i];
              wrong += s != 16.f;
            },
            &err);
        CHECK(ok, "%s", err.c_str());
        wrong_launches += wrong != 0;
      }
    if (barrier)
      CHECK(wrong_launches == 0, "with the barrier, %d launches went wrong", wrong_launches);
    else
      CHECK(wrong_launches > 0, "without the barrier no launch went wrong: races are invisible");
  }
}

} // namespace

int main() {
  test_f16_rounds_to_nearest_even_with_subnormals_and_overflow();
  test_bf16_rounds_to_nearest_even_and_keeps_nan();
  test_ex2_flushes_below_2_pow_minus_126();
  test_kernel_ptx_helpers_run_their_host_versions();
  test_shuffle_returns_the_partner_lanes_value();
  test_syncthreads_orders_shared_memory_and_every_thread_runs_once();
  test_divergent_barriers_and_shuffles_are_reported();
  test_a_missing_barrier_is_exposed();
  printf("%d failures\n", g_failures);
  return g_failures ? 1 : 0;
}
