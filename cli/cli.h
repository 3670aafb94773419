/* The kiln command: shared helpers for the subcommands (cmd_<verb>.c). */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <jansson.h>
#include <stdint.h>

#include "kiln/kiln.h"

/* Exit statuses: 0 success, 1 the operation failed, 2 bad usage or input. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

int cmd_build(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_warmup(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_doctor(int argc, char **argv);

/* `kiln warmup --comm ...` (cli/warmup_ranks.c). */
typedef struct warmup_ranks_opts {
  const char *comm, *arch, *kernels, *dir;
  int offline, json, device; /* device -1: the rank's local rank modulo the devices */
  double timeout_s;          /* KILN_ENV: KILN_BUILD_TIMEOUT */
  double heartbeat_s;        /* KILN_ENV: KILN_HEARTBEAT_MS */
  double peer_timeout_s;     /* KILN_ENV: KILN_PEER_TIMEOUT */
} warmup_ranks_opts;
int warmup_ranks(const warmup_ranks_opts *o);

/* Prints "kiln <verb>: <status detail>" for a failed kiln call and returns the
 * exit status for it (2 for invalid input, 1 otherwise). */
int cli_error(const char *verb, kiln_status st);
/* Prints "kiln <verb>: <message>" and returns EXIT_USAGE. */
int cli_usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* --cache's value: *out = dir, or the usage error (2) for an empty path,
 * which would otherwise silently mean the default cache. 0 when taken. */
int cli_cache_arg(const char *verb, const char *dir, const char **out);
/* Opens the cache at dir (NULL: from the environment): create 1 makes it
 * when missing, 0 needs it to exist, CLI_CACHE_READ_ONLY opens it read-only
 * (kiln_cache_options.read_only: nothing is created or changed). */
#define CLI_CACHE_READ_ONLY 2
kiln_status cli_open_cache(kiln_cache **out, const char *dir, int create);
/* Parses a size such as 1048576, 64k, 500M, 2G or 2GiB (binary multiples).
 * KILN_EINVAL when it is not one; the caller names the flag. */
kiln_status cli_parse_size(unsigned long long *out, const char *s);
/* "12.3 MiB" */
const char *cli_human_size(char out[32], uint64_t bytes);
/* Prints a JSON value on stdout with a newline and frees it. */
void cli_print_json(json_t *v);
/* A record as a JSON object. */
json_t *cli_record_json(const kiln_record *r);

#endif
