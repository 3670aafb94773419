/* File system types, and which are shared between hosts (common/fstype.h). */
#include "common/fstype.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h> /* major, minor */
#include <sys/vfs.h>       /* statfs */

#include "common/error.h"
#include "common/logging.h"
#include "common/params.h"

#define FUSE_MAGIC 0x65735546UL

/* statfs magics (linux/magic.h, and each project's own header for those the
 * kernel tree lacks: Lustre's lustre_user.h, GPFS, BeeGFS's client, ...).
 * The first row of a magic names it. */
static const struct fs_row {
  unsigned long magic;
  const char *name;
  int shared;
} rows[] = {
    /* shared: processes on other hosts may use the same files */
    {0x6969UL, "nfs", 1},
    {0x0BD00BD0UL, "lustre", 1},
    {0x47504653UL, "gpfs", 1},
    {0x19830326UL, "beegfs", 1}, /* BeeGFS, formerly FhGFS */
    {0x00C36400UL, "ceph", 1},
    {0x517BUL, "smb", 1},
    {0xFF534D42UL, "cifs", 1},
    {0xFE534D42UL, "smb2", 1},
    {0x01021997UL, "9p", 1},       /* v9fs: also WSL2's and VMs' host folders */
    {0x5346414FUL, "afs", 1},      /* OpenAFS */
    {0x6B414653UL, "kafs", 1},     /* the kernel's AFS client */
    {0x7461636FUL, "ocfs2", 1},    /* a shared-disk cluster file system */
    {0x01161970UL, "gfs2", 1},     /* a shared-disk cluster file system */
    {0xAAD7AAEAUL, "panfs", 1},    /* Panasas */
    {0x20030528UL, "orangefs", 1}, /* OrangeFS / PVFS2 */
    {0x73757245UL, "coda", 1},
    {0x564CUL, "ncp", 1},
    {0x013111A8UL, "ibrix", 1},
    {0xBEEFDEADUL, "snfs", 1},   /* StorNext */
    {0xA501FCF5UL, "vxfs", 1},   /* Veritas: as often a cluster file system */
    {0x61636673UL, "acfs", 1},   /* Oracle ACFS */
    {0xBACBACBCUL, "vmhgfs", 1}, /* VMware shared folders */
    {0x786F4256UL, "vboxsf", 1}, /* VirtualBox shared folders */
    {0x7C7C6673UL, "prl_fs", 1}, /* Parallels shared folders */
    /* local */
    {0xEF53UL, "ext4", 0}, /* ext2, ext3 and ext4 share it */
    {0x58465342UL, "xfs", 0},
    {0x9123683EUL, "btrfs", 0},
    {0x01021994UL, "tmpfs", 0},
    {0x794C7630UL, "overlay", 0}, /* a container's root */
    {0x2FC12FC1UL, "zfs", 0},
    {0xCA451A4EUL, "bcachefs", 0},
    {0xF2F52010UL, "f2fs", 0},
    {0x858458F6UL, "ramfs", 0},
    {0x958458F6UL, "hugetlbfs", 0},
    {0x73717368UL, "squashfs", 0},
    {0xE0F5E1E2UL, "erofs", 0},
    {0x28CD3D45UL, "cramfs", 0},
    {0x9660UL, "iso9660", 0},
    {0x15013346UL, "udf", 0},
    {0x4D44UL, "msdos", 0}, /* vfat */
    {0x2011BAB0UL, "exfat", 0},
    {0x5346544EUL, "ntfs", 0},
    {0x7366746EUL, "ntfs3", 0},
    {0x52654973UL, "reiserfs", 0},
    {0x3153464AUL, "jfs", 0},
    {0x482BUL, "hfsplus", 0},
    {0x3434UL, "nilfs2", 0},
    {0x24051905UL, "ubifs", 0},
    {0xF15FUL, "ecryptfs", 0},
    {0x61756673UL, "aufs", 0},
    {0x9FA0UL, "proc", 0},
    {0x62656572UL, "sysfs", 0},
    {0x1CD1UL, "devpts", 0},
};

/* Other names mountinfo (or a person) gives the same file systems. */
static const struct {
  const char *alias, *name;
} aliases[] = {{"nfs4", "nfs"},          {"smb3", "cifs"},  {"fhgfs", "beegfs"},
               {"cephfs", "ceph"},       {"v9fs", "9p"},    {"gfs", "gfs2"},
               {"pvfs2", "orangefs"},    {"ext2", "ext4"},  {"ext3", "ext4"},
               {"overlayfs", "overlay"}, {"vfat", "msdos"}, {"isofs", "iso9660"},
               {"nilfs", "nilfs2"}};

/* FUSE mounts that serve this host's own files: the root of rootless
 * containers, images mounted in user space, the container's /proc view, and
 * fuseblk (a FUSE file system on a block device here: ntfs-3g, exfat). Any
 * other FUSE mount may pass its files on to other hosts (sshfs, s3fs,
 * glusterfs, a bindfs mirror of an NFS directory), and its locks are not
 * the kernel's: shared. */
