// kernels/no_gpu.c: ./train has no GPU backend. This file is linked into ./train (and the
// tests) in place of gpu/select.cu, which ./train_gpu and ./train_hip link instead: the
// same function, so train.c asks one question (backend_gpu) and the binary answers it.
#include "kernels/kernels.h"

const Backend *backend_gpu(int use_cublas, int attention_kind, const char **why) {
    (void)use_cublas;
    (void)attention_kind;
    *why = "this binary (./train, or ./train_mpi) has the CPU backend only; build ./train_gpu (make gpu, CUDA) or "
           "./train_hip (make hip), over MPI ./train_gpu_mpi (make gpu-mpi) or ./train_hip_mpi (make hip-mpi), and run "
           "that (docs/gpu.md)";
    return NULL;
}
