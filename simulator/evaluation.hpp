#pragma once
// The planning chain every front-end shares (DESIGN.md section 1): validate -> lower -> memory replay
// in issue order -> simulate -> timed memory -> summary -> fit. The CLI, sweeps, the wrap search, the
// benchmarks and the GUI call this; none of them chains the steps itself.
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "core/base/result.hpp"
#include "core/lower/lower.hpp"
#include "core/memory/fit.hpp"
#include "core/memory/memory.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"
#include "core/results/step_summary.hpp"
#include "simulator/checkpoint.hpp"
#include "simulator/lifecycle.hpp"
#include "simulator/hardware_profile.hpp"
#include "simulator/pipeline.hpp"
#include "simulator/simulator.hpp"

namespace shardcast::sim {

// Abandons an evaluation or a sweep from another thread (the GUI re-plans on every knob change).
// Checked between stages and between sweep candidates; the work then returns core::cancelledError().
class CancelToken {
public:
    void cancel() noexcept { m_cancelled.store(true, std::memory_order_relaxed); }
    void reset() noexcept { m_cancelled.store(false, std::memory_order_relaxed); }
    bool cancelled() const noexcept { return m_cancelled.load(std::memory_order_relaxed); }

private:
    std::atomic<bool> m_cancelled{false};
};

// ReplayAllocator: PyTorch's caching allocator over the timed events (EvaluationOptions::reserved_memory).
enum class EvaluationStage : uint8_t { Validate, Lower, ReplayMemory, Simulate, TimeMemory, Summarize, ReplayAllocator };
std::string_view stageName(EvaluationStage stage);  // "validate", "lower", ...

struct EvaluationOptions {
    double headroom = core::kDefaultHeadroom;  // fraction of GPU memory "fits" keeps free, in [0, 1)
    bool issue_order_memory = true;  // also replay in host issue order (model states, the allocator's view)
    bool record_curve = false;       // keep the timed memory curve (traces, memory views)
    bool per_unit = true;            // per-unit time breakdown in the summary
    bool lifecycle = true;           // init, eval and summon_full_params figures (Evaluation::lifecycle)
    bool reserved_memory = true;     // replay the timed events through the caching allocator model;
                                     // "fits" is then judged on reserved memory
    // A step of more micro-batches than this is simulated by its period (Evaluator::evaluate):
    // the figures are the whole step's, the Program and timeline hold its first micro-batches and
    // its last. 0: every micro-batch is simulated, as a run, a comparison or a saved prediction
    // needs. kPeriodOver is what front-ends that only report use.
    int32_t period_over = 0;
    // Pipeline parallelism: the stage Evaluation::program describes (a run's recorded rank's);
    // -1: the stage whose memory binds.
    int32_t pipeline_stage = -1;
    const CancelToken* cancel = nullptr;
    std::function<void(EvaluationStage)> progress;  // on the evaluating thread, before each stage
};

// EvaluationOptions::period_over for front-ends that report: from 17 micro-batches on, the probes
// (at most 3 + 4 + 5 micro-batches where the period shows at once) cost less than the whole step.
inline constexpr int32_t kPeriodOver = 16;
// Where the period does not show within the probes, a step of at most this many micro-batches is
// simulated whole (about 1 s for Llama-3.1-405B, 3.75 ms per micro-batch); a longer one is refused.
inline constexpr int64_t kWholeStepLimit = 256;

// How a step simulated by its period was assembled: micro-batches 0 .. simulated - 2 and the
// step's last were simulated; each of the repeats between them adds what micro-batch
// simulated - 2 added to the one before it.
struct PeriodicStep {
    int64_t micro_batches = 0;  // of the step; 0: the step was simulated whole
    int32_t simulated = 0;      // in the Program and timeline
    int64_t period_ns = 0;      // step time each repeated micro-batch adds
    bool byPeriod() const { return micro_batches > 0; }
};

// One pipeline stage's figures (pp > 1), each rank of the stage alike.
struct StageFigures {
    int32_t stage = 0;
    int32_t blocks = 0;               // transformer blocks it holds (all its stages' with Interleaved1F1B)
    int32_t micro_batches_held = 0;   // the most micro-batches between their forward and backward
                                      // (Interleaved1F1B: (stage, micro-batch) pairs of the rank)
    double step_s = 0;                // until its own optimizer step ends
    double compute_s = 0;             // compute stream busy
    double idle_s = 0;                // compute stream idle within the pipeline's step: the bubble
                                      // (waiting for other stages) and exposed communication
    double p2p_s = 0;                 // P2P stream busy, receives' waits included
    double core_slowdown = 1;         // ranks sharing CPU cores: its CPU work's slowdown (coreSlowdowns)
    int64_t peak_bytes = 0;           // allocated peak on the simulated timeline
    int64_t reserved_bytes = 0;       // reserved peak + runtime overhead; 0 without reserved memory
};

// Everything a front-end shows for one plan. Reused between evaluations: its vectors keep their
// capacity. Under pipeline parallelism the Program, timeline and memory are those of the stage
// whose memory binds (`stage`), its timeline lasting the pipeline's step (the slowest stage's), and
// `stages` has every stage's figures.
struct Evaluation {
    core::Mesh mesh;
    HardwareProfile profile;        // the figures in effect: every GPU figure shown comes from here
    core::Program program;
    core::Timeline timeline;
    core::TimedMemory timed;        // memory on the simulated timeline
    // The report users read: model states and issue-order figures from the replay, with the peak,
    // its task, the breakdown at the peak and the per-category maxima of the timed curve (prefetch
    // and overlap move the peak). Without issue_order_memory only the timed fields are set.
    core::MemoryReport memory;
    int64_t issue_order_peak_bytes = 0;  // the allocator's view in host issue order
    core::StepSummary summary;
    core::CommTotals comm;
    // PyTorch's caching allocator (plan.training.allocator) over the timed events; zero without
    // EvaluationOptions::reserved_memory. Its figures exclude Runtime Overhead.
    core::ReservedMemory reserved;
    core::FitVerdict fit;           // reserved (else allocated) peak against profile.gpu.memory_bytes
    PeriodicStep period;            // set when the step was simulated by its period
    // Tensor-parallel collectives the compute stream waits for, per step, uncontended (0 without
    // tensor parallelism; under async TP what the overlapped GEMMs leave exposed): part of
    // compute_s, shown on their own.
    double tp_comm_s = 0;
    // Ranks sharing a node's CPU cores (HardwareProfile::host_cores): how many times longer the
    // shown rank's CPU work takes than with a core to itself (a mean over its busy time with
    // pipeline stages); 1 when nothing is shared.
    double core_slowdown = 1;
    std::vector<StageFigures> stages;  // pp > 1: per pipeline stage
    int32_t stage = 0;                 // pp > 1: the stage `program` is
    int32_t binding_stage = 0;         // pp > 1: the stage whose memory binds (the most reserved, else allocated)
    std::optional<CheckpointFigures> checkpoint;  // plan.checkpoint.mode != none (simulator/checkpoint.hpp)
    std::optional<LifecycleFigures> lifecycle;    // init and summon_full_params (simulator/lifecycle.hpp)
};

// The seconds of tensor-parallel collectives inside the compute tasks of one micro-batch of
// `program` (micro-batch 0), uncontended.
double tpCommSecondsPerMicroBatch(const core::Program& program, const HardwareProfile& profile);

class Evaluator {
public:
    Evaluator();
    Evaluator(const Evaluator&) = delete;
    Evaluator& operator=(const Evaluator&) = delete;

