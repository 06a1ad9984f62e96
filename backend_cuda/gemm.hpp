#pragma once
// cuBLASLt GEMMs: C[m, n] = A[m, k] B[k, n], column-major, in bf16, fp16 or fp32 with fp32
// accumulation (CUBLAS_COMPUTE_32F) and fp32 scale. One runner per stream (its workspace and
// handle are that stream's); the heuristic's algorithm is cached per shape and dtype.
#include <cstdint>
#include <map>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/base/result.hpp"
#include "core/base/units.hpp"

namespace shardcast::cuda {

// The element type a GEMM of `dtype` runs in on the GPU: bf16 and fp16 as themselves, fp32 as
// fp32; fp8 and the integer types (no plan computes in them) as bf16.
core::DType gemmDType(core::DType dtype);

class GemmRunner {
public:
    GemmRunner() = default;
    ~GemmRunner();
    GemmRunner(const GemmRunner&) = delete;
    GemmRunner& operator=(const GemmRunner&) = delete;

    // Creates the handle and a workspace of `workspace_bytes` on the current device (what an
    // earlier failed call created is kept, not leaked).
    core::Status init(int64_t workspace_bytes = int64_t{32} << 20);
    // Enqueues C = A B on `stream` (not synchronized). dtype: gemmDType of the op's.
    core::Status run(int64_t m, int64_t n, int64_t k, core::DType dtype, const void* a, const void* b, void* c,
                     cudaStream_t stream);

private:
    struct Plan {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    core::Result<Plan*> plan(int64_t m, int64_t n, int64_t k, core::DType dtype);
    core::Status describe(Plan& p, int64_t m, int64_t n, int64_t k, core::DType dtype);
    static void destroy(Plan& p) noexcept;

    cublasLtHandle_t m_handle = nullptr;
    void* m_workspace = nullptr;
    int64_t m_workspace_bytes = 0;
    std::map<std::tuple<int64_t, int64_t, int64_t, int>, Plan> m_plans;
};

}  // namespace shardcast::cuda
