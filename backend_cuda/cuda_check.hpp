#pragma once
// Return codes of the CUDA runtime, cuBLASLt and NCCL checked: an error naming the call and the
// library's own text for the code.
#include <string_view>

#include "core/base/result.hpp"

namespace shardcast::cuda {

core::Status cudaCheck(int code, std::string_view call);    // cudaError_t
core::Status cublasCheck(int code, std::string_view call);  // cublasStatus_t
core::Status ncclCheck(int code, std::string_view call);    // ncclResult_t

}  // namespace shardcast::cuda

// Evaluates a call once; on failure returns its Status from the enclosing function.
#define SHARDCAST_CUDA_TRY(check, call)                     \
    do {                                                    \
        if (auto shardcast_s_ = check((call), #call); !shardcast_s_) return shardcast_s_.error(); \
    } while (0)
