#include "simulator/cost_model.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

#include <fmt/format.h>

namespace shardcast::sim {

using core::Stream;
using core::TaskKind;

double busBandwidthFactor(TaskKind kind, int group_size) {
    const double n = group_size;
    switch (kind) {
        case TaskKind::AllGather:
        case TaskKind::ReduceScatter: return (n - 1) / n;
        case TaskKind::AllReduce: return 2 * (n - 1) / n;
        default: return 1.0;
    }
}

double CostModel::busBandwidthMax(TaskKind kind, int group_size, int group_nodes) const {
    const HardwareProfile& p = *m_profile;
    double eff = p.nvlink_all_gather_efficiency;
    if (kind == TaskKind::ReduceScatter) eff = p.nvlink_reduce_scatter_efficiency;
    if (kind == TaskKind::AllReduce) eff = p.nvlink_all_reduce_efficiency;
    const double nvlink = eff * p.gpu.nvlink_bytes_per_s;
    if (group_nodes <= 1) return nvlink;
    // A ring across nodes sends, per node, one rank's traffic, spread over the NICs of the group's
    // GPUs in that node; it is never faster than the NVLink part of the ring.
    const int per_node = std::max(1, group_size / group_nodes);
    return std::min(nvlink, p.network_efficiency * p.gpu.network_bytes_per_s * per_node);
}

double CostModel::busBandwidth(TaskKind kind, int64_t bytes, int group_size, int group_nodes) const {
    const double s = static_cast<double>(bytes);
    return busBandwidthMax(kind, group_size, group_nodes) * s / (s + m_profile->busbw_half_bytes);
}

double CostModel::collectiveSeconds(TaskKind kind, int64_t bytes, int group_size, int group_nodes) const {
    if (group_size <= 1 || bytes <= 0) return 0.0;
    const HardwareProfile& p = *m_profile;
    const double latency = group_nodes > 1 ? p.gpu.inter_node_latency_s : p.gpu.intra_node_latency_s;
    const double factor = busBandwidthFactor(kind, group_size);
    return latency + static_cast<double>(bytes) * factor / busBandwidth(kind, bytes, group_size, group_nodes);
}

double CostModel::p2pSeconds(int64_t bytes, int nodes) const {
    if (bytes <= 0) return 0.0;
    const HardwareProfile& p = *m_profile;
    const double latency = nodes > 1 ? p.gpu.inter_node_latency_s : p.gpu.intra_node_latency_s;
    // One GPU to one GPU: NVLink inside a node, its own NIC across nodes (busBandwidthMax with one
    // rank per node), with the same small-message ramp as the collectives.
    return latency + static_cast<double>(bytes) / busBandwidth(TaskKind::AllGather, bytes, 2, nodes > 1 ? 2 : 1);
}

namespace {

// Output tile of a large bf16 GEMM: cuBLAS and CUTLASS pick 128 x 256 (or 256 x 128) thread-block
// tiles for large problems on sm80 and sm90 (CUTLASS's default GEMM configurations); the longer
// side goes along the longer output dimension.
constexpr int64_t kTileShort = 128;
constexpr int64_t kTileLong = 256;
constexpr int64_t kTileMinShort = 16;
// A tile's fixed cost beyond its k loop: filling and draining the multistage pipeline and writing
// the tile, about two 64-deep k steps (CUTLASS multistage mainloop, BK = 64): k / (k + 128).
constexpr double kTileKOverhead = 128;
// Flash attention per (query, key) pair computed: one exponential (forward; the backward
// recomputes P = exp(S - lse)) and the FP32 softmax work: forward scale, running max, subtract and
// sum (4); backward dS = P * (dP - D) and the scale (3). FlashAttention-2, algorithms 1 and 2.
constexpr double kAttnExpPerPair = 1;
constexpr double kAttnFwdFp32PerPair = 4;
constexpr double kAttnBwdFp32PerPair = 3;
// Special-function units per SM: 16 (4 per SM sub-partition, Ampere and Hopper whitepapers).
constexpr double kSfuPerSmPerClock = 16;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

double CostModel::gemmShapeEfficiency(int64_t m, int64_t n, int64_t k, int64_t batch) const {
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 1.0;
    const int64_t lo = std::min(m, n), hi = std::max(m, n);
    // A dimension shorter than the tile gets the smallest power-of-two tile that covers it (cuBLAS's
    // heuristics pick narrow tiles for skinny problems), down to 16 rows.
    int64_t tile_short = kTileMinShort;
    while (tile_short < lo && tile_short < kTileShort) tile_short *= 2;
    const int64_t tiles = ceilDiv(lo, tile_short) * ceilDiv(hi, kTileLong) * batch;
    int64_t slots = tiles;  // tiles the GPU runs, counting idle SMs of the last wave
    if (const int64_t sms = m_profile->gpu.sm_count; sms > 0) slots = ceilDiv(tiles, sms) * sms;
    const double useful = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(batch);
    const double quant = useful / (static_cast<double>(slots) * static_cast<double>(tile_short * kTileLong));
    const double kk = static_cast<double>(k);
    return quant * kk / (kk + kTileKOverhead);
}

double CostModel::opSeconds(const core::OpShape& op, TaskKind kind) const {
    const HardwareProfile& p = *m_profile;
    const double launch = static_cast<double>(p.kernel_launch_ns) * 1e-9;
    const double hbm = p.gpu.hbm_bytes_per_s * p.hbm_efficiency;
    const double clock = p.gpu.computeClockScale();
    const double item = static_cast<double>(core::itemSize(op.dtype));
    switch (op.kind) {
        case core::OpShapeKind::Gemm: {
            const double eff = kind == TaskKind::Backward ? p.backward_efficiency_max : p.forward_efficiency_max;
            const double flops = static_cast<double>(core::opFlops(op));
            // A GPU preset's GEMM loses to its thread-block tiles and waves; a calibrated profile (no
            // SM count: calibratedProfile) has its measured curve instead, rate_max x f / (f + half)
            // over one GEMM's FLOPs f, the fit calibrate made of the backend's own kernel.
            const double one = flops / static_cast<double>(std::max<int64_t>(1, op.batch));
            const double shape = p.gpu.sm_count > 0 || p.gemm_half_flops <= 0
                                     ? gemmShapeEfficiency(op.m, op.n, op.k, op.batch)
                                     : one / (one + p.gemm_half_flops);
            double rate = p.peakFlops(op.dtype) * clock * eff * shape;
            // No shape runs faster than the best one a sweep measured (GpuSpec::max_matmul_flops_bf16).
            if (const double cap = p.gpu.matmulFlopsCap(); cap > 0 && (op.dtype == core::DType::BF16 || op.dtype == core::DType::F16)) {
                rate = std::min(rate, cap * eff);
            }
            const double m = static_cast<double>(op.m), n = static_cast<double>(op.n), k = static_cast<double>(op.k);
            // Operands read once and the output written once: a GEMM with a small dimension is
            // bandwidth-bound.
            const double bytes = (m * k + k * n + m * n) * item * static_cast<double>(op.batch);
            return (std::max(flops / rate, bytes / hbm) + launch) * m_core_slowdown;
        }
        case core::OpShapeKind::Attention:
        case core::OpShapeKind::AttentionBackward: {
            const bool fwd = op.kind == core::OpShapeKind::Attention;
            const double flops = static_cast<double>(core::opFlops(op));
            const double s = static_cast<double>(op.seq);
            const double pairs = static_cast<double>(op.batch) * op.heads * s * s / (op.causal ? 2 : 1);
            // FlashAttention-2's mma.sync instructions reach a fraction of a newer GPU's tensor peak.
            const double mma = p.gpu.mma_sync_fraction > 0 ? p.gpu.mma_sync_fraction : 1.0;
            const double eff = mma * (fwd ? p.attention_forward_efficiency : p.attention_backward_efficiency);
            double t = flops / (p.peakFlops(op.dtype) * clock * eff);
            if (p.gpu.sm_count > 0 && p.gpu.boost_clock_mhz > 0) {
                const double sfu = static_cast<double>(p.gpu.sm_count) * kSfuPerSmPerClock * p.gpu.boost_clock_mhz * 1e6 * clock;
                t += pairs * kAttnExpPerPair / sfu;
            }
            t += pairs * (fwd ? kAttnFwdFp32PerPair : kAttnBwdFp32PerPair) / (p.gpu.peak_flops_fp32 * clock);
            return (t + launch) * m_core_slowdown;
        }
        case core::OpShapeKind::Elementwise: {
            const double flop_s = static_cast<double>(op.flops) / (p.gpu.peakFlops(core::DType::F32) * clock);
            return (std::max(static_cast<double>(op.bytes) / hbm, flop_s) + launch) * m_core_slowdown;
        }
        case core::OpShapeKind::TpAllGather:
        case core::OpShapeKind::TpReduceScatter:
        case core::OpShapeKind::TpAllReduce:
            // The compute stream waits for it: its time on the tp group, as any collective's.
            return collectiveSeconds(core::tpCollectiveTaskKind(op.kind), op.bytes, op.group_size, op.group_nodes);
    }
    return 0.0;
}

double CostModel::kernelSeconds(const core::Task& task, const core::Program& program, double* tp_exposed) const {
    const core::OpShape* ops = program.opsBegin(task);
    const uint32_t n = task.ops.count;
    const int64_t tokens = program.tokens_per_micro_batch;
    double s = 0, exposed = 0;
    // Async TP (torch's fused_all_gather_matmul / fused_matmul_reduce_scatter) splits the GEMMs over
    // the tokens (m = the micro-batch's tokens: the forward's and the input gradient's) into
    // group_size chunks, each computed while the next chunk moves: the pair takes the longer of the
    // two plus one chunk of the shorter to fill (or drain) the pipeline, and those GEMMs run at the
    // chunks' shape. Other GEMMs next to it (weight gradients) are not part of the pipeline.
    auto tokenGemm = [&](const core::OpShape& g) { return g.kind == core::OpShapeKind::Gemm && g.m == tokens; };
    auto chunked = [&](const core::OpShape& g, int32_t parts) {
        core::OpShape c = g;
        c.m = std::max<int64_t>(1, g.m / parts);
        return opSeconds(c, task.kind) * static_cast<double>(parts);
    };
    auto pipelined = [](double comm, double gemm, double parts) { return std::max(comm, gemm) + std::min(comm, gemm) / parts; };
    // The token GEMMs of the run of GEMMs just before the current op, timed whole.
    double run_whole = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const core::OpShape& op = ops[i];
        const bool async = core::isTpCollective(op.kind) && op.overlap != 0;
        const double t = opSeconds(op, task.kind);
        if (!async) {
            s += t;
            if (core::isTpCollective(op.kind)) exposed += t;
            if (op.kind != core::OpShapeKind::Gemm) {
                run_whole = 0;
            } else if (tokenGemm(op)) {
                run_whole += t;
            }
            continue;
        }
        const int32_t parts = std::max(1, op.group_size);
        const auto p = static_cast<double>(parts);
        if (op.overlap == 1) {
            // The all-gather and the run of GEMMs after it, which read what it gathers.
            double gemm = 0;
            uint32_t j = i + 1;
            for (; j < n && ops[j].kind == core::OpShapeKind::Gemm; ++j) {
                if (tokenGemm(ops[j])) {
                    gemm += chunked(ops[j], parts);
                } else {
                    s += opSeconds(ops[j], task.kind);
                }
            }
            const double pair = pipelined(t, gemm, p);
            s += pair;
            exposed += std::max(0.0, pair - gemm);
            run_whole = 0;
            i = j - 1;
            continue;
        }
        // The reduce-scatter and the run of GEMMs before it (its token GEMMs counted whole already).
        double gemm = 0;
        for (uint32_t j = i; j > 0 && ops[j - 1].kind == core::OpShapeKind::Gemm; --j)
            if (tokenGemm(ops[j - 1])) gemm += chunked(ops[j - 1], parts);
        const double pair = pipelined(t, gemm, p);
        s += pair - run_whole;
        exposed += std::max(0.0, pair - gemm);
        run_whole = 0;
    }
    if (tp_exposed) *tp_exposed = exposed;
    return s;
}

double CostModel::computeSeconds(const core::Task& task, const core::Program& program) const {
    const HardwareProfile& p = *m_profile;
    const double flops = static_cast<double>(task.flops);
    const double bytes = static_cast<double>(task.hbm_bytes);
    if (task.stream == Stream::Host) {
        // CPU optimizer under offload: the bytes it reads and writes at the CPU optimizer's rate.
        return bytes / p.cpu_optimizer_bytes_per_s;
    }
    if (task.ops.count > 0) return kernelSeconds(task, program, nullptr);
    const core::DType compute = program.compute_dtype;
    double eff = task.kind == TaskKind::Backward ? p.backward_efficiency_max : p.forward_efficiency_max;
    double flop_s = 0;
    if (flops > 0) {
        eff *= flops / (flops + p.gemm_half_flops);
        flop_s = flops / (p.peakFlops(compute) * p.gpu.computeClockScale() * eff);
    }
    const double mem_s = bytes / (p.gpu.hbm_bytes_per_s * p.hbm_efficiency);
    // A forward or backward task is a sequence of kernels: GEMMs (compute-bound) and norms,
    // activations, residual adds (memory-bound). They run one after another, so their times add.
    // A single kernel (copy, cast, optimizer) is a roofline: the larger of the two.
    if (task.kind == TaskKind::Forward || task.kind == TaskKind::Backward || task.kind == TaskKind::Recompute) {
        return (flop_s + mem_s) * m_core_slowdown;
    }
    return std::max(flop_s, mem_s) * m_core_slowdown;
}

double CostModel::durationSeconds(const core::Task& task, const core::Program& program) const {
    double s = 0;
    switch (task.kind) {
        case TaskKind::AllGather:
        case TaskKind::ReduceScatter:
        case TaskKind::AllReduce:
            s = collectiveSeconds(task.kind, task.comm_bytes, task.group_size, task.group_nodes);
            break;
        case TaskKind::HostToDevice:
        case TaskKind::DeviceToHost:
            s = static_cast<double>(task.comm_bytes) /
                (m_profile->gpu.host_link_bytes_per_s * m_profile->host_link_efficiency);
            break;
        case TaskKind::Send:
        case TaskKind::Recv: s = p2pSeconds(task.comm_bytes, task.group_nodes); break;
        default: s = computeSeconds(task, program); break;
    }
    assert(s >= 0 && std::isfinite(s));
    return s;
}

int64_t CostModel::durationNs(const core::Task& task, const core::Program& program) const {
    return roundToInt64(durationSeconds(task, program) * 1e9);
}

core::Status checkStepBound(double bound_s) {
    if (bound_s <= kMaxStepSeconds) return core::Ok{};
    return core::makeError(fmt::format(
        "the step's tasks add up to {:.3g} s on this hardware, beyond the {:g} s (about 31 years) a simulated step may "
        "last (docs/limits.md): the GPU or profile figures (peak_flops_*, *_bytes_per_s, *_efficiency) are too small "
        "for this plan, or the plan too large (training.micro_batch, seq_len, grad_accum)",
        bound_s, kMaxStepSeconds));
}

}  // namespace shardcast::sim
