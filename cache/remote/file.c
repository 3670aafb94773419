/* The file:// backend of the remote (cache/remote/remote.h): the remote's
 * flat layout, ac/<key> record documents and cas/<digest> blobs, in a
 * directory of a shared file system (NFS, Lustre, GPFS, CephFS, a network
 * FUSE mount) that many hosts mount (docs/remote-cache.md, "file://").
 *
 * Nothing is locked and nothing is a database. A PUT writes a temp name in
 * the object's own directory (".tmp.<name>.<host>.<pid>.<n>"), fsyncs it and
 * renames it over the name: atomic on NFS, Lustre and GPFS, so a reader sees
 * the whole old object, the whole new one or none, never a part. Objects are
 * never written in place. A writer killed at any point leaves at most its
 * temp file, which no read asks for and kiln_file_remote_gc removes by age.
 *
 * The directory is not trusted: every path below the root is opened with
 * O_NOFOLLOW (a symlink in ac/ or cas/, or as ac/ or cas/ themselves, is
 * refused, never followed: nothing outside the root is read or written), a
 * read opens without blocking (a FIFO cannot hang it) and takes only a
 * regular file no larger than the request allows, checked before its first
 * byte is read; the bytes go through the same bounded, hashing sink as an
 * HTTP body (cache/remote/sink.c), so the digest is checked after.
 *
 * A request is answered with the status an HTTP remote would give (200, 404,
 * 403, 405, 409, 500), so the remote above treats every backend alike.
 * Transient errors (a stale NFS handle, EINTR, EAGAIN, EIO) are retried with
 * the remote's backoff; a run of failures opens the breaker. A request blocks
 * as long as the file system does: a hard-mounted NFS server that stops
 * answering blocks the syscall, which no process can interrupt. */
#include <dirent.h>    /* fdopendir, readdir */
#include <errno.h>     /* errno */
#include <fcntl.h>     /* openat, fcntl, O_* */
#include <stdarg.h>    /* va_list */
#include <stdatomic.h> /* the temp names' counter */
#include <stdio.h>     /* snprintf, renameat */
#include <stdlib.h>    /* calloc, free */
#include <string.h>    /* memcpy, strchr, strlen, strncmp */
#include <sys/stat.h>  /* fstat, fstatat, mkdirat */
#include <time.h>      /* nanosleep, time */
#include <unistd.h>    /* close, fsync, read, unlinkat, write */

#include "cache/remote/remote.h"
#include "cache/remote/sink.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"
#include "common/pool.h"

#define CHUNK ((size_t)256 << 10) /* a read or write at a time */
#define TMP_PREFIX ".tmp."

struct kiln_file_remote {
  kiln_remote_config cfg;
  char root[4096]; /* the directory the URL names */
  kiln_breaker breaker;
  char host[64]; /* for temp names */
};

static atomic_uint tmp_counter;

kiln_status kiln_file_url_path(const char *url, char *out, size_t cap) {
  const char *p;
  size_t len;
  if (strncmp(url, "file://", 7) != 0)
    return kiln_fail(KILN_EINVAL, "a file remote URL starts with file:///");
  p = url + 7;
  if (strncmp(p, "localhost/", 10) == 0) p += 9; /* file://localhost/x is file:///x */
  if (*p != '/')
    return kiln_fail(KILN_EINVAL,
                     "remote cache URL %.200s: a file:// URL names an absolute path on this "
                     "host (file:///path); mount a shared file system there instead of naming "
                     "a host",
                     url);
  len = strlen(p);
  while (len > 1 && p[len - 1] == '/')
    len--;
  if (len >= cap) return kiln_fail(KILN_EINVAL, "remote cache path is longer than %zu bytes", cap);
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f)
      return kiln_fail(KILN_EINVAL, "remote cache URL has a control character");
  for (const char *c = p; c < p + len;) { /* no "." or ".." component */
    const char *e = memchr(c + 1, '/', (size_t)(p + len - c - 1));
    size_t n = (size_t)((e ? e : p + len) - c - 1);
    if ((n == 1 && c[1] == '.') || (n == 2 && c[1] == '.' && c[2] == '.'))
      return kiln_fail(KILN_EINVAL, "remote cache URL %.200s: no '.' or '..' in the path", url);
    c = e ? e : p + len;
  }
  memcpy(out, p, len);
  out[len] = '\0';
  return KILN_OK;
}

