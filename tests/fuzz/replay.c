/* main() for replay builds of the fuzz targets: runs every file named on the
 * command line, or every file of a directory (sorted), through
 * LLVMFuzzerTestOneInput. Fails when no input was found. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  uint8_t *buf = NULL;
  long n;
  int rc = -1;
  if (!f) goto out;
  if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) goto out;
  buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) goto out;
  LLVMFuzzerTestOneInput(buf, (size_t)n);
  rc = 0;
out:
  if (rc != 0) fprintf(stderr, "replay: cannot read %s\n", path);
  free(buf);
  if (f) fclose(f);
  return rc;
}

int main(int argc, char **argv) {
  size_t count = 0;
  int failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: no such input %s\n", argv[i]);
      failed = 1;
    } else if (S_ISDIR(st.st_mode)) {
      struct dirent **names = NULL;
      int n = scandir(argv[i], &names, NULL, alphasort);
      for (int k = 0; k < n; k++) {
        char p[4096];
        struct stat fs;
        int w = snprintf(p, sizeof p, "%s/%s", argv[i], names[k]->d_name);
        if (w > 0 && (size_t)w < sizeof p && stat(p, &fs) == 0 && S_ISREG(fs.st_mode)) {
          if (run_file(p) == 0)
            count++;
          else
            failed = 1;
        }
        free(names[k]);
      }
      free(names);
    } else if (run_file(argv[i]) == 0) {
      count++;
    } else {
      failed = 1;
    }
  }
  printf("replay: %zu inputs\n", count);
  return (count == 0 || failed) ? 1 : 0;
}
