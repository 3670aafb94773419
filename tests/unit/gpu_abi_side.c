/* Half of test_common_gpu_abi: compiled twice, once against kiln's own
 * declarations (common/gpu_abi.h) and once, with -DKILN_ABI_FROM_TOOLKIT,
 * against the CUDA toolkit's cuda.h, nvrtc.h and nccl.h, each time into a
 * table named ABI_SIDE. The toolkit side also checks every entry point of
 * common/{cuda,nvrtc,nccl}_syms.def against the toolkit's prototype, at
 * compile time: a signature that drifts does not build. */
#include "tests/unit/gpu_abi_side.h"

#include "common/gpu_abi.h"

const abi_entry ABI_SIDE[] = {
#define ABI_VALUE(name) {#name, (long long)(name)},
#define ABI_SIZE(type) {"sizeof(" #type ")", (long long)sizeof(type)},
#include "tests/unit/gpu_abi_values.def"
#undef ABI_SIZE
#undef ABI_VALUE
    {NULL, 0}};

#ifdef KILN_ABI_FROM_TOOLKIT
#define SAME(fn, ret, params)                                                                      \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), ret(*) params),                     \
                 #fn ": kiln's signature differs from the toolkit's");
#define KILN_SYM(ret, name, params) SAME(cu##name, ret, params)
#include "common/cuda_syms.def"
#undef KILN_SYM
#define KILN_SYM(ret, name, params) SAME(nvrtc##name, ret, params)
#include "common/nvrtc_syms.def"
#undef KILN_SYM
#define KILN_SYM(ret, name, params) SAME(nccl##name, ret, params)
#define KILN_SYM_OPTIONAL KILN_SYM
#include "common/nccl_syms.def"
#undef KILN_SYM_OPTIONAL
#undef KILN_SYM
#endif
