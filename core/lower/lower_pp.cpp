// Pipeline parallelism under FSDP, as torch.distributed.pipelining (torch 2.x, stage.py and
// schedules.py) runs it with torchtitan's settings (torchtitan/distributed/pipeline_parallel.py,
// fsdp.py). Each stage is a slice of the model (core::pipelineStageModel) with fully_shard applied
// inside it; this file lowers one stage's rank.
//
//   PP1  parameters stay unsharded after forward: torchtitan's "default" reshard_after_forward
//        policy is `not pp_enabled` (reshardAfterForwardPerUnit, lower_sizes.cpp).
//   PP2  the schedule: GPipe runs every micro-batch's forward, then every backward; 1F1B runs
//        min(M, pp - stage) forwards (Schedule1F1B's warm-up), then one backward and one forward
//        alternately, then the remaining backwards. A stage holds the activations of the
//        micro-batches between their forward and their backward: M (GPipe) or min(M, pp - stage).
//   PP3  every backward runs with set_requires_gradient_sync(False) and
//        set_reshard_after_backward(False) (_PipelineStageBase.backward_maybe_with_nosync): the
//        gradients accumulate unsharded (rule 8's path, without the reshard) and the parameters
//        stay unsharded. After the stage's last backward, REDUCE_GRAD (perform_reduce_grad ->
//        finalize_backward) reduce-scatters every unit in reverse forward order and reshards.
//   PP4  P2P: a stage other than the first receives each micro-batch's input activations before
//        its forward (the compute stream waits for the receive) and sends its input gradient after
//        the backward; a stage other than the last sends its output after the forward and keeps
//        it (fwd_cache) until the backward, which waits for the received output gradient. The
//        tensors are the residual stream, [micro_batch, seq, hidden] in param_dtype, its local
//        sequence shard under sequence parallelism (to_local_if_dtensor). They run over the
//        Pipeline group on one stream per neighbour (ProcessGroupNCCL keeps a communicator per
//        rank pair for P2P): a receive lasts its transfer from when both sides are there.
//   PP5  Interleaved1F1B (ScheduleInterleaved1F1B, a _PipelineScheduleRuntime): rank r holds stages
//        r, r + pp, ..., each its own model part with fully_shard inside and its stage as the FSDP
//        root (torchtitan), each lowered by its own Lowering into the rank's one Program
//        (Lowerer::lowerStage), its tasks marked with Task::chunk. The order is torch's
//        (pipelineRankSchedule): UNSHARD issues the all-gathers of every unit of a stage at once
//        and the next compute on the stage waits for all of them (_assert_unsharded); RESHARD of a
//        stage that left the three next to compute (max_active_stages 3) frees its parameters;
//        REDUCE_GRAD after a stage's last backward reduce-scatters its units, and its
//        WAIT_REDUCE_GRAD makes the next compute wait for them. The P2P of stage pp - 1 + k pp goes
//        to rank 0's stage pp + k pp: the pipeline wraps around the ranks. One optimizer per model
//        part steps after the schedule (torchtitan's OptimizersContainer).
#include <algorithm>

#include "core/lower/lower_internal.hpp"

