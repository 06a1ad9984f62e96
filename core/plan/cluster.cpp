#include "core/plan/cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/json_text.hpp"
#include "core/base/limits.hpp"
#include "core/model/model_io.hpp"

namespace shardcast::core {

namespace {


// Link figures shared by several presets, one direction.
// PCIe: 16 GT/s (gen4) or 32 GT/s (gen5) x 16 lanes x 128/130 encoding / 8 bits = 31.5 / 63.0 GB/s
// (PCI-SIG base specifications; tests/data/reference-cases.json "pcie5_x16_GBps_one_way": 63).
constexpr double kPcie4x16BytesPerS = 31.5e9;
constexpr double kPcie5x16BytesPerS = 63.0e9;
// One InfiniBand port per GPU: NDR 400 Gb/s = 50 GB/s, HDR 200 Gb/s = 25 GB/s; 100 Gb/s
// (EDR IB or 100 GbE) = 12.5 GB/s, the usual fabric of L40S servers.
constexpr double kIbNdrBytesPerS = 50e9;
constexpr double kIbHdrBytesPerS = 25e9;
constexpr double kNet100GbBytesPerS = 12.5e9;
// Base latency of a collective; defaults of the same order as nccl-tests reports for small
// messages (a few microseconds on NVLink, tens across nodes). Calibration replaces them.
constexpr double kIntraNodeLatencyS = 10e-6;
constexpr double kInterNodeLatencyS = 20e-6;
// Runtime overhead estimates. CUDA 12 context with lazy module loading (CUDA_MODULE_LOADING=LAZY,
// the default since 11.7): about 300-600 MiB per process depending on the driver; an estimate.
constexpr int64_t kCudaContextBytes = 512 * kMiB;
// PyTorch's default CUBLAS_WORKSPACE_CONFIG (aten/src/ATen/cuda/CublasHandlePool.cpp):
// ":4096:8" (8 x 4 MiB) on Hopper and newer, ":4096:2:16:8" (2 x 4 MiB + 8 x 16 KiB) before.
constexpr int64_t kCublasWorkspaceHopperBytes = 8 * 4096 * kKiB;
constexpr int64_t kCublasWorkspaceOtherBytes = 2 * 4096 * kKiB + 8 * 16 * kKiB;
// NCCL buffers per communicator (NCCL_BUFFSIZE 4 MiB per channel and peer, plus proxy and
// registration state): an estimate of what nvidia-smi shows per communicator.
constexpr int64_t kNcclBytesPerCommunicator = 128 * kMiB;
// Clock a dense bf16 GEMM holds at the default power limit, from the best-shape "maximum achievable
// matmul FLOPS" measurements (tests/data/reference-cases.json max_achievable_matmul_bf16, from
// stas00/ml-engineering): measured / peak = clock / boost x the shape factors of the simulator's
// GEMM model for that shape (simulator/cost_model.cpp: 128 x 256 tiles over the SMs, k / (k + 128)).
//  A100 SXM, 6912 x 16384 x 2048: 267.9 / 312 = 0.859 = clock/boost x 1.0 (3,456 tiles = 32 full
//  waves of 108) x 2048/2176 -> clock = 0.913 x 1,410 = 1,287 MHz.
//  H100 SXM, 6144 x 17920 x 2816: 792.1 / 989 = 0.801 = clock/boost x 3,360/3,432 (26 waves of 132)
//  x 2816/2944 -> clock = 0.855 x 1,830 = 1,565 MHz.
// No training run enters these figures.
constexpr double kA100SustainedClockMhz = 1287;
constexpr double kH100SustainedClockMhz = 1565;
// Those best-shape rates (stas00/ml-engineering compute/accelerator/README.md, "Maximum Achievable
// Matmul FLOPS comparison table", CUDA 12.1): the most any bf16 matmul reached in a brute-force
// sweep of shapes, so no GEMM of the model runs faster.
constexpr double kA100MaxMatmulFlops = 267.9e12;
constexpr double kH100MaxMatmulFlops = 792.1e12;
// FlashAttention-2 on H100 SXM5, head dim 128, seq 8k (Shah et al. 2024, FlashAttention-3,
// figures 5a and 6b, 700 W): forward 370, backward 318 TFLOP/s. Through the simulator's attention
// model (simulator/hardware_profile.cpp: matmuls at peak x efficiency, serialised with one
// exponential on the SFUs and the FP32 softmax work per (query, key) pair) at the boost clock, as
// the A100 efficiencies were derived from FlashAttention-2's A100 figures:
//   forward:  512 FLOPs / 370e12 = 1.384 ps, less 1 / (132 x 16 x 1.83e9) = 0.259 ps of exponential
//             and 4 / 66.9e12 = 0.060 ps of FP32 leaves 1.065 ps; at peak 512 / 989.4e12 = 0.517 ps:
//             efficiency 0.486 against A100's 1.0;
//   backward: 1280 / 318e12 = 4.025 ps, less 0.259 + 3 / 66.9e12 = 0.304 ps, leaves 3.722 ps; at
//             peak 1.294 ps: efficiency 0.348 against A100's 0.69, i.e. 0.504 of it.
// FA2's mma.sync instructions reach 0.49 (the mean) of what they reach on Ampere relative to the
// peak; Hopper's full rate needs the asynchronous wgmma instructions FA2 does not use.
constexpr double kHopperMmaSyncFraction = 0.49;
// NCCL's ring channels inside an NVSwitch node, one CTA (one SM) each: the topology search
// (src/graph/search.cc) finds 6 rings at its top intra-node speed (A100: 40 GB/s of 12 x 20 GB/s
// NVLink 3; H100: 60 GB/s of 18 x 20.6 GB/s NVLink 4), ncclTopoDupChannels doubles them (speed
// >= 25 GB/s) and connect.cc doubles them again: 24 on both.
constexpr int32_t kNvswitchNcclCtas = 24;

GpuSpec withDefaults(GpuSpec g) {
    g.intra_node_latency_s = kIntraNodeLatencyS;
    g.inter_node_latency_s = kInterNodeLatencyS;
    g.cuda_context_bytes = kCudaContextBytes;
    g.nccl_bytes_per_communicator = kNcclBytesPerCommunicator;
    return g;
}

std::vector<GpuSpec> makePresets() {
    std::vector<GpuSpec> presets;

    // A100: NVIDIA A100 Tensor Core GPU data sheet (2021): BF16/FP16 tensor 312 TFLOPS dense,
    // TF32 156, FP32 19.5; HBM2 1,555 GB/s (40GB) / 2,039 GB/s (80GB SXM); NVLink 600 GB/s
    // bidirectional = 300 GB/s one direction; PCIe gen4. No FP8.
    GpuSpec a100;
    a100.peak_flops_bf16 = 312e12;
    a100.peak_flops_fp16 = 312e12;
    a100.peak_flops_tf32 = 156e12;
    a100.peak_flops_fp32 = 19.5e12;
    a100.peak_flops_fp8 = 0;
    a100.nvlink_bytes_per_s = 300e9;
    a100.network_bytes_per_s = kIbHdrBytesPerS;  // DGX A100: one HDR 200 Gb/s port per GPU
    a100.host_link_bytes_per_s = kPcie4x16BytesPerS;
    a100.cublas_workspace_bytes = kCublasWorkspaceOtherBytes;
    // GA100: 108 SMs, 400 W SXM TDP (A100 data sheet); 312 TFLOPS = 108 SMs x 2,048 dense bf16
    // FLOP/clk x 1,410 MHz boost.
    a100.sm_count = 108;
    a100.boost_clock_mhz = 1410;
    a100.tdp_w = 400;
    a100.sustained_clock_mhz = kA100SustainedClockMhz;
    a100.max_matmul_flops_bf16 = kA100MaxMatmulFlops;
    a100.nccl_ctas = kNvswitchNcclCtas;
    {
        GpuSpec g = a100;
        g.name = "A100-40G";
        g.memory_bytes = int64_t{40960} * kMiB;  // nvidia-smi A100-SXM4-40GB: 40960 MiB
        g.hbm_bytes_per_s = 1.555e12;
        g.source = "NVIDIA A100 data sheet; memory: nvidia-smi total 40960 MiB";
        presets.push_back(withDefaults(g));
    }
    {
        GpuSpec g = a100;
        g.name = "A100-80G";
        g.memory_bytes = int64_t{81920} * kMiB;  // nvidia-smi A100-SXM4-80GB: 81920 MiB
        g.hbm_bytes_per_s = 2.039e12;
        g.source = "NVIDIA A100 data sheet; memory: nvidia-smi total 81920 MiB";
        presets.push_back(withDefaults(g));
    }

    // H100 SXM5: NVIDIA H100 Tensor Core GPU data sheet: BF16/FP16 1,979 TFLOPS with sparsity =
    // 989.4 dense, TF32 494.7 dense, FP32 66.9 (data sheet rounds to 67), FP8 1,978.9 dense;
    // HBM3 3.35 TB/s; NVLink 900 GB/s bidirectional = 450 GB/s one direction; PCIe gen5.
    GpuSpec h100;
    h100.peak_flops_bf16 = 989.4e12;
    h100.peak_flops_fp16 = 989.4e12;
    h100.peak_flops_tf32 = 494.7e12;
    h100.peak_flops_fp32 = 66.9e12;
    h100.peak_flops_fp8 = 1978.9e12;
    h100.nvlink_bytes_per_s = 450e9;
    h100.network_bytes_per_s = kIbNdrBytesPerS;  // DGX H100: one NDR 400 Gb/s port per GPU
    h100.host_link_bytes_per_s = kPcie5x16BytesPerS;
    h100.cublas_workspace_bytes = kCublasWorkspaceHopperBytes;
    // GH100 SXM5: 132 SMs, 700 W TDP (H100 data sheet). The 989.4 TFLOPS figure is 132 SMs x
    // 4,096 dense bf16 FLOP/clk x 1,830 MHz, so that is the clock the peak assumes.
    h100.sm_count = 132;
    h100.boost_clock_mhz = 1830;
    h100.tdp_w = 700;
    h100.sustained_clock_mhz = kH100SustainedClockMhz;
    h100.max_matmul_flops_bf16 = kH100MaxMatmulFlops;
    h100.mma_sync_fraction = kHopperMmaSyncFraction;
    h100.nccl_ctas = kNvswitchNcclCtas;
    {
        GpuSpec g = h100;
        g.name = "H100-SXM";
        g.memory_bytes = int64_t{81559} * kMiB;  // nvidia-smi H100 80GB HBM3: 81559 MiB
        g.hbm_bytes_per_s = 3.35e12;
        g.source = "NVIDIA H100 data sheet (SXM); memory: nvidia-smi total 81559 MiB";
        presets.push_back(withDefaults(g));
    }
    {
        // H100 PCIe: same data sheet, PCIe column: BF16/FP16 756 dense, TF32 378, FP32 51.2,
        // FP8 1,513; HBM2e 2.0 TB/s. Without NVLink bridges GPUs talk over PCIe gen5.
        GpuSpec g = h100;
        g.name = "H100-PCIe";
        g.memory_bytes = int64_t{81559} * kMiB;  // nvidia-smi H100 PCIe: 81559 MiB
        g.peak_flops_bf16 = 756e12;
        g.peak_flops_fp16 = 756e12;
        g.peak_flops_tf32 = 378e12;
        g.peak_flops_fp32 = 51.2e12;
        g.peak_flops_fp8 = 1513e12;
        g.hbm_bytes_per_s = 2.0e12;
        g.nvlink_bytes_per_s = kPcie5x16BytesPerS;
        // 114 SMs, 350 W; 756 TFLOPS = 114 x 4,096 x 1,620 MHz. No published sustained clock: boost.
        g.sm_count = 114;
        g.boost_clock_mhz = 1620;
        g.tdp_w = 350;
        g.sustained_clock_mhz = 0;
        g.max_matmul_flops_bf16 = 0;  // the SXM figure does not apply
        g.nccl_ctas = 0;              // no NVSwitch: unknown
        g.source = "NVIDIA H100 data sheet (PCIe); memory: nvidia-smi total 81559 MiB";
        presets.push_back(withDefaults(g));
    }
    {
        // H200 SXM: NVIDIA H200 data sheet: same GH100 compute as H100 SXM; HBM3e 4.8 TB/s.
        GpuSpec g = h100;
        g.name = "H200";
        g.memory_bytes = int64_t{143771} * kMiB;  // nvidia-smi H200 reading, as commonly reported
        g.hbm_bytes_per_s = 4.8e12;  // same GH100 at the same 700 W: H100 SXM's clocks
        g.source = "NVIDIA H200 data sheet; memory: nvidia-smi total 143771 MiB as commonly reported";
        presets.push_back(withDefaults(g));
    }
    {
        // B200 (HGX, 1,000 W): NVIDIA HGX B200 data sheet, per GPU: FP16/BF16 4.5 PFLOPS with
        // sparsity = 2.25 dense, FP8 9 sparse = 4.5 dense, TF32 2.2 sparse = 1.1 dense, FP32 75
        // TFLOPS; HBM3e 8 TB/s (first data sheet; a later revision lists 7.7 TB/s); NVLink 5
        // 1.8 TB/s bidirectional = 900 GB/s one direction; PCIe gen5 to the host.
        GpuSpec g;
        g.name = "B200";
        g.memory_bytes = int64_t{183359} * kMiB;  // nvidia-smi B200 reading, as commonly reported
        g.peak_flops_bf16 = 2.25e15;
        g.peak_flops_fp16 = 2.25e15;
        g.peak_flops_tf32 = 1.1e15;
        g.peak_flops_fp32 = 75e12;
        g.peak_flops_fp8 = 4.5e15;
        g.hbm_bytes_per_s = 8.0e12;
        g.nvlink_bytes_per_s = 900e9;
        g.network_bytes_per_s = kIbNdrBytesPerS;  // DGX B200: one 400 Gb/s port per GPU
        g.host_link_bytes_per_s = kPcie5x16BytesPerS;
        g.cublas_workspace_bytes = kCublasWorkspaceHopperBytes;
        // 148 SMs, 1,000 W; clocks not published with the data sheet: the peak is taken as sustained.
        g.sm_count = 148;
        g.tdp_w = 1000;
        g.source = "NVIDIA HGX B200 data sheet; memory: nvidia-smi total 183359 MiB as commonly reported";
        presets.push_back(withDefaults(g));
    }
    {
        // L40S: NVIDIA L40S data sheet: BF16/FP16 tensor 362.05 TFLOPS dense (733 sparse), FP8
        // 733 dense (1,466 sparse), TF32 183 dense, FP32 91.6; GDDR6 864 GB/s; no NVLink, PCIe gen4.
        GpuSpec g;
        g.name = "L40S";
        g.memory_bytes = int64_t{46068} * kMiB;  // nvidia-smi L40S reading, as commonly reported
        g.peak_flops_bf16 = 362.05e12;
        g.peak_flops_fp16 = 362.05e12;
        g.peak_flops_tf32 = 183e12;
        g.peak_flops_fp32 = 91.6e12;
        g.peak_flops_fp8 = 733e12;
        g.hbm_bytes_per_s = 0.864e12;
        g.nvlink_bytes_per_s = kPcie4x16BytesPerS;
        g.network_bytes_per_s = kNet100GbBytesPerS;
        g.host_link_bytes_per_s = kPcie4x16BytesPerS;
        g.cublas_workspace_bytes = kCublasWorkspaceOtherBytes;  // Ada (sm_89) is not Hopper
        // AD102 in L40S: 142 SMs, boost 2,520 MHz, 350 W (L40S data sheet); no sustained figure.
        g.sm_count = 142;
        g.boost_clock_mhz = 2520;
        g.tdp_w = 350;
        g.source = "NVIDIA L40S data sheet; memory: nvidia-smi total 46068 MiB as commonly reported";
        presets.push_back(withDefaults(g));
    }
    {
        // The host as the device, for plans of runs on CPUs (FSDP over gloo, as the trace import
        // compares them): this machine's RAM as capacity (sysconf at first use), no CUDA context,
        // cuBLAS workspace or NCCL buffers. The rates are one core's order of magnitude (AVX2 FMA
        // fp32, a DRAM channel, loopback TCP for gloo), to be replaced by a calibrated profile
        // (`calibrate`), not figures to plan with.
        GpuSpec g;
        g.name = "CPU";
        const long pages = sysconf(_SC_PHYS_PAGES);
        const long page_size = sysconf(_SC_PAGE_SIZE);
        g.memory_bytes = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : int64_t{16} << 30;
        g.peak_flops_bf16 = g.peak_flops_fp16 = g.peak_flops_tf32 = g.peak_flops_fp32 = 100e9;
        g.hbm_bytes_per_s = 20e9;
        g.nvlink_bytes_per_s = 2e9;
        g.network_bytes_per_s = 1.25e9;
        g.host_link_bytes_per_s = 20e9;
        g.intra_node_latency_s = 50e-6;
        g.inter_node_latency_s = 100e-6;
        g.source = "the host's RAM (sysconf); rates: order-of-magnitude figures of one CPU core, to be calibrated";
        g.host_device = true;
        presets.push_back(g);
    }
    return presets;
}

std::string presetList() {
    std::string out;
    for (const auto& g : gpuPresets()) {
        if (!out.empty()) out += ", ";
        out += g.name;
    }
    return out;
}

enum class FieldKind { Bytes, Double, Count };

struct Field {
    const char* key;
    FieldKind kind;
    int64_t GpuSpec::*bytes = nullptr;
    double GpuSpec::*value = nullptr;
    bool must_be_positive = false;  // otherwise 0 is also valid (unset, or no overhead)
    double min = 0, max = 0;        // a non-zero value must lie in [min, max] (core/base/limits.hpp)
    int32_t GpuSpec::*count = nullptr;
};

constexpr double kMinMem = static_cast<double>(limits::kMinMemoryBytes);
constexpr double kMaxMem = static_cast<double>(limits::kMaxMemoryBytes);
constexpr double kMinFlops = limits::kMinFlopsPerS, kMaxFlops = limits::kMaxFlopsPerS;
constexpr double kMinBw = limits::kMinBytesPerS, kMaxBw = limits::kMaxBytesPerS;
constexpr double kMaxLat = limits::kMaxLatencyS;
constexpr double kMaxOverhead = static_cast<double>(limits::kMaxOverheadBytes);

const std::vector<Field>& numericFields() {
    static const std::vector<Field> fields = {
        {"memory_bytes", FieldKind::Bytes, &GpuSpec::memory_bytes, nullptr, true, kMinMem, kMaxMem},
        {"peak_flops_bf16", FieldKind::Double, nullptr, &GpuSpec::peak_flops_bf16, true, kMinFlops, kMaxFlops},
        {"peak_flops_fp16", FieldKind::Double, nullptr, &GpuSpec::peak_flops_fp16, false, kMinFlops, kMaxFlops},
        {"peak_flops_tf32", FieldKind::Double, nullptr, &GpuSpec::peak_flops_tf32, false, kMinFlops, kMaxFlops},
        {"peak_flops_fp32", FieldKind::Double, nullptr, &GpuSpec::peak_flops_fp32, true, kMinFlops, kMaxFlops},
        {"peak_flops_fp8", FieldKind::Double, nullptr, &GpuSpec::peak_flops_fp8, false, kMinFlops, kMaxFlops},
        {"hbm_bytes_per_s", FieldKind::Double, nullptr, &GpuSpec::hbm_bytes_per_s, true, kMinBw, kMaxBw},
        {"nvlink_bytes_per_s", FieldKind::Double, nullptr, &GpuSpec::nvlink_bytes_per_s, true, kMinBw, kMaxBw},
        {"network_bytes_per_s", FieldKind::Double, nullptr, &GpuSpec::network_bytes_per_s, true, kMinBw, kMaxBw},
        {"host_link_bytes_per_s", FieldKind::Double, nullptr, &GpuSpec::host_link_bytes_per_s, true, kMinBw, kMaxBw},
        {"intra_node_latency_s", FieldKind::Double, nullptr, &GpuSpec::intra_node_latency_s, false, 0, kMaxLat},
        {"inter_node_latency_s", FieldKind::Double, nullptr, &GpuSpec::inter_node_latency_s, false, 0, kMaxLat},
        {"cuda_context_bytes", FieldKind::Bytes, &GpuSpec::cuda_context_bytes, nullptr, false, 0, kMaxOverhead},
        {"cublas_workspace_bytes", FieldKind::Bytes, &GpuSpec::cublas_workspace_bytes, nullptr, false, 0, kMaxOverhead},
        {"nccl_bytes_per_communicator", FieldKind::Bytes, &GpuSpec::nccl_bytes_per_communicator, nullptr, false, 0,
         kMaxOverhead},
        {"sm_count", FieldKind::Count, nullptr, nullptr, false, 1, 1e6, &GpuSpec::sm_count},
        {"boost_clock_mhz", FieldKind::Double, nullptr, &GpuSpec::boost_clock_mhz, false, 1, 1e5},
        {"sustained_clock_mhz", FieldKind::Double, nullptr, &GpuSpec::sustained_clock_mhz, false, 1, 1e5},
        {"tdp_w", FieldKind::Double, nullptr, &GpuSpec::tdp_w, false, 1, 1e5},
        {"power_limit_w", FieldKind::Double, nullptr, &GpuSpec::power_limit_w, false, 1, 1e5},
        {"max_matmul_flops_bf16", FieldKind::Double, nullptr, &GpuSpec::max_matmul_flops_bf16, false, kMinFlops, kMaxFlops},
        {"mma_sync_fraction", FieldKind::Double, nullptr, &GpuSpec::mma_sync_fraction, false, 0.01, 1},
        {"nccl_ctas", FieldKind::Count, nullptr, nullptr, false, 1, 1e6, &GpuSpec::nccl_ctas},
    };
    return fields;
}

std::string validGpuKeys() {
    std::string out = "name, base, source, host_device, memory_gib";
    for (const auto& f : numericFields()) out += std::string(", ") + f.key;
    return out;
}

}  // namespace

double GpuSpec::peakFlops(DType compute) const {
    switch (compute) {
        case DType::BF16: return peak_flops_bf16;
        case DType::F16: return peak_flops_fp16 > 0 ? peak_flops_fp16 : peak_flops_bf16;
        // PyTorch defaults to torch.backends.cuda.matmul.allow_tf32 = False: fp32 matmuls run
        // on the FP32 units, not on TF32 tensor cores.
        case DType::F32: return peak_flops_fp32;
        case DType::F8: return peak_flops_fp8 > 0 ? peak_flops_fp8 : peak_flops_bf16;
        case DType::I64:
        case DType::U8: return peak_flops_fp32;
    }
    return peak_flops_fp32;
}

namespace {

// The clock under a dense load at `power_w` (0: tdp_w) over the boost clock.
double clockScaleAt(const GpuSpec& g, double power_w) {
    if (g.boost_clock_mhz <= 0) return 1.0;
    double clock = g.sustained_clock_mhz > 0 ? g.sustained_clock_mhz : g.boost_clock_mhz;
    if (power_w > 0 && g.tdp_w > 0) clock *= std::cbrt(power_w / g.tdp_w);
    return std::min(1.0, clock / g.boost_clock_mhz);
}

}  // namespace

double GpuSpec::computeClockScale() const { return clockScaleAt(*this, power_limit_w); }

double GpuSpec::matmulFlopsCap() const {
    if (max_matmul_flops_bf16 <= 0) return 0;
    if (power_limit_w <= 0 || tdp_w <= 0 || power_limit_w == tdp_w) return max_matmul_flops_bf16;  // no cbrt per GEMM
    return max_matmul_flops_bf16 * clockScaleAt(*this, power_limit_w) / clockScaleAt(*this, 0);
}

const std::vector<GpuSpec>& gpuPresets() {
    static const std::vector<GpuSpec> presets = makePresets();
    return presets;
}

std::optional<GpuSpec> findGpuPreset(std::string_view name) {
    std::string key = toLower(name);
    if (key == "h100") key = "h100-sxm";
    if (key == "a100") key = "a100-80g";
    for (const auto& g : gpuPresets()) {
        if (toLower(g.name) == key) return g;
    }
    return std::nullopt;
}

Result<GpuSpec> gpuFromJson(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) {
        return makeError(where + ": a GPU must be a JSON object (got " + std::string(j.type_name()) + ")");
    }
    GpuSpec gpu;
    gpu.intra_node_latency_s = kIntraNodeLatencyS;
    gpu.inter_node_latency_s = kInterNodeLatencyS;
    gpu.cuda_context_bytes = kCudaContextBytes;
    gpu.cublas_workspace_bytes = kCublasWorkspaceOtherBytes;
    gpu.nccl_bytes_per_communicator = kNcclBytesPerCommunicator;
    gpu.name = "custom";
    if (auto it = j.find("base"); it != j.end()) {
        if (!it->is_string()) return makeError(where + ": base must be a GPU preset name (one of " + presetList() + ")");
        auto base = findGpuPreset(it->get<std::string>());
        if (!base) {
            return makeError(where + ": base '" + it->get<std::string>() + "' is not a GPU preset; valid: " +
                             presetList());
        }
        gpu = *base;
        gpu.source = "based on " + base->name + " (" + base->source + ")";
    } else {
        gpu.source = where;
    }

