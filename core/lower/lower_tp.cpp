// Tensor parallelism under FSDP (issue 25): the per-rank view of a model that a TP plan
// (Model::tp_plan, torchtitan's Llama plan) splits over `tp` consecutive ranks, and the
// collectives DTensor issues on the tp group, which the compute stream waits for.
//
// The rules (torch.distributed.tensor.parallel's ColwiseParallel, RowwiseParallel,
// SequenceParallel, PrepareModuleInput and loss_parallel, as torchtitan's apply_tp composes them):
//  TP1  a ColwiseParallel weight (and bias) keeps out / tp rows, a RowwiseParallel weight in / tp
//       columns (its bias is replicated), the embedding and the LM head vocab / tp rows; the norms
//       are replicated. fully_shard then shards each TP-local tensor over the dp ranks (its dim 0,
//       padded): rule 1 applies to the local shape.                          activeOpTables
//  TP2  a colwise linear computes out / tp features over all the micro-batch's tokens and saves
//       its whole input; a rowwise one in / tp input features; the ops between them (RoPE,
//       attention over heads / tp, the MLP activation) hold 1 / tp of every tensor.
//       With sequence parallelism the norms and residual adds hold tokens / tp (so does a
//       checkpointed block's saved input); without it they are replicated. Under loss_parallel
//       the loss holds vocab / tp of the logits, else all of them.            tpLocalOp
//  TP3  collectives (S in nccl-tests' sense, activation dtype), on the compute stream:
//       forward  SP: all-gather [tokens, in] before the first of a run of colwise linears,
//                reduce-scatter [tokens, out] after a rowwise linear and after the embedding;
//                no SP: all-reduce [tokens, out] after a rowwise linear and after the embedding;
//                no loss_parallel: all-gather the logits [tokens, vocab] before the loss.
//       backward in reverse: SP: all-gather the output gradient before a rowwise linear's and
//                the embedding's backward, reduce-scatter the input gradient after the first
//                colwise linear's; no SP: all-reduce the input gradient there.
//       A recompute repeats the forward's.                                   tpCollectives
//  TP4  async TP (torch._inductor's micro-pipelined TP: fused_all_gather_matmul and
//       fused_matmul_reduce_scatter): an all-gather runs under the matmuls that read it, a
//       reduce-scatter under the matmul that makes its input (OpShape::overlap). Around them, on
//       the compute stream, the kernels of torch's symmetric-memory implementation
//       (torch/distributed/_symmetric_memory/__init__.py): before the all-gather's pipeline, its
//       local shard copied into the symmetric buffer (_pipelined_multi_all_gather_and_consume: not
//       overlapped with the first matmul, "mv"), S / tp read and written; after the
//       reduce-scatter's pipeline, the sum of the tp partial chunks (stacked_partials, reduce_fn):
//       S read, S / tp written.                          tpBefore, tpAfter, pushTpCollective
//  TP5  the vocab-parallel embedding's weight gradient is the whole vocabulary's: DTensor runs
//       aten.embedding_dense_backward with output [vocab, hidden] and a Replicate() gradient
//       (torch 2.15, seen with a dispatch mode on a fake group; docs/validation-memory.md).
//       FSDP2's post-backward (_take_unsharded_grads_to_reduce -> unsharded_grad_data) then
//       redistributes it to the parameter's Shard(0) placement, a copy of the local vocab / tp
//       rows, while the whole one is alive, and drops the whole one (param.grad = None) before it
//       reshards and reduces the local rows. Held across micro-batches (no_sync, pipeline stages)
//       the whole gradient accumulates, upcast to reduce_dtype.       vocabGradExtra, redistributeVocabGrad
#include "core/lower/lower_internal.hpp"

