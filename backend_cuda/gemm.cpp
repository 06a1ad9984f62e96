#include "backend_cuda/gemm.hpp"

#include <string>

#include "backend_cuda/cuda_check.hpp"

namespace shardcast::cuda {
namespace {

cudaDataType_t cudaType(core::DType dtype) {
    switch (dtype) {
        case core::DType::F32: return CUDA_R_32F;
        case core::DType::F16: return CUDA_R_16F;
        default: return CUDA_R_16BF;
    }
}

}  // namespace

core::DType gemmDType(core::DType dtype) {
    switch (dtype) {
        case core::DType::F32:
        case core::DType::F16: return dtype;
        default: return core::DType::BF16;
    }
}

GemmRunner::~GemmRunner() {
    for (auto& [key, p] : m_plans) destroy(p);
    if (m_workspace != nullptr) cudaFree(m_workspace);
    if (m_handle != nullptr) cublasLtDestroy(m_handle);
}

core::Status GemmRunner::init(int64_t workspace_bytes) {
    if (m_handle == nullptr) SHARDCAST_CUDA_TRY(cublasCheck, cublasLtCreate(&m_handle));
    if (m_workspace == nullptr) SHARDCAST_CUDA_TRY(cudaCheck, cudaMalloc(&m_workspace, static_cast<size_t>(workspace_bytes)));
    m_workspace_bytes = workspace_bytes;
    return core::Ok{};
}

core::Result<GemmRunner::Plan*> GemmRunner::plan(int64_t m, int64_t n, int64_t k, core::DType dtype) {
    const auto key = std::make_tuple(m, n, k, static_cast<int>(dtype));
    if (auto found = m_plans.find(key); found != m_plans.end()) return &found->second;
    Plan p;
    if (auto s = describe(p, m, n, k, dtype); !s) {
        destroy(p);  // a failed shape is not cached: the next call reports it again
        return s.error();
    }
    return &m_plans.emplace(key, p).first->second;
}

core::Status GemmRunner::describe(Plan& p, int64_t m, int64_t n, int64_t k, core::DType dtype) {
    const cudaDataType_t type = cudaType(dtype);
    SHARDCAST_CUDA_TRY(cublasCheck, cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    SHARDCAST_CUDA_TRY(cublasCheck, cublasLtMatrixLayoutCreate(&p.a, type, static_cast<uint64_t>(m), static_cast<uint64_t>(k), m));
    SHARDCAST_CUDA_TRY(cublasCheck, cublasLtMatrixLayoutCreate(&p.b, type, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
    SHARDCAST_CUDA_TRY(cublasCheck, cublasLtMatrixLayoutCreate(&p.c, type, static_cast<uint64_t>(m), static_cast<uint64_t>(n), m));
    cublasLtMatmulPreference_t pref = nullptr;
    SHARDCAST_CUDA_TRY(cublasCheck, cublasLtMatmulPreferenceCreate(&pref));
    const auto workspace = static_cast<uint64_t>(m_workspace_bytes);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    core::Status s = cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                      &workspace, sizeof(workspace)),
                                 "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    if (s) {
        s = cublasCheck(cublasLtMatmulAlgoGetHeuristic(m_handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found),
                        "cublasLtMatmulAlgoGetHeuristic");
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (!s) return s;
    if (found == 0) {
        return core::makeError("cublasLtMatmulAlgoGetHeuristic found no algorithm for a GEMM of m " + std::to_string(m) +
                               ", n " + std::to_string(n) + ", k " + std::to_string(k) + " in " +
                               std::string(core::dtypeName(dtype)));
    }
    p.algo = result.algo;
    return core::Ok{};
}

void GemmRunner::destroy(Plan& p) noexcept {
    if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c != nullptr) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
    p = Plan{};
}

core::Status GemmRunner::run(int64_t m, int64_t n, int64_t k, core::DType dtype, const void* a, const void* b, void* c,
                             cudaStream_t stream) {
    if (m <= 0 || n <= 0 || k <= 0) return core::Ok{};
    auto p = plan(m, n, k, dtype);
    if (!p) return p.error();
    const float alpha = 1.0f, beta = 0.0f;
    return cublasCheck(cublasLtMatmul(m_handle, (*p)->desc, &alpha, a, (*p)->a, b, (*p)->b, &beta, c, (*p)->c, c, (*p)->c,
                                      &(*p)->algo, m_workspace, static_cast<size_t>(m_workspace_bytes), stream),
                       "cublasLtMatmul");
}

}  // namespace shardcast::cuda
