/* Target names and arch lists ("80,90", "sm_90,compute_80", "90+ptx", "all"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "kiln/target.h"

const char *kiln_target_name(const kiln_target *t, char out[16]) {
  snprintf(out, 16, "%s_%d%s", t->kind == KILN_TARGET_PTX ? "compute" : "sm", t->arch,
           t->arch_specific ? "a" : "");
  return out;
}

static int parse_arch_number(const char *s, int *arch, int *specific) {
  char *end = NULL;
  long v;
  if (*s < '0' || *s > '9') return -1;
  v = strtol(s, &end, 10);
  *specific = 0;
  if (*end == 'a') {
    *specific = 1;
    end++;
  }
  if (*end || v < 10 || v > 999) return -1;
  *arch = (int)v;
  return 0;
}

kiln_status kiln_target_parse(kiln_target *out, const char *s) {
  kiln_target t = {0, 0, KILN_TARGET_CUBIN};
  const char *num = s;
  if (strncmp(s, "sm_", 3) == 0)
    num = s + 3;
  else if (strncmp(s, "compute_", 8) == 0) {
    num = s + 8;
    t.kind = KILN_TARGET_PTX;
  }
  if (parse_arch_number(num, &t.arch, &t.arch_specific) != 0 ||
      (t.kind == KILN_TARGET_PTX && t.arch_specific))
    return kiln_fail(KILN_EINVAL,
                     "'%s' is not a target: use 90, 90+ptx, sm_90, sm_90a or compute_90 "
                     "(or 'all')",
                     s);
  *out = t;
  return KILN_OK;
}

static int cmp_target(const void *a, const void *b) {
  const kiln_target *x = a, *y = b;
  if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
  if (x->arch != y->arch) return x->arch - y->arch;
  return x->arch_specific - y->arch_specific;
}

static int is_supported(const int *archs, size_t n, int arch) {
  for (size_t i = 0; i < n; i++)
    if (archs[i] == arch) return 1;
  return 0;
}

static kiln_status unsupported(const char *what, const int *archs, size_t n) {
  char list[512] = "";
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    if (archs[i] < KILN_MIN_ARCH) continue;
    int w = snprintf(list + len, sizeof list - len, "%s%d", len ? "," : "", archs[i]);
    if (w < 0 || (size_t)w >= sizeof list - len) break;
    len += (size_t)w;
  }
  return kiln_fail(KILN_EUNSUPPORTED,
                   "unsupported arch %s: this NVRTC builds %s (as sm_XY, compute_XY or "
                   "XY+ptx), or use --arch all",
                   what, list);
}

static kiln_status push(kiln_target **v, size_t *n, size_t *cap, kiln_target t) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    kiln_target *nv = realloc(*v, nc * sizeof *nv);
    if (!nv) return kiln_fail(KILN_ENOMEM, "out of memory");
    *v = nv;
    *cap = nc;
  }
  (*v)[(*n)++] = t;
  return KILN_OK;
}

static kiln_status add_all(kiln_target **v, size_t *n, size_t *cap, const int *archs, size_t na) {
  kiln_status rc = KILN_OK;
  int lo = 0, hi = 0;
  for (size_t i = 0; i < na && rc == KILN_OK; i++) {
    if (archs[i] < KILN_MIN_ARCH) continue;
    if (!lo || archs[i] < lo) lo = archs[i];
    if (archs[i] > hi) hi = archs[i];
    rc = push(v, n, cap, (kiln_target){archs[i], 0, KILN_TARGET_CUBIN});
  }
  if (rc == KILN_OK && lo) rc = push(v, n, cap, (kiln_target){lo, 0, KILN_TARGET_PTX});
  if (rc == KILN_OK && hi && hi != lo) rc = push(v, n, cap, (kiln_target){hi, 0, KILN_TARGET_PTX});
  return rc;
}

kiln_status kiln_targets_parse_list(kiln_target **out, size_t *out_n, const char *list) {
  kiln_target *v = NULL;
  size_t n = 0, cap = 0, na = 0;
  int *archs = NULL;
  char *copy = NULL, *save = NULL, *tok;
  kiln_status rc;
  if (!list || !*list) return kiln_fail(KILN_EINVAL, "empty arch list: use e.g. 80,90 or all");
  KILN_CHECK(kiln_nvrtc_supported_archs(&archs, &na));
  copy = strdup(list);
  if (!copy) {
    rc = kiln_fail(KILN_ENOMEM, "out of memory");
    goto out;
  }
  for (tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    kiln_target t;
    char *plus = strchr(tok, '+');
    int with_ptx = 0;
    if (strcasecmp(tok, "all") == 0) {
      KILN_CHECK(add_all(&v, &n, &cap, archs, na));
      continue;
    }
    if (plus) {
      if (strcasecmp(plus, "+ptx") != 0) {
        rc = kiln_fail(KILN_EINVAL, "'%s': the only suffix is +ptx (e.g. 90+ptx)", tok);
        goto out;
      }
      *plus = '\0';
      with_ptx = 1;
    }
    KILN_CHECK(kiln_target_parse(&t, tok));
    if (t.arch < KILN_MIN_ARCH || !is_supported(archs, na, t.arch)) {
      rc = unsupported(tok, archs, na);
      goto out;
    }
    if (t.arch_specific && t.arch < 90) {
      rc = kiln_fail(KILN_EUNSUPPORTED, "'%s': arch-specific targets exist from sm_90a up", tok);
      goto out;
    }
    KILN_CHECK(push(&v, &n, &cap, t));
    if (with_ptx) KILN_CHECK(push(&v, &n, &cap, (kiln_target){t.arch, 0, KILN_TARGET_PTX}));
  }
  if (n == 0) {
    rc = kiln_fail(KILN_EINVAL, "empty arch list '%s': use e.g. 80,90 or all", list);
    goto out;
  }
  qsort(v, n, sizeof *v, cmp_target);
  {
    size_t w = 1;
    for (size_t i = 1; i < n; i++)
      if (cmp_target(&v[i], &v[w - 1]) != 0) v[w++] = v[i];
    n = w;
  }
  *out = v;
  *out_n = n;
  v = NULL;
out:
  free(v);
  free(copy);
  free(archs);
  return rc;
}
