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
//       reduce-scatter under the matmul that makes its input (OpShape::overlap).   tpBefore, tpAfter
#include "core/lower/lower_internal.hpp"

namespace shardcast::core::detail {

namespace {

void divide(Coef& c, double d) {
    c.per_token /= d;
    c.per_token_seq /= d;
}

}  // namespace

Op tpLocalOp(const Op& op, int tp, bool sp, bool lp) {
    Op o = op;
    const auto d = static_cast<double>(tp);
    auto divideAll = [&](bool keep_i64, bool keep_mask) {
        for (Coef* c : {&o.flops, &o.saved_act, &o.saved_f32, &o.saved_u8, &o.saved_act_repeat_kv, &o.temp_act,
                        &o.temp_f32, &o.bwd_temp_act, &o.bwd_temp_f32, &o.io_act, &o.io_bwd_act, &o.io_fused_act})
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
    if (m_s.tp_key == key) return;
    m_s.tp_key = key;
    m_s.tp_ops.clear();
    m_s.tp_ops.reserve(m_model.ops.size());
    for (const Op& op : m_model.ops) m_s.tp_ops.push_back(tpLocalOp(op, static_cast<int>(m_tp), m_sp, m_lp));
}

// Before the forward of active op `ai` (and, mirrored, after its backward): an all-gather of a
// colwise run's input under SP, of the logits without loss_parallel.
void Lowering::tpBefore(int64_t ai, bool backward) {
    if (m_tp == 1) return;
    const Op& op = opAt(ai);
    const Op* prev = ai > 0 ? &opAt(ai - 1) : nullptr;
    const int64_t item = itemSize(m_pdt);
    if (!backward) {
        if (op.tp == TpRole::Colwise && (!prev || prev->tp != TpRole::Colwise) && m_sp)
            pushTpCollective(OpShapeKind::TpAllGather, m_tokens * op.in_features * item, kOverlapNext);
        if (op.tp == TpRole::Loss && !m_lp && (!prev || prev->tp != TpRole::Loss))
            pushTpCollective(OpShapeKind::TpAllGather, m_tokens * m_model.arch.vocab * item);
        return;
    }
    // Backward, before the op's own: the output gradient gathered back from sequence shards.
    if (m_sp && op.tp == TpRole::Rowwise)
        pushTpCollective(OpShapeKind::TpAllGather, m_tokens * op.out_features * item, kOverlapNext);
    if (m_sp && op.tp == TpRole::Vocab) pushTpCollective(OpShapeKind::TpAllGather, m_tokens * m_model.arch.hidden * item);
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
        if (op.tp == TpRole::Vocab) pushTpCollective(reduce, m_tokens * m_model.arch.hidden * item);
        return;
    }
    const Op* prev = ai > 0 ? &opAt(ai - 1) : nullptr;
    if (op.tp == TpRole::Colwise && (!prev || prev->tp != TpRole::Colwise))
        pushTpCollective(reduce, m_tokens * op.in_features * item, kOverlapPrevious);
}

void Lowering::pushTpCollective(OpShapeKind kind, int64_t bytes, uint8_t overlap) {
    const int32_t gi = m_group[static_cast<size_t>(GroupKind::Tensor)];
    assert(gi >= 0);
    const ProcessGroup& g = m_p.groups[static_cast<size_t>(gi)];
    OpShape& o = m_p.ops.emplace_back();
    o.kind = kind;
    o.dtype = m_pdt;
    o.bytes = bytes;
    o.group = gi;
    o.group_size = g.size;
    o.group_nodes = g.nodes;
    // Inductor's micro-pipelined TP fuses all-gathers and reduce-scatters of sequence parallelism
    // with their matmuls; an all-reduce (no SP) stays on its own.
    o.overlap = m_sh.async_tp && kind != OpShapeKind::TpAllReduce ? overlap : 0;
}

}  // namespace shardcast::core::detail
