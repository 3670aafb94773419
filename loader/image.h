/* Internal: the shape check of an image before it reaches the driver.
 *
 * A blob whose digest verifies can still be a file someone wrote: a CUBIN
 * whose ELF headers point past its end makes the driver read past the buffer
 * (a SIGSEGV in the training process). Every image is checked here first, and
 * one that fails is a bad blob (quarantined like one the driver refuses). */
#ifndef KILN_LOADER_IMAGE_H
#define KILN_LOADER_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* kind "cubin": a little-endian ELF64 for EM_CUDA whose ELF header, program
 * headers, section headers and every segment and (non-NOBITS) section lie
 * inside [0, size). kind "ptx": printable text (tabs and line ends allowed)
 * with no NUL before size. 0 when it passes; -1 with the first violation in
 * why (one line) otherwise. A 0-byte image never passes. */
int kiln_image_check(const uint8_t *img, size_t size, const char *kind, char *why, size_t cap);

#endif