static const char *const fuse_local[] = {"fuse.fuse-overlayfs", "fuse.squashfuse",
                                         "fuse.squashfuse_ll", "fuse.lxcfs", "fuseblk"};

static const struct fs_row *row_of_magic(unsigned long magic) {
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].magic == magic) return &rows[i];
  return NULL;
}

static const struct fs_row *row_of_name(const char *name) {
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcmp(name, aliases[i].alias) == 0) name = aliases[i].name;
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (strcmp(rows[i].name, name) == 0) return &rows[i];
  return NULL;
}

static int fuse_is_local(const char *type) {
  for (size_t i = 0; i < sizeof fuse_local / sizeof fuse_local[0]; i++)
    if (strcmp(type, fuse_local[i]) == 0) return 1;
  return strncmp(type, "fuseblk.", 8) == 0;
}

void kiln_fs_classify(unsigned long magic, const char *mount_type, kiln_fs_info *out) {
  const struct fs_row *r;
  memset(out, 0, sizeof *out);
  magic &= 0xFFFFFFFFUL; /* f_type is a signed long: keep the 32 bits a magic has */
  if (magic == FUSE_MAGIC) {
    const char *t = mount_type && *mount_type ? mount_type : "fuse";
    snprintf(out->type, sizeof out->type, "%s", t);
    out->shared = !fuse_is_local(t);
  } else if ((r = row_of_magic(magic))) {
    snprintf(out->type, sizeof out->type, "%s", r->name);
    out->shared = r->shared;
  } else {
    snprintf(out->type, sizeof out->type, "0x%lx", magic);
  }
}

const char *kiln_fs_describe(const kiln_fs_info *fs, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%s", fs->type[0] ? fs->type : "an unknown file system",
           fs->from_test ? " (KILN_TEST_FSTYPE)" : "");
  return buf;
}

/* in with its nearest existing ancestor resolved (realpath) and the rest
 * appended as it is; in itself when nothing resolves. */
static void resolve(const char *in, char *out, size_t cap) {
  char head[PATH_MAX], real[PATH_MAX];
  size_t keep = strlen(in);
  if (keep >= sizeof head) {
    if (snprintf(out, cap, "%s", in) >= (int)cap) out[cap - 1] = '\0';
    return;
  }
  for (;;) {
    const char *tail = in + keep;
    size_t n;
    memcpy(head, in, keep);
    head[keep] = '\0';
    if (realpath(keep ? head : ".", real)) {
      while (*tail == '/')
        tail++;
      if (snprintf(out, cap, "%s%s%s", real, *tail && strcmp(real, "/") != 0 ? "/" : "", tail) >=
          (int)cap)
        out[cap - 1] = '\0'; /* cut short: the probe then names a prefix of it */
      n = strlen(out);
      while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
      return;
    }
    if (keep == 0 || (keep == 1 && in[0] == '/')) break;
    while (keep > 0 && in[keep - 1] == '/')
      keep--;
    while (keep > 0 && in[keep - 1] != '/')
      keep--;
    if (keep == 0 && in[0] == '/') keep = 1;
  }
  snprintf(out, cap, "%s", in);
}

/* 1 when path is dir or lies under it (both resolved, no trailing '/'). */
static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  if (strcmp(dir, "/") == 0) return path[0] == '/';
  return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* One VALUE of KILN_TEST_FSTYPE into *out: 1, or 0 when it is none. */
static int parse_value(const char *v, kiln_fs_info *out) {
  const struct fs_row *r;
  if (strncmp(v, "0x", 2) == 0 || strncmp(v, "0X", 2) == 0) {
    char *end = NULL;
    unsigned long magic;
    errno = 0;
    magic = strtoul(v + 2, &end, 16);
    if (!v[2] || errno || *end || magic > 0xFFFFFFFFUL || v[2] == '-' || v[2] == '+') return 0;
    kiln_fs_classify(magic, NULL, out);
    return 1;
  }
  if (strcmp(v, "fuse") == 0 || strcmp(v, "fuseblk") == 0 ||
      ((strncmp(v, "fuse.", 5) == 0 && v[5]) || (strncmp(v, "fuseblk.", 8) == 0 && v[8]))) {
    if (strlen(v) >= sizeof out->type) return 0;
    kiln_fs_classify(FUSE_MAGIC, v, out);
    return 1;
  }
  if (!(r = row_of_name(v))) return 0;
  kiln_fs_classify(r->magic, NULL, out);
  return 1;
}

