/* Internal: the NCCL transport of kiln_comm (loader/coord_nccl.c).
 *
 * kiln_comm_nccl (include/kiln/comm.h) is its only entry point; this header
 * holds what its callers inside kiln and its tests need beyond that: the
 * staging size (the chunk of one collective call) and how the communicator
 * is freed. */
#ifndef KILN_LOADER_COORD_NCCL_H
#define KILN_LOADER_COORD_NCCL_H

#include "kiln/comm.h"

/* One device staging buffer and one page-locked host bounce buffer of this
 * size per communicator: a collective of more bytes runs as several NCCL
 * calls of at most this many bytes, each awaited before the next. */
#define KILN_NCCL_STAGING_BYTES ((size_t)1 << 20)

/* The libnccl loaded (docs/install.md): its file, how it was found, and its
 * version ("2.28.9", "unknown" when it does not say). Loads it if needed;
 * fails as kiln_nccl_version does. */
kiln_status kiln_nccl_library(const char **path, const char **found_by, const char **version);

/* Memory: kiln_comm_free calls comm->destroy(comm->self), which frees the
 * staging buffers and the transport's state, then frees the kiln_comm. The
 * ncclComm_t is not destroyed (the caller owns it), unless the communicator
 * was aborted, in which case ncclCommAbort has already freed it. */

#endif
