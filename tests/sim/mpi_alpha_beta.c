/* mpi_alpha_beta: the per-message latency (alpha) and per-byte cost (beta)
 * of the MPI this machine has, over loopback, for the model of
 * docs/coordination.md ("At scale") and the simulated communicator's
 * --alpha-us / --beta-ns. Ranks 0 and 1 ping-pong messages of 8 B .. 4 MiB;
 * half a round trip is alpha + beta * bytes, fitted by least squares over the
 * sizes (alpha from the small ones, beta from the large ones, each stated).
 * Then MPI_Bcast (4 KiB, the status frame) and MPI_Allreduce(MAX) of 16,640
 * bytes (the exchange) over all ranks, against the model's binomial tree
 * and recursive doubling with that alpha and beta.
 *
 *   mpirun --oversubscribe -np 8 mpi_alpha_beta [--reps 200]
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double pingpong(int rank, char *buf, int bytes, int reps) {
  double t0;
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (int i = 0; i < reps; i++) {
    if (rank == 0) {
      MPI_Send(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    }
  }
  return (MPI_Wtime() - t0) / reps / 2; /* one way */
}

static double collective(int bcast, char *buf, int bytes, int reps) {
  double t0, t, worst;
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (int i = 0; i < reps; i++) {
    if (bcast)
      MPI_Bcast(buf, bytes, MPI_CHAR, 0, MPI_COMM_WORLD);
    else
      MPI_Allreduce(MPI_IN_PLACE, buf, bytes, MPI_UNSIGNED_CHAR, MPI_MAX, MPI_COMM_WORLD);
  }
  t = (MPI_Wtime() - t0) / reps;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

int main(int argc, char **argv) {
  static const int sizes[] = {8, 64, 512, 4096, 16640, 65536, 262144, 1048576, 4194304};
  enum { NS = sizeof sizes / sizeof *sizes };
  int rank, size, reps = 200;
  double t[NS], sx = 0, sy = 0, sxx = 0, sxy = 0, alpha, beta;
  char *buf;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--reps") == 0) {
      char *end;
      long v = strtol(argv[i + 1], &end, 10);
      if (*end || v < 1 || v > 1000000) {
        if (rank == 0) fprintf(stderr, "mpi_alpha_beta: --reps %s: 1 to 1000000\n", argv[i + 1]);
        MPI_Finalize();
        return 2;
      }
      reps = (int)v;
    }
  if (size < 2) {
    if (rank == 0) fprintf(stderr, "mpi_alpha_beta: run it with at least 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  buf = calloc(1, 4194304);
  for (int s = 0; s < NS; s++) {
    int r = sizes[s] >= 1048576 ? reps / 10 + 1 : reps;
    pingpong(rank, buf, sizes[s], 5); /* warm up */
    t[s] = pingpong(rank, buf, sizes[s], r);
  }
  /* alpha: the smallest message; beta: the slope over the sizes >= 64 KiB */
  alpha = t[0];
  for (int s = 0; s < NS; s++) {
    if (sizes[s] < 65536) continue;
    sx += sizes[s], sy += t[s], sxx += (double)sizes[s] * sizes[s], sxy += (double)sizes[s] * t[s];
  }
  {
    int n = 0;
    for (int s = 0; s < NS; s++)
      n += sizes[s] >= 65536;
    beta = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  }
  if (rank == 0) {
    printf("# MPI loopback, %d ranks on this machine; one-way time = half a ping-pong round trip\n",
           size);
    printf("%10s %12s %12s %8s\n", "bytes", "measured_us", "model_us", "ratio");
    for (int s = 0; s < NS; s++) {
      double m = alpha + beta * sizes[s];
      printf("%10d %12.2f %12.2f %8.3f\n", sizes[s], t[s] * 1e6, m * 1e6, t[s] / m);
    }
    printf("alpha_us %.3f\nbeta_ns %.4f\n", alpha * 1e6, beta * 1e9);
  }
  {
    int lg = (int)ceil(log2(size)), pow2 = (1 << lg) == size ? lg : lg - 1;
    double b = collective(1, buf, 4096, reps), r = collective(0, buf, 16640, reps);
    double mb = lg * (alpha + beta * 4096);
    double mr = (pow2 + ((1 << pow2) < size ? 2 : 0)) * (alpha + beta * 16640);
    if (rank == 0) {
      printf("# collectives over %d ranks: measured, model (binomial tree bcast, recursive "
             "doubling allreduce), ratio\n",
             size);
      printf("bcast_4096_us %.2f model %.2f ratio %.3f\n", b * 1e6, mb * 1e6, b / mb);
      printf("allreduce_max_16640_us %.2f model %.2f ratio %.3f\n", r * 1e6, mr * 1e6, r / mr);
    }
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
