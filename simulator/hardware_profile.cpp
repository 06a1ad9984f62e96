#include "simulator/hardware_profile.hpp"

#include <algorithm>
#include <cmath>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_io.hpp"
#include "core/model_io.hpp"

namespace shardcast::sim {
namespace {

// Dense bf16 GEMM efficiency. tests/data/reference-cases.json: a large bf16 matmul measured at
// 794.5 TFLOP/s on H100 SXM = 0.80 of the 989 TFLOP/s data-sheet peak. A transformer block is
// mostly GEMMs plus norms, activations and flash attention, which run below the GEMM rate, so
// whole forward tasks get 0.75. Backward is lower: FlashAttention-2 (Dao 2023, section 4.1)
// reaches ~73% of A100 peak forward but ~63% backward, and weight/data-gradient GEMMs have
// less favourable shapes; 0.70.
constexpr double kForwardEfficiencyMax = 0.75;
constexpr double kBackwardEfficiencyMax = 0.70;
// Small tasks do not fill the GPU (wave quantisation, launch gaps). Half of eff_max is reached by
// a task that would take 8 us at peak: a 4096^3 GEMM (137 GFLOP) then reaches 94% of eff_max on
// H100, a GPT-2 block at 1K tokens (~15 GFLOP) about 65%.
constexpr double kGemmHalfSeconds = 8e-6;
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
// NCCL kernels occupy SMs (8-32 channels, one CTA each, of 108-132 SMs) and HBM bandwidth while they
// run; GEMMs overlapped with NCCL typically slow by 10-20%. 1.15 is the middle of that range.
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

using DoubleField = double HardwareProfile::*;
using Int64Field = int64_t HardwareProfile::*;
struct Field {
    const char* key;
    std::variant<DoubleField, Int64Field> member;
    bool positive;  // must be > 0 (otherwise >= 0)
};

const std::vector<Field>& fields() {
    static const std::vector<Field> f = {
        {"forward_efficiency_max", &HardwareProfile::forward_efficiency_max, true},
        {"backward_efficiency_max", &HardwareProfile::backward_efficiency_max, true},
        {"gemm_half_flops", &HardwareProfile::gemm_half_flops, false},
        {"hbm_efficiency", &HardwareProfile::hbm_efficiency, true},
        {"nvlink_all_gather_efficiency", &HardwareProfile::nvlink_all_gather_efficiency, true},
        {"nvlink_reduce_scatter_efficiency", &HardwareProfile::nvlink_reduce_scatter_efficiency, true},
        {"nvlink_all_reduce_efficiency", &HardwareProfile::nvlink_all_reduce_efficiency, true},
        {"network_efficiency", &HardwareProfile::network_efficiency, true},
        {"busbw_half_bytes", &HardwareProfile::busbw_half_bytes, false},
        {"host_link_efficiency", &HardwareProfile::host_link_efficiency, true},
        {"cpu_optimizer_bytes_per_s", &HardwareProfile::cpu_optimizer_bytes_per_s, true},
        {"overlap_compute_slowdown", &HardwareProfile::overlap_compute_slowdown, true},
        {"overlap_collective_slowdown", &HardwareProfile::overlap_collective_slowdown, true},
        {"task_launch_ns", &HardwareProfile::task_launch_ns, false},
        {"unit_hook_ns", &HardwareProfile::unit_hook_ns, false},
    };
    return f;
}

std::string validKeys() {
    std::string s = "gpu";
    for (const auto& f : fields()) s += std::string(", ") + f.key;
    return s;
}

}  // namespace

HardwareProfile HardwareProfile::fromCluster(const core::ClusterSpec& cluster) {
    HardwareProfile p;
    p.gpu = cluster.gpu;
    p.forward_efficiency_max = kForwardEfficiencyMax;
    p.backward_efficiency_max = kBackwardEfficiencyMax;
    p.gemm_half_flops = kGemmHalfSeconds * cluster.gpu.peak_flops_bf16;
    p.hbm_efficiency = kHbmEfficiency;
    p.nvlink_all_gather_efficiency = kNvlinkAllGatherEfficiency;
    p.nvlink_reduce_scatter_efficiency = kNvlinkReduceScatterEfficiency;
    p.nvlink_all_reduce_efficiency = kNvlinkAllReduceEfficiency;
    p.network_efficiency = kNetworkEfficiency;
    p.busbw_half_bytes = kBusbwHalfBytes;
    p.host_link_efficiency = kHostLinkEfficiency;
    p.cpu_optimizer_bytes_per_s = kCpuOptimizerBytesPerS;
    p.overlap_compute_slowdown = kOverlapComputeSlowdown;
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
        if (!value.is_number()) return core::makeError(where + ": " + key + " must be a number (got " + value.dump() + ")");
        const double v = value.get<double>();
        if (!std::isfinite(v) || v < 0 || (f->positive && v == 0)) {
            return core::makeError(where + ": " + key + " must be " + (f->positive ? "positive" : "non-negative") +
                                   " (got " + value.dump() + ")");
        }
        if (const auto* d = std::get_if<DoubleField>(&f->member)) {
            p.**d = v;
        } else {
            if (!value.is_number_integer()) {
                return core::makeError(where + ": " + key + " must be an integer (got " + value.dump() + ")");
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
