// Probe: a lost rank replaced in-job (ULFM). Rank 2 SIGKILLs itself; the
// survivors shrink, spawn one process, merge, and order the new communicator
// so that the replacement takes the lost rank's number; an allreduce checks
// it. Build and run: README.md.
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm parent;
  MPI_Comm_get_parent(&parent);
  double t0 = MPI_Wtime();
  MPI_Comm world2;
  int key;
  if (parent != MPI_COMM_NULL) {  // the replacement
    MPI_Comm merged;
    MPI_Intercomm_merge(parent, 1, &merged);
    int lost = 0;
    MPI_Bcast(&lost, 1, MPI_INT, 0, merged);
    key = lost;
    MPI_Comm_split(merged, 0, key, &world2);
  } else {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 2) raise(SIGKILL);
    if (MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS) { MPI_Finalize(); return 0; }
    MPIX_Comm_revoke(MPI_COMM_WORLD);
    MPI_Comm shrunk, inter, merged;
    MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk);
    double t_shrink = MPI_Wtime() - t0;
    MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, shrunk, &inter, MPI_ERRCODES_IGNORE);
    MPI_Intercomm_merge(inter, 0, &merged);
    int lost = 2;
    MPI_Bcast(&lost, 1, MPI_INT, 0, merged);
    key = rank;
    MPI_Comm_split(merged, 0, key, &world2);
    if (rank == 0) printf("shrink %.3f s, spawn+merge+split %.3f s\n", t_shrink, MPI_Wtime() - t0 - t_shrink);
  }
  int r, n, sum = 0;
  MPI_Comm_rank(world2, &r);
  MPI_Comm_size(world2, &n);
  MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, world2);
  printf("%s pid %d: rank %d of %d, allreduce of ranks %d\n", parent != MPI_COMM_NULL ? "replacement" : "survivor", getpid(), r, n, sum);
  MPI_Finalize();
  return 0;
}
