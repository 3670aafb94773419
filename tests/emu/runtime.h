/* runtime.h — runs a kernel's threads as cooperative fibers on the host.
 *
 * A launch runs the grid's blocks one after another; within a block every
 * CUDA thread is a fiber with its own stack. A fiber runs until it reaches
 * __syncthreads or __shfl_xor_sync, which are real barriers (a block's, a
 * warp's), then the scheduler picks another ready thread according to the
 * launch's policy, so the interleavings of threads between barriers vary from
 * launch to launch (deterministically, from the seed). What it checks:
 *   - every thread of the block arrives at each __syncthreads, every lane of
 *     the warp at each __shfl_xor_sync, with the full mask; a barrier or
 *     shuffle in divergent code is reported as a deadlock instead of hanging
 *     (call sites are not compared: GCC may duplicate a call, CUDA counts
 *     arrivals too);
 *   - a thread that runs ahead of the others can overwrite shared memory
 *     before they read it: a missing barrier shows up as a wrong result.
 * Not modelled: timing, the memory model (writes are visible at once, in
 * program order), concurrent blocks (blocks are independent in kiln's kernels).
 */
#ifndef KILN_EMU_RUNTIME_H
#define KILN_EMU_RUNTIME_H

#include <stdint.h> /* uint64_t */

#include <functional> /* std::function */
#include <string>     /* std::string */

namespace kiln_emu {

/* How the scheduler picks the next ready thread. */
enum policy {
  kPolicyRandom,   /* the first ready thread after a random index */
  kPolicySlowWarp, /* as random, but one warp (re-drawn at each block barrier) only runs when
                      no other thread can */
  kPolicyInOrder,  /* lowest thread index first: warp 0 runs ahead */
  kPolicyReverse,  /* highest thread index first */
  kPolicyCount,
  kPolicyFromSeed = -1 /* drawn from the seed */
};

struct launch_options {
  unsigned grid = 1;   /* gridDim.x */
  unsigned block = 32; /* blockDim.x: a multiple of 32, at most 1024 */
  uint64_t seed = 1;   /* drives the policy and every random choice of the scheduler */
  int policy = kPolicyFromSeed;
};

/* Runs kernel() once per thread of every block (blockIdx, threadIdx, gridDim
 * and blockDim set as on the device). Returns true, or false with a one-line
 * reason in *err when the threads deadlocked or diverged; the launch is then
 * abandoned (the kernel's frames are dropped, never unwound). */
bool launch(const launch_options &opt, const std::function<void()> &kernel, std::string *err);

/* Policy names for messages. */
const char *policy_name(int policy);

} // namespace kiln_emu

#endif /* KILN_EMU_RUNTIME_H */
