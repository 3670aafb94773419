/* kiln cache ls|stats|verify|gc|rm|export|import: inspect, maintain and move the cache. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

static const char *usage =
    "usage: kiln cache <ls|stats|verify|gc|rm|export|import> [--cache DIR] [--json] [options]\n"
    "\n"
    "  ls                    every record: unit, target, kind, size, digest, layer\n"
    "  stats                 counts and bytes of records, blobs, failures, quarantine,\n"
    "                        and the remote cache's totals (hits, misses, errors, bytes)\n"
    "  verify [--repair]     check the index (PRAGMA quick_check) and re-hash every\n"
    "                        blob; bad blobs are reported and quarantined (exit\n"
    "                        status 1 if any). A corrupt index is reported (exit 1)\n"
    "                        and changes nothing; --repair rebuilds it from every\n"
    "                        record it can still read whose blob verifies, keeps the\n"
    "                        old one in quarantine/, and lists what was lost (misses\n"
    "                        the next build fills). Run --repair while no other kiln\n"
    "                        process uses the cache (refused, exit 1, if one does)\n"
    "  gc --max-size SIZE    evict least recently used records until the blobs fit in\n"
    "                        SIZE (e.g. 500M, 2G); pinned records are kept\n"
    "  gc --remote file:///DIR [--max-age SECONDS]\n"
    "                        remove the temp files that uploaders killed mid-write left\n"
    "                        in a file:// remote, once --max-age old (default 3600);\n"
    "                        objects are never removed (with --max-size: both)\n"
    "  rm KEY|GLOB           remove records by key or by unit name glob\n"
    "  rm --all              remove every record\n"
    "  export FILE [--arch LIST] [--kernels GLOB]\n"
    "                        write the records of every layer (or those of the given\n"
    "                        targets / units) and their blobs, each verified, to FILE:\n"
    "                        one tar (docs/cache-format.md); '-' is stdout\n"
    "  import FILE           read such a file ('-': stdin) into the cache: everything is\n"
    "                        verified first, and a bad file imports nothing (exit 1); a\n"
    "                        key the cache holds with another digest is kept, named, and\n"
    "                        counted as a conflict (exit 1); safe to run concurrently\n"
    "\n"
    "  --cache DIR           primary cache directory (default: KILN_CACHE_DIR, else\n"
    "                        $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)\n"
    "  --json                machine-readable output\n"
    "  -h, --help            this help\n"
    "\n"
    "Read-only layers (KILN_CACHE_PATH) are listed by ls and stats, never changed.\n";

typedef struct cache_args {
  const char *dir;
  const char *max_size;
  uint64_t max_bytes;
  int json, all, repair;
  kiln_cache_repair_report fixed; /* verify --repair's, done before the cache is opened */
  const char *pattern;            /* rm's KEY|GLOB; export's and import's FILE */
  const char *arch, *kernels;
  const char *remote, *max_age; /* gc --remote's */
  double max_age_s;
} cache_args;

static int do_ls(kiln_cache *c, const cache_args *a) {
  kiln_record *recs = NULL;
  size_t n = 0;
  kiln_status st = kiln_cache_list(&recs, &n, c);
  if (st != KILN_OK) return cli_error("cache ls", st);
  if (a->json) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
      json_array_append_new(arr, cli_record_json(&recs[i]));
    cli_print_json(arr);
  } else {
    printf("%-36s %-12s %-6s %10s %-14s %s\n", "UNIT", "TARGET", "KIND", "SIZE", "DIGEST", "LAYER");
    for (size_t i = 0; i < n; i++) {
      char size[32];
      printf("%-36s %-12s %-6s %10s %.12s.. %d\n", recs[i].unit, recs[i].target, recs[i].kind,
             cli_human_size(size, recs[i].size), recs[i].digest, recs[i].layer);
    }
  }
  free(recs);
  return EXIT_OK;
}

