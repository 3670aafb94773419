/* compile_split — does splitting a unit's compile into one front end and one
 * back end per target pay, and does it cost any SASS?
 *
 * Pipelines, all single-threaded and run one after the other:
 *   A   direct     NVRTC per target, as kiln does today
 *                  (-std=c++17 --ptxas-options=-v -arch=sm_XY | compute_XY).
 *   B   lto        NVRTC once, -dlto -arch=compute_F -> LTO-IR; then per sm
 *                  target nvJitLink -lto -arch=sm_XY -> CUBIN, and per PTX
 *                  target nvJitLink -lto -ptx -arch=compute_XY -> PTX.
 *   C   ptx        NVRTC once, -arch=compute_F -> PTX; then per sm target
 *                  nvJitLink (PTX input, i.e. ptxas) -arch=sm_XY -> CUBIN. A
 *                  PTX target equal to compute_F is the front end's output;
 *                  any other PTX target is compiled by NVRTC directly.
 *   Cw  ptx+ptxas  as C, but the back end is the ptxas binary in whole-program
 *                  mode (how NVRTC itself runs ptxas): a reference for what a
 *                  whole-program PTX assembler API (nvPTXCompiler) would give,
 *                  since nvJitLink compiles PTX input as relocatable code.
 *                  Skipped when there is no ptxas (--ptxas PATH).
 *   Bf  lto/family as B, but one LTO-IR per major family (compute_80, _90,
 *                  _100, _110, _120) and each target linked from its family.
 *   Cf  ptx/family as C, one PTX per major family.
 *   Cwf            as Cw, one PTX per major family.
 *   Cwx            as Cw, one PTX for compute_F shared by every target up to
 *                  sm_90, and one per target arch from sm_100 up (NVRTC 13.0
 *                  generates different code for each of those archs; a
 *                  PTX target of the same arch reuses that PTX).
 * F is the lowest arch among the targets (80 for --arch all).
 *
 * Then every CUBIN is disassembled with cuobjdump (-sass, -res-usage) and
 * compared, per function, with pipeline A's: instructions (text, and the full
 * 128-bit encodings including scheduling bits), registers, local memory, and
 * the spills ptxas reported.
 *
 * Usage: compile_split [options] KERNELS_DIR UNIT
 *   e.g. build/bench/compile_split kernels softmax/scaled_softmax.cu
 * Every .cuh/.def/.h/.cu file under KERNELS_DIR other than UNIT is handed to
 * NVRTC as an in-memory header named by its path relative to KERNELS_DIR,
 * which is how kiln names them (kiln passes only the unit's include closure;
 * headers that are never included cost nothing).
 *
 * Standalone on purpose: it dlopens libnvrtc.so.13 and libnvJitLink.so.13
 * itself and uses the toolkit headers for types only. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nvrtc.h>
#define NVJITLINK_NO_INLINE
#include <nvJitLink.h>

extern char **environ;

#ifndef COMPILE_SPLIT_PTXAS
#define COMPILE_SPLIT_PTXAS "/usr/local/cuda/bin/ptxas"
#endif

#define MAX_TARGETS 32
#define MAX_HEADERS 256
#define MAX_FE 16

/* ---- small utilities -------------------------------------------------------- */

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("compile_split: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("out of memory");
  return p;
}

static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n ? n : 1);
  if (!p) die("out of memory");
  return p;
}

static char *xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(xmalloc(n), s, n);
}

typedef struct tm_pair {
  double wall, cpu; /* seconds: monotonic wall clock; CPU time of this process
                     * and of its waited-for children (ptxas in Cw) */
} tm_pair;

static tm_pair tnow(void) {
  struct timespec w, c;
  struct rusage ch;
  clock_gettime(CLOCK_MONOTONIC, &w);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c);
  getrusage(RUSAGE_CHILDREN, &ch);
  return (tm_pair){w.tv_sec + w.tv_nsec * 1e-9,
                   c.tv_sec + c.tv_nsec * 1e-9 + (double)ch.ru_utime.tv_sec +
                       ch.ru_utime.tv_usec * 1e-6 + (double)ch.ru_stime.tv_sec +
                       ch.ru_stime.tv_usec * 1e-6};
}

static tm_pair tsince(tm_pair t0) {
  tm_pair t = tnow();
  return (tm_pair){t.wall - t0.wall, t.cpu - t0.cpu};
}

static void tadd(tm_pair *a, tm_pair b) {
  a->wall += b.wall;
  a->cpu += b.cpu;
}

static char *read_whole(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  if (!f) die("%s: %s", path, strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
    die("%s: cannot size", path);
  buf = xmalloc((size_t)n + 1);
  if (fread(buf, 1, (size_t)n, f) != (size_t)n) die("%s: short read", path);
  buf[n] = '\0';
  fclose(f);
  if (size) *size = (size_t)n;
  return buf;
}

static void write_whole(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) die("%s: cannot write", path);
}

/* ---- NVRTC and nvJitLink, dlopen'ed ------------------------------------------ */

static struct {
  const char *(*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int *, int *);
  nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetPTX)(nvrtcProgram, char *);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*GetLTOIRSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetLTOIR)(nvrtcProgram, char *);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
} rtc;

static struct {
  nvJitLinkResult (*Create)(nvJitLinkHandle *, uint32_t, const char **);
  nvJitLinkResult (*Destroy)(nvJitLinkHandle *);
  nvJitLinkResult (*AddData)(nvJitLinkHandle, nvJitLinkInputType, const void *, size_t,
                             const char *);
  nvJitLinkResult (*Complete)(nvJitLinkHandle);
  nvJitLinkResult (*GetLinkedCubinSize)(nvJitLinkHandle, size_t *);
  nvJitLinkResult (*GetLinkedCubin)(nvJitLinkHandle, void *);
  nvJitLinkResult (*GetLinkedPtxSize)(nvJitLinkHandle, size_t *);
  nvJitLinkResult (*GetLinkedPtx)(nvJitLinkHandle, char *);
  nvJitLinkResult (*GetErrorLogSize)(nvJitLinkHandle, size_t *);
  nvJitLinkResult (*GetErrorLog)(nvJitLinkHandle, char *);
  nvJitLinkResult (*GetInfoLogSize)(nvJitLinkHandle, size_t *);
  nvJitLinkResult (*GetInfoLog)(nvJitLinkHandle, char *);
  nvJitLinkResult (*Version)(unsigned int *, unsigned int *);
} jl;

static void *need_sym(void *h, const char *lib, const char *name, const char *alt) {
  void *p = dlsym(h, name);
  if (!p && alt) p = dlsym(h, alt);
  if (!p) die("%s lacks %s", lib, name);
  return p;
}

#define RTC_SYM(n) *(void **)(&rtc.n) = need_sym(h, lib, "nvrtc" #n, NULL)
#define JL_SYM(n) *(void **)(&jl.n) = need_sym(h, lib, "__nvJitLink" #n "_13_0", "nvJitLink" #n)

static void load_nvrtc(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die("cannot load %s: %s", lib, dlerror());
  RTC_SYM(GetErrorString);
  RTC_SYM(Version);
  RTC_SYM(CreateProgram);
  RTC_SYM(DestroyProgram);
  RTC_SYM(CompileProgram);
  RTC_SYM(GetPTXSize);
  RTC_SYM(GetPTX);
  RTC_SYM(GetCUBINSize);
  RTC_SYM(GetCUBIN);
  RTC_SYM(GetLTOIRSize);
  RTC_SYM(GetLTOIR);
  RTC_SYM(GetProgramLogSize);
  RTC_SYM(GetProgramLog);
}

