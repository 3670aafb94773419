/* kiln — the MPI transport of kiln_comm (include/kiln/comm.h).
 *
 * It lives in its own library, libkiln_mpi, built when CMake finds MPI, so
 * libkiln and the `kiln` command carry no MPI dependency (`kiln warmup --comm
 * mpi` loads libkiln_mpi with dlopen). Collectives are non-blocking (MPI_Ibcast,
 * MPI_Iallreduce) and polled with short sleeps until their deadline; errors
 * are returned, not fatal (the communicator is a duplicate with
 * MPI_ERRORS_RETURN). Only the thread that called MPI_Init uses it
 * (MPI_THREAD_FUNNELED is enough). */
#ifndef KILN_COMM_MPI_H
#define KILN_COMM_MPI_H

#include "kiln/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wraps a duplicate of *(const MPI_Comm *)mpi_comm (MPI must be initialized;
 * the caller keeps its own communicator). kiln_comm_free frees the
 * duplicate, unless the communicator was aborted after a timeout: a pending
 * collective cannot be cancelled, so it is left to MPI_Finalize / exit. */
KILN_API kiln_status kiln_comm_mpi(kiln_comm **out, const void *mpi_comm);

/* Initializes MPI (MPI_THREAD_FUNNELED) unless it already is and wraps
 * MPI_COMM_WORLD; kiln_comm_free then also finalizes MPI — unless the
 * communicator was aborted (MPI_Finalize could wait forever on a dead peer):
 * the process should then exit, and mpirun ends the job (with
 * --enable-recovery, the other ranks report their own errors first). */
KILN_API kiln_status kiln_comm_mpi_world(kiln_comm **out);

/* The symbol `kiln warmup --comm mpi` looks up in libkiln_mpi. */
typedef kiln_status (*kiln_comm_mpi_world_fn)(kiln_comm **out);

#ifdef __cplusplus
}
#endif
#endif
