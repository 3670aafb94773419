/* Content-addressed blobs: cas/<2 hex>/<62 hex>, read-only once written. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/store.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/logging.h"

kiln_status kiln_blob_path(char *out, size_t cap, const char *layer_dir, const char *digest) {
  kiln_status rc;
  int n;
  if (!kiln_is_hex64(digest)) return kiln_fail(KILN_EINVAL, "'%s' is not a SHA-256 digest", digest);
  /* cas/ then cas/<2 hex>: every blob operation (read, write, quarantine, gc)
   * finds its file through here, so none goes through a link to elsewhere */
  n = snprintf(out, cap, "%s/cas", layer_dir);
  for (int step = 0; step < 2; step++) {
    if (n < 0 || (size_t)n >= cap) return kiln_fail(KILN_EINVAL, "path too long: %s", layer_dir);
    rc = kiln_real_dir(out);
    if (rc != KILN_OK && rc != KILN_ENOTFOUND) return rc;
    if (rc == KILN_ENOTFOUND) break; /* nothing under it: the blob is absent */
    if (step == 0) n = snprintf(out, cap, "%s/cas/%.2s", layer_dir, digest);
  }
  n = snprintf(out, cap, "%s/cas/%.2s/%s", layer_dir, digest, digest + 2);
  if (n < 0 || (size_t)n >= cap) return kiln_fail(KILN_EINVAL, "path too long: %s", layer_dir);
  return KILN_OK;
}

kiln_status kiln_blob_check(const char *path, const char *digest, uint64_t want_size, uint8_t **out,
                            size_t *out_size) {
  char got[65];
  uint8_t *data = NULL;
  size_t len = 0;
  kiln_status rc;
  if (out) { /* the bytes are wanted: one read, bounded by the size */
    KILN_CHECK(
        kiln_read_regular(path, want_size, KILN_BLOB_SIZE_MAX, KILN_READ_NOFOLLOW, &data, &len));
    KILN_CHECK(kiln_sha256_hex(got, data, len));
  } else { /* a check only: a stream, never the whole file in memory */
    uint64_t n = 0;
    KILN_CHECK(kiln_hash_regular(path, want_size, KILN_BLOB_SIZE_MAX, KILN_READ_NOFOLLOW, got, &n));
    len = (size_t)n;
  }
  if (strcmp(got, digest) != 0) {
    rc = kiln_fail(KILN_ECORRUPT, "blob %s hashes to %.12s..., not its name", path, got);
    goto out;
  }
  if (out) {
    *out = data;
    data = NULL;
  }
  if (out_size) *out_size = len;
out:
  free(data);
  return rc;
}

kiln_status kiln_blob_read(const char *layer_dir, const char *digest, uint64_t want_size,
                           uint8_t **out, size_t *out_size) {
  char path[KILN_PATH_MAX];
  kiln_status rc;
  KILN_CHECK(kiln_blob_path(path, sizeof path, layer_dir, digest));
  rc = kiln_blob_check(path, digest, want_size, out, out_size);
out:
  return rc;
}

kiln_status kiln_blob_write(kiln_cache *c, const char *digest, const void *data, size_t len) {
  char path[KILN_PATH_MAX], dir[KILN_PATH_MAX];
  kiln_status rc;
  KILN_CHECK(kiln_blob_path(path, sizeof path, c->primary.dir, digest));
  /* A good copy already there (another process wrote the same bytes) is kept;
   * a bad one is replaced by the rename below. */
  rc = kiln_blob_read(c->primary.dir, digest, len, NULL, NULL);
  if (snprintf(dir, sizeof dir, "%s/%.2s", c->cas_dir, digest) >= (int)sizeof dir) {
    rc = kiln_fail(KILN_EINVAL, "path too long: %s", c->cas_dir);
    goto out;
  }
  if (rc == KILN_OK) {
    /* Reused: restart gc's orphan grace period, and make sure its directory
     * entry is durable (its writer may have died before fsyncing it). */
    utimensat(AT_FDCWD, path, NULL, 0);
    return kiln_fsync_dir(dir);
  }
  if (access(dir, F_OK) != 0) {
    KILN_CHECK(kiln_mkdir(dir, 0700));
    KILN_CHECK(kiln_fsync_dir(c->cas_dir));
  }
  rc = kiln_write_atomic(path, c->tmp_dir, data, len, 0444);
out:
  return rc;
}

kiln_status kiln_blob_adopt(kiln_cache *c, const char *digest, const char *tmp_path) {
  char path[KILN_PATH_MAX], dir[KILN_PATH_MAX];
  kiln_status rc;
  int fd = -1;
  KILN_CHECK(kiln_blob_path(path, sizeof path, c->primary.dir, digest));
  if (kiln_blob_read(c->primary.dir, digest, UINT64_MAX, NULL, NULL) == KILN_OK) {
    rc = KILN_OK; /* a good copy is there: keep it */
    goto out;
  }
  if (snprintf(dir, sizeof dir, "%s/%.2s", c->cas_dir, digest) >= (int)sizeof dir) {
    rc = kiln_fail(KILN_EINVAL, "path too long: %s", c->cas_dir);
    goto out;
  }
  if (access(dir, F_OK) != 0) {
    KILN_CHECK(kiln_mkdir(dir, 0700));
    KILN_CHECK(kiln_fsync_dir(c->cas_dir));
  }
  fd = open(tmp_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0 || fchmod(fd, 0444) != 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "sync %s", tmp_path);
    goto out;
  }
  if (rename(tmp_path, path) != 0) {
    rc = kiln_fail_errno(KILN_EIO, errno, "move %s to %s", tmp_path, path);
    goto out;
  }
  rc = kiln_fsync_dir(dir);
