/* Crash-safe file writes and whole-file reads. */
#include "common/fileio.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/digest.h"
#include "common/error.h"

kiln_status kiln_path_join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= cap) return kiln_fail(KILN_EINVAL, "path too long: %s/%s", a, b);
  return KILN_OK;
}

kiln_status kiln_fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return kiln_fail_errno(KILN_EIO, errno, "open directory %s", path);
  if (fsync(fd) != 0 && errno != EINVAL) {
    int e = errno;
    close(fd);
    return kiln_fail_errno(KILN_EIO, e, "fsync directory %s", path);
  }
  close(fd);
  return KILN_OK;
}

static kiln_status write_all(int fd, const void *data, size_t len, const char *path) {
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return kiln_fail_errno(KILN_EIO, errno, "write %s", path);
    }
    p += w;
    len -= (size_t)w;
  }
  return KILN_OK;
}

kiln_status kiln_write_atomic(const char *path, const char *tmp_dir, const void *data, size_t len,
                              unsigned mode) {
  char tmp[4096], dir[4096];
  kiln_status rc;
  int fd = -1, n;
  char host[128];
  kiln_host_name(host, sizeof host);
  /* pid and host name the writer, so debris of a dead one can be told from a
   * live writer's file (kiln cache verify). */
  n = snprintf(tmp, sizeof tmp, "%s/tmp.%ld.%s.XXXXXX", tmp_dir, (long)getpid(), host);
  if (n < 0 || (size_t)n >= sizeof tmp) return kiln_fail(KILN_EINVAL, "path too long: %s", tmp_dir);
  fd = mkstemp(tmp);
  if (fd < 0) return kiln_fail_errno(KILN_EIO, errno, "create temp file in %s", tmp_dir);
  KILN_CHECK(write_all(fd, data, len, tmp));
  if (fsync(fd) != 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "fsync %s", tmp);
    goto out;
  }
  if (fchmod(fd, mode) != 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "chmod %s", tmp);
    goto out;
  }
  if (close(fd) != 0) {
    fd = -1;
    rc = kiln_fail_errno(KILN_EIO, errno, "close %s", tmp);
    goto out;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "rename %s to %s", tmp, path);
    goto out;
  }
  tmp[0] = '\0';
  n = snprintf(dir, sizeof dir, "%s", path);
  if (n < 0 || (size_t)n >= sizeof dir) {
    rc = kiln_fail(KILN_EINVAL, "path too long: %s", path);
    goto out;
  }
  rc = kiln_fsync_dir(dirname(dir));
out:
  if (fd >= 0) close(fd);
  if (tmp[0] && rc != KILN_OK) unlink(tmp);
  return rc;
}

kiln_status kiln_read_file(const char *path, uint8_t **out, size_t *out_len) {
  return kiln_read_regular(path, UINT64_MAX, UINT64_MAX, 0, out, out_len);
}

#define STREAM_CHUNK ((size_t)64 << 10) /* kiln_hash_regular's buffer */

/* Opens path without blocking and checks, before any byte is read, that it is
 * a regular file of want_size (UINT64_MAX: any) and at most max_size bytes;
 * then makes reads blocking again. */
static kiln_status open_regular(const char *path, uint64_t want_size, uint64_t max_size,
                                unsigned flags, int *out_fd, uint64_t *out_size) {
  struct stat st;
  kiln_status rc = KILN_OK;
  /* O_NONBLOCK: opening a FIFO planted at the path must not wait for a writer */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK |
                          ((flags & KILN_READ_NOFOLLOW) ? O_NOFOLLOW : 0));
  if (fd < 0) {
    if (errno == ENOENT) return kiln_fail(KILN_ENOTFOUND, "%s: no such file", path);
    if (errno == ELOOP && (flags & KILN_READ_NOFOLLOW))
      return kiln_fail(KILN_ECORRUPT, "%s is a symbolic link, which a cache never holds", path);
    return kiln_fail_errno(KILN_EIO, errno, "open %s", path);
  }
  if (fstat(fd, &st) != 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "stat %s", path);
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = kiln_fail(KILN_ECORRUPT, "%s is %s, not a regular file", path, kiln_file_kind(st.st_mode));
    goto out;
  }
  if (want_size != UINT64_MAX && (uint64_t)st.st_size != want_size) {
    rc = kiln_fail(KILN_ECORRUPT, "%s is %llu bytes, not the %llu expected (truncated or replaced)",
                   path, (unsigned long long)st.st_size, (unsigned long long)want_size);
    goto out;
  }
  if ((uint64_t)st.st_size > max_size || (uint64_t)st.st_size >= SIZE_MAX) {
    rc = kiln_fail(KILN_ECORRUPT, "%s is %llu bytes, over the %llu a file here may have", path,
                   (unsigned long long)st.st_size, (unsigned long long)max_size);
    goto out;
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "fcntl %s", path);
    goto out;
  }
  *out_fd = fd;
  *out_size = (uint64_t)st.st_size;
  fd = -1;