namespace shardcast::core::detail {

// TP5: the vocab-parallel embedding's gradient covers the whole vocabulary, tp times its local
// rows: its op makes tp x the local elements, and the unit holds (tp - 1) x them more.
void Lowering::vocabGradExtra() {
    if (m_tp <= 1) return;
    bool any = false;
    for (size_t k = 0; k < m_s.param_shapes.size(); ++k) {
        const int32_t op = m_s.param_grad_op[k];
        if (op < 0 || m_model.ops[static_cast<size_t>(op)].tp != TpRole::Vocab) continue;
        if ((!m_tr.frozen_regex.empty() || m_tr.lora.enabled()) && m_s.frozen[k]) continue;
        const int64_t extra = m_s.param_shapes[k].numel * (m_tp - 1);
        if (!any) {
            // op_grad_elems is kept between plans while every gradient is a weight's (grads_all_trainable):
            // this one is not, so the next plan rebuilds it.
            m_s.grads_all_trainable = false;
            any = true;
        }
        m_s.op_grad_elems[static_cast<size_t>(op)] += extra;
        m_s.us[static_cast<size_t>(m_s.param_unit[k])].vocab_grad_extra += extra;
    }
}

// TP5 at the post-backward of a unit holding the embedding: the copy of the local rows out of the
// whole-vocabulary gradient (Temp, on the compute stream, both alive at its start), after which
// the whole gradient is freed and the copy is what the reduce-scatter's copy-in reads.
void Lowering::redistributeVocabGrad(int32_t u, int mb) {
    UnitState& st = m_s.st[u];
    const int64_t extra_elems = m_s.us[static_cast<size_t>(u)].vocab_grad_extra;
    const int64_t local_elems = extra_elems / (m_tp - 1);
    // Held across micro-batches the gradients sit in the reduce_dtype accumulation buffer.
    const bool accumulated = st.acc_buf.live();
    const int64_t item = itemSize(accumulated ? m_rdt : m_pdt);
    newTask(TaskKind::Cast, Stream::Compute, u, mb);
    cur().dtype = accumulated ? m_rdt : m_pdt;
    cur().hbm_bytes = 2 * local_elems * item;
    cur().ops = pushElementwise(cur().hbm_bytes, 0, cur().dtype);
    BufferRef copy = alloc(At::Start, MemCategory::Temp, local_elems * item);
    if (accumulated) {
        const int64_t kept = std::max<int64_t>(0, st.acc_buf.bytes - (extra_elems + local_elems) * item);
        release(At::End, st.acc_buf);
        BufferRef rest = alloc(At::End, MemCategory::UnshardedGrad, kept);
        st.acc_buf = rest;
        st.acc_bytes = kept;
        m_vocab_copy = copy;  // freed with the accumulated gradients, once the copy-in has read both
        return;
    }
    // The segment whose gradient buffer holds the embedding's (its ops include the Vocab op): the
    // whole gradient goes, the segment's other gradients (if any) stay.
    for (int32_t si = st.grads_head; si >= 0; si = m_s.seg_grad_next[static_cast<size_t>(si)]) {
        const Segment& seg = m_s.segs[static_cast<size_t>(si)];
        bool vocab = false;
        for (int64_t ai = seg.op_begin; ai < seg.op_end && !vocab; ++ai) {
            vocab = m_model.ops[static_cast<size_t>(m_s.active[static_cast<size_t>(ai)])].tp == TpRole::Vocab;
        }
        BufferRef& g = m_s.seg_grad[static_cast<size_t>(si)];
        if (!vocab || !g.live()) continue;
        const int64_t whole = (extra_elems + local_elems) * item;
        const int64_t others = std::max<int64_t>(0, g.bytes - whole);
        const MemCategory category = g.category;
        st.grads_live -= g.bytes - others;
        release(At::End, g);
        if (others > 0) g = alloc(At::End, category, others);
        break;
    }
    m_vocab_copy = copy;  // freed with the unit's gradients, once the copy-in has read them
}

namespace {

void divide(Coef& c, double d) {
    c.per_token /= d;
    c.per_token_seq /= d;
    c.fixed /= d;
}

}  // namespace

Op tpLocalOp(const Op& op, int tp, bool sp, bool lp) {
    Op o = op;
    const auto d = static_cast<double>(tp);
    auto divideAll = [&](bool keep_i64, bool keep_mask) {
        for (Coef* c : {&o.flops, &o.saved_act, &o.saved_f32, &o.saved_u8, &o.saved_act_repeat_kv, &o.temp_act,
                        &o.temp_f32, &o.bwd_temp_act, &o.bwd_temp_f32, &o.io_act, &o.io_bwd_act, &o.io_fused_act,
                        &o.wgrad_saved_act, &o.wgrad_saved_f32})
            divide(*c, d);
        if (!keep_i64) divide(o.saved_i64, d);
        if (!keep_mask) divide(o.saved_act_hf_mask, d);
    };
    switch (op.tp) {
        case TpRole::Replicated:
        case TpRole::Vocab:  // full-size indices in, a partial [tokens, hidden] out
            break;
        case TpRole::Sequence:
            if (sp) divideAll(false, false);
            break;
        case TpRole::Heads:
            // The [b, 1, s, s] mask transformers 4.5x hands SDPA is per sequence, not per head.
            divideAll(true, true);
            // The residual stream's gradient it holds is sequence-sharded only under SP.
            if (!sp) o.bwd_temp_act.per_token += op.bwd_temp_residual * (1.0 - 1.0 / d);
            o.heads = static_cast<int32_t>(op.heads / tp);
            o.kv_heads = static_cast<int32_t>(op.kv_heads / tp);
            break;
        case TpRole::Colwise: {
            o.out_features = ceilDiv(op.out_features, int64_t{tp});
            divide(o.flops, d);
            const double share = op.token_share;
            o.io_act.per_token = static_cast<double>(op.in_features + o.out_features) * share;
            break;
        }
        case TpRole::Rowwise: {
            o.in_features = ceilDiv(op.in_features, int64_t{tp});
            divide(o.flops, d);
            divide(o.saved_act, d);
            divide(o.wgrad_saved_act, d);
            o.io_act.per_token = static_cast<double>(o.in_features + op.out_features) * op.token_share;
            break;
        }
        case TpRole::Loss:
            if (lp && op.kind == OpKind::Loss) {
                // loss_parallel's log_softmax (torch/distributed/tensor/parallel/loss.py,
                // _log_softmax) keeps its fp32 input while it computes `x - max` and exp() of that
                // before the result: one fp32 [tokens, vocab / tp] more than eager's at once.
                o.temp_f32.per_token += op.saved_f32.per_token;
                o.temp_f32_tensors = static_cast<int16_t>(op.temp_f32_tensors + 1);
            }
            if (lp) divideAll(true, true);  // the shifted labels stay whole
            break;
    }
    return o;
}

void Lowering::tpLocalOps() {
    const LowerScratch::TpKey key{m_plan.model, static_cast<int>(m_tp), m_sp, m_lp};
    for (const LowerScratch::TpOps& e : m_s.tp_cache) {
        if (e.key == key) {
            m_s.tp_ops = &e.ops;
            return;
        }
    }
    // Reserved once: an entry never moves, so the pointer a lowering holds stays valid.
    m_s.tp_cache.reserve(LowerScratch::kTpCacheEntries);
    size_t slot = m_s.tp_cache.size();
    if (slot < LowerScratch::kTpCacheEntries) {
        m_s.tp_cache.emplace_back();
    } else {
        slot = m_s.tp_next;
        m_s.tp_next = (m_s.tp_next + 1) % LowerScratch::kTpCacheEntries;
    }
    LowerScratch::TpOps& e = m_s.tp_cache[slot];
    e.key = key;
    e.ops.clear();
    e.ops.reserve(m_model.ops.size());
    for (const Op& op : m_model.ops) e.ops.push_back(tpLocalOp(op, static_cast<int>(m_tp), m_sp, m_lp));
    m_s.tp_ops = &e.ops;
}

// Before the forward of active op `ai` (and, mirrored, after its backward): an all-gather of a
// colwise run's input under SP, of the logits without loss_parallel.
void Lowering::tpBefore(int64_t ai, bool backward) {
    if (m_tp == 1) return;
    const Op& op = opAt(ai);
    const Op* prev = ai > 0 ? &opAt(ai - 1) : nullptr;
    const int64_t item = itemSize(m_pdt);
    // Rule F8-TP: a Float8Linear's casts run on the shard before its all-gather, which moves fp8.
    const OpCost& c = m_s.op_cost[static_cast<size_t>(ai)];
    const int64_t gathered_item = c.float8_tp ? 1 : item;
    if (!backward) {
        if (startsColwiseRun(ai) && m_sp) {
            if (c.float8_tp) pushEagerKernels(c.cast_fwd, 0, 2);
            pushTpCollective(OpShapeKind::TpAllGather, m_tokens * op.in_features * gathered_item, kOverlapNext);
        }
        if (op.tp == TpRole::Loss && !m_lp && (!prev || prev->tp != TpRole::Loss))
            pushTpCollective(OpShapeKind::TpAllGather, m_tokens * m_model.arch.vocab * item);
        return;
    }
    // Backward, before the op's own: the output gradient gathered back from sequence shards.
    if (m_sp && op.tp == TpRole::Rowwise) {
        const uint8_t grad = opGradBits(ai);
        if (c.float8_tp && grad != 0) {
            pushEagerKernels(c.cast_bwd_grad, 0, 2);
            if (grad & kInputGrad) pushEagerKernels(c.cast_bwd_weight, 0, 1);
        }
        pushTpCollective(OpShapeKind::TpAllGather, m_tokens * op.out_features * gathered_item, kOverlapNext);
    }
    if (m_sp && op.tp == TpRole::Vocab) pushTpCollective(OpShapeKind::TpAllGather, vocabRows(op) * m_model.arch.hidden * item);
}

// After the forward of active op `ai` (and, mirrored, after its backward): a rowwise linear's or
// the embedding's partial output reduced; in backward a colwise run's input gradient.
void Lowering::tpAfter(int64_t ai, bool backward) {
    if (m_tp == 1) return;
    const Op& op = opAt(ai);
    const int64_t item = itemSize(m_pdt);
    const OpShapeKind reduce = m_sp ? OpShapeKind::TpReduceScatter : OpShapeKind::TpAllReduce;
    if (!backward) {
        if (op.tp == TpRole::Rowwise) pushTpCollective(reduce, m_tokens * op.out_features * item, kOverlapPrevious);
        if (op.tp == TpRole::Vocab) pushTpCollective(reduce, vocabRows(op) * m_model.arch.hidden * item);
        return;
    }
    if (startsColwiseRun(ai)) pushTpCollective(reduce, m_tokens * op.in_features * item, kOverlapPrevious);
}

// The rows an embedding's output has: the micro-batch's tokens, or one sequence's when it is
// broadcast over the batch (GPT-2's position embedding).
int64_t Lowering::vocabRows(const Op& op) const { return op.batch_shared ? m_seq : m_tokens; }

void Lowering::pushTpCollective(OpShapeKind kind, int64_t bytes, uint8_t overlap) {
    const int32_t gi = m_group[static_cast<size_t>(GroupKind::Tensor)];
    assert(gi >= 0);
    const ProcessGroup& g = m_p.groups[static_cast<size_t>(gi)];
    // Inductor's micro-pipelined TP fuses all-gathers and reduce-scatters of sequence parallelism
    // with their matmuls; an all-reduce (no SP) stays on its own.
    const uint8_t fused = m_sh.async_tp && kind != OpShapeKind::TpAllReduce ? overlap : 0;
    const int64_t shard = bytes / g.size;
    // TP4: the all-gather's local shard copied into the symmetric buffer first.
    if (fused == kOverlapNext) pushElementwise(2 * shard, 0, m_pdt);
    OpShape& o = m_p.ops.emplace_back();
    o.kind = kind;
    o.dtype = m_pdt;
    o.bytes = bytes;
    o.group = gi;
    o.group_size = g.size;
    o.group_nodes = g.nodes;
    o.overlap = fused;
    if (fused == kOverlapPrevious) {
        // TP4: the tp partial chunks summed into this rank's (its own kernel: nothing fuses into it).
        pushElementwise(bytes + shard, (bytes - shard) / itemSize(m_pdt), m_pdt);
        m_chain_from = m_p.ops.size();
    }
}

}  // namespace shardcast::core::detail