kiln_status kiln_file_remote_new(kiln_file_remote **out, const kiln_remote_config *cfg) {
  kiln_file_remote *f = NULL;
  kiln_status rc = KILN_OK;
  if (!out || !cfg) return kiln_fail(KILN_EINVAL, "kiln_file_remote_new: NULL argument");
  *out = NULL;
  if (!memchr(cfg->base, 0, sizeof cfg->base))
    return kiln_fail(KILN_EINVAL, "remote cache config: unterminated string");
  f = calloc(1, sizeof *f);
  if (!f) return kiln_fail(KILN_ENOMEM, "file remote");
  f->cfg = *cfg;
  memset(f->cfg.token, 0, sizeof f->cfg.token); /* no use for one here */
  if (f->cfg.parallel < 1) f->cfg.parallel = 1;
  if (f->cfg.retries < 0) f->cfg.retries = 0;
  KILN_CHECK(kiln_file_url_path(cfg->base, f->root, sizeof f->root));
  kiln_host_name(f->host, sizeof f->host);
  for (char *h = f->host; *h; h++)
    if (*h == '/' || *h == '.') *h = '-';
  kiln_breaker_init(&f->breaker, cfg->breaker_threshold, cfg->base);
  *out = f;
  f = NULL;
out:
  free(f);
  return rc;
}

static void file_free(void *impl) {
  kiln_file_remote *f = impl;
  if (!f) return;
  kiln_breaker_destroy(&f->breaker);
  free(f);
}

/* ---- one request ---- */

/* What a request's path names: "ac/<name>", "cas/<name>", or a collection
 * "ac/" or "cas/" (name ""). A name is [A-Za-z0-9._-], not starting with '.'
 * (temp names do): no other path is ever opened. */
static int split_path(const char *path, char *dir, size_t dcap, const char **name) {
  const char *slash = strchr(path, '/');
  size_t dl;
  if (!slash) return 0;
  dl = (size_t)(slash - path);
  if (!((dl == 2 && strncmp(path, "ac", 2) == 0) || (dl == 3 && strncmp(path, "cas", 3) == 0)) ||
      dl >= dcap)
    return 0;
  memcpy(dir, path, dl);
  dir[dl] = '\0';
  *name = slash + 1;
  if ((*name)[0] == '.') return 0;
  for (const char *p = *name; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '.' || *p == '_' || *p == '-'))
      return 0;
  return 1;
}

typedef struct answer {
  long status;
  kiln_status rc;
  int retry; /* transient: worth another attempt */
  char detail[200];
} answer;

