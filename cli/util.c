/* Helpers shared by the kiln subcommands. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

int cli_error(const char *verb, kiln_status st) {
  const char *detail = kiln_last_error();
  fprintf(stderr, "kiln %s: %s\n", verb, detail[0] ? detail : kiln_status_str(st));
  return (st == KILN_EINVAL || st == KILN_EUNSUPPORTED || st == KILN_ENOTFOUND) ? EXIT_USAGE
                                                                                : EXIT_FAIL;
}

int cli_usage_error(const char *verb, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "kiln %s: ", verb);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(see 'kiln %s --help')\n", verb);
  return EXIT_USAGE;
}

int cli_cache_arg(const char *verb, const char *dir, const char **out) {
  if (!*dir) return cli_usage_error(verb, "--cache '': an empty path; name a directory");
  *out = dir;
  return 0;
}

kiln_status cli_open_cache(kiln_cache **out, const char *dir, int create) {
  kiln_cache_options o = KILN_CACHE_OPTIONS_INIT;
  o.dir = dir;
  o.create = create == 1;
  o.read_only = create == CLI_CACHE_READ_ONLY;
  return kiln_cache_open(out, &o);
}

const char *cli_human_size(char out[32], uint64_t b) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4)
    v /= 1024, u++;
  if (u == 0)
    snprintf(out, 32, "%llu B", (unsigned long long)b);
  else
    snprintf(out, 32, "%.1f %s", v, units[u]);
  return out;
}

void cli_print_json(json_t *v) {
  char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s) puts(s);
  free(s);
  json_decref(v);
}

json_t *cli_record_json(const kiln_record *r) {
  json_t *o = json_object();
  json_object_set_new(o, "key", json_string(r->key));
  json_object_set_new(o, "unit", json_string(r->unit));
  json_object_set_new(o, "target", json_string(r->target));
  json_object_set_new(o, "kind", json_string(r->kind));
  json_object_set_new(o, "digest", json_string(r->digest));
  json_object_set_new(o, "size", json_integer((json_int_t)r->size));
  json_object_set_new(o, "toolchain", json_string(r->toolchain));
  json_object_set_new(o, "options", json_string(r->options));
  json_object_set_new(o, "build_ms", json_real(r->build_ms));
  json_object_set_new(o, "registers", json_integer(r->registers));
  json_object_set_new(o, "spill_stores", json_integer(r->spill_stores));
  json_object_set_new(o, "spill_loads", json_integer(r->spill_loads));
  json_object_set_new(o, "shared_bytes", json_integer(r->shared_bytes));
  json_object_set_new(o, "stack_bytes", json_integer(r->stack_bytes));
  json_object_set_new(o, "log_digest", json_string(r->log_digest));
  json_object_set_new(o, "created", json_integer(r->created));
  json_object_set_new(o, "last_used", json_integer(r->last_used));
  json_object_set_new(o, "layer", json_integer(r->layer));
  return o;
}

kiln_status cli_parse_size(unsigned long long *out, const char *s) {
  char *end = NULL;
  unsigned long long v, mult = 1;
  if (!s || *s < '0' || *s > '9') return KILN_EINVAL; /* strtoull would take " -1" or "+5" */
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || end == s) return KILN_EINVAL;
  if (*end) {
    switch (*end) {
    case 'k':
    case 'K': mult = 1ULL << 10; break;
    case 'm':
    case 'M': mult = 1ULL << 20; break;
    case 'g':
    case 'G': mult = 1ULL << 30; break;
    case 't':
    case 'T': mult = 1ULL << 40; break;
    default: return KILN_EINVAL;
    }
    end++;
    if (*end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return KILN_EINVAL;
  }
  if (v > ULLONG_MAX / mult) return KILN_EINVAL;
  *out = v * mult;
  return KILN_OK;
}
