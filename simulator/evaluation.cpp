#include "simulator/evaluation.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/base/checked_math.hpp"
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
        case EvaluationStage::ReplayAllocator: return "replay the caching allocator";
    }
    return "?";
}

Evaluator::Evaluator() : m_simulator(HardwareProfile{}) {}

double tpCommSecondsPerMicroBatch(const core::Program& program, const HardwareProfile& profile) {
    if (program.tp_size <= 1) return 0;
    const CostModel cost(profile);
    double s = 0;
    for (const core::Task& t : program.tasks) {
        if (t.micro_batch != 0 || t.ops.count == 0) continue;
        double exposed = 0;
        cost.kernelSeconds(t, program, &exposed);
        s += exposed;
    }
    return s;
}

core::Status Evaluator::evaluate(const core::Plan& plan, const HardwareProfile* profile,
                                 const EvaluationOptions& options, Evaluation& out) {
    core::Status done = core::Ok{};
    if (options.period_over > 0 && plan.training.grad_accum > options.period_over && plan.sharding.pp == 1) {
        done = evaluateByPeriod(plan, profile, options, out);
    } else {
        out.period = PeriodicStep{};
        done = evaluateWhole(plan, profile, options, out);
    }
    out.checkpoint.reset();
    out.lifecycle.reset();
    if (done && options.lifecycle) out.lifecycle = lifecycleFigures(plan, out.program, out.timeline, out.profile, out.fit.budget_bytes);
    if (done && plan.checkpoint.mode != core::CheckpointMode::None) {
        out.checkpoint = checkpointFigures(plan, out.program, out.profile, static_cast<double>(out.timeline.step_ns) * 1e-9,
                                           out.fit.budget_bytes);
    }
    return done;
}

core::Status Evaluator::evaluateWhole(const core::Plan& given, const HardwareProfile* profile,
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
    out.stages.clear();
    out.stage = 0;
    out.binding_stage = 0;
    if (out.mesh.pp > 1) {
        if (!(m_simulator.profile() == out.profile)) m_simulator.setProfile(out.profile);
        m_allocator_mode = plan->training.allocator;
        if (auto timed = timePipeline(*plan, options, out); !timed) return timed;
    } else if (auto lowered = m_lowerer.lower(*plan, out.mesh, out.program); !lowered) {
        return lowered.error();
    }
    out.program.step_micro_batches = 0;

    if (options.issue_order_memory) {
        if (enter(EvaluationStage::ReplayMemory)) return core::cancelledError();
        core::replayMemory(out.program, out.memory);
        out.issue_order_peak_bytes = out.memory.peak_bytes;
    } else {
        out.memory = core::MemoryReport{};
        out.issue_order_peak_bytes = 0;
    }

    if (out.mesh.pp == 1) {
        if (enter(EvaluationStage::Simulate)) return core::cancelledError();
        if (!(m_simulator.profile() == out.profile)) m_simulator.setProfile(out.profile);
        // Ranks sharing a node's cores (its gpus_per_node ranks) all run the same tasks at once:
        // each gets its share.
        const int64_t cores = out.profile.host_cores;
        out.core_slowdown = cores > 0 ? sharedCoreSlowdown(plan->cluster.gpus_per_node, cores) : 1.0;
        m_simulator.setCoreSlowdown(out.core_slowdown);
        m_simulator.run(out.program, out.timeline);
        if (!m_simulator.inRange()) return checkStepBound(m_simulator.stepBoundSeconds()).error();
    }

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
    out.tp_comm_s = tpCommSecondsPerMicroBatch(out.program, out.profile) * out.program.micro_batches;
    out.reserved = core::ReservedMemory{};
    out.fit = core::judgeFit(out.summary.peak_bytes, out.profile.gpu.memory_bytes, options.headroom);
    m_allocator_mode = plan->training.allocator;
    m_last = &out;
    if (options.reserved_memory) {
        if (enter(EvaluationStage::ReplayAllocator)) {
            m_last = nullptr;
            return core::cancelledError();
        }
        judgeReserved(options.headroom, out);
    }
    return core::Ok{};
}

