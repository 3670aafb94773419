/* cache/store.c, records.c, blobs.c, maintain.c: the local store's contract. */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/store.h" /* failure records and pins are internal */
#include "common/digest.h"
#include "kiln/cache.h"
#include "tests/unit/test_util.h"

typedef struct fixture {
  char dir[256];
  char cache_dir[300];
  kiln_cache *c;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  test_make_tmpdir(f->dir, sizeof f->dir);
  snprintf(f->cache_dir, sizeof f->cache_dir, "%s/cache", f->dir);
  o.dir = f->cache_dir;
  o.ro_path = "";
  if (kiln_cache_open(&f->c, &o) != KILN_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kiln_cache_close(f->c);
  test_rm_rf(f->dir);
  free(f);
  return 0;
}

static void fill_record(kiln_record *r, const char *key_seed, const char *unit) {
  memset(r, 0, sizeof *r);
  kiln_sha256_hex(r->key, key_seed, strlen(key_seed));
  snprintf(r->unit, sizeof r->unit, "%s", unit);
  snprintf(r->target, sizeof r->target, "sm_90");
  snprintf(r->kind, sizeof r->kind, "cubin");
  snprintf(r->toolchain, sizeof r->toolchain, "nvrtc-13.0");
  snprintf(r->options, sizeof r->options, "-std=c++17");
}

static void blob_path(char *out, size_t cap, const fixture *f, const char *digest) {
  if (cap < sizeof f->cache_dir + 80) abort();
  snprintf(out, cap, "%.300s/cas/%.2s/%.62s", f->cache_dir, digest, digest + 2);
}

static void test_created_0700_and_refuses_unsafe_dirs(void **state) {
  fixture *f = *state;
  struct stat st;
  kiln_cache *c = NULL;
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  char other[300];
  assert_int_equal(stat(f->cache_dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  snprintf(other, sizeof other, "%s/open", f->dir);
  assert_int_equal(mkdir(other, 0700), 0);
  assert_int_equal(chmod(other, 0777), 0);
  o.dir = other;
  o.ro_path = "";
  assert_int_equal(kiln_cache_open(&c, &o), KILN_EPERM);
  assert_null(c);
  assert_non_null(strstr(kiln_last_error(), "chmod 700"));
  if (geteuid() == 0) {
    assert_int_equal(chmod(other, 0700), 0);
    assert_int_equal(chown(other, 65534, 65534), 0);
    assert_int_equal(kiln_cache_open(&c, &o), KILN_EPERM);
    assert_non_null(strstr(kiln_last_error(), "owned by uid 65534"));
  }
  o.dir = ""; /* an empty path is refused, never taken for the default cache */
  assert_int_equal(kiln_cache_open(&c, &o), KILN_EINVAL);
  assert_null(c);
  assert_non_null(strstr(kiln_last_error(), "empty path"));
}

static void test_put_get_round_trip(void **state) {
  fixture *f = *state;
  kiln_record r, got;
  uint8_t *blob = NULL;
  size_t n = 0;
  fill_record(&r, "k1", "unit_a");
  assert_int_equal(kiln_cache_put(f->c, &r, "", 0, NULL, 0),
                   KILN_EINVAL); /* never an empty image */
  assert_non_null(strstr(kiln_last_error(), "0-byte"));
  assert_int_equal(kiln_cache_get(&got, NULL, NULL, f->c, r.key), KILN_ENOTFOUND);
  assert_int_equal(kiln_cache_put(f->c, &r, "artifact-bytes", 14, "log text", 8), KILN_OK);
  assert_true(kiln_is_hex64(r.digest));
  assert_true(kiln_is_hex64(r.log_digest));
  assert_int_equal(kiln_cache_get(&got, &blob, &n, f->c, r.key), KILN_OK);
  assert_int_equal(n, 14);
  assert_memory_equal(blob, "artifact-bytes", 14);
  assert_string_equal(got.digest, r.digest);
  assert_string_equal(got.unit, "unit_a");
  assert_int_equal(got.layer, 0);
  free(blob);
  assert_int_equal(kiln_cache_read_blob(&blob, &n, f->c, r.log_digest), KILN_OK);
  assert_memory_equal(blob, "log text", 8);
  free(blob);
  /* idempotent */
  assert_int_equal(kiln_cache_put(f->c, &r, "artifact-bytes", 14, NULL, 0), KILN_OK);
  assert_int_equal(
      kiln_cache_get(NULL, NULL, NULL, f->c,
                     "0000000000000000000000000000000000000000000000000000000000000000"),
      KILN_ENOTFOUND);
}

static void corrupt_and_expect_miss(fixture *f, int truncate_it) {
  kiln_record r;
  char path[1024], qdir[400];
  uint8_t *blob = NULL;
  size_t n = 0;
  int fd;
  DIR *d;
  struct dirent *e;
  int quarantined = 0;
  fill_record(&r, truncate_it ? "trunc" : "flip", "unit_b");
  assert_int_equal(kiln_cache_put(f->c, &r, "0123456789abcdef", 16, NULL, 0), KILN_OK);
  blob_path(path, sizeof path, f, r.digest);
  chmod(path, 0644);
  if (truncate_it) {
    assert_int_equal(truncate(path, 7), 0);
  } else {
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, 3), 1);
    close(fd);
  }
  assert_int_equal(kiln_cache_get(NULL, &blob, &n, f->c, r.key), KILN_ENOTFOUND);
  assert_null(blob);
  assert_int_equal(access(path, F_OK), -1); /* moved out of cas/ */
  snprintf(qdir, sizeof qdir, "%s/quarantine", f->cache_dir);
  d = opendir(qdir);
  assert_non_null(d);
  while ((e = readdir(d)))
    if (strncmp(e->d_name, r.digest, 64) == 0) quarantined++;
  closedir(d);
  assert_int_equal(quarantined, 1);
  /* the record is dropped too: a second get is a plain miss */
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, f->c, r.key), KILN_ENOTFOUND);
}

