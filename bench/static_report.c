/* static_report — what can be measured about the kernels without a GPU (bench/README.md,
 * docs/performance.md): for every entry point of every unit in the registry, compiled for each
 * target by kiln's own compile path (the options of every cache key), from ptxas's report and
 * the PTX:
 *   regs, spills, static shared memory   ptxas -v (the CUBIN compile's log), per entry point;
 *   threads                              .maxntid / .reqntid (__launch_bounds__), else "-";
 *   occupancy                            blocks and warps per SM by the occupancy calculator's
 *                                        rules (occupancy() below), for the target's limits;
 *   global load / store widths           a histogram over the ld.global / st.global
 *                                        instructions of the entry's PTX, by bytes moved;
 *   bar                                  barrier instructions (bar.sync, barrier.sync) in the
 *                                        entry's PTX; kiln's block reductions take one barrier
 *                                        each and every barrier sits in the per-row body, so for
 *                                        the row kernels it is the block-wide reductions per row.
 * Then the launch the softmax picker (kernels/softmax_launch.c) makes for a table of training
 * shapes, with the picked entry's figures. Static numbers are not speed: a GPU must confirm.
 *
 * usage: static_report [--arch LIST] [--kernels GLOB] [--smoke] [--json]
 * Exit status 0; 1 when a compile fails, an entry has no ptxas resource line, or a softmax launch
 * fails its check (check()); 2 on bad usage. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "compiler/compile.h" /* kiln_compile_unit: the CUBIN's ptxas log, the PTX */
#include "kernels/softmax_launch.h"
#include "kiln/build.h" /* kiln_build_compile_options */
#include "kiln/kernels.h"
#include "kiln/target.h"

#define N_WIDTHS 6 /* 1, 2, 4, 8, 16, 32 bytes */

typedef struct entry_stat {
  const char *name; /* the registry's */
  int regs, spill_st, spill_ld, smem, stack;
  int threads; /* 0: not in the PTX */
  int ld[N_WIDTHS], st[N_WIDTHS], ld_other, st_other;
  int bars, shfls;
} entry_stat;

typedef struct unit_stat {
  const kiln_unit_info *unit;
  entry_stat *e; /* unit->n_entries */
} unit_stat;

/* Per-SM limits of the occupancy calculator (CUDA's cudaOccupancy.h, and the programming guide's
 * table of compute capabilities). */
typedef struct sm_limits {
  int arch;
  int regs;          /* 32-bit registers per SM */
  int warps, blocks; /* resident warps, blocks per SM */
  int smem;          /* shared memory per SM usable by blocks, bytes (largest carveout) */
  int smem_block;    /* most a block may use (opt-in), bytes */
  int smem_reserved; /* the runtime's reserved shared memory per block, bytes */
} sm_limits;

static const sm_limits k_limits[] = {
    {80, 65536, 64, 32, 167936, 166912, 1024},
    {90, 65536, 64, 32, 233472, 232448, 1024},
    {100, 65536, 64, 32, 233472, 232448, 1024},
};

static const sm_limits *limits_for(int arch) {
  for (size_t i = 0; i < sizeof k_limits / sizeof *k_limits; i++)
    if (k_limits[i].arch == arch) return &k_limits[i];
  return NULL;
}

static int round_up(int v, int unit) {
  return (v + unit - 1) / unit * unit;
}

/* Resident blocks per SM of a kernel with regs registers per thread, smem bytes of static plus
 * dynamic shared memory and threads per block, by the occupancy calculator's rules:
 *   - registers are allocated per warp in units of 256 (regs * 32 rounded up), from each of the
 *     SM's 4 sub-partitions' quarter of the register file: warps = 4 * floor(regs_SM / 4 /
 *     per_warp), blocks = floor(warps / warps per block);
 *   - shared memory per block is smem + the reserved 1 KiB, rounded up to 128 bytes;
 *     blocks = floor(smem_SM / that); a block needing more than smem_block cannot launch;
 *   - blocks = floor(warps_SM / warps per block), and at most blocks_SM;
 * the least of the three. 0 when the block cannot be resident at all. */