namespace {

// The most micro-batches a stage holds between their first forward task and their last backward;
// with Interleaved1F1B, a pipeline rank's (stage, micro-batch) pairs.
int32_t microBatchesHeld(const core::Program& p) {
    const auto slots = static_cast<size_t>(p.micro_batches) * static_cast<size_t>(p.pp_virtual);
    auto slot = [&](const core::Task& t) { return static_cast<size_t>(t.chunk) * static_cast<size_t>(p.micro_batches) + static_cast<size_t>(t.micro_batch); };
    std::vector<int32_t> last_bwd(slots, -1);
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        if (t.kind == core::TaskKind::Backward) last_bwd[slot(t)] = id;
    }
    std::vector<uint8_t> started(slots, 0);
    int32_t held = 0, most = 0;
    for (int32_t id = 0; id < p.size(); ++id) {
        const core::Task& t = p.tasks[static_cast<size_t>(id)];
        const size_t k = slot(t);
        if (t.kind == core::TaskKind::Forward && !started[k]) {
            started[k] = 1;
            most = std::max(most, ++held);
        }
        if (id == last_bwd[k]) --held;
    }
    return most;
}

}  // namespace

core::Status Evaluator::timePipeline(const core::Plan& plan, const EvaluationOptions& options, Evaluation& out) {
    const int pp = out.mesh.pp;
    m_stage_programs.resize(static_cast<size_t>(pp));
    for (int s = 0; s < pp; ++s) {
        if (auto lowered = m_lowerer.lowerStage(plan, out.mesh, s, m_stage_programs[static_cast<size_t>(s)]); !lowered)
            return lowered.error();
    }
    if (options.cancel && options.cancel->cancelled()) return core::cancelledError();
    if (options.progress) options.progress(EvaluationStage::Simulate);
    if (auto timed = timeStages(plan, out); !timed) return timed;
    int64_t step_ns = 0;
    for (const core::Timeline& t : m_stage_timelines) step_ns = std::max(step_ns, t.step_ns);
    // Every stage's figures; the binding stage is the one with the most memory (reserved where
    // the allocator is replayed, since that is what fits or not).
    core::AllocatorConfig config;
    config.mode = m_allocator_mode;
    int64_t binding_bytes = -1;
    for (int s = 0; s < pp; ++s) {
        const core::Program& p = m_stage_programs[static_cast<size_t>(s)];
        const core::Timeline& tl = m_stage_timelines[static_cast<size_t>(s)];
        m_timer.compute(p, tl, m_stage_timed, false);
        StageFigures f;
        f.stage = s;
        for (int c = 0; c < out.mesh.virtual_stages; ++c) f.blocks += out.mesh.stage_blocks[static_cast<size_t>(out.mesh.rankStage(s, c))];
        f.micro_batches_held = microBatchesHeld(p);
        f.step_s = static_cast<double>(tl.step_ns) * 1e-9;
        f.compute_s = static_cast<double>(tl.busyNs(core::Stream::Compute)) * 1e-9;
        f.idle_s = std::max(0.0, static_cast<double>(step_ns) * 1e-9 - f.compute_s);
        f.p2p_s = static_cast<double>(tl.busyNs(core::Stream::PipelinePrev) + tl.busyNs(core::Stream::PipelineNext)) * 1e-9;
        f.core_slowdown = m_core_shares.empty() ? 1.0 : m_core_shares[static_cast<size_t>(s)];
        f.peak_bytes = m_stage_timed.peak_bytes;
        int64_t judged = f.peak_bytes;
        if (options.reserved_memory && !out.profile.gpu.host_device) {
            const int64_t overhead = p.initial[core::index(core::MemCategory::RuntimeOverhead)];
            config.limit_bytes = out.profile.gpu.memory_bytes - overhead;
            m_timer.replayAllocator(p, tl, config, m_allocator, m_stage_reserved);
            f.reserved_bytes = m_stage_reserved.stats.peak_reserved_bytes + overhead;
            judged = f.reserved_bytes;
        }
        if (judged > binding_bytes) {
            binding_bytes = judged;
            out.binding_stage = s;
        }
        out.stages.push_back(f);
    }
    out.stage = options.pipeline_stage >= 0 && options.pipeline_stage < pp ? options.pipeline_stage : out.binding_stage;
    out.core_slowdown = out.stages[static_cast<size_t>(out.stage)].core_slowdown;
    out.program = m_stage_programs[static_cast<size_t>(out.stage)];
    out.timeline = m_stage_timelines[static_cast<size_t>(out.stage)];
    out.timeline.step_ns = step_ns;  // the rank waits for the slowest stage before the next step
    return core::Ok{};
}

