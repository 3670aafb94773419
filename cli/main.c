/* kiln — the command line: dispatch to one cmd_<verb>.c per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char *usage =
    "usage: kiln <command> [options]\n"
    "\n"
    "Fused-kernel ahead-of-time build and cache for LLM training.\n"
    "\n"
    "commands:\n"
    "  build   compile kernels for GPU targets into the cache\n"
    "  list    show the kernel units, entry points, dtypes and minimum arch\n"
    "  cache   inspect and maintain the cache (ls, stats, verify, gc, rm)\n"
    "  warmup  resolve and load every kernel on the local GPU(s) [--verify];\n"
    "          with --comm mpi, once for every rank of a job\n"
    "  check   fail unless the caches cover every kernel for the given archs\n"
    "  probe   what this machine can run: GPUs, NVRTC, NCCL, caches, per unit\n"
    "  doctor  check the driver, NVRTC, caches, leases, settings and remote;\n"
    "          each WARN or FAIL with its fix\n"
    "\n"
    "options:\n"
    "  --version   print the versions of kiln, NVRTC, NCCL, the CUDA driver (with the\n"
    "              file each was loaded from) and the cache schema\n"
    "  -h, --help  this help; 'kiln <command> --help' for a command\n"
    "\n"
    "environment: KILN_CACHE_DIR, KILN_CACHE_PATH, KILN_JOBS, KILN_LOG,\n"
    "KILN_FAILURE_TTL, KILN_NVRTC_LIBRARY, KILN_CUDA_LIBRARY, KILN_OFFLINE,\n"
    "KILN_LEASE_STALE, KILN_BUILD_TIMEOUT, KILN_HEARTBEAT_MS, KILN_NVRTC_OPTIONS,\n"
    "KILN_NCCL_LIBRARY, KILN_MPI_LIBRARY, KILN_PYTHON_PREFIX, KILN_REMOTE_* (see README.md).\n";

/* One line per GPU library: its version, file and how it was found, or why
 * there is none. A library that was named (KILN_*_LIBRARY) or found but will
 * not load is an error (exit 2): kiln never silently uses another. */
static int library_line(kiln_library which, const char *name) {
  kiln_library_info info;
  kiln_status st = kiln_library_get_info(&info, which);
  if (st == KILN_OK) {
    printf("%s %s: %s (found by %s)\n", name, info.version, info.path, info.found_by);
    return 0;
  }
  printf("%s: not available: %s\n", name, kiln_last_error());
  if (st != KILN_EINVAL && st != KILN_EUNSUPPORTED) return 0;
  fprintf(stderr, "kiln --version: %s\n", kiln_last_error());
  return 1;
}

static int version(void) {
  int bad = 0;
  printf("kiln %s\n", kiln_version());
  bad += library_line(KILN_LIBRARY_NVRTC, "NVRTC");
  bad += library_line(KILN_LIBRARY_NCCL, "NCCL");
  bad += library_line(KILN_LIBRARY_CUDA, "CUDA driver");
  printf("cache schema %d\n", KILN_CACHE_SCHEMA_VERSION);
  return bad ? EXIT_USAGE : EXIT_OK;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : NULL;
  kiln_log_get_level(); /* reads KILN_LOG now, so a bad value is reported on every run */
  if (!cmd || strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
    fputs(usage, cmd ? stdout : stderr);
    return cmd ? EXIT_OK : EXIT_USAGE;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) return version();
  if (strcmp(cmd, "build") == 0) return cmd_build(argc - 1, argv + 1);
  if (strcmp(cmd, "list") == 0) return cmd_list(argc - 1, argv + 1);
  if (strcmp(cmd, "cache") == 0) return cmd_cache(argc - 1, argv + 1);
  if (strcmp(cmd, "warmup") == 0) return cmd_warmup(argc - 1, argv + 1);
  if (strcmp(cmd, "check") == 0) return cmd_check(argc - 1, argv + 1);
  if (strcmp(cmd, "probe") == 0) return cmd_probe(argc - 1, argv + 1);
  if (strcmp(cmd, "doctor") == 0) return cmd_doctor(argc - 1, argv + 1);
  fprintf(stderr, "kiln: unknown command '%s'\n\n%s", cmd, usage);
  return EXIT_USAGE;
}