out:
  if (fd >= 0) close(fd);
  unlink(tmp_path); /* gone after the rename; removed on every other path */
  return rc;
}

/* syncfs() of the file system that holds path. */
static kiln_status sync_fs_of(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  kiln_status rc = KILN_OK;
  if (fd < 0 || syncfs(fd) != 0) rc = kiln_fail_errno(KILN_EIO, errno, "syncing %s", path);
  if (fd >= 0) close(fd);
  return rc;
}

kiln_status kiln_blobs_adopt(kiln_cache *c, kiln_blob_file *v, size_t n) {
  char path[KILN_PATH_MAX], dir[KILN_PATH_MAX];
  kiln_status rc = KILN_OK;
  size_t moved = 0;
  for (size_t i = 0; i < n; i++) /* the bytes and the mode, before any rename */
    if (v[i].tmp[0] && chmod(v[i].tmp, 0444) != 0)
      return kiln_fail_errno(KILN_EIO, errno, "chmod %s", v[i].tmp);
  KILN_CHECK(sync_fs_of(c->tmp_dir));
  for (size_t i = 0; i < n; i++) {
    if (!v[i].tmp[0]) continue;
    KILN_CHECK(kiln_blob_path(path, sizeof path, c->primary.dir, v[i].digest));
    if (kiln_blob_read(c->primary.dir, v[i].digest, UINT64_MAX, NULL, NULL) == KILN_OK) {
      unlink(v[i].tmp); /* a good copy is there: keep it */
      v[i].tmp[0] = '\0';
      continue;
    }
    if (snprintf(dir, sizeof dir, "%s/%.2s", c->cas_dir, v[i].digest) >= (int)sizeof dir) {
      rc = kiln_fail(KILN_EINVAL, "path too long: %s", c->cas_dir);
      goto out;
    }
    if (access(dir, F_OK) != 0) KILN_CHECK(kiln_mkdir(dir, 0700));
    if (rename(v[i].tmp, path) != 0) {
      rc = kiln_fail_errno(KILN_EIO, errno, "move %s to %s", v[i].tmp, path);
      goto out;
    }
    v[i].tmp[0] = '\0';
    moved++;
  }
  if (moved) rc = sync_fs_of(c->cas_dir); /* the renames and new folders */
out:
  return rc;
}

kiln_status kiln_blob_quarantine(kiln_cache *c, const char *digest, const char *why_in, int force) {
  char path[KILN_PATH_MAX], dest[KILN_PATH_MAX], why[256];
  kiln_status rc;
  int n;
  snprintf(why, sizeof why, "%s", why_in); /* may be kiln_last_error(), reused below */
  KILN_CHECK(kiln_blob_path(path, sizeof path, c->primary.dir, digest));
  n = snprintf(dest, sizeof dest, "%s/%s.%lld", c->quarantine_dir, digest, (long long)kiln_now_s());
  if (n < 0 || (size_t)n >= sizeof dest) {
    rc = kiln_fail(KILN_EINVAL, "path too long: %s", c->quarantine_dir);
    goto out;
  }
  KILN_CHECK(kiln_txn_begin(c, "quarantine"));
  /* Another process may have rewritten a good copy since we read it (unless
   * the bytes are known bad although they hash right: the driver refused them). */
  if (!force && kiln_blob_read(c->primary.dir, digest, UINT64_MAX, NULL, NULL) == KILN_OK) {
    rc = kiln_txn_end(c, KILN_OK, "quarantine");
    goto out;
  }
  if (rename(path, dest) != 0 && errno != ENOENT) {
    rc = kiln_txn_end(c, kiln_fail_errno(KILN_EIO, errno, "move %s to quarantine", path),
                      "quarantine");
    goto out;
  }
  rc = kiln_sql_run(c->primary.db, "DELETE FROM records WHERE digest = ?1",
                    SQL_ARGS(SQL_TEXT(digest)), "drop quarantined records");
  rc = kiln_txn_end(c, rc, "quarantine");
  if (rc == KILN_OK)
    kiln_log(KILN_LOG_WARN, "quarantined blob %s (%s); its records are dropped and will be rebuilt",
             digest, why);
out:
  return rc;
}

kiln_status kiln_cache_read_blob(uint8_t **out, size_t *out_size, kiln_cache *c,
                                 const char *digest) {
  kiln_status rc = kiln_blob_read(c->primary.dir, digest, UINT64_MAX, out, out_size);
  if (rc == KILN_ECORRUPT) kiln_blob_quarantine(c, digest, kiln_last_error(), 0);
  for (size_t i = 0; rc != KILN_OK && i < c->n_layers; i++)
    rc = kiln_blob_read(c->layers[i].dir, digest, UINT64_MAX, out, out_size);
  if (rc != KILN_OK) return kiln_fail(KILN_ENOTFOUND, "no blob %s in any cache layer", digest);
  return KILN_OK;
}