static void load_nvjitlink(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) die("cannot load %s: %s", lib, dlerror());
  JL_SYM(Create);
  JL_SYM(Destroy);
  JL_SYM(AddData);
  JL_SYM(Complete);
  JL_SYM(GetLinkedCubinSize);
  JL_SYM(GetLinkedCubin);
  JL_SYM(GetLinkedPtxSize);
  JL_SYM(GetLinkedPtx);
  JL_SYM(GetErrorLogSize);
  JL_SYM(GetErrorLog);
  JL_SYM(GetInfoLogSize);
  JL_SYM(GetInfoLog);
  *(void **)(&jl.Version) = need_sym(h, lib, "nvJitLinkVersion", NULL);
}

/* ---- the unit's sources ----------------------------------------------------------- */

typedef struct source_set {
  const char *main_text, *main_name;
  int n_headers;
  char *hdr_text[MAX_HEADERS], *hdr_name[MAX_HEADERS];
} source_set;

static int is_source_name(const char *n) {
  static const char *const exts[] = {".cuh", ".def", ".h", ".hpp", ".cu"};
  size_t len = strlen(n);
  for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
    size_t e = strlen(exts[i]);
    if (len > e && strcmp(n + len - e, exts[i]) == 0) return 1;
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds every source file under root/rel (rel "" for root) except the unit. */
static void scan_dir(source_set *s, const char *root, const char *rel) {
  char path[4096];
  DIR *d;
  struct dirent *e;
  char *names[1024];
  int n = 0;
  snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel);
  if (!(d = opendir(path))) die("%s: %s", path, strerror(errno));
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == 1024) die("%s: too many entries", path);
    names[n++] = xstrdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str); /* deterministic header order */
  for (int i = 0; i < n; i++) {
    char sub[2048], full[4096];
    struct stat st;
    snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", names[i]);
    snprintf(full, sizeof full, "%s/%s", root, sub);
    if (stat(full, &st) != 0) die("%s: %s", full, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      scan_dir(s, root, sub);
    } else if (S_ISREG(st.st_mode) && is_source_name(names[i]) && strcmp(sub, s->main_name) != 0) {
      if (s->n_headers == MAX_HEADERS) die("too many headers under %s", root);
      s->hdr_text[s->n_headers] = read_whole(full, NULL);
      s->hdr_name[s->n_headers++] = xstrdup(sub);
    }
    free(names[i]);
  }
}

static void load_sources(source_set *s, const char *root, const char *unit) {
  char full[4096];
  memset(s, 0, sizeof *s);
  s->main_name = xstrdup(unit);
  snprintf(full, sizeof full, "%s/%s", root, unit);
  s->main_text = read_whole(full, NULL);
  scan_dir(s, root, "");
}

/* ---- one NVRTC compile, one nvJitLink link ------------------------------------------ */

enum out_kind { OUT_PTX, OUT_CUBIN, OUT_LTOIR };

typedef struct blob {
  unsigned char *data;
  size_t size;
  char *log;
  int is_ptx; /* data is PTX text (NUL included in size) */
} blob;

static void blob_free(blob *b) {
  free(b->data);
  free(b->log);
  memset(b, 0, sizeof *b);
}

static blob blob_copy(const blob *b) {
  blob c = *b;
  c.data = xmalloc(b->size);
  memcpy(c.data, b->data, b->size);
  c.log = xstrdup(b->log ? b->log : "");
  return c;
}

