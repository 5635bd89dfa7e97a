// base/net_mpi.h: the Net of ./train_mpi (base/net.h) over MPI, one process per slice.
// Built only by `make mpi` (with mpicc); ./train never includes it.
#ifndef MESHMOE_NET_MPI_H
#define MESHMOE_NET_MPI_H

// Starts MPI with MPI_THREAD_MULTIPLE (every device thread of a process may lead an
// exchange of its own group while the others run theirs), sets the run's Net, makes die()
// name the process and end the whole job, and finalizes MPI at exit.
void net_mpi_start(int *argc, char ***argv);

#endif
