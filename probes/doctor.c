/* kiln doctor: checks of the driver, NVRTC, the caches, leases, quarantine,
 * KILN_OFFLINE and the remote, each PASS / WARN / FAIL / SKIP with a fix.
 * Read-only: the cache is opened read-only (nothing created, migrated or
 * written), the index only read. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cache/lease.h"
#include "cache/remote/remote.h" /* kiln_remote_probe_upload */
#include "cache/store.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/fstype.h"
#include "common/params.h"
#include "kiln/remote.h"
#include "probes/doctor.h"

#define MAX_GPU_ARCHS 16
#define FULL_BUILD_BYTES (256ull << 20) /* about a full `kiln build --arch all` */
#define MIN_FREE_BYTES (16ull << 20)

typedef struct doctor_ctx {
  kiln_doctor_report *r;
  const kiln_doctor_options *o;
  char dir[4096];        /* the primary directory */
  char moved_from[4096]; /* the default dir replaced by a node-local one, or "" */
  char layers[8192];     /* the read-only layers, colon-separated */
  kiln_cache *cache;     /* NULL when it cannot be opened: */
  kiln_status open_rc;
  char open_error[1024]; /* why */
  int n_gpus, driver;    /* driver: CUDA version, 0 with no driver */
  kiln_target archs[MAX_GPU_ARCHS];
  size_t n_archs;
  int nvrtc;
  char remote_error[512]; /* the cache opened only without its remote: why */
} doctor_ctx;

static const char *const status_names[] = {"PASS", "WARN", "FAIL", "SKIP"};

const char *kiln_doctor_status_str(kiln_doctor_status s) {
  return (unsigned)s < 4 ? status_names[s] : "?";
}

void doctor_add(kiln_doctor_report *r, const char *id, kiln_doctor_status st, const char *fix,
                const char *fmt, ...) {
  kiln_doctor_check *c, *grown;
  va_list ap;
  if (!(grown = realloc(r->checks, (r->n_checks + 1) * sizeof *r->checks))) return;
  r->checks = grown;
  c = &r->checks[r->n_checks++];
  memset(c, 0, sizeof *c);
  snprintf(c->id, sizeof c->id, "%s", id);
  c->status = st;
  va_start(ap, fmt);
  vsnprintf(c->summary, sizeof c->summary, fmt, ap);
  va_end(ap);
  snprintf(c->fix, sizeof c->fix, "%s",
           fix && st != KILN_DOCTOR_PASS && st != KILN_DOCTOR_SKIP ? fix : "");
  r->counts[st]++;
}

static void check_driver(doctor_ctx *x) {
  char archs[256] = "";
  size_t n = 0;
  kiln_device_info d = {0};
  kiln_status st = kiln_device_count(&x->n_gpus);
  if (st != KILN_OK || x->n_gpus == 0) {
    /* A build machine (a container build, CI) has no driver and needs none. */
    doctor_add(x->r, "driver", KILN_DOCTOR_SKIP, NULL,
               "no CUDA driver or GPU (%s): fine for building; GPU checks skipped",
               st != KILN_OK ? kiln_last_error() : "the driver reports no device");
    x->n_gpus = 0;
    return;
  }
  for (int i = 0; i < x->n_gpus; i++) {
    int dup = 0;
    if (kiln_device_get_info(&d, i) != KILN_OK) continue;
    if (!x->driver || d.driver_version < x->driver) x->driver = d.driver_version;
    for (size_t k = 0; k < x->n_archs; k++)
      dup |= x->archs[k].arch == d.cc_major * 10 + d.cc_minor;
    if (dup || x->n_archs == MAX_GPU_ARCHS) continue;
    x->archs[x->n_archs++] = (kiln_target){d.cc_major * 10 + d.cc_minor, 0, KILN_TARGET_CUBIN};
    n += (size_t)snprintf(archs + n, sizeof archs - n, "%ssm_%d", n ? ", " : "",
                          d.cc_major * 10 + d.cc_minor);
  }
  doctor_add(x->r, "driver", KILN_DOCTOR_PASS, NULL,
             "CUDA driver %d.%d (PTX ISA up to %d.%d), %d GPU(s): %s", x->driver / 1000,
             x->driver % 1000 / 10, kiln_driver_ptx_isa(x->driver) / 10,
             kiln_driver_ptx_isa(x->driver) % 10, x->n_gpus, archs);
}

