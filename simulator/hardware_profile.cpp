#include "simulator/hardware_profile.hpp"

#include <algorithm>
#include <cmath>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/base/json_text.hpp"
#include "core/base/limits.hpp"
#include "core/model/model_io.hpp"

namespace shardcast::sim {
namespace {

// GEMM kernel efficiency relative to the clocked peak (peak * GpuSpec::computeClockScale()): 1. The
// measured best-shape matmul rate (reference-cases.json max_achievable_matmul_bf16) is what the
// GPU's sustained clock and the GEMM shape factors explain (core/plan/cluster.cpp derives the clock),
// so no further factor is applied; a calibrated profile replaces these with measured values.
constexpr double kForwardEfficiencyMax = 1.0;
constexpr double kBackwardEfficiencyMax = 1.0;
// Tasks without ops only: half of eff_max is reached by a task that would take 8 us at peak.
constexpr double kGemmHalfSeconds = 8e-6;
// FlashAttention-2 (Dao 2023, section 4.1, A100): forward up to 73% and backward up to 63% of the
// 312 TFLOP/s peak (head dim 128, long sequences, boost clock). The cost model serialises a flash
// kernel's matmuls with its exponentials (special-function units: 16 per SM per clock) and FP32
// softmax work, as FA2 does within a warp. At A100's boost clock a (query, key) pair costs 4 * 128
// matmul FLOPs = 1.641 ps at peak, one exponential 1 / (108 * 16 * 1.41e9) = 0.410 ps and 4 FP32
// operations 4 / 19.5e12 = 0.205 ps: 73% of peak leaves 1.641 / 0.73 - 0.615 = 1.633 ps for the
// matmuls, i.e. efficiency 1.0. Backward: 10 * 128 FLOPs = 4.103 ps at peak, one exponential and
// 3 FP32 operations (0.564 ps); 63% leaves 5.95 ps: efficiency 0.69. On H100 the same kernel spends
// relatively longer in the exponentials (989 TFLOP/s of matmul against 3.9 T exp/s), which is what
// slows FA2 there (Shah et al. 2024, FlashAttention-3, section 1).
constexpr double kAttentionForwardEfficiency = 1.0;
constexpr double kAttentionBackwardEfficiency = 0.69;
// GPU-side cost of a kernel launch in eager mode: back-to-back launches of short kernels measure
// 2-4 us each beyond their execution (NVIDIA, "Getting Started with CUDA Graphs", 2019: a 2.9 us
// kernel takes 3.8 us per launch streamed, 9.6 us with a sync); 3 us.
constexpr int64_t kKernelLaunchNs = 3'000;
// Memory-bound kernels (copies, casts, the fused AdamW step) reach about 80% of the HBM data-sheet
// bandwidth (e.g. H100 SXM copy kernels measure ~2.6-2.8 of 3.35 TB/s).
constexpr double kHbmEfficiency = 0.8;
// NCCL busbw at large sizes over NVLink: reference-cases.json, 8 x H200 (450 GB/s NVLink one way),
// 16 GiB: all-gather 361.4 GB/s (0.80), reduce-scatter 362.9 (0.81), ring all-reduce 367.2 (0.82).
// NVLS all-reduce reaches 480 GB/s (1.07) on NVSwitch systems with NVLink SHARP; the default keeps
// the ring figure, which holds on every NVLink system (a profile may raise it).
constexpr double kNvlinkAllGatherEfficiency = 0.80;
constexpr double kNvlinkReduceScatterEfficiency = 0.80;
constexpr double kNvlinkAllReduceEfficiency = 0.82;
// Across nodes a ring carries, per node, one rank's traffic spread over the node's NICs (one per
// GPU): busbw_max = efficiency * network_bytes_per_s * (GPUs of the group per node). NCCL over
// InfiniBand reaches ~85% of the line rate at large sizes (e.g. ~42-45 GB/s busbw per 400 Gb/s port).
constexpr double kNetworkEfficiency = 0.85;
// Shape of busbw against size: fitted to reference-cases.json's 8 x H200 all-reduce busbw by size
// (16 MiB 219.89, 64 MiB 346.51, 256 MiB 436.15, 1 GiB 463.58, 16 GiB 482.26 GB/s) as
// busbw_max * S / (S + half) plus the 10 us base latency: least squares on log(busbw) over 16 MiB to
// 16 GiB gives half = 17.5 MiB (within 3% everywhere but 64 MiB, +6%). Below 16 MiB NCCL's LL
// protocols do better than this curve (1 MiB: 39.9 measured, ~18 predicted); FSDP's messages are
// tens of MiB and more.
constexpr double kBusbwHalfBytes = 17.5 * 1024 * 1024;
// Pinned host <-> device copies reach ~80% of the PCIe line rate (e.g. ~25 of 31.5 GB/s on gen4).
constexpr double kHostLinkEfficiency = 0.8;
// CPU AdamW under offload: DeepSpeed's vectorised CPU-Adam (ZeRO-Offload, Ren et al. 2021) and
// torch.optim.AdamW(fused) on a many-core host run of order 1e9 - 2e9 elements/s; we take 1e9.
// The lowering counts an fp32 AdamW step as 28 bytes per element (read param, grad, exp_avg,
// exp_avg_sq; write param, exp_avg, exp_avg_sq), so the rate is given in those bytes: 28e9 B/s.
constexpr double kCpuOptimizerBytesPerS = 1.0e9 * 28.0;
// NCCL kernels occupy SMs (one CTA per channel) and HBM bandwidth while they run. A GPU that
// states how many SMs (GpuSpec::nccl_ctas) gives compute sm_count / (sm_count - nccl_ctas): a GEMM
// or attention CTA needs most of an SM's registers and shared memory, so it does not share an SM
// with an NCCL CTA, and the work spreads over the SMs left. Otherwise 1.15, the middle of the
// 10-20% slowdown usually reported for GEMMs overlapped with NCCL.
constexpr double kOverlapComputeSlowdown = 1.15;
// Collectives under concurrent compute: the GPU presets keep them at their uncontended speed (1.0:
// no figure to rely on yet, a GPU calibration will measure it). On the CPU backend the ranks'
// communication threads share cores with compute and slow by orders of magnitude; `shardcast
// calibrate` measures the factor.
constexpr double kOverlapCollectiveSlowdown = 1.0;
// Host issue costs: PyTorch eager dispatch + cudaLaunchKernel is ~5-10 us per op; a task is at
// least one op. FSDP2's per-unit pre/post hooks (Python, stream syncs, all-gather bookkeeping) cost
// of order 100 us per unit and pass.
constexpr int64_t kTaskLaunchNs = 10'000;
constexpr int64_t kUnitHookNs = 100'000;

// Efficiencies are measured / nominal; calibrated ones may exceed 1 a little when a data sheet
// understates a link, never by orders of magnitude. A positive one is at least kMinEfficiency.
constexpr double kMinEfficiency = 1e-4;
constexpr double kMaxEfficiency = 4;
constexpr double kMaxSlowdown = 1000;  // the CPU backend measures up to about 100x
constexpr double kMaxHalfFlops = 1e18;
constexpr double kMaxHalfBytes = 1125899906842624.0;  // 2^50
constexpr double kMaxIssueNs = 1e9;                   // 1 s per task or hook
constexpr double kMinSlowdown = 1 / kMaxSlowdown;
constexpr double kMaxHostCores = 1e6;

using DoubleField = double HardwareProfile::*;
using Int64Field = int64_t HardwareProfile::*;
struct Field {
    const char* key;
    std::variant<DoubleField, Int64Field> member;
    // Valid range, both ends (docs/limits.md), so that no duration leaves int64 nanoseconds.
    double min, max;
};


const std::vector<Field>& fields() {
    static const std::vector<Field> f = {
        {"forward_efficiency_max", &HardwareProfile::forward_efficiency_max, kMinEfficiency, kMaxEfficiency},
        {"backward_efficiency_max", &HardwareProfile::backward_efficiency_max, kMinEfficiency, kMaxEfficiency},
        {"gemm_half_flops", &HardwareProfile::gemm_half_flops, 0, kMaxHalfFlops},
        {"hbm_efficiency", &HardwareProfile::hbm_efficiency, kMinEfficiency, kMaxEfficiency},
        {"attention_forward_efficiency", &HardwareProfile::attention_forward_efficiency, kMinEfficiency, kMaxEfficiency},
        {"attention_backward_efficiency", &HardwareProfile::attention_backward_efficiency, kMinEfficiency, kMaxEfficiency},
        {"kernel_launch_ns", &HardwareProfile::kernel_launch_ns, 0, kMaxIssueNs},
        {"nvlink_all_gather_efficiency", &HardwareProfile::nvlink_all_gather_efficiency, kMinEfficiency, kMaxEfficiency},
        {"nvlink_reduce_scatter_efficiency", &HardwareProfile::nvlink_reduce_scatter_efficiency, kMinEfficiency, kMaxEfficiency},
        {"nvlink_all_reduce_efficiency", &HardwareProfile::nvlink_all_reduce_efficiency, kMinEfficiency, kMaxEfficiency},
        {"network_efficiency", &HardwareProfile::network_efficiency, kMinEfficiency, kMaxEfficiency},
        {"busbw_half_bytes", &HardwareProfile::busbw_half_bytes, 0, kMaxHalfBytes},
        {"host_link_efficiency", &HardwareProfile::host_link_efficiency, kMinEfficiency, kMaxEfficiency},
        {"cpu_optimizer_bytes_per_s", &HardwareProfile::cpu_optimizer_bytes_per_s, core::limits::kMinBytesPerS, core::limits::kMaxBytesPerS},
        {"overlap_compute_slowdown", &HardwareProfile::overlap_compute_slowdown, kMinSlowdown, kMaxSlowdown},
        {"overlap_collective_slowdown", &HardwareProfile::overlap_collective_slowdown, kMinSlowdown, kMaxSlowdown},
        {"task_launch_ns", &HardwareProfile::task_launch_ns, 0, kMaxIssueNs},
        {"unit_hook_ns", &HardwareProfile::unit_hook_ns, 0, kMaxIssueNs},
        {"host_cores", &HardwareProfile::host_cores, 0, kMaxHostCores},
    };
    return f;
}

std::string validKeys() {
    std::string s = "gpu";
    for (const auto& f : fields()) s += std::string(", ") + f.key;
    return s;
}

}  // namespace

double overlapComputeSlowdown(const core::GpuSpec& gpu) {
    if (gpu.sm_count <= 0 || gpu.nccl_ctas <= 0 || gpu.nccl_ctas >= gpu.sm_count) return kOverlapComputeSlowdown;
    return static_cast<double>(gpu.sm_count) / static_cast<double>(gpu.sm_count - gpu.nccl_ctas);
}

HardwareProfile HardwareProfile::fromCluster(const core::ClusterSpec& cluster) {
    HardwareProfile p;
    p.gpu = cluster.gpu;
    p.forward_efficiency_max = kForwardEfficiencyMax;
    p.backward_efficiency_max = kBackwardEfficiencyMax;
    p.gemm_half_flops = kGemmHalfSeconds * cluster.gpu.peak_flops_bf16;
    p.hbm_efficiency = kHbmEfficiency;
    p.attention_forward_efficiency = kAttentionForwardEfficiency;
    p.attention_backward_efficiency = kAttentionBackwardEfficiency;
    p.kernel_launch_ns = kKernelLaunchNs;
    p.nvlink_all_gather_efficiency = kNvlinkAllGatherEfficiency;
    p.nvlink_reduce_scatter_efficiency = kNvlinkReduceScatterEfficiency;
    p.nvlink_all_reduce_efficiency = kNvlinkAllReduceEfficiency;
    p.network_efficiency = kNetworkEfficiency;
    p.busbw_half_bytes = kBusbwHalfBytes;
    p.host_link_efficiency = kHostLinkEfficiency;
    p.cpu_optimizer_bytes_per_s = kCpuOptimizerBytesPerS;
    p.overlap_compute_slowdown = overlapComputeSlowdown(cluster.gpu);
    p.overlap_collective_slowdown = kOverlapCollectiveSlowdown;
    p.task_launch_ns = kTaskLaunchNs;
    p.unit_hook_ns = kUnitHookNs;
    return p;
}

core::Result<HardwareProfile> profileFromJson(const nlohmann::json& j, const std::string& where,
                                              const HardwareProfile& base) {
    if (!j.is_object()) {
        return core::makeError(where + ": a hardware profile must be a JSON object (got " +
                               std::string(j.type_name()) + ")");
    }
    HardwareProfile p = base;
    for (const auto& [key, value] : j.items()) {
        if (key == "gpu") {
            if (!value.is_object()) return core::makeError(where + ": gpu must be an object of GPU keys");
            nlohmann::json merged = core::gpuToJson(base.gpu);
            if (value.contains("base")) merged = nlohmann::json::object();
            for (const auto& [gk, gv] : value.items()) merged[gk] = gv;
            auto gpu = core::gpuFromJson(merged, where + ": gpu");
            if (!gpu) return gpu.error();
            p.gpu = std::move(*gpu);
            continue;
        }
        if (key == "gpus_per_node") {
            return core::makeError(where + ": gpus_per_node is not a profile key (earlier versions wrote it): "
                                   "the cluster's shape comes from the plan (--gpus-per-node); remove the key");
        }
        const auto& fs = fields();
        auto f = std::find_if(fs.begin(), fs.end(), [&k = key](const Field& x) { return k == x.key; });
        if (f == fs.end()) {
            return core::makeError(where + ": unknown profile key '" + key + "'; valid keys: " + validKeys());
        }
        if (!value.is_number()) {
            return core::makeError(where + ": " + key + " must be a number (got " + core::jsonExcerpt(value) + ")");
        }
        const double v = value.get<double>();
        if (!(v >= f->min && v <= f->max)) {
            return core::makeError(fmt::format("{}: {} must be from {:g} to {:g} (the limit; see docs/limits.md) (got {})",
                                               where, key, f->min, f->max, core::jsonExcerpt(value)));
        }
        if (const auto* d = std::get_if<DoubleField>(&f->member)) {
            p.**d = v;
        } else {
            if (!value.is_number_integer()) {
                return core::makeError(where + ": " + key + " must be an integer (got " + core::jsonExcerpt(value) + ")");
            }
            p.*std::get<Int64Field>(f->member) = value.get<int64_t>();
        }
    }
    return p;
}

nlohmann::json profileToJson(const HardwareProfile& profile) {
    nlohmann::json j = nlohmann::json::object();
    j["gpu"] = core::gpuToJson(profile.gpu);
    for (const auto& f : fields()) {
        std::visit([&](auto member) { j[f.key] = profile.*member; }, f.member);
    }
    return j;
}

core::Result<HardwareProfile> loadProfile(const std::filesystem::path& path, const HardwareProfile& base) {
    auto j = core::readJsonFile(path);
    if (!j) return j.error();
    return profileFromJson(*j, path.string(), base);
}

core::Status saveProfile(const std::filesystem::path& path, const HardwareProfile& profile) {
    return core::writeFileAtomically(path, profileToJson(profile).dump(2) + "\n");
}

core::Result<HardwareProfile> resolveProfile(const core::ClusterSpec& cluster, const std::filesystem::path& file) {
    HardwareProfile defaults = HardwareProfile::fromCluster(cluster);
    if (file.empty()) return defaults;
    return loadProfile(file, defaults);
}

}  // namespace shardcast::sim
