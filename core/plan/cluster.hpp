#pragma once
// GPUs and clusters. Preset figures are vendor data sheets and nvidia-smi readings, cited in
// cluster.cpp next to each number.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/base/units.hpp"

namespace shardcast::core {

struct GpuSpec {
    std::string name;                 // "H100-SXM"
    int64_t memory_bytes = 0;         // as the device reports it (nvidia-smi total, MiB * 2^20)
    double peak_flops_bf16 = 0;       // dense tensor-core FLOP/s
    double peak_flops_fp16 = 0;
    double peak_flops_tf32 = 0;       // used for fp32 matmuls (PyTorch allow_tf32 off by default: see fp32)
    double peak_flops_fp32 = 0;       // non-tensor FP32
    double peak_flops_fp8 = 0;        // 0 when unsupported
    double hbm_bytes_per_s = 0;
    double nvlink_bytes_per_s = 0;    // per GPU, one direction, inside a node (PCIe if no NVLink)
    double network_bytes_per_s = 0;   // per GPU, one direction, between nodes
    double host_link_bytes_per_s = 0; // GPU <-> host (PCIe), one direction
    double intra_node_latency_s = 0;  // collective base latency inside a node
    double inter_node_latency_s = 0;  // collective base latency across nodes
    // Runtime overhead: memory the job holds outside PyTorch's allocator.
    int64_t cuda_context_bytes = 0;
    int64_t cublas_workspace_bytes = 0;
    int64_t nccl_bytes_per_communicator = 0;
    // Clocks and power, for the op-level compute model (simulator/cost_model.hpp). The peak FLOP/s
    // above are data-sheet figures at the boost clock; under a dense tensor-core load the GPU holds
    // sustained_clock_mhz at its default power limit tdp_w. A lower power_limit_w lowers that
    // clock as the cube root of the power ratio (dynamic power ~ C V^2 f with V ~ f).
    // 0 means unknown: sustained = boost, power_limit = tdp.
    int32_t sm_count = 0;             // streaming multiprocessors (GEMM wave quantisation)
    double boost_clock_mhz = 0;       // the clock the peak FLOP/s figures assume
    double sustained_clock_mhz = 0;   // held by a dense bf16 GEMM at the default power limit
    double tdp_w = 0;                 // default power limit
    double power_limit_w = 0;         // the limit this GPU runs at (nvidia-smi -pl); 0: tdp_w
    // Measured kernel rates and overlap (simulator/cost_model.cpp, hardware_profile.cpp); 0: unknown.
    // max_matmul_flops_bf16: the best bf16 matmul rate a shape sweep measured at tdp_w (MAMF); no
    // GEMM runs faster (scaled by the clock at power_limit_w). mma_sync_fraction: the fraction of
    // the dense tensor peak that kernels built on Ampere's mma.sync instructions reach (FlashAttention-2,
    // which PyTorch's SDPA runs); 0 means 1, the native rate. nccl_ctas: the SMs a running NCCL ring
    // collective holds (one CTA per channel), taken from compute kernels while it runs.
    double max_matmul_flops_bf16 = 0;
    double mma_sync_fraction = 0;
    int32_t nccl_ctas = 0;
    std::string source;               // where the figures come from
    // The host is the device (plans of runs on CPUs, FSDP over gloo): its RAM is the capacity, no
    // caching allocator holds memory beyond what is allocated, and the host runs every task itself,
    // waiting for each collective (core/lower/lower.cpp). JSON "host_device", written only when true.
    bool host_device = false;

    double peakFlops(DType compute) const;  // dense peak for matmuls in that dtype
    // Clock under load at power_limit_w over the boost clock (<= 1): the fraction of the data-sheet
    // peak that tensor cores, FP32 units and special-function units reach.
    double computeClockScale() const;
    // max_matmul_flops_bf16 at power_limit_w (its clock over the clock at tdp_w); 0 when unknown.
    double matmulFlopsCap() const;
    bool operator==(const GpuSpec&) const = default;
};

const std::vector<GpuSpec>& gpuPresets();
std::optional<GpuSpec> findGpuPreset(std::string_view name);  // case-insensitive

// A GPU JSON: {"name": ..., "base": "H100-SXM" (optional preset to start from), fields as in
// GpuSpec with units in the key names}. `where` names the file for errors.
Result<GpuSpec> gpuFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::json gpuToJson(const GpuSpec& gpu);
// A preset name (case-insensitive) or a path to a GPU JSON file.
Result<GpuSpec> resolveGpu(std::string_view name_or_path);

// Checkpoint storage and failures, by default Meta's Llama 3 cluster (Llama Team, "The Llama 3 Herd
// of Models", 2024): Tectonic sustains 2 TB/s of writes for 16,384 H100s, i.e. 2,048 nodes of 8
// (section 3.3.1), and a 54-day snapshot of 405B pre-training on those GPUs saw 419 unexpected
// interruptions (section 3.3.4): 419 / (54 x 24 h x 16,384 GPUs) per GPU-hour.
inline constexpr double kDefaultStorageBytesPerSPerNode = 2e12 / 2048.0;
inline constexpr double kDefaultFailuresPerGpuHour = 419.0 / (54.0 * 24.0 * 16384.0);

struct ClusterSpec {
    GpuSpec gpu;
    int nodes = 1;
    int gpus_per_node = 8;
    // Checkpoint storage: what one node's ranks write to (and read from) it, in bytes/s.
    double storage_bytes_per_s_per_node = kDefaultStorageBytesPerSPerNode;
    // Failures that stop a job, per GPU and hour (a job on N GPUs fails N times as often).
    double failures_per_gpu_hour = kDefaultFailuresPerGpuHour;
    int worldSize() const { return nodes * gpus_per_node; }
};

}  // namespace shardcast::core