/* Units with no loadable artifact on some GPU here (driver 0: any driver),
 * listed into names; -1 when coverage cannot be computed. */
static long missing_units(doctor_ctx *x, int driver, char *names, size_t cap) {
  kiln_coverage *c = NULL;
  size_t n = 0;
  long missing;
  if (names) names[0] = '\0';
  if (!x->cache || !x->n_archs ||
      kiln_coverage_check(&c, x->cache, x->archs, x->n_archs, NULL, driver) != KILN_OK)
    return -1;
  missing = (long)c->missing;
  for (size_t i = 0; names && i < c->n_items && n < cap; i++)
    if (c->items[i].source == KILN_LOAD_NONE)
      n += (size_t)snprintf(names + n, cap - n, "%s%s/%s", n ? ", " : "", c->items[i].unit->name,
                            c->items[i].target);
  kiln_coverage_free(c);
  return missing;
}

static void check_nvrtc(doctor_ctx *x) {
  int ma = 0, mi = 0;
  long missing;
  char names[512];
  x->nvrtc = kiln_nvrtc_version(&ma, &mi) == KILN_OK;
  if (x->nvrtc) {
    doctor_add(x->r, "nvrtc", KILN_DOCTOR_PASS, NULL, "NVRTC %d.%d", ma, mi);
    return;
  }
  missing = missing_units(x, x->driver, names, sizeof names);
  if (missing > 0)
    doctor_add(x->r, "nvrtc", KILN_DOCTOR_FAIL,
               "install NVRTC or set KILN_NVRTC_LIBRARY, or ship the artifacts: `kiln build --arch "
               "N` in the image",
               "NVRTC not loadable and %ld unit(s) have no artifact for this machine's GPUs (%s): "
               "would fail at start-up: nothing to build with",
               missing, names);
  else if (missing == 0) /* a production image need not ship NVRTC */
    doctor_add(
        x->r, "nvrtc", KILN_DOCTOR_PASS, NULL,
        "NVRTC not loadable, not needed: the caches cover every unit on this machine's GPUs");
  else
    doctor_add(
        x->r, "nvrtc", KILN_DOCTOR_WARN,
        "install NVRTC or set KILN_NVRTC_LIBRARY (not needed where the caches cover every GPU)",
        "NVRTC not loadable (%s): nothing can be built here", kiln_last_error());
}

/* "nvrtc-13.0" -> 13000; 0 when unknown. */
static int toolchain_cuda(const char *t) {
  int ma = 0, mi = 0;
  return sscanf(t, "nvrtc-%d.%d", &ma, &mi) == 2 ? ma * 1000 + mi * 10 : 0;
}

static void check_driver_artifacts(doctor_ctx *x) {
  kiln_record *recs = NULL;
  size_t n = 0, newer = 0;
  char names[512], fix[512];
  long lost;
  if (!x->n_gpus || !x->cache) {
    doctor_add(x->r, "driver_artifacts", KILN_DOCTOR_SKIP, NULL,
               !x->n_gpus ? "no driver to compare the artifacts with" : "no cache to read");
    return;
  }
  if (kiln_cache_list(&recs, &n, x->cache) == KILN_OK)
    for (size_t i = 0; i < n; i++)
      newer += toolchain_cuda(recs[i].toolchain) > x->driver;
  free(recs);
  snprintf(fix, sizeof fix,
           "update the driver to CUDA %s or newer, or rebuild with an NVRTC no newer than the "
           "driver (KILN_NVRTC_LIBRARY=.../libnvrtc.so.%d) and `kiln build --rebuild`",
           "the toolkit's", x->driver / 1000);
  /* Loadable with any driver but not with this one: the driver is too old. */
  lost = missing_units(x, x->driver, names, sizeof names) - missing_units(x, 0, NULL, 0);
  if (lost > 0)
    doctor_add(x->r, "driver_artifacts", KILN_DOCTOR_FAIL, fix,
               "driver CUDA %d.%d too old: %ld (unit, GPU) pair(s) have only artifacts it cannot "
               "load (%s)",
               x->driver / 1000, x->driver % 1000 / 10, lost, names);
  else if (newer)
    doctor_add(x->r, "driver_artifacts", KILN_DOCTOR_WARN, fix,
               "%zu of %zu records were built by an NVRTC newer than driver CUDA %d.%d (unused: "
               "other artifacts load)",
               newer, n, x->driver / 1000, x->driver % 1000 / 10);
  else
    doctor_add(x->r, "driver_artifacts", KILN_DOCTOR_PASS, NULL,
               "driver CUDA %d.%d can load every artifact in the caches (%zu records)",
               x->driver / 1000, x->driver % 1000 / 10, n);
}