static void say(answer *a, long status, kiln_status rc, int err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void say(answer *a, long status, kiln_status rc, int err, const char *fmt, ...) {
  va_list ap;
  a->status = status;
  a->rc = rc;
  a->retry = err == ESTALE || err == EINTR || err == EAGAIN || err == EIO || err == ETIMEDOUT;
  va_start(ap, fmt);
  vsnprintf(a->detail, sizeof a->detail, fmt, ap);
  va_end(ap);
}

/* An errno from opening, reading or writing an object as an answer. */
static void say_errno(answer *a, const char *what, const char *path, int err) {
  if (err == ENOENT)
    say(a, 404, KILN_ENOTFOUND, 0, "%s: no such file", path);
  else if (err == ELOOP)
    say(a, 200, KILN_ECORRUPT, 0, "%s is a symbolic link, which the remote never holds", path);
  else if (err == ENOTDIR || err == EISDIR)
    say(a, 409, KILN_ECORRUPT, err, "%s %s: %s", what, path, strerror(err));
  else if (err == EACCES || err == EPERM || err == EROFS)
    say(a, 403, KILN_EPERM, err, "%s %s: %s", what, path, strerror(err));
  else if (err == ENOSPC || err == EDQUOT)
    say(a, 507, KILN_ENOSPC, err, "%s %s: %s", what, path, strerror(err));
  else
    say(a, 500, KILN_EREMOTE, err, "%s %s: %s", what, path, strerror(err));
}

/* The root, then ac/ or cas/ in it (made first when make is set), each a
 * directory itself, never a link. -1 with the answer set. */
static int open_dir(const kiln_file_remote *f, const char *dir, int make, answer *a) {
  char path[4200];
  int root, fd;
  root = open(f->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    if (errno == ENOENT)
      say(a, 0, KILN_EREMOTE, 0, "remote cache directory %s does not exist (not mounted?)",
          f->root);
    else
      say_errno(a, "remote cache directory", f->root, errno);
    if (a->rc == KILN_ENOTFOUND || a->rc == KILN_ECORRUPT) a->rc = KILN_EREMOTE;
    return -1;
  }
  if (make && mkdirat(root, dir, 0777) != 0 && errno != EEXIST) {
    snprintf(path, sizeof path, "%s/%s", f->root, dir);
    say_errno(a, "make", path, errno);
    close(root);
    return -1;
  }
  fd = openat(root, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", f->root, dir);
    if (err == ENOTDIR && fstatat(root, dir, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      say(a, 409, KILN_ECORRUPT, 0, "%s is %s, not a directory: move it away", path,
          kiln_file_kind(st.st_mode));
    } else if (err == ELOOP) {
      say(a, 409, KILN_ECORRUPT, 0, "%s is a symbolic link: kiln follows none in a remote", path);
    } else {
      say_errno(a, "open", path, err);
    }
    close(root);
    return -1;
  }
  close(root);
  return fd;
}

static void do_get(const kiln_file_remote *f, kiln_remote_req *r, const char *dir, const char *name,
                   int head, answer *a) {
  char path[4400], cl[64];
  kiln_http_sink *sink = NULL;
  uint8_t *buf = NULL;
  struct stat st;
  int dfd, fd = -1;
  snprintf(path, sizeof path, "%s/%s/%s", f->root, dir, name);
  if ((dfd = open_dir(f, dir, 0, a)) < 0) {
    if (a->rc == KILN_ENOTFOUND || a->status == 404)
      say(a, 404, KILN_ENOTFOUND, 0, "%s: no such file", path);
    return;
  }
  /* O_NONBLOCK: a FIFO planted at the name must not wait for a writer */
  fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    say_errno(a, "open", path, errno);
    goto out;
  }
  if (fstat(fd, &st) != 0) {
    say_errno(a, "stat", path, errno);
    goto out;
  }
  if (!S_ISREG(st.st_mode)) {
    say(a, 200, KILN_ECORRUPT, 0, "%s is %s, not a regular file", path, kiln_file_kind(st.st_mode));
    goto out;
  }
  if (r->max_bytes && (uint64_t)st.st_size > r->max_bytes) {
    say(a, 200, KILN_ECORRUPT, 0, "%s is %lld bytes, larger than the %llu allowed", path,
        (long long)st.st_size, (unsigned long long)r->max_bytes);
    goto out;
  }
  if (head) {
    say(a, 200, KILN_OK, 0, "%s", "");
    goto out;
  }
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 ||
      kiln_http_sink_new(&sink, r->out_fd, r->max_bytes, r->expect_digest) != KILN_OK ||
      !(buf = malloc(CHUNK))) {
    say(a, 500, KILN_EREMOTE, 0, "read %s: out of memory or a bad request", path);
    goto out;
  }
  /* the size it had when opened: a file that changes while read is caught
   * as short (the sink) or by its digest */
  snprintf(cl, sizeof cl, "Content-Length: %lld\r\n", (long long)st.st_size);
  kiln_http_sink_header(sink, cl, strlen(cl));
  if (r->out_fd >= 0 && (lseek(r->out_fd, 0, SEEK_SET) < 0 || ftruncate(r->out_fd, 0) != 0)) {
    say_errno(a, "rewind the temp file for", path, errno);
    goto out;
  }
  for (;;) {
    ssize_t n = read(fd, buf, CHUNK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      say_errno(a, "read", path, errno);
      goto out;
    }
    if (n == 0) break;
    r->bytes_down += (uint64_t)n;
    if (kiln_http_sink_body(sink, buf, (size_t)n) != (size_t)n) break; /* finish says why */
  }
  a->status = 200;
  a->rc = kiln_http_sink_finish(sink, r->out_fd >= 0 ? NULL : &r->data, &r->len);
  if (a->rc != KILN_OK) say(a, 200, a->rc, 0, "%s: %s", path, kiln_last_error());
  if (a->rc == KILN_EIO) a->rc = KILN_EREMOTE; /* our temp file, said as such */
out:
  kiln_http_sink_free(sink);
  free(buf);
  if (fd >= 0) close(fd);
  close(dfd);
}

