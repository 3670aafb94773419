/* Internal: POSIX ustar, as much of it as a kiln cache archive uses
 * (docs/cache-format.md, "Archives"): regular files with short names, written
 * and read as a stream. The reader treats its input as hostile: a header whose
 * checksum, magic, type, name or size is wrong, or a stream that ends early,
 * is KILN_ECORRUPT naming the offset, never a crash or a read past the end. */
#ifndef KILN_CACHE_ARCHIVE_H
#define KILN_CACHE_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "cache/record_fields.h" /* KILN_BLOB_SIZE_MAX */
#include "common/digest.h"
#include "kiln/status.h"

#define KILN_TAR_BLOCK 512
#define KILN_TAR_NAME_MAX 100                /* ustar's name field; kiln writes no prefix */
#define KILN_TAR_SIZE_MAX KILN_BLOB_SIZE_MAX /* the largest member: a blob */

/* A stream being written: fd, the bytes written so far, and (when sum is not
 * NULL) a running SHA-256 of every byte written except the data of members
 * written with sum_data 0 (blobs: their names are their digests). */
typedef struct kiln_tar_writer {
  int fd;
  uint64_t offset;
  kiln_sha256 *sum;
} kiln_tar_writer;

/* One regular file (mode 0444, owner 0, the given mtime): header, data, padding. */
kiln_status kiln_tar_write(kiln_tar_writer *w, const char *name, const void *data, size_t len,
                           int64_t mtime, int sum_data);
/* The member `name` whose data is the running sum of everything before its
 * data (its own header included), as 64 hex digits and a newline. */
kiln_status kiln_tar_write_sum(kiln_tar_writer *w, const char *name, int64_t mtime);
/* The end of the archive: two zero blocks. */
kiln_status kiln_tar_write_end(kiln_tar_writer *w);

/* A stream being read. `what` names it in errors (the archive's path). With
 * sum, every byte read is added to it, except a member's data while sum_data
 * is 0 (the caller sets it after kiln_tar_next; it starts at 1). */
typedef struct kiln_tar_reader {
  int fd;
  uint64_t offset;  /* bytes consumed */
  uint64_t left;    /* of the current member's data */
  uint64_t padding; /* after it: must be zeros */
  const char *what;
  kiln_sha256 *sum;
  int sum_data;
} kiln_tar_reader;

/* The next member: *end = 1 at the end of the archive (a zero block, then
 * another), else its name and size; what is left of the member before is
 * skipped. KILN_ECORRUPT for anything but a regular file with a valid header. */
kiln_status kiln_tar_next(kiln_tar_reader *r, char name[KILN_TAR_NAME_MAX + 1], uint64_t *size,
                          int *end);
/* Up to cap bytes of the current member's data into buf: *got is 0 at its
 * end. A stream that ends early is KILN_ECORRUPT ("truncated"). */
kiln_status kiln_tar_read(kiln_tar_reader *r, void *buf, size_t cap, size_t *got);

/* Parses one header block (exposed for the unit test): KILN_OK with the name
 * and size, *zero = 1 for an all-zero block, KILN_ECORRUPT with the reason. */
kiln_status kiln_tar_parse_header(const unsigned char block[KILN_TAR_BLOCK],
                                  char name[KILN_TAR_NAME_MAX + 1], uint64_t *size, int *zero);

#endif