static int occupancy(const sm_limits *lim, int regs, int smem, int threads) {
  const int wpb = (threads + 31) / 32;
  int by_regs, by_smem, by_warps, b;
  if (threads < 1 || regs > 255) return 0;
  if (regs > 0) {
    const int per_warp = round_up(regs * 32, 256);
    by_regs = (lim->regs / 4 / per_warp) * 4 / wpb;
  } else {
    by_regs = lim->blocks;
  }
  {
    const int need = round_up(smem + lim->smem_reserved, 128);
    by_smem = smem > lim->smem_block ? 0 : lim->smem / need;
  }
  by_warps = lim->warps / wpb;
  b = by_regs < by_smem ? by_regs : by_smem;
  b = b < by_warps ? b : by_warps;
  return b < lim->blocks ? b : lim->blocks;
}

/* ---- ptxas -v log ------------------------------------------------------------------------- */

static entry_stat *find_entry(unit_stat *u, const char *name, size_t len) {
  for (size_t i = 0; i < u->unit->n_entries; i++)
    if (strlen(u->e[i].name) == len && strncmp(u->e[i].name, name, len) == 0) return &u->e[i];
  return NULL;
}

/* "ptxas info : Function properties for NAME", then its stack/spill line, then "Used N
 * registers, ... M bytes smem ...". */
static void parse_log(unit_stat *u, const char *log) {
  entry_stat *cur = NULL;
  for (const char *p = log; p && *p;) {
    const char *eol = strchr(p, '\n'), *s;
    const size_t n = eol ? (size_t)(eol - p) : strlen(p);
    char line[512];
    int a, b, c;
    snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
    if ((s = strstr(line, "Function properties for ")) != NULL) {
      s += strlen("Function properties for ");
      cur = find_entry(u, s, strcspn(s, " \r"));
    } else if ((s = strstr(line, "Compiling entry function '")) != NULL) {
      s += strlen("Compiling entry function '");
      cur = find_entry(u, s, strcspn(s, "'"));
    } else if (cur && (s = strstr(line, "bytes stack frame")) != NULL) {
      const char *d = line;
      while (*d && (*d < '0' || *d > '9'))
        d++;
      if (sscanf(d, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &a, &b,
                 &c) == 3)
        cur->stack = a, cur->spill_st = b, cur->spill_ld = c;
    } else if (cur && (s = strstr(line, "Used ")) != NULL &&
               sscanf(s, "Used %d registers", &a) == 1) {
      cur->regs = a;
      if ((s = strstr(line, " bytes smem")) != NULL) {
        while (s > line && s[-1] >= '0' && s[-1] <= '9')
          s--;
        if (sscanf(s, "%d", &a) == 1) cur->smem = a;
      }
    }
    p = eol ? eol + 1 : NULL;
  }
}

/* ---- PTX ------------------------------------------------------------------------------------ */

/* Bytes one ld/st moves: .vN times the type's width (".u16", ".b128", ".f32", ...); 0 unknown. */
static int access_bytes(const char *op) {
  int vec = 1, bits = 0;
  for (const char *q = strchr(op, '.'); q && *q == '.'; q = strpbrk(q + 1, ". \t")) {
    const char *t = q + 1;
    if (t[0] == 'v' && (t[1] >= '0' && t[1] <= '9'))
      vec = atoi(t + 1);
    else if ((t[0] == 'u' || t[0] == 's' || t[0] == 'b' || t[0] == 'f') && t[1] >= '0' &&
             t[1] <= '9')
      bits = atoi(t + 1);
  }
  return vec * bits / 8;
}

static void count_access(int *hist, int *other, int bytes) {
  for (int i = 0; i < N_WIDTHS; i++)
    if (bytes == 1 << i) {
      hist[i]++;
      return;
    }
  (*other)++;
}