static void test_flipped_byte_is_never_served(void **state) {
  corrupt_and_expect_miss(*state, 0);
}

static void test_truncated_blob_is_never_served(void **state) {
  corrupt_and_expect_miss(*state, 1);
}

static void test_verify_reports_and_quarantines(void **state) {
  fixture *f = *state;
  kiln_record r;
  kiln_cache_verify_report rep;
  char path[1024];
  fill_record(&r, "v", "unit_c");
  assert_int_equal(kiln_cache_put(f->c, &r, "verify-me", 9, NULL, 0), KILN_OK);
  assert_int_equal(kiln_cache_verify(&rep, f->c), KILN_OK);
  assert_int_equal(rep.bad, 0);
  assert_int_equal(rep.checked, 1);
  kiln_cache_verify_report_free(&rep);
  blob_path(path, sizeof path, f, r.digest);
  chmod(path, 0644);
  assert_int_equal(truncate(path, 2), 0);
  assert_int_equal(kiln_cache_verify(&rep, f->c), KILN_OK);
  assert_true(rep.bad >= 1);
  assert_non_null(strstr(rep.issues[0].path, r.digest + 2));
  kiln_cache_verify_report_free(&rep);
  assert_int_equal(kiln_cache_verify(&rep, f->c), KILN_OK);
  assert_int_equal(rep.bad, 0);
  kiln_cache_verify_report_free(&rep);
}

static void test_failure_records_expire(void **state) {
  fixture *f = *state;
  char *log = NULL;
  const char *key = "1111111111111111111111111111111111111111111111111111111111111111";
  assert_int_equal(kiln_cache_put_failure(f->c, key, "u", "sm_90", "error: x", 600), KILN_OK);
  assert_int_equal(kiln_cache_get_failure(&log, f->c, key), KILN_OK);
  assert_string_equal(log, "error: x");
  free(log);
  assert_int_equal(kiln_cache_put_failure(f->c, key, "u", "sm_90", "error: x", -1), KILN_OK);
  assert_int_equal(kiln_cache_get_failure(NULL, f->c, key), KILN_ENOTFOUND);
}

