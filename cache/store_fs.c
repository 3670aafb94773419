/* The local store on shared file systems (docs/cache-format.md, "Shared file
 * systems"). SQLite's WAL keeps its index of the log in the -shm file, mapped
 * as shared memory: connections on two hosts each see their own copy, and
 * the index is corrupted. So no index is written on a file system other
 * hosts may use (common/fstype.h); one there is only read, immutable, and
 * the default directory (a home directory on a cluster is often NFS) moves
 * to a node-local one. */
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/store.h"
#include "common/error.h"
#include "common/fileio.h" /* kiln_real_dir */
#include "common/fstype.h"
#include "common/logging.h"
#include "common/params.h"

void kiln_cache_node_local_dir(char *out, size_t cap) {
  const char *test = kiln_param_test_node_local_dir(); /* a test's own, not the user's */
  if (test)
    snprintf(out, cap, "%s", test);
  else
    snprintf(out, cap, "/var/tmp/kiln-%u", (unsigned)geteuid());
}

/* "dir/name" exists (any kind of file). */
static int has(const char *dir, const char *name) {
  char p[KILN_PATH_MAX];
  struct stat st;
  return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && lstat(p, &st) == 0;
}

int kiln_index_is_wal(const char *dir) {
  char p[KILN_PATH_MAX];
  unsigned char hdr[20];
  size_t n = 0;
  FILE *f;
  if (has(dir, "index.sqlite-wal") || has(dir, "index.sqlite-shm")) return 1;
  if (snprintf(p, sizeof p, "%s/index.sqlite", dir) >= (int)sizeof p || !(f = fopen(p, "rb")))
    return 0;
  n = fread(hdr, 1, sizeof hdr, f);
  fclose(f);
  /* the header's "file format read version": 1 rollback journal, 2 WAL */
  return n == sizeof hdr && hdr[18] == 2;
}

int kiln_index_wal_pending(const char *dir) {
  char wal[KILN_PATH_MAX];
  struct stat st;
  if (snprintf(wal, sizeof wal, "%s/index.sqlite-wal", dir) >= (int)sizeof wal) return 0;
  return stat(wal, &st) == 0 && st.st_size > 0;
}

void kiln_cache_note_shared_read(const char *dir, const kiln_fs_info *fs, const char *what) {
  char type[96];
  if (kiln_index_wal_pending(dir))
    kiln_log(KILN_LOG_INFO,
             "%s %s is on %s, shared between hosts: its index is read immutable, so the rows "
             "only in its index.sqlite-wal are not read",
             what, dir, kiln_fs_describe(fs, type, sizeof type));
}

const char *kiln_cache_local_advice(char *buf, size_t cap) {
  char dir[KILN_PATH_MAX];
  kiln_fs_info fs;
  kiln_cache_node_local_dir(dir, sizeof dir);
  if (kiln_fs_probe(dir, &fs) == KILN_OK && !fs.shared)
    snprintf(buf, cap, "%s", dir);
  else
    snprintf(buf, cap, "DIR on a local disk");
  return buf;
}

kiln_status kiln_cache_refuse_shared(const char *dir, const kiln_fs_info *fs) {
  char type[96], local[KILN_PATH_MAX];
  kiln_fs_describe(fs, type, sizeof type);
  kiln_cache_local_advice(local, sizeof local);
  if (!has(dir, "index.sqlite"))
    return kiln_fail(
        KILN_EUNSUPPORTED,
        "cache directory %s is on %s, a file system shared between hosts, where "
        "kiln's SQLite index is unsafe (WAL needs one host): use a node-local --cache "
        "/ KILN_CACHE_DIR (%s) and share builds through the remote: --remote file://%s "
        "--upload (docs/remote-cache.md)",
        dir, type, local, dir);
  return kiln_fail(
      KILN_EUNSUPPORTED,
      "cache directory %s is on %s, a file system shared between hosts, where kiln's "
      "SQLite index is unsafe (WAL needs one host); kiln does not move the index it "
      "holds: copy its artifacts into a node-local cache with `kiln cache export - "
      "--cache %s | kiln cache import - --cache %s`, use that (--cache / "
      "KILN_CACHE_DIR), and share builds through the remote: --remote file://%s-remote "
      "--upload (docs/remote-cache.md)",
      dir, type, dir, local, dir);
}

/* Said once per process: a loader and a build in one process both open. */
static void say_moved(const char *dflt, const kiln_fs_info *fs, const char *local) {
  static atomic_int said;
  char type[96], copy[2 * KILN_PATH_MAX] = "";
  if (atomic_exchange(&said, 1)) return;
  if (has(dflt, "index.sqlite"))
    snprintf(copy, sizeof copy,
             "; the cache already there is not used: `kiln cache export - --cache %s | kiln cache "
             "import -` copies it",
             dflt);
  kiln_log(KILN_LOG_INFO,
           "%s is on %s, shared between hosts: using the node-local %s for the index (SQLite's WAL "
           "needs one host); set KILN_CACHE_DIR to choose, and --remote file://... to share "
           "(docs/cache-format.md)%s",
           dflt, kiln_fs_describe(fs, type, sizeof type), local, copy);
}

kiln_status kiln_cache_default_dir(char *out, size_t cap, char *moved_from, size_t moved_cap) {
  char dflt[KILN_PATH_MAX], local[KILN_PATH_MAX];
  kiln_fs_info fs, local_fs;
  kiln_status rc;
  if (moved_from && moved_cap) moved_from[0] = '\0';
  KILN_CHECK(kiln_param_cache_dir_path(dflt, sizeof dflt));
  /* KILN_CACHE_DIR is the user's choice: kept, and refused if shared */
  if (kiln_param_cache_dir() || kiln_fs_probe(dflt, &fs) != KILN_OK || !fs.shared) goto keep;
  kiln_cache_node_local_dir(local, sizeof local);
  /* shared too (a diskless node): the default stays, and a write refuses it */
  if (kiln_fs_probe(local, &local_fs) != KILN_OK || local_fs.shared) goto keep;
  /* /var/tmp is everyone's: a link planted there is not followed */
  if ((rc = kiln_real_dir(local)) != KILN_OK && rc != KILN_ENOTFOUND) {
    char type[96], why[1024];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    rc = kiln_fail(rc,
                   "%s is on %s, shared between hosts, and its node-local replacement %s is not "
                   "a directory of its own (%s): set KILN_CACHE_DIR to a local directory",
                   dflt, kiln_fs_describe(&fs, type, sizeof type), local, why);
    goto out;
  }
  say_moved(dflt, &fs, local);
  if (moved_from && moved_cap) snprintf(moved_from, moved_cap, "%s", dflt);
  return snprintf(out, cap, "%s", local) >= (int)cap ? kiln_fail(KILN_EINVAL, "cache path too long")
                                                     : KILN_OK;
keep:
  rc = snprintf(out, cap, "%s", dflt) >= (int)cap ? kiln_fail(KILN_EINVAL, "cache path too long")
                                                  : KILN_OK;
out:
  return rc;
}