/* Returns 0 on success; on failure *out holds the log. */
static int nvrtc_compile(const source_set *s, const char **opts, int nopts, enum out_kind kind,
                         blob *out, tm_pair *t) {
  nvrtcProgram prog = NULL;
  nvrtcResult r;
  size_t n = 0;
  tm_pair t0 = tnow();
  memset(out, 0, sizeof *out);
  r = rtc.CreateProgram(&prog, s->main_text, s->main_name, s->n_headers,
                        (const char *const *)s->hdr_text, (const char *const *)s->hdr_name);
  if (r != NVRTC_SUCCESS) die("nvrtcCreateProgram: %s", rtc.GetErrorString(r));
  r = rtc.CompileProgram(prog, nopts, opts);
  if (rtc.GetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
  out->log = calloc(n + 1, 1);
  if (!out->log) die("out of memory");
  if (n && rtc.GetProgramLog(prog, out->log) != NVRTC_SUCCESS) out->log[0] = '\0';
  if (r == NVRTC_SUCCESS) {
    nvrtcResult r1, r2;
    n = 0;
    r1 = kind == OUT_PTX     ? rtc.GetPTXSize(prog, &n)
         : kind == OUT_CUBIN ? rtc.GetCUBINSize(prog, &n)
                             : rtc.GetLTOIRSize(prog, &n);
    out->data = xmalloc(n);
    out->size = n;
    r2 = kind == OUT_PTX     ? rtc.GetPTX(prog, (char *)out->data)
         : kind == OUT_CUBIN ? rtc.GetCUBIN(prog, (char *)out->data)
                             : rtc.GetLTOIR(prog, (char *)out->data);
    if (r1 != NVRTC_SUCCESS || r2 != NVRTC_SUCCESS || n == 0) r = NVRTC_ERROR_INVALID_INPUT;
    out->is_ptx = kind == OUT_PTX;
  }
  rtc.DestroyProgram(&prog);
  *t = tsince(t0);
  if (r != NVRTC_SUCCESS) {
    fprintf(stderr, "NVRTC failed (%s):\n%s\n", rtc.GetErrorString(r), out->log);
    return -1;
  }
  return 0;
}

static char *jl_log(nvJitLinkHandle h, int error) {
  size_t n = 0;
  char *s;
  if ((error ? jl.GetErrorLogSize(h, &n) : jl.GetInfoLogSize(h, &n)) != NVJITLINK_SUCCESS) n = 0;
  s = calloc(n + 1, 1);
  if (!s) die("out of memory");
  if (n && (error ? jl.GetErrorLog(h, s) : jl.GetInfoLog(h, s)) != NVJITLINK_SUCCESS) s[0] = '\0';
  return s;
}

static int jitlink(const blob *in, nvJitLinkInputType type, const char **opts, int nopts,
                   int want_ptx, blob *out, tm_pair *t) {
  nvJitLinkHandle h = NULL;
  nvJitLinkResult r;
  size_t n = 0;
  tm_pair t0 = tnow();
  memset(out, 0, sizeof *out);
  r = jl.Create(&h, (uint32_t)nopts, opts);
  if (r != NVJITLINK_SUCCESS) {
    fprintf(stderr, "nvJitLinkCreate failed (%d) with options:", (int)r);
    for (int i = 0; i < nopts; i++)
      fprintf(stderr, " %s", opts[i]);
    fputc('\n', stderr);
    if (h) jl.Destroy(&h);
    *t = tsince(t0);
    return -1;
  }
  r = jl.AddData(h, type, in->data, in->size, "unit");
  if (r == NVJITLINK_SUCCESS) r = jl.Complete(h);
  if (r == NVJITLINK_SUCCESS) {
    if (want_ptx) {
      r = jl.GetLinkedPtxSize(h, &n);
      if (r == NVJITLINK_SUCCESS) {
        out->data = xmalloc(n);
        out->size = n;
        r = jl.GetLinkedPtx(h, (char *)out->data);
      }
      out->is_ptx = 1;
    } else {
      r = jl.GetLinkedCubinSize(h, &n);
      if (r == NVJITLINK_SUCCESS) {
        out->data = xmalloc(n);
        out->size = n;
        r = jl.GetLinkedCubin(h, out->data);
      }
    }
  }
  out->log = jl_log(h, 0);
  if (r != NVJITLINK_SUCCESS) {
    char *err = jl_log(h, 1);
    fprintf(stderr, "nvJitLink failed (%d):\n%s\n%s\n", (int)r, err, out->log);
    free(err);
  }
  jl.Destroy(&h);
  *t = tsince(t0);
  return r == NVJITLINK_SUCCESS ? 0 : -1;
}

/* ---- targets and pipelines -------------------------------------------------------------- */

typedef struct target {
  int arch;
  int ptx; /* compute_XY (PTX) rather than sm_XY (CUBIN) */
  char name[16];
} target;

static int family_of(int arch) {
  return arch / 10 * 10;
}

/* The front-end arch a target's intermediate is compiled for. */
static int fe_arch_for(int which, int fe_arch, int arch);

enum { P_A, P_B, P_C, P_CW, P_BF, P_CF, P_CWF, P_CWX, NPIPE };
static const char *const pipe_tag[NPIPE] = {"A", "B", "C", "Cw", "Bf", "Cf", "Cwf", "Cwx"};
static const char *const pipe_title[NPIPE] = {
    "A  direct: NVRTC per target",
    "B  LTO: NVRTC -dlto once, nvJitLink -lto per target",
    "C  PTX: NVRTC PTX once, nvJitLink (ptxas) per target",
    "Cw PTX: NVRTC PTX once, whole-program ptxas per target (reference, the ptxas binary)",
    "Bf LTO per family: NVRTC -dlto per major family, nvJitLink -lto per target",
    "Cf PTX per family: NVRTC PTX per major family, nvJitLink (ptxas) per target",
    "Cwf PTX per family: NVRTC PTX per major family, whole-program ptxas per target (reference)",
    "Cwx PTX per class: NVRTC PTX for compute_F (targets up to sm_90) or the target's own arch "
    "(sm_100 up), whole-program ptxas per target (reference)",
};

typedef struct pipeline {
  int ran, failed;
  blob out[MAX_TARGETS];
  tm_pair per_target[MAX_TARGETS]; /* A: whole compile; others: back end (or NVRTC) */
  const char *how[MAX_TARGETS];
  int n_fe;
  int fe_arch[MAX_FE];
  blob fe_out[MAX_FE];
  tm_pair fe_time[MAX_FE];
  tm_pair total; /* wall/cpu around the whole pipeline */
} pipeline;

typedef struct config {
  target targets[MAX_TARGETS];
  int n_targets;
  int reps;
  int jl_cache;
  int fe_arch; /* the single-front-end arch for B and C */
  const char *cuobjdump;
  const char *ptxas; /* for Cw; NULL: Cw is skipped */
  const char *outdir;
  int sass;
  int pipes[NPIPE];
  const char *nvrtc_lib, *jl_lib; /* --nvrtc, --nvjitlink */
  const char *kdir, *unit;        /* KERNELS_DIR UNIT */
} config;

/* Keeps the fastest of reps (by wall time), and the output of the last. */
#define REPEAT(cfg, tmin, call)                                                                    \
  do {                                                                                             \
    (tmin).wall = (tmin).cpu = 1e30;                                                               \
    for (int rep_ = 0; rep_ < (cfg)->reps; rep_++) {                                               \
      tm_pair tt_;                                                                                 \
      int rc_;                                                                                     \
      if (rep_) blob_free(&cur_);                                                                  \
      rc_ = (call);                                                                                \
      if (rc_ != 0) return -1;                                                                     \
      if (tt_.wall < (tmin).wall) (tmin) = tt_;                                                    \
    }                                                                                              \
  } while (0)

/* ptxas as a separate process, whole-program (no -c), as NVRTC runs it. */
static int ptxas_run(const char *ptxas, const char *ptx_path, const char *dir, const target *t,
                     blob *out, tm_pair *tt) {
  char arch[32], cubin[1024], logp[1024];
  char *argv[] = {(char *)ptxas, arch, "-v", "-o", cubin, (char *)ptx_path, NULL};
  posix_spawn_file_actions_t fa;
  pid_t pid;
  int st = 0;
  tm_pair t0;
  memset(out, 0, sizeof *out);
  snprintf(arch, sizeof arch, "-arch=%s", t->name);
  snprintf(cubin, sizeof cubin, "%s/.ptxas_%s.cubin", dir, t->name);
  snprintf(logp, sizeof logp, "%s/.ptxas_%s.log", dir, t->name);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  t0 = tnow();
  if (posix_spawn(&pid, ptxas, &fa, NULL, argv, environ) != 0) die("cannot run %s", ptxas);
  if (waitpid(pid, &st, 0) < 0) die("waitpid: %s", strerror(errno));
  *tt = tsince(t0);
  posix_spawn_file_actions_destroy(&fa);
  out->log = read_whole(logp, NULL);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "ptxas failed for %s:\n%s\n", t->name, out->log);
    return -1;
  }
  out->data = (unsigned char *)read_whole(cubin, &out->size);
  unlink(cubin);
  unlink(logp);
  return 0;
}

static int ptxas_back(const config *cfg, const char *ptx_path, const char *dir, const target *t,
                      blob *out, tm_pair *tmin) {
  blob cur_ = {0};
  REPEAT(cfg, *tmin, ptxas_run(cfg->ptxas, ptx_path, dir, t, &cur_, &tt_));
  *out = cur_;
  return 0;
}

static int rtc_direct(const config *cfg, const source_set *s, const target *t, blob *out,
                      tm_pair *tmin) {
  char arch[32];
  const char *opts[] = {"-std=c++17", "--ptxas-options=-v", arch};
  blob cur_ = {0};
  snprintf(arch, sizeof arch, "-arch=%s", t->name);
  REPEAT(cfg, *tmin, nvrtc_compile(s, opts, 3, t->ptx ? OUT_PTX : OUT_CUBIN, &cur_, &tt_));
  *out = cur_;
  return 0;
}

static int rtc_front(const config *cfg, const source_set *s, int arch, int lto, blob *out,
                     tm_pair *tmin) {
  char a[32];
  const char *opts_lto[] = {"-std=c++17", "-dlto", a};
  const char *opts_ptx[] = {"-std=c++17", a};
  blob cur_ = {0};
  snprintf(a, sizeof a, "-arch=compute_%d", arch);
  REPEAT(cfg, *tmin,
         lto ? nvrtc_compile(s, opts_lto, 3, OUT_LTOIR, &cur_, &tt_)
             : nvrtc_compile(s, opts_ptx, 2, OUT_PTX, &cur_, &tt_));
  *out = cur_;
  return 0;
}

static int jl_back(const config *cfg, const blob *in, int lto, const target *t, blob *out,
                   tm_pair *tmin) {
  char arch[32];
  const char *opts[8];
  int n = 0;
  blob cur_ = {0};
  snprintf(arch, sizeof arch, "-arch=%s", t->name);
  opts[n++] = arch;
  if (lto) opts[n++] = "-lto";
  if (t->ptx)
    opts[n++] = "-ptx";
  else
    opts[n++] = "-Xptxas=-v";
  if (!cfg->jl_cache) opts[n++] = "-no-cache";
  REPEAT(
      cfg, *tmin,
      jitlink(in, lto ? NVJITLINK_INPUT_LTOIR : NVJITLINK_INPUT_PTX, opts, n, t->ptx, &cur_, &tt_));
  *out = cur_;
  return 0;
}

static int fe_arch_for(int which, int fe_arch, int arch) {
  if (which == P_BF || which == P_CF || which == P_CWF) return family_of(arch);
  if (which == P_CWX) return arch <= 90 ? fe_arch : arch;
  return fe_arch;
}