out:
  if (fd >= 0) close(fd);
  return rc;
}

/* Reads the size bytes fd had when opened: into buf (when not NULL) or
 * through h, at most STREAM_CHUNK at a time into chunk. One more byte, or one
 * fewer, means it changed while read. */
static kiln_status read_exact(int fd, const char *path, uint64_t size, uint8_t *buf, kiln_sha256 *h,
                              uint8_t *chunk) {
  uint64_t got = 0;
  uint8_t extra;
  ssize_t r;
  while (got < size) {
    uint8_t *to = buf ? buf + got : chunk;
    size_t want = size - got < STREAM_CHUNK ? (size_t)(size - got) : STREAM_CHUNK;
    r = read(fd, to, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return kiln_fail_errno(KILN_EIO, errno, "read %s", path);
    if (r == 0)
      return kiln_fail(KILN_ECORRUPT, "%s shrank while read: %llu of %llu bytes", path,
                       (unsigned long long)got, (unsigned long long)size);
    if (h && kiln_sha256_update(h, to, (size_t)r) != KILN_OK) return KILN_EINTERNAL;
    got += (uint64_t)r;
  }
  while ((r = read(fd, &extra, 1)) < 0 && errno == EINTR) {
  }
  if (r < 0) return kiln_fail_errno(KILN_EIO, errno, "read %s", path);
  if (r > 0)
    return kiln_fail(KILN_ECORRUPT, "%s grew while read: more than its %llu bytes", path,
                     (unsigned long long)size);
  return KILN_OK;
}

kiln_status kiln_read_regular(const char *path, uint64_t want_size, uint64_t max_size,
                              unsigned flags, uint8_t **out, size_t *out_len) {
  uint8_t *buf = NULL;
  uint64_t size = 0;
  kiln_status rc;
  int fd = -1;
  KILN_CHECK(open_regular(path, want_size, max_size, flags, &fd, &size));
  buf = malloc((size_t)size + 1);
  if (!buf) {
    rc = kiln_fail(KILN_ENOMEM, "read %s: out of memory", path);
    goto out;
  }
  KILN_CHECK(read_exact(fd, path, size, buf, NULL, NULL));
  buf[size] = '\0';
  *out = buf;
  *out_len = (size_t)size;
  buf = NULL;
out:
  free(buf);
  if (fd >= 0) close(fd);
  return rc;
}

kiln_status kiln_hash_regular(const char *path, uint64_t want_size, uint64_t max_size,
                              unsigned flags, char hex[65], uint64_t *out_len) {
  kiln_sha256 *h = NULL;
  uint8_t *chunk = NULL;
  uint64_t size = 0;
  kiln_status rc;
  int fd = -1;
  KILN_CHECK(open_regular(path, want_size, max_size, flags, &fd, &size));
  if (!(chunk = malloc(STREAM_CHUNK))) {
    rc = kiln_fail(KILN_ENOMEM, "hash %s: out of memory", path);
    goto out;
  }
  KILN_CHECK(kiln_sha256_new(&h));
  KILN_CHECK(read_exact(fd, path, size, NULL, h, chunk));
  KILN_CHECK(kiln_sha256_final_hex(h, hex));
  if (out_len) *out_len = size;
out:
  kiln_sha256_free(h);
  free(chunk);
  if (fd >= 0) close(fd);
  return rc;
}

const char *kiln_file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFLNK: return "a symbolic link";
  case S_IFIFO: return "a FIFO";
  case S_IFDIR: return "a directory";
  case S_IFCHR:
  case S_IFBLK: return "a device";
  case S_IFSOCK: return "a socket";
  case S_IFREG: return "a regular file";
  }
  return "not a regular file";
}

kiln_status kiln_real_dir(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? kiln_fail(KILN_ENOTFOUND, "%s: no such directory", path)
                           : kiln_fail_errno(KILN_EIO, errno, "%s", path);
  if (!S_ISDIR(st.st_mode))
    return kiln_fail(KILN_EPERM,
                     "%s is %s, not a directory: kiln follows none inside a cache (move it away)",
                     path, kiln_file_kind(st.st_mode));
  return KILN_OK;
}

kiln_status kiln_mkdir(const char *path, unsigned mode) {
  struct stat st;
  if (mkdir(path, mode) == 0) return KILN_OK;
  if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return KILN_OK;
  if (errno == EEXIST) return kiln_fail(KILN_EIO, "%s exists and is not a directory", path);
  return kiln_fail_errno(KILN_EIO, errno, "create directory %s", path);
}

kiln_status kiln_mkdir_p(const char *path, unsigned mode) {
  char buf[4096];
  int n = snprintf(buf, sizeof buf, "%s", path);
  kiln_status rc;
  if (n < 0 || (size_t)n >= sizeof buf) return kiln_fail(KILN_EINVAL, "path too long: %s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    rc = kiln_mkdir(buf, mode);
    *p = '/';
    if (rc != KILN_OK) return rc;
  }
  return kiln_mkdir(buf, mode);
}