core::Status Evaluator::timeStages(const core::Plan& plan, const Evaluation& out) {
    const int64_t cores = out.profile.host_cores;
    m_core_shares.clear();
    if (cores <= 0) {
        m_simulator.setCoreSlowdown(1.0);
        m_pipeline.setCoreSlowdowns(nullptr);
        return m_pipeline.run(m_simulator, m_stage_programs, m_stage_timelines);
    }
    // Ranks sharing a node's cores (HardwareProfile::host_cores): pipeline rank s's stage holds
    // ranks [s S, (s + 1) S), S = world / pp, and node h ranks [h G, (h + 1) G). How many compute
    // at once depends on the stages' timelines, which depend on the shares: a fixed point, each
    // pass simulating the pipeline at the mean of the last shares and those its timelines give,
    // until none moves by more than 0.1% (at most kSharingPasses passes).
    constexpr int kSharingPasses = 30;
    const int pp = out.mesh.pp;
    const int gpn = plan.cluster.gpus_per_node;
    const int per_stage = plan.cluster.nodes * gpn / pp;
    std::vector<int> host(static_cast<size_t>(pp)), ranks(static_cast<size_t>(pp), std::min(per_stage, gpn));
    for (int s = 0; s < pp; ++s) host[static_cast<size_t>(s)] = s * per_stage / gpn;
    std::vector<double> shares(static_cast<size_t>(pp));
    for (size_t s = 0; s < shares.size(); ++s) shares[s] = sharedCoreSlowdown(ranks[s], cores);
    m_pipeline.setCoreSlowdowns(&shares);
    core::Status status = core::Ok{};
    for (int pass = 0; pass < kSharingPasses; ++pass) {
        status = m_pipeline.run(m_simulator, m_stage_programs, m_stage_timelines);
        if (!status) break;
        const std::vector<double> next = coreSlowdowns(m_stage_timelines, m_stage_programs, host, ranks, cores);
        bool settled = true;
        for (size_t s = 0; s < shares.size(); ++s) settled = settled && std::abs(next[s] - shares[s]) <= 1e-3 * shares[s];
        if (settled) break;
        for (size_t s = 0; s < shares.size(); ++s) shares[s] = 0.5 * (shares[s] + next[s]);
    }
    m_pipeline.setCoreSlowdowns(nullptr);
    m_simulator.setCoreSlowdown(1.0);
    m_core_shares = shares;
    return status;
}

