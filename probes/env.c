/* Settings the probes report, read through common/params.c as the loader
 * reads them (one parser per variable). */
#include "common/params.h"
#include "kiln/probe.h"

kiln_status kiln_probe_offline(int *out) {
  *out = 0;
  return kiln_param_offline(out);
}
