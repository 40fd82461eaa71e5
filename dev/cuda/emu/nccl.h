#pragma once
#include "cuda_emu.h"
typedef int ncclResult_t;
enum { ncclSuccess = 0, ncclInProgress = 7 };
typedef void *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef enum { ncclChar, ncclInt32, ncclFloat32, ncclFloat64 } ncclDataType_t;
typedef enum { ncclSum } ncclRedOp_t;
static const char *ncclGetErrorString(ncclResult_t) { return "emu nccl"; }
#define EMU_NO_NCCL { fprintf(stderr, "EMU: NCCL is not emulated\n"); abort(); }
static ncclResult_t ncclGetUniqueId(ncclUniqueId *) EMU_NO_NCCL
static ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int) EMU_NO_NCCL
static ncclResult_t ncclCommDestroy(ncclComm_t) EMU_NO_NCCL
static ncclResult_t ncclGroupStart() EMU_NO_NCCL
static ncclResult_t ncclGroupEnd() EMU_NO_NCCL
static ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) EMU_NO_NCCL
static ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) EMU_NO_NCCL
static ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) EMU_NO_NCCL
static ncclResult_t ncclAllGather(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) EMU_NO_NCCL
static ncclResult_t ncclReduceScatter(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) EMU_NO_NCCL
static ncclResult_t ncclBroadcast(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) EMU_NO_NCCL
static ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *) EMU_NO_NCCL
static ncclResult_t ncclCommAbort(ncclComm_t) EMU_NO_NCCL
