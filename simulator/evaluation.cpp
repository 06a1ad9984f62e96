#include "simulator/evaluation.hpp"

#include <cassert>
#include <string>
#include <utility>

#include "simulator/cost_model.hpp"

namespace shardcast::sim {

std::string_view stageName(EvaluationStage stage) {
    switch (stage) {
        case EvaluationStage::Validate: return "validate";
        case EvaluationStage::Lower: return "lower";
        case EvaluationStage::ReplayMemory: return "replay memory";
        case EvaluationStage::Simulate: return "simulate";
        case EvaluationStage::TimeMemory: return "time memory";
        case EvaluationStage::Summarize: return "summarize";
    }
    return "?";
}

Evaluator::Evaluator() : m_simulator(HardwareProfile{}) {}

core::Status Evaluator::evaluate(const core::Plan& given, const HardwareProfile* profile,
                                 const EvaluationOptions& options, Evaluation& out) {
    // Returns true when the caller asked to stop; reports the stage about to run otherwise.
    auto enter = [&options](EvaluationStage stage) {
        if (options.cancel && options.cancel->cancelled()) return true;
        if (options.progress) options.progress(stage);
        return false;
    };

    m_last = nullptr;
    if (enter(EvaluationStage::Validate)) return core::cancelledError();
    if (!(options.headroom >= 0.0 && options.headroom < 1.0)) {
        return core::makeError("headroom: must be a fraction of GPU memory from 0 (inclusive) to 1 (exclusive), got " +
                               std::to_string(options.headroom));
    }
    if (profile) {
        if (!(out.profile == *profile)) out.profile = *profile;
    } else {
        HardwareProfile defaults = HardwareProfile::fromCluster(given.cluster);
        if (!(out.profile == defaults)) out.profile = std::move(defaults);
    }
    const core::Plan* plan = &given;
    if (!(given.cluster.gpu == out.profile.gpu)) {
        m_plan_on_profile = given;
        m_plan_on_profile.cluster.gpu = out.profile.gpu;
        plan = &m_plan_on_profile;
    }
    auto mesh = core::validatePlan(*plan, &m_check_memo);
    if (!mesh) return mesh.error();
    out.mesh = *mesh;

    if (enter(EvaluationStage::Lower)) return core::cancelledError();
    if (auto lowered = m_lowerer.lower(*plan, out.mesh, out.program); !lowered) return lowered.error();

    if (options.issue_order_memory) {
        if (enter(EvaluationStage::ReplayMemory)) return core::cancelledError();
        core::replayMemory(out.program, out.memory);
        out.issue_order_peak_bytes = out.memory.peak_bytes;
    } else {
        out.memory = core::MemoryReport{};
        out.issue_order_peak_bytes = 0;
    }

    if (enter(EvaluationStage::Simulate)) return core::cancelledError();
    if (!(m_simulator.profile() == out.profile)) m_simulator.setProfile(out.profile);
    m_simulator.run(out.program, out.timeline);
    if (!m_simulator.inRange()) return checkStepBound(m_simulator.stepBoundSeconds()).error();

    if (enter(EvaluationStage::TimeMemory)) return core::cancelledError();
    m_timer.compute(out.program, out.timeline, out.timed, options.record_curve);
    out.memory.peak_bytes = out.timed.peak_bytes;
    out.memory.peak_task = out.timed.peak_task;
    out.memory.at_peak = out.timed.at_peak;
    out.memory.max_per_category = out.timed.max_per_category;

    if (enter(EvaluationStage::Summarize)) return core::cancelledError();
    core::summarizeStep(out.program, out.timeline, out.timed, out.profile.peakFlops(out.program.compute_dtype),
                        out.summary, options.per_unit);
    if (!options.per_unit) out.summary.units.clear();
    out.comm = core::communicationTotals(out.program);
    out.reserved = core::ReservedMemory{};
    out.fit = core::judgeFit(out.summary.peak_bytes, out.profile.gpu.memory_bytes, options.headroom);
    m_allocator_mode = plan->training.allocator;
    m_last = &out;
    if (options.reserved_memory) judgeReserved(options.headroom, out);
    return core::Ok{};
}

void Evaluator::judgeReserved(double headroom, Evaluation& out) {
    assert(m_last == &out && "judgeReserved: `out` must be this Evaluator's last evaluation");
    const int64_t capacity = out.profile.gpu.memory_bytes;
    const int64_t overhead = out.program.initial[core::index(core::MemCategory::RuntimeOverhead)];
    if (out.profile.gpu.host_device) {
        // The host's allocator returns freed memory: what is reserved is what is allocated.
        out.reserved = core::ReservedMemory{};
        out.reserved.stats.peak_allocated_bytes = out.reserved.stats.peak_reserved_bytes = out.summary.peak_bytes;
        out.fit = core::judgeFit(out.summary.peak_bytes, out.summary.peak_bytes + overhead, capacity, headroom, false);
        return;
    }
    core::AllocatorConfig config;
    config.mode = m_allocator_mode;
    config.limit_bytes = capacity - overhead;  // cudaMalloc fails past the device's free memory
    m_timer.replayAllocator(out.program, out.timeline, config, m_allocator, out.reserved);
    const core::AllocatorStats& a = out.reserved.stats;
    out.fit = core::judgeFit(out.summary.peak_bytes, a.peak_reserved_bytes + overhead, capacity, headroom,
                             a.releases > 0 || a.out_of_memory);
}

core::Result<Evaluation> evaluatePlan(const core::Plan& plan, const HardwareProfile* profile,
                                      const EvaluationOptions& options) {
    Evaluator evaluator;
    Evaluation out;
    if (auto s = evaluator.evaluate(plan, profile, options, out); !s) return s.error();
    return out;
}

}  // namespace shardcast::sim