static void check_cache_dir(doctor_ctx *x) {
  struct stat st;
  char fix[8400];
  const char *p = x->dir;
  if (stat(p, &st) != 0) {
    if (errno == ENOENT)
      doctor_add(x->r, "cache_dir", KILN_DOCTOR_PASS, NULL,
                 "%s does not exist yet: the first build creates it (0700)", p);
    else
      doctor_add(x->r, "cache_dir", KILN_DOCTOR_FAIL, "set KILN_CACHE_DIR to a directory you own",
                 "%s: %s", p, strerror(errno));
    return;
  }
  if (st.st_uid != geteuid()) {
    snprintf(fix, sizeof fix, "`chown -R %u %s`, or set KILN_CACHE_DIR to a directory you own",
             (unsigned)geteuid(), p);
    doctor_add(x->r, "cache_dir", KILN_DOCTOR_FAIL, fix,
               "%s is owned by uid %u, not this user (uid %u): kiln refuses it", p,
               (unsigned)st.st_uid, (unsigned)geteuid());
  } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(fix, sizeof fix, "`chmod 700 %s`", p);
    doctor_add(x->r, "cache_dir", KILN_DOCTOR_FAIL, fix,
               "%s is writable by group or others (mode %03o): kiln refuses it", p,
               (unsigned)(st.st_mode & 0777));
  } else if (access(p, W_OK | X_OK) != 0) {
    snprintf(fix, sizeof fix, "`chmod u+rwx %s`, or set KILN_CACHE_DIR", p);
    doctor_add(x->r, "cache_dir", KILN_DOCTOR_FAIL, fix, "%s is not writable: %s", p,
               strerror(errno));
  } else if (!x->cache) {
    if (x->open_rc == KILN_ECORRUPT)
      snprintf(fix, sizeof fix,
               "`kiln cache verify --repair --cache %s` while no kiln process uses the cache "
               "(it keeps every record it can still read)",
               p);
    else if (x->open_rc == KILN_EUNSUPPORTED)
      snprintf(fix, sizeof fix, "upgrade kiln, or use another cache directory (KILN_CACHE_DIR)");
    else if (x->open_rc == KILN_EINVAL)
      snprintf(fix, sizeof fix, "name a new or empty directory, or a kiln cache (KILN_CACHE_DIR)");
    else
      snprintf(fix, sizeof fix, "fix what the message names, or move %s aside", p);
    doctor_add(x->r, "cache_dir", KILN_DOCTOR_FAIL, fix, "%s cannot be opened: %s", p,
               x->open_error);
  } else {
    char layers[1024] = "", index[4200];
    size_t n = 0, bad = 0;
    snprintf(index, sizeof index, "%s/index.sqlite", p);
    if (access(index, F_OK) != 0)
      n = (size_t)snprintf(layers, sizeof layers,
                           ": no cache in it yet (the first build makes one)");
    for (size_t i = 0; i < x->cache->n_layers; i++) {
      int ok = access(x->cache->layers[i].dir, R_OK | X_OK) == 0;
      bad += !ok;
      n += (size_t)snprintf(layers + n, sizeof layers - n, "; layer %zu %s%s", i + 1,
                            x->cache->layers[i].dir, ok ? " (read-only)" : " (unreadable)");
      if (n >= sizeof layers) n = sizeof layers - 1;
    }
    size_t untrusted = 0;
    for (size_t i = 0; i < x->cache->n_skipped; i++) {
      untrusted += x->cache->skipped[i].untrusted;
      n += (size_t)snprintf(layers + n, sizeof layers - n, "; layer %s skipped: %s",
                            x->cache->skipped[i].dir, x->cache->skipped[i].why);
      if (n >= sizeof layers) n = sizeof layers - 1;
    }
    if (untrusted)
      doctor_add(x->r, "cache_dir", KILN_DOCTOR_FAIL,
                 "`chown` the layer to you or root and `chmod go-w` it (directory, index.sqlite, "
                 "cas/), or drop it from KILN_CACHE_PATH",
                 "%s (0%03o, yours)%s", p, (unsigned)(st.st_mode & 0777), layers);
    else
      doctor_add(x->r, "cache_dir",
                 bad || x->cache->n_skipped ? KILN_DOCTOR_WARN : KILN_DOCTOR_PASS,
                 "make the layer readable or drop it from KILN_CACHE_PATH", "%s (0%03o, yours)%s",
                 p, (unsigned)(st.st_mode & 0777), layers);
  }
}

