/* The unit registry: embedded sources, include closures, entry points. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/digest.h"
#include "common/error.h"
#include "common/logging.h"
#include "kernels/registry.h"
#include "kiln/kernels.h"
#include "kiln/target.h"

/* From the file cmake/embed.cmake generates. */
extern const kiln_source_file kiln_embedded_files[];
extern const unsigned long kiln_embedded_count;

#include "softmax/softmax_variants.def"

/* The other units have a fixed entry table: kernels/<dir>/<unit>.def defines
 * KILN_<UNIT>_ENTRIES(X), one X(unit, direction, dtype, variant) per entry
 * point, whose symbol is kiln_<unit>_<direction>_<dtype>_<variant>. */
#include "activation/bias_gelu.def"
#include "activation/bias_swiglu.def"
#include "cross_entropy/cross_entropy.def"
#include "dropout/bias_dropout_add.def"
#include "embedding/embedding.def"
#include "norm/layer_norm.def"
#include "norm/rms_norm.def"
#include "rope/rope.def"

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

#define FIXED_ENTRY(unit, dir, dt, v) {"kiln_" #unit "_" #dir "_" #dt "_" #v, #dir, #dt, #v},
#define FIXED_TABLE(unit, upper)                                                                   \
  static const kiln_entry_info unit##_entries[] = {upper(FIXED_ENTRY)};
FIXED_TABLE(layer_norm, KILN_LAYER_NORM_ENTRIES)
FIXED_TABLE(rms_norm, KILN_RMS_NORM_ENTRIES)
FIXED_TABLE(embedding, KILN_EMBEDDING_ENTRIES)
FIXED_TABLE(bias_gelu, KILN_BIAS_GELU_ENTRIES)
FIXED_TABLE(bias_swiglu, KILN_BIAS_SWIGLU_ENTRIES)
FIXED_TABLE(bias_dropout_add, KILN_BIAS_DROPOUT_ADD_ENTRIES)
FIXED_TABLE(rope, KILN_ROPE_ENTRIES)
FIXED_TABLE(cross_entropy, KILN_CROSS_ENTROPY_ENTRIES)

typedef struct fixed_unit {
  const char *name, *path, *summary;
  const kiln_entry_info *entries;
  size_t n_entries;
} fixed_unit;