static json_t *remote_json(const kiln_remote_stats *r) {
  json_t *o = json_object();
  json_object_set_new(o, "hits", json_integer((json_int_t)r->hits));
  json_object_set_new(o, "misses", json_integer((json_int_t)r->misses));
  json_object_set_new(o, "errors", json_integer((json_int_t)r->errors));
  json_object_set_new(o, "rejected", json_integer((json_int_t)r->rejected));
  json_object_set_new(o, "bytes_down", json_integer((json_int_t)r->bytes_down));
  json_object_set_new(o, "uploads", json_integer((json_int_t)r->uploads));
  json_object_set_new(o, "bytes_up", json_integer((json_int_t)r->bytes_up));
  json_object_set_new(o, "breaker_trips", json_integer((json_int_t)r->breaker_trips));
  return o;
}

static int do_stats(kiln_cache *c, const cache_args *a) {
  kiln_cache_stats s;
  kiln_remote_stats r;
  char size[32], down[32], up[32];
  kiln_cache_conflict *k = NULL;
  size_t nk = 0;
  kiln_status st = kiln_cache_stats_get(&s, c);
  if (st == KILN_OK) st = kiln_remote_stats_get(&r, c);
  if (st == KILN_OK) st = kiln_cache_conflicts(&k, &nk, c);
  free(k);
  if (st != KILN_OK) return cli_error("cache stats", st);
  if (a->json) {
    json_t *o = json_object();
    json_object_set_new(o, "cache", json_string(kiln_cache_dir(c)));
    json_object_set_new(o, "records", json_integer((json_int_t)s.records));
    json_object_set_new(o, "blobs", json_integer((json_int_t)s.blobs));
    json_object_set_new(o, "blob_bytes", json_integer((json_int_t)s.blob_bytes));
    json_object_set_new(o, "failures", json_integer((json_int_t)s.failures));
    json_object_set_new(o, "quarantined", json_integer((json_int_t)s.quarantined));
    json_object_set_new(o, "layers", json_integer((json_int_t)s.layers));
    json_object_set_new(o, "layer_records", json_integer((json_int_t)s.layer_records));
    json_object_set_new(o, "conflicts", json_integer((json_int_t)nk));
    json_object_set_new(o, "remote", remote_json(&r));
    cli_print_json(o);
    return EXIT_OK;
  }
  printf("cache:        %s\n", kiln_cache_dir(c));
  printf("records:      %llu\n", (unsigned long long)s.records);
  printf("blobs:        %llu (%s)\n", (unsigned long long)s.blobs,
         cli_human_size(size, s.blob_bytes));
  printf("failures:     %llu (unexpired)\n", (unsigned long long)s.failures);
  printf("quarantined:  %llu\n", (unsigned long long)s.quarantined);
  printf("ro layers:    %llu (%llu records)\n", (unsigned long long)s.layers,
         (unsigned long long)s.layer_records);
  printf("conflicts:    %zu%s\n", nk,
         nk ? " (keys imported with another digest than the cache's: see kiln doctor)" : "");
  printf("remote:       %llu hits, %llu misses, %llu errors, %llu rejected, %s down; "
         "%llu uploads, %s up; breaker tripped %llu times (totals of every process)\n",
         (unsigned long long)r.hits, (unsigned long long)r.misses, (unsigned long long)r.errors,
         (unsigned long long)r.rejected, cli_human_size(down, r.bytes_down),
         (unsigned long long)r.uploads, cli_human_size(up, r.bytes_up),
         (unsigned long long)r.breaker_trips);
  return EXIT_OK;
}

/* verify --repair's outcome: {"repaired", "problem", "moved_to", "kept", "lost": [...]}. */
static json_t *repair_json(const kiln_cache_repair_report *f) {
  json_t *o = json_object(), *lost = json_array();
  json_object_set_new(o, "repaired", json_boolean(f->repaired));
  json_object_set_new(o, "problem", f->repaired ? json_string(f->problem) : json_null());
  json_object_set_new(o, "moved_to", f->repaired ? json_string(f->moved_to) : json_null());
  json_object_set_new(o, "kept", json_integer((json_int_t)f->kept));
  for (size_t i = 0; i < f->n_lost; i++) {
    const kiln_cache_lost_record *l = &f->lost_records[i];
    json_t *e = json_object();
    json_object_set_new(e, "key", json_string(l->key));
    json_object_set_new(e, "unit", l->unit[0] ? json_string(l->unit) : json_null());
    json_object_set_new(e, "target", l->target[0] ? json_string(l->target) : json_null());
    json_object_set_new(e, "why", json_string(l->why));
    json_array_append_new(lost, e);
  }
  json_object_set_new(o, "lost", lost);
  return o;
}

