/* kiln — the content-addressed kernel cache.
 *
 * key    = SHA-256("kiln-key-v1" \0 unit \0 unit_digest \0 target \0 options \0 toolchain)
 * record = key -> {unit, target, kind, digest, size, toolchain, options, resources, ...}
 * blob   = the artifact bytes, stored once under SHA-256(bytes) in cas/<2 hex>/<62 hex>
 *
 * A cache is a primary directory (read-write, $KILN_CACHE_DIR or
 * $XDG_CACHE_HOME/kiln or ~/.cache/kiln) and read-only layers searched after it
 * ($KILN_CACHE_PATH, colon-separated). Every read verifies the blob's digest;
 * a bad blob is quarantined and reads as a miss. See docs/cache-format.md. */
#ifndef KILN_CACHE_H
#define KILN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/api.h"
#include "kiln/kernels.h"
#include "kiln/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_cache kiln_cache;

/* NULL fields are taken from the environment (include/kiln/api.h). */
typedef struct kiln_cache_options {
  int version; /* KILN_CACHE_OPTIONS_VERSION */
  /* primary directory; NULL: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
   * ~/.cache/kiln; "" is KILN_EINVAL */
  const char *dir;
  const char *ro_path; /* read-only layers, colon-separated; NULL: KILN_CACHE_PATH */
  int create;          /* 1 (default): create the primary directory (0700) if missing */
  /* the remote HTTP cache (include/kiln/remote.h); NULL: from the environment
   * (KILN_REMOTE_URL, none when unset) */
  const struct kiln_remote_options *remote;
  /* version 2. 1: open the primary directory read-only, to inspect it (kiln
   * check, doctor, probe): nothing is created (create is ignored), migrated
   * or written, not even last-used times or sqlite's -wal/-shm files; the
   * index must pass PRAGMA quick_check. Writes (put, gc, rm, quarantine,
   * verify, import) fail with KILN_EPERM. See docs/cache-format.md. */
  int read_only;
} kiln_cache_options;

#define KILN_CACHE_OPTIONS_VERSION 2
#define KILN_CACHE_OPTIONS_INIT                                                                    \
  {                                                                                                \
    .version = KILN_CACHE_OPTIONS_VERSION, .dir = NULL, .ro_path = NULL, .create = 1,              \
    .remote = NULL, .read_only = 0                                                                 \
  }

/* Fills opts as KILN_CACHE_OPTIONS_INIT does, for the given version (for
 * bindings that cannot use the macro). KILN_EINVAL, naming it, for a version
 * this libkiln does not know. */
KILN_API kiln_status kiln_cache_options_init(kiln_cache_options *opts, int version);

/* One cache record. Strings are NUL-terminated; resources are -1 when unknown
 * (PTX has none). */
typedef struct kiln_record {
  char key[65];
  char unit[64];
  char target[16];
  char kind[8];        /* "cubin" or "ptx" */
  char digest[65];     /* SHA-256 of the blob */
  uint64_t size;       /* blob bytes */
  char toolchain[32];  /* "nvrtc-13.0" */
  char options[256];   /* compile options, space-separated */
  double build_ms;     /* compile wall time */
  int registers;       /* max over entry points */
  int spill_stores;    /* bytes, summed over entry points */
  int spill_loads;     /* bytes, summed over entry points */
  int shared_bytes;    /* static shared memory, max over entry points */
  int stack_bytes;     /* stack frame, max over entry points */
  char log_digest[65]; /* blob holding the build log ("" if none) */
  int64_t created;     /* unix seconds */
  int64_t last_used;   /* unix seconds (primary layer only) */
  int layer;           /* 0 primary, 1.. read-only layers in order */
} kiln_record;

/* Opens (and with create, creates 0700) the primary directory, then the
 * read-only layers. KILN_EPERM for a directory owned by another user or
 * writable by group/others; KILN_EIO names the path and errno text.
 * With read_only: KILN_ENOTFOUND for a directory that does not exist,
 * KILN_ECORRUPT (naming the fix, kiln_cache_repair) for an index that fails
 * PRAGMA quick_check; a directory with no index yet reads as an empty cache,
 * and an index of an older schema as it is (the tables it lacks as empty). */