namespace shardcast::core {
namespace {

// ScheduleInterleaved1F1B's compute actions for one rank (torch 2.15 schedules.py:
// _calculate_single_rank_operations, _get_warmup_ops with multiply_factor 2, _get_1f1b_rank_ops
// without zero bubble; its None padding dropped).
void interleavedComputeActions(int pp, int v, int m, int rank, std::vector<PipelineStep>& out) {
    const int rounds = std::max(1, m / pp);
    const int per_round = m / rounds;
    const int warmup = std::min((v - 1) * per_round + 2 * (pp - 1 - rank), m * v);
    const int fwd_bwd = m * v - warmup;
    const int total = warmup + fwd_bwd + warmup;  // the cooldown runs as many backwards as the warm-up forwards
    std::vector<int> fwd_mb(static_cast<size_t>(pp * v), 0), bwd_mb(static_cast<size_t>(pp * v), 0);
    auto forward = [&](int step) {
        const int stage = ((step / per_round) % v) * pp + rank;
        out.push_back({PipelineOp::Forward, stage, fwd_mb[static_cast<size_t>(stage)]++});
    };
    auto backward = [&](int step) {
        const int stage = (v - 1 - ((step - warmup) / per_round) % v) * pp + rank;
        out.push_back({PipelineOp::Backward, stage, bwd_mb[static_cast<size_t>(stage)]++});
    };
    for (int op = 0; op < total; ++op) {
        if (op < warmup) {
            forward(op);
        } else if (op < warmup + fwd_bwd) {
            forward(op);
            backward(op);
        } else {
            backward(op);
        }
    }
}

// _add_unshard_reshard (max_active_stages 3, unshard_lookahead "full"): before each action the
// stages among the next three distinct ones to compute are unsharded (in that order) and the
// active stages outside them resharded; at the end every active stage is resharded.
// Then _add_reduce_grad: REDUCE_GRAD right after a stage's last backward.
void addFsdpActions(const std::vector<PipelineStep>& compute, int stages, int m, std::vector<PipelineStep>& out) {
    constexpr auto kMaxActiveStages = static_cast<size_t>(kPipelineMaxActiveStages);
    std::vector<int> active, window;
    std::vector<int> backwards(static_cast<size_t>(stages), 0);
    for (size_t i = 0; i < compute.size(); ++i) {
        window.clear();
        for (size_t k = i; k < compute.size() && window.size() < kMaxActiveStages; ++k) {
            if (std::find(window.begin(), window.end(), compute[k].stage) == window.end()) window.push_back(compute[k].stage);
        }
        for (auto it = active.begin(); it != active.end();) {
            if (std::find(window.begin(), window.end(), *it) == window.end()) {
                out.push_back({PipelineOp::Reshard, *it, -1});
                it = active.erase(it);
            } else {
                ++it;
            }
        }
        for (int stage : window) {
            if (std::find(active.begin(), active.end(), stage) != active.end()) continue;
            out.push_back({PipelineOp::Unshard, stage, -1});
            active.push_back(stage);
        }
        out.push_back(compute[i]);
        if (compute[i].op == PipelineOp::Backward && ++backwards[static_cast<size_t>(compute[i].stage)] == m) {
            out.push_back({PipelineOp::ReduceGrad, compute[i].stage, -1});
        }
    }
    for (int stage : active) out.push_back({PipelineOp::Reshard, stage, -1});
}

}  // namespace

std::vector<PipelineStep> pipelineRankSchedule(PpSchedule schedule, int pp, int virtual_stages, int micro_batches,
                                               int rank) {
    std::vector<PipelineStep> out;
    const int m = micro_batches;
    if (schedule == PpSchedule::Interleaved1F1B) {
        std::vector<PipelineStep> compute;
        interleavedComputeActions(pp, virtual_stages, m, rank, compute);
        addFsdpActions(compute, pp * virtual_stages, m, out);
        return out;
    }
    if (schedule == PpSchedule::GPipe) {
        for (int i = 0; i < m; ++i) out.push_back({PipelineOp::Forward, rank, i});
        for (int i = 0; i < m; ++i) out.push_back({PipelineOp::Backward, rank, i});
    } else {
        // Schedule1F1B._step_microbatches: warm-up forwards, then 1B1F, then the cooldown backwards.
        const int warmup = std::min(m, pp - rank);
        int fwd = 0, bwd = 0;
        for (; fwd < warmup; ++fwd) out.push_back({PipelineOp::Forward, rank, fwd});
        for (;;) {
            out.push_back({PipelineOp::Backward, rank, bwd++});
            if (fwd == m) break;
            out.push_back({PipelineOp::Forward, rank, fwd++});
        }
        for (; bwd < m; ++bwd) out.push_back({PipelineOp::Backward, rank, bwd});
    }
    out.push_back({PipelineOp::ReduceGrad, rank, -1});
    return out;
}

std::string pipelineStepName(const PipelineStep& step) {
    const std::string stage = std::to_string(step.stage);
    switch (step.op) {
        case PipelineOp::Forward: return stage + "F" + std::to_string(step.mb);
        case PipelineOp::Backward: return stage + "B" + std::to_string(step.mb);
        case PipelineOp::Unshard: return stage + "UNSHARD";
        case PipelineOp::Reshard: return stage + "RESHARD";
        case PipelineOp::ReduceGrad: return stage + "REDUCE_GRAD";
    }
    return stage;
}

namespace detail {

void Lowering::pipelineStep() {
    for (const PipelineStep& a : *m_steps) act(a);
}

// PP5: the runtime waits for the stage's pending unshards before it computes (_assert_unsharded).
void Lowering::waitStageUnshards(int mb, bool backward) {
    for (int32_t u = 0; u < unitCount(); ++u) {
        if (m_s.st[u].ag_pending) waitUnshard(u, mb, backward);
    }
}

void Lowering::act(const PipelineStep& a) {
    assert(a.stage == m_stage);
    switch (a.op) {
        case PipelineOp::Unshard: unshardStage(); return;
        case PipelineOp::Reshard: reshardStage(); return;
        case PipelineOp::ReduceGrad: reduceGradients(); return;
        case PipelineOp::Forward: {
            if (!m_first_stage) receive(a.mb, false);
            waitStageUnshards(a.mb, false);
            forwardPass(a.mb);
            if (!m_last_stage) send(a.mb, false);
            return;
        }
        case PipelineOp::Backward: {
            if (!m_last_stage) receive(a.mb, true);
            waitStageUnshards(a.mb, true);
            backwardPass(a.mb);
            if (!m_first_stage) send(a.mb, true);
            // The received activations and the kept output die with the micro-batch's backward.
            const auto slot = static_cast<size_t>(a.mb % m_slots);
            releaseByHost(m_recv_act[slot]);
            releaseByHost(m_stage_out[slot]);
            releaseByHost(m_recv_grad[slot]);
            return;
        }
    }
}

// PP5: UNSHARD (_PipelineScheduleRuntime): unshard(async_op=True) of every FSDP module of the
// stage, in module order (the stage's root first): their all-gathers are issued at once.
void Lowering::unshardStage() {
    // Its tasks carry the micro-batch of the stage's last compute (labels only).
    const int mb = m_last_compute >= 0 ? int{m_p.tasks[static_cast<size_t>(m_last_compute)].micro_batch} : 0;
    for (int32_t u = 0; u < unitCount(); ++u) {
        if (gathers(u)) issueUnshard(u, mb, false);
    }
}

// PP5: RESHARD of a stage that left the three active ones: reshard() frees its unsharded
// parameters (the host frees them; the next compute task sees it). After the stage's
// REDUCE_GRAD its units are resharded already, and nothing is left to free.
void Lowering::reshardStage() {
    for (int32_t u = 0; u < unitCount(); ++u) {
        UnitState& st = m_s.st[u];
        if (!st.unsharded || !gathers(u)) continue;
        releaseByHost(st.unsharded_buf);
        st.unsharded = false;
    }
}

int64_t Lowering::stageBoundaryBytes() const {
    const int64_t shards = m_tp > 1 && m_sp ? m_tp : 1;
    return m_tokens * m_model.arch.hidden * itemSize(m_pdt) / shards;
}

// PP4: the receive of a micro-batch's input activations (forward) or of its output gradient
// (backward). The buffer it fills is allocated on the compute stream, which then reads it.
void Lowering::receive(int mb, bool backward) {
    newTask(TaskKind::Recv, backward ? Stream::PipelineNext : Stream::PipelinePrev, -1, mb);
    Task& t = cur();
    t.peer = static_cast<int8_t>(backward ? 1 : -1);
    t.comm_bytes = stageBoundaryBytes();
    const ProcessGroup& g = m_p.groups[static_cast<size_t>(m_group[static_cast<size_t>(GroupKind::Pipeline)])];
    t.group = m_group[static_cast<size_t>(GroupKind::Pipeline)];
    t.group_size = 2;
    t.group_nodes = g.nodes > 1 ? 2 : 1;
    const auto slot = static_cast<size_t>(mb % m_slots);
    BufferRef& buf = backward ? m_recv_grad[slot] : m_recv_act[slot];
    buf = allocOn(Stream::Compute, At::Start, backward ? MemCategory::Temp : MemCategory::Activation, t.comm_bytes);
    m_recv_dep = curId();
}

// PP4: the send of the stage's output (forward; kept for the backward) or of its input gradient
// (backward; freed once sent).
void Lowering::send(int mb, bool backward) {
    const int32_t producer = m_last_compute;
    newTask(TaskKind::Send, backward ? Stream::PipelinePrev : Stream::PipelineNext, -1, mb);
    dep(producer);
    Task& t = cur();
    t.peer = static_cast<int8_t>(backward ? -1 : 1);
    t.comm_bytes = stageBoundaryBytes();
    const ProcessGroup& g = m_p.groups[static_cast<size_t>(m_group[static_cast<size_t>(GroupKind::Pipeline)])];
    t.group = m_group[static_cast<size_t>(GroupKind::Pipeline)];
    t.group_size = 2;
    t.group_nodes = g.nodes > 1 ? 2 : 1;
    if (backward) {
        BufferRef grad = allocOn(Stream::Compute, At::Start, MemCategory::Temp, t.comm_bytes);
        release(At::End, grad);
    } else {
        m_stage_out[static_cast<size_t>(mb % m_slots)] =
            allocOn(Stream::Compute, At::Start, MemCategory::Activation, t.comm_bytes);
    }
}

// PP3: REDUCE_GRAD after the stage's last backward: every unit's reduce-scatter (and HSDP
// all-reduce) in reverse forward order, resharding as it goes; then the compute stream waits for
// them (wait_for_gradient_reduction) before the optimizer.
void Lowering::reduceGradients() {
    m_final_reduce = true;
    const int last = static_cast<int>(m_tr.grad_accum - 1);
    for (int32_t u : m_s.bwd_order) postBackward(u, last);
    m_final_reduce = false;
    releaseByHost(m_pending_rs);
    *m_host_deps = {m_last_on_stream[static_cast<size_t>(Stream::ReduceScatter)],
                           m_last_on_stream[static_cast<size_t>(Stream::AllReduce)]};
}

}  // namespace detail
}  // namespace shardcast::core