static int fe_index(pipeline *p, int arch) {
  for (int i = 0; i < p->n_fe; i++)
    if (p->fe_arch[i] == arch) return i;
  return -1;
}

static int run_pipeline(const config *cfg, const source_set *s, const char *dir, int which,
                        pipeline *p) {
  int lto = which == P_B || which == P_BF;
  int use_ptxas = which == P_CW || which == P_CWF || which == P_CWX;
  char ptx_path[MAX_FE][1024];
  tm_pair t0 = tnow();
  memset(p, 0, sizeof *p);
  p->ran = 1;
  fprintf(stderr, "[%s] %s\n", pipe_tag[which], pipe_title[which]);
  if (which == P_A) {
    for (int i = 0; i < cfg->n_targets; i++) {
      if (rtc_direct(cfg, s, &cfg->targets[i], &p->out[i], &p->per_target[i]) != 0) return -1;
      p->how[i] = "nvrtc";
      fprintf(stderr, "  %-12s nvrtc            %7.2f s wall %7.2f s cpu\n", cfg->targets[i].name,
              p->per_target[i].wall, p->per_target[i].cpu);
    }
    p->total = tsince(t0);
    return 0;
  }
  /* Front ends first, in ascending arch order. */
  for (int i = 0; i < cfg->n_targets; i++) {
    int a = fe_arch_for(which, cfg->fe_arch, cfg->targets[i].arch);
    if (fe_index(p, a) >= 0) continue;
    if (p->n_fe == MAX_FE) die("too many front ends");
    p->fe_arch[p->n_fe++] = a;
  }
  for (int i = 0; i < p->n_fe; i++) {
    if (rtc_front(cfg, s, p->fe_arch[i], lto, &p->fe_out[i], &p->fe_time[i]) != 0) return -1;
    fprintf(stderr, "  front end    nvrtc %s compute_%d %7.2f s wall %7.2f s cpu (%zu bytes)\n",
            lto ? "-dlto" : "PTX  ", p->fe_arch[i], p->fe_time[i].wall, p->fe_time[i].cpu,
            p->fe_out[i].size);
  }
  for (int i = 0; use_ptxas && i < p->n_fe; i++) {
    /* ptxas reads a file: the write is part of the front end's time */
    tm_pair tw = tnow();
    snprintf(ptx_path[i], sizeof ptx_path[i], "%s/.%s_fe_compute_%d.ptx", dir, pipe_tag[which],
             p->fe_arch[i]);
    write_whole(ptx_path[i], p->fe_out[i].data,
                strnlen((char *)p->fe_out[i].data, p->fe_out[i].size));
    tadd(&p->fe_time[i], tsince(tw));
  }
  for (int i = 0; i < cfg->n_targets; i++) {
    const target *t = &cfg->targets[i];
    int f = fe_index(p, fe_arch_for(which, cfg->fe_arch, t->arch));
    int rc;
    if (t->ptx && !lto) {
      if (p->fe_arch[f] == t->arch) {
        p->out[i] = blob_copy(&p->fe_out[f]);
        p->per_target[i] = (tm_pair){0, 0};
        p->how[i] = "front end's PTX";
        rc = 0;
      } else {
        rc = rtc_direct(cfg, s, t, &p->out[i], &p->per_target[i]);
        p->how[i] = "nvrtc";
      }
    } else if (use_ptxas) {
      rc = ptxas_back(cfg, ptx_path[f], dir, t, &p->out[i], &p->per_target[i]);
      p->how[i] = "ptxas";
    } else {
      rc = jl_back(cfg, &p->fe_out[f], lto, t, &p->out[i], &p->per_target[i]);
      p->how[i] = lto ? (t->ptx ? "nvJitLink -lto -ptx" : "nvJitLink -lto") : "nvJitLink ptx";
      if (rc != 0 && t->ptx) { /* -lto -ptx refused: fall back to NVRTC for this PTX target */
        rc = rtc_direct(cfg, s, t, &p->out[i], &p->per_target[i]);
        p->how[i] = "nvrtc (fallback)";
      }
    }
    if (rc != 0) return -1;
    fprintf(stderr, "  %-12s %-20s %7.2f s wall %7.2f s cpu\n", t->name, p->how[i],
            p->per_target[i].wall, p->per_target[i].cpu);
  }
  for (int i = 0; use_ptxas && i < p->n_fe; i++)
    unlink(ptx_path[i]);
  p->total = tsince(t0);
  return 0;
}

/* ---- SASS -------------------------------------------------------------------------------------
 */

typedef struct sass_fn {
  char *name;
  char *text; /* normalised instructions, one a line */
  char *enc;  /* their encodings, one instruction a line */
  int n_ins, n_nop;
  int reg, stack, local, have_res;
} sass_fn;

typedef struct sass {
  sass_fn *fn;
  int n;
  int spill_bytes; /* stores + loads, from the ptxas -v log; -1 unknown */
  int ok;
} sass;

static void append(char **s, size_t *len, size_t *cap, const char *add, size_t n) {
  if (*len + n + 2 > *cap) {
    *cap = (*len + n + 2) * 2;
    *s = xrealloc(*s, *cap);
  }
  memcpy(*s + *len, add, n);
  *len += n;
  (*s)[*len] = '\0';
}

typedef struct fn_build {
  size_t tlen, tcap, elen, ecap;
} fn_build;

static int cmp_fn(const void *a, const void *b) {
  return strcmp(((const sass_fn *)a)->name, ((const sass_fn *)b)->name);
}

static int run_lines(const char *cmd, char ***lines_out) {
  FILE *f = popen(cmd, "r");
  char buf[8192], **lines = NULL;
  int n = 0, cap = 0;
  if (!f) die("cannot run %s", cmd);
  while (fgets(buf, sizeof buf, f)) {
    if (n == cap) {
      cap = cap ? cap * 2 : 1024;
      lines = xrealloc(lines, (size_t)cap * sizeof *lines);
    }
    lines[n++] = xstrdup(buf);
  }
  if (pclose(f) != 0) {
    for (int i = 0; i < n; i++)
      free(lines[i]);
    free(lines);
    *lines_out = NULL;
    return -1;
  }
  *lines_out = lines;
  return n;
}

static sass_fn *find_fn(sass *s, const char *name) {
  sass_fn key;
  key.name = (char *)name;
  return s->n ? bsearch(&key, s->fn, (size_t)s->n, sizeof *s->fn, cmp_fn) : NULL;
}

/* Sum of spill stores and loads in a ptxas -v log; -1 when the log has none. */
static int log_spills(const char *log) {
  const char *p = log;
  int total = -1, a, b, c;
  while (p && (p = strstr(p, "bytes stack frame")) != NULL) {
    const char *d = p;
    while (d > log && d[-1] != '\n')
      d--;
    while (*d && (*d < '0' || *d > '9'))
      d++;
    if (sscanf(d, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &a, &b,
               &c) == 3)
      total = (total < 0 ? 0 : total) + b + c;
    p++;
  }
  return total;
}

