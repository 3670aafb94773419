/* kiln doctor's `cache_fs` check: the file system of each cache directory,
 * and whether other hosts share it (docs/cache-format.md, "Shared file
 * systems"). Reads nothing but statfs, mountinfo and the index's header. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache/store.h" /* the shared-file-system rules */
#include "common/fstype.h"
#include "probes/doctor.h"

/* "DIR: TYPE (shared|local)[, from KILN_TEST_FSTYPE]" */
static void head(char *out, size_t cap, const char *dir, const kiln_fs_info *fs) {
  snprintf(out, cap, "%s: %s (%s)%s", dir, fs->type, fs->shared ? "shared" : "local",
           fs->from_test ? ", from KILN_TEST_FSTYPE" : "");
}

static int has_index(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/index.sqlite", dir);
  return access(p, F_OK) == 0;
}

static void check_primary(kiln_doctor_report *r, const char *dir, const char *moved_from) {
  char h[4300], fix[9000], local[4200], type[96];
  kiln_fs_info fs, from;
  if (kiln_fs_probe(dir, &fs) != KILN_OK) {
    doctor_add(r, "cache_fs", KILN_DOCTOR_WARN, "make the directory (or its parent) readable",
               "%s: file system unknown: %s", dir, kiln_last_error());
    return;
  }
  head(h, sizeof h, dir, &fs);
  kiln_cache_local_advice(local, sizeof local);
  if (!fs.shared && moved_from && *moved_from && kiln_fs_probe(moved_from, &from) == KILN_OK)
    doctor_add(r, "cache_fs", KILN_DOCTOR_PASS, NULL,
               "%s; the default %s is on %s, shared between hosts: the index is kept here instead",
               h, moved_from, kiln_fs_describe(&from, type, sizeof type));
  else if (!fs.shared)
    doctor_add(r, "cache_fs", KILN_DOCTOR_PASS, NULL, "%s", h);
  else if (has_index(dir)) {
    snprintf(fix, sizeof fix,
             "copy its artifacts to a node-local cache: `kiln cache export - --cache %s | kiln "
             "cache import - --cache %s`, use that (KILN_CACHE_DIR), share through --remote "
             "file://%s-remote --upload",
             dir, local, dir);
    doctor_add(r, "cache_fs", KILN_DOCTOR_FAIL, fix,
               "%s; holds %s index, which kiln only reads there (immutable): builds refuse it "
               "(SQLite's WAL needs one host)",
               h, kiln_index_is_wal(dir) ? "a WAL" : "an");
  } else {
    snprintf(fix, sizeof fix,
             "use a node-local cache (KILN_CACHE_DIR=%s) and share builds through the remote: "
             "--remote file://%s --upload (docs/remote-cache.md)",
             local, dir);
    doctor_add(r, "cache_fs", KILN_DOCTOR_FAIL, fix,
               "%s; kiln refuses to make its index there (SQLite's WAL needs one host)", h);
  }
}

static void check_layer(kiln_doctor_report *r, const char *dir) {
  char h[4300], p[4200];
  kiln_fs_info fs;
  int writer;
  if (kiln_fs_probe(dir, &fs) != KILN_OK) {
    doctor_add(r, "cache_fs", KILN_DOCTOR_WARN,
               "make the layer readable, or drop it from KILN_CACHE_PATH",
               "%s: file system unknown (read immutable): %s", dir, kiln_last_error());
    return;
  }
  head(h, sizeof h, dir, &fs);
  snprintf(p, sizeof p, "%s/index.sqlite-shm", dir);
  writer = kiln_index_wal_pending(dir) || access(p, F_OK) == 0;
  if (!fs.shared)
    doctor_add(r, "cache_fs", KILN_DOCTOR_PASS, NULL, "%s; read-only layer", h);
  else if (!writer)
    doctor_add(r, "cache_fs", KILN_DOCTOR_PASS, NULL, "%s; read-only layer, read immutable", h);
  else
    doctor_add(r, "cache_fs", KILN_DOCTOR_WARN,
               "let the writer on its own host finish (a kiln that closes folds the -wal into "
               "index.sqlite), or publish a copy made while nothing writes it",
               "%s; read-only layer with an -wal/-shm (a writer has its WAL index open, or was "
               "killed): read immutable, the rows only in its -wal are not seen",
               h);
}

void doctor_cache_fs(kiln_doctor_report *r, const char *primary, const char *moved_from,
                     const char *layers) {
  const char *p = layers;
  if (!primary || !*primary)
    doctor_add(r, "cache_fs", KILN_DOCTOR_SKIP, NULL, "no cache directory to look at");
  else
    check_primary(r, primary, moved_from);
  while (p && *p) {
    const char *colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    char dir[4096];
    if (len && len < sizeof dir) {
      memcpy(dir, p, len);
      dir[len] = '\0';
      if (!primary || strcmp(dir, primary) != 0) check_layer(r, dir);
    }
    p = colon ? colon + 1 : NULL;
  }
}