static void check_disk_space(doctor_ctx *x) {
  struct statvfs v;
  char path[4096], fix[8400], sz[2][32];
  unsigned long long avail;
  snprintf(path, sizeof path, "%s", x->dir);
  while (statvfs(path, &v) != 0) { /* not created yet: its nearest parent */
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) {
      snprintf(path, sizeof path, "/");
      if (statvfs(path, &v) != 0) return;
      break;
    }
    *slash = '\0';
  }
  avail = (unsigned long long)v.f_bavail * v.f_frsize;
  snprintf(sz[0], sizeof sz[0], "%.1f MiB", (double)avail / (1 << 20));
  snprintf(sz[1], sizeof sz[1], "%llu MiB", FULL_BUILD_BYTES >> 20);
  snprintf(fix, sizeof fix,
           "free space on %s's file system, or shrink the cache: `kiln cache gc --max-size 1G "
           "--cache %s`",
           x->dir, x->dir);
  if (avail < MIN_FREE_BYTES)
    doctor_add(x->r, "disk_space", KILN_DOCTOR_FAIL, fix,
               "%s free on %s: builds would fail to store their artifacts", sz[0], path);
  else if (avail < FULL_BUILD_BYTES)
    doctor_add(x->r, "disk_space", KILN_DOCTOR_WARN, fix,
               "%s free on %s: less than a full `kiln build --arch all` (about %s)", sz[0], path,
               sz[1]);
  else
    doctor_add(x->r, "disk_space", KILN_DOCTOR_PASS, NULL, "%s free on %s", sz[0], path);
}

static void check_leases(doctor_ctx *x) {
  kiln_lease_info *leases = NULL;
  double stale_s = 30;
  int64_t now = kiln_wall_ms();
  char list[768] = "", fix[512];
  size_t n = 0, stale = 0, live = 0, n_leases = 0;
  if (!x->cache) {
    doctor_add(x->r, "leases", KILN_DOCTOR_SKIP, NULL, "no cache to read");
    return;
  }
  kiln_param_lease_stale_s(&stale_s);
  if (kiln_lease_list(&leases, &n_leases, x->cache) != KILN_OK) {
    doctor_add(x->r, "leases", KILN_DOCTOR_WARN, "`kiln cache verify`", "cannot read leases: %s",
               kiln_last_error());
    return;
  }
  for (size_t i = 0; i < n_leases; i++) {
    const kiln_lease_info *l = &leases[i];
    const int ahead = l->heartbeat_ms - now > (int64_t)(stale_s * 1000);
    if (!l->gone && !kiln_lease_heartbeat_stale(now, l->heartbeat_ms, (int64_t)(stale_s * 1000))) {
      live++;
      continue;
    }
    stale++;
    if (n < sizeof list)
      n += (size_t)snprintf(list + n, sizeof list - n, "%s%s/%s held by %s pid %ld (%s)",
                            n ? ", " : "", l->unit, l->target, l->host, l->pid,
                            l->gone ? "gone"
                            : ahead ? "heartbeat in the future: that host's clock runs ahead"
                                    : "no heartbeat for a while");
  }
  free(leases);
  snprintf(fix, sizeof fix,
           "nothing to do: the next build of the unit takes a stale lease over (after "
           "KILN_LEASE_STALE=%.0f s, at once for a holder gone on this host); no command clears "
           "them",
           stale_s);
  if (stale)
    doctor_add(x->r, "leases", KILN_DOCTOR_WARN, fix, "%zu stale build lease(s): %s", stale, list);
  else
    doctor_add(x->r, "leases", KILN_DOCTOR_PASS, NULL, "%zu build(s) in progress, no stale lease",
               live);
}