static void analyse(const config *cfg, const char *cubin_path, const char *log, sass *out) {
  char cmd[8192], **lines = NULL;
  int n;
  sass_fn *cur = NULL;
  fn_build fb = {0, 0, 0, 0};
  memset(out, 0, sizeof *out);
  out->spill_bytes = log_spills(log);
  snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>&1", cfg->cuobjdump, cubin_path);
  if ((n = run_lines(cmd, &lines)) < 0) {
    fprintf(stderr, "cuobjdump -sass failed on %s\n", cubin_path);
    return;
  }
  for (int i = 0; i < n; i++) {
    char *l = lines[i], *fnk = strstr(l, "Function : ");
    if (fnk) {
      char *e;
      out->fn = xrealloc(out->fn, (size_t)(out->n + 1) * sizeof *out->fn);
      cur = &out->fn[out->n++];
      memset(cur, 0, sizeof *cur);
      cur->name = xstrdup(fnk + 11);
      for (e = cur->name + strlen(cur->name); e > cur->name && (e[-1] == '\n' || e[-1] == ' ');)
        *--e = '\0';
      cur->text = xstrdup("");
      cur->enc = xstrdup("");
      memset(&fb, 0, sizeof fb);
      continue;
    }
    if (!cur) continue;
    {
      /* An instruction line is "<addr comment> INSTR ;  <encoding comment>", the
       * address comment being slash-star-hex-star-slash with no space; the next
       * line holds the second 64 bits of the encoding as a comment alone. */
      char *a = strstr(l, "/*"), *a2, *semi, *enc;
      if (a && (a2 = strstr(a + 2, "*/")) != NULL && a[2] != ' ' && (semi = strchr(a2, ';'))) {
        char ins[1024];
        size_t k = 0;
        int sp = 1;
        for (char *c = a2 + 2; c < semi && k + 2 < sizeof ins; c++) {
          if (*c == ' ' || *c == '\t') {
            if (!sp) ins[k++] = ' ';
            sp = 1;
          } else {
            ins[k++] = *c;
            sp = 0;
          }
        }
        while (k && ins[k - 1] == ' ')
          k--;
        ins[k++] = '\n';
        append(&cur->text, &fb.tlen, &fb.tcap, ins, k);
        cur->n_ins++;
        if (strncmp(ins, "NOP", 3) == 0 && (ins[3] == '\n' || ins[3] == ' ')) cur->n_nop++;
        if (fb.elen) append(&cur->enc, &fb.elen, &fb.ecap, "\n", 1);
        enc = strstr(semi, "/* 0x");
        if (enc) append(&cur->enc, &fb.elen, &fb.ecap, enc + 3, 18);
      } else if (a && strncmp(a, "/* 0x", 5) == 0) {
        /* the second half of a 128-bit encoding */
        append(&cur->enc, &fb.elen, &fb.ecap, a + 3, 18);
      }
    }
  }
  for (int i = 0; i < n; i++)
    free(lines[i]);
  free(lines);
  qsort(out->fn, (size_t)out->n, sizeof *out->fn, cmp_fn);

  snprintf(cmd, sizeof cmd, "'%s' -res-usage '%s' 2>&1", cfg->cuobjdump, cubin_path);
  if ((n = run_lines(cmd, &lines)) < 0) {
    fprintf(stderr, "cuobjdump -res-usage failed on %s\n", cubin_path);
    return;
  }
  for (int i = 0; i + 1 < n; i++) {
    char *fnk = strstr(lines[i], "Function "), *e, *r;
    sass_fn *f;
    if (!fnk) continue;
    fnk += 9;
    e = strrchr(fnk, ':');
    if (!e) continue;
    *e = '\0';
    if (!(f = find_fn(out, fnk))) continue;
    r = lines[i + 1];
    if (strstr(r, "REG:")) f->reg = atoi(strstr(r, "REG:") + 4);
    if (strstr(r, "STACK:")) f->stack = atoi(strstr(r, "STACK:") + 6);
    if (strstr(r, "LOCAL:")) f->local = atoi(strstr(r, "LOCAL:") + 6);
    f->have_res = 1;
  }
  for (int i = 0; i < n; i++)
    free(lines[i]);
  free(lines);
  out->ok = 1;
}

typedef struct sass_cmp {
  int funcs, missing, extra;
  long ins, base_ins; /* non-NOP instructions, summed */
  int maxreg, base_maxreg;
  long sumreg, base_sumreg;
  int local, spills;
  int same_text, same_enc;
  int more_ins, fewer_ins, more_reg, fewer_reg;
} sass_cmp;

static void compare(sass *base, sass *x, sass_cmp *c) {
  memset(c, 0, sizeof *c);
  c->funcs = x->n;
  c->spills = x->spill_bytes;
  for (int i = 0; i < x->n; i++) {
    sass_fn *f = &x->fn[i], *b = find_fn(base, f->name);
    c->ins += f->n_ins - f->n_nop;
    if (f->reg > c->maxreg) c->maxreg = f->reg;
    c->sumreg += f->reg;
    c->local += f->local;
    if (!b) {
      c->extra++;
      continue;
    }
    c->base_ins += b->n_ins - b->n_nop;
    if (b->reg > c->base_maxreg) c->base_maxreg = b->reg;
    c->base_sumreg += b->reg;
    if (strcmp(f->text, b->text) == 0) c->same_text++;
    if (strcmp(f->text, b->text) == 0 && strcmp(f->enc, b->enc) == 0) c->same_enc++;
    if (f->n_ins - f->n_nop > b->n_ins - b->n_nop) c->more_ins++;
    if (f->n_ins - f->n_nop < b->n_ins - b->n_nop) c->fewer_ins++;
    if (f->reg > b->reg) c->more_reg++;
    if (f->reg < b->reg) c->fewer_reg++;
  }
  for (int i = 0; i < base->n; i++)
    if (!find_fn(x, base->fn[i].name)) c->missing++;
}

static void sass_free(sass *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->fn[i].name);
    free(s->fn[i].text);
    free(s->fn[i].enc);
  }
  free(s->fn);
  memset(s, 0, sizeof *s);
}

/* PTX compared without its // comment lines (tool banners, build ids). */
static int ptx_same(const blob *a, const blob *b, int *diff_lines) {
  const char *p = (const char *)a->data, *q = (const char *)b->data;
  const char *pe = p + strnlen(p, a->size), *qe = q + strnlen(q, b->size);
  int same = 1, d = 0;
  for (;;) {
    const char *pn, *qn;
    while (p < pe && strncmp(p, "//", 2) == 0)
      p = (pn = memchr(p, '\n', (size_t)(pe - p))) ? pn + 1 : pe;
    while (q < qe && strncmp(q, "//", 2) == 0)
      q = (qn = memchr(q, '\n', (size_t)(qe - q))) ? qn + 1 : qe;
    if (p >= pe || q >= qe) {
      if (p < pe || q < qe) same = 0, d++;
      break;
    }
    pn = memchr(p, '\n', (size_t)(pe - p));
    qn = memchr(q, '\n', (size_t)(qe - q));
    if (!pn) pn = pe;
    if (!qn) qn = qe;
    if (pn - p != qn - q || memcmp(p, q, (size_t)(pn - p)) != 0) same = 0, d++;
    p = pn < pe ? pn + 1 : pe;
    q = qn < qe ? qn + 1 : qe;
  }
  *diff_lines = d;
  return same;
}

/* ---- command line ----------------------------------------------------------------------- */

static void usage(void) {
  fputs("usage: compile_split [options] KERNELS_DIR UNIT\n"
        "  e.g. compile_split kernels softmax/scaled_softmax.cu\n"
        "options:\n"
        "  --targets LIST     sm_XY/compute_XY, comma-separated (default: kiln's --arch all:\n"
        "                     sm_80..sm_121 and compute_80, compute_121)\n"
        "  --pipelines LIST   A,B,C,Cw,Bf,Cf,Cwf,Cwx (default all; A always runs)\n"
        "  --reps N           time each step N times, keep the fastest (default 1)\n"
        "  --out DIR          where the cubins/PTX go (default a new /tmp/compile_split.XXXXXX)\n"
        "  --cuobjdump PATH   (default $CUOBJDUMP, else cuobjdump on PATH)\n"
        "  --no-sass          skip the SASS comparison\n"
        "  --ptxas PATH       the ptxas binary for Cw, Cwf, Cwx (default " COMPILE_SPLIT_PTXAS
        ", if there)\n"
        "  --jl-cache         let nvJitLink cache (default: -no-cache, so reps stay honest)\n"
        "  --nvrtc LIB        (default libnvrtc.so.13)\n"
        "  --nvjitlink LIB    (default libnvJitLink.so.13)\n",
        stderr);
  exit(2);
}