static void print_repair(const kiln_cache_repair_report *f) {
  if (!f->repaired) return;
  printf("REPAIRED the index (%s): the old one is kept as %s\n", f->problem, f->moved_to);
  for (size_t i = 0; i < f->n_lost; i++) {
    const kiln_cache_lost_record *l = &f->lost_records[i];
    if (l->unit[0])
      printf("LOST %s %s (key %s): %s\n", l->unit, l->target, l->key, l->why);
    else
      printf("LOST key %s: %s\n", l->key, l->why);
  }
  printf("kiln cache verify: kept %llu records, lost %llu (misses: the next kiln build rebuilds "
         "them)\n",
         (unsigned long long)f->kept, (unsigned long long)f->lost);
}

static int do_verify(kiln_cache *c, const cache_args *a) {
  kiln_cache_verify_report r;
  kiln_status st = kiln_cache_verify(&r, c);
  char index[4200];
  int rc, corrupt = 0;
  if (st != KILN_OK) return cli_error("cache verify", st);
  snprintf(index, sizeof index, "%s/index.sqlite", kiln_cache_dir(c));
  for (size_t i = 0; i < r.n_issues; i++)
    corrupt |= strcmp(r.issues[i].path, index) == 0;
  if (a->json) {
    json_t *o = json_object(), *issues = json_array();
    json_object_set_new(o, "checked", json_integer((json_int_t)r.checked));
    json_object_set_new(o, "bad", json_integer((json_int_t)r.bad));
    json_object_set_new(o, "index_corrupt", json_boolean(corrupt));
    for (size_t i = 0; i < r.n_issues; i++) {
      json_t *e = json_object();
      json_object_set_new(e, "path", json_string(r.issues[i].path));
      json_object_set_new(e, "what", json_string(r.issues[i].what));
      json_array_append_new(issues, e);
    }
    json_object_set_new(o, "issues", issues);
    if (a->repair) json_object_set_new(o, "repair", repair_json(&a->fixed));
    cli_print_json(o);
  } else {
    print_repair(&a->fixed);
    for (size_t i = 0; i < r.n_issues; i++)
      printf("BAD %s: %s\n", r.issues[i].path, r.issues[i].what);
    if (corrupt)
      printf("kiln cache verify: the index is corrupt: builds and loads from this cache fail "
             "until `kiln cache verify --repair --cache %s` rebuilds it (blobs not checked)\n",
             kiln_cache_dir(c));
    else
      printf("kiln cache verify: %llu blobs checked, %llu bad%s\n", (unsigned long long)r.checked,
             (unsigned long long)r.bad, r.bad ? " (the next kiln build rebuilds them)" : "");
  }
  rc = r.bad ? EXIT_FAIL : EXIT_OK;
  kiln_cache_verify_report_free(&r);
  return rc;
}

