#pragma once
// Builds small Programs by hand for the simulator tests, and a profile with round numbers so that
// expected times can be worked out on paper.
#include <initializer_list>
#include <string>
#include <utility>

#include "core/program/program.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim::testing {

class ProgramBuilder {
public:
    explicit ProgramBuilder(int units = 3) {
        for (int u = 0; u < units; ++u) {
            core::UnitInfo info;
            info.name = u == 0 ? "(root)" : "model.layers." + std::to_string(u - 1);
            info.is_root = u == 0;
            m_program.units.push_back(info);
        }
    }

    // Adds a task; returns its id. Fill work fields through the returned reference of task(id).
    int32_t add(core::TaskKind kind, core::Stream stream, int32_t unit, std::initializer_list<int32_t> deps = {}) {
        core::Task t;
        t.kind = kind;
        t.stream = stream;
        t.unit = unit;
        t.deps.offset = static_cast<uint32_t>(m_program.deps.size());
        t.deps.count = static_cast<uint32_t>(deps.size());
        for (int32_t d : deps) m_program.deps.push_back(d);
        m_program.tasks.push_back(t);
        return m_program.size() - 1;
    }
    int32_t compute(core::TaskKind kind, int32_t unit, int64_t flops, std::initializer_list<int32_t> deps = {}) {
        const int32_t id = add(kind, core::Stream::Compute, unit, deps);
        task(id).flops = flops;
        return id;
    }
    int32_t collective(core::TaskKind kind, int32_t unit, int64_t bytes, int group_size, int group_nodes,
                       std::initializer_list<int32_t> deps = {}) {
        core::Stream s = core::Stream::AllGather;
        if (kind == core::TaskKind::ReduceScatter) s = core::Stream::ReduceScatter;
        if (kind == core::TaskKind::AllReduce) s = core::Stream::AllReduce;
        const int32_t id = add(kind, s, unit, deps);
        task(id).comm_bytes = bytes;
        task(id).group_size = group_size;
        task(id).group_nodes = group_nodes;
        return id;
    }
    // Memory events must be added right after the task they belong to (spans are contiguous).
    void memStart(int32_t id, std::initializer_list<core::MemEvent> events) { addMem(task(id).mem_start, events); }
    void memPeak(int32_t id, std::initializer_list<core::MemEvent> events) { addMem(task(id).mem_peak, events); }
    void memEnd(int32_t id, std::initializer_list<core::MemEvent> events) { addMem(task(id).mem_end, events); }

    core::Task& task(int32_t id) { return m_program.tasks[static_cast<size_t>(id)]; }
    core::Program& program() { return m_program; }

private:
    void addMem(core::Span& span, std::initializer_list<core::MemEvent> events) {
        span.offset = static_cast<uint32_t>(m_program.mem.size());
        span.count = static_cast<uint32_t>(events.size());
        for (const auto& e : events) m_program.mem.push_back(e);
    }
    core::Program m_program;
};

// Round numbers: 1e15 FLOP/s bf16 at efficiency 0.5 (no size dependence), 1e12 B/s HBM at
// efficiency 1, NVLink 100 GB/s at busbw efficiency 0.8 with no size dependence, 10 us latency,
// no host costs and no overlap contention. Tests change what they exercise.
inline HardwareProfile roundProfile() {
    HardwareProfile p;
    p.gpu.name = "round";
    p.gpu.memory_bytes = int64_t{80} << 30;
    p.gpu.peak_flops_bf16 = 1e15;
    p.gpu.peak_flops_fp16 = 1e15;
    p.gpu.peak_flops_fp32 = 1e14;
    p.gpu.hbm_bytes_per_s = 1e12;
    p.gpu.nvlink_bytes_per_s = 100e9;
    p.gpu.network_bytes_per_s = 10e9;
    p.gpu.host_link_bytes_per_s = 20e9;
    p.gpu.intra_node_latency_s = 10e-6;
    p.gpu.inter_node_latency_s = 20e-6;
    p.forward_efficiency_max = 0.5;
    p.backward_efficiency_max = 0.5;
    p.gemm_half_flops = 0;
    p.hbm_efficiency = 1.0;
    p.nvlink_all_gather_efficiency = 0.8;
    p.nvlink_reduce_scatter_efficiency = 0.8;
    p.nvlink_all_reduce_efficiency = 0.8;
    p.network_efficiency = 0.5;
    p.busbw_half_bytes = 0;
    p.host_link_efficiency = 1.0;
    p.cpu_optimizer_bytes_per_s = 16e9;
    p.overlap_compute_slowdown = 1.0;
    p.task_launch_ns = 0;
    p.unit_hook_ns = 0;
    return p;
}

constexpr int64_t kMs = 1'000'000;  // ns
// 1e12 FLOPs at 1e15 * 0.5 = 2 ms.
constexpr int64_t kTwoMsFlops = 1'000'000'000'000;

}  // namespace shardcast::sim::testing
