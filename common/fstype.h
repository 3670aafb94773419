/* Internal: which file system a path is on, and whether other hosts share it.
 *
 * kiln's index is SQLite in WAL mode, whose -shm file is shared memory: every
 * connection must be on one host. A file system that processes on other
 * hosts may use too (NFS, Lustre, GPFS, ...) never gets a WAL index
 * (docs/cache-format.md, "Shared file systems").
 *
 * The type comes from statfs(2)'s f_type, a magic number; for FUSE (one
 * magic for every FUSE file system) from the fstype field of the path's
 * /proc/self/mountinfo entry ("fuse.sshfs", "fuse", "fuseblk", ...).
 * Shared: NFS, Lustre, GPFS, BeeGFS, CephFS, SMB/CIFS, 9p, AFS, OCFS2, GFS2,
 * PanFS, OrangeFS, Coda, StorNext, VxFS, hypervisor shared folders, and every
 * FUSE file system but fuse-overlayfs, squashfuse, lxcfs and fuseblk (those
 * serve this host's own files). Every other magic is local, one this table
 * does not know too (its hex is kept as the type): local disks are the
 * common case, and a network file system new enough to be missing from the
 * table is rarer than a local one.
 *
 * Test seam: KILN_TEST_FSTYPE, a comma-separated list of [DIR=]VALUE, sets
 * the type instead of statfs. An entry with DIR applies to DIR and the paths
 * under it (the longest DIR that matches wins), a bare VALUE to every other
 * path. VALUE is a statfs magic in hex ("0x6969") or a type name ("nfs",
 * "ext4", "fuse.sshfs"; "fuse" or "fuse.SUBTYPE" is FUSE with that mount
 * type), classified as a real one is. A malformed entry is ignored with a
 * warning. Unlike other KILN_* variables it is read at every probe, so a
 * test may change it within one process. */
#ifndef KILN_COMMON_FSTYPE_H
#define KILN_COMMON_FSTYPE_H

#include <stddef.h>

#include "kiln/status.h"

typedef struct kiln_fs_info {
  /* "nfs", "lustre", "gpfs", "beegfs", "ceph", "smb", "cifs", "9p", "afs",
   * "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", ...; a FUSE mount's
   * mountinfo type ("fuse.sshfs"); "0x%lx" for a magic the table lacks */
  char type[64];
  int shared;    /* 1 when processes on other hosts may use the same files */
  int from_test; /* 1 when the type came from KILN_TEST_FSTYPE */
} kiln_fs_info;

/* The file system of path, or of its nearest existing ancestor when path
 * does not exist yet (a cache directory about to be created). KILN_EINVAL
 * for an empty or too long path; KILN_EIO (errno text) when statfs fails
 * for another reason than a missing path (EACCES: KILN_EPERM). */
kiln_status kiln_fs_probe(const char *path, kiln_fs_info *out);

/* The pure decision: magic is statfs's f_type, mount_type the mountinfo
 * type of a FUSE mount (NULL when not FUSE, or unknown). */
void kiln_fs_classify(unsigned long magic, const char *mount_type, kiln_fs_info *out);

/* KILN_TEST_FSTYPE's rule for path, parsed from spec (the variable's value;
 * NULL or "" is none): 1 with *out set (from_test 1) when an entry applies,
 * else 0. Malformed entries are skipped, each with a warning. */
int kiln_fs_test_override(const char *spec, const char *path, kiln_fs_info *out);

/* "nfs", or "nfs (KILN_TEST_FSTYPE)" when the seam set it: for messages. */
const char *kiln_fs_describe(const kiln_fs_info *fs, char *buf, size_t cap);

#endif