/* Keys imported with another digest than the cache held (kiln cache import). */
static void check_conflicts(doctor_ctx *x) {
  kiln_cache_conflict *k = NULL;
  size_t n = 0;
  if (!x->cache) {
    doctor_add(x->r, "conflicts", KILN_DOCTOR_SKIP, NULL, "no cache to read");
    return;
  }
  if (kiln_cache_conflicts(&k, &n, x->cache) != KILN_OK) {
    doctor_add(x->r, "conflicts", KILN_DOCTOR_WARN, "run `kiln cache verify`",
               "the conflicts table cannot be read: %s", kiln_last_error());
    return;
  }
  if (n)
    doctor_add(x->r, "conflicts", KILN_DOCTOR_WARN,
               "find which build differs (KILN_NVRTC_OPTIONS, kernel sources, NVRTC) and rebuild "
               "it; `kiln cache stats` counts them",
               "%zu key(s) arrived by `kiln cache import` with another digest than the cache "
               "holds (kept the cache's; the last: %s %s from %s): a build that is not "
               "reproducible, or writers colliding on one name",
               n, k[n - 1].unit, k[n - 1].target, k[n - 1].source);
  else
    doctor_add(x->r, "conflicts", KILN_DOCTOR_PASS, NULL, "no reproducibility conflicts");
  free(k);
}

static void check_quarantine(doctor_ctx *x) {
  DIR *d;
  struct dirent *e;
  size_t n = 0;
  char fix[8800];
  if (!x->cache) {
    doctor_add(x->r, "quarantine", KILN_DOCTOR_SKIP, NULL, "no cache to read");
    return;
  }
  if ((d = opendir(x->cache->quarantine_dir))) {
    while ((e = readdir(d)))
      n += e->d_name[0] != '.';
    closedir(d);
  }
  snprintf(fix, sizeof fix,
           "see why in the log (KILN_LOG=info) and `kiln cache verify --cache %s`; the files in %s "
           "are kept for inspection and may be deleted",
           x->dir, x->cache->quarantine_dir);
  if (n)
    doctor_add(x->r, "quarantine", KILN_DOCTOR_WARN, fix,
               "%zu blob(s) quarantined (corrupt, or refused by the driver) in %s", n,
               x->cache->quarantine_dir);
  else
    doctor_add(x->r, "quarantine", KILN_DOCTOR_PASS, NULL, "nothing quarantined");
}

static void check_offline(doctor_ctx *x) {
  int offline = 0;
  long missing;
  char names[512], fix[640];
  if (kiln_probe_offline(&offline) != KILN_OK) {
    doctor_add(x->r, "offline", KILN_DOCTOR_FAIL, "set KILN_OFFLINE=0 or KILN_OFFLINE=1",
               "KILN_OFFLINE='%s' is malformed: the loader refuses to start",
               kiln_param_raw(KILN_P_offline) ? kiln_param_raw(KILN_P_offline) : "");
    return;
  }
  if (!offline) {
    doctor_add(x->r, "offline", KILN_DOCTOR_PASS, NULL,
               "not offline: a missing kernel is built on first use");
    return;
  }
  missing = missing_units(x, x->driver, names, sizeof names);
  if (missing > 0) {
    snprintf(fix, sizeof fix, "`kiln build --arch %d` in the image, or unset KILN_OFFLINE",
             x->archs[0].arch);
    doctor_add(x->r, "offline", KILN_DOCTOR_FAIL, fix,
               "KILN_OFFLINE=1 and %ld (unit, GPU) pair(s) have no loadable artifact: %s", missing,
               names);
  } else if (missing == 0)
    doctor_add(x->r, "offline", KILN_DOCTOR_PASS, NULL,
               "KILN_OFFLINE=1 and every unit is covered on this machine's GPUs");
  else
    doctor_add(x->r, "offline", KILN_DOCTOR_SKIP, NULL,
               "KILN_OFFLINE=1; no GPU or cache here to check coverage against");
}

