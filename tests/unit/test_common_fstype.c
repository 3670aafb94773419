/* common/fstype.c: every statfs magic kiln knows, classified shared or local; FUSE by its
 * mountinfo type; an unknown magic local with its hex kept; the KILN_TEST_FSTYPE seam's
 * parsing (DIR prefixes, the longest DIR wins, malformed entries skipped with a warning);
 * and a probe of a real directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fstype.h"
#include "kiln/log.h"
#include "tests/unit/test_util.h"

/* Every row of the table, from linux/magic.h and each project's own headers:
 * a value typed here again, so a typo in either is caught. */
static const struct {
  unsigned long magic;
  const char *type;
  int shared;
} magics[] = {
    {0x6969, "nfs", 1},           {0x0BD00BD0, "lustre", 1},   {0x47504653, "gpfs", 1},
    {0x19830326, "beegfs", 1},    {0x00C36400, "ceph", 1},     {0x517B, "smb", 1},
    {0xFF534D42, "cifs", 1},      {0xFE534D42, "smb2", 1},     {0x01021997, "9p", 1},
    {0x5346414F, "afs", 1},       {0x6B414653, "kafs", 1},     {0x7461636F, "ocfs2", 1},
    {0x01161970, "gfs2", 1},      {0xAAD7AAEA, "panfs", 1},    {0x20030528, "orangefs", 1},
    {0x73757245, "coda", 1},      {0x564C, "ncp", 1},          {0x013111A8, "ibrix", 1},
    {0xBEEFDEAD, "snfs", 1},      {0xA501FCF5, "vxfs", 1},     {0x61636673, "acfs", 1},
    {0xBACBACBC, "vmhgfs", 1},    {0x786F4256, "vboxsf", 1},   {0x7C7C6673, "prl_fs", 1},
    {0xEF53, "ext4", 0},          {0x58465342, "xfs", 0},      {0x9123683E, "btrfs", 0},
    {0x01021994, "tmpfs", 0},     {0x794C7630, "overlay", 0},  {0x2FC12FC1, "zfs", 0},
    {0xCA451A4E, "bcachefs", 0},  {0xF2F52010, "f2fs", 0},     {0x858458F6, "ramfs", 0},
    {0x958458F6, "hugetlbfs", 0}, {0x73717368, "squashfs", 0}, {0xE0F5E1E2, "erofs", 0},
    {0x28CD3D45, "cramfs", 0},    {0x9660, "iso9660", 0},      {0x15013346, "udf", 0},
    {0x4D44, "msdos", 0},         {0x2011BAB0, "exfat", 0},    {0x5346544E, "ntfs", 0},
    {0x7366746E, "ntfs3", 0},     {0x52654973, "reiserfs", 0}, {0x3153464A, "jfs", 0},
    {0x482B, "hfsplus", 0},       {0x3434, "nilfs2", 0},       {0x24051905, "ubifs", 0},
    {0xF15F, "ecryptfs", 0},      {0x61756673, "aufs", 0},     {0x9FA0, "proc", 0},
    {0x62656572, "sysfs", 0},     {0x1CD1, "devpts", 0},
};

#define FUSE 0x65735546UL

static int warnings;
static char last_warning[1024];

static void capture(kiln_log_level level, const char *line, void *user) {
  (void)user;
  if (level != KILN_LOG_WARN) return;
  warnings++;
  snprintf(last_warning, sizeof last_warning, "%s", line);
}

static int setup(void **state) {
  (void)state;
  warnings = 0;
  last_warning[0] = '\0';
  kiln_log_set_callback(capture, NULL);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kiln_log_set_callback(NULL, NULL);
  unsetenv("KILN_TEST_FSTYPE");
  return 0;
}

/* The type KILN_TEST_FSTYPE=spec gives path, "-" when none, "+" appended when shared. */
static const char *seam(const char *spec, const char *path) {
  static char out[80];
  kiln_fs_info fs;
  if (!kiln_fs_test_override(spec, path, &fs)) return "-";
  assert_int_equal(fs.from_test, 1);
  snprintf(out, sizeof out, "%s%s", fs.type, fs.shared ? "+" : "");
  return out;
}

static void test_every_magic_is_named_and_classified(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof magics / sizeof magics[0]; i++) {
    kiln_fs_info fs;
    char hex[16], want[80];
    kiln_fs_classify(magics[i].magic, NULL, &fs);
    assert_string_equal(fs.type, magics[i].type);
    assert_int_equal(fs.shared, magics[i].shared);
    assert_int_equal(fs.from_test, 0);
    /* the seam reaches the same row by hex and by name ("+": shared) */
    snprintf(hex, sizeof hex, "0x%lx", magics[i].magic);
    snprintf(want, sizeof want, "%s%s", magics[i].type, magics[i].shared ? "+" : "");
    assert_string_equal(seam(hex, "/x"), want);
    assert_string_equal(seam(magics[i].type, "/x"), want);
  }
}