static void parse_targets(config *cfg, const char *list) {
  char *copy = xstrdup(list), *save = NULL;
  cfg->n_targets = 0;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    target t = {0, 0, ""};
    if (cfg->n_targets == MAX_TARGETS) die("too many targets");
    if (sscanf(tok, "sm_%d", &t.arch) == 1)
      t.ptx = 0;
    else if (sscanf(tok, "compute_%d", &t.arch) == 1)
      t.ptx = 1;
    else
      die("bad target '%s' (sm_XY or compute_XY)", tok);
    snprintf(t.name, sizeof t.name, "%s_%d", t.ptx ? "compute" : "sm", t.arch);
    cfg->targets[cfg->n_targets++] = t;
  }
  free(copy);
  if (!cfg->n_targets) die("no targets");
}

/* --pipelines: A, plus the ones listed. */
static void parse_pipelines(config *cfg, const char *list) {
  char *copy = xstrdup(list), *save = NULL;
  for (int k = 0; k < NPIPE; k++)
    cfg->pipes[k] = k == P_A;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int k;
    for (k = 0; k < NPIPE && strcmp(tok, pipe_tag[k]) != 0; k++) {
    }
    if (k == NPIPE) die("unknown pipeline '%s' (A,B,C,Cw,Bf,Cf,Cwf,Cwx)", tok);
    cfg->pipes[k] = 1;
  }
  free(copy);
}

/* The defaults, then the command line; F, the lowest arch, last. */
static void parse_args(config *cfg, int argc, char **argv) {
  memset(cfg, 0, sizeof *cfg);
  cfg->reps = 1;
  cfg->sass = 1;
  cfg->nvrtc_lib = "libnvrtc.so.13";
  cfg->jl_lib = "libnvJitLink.so.13";
  cfg->cuobjdump = getenv("CUOBJDUMP") && *getenv("CUOBJDUMP") ? getenv("CUOBJDUMP") : "cuobjdump";
  for (int i = 0; i < NPIPE; i++)
    cfg->pipes[i] = 1;
  cfg->ptxas = access(COMPILE_SPLIT_PTXAS, X_OK) == 0 ? COMPILE_SPLIT_PTXAS : NULL;
  parse_targets(cfg, "sm_80,sm_86,sm_87,sm_88,sm_89,sm_90,sm_100,sm_103,sm_110,sm_120,sm_121,"
                     "compute_80,compute_121");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--targets") == 0 && i + 1 < argc)
      parse_targets(cfg, argv[++i]);
    else if (strcmp(a, "--pipelines") == 0 && i + 1 < argc)
      parse_pipelines(cfg, argv[++i]);
    else if (strcmp(a, "--reps") == 0 && i + 1 < argc) {
      cfg->reps = atoi(argv[++i]);
      if (cfg->reps < 1) die("--reps must be >= 1");
    } else if (strcmp(a, "--out") == 0 && i + 1 < argc)
      cfg->outdir = argv[++i];
    else if (strcmp(a, "--cuobjdump") == 0 && i + 1 < argc)
      cfg->cuobjdump = argv[++i];
    else if (strcmp(a, "--no-sass") == 0)
      cfg->sass = 0;
    else if (strcmp(a, "--ptxas") == 0 && i + 1 < argc)
      cfg->ptxas = argv[++i];
    else if (strcmp(a, "--jl-cache") == 0)
      cfg->jl_cache = 1;
    else if (strcmp(a, "--nvrtc") == 0 && i + 1 < argc)
      cfg->nvrtc_lib = argv[++i];
    else if (strcmp(a, "--nvjitlink") == 0 && i + 1 < argc)
      cfg->jl_lib = argv[++i];
    else if (a[0] == '-')
      usage();
    else if (!cfg->kdir)
      cfg->kdir = a;
    else if (!cfg->unit)
      cfg->unit = a;
    else
      usage();
  }
  if (!cfg->kdir || !cfg->unit) usage();
  cfg->fe_arch = 0;
  for (int i = 0; i < cfg->n_targets; i++)
    if (!cfg->fe_arch || cfg->targets[i].arch < cfg->fe_arch) cfg->fe_arch = cfg->targets[i].arch;
}

/* ---- set-up ------------------------------------------------------------------------------- */

/* --out DIR (created if need be), else a new temp directory. */
static void make_outdir(const config *cfg, char *outdir, size_t cap) {
  if (cfg->outdir) {
    snprintf(outdir, cap, "%s", cfg->outdir);
    mkdir(outdir, 0755);
  } else {
    snprintf(outdir, cap, "/tmp/compile_split.XXXXXX");
    if (!mkdtemp(outdir)) die("mkdtemp: %s", strerror(errno));
  }
}

/* Loads NVRTC, nvJitLink and the unit's sources, and says what was loaded. */
static void set_up(const config *cfg, const char *outdir, source_set *src) {
  int rmaj = 0, rmin = 0;
  unsigned jmaj = 0, jmin = 0;
  load_nvrtc(cfg->nvrtc_lib);
  load_nvjitlink(cfg->jl_lib);
  rtc.Version(&rmaj, &rmin);
  jl.Version(&jmaj, &jmin);
  load_sources(src, cfg->kdir, cfg->unit);

  printf("compile_split: unit %s (%d headers from %s), NVRTC %d.%d, nvJitLink %u.%u\n", cfg->unit,
         src->n_headers, cfg->kdir, rmaj, rmin, jmaj, jmin);
  printf("targets:");
  for (int i = 0; i < cfg->n_targets; i++)
    printf(" %s", cfg->targets[i].name);
  printf("\nsingle-threaded, one step at a time; reps %d (fastest kept); nvJitLink %s; outputs in "
         "%s\n\n",
         cfg->reps, cfg->jl_cache ? "with its cache" : "-no-cache", outdir);
  fflush(stdout);
}

/* Warm-up (untimed): loads NVRTC's builtins, ptxas and nvJitLink's code paths. */
static void warm_up(const config *cfg, const char *outdir) {
  source_set w;
  blob b, c;
  tm_pair t;
  const char *o[] = {"-std=c++17", "-arch=sm_80"};
  const char *lo[] = {"-arch=sm_80", "-no-cache"};
  const char *ptxo[] = {"-std=c++17", "-arch=compute_80"};
  memset(&w, 0, sizeof w);
  w.main_text = "extern \"C\" __global__ void warm(float *x) { x[threadIdx.x] *= 2.0f; }\n";
  w.main_name = "warm.cu";
  if (nvrtc_compile(&w, o, 2, OUT_CUBIN, &b, &t) != 0) die("warm-up compile failed");
  blob_free(&b);
  if (nvrtc_compile(&w, ptxo, 2, OUT_PTX, &b, &t) != 0) die("warm-up compile failed");
  if (jitlink(&b, NVJITLINK_INPUT_PTX, lo, 2, 0, &c, &t) != 0) die("warm-up link failed");
  if (cfg->ptxas) {
    char wp[1024];
    target t80 = {80, 0, "sm_80"};
    snprintf(wp, sizeof wp, "%s/.warm.ptx", outdir);
    write_whole(wp, b.data, strnlen((char *)b.data, b.size));
    blob_free(&c);
    if (ptxas_run(cfg->ptxas, wp, outdir, &t80, &c, &t) != 0) die("warm-up ptxas failed");
    unlink(wp);
  }
  blob_free(&b);
  blob_free(&c);
}

