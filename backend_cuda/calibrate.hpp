#pragma once
// Calibration of the CUDA backend (`shardcast calibrate --backend cuda`; docs/calibration.md):
// microbenchmarks of what the backend runs (cuBLASLt GEMMs of the plan's shapes and a square
// sweep in bf16 and fp32, its batched-GEMM attention, its streaming kernel and cudaMemcpyAsync
// D2D for HBM, NCCL all-gather / reduce-scatter / all-reduce over the local GPUs, and a GEMM under
// an all-gather), fitted with simulator/calibration_fit as the CPU calibration is, and written as
// the same hardware profile. One process drives every GPU it calibrates (devices 0 .. gpus-1), as
// nccl-tests does with `-g N`: one communicator per GPU from ncclCommInitAll, collectives issued
// in one ncclGroupStart / ncclGroupEnd. With one GPU no communication is measured, and the result
// says so.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"
#include "core/base/units.hpp"
#include "core/program/program.hpp"
#include "measured/calibration_fit.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cuda {

// One attention product as the backend runs it per sequence and head: scores [s, s] = Q K^T, then
// out [s, d] = P V: two GEMMs, 4 s^2 d FLOPs.
struct AttentionPoint {
    int64_t seq = 0, head_dim = 0;
    double seconds = 0;
    double flops() const { return 4.0 * static_cast<double>(seq) * static_cast<double>(seq) * static_cast<double>(head_dim); }
};

struct GemmMeasurement {
    sim::GemmPoint point;
    core::DType dtype = core::DType::BF16;
    bool from_plan = false;  // a shape of the plan's Program (else the square sweep)
};

// Streaming bytes: `kernel` is "traffic kernel" (the backend's elementwise kernel) or
// "cudaMemcpyAsync D2D"; traffic = bytes read + written.
struct MemoryPoint {
    std::string kernel;
    int64_t traffic_bytes = 0;
    double seconds = 0;
    double bytesPerSecond() const { return static_cast<double>(traffic_bytes) / seconds; }
};

// A GEMM loop on every GPU's compute stream while an all-gather loop runs on the communication
// streams, against each alone (device 0's events).
struct OverlapPoint {
    int64_t gemm_size = 0;         // m = n = k, bf16
    int64_t all_gather_bytes = 0;  // nccl-tests' S
    double gemm_alone_s = 0, gemm_overlapped_s = 0;
    double all_gather_alone_s = 0, all_gather_overlapped_s = 0;
    double computeSlowdown() const { return gemm_overlapped_s / gemm_alone_s; }
    double collectiveSlowdown() const { return all_gather_overlapped_s / all_gather_alone_s; }
};

struct CudaCalibrationOptions {
    int gpus = 1;        // devices 0 .. gpus-1
    bool quick = false;  // fewer repetitions and sizes (scripts/gpu-check.sh)
    // The plan's GEMM shapes (seconds ignored) and attention shapes (seq, head_dim); empty: the
    // square sweep alone.
    std::vector<sim::GemmPoint> plan_gemms;
    std::vector<AttentionPoint> plan_attention;
    std::function<void(int, int, std::string_view)> progress;  // (points done, points in all, what)
};

struct CudaCalibrationMeasurements {
    std::string gpu_name;
    int gpus = 1;
    std::vector<GemmMeasurement> gemm;              // bf16 and fp32
    std::vector<AttentionPoint> attention;
    std::vector<MemoryPoint> memory;
    std::vector<sim::CollectivePoint> collectives;  // empty with one GPU
    std::optional<OverlapPoint> overlap;            // two GPUs or more
};

struct CudaCalibrationResult {
    CudaCalibrationMeasurements measured;
    sim::CalibrationFits fits;        // the bf16 GEMM fit (the plans' default dtype)
    sim::GemmFit fp32_fit;
    sim::HardwareProfile profile;
    bool communication_measured = false;
    std::vector<std::string> notes;  // what was not measured and what the profile holds instead
};

// Errors: a CUDA, cuBLASLt or NCCL call failed (the message names it), or a fit failed.
core::Result<CudaCalibrationResult> calibrateCuda(const CudaCalibrationOptions& options);

// The distinct GEMM shapes (forward: Forward and Recompute tasks; backward: Backward tasks) and
// attention shapes (seq, head_dim) of a Program, in ascending order, seconds 0: what calibration
// measures as "the plan's shapes". Pure: no device is touched.
struct PlanShapes {
    std::vector<sim::GemmPoint> gemms;
    std::vector<AttentionPoint> attention;
};
PlanShapes planShapes(const core::Program& program);

// The profile's GPU name for `device`: "cuda-" and cudaDeviceProp::name with spaces as '-', e.g.
// "cuda-NVIDIA-H200"; "cuda-gpu" when the device cannot be read.
std::string cudaProfileName(int device);

// nccl-tests' message sizes: 1 KiB to 1 GiB by powers of 4 (quick: to 16 MiB).
std::vector<int64_t> collectiveSizes(bool quick);

}  // namespace shardcast::cuda
