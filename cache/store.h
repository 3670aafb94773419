/* Internal: the local store — primary directory and read-only layers. */
#ifndef KILN_CACHE_STORE_H
#define KILN_CACHE_STORE_H

#include <pthread.h>
#include <sqlite3.h>

#include "cache/record_fields.h" /* KILN_RECORD_COLUMNS */
#include "cache/sql.h"           /* kiln_sql_*, SQL_CHECK */
#include "common/fstype.h"       /* kiln_fs_info */
#include "kiln/cache.h"

#define KILN_MAX_LAYERS 16
#define KILN_PATH_MAX 4096

typedef struct kiln_layer {
  char dir[KILN_PATH_MAX];
  sqlite3 *db;
  kiln_fs_info fs; /* its file system: a shared one is only read, immutable */
} kiln_layer;

struct kiln_cache {
  kiln_layer primary; /* read-write, unless read_only */
  int read_only;      /* kiln_cache_options.read_only: nothing is written */
  char cas_dir[KILN_PATH_MAX];
  char tmp_dir[KILN_PATH_MAX];
  char quarantine_dir[KILN_PATH_MAX];
  size_t n_layers;
  kiln_layer layers[KILN_MAX_LAYERS]; /* read-only, searched after primary */
  /* read-only layers named but not opened, and why (probes report them) */
  size_t n_skipped;
  struct {
    char dir[KILN_PATH_MAX];
    char why[512];
    int untrusted; /* skipped for its owner or mode (kiln_layer_trusted) */
  } skipped[KILN_MAX_LAYERS];
  pthread_mutex_t lock;       /* serialises multi-statement work on primary.db */
  char host[64];              /* this host's name, for leases and pins */
  char token[33];             /* random, unique to this handle: owns its leases */
  struct kiln_remote *remote; /* the remote cache, or NULL (cache/remote/remote.c) */
};

/* The rules for shared file systems (cache/store_fs.c; docs/cache-format.md,
 * "Shared file systems"). The primary directory when the caller names none:
 * KILN_CACHE_DIR, else the default ($XDG_CACHE_HOME/kiln, ~/.cache/kiln),
 * except that a default on a shared file system is replaced by the node-local
 * kiln_cache_node_local_dir (said once at info; moved_from, may be NULL, gets
 * the default it replaced, else ""), unless that is shared too. */
kiln_status kiln_cache_default_dir(char *out, size_t cap, char *moved_from, size_t moved_cap);
/* /var/tmp/kiln-<uid>: node-local on any host whose /var/tmp is a disk
 * (KILN_TEST_NODE_LOCAL_DIR, a test hook, names another). */
void kiln_cache_node_local_dir(char *out, size_t cap);
/* For messages, where to put an index instead: kiln_cache_node_local_dir
 * when that is local here, else "DIR on a local disk". Returns buf. */
const char *kiln_cache_local_advice(char *buf, size_t cap);
/* KILN_EUNSUPPORTED for a read-write primary dir on the shared file system
 * fs, with what to do instead (and, for a directory that holds an index, the
 * export | import that moves its artifacts to a node-local cache). */
kiln_status kiln_cache_refuse_shared(const char *dir, const kiln_fs_info *fs);
/* 1 when dir's index is in WAL mode (its header says so) or has an -wal or
 * -shm file beside it: what must never be on a shared file system. */
int kiln_index_is_wal(const char *dir);
/* 1 when dir's index.sqlite-wal holds committed rows not yet in index.sqlite
 * (a writer has it open, or was killed). */
int kiln_index_wal_pending(const char *dir);
/* An index on a shared file system is read immutable: says at info, when
 * its -wal holds rows, that those are not read. what: "cache", "read-only
 * cache layer". */
void kiln_cache_note_shared_read(const char *dir, const kiln_fs_info *fs, const char *what);

/* A read-only layer is trusted when its directory, its index.sqlite and its
 * cas/ (if any) are each owned by this user or root and not writable by
 * group or others: anyone else who can write one can map a kernel's key to
 * bytes of their own. 1 when trusted; 0 with the first reason in why. */