/* One entry's body: from its ".entry NAME(" to the next entry (device functions are inlined). */
static void parse_body(entry_stat *e, const char *p, const char *end) {
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *q = p;
    char ins[128];
    if (!eol) eol = end;
    while (q < eol && (*q == ' ' || *q == '\t'))
      q++;
    if (*q == '@') /* predicate */
      while (q < eol && *q != ' ' && *q != '\t')
        q++;
    while (q < eol && (*q == ' ' || *q == '\t'))
      q++;
    snprintf(ins, sizeof ins, "%.*s", (int)((size_t)(eol - q) < sizeof ins ? eol - q : 127), q);
    ins[strcspn(ins, " \t")] = '\0';
    if (strncmp(ins, "ld.global", 9) == 0 || strncmp(ins, "ldu.global", 10) == 0)
      count_access(e->ld, &e->ld_other, access_bytes(ins));
    else if (strncmp(ins, "st.global", 9) == 0)
      count_access(e->st, &e->st_other, access_bytes(ins));
    else if (strncmp(ins, "bar.sync", 8) == 0 || strncmp(ins, "barrier.sync", 12) == 0)
      e->bars++;
    else if (strncmp(ins, "shfl.sync", 9) == 0)
      e->shfls++;
    else if (strncmp(ins, ".maxntid", 8) == 0 || strncmp(ins, ".reqntid", 8) == 0) {
      int x = 1, y = 1, z = 1;
      if (sscanf(q + 8, "%d , %d , %d", &x, &y, &z) >= 1) e->threads = x * y * z;
    }
    p = eol + 1;
  }
}

static void parse_ptx(unit_stat *u, const char *ptx, size_t size) {
  const char *end = ptx + size, *p = ptx;
  while ((p = strstr(p, ".entry ")) != NULL && p < end) {
    const char *name = p + 7, *next;
    entry_stat *e = find_entry(u, name, strcspn(name, "( \n"));
    next = strstr(name, ".entry ");
    if (!next || next > end) next = end;
    if (e) parse_body(e, name, next);
    p = next;
  }
}

/* ---- compile -------------------------------------------------------------------------------- */

/* Compiles u for sm_<arch> (ptxas's log) and compute_<arch> (the PTX it was built from). */
static kiln_status measure_unit(unit_stat *u, int arch) {
  const kiln_target cubin = {arch, 0, KILN_TARGET_CUBIN}, ptx = {arch, 0, KILN_TARGET_PTX};
  kiln_artifact a;
  kiln_status rc;
  memset(u->e, 0, u->unit->n_entries * sizeof *u->e);
  for (size_t i = 0; i < u->unit->n_entries; i++)
    u->e[i].name = u->unit->entries[i].name;
  rc = kiln_compile_unit(&a, u->unit, &cubin, kiln_build_compile_options());
  if (rc == KILN_OK)
    parse_log(u, a.log);
  else if (a.log && a.log[0])
    fprintf(stderr, "%.4000s\n", a.log); /* NVRTC's reasons (kiln_last_error has the name) */
  kiln_artifact_free(&a);
  if (rc != KILN_OK) return rc;
  rc = kiln_compile_unit(&a, u->unit, &ptx, kiln_build_compile_options());
  if (rc == KILN_OK) parse_ptx(u, (const char *)a.data, a.size);
  kiln_artifact_free(&a);
  return rc;
}

/* ---- output --------------------------------------------------------------------------------- */

/* "16B*4 2B*1": the histogram, widest first; "-" when empty. */
static const char *widths(char *buf, size_t cap, const int *hist, int other) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = N_WIDTHS - 1; i >= 0; i--)
    if (hist[i] && len < cap)
      len += (size_t)snprintf(buf + len, cap - len, "%s%dB*%d", len ? " " : "", 1 << i, hist[i]);
  if (other && len < cap)
    len += (size_t)snprintf(buf + len, cap - len, "%s?*%d", len ? " " : "", other);
  if (!len) snprintf(buf, cap, "-");
  return buf;
}

typedef struct report {
  int json, smoke;
  int first_json; /* no record printed yet */
  int failures;
} report;

