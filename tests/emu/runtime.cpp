/* runtime.cpp — the fiber scheduler behind runtime.h.
 *
 * One OS thread. Each CUDA thread of the running block is a fiber on its own
 * mmap'ed stack (with a guard page below it); the scheduler (on the OS
 * thread's own stack) switches to a ready fiber, which runs until it waits at
 * a barrier or finishes, then switches back. A block ends when every fiber has
 * finished; fibers are re-created on the same stacks for the next block.
 *
 * Switching: on x86-64 a 20-instruction switch of the callee-saved registers
 * (below). glibc's swapcontext makes a sigprocmask system call per switch,
 * which made the softmax test five times slower (50 s instead of 10); it
 * remains the fallback elsewhere (or with -DKILN_EMU_UCONTEXT).
 * AddressSanitizer is told about every switch (__sanitizer_start/
 * finish_switch_fiber), so the kernels stay instrumented on fiber stacks.
 */
#include "runtime.h"

#include <stdio.h>    /* snprintf */
#include <string.h>   /* memset */
#include <sys/mman.h> /* mmap, mprotect */
#include <ucontext.h> /* the portable switch */

#include <random> /* std::mt19937_64 */
#include <vector> /* std::vector */

#include "asan.h" /* KILN_EMU_ASAN, ASAN_(UN)POISON_MEMORY_REGION, fiber switches */

/* After every system header: it defines `asm` (this file uses __asm__). */
#include "host_prelude.h" /* dim3, __syncthreads, __shfl_xor_sync */

#if defined(__x86_64__) && !defined(KILN_EMU_UCONTEXT)
#define KILN_EMU_FAST_SWITCH 1
#endif

kiln_emu::dim3 kiln_emu::g_thread_idx, kiln_emu::g_block_idx, kiln_emu::g_block_dim,
    kiln_emu::g_grid_dim;
const kiln_emu::dim3 &threadIdx = kiln_emu::g_thread_idx, &blockIdx = kiln_emu::g_block_idx,
                     &blockDim = kiln_emu::g_block_dim, &gridDim = kiln_emu::g_grid_dim;

#ifdef KILN_EMU_FAST_SWITCH
/* kiln_emu_switch(save, to): push the SysV callee-saved registers and the
 * MXCSR / x87 control words, store sp in *save, load `to`, pop, return into
 * the other context. A new fiber's stack is laid out so that the first switch
 * to it "returns" into kiln_emu_fiber_start with r13 = the function to run. */
extern "C" {
__attribute__((visibility("hidden"))) void kiln_emu_switch(void **save, void *to);
__attribute__((visibility("hidden"))) void kiln_emu_fiber_start();
}
__asm__(".text\n"
        ".p2align 4\n"
        ".globl kiln_emu_switch\n"
        ".hidden kiln_emu_switch\n"
        ".type kiln_emu_switch,@function\n"
        "kiln_emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size kiln_emu_switch, .-kiln_emu_switch\n"
        ".p2align 4\n"
        ".globl kiln_emu_fiber_start\n"
        ".hidden kiln_emu_fiber_start\n"
        ".type kiln_emu_fiber_start,@function\n"
        "kiln_emu_fiber_start:\n"
        "  callq *%r13\n" /* rsp is 16-aligned here, as the ABI wants before a call */
        "  ud2\n"         /* fiber_main never returns */
        ".size kiln_emu_fiber_start, .-kiln_emu_fiber_start\n");
#endif