int kiln_layer_trusted(const char *dir, char *why, size_t cap);

/* The first finding of PRAGMA quick_check on db into why (cap bytes):
 * KILN_OK when the index is sound, else KILN_ECORRUPT (the check's finding,
 * or sqlite's error when the check cannot even run). */
kiln_status kiln_index_quick_check(sqlite3 *db, char *why, size_t cap);
/* Creates the schema (every table and index) in an empty db and sets
 * user_version: the tables a new index starts with (cache/repair.c). */
kiln_status kiln_index_create_schema(sqlite3 *db);

/* Frees a remote attached by kiln_cache_set_remote (NULL is fine). */
void kiln_remote_close(struct kiln_remote *r);

/* Takes c->lock and BEGIN IMMEDIATE on the primary index: the write lock that
 * orders a put's "blob is there, insert the record" against gc, rm and
 * quarantine's "nothing references it, remove the blob" across processes. */
kiln_status kiln_txn_begin(kiln_cache *c, const char *what);
/* KILN_EPERM, naming what, for a handle opened read-only; else KILN_OK. Every
 * change to the primary layer (its index, cas/, tmp/, quarantine/) asks. */
kiln_status kiln_cache_writable(const kiln_cache *c, const char *what);
/* COMMIT when rc is KILN_OK, else ROLLBACK; releases c->lock. Returns rc, or
 * the COMMIT's failure. */
kiln_status kiln_txn_end(kiln_cache *c, kiln_status rc, const char *what);

/* cas/<2 hex>/<62 hex> under layer_dir. KILN_EINVAL for a digest that is
 * not 64 lowercase hex digits; KILN_EPERM (naming it) when cas/ or
 * cas/<2 hex> is there but not a directory of its own (a symlink, a FIFO, a
 * file): a cache holds none, and no blob is read, written, moved or removed
 * through one. */
kiln_status kiln_blob_path(char *out, size_t cap, const char *layer_dir, const char *digest);
/* Checks the file at path has want_size bytes (UINT64_MAX: any up to
 * KILN_BLOB_SIZE_MAX) hashing to digest: KILN_ECORRUPT saying which
 * differs. The size is checked before any byte is read. out may be NULL to
 * check only: the file is then hashed as a stream (kiln_hash_regular), never
 * held whole; otherwise it is read once (kiln_read_regular). */
kiln_status kiln_blob_check(const char *path, const char *digest, uint64_t want_size, uint8_t **out,
                            size_t *out_size);
/* Reads and verifies a blob; KILN_ENOTFOUND if absent, KILN_ECORRUPT (with
 * size/digest detail) if its bytes do not hash to digest. */
kiln_status kiln_blob_read(const char *layer_dir, const char *digest, uint64_t want_size,
                           uint8_t **out, size_t *out_size);
/* Writes a blob into the primary layer (no-op if a good copy exists). */
kiln_status kiln_blob_write(kiln_cache *c, const char *digest, const void *data, size_t len);
/* Moves a verified temp file (under c->tmp_dir) into the primary layer as
 * digest: mode 0444, fsync, rename, fsync dir. When a copy is already there
 * the temp file is removed. */
kiln_status kiln_blob_adopt(kiln_cache *c, const char *digest, const char *tmp_path);
/* A blob's bytes in a temp file under the cache's tmp/. */
typedef struct kiln_blob_file {
  char digest[65];
  uint64_t size;
  char tmp[KILN_PATH_MAX]; /* "" once moved into cas/ or removed */
} kiln_blob_file;
/* kiln_blob_adopt for many verified temp files at once, durably with two
 * syncfs() calls (the files, then the renames) instead of an fsync per file
 * and per folder: each tmp is cleared ("") as it is moved or found already
 * there; what is left is the caller's to remove. */
kiln_status kiln_blobs_adopt(kiln_cache *c, kiln_blob_file *v, size_t n);
/* Inserts rec (created/last_used set now, layer 0) while the write lock shows
 * its blob present with rec->size bytes; KILN_ENOTFOUND when it is not (gc
 * removed it meanwhile). Clears a failure record for the key. */