/* Usage checks that need no cache, so they are answered before opening one. */
static int check_args(const char *verb, cache_args *a) {
  if ((a->remote || a->max_age) && strcmp(verb, "gc") != 0)
    return cli_usage_error("cache", "--remote and --max-age are for 'kiln cache gc'");
  if (a->max_age && !a->remote)
    return cli_usage_error("cache gc", "--max-age is for --remote (the remote's temp files)");
  a->max_age_s = 3600;
  if (a->max_age) {
    char *end = NULL;
    a->max_age_s = strtod(a->max_age, &end);
    if (!*a->max_age || *end || !(a->max_age_s >= 0) || a->max_age_s > 1e9)
      return cli_usage_error("cache gc", "--max-age: '%s' is not a number of seconds >= 0",
                             a->max_age);
  }
  if (strcmp(verb, "gc") == 0 && !a->max_size && a->remote) {
    /* only the remote's temp files */
  } else if (strcmp(verb, "gc") == 0) {
    unsigned long long max = 0;
    if (!a->max_size)
      return cli_usage_error("cache gc",
                             "--max-size SIZE (e.g. 2G) or --remote file:///DIR is required");
    if (cli_parse_size(&max, a->max_size) != KILN_OK)
      return cli_usage_error("cache gc", "--max-size: '%s' is not a size (e.g. 512M, 2G, 1048576)",
                             a->max_size);
    a->max_bytes = max;
  } else if (a->max_size) {
    return cli_usage_error("cache", "--max-size is for 'kiln cache gc'");
  }
  if (strcmp(verb, "rm") == 0) {
    if (!a->all && !a->pattern)
      return cli_usage_error("cache rm", "name a KEY or unit GLOB, or --all");
    if (a->all && a->pattern)
      return cli_usage_error("cache rm", "give a pattern or --all, not both");
  } else if (a->all) {
    return cli_usage_error("cache", "--all is for 'kiln cache rm'");
  }
  if (a->repair && strcmp(verb, "verify") != 0)
    return cli_usage_error("cache", "--repair is for 'kiln cache verify'");
  if ((a->arch || a->kernels) && strcmp(verb, "export") != 0)
    return cli_usage_error("cache", "--arch and --kernels are for 'kiln cache export'");
  if (strcmp(verb, "export") == 0 || strcmp(verb, "import") == 0) {
    if (!a->pattern)
      return cli_usage_error(verb, "name the archive FILE ('-': std%s)",
                             verb[0] == 'e' ? "out" : "in");
  } else if (a->pattern && strcmp(verb, "rm") != 0) {
    return cli_usage_error("cache", "'%s' takes no argument '%s'", verb, a->pattern);
  }
  return EXIT_OK;
}

/* gc --remote: the temp files killed uploaders left in a file:// remote. */
static int do_gc_remote(kiln_cache *c, const cache_args *a, json_t *o) {
  kiln_remote_options ro = KILN_REMOTE_OPTIONS_INIT;
  kiln_remote_gc_report r;
  char freed[32];
  kiln_status st;
  ro.url = a->remote;
  if ((st = kiln_cache_set_remote(c, &ro)) != KILN_OK ||
      (st = kiln_remote_gc(&r, c, a->max_age_s)) != KILN_OK)
    return cli_error("cache gc --remote", st);
  if (o) {
    json_object_set_new(o, "remote", json_string(kiln_cache_remote_url(c)));
    json_object_set_new(o, "remote_temp_removed", json_integer((json_int_t)r.removed));
    json_object_set_new(o, "remote_temp_bytes", json_integer((json_int_t)r.bytes));
  } else {
    printf("kiln cache gc: removed %llu temp files (%s) older than %.0f s from %s\n",
           (unsigned long long)r.removed, cli_human_size(freed, r.bytes), a->max_age_s,
           kiln_cache_remote_url(c));
  }
  return EXIT_OK;
}

static int do_gc(kiln_cache *c, const cache_args *a) {
  kiln_cache_gc_report r;
  char freed[32], left[32];
  json_t *o = a->json ? json_object() : NULL;
  kiln_status st;
  int rc = EXIT_OK;
  if (a->remote && (rc = do_gc_remote(c, a, o)) != EXIT_OK) {
    json_decref(o);
    return rc;
  }
  if (!a->max_size) {
    if (o) cli_print_json(o);
    return EXIT_OK;
  }
  if ((st = kiln_cache_gc(&r, c, a->max_bytes)) != KILN_OK) {
    json_decref(o);
    return cli_error("cache gc", st);
  }
  if (o) {
    json_object_set_new(o, "removed_records", json_integer((json_int_t)r.removed_records));
    json_object_set_new(o, "removed_blobs", json_integer((json_int_t)r.removed_blobs));
    json_object_set_new(o, "freed_bytes", json_integer((json_int_t)r.freed_bytes));
    json_object_set_new(o, "remaining_bytes", json_integer((json_int_t)r.remaining_bytes));
    json_object_set_new(o, "pinned_skipped", json_integer((json_int_t)r.pinned_skipped));
    cli_print_json(o);
  } else {
    printf("kiln cache gc: removed %llu records, %llu blobs, freed %s; %s left; %llu pinned kept\n",
           (unsigned long long)r.removed_records, (unsigned long long)r.removed_blobs,
           cli_human_size(freed, r.freed_bytes), cli_human_size(left, r.remaining_bytes),
           (unsigned long long)r.pinned_skipped);
  }
  return EXIT_OK;
}

