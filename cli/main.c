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
    "  --version   print kiln, NVRTC and cache schema versions\n"
    "  -h, --help  this help; 'kiln <command> --help' for a command\n"
    "\n"
    "environment: KILN_CACHE_DIR, KILN_CACHE_PATH, KILN_JOBS, KILN_LOG,\n"
    "KILN_FAILURE_TTL, KILN_NVRTC_LIBRARY, KILN_CUDA_LIBRARY, KILN_OFFLINE,\n"
    "KILN_LEASE_STALE, KILN_BUILD_TIMEOUT, KILN_HEARTBEAT_MS, KILN_NVRTC_OPTIONS,\n"
    "KILN_NCCL_LIBRARY, KILN_MPI_LIBRARY, KILN_REMOTE_* (see README.md).\n";

static int version(void) {
  int ma, mi;
  printf("kiln %s\n", kiln_version());
  if (kiln_nvrtc_version(&ma, &mi) == KILN_OK)
    printf("NVRTC %d.%d\n", ma, mi);
  else
    printf("NVRTC not available: %s\n", kiln_last_error());
  printf("cache schema %d\n", KILN_CACHE_SCHEMA_VERSION);
  return EXIT_OK;
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