namespace kiln_emu {
namespace {

#ifdef KILN_EMU_ASAN
const size_t kStackBytes = 512 * 1024; /* ASan's frames are several times larger */
#else
const size_t kStackBytes = 128 * 1024;
#endif
const size_t kGuardBytes = 4096;
const unsigned kMaxThreads = 1024;

struct context {
#ifdef KILN_EMU_FAST_SWITCH
  void *sp;
#else
  ucontext_t uc;
#endif
};

enum fiber_state { kReady, kAtSync, kAtShuffle, kDone };

struct fiber {
  context ctx;
  char *stack_lo;
  int state;
  void *asan_fake_stack;
};

struct warp {
  int arrived;
  unsigned gen;         /* completed shuffles; its parity picks the slot set */
  uint32_t slot[2][32]; /* double-buffered: see warp_exchange */
  int waiting[32];
};

struct scheduler {
  context main_ctx;
  const void *main_stack_lo;
  size_t main_stack_size;
  char *stacks;
  unsigned nthreads;
  std::vector<fiber> fibers;
  std::vector<warp> warps;
  int cur;
  unsigned ndone;
  uint64_t ready[kMaxThreads / 64]; /* bit t: thread t can run */
  int sync_arrived;
  std::vector<int> sync_waiting;
  const std::function<void()> *kernel;
  std::mt19937_64 rng;
  int policy;
  int slow_warp;
  bool failed;
  std::string error;
};

scheduler S;

void ready_set(int t) {
  S.ready[t >> 6] |= 1ull << (t & 63);
}
void ready_clear(int t) {
  S.ready[t >> 6] &= ~(1ull << (t & 63));
}

/* First ready thread at or after `from` (cyclic), skipping warp `skip`. */
int ready_from(unsigned from, int skip) {
  const unsigned words = (S.nthreads + 63) / 64;
  for (unsigned i = 0; i <= words; ++i) {
    const unsigned w = (from / 64 + i) % words;
    uint64_t bits = S.ready[w];
    if (i == 0) bits &= ~0ull << (from % 64);
    if (skip >= 0 && (unsigned)skip / 2 == w) bits &= ~(0xffffffffull << (32 * (skip & 1)));
    if (bits) return (int)(w * 64 + __builtin_ctzll(bits));
  }
  return -1;
}

int pick() {
  switch (S.policy) {
  case kPolicyInOrder: return ready_from(0, -1);
  case kPolicyReverse:
    for (int w = (int)(S.nthreads + 63) / 64 - 1; w >= 0; --w)
      if (S.ready[w]) return w * 64 + 63 - __builtin_clzll(S.ready[w]);
    return -1;
  case kPolicySlowWarp: {
    const int t = ready_from((unsigned)(S.rng() % S.nthreads), S.slow_warp);
    return t >= 0 ? t : ready_from(0, -1);
  }
  default: return ready_from((unsigned)(S.rng() % S.nthreads), -1);
  }
}

void context_switch(context *from, context *to) {
#ifdef KILN_EMU_FAST_SWITCH
  kiln_emu_switch(&from->sp, to->sp);
#else
  swapcontext(&from->uc, &to->uc);
#endif
}

void fiber_main();

void context_make(context *c, char *stack_lo) {
#ifdef KILN_EMU_FAST_SWITCH
  /* What kiln_emu_switch pops, top down: return address, rbp, rbx, r12, r13,
   * r14, r15, then MXCSR and the x87 control word (inherited). */
  uint64_t *top = (uint64_t *)(stack_lo + kStackBytes);
  uint32_t mxcsr;
  uint16_t fpucw;
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpucw));
  top[-1] = (uint64_t)(uintptr_t)kiln_emu_fiber_start;
  top[-2] = top[-3] = top[-4] = 0;           /* rbp (ends backtraces), rbx, r12 */
  top[-5] = (uint64_t)(uintptr_t)fiber_main; /* r13 */
  top[-6] = top[-7] = 0;                     /* r14, r15 */
  top[-8] = mxcsr | ((uint64_t)fpucw << 32);
  c->sp = &top[-8];
#else
  static ucontext_t tmpl;
  static bool have_tmpl = getcontext(&tmpl) == 0; /* one system call, not one per fiber */
  (void)have_tmpl;
  c->uc = tmpl;
  c->uc.uc_stack.ss_sp = stack_lo;
  c->uc.uc_stack.ss_size = kStackBytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, fiber_main, 0);