static void test_gc_evicts_lru_and_keeps_pins(void **state) {
  fixture *f = *state;
  kiln_record a, b, c;
  kiln_cache_gc_report rep;
  char big[4096];
  memset(big, 'a', sizeof big);
  fill_record(&a, "gc-a", "u");
  fill_record(&b, "gc-b", "u");
  fill_record(&c, "gc-c", "u");
  assert_int_equal(kiln_cache_put(f->c, &a, big, sizeof big, NULL, 0), KILN_OK);
  big[0] = 'b';
  assert_int_equal(kiln_cache_put(f->c, &b, big, sizeof big, NULL, 0), KILN_OK);
  big[0] = 'c';
  assert_int_equal(kiln_cache_put(f->c, &c, big, sizeof big, NULL, 0), KILN_OK);
  assert_int_equal(kiln_cache_pin(f->c, a.key), KILN_OK);
  assert_int_equal(kiln_cache_gc(&rep, f->c, 4096), KILN_OK);
  assert_int_equal(rep.pinned_skipped, 1);
  assert_int_equal(rep.removed_records, 2);
  assert_int_equal(rep.remaining_bytes, 4096);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, f->c, a.key), KILN_OK);
  assert_int_equal(kiln_cache_unpin(f->c, a.key), KILN_OK);
  assert_int_equal(kiln_cache_gc(&rep, f->c, 0), KILN_OK);
  assert_int_equal(rep.remaining_bytes, 0);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, f->c, a.key), KILN_ENOTFOUND);
}

static void test_rm_by_glob_and_read_only_layer(void **state) {
  fixture *f = *state;
  kiln_record a, b, got;
  kiln_cache *layered = NULL;
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  char primary2[400];
  uint64_t removed = 0;
  fill_record(&a, "rm-a", "softmax_x");
  fill_record(&b, "rm-b", "layernorm");
  assert_int_equal(kiln_cache_put(f->c, &a, "aa", 2, NULL, 0), KILN_OK);
  assert_int_equal(kiln_cache_put(f->c, &b, "bb", 2, NULL, 0), KILN_OK);
  /* the first cache, used as a read-only layer under a fresh primary */
  snprintf(primary2, sizeof primary2, "%s/primary2", f->dir);
  o.dir = primary2;
  o.ro_path = f->cache_dir;
  assert_int_equal(kiln_cache_open(&layered, &o), KILN_OK);
  assert_int_equal(kiln_cache_get(&got, NULL, NULL, layered, a.key), KILN_OK);
  assert_int_equal(got.layer, 1);
  kiln_cache_close(layered);
  assert_int_equal(kiln_cache_rm(&removed, f->c, "softmax_*"), KILN_OK);
  assert_int_equal(removed, 1);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, f->c, a.key), KILN_ENOTFOUND);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, f->c, b.key), KILN_OK);
  assert_int_equal(kiln_cache_rm(&removed, f->c, b.key), KILN_OK);
  assert_int_equal(removed, 1);
}

/* Entries directly in dir (".", ".." not counted). */
static int entries(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)))
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

/* read_only: reads work, every write is KILN_EPERM and changes nothing; a
 * directory with no index reads as an empty cache and stays empty, a missing
 * one is KILN_ENOTFOUND; a version-1 options struct (which ends before
 * read_only) opens read-write. */