static int do_rm(kiln_cache *c, const cache_args *a) {
  uint64_t removed = 0;
  kiln_status st = kiln_cache_rm(&removed, c, a->all ? NULL : a->pattern);
  if (st != KILN_OK) return cli_error("cache rm", st);
  if (a->json) {
    json_t *o = json_object();
    json_object_set_new(o, "removed", json_integer((json_int_t)removed));
    cli_print_json(o);
  } else {
    printf("kiln cache rm: removed %llu records\n", (unsigned long long)removed);
  }
  return EXIT_OK;
}

static int do_export(kiln_cache *c, const cache_args *a) {
  kiln_cache_export_options o = KILN_CACHE_EXPORT_OPTIONS_INIT;
  kiln_cache_export_report r;
  kiln_status st;
  char size[32];
  o.arch = a->arch;
  o.kernels = a->kernels;
  if ((st = kiln_cache_export(&r, c, a->pattern, &o)) != KILN_OK)
    return cli_error("cache export", st);
  if (a->json && strcmp(a->pattern, "-") != 0) {
    json_t *j = json_object();
    json_object_set_new(j, "file", json_string(a->pattern));
    json_object_set_new(j, "records", json_integer((json_int_t)r.records));
    json_object_set_new(j, "blobs", json_integer((json_int_t)r.blobs));
    json_object_set_new(j, "bytes", json_integer((json_int_t)r.bytes));
    cli_print_json(j);
  } else {
    fprintf(strcmp(a->pattern, "-") == 0 ? stderr : stdout,
            "kiln cache export: %llu records, %llu blobs (%s) to %s\n",
            (unsigned long long)r.records, (unsigned long long)r.blobs,
            cli_human_size(size, r.bytes), a->pattern);
  }
  return EXIT_OK;
}

static int do_import(kiln_cache *c, const cache_args *a) {
  kiln_cache_import_report r;
  kiln_status st;
  char size[32];
  if ((st = kiln_cache_import(&r, c, a->pattern)) != KILN_OK) return cli_error("cache import", st);
  for (size_t i = 0; i < r.n_conflicts; i++)
    fprintf(stderr,
            "kiln cache import: CONFLICT %s %s: key %s is in the cache with digest %.16s..., "
            "the archive has %.16s...: kept the cache's (not reproducible? see kiln doctor)\n",
            r.conflict[i].unit, r.conflict[i].target, r.conflict[i].key, r.conflict[i].kept,
            r.conflict[i].refused);
  if (a->json) {
    json_t *j = json_object(), *k = json_array();
    json_object_set_new(j, "file", json_string(a->pattern));
    json_object_set_new(j, "records", json_integer((json_int_t)r.records));
    json_object_set_new(j, "added", json_integer((json_int_t)r.added));
    json_object_set_new(j, "present", json_integer((json_int_t)r.present));
    json_object_set_new(j, "blobs", json_integer((json_int_t)r.blobs));
    json_object_set_new(j, "bytes", json_integer((json_int_t)r.bytes));
    for (size_t i = 0; i < r.n_conflicts; i++) {
      json_t *o = json_object();
      json_object_set_new(o, "key", json_string(r.conflict[i].key));
      json_object_set_new(o, "unit", json_string(r.conflict[i].unit));
      json_object_set_new(o, "target", json_string(r.conflict[i].target));
      json_object_set_new(o, "kept", json_string(r.conflict[i].kept));
      json_object_set_new(o, "refused", json_string(r.conflict[i].refused));
      json_array_append_new(k, o);
    }
    json_object_set_new(j, "conflicts", k);
    cli_print_json(j);
  } else {
    printf("kiln cache import: %llu records (%s): %llu added, %llu already there, %llu "
           "conflicts\n",
           (unsigned long long)r.records, cli_human_size(size, r.bytes),
           (unsigned long long)r.added, (unsigned long long)r.present,
           (unsigned long long)r.conflicts);
  }
  st = r.conflicts ? KILN_EMISMATCH : KILN_OK;
  kiln_cache_import_report_free(&r);
  return st == KILN_OK ? EXIT_OK : EXIT_FAIL;
}

