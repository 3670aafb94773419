/* The parts of the CUDA driver's, NVRTC's and NCCL's ABIs that kiln uses:
 * types and constants, declared here so that kiln builds without the CUDA
 * toolkit (the libraries themselves are dlopen'ed: common/gpu_libs.h).
 *
 * Every name is spelled as cuda.h, nvrtc.h and nccl.h spell it, with the
 * value those headers give it. tests/unit/test_common_gpu_abi.c compiles this
 * header's values and kiln's function tables against the toolkit's own
 * headers (where the toolkit is installed), so the two cannot drift: built
 * with -DKILN_ABI_FROM_TOOLKIT, this header includes the toolkit's instead.
 *
 * These ABIs are stable: each value here has been the same since CUDA 11.x,
 * NVRTC 11.x and NCCL 2.x (ncclInProgress since 2.14). */
#ifndef KILN_COMMON_GPU_ABI_H
#define KILN_COMMON_GPU_ABI_H

#ifdef KILN_ABI_FROM_TOOLKIT
#include <cuda.h>
#include <nccl.h>
#include <nvrtc.h>
#include <stddef.h>
#else
#include <stddef.h> /* size_t, in the function tables */
#include <stdint.h>

/* ---- the CUDA driver (cuda.h) ------------------------------------------------ */
typedef enum cudaError_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_INVALID_SOURCE = 300,
  CUDA_ERROR_FILE_NOT_FOUND = 301,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_TIMEOUT = 702,
  CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900, /* not permitted while a stream captures */
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901, /* the capture was invalidated by an error */
  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,    /* the legacy stream, while a stream captures */
  CUDA_ERROR_TIMEOUT = 909,
  CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef uint64_t cuuint64_t;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* 64-bit hosts only, as kiln */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

typedef enum CUdevice_attribute_enum {
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
} CUdevice_attribute;

typedef enum CUjit_option_enum {
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_NUM_OPTIONS = 35 /* how many options this ABI knows: a test double's bound */
} CUjit_option;

typedef enum CUevent_flags_enum {
  CU_EVENT_DEFAULT = 0,
  CU_EVENT_BLOCKING_SYNC = 1,
  CU_EVENT_DISABLE_TIMING = 2,
  CU_EVENT_INTERPROCESS = 4
} CUevent_flags;

/* cuStreamIsCapturing (CUDA 10.0) */
typedef enum CUstreamCaptureStatus_enum {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUdriverProcAddress_flags_enum {
  CU_GET_PROC_ADDRESS_DEFAULT = 0,
  CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2
} CUdriverProcAddress_flags;

typedef enum CUdriverProcAddressQueryResult_enum {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* ---- NVRTC (nvrtc.h) ------------------------------------------------------------ */
typedef enum { NVRTC_SUCCESS = 0 } nvrtcResult; /* other values: nvrtcGetErrorString names them */
typedef struct _nvrtcProgram *nvrtcProgram;

/* ---- NCCL (nccl.h) ------------------------------------------------------------- */
typedef enum { ncclSuccess = 0, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclUint8 = 1 } ncclDataType_t;
typedef enum { ncclMax = 2 } ncclRedOp_t;
typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t; /* the runtime's stream is the driver's */
#endif

#endif
