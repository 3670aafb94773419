/* kiln build: compile every selected unit for every target into the cache. */
#include <fnmatch.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char *usage =
    "usage: kiln build [--arch LIST|all] [--kernels GLOB] [--cache DIR] [-j N] [--rebuild]\n"
    "                  [--remote URL] [--upload] [--no-remote] [--json]\n"
    "\n"
    "Compiles every kernel unit for every target with NVRTC into the cache.\n"
    "Targets already cached (digest verified) are hits and are not rebuilt.\n"
    "Processes sharing a cache directory build each target once: the others\n"
    "wait for it (a lease in the index; KILN_LEASE_STALE, KILN_BUILD_TIMEOUT).\n"
    "\n"
    "  --arch LIST    targets, comma-separated (default: all):\n"
    "                   90 or sm_90   CUBIN for sm_90\n"
    "                   sm_90a        arch-specific CUBIN\n"
    "                   compute_90    PTX for compute_90\n"
    "                   90+ptx        both CUBIN and PTX for 90\n"
    "                   all           every CUBIN NVRTC supports from sm_80 up, plus PTX\n"
    "                                 for the lowest and highest of them\n"
    "  --kernels GLOB unit names to build (shell glob, e.g. '*masked*'; default: all)\n"
    "  --cache DIR    primary cache directory (default: KILN_CACHE_DIR,\n"
    "                 else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)\n"
    "  -j N           parallel compiles (default: KILN_JOBS, else the number of cores)\n"
    "  --rebuild      compile even targets that are cached (the remote is not read)\n"
    "  --remote URL   remote cache, http(s)://HOST/PATH, s3://BUCKET/PREFIX or\n"
    "                 file:///DIR on a shared file system (default:\n"
    "                 KILN_REMOTE_URL): targets missing locally are fetched\n"
    "                 from it before anything is compiled\n"
    "  --upload       write every target of the plan back to the remote (default:\n"
    "                 KILN_REMOTE_UPLOAD); a refused upload is a warning, not a failure\n"
    "  --no-remote    ignore KILN_REMOTE_URL\n"
    "  --json         print the summary and every target as JSON on stdout\n"
    "  -h, --help     this help\n"
    "\n"
    "Remote credentials: a bearer token from KILN_REMOTE_TOKEN_FILE, else .netrc;\n"
    "s3://: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, else ~/.aws/credentials\n"
    "(AWS_PROFILE), server KILN_S3_ENDPOINT; records signed/verified with\n"
    "KILN_REMOTE_HMAC_KEY_FILE; TLS CA from KILN_REMOTE_CA_FILE. See\n"
    "docs/remote-cache.md.\n"
    "\n"
    "Exit status: 0 when every target is in the cache afterwards, 1 when any\n"
    "failed, 2 for bad usage or input (unknown arch, glob matching nothing).\n";

typedef struct progress_state {
  int tty;
  int json;
} progress_state;

static const char *outcome_name(kiln_build_outcome o) {
  return o == KILN_BUILD_HIT       ? "hit"
         : o == KILN_BUILD_BUILT   ? "built"
         : o == KILN_BUILD_SHARED  ? "shared"
         : o == KILN_BUILD_FETCHED ? "fetched"
                                   : "failed";
}

static void progress(const kiln_build_item *it, size_t done, size_t total, void *user) {
  progress_state *p = user;
  if (p->tty) {
    fprintf(stderr, "\r\033[K[%zu/%zu] %-6s %s %s", done, total, outcome_name(it->outcome),
            it->unit->name, it->target_name);
    if (done == total) fputc('\n', stderr);
  } else if (it->outcome == KILN_BUILD_FETCHED) {
    char size[32];
    fprintf(stderr, "[%zu/%zu] fetched %s %s (%s)\n", done, total, it->unit->name, it->target_name,
            cli_human_size(size, it->record.size));
  } else if (it->outcome != KILN_BUILD_HIT) {
    fprintf(stderr, "[%zu/%zu] %s %s %s (%.1f s)\n", done, total, outcome_name(it->outcome),
            it->unit->name, it->target_name, it->record.build_ms / 1000.0);
  }
  fflush(stderr);
}

