/* kiln — umbrella header. */
#ifndef KILN_KILN_H
#define KILN_KILN_H
#include "kiln/build.h"
#include "kiln/cache.h"
#include "kiln/comm.h"
#include "kiln/kernels.h"
#include "kiln/loader.h"
#include "kiln/log.h"
#include "kiln/ops.h"
#include "kiln/probe.h"
#include "kiln/remote.h"
#include "kiln/status.h"
#include "kiln/target.h"
#include "kiln/version.h"
#endif
