// Segments and activation memory: the forward ops cut into runs of one unit inside one block,
// their FLOPs and HBM bytes, what each keeps for backward under activation checkpointing (none,
// full per block, every K-th block, torchtitan's per-op SAC, Megatron's attention core), its
// transient peaks, and the order in which FSDP's forward and backward hooks fire around them.
#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

#include "core/lower/lower_internal.hpp"

namespace shardcast::core::detail {

// Bytes of a tensor set given per dtype: activations in param_dtype, fp32, 1-byte and int64.
int64_t Lowering::elementBytes(const Coef& act, const Coef& f32, const Coef& u8, const Coef& i64) const {
    const int64_t t = m_tokens, s = m_seq;
    return static_cast<int64_t>(act.at(t, s)) * itemSize(m_pdt) + static_cast<int64_t>(f32.at(t, s)) * itemSize(DType::F32) +
           static_cast<int64_t>(u8.at(t, s)) * itemSize(DType::U8) + static_cast<int64_t>(i64.at(t, s)) * itemSize(DType::I64);
}

void Lowering::buildSegments() {
    splitIntoSegments();
    tiedHeadGrad();
    opCosts();
    for (size_t si = 0; si < m_s.segs.size(); ++si) {
        Segment& seg = m_s.segs[si];
        if (sameAsPrevious(si)) {
            // The next block of a uniform model: copy the costs, keep its own identity.
            const Segment& prev = m_s.segs[si - 1];
            const int64_t kept = seg.saved;
            const Segment copy = seg;
            seg = prev;
            seg.unit = copy.unit;
            seg.op_begin = copy.op_begin;
            seg.op_end = copy.op_end;
            seg.saved = seg.checkpointed ? kept : seg.saved_full;
            continue;
        }
        segmentCosts(seg);
        segmentTensors(seg);
        segmentOps(seg);
    }
    const size_t n = m_s.segs.size();
    m_s.seg_saved.assign(n * static_cast<size_t>(m_slots), BufferRef{});
    m_s.seg_recomputed.assign(n, BufferRef{});
    m_s.seg_grad.assign(n, BufferRef{});
    m_s.seg_kept.assign(n * static_cast<size_t>(m_slots), BufferRef{});
    m_s.seg_grad_next.assign(n, -1);
}

// A new segment starts where the unit or the block changes. A checkpointed block (full: every
// block; layer: every ac_every-th; op: every block; blocks: those whose run is full or op) keeps
// its input once, with its first segment.
// Per-op SAC also marks the ops whose outputs it keeps: torchtitan's _save_list policy
// (torchtitan/models/llama/parallelize_llama.py, _apply_ac_to_transformer_block) saves the
// outputs of aten.mm except every second one, counted from 1 within each block's forward, and of
// SDPA's flash / efficient attention; everything else is recomputed.
void Lowering::splitIntoSegments() {
    const auto n_mod = m_model.modules.size();
    m_s.segs.clear();
    int32_t cur_unit = -1, cur_block = -2;
    int32_t last_block_seen = -1;
    // The mode of each block (by index): the whole-model mode, or the block's own under Blocks.
    const auto block_count = static_cast<int64_t>(m_model.blocks.size());
    bool op_sac = m_tr.ac == Checkpointing::Op;
    for (int64_t i = 0; m_tr.ac == Checkpointing::Blocks && i < block_count && !op_sac; ++i) op_sac = blockCheckpointing(m_tr, i) == Checkpointing::Op;
    m_s.sac_keep.assign(m_s.active.size(), 0);
    // A linear layer with a bias runs aten.addmm, which the save list does not name (nor count).
    std::vector<uint8_t> has_bias;
    if (op_sac) {
        has_bias.assign(n_mod, 0);
        for (const Param& prm : m_model.params) {
            const std::string_view name = prm.name;
            if (name.size() >= 5 && name.substr(name.size() - 5) == ".bias") has_bias[static_cast<size_t>(prm.module)] = 1;
        }
    }
    int mm_count = 0;
    // Rule C1: the boolean mask, kept with the first checkpointed block's input.
    int64_t mask_bytes = checkpointKeepsMask() ? m_tokens * m_seq * itemSize(DType::U8) : 0;
    // Ops [begin, end) of one unit inside one block (or outside every block).
    auto visit = [&](size_t begin, size_t end, int32_t unit, int32_t block) {
        const Checkpointing mode = block >= 0 ? blockCheckpointing(m_tr, m_s.block_index[static_cast<size_t>(block)]) : Checkpointing::None;
        if (mode == Checkpointing::Op) {
            if (block != last_block_seen) mm_count = 0;
            for (size_t ai = begin; ai < end; ++ai) {
                const Op& op = m_model.ops[static_cast<size_t>(m_s.active[ai])];
                if (op.kernel == KernelShape::Linear && !has_bias[static_cast<size_t>(op.module)])
                    m_s.sac_keep[ai] = ++mm_count % 2 == 1;
                if (op.kernel == KernelShape::FlashAttention) m_s.sac_keep[ai] = 1;
            }
        }
        if (unit != cur_unit || block != cur_block) {
            Segment& seg = m_s.segs.emplace_back();
            seg.unit = unit;
            seg.op_begin = static_cast<int64_t>(begin);
            seg.checkpointed = mode == Checkpointing::Full || mode == Checkpointing::Op;
            seg.op_sac = mode == Checkpointing::Op;
            if (seg.checkpointed && block != last_block_seen) {
                const Op& op = m_model.ops[static_cast<size_t>(m_s.active[begin])];
                // The block's input: under sequence parallelism, its tokens / tp (rule TP2).
                const int64_t tokens = m_tp > 1 && m_sp ? m_tokens / m_tp : m_tokens;
                seg.saved = m_model.arch.hidden > 0 ? tokens * m_model.arch.hidden * itemSize(m_pdt)
                                                    : elementBytes(op.saved_act, op.saved_f32, op.saved_u8, op.saved_i64);
                seg.saved += std::exchange(mask_bytes, 0);
            }
            if (block >= 0) last_block_seen = block;
            cur_unit = unit;
            cur_block = block;
        }
        m_s.segs.back().op_end = static_cast<int64_t>(end);
    };
    // A module without a unit of its own is in its parent's (resolveUnits), so a block holds one
    // unit unless the root of another lies inside it: only such a block, and the ops outside
    // every block, are walked module by module.
    auto& split = m_s.block_split;
    split.assign(m_model.blocks.size(), 0);
    for (const UnitSpec& unit : m_s.ua.units) {
        for (int32_t root : unit.modules) {
            const int32_t block = m_s.block_of[static_cast<size_t>(root)];
            if (block >= 0 && block != root) split[static_cast<size_t>(m_s.block_index[static_cast<size_t>(block)])] = 1;
        }
    }
    const std::vector<int32_t>& runs = m_s.block_runs;
    for (size_t r = 0; r + 1 < runs.size(); ++r) {
        const auto begin = static_cast<size_t>(runs[r]), end = static_cast<size_t>(runs[r + 1]);
        const int32_t block = m_s.active_block[begin];
        if (block >= 0 && !split[static_cast<size_t>(m_s.block_index[static_cast<size_t>(block)])]) {
            visit(begin, end, m_s.pidx[m_s.ua.module_unit[block]], block);
            continue;
        }
        for (size_t ai = begin; ai < end;) {
            const int32_t module = m_s.active_module[ai];
            size_t next = ai + 1;
            while (next < end && m_s.active_module[next] == module) ++next;
            visit(ai, next, m_s.pidx[m_s.ua.module_unit[module]], block);
            ai = next;
        }
    }
}

// Op costs for this plan's tokens and dtypes, once per cost class (a repeated block's ops share
// classes), then per op where the class cannot be shared.
void Lowering::opCosts() {
    const Coef none{};
    const int64_t t = m_tokens, s = m_seq;
    // The same ops (model and variants) at the same sizes and dtypes cost the same: keep them.
    const LowerScratch::OpCostKey key{m_plan.model, m_s.active_bits, t, s, m_pdt, m_tr.impl, m_tr.hf_mask, m_tr.kernels,
                                      static_cast<int>(m_tp), m_sp, m_lp, m_tr.all_gather_dtype};
    if (!m_s.any_frozen && m_s.op_cost_key == key) return;
    m_s.op_cost_key = m_s.any_frozen ? LowerScratch::OpCostKey{} : key;
    auto& cost = m_s.op_cost;
    cost.resize(m_s.active.size());
    auto& class_cost = m_s.class_cost;
    auto& class_done = m_s.class_done;
    class_cost.resize(m_model.ops.size());
    class_done.assign(m_model.ops.size(), 0);
    auto opCost = [&](const Op& op) {
        OpCost c;
        c.saved = elementBytes(op.saved_act, op.saved_f32, op.saved_u8, op.saved_i64);
        if (m_tr.impl == ModelImpl::Torchtitan) {
            c.saved += elementBytes(op.saved_act_repeat_kv, none, none, none);
        } else if (m_tr.hf_mask == HfMask::V4) {
            c.saved += elementBytes(op.saved_act_hf_mask, none, none, none) + elementBytes(op.saved_act_repeat_kv, none, none, none);
        }
        c.temp = elementBytes(op.temp_act, op.temp_f32, none, none);
        c.bwd_temp = elementBytes(op.bwd_temp_act, op.bwd_temp_f32, none, none);
        c.temp_act = elementBytes(op.temp_act, none, none, none);
        c.bwd_temp_act = elementBytes(op.bwd_temp_act, none, none, none);
        c.temp_f32_tensors = op.temp_f32_tensors;
        c.bwd_temp_f32_tensors = op.bwd_temp_f32_tensors;
        // FLOPs executed: a causal kernel skips the masked half of the s^2 work (flash-attention's
        // benchmarks/benchmark_flash_attention.py, flops(): "// (2 if causal else 1)").
        Coef executed = op.flops;
        if (op.causal) executed.per_token_seq /= 2;
        c.flops = static_cast<int64_t>(executed.at(t, s));
        if (op.kernel == KernelShape::Linear) {
            c.out = static_cast<int64_t>(static_cast<double>(op.out_features) * op.token_share * static_cast<double>(t)) *
                    itemSize(m_pdt);
        } else if (op.kernel == KernelShape::FlashAttention) {
            // SDPA's output [b, heads, s, head_dim] and its fp32 logsumexp [b, heads, s].
            c.out = t * op.heads * op.head_dim * itemSize(m_pdt) + t * op.heads * itemSize(DType::F32);
        }
        c.bwd_flops = static_cast<int64_t>(static_cast<double>(c.flops) * op.bwd_flops_factor);
        c.io = static_cast<int64_t>(op.io_act.at(t, s)) * itemSize(m_pdt);
        c.io_bwd = op.io_bwd_act.zero() ? 2 * c.io : static_cast<int64_t>(op.io_bwd_act.at(t, s)) * itemSize(m_pdt);
        if (m_tr.kernels != KernelImpl::Eager && !op.io_fused_act.zero()) {
            c.io = c.io_bwd = static_cast<int64_t>(op.io_fused_act.at(t, s)) * itemSize(m_pdt);
        }
        return c;
    };
    for (size_t ai = 0; ai < m_s.active.size(); ++ai) {
        const Op& op = opAt(static_cast<int64_t>(ai));
        const int32_t cls = op.cost_class;
        if (cls < 0) {
            cost[ai] = opCost(op);
        } else {
            if (!class_done[static_cast<size_t>(cls)]) {
                class_cost[static_cast<size_t>(cls)] = opCost(op);
                class_done[static_cast<size_t>(cls)] = 1;
            }
            cost[ai] = class_cost[static_cast<size_t>(cls)];
        }
    }
    if (m_tr.all_gather_dtype == AllGatherDtype::Fp8) float8Costs();
    if (m_s.any_frozen) requiresGradCosts();
}

// Rule C1: transformers 4.5x hands SDPA a materialised boolean [b, 1, s, s] mask that the model
// makes once and passes to every block. Without checkpointing only the bf16 copy each SDPA call
// converts and saves is kept (saved_act_hf_mask); a checkpointed block (torch.utils.checkpoint,
// full or per-op SAC) keeps its inputs for the recompute, the mask among them, so the boolean mask
// stays alive until the first checkpointed block's backward has run (FSDPMemTracker: Mistral-7B at
// seq 4096, 16 MiB of Activation in every block's backward under AC full). It is kept with that
// block's input, which the checkpoint keeps as long (splitIntoSegments).
bool Lowering::checkpointKeepsMask() const {
    if (m_tr.hf_mask != HfMask::V4 || m_tr.impl != ModelImpl::Hf || m_tr.attention != AttentionKernel::Flash) return false;
    return std::any_of(m_model.ops.begin(), m_model.ops.end(),
                       [](const Op& op) { return op.kind == OpKind::Attention && !op.saved_act_hf_mask.zero(); });
}

// Rule F8: a Float8Linear (torchao float8 training, tensorwise dynamic scaling; with fp8 all-gather
// its weight arrives in fp8 with a precomputed scale) runs its GEMMs in fp8 (torch._scaled_mm) and
// casts what is not fp8 yet. A dynamic cast (hp_tensor_to_float8_dynamic) is an amax reduction that
// reads the bf16 tensor, then a cast that reads it again and writes one byte per element: 5 bytes
// per element in 2 kernels. Forward: the input. Backward: the output gradient (e5m2), the saved
// bf16 input again for the weight gradient, and the fp8 weight transposed for the input gradient
// (_scaled_mm's second operand is column-major: read and write one byte per element, 1 kernel).
// Activations do not change: Float8Linear saves the bf16 input and the weight (float8_linear.py).
// Rule F8-TP: under tensor and sequence parallelism torchtitan applies torchao's float8 styles
// (torchao/float8/float8_tensor_parallel.py: PrepareFloat8ModuleInput, Float8ColwiseParallel,
// Float8RowwiseParallel; torchtitan's apply_tp with tensorwise float8). The input of a colwise run
// (attention's, the MLP's) is cast once, on this rank's sequence shard, before its all-gather, which
// moves one byte per element; the run's linears then get it in fp8 (no cast of their own) and keep
// it in fp8 for their weight gradients (no second cast: _scaled_mm's column-major operand, read and
// written once, 1 kernel, as the weight's transpose). A rowwise linear's input is cast by its style
// (on its local columns, as without TP) and kept in fp8 the same way. A rowwise linear's output
// gradient is cast (e5m2, _NoopFwToFloat8BwDynamic) on its sequence shard before the backward's
// all-gather, which moves fp8 too. Reduce-scatters stay in bf16. scripts/probe-float8-tp.py shows
// this on torch 2.15 with torchao 0.18: one activation cast and an e4m3 all-gather in forward, an
// e5m2 all-gather in backward, and no cast of a saved input.
void Lowering::float8Costs() {
    const bool tp = m_tp > 1 && m_sp;
    for (size_t ai = 0; ai < m_s.active.size(); ++ai) {
        const Op& op = opAt(static_cast<int64_t>(ai));
        if (op.kernel != KernelShape::Linear || !m_s.module_float8[static_cast<size_t>(op.module)]) continue;
        OpCost& c = m_s.op_cost[ai];
        const int64_t rows = linearRows(op);
        c.float8 = true;
        c.cast_fwd = 5 * rows * op.in_features;
        c.cast_bwd_grad = 5 * rows * op.out_features;
        c.cast_bwd_input = 5 * rows * op.in_features;
        c.cast_bwd_weight = 2 * op.in_features * op.out_features;
        if (tp && (op.tp == TpRole::Colwise || op.tp == TpRole::Rowwise)) {
            // Both styles hand the linear an fp8 input, which it saves: the weight gradient reads it
            // transposed (matmul_with_hp_or_float8_args skips the cast of an fp8 tensor).
            c.float8_tp = true;
            c.cast_bwd_input = 2 * rows * op.in_features;
        }
        if (tp && op.tp == TpRole::Colwise) {
            c.cast_fwd = startsColwiseRun(static_cast<int64_t>(ai)) ? 5 * (rows / m_tp) * op.in_features : 0;
        } else if (tp && op.tp == TpRole::Rowwise) {
            c.cast_bwd_grad = 5 * (rows / m_tp) * op.out_features;
        }
        c.io += c.cast_fwd;
        c.io_bwd += c.cast_bwd_grad + c.cast_bwd_input + c.cast_bwd_weight;
    }
}

// Rule G1: with frozen parameters (LoRA, `training.frozen`) autograd saves and computes only what
// some gradient needs (torch/csrc/autograd: a node exists when an input requires grad, and the
// generated code saves an input only for the gradients it will compute). In forward order, an
// op's input requires grad once any op before it made an output that does (the residual stream
// carries it on), except an op reading the same tensor as an earlier one (q's input for k, v and
// their adapters), which takes that op's. An op with no grad_fn saves nothing and has no backward
// (a frozen embedding; the first block's q/k/v base layers under LoRA); a frozen linear keeps
// its input only when another op needs it and computes dgrad only; a trainable weight whose input
// needs no gradient computes wgrad only.
void Lowering::requiresGradCosts() {
    const Coef none{};
    const size_t n = m_s.active.size();
    m_s.op_grad.assign(n, 0);
    m_s.input_saved.assign(m_model.ops.size(), 0);
    m_s.active_pos.assign(m_model.ops.size(), -1);
    for (size_t ai = 0; ai < n; ++ai) m_s.active_pos[static_cast<size_t>(m_s.active[ai])] = static_cast<int32_t>(ai);
    const uint8_t attention_bit = m_s.active_bits[0];
    bool live = m_stage > 0;  // a later pipeline stage receives activations that require grad
    for (size_t ai = 0; ai < n; ++ai) {
        const auto oi = static_cast<size_t>(m_s.active[ai]);
        const Op& op = opAt(static_cast<int64_t>(ai));
        // A tied head's weight is the embedding's (rule T1: tied_head_ai is set only when it trains).
        const bool weight = m_s.module_trainable[static_cast<size_t>(op.module)] > 0 || static_cast<int32_t>(ai) == m_s.tied_head_ai;
        size_t head = oi;
        bool input = live;
        if (op.same_input_back > 0 && oi >= static_cast<size_t>(op.same_input_back)) {
            head = oi - static_cast<size_t>(op.same_input_back);
            const int32_t hp = m_s.active_pos[head];
            if (hp >= 0) input = (m_s.op_grad[static_cast<size_t>(hp)] & kInputGrad) != 0;
        }
        m_s.op_grad[ai] = static_cast<uint8_t>((input ? kInputGrad : 0) | (weight ? kWeightGrad : 0));
        if (input || weight) live = true;
        OpCost& c = m_s.op_cost[ai];
        if (!input && !weight) {
            c.saved = c.bwd_flops = c.io_bwd = c.bwd_temp = c.bwd_temp_act = 0;
            continue;
        }
        const int64_t input_bytes = elementBytes(op.wgrad_saved_act, none, none, none);
        if (op.same_input_back == 0) c.saved -= input_bytes;  // saved_act counted it
        c.saved -= elementBytes(none, op.wgrad_saved_f32, none, none);
        const bool kept = (op.input_kept_under & attention_bit) != 0 && input;
        if ((weight || kept) && input_bytes > 0 && !m_s.input_saved[head]) {
            c.saved += input_bytes;
            m_s.input_saved[head] = 1;
        }
        if (weight) c.saved += elementBytes(none, op.wgrad_saved_f32, none, none);
        // dgrad when the input needs its gradient, wgrad when the weight does: one GEMM each.
        if (op.kernel == KernelShape::Linear) c.bwd_flops = (input ? c.flops : 0) + (weight ? c.flops : 0);
    }
}

// Rule T1: an LM head tied to the embedding (tie_word_embeddings) reads the embedding's weight, so
// the weight gets two gradients, and autograd's engine sums them in the input buffer of its one
// AccumulateGrad node (torch/csrc/autograd/input_buffer.cpp): the head's weight gradient, made
// first in backward (a transposed view of mm's [hidden, vocab] output), is held there until the
// embedding's backward (embedding_dense_backward) makes the other, and the sum is a third tensor
// (the held view cannot be accumulated into in place), which becomes param.grad; the two addends
// are freed. So from the head's backward to the embedding's, one more [vocab, hidden] gradient is
// alive, and the embedding's backward holds three at once. Seen with a dispatch mode on real and
// fake CPU tensors (torch 2.15) and in FSDPMemTracker's Temp at the end of Gemma's backward (3 x
// vocab x hidden x 2 B). Nothing is held when the weight is frozen, nor with tp or pp (both refuse
// tied embeddings).
void Lowering::tiedHeadGrad() {
    m_s.tied_head_ai = m_s.tied_embed_ai = -1;
    m_s.tied_grad_bytes = 0;
    m_s.tied_held = BufferRef{};
    const int64_t vocab = m_model.arch.vocab;
    if (!m_model.arch.tied_embeddings || vocab <= 0) return;
    int32_t weight = -1;
    for (size_t ai = 0; ai < m_s.active.size(); ++ai) {
        const Op& op = opAt(static_cast<int64_t>(ai));
        if (op.kind == OpKind::Embedding && m_s.tied_embed_ai < 0) {
            for (size_t k = 0; k < m_model.params.size(); ++k) {
                const Param& prm = m_model.params[k];
                if (prm.module == op.module && prm.shape.size() == 2 && prm.dim0() == vocab) {
                    m_s.tied_embed_ai = static_cast<int32_t>(ai);
                    weight = static_cast<int32_t>(k);
                    break;
                }
            }
        } else if (op.kernel == KernelShape::Linear && op.out_features == vocab && m_s.op_weight_elems[m_s.active[ai]] == 0) {
            m_s.tied_head_ai = static_cast<int32_t>(ai);
        }
    }
    const bool frozen = weight >= 0 && m_s.any_frozen && m_s.frozen[static_cast<size_t>(weight)];
    if (m_s.tied_embed_ai < 0 || m_s.tied_head_ai < 0 || frozen) {
        m_s.tied_head_ai = m_s.tied_embed_ai = -1;
        return;
    }
    m_s.tied_grad_bytes = m_s.param_shapes[static_cast<size_t>(weight)].numel * itemSize(m_pdt);
}

// Same op classes, gradients, weights and frozen flags as the previous segment: the next block
// of a uniform model, whose costs need not be worked out again.
bool Lowering::sameAsPrevious(size_t si) const {
    if (si == 0) return false;
    const Segment& a = m_s.segs[si - 1];
    const Segment& b = m_s.segs[si];
    if (a.op_end - a.op_begin != b.op_end - b.op_begin || a.checkpointed != b.checkpointed || a.op_sac != b.op_sac) return false;
    auto holds = [&](const Segment& g, int32_t ai) { return ai >= g.op_begin && ai < g.op_end; };
    for (const int32_t ai : {m_s.tied_head_ai, m_s.tied_embed_ai}) {
        if (holds(a, ai) || holds(b, ai)) return false;  // rule T1's segments have their own costs
    }
    const auto n = static_cast<size_t>(a.op_end - a.op_begin);
    if (!m_s.any_frozen) {
        // Every parameter trainable: each op's gradient elements are its weight elements, which
        // the signatures cover with the cost classes.
        const auto ia = static_cast<size_t>(a.op_begin), ib = static_cast<size_t>(b.op_begin);
        return std::equal(m_s.sac_keep.begin() + ia, m_s.sac_keep.begin() + ia + n, m_s.sac_keep.begin() + ib) &&
               std::equal(m_s.active_signature.begin() + ia, m_s.active_signature.begin() + ia + n,
                          m_s.active_signature.begin() + ib);
    }
    for (int64_t k = 0; k < a.op_end - a.op_begin; ++k) {
        const auto ia = static_cast<size_t>(a.op_begin + k), ib = static_cast<size_t>(b.op_begin + k);
        if (m_s.sac_keep[ia] != m_s.sac_keep[ib]) return false;
        const int32_t ca = m_s.active_class[ia];
        if (ca < 0 || ca != m_s.active_class[ib]) return false;
        const auto oa = static_cast<size_t>(m_s.active[ia]);
        const auto ob = static_cast<size_t>(m_s.active[ib]);
        if (m_s.op_grad_elems[oa] != m_s.op_grad_elems[ob] || m_s.op_weight_elems[oa] != m_s.op_weight_elems[ob]) return false;
        if (m_s.op_grad[ia] != m_s.op_grad[ib]) return false;  // rule G1: what needs a gradient
    }
    return true;
}

// Work and activation memory of one segment. Forward: saved tensors accumulate op by op; the
// transient peak is the largest (saved so far + the op's temporaries). Attention-core recompute
// drops the marked ops' tensors and recomputes those ops inside the backward. A checkpointed
// segment's recompute runs its forward again, under per-op SAC less the ops whose outputs were
// kept. Backward, in reverse op order: gradients appear while saved tensors are released.
void Lowering::segmentCosts(Segment& seg) {
    const bool selective = m_tr.ac == Checkpointing::AttnCore;
    const int64_t grad_item = itemSize(m_pdt);
    int64_t cum = 0, best = -1, sel_saved = 0;
    for (int64_t ai = seg.op_begin; ai < seg.op_end; ++ai) {
        const auto oi = static_cast<size_t>(m_s.active[static_cast<size_t>(ai)]);
        const OpCost& c = m_s.op_cost[static_cast<size_t>(ai)];
        seg.fwd_flops += c.flops;
        seg.bwd_flops += c.bwd_flops;
        seg.fwd_hbm += c.io;
        seg.bwd_hbm += c.io_bwd;
        seg.grad_bytes += m_s.op_grad_elems[oi] * grad_item;
        seg.weight_bytes += m_s.op_weight_elems[oi] * grad_item;
        if (m_s.sac_keep[static_cast<size_t>(ai)]) {
            seg.sac_kept += c.out;
        } else {
            seg.rec_flops += c.flops;
            seg.rec_hbm += c.io;
            seg.rec_weight_bytes += m_s.op_weight_elems[oi] * grad_item;
        }
        const bool dropped = selective && m_model.ops[oi].selective_recompute;
        if (dropped) {
            sel_saved += c.saved;
            seg.bwd_flops += c.flops;  // recomputed inside the backward
        }
        cum += c.saved;
        if (cum + c.temp > best) {
            best = cum + c.temp;
            seg.fwd_peak_act = cum;
            seg.fwd_peak_temp = c.temp;
            seg.fwd_peak_op = ai;
        }
        if (c.temp + c.saved > seg.ckpt_peak_temp) {
            seg.ckpt_peak_temp = c.temp + c.saved;
            seg.ckpt_peak_op = ai;
        }
        if (!dropped) seg.saved_full += c.saved;
    }
    if (selective) {
        // Dropped tensors are never held past their op: the forward peak shrinks to match.
        seg.fwd_peak_act = std::min(seg.fwd_peak_act, seg.saved_full);
    }
    if (!seg.checkpointed) seg.saved = seg.saved_full;
    int64_t freed = 0, grads = 0, bbest = INT64_MIN;
    bool sel_pending = sel_saved > 0;
    seg.tied_held = 0;
    seg.tied_frees = false;
    for (int64_t ai = seg.op_end - 1; ai >= seg.op_begin; --ai) {
        const auto oi = static_cast<size_t>(m_s.active[static_cast<size_t>(ai)]);
        const OpCost& c = m_s.op_cost[static_cast<size_t>(ai)];
        const bool dropped = selective && m_model.ops[oi].selective_recompute;
        int64_t temp = c.bwd_temp;
        if (dropped && sel_pending) {
            temp += sel_saved;  // the attention core is recomputed at once
            sel_pending = false;
        }
        if (ai == m_s.tied_head_ai) {
            seg.tied_held = m_s.tied_grad_bytes;  // rule T1: held from here on
            grads += m_s.tied_grad_bytes;
        }
        if (ai == m_s.tied_embed_ai) {
            // Rule T1: the embedding's own gradient beside the held one while their sum is made;
            // the sum reads both and writes the gradient kept (the add kernel's bytes).
            temp += m_s.tied_grad_bytes;
            seg.bwd_hbm += 3 * m_s.tied_grad_bytes;
            seg.tied_frees = true;
        }
        grads += m_s.op_grad_elems[oi] * grad_item;
        const int64_t extra = grads + temp - freed;
        if (extra > bbest) {
            bbest = extra;
            seg.bwd_peak_grad = grads;
            seg.bwd_peak_temp = temp;
            seg.bwd_peak_freed = freed;
            seg.bwd_peak_op = ai;
        }
        if (!dropped) freed += c.saved;
    }
}

// Autograd saves tensors op by op and PyTorch allocates each on its own; so are a backward's
// gradients (one per parameter; per op here, a module's weight and bias together). The spans
// list them in forward order: the backward frees saved tensors from the end.
void Lowering::segmentTensors(Segment& seg) {
    const bool selective = m_tr.ac == Checkpointing::AttnCore;
    const int64_t grad_item = itemSize(m_pdt);
    auto pushEach = [&](Span& span, auto bytesOf) {
        span = Span{static_cast<uint32_t>(m_p.tensor_bytes.size()), 0};
        for (int64_t ai = seg.op_begin; ai < seg.op_end; ++ai) {
            const int64_t bytes = bytesOf(static_cast<size_t>(ai));
            if (bytes <= 0) continue;
            m_p.tensor_bytes.push_back(bytes);
            ++span.count;
        }
    };
    pushEach(seg.saved_tensors, [&](size_t ai) {
        const bool dropped = selective && m_model.ops[static_cast<size_t>(m_s.active[ai])].selective_recompute;
        return dropped ? 0 : m_s.op_cost[ai].saved;
    });
    pushEach(seg.kept_tensors, [&](size_t ai) { return m_s.sac_keep[ai] ? m_s.op_cost[ai].out : 0; });
    pushEach(seg.grad_tensors, [&](size_t ai) { return m_s.op_grad_elems[static_cast<size_t>(m_s.active[ai])] * grad_item; });

    // The transient peaks. A list whose bytes do not add up to the peak's figure (attention-core
    // recompute folds dropped tensors in) stays one tensor.
    auto listOf = [&](Span& span, int64_t expected, auto fill) {
        span = Span{static_cast<uint32_t>(m_p.tensor_bytes.size()), 0};
        int64_t sum = 0;
        fill([&](int64_t bytes) {
            if (bytes <= 0) return;
            m_p.tensor_bytes.push_back(bytes);
            ++span.count;
            sum += bytes;
        });
        if (sum != expected || span.count < 2) {
            m_p.tensor_bytes.resize(span.offset);
            span = Span{};
        }
    };
    auto temps = [&](auto&& push, int64_t act, int64_t total, int16_t f32_tensors) {
        push(act);
        const int64_t f32 = total - act;
        const int64_t n = std::max<int16_t>(1, f32_tensors);
        for (int64_t k = 0; k < n; ++k) push(f32 / n + (k < f32 % n ? 1 : 0));
    };
    if (seg.fwd_peak_op >= 0) {
        listOf(seg.fwd_peak_act_tensors, seg.fwd_peak_act, [&](auto&& push) {
            for (int64_t ai = seg.op_begin; ai <= seg.fwd_peak_op; ++ai) push(m_s.op_cost[static_cast<size_t>(ai)].saved);
        });
        const OpCost& c = m_s.op_cost[static_cast<size_t>(seg.fwd_peak_op)];
        listOf(seg.fwd_peak_temp_tensors, seg.fwd_peak_temp,
               [&](auto&& push) { temps(push, c.temp_act, c.temp, c.temp_f32_tensors); });
    }
    if (seg.ckpt_peak_op >= 0) {
        const OpCost& c = m_s.op_cost[static_cast<size_t>(seg.ckpt_peak_op)];
        listOf(seg.ckpt_peak_tensors, seg.ckpt_peak_temp, [&](auto&& push) {
            push(c.saved);
            temps(push, c.temp_act, c.temp, c.temp_f32_tensors);
        });
    }
    if (seg.bwd_peak_op >= 0) {
        listOf(seg.bwd_peak_grad_tensors, seg.bwd_peak_grad, [&](auto&& push) {
            for (int64_t ai = seg.op_end - 1; ai >= seg.bwd_peak_op; --ai) {
                if (ai == m_s.tied_head_ai) push(m_s.tied_grad_bytes);  // rule T1
                push(m_s.op_grad_elems[static_cast<size_t>(m_s.active[static_cast<size_t>(ai)])] * grad_item);
            }
        });
        const OpCost& c = m_s.op_cost[static_cast<size_t>(seg.bwd_peak_op)];
        listOf(seg.bwd_peak_temp_tensors, seg.bwd_peak_temp,
               [&](auto&& push) { temps(push, c.bwd_temp_act, c.bwd_temp, c.bwd_temp_f32_tensors); });
    }
}

// The kernels of a segment (program.hpp OpShape): its forward, which a recompute repeats, and
// its backward in reverse op order. Under attention-core recompute the dropped ops run forward
// again inside the backward, all at once where the backward reaches the first of them. Under
// per-op SAC the recompute runs the ops whose outputs were not kept.
void Lowering::segmentOps(Segment& seg) {
    const bool selective = m_tr.ac == Checkpointing::AttnCore;
    auto dropped = [&](int64_t ai) {
        return selective && m_model.ops[static_cast<size_t>(m_s.active[static_cast<size_t>(ai)])].selective_recompute;
    };
    // An op's forward kernels between the TP collectives around it (rule TP3; none without TP).
    auto forward = [&](int64_t ai) {
        tpBefore(ai, false);
        pushForwardOps(opAt(ai), m_s.op_cost[static_cast<size_t>(ai)]);
        tpAfter(ai, false);
    };
    m_compile = m_tr.kernels == KernelImpl::Compile;
    seg.fwd_ops.offset = static_cast<uint32_t>(m_p.ops.size());
    m_chain_from = m_p.ops.size();
    for (int64_t ai = seg.op_begin; ai < seg.op_end; ++ai) forward(ai);
    seg.fwd_ops.count = static_cast<uint32_t>(m_p.ops.size()) - seg.fwd_ops.offset;
    seg.rec_ops = seg.fwd_ops;
    if (seg.op_sac) {
        seg.rec_ops.offset = static_cast<uint32_t>(m_p.ops.size());
        m_chain_from = m_p.ops.size();
        for (int64_t ai = seg.op_begin; ai < seg.op_end; ++ai) {
            if (!m_s.sac_keep[static_cast<size_t>(ai)]) forward(ai);
        }
        seg.rec_ops.count = static_cast<uint32_t>(m_p.ops.size()) - seg.rec_ops.offset;
    }
    seg.bwd_ops.offset = static_cast<uint32_t>(m_p.ops.size());
    m_chain_from = m_p.ops.size();
    bool recomputed = false;
    for (int64_t ai = seg.op_end - 1; ai >= seg.op_begin; --ai) {
        if (dropped(ai) && !recomputed) {
            for (int64_t aj = seg.op_begin; aj < seg.op_end; ++aj) {
                if (dropped(aj)) pushForwardOps(opAt(aj), m_s.op_cost[static_cast<size_t>(aj)]);
            }
            recomputed = true;
        }
        const uint8_t grad = opGradBits(ai);
        tpBefore(ai, true);
        pushBackwardOps(opAt(ai), m_s.op_cost[static_cast<size_t>(ai)], grad);
        tpAfter(ai, true);
    }
    seg.bwd_ops.count = static_cast<uint32_t>(m_p.ops.size()) - seg.bwd_ops.offset;
}

// Tokens a linear layer sees: all of them, or an MoE expert's share rounded to whole tokens.
int64_t Lowering::linearRows(const Op& op) const {
    if (op.token_share == 1) return m_tokens;
    return std::max<int64_t>(1, std::llround(static_cast<double>(m_tokens) * op.token_share));
}

void Lowering::pushForwardOps(const Op& op, const OpCost& c) {
    const int64_t b = m_tr.micro_batch, s = m_seq;
    switch (op.kernel) {
        case KernelShape::Linear: {
            // Rule F8-TP: a colwise run's input cast ran on its shard, before the all-gather.
            if (c.float8 && !(c.float8_tp && op.tp == TpRole::Colwise)) pushEagerKernels(c.cast_fwd, 0, 2);
            pushGemm(linearRows(op), op.out_features, op.in_features, 1, c.float8 ? std::optional(DType::F8) : std::nullopt);
            return;
        }
        case KernelShape::FlashAttention:
            pushAttention(OpShapeKind::Attention, op);
            return;
        case KernelShape::AttnScores:
            pushGemm(s, s, op.head_dim, b * op.heads);
            return;
        case KernelShape::AttnValues:
            pushGemm(s, op.head_dim, s, b * op.heads);
            return;
        case KernelShape::Elementwise: break;
    }
    pushEagerKernels(c.io, c.flops, m_tr.kernels == KernelImpl::Eager ? op.fwd_kernels : 1);
}

// Backward of each kernel: a linear layer's input gradient (dgrad) and, unless its weight is
// frozen, its weight gradient (wgrad); eager attention's two products per GEMM; the flash
// backward kernel; an elementwise op reads and writes twice what its forward moved.
void Lowering::pushBackwardOps(const Op& op, const OpCost& c, uint8_t grad) {
    const int64_t b = m_tr.micro_batch, s = m_seq;
    if (grad == 0) return;  // no grad_fn: no backward (rule G1)
    switch (op.kernel) {
        case KernelShape::Linear: {
            const int64_t rows = linearRows(op);
            const auto dtype = c.float8 ? std::optional(DType::F8) : std::nullopt;
            // Rule F8-TP: a rowwise linear's gradient and weight casts ran before the all-gather.
            const bool cast_before = c.float8_tp && op.tp == TpRole::Rowwise;
            if (c.float8 && !cast_before) pushEagerKernels(c.cast_bwd_grad, 0, 2);
            if (grad & kInputGrad) {
                if (c.float8 && !cast_before) pushEagerKernels(c.cast_bwd_weight, 0, 1);
                pushGemm(rows, op.in_features, op.out_features, 1, dtype);
            }
            if (grad & kWeightGrad) {
                if (c.float8) pushEagerKernels(c.cast_bwd_input, 0, c.float8_tp ? 1 : 2);
                pushGemm(op.out_features, op.in_features, rows, 1, dtype);
            }
            return;
        }
        case KernelShape::FlashAttention:
            pushAttention(OpShapeKind::AttentionBackward, op);
            return;
        case KernelShape::AttnScores:  // dQ = dS K, dK = dS^T Q
            pushGemm(s, op.head_dim, s, b * op.heads);
            pushGemm(s, op.head_dim, s, b * op.heads);
            return;
        case KernelShape::AttnValues:  // dP = dO V^T, dV = P^T dO
            pushGemm(s, s, op.head_dim, b * op.heads);
            pushGemm(s, op.head_dim, s, b * op.heads);
            return;
        case KernelShape::Elementwise: break;
    }
    pushEagerKernels(c.io_bwd, c.bwd_flops, m_tr.kernels == KernelImpl::Eager ? op.bwd_kernels : 1);
}

// An elementwise op: in eager mode the kernels PyTorch launches for it, its bytes and FLOPs split
// evenly over them; under torch.compile joined to the fused kernel of the chain it continues (the
// chain's kernel moves the bytes of its ops, intermediates included: an upper bound).
void Lowering::pushEagerKernels(int64_t bytes, int64_t flops, int kernels) {
    if (m_compile) {
        if (m_p.ops.size() > m_chain_from && m_p.ops.back().kind == OpShapeKind::Elementwise) {
            m_p.ops.back().bytes += bytes;
            m_p.ops.back().flops += flops;
        } else {
            pushElementwise(bytes, flops, m_pdt);
        }
        return;
    }
    const int64_t n = std::max(1, kernels);
    for (int64_t i = 0; i < n; ++i) {
        // The last kernel takes the remainders, so the op's bytes and FLOPs are kept exactly.
        const bool last = i == n - 1;
        pushElementwise(bytes / n + (last ? bytes % n : 0), flops / n + (last ? flops % n : 0), m_pdt);
    }
}

// Kernel shapes are written in place (no temporary copied in: see newTask).
void Lowering::pushGemm(int64_t m, int64_t n, int64_t k, int64_t batch, std::optional<DType> dtype) {
    OpShape& o = m_p.ops.emplace_back();
    o.kind = OpShapeKind::Gemm;
    o.dtype = dtype.value_or(m_pdt);
    o.m = m;
    o.n = n;
    o.k = k;
    o.batch = batch;
}

void Lowering::pushAttention(OpShapeKind kind, const Op& op) {
    OpShape& o = m_p.ops.emplace_back();
    o.kind = kind;
    o.dtype = m_pdt;
    o.causal = op.causal;
    o.batch = m_tr.micro_batch;
    o.heads = op.heads;
    o.kv_heads = op.kv_heads;
    o.head_dim = op.head_dim;
    o.seq = m_seq;
}

Span Lowering::pushElementwise(int64_t bytes, int64_t flops, DType dtype) {
    OpShape& o = m_p.ops.emplace_back();
    o.kind = OpShapeKind::Elementwise;
    o.dtype = dtype;
    o.bytes = bytes;
    o.flops = flops;
    return Span{static_cast<uint32_t>(m_p.ops.size() - 1), 1};
}

// The forward schedule: before a segment, the pre-forward hooks of the units that start with it
// (outermost first); after it, the post-forward hooks of the units that end with it (innermost
// first). Backward pre-hooks fire in reverse post-forward order.
void Lowering::buildItems() {
    m_s.items.clear();
    auto& chain = m_s.chain;
    for (size_t si = 0; si < m_s.segs.size(); ++si) {
        const Segment& seg = m_s.segs[si];
        const int64_t first = m_s.active[static_cast<size_t>(seg.op_begin)];
        const int64_t last = m_s.active[static_cast<size_t>(seg.op_end - 1)];
        chain.clear();
        for (int32_t u = seg.unit; u >= 0; u = m_s.parent[u]) {
            if (m_s.us[u].first_op == first) chain.push_back(u);
        }
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) m_s.items.push_back({ItemKind::Pre, *it});
        m_s.items.push_back({ItemKind::Seg, static_cast<int32_t>(si)});
        for (int32_t u = seg.unit; u >= 0; u = m_s.parent[u]) {
            if (m_s.us[u].last_op == last) m_s.items.push_back({ItemKind::Post, u});
        }
    }
    m_s.bwd_order.clear();
    for (auto it = m_s.items.rbegin(); it != m_s.items.rend(); ++it) {
        if (it->kind == ItemKind::Post) m_s.bwd_order.push_back(it->index);
    }
    m_s.bwd_pos.assign(m_s.us.size(), -1);
    for (size_t i = 0; i < m_s.bwd_order.size(); ++i) m_s.bwd_pos[m_s.bwd_order[i]] = static_cast<int32_t>(i);
}

}  // namespace shardcast::core::detail