KILN_API kiln_status kiln_cache_open(kiln_cache **out, const kiln_cache_options *opts);
KILN_API void kiln_cache_close(kiln_cache *cache);
/* The primary directory in use. */
KILN_API const char *kiln_cache_dir(const kiln_cache *cache);

/* The cache key of (unit, target, options, toolchain) as 64 hex digits. */
KILN_API kiln_status kiln_cache_key(char out[65], const kiln_unit_info *unit, const char *target,
                                    const char *options, const char *toolchain);

/* Looks key up in every layer in order and reads its blob, verifying the
 * digest. out_blob may be NULL to check presence (the blob is still verified).
 * KILN_ENOTFOUND on a miss (a corrupt blob is quarantined and is a miss).
 * *out_blob is freed with free(). */
KILN_API kiln_status kiln_cache_get(kiln_record *out_rec, uint8_t **out_blob, size_t *out_size,
                                    kiln_cache *cache, const char *key);

/* Stores blob (and the build log, if any) and then the record in the primary
 * layer: blob first (temp file, fsync, rename, fsync dir), record last, so a
 * crash never leaves a record without its blob. rec->digest, size, log_digest
 * and created are filled in here. Idempotent for the same key and bytes. */
KILN_API kiln_status kiln_cache_put(kiln_cache *cache, kiln_record *rec, const void *blob,
                                    size_t size, const char *log, size_t log_len);

/* Every record of every layer for unit built with options whose key matches
 * the unit's sources as they are in this libkiln (records of other kiln
 * versions are left out), primary layer first. *out freed with free(). */
KILN_API kiln_status kiln_cache_find_unit(kiln_record **out, size_t *n, kiln_cache *cache,
                                          const kiln_unit_info *unit, const char *options);

/* Moves a blob of the primary layer to quarantine/ and drops the records
 * that use it, even though its digest verifies (e.g. the driver refused the
 * bytes or they failed a known-answer test). why is logged. */
KILN_API kiln_status kiln_cache_quarantine(kiln_cache *cache, const char *digest, const char *why);

/* Reads a blob by digest (verified) from any layer, e.g. a build log. */
KILN_API kiln_status kiln_cache_read_blob(uint8_t **out, size_t *out_size, kiln_cache *cache,
                                          const char *digest);

/* Every record of every layer (primary first); *out freed with free(). */
KILN_API kiln_status kiln_cache_list(kiln_record **out, size_t *n, kiln_cache *cache);

typedef struct kiln_cache_stats {
  uint64_t records; /* primary layer */
  uint64_t blobs;   /* files under cas/ */
  uint64_t blob_bytes;
  uint64_t failures;      /* unexpired failure records */
  uint64_t quarantined;   /* files under quarantine/ */
  uint64_t layers;        /* read-only layers open */
  uint64_t layer_records; /* records in read-only layers */
} kiln_cache_stats;

KILN_API kiln_status kiln_cache_stats_get(kiln_cache_stats *out, kiln_cache *cache);

/* One layer of an open cache, for probes. */
typedef struct kiln_cache_layer_info {
  int layer; /* 0 primary, 1.. read-only layers in search order */
  char path[4096];
  int writable; /* the primary layer, and its directory is writable by this process */
  uint64_t records;
  uint64_t bytes; /* the records' artifact sizes, summed */
} kiln_cache_layer_info;

/* Every layer of the cache, primary first; *out freed with free(). */
KILN_API kiln_status kiln_cache_layers(kiln_cache_layer_info **out, size_t *n, kiln_cache *cache);

typedef struct kiln_cache_verify_issue {
  char path[512]; /* the blob or record at fault */
  char what[128]; /* "digest mismatch", "truncated", "missing blob", ... */
} kiln_cache_verify_issue;