static void test_read_only_open_writes_nothing(void **state) {
  fixture *f = *state;
  kiln_cache *ro = NULL, *rw = NULL;
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  kiln_record a, b, got;
  kiln_cache_verify_report vr;
  kiln_cache_gc_report gr;
  uint64_t removed = 0;
  char empty[300], path[400];
  unsigned char v1[sizeof(kiln_cache_options) + 8];
  fill_record(&a, "ro-a", "softmax_x");
  fill_record(&b, "ro-b", "softmax_y");
  assert_int_equal(kiln_cache_put(f->c, &a, "aa", 2, NULL, 0), KILN_OK);
  kiln_cache_close(f->c);
  f->c = NULL;
  o.dir = f->cache_dir;
  o.ro_path = "";
  o.read_only = 1;
  assert_int_equal(kiln_cache_open(&ro, &o), KILN_OK);
  assert_int_equal(kiln_cache_get(&got, NULL, NULL, ro, a.key), KILN_OK);
  assert_int_equal(kiln_cache_put(ro, &b, "bb", 2, NULL, 0), KILN_EPERM);
  assert_non_null(strstr(kiln_last_error(), "read-only"));
  assert_int_equal(kiln_cache_rm(&removed, ro, NULL), KILN_EPERM);
  assert_int_equal(kiln_cache_gc(&gr, ro, 0), KILN_EPERM);
  assert_int_equal(gr.removed_records, 0);
  assert_int_equal(kiln_cache_verify(&vr, ro), KILN_EPERM);
  assert_int_equal(kiln_cache_quarantine(ro, a.digest, "test"), KILN_EPERM);
  blob_path(path, sizeof path, f, a.digest);
  assert_int_equal(access(path, F_OK), 0);
  kiln_cache_close(ro);
  ro = NULL;
  o.read_only = 0; /* the record is still there for a writer */
  assert_int_equal(kiln_cache_open(&rw, &o), KILN_OK);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, rw, a.key), KILN_OK);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, rw, b.key), KILN_ENOTFOUND);
  kiln_cache_close(rw);
  rw = NULL;

  snprintf(empty, sizeof empty, "%s/empty", f->dir);
  assert_int_equal(mkdir(empty, 0700), 0);
  o.dir = empty;
  o.read_only = 1;
  assert_int_equal(kiln_cache_open(&ro, &o), KILN_OK);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, ro, a.key), KILN_ENOTFOUND);
  kiln_cache_close(ro);
  ro = NULL;
  assert_int_equal(entries(empty), 0);
  snprintf(path, sizeof path, "%s/missing", f->dir);
  o.dir = path;
  assert_int_equal(kiln_cache_open(&ro, &o), KILN_ENOTFOUND);
  assert_null(ro);
  assert_non_null(strstr(kiln_last_error(), "does not exist"));
  assert_int_equal(access(path, F_OK), -1);

  /* version 1: init writes no byte past its struct, and read_only is not read */
  memset(v1, 0xa5, sizeof v1);
  assert_int_equal(kiln_cache_options_init((kiln_cache_options *)v1, 1), KILN_OK);
  for (size_t i = offsetof(kiln_cache_options, read_only); i < sizeof v1; i++)
    assert_int_equal(v1[i], 0xa5);
  ((kiln_cache_options *)v1)->dir = empty;
  ((kiln_cache_options *)v1)->ro_path = "";
  assert_int_equal(kiln_cache_open(&rw, (kiln_cache_options *)v1), KILN_OK);
  kiln_cache_close(rw);
  assert_int_equal(entries(empty), 4); /* cas, tmp, quarantine, index.sqlite */
}

/* Opens dir (read-write, or read-only) with no layers. */
static kiln_status open_dir(kiln_cache **out, const char *dir, const char *layers, int read_only) {
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  o.dir = dir;
  o.ro_path = layers;
  o.read_only = read_only;
  return kiln_cache_open(out, &o);
}

/* A FIFO or a symlink out of the cache at index.sqlite, -wal or -shm is
 * refused before sqlite opens it (which would block on the FIFO, or write
 * beside the link's target), naming the file; a layer with one is skipped. */