static void print_entry(report *r, const sm_limits *lim, const char *unit, const entry_stat *e) {
  const int blocks = e->threads ? occupancy(lim, e->regs, e->smem, e->threads) : -1;
  const int warps = blocks < 0 ? -1 : blocks * ((e->threads + 31) / 32);
  char ld[96], st[96];
  widths(ld, sizeof ld, e->ld, e->ld_other);
  widths(st, sizeof st, e->st, e->st_other);
  if (r->json) {
    printf(
        "%s\n  {\"kind\": \"entry\", \"unit\": \"%s\", \"entry\": \"%s\", \"target\": \"sm_%d\", "
        "\"regs\": %d, \"spill_stores\": %d, \"spill_loads\": %d, \"smem\": %d, "
        "\"threads\": %d, \"blocks_per_sm\": %d, \"warps_per_sm\": %d, \"loads\": \"%s\", "
        "\"stores\": \"%s\", \"barriers\": %d, \"shuffles\": %d}",
        r->first_json ? "" : ",", unit, e->name, lim->arch, e->regs, e->spill_st, e->spill_ld,
        e->smem, e->threads, blocks, warps, ld, st, e->bars, e->shfls);
    r->first_json = 0;
    return;
  }
  {
    char thr[8] = "-", blk[8] = "-", wrp[8] = "-";
    if (e->threads) {
      snprintf(thr, sizeof thr, "%d", e->threads);
      snprintf(blk, sizeof blk, "%d", blocks);
      snprintf(wrp, sizeof wrp, "%d", warps);
    }
    printf("%-50s %4d %5d %6d %4s %3s %3s  %-24s %-14s %3d %4d\n", e->name, e->regs,
           e->spill_st + e->spill_ld, e->smem, thr, blk, wrp, ld, st, e->bars, e->shfls);
  }
}

static void print_entry_header(const report *r, const char *unit, int arch) {
  if (r->json) return;
  printf("\n## %s, sm_%d\n", unit, arch);
  printf("%-50s %4s %5s %6s %4s %3s %3s  %-24s %-14s %3s %4s\n", "entry", "regs", "spill", "smem",
         "thr", "blk", "wrp", "global loads", "global stores", "bar", "shfl");
}

/* ---- softmax launches for training shapes ------------------------------------------------- */

typedef struct sm_shape {
  int b, np, sq, sk;
  int smoke; /* in --smoke's table */
} sm_shape;

/* x [b, np, sq, sk]: Megatron's attention scores per tensor-parallel rank. The last rows' sk is
 * odd on purpose: no vector access is possible there, the scalar path must be picked. */
static const sm_shape k_shapes[] = {
    {4, 16, 128, 128, 0},   {4, 16, 256, 256, 0},    {4, 16, 512, 512, 0},
    {2, 16, 1024, 1024, 1}, {2, 16, 2048, 2048, 0},  {1, 16, 4096, 4096, 0},
    {1, 16, 4096, 8192, 1}, {1, 16, 4096, 16384, 1}, {1, 16, 2048, 32768, 0},
    {2, 16, 1000, 1000, 0}, {1, 16, 4095, 4095, 1},  {1, 16, 4096, 12289, 0},
};

static const entry_stat *find_stat(unit_stat *units, size_t n_units, const char *name) {
  for (size_t u = 0; u < n_units; u++) {
    entry_stat *e = find_entry(&units[u], name, strlen(name));
    if (e) return e;
  }
  return NULL;
}

/* What the fixes of docs/performance.md promise, checked on the picked entry where the rows allow
 * 16-byte vectors (cols a whole number of them; the tensors of a training job are 16-byte
 * aligned): every global access 16 bytes wide, no spills, and two or more resident blocks per
 * SM wherever the row is register resident (through 16384 columns) — but for a block of 1024
 * threads (v16k), which must have its one block of 32 warps: 16384 columns in 512 threads are 32
 * elements each, which spill under the 64 registers that 2 blocks allow (fp32), so v16k holds 16
 * in each of 1024 threads, and its barriers are not overlapped by a second block's work. */
static const char *check(const sm_shape *s, unsigned es, unsigned threads, const entry_stat *e,
                         int blocks) {
  int narrow = e->ld_other + e->st_other;
  if (s->sk % (int)(16 / es) != 0) return "ok (scalar)";
  for (int i = 0; i < 4; i++)
    narrow += e->ld[i] + e->st[i];
  if (narrow) return "FAIL: narrow access";
  if (e->spill_st + e->spill_ld) return "FAIL: spills";
  if (s->sk <= 16384 && blocks < 2 && !(threads == 1024 && blocks == 1)) return "FAIL: 1 block/SM";
  return "ok";
}