    const auto& fields = numericFields();
    for (const auto& [key, value] : j.items()) {
        if (key == "base") continue;
        if (key == "name" || key == "source") {
            if (!value.is_string()) return makeError(where + ": " + key + " must be a string");
            (key == "name" ? gpu.name : gpu.source) = value.get<std::string>();
            continue;
        }
        if (key == "host_device") {
            if (!value.is_boolean()) return makeError(where + ": host_device must be true or false");
            gpu.host_device = value.get<bool>();
            continue;
        }
        if (key == "memory_gib") {
            constexpr double kMinGib = kMinMem / static_cast<double>(kGiB), kMaxGib = kMaxMem / static_cast<double>(kGiB);
            if (!value.is_number() || !(value.get<double>() >= kMinGib && value.get<double>() <= kMaxGib)) {
                return makeError(fmt::format("{}: memory_gib must be a number of GiB from {:g} to {:g} (the limit; see "
                                             "docs/limits.md) (got {})",
                                             where, kMinGib, kMaxGib, jsonExcerpt(value)));
            }
            if (j.contains("memory_bytes")) return makeError(where + ": give memory_bytes or memory_gib, not both");
            gpu.memory_bytes = static_cast<int64_t>(std::llround(value.get<double>() * static_cast<double>(kGiB)));
            continue;
        }
        auto f = std::find_if(fields.begin(), fields.end(), [&k = key](const Field& x) { return k == x.key; });
        if (f == fields.end()) {
            return makeError(where + ": unknown GPU key '" + key + "'; valid keys: " + validGpuKeys());
        }
        if (!value.is_number()) {
            return makeError(where + ": " + key + " must be a number (got " + jsonExcerpt(value) + ")");
        }
        const double v = value.get<double>();
        const bool zero_ok = !f->must_be_positive && v == 0;
        if (!zero_ok && !(v >= f->min && v <= f->max)) {
            return makeError(fmt::format("{}: {} must be {}from {:g} to {:g} (the limit; see docs/limits.md) (got {})",
                                         where, key, f->must_be_positive || f->min == 0 ? "" : "0 or ", f->min, f->max,
                                         jsonExcerpt(value)));
        }
        if (f->kind == FieldKind::Bytes) {
            if (!value.is_number_integer()) {
                return makeError(where + ": " + key + " must be an integer number of bytes (got " + jsonExcerpt(value) +
                                 ")");
            }
            gpu.*(f->bytes) = value.get<int64_t>();
        } else if (f->kind == FieldKind::Count) {
            if (!value.is_number_integer() || v > 1e6) {
                return makeError(where + ": " + key + " must be a whole number from 0 to 1000000 (got " + jsonExcerpt(value) +
                                 ")");
            }
            gpu.*(f->count) = value.get<int32_t>();
        } else {
            gpu.*(f->value) = v;
        }
    }
    if (gpu.sustained_clock_mhz > 0 && gpu.boost_clock_mhz > 0 && gpu.sustained_clock_mhz > gpu.boost_clock_mhz) {
        return makeError(where + ": sustained_clock_mhz (" + std::to_string(gpu.sustained_clock_mhz) +
                         ") must not exceed boost_clock_mhz (" + std::to_string(gpu.boost_clock_mhz) + ")");
    }
    if (gpu.nccl_ctas > 0 && gpu.sm_count > 0 && gpu.nccl_ctas >= gpu.sm_count) {
        return makeError(fmt::format("{}: nccl_ctas ({}) must be below sm_count ({}): NCCL cannot hold every SM",
                                     where, gpu.nccl_ctas, gpu.sm_count));
    }
    if (gpu.power_limit_w > 0 && gpu.tdp_w <= 0) {
        return makeError(where + ": power_limit_w needs tdp_w (the default power limit the clocks are given at)");
    }
    // Without a base every capacity must be given.
    for (const auto& f : fields) {
        if (!f.must_be_positive) continue;
        const bool missing = f.kind == FieldKind::Bytes ? gpu.*(f.bytes) <= 0 : gpu.*(f.value) <= 0;
        if (missing) {
            return makeError(where + ": " + f.key + " is missing or not positive; give it or a \"base\" preset (" +
                             presetList() + ")");
        }
    }
    return gpu;
}

nlohmann::json gpuToJson(const GpuSpec& gpu) {
    nlohmann::json j;
    j["name"] = gpu.name;
    for (const auto& f : numericFields()) {
        if (f.kind == FieldKind::Bytes) {
            j[f.key] = gpu.*(f.bytes);
        } else if (f.kind == FieldKind::Count) {
            j[f.key] = gpu.*(f.count);
        } else {
            j[f.key] = gpu.*(f.value);
        }
    }
    j["source"] = gpu.source;
    if (gpu.host_device) j["host_device"] = true;
    return j;
}

Result<GpuSpec> resolveGpu(std::string_view name_or_path) {
    if (auto preset = findGpuPreset(name_or_path)) return *preset;
    const std::filesystem::path path{std::string(name_or_path)};
    std::error_code ec;
    // A path that exists but is no regular file (a directory, /dev/zero) gets readJsonFile's refusal.
    if (std::filesystem::exists(path, ec)) {
        auto j = readJsonFile(path);
        if (!j) return j.error();
        return gpuFromJson(*j, path.string());
    }
    return makeError("GPU '" + std::string(name_or_path) + "' is neither a preset (" + presetList() +
                     ") nor a GPU JSON file");
}

}  // namespace shardcast::core
