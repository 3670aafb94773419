/* The unit registry: embedded sources, include closures, entry points. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "common/error.h"
#include "common/logging.h"
#include "kiln/kernels.h"
#include "kiln/target.h"

/* From the file cmake/embed.cmake generates. */
extern const kiln_source_file kiln_embedded_files[];
extern const unsigned long kiln_embedded_count;

#include "softmax/softmax_variants.def"

#define MAX_UNITS 32
#define MAX_UNIT_FILES 32

typedef struct unit_slot {
  kiln_unit_info info;
  const kiln_source_file *files[MAX_UNIT_FILES];
  kiln_entry_info *entries;
  int overflow; /* includes more than MAX_UNIT_FILES files */
} unit_slot;

static unit_slot units[MAX_UNITS];
static size_t n_units;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *summary_of(const char *name) {
  if (strcmp(name, "scaled_softmax") == 0) return "y = softmax(scale * x) over the last dimension";
  if (strcmp(name, "scaled_masked_softmax") == 0)
    return "softmax(scale * x) with a uint8 mask (nonzero = masked) broadcast over heads";
  if (strcmp(name, "scaled_upper_triang_masked_softmax") == 0)
    return "causal softmax(scale * x): element j > i masked";
  return "";
}

static const kiln_source_file *find_file(const char *path) {
  for (unsigned long i = 0; i < kiln_embedded_count; i++)
    if (strcmp(kiln_embedded_files[i].path, path) == 0) return &kiln_embedded_files[i];
  return NULL;
}

/* Joins dir of `from` and a relative include, folding "." and "..". */
static int resolve(char *out, size_t cap, const char *from, const char *inc, size_t inc_len) {
  char buf[512];
  const char *slash = strrchr(from, '/');
  size_t dlen = slash ? (size_t)(slash - from) + 1 : 0, o = 0;
  if (dlen + inc_len + 1 > sizeof buf) return -1;
  memcpy(buf, from, dlen);
  memcpy(buf + dlen, inc, inc_len);
  buf[dlen + inc_len] = '\0';
  for (char *p = buf; *p;) {
    char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 1 && p[0] == '.') {
    } else if (len == 2 && p[0] == '.' && p[1] == '.') {
      while (o > 0 && out[o - 1] != '/') o--;
      if (o > 0) o--;
      while (o > 0 && out[o - 1] != '/') o--;
    } else {
      if (o + len + 2 > cap) return -1;
      memcpy(out + o, p, len);
      o += len;
      if (e) out[o++] = '/';
    }
    p = e ? e + 1 : p + len;
  }
  out[o] = '\0';
  return 0;
}

/* Adds f and, recursively, every kiln header it includes with "...". */
static void add_closure(unit_slot *u, const kiln_source_file *f) {
  const char *p = (const char *)f->data, *end = p + f->size;
  for (size_t i = 0; i < u->info.n_files; i++)
    if (u->files[i] == f) return;
  if (u->info.n_files == MAX_UNIT_FILES) {
    /* The digest must cover every file: a unit past the limit is not registered. */
    u->overflow = 1;
    return;
  }
  u->files[u->info.n_files++] = f;
  while (p < end && (p = strstr(p, "#include")) != NULL) {
    const char *q = p + 8, *close;
    char path[512];
    while (*q == ' ' || *q == '\t') q++;
    p = q;
    if (*q != '"' || !(close = strchr(q + 1, '"'))) continue;
    /* As a compiler does: next to the including file, then from kernels/. */
    const kiln_source_file *g = NULL;
    if (resolve(path, sizeof path, f->path, q + 1, (size_t)(close - q - 1)) == 0)
      g = find_file(path);
    if (!g && resolve(path, sizeof path, "", q + 1, (size_t)(close - q - 1)) == 0)
      g = find_file(path);
    if (g) add_closure(u, g);
  }
}

static int cmp_file(const void *a, const void *b) {
  return strcmp((*(const kiln_source_file *const *)a)->path,
                (*(const kiln_source_file *const *)b)->path);
}

#define COUNT_ONE(a, ...) +1
#define N_DTYPES (0 KILN_SOFTMAX_DTYPES(COUNT_ONE, _))
#define N_VARIANTS (0 KILN_SOFTMAX_VARIANTS(COUNT_ONE, _))

static const char *const dtype_names[] = {
#define DTYPE_NAME(a, name, ctype) #name,
    KILN_SOFTMAX_DTYPES(DTYPE_NAME, _)};