static void test_index_files_must_be_regular_files(void **state) {
  static const char *const names[] = {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"};
  fixture *f = *state;
  kiln_cache *c = NULL;
  kiln_cache_layer_info *layers = NULL;
  size_t n = 0;
  char path[600], away[400], other[300];
  struct stat before, after;
  kiln_cache_close(f->c);
  f->c = NULL;
  snprintf(away, sizeof away, "%s/outside", f->dir);
  snprintf(other, sizeof other, "%s/other", f->dir);
  assert_int_equal(mkdir(other, 0700), 0);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    for (int link = 0; link < 2; link++) {
      snprintf(path, sizeof path, "%s/%s", f->cache_dir, names[i]);
      unlink(path);
      if (link) {
        FILE *o = fopen(away, "w");
        assert_non_null(o);
        fputs("not kiln's\n", o);
        fclose(o);
        assert_int_equal(stat(away, &before), 0);
        assert_int_equal(symlink(away, path), 0);
      } else {
        assert_int_equal(mkfifo(path, 0600), 0);
      }
      for (int ro = 0; ro < 2; ro++) {
        assert_int_equal(open_dir(&c, f->cache_dir, "", ro), KILN_EPERM);
        assert_null(c);
        assert_non_null(strstr(kiln_last_error(), path));
        assert_non_null(strstr(kiln_last_error(), link ? "symbolic link" : "FIFO"));
      }
      /* as a read-only layer: skipped (a warning), the primary opens */
      assert_int_equal(open_dir(&c, other, f->cache_dir, 0), KILN_OK);
      assert_int_equal(kiln_cache_layers(&layers, &n, c), KILN_OK);
      assert_int_equal(n, 1);
      free(layers);
      kiln_cache_close(c);
      c = NULL;
      if (link) { /* the file outside was never opened for writing, nor made company */
        assert_int_equal(stat(away, &after), 0);
        assert_int_equal(after.st_size, before.st_size);
        assert_int_equal(after.st_mtime, before.st_mtime);
        snprintf(path, sizeof path, "%s-wal", away);
        assert_int_equal(access(path, F_OK), -1);
        unlink(away);
      }
      snprintf(path, sizeof path, "%s/%s", f->cache_dir, names[i]);
      assert_int_equal(unlink(path), 0);
    }
  }
  assert_int_equal(open_dir(&c, f->cache_dir, "", 0), KILN_OK); /* and it opens again */
  f->c = c;
}

/* gc and verify never go through a fan-out directory that is a symlink: the
 * blob it leads to stays, verify names it, and nothing is read through it. */
static void test_symlinked_fanout_is_never_followed(void **state) {
  fixture *f = *state;
  kiln_record a;
  kiln_cache_gc_report gr;
  kiln_cache_verify_report vr;
  char fan[400], away[400], path[1000];
  fill_record(&a, "fan-a", "u");
  assert_int_equal(kiln_cache_put(f->c, &a, "fan-out bytes", 13, NULL, 0), KILN_OK);
  snprintf(fan, sizeof fan, "%s/cas/%.2s", f->cache_dir, a.digest);
  snprintf(away, sizeof away, "%s/away", f->dir);
  assert_int_equal(rename(fan, away), 0);
  assert_int_equal(symlink(away, fan), 0);
  snprintf(path, sizeof path, "%s/%s", away, a.digest + 2);
  assert_int_equal(kiln_cache_get(NULL, NULL, NULL, f->c, a.key), KILN_EPERM);
  assert_non_null(strstr(kiln_last_error(), fan));
  assert_int_equal(kiln_cache_verify(&vr, f->c), KILN_OK);
  assert_true(vr.bad >= 1);
  assert_string_equal(vr.issues[0].path, fan);
  assert_non_null(strstr(vr.issues[0].what, "symbolic link"));
  kiln_cache_verify_report_free(&vr);
  fill_record(&a, "fan-b", "u");
  assert_int_equal(kiln_cache_put(f->c, &a, "fan-out bytes", 13, NULL, 0), KILN_EPERM);
  assert_non_null(strstr(kiln_last_error(), fan));
  assert_int_equal(kiln_cache_gc(&gr, f->c, 0), KILN_OK);
  assert_int_equal(gr.removed_blobs, 0);
  assert_int_equal(access(path, F_OK), 0); /* the file outside the cache is still there */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_created_0700_and_refuses_unsafe_dirs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_get_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flipped_byte_is_never_served, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated_blob_is_never_served, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_reports_and_quarantines, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failure_records_expire, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_evicts_lru_and_keeps_pins, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rm_by_glob_and_read_only_layer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_only_open_writes_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_index_files_must_be_regular_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symlinked_fanout_is_never_followed, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
