#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/program/program.hpp"

namespace shardcast::core {

// Lowers a validated plan into `out` (cleared first; its capacity is reused, so lowering many
// plans into one Program allocates little). Follows DESIGN.md section 3 rule by rule; where each
// rule lives is listed in core/lower/lower_internal.hpp. The result satisfies validateProgram.
// With pipeline parallelism (mesh.pp > 1) each stage has its own Program; lower() gives the first
// stage's, Lowerer::lowerStage any stage's.
Status lower(const Plan& plan, const Mesh& mesh, Program& out);

// One action of a pipeline rank's schedule, as torch.distributed.pipelining runs it (torch 2.15,
// schedules.py): a forward or backward of one micro-batch on one stage, or, for the schedules with
// several stages per rank (_PipelineScheduleRuntime), FSDP's UNSHARD and RESHARD of a stage and
// its REDUCE_GRAD (with the WAIT_REDUCE_GRAD that follows it). `stage` is the pipeline stage
// (0 to pp x virtual stages - 1); `mb` is -1 for the FSDP actions.
// _PipelineScheduleRuntime's default max_active_stages: the stages whose unsharded parameters stay
// resident (torchtitan leaves it at its default).
inline constexpr int kPipelineMaxActiveStages = 3;
enum class PipelineOp : uint8_t { Forward, Backward, Unshard, Reshard, ReduceGrad };
struct PipelineStep {
    PipelineOp op = PipelineOp::Forward;
    int32_t stage = 0;
    int32_t mb = -1;
    bool operator==(const PipelineStep&) const = default;
};
// Pipeline rank `rank`'s actions in order. GPipe and 1F1B (one stage per rank): the forwards and
// backwards of ScheduleGPipe and Schedule1F1B, then REDUCE_GRAD. Interleaved1F1B: the compute
// actions of ScheduleInterleaved1F1B._calculate_single_rank_operations (_get_1f1b_rank_ops), then
// _add_unshard_reshard (max_active_stages 3, lookahead "full": UNSHARD a stage among the next
// three distinct stages to compute, RESHARD one that left them) and _add_reduce_grad (REDUCE_GRAD
// after a stage's last backward). Needs a plan checkPipeline accepted.
std::vector<PipelineStep> pipelineRankSchedule(PpSchedule schedule, int pp, int virtual_stages, int micro_batches,
                                               int rank);
// torch's _Action text for a step: "2F0", "5B3", "0UNSHARD", "4RESHARD", "4REDUCE_GRAD".
std::string pipelineStepName(const PipelineStep& step);

struct LowerScratch;

// Keeps its scratch memory between calls: one per thread when lowering many plans.
class Lowerer {
public:
    Lowerer();
    ~Lowerer();
    Lowerer(Lowerer&&) noexcept;
    Lowerer& operator=(Lowerer&&) noexcept;
    // pp > 1: lower() lowers the first stage; lowerStage any (each rank runs its stage's Program).
    Status lower(const Plan& plan, const Mesh& mesh, Program& out);
    Status lowerStage(const Plan& plan, const Mesh& mesh, int stage, Program& out);

private:
    std::unique_ptr<LowerScratch> m_scratch;
    std::vector<std::unique_ptr<LowerScratch>> m_chunk_scratch;  // Interleaved1F1B: one per stage of the rank
};

}  // namespace shardcast::core
