/* Internal: which cached artifacts a device can load, best first.
 *
 * Pure logic over records (no driver, no cache), so it is unit-tested on its
 * own: exact CUBIN (sm_XY, then sm_XYa) > CUBIN of the same major with a
 * lower minor (highest first) > PTX compute_VW <= XY whose PTX ISA the
 * driver accepts (highest VW first). Among records of one target the current
 * NVRTC's build is preferred, then the newest toolchain. */
#ifndef KILN_LOADER_SELECT_H
#define KILN_LOADER_SELECT_H

#include <stddef.h>

#include "kiln/cache.h"
#include "kiln/loader.h"

typedef struct kiln_candidate {
  const kiln_record *rec;
  kiln_load_source source; /* EXACT, COMPATIBLE or PTX */
} kiln_candidate;

/* The PTX ISA (x10) a toolchain id such as "nvrtc-13.0" emits; 0 if unknown. */
int kiln_toolchain_ptx_isa(const char *toolchain);

/* The PTX ISA (x10) a PTX text's first ".version A.B" directive (at the start
 * of a line) names, reading at most len bytes; 0 when there is none or it is
 * malformed. What the driver is refused before it sees the text (module.c)
 * and what `kiln check`/`kiln probe` leave out (probes/coverage.c). */
int kiln_ptx_text_isa(const char *ptx, size_t len);

/* Orders the loadable records of recs[0..n) for a device of compute
 * capability cc (e.g. 90) with a driver of CUDA version driver_version (e.g.
 * 12080; it JITs PTX up to kiln_driver_ptx_isa of it, and loads nothing a
 * toolkit of a newer major built) into out (room for n); returns how many. `toolchain` is the
 * current NVRTC's id
 * ("" when there is none). For each record left out, one reason is appended
 * to why ("sm_100: other major; compute_90: PTX 9.0 > driver's 8.7; ..."). */
size_t kiln_select(const kiln_record *recs, size_t n, int cc, int driver_version,
                   const char *toolchain, kiln_candidate *out, char *why, size_t why_cap);

/* Whether a build here helps a device of compute capability cc under a
 * driver of driver_version (0: any): an NVRTC of version nvrtc_major.minor
 * (0.0: none) that can build the archs[0..n_archs) gives a CUBIN sm_<cc>
 * that driver loads. 1 when it does; else 0 with the reason in why (no
 * NVRTC; an NVRTC of a newer CUDA major than the driver; an arch it cannot
 * build). The loader (loader/resolve.c) and `kiln probe`
 * (kiln_probe_can_build) both decide by it. */
int kiln_build_fits(int cc, int driver_version, int nvrtc_major, int nvrtc_minor, const int *archs,
                    size_t n_archs, char *why, size_t why_cap);

#endif