#endif
}

/* ---- switching, with AddressSanitizer told about each stack change ------ */

void enter_fiber(int t) {
  fiber &f = S.fibers[t];
  S.cur = t;
  g_thread_idx = dim3{(unsigned)t, 0, 0};
#ifdef KILN_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack_lo, kStackBytes);
  context_switch(&S.main_ctx, &f.ctx);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  context_switch(&S.main_ctx, &f.ctx);
#endif
}

void arrived_in_fiber() {
#ifdef KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(S.fibers[S.cur].asan_fake_stack, &S.main_stack_lo,
                                  &S.main_stack_size);
#endif
}

/* Back to the scheduler; returns when scheduled again (never once done). */
void leave_fiber(bool for_good) {
  fiber &f = S.fibers[S.cur];
#ifdef KILN_EMU_ASAN
  __sanitizer_start_switch_fiber(for_good ? nullptr : &f.asan_fake_stack, S.main_stack_lo,
                                 S.main_stack_size);
#else
  (void)for_good;
#endif
  context_switch(&f.ctx, &S.main_ctx);
  arrived_in_fiber();
}

void fiber_main() {
  arrived_in_fiber();
  (*S.kernel)();
  S.fibers[S.cur].state = kDone;
  ready_clear(S.cur);
  ++S.ndone;
  leave_fiber(true);
}

/* Ends the launch from inside a fiber; never returns. */
[[noreturn]] void fail(const char *msg) {
  S.failed = true;
  S.error = msg;
  leave_fiber(true);
  __builtin_unreachable();
}

void wait_here(int state) {
  S.fibers[S.cur].state = state;
  ready_clear(S.cur);
  leave_fiber(false);
}

void release(int t) {
  S.fibers[t].state = kReady;
  ready_set(t);
}

/* ---- one block ---------------------------------------------------------- */

void describe_deadlock() {
  unsigned at_sync = 0, at_shfl = 0;
  for (const fiber &f : S.fibers) {
    at_sync += f.state == kAtSync;
    at_shfl += f.state == kAtShuffle;
  }
  char buf[256];
  snprintf(buf, sizeof buf,
           "deadlock in block %u: %u threads wait at __syncthreads, %u at __shfl_xor_sync, %u "
           "finished (a barrier or shuffle in divergent code)",
           g_block_idx.x, at_sync, at_shfl, S.ndone);
  S.error = buf;
}

bool run_block(unsigned b) {
  g_block_idx = dim3{b, 0, 0};
  memset(S.ready, 0, sizeof S.ready);
  S.ndone = 0;
  S.sync_arrived = 0;
  S.sync_waiting.clear();
  for (warp &w : S.warps) {
    w.arrived = 0;
    w.gen = 0;
  }
  for (unsigned t = 0; t < S.nthreads; ++t) {
    fiber &f = S.fibers[t];
    f.state = kReady;
    f.asan_fake_stack = nullptr;
    context_make(&f.ctx, f.stack_lo);
    ready_set((int)t);
  }
  S.slow_warp = (int)(S.rng() % (S.nthreads / 32));
  while (S.ndone < S.nthreads) {
    const int t = pick();
    if (t < 0) {
      describe_deadlock();
      return false;
    }
    enter_fiber(t);
    if (S.failed) return false;
  }
  return true;
}

/* One mapping for kMaxThreads stacks, made once; MAP_NORESERVE: only the
 * pages a fiber touches are ever backed. */
void ensure_stacks() {
  if (S.stacks) return;
  const size_t per = kStackBytes + kGuardBytes;
  void *p = mmap(nullptr, per * kMaxThreads, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    perror("kiln_emu: mmap of the fiber stacks");
    abort();
  }
  S.stacks = (char *)p;
  for (unsigned t = 0; t < kMaxThreads; ++t)
    if (mprotect(S.stacks + t * per, kGuardBytes, PROT_NONE) != 0) {
      perror("kiln_emu: mprotect of a stack guard page");
      abort();
    }
}

} // namespace