/* ---- measurements ------------------------------------------------------------------------- */

/* The front end alone, for the front-end share of one compile. */
typedef struct fe_alone {
  tm_pair fe90;    /* -arch=compute_90 (PTX) */
  tm_pair fe80;    /* -arch=compute_F (PTX) */
  tm_pair fe80lto; /* -dlto -arch=compute_F (LTO-IR) */
} fe_alone;

static void measure_front_end(const config *cfg, const source_set *src, fe_alone *fe) {
  blob b;
  memset(fe, 0, sizeof *fe);
  if (rtc_front(cfg, src, 90, 0, &b, &fe->fe90) != 0) die("front end failed");
  blob_free(&b);
  if (rtc_front(cfg, src, cfg->fe_arch, 0, &b, &fe->fe80) != 0) die("front end failed");
  blob_free(&b);
  if (rtc_front(cfg, src, cfg->fe_arch, 1, &b, &fe->fe80lto) != 0) die("front end failed");
  blob_free(&b);
  fprintf(stderr,
          "front end alone: compute_90 PTX %.2f s, compute_%d PTX %.2f s, compute_%d "
          "-dlto %.2f s (wall)\n",
          fe->fe90.wall, cfg->fe_arch, fe->fe80.wall, cfg->fe_arch, fe->fe80lto.wall);
}

/* Every pipeline asked for; 1 when none failed. */
static int measure_pipelines(const config *cfg, const source_set *src, const char *outdir,
                             pipeline *pipes) {
  int all_ok = 1;
  for (int k = 0; k < NPIPE; k++) {
    if (!cfg->pipes[k]) continue;
    if ((k == P_CW || k == P_CWF || k == P_CWX) && !cfg->ptxas) {
      fprintf(stderr, "[%s] skipped: no ptxas (--ptxas PATH)\n", pipe_tag[k]);
      continue;
    }
    if (run_pipeline(cfg, src, outdir, k, &pipes[k]) != 0) {
      fprintf(stderr, "pipeline %s failed\n", pipe_tag[k]);
      pipes[k].failed = 1;
      all_ok = 0;
    }
  }
  return all_ok;
}

static int pipe_ok(const pipeline *p) {
  return p->ran && !p->failed;
}

/* Writes what was built: <outdir>/<pipeline>_<target>.cubin|ptx. */
static void write_outputs(const config *cfg, const char *outdir, const pipeline *pipes) {
  for (int k = 0; k < NPIPE; k++) {
    if (!pipe_ok(&pipes[k])) continue;
    for (int i = 0; i < cfg->n_targets; i++) {
      char path[1024];
      snprintf(path, sizeof path, "%s/%s_%s.%s", outdir, pipe_tag[k], cfg->targets[i].name,
               cfg->targets[i].ptx ? "ptx" : "cubin");
      write_whole(path, pipes[k].out[i].data,
                  pipes[k].out[i].is_ptx
                      ? strnlen((char *)pipes[k].out[i].data, pipes[k].out[i].size)
                      : pipes[k].out[i].size);
    }
  }
}

/* ---- timing report ------------------------------------------------------------------------ */

static double pct(double a, double b) {
  return b > 0 ? 100.0 * a / b : 0;
}

static void report_front_end(const config *cfg, const fe_alone *fe) {
  printf("== Front end alone (NVRTC, no ptxas) ==\n");
  printf("  -arch=compute_90 (PTX)          %7.2f s wall %7.2f s cpu\n", fe->fe90.wall,
         fe->fe90.cpu);
  printf("  -arch=compute_%d (PTX)          %7.2f s wall %7.2f s cpu\n", cfg->fe_arch,
         fe->fe80.wall, fe->fe80.cpu);
  printf("  -dlto -arch=compute_%d (LTO-IR) %7.2f s wall %7.2f s cpu\n\n", cfg->fe_arch,
         fe->fe80lto.wall, fe->fe80lto.cpu);
}

static void report_per_target(const config *cfg, const pipeline *pipes) {
  printf("== Per target, seconds wall / cpu (A: the whole NVRTC compile; others: the "
         "per-target step) ==\n");
  printf("%-12s", "target");
  for (int k = 0; k < NPIPE; k++)
    if (pipe_ok(&pipes[k])) printf(" %15s", pipe_tag[k]);
  printf("\n");
  for (int i = 0; i < cfg->n_targets; i++) {
    printf("%-12s", cfg->targets[i].name);
    for (int k = 0; k < NPIPE; k++)
      if (pipe_ok(&pipes[k]))
        printf("  %5.2f / %5.2f", pipes[k].per_target[i].wall, pipes[k].per_target[i].cpu);
    printf("\n");
  }
  printf("(per-target step, how: ");
  for (int k = 1; k < NPIPE; k++) {
    if (!pipe_ok(&pipes[k])) continue;
    printf("%s:", pipe_tag[k]);
    for (int i = 0; i < cfg->n_targets; i++)
      if (cfg->targets[i].ptx) printf(" %s=%s", cfg->targets[i].name, pipes[k].how[i]);
    printf("; ");
  }
  printf("sm targets: nvJitLink, Cw: ptxas)\n\n");
}

/* Where A's sm_90 compile spends its time (when sm_90 is a target). */
static void report_stage_shares(const config *cfg, const pipeline *pipes, const fe_alone *fe) {
  int i90 = -1;
  for (int i = 0; i < cfg->n_targets; i++)
    if (!cfg->targets[i].ptx && cfg->targets[i].arch == 90) i90 = i;
  if (i90 >= 0 && pipe_ok(&pipes[P_A])) {
    tm_pair a = pipes[P_A].per_target[i90];
    printf("A's sm_90 compile, %.2f s cpu: C++ front end (the -dlto compile) %.2f s = %.0f%%; "
           "with NVVM's optimiser and PTX codegen (the compute_90 PTX compile) %.2f s = %.0f%%",
           a.cpu, fe->fe80lto.cpu, pct(fe->fe80lto.cpu, a.cpu), fe->fe90.cpu,
           pct(fe->fe90.cpu, a.cpu));
    if (pipe_ok(&pipes[P_CW]))
      printf("; whole-program ptxas (Cw's sm_90 step) %.2f s = %.0f%%",
             pipes[P_CW].per_target[i90].cpu, pct(pipes[P_CW].per_target[i90].cpu, a.cpu));
    printf("\n");
  }
}