/* Unformatted: clang-format would put the stringified #unit in column 0. */
// clang-format off
#define FIXED_UNIT(unit, dir, summary) \
  {#unit, dir "/" #unit ".cu", summary, unit##_entries, sizeof unit##_entries / sizeof *unit##_entries}
// clang-format on
static const fixed_unit fixed_units[] = {
    FIXED_UNIT(layer_norm, "norm", "y = (x - mean) * rstd * gamma + beta over the last dimension"),
    FIXED_UNIT(rms_norm, "norm", "y = x * rsqrt(mean(x^2) + eps) * gamma over the last dimension"),
    FIXED_UNIT(
        embedding, "embedding",
        "rows of a vocabulary partition gathered by token id; bad ids reported, never a fault"),
    FIXED_UNIT(bias_gelu, "activation", "y = gelu_tanh(x + bias)"),
    FIXED_UNIT(bias_swiglu, "activation", "y = silu(a + bias_a) * (b + bias_b), x = [a | b]"),
    FIXED_UNIT(bias_dropout_add, "dropout",
               "y = residual + dropout(x + bias), Philox-4x32-10 mask from (seed, offset)"),
    FIXED_UNIT(rope, "rope", "rotary position embedding, rotate-half or interleaved, sbhd or bshd"),
    FIXED_UNIT(cross_entropy, "cross_entropy",
               "cross-entropy over a vocabulary partition; gradient in place of the logits")};

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
      while (o > 0 && out[o - 1] != '/')
        o--;
      if (o > 0) o--;
      while (o > 0 && out[o - 1] != '/')
        o--;
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
    while (*q == ' ' || *q == '\t')
      q++;
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

/* The next slot, filled with the unit's name, summary and file closure, or
 * NULL (nothing registered) when its main file is not embedded or its
 * closure is too large. */
static unit_slot *new_unit(const char *name, const char *path, const char *summary) {
  unit_slot *u;
  if (n_units == MAX_UNITS) {
    kiln_log(KILN_LOG_ERROR, "unit %s: more than %d units (raise MAX_UNITS in kernels/registry.c)",
             name, MAX_UNITS);
    return NULL;
  }
  u = &units[n_units];
  u->info.main_file = find_file(path);
  if (!u->info.main_file) return NULL;
  u->info.name = name;
  u->info.summary = summary;
  u->info.min_arch = KILN_MIN_ARCH;
  add_closure(u, u->info.main_file);
  if (u->overflow) {
    kiln_log(KILN_LOG_ERROR,
             "unit %s includes more than %d files: not registered (raise "
             "MAX_UNIT_FILES in kernels/registry.c)",
             name, MAX_UNIT_FILES);
    memset(u, 0, sizeof *u);
    return NULL;
  }
  qsort(u->files, u->info.n_files, sizeof *u->files, cmp_file);
  u->info.files = u->files;
  return u;
}

static void add_softmax_unit(const char *name) {
  static const char *const dirs[] = {"fwd", "bwd"};
  unit_slot *u;
  char path[128];
  size_t n = 0;
  snprintf(path, sizeof path, "softmax/%s.cu", name);
  if (!(u = new_unit(name, path, summary_of(name)))) return;
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

static void build_lookup(void);

static void init(void) {
#define ADD_UNIT(a, name) add_softmax_unit(#name);
  KILN_SOFTMAX_UNITS(ADD_UNIT, _)
  for (size_t i = 0; i < sizeof fixed_units / sizeof *fixed_units; i++) {
    const fixed_unit *f = &fixed_units[i];
    unit_slot *u = new_unit(f->name, f->path, f->summary);
    if (!u) continue;
    u->info.entries = f->entries;
    u->info.n_entries = f->n_entries;
    n_units++;
  }
  build_lookup();
}

/* Entry name -> (unit, entry), open addressing; built once after the units. */
#define LOOKUP_SIZE 4096 /* a power of two, well above the number of entries */
typedef struct lookup_slot {
  const char *name; /* NULL: empty */
  unsigned short unit, entry;
} lookup_slot;
static lookup_slot lookup[LOOKUP_SIZE];

static size_t hash_name(const char *s) {
  size_t h = 1469598103934665603ULL;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static void build_lookup(void) {
  size_t placed = 0;
  for (size_t u = 0; u < n_units; u++)
    for (size_t e = 0; e < units[u].info.n_entries; e++) {
      const char *name = units[u].info.entries[e].name;
      size_t h = hash_name(name) & (LOOKUP_SIZE - 1);
      if (placed + 1 >= LOOKUP_SIZE / 2) {
        kiln_log(KILN_LOG_ERROR,
                 "more than %d entry points: raise LOOKUP_SIZE in "
                 "kernels/registry.c",
                 LOOKUP_SIZE / 2);
        return;
      }
      while (lookup[h].name)
        h = (h + 1) & (LOOKUP_SIZE - 1);
      lookup[h] = (lookup_slot){name, (unsigned short)u, (unsigned short)e};
      placed++;
    }
}

int kiln_entry_find(const char *name, size_t *unit, size_t *entry) {
  pthread_once(&once, init);
  if (!name) return -1;
  for (size_t h = hash_name(name) & (LOOKUP_SIZE - 1); lookup[h].name;
       h = (h + 1) & (LOOKUP_SIZE - 1))
    if (strcmp(lookup[h].name, name) == 0) {
      *unit = lookup[h].unit;
      *entry = lookup[h].entry;
      return 0;
    }
  return -1;
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
