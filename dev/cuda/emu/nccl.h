#pragma once
// NCCL for the CUDA emulation, over MPI (emu_nccl.cpp): the calls gpt2cp makes,
// with NCCL's semantics. Each emulated rank is its own device, so several ranks
// on one machine use NCCL here as they would on one GPU each.
#include "cuda_emu.h"

typedef int ncclResult_t;
enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4,
    ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7
};
typedef struct EmuNcclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef enum { ncclChar = 0, ncclInt32 = 2, ncclFloat32 = 7, ncclFloat64 = 8 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;

const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream);