/* The totals per pipeline, then where A's sm_90 compile spends its time. */
static void report_totals(const config *cfg, const pipeline *pipes, const fe_alone *alone) {
  tm_pair sum_a = {0, 0};
  printf("== Totals, seconds wall / cpu (sum of the fastest of each step) ==\n");
  printf("%-4s %5s %17s %17s %17s %17s %15s %15s\n", "", "NVRTC", "front end", "per-target",
         "total", "avg run", "total vs A wall", "total vs A cpu");
  for (int i = 0; i < cfg->n_targets; i++)
    tadd(&sum_a, pipes[P_A].per_target[i]);
  for (int k = 0; k < NPIPE; k++) {
    const pipeline *p = &pipes[k];
    tm_pair fe = {0, 0}, be = {0, 0}, sum;
    int n_rtc = p->n_fe;
    if (!pipe_ok(p)) continue;
    for (int i = 0; i < p->n_fe; i++)
      tadd(&fe, p->fe_time[i]);
    for (int i = 0; i < cfg->n_targets; i++) {
      tadd(&be, p->per_target[i]);
      if (k == P_A || strncmp(p->how[i], "nvrtc", 5) == 0) n_rtc++;
    }
    sum = fe;
    tadd(&sum, be);
    printf("%-4s %5d %7.1f / %7.1f %7.1f / %7.1f %7.1f / %7.1f %7.1f / %7.1f %6.3f (%+4.0f%%) "
           "%6.3f (%+4.0f%%)\n",
           pipe_tag[k], n_rtc, fe.wall, fe.cpu, be.wall, be.cpu, sum.wall, sum.cpu,
           p->total.wall / cfg->reps, p->total.cpu / cfg->reps, sum.wall / sum_a.wall,
           pct(sum.wall, sum_a.wall) - 100, sum.cpu / sum_a.cpu, pct(sum.cpu, sum_a.cpu) - 100);
  }
  report_stage_shares(cfg, pipes, alone);
  printf("(NVRTC = NVRTC runs; avg run = the pipeline's wall/cpu over all reps / reps)\n\n");
  fflush(stdout);
}

static void report_ptx(const config *cfg, const pipeline *pipes) {
  printf("== PTX targets vs A (comment lines ignored) ==\n");
  for (int i = 0; i < cfg->n_targets; i++) {
    if (!cfg->targets[i].ptx) continue;
    printf("%-12s", cfg->targets[i].name);
    for (int k = 1; k < NPIPE; k++) {
      int d = 0;
      if (!pipe_ok(&pipes[k]) || pipes[P_A].failed) continue;
      if (ptx_same(&pipes[P_A].out[i], &pipes[k].out[i], &d))
        printf("  %s: identical", pipe_tag[k]);
      else
        printf("  %s: %d lines differ", pipe_tag[k], d);
    }
    printf("\n");
  }
  printf("\n");
}

/* ---- SASS report -------------------------------------------------------------------------- */

/* Per pipeline, over the sm targets. */
typedef struct sass_tally {
  int loss[NPIPE], ident[NPIPE], textid[NPIPE], fileid[NPIPE], n_sm;
} sass_tally;

/* cuobjdump over every CUBIN written; dies when it cannot. */
static void analyse_all(const config *cfg, const char *outdir, const pipeline *pipes,
                        sass sa[NPIPE][MAX_TARGETS]) {
  for (int k = 0; k < NPIPE; k++) {
    if (!pipe_ok(&pipes[k])) continue;
    for (int i = 0; i < cfg->n_targets; i++) {
      char path[1024];
      if (cfg->targets[i].ptx) continue;
      snprintf(path, sizeof path, "%s/%s_%s.cubin", outdir, pipe_tag[k], cfg->targets[i].name);
      analyse(cfg, path, pipes[k].out[i].log, &sa[k][i]);
      if (!sa[k][i].ok)
        die("SASS analysis failed (is cuobjdump at '%s'? set --cuobjdump)", cfg->cuobjdump);
    }
  }
}

/* Pipeline k's table against A, one row per sm target, counted into t. */
static void report_sass_pipeline(const config *cfg, const pipeline *pipes,
                                 sass sa[NPIPE][MAX_TARGETS], int k, sass_tally *t) {
  printf("\n-- %s --\n", pipe_title[k]);
  printf("%-8s %5s %7s %7s %7s %12s %12s %6s %6s %11s %9s %9s\n", "target", "funcs", "ins(A)",
         "ins", "d_ins", "reg(A)", "reg", "spill", "local", "same txt/enc", "worse i/r",
         "better i/r");
  for (int i = 0; i < cfg->n_targets; i++) {
    sass_cmp c;
    char ra[32], rx[32];
    if (cfg->targets[i].ptx) continue;
    if (k == 0) t->n_sm++;
    compare(&sa[P_A][i], &sa[k][i], &c);
    snprintf(ra, sizeof ra, "%d (%ld)", c.base_maxreg, c.base_sumreg);
    snprintf(rx, sizeof rx, "%d (%ld)", c.maxreg, c.sumreg);
    printf("%-8s %5d %7ld %7ld %+7ld %12s %12s %6d %6d %5d/%-5d %4d/%-4d %4d/%-4d%s\n",
           cfg->targets[i].name, c.funcs, c.base_ins, c.ins, c.ins - c.base_ins, ra, rx, c.spills,
           c.local, c.same_text, c.same_enc, c.more_ins, c.more_reg, c.fewer_ins, c.fewer_reg,
           c.missing || c.extra ? "  (function sets differ!)" : "");
    if (c.more_ins || c.more_reg || c.spills > 0 || c.local > 0 || c.missing) t->loss[k]++;
    if (c.same_enc == c.funcs && !c.missing && !c.extra) t->ident[k]++;
    if (c.same_text == c.funcs && !c.missing && !c.extra) t->textid[k]++;
    if (pipes[k].out[i].size == pipes[P_A].out[i].size &&
        memcmp(pipes[k].out[i].data, pipes[P_A].out[i].data, pipes[k].out[i].size) == 0)
      t->fileid[k]++;
  }
}

static void report_sass(const config *cfg, const char *outdir, const pipeline *pipes,
                        sass sa[NPIPE][MAX_TARGETS]) {
  sass_tally t;
  memset(&t, 0, sizeof t);
  analyse_all(cfg, outdir, pipes, sa);
  printf("== SASS vs A, per sm target ==\n");
  printf("ins = non-NOP instructions summed over functions; reg = max registers (sum); "
         "spill = ptxas-reported spill bytes (st+ld), local = LOCAL bytes summed;\n"
         "same = functions whose instruction text / full encoding (incl. control bits) "
         "equals A's; worse = functions with more instructions / more registers than A.\n");
  for (int k = 0; k < NPIPE; k++)
    if (pipe_ok(&pipes[k])) report_sass_pipeline(cfg, pipes, sa, k, &t);
  printf("\n== SASS summary (over %d sm targets) ==\n", t.n_sm);
  for (int k = 1; k < NPIPE; k++) {
    if (!pipe_ok(&pipes[k])) continue;
    printf("%-3s byte-identical SASS on %d/%d targets (whole CUBIN file identical on %d), same "
           "instruction text on %d/%d; targets with a loss (more ins or regs in any function, "
           "or spills): %d\n",
           pipe_tag[k], t.ident[k], t.n_sm, t.fileid[k], t.textid[k], t.n_sm, t.loss[k]);
  }
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  config cfg;
  source_set src;
  fe_alone fe;
  static pipeline pipes[NPIPE];
  static sass sa[NPIPE][MAX_TARGETS];
  char outdir[512];
  int all_ok;

  parse_args(&cfg, argc, argv);
  make_outdir(&cfg, outdir, sizeof outdir);
  set_up(&cfg, outdir, &src);
  warm_up(&cfg, outdir);

  measure_front_end(&cfg, &src, &fe);
  all_ok = measure_pipelines(&cfg, &src, outdir, pipes);
  write_outputs(&cfg, outdir, pipes);

  report_front_end(&cfg, &fe);
  report_per_target(&cfg, pipes);
  report_totals(&cfg, pipes, &fe);
  report_ptx(&cfg, pipes);
  if (cfg.sass && pipe_ok(&pipes[P_A])) report_sass(&cfg, outdir, pipes, sa);

  printf("\noutputs: %s\n", outdir);
  for (int k = 0; k < NPIPE; k++)
    for (int i = 0; i < MAX_TARGETS; i++)
      sass_free(&sa[k][i]);
  return all_ok ? 0 : 1;
}