kiln_status kiln_record_insert(kiln_cache *c, kiln_record *rec);
/* The same for many records in one transaction; each[i] is rec i's outcome.
 * Returns KILN_OK unless the index itself failed (then nothing is stored). */
kiln_status kiln_records_insert(kiln_cache *c, kiln_record *const *recs, size_t n,
                                kiln_status *each);
/* kiln_cache_import's commit, in one write transaction: each record is
 * stored (each[i] KILN_OK), already there with its digest (KILN_EEXISTS),
 * there with another digest (KILN_EMISMATCH: kept, and a row of the
 * conflicts table names source), or its blob is gone (KILN_ENOTFOUND: gc
 * removed it meanwhile). Returns KILN_OK unless the index failed. */
kiln_status kiln_records_import(kiln_cache *c, kiln_record *const *recs, size_t n,
                                kiln_status *each, char (*kept)[65], const char *source);

/* Moves a bad blob of the primary layer into quarantine/ and drops the
 * records that reference it. Without force, a blob that now verifies (a good
 * copy rewritten by another process) stays. */
kiln_status kiln_blob_quarantine(kiln_cache *c, const char *digest, const char *why, int force);

/* kiln_cache_get for a caller that knows what the key was made of: a
 * record whose unit, target, kind, toolchain or options is not want's (each
 * compared when want's is not "") cannot be served, and is dropped like a
 * record whose blob is bad; so is one whose blob lacks an entry point of
 * want's unit (another unit's image: the blob is kept). want may be NULL
 * (kiln_cache_get). */
kiln_status kiln_cache_get_want(kiln_record *out_rec, uint8_t **out_blob, size_t *out_size,
                                kiln_cache *c, const char *key, const kiln_record *want);

/* Drops the primary's record of key: the row rowid (a row that may not even
 * be read as a kiln_record), or, when digest is not NULL, the row naming
 * digest (a record read whole). *gone = 1 when a row went: another process
 * may have replaced it with a good one meanwhile, which stays. Only the
 * record: its blob may serve other records (or be good for its own unit). */
kiln_status kiln_record_drop(int *gone, kiln_cache *c, const char *key, int64_t rowid,
                             const char *digest);

/* Fills rec from a row of "SELECT " KILN_RECORD_COLUMNS (cache/record_row.c). */
void kiln_record_from_row(kiln_record *rec, sqlite3_stmt *st, int layer);
/* 1 when a row of "SELECT " KILN_RECORD_COLUMNS cannot be held by a
 * kiln_record as it is (a text longer than its member, a value of another
 * type, NULL where one is needed), with the first such column in why; else
 * 0. Such a record names nothing kiln can use: its reader drops it. */
int kiln_record_row_bad(sqlite3_stmt *st, char *why, size_t cap);
/* INSERT OR REPLACE of rec's row into the records table of db, as it is. */
kiln_status kiln_record_store_row(sqlite3 *db, const kiln_record *rec);
/* Appends a copy of rec to the growable array *v (*n used, *cap allocated). */
kiln_status kiln_record_push(kiln_record **v, size_t *n, size_t *cap, const kiln_record *rec);

int64_t kiln_now_s(void);

/* A failed compile, kept for ttl_s seconds so many callers do not retry it. */
kiln_status kiln_cache_put_failure(kiln_cache *cache, const char *key, const char *unit,
                                   const char *target, const char *log, int ttl_s);
/* KILN_OK with the log (free()) if an unexpired failure is recorded for key. */
kiln_status kiln_cache_get_failure(char **out_log, kiln_cache *cache, const char *key);
/* Drops a failure record (e.g. on --rebuild). */
kiln_status kiln_cache_clear_failure(kiln_cache *cache, const char *key);

/* Pins key for this process (gc will not evict it) / releases the pin. */
kiln_status kiln_cache_pin(kiln_cache *cache, const char *key);
kiln_status kiln_cache_unpin(kiln_cache *cache, const char *key);

#endif