static const char *const variant_names[] = {
#define VARIANT_NAME(a, name, kind, elems, threads) #name,
    KILN_SOFTMAX_VARIANTS(VARIANT_NAME, _)};

static void add_softmax_unit(const char *name) {
  static const char *const dirs[] = {"fwd", "bwd"};
  unit_slot *u;
  char path[128];
  size_t n = 0;
  if (n_units == MAX_UNITS) return;
  u = &units[n_units];
  snprintf(path, sizeof path, "softmax/%s.cu", name);
  u->info.main_file = find_file(path);
  if (!u->info.main_file) return;
  u->info.name = name;
  u->info.summary = summary_of(name);
  u->info.min_arch = KILN_MIN_ARCH;
  add_closure(u, u->info.main_file);
  if (u->overflow) {
    kiln_log(KILN_LOG_ERROR, "unit %s includes more than %d files: not registered (raise "
             "MAX_UNIT_FILES in kernels/registry.c)", name, MAX_UNIT_FILES);
    memset(u, 0, sizeof *u);
    return;
  }
  qsort(u->files, u->info.n_files, sizeof *u->files, cmp_file);
  u->info.files = u->files;
  u->entries = calloc(2 * N_DTYPES * N_VARIANTS, sizeof *u->entries);
  if (!u->entries) return;
  for (int d = 0; d < 2; d++)
    for (size_t t = 0; t < N_DTYPES; t++)
      for (size_t v = 0; v < N_VARIANTS; v++) {
        kiln_entry_info *e = &u->entries[n++];
        char buf[160];
        snprintf(buf, sizeof buf, "kiln_%s_%s_%s_%s", name, dirs[d], dtype_names[t],
                 variant_names[v]);
        e->name = strdup(buf);
        e->direction = dirs[d];
        e->dtype = dtype_names[t];
        e->variant = variant_names[v];
      }
  u->info.entries = u->entries;
  u->info.n_entries = n;
  n_units++;
}

static void init(void) {
#define ADD_UNIT(a, name) add_softmax_unit(#name);
  KILN_SOFTMAX_UNITS(ADD_UNIT, _)
}

size_t kiln_unit_count(void) {
  pthread_once(&once, init);
  return n_units;
}

const kiln_unit_info *kiln_unit_at(size_t i) {
  pthread_once(&once, init);
  return i < n_units ? &units[i].info : NULL;
}

const kiln_unit_info *kiln_unit_find(const char *name) {
  pthread_once(&once, init);
  for (size_t i = 0; name && i < n_units; i++)
    if (strcmp(units[i].info.name, name) == 0) return &units[i].info;
  return NULL;
}

const char *kiln_unit_names(char *out, size_t cap) {
  size_t len = 0;
  if (!cap) return out;
  out[0] = '\0';
  for (size_t i = 0; i < kiln_unit_count(); i++) {
    int w = snprintf(out + len, cap - len, "%s%s", i ? ", " : "", units[i].info.name);
    if (w < 0 || (size_t)w >= cap - len) break;
    len += (size_t)w;
  }
  return out;
}

kiln_status kiln_unit_digest(char out[65], const kiln_unit_info *unit) {
  const kiln_source_file *sorted[MAX_UNIT_FILES];
  kiln_sha256 *h = NULL;
  kiln_status rc;
  if (!unit) return kiln_fail(KILN_EINVAL, "kiln_unit_digest: NULL unit");
  if (unit->n_files > MAX_UNIT_FILES)
    return kiln_fail(KILN_EINVAL, "unit %s has more than %d files", unit->name, MAX_UNIT_FILES);
  /* Sorted by path here, whatever order the caller keeps them in. */
  memcpy(sorted, unit->files, unit->n_files * sizeof *sorted);
  qsort(sorted, unit->n_files, sizeof *sorted, cmp_file);
  KILN_CHECK(kiln_sha256_new(&h));
  for (size_t i = 0; i < unit->n_files; i++) {
    const kiln_source_file *f = sorted[i];
    char size[32];
    int n = snprintf(size, sizeof size, "%zu", f->size);
    KILN_CHECK(kiln_sha256_update(h, f->path, strlen(f->path) + 1));
    KILN_CHECK(kiln_sha256_update(h, size, (size_t)n + 1));
    KILN_CHECK(kiln_sha256_update(h, f->data, f->size));
  }
  rc = kiln_sha256_final_hex(h, out);
out:
  kiln_sha256_free(h);
  return rc;
}
