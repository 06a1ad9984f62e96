// The step's schedule (DESIGN.md section 3): per micro-batch the forward (pre-forward unshard,
// segments, post-forward reshard) and the backward (pre-backward unshard and prefetch, segments,
// post-backward reduce), then the optimizer step. Each rule has its function below; FSDP1's
// differences are marked where they branch off.
#include <algorithm>
#include <cassert>
#include <utility>

#include "core/lower/lower_internal.hpp"

namespace shardcast::core::detail {
namespace {

// Each micro-batch's inputs on the GPU: input_ids and labels, one int64 per token each.
constexpr int64_t kInputTensors = 2;

// Optimizer step cost per trainable element: AdamW's update is about 12 FLOPs; SGD (with or
// without momentum) 2 per tensor it reads. Memory traffic: read the parameter, its gradient and
// the states, write the parameter and the states.
constexpr int64_t kAdamWFlopsPerParam = 12;
constexpr int64_t kOptimizerTensorsRead = 2;  // parameter and gradient (plus the states)
constexpr int64_t kOptimizerTensorsWritten = 1;  // parameter (plus the states)
// PyTorch's default AdamW on the GPU is the foreach implementation (torch/optim/adamw.py,
// _multi_tensor_adamw, capturable=False), one pass over the shard per op, in master-dtype elements
// read + written: _foreach_mul_(params) 2, _foreach_lerp_(exp_avgs, grads) 3, _foreach_mul_(exp_avg_sqs)
// 2, _foreach_addcmul_(exp_avg_sqs, grads, grads) 3, _foreach_sqrt(exp_avg_sqs) 2, _foreach_div_ 2,
// _foreach_add_(eps) 2, _foreach_addcdiv_(params, exp_avgs, sqrt) 4: 20, not the 7 of one fused pass.
constexpr int64_t kForeachAdamWAccessesPerParam = 20;

}  // namespace

void Lowering::computeTask(TaskKind kind, int32_t unit, int mb) {
    newTask(kind, Stream::Compute, unit, mb);
    dep(m_pending_compute_dep);
    m_pending_compute_dep = -1;
}

// Rule 11 (the first all-gather of a step waits for the previous optimizer step) holds by
// construction: the Program is one step, issued after the previous one ended.

void Lowering::forwardPass(int mb) {
    bool first = true;
    for (const Item& it : m_s.items) {
        switch (it.kind) {
            case ItemKind::Pre: preForward(it.index, mb); break;
            case ItemKind::Post: postForward(it.index); break;
            case ItemKind::Seg:
                forwardSegment(it.index, mb, first);
                first = false;
                break;
        }
    }
}

// Pre-forward hook: unshard the unit (rules 2-4), then the explicit forward prefetch (FSDP1
// forward_prefetch; FSDP2 set_modules_to_forward_prefetch when prefetch_depth > 1) issues the next
// units' all-gathers before this unit computes. Units are numbered in forward order.
void Lowering::preForward(int32_t u, int mb) {
    if (!gathers(u)) {
        castCopy(u, mb);
        return;
    }
    if (m_s.st[u].unsharded) return;
    issueUnshard(u, mb, false);
    waitUnshard(u, mb, false);
    const int ahead = m_fsdp1 ? (m_sh.forward_prefetch ? 1 : 0) : std::max(0, m_sh.prefetch_depth - 1);
    for (int d = 1; d <= ahead; ++d) {
        const auto v = static_cast<int32_t>(u + d);
        if (static_cast<size_t>(v) >= m_s.us.size() || !gathers(v)) break;
        if (!m_s.st[v].unsharded) issueUnshard(v, mb, false);
    }
}

// A segment's forward keeps its saved activations (one buffer) until its backward; the first
// one also brings the micro-batch's inputs.
void Lowering::forwardSegment(int32_t si, int mb, bool first) {
    const Segment& seg = m_s.segs[static_cast<size_t>(si)];
    computeTask(TaskKind::Forward, seg.unit, mb);
    if (first) {
        dep(std::exchange(m_recv_dep, -1));
        // Under pipeline parallelism the first stage reads input_ids, the last the labels.
        const int64_t tensors = m_pp > 1 ? (m_first_stage ? 1 : 0) + (m_last_stage ? 1 : 0) : kInputTensors;
        m_inputs[static_cast<size_t>(mb % m_slots)] =
            alloc(At::Start, MemCategory::Inputs, tensors * itemSize(DType::I64) * m_tokens);
    }
    cur().flops = seg.fwd_flops;
    cur().hbm_bytes = seg.fwd_hbm + seg.weight_bytes;
    cur().ops = seg.fwd_ops;
    // Forward transients are Activation: PyTorch's MemTracker.__torch_dispatch__ files whatever
    // is allocated outside backward and the optimizer (and inside AC recompute) as ACT.
    if (seg.checkpointed) {
        peakScratch(MemCategory::Activation, seg.ckpt_peak_temp, seg.ckpt_peak_tensors);
    } else {
        peakScratch(MemCategory::Activation, seg.fwd_peak_act, seg.fwd_peak_act_tensors);
        peakScratch(MemCategory::Activation, seg.fwd_peak_temp, seg.fwd_peak_temp_tensors);
    }
    m_s.seg_saved[slotOf(si, mb)] =
        alloc(At::End, MemCategory::Activation, seg.saved, seg.checkpointed ? Span{} : seg.saved_tensors);
    m_s.seg_kept[slotOf(si, mb)] = alloc(At::End, MemCategory::Activation, seg.sac_kept, seg.kept_tensors);
}

// Post-forward hook, rule 5: reshard unless the unit keeps its parameters until backward.
void Lowering::postForward(int32_t u) {
    if (u == 0) {
        // The root frees the last deferred all-gather output (rule 4); it is not resharded.
        if (m_saved_flat >= 0) {
            release(At::End, m_s.st[m_saved_flat].flat_buf, m_s.st[m_saved_flat].copyout_task);
            m_ag_wait = m_s.st[m_saved_flat].copyout_task;
            m_saved_flat = -1;
        }
        return;
    }
    if (!m_s.us[u].reshard_after_forward) return;
    freeUnsharded(u, postForwardK() > 0);
}

// FSDP1's rate limiter (limit_all_gathers): the host blocks before an all-gather while two
// freed units are still in flight. Returns the task the host waits for, or -1.
int32_t Lowering::fsdp1RateLimit() {
    if (!m_sh.limit_all_gathers || m_s.free_queue.size() < 2) return -1;
    const int32_t wait = m_s.free_queue.front();
    m_s.free_queue.erase(m_s.free_queue.begin());
    return wait;
}

// Rule 2: one all-gather per unit per unshard, after a copy-in (cast) on its own stream; rule 10:
// under CPU offload the shard is first copied to the GPU. FSDP1 gathers into the unsharded
// FlatParameter directly from its low-precision shard; FSDP2 into a flat output, split by the
// copy-out in waitUnshard.
void Lowering::issueUnshard(int32_t u, int mb, bool backward) {
    UnitState& st = m_s.st[u];
    const UnitSizes& us = m_s.us[u];
    if (st.unsharded || st.ag_pending) return;
    const int32_t host_wait = m_fsdp1 ? fsdp1RateLimit() : -1;
    int32_t h2d = -1;
    BufferRef staged;  // offload: the shard copied to the GPU
    if (m_offload) {
        h2d = newTask(TaskKind::HostToDevice, Stream::HostToDevice, u, mb);
        cur().host_wait = host_wait;
        cur().comm_bytes = us.sharded_bytes;
        cur().dtype = m_master;
        staged = alloc(At::Start, MemCategory::Temp, us.sharded_bytes);
    }
    newTask(TaskKind::CopyIn, Stream::AllGatherCopyIn, u, mb);
    if (h2d < 0) cur().host_wait = host_wait;
    dep(h2d);
    dep(m_ag_wait);
    cur().hbm_bytes = us.sharded_bytes + us.cast_bytes;
    cur().ops = pushElementwise(cur().hbm_bytes, 0, m_pdt);
    BufferRef mp_shard;  // FSDP1: the low-precision shard (_mp_shard), the all-gather input
    if (m_fsdp1) {
        mp_shard = alloc(At::Start, MemCategory::AllGather, us.cast_bytes);
    } else {
        st.flat_buf = alloc(At::Start, MemCategory::AllGather, unitInfo(u).unshard_in_flight_bytes);
        // The cast of the shard is no collective's buffer: FSDPMemTracker files it by phase
        // (ACT before forward, TEMP before backward); only _allgather_base_'s output is All Gather.
        peakScratch(backward ? MemCategory::Temp : MemCategory::Activation, us.cast_bytes);
    }
    release(At::End, staged);
    const int32_t copy_in = curId();
    st.ag_task = newTask(TaskKind::AllGather, Stream::AllGather, u, mb);
    dep(copy_in);
    // reshard_after_forward=k: the backward re-gathers from the k ranks holding the slice.
    const bool count_mode = backward && st.post_fwd_shard;
    collectiveOn(count_mode ? GroupKind::PostForward : GroupKind::Shard);
    cur().comm_bytes = (count_mode ? unitInfo(u).all_gather_bwd : unitInfo(u).all_gather).bytes;
    if (m_fsdp1) {
        st.unsharded_buf = alloc(At::Start, MemCategory::UnshardedParam, unitInfo(u).unshard_in_flight_bytes);
        release(At::End, mp_shard);
        if (st.post_fwd_shard) {
            release(At::End, st.post_fwd_shard_buf);
            st.post_fwd_shard = false;
        }
    }
    st.ag_pending = true;
}

// Rules 3 and 4 (FSDP2): the copy-out on the compute stream allocates the unsharded parameters
// while the flat output still exists. In forward the flat output stays alive until the next unit
// waits for its unshard (at most two are live); in backward it is freed right after the copy-out
// (rule 6). FSDP1 has no copy-out: the next compute task waits for the all-gather itself.
void Lowering::waitUnshard(int32_t u, int mb, bool backward) {
    UnitState& st = m_s.st[u];
    const UnitSizes& us = m_s.us[u];
    if (m_fsdp1) {
        m_pending_compute_dep = st.ag_task;
    } else {
        const int32_t id = newTask(TaskKind::CopyOut, Stream::Compute, u, mb);
        dep(st.ag_task);
        cur().hbm_bytes = 2 * us.unsharded_bytes;  // read the flat output, write the parameters
        cur().ops = pushElementwise(cur().hbm_bytes, 0, m_pdt);
        if (!backward && m_saved_flat >= 0) {
            UnitState& prev = m_s.st[m_saved_flat];
            release(At::Start, prev.flat_buf, prev.copyout_task);
            m_ag_wait = prev.copyout_task;
            m_saved_flat = -1;
        }
        if (st.post_fwd_shard) {
            release(At::Start, st.post_fwd_shard_buf);
            st.post_fwd_shard = false;
        }
        st.unsharded_buf = alloc(At::Start, MemCategory::UnshardedParam, us.unsharded_bytes, us.param_tensors);
        if (backward) {
            release(At::End, st.flat_buf);
            m_ag_wait = id;
        } else {
            m_saved_flat = u;
        }
        st.copyout_task = id;
    }
    st.ag_pending = false;
    st.unsharded = true;
}

// NO_SHARD (and shard groups of one rank): parameters are whole; mixed precision casts a copy.
void Lowering::castCopy(int32_t u, int mb) {
    UnitState& st = m_s.st[u];
    if (st.unsharded) return;
    if (m_mp) {
        newTask(TaskKind::Cast, Stream::Compute, u, mb);
        cur().hbm_bytes = m_s.us[u].sharded_bytes + m_s.us[u].unsharded_bytes;
        cur().ops = pushElementwise(cur().hbm_bytes, 0, m_pdt);
        st.unsharded_buf = alloc(At::Start, MemCategory::UnshardedParam, m_s.us[u].unsharded_bytes);
    }
    st.unsharded = true;
}

// Reshard (rule 5): free the unsharded parameters; with reshard_after_forward=k keep a 1/k slice.
void Lowering::freeUnsharded(int32_t u, bool count_mode) {
    UnitState& st = m_s.st[u];
    if (!st.unsharded) return;
    release(At::End, st.unsharded_buf);
    if (count_mode && m_sharded) {
        st.post_fwd_shard_buf = alloc(At::End, MemCategory::ShardedParam, unitInfo(u).post_forward_shard_bytes);
        st.post_fwd_shard = true;
    }
    st.unsharded = false;
    if (m_fsdp1) m_s.free_queue.push_back(curId());
}

void Lowering::backwardPass(int mb) {
    bool first = true;
    for (auto it = m_s.items.rbegin(); it != m_s.items.rend(); ++it) {
        if (first && it->kind == ItemKind::Seg) {
            first = false;
            // PP4: the pass's first compute task waits for the received output gradient (FSDP1's
            // all-gather wait, the other user of m_pending_compute_dep, has no pipeline).
            if (m_recv_dep >= 0) m_pending_compute_dep = std::exchange(m_recv_dep, -1);
        }
        switch (it->kind) {
            case ItemKind::Post: preBackward(it->index, mb); break;
            case ItemKind::Seg: backwardSegment(it->index, mb); break;
            case ItemKind::Pre: postBackward(it->index, mb); break;
        }
    }
    endOfBackward(mb);
}

// Rule 6: unshard (a no-op if prefetched), then prefetch ahead in reverse forward order. FSDP1's
// BACKWARD_PRE prefetches here, BACKWARD_POST after the unit's gradient (postBackward).
void Lowering::preBackward(int32_t u, int mb) {
    m_s.st[u].pre_backward_mb = mb;
    if (!gathers(u)) {
        castCopy(u, mb);
        return;
    }
    if (!m_s.st[u].unsharded) {
        issueUnshard(u, mb, true);
        waitUnshard(u, mb, true);
    }
    const bool pre = !m_fsdp1 || m_sh.backward_prefetch == ShardingSpec::BackwardPrefetch::Pre;
    if (pre) prefetchAfter(u, mb);
}

// FSDP1 prefetches one unit; FSDP2 prefetch_depth units. A unit whose pre-backward already ran
// needs no unshard (FSDP1's _needs_pre_backward_unshard): under BACKWARD_POST the root's
// post-backward comes last, after every unit that follows it in pre-backward order.
void Lowering::prefetchAfter(int32_t u, int mb) {
    const int depth = m_fsdp1 ? 1 : std::max(1, m_sh.prefetch_depth);
    const int32_t pos = m_s.bwd_pos[u];
    for (int d = 1; d <= depth; ++d) {
        const size_t next = static_cast<size_t>(pos + d);
        if (pos < 0 || next >= m_s.bwd_order.size()) break;
        const int32_t v = m_s.bwd_order[next];
        if (m_s.st[v].pre_backward_mb == mb) continue;
        if (gathers(v) && !m_s.st[v].unsharded) issueUnshard(v, mb, true);
    }
}

// A checkpointed segment is recomputed first; the backward then releases the saved tensors and
// produces the segment's gradients (kept, or accumulated into those already held). Per-op SAC's
// kept outputs are handed back to the recompute, which re-creates what the backward needs
// (saved_full, sharing their storage where they are among it); the rest of them die with it.
// What the recompute makes is Temp, as FSDPMemTracker files it: the tensors are made in backward
// and its AC flag (_in_ac) is raised only by an FSDP module's pre-forward in backward, which a
// checkpoint_wrapper inside the FSDP unit does not run again (seen at a tracker peak inside a
// recomputed block: Mixtral, and Llama with a small vocabulary, docs/validation-memory.md).
void Lowering::backwardSegment(int32_t si, int mb) {
    const Segment& seg = m_s.segs[static_cast<size_t>(si)];
    BufferRef& saved = m_s.seg_saved[slotOf(si, mb)];
    BufferRef& recomputed = m_s.seg_recomputed[static_cast<size_t>(si)];
    UnitState& st = m_s.st[seg.unit];
    if (seg.checkpointed) {
        computeTask(TaskKind::Recompute, seg.unit, mb);
        cur().flops = seg.rec_flops;
        cur().hbm_bytes = seg.rec_hbm + seg.rec_weight_bytes;
        cur().ops = seg.rec_ops;
        release(At::Start, m_s.seg_kept[slotOf(si, mb)]);
        peakScratch(MemCategory::Temp, seg.fwd_peak_act, seg.fwd_peak_act_tensors);
        peakScratch(MemCategory::Temp, seg.fwd_peak_temp, seg.fwd_peak_temp_tensors);
        recomputed = alloc(At::End, MemCategory::Temp, seg.saved_full, seg.saved_tensors);
    }
    computeTask(TaskKind::Backward, seg.unit, mb);
    cur().flops = seg.bwd_flops;
    cur().hbm_bytes = seg.bwd_hbm + 2 * seg.weight_bytes;  // read weights, write their grads
    cur().ops = seg.bwd_ops;
    // fp32 DDP without mixed precision: autograd writes straight into param.grad.
    const bool direct = !m_sharded && !m_mp;
    const MemCategory gcat = direct ? MemCategory::ShardedGrad : MemCategory::UnshardedGrad;
    const bool persistent = direct ? !st.sharded_grad : !st.acc_live;
    // Gradients being made are Temp: FSDPMemTracker files unsharded grads as such only when
    // their unit's post-backward starts (_fsdp_param_group_post_backward).
    peakScratch(direct ? gcat : MemCategory::Temp, seg.bwd_peak_grad, seg.bwd_peak_grad_tensors);
    peakScratch(MemCategory::Temp, seg.bwd_peak_temp, seg.bwd_peak_temp_tensors);
    peakReleased(seg.checkpointed ? recomputed : saved, seg.bwd_peak_freed);
    release(At::End, recomputed);
    release(At::End, saved);
    // Rule T1: the tied head's weight gradient, held by autograd until the embedding's backward.
    if (seg.tied_frees) {
        release(At::End, m_s.tied_held);
    } else if (seg.tied_held > 0) {
        m_s.tied_held = alloc(At::End, MemCategory::Temp, seg.tied_held);
    }
    if (persistent) {
        // Reduced by this micro-batch's post-backward: Temp until then (freed there). Kept for
        // the next micro-batch (no_sync): Unsharded Grad, as the tracker files it from then on.
        const bool reduced_now = m_sharded && syncsNow(mb);
        keepGrad(seg.unit, si, alloc(At::End, reduced_now ? MemCategory::Temp : gcat, seg.grad_bytes, seg.grad_tensors));
        if (!direct) st.grads_live += seg.grad_bytes;
    }
    // The unit's first forward segment is its last backward one: its post-backward hook runs next.
    if (m_s.us[seg.unit].first_op == m_s.active[static_cast<size_t>(seg.op_begin)]) fileGradsAsUnsharded(seg.unit);
}

// FSDPMemTracker._fsdp_param_group_post_backward (torch/distributed/_tools/fsdp2_mem_tracker.py)
// files every _unsharded_param.grad of the unit as Unsharded Grad before FSDP2's post_backward
// reshards and reduces them; made in backward, they were Temp until then. The same bytes are
// freed and allocated again under the new category on the compute stream that owns them.
void Lowering::fileGradsAsUnsharded(int32_t u) {
    for (int32_t si = m_s.st[u].grads_head; si >= 0; si = m_s.seg_grad_next[static_cast<size_t>(si)]) {
        BufferRef& g = m_s.seg_grad[static_cast<size_t>(si)];
        if (!g.live() || g.category != MemCategory::Temp || g.stream != cur().stream) continue;
        const int64_t bytes = g.bytes;
        release(At::End, g);
        g = alloc(At::End, MemCategory::UnshardedGrad, bytes);
    }
}

// A unit's gradient buffers form a list through the segments that made them.
void Lowering::keepGrad(int32_t u, int32_t si, BufferRef grad) {
    if (!grad.live()) return;
    assert(!m_s.seg_grad[static_cast<size_t>(si)].live() && "a segment's previous gradient was not freed");
    m_s.seg_grad[static_cast<size_t>(si)] = grad;
    m_s.seg_grad_next[static_cast<size_t>(si)] = m_s.st[u].grads_head;
    m_s.st[u].grads_head = si;
}

void Lowering::releaseGrads(At at, int32_t u) {
    for (int32_t si = m_s.st[u].grads_head; si >= 0; si = m_s.seg_grad_next[static_cast<size_t>(si)]) {
        release(at, m_s.seg_grad[static_cast<size_t>(si)]);
    }
    m_s.st[u].grads_head = -1;
}

// Post-backward hook. Rule 8 (no_sync): keep the gradients for the next micro-batch. Rule 7:
// free unsharded params, free the previous reduce-scatter input, allocate this one in
// reduce_dtype, free the unsharded grads, reduce-scatter on its own stream; HSDP all-reduces the
// shard over the replicate group; cast to the master dtype; rule 10 copies it to the host.
void Lowering::postBackward(int32_t u, int mb) {
    UnitState& st = m_s.st[u];
    const UnitSizes& us = m_s.us[u];
    const bool sync = syncsNow(mb);
    const int32_t producer = m_last_compute;
    if (!gathers(u)) {
        postBackwardNoShard(u, mb, sync, producer);
        return;
    }
    if (m_fsdp1 && m_sh.backward_prefetch == ShardingSpec::BackwardPrefetch::Post) prefetchAfter(u, mb);
    if (!sync) {
        // PP3: a pipeline stage's backward keeps the parameters unsharded (PipelineStage sets
        // reshard_after_backward False until its gradients are reduced).
        if (m_pp == 1) freeUnsharded(u, false);
        if (!st.acc_live) {
            if (!m_fsdp1 && m_rdt != m_pdt && us.grad_elems > 0) {
                // FSDP2 upcasts held gradients to reduce_dtype (after resharding, to save memory);
                // the embedding's whole-vocabulary gradient too (TP5).
                const int64_t held = (us.grad_elems + us.vocab_grad_extra) * itemSize(m_rdt);
                newTask(TaskKind::Cast, Stream::Compute, u, mb);
                cur().dtype = m_rdt;
                cur().hbm_bytes = st.grads_live + held;
                cur().ops = pushElementwise(cur().hbm_bytes, 0, m_rdt);
                st.acc_buf = alloc(At::Start, MemCategory::UnshardedGrad, held);
                releaseGrads(At::Start, u);
                st.acc_bytes = held;
            } else {
                st.acc_bytes = st.grads_live;  // the gradient buffers themselves accumulate
            }
            st.grads_live = 0;
            st.acc_live = true;
        }
        return;
    }
    if (us.grad_elems == 0) {
        freeUnsharded(u, false);
        return;
    }
    if (us.vocab_grad_extra > 0) redistributeVocabGrad(u, mb);
    newTask(TaskKind::ReduceScatter, Stream::ReduceScatter, u, mb);
    dep(producer);
    dep(us.vocab_grad_extra > 0 ? m_last_compute : -1);
    collectiveOn(GroupKind::Shard);
    cur().dtype = m_rdt;
    if (st.unsharded) {
        release(At::Start, st.unsharded_buf);
        st.unsharded = false;
        if (m_fsdp1) m_s.free_queue.push_back(curId());
    }
    const UnitInfo& table = unitInfo(u);
    const int64_t rs_in = table.reduce_scatter_input_bytes;
    const int64_t rs_out = us.grad_shard_elems * itemSize(m_rdt);
    const int64_t shard_master = us.grad_shard_elems * itemSize(m_master);
    release(At::Start, m_pending_rs);
    // foreach_reduce makes the input with torch.empty in backward, so FSDPMemTracker files it as
    // Temp while the gradients are copied into it, and as Reduce Scatter from the moment
    // _reduce_scatter_base_ runs on it (fsdp2_mem_tracker.py, __torch_dispatch__). FSDP2 allocates
    // it on the compute (current) stream, before reduce_scatter_stream.wait_stream(current_stream),
    // so the caching allocator files its block under the compute stream; only the output is
    // allocated under `with stream(reduce_scatter_stream)` (_fsdp_collectives.py). FSDP1 allocates
    // both on its post-backward stream.
    const Stream rs_in_stream = m_fsdp1 ? cur().stream : Stream::Compute;
    BufferRef copy_in = allocOn(rs_in_stream, At::Start, MemCategory::Temp, rs_in);
    releaseGrads(At::Start, u);
    release(At::Start, st.acc_buf);
    release(At::Start, m_vocab_copy);
    release(At::Start, copy_in);
    m_pending_rs = allocOn(rs_in_stream, At::Start, MemCategory::ReduceScatter, rs_in);
    st.grads_live = 0;
    st.acc_live = false;
    st.acc_bytes = 0;
    // The output becomes the sharded gradient when no cast or accumulation is needed.
    const bool becomes_grad = !st.sharded_grad && m_rdt == m_master && !m_offload;
    BufferRef output = alloc(At::Start, becomes_grad ? MemCategory::ShardedGrad : MemCategory::ReduceScatter, rs_out);
    if (becomes_grad) st.sharded_grad_buf = std::exchange(output, BufferRef{});
    cur().comm_bytes = rs_in;
    if (m_R > 1) {
        const int32_t rs = curId();
        newTask(TaskKind::AllReduce, Stream::AllReduce, u, mb);
        dep(rs);
        collectiveOn(GroupKind::Replicate);
        cur().dtype = m_rdt;
        cur().comm_bytes = table.all_reduce.bytes;
    }
    const Stream post_stream = m_R > 1 ? Stream::AllReduce : Stream::ReduceScatter;
    if (!becomes_grad) {
        const bool first = !st.sharded_grad && !m_offload;
        BufferRef cast;  // the output in the master dtype
        if (m_rdt != m_master) {
            const int32_t prev = curId();
            newTask(TaskKind::Cast, post_stream, u, mb);
            dep(prev);
            cur().dtype = m_master;
            cur().hbm_bytes = rs_out + shard_master;
            cur().ops = pushElementwise(cur().hbm_bytes, 0, m_master);
            cast = alloc(At::Start, first ? MemCategory::ShardedGrad : MemCategory::Temp, shard_master);
            release(At::End, output);
            if (first) {
                st.sharded_grad_buf = std::exchange(cast, BufferRef{});
            } else if (!m_offload) {
                release(At::End, cast);  // accumulated (+=) into the sharded gradient
            }
        } else if (!m_offload) {
            release(At::End, output);  // accumulated into the existing grad
        }
        if (m_offload) {
            const int32_t prev = curId();
            newTask(TaskKind::DeviceToHost, Stream::DeviceToHost, u, mb);
            dep(prev);
            cur().comm_bytes = shard_master;
            cur().dtype = m_master;
            release(At::End, m_rdt != m_master ? cast : output);
        }
    }
    if (!m_offload) st.sharded_grad = true;
}

// NO_SHARD (DDP): all-reduce the gradients over the world; with mixed precision they are made in
// param_dtype, reduced in reduce_dtype and accumulated into the master-dtype gradient.
void Lowering::postBackwardNoShard(int32_t u, int mb, bool sync, int32_t producer) {
    UnitState& st = m_s.st[u];
    const UnitSizes& us = m_s.us[u];
    if (!m_mp && us.grad_elems > 0) st.sharded_grad = true;  // autograd wrote param.grad directly
    if (us.grad_elems == 0 || !sync) {
        release(At::End, st.unsharded_buf);
        st.unsharded = false;
        if (!sync && m_mp && us.grad_elems > 0) {
            st.acc_live = true;
            st.acc_bytes += st.grads_live;  // the gradient buffers themselves accumulate
            st.grads_live = 0;
        }
        return;
    }
    newTask(TaskKind::AllReduce, Stream::AllReduce, u, mb);
    dep(producer);
    collectiveOn(GroupKind::World);
    cur().dtype = m_rdt;
    release(At::Start, st.unsharded_buf);
    st.unsharded = false;
    const int64_t buf = us.rs_input_elems * itemSize(m_rdt);
    const int64_t master = us.grad_shard_elems * itemSize(m_master);
    cur().comm_bytes = unitInfo(u).all_reduce.bytes;
    if (m_mp) {
        BufferRef reduced;  // the gradients in reduce_dtype
        if (m_rdt != m_pdt) {
            reduced = alloc(At::Start, MemCategory::Temp, buf);
            releaseGrads(At::Start, u);
        }
        if (!st.sharded_grad) st.sharded_grad_buf = alloc(At::End, MemCategory::ShardedGrad, master);
        if (m_rdt != m_pdt) {
            release(At::End, reduced);
        } else {
            releaseGrads(At::End, u);
        }
        st.grads_live = 0;
        st.acc_live = false;
        st.acc_bytes = 0;
    }
    st.sharded_grad = true;
}

// The final callback makes the compute stream wait for the last reduce-scatter (and all-reduce),
// then frees the reduce-scatter input; the micro-batch's inputs go too.
void Lowering::endOfBackward(int mb) {
    releaseByHost(m_pending_rs);
    releaseByHost(m_inputs[static_cast<size_t>(mb % m_slots)]);
    *m_host_deps = {m_last_on_stream[static_cast<size_t>(Stream::ReduceScatter)],
                           m_last_on_stream[static_cast<size_t>(Stream::AllReduce)]};
}

// Rule 9: the optimizer steps on the sharded (unpadded) parameters once the reductions are done;
// under CPU offload (rule 10) on the host. zero_grad(set_to_none=True) then frees the gradients.
void Lowering::optimizerStep() {
    const int states = optimizerStatesPerParam(m_tr.optimizer);
    int64_t elems = 0;
    for (const UnitSizes& us : m_s.us) elems += us.opt_elems;
    const std::array<Stream, 4> reduce_streams{Stream::ReduceScatter, Stream::AllReduce, Stream::DeviceToHost,
                                               Stream::Compute};
    std::array<int32_t, 4> waits{};
    for (size_t i = 0; i < reduce_streams.size(); ++i) waits[i] = m_last_on_stream[static_cast<size_t>(reduce_streams[i])];
    const Stream stream = m_offload ? Stream::Host : Stream::Compute;
    const int last_mb = static_cast<int>(m_tr.grad_accum - 1);
    const int64_t item = itemSize(m_master);
    int32_t clip = -1;
    if (m_tr.clip_grad_norm > 0) {
        // clip_grad_norm_ (torch/nn/utils/clip_grad.py, torchtitan's dist_utils.clip_grad_norm_ with
        // foreach=True) on the gradients the optimizer reads: _foreach_norm reads each one once,
        // the norms' all-reduce (one fp32 over the sharded dims, a DTensor's full_tensor(); its
        // few microseconds are not a task), then _foreach_mul_ by the clamped coefficient reads and
        // writes each one: 3 accesses and 3 FLOPs (square, add; multiply) per element.
        clip = newTask(TaskKind::ClipGrad, stream, -1, last_mb);
        for (int32_t w : waits) dep(w);
        cur().dtype = m_master;
        cur().flops = 3 * elems;
        cur().hbm_bytes = 3 * elems * item;
        cur().host_blocks = m_offload;
        cur().ops = pushElementwise(cur().hbm_bytes, cur().flops, m_master);
    }
    newTask(TaskKind::OptimizerStep, stream, -1, last_mb);
    for (int32_t w : waits) dep(w);
    if (clip >= 0) dep(clip);
    cur().dtype = m_master;
    const bool adamw = m_tr.optimizer == Optimizer::AdamW || m_tr.optimizer == Optimizer::AdamWFused;
    cur().flops = elems * (adamw ? kAdamWFlopsPerParam : 2 * (1 + states));
    // AdamW(fused=True) is one kernel: it reads the parameter, the gradient and both states and
    // writes the parameter and the states (7 accesses), and allocates nothing.
    const bool foreach_adamw = !m_offload && m_tr.optimizer == Optimizer::AdamW;
    cur().hbm_bytes = elems * item *
                      (foreach_adamw ? kForeachAdamWAccessesPerParam : kOptimizerTensorsRead + kOptimizerTensorsWritten + 2 * states);
    cur().host_blocks = m_offload;
    cur().ops = pushElementwise(cur().hbm_bytes, cur().flops, m_master);
    // Rule F8: precompute_float8_dynamic_scale_for_fsdp after the step (torchtitan calls it when
    // [float8] precompute_float8_dynamic_scale_for_fsdp is set, as with the fp8 all-gather):
    // _foreach_norm(ord=inf) reads every Float8Linear weight's shard once (one FLOP per element),
    // then one all-reduce (MAX) of one fp32 amax per weight over the data-parallel ranks, a few
    // microseconds that are not a task (as clip_grad_norm_'s), and the scales from them.
    int64_t float8_elems = 0;
    for (const UnitSizes& us : m_s.us) float8_elems += us.float8_shard_elems;
    if (m_tr.all_gather_dtype == AllGatherDtype::Fp8 && float8_elems > 0) {
        const int64_t bytes = float8_elems * item;
        cur().hbm_bytes += bytes;
        cur().flops += float8_elems;
        pushElementwise(bytes, float8_elems, m_master);
        ++cur().ops.count;
    }
    // PyTorch's default foreach AdamW keeps one temporary of the parameters' size (sqrt(v)),
    // filed as OptState: MemTracker files what the optimizer step allocates as OPT.
    if (!m_offload && m_tr.optimizer == Optimizer::AdamW) peakScratch(MemCategory::OptState, elems * item);
    // fp32 DDP keeps the gradients autograd wrote, one buffer per segment.
    const bool direct = !m_sharded && !m_mp;
    for (size_t u = 0; u < m_s.us.size(); ++u) {
        release(At::End, m_s.st[u].sharded_grad_buf);
        if (direct) releaseGrads(At::End, static_cast<int32_t>(u));
    }
    double flops = 0;
    for (const Task& t : m_p.tasks) flops += static_cast<double>(t.flops);
    m_p.hardware_flops_per_step = flops;
}

}  // namespace shardcast::core::detail
