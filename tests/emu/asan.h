/* tests/emu: is AddressSanitizer on (GCC's and clang's spellings), and its
 * poisoning interface, or no-ops without it. */
#ifndef KILN_EMU_ASAN_H
#define KILN_EMU_ASAN_H

#if defined(__SANITIZE_ADDRESS__)
#define KILN_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_EMU_ASAN 1
#endif
#endif

#ifdef KILN_EMU_ASAN
#include <sanitizer/asan_interface.h>        /* ASAN_(UN)POISON_MEMORY_REGION */
#include <sanitizer/common_interface_defs.h> /* __sanitizer_*_switch_fiber */
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

#endif
