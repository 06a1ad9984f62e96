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

bool CostModel::slowedByOverlap(const core::Task& task) {
    return !core::isCollective(task.kind) &&
           (task.stream == Stream::Compute || task.stream == Stream::AllGatherCopyIn);
}

double CostModel::computeSeconds(const core::Task& task, core::DType compute) const {
    const HardwareProfile& p = *m_profile;
    const double flops = static_cast<double>(task.flops);
    const double bytes = static_cast<double>(task.hbm_bytes);
    if (task.stream == Stream::Host) {
        // CPU optimizer under offload: the bytes it reads and writes at the CPU optimizer's rate.
        return bytes / p.cpu_optimizer_bytes_per_s;
    }
    double eff = 0;
    switch (task.kind) {
        case TaskKind::Forward:
        case TaskKind::Recompute: eff = p.forward_efficiency_max; break;
        case TaskKind::Backward: eff = p.backward_efficiency_max; break;
        default: eff = p.forward_efficiency_max; break;  // a memory-bound op's few FLOPs
    }
    double flop_s = 0;
    if (flops > 0) {
        eff *= flops / (flops + p.gemm_half_flops);
        flop_s = flops / (p.peakFlops(compute) * eff);
    }
    const double mem_s = bytes / (p.gpu.hbm_bytes_per_s * p.hbm_efficiency);
    // A forward or backward task is a sequence of kernels: GEMMs (compute-bound, their operand
    // traffic hidden under the math) and norms, activations, residual adds (memory-bound, whose
    // traffic the lowering counts in hbm_bytes). They run one after another, so their times add.
    // A single kernel (copy, cast, optimizer) is a roofline: the larger of the two.
    if (task.kind == TaskKind::Forward || task.kind == TaskKind::Backward || task.kind == TaskKind::Recompute) {
        return flop_s + mem_s;
    }
    return std::max(flop_s, mem_s);
}

double CostModel::durationSeconds(const core::Task& task, core::DType compute) const {
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
        default: s = computeSeconds(task, compute); break;
    }
    assert(s >= 0 && std::isfinite(s));
    return s;
}

int64_t CostModel::durationNs(const core::Task& task, core::DType compute) const {
    return roundToInt64(durationSeconds(task, compute) * 1e9);
}

core::Status CostModel::checkStepInRange(const core::Program& program) const {
    // Every task run one after the other, each slowed by the worst contention factor, plus every
    // issue cost: an upper bound of the simulated step, so if it fits, every time does.
    double serial_s = 0;
    for (const core::Task& t : program.tasks) serial_s += durationSeconds(t, program.compute_dtype);
    const double slowdown = std::max({1.0, m_profile->overlap_compute_slowdown, m_profile->overlap_collective_slowdown});
    const double issue_s = static_cast<double>(program.tasks.size()) *
                           static_cast<double>(m_profile->task_launch_ns + 2 * m_profile->unit_hook_ns) / 1e9;
    const double bound_s = serial_s * slowdown + issue_s;
    if (bound_s <= kMaxStepSeconds) return core::Ok{};
    return core::makeError(fmt::format(
        "the step's tasks add up to {:.3g} s on this hardware, beyond the {:g} s (about 31 years) a simulated step may "
        "last (docs/limits.md): the GPU or profile figures (peak_flops_*, *_bytes_per_s, *_efficiency) are too small "
        "for this plan, or the plan too large (training.micro_batch, seq_len, grad_accum)",
        bound_s, kMaxStepSeconds));
}

}  // namespace shardcast::sim
