/* kiln list: the units built into libkiln and their entry points. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char *usage =
    "usage: kiln list [--json]\n"
    "\n"
    "Lists every kernel unit: its entry points (direction, dtype, variant), the\n"
    "dtypes it covers, its minimum GPU arch and its source files.\n"
    "\n"
    "  --json      machine-readable output\n"
    "  -h, --help  this help\n";

/* Distinct values of one entry field, in first-seen order, comma-separated. */
static void distinct(char *out, size_t cap, const kiln_unit_info *u, int field) {
  size_t len = 0;
  out[0] = '\0';
  for (size_t i = 0; i < u->n_entries; i++) {
    const char *v = field == 0   ? u->entries[i].direction
                    : field == 1 ? u->entries[i].dtype
                                 : u->entries[i].variant;
    char needle[40];
    snprintf(needle, sizeof needle, ",%s,", v);
    char padded[512];
    snprintf(padded, sizeof padded, ",%s,", out);
    if (strstr(padded, needle)) continue;
    int w = snprintf(out + len, cap - len, "%s%s", len ? "," : "", v);
    if (w < 0 || (size_t)w >= cap - len) break;
    len += (size_t)w;
  }
}

static json_t *unit_json(const kiln_unit_info *u) {
  json_t *o = json_object(), *files = json_array(), *entries = json_array();
  char digest[65] = "";
  kiln_unit_digest(digest, u);
  json_object_set_new(o, "name", json_string(u->name));
  json_object_set_new(o, "summary", json_string(u->summary));
  json_object_set_new(o, "min_arch", json_integer(u->min_arch));
  json_object_set_new(o, "digest", json_string(digest));
  for (size_t i = 0; i < u->n_files; i++)
    json_array_append_new(files, json_string(u->files[i]->path));
  json_object_set_new(o, "files", files);
  for (size_t i = 0; i < u->n_entries; i++) {
    json_t *e = json_object();
    json_object_set_new(e, "name", json_string(u->entries[i].name));
    json_object_set_new(e, "direction", json_string(u->entries[i].direction));
    json_object_set_new(e, "dtype", json_string(u->entries[i].dtype));
    json_object_set_new(e, "variant", json_string(u->entries[i].variant));
    json_array_append_new(entries, e);
  }
  json_object_set_new(o, "entries", entries);
  return o;
}

int cmd_list(int argc, char **argv) {
  static const struct option longs[] = {
      {"json", no_argument, 0, 'J'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int c, json = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    if (c == 'J')
      json = 1;
    else if (c == 'h')
      return fputs(usage, stdout), EXIT_OK;
    else
      return cli_usage_error("list", "bad option");
  }
  if (optind < argc) return cli_usage_error("list", "unexpected argument '%s'", argv[optind]);
  if (json) {
    json_t *units = json_array();
    for (size_t i = 0; i < kiln_unit_count(); i++)
      json_array_append_new(units, unit_json(kiln_unit_at(i)));
    json_t *o = json_object();
    json_object_set_new(o, "units", units);
    cli_print_json(o);
    return EXIT_OK;
  }
  for (size_t i = 0; i < kiln_unit_count(); i++) {
    const kiln_unit_info *u = kiln_unit_at(i);
    char dirs[64], dtypes[64], variants[256];
    distinct(dirs, sizeof dirs, u, 0);
    distinct(dtypes, sizeof dtypes, u, 1);
    distinct(variants, sizeof variants, u, 2);
    printf("%s — %s\n", u->name, u->summary);
    printf("  min arch: sm_%d   directions: %s   dtypes: %s\n", u->min_arch, dirs, dtypes);
    printf("  variants: %s   entry points: %zu\n", variants, u->n_entries);
    for (size_t e = 0; e < u->n_entries; e++)
      printf("    %s\n", u->entries[e].name);
  }
  return EXIT_OK;
}