static void print_shapes(report *r, unit_stat *units, size_t n_units, const sm_limits *lim) {
  static const struct {
    const char *name;
    unsigned es;
  } dts[] = {{"bf16", 2}, {"f32", 4}};
  if (!r->json) {
    printf("\n## softmax launches, sm_%d: kiln_softmax_pick_launch for x [b, np, sq, sk], "
           "16-byte aligned tensors\n",
           lim->arch);
    printf("%-20s %-4s %-3s %-4s %4s %7s %4s %5s %3s %3s  %-14s %-14s %3s  %s\n", "b,np,sq,sk",
           "dt", "dir", "v", "thr", "grid", "regs", "spill", "blk", "wrp", "global loads",
           "global stores", "bar", "check");
  }
  for (size_t i = 0; i < sizeof k_shapes / sizeof *k_shapes; i++) {
    const sm_shape *s = &k_shapes[i];
    const long long rows = (long long)s->b * s->np * s->sq;
    if (r->smoke && !s->smoke) continue;
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
      for (int bwd = 0; bwd < 2; bwd++) {
        kiln_softmax_launch p;
        char name[128], shape[40], ld[96], st[96];
        const entry_stat *e;
        const char *verdict;
        int blocks;
        if (r->smoke && d > 0) continue;
        if (kiln_softmax_pick_launch(&p, rows, s->sk, dts[d].es, 1) != 0) continue;
        snprintf(name, sizeof name, "kiln_scaled_softmax_%s_%s_%s", bwd ? "bwd" : "fwd",
                 dts[d].name, p.variant);
        if (!(e = find_stat(units, n_units, name))) continue; /* unit not measured */
        blocks = occupancy(lim, e->regs, e->smem, (int)p.block);
        verdict = check(s, dts[d].es, p.block, e, blocks);
        if (strncmp(verdict, "ok", 2) != 0) r->failures++;
        widths(ld, sizeof ld, e->ld, e->ld_other);
        widths(st, sizeof st, e->st, e->st_other);
        snprintf(shape, sizeof shape, "%d,%d,%d,%d", s->b, s->np, s->sq, s->sk);
        if (r->json) {
          printf(
              "%s\n  {\"kind\": \"softmax_launch\", \"shape\": [%d, %d, %d, %d], \"dtype\": "
              "\"%s\", \"direction\": \"%s\", \"target\": \"sm_%d\", \"entry\": \"%s\", "
              "\"block\": %u, \"grid\": %llu, \"regs\": %d, \"spills\": %d, \"blocks_per_sm\": %d, "
              "\"warps_per_sm\": %d, \"loads\": \"%s\", \"stores\": \"%s\", \"barriers\": %d, "
              "\"check\": \"%s\"}",
              r->first_json ? "" : ",", s->b, s->np, s->sq, s->sk, dts[d].name, bwd ? "bwd" : "fwd",
              lim->arch, name, p.block, p.grid, e->regs, e->spill_st + e->spill_ld, blocks,
              blocks * (int)(p.block / 32), ld, st, e->bars, verdict);
          r->first_json = 0;
        } else {
          printf("%-20s %-4s %-3s %-4s %4u %7llu %4d %5d %3d %3d  %-14s %-14s %3d  %s\n", shape,
                 dts[d].name, bwd ? "bwd" : "fwd", p.variant, p.block, p.grid, e->regs,
                 e->spill_st + e->spill_ld, blocks, blocks * (int)(p.block / 32), ld, st, e->bars,
                 verdict);
        }
      }
  }
}

/* ---- main ------------------------------------------------------------------------------------ */

static const char usage[] =
    "usage: static_report [--arch LIST] [--kernels GLOB] [--smoke] [--json]\n"
    "\n"
    "Compiles every kernel unit with NVRTC (no GPU needed) and prints, per entry point and\n"
    "target: registers, spilled bytes, static shared memory, threads per block (its\n"
    "__launch_bounds__), resident blocks and warps per SM by the occupancy calculator's\n"
    "rules, the global loads and stores of its PTX by width (16B*4: four 16-byte accesses)\n"
    "and its barriers (bar: block-wide reductions per row in the row kernels) and warp\n"
    "shuffles. Then the launch kiln picks for a table of softmax training shapes, checked\n"
    "against docs/performance.md (exit status 1 when a check or a compile fails).\n"
    "\n"
    "  --arch LIST     targets' architectures, comma-separated: 80, 90, 100 (default: 90)\n"
    "  --kernels GLOB  unit names to measure (shell glob; default: all)\n"
    "  --smoke         sm_90 only, a few shapes (CI)\n"
    "  --json          one JSON array of records instead of the tables\n"
    "  -h, --help      this help\n";

