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
#include <algorithm>

#include "core/lower/lower_internal.hpp"

namespace shardcast::core::detail {

void Lowering::pipelineActions(std::vector<PipelineAction>& out) const {
    out.clear();
    const int m = static_cast<int>(m_tr.grad_accum);
    if (m_sh.pp_schedule == PpSchedule::GPipe) {
        for (int i = 0; i < m; ++i) out.push_back({false, i});
        for (int i = 0; i < m; ++i) out.push_back({true, i});
        return;
    }
    // Schedule1F1B._step_microbatches: warm-up forwards, then 1B1F, then the cooldown backwards.
    const int warmup = std::min(m, m_pp - m_stage);
    int fwd = 0, bwd = 0;
    for (; fwd < warmup; ++fwd) out.push_back({false, fwd});
    for (;;) {
        out.push_back({true, bwd++});
        if (fwd == m) break;
        out.push_back({false, fwd++});
    }
    for (; bwd < m; ++bwd) out.push_back({true, bwd});
}

void Lowering::pipelineStep() {
    std::vector<PipelineAction> actions;
    pipelineActions(actions);
    for (const PipelineAction& a : actions) {
        if (!a.backward) {
            if (!m_first_stage) receive(a.mb, false);
            forwardPass(a.mb);
            if (!m_last_stage) send(a.mb, false);
        } else {
            if (!m_last_stage) receive(a.mb, true);
            backwardPass(a.mb);
            if (!m_first_stage) send(a.mb, true);
            // The received activations and the kept output die with the micro-batch's backward.
            const auto slot = static_cast<size_t>(a.mb % m_slots);
            releaseByHost(m_recv_act[slot]);
            releaseByHost(m_stage_out[slot]);
            releaseByHost(m_recv_grad[slot]);
        }
    }
    reduceGradients();
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
    m_host_pending_deps = {m_last_on_stream[static_cast<size_t>(Stream::ReduceScatter)],
                           m_last_on_stream[static_cast<size_t>(Stream::AllReduce)]};
}

}  // namespace shardcast::core::detail
