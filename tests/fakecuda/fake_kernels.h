/* fake_kernels.h — the entry points the fake can run: kiln's kernel units,
 * compiled as host C++ for the fiber emulator (tests/emu), each with its
 * launch contract (the block size it is compiled for, and which bytes each
 * pointer argument reaches for given scalar arguments), so that a launch the
 * real kernel would run out of bounds on is refused instead of corrupting
 * the test process.
 *
 * Kernels come in families (softmax, ...): each family is one file
 * fake_<family>.cpp defining kFamily_<family>, listed once in
 * KILN_FAKE_FAMILIES below. */
#ifndef KILN_FAKECUDA_KERNELS_H
#define KILN_FAKECUDA_KERNELS_H

#include <stdint.h> /* uintptr_t */

#include <string> /* std::string */

/* X(family) for every family of runnable entry points: one per directory of
 * kernels/. A family whose fake_<family>.cpp is not built yet has no entries
 * (fake_kernels.cpp's weak empty definition). */
#define KILN_FAKE_FAMILIES(X)                                                                      \
  X(softmax)                                                                                       \
  X(norm)                                                                                          \
  X(embedding)                                                                                     \
  X(activation)                                                                                    \
  X(dropout)                                                                                       \
  X(rope)                                                                                          \
  X(cross_entropy)

namespace kiln_fake {

enum dtype { kF32, kF16, kBf16 };

/* One pointer argument of a launch and the bytes the kernel may touch from it. */
struct buffer_use {
  const char *name; /* the parameter's name in docs/kernels.md */
  uintptr_t ptr;
  unsigned long long bytes; /* 0: nothing (the pointer is not checked) */
  unsigned align;           /* of the element type */
  bool written;
  bool in_place_ok; /* may be exactly another in_place_ok buffer; never a partial overlap */
};

/* What a launch touches, from its arguments. */
struct launch_plan {
  buffer_use buf[8];
  int nbuf = 0;
  int out = -1;         /* the buffer KILN_FAKE_CUDA_WRONG perturbs (its first element) */
  int out_dtype = kF32; /* its element type */
};

struct entry {
  const char *name;
  unsigned threads; /* the blockDim.x it is compiled for (__launch_bounds__) */
  /* Reads the arguments: false with the reason when the kernel's contract
   * rules them out (the host's bug), else the buffers they reach. */
  bool (*plan)(const entry &e, void *const *params, launch_plan *out, std::string *why);
  /* The kernel itself, called once per emulated CUDA thread. */
  void (*run)(void *const *params);
  const void *info; /* the family's own description of the entry */
};

struct family {
  const entry *entries;
  int count;
};

#define KILN_FAKE_FAMILY_DECL_(f) extern const family kFamily_##f;
KILN_FAKE_FAMILIES(KILN_FAKE_FAMILY_DECL_)
#undef KILN_FAKE_FAMILY_DECL_

/* The entry point called name, or NULL when the fake cannot run it. */
const entry *find_entry(const char *name);

/* Argument i of a launch as type A (kernelParams[i] points at its value). */
template <class A> A param(void *const *params, int i) {
  A a;
  __builtin_memcpy(&a, params[i], sizeof a);
  return a;
}

} // namespace kiln_fake

#endif /* KILN_FAKECUDA_KERNELS_H */