int cmd_cache(int argc, char **argv) {
  static const struct option longs[] = {{"cache", required_argument, 0, 'c'},
                                        {"json", no_argument, 0, 'J'},
                                        {"max-size", required_argument, 0, 'm'},
                                        {"all", no_argument, 0, 'A'},
                                        {"arch", required_argument, 0, 'a'},
                                        {"kernels", required_argument, 0, 'k'},
                                        {"repair", no_argument, 0, 'R'},
                                        {"remote", required_argument, 0, 'r'},
                                        {"max-age", required_argument, 0, 'g'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  static const struct {
    const char *name;
    int (*fn)(kiln_cache *, const cache_args *);
    int open; /* cli_open_cache's mode: what only reads opens read-only */
  } verbs[] = {{"ls", do_ls, CLI_CACHE_READ_ONLY},
               {"stats", do_stats, CLI_CACHE_READ_ONLY},
               {"verify", do_verify, 0},
               {"gc", do_gc, 0},
               {"rm", do_rm, 0},
               {"export", do_export, CLI_CACHE_READ_ONLY},
               {"import", do_import, 1}};
  cache_args a = {0};
  const char *verb;
  kiln_cache *c = NULL;
  kiln_status st;
  int ch, rc;
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : EXIT_OK;
  }
  verb = argv[1];
  optind = 1;
  while ((ch = getopt_long(argc - 1, argv + 1, "h", longs, NULL)) != -1) {
    switch (ch) {
    case 'c':
      if (cli_cache_arg("cache", optarg, &a.dir)) return EXIT_USAGE;
      break;
    case 'J': a.json = 1; break;
    case 'm': a.max_size = optarg; break;
    case 'A': a.all = 1; break;
    case 'R': a.repair = 1; break;
    case 'a': a.arch = optarg; break;
    case 'k': a.kernels = optarg; break;
    case 'r': a.remote = optarg; break;
    case 'g': a.max_age = optarg; break;
    case 'h': fputs(usage, stdout); return EXIT_OK;
    default: return cli_usage_error("cache", "bad option");
    }
  }
  if (optind < argc - 1) a.pattern = argv[1 + optind++];
  if (optind < argc - 1)
    return cli_usage_error("cache", "unexpected argument '%s'", argv[1 + optind]);
  for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++) {
    if (strcmp(verb, verbs[i].name) != 0) continue;
    if ((rc = check_args(verb, &a)) != EXIT_OK) return rc;
    /* before the open: an index sqlite cannot read at all is repaired too */
    if (a.repair && (st = kiln_cache_repair(&a.fixed, a.dir)) != KILN_OK)
      return cli_error("cache verify --repair", st) == EXIT_USAGE ? EXIT_USAGE : EXIT_FAIL;
    /* import may fill a new cache; ls, stats and export change nothing */
    if ((st = cli_open_cache(&c, a.dir,
                             a.remote && !a.max_size ? CLI_CACHE_READ_ONLY : verbs[i].open)) !=
        KILN_OK) {
      rc = cli_error("cache", st);
      if (st == KILN_ECORRUPT)
        fprintf(stderr, "kiln cache: fix: `kiln cache verify --repair%s%s`\n",
                a.dir ? " --cache " : "", a.dir ? a.dir : "");
    } else {
      rc = verbs[i].fn(c, &a);
      kiln_cache_close(c);
    }
    kiln_cache_repair_report_free(&a.fixed);
    return rc;
  }
  return cli_usage_error(
      "cache", "unknown subcommand '%s' (ls, stats, verify, gc, rm, export, import)", verb);
}