static int write_all(int fd, const uint8_t *p, size_t len) {
  while (len) {
    ssize_t n = write(fd, p, len < CHUNK ? len : CHUNK);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Temp name in the object's directory, fsync, rename over the name, fsync
 * the directory. */
static void do_put(const kiln_file_remote *f, kiln_remote_req *r, const char *dir, const char *name,
                   answer *a) {
  char tmp[256], path[4400];
  int dfd, fd = -1, err;
  snprintf(path, sizeof path, "%s/%s/%s", f->root, dir, name);
  if ((dfd = open_dir(f, dir, 1, a)) < 0) return;
  snprintf(tmp, sizeof tmp, TMP_PREFIX "%.64s.%s.%ld.%u", name, f->host, (long)getpid(),
           atomic_fetch_add(&tmp_counter, 1));
  fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    say_errno(a, "create a temp file beside", path, errno);
    goto out;
  }
  if ((err = write_all(fd, r->body, r->body_len)) != 0 || (fsync(fd) != 0 && (err = errno))) {
    say_errno(a, "write", path, err);
    goto fail;
  }
  if (close(fd) != 0) {
    fd = -1;
    say_errno(a, "write", path, errno);
    goto fail;
  }
  fd = -1;
  if (renameat(dfd, tmp, dfd, name) != 0) {
    err = errno;
    if (err == EISDIR || err == ENOTEMPTY || err == EEXIST)
      say(a, 409, KILN_ECORRUPT, 0, "%s is a directory, where an object belongs: move it away",
          path);
    else
      say_errno(a, "rename onto", path, err);
    goto fail;
  }
  fsync(dfd); /* the rename, durable; a failure here loses no object */
  r->bytes_up += r->body_len;
  say(a, 201, KILN_OK, 0, "%s", "");
  goto out;
fail:
  if (fd >= 0) close(fd);
  fd = -1;
  unlinkat(dfd, tmp, 0);
out:
  if (fd >= 0) close(fd);
  close(dfd);
}

static void do_delete(const kiln_file_remote *f, const char *dir, const char *name, answer *a) {
  char path[4400];
  int dfd;
  snprintf(path, sizeof path, "%s/%s/%s", f->root, dir, name);
  if ((dfd = open_dir(f, dir, 0, a)) < 0) return;
  if (unlinkat(dfd, name, 0) != 0)
    say_errno(a, "remove", path, errno);
  else
    say(a, 204, KILN_OK, 0, "%s", "");
  close(dfd);
}

static void do_mkcol(const kiln_file_remote *f, const char *dir, answer *a) {
  int dfd = open_dir(f, dir, 1, a);
  if (dfd < 0) return;
  close(dfd);
  say(a, 201, KILN_OK, 0, "%s", "");
}

static void one_attempt(const kiln_file_remote *f, kiln_remote_req *r, answer *a) {
  char dir[8];
  const char *name = NULL;
  memset(a, 0, sizeof *a);
  if (!split_path(r->path, dir, sizeof dir, &name) ||
      (r->method == KILN_REMOTE_MKCOL) != (*name == '\0')) {
    say(a, 400, KILN_EINVAL, 0, "%s: not an object of the remote's layout", r->path);
    return;
  }
  switch (r->method) {
  case KILN_REMOTE_GET: do_get(f, r, dir, name, 0, a); break;
  case KILN_REMOTE_HEAD: do_get(f, r, dir, name, 1, a); break;
  case KILN_REMOTE_PUT: do_put(f, r, dir, name, a); break;
  case KILN_REMOTE_DELETE: do_delete(f, dir, name, a); break;
  case KILN_REMOTE_MKCOL: do_mkcol(f, dir, a); break;
  }
}

typedef struct run_ctx {
  kiln_file_remote *f;
  kiln_remote_req *reqs;
  size_t n;
  kiln_remote_then then; /* each first request's follow-up, run by the same thread */
  void *user;
} run_ctx;

static void run_req(kiln_file_remote *f, kiln_remote_req *r);

static void run_one(size_t i, void *user) {
  run_ctx *x = user;
  kiln_remote_req *q;
  run_req(x->f, &x->reqs[i]);
  if (x->then && (q = x->then(x->user, i))) {
    kiln_remote_reqs_clear(q, 1);
    run_req(x->f, q);
    x->then(x->user, x->n + i);
  }
}

static void run_req(kiln_file_remote *f, kiln_remote_req *r) {
  double t0 = kiln_clock_ms();
  long backoff = f->cfg.backoff_ms > 0 ? f->cfg.backoff_ms : 0;
  answer a;
  for (;;) {
    if (kiln_breaker_is_open(&f->breaker)) {
      kiln_breaker_fail_all(r, 1);
      return; /* stopped, not a failure of its own: not counted again */
    }
    r->attempts++;
    r->bytes_down = 0;
    one_attempt(f, r, &a);
    if (!a.retry || a.rc == KILN_OK || r->attempts > f->cfg.retries) break;
    free(r->data);
    r->data = NULL;
    r->len = 0;
    {
      long d = backoff < 2000 ? backoff : 2000;
      struct timespec ts = {d / 1000, (d % 1000) * 1000000L};
      nanosleep(&ts, NULL);
      backoff = backoff ? backoff * 2 : 0;
    }
  }
  r->status = a.status;
  r->rc = a.rc;
  if (a.rc != KILN_OK)
    snprintf(r->error, sizeof r->error, "%s %.100s: %.120s (%d attempt%s)",
             kiln_remote_method_name(r->method), r->path, a.detail, r->attempts,
             r->attempts == 1 ? "" : "s");
  kiln_breaker_note(&f->breaker, r);
  kiln_log(KILN_LOG_DEBUG, "remote %s %s: status %ld, %llu bytes down, %llu up, %.0f ms: %s",
           kiln_remote_method_name(r->method), r->path, r->status,
           (unsigned long long)r->bytes_down, (unsigned long long)r->bytes_up, kiln_clock_ms() - t0,
           r->rc == KILN_OK ? "ok" : r->error);
}

static kiln_status file_run(void *impl, kiln_remote_req *reqs, size_t n, kiln_remote_then then,
                            void *user) {
  kiln_file_remote *f = impl;
  run_ctx x = {f, reqs, n, then, user};
  kiln_status rc;
  if (!f || (!reqs && n)) return kiln_fail(KILN_EINVAL, "file remote run: NULL argument");
  kiln_remote_reqs_clear(reqs, n);
  if (kiln_breaker_is_open(&f->breaker)) {
    rc = kiln_breaker_fail_all(reqs, n);
    kiln_remote_then_failed(reqs, n, then, user);
    return rc;
  }
  if (!n) return KILN_OK;
  return kiln_pool_run(n, f->cfg.parallel < (int)n ? f->cfg.parallel : (int)n, run_one, &x);
}

static kiln_breaker *file_breaker(void *impl) {
  return &((kiln_file_remote *)impl)->breaker;
}

const kiln_remote_backend kiln_remote_file = {"file", file_run, file_breaker, file_free};

/* ---- clean-up of killed writers' temp files ---- */

kiln_status kiln_file_remote_gc(kiln_file_remote *f, double max_age_s, uint64_t *removed,
                                uint64_t *bytes) {
  static const char *const dirs[] = {"ac", "cas"};
  time_t now = time(NULL);
  kiln_status rc = KILN_OK;
  *removed = *bytes = 0;
  for (size_t d = 0; d < 2 && rc == KILN_OK; d++) {
    answer a;
    DIR *dh;
    struct dirent *e;
    int dfd = open_dir(f, dirs[d], 0, &a);
    if (dfd < 0) {
      if (a.status == 404 || a.rc == KILN_ENOTFOUND) continue; /* nothing uploaded there yet */
      rc = kiln_fail(a.rc == KILN_OK ? KILN_EREMOTE : a.rc, "%s", a.detail);
      break;
    }
    if (!(dh = fdopendir(dfd))) {
      rc = kiln_fail_errno(KILN_EIO, errno, "list %s/%s", f->root, dirs[d]);
      close(dfd);
      break;
    }
    while ((e = readdir(dh))) {
      struct stat st;
      if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0) continue;
      if (fstatat(dirfd(dh), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue; /* gone */
      if (!S_ISREG(st.st_mode) || difftime(now, st.st_mtime) < max_age_s) continue;
      if (unlinkat(dirfd(dh), e->d_name, 0) == 0) {
        (*removed)++;
        *bytes += (uint64_t)st.st_size;
        kiln_log(KILN_LOG_INFO, "remote cache %s: removed %s/%s, a temp file %.0f s old", f->root,
                 dirs[d], e->d_name, difftime(now, st.st_mtime));
      }
    }
    closedir(dh);
  }
  return rc;
}