static void test_unknown_magic_is_local_with_its_hex(void **state) {
  (void)state;
  kiln_fs_info fs;
  kiln_fs_classify(0x12345678, NULL, &fs);
  assert_string_equal(fs.type, "0x12345678");
  assert_int_equal(fs.shared, 0);
  /* statfs's f_type is a signed long: a magic with the top bit set may arrive sign-extended */
  kiln_fs_classify((unsigned long)(long)(int32_t)0xFF534D42, NULL, &fs);
  assert_string_equal(fs.type, "cifs");
  assert_int_equal(fs.shared, 1);
}

static void test_fuse_is_shared_unless_it_serves_local_files(void **state) {
  (void)state;
  static const struct {
    const char *mount_type, *type;
    int shared;
  } cases[] = {
      {"fuse.sshfs", "fuse.sshfs", 1},
      {"fuse.glusterfs", "fuse.glusterfs", 1},
      {"fuse.bindfs", "fuse.bindfs", 1}, /* may mirror an NFS directory */
      {"fuse", "fuse", 1},               /* bindfs as mountinfo shows it */
      {NULL, "fuse", 1},                 /* no mountinfo entry found */
      {"", "fuse", 1},
      {"fuse.something-new", "fuse.something-new", 1},
      {"virtiofs", "virtiofs", 1}, /* the host's files */
      {"fuse.fuse-overlayfs", "fuse.fuse-overlayfs", 0},
      {"fuse.squashfuse", "fuse.squashfuse", 0},
      {"fuse.squashfuse_ll", "fuse.squashfuse_ll", 0},
      {"fuse.lxcfs", "fuse.lxcfs", 0},
      {"fuseblk", "fuseblk", 0},
      {"fuseblk.ntfs-3g", "fuseblk.ntfs-3g", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_fs_info fs;
    kiln_fs_classify(FUSE, cases[i].mount_type, &fs);
    assert_string_equal(fs.type, cases[i].type);
    assert_int_equal(fs.shared, cases[i].shared);
  }
}

static void test_seam_values(void **state) {
  (void)state;
  assert_string_equal(seam(NULL, "/x"), "-");
  assert_string_equal(seam("", "/x"), "-");
  assert_string_equal(seam("nfs", "/x"), "nfs+");
  assert_string_equal(seam("0x6969", "/x"), "nfs+");
  assert_string_equal(seam("0X0bd00bd0", "/x"), "lustre+");
  assert_string_equal(seam("ext4", "/x"), "ext4");
  assert_string_equal(seam("0x65735546", "/x"), "fuse+");
  assert_string_equal(seam("fuse", "/x"), "fuse+");
  assert_string_equal(seam("fuse.sshfs", "/x"), "fuse.sshfs+");
  assert_string_equal(seam("fuse.fuse-overlayfs", "/x"), "fuse.fuse-overlayfs");
  assert_string_equal(seam("0xdeadbee", "/x"), "0xdeadbee");
  /* other names of the same file systems */
  assert_string_equal(seam("nfs4", "/x"), "nfs+");
  assert_string_equal(seam("smb3", "/x"), "cifs+");
  assert_string_equal(seam("fhgfs", "/x"), "beegfs+");
  assert_string_equal(seam("ext3", "/x"), "ext4");
  assert_string_equal(seam("overlayfs", "/x"), "overlay");
  assert_int_equal(warnings, 0);
}

static void test_seam_dir_prefixes_and_longest_wins(void **state) {
  (void)state;
  const char *spec = "/a=nfs,/a/b/c=fuse.sshfs,/a/b=ext4";
  assert_string_equal(seam(spec, "/a"), "nfs+");
  assert_string_equal(seam(spec, "/a/x/y"), "nfs+");
  assert_string_equal(seam(spec, "/a/b"), "ext4");
  assert_string_equal(seam(spec, "/a/b/"), "ext4");
  assert_string_equal(seam(spec, "/a/bc"), "nfs+"); /* a prefix of the name is not a parent */
  assert_string_equal(seam(spec, "/a/b/c/d"), "fuse.sshfs+");
  assert_string_equal(seam(spec, "/ab"), "-");
  assert_string_equal(seam(spec, "/b"), "-");
  /* a bare TYPE is every path no DIR claims, wherever it is in the list */
  assert_string_equal(seam("lustre,/a=ext4", "/a/x"), "ext4");
  assert_string_equal(seam("/a=ext4,lustre", "/elsewhere"), "lustre+");
  assert_string_equal(seam("/=gpfs,/a=ext4", "/elsewhere"), "gpfs+");
  assert_string_equal(seam("/a/=nfs", "/a/b"), "nfs+"); /* a trailing '/' */
  /* the later of two equal DIRs */
  assert_string_equal(seam("/a=nfs,/a=xfs", "/a"), "xfs");
  assert_int_equal(warnings, 0);
}

static void test_seam_dir_matches_through_symlinks(void **state) {
  (void)state;
  char dir[256], real[300], link[300], spec[700], path[400];
  test_make_tmpdir(dir, sizeof dir);
  snprintf(real, sizeof real, "%s/real", dir);
  snprintf(link, sizeof link, "%s/link", dir);
  assert_int_equal(mkdir(real, 0700), 0);
  assert_int_equal(symlink(real, link), 0);
  snprintf(spec, sizeof spec, "%s=nfs", link);
  snprintf(path, sizeof path, "%s/cache/not-yet", real); /* nonexistent below an existing dir */
  assert_string_equal(seam(spec, path), "nfs+");
  snprintf(spec, sizeof spec, "%s=nfs", real);
  snprintf(path, sizeof path, "%s/cache", link);
  assert_string_equal(seam(spec, path), "nfs+");
  test_rm_rf(dir);
}

static void test_seam_malformed_entries_are_skipped_with_a_warning(void **state) {
  (void)state;
  static const char *const bad[] = {"bogus", "0x",  "0xzz",     "0x1ffffffff", "0x-1", "rel=nfs",
                                    "=nfs",  "/a=", "/a=bogus", "fuse.",       "NFS",  "nfs "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char spec[128];
    warnings = 0;
    assert_string_equal(seam(bad[i], "/a/b"), "-");
    assert_int_equal(warnings, 1);
    assert_non_null(strstr(last_warning, "KILN_TEST_FSTYPE"));
    /* the good entries around a bad one still apply */
    snprintf(spec, sizeof spec, "/a=nfs,%s,/a/b=xfs", bad[i]);
    warnings = 0;
    assert_string_equal(seam(spec, "/a/b"), "xfs");
    assert_string_equal(seam(spec, "/a/c"), "nfs+");
    assert_int_equal(warnings, 2);
  }
  warnings = 0;
  assert_string_equal(seam(",,nfs,", "/a"), "nfs+"); /* three empty entries */
  assert_int_equal(warnings, 3);
}

static void test_probe_of_a_real_directory(void **state) {
  (void)state;
  char dir[256], sub[400];
  kiln_fs_info fs, below;
  test_make_tmpdir(dir, sizeof dir);
  unsetenv("KILN_TEST_FSTYPE");
  assert_int_equal(kiln_fs_probe(dir, &fs), KILN_OK);
  assert_true(fs.type[0] != '\0');
  assert_int_equal(fs.from_test, 0);
  /* a path not there yet: its nearest existing ancestor's */
  snprintf(sub, sizeof sub, "%s/not/yet/here/", dir);
  assert_int_equal(kiln_fs_probe(sub, &below), KILN_OK);
  assert_string_equal(below.type, fs.type);
  assert_int_equal(below.shared, fs.shared);
  assert_int_equal(kiln_fs_probe("relative/not/there", &below), KILN_OK);
  assert_true(below.type[0] != '\0');
  assert_int_equal(kiln_fs_probe("", &below), KILN_EINVAL);
  /* the seam, read by every probe (no kiln_params_reset: it is not kept) */
  snprintf(sub, sizeof sub, "%s=fuse.sshfs", dir);
  setenv("KILN_TEST_FSTYPE", sub, 1);
  snprintf(sub, sizeof sub, "%s/cache", dir);
  assert_int_equal(kiln_fs_probe(sub, &below), KILN_OK);
  assert_string_equal(below.type, "fuse.sshfs");
  assert_int_equal(below.shared, 1);
  assert_int_equal(below.from_test, 1);
  assert_int_equal(kiln_fs_probe("/", &below), KILN_OK); /* outside DIR: statfs */
  assert_int_equal(below.from_test, 0);
  setenv("KILN_TEST_FSTYPE", "lustre", 1);
  assert_int_equal(kiln_fs_probe("/", &below), KILN_OK);
  assert_string_equal(below.type, "lustre");
  unsetenv("KILN_TEST_FSTYPE");
  assert_int_equal(kiln_fs_probe("/", &below), KILN_OK);
  assert_int_equal(below.from_test, 0);
  test_rm_rf(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_every_magic_is_named_and_classified, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_magic_is_local_with_its_hex, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fuse_is_shared_unless_it_serves_local_files, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_seam_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_seam_dir_prefixes_and_longest_wins, setup, teardown),
      cmocka_unit_test_setup_teardown(test_seam_dir_matches_through_symlinks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_seam_malformed_entries_are_skipped_with_a_warning, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_probe_of_a_real_directory, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