int kiln_fs_test_override(const char *spec, const char *path, kiln_fs_info *out) {
  char rpath[PATH_MAX];
  const char *p = spec;
  long best = -1;
  kiln_fs_info best_fs, fs;
  if (!spec || !*spec) return 0;
  memset(&best_fs, 0, sizeof best_fs);
  resolve(path, rpath, sizeof rpath);
  while (p) {
    const char *start = p, *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char entry[PATH_MAX], rdir[PATH_MAX], *eq, *value = entry;
    long match = -1;
    p = comma ? comma + 1 : NULL;
    if (len >= sizeof entry) {
      kiln_log(KILN_LOG_WARN, "KILN_TEST_FSTYPE: an entry of %zu characters: ignored", len);
      continue;
    }
    memcpy(entry, start, len);
    entry[len] = '\0';
    if ((eq = strrchr(entry, '='))) { /* a directory may hold '=', a type never does */
      *eq = '\0';
      value = eq + 1;
    }
    if ((eq && entry[0] != '/') || !parse_value(value, &fs)) {
      kiln_log(KILN_LOG_WARN,
               "KILN_TEST_FSTYPE: '%.*s' is not [DIR=]TYPE (DIR absolute; TYPE a statfs magic "
               "such as 0x6969, or a type such as nfs, ext4, fuse.sshfs): ignored",
               (int)len, start);
      continue;
    }
    if (!eq) {
      match = 0; /* a bare TYPE: every path no DIR claims */
    } else {
      resolve(entry, rdir, sizeof rdir);
      if (under(rpath, rdir)) match = (long)strlen(rdir) + 1;
    }
    if (match >= 0 && match >= best) { /* the longest DIR; the later entry on a tie */
      best = match;
      best_fs = fs;
    }
  }
  if (best < 0) return 0;
  *out = best_fs;
  out->from_test = 1;
  return 1;
}

/* Undoes mountinfo's octal escapes (\040 for a space, \134 for '\') in place. */
static void unescape(char *s) {
  char *w = s;
  for (char *r = s; *r; r++) {
    if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' &&
        r[3] <= '7') {
      *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
      r += 3;
    } else {
      *w++ = *r;
    }
  }
  *w = '\0';
}

/* The fstype of real's mount in /proc/self/mountinfo: the entry whose mount
 * point is the longest prefix of real, preferring one whose device is dev
 * (the file's own), the later on a tie (a mount over another). 1 when found. */
static int mount_type_of(const char *real, dev_t dev, char *out, size_t cap) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  char *line = NULL;
  size_t n = 0;
  long best = -1;
  if (!f) return 0;
  while (getline(&line, &n, f) > 0) {
    char mp[PATH_MAX], type[64];
    unsigned maj = 0, min = 0;
    const char *sep = strstr(line, " - ");
    long score;
    size_t len;
    if (!sep || sscanf(line, "%*s %*s %u:%u %*s %4095s", &maj, &min, mp) != 3 ||
        sscanf(sep + 3, "%63s", type) != 1)
      continue;
    unescape(mp);
    len = strlen(mp);
    if (!under(real, mp)) continue;
    score = (long)len + (maj == major(dev) && min == minor(dev) ? PATH_MAX : 0);
    if (score >= best) {
      best = score;
      snprintf(out, cap, "%s", type);
    }
  }
  free(line);
  fclose(f);
  return best >= 0;
}

/* at's parent, in place ("a" -> ".", "/a" -> "/"); 0 when at is "/" or ".". */
static int parent(char *at) {
  size_t n = strlen(at);
  if (strcmp(at, "/") == 0 || strcmp(at, ".") == 0) return 0;
  while (n > 1 && at[n - 1] == '/') /* trailing slashes */
    n--;
  while (n > 0 && at[n - 1] != '/') /* the last component */
    n--;
  while (n > 1 && at[n - 1] == '/') /* the slashes before it */
    n--;
  if (n == 0)
    memcpy(at, ".", 2);
  else
    at[n] = '\0';
  return 1;
}

kiln_status kiln_fs_probe(const char *path, kiln_fs_info *out) {
  char at[PATH_MAX], real[PATH_MAX], mtype[64];
  struct statfs sf;
  struct stat st;
  const char *mount_type = NULL;
  size_t len;
  memset(out, 0, sizeof *out);
  if (!path || !*path) return kiln_fail(KILN_EINVAL, "kiln_fs_probe: no path");
  /* read at every probe, not kept: a test may change it between opens */
  if (kiln_fs_test_override(kiln_param_now(KILN_P_test_fstype), path, out)) return KILN_OK;
  if ((len = strlen(path)) >= sizeof at) return kiln_fail(KILN_EINVAL, "path too long: %s", path);
  memcpy(at, path, len + 1);
  while (statfs(at, &sf) != 0) { /* not there yet: its nearest existing ancestor */
    int e = errno;
    if ((e != ENOENT && e != ENOTDIR) || !parent(at))
      return kiln_fail_errno(KILN_EIO, e, "the file system of %s", at);
  }
  if (((unsigned long)sf.f_type & 0xFFFFFFFFUL) == FUSE_MAGIC && realpath(at, real) &&
      stat(at, &st) == 0 && mount_type_of(real, st.st_dev, mtype, sizeof mtype))
    mount_type = mtype;
  kiln_fs_classify((unsigned long)sf.f_type, mount_type, out);
  return KILN_OK;
}