static json_t *summary_json(const kiln_build_summary *s, kiln_cache *cache) {
  json_t *o = json_object(), *items = json_array();
  json_object_set_new(o, "cache", json_string(kiln_cache_dir(cache)));
  json_object_set_new(o, "targets", json_integer((json_int_t)s->targets));
  json_object_set_new(o, "hits", json_integer((json_int_t)s->hits));
  json_object_set_new(o, "built", json_integer((json_int_t)s->built));
  json_object_set_new(o, "failed", json_integer((json_int_t)s->failed));
  json_object_set_new(o, "shared", json_integer((json_int_t)s->shared));
  json_object_set_new(o, "fetched", json_integer((json_int_t)s->fetched));
  json_object_set_new(o, "uploaded", json_integer((json_int_t)s->uploaded));
  json_object_set_new(o, "remote",
                      kiln_cache_remote_url(cache) ? json_string(kiln_cache_remote_url(cache))
                                                   : json_null());
  if (s->upload_status != KILN_OK)
    json_object_set_new(o, "upload_error", json_string(s->upload_error));
  json_object_set_new(o, "taken_over", json_integer((json_int_t)s->taken_over));
  json_object_set_new(o, "bytes", json_integer((json_int_t)s->bytes));
  json_object_set_new(o, "wall_ms", json_real(s->wall_ms));
  json_object_set_new(o, "compile_cpu_s", json_real(s->compile_cpu_s));
  for (size_t i = 0; i < s->n_items; i++) {
    const kiln_build_item *it = &s->items[i];
    json_t *j;
    if (it->outcome == KILN_BUILD_FAILED) {
      j = json_object();
      json_object_set_new(j, "unit", json_string(it->unit->name));
      json_object_set_new(j, "target", json_string(it->target_name));
      json_object_set_new(j, "error", json_string(it->error));
      json_object_set_new(j, "status", json_string(kiln_status_str(it->status)));
      if (it->log_tail) json_object_set_new(j, "log_tail", json_string(it->log_tail));
    } else {
      j = cli_record_json(&it->record);
    }
    json_object_set_new(j, "outcome", json_string(outcome_name(it->outcome)));
    json_array_append_new(items, j);
  }
  json_object_set_new(o, "items", items);
  return o;
}

static void print_failures(const kiln_build_summary *s) {
  for (size_t i = 0; i < s->n_items; i++) {
    const kiln_build_item *it = &s->items[i];
    if (it->outcome != KILN_BUILD_FAILED) continue;
    fprintf(stderr, "kiln build: FAILED %s %s: %s\n", it->unit->name, it->target_name, it->error);
    if (it->log_tail && *it->log_tail) fprintf(stderr, "  log tail:\n%s\n", it->log_tail);
  }
}

static void print_summary(const kiln_build_summary *s, kiln_cache *cache) {
  char size[32];
  char shared[64] = "", fetched[64] = "";
  if (s->shared) snprintf(shared, sizeof shared, ", %zu built by another process", s->shared);
  if (kiln_cache_remote_url(cache)) snprintf(fetched, sizeof fetched, ", %zu fetched", s->fetched);
  printf("kiln build: %zu targets, %zu cache hits%s, %zu built%s, %zu failed, %s, %.1f s "
         "(%.1f CPU s compiling)\n",
         s->targets, s->hits, fetched, s->built, shared, s->failed, cli_human_size(size, s->bytes),
         s->wall_ms / 1000.0, s->compile_cpu_s);
  printf("cache: %s\n", kiln_cache_dir(cache));
  if (kiln_cache_remote_url(cache)) {
    if (!kiln_cache_remote_upload(cache))
      printf("remote: %s (read only)\n", kiln_cache_remote_url(cache));
    else if (s->upload_status == KILN_OK)
      printf("remote: %s, %zu uploaded\n", kiln_cache_remote_url(cache), s->uploaded);
    else
      printf("remote: %s, %zu uploaded; upload failed: %s\n", kiln_cache_remote_url(cache),
             s->uploaded, s->upload_error);
  }
}

static int matches_a_unit(const char *glob) {
  for (size_t i = 0; i < kiln_unit_count(); i++)
    if (fnmatch(glob, kiln_unit_at(i)->name, 0) == 0) return 1;
  return 0;
}