    // Validates and evaluates `plan`. `profile` null: HardwareProfile::fromCluster(plan.cluster).
    // A profile whose GPU differs from the plan's replaces it for the lowering too (runtime
    // overhead), so one set of GPU figures is in effect. Errors: the plan's (naming the field) or,
    // when options.cancel fires, core::cancelledError(). `out` is valid only on success.
    core::Status evaluate(const core::Plan& plan, const HardwareProfile* profile, const EvaluationOptions& options,
                          Evaluation& out);

    // Replays the caching allocator over `out`, this Evaluator's last successful evaluation, made
    // without reserved_memory and simulated whole (not by its period), and judges fit on reserved memory: `out` then equals what evaluate()
    // gives with reserved_memory. Lets a search judge on reserved memory only where the allocated
    // peak cannot decide (reserved >= allocated: an allocated peak over the budget cannot fit).
    void judgeReserved(double headroom, Evaluation& out);
    // Reuse the figures of an identical earlier allocator replay among the last `entries`
    // (core::MemoryTimer::keepReplays; 0, the default: replay every time).
    void keepReplays(size_t entries) { m_timer.keepReplays(entries); }
    int64_t replaysReused() const { return m_timer.replaysReused(); }

private:
    core::Status evaluateWhole(const core::Plan& plan, const HardwareProfile* profile, const EvaluationOptions& options,
                               Evaluation& out);
    core::Status evaluateByPeriod(const core::Plan& plan, const HardwareProfile* profile,
                                  const EvaluationOptions& options, Evaluation& out);
    // pp > 1: lowers and times every stage (PipelineTimer), fills out.stages and leaves the stage
    // whose memory binds in out.program and out.timeline.
    core::Status timePipeline(const core::Plan& plan, const EvaluationOptions& options, Evaluation& out);
    // The stage Programs timed as one pipeline, at the cores' shares where ranks share them.
    core::Status timeStages(const core::Plan& plan, const Evaluation& out);
    std::vector<double> m_core_shares;  // per pipeline rank, the last timeStages' (empty: none shared)

    core::Lowerer m_lowerer;
    Simulator m_simulator;
    PipelineTimer m_pipeline;
    std::vector<core::Program> m_stage_programs;
    std::vector<core::Timeline> m_stage_timelines;
    core::TimedMemory m_stage_timed;
    core::ReservedMemory m_stage_reserved;
    core::MemoryTimer m_timer;
    core::CachingAllocatorModel m_allocator;
    core::Plan m_plan_on_profile;  // scratch: the plan with the profile's GPU
    core::PlanCheckMemo m_check_memo;
    core::AllocatorMode m_allocator_mode = core::AllocatorMode::Caching;  // of the last evaluated plan
    const Evaluation* m_last = nullptr;  // the last successful evaluation (judgeReserved's precondition)
};

// One-shot convenience (allocates a fresh Evaluator and Evaluation).
core::Result<Evaluation> evaluatePlan(const core::Plan& plan, const HardwareProfile* profile,
                                      const EvaluationOptions& options = {});

}  // namespace shardcast::sim
