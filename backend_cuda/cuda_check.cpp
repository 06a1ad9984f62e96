#include "backend_cuda/cuda_check.hpp"

#include <string>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace shardcast::cuda {

core::Status cudaCheck(int code, std::string_view call) {
    if (code == cudaSuccess) return core::Ok{};
    const auto e = static_cast<cudaError_t>(code);
    return core::makeError(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

core::Status cublasCheck(int code, std::string_view call) {
    if (code == CUBLAS_STATUS_SUCCESS) return core::Ok{};
    return core::makeError(std::string(call) + " failed: " +
                           cublasLtGetStatusString(static_cast<cublasStatus_t>(code)) + " (status " + std::to_string(code) + ")");
}

core::Status ncclCheck(int code, std::string_view call) {
    if (code == ncclSuccess) return core::Ok{};
    return core::makeError(std::string(call) + " failed: " + ncclGetErrorString(static_cast<ncclResult_t>(code)));
}

}  // namespace shardcast::cuda
