/* The smallest program that uses libkiln: open a loader on GPU 0, load the
 * scaled softmax kernels (from the cache, or built once), and run every entry
 * point of them on known inputs against a CPU reference (kiln_loader_verify).
 * Exit 0 when they all pass. Build: CMakeLists.txt here, or pkg-config:
 *   cc consumer.c $(pkg-config --cflags --libs kiln) -o consumer */
#include <kiln/kiln.h>
#include <stdio.h>

int main(void) {
  kiln_loader_options opts = KILN_LOADER_OPTIONS_INIT;
  kiln_loader_verify_summary sum;
  kiln_device_info dev;
  kiln_loader *l = NULL;
  int rc = 1;
  opts.kernels = "scaled_softmax";
  if (kiln_loader_open(&l, &opts) != KILN_OK || kiln_loader_warmup(l, NULL) != KILN_OK ||
      kiln_loader_device(&dev, l) != KILN_OK) {
    fprintf(stderr, "consumer: %s\n", kiln_last_error());
    goto out;
  }
  if (kiln_loader_verify(&sum, l) != KILN_OK) {
    fprintf(stderr, "consumer: %s\n", kiln_last_error());
    goto out;
  }
  printf("kiln %s on %s: scaled_softmax, %zu entry points passed\n", kiln_version(), dev.name,
         sum.entries);
  rc = 0;
out:
  kiln_loader_close(l);
  return rc;
}