typedef struct kiln_cache_verify_report {
  uint64_t checked; /* blobs re-hashed */
  uint64_t bad;     /* issues found */
  size_t n_issues;
  kiln_cache_verify_issue *issues; /* freed with kiln_cache_verify_report_free */
} kiln_cache_verify_report;

/* Checks the index (PRAGMA quick_check), re-hashes every blob of the primary
 * layer, quarantines bad ones and drops their records; reports records whose
 * blob is missing; removes temp files left by killed writers. A corrupt index
 * is one issue (its path is the index's), and nothing else is checked or
 * changed then: kiln_cache_repair rebuilds it. KILN_OK even when issues were
 * found (see report); KILN_EPERM on a handle opened read-only. */
KILN_API kiln_status kiln_cache_verify(kiln_cache_verify_report *out, kiln_cache *cache);
/* Frees what kiln_cache_verify put in *r (not r itself). NULL is fine. */
KILN_API void kiln_cache_verify_report_free(kiln_cache_verify_report *r);

/* A record kiln_cache_repair could not carry into the new index. */
typedef struct kiln_cache_lost_record {
  char key[65];
  char unit[64];   /* "" when the record itself could not be read */
  char target[16]; /* "" likewise */
  char why[128];   /* "record unreadable", "blob missing", "blob does not verify", ... */
} kiln_cache_lost_record;

typedef struct kiln_cache_repair_report {
  int repaired;      /* 1: the index was corrupt and has been replaced; 0: it is sound */
  char problem[512]; /* what PRAGMA quick_check (or sqlite) found; "" when sound */
  char
      moved_to[4096]; /* the old index, kept for inspection: <dir>/quarantine/index.sqlite.<time> */
  uint64_t kept;      /* records carried over (each one's blob verified) */
  uint64_t lost;      /* records the old index still names that were left behind */
  size_t n_lost;      /* = lost */
  kiln_cache_lost_record *lost_records; /* freed with kiln_cache_repair_report_free */
} kiln_cache_repair_report;

/* Checks the index of the cache directory dir (NULL: KILN_CACHE_DIR, ...)
 * with PRAGMA quick_check and, when it is corrupt, rebuilds it: every record
 * that can still be read and whose blob verifies goes into a new index,
 * written under tmp/ and renamed over index.sqlite; the old index (with its
 * -wal) is moved to quarantine/index.sqlite.<unix time>. What is lost is
 * listed, and is a miss that the next build fills. Failure records, pins,
 * leases, build history, remote totals and conflicts are not carried over.
 * Run it while no other process has the cache open: KILN_ELOCKED when one
 * does (nothing is changed then). A directory with no index has nothing to
 * repair (KILN_OK, repaired 0). */
KILN_API kiln_status kiln_cache_repair(kiln_cache_repair_report *out, const char *dir);
/* Frees what kiln_cache_repair put in *r (not r itself). NULL is fine. */
KILN_API void kiln_cache_repair_report_free(kiln_cache_repair_report *r);

typedef struct kiln_cache_gc_report {
  uint64_t removed_records;
  uint64_t removed_blobs;
  uint64_t freed_bytes;
  uint64_t remaining_bytes;
  uint64_t pinned_skipped;
} kiln_cache_gc_report;

/* Evicts least-recently-used records (and blobs no record references) until
 * the blobs of the primary layer take at most max_bytes. Records pinned by a
 * live process are never removed. */
KILN_API kiln_status kiln_cache_gc(kiln_cache_gc_report *out, kiln_cache *cache,
                                   uint64_t max_bytes);

/* Removes the records of the primary layer whose key, or whose unit (fnmatch
 * glob), matches pattern; NULL removes every record. Blobs no longer referenced
 * are deleted. *removed gets the count. */
KILN_API kiln_status kiln_cache_rm(uint64_t *removed, kiln_cache *cache, const char *pattern);

/* ---- portable caches: a cache as one file (docs/cache-format.md, "Archives") --
 * A POSIX tar: a versioned manifest, then the blobs (cas/<digest>), then the
 * records (ac/<key>, the remote cache's record document). Build logs are not
 * carried. */