static void check_remote(doctor_ctx *x) {
  kiln_remote_check_result res;
  char extra[900], fix[900], fs[200];
  const char *creds;
  int is_file;
  if (!x->cache && kiln_param_remote_url()) {
    doctor_add(x->r, "remote", KILN_DOCTOR_SKIP, NULL,
               "remote %s not checked: no cache open here (see cache_dir)",
               kiln_param_remote_url());
    return;
  }
  if (x->remote_error[0]) {
    doctor_add(x->r, "remote", KILN_DOCTOR_FAIL,
               "fix the KILN_REMOTE_* setting named (docs/remote-cache.md)",
               "remote %s cannot be attached: %s", kiln_param_remote_url(), x->remote_error);
    return;
  }
  if (!x->cache || !kiln_cache_remote_url(x->cache)) {
    doctor_add(x->r, "remote", KILN_DOCTOR_SKIP, NULL, "no remote configured (KILN_REMOTE_URL)");
    return;
  }
  memset(&res, 0, sizeof res);
  kiln_remote_check(&res, x->cache);
  /* an s3:// remote's credentials: where they came from, never what they are */
  creds = kiln_remote_credentials(x->cache->remote);
  is_file = strncmp(kiln_cache_remote_url(x->cache), "file://", 7) == 0;
  fs[0] = '\0';
  if (is_file) { /* a directory: which file system, and whether other hosts see it */
    char dir[4096], desc[96];
    kiln_fs_info fi;
    if (kiln_file_url_path(kiln_cache_remote_url(x->cache), dir, sizeof dir) == KILN_OK &&
        kiln_fs_probe(dir, &fi) == KILN_OK)
      snprintf(fs, sizeof fs, "; on %s (%s)", kiln_fs_describe(&fi, desc, sizeof desc),
               fi.shared ? "shared between hosts"
                         : "local to this host: other hosts do not see it");
  }
  snprintf(extra, sizeof extra, "%s%.640s%srecords %s, upload %s%s", creds ? "credentials: " : "",
           creds ? creds : "", creds ? "; " : "",
           res.signing ? "signature-checked (KILN_REMOTE_HMAC_KEY_FILE)" : "not signed",
           res.upload ? "on" : "off (read-only use; KILN_REMOTE_UPLOAD=1 checks an upload lands)",
           fs);
  if (!res.reachable)
    doctor_add(
        x->r, "remote", KILN_DOCTOR_FAIL,
        is_file ? "check KILN_REMOTE_URL, and that the file system is mounted here and the "
                  "directory exists (kiln never creates it)"
        : creds ? "check KILN_REMOTE_URL (s3://BUCKET/PREFIX: the bucket must exist), "
                  "KILN_S3_ENDPOINT, AWS_REGION and that the server is up"
                : "check KILN_REMOTE_URL and that the server is up (KILN_REMOTE_CONNECT_TIMEOUT)",
        "remote %s unreachable: %s", kiln_cache_remote_url(x->cache), res.detail);
  else if (!res.authorized) {
    if (creds)
      snprintf(fix, sizeof fix,
               "check the AWS credentials (%.640s), this host's clock, and that a policy lets "
               "them read the bucket (docs/remote-cache.md, \"S3\")",
               creds);
    doctor_add(x->r, "remote", KILN_DOCTOR_FAIL,
               is_file ? "let this user read the directory and its ac/ and cas/"
               : creds ? fix
                       : "check the token: KILN_REMOTE_TOKEN_FILE, or the host's entry in ~/.netrc",
               "remote %s refused (HTTP %ld): %s", kiln_cache_remote_url(x->cache), res.http_status,
               res.detail);
  } else if (res.upload && kiln_remote_probe_upload(x->cache) != KILN_OK)
    doctor_add(x->r, "remote", KILN_DOCTOR_FAIL,
               is_file ? "let this user write the directory and its ac/ and cas/ (a group-writable "
                         "umask, or a setgid directory), move away what the error names, or turn "
                         "uploads off"
               : creds ? "let the credentials write and delete under the prefix (s3:PutObject, "
                         "s3:DeleteObject), or turn uploads off"
                       : "let the token write (KILN_REMOTE_TOKEN_FILE), or make the server accept "
                         "PUT and MKCOL under the base URL (docs/remote-cache.md), or turn "
                         "uploads off",
               "remote %s reachable (%.0f ms), but uploads cannot land: %s",
               kiln_cache_remote_url(x->cache), res.ms, kiln_last_error());
  else
    doctor_add(x->r, "remote", KILN_DOCTOR_PASS, NULL, "remote %s reachable (%.0f ms); %s%s",
               kiln_cache_remote_url(x->cache), res.ms, extra,
               res.upload ? ": a test upload landed and was deleted" : "");
}

