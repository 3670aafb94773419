/* kiln doctor: what would go wrong here, and the fix for each. The checks
 * are in the library (probes/doctor.c); this only prints them. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "kiln/probe.h"

#define DOCTOR_SCHEMA "kiln-doctor/1"
#define MAX_CACHES 16

static const char *usage =
    "usage: kiln doctor [--cache DIR]... [--json]\n"
    "\n"
    "Checks this machine, its settings and its caches, changing nothing: the\n"
    "CUDA driver and whether it can load the cached artifacts, NVRTC, the cache\n"
    "directory (owner, mode, writable), each cache's file system (a shared one,\n"
    "such as NFS, holds no index), free disk space, stale build leases,\n"
    "quarantined blobs, KILN_OFFLINE against what the caches cover, timeouts\n"
    "that kill a slow start-up, unknown KILN_* variables, and the remote cache.\n"
    "Each check is PASS, WARN, FAIL or SKIP (does not apply here), and every\n"
    "WARN and FAIL comes with a fix. Checks: docs/operations.md.\n"
    "\n"
    "  --cache DIR  a cache to check; repeat for more (the first is the primary,\n"
    "               the others read-only layers; KILN_CACHE_PATH is then\n"
    "               ignored). Default: KILN_CACHE_DIR, ... and KILN_CACHE_PATH\n"
    "  --json       the same as JSON, schema \"" DOCTOR_SCHEMA "\"\n"
    "  -h, --help   this help\n"
    "\n"
    "Exit status: 0 when every check passes (or is skipped), 1 when any warns,\n"
    "2 when any fails, and 2 for bad usage (which prints this usage).\n";

static void print_json(const kiln_doctor_report *r) {
  json_t *o = json_object(), *a = json_array();
  json_object_set_new(o, "schema", json_string(DOCTOR_SCHEMA));
  for (size_t i = 0; i < r->n_checks; i++) {
    const kiln_doctor_check *c = &r->checks[i];
    json_t *e = json_object();
    json_object_set_new(e, "id", json_string(c->id));
    json_object_set_new(e, "status", json_string(kiln_doctor_status_str(c->status)));
    json_object_set_new(e, "summary", json_string(c->summary));
    json_object_set_new(e, "fix", c->fix[0] ? json_string(c->fix) : json_null());
    json_array_append_new(a, e);
  }
  json_object_set_new(o, "checks", a);
  json_object_set_new(o, "pass", json_integer((json_int_t)r->counts[KILN_DOCTOR_PASS]));
  json_object_set_new(o, "warn", json_integer((json_int_t)r->counts[KILN_DOCTOR_WARN]));
  json_object_set_new(o, "fail", json_integer((json_int_t)r->counts[KILN_DOCTOR_FAIL]));
  json_object_set_new(o, "skip", json_integer((json_int_t)r->counts[KILN_DOCTOR_SKIP]));
  json_object_set_new(o, "exit", json_integer(r->exit_status));
  cli_print_json(o);
}

static void print_text(const kiln_doctor_report *r) {
  for (size_t i = 0; i < r->n_checks; i++) {
    const kiln_doctor_check *c = &r->checks[i];
    printf("%s  %-16s  %s\n", kiln_doctor_status_str(c->status), c->id, c->summary);
    if (c->fix[0]) printf("      fix: %s\n", c->fix);
  }
  printf("kiln doctor: %zu pass, %zu warn, %zu fail, %zu skip\n", r->counts[KILN_DOCTOR_PASS],
         r->counts[KILN_DOCTOR_WARN], r->counts[KILN_DOCTOR_FAIL], r->counts[KILN_DOCTOR_SKIP]);
}

int cmd_doctor(int argc, char **argv) {
  static const struct option longs[] = {{"cache", required_argument, 0, 'c'},
                                        {"json", no_argument, 0, 'J'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  const char *dirs[MAX_CACHES];
  kiln_doctor_options o = KILN_DOCTOR_OPTIONS_INIT;
  kiln_doctor_report *r = NULL;
  kiln_status st;
  int json = 0, c, rc;
  size_t n = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
    case 'c':
      if (n == MAX_CACHES) return cli_usage_error("doctor", "at most %d --cache", MAX_CACHES);
      if (cli_cache_arg("doctor", optarg, &dirs[n])) return EXIT_USAGE;
      n++;
      break;
    case 'J': json = 1; break;
    case 'h': fputs(usage, stdout); return EXIT_OK;
    default: fputs(usage, stderr); return cli_usage_error("doctor", "bad option");
    }
  }
  if (optind < argc) {
    fputs(usage, stderr);
    return cli_usage_error("doctor", "unexpected argument '%s'", argv[optind]);
  }
  o.dirs = n ? dirs : NULL;
  o.n_dirs = n;
  if ((st = kiln_doctor_run(&r, &o)) != KILN_OK) return cli_error("doctor", st);
  if (json)
    print_json(r);
  else
    print_text(r);
  rc = r->exit_status;
  kiln_doctor_report_free(r);
  return rc;
}