const char *policy_name(int policy) {
  static const char *names[] = {"random", "slow-warp", "in-order", "reverse"};
  return policy >= 0 && policy < kPolicyCount ? names[policy] : "from-seed";
}

bool launch(const launch_options &opt, const std::function<void()> &kernel, std::string *err) {
  if (opt.block == 0 || opt.block % 32 != 0 || opt.block > kMaxThreads || opt.grid == 0) {
    *err = "bad launch shape";
    return false;
  }
  ensure_stacks();
  S.nthreads = opt.block;
  S.fibers.assign(opt.block, fiber());
  for (unsigned t = 0; t < opt.block; ++t)
    S.fibers[t].stack_lo = S.stacks + t * (kStackBytes + kGuardBytes) + kGuardBytes;
  S.warps.assign(opt.block / 32, warp());
  S.sync_waiting.reserve(opt.block);
  S.kernel = &kernel;
  S.rng.seed(opt.seed);
  S.policy = opt.policy >= 0 ? opt.policy : (int)(S.rng() % kPolicyCount);
  S.failed = false;
  S.error.clear();
  g_grid_dim = dim3{opt.grid, 1, 1};
  g_block_dim = dim3{opt.block, 1, 1};
  for (unsigned b = 0; b < opt.grid; ++b) {
    if (run_block(b)) continue;
    *err = S.error + " [policy " + policy_name(S.policy) + "]";
#ifdef KILN_EMU_ASAN
    /* The abandoned frames leave their redzones poisoned. */
    ASAN_UNPOISON_MEMORY_REGION(S.stacks, (kStackBytes + kGuardBytes) * kMaxThreads);
#endif
    return false;
  }
  return true;
}

} // namespace kiln_emu

using kiln_emu::S;

void __syncthreads() {
  if (++S.sync_arrived < (int)S.nthreads) {
    S.sync_waiting.push_back(S.cur);
    kiln_emu::wait_here(kiln_emu::kAtSync);
    return;
  }
  /* Last to arrive: release the others and keep running. */
  for (int t : S.sync_waiting)
    kiln_emu::release(t);
  S.sync_waiting.clear();
  S.sync_arrived = 0;
  S.slow_warp = (int)(S.rng() % (S.nthreads / 32));
}

/* Lanes write their value into the warp's slot set for this exchange, wait
 * for all 32, then read. Two slot sets suffice: a lane can write the set again
 * only two exchanges later, after every lane has passed the exchange in
 * between, hence has read this one. */
const uint32_t *kiln_emu::warp_exchange(unsigned mask, uint32_t bits, const char *what) {
  if (mask != 0xffffffffu) {
    char msg[96];
    snprintf(msg, sizeof msg, "%s with a partial mask", what);
    kiln_emu::fail(msg);
  }
  const int lane = S.cur & 31;
  kiln_emu::warp &w = S.warps[S.cur >> 5];
  const unsigned set = w.gen & 1u;
  w.slot[set][lane] = bits;
  if (++w.arrived < 32) {
    w.waiting[w.arrived - 1] = S.cur;
    kiln_emu::wait_here(kiln_emu::kAtShuffle);
  } else {
    for (int i = 0; i < 31; ++i)
      kiln_emu::release(w.waiting[i]);
    w.arrived = 0;
    ++w.gen;
  }
  return w.slot[set];
}

float __shfl_xor_sync(unsigned mask, float var, int lane_mask) {
  if (lane_mask < 0 || lane_mask > 31) kiln_emu::fail("__shfl_xor_sync lane mask out of 0..31");
  uint32_t bits;
  memcpy(&bits, &var, 4);
  const uint32_t *all = kiln_emu::warp_exchange(mask, bits, "__shfl_xor_sync");
  bits = all[(S.cur & 31) ^ lane_mask];
  memcpy(&var, &bits, 4);
  return var;
}