static int parse_archs(const char *list, int *archs, int cap) {
  int n = 0;
  for (const char *p = list; *p;) {
    char *end = NULL;
    long v;
    if (strncmp(p, "sm_", 3) == 0) p += 3;
    v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || !limits_for((int)v) || n == cap) return -1;
    archs[n++] = (int)v;
    p = *end ? end + 1 : end;
  }
  return n;
}

int main(int argc, char **argv) {
  report r = {0, 0, 1, 0};
  const char *glob = "*", *arch_list = "90";
  int archs[8], n_archs;
  unit_stat *units = NULL;
  size_t n_units = 0;
  int rc = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage, stdout);
      return 0;
    } else if (strcmp(argv[i], "--smoke") == 0) {
      r.smoke = 1;
    } else if (strcmp(argv[i], "--json") == 0) {
      r.json = 1;
    } else if ((strcmp(argv[i], "--arch") == 0 || strcmp(argv[i], "--kernels") == 0) &&
               i + 1 < argc) {
      *(argv[i][2] == 'a' ? &arch_list : &glob) = argv[i + 1];
      i++;
    } else {
      fprintf(stderr, "static_report: unknown or incomplete argument '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (r.smoke) arch_list = "90";
  if ((n_archs = parse_archs(arch_list, archs, 8)) <= 0) {
    fprintf(stderr, "static_report: --arch %s: expected a comma-separated list of 80, 90, 100\n",
            arch_list);
    return 2;
  }
  units = calloc(kiln_unit_count(), sizeof *units);
  if (!units) return 1;
  for (size_t i = 0; i < kiln_unit_count(); i++)
    if (fnmatch(glob, kiln_unit_at(i)->name, 0) == 0) {
      units[n_units].unit = kiln_unit_at(i);
      units[n_units].e = calloc(kiln_unit_at(i)->n_entries, sizeof(entry_stat));
      if (!units[n_units++].e) return 1;
    }
  if (!n_units) {
    fprintf(stderr, "static_report: --kernels %s matches no unit\n", glob);
    return 2;
  }
  if (r.json)
    printf("[");
  else
    printf("# static_report: NVRTC options \"%s\"; occupancy by the calculator's rules (no GPU)\n",
           kiln_build_compile_options());
  for (int a = 0; a < n_archs; a++) {
    const sm_limits *lim = limits_for(archs[a]);
    for (size_t u = 0; u < n_units; u++) {
      if (measure_unit(&units[u], archs[a]) != KILN_OK) {
        fprintf(stderr, "static_report: %s for sm_%d: %s\n", units[u].unit->name, archs[a],
                kiln_last_error());
        rc = 1;
        continue;
      }
      print_entry_header(&r, units[u].unit->name, archs[a]);
      for (size_t e = 0; e < units[u].unit->n_entries; e++) {
        const entry_stat *es = &units[u].e[e];
        if (!es->regs || !es->threads) { /* ptxas or the PTX did not describe it */
          fprintf(stderr, "static_report: %s: no %s for sm_%d\n", es->name,
                  es->regs ? "__launch_bounds__ in its PTX" : "ptxas resource line", archs[a]);
          if (!es->regs) rc = 1;
        }
        print_entry(&r, lim, units[u].unit->name, es);
      }
    }
    print_shapes(&r, units, n_units, lim);
  }
  if (r.json) printf("\n]\n");
  if (r.failures) {
    fprintf(stderr, "static_report: %d softmax launches fail their check\n", r.failures);
    rc = 1;
  }
  for (size_t u = 0; u < n_units; u++)
    free(units[u].e);
  free(units);
  return rc;
}