static void open_cache(doctor_ctx *x) {
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  char *ro = x->layers;
  size_t len = 0;
  o.read_only = 1; /* a doctor creates, migrates and writes nothing */
  if (x->o && x->o->n_dirs > 0) {
    o.dir = x->o->dirs[0];
    for (size_t i = 1; i < x->o->n_dirs && len < sizeof x->layers; i++)
      len += (size_t)snprintf(ro + len, sizeof x->layers - len, "%s%s", i > 1 ? ":" : "",
                              x->o->dirs[i]);
    o.ro_path = ro;
    snprintf(x->dir, sizeof x->dir, "%s", o.dir);
  } else {
    /* the directory a build would use: the default may have moved off a
     * shared file system (cache/store_fs.c) */
    if (kiln_cache_default_dir(x->dir, sizeof x->dir, x->moved_from, sizeof x->moved_from) !=
            KILN_OK &&
        kiln_param_cache_dir_path(x->dir, sizeof x->dir) != KILN_OK)
      x->dir[0] = '\0';
    o.dir = x->dir[0] ? x->dir : NULL;
    snprintf(x->layers, sizeof x->layers, "%s",
             kiln_param_cache_path() ? kiln_param_cache_path() : "");
  }
  if (access(x->dir, F_OK) != 0) return;
  if ((x->open_rc = kiln_cache_open(&x->cache, &o)) == KILN_OK) return;
  snprintf(x->open_error, sizeof x->open_error, "%s", kiln_last_error());
  x->cache = NULL;
  if (kiln_param_remote_url()) { /* a bad remote setting: the `remote` check says so */
    kiln_remote_options ro = KILN_REMOTE_OPTIONS_INIT;
    snprintf(x->remote_error, sizeof x->remote_error, "%s", kiln_last_error());
    ro.url = "";
    o.remote = &ro;
    if ((x->open_rc = kiln_cache_open(&x->cache, &o)) == KILN_OK) return;
    snprintf(x->open_error, sizeof x->open_error, "%s", kiln_last_error());
    x->cache = NULL;
  }
}

KILN_DEFINE_OPTIONS_INIT(kiln_doctor_options, KILN_DOCTOR_OPTIONS_VERSION, KILN_DOCTOR_OPTIONS_INIT)

kiln_status kiln_doctor_run(kiln_doctor_report **out, const kiln_doctor_options *opts) {
  doctor_ctx x;
  kiln_status rc;
  if (!out) return kiln_fail(KILN_EINVAL, "kiln_doctor_run: no out");
  *out = NULL;
  rc = opts ? kiln_options_check(opts->version, KILN_DOCTOR_OPTIONS_VERSION, "kiln_doctor_options")
            : KILN_OK;
  if (rc != KILN_OK) return rc;
  memset(&x, 0, sizeof x);
  if (!(x.r = calloc(1, sizeof *x.r))) return kiln_fail(KILN_ENOMEM, "out of memory");
  x.o = opts;
  open_cache(&x);
  doctor_env_names(x.r);
  check_cache_dir(&x);
  doctor_cache_fs(x.r, x.dir, x.moved_from, x.layers);
  check_disk_space(&x);
  check_driver(&x);
  check_nvrtc(&x);
  check_driver_artifacts(&x);
  check_offline(&x);
  check_leases(&x);
  check_quarantine(&x);
  check_conflicts(&x);
  doctor_timeouts(x.r);
  check_remote(&x);
  kiln_cache_close(x.cache);
  x.r->exit_status = x.r->counts[KILN_DOCTOR_FAIL] ? 2 : x.r->counts[KILN_DOCTOR_WARN] ? 1 : 0;
  *out = x.r;
  return KILN_OK;
}

void kiln_doctor_report_free(kiln_doctor_report *r) {
  if (!r) return;
  free(r->checks);
  free(r);
}