typedef struct kiln_cache_export_options {
  int version;         /* KILN_CACHE_EXPORT_OPTIONS_VERSION */
  const char *arch;    /* only these targets, as `kiln build --arch` ("80,90+ptx"); NULL: all */
  const char *kernels; /* only the units this shell glob matches; NULL: all */
} kiln_cache_export_options;
#define KILN_CACHE_EXPORT_OPTIONS_VERSION 1
#define KILN_CACHE_EXPORT_OPTIONS_INIT                                                             \
  { .version = KILN_CACHE_EXPORT_OPTIONS_VERSION, .arch = NULL, .kernels = NULL }
/* Fills opts as KILN_CACHE_EXPORT_OPTIONS_INIT does, for the given version.
 * KILN_EINVAL, naming it, for a version this libkiln does not know. */
KILN_API kiln_status kiln_cache_export_options_init(kiln_cache_export_options *opts, int version);

typedef struct kiln_cache_export_report {
  uint64_t records; /* written */
  uint64_t blobs;   /* written (records sharing bytes share a blob) */
  uint64_t bytes;   /* of the blobs */
} kiln_cache_export_report;

/* Writes the records of every layer that match opts (NULL: all; the primary's
 * record wins for a key in several layers) with their blobs, each blob
 * verified as it is read, to path: written to a temp file beside it and
 * renamed, so path is the whole archive or untouched (it is not fsync'ed,
 * as tar's is not: run sync before a power loss could cut it; import refuses
 * a cut archive). "-" writes to stdout.
 * KILN_ENOTFOUND when nothing matches. */
KILN_API kiln_status kiln_cache_export(kiln_cache_export_report *out, kiln_cache *cache,
                                       const char *path, const kiln_cache_export_options *opts);

/* A key the cache already held with another digest: the archive's record was
 * refused, and the cache's kept (a build that is not reproducible, or a
 * collision of writers). */
typedef struct kiln_cache_conflict {
  char key[65];
  char unit[64];
  char target[16];
  char kept[65];    /* the cache's digest */
  char refused[65]; /* the other one */
  char source[256]; /* where the other came from: the archive's path */
  int64_t at;       /* unix seconds */
} kiln_cache_conflict;

typedef struct kiln_cache_import_report {
  uint64_t records;              /* in the archive */
  uint64_t added;                /* stored */
  uint64_t present;              /* there already, with the same digest */
  uint64_t conflicts;            /* there already, with another digest: kept, and listed below */
  uint64_t blobs;                /* in the archive, each verified */
  uint64_t bytes;                /* of those blobs */
  size_t n_conflicts;            /* = conflicts */
  kiln_cache_conflict *conflict; /* freed with kiln_cache_import_report_free */
} kiln_cache_import_report;

/* Reads the archive at path ("-": stdin) into the primary layer. Everything
 * is read and verified before anything is stored (each blob against its
 * digest, each record against its schema, key, blob and size): an archive
 * that fails anywhere (a flipped byte, truncated, a member that does not
 * belong) is KILN_ECORRUPT naming it, and nothing is imported. An archive of
 * a newer format version is KILN_EUNSUPPORTED; an older one is migrated.
 * Idempotent, and safe with other importers, builds and gc on the same cache.
 * A key already present with another digest is never overwritten: it is
 * counted, listed in the report and recorded in the index (kiln_cache_conflicts),
 * and the import still returns KILN_OK for the rest. */
KILN_API kiln_status kiln_cache_import(kiln_cache_import_report *out, kiln_cache *cache,
                                       const char *path);
/* Frees what kiln_cache_import put in *r (not r itself). NULL is fine. */
KILN_API void kiln_cache_import_report_free(kiln_cache_import_report *r);

/* Every reproducibility conflict recorded in the primary layer (oldest
 * first); *out freed with free(). */
KILN_API kiln_status kiln_cache_conflicts(kiln_cache_conflict **out, size_t *n, kiln_cache *cache);

#ifdef __cplusplus
}
#endif
#endif
