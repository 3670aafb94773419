/* Artifact selection: what a device can load from the records it has. */
#include "loader/select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/target.h"

int kiln_toolchain_ptx_isa(const char *toolchain) {
  int ma = 0, mi = 0;
  if (!toolchain || sscanf(toolchain, "nvrtc-%d.%d", &ma, &mi) != 2) return 0;
  return kiln_driver_ptx_isa(ma * 1000 + mi * 10);
}

int kiln_ptx_text_isa(const char *ptx, size_t len) {
  static const char dir[] = ".version";
  for (size_t i = 0; i < len; i++) {
    int a = 0, b = 0, digits = 0;
    size_t j;
    if ((i && ptx[i - 1] != '\n') || len - i < sizeof dir ||
        memcmp(ptx + i, dir, sizeof dir - 1) != 0)
      continue;
    j = i + sizeof dir - 1;
    if (ptx[j] != ' ' && ptx[j] != '\t') continue;
    while (j < len && (ptx[j] == ' ' || ptx[j] == '\t'))
      j++;
    for (; j < len && ptx[j] >= '0' && ptx[j] <= '9' && a < 100; j++, digits++)
      a = a * 10 + (ptx[j] - '0');
    if (!digits || j >= len || ptx[j++] != '.') return 0;
    for (digits = 0; j < len && ptx[j] >= '0' && ptx[j] <= '9' && b < 10; j++, digits++)
      b = b * 10 + (ptx[j] - '0');
    return digits == 1 ? a * 10 + b : 0;
  }
  return 0;
}

static void note(char *why, size_t cap, const char *fmt, const char *target, int a, int b) {
  size_t len = why ? strlen(why) : 0;
  if (!why || len + 2 >= cap) return;
  if (len) len += (size_t)snprintf(why + len, cap - len, "; ");
  if (len < cap) {
    int n = snprintf(why + len, cap - len, "%s: ", target);
    if (n > 0 && len + (size_t)n < cap)
      snprintf(why + len + n, cap - len - n, fmt, a / 10, a % 10, b / 10, b % 10);
  }
}

typedef struct ranked {
  kiln_candidate c;
  int tier; /* 0 exact plain, 1 exact arch-specific, 2 compatible, 3 PTX */
  int arch;
  int toolchain; /* 1: the current NVRTC built it */
  int isa;       /* of the toolchain, as a proxy for its age */
} ranked;

static int cmp_ranked(const void *pa, const void *pb) {
  const ranked *a = pa, *b = pb;
  if (a->tier != b->tier) return a->tier - b->tier;
  if (a->arch != b->arch) return b->arch - a->arch;
  if (a->toolchain != b->toolchain) return b->toolchain - a->toolchain;
  if (a->isa != b->isa) return b->isa - a->isa;
  return a->c.rec->layer - b->c.rec->layer;
}

size_t kiln_select(const kiln_record *recs, size_t n, int cc, int driver_version,
                   const char *toolchain, kiln_candidate *out, char *why, size_t why_cap) {
  ranked *r = calloc(n ? n : 1, sizeof *r);
  int driver_isa = kiln_driver_ptx_isa(driver_version), driver_major = driver_version / 1000;
  size_t m = 0;
  if (why && why_cap) why[0] = '\0';
  if (!r) return 0;
  for (size_t i = 0; i < n; i++) {
    kiln_target t;
    ranked *x = &r[m];
    if (kiln_target_parse(&t, recs[i].target) != KILN_OK) continue;
    x->c.rec = &recs[i];
    x->arch = t.arch;
    x->isa = kiln_toolchain_ptx_isa(recs[i].toolchain);
    x->toolchain = toolchain && strcmp(toolchain, recs[i].toolchain) == 0;
    {
      int tma = 0, tmi = 0;
      /* A CUDA X toolkit's output needs a driver of major X or newer. */
      if (sscanf(recs[i].toolchain, "nvrtc-%d.%d", &tma, &tmi) == 2 && tma > driver_major) {
        note(why, why_cap, "built by CUDA %d.%d, newer than the driver (%d.%d)", recs[i].target,
             tma * 10 + tmi, driver_major * 10 + driver_version % 1000 / 10);
        continue;
      }
    }
    if (t.kind == KILN_TARGET_CUBIN) {
      if (t.arch == cc) {
        x->tier = t.arch_specific ? 1 : 0;
        x->c.source = KILN_LOAD_EXACT;
      } else if (!t.arch_specific && t.arch / 10 == cc / 10 && t.arch < cc) {
        x->tier = 2;
        x->c.source = KILN_LOAD_COMPATIBLE;
      } else {
        note(why, why_cap,
             t.arch / 10 != cc / 10 ? "CUBIN for %d.%d cannot run on %d.%d (another major)"
                                    : "CUBIN for %d.%d cannot run on %d.%d",
             recs[i].target, t.arch, cc);
        continue;
      }
    } else {
      if (t.arch > cc) {
        note(why, why_cap, "PTX for %d.%d is newer than the GPU's %d.%d", recs[i].target, t.arch,
             cc);
        continue;
      }
      if (x->isa && x->isa > driver_isa) {
        note(why, why_cap, "PTX ISA %d.%d is newer than the driver accepts (%d.%d)", recs[i].target,
             x->isa, driver_isa);
        continue;
      }
      x->tier = 3;
      x->c.source = KILN_LOAD_PTX;
    }
    m++;
  }
  qsort(r, m, sizeof *r, cmp_ranked);
  for (size_t i = 0; i < m; i++)
    out[i] = r[i].c;
  free(r);
  return m;
}

int kiln_build_fits(int cc, int driver_version, int nvrtc_major, int nvrtc_minor, const int *archs,
                    size_t n_archs, char *why, size_t why_cap) {
  int supported = 0;
  if (why && why_cap) why[0] = '\0';
  if (!nvrtc_major) {
    if (why) snprintf(why, why_cap, "no NVRTC to build with");
    return 0;
  }
  if (driver_version && nvrtc_major > driver_version / 1000) {
    if (why)
      snprintf(why, why_cap,
               "NVRTC %d.%d builds code that this driver (CUDA %d.%d) cannot load: update the "
               "NVIDIA driver, or point KILN_NVRTC_LIBRARY at an NVRTC %d.x",
               nvrtc_major, nvrtc_minor, driver_version / 1000, driver_version % 1000 / 10,
               driver_version / 1000);
    return 0;
  }
  for (size_t i = 0; i < n_archs; i++)
    supported |= archs[i] == cc;
  if (!supported) {
    if (why)
      snprintf(why, why_cap, "NVRTC %d.%d cannot build for sm_%d (a newer CUDA toolkit can)",
               nvrtc_major, nvrtc_minor, cc);
    return 0;
  }
  return 1;
}