int cmd_build(int argc, char **argv) {
  static const struct option longs[] = {{"arch", required_argument, 0, 'a'},
                                        {"kernels", required_argument, 0, 'k'},
                                        {"cache", required_argument, 0, 'c'},
                                        {"jobs", required_argument, 0, 'j'},
                                        {"rebuild", no_argument, 0, 'r'},
                                        {"json", no_argument, 0, 'J'},
                                        {"remote", required_argument, 0, 'R'},
                                        {"upload", no_argument, 0, 'U'},
                                        {"no-remote", no_argument, 0, 'N'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  kiln_remote_options ro = KILN_REMOTE_OPTIONS_INIT;
  int no_remote = 0;
  const char *arch = "all", *glob = NULL, *dir = NULL;
  kiln_build_options o = KILN_BUILD_OPTIONS_INIT;
  o.offline = 0; /* the build command compiles; KILN_OFFLINE is for the loader and warmup */
  progress_state ps = {isatty(STDERR_FILENO), 0};
  kiln_build_summary *s = NULL;
  kiln_target *targets = NULL;
  kiln_cache *cache = NULL;
  size_t n_targets = 0;
  kiln_status st;
  int c, rc = EXIT_OK;
  optind = 1;
  while ((c = getopt_long(argc, argv, "j:h", longs, NULL)) != -1) {
    switch (c) {
    case 'a': arch = optarg; break;
    case 'k': glob = optarg; break;
    case 'c':
      if (cli_cache_arg("build", optarg, &dir)) return EXIT_USAGE;
      break;
    case 'j': {
      char *end = NULL;
      long j = strtol(optarg, &end, 10);
      if (!*optarg || *end || j < 1 || j > 4096)
        return cli_usage_error("build", "-j '%s': expected a number of jobs in [1, 4096]", optarg);
      o.jobs = (int)j;
      break;
    }
    case 'r': o.rebuild = 1; break;
    case 'J': ps.json = 1; break;
    case 'R': ro.url = optarg; break;
    case 'U': ro.upload = 1; break;
    case 'N': no_remote = 1; break;
    case 'h': fputs(usage, stdout); return EXIT_OK;
    default: return cli_usage_error("build", "bad option");
    }
  }
  if (optind < argc) return cli_usage_error("build", "unexpected argument '%s'", argv[optind]);
  if (no_remote && (ro.url || ro.upload == 1))
    return cli_usage_error("build", "--no-remote with --remote or --upload");
  if (no_remote) ro.url = "";
  if ((st = kiln_targets_parse_list(&targets, &n_targets, arch)) != KILN_OK) {
    rc = cli_error("build", st);
    goto out;
  }
  if (glob && !matches_a_unit(glob)) {
    char names[1024];
    rc = cli_usage_error("build", "--kernels '%s' matches no unit; units are: %s", glob,
                         kiln_unit_names(names, sizeof names));
    goto out;
  }
  if ((st = cli_open_cache(&cache, dir, 1)) != KILN_OK ||
      (st = kiln_cache_set_remote(cache, &ro)) != KILN_OK) {
    rc = st == KILN_EINVAL ? cli_usage_error("build", "%s", kiln_last_error())
                           : cli_error("build", st);
    goto out;
  }
  if (ro.upload == 1 && !kiln_cache_remote_url(cache)) {
    rc = cli_usage_error("build", "--upload needs a remote (--remote URL or KILN_REMOTE_URL)");
    goto out;
  }
  o.targets = targets;
  o.n_targets = n_targets;
  o.kernels_glob = glob;
  o.progress = progress;
  o.user = &ps;
  if ((st = kiln_build(&s, cache, &o)) != KILN_OK) {
    rc = cli_error("build", st);
    goto out;
  }
  print_failures(s);
  if (ps.json)
    cli_print_json(summary_json(s, cache));
  else
    print_summary(s, cache);
  rc = s->failed ? EXIT_FAIL : EXIT_OK;
out:
  kiln_build_summary_free(s);
  kiln_cache_close(cache);
  free(targets);
  return rc;
}
