/* Internal: file io that survives crashes — temp file, fsync, rename, fsync dir. */
#ifndef KILN_COMMON_FILEIO_H
#define KILN_COMMON_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/status.h"

/* Writes data to path atomically: a unique temp file in tmp_dir (same file
 * system), written in full, fsynced, given mode, renamed over path, and the
 * directory of path fsynced. On failure the temp file is removed. */
kiln_status kiln_write_atomic(const char *path, const char *tmp_dir, const void *data, size_t len,
                              unsigned mode);
/* Reads a whole file; *out freed with free(). KILN_ENOTFOUND if missing. */
kiln_status kiln_read_file(const char *path, uint8_t **out, size_t *out_len);
/* kiln_read_file for a file kiln does not trust (a blob, a secret): opened
 * without blocking (a FIFO at the path cannot hang the reader), refused
 * (KILN_ECORRUPT) unless it is a regular file of want_size bytes (UINT64_MAX:
 * any size) and at most max_size bytes, before any byte is read (a 2 GiB file
 * at a small blob's path is never read into memory). A file that ends sooner
 * or goes on longer than its size when opened (it changed while read) is
 * KILN_ECORRUPT too. *out has a NUL after its out_len bytes. */
#define KILN_READ_NOFOLLOW                                                                         \
  1u /* refuse a symlink at the path itself (blobs: a cache never holds one) */
kiln_status kiln_read_regular(const char *path, uint64_t want_size, uint64_t max_size,
                              unsigned flags, uint8_t **out, size_t *out_len);
/* The SHA-256 of such a file (same checks, same errors), read as a stream
 * through one 64 KiB buffer: memory does not grow with the file. out_len (may
 * be NULL) gets the bytes hashed. */
kiln_status kiln_hash_regular(const char *path, uint64_t want_size, uint64_t max_size,
                              unsigned flags, char hex[65], uint64_t *out_len);
/* What a file of st_mode mode is, for messages: "a symbolic link", "a FIFO",
 * "a directory", "a device", "a socket", "a regular file". */
const char *kiln_file_kind(unsigned mode);
/* KILN_OK when path is a directory itself, not a symbolic link to one (a
 * cache follows none: through one it would read, write or remove files that
 * are not its own); KILN_ENOTFOUND when absent; else KILN_EPERM (kiln will
 * not go through it) naming path and what it is. */
kiln_status kiln_real_dir(const char *path);
/* mkdir with mode unless it exists as a directory. */
kiln_status kiln_mkdir(const char *path, unsigned mode);
/* mkdir -p (each missing component gets mode). */
kiln_status kiln_mkdir_p(const char *path, unsigned mode);
/* fsync a directory (so a rename in it is durable). */
kiln_status kiln_fsync_dir(const char *path);
/* snprintf into out with truncation reported as KILN_EINVAL. */
kiln_status kiln_path_join(char *out, size_t cap, const char *a, const char *b);

#endif
