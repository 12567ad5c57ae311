// Probe: does this MPI detect a lost rank and let the survivors agree on the
// rest (ULFM: MPIX_Comm_revoke / _shrink / _agree)? Rank 2 SIGKILLs itself
// before a barrier; the others print what the barrier returned and the shrunk
// communicator. Build and run: README.md.
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  double t0 = MPI_Wtime();
  if (rank == 2) raise(SIGKILL);
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  int eclass = 0;
  MPI_Error_class(rc, &eclass);
  if (rc != MPI_SUCCESS) {
    MPIX_Comm_revoke(MPI_COMM_WORLD);
    MPI_Comm shrunk;
    MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk);
    int nsize, nrank, flag = 1;
    MPI_Comm_size(shrunk, &nsize);
    MPI_Comm_rank(shrunk, &nrank);
    MPIX_Comm_agree(shrunk, &flag);
    printf("rank %d (pid %d): barrier failed class %d (PROC_FAILED=%d REVOKED=%d); shrunk to %d ranks, new rank %d, agree %d, %.3f s\n",
           rank, getpid(), eclass, MPIX_ERR_PROC_FAILED, MPIX_ERR_REVOKED, nsize, nrank, flag, MPI_Wtime() - t0);
    MPI_Comm_free(&shrunk);
  } else {
    printf("rank %d: barrier ok\n", rank);
  }
  MPI_Finalize();
  return 0;
}