void Evaluator::judgeReserved(double headroom, Evaluation& out) {
    assert(m_last == &out && "judgeReserved: `out` must be this Evaluator's last evaluation");
    assert(!out.period.byPeriod() && "judgeReserved: the period's proof needs the reserved figures of its probes");
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

namespace {

// What a step simulated with a given number of micro-batches adds up (extrapolated by the period)
// and what it reaches (the same once the period shows).
struct PeriodSample {
    core::StepTotals totals;
    std::vector<core::UnitTime> units;
    core::CommTotals comm;
    double model_flops = 0, hardware_flops = 0;

    int64_t peak_bytes = 0, issue_order_peak_bytes = 0;
    std::string peak_label;
    core::CategoryBytes at_peak{}, max_per_category{};
    core::ModelStates model_states;
    core::AllocatorStats reserved;

    void take(const Evaluation& e) {
        totals = core::stepTotals(e.program, e.timeline);
        units = e.summary.units;
        comm = e.comm;
        model_flops = e.program.model_flops_per_step;
        hardware_flops = e.program.hardware_flops_per_step;
        peak_bytes = e.summary.peak_bytes;
        issue_order_peak_bytes = e.issue_order_peak_bytes;
        peak_label = e.summary.peak_task >= 0 ? e.program.taskLabel(e.summary.peak_task) : std::string();
        at_peak = e.summary.at_peak;
        max_per_category = e.timed.max_per_category;
        model_states = e.memory.model_states;
        reserved = e.reserved.stats;
    }
    // The allocator's cache releases (cudaMalloc retries near the device's limit) add up like the
    // totals; everything else it reports is reached.
    bool reachesAsMuchAs(const PeriodSample& o) const {
        core::AllocatorStats mine = reserved;
        mine.releases = o.reserved.releases;
        return peak_bytes == o.peak_bytes && issue_order_peak_bytes == o.issue_order_peak_bytes &&
               peak_label == o.peak_label && at_peak == o.at_peak && max_per_category == o.max_per_category &&
               model_states.params == o.model_states.params && model_states.grads == o.model_states.grads &&
               model_states.optimizer == o.model_states.optimizer && mine == o.reserved;
    }
};

// a, b, c: consecutive micro-batch counts. Whether b - a == c - b.
bool sameStep(int64_t a, int64_t b, int64_t c) { return b - a == c - b; }
bool sameStep(double a, double b, double c) {
    const double d1 = b - a, d2 = c - b;
    return std::abs(d1 - d2) <= 1e-9 * std::max({std::abs(a), std::abs(b), std::abs(c), 1.0});
}

bool addsTheSame(const PeriodSample& a, const PeriodSample& b, const PeriodSample& c) {
    const core::StepTotals &ta = a.totals, &tb = b.totals, &tc = c.totals;
    bool same = sameStep(ta.step_ns, tb.step_ns, tc.step_ns) &&
                sameStep(ta.all_gather_ns, tb.all_gather_ns, tc.all_gather_ns) &&
                sameStep(ta.reduce_scatter_ns, tb.reduce_scatter_ns, tc.reduce_scatter_ns) &&
                sameStep(ta.all_reduce_ns, tb.all_reduce_ns, tc.all_reduce_ns) &&
                sameStep(a.comm.all_gather_bytes, b.comm.all_gather_bytes, c.comm.all_gather_bytes) &&
                sameStep(a.comm.reduce_scatter_bytes, b.comm.reduce_scatter_bytes, c.comm.reduce_scatter_bytes) &&
                sameStep(a.comm.all_reduce_bytes, b.comm.all_reduce_bytes, c.comm.all_reduce_bytes) &&
                sameStep(a.model_flops, b.model_flops, c.model_flops) &&
                sameStep(a.hardware_flops, b.hardware_flops, c.hardware_flops) &&
                sameStep(int64_t{a.reserved.releases}, int64_t{b.reserved.releases}, int64_t{c.reserved.releases}) &&
                a.units.size() == b.units.size() && b.units.size() == c.units.size();
    for (int s = 0; same && s < core::kStreamCount; ++s) {
        same = sameStep(ta.stream_busy_ns[s], tb.stream_busy_ns[s], tc.stream_busy_ns[s]);
    }
    for (size_t u = 0; same && u < a.units.size(); ++u) {
        const core::UnitTime &ua = a.units[u], &ub = b.units[u], &uc = c.units[u];
        same = sameStep(ua.compute_ns, ub.compute_ns, uc.compute_ns) &&
               sameStep(ua.all_gather_ns, ub.all_gather_ns, uc.all_gather_ns) &&
               sameStep(ua.reduce_scatter_ns, ub.reduce_scatter_ns, uc.reduce_scatter_ns) &&
               sameStep(ua.all_reduce_ns, ub.all_reduce_ns, uc.all_reduce_ns) &&
               sameStep(ua.host_copy_ns, ub.host_copy_ns, uc.host_copy_ns);
    }
    return same;
}

// x at c plus `repeats` more periods of (c - b). Checked: false on overflow.
bool extend(int64_t b, int64_t& c, int64_t repeats) {
    const auto more = core::checkedMul(c - b, repeats);
    if (!more) return false;
    const auto sum = core::checkedAdd(c, *more);
    if (!sum) return false;
    c = *sum;
    return true;
}

}  // namespace

// The probes simulate k, k + 1 and k + 2 micro-batches for k = 3, 7, 15, 31 until a period shows:
// every total the step adds up (time per stream, per collective and per unit, communication
// bytes, FLOPs) grows by the same amount from k to k + 1 as from k + 1 to k + 2, and everything it
// reaches (the allocated and reserved peaks with their breakdown and task, the allocator's state
// at the end) is the same at k + 1 and k + 2. Micro-batches k .. N - 2 then repeat micro-batch k
// (each adds the same to every total) and the step's last is the probe's last. The totals are
// extended by N - (k + 2) periods and the figures set from them; the Program, timeline and curves
// stay those of the k + 2 micro-batches, with the last labelled N - 1. tests/simulator/
// periodic_step_test.cpp holds this against whole-step simulation.
core::Status Evaluator::evaluateByPeriod(const core::Plan& given, const HardwareProfile* profile,
                                         const EvaluationOptions& options, Evaluation& out) {
    const int64_t n = given.training.grad_accum;
    core::Plan probe = given;
    EvaluationOptions probe_options = options;
    probe_options.period_over = 0;
    PeriodSample samples[3];
    for (int64_t k = 3; k + 2 < n && k <= 31; k = 2 * k + 1) {
        for (int i = 0; i < 3; ++i) {
            probe.training.grad_accum = k + i;
            if (auto s = evaluateWhole(probe, profile, probe_options, out); !s) return s;
            out.program.step_micro_batches = static_cast<int>(n);  // labels as in the whole step
            samples[i].take(out);
        }
        if (!addsTheSame(samples[0], samples[1], samples[2]) || !samples[1].reachesAsMuchAs(samples[2])) continue;

        const PeriodSample& b = samples[1];
        PeriodSample c = samples[2];
        const int64_t repeats = n - (k + 2);
        // Bounded first in seconds, so that no total below leaves int64.
        const double step_s = 1e-9 * (static_cast<double>(c.totals.step_ns) +
                                      static_cast<double>(repeats) * static_cast<double>(c.totals.step_ns - b.totals.step_ns));
        if (auto bounded = checkStepBound(step_s); !bounded) return bounded;
        bool ok = extend(b.totals.step_ns, c.totals.step_ns, repeats) &&
                  extend(b.totals.all_gather_ns, c.totals.all_gather_ns, repeats) &&
                  extend(b.totals.reduce_scatter_ns, c.totals.reduce_scatter_ns, repeats) &&
                  extend(b.totals.all_reduce_ns, c.totals.all_reduce_ns, repeats) &&
                  extend(b.comm.all_gather_bytes, c.comm.all_gather_bytes, repeats) &&
                  extend(b.comm.reduce_scatter_bytes, c.comm.reduce_scatter_bytes, repeats) &&
                  extend(b.comm.all_reduce_bytes, c.comm.all_reduce_bytes, repeats);
        for (int s = 0; ok && s < core::kStreamCount; ++s) {
            ok = extend(b.totals.stream_busy_ns[s], c.totals.stream_busy_ns[s], repeats);
        }
        int64_t releases = c.reserved.releases;
        ok = ok && extend(b.reserved.releases, releases, repeats);
        for (size_t u = 0; ok && u < c.units.size(); ++u) {
            const core::UnitTime& ub = b.units[u];
            core::UnitTime& uc = c.units[u];
            ok = extend(ub.compute_ns, uc.compute_ns, repeats) && extend(ub.all_gather_ns, uc.all_gather_ns, repeats) &&
                 extend(ub.reduce_scatter_ns, uc.reduce_scatter_ns, repeats) &&
                 extend(ub.all_reduce_ns, uc.all_reduce_ns, repeats) &&
                 extend(ub.host_copy_ns, uc.host_copy_ns, repeats);
        }
        if (!ok) return checkStepBound(std::numeric_limits<double>::infinity());
        const double r = static_cast<double>(repeats);
        out.program.model_flops_per_step = c.model_flops + r * (c.model_flops - b.model_flops);
        out.program.hardware_flops_per_step = c.hardware_flops + r * (c.hardware_flops - b.hardware_flops);
        out.summary.units = std::move(c.units);
        core::setStepFigures(c.totals, out.program.model_flops_per_step, out.program.hardware_flops_per_step,
                             out.program.rankTokens(static_cast<double>(n)),
                             out.profile.peakFlops(out.program.compute_dtype), out.summary);
        out.comm = c.comm;
        // Counted as an int32 by the allocator model; a step of kMaxGradAccum micro-batches stays
        // far below (a release per block and micro-batch at most).
        out.reserved.stats.releases = static_cast<int32_t>(std::min<int64_t>(releases, std::numeric_limits<int32_t>::max()));
        out.period = PeriodicStep{n, static_cast<int32_t>(k + 2), samples[2].totals.step_ns - b.totals.step_ns};
        out.tp_comm_s = tpCommSecondsPerMicroBatch(out.program, out.profile) * static_cast<double>(n);
        return core::Ok{};
    }
    if (n <= kWholeStepLimit) {
        out.period = PeriodicStep{};
        return evaluateWhole(given, profile, probe_options, out);
    }
    return core::makeError(fmt::format(
        "training.grad_accum: {} micro-batches per step did not settle into a repeating period within the first 33 "
        "simulated, and a step is simulated micro-batch by micro-batch only up to {} (about a second for a 405B "
        "model): lower grad_accum to at most {}",
        n, kWholeStepLimit, kWholeStepLimit));
}

core::Result<Evaluation> evaluatePlan(const core::Plan& plan, const HardwareProfile* profile,
                                      const EvaluationOptions& options) {
    Evaluator evaluator;
    Evaluation out;
    if (auto s = evaluator.evaluate(plan, profile, options, out); !s) return s.error();
    return out;
}

}  // namespace shardcast::sim
