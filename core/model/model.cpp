#include "core/model/model.hpp"

#include <algorithm>
#include <cassert>

namespace shardcast::core {

int64_t Param::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

int64_t Param::rowNumel() const {
    int64_t n = 1;
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
}

std::string_view opKindName(OpKind k) {
    switch (k) {
        case OpKind::Matmul: return "matmul";
        case OpKind::Attention: return "attention";
        case OpKind::Norm: return "norm";
        case OpKind::Elementwise: return "elementwise";
        case OpKind::Dropout: return "dropout";
        case OpKind::Embedding: return "embedding";
        case OpKind::Loss: return "loss";
        case OpKind::Other: return "other";
    }
    return "other";
}

int64_t Model::numParams() const {
    int64_t n = 0;
    for (const Param& p : params) n += p.numel();
    return n;
}

int32_t Model::findModule(std::string_view fqn) const {
    for (size_t i = 0; i < modules.size(); ++i)
        if (modules[i].name == fqn) return static_cast<int32_t>(i);
    return -1;
}

bool Model::isWithin(int32_t m, int32_t ancestor) const {
    // Parents precede children, so walking up terminates at the root (parent -1).
    while (m >= 0) {
        if (m == ancestor) return true;
        assert(static_cast<size_t>(m) < modules.size());
        m = modules[static_cast<size_t>(m)].parent;
    }
    return false;
}

int64_t Model::numEmbeddingParams() const {
    std::vector<uint8_t> is_embedding(modules.size(), 0);
    for (const Op& op : ops)
        if (op.kind == OpKind::Embedding) is_embedding[static_cast<size_t>(op.module)] = 1;
    int64_t n = 0;
    for (const Param& p : params)
        if (is_embedding[static_cast<size_t>(p.module)]) n += p.numel();
    return n;
}

// torchtitan's convention (torchtitan/models/utils.py get_dense_model_nparams_and_flops; train.py
// of 2024 passed get_num_params(model, exclude_embedding=True) to get_num_flop_per_token):
// 6 * (N - N_embedding) + 12 * L * H * Q * T, with H heads of Q = head_dim and T = seq_len. The
// attention term counts the whole s x s product (no causal halving) and no flash recompute; a
// tied LM head shares the embedding's weight, so its FLOPs go uncounted, as in torchtitan.
double Model::modelFlopsPerToken(int64_t seq_len) const {
    const double n = static_cast<double>(numParams() - numEmbeddingParams());
    const double s = static_cast<double>(seq_len);
    if (arch.layers > 0) {
        const double h_attn = static_cast<double>(arch.heads * arch.head_dim);
        return 6.0 * n + 12.0 * static_cast<double>(arch.layers) * h_attn * s;
    }
    // Custom module trees: the s^2 term is forward + backward (3x) of the ops' per-sequence
    // FLOPs, taken under one implementation so alternative variants are not counted twice.
    double seq_flops = 0;
    for (const Op& op : ops)
        if (op.existsUnder(variant::kFlash, variant::kEagerKernels)) seq_flops += op.flops.per_token_seq;
    return 6.0 * n + 3.0 * seq_flops * s;
}

Op linearOp(std::string name, int32_t module, int64_t in, int64_t out, bool saves_input, double share) {
    Op o;
    o.name = std::move(name);
    o.module = module;
    o.kind = OpKind::Matmul;
    o.kernel = KernelShape::Linear;
    o.in_features = in;
    o.out_features = out;
    o.token_share = share;
    o.flops.per_token = 2.0 * static_cast<double>(in) * static_cast<double>(out) * share;
    o.bwd_flops_factor = 2;
    o.wgrad_saved_act.per_token = static_cast<double>(in) * share;
    o.saved_act.per_token = saves_input ? o.wgrad_saved_act.per_token : 0;
    o.io_act.per_token = static_cast<double>(in + out) * share;
    return o;
}

std::vector<int32_t> linearOpOfModule(const Model& m) {
    std::vector<int32_t> op_of(m.modules.size(), -1);
    for (size_t i = 0; i < m.ops.size(); ++i) {
        const Op& op = m.ops[i];
        if (op.kernel == KernelShape::Linear && op_of[static_cast<size_t>(op.module)] < 0) {
            op_of[static_cast<size_t>(op.module)] = static_cast<int32_t>(i);
        }
    }
    return op_of;
}

std::vector<uint8_t> float8Weights(const Model& m) {
    const std::vector<int32_t> linear_of = linearOpOfModule(m);
    std::vector<uint8_t> out(m.params.size(), 0);
    for (size_t i = 0; i < m.params.size(); ++i) {
        const Param& p = m.params[i];
        const int32_t oi = linear_of[static_cast<size_t>(p.module)];
        if (oi < 0 || p.shape.size() != 2 || !p.name.ends_with(".weight")) continue;
        const Op& op = m.ops[static_cast<size_t>(oi)];
        out[i] = op.name != "lm_head" && op.in_features % 16 == 0 && op.out_features % 16 == 0;
    }
    return out;
}

Float8Summary float8Summary(const Model& m) {
    const std::vector<uint8_t> f8 = float8Weights(m);
    Float8Summary out;
    for (size_t i = 0; i < f8.size(); ++i) {
        if (!f8[i]) continue;
        ++out.weights;
        out.params += m.params[i].numel();
    }
    return out;
}

namespace {

bool sameCoef(const Coef& a, const Coef& b) {
    return a.per_token == b.per_token && a.per_token_seq == b.per_token_seq && a.fixed == b.fixed;
}

bool sameCosts(const Op& a, const Op& b) {
    return a.kind == b.kind && a.attention_variants == b.attention_variants && a.kernel_variants == b.kernel_variants &&
           a.bwd_flops_factor == b.bwd_flops_factor && a.causal == b.causal &&
           a.selective_recompute == b.selective_recompute && sameCoef(a.flops, b.flops) &&
           sameCoef(a.saved_act, b.saved_act) && sameCoef(a.saved_f32, b.saved_f32) && sameCoef(a.saved_u8, b.saved_u8) &&
           sameCoef(a.saved_act_hf_mask, b.saved_act_hf_mask) && sameCoef(a.saved_act_repeat_kv, b.saved_act_repeat_kv) &&
           sameCoef(a.io_bwd_act, b.io_bwd_act) && sameCoef(a.io_fused_act, b.io_fused_act) && a.fwd_kernels == b.fwd_kernels && a.bwd_kernels == b.bwd_kernels &&
           sameCoef(a.saved_i64, b.saved_i64) && sameCoef(a.temp_act, b.temp_act) && sameCoef(a.temp_f32, b.temp_f32) &&
           sameCoef(a.bwd_temp_act, b.bwd_temp_act) && sameCoef(a.bwd_temp_f32, b.bwd_temp_f32) &&
           a.bwd_temp_residual == b.bwd_temp_residual && a.temp_f32_tensors == b.temp_f32_tensors && a.bwd_temp_f32_tensors == b.bwd_temp_f32_tensors &&
           sameCoef(a.io_act, b.io_act) && a.kernel == b.kernel && a.in_features == b.in_features &&
           a.out_features == b.out_features && a.token_share == b.token_share && a.batch_shared == b.batch_shared &&
           a.heads == b.heads &&
           a.kv_heads == b.kv_heads && a.head_dim == b.head_dim && a.tp == b.tp &&
           sameCoef(a.wgrad_saved_act, b.wgrad_saved_act) && sameCoef(a.wgrad_saved_f32, b.wgrad_saved_f32) &&
           a.same_input_back == b.same_input_back && a.input_kept_under == b.input_kept_under;
}

}  // namespace

void Model::assignCostClasses() {
    std::vector<size_t> representatives;  // first op of each class
    for (size_t i = 0; i < ops.size(); ++i) {
        Op& op = ops[i];
        op.cost_class = -1;
        for (size_t c = 0; c < representatives.size(); ++c) {
            if (sameCosts(ops[representatives[c]], op)) {
                op.cost_class = static_cast<int32_t>(c);
                break;
            }
        }
        if (op.cost_class < 0) {
            op.cost_class = static_cast<int32_t>(representatives.size());
            representatives.push_back(i);
        }
    }
}

Model pipelineStageModel(const Model& m, int32_t block_begin, int32_t block_end, bool first, bool last) {
    const size_t nm = m.modules.size();
    // Per module: the index in Model::blocks of the block it lies in (-1: outside every block).
    std::vector<int32_t> block_of(nm, -1);
    for (size_t b = 0; b < m.blocks.size(); ++b) block_of[static_cast<size_t>(m.blocks[b])] = static_cast<int32_t>(b);
    for (size_t i = 0; i < nm; ++i) {
        const int32_t parent = m.modules[i].parent;
        if (block_of[i] < 0 && parent >= 0) block_of[i] = block_of[static_cast<size_t>(parent)];
    }
    auto in_stage_block = [&](int32_t mod) {
        const int32_t b = block_of[static_cast<size_t>(mod)];
        return b >= block_begin && b < block_end;
    };
    std::vector<uint8_t> owns_params(nm, 0);
    for (const Param& p : m.params) owns_params[static_cast<size_t>(p.module)] = 1;
    // Ops: the first op of any block splits "before the blocks" from "after them".
    size_t first_block_op = m.ops.size(), last_block_op = 0;
    for (size_t i = 0; i < m.ops.size(); ++i) {
        if (block_of[static_cast<size_t>(m.ops[i].module)] < 0) continue;
        first_block_op = std::min(first_block_op, i);
        last_block_op = i;
    }
    std::vector<uint8_t> keep_op(m.ops.size(), 0), keep_mod(nm, 0);
    for (size_t i = 0; i < m.ops.size(); ++i) {
        const int32_t mod = m.ops[i].module;
        bool keep;
        if (block_of[static_cast<size_t>(mod)] >= 0) {
            keep = in_stage_block(mod);
        } else if (i < first_block_op) {
            keep = first || !owns_params[static_cast<size_t>(mod)];
        } else {
            keep = last && i > last_block_op;
        }
        keep_op[i] = keep;
        if (keep) keep_mod[static_cast<size_t>(mod)] = 1;
    }
    std::vector<uint8_t> keep_param(m.params.size(), 0);
    for (size_t i = 0; i < m.params.size(); ++i) {
        const int32_t mod = m.params[i].module;
        keep_param[i] = block_of[static_cast<size_t>(mod)] >= 0 ? in_stage_block(mod) : keep_mod[static_cast<size_t>(mod)];
        if (keep_param[i]) keep_mod[static_cast<size_t>(mod)] = 1;
    }
    std::vector<uint8_t> keep_buffer(m.buffers.size(), 0);
    for (size_t i = 0; i < m.buffers.size(); ++i) {
        const int32_t mod = m.buffers[i].module;
        keep_buffer[i] = block_of[static_cast<size_t>(mod)] < 0 || in_stage_block(mod);
        if (keep_buffer[i]) keep_mod[static_cast<size_t>(mod)] = 1;
    }
    for (int32_t b = block_begin; b < block_end; ++b) keep_mod[static_cast<size_t>(m.blocks[static_cast<size_t>(b)])] = 1;
    keep_mod[0] = 1;
    // Ancestors of kept modules are kept (children follow their parents: walk backwards).
    for (size_t i = nm; i-- > 1;) {
        if (keep_mod[i]) keep_mod[static_cast<size_t>(m.modules[i].parent)] = 1;
    }
    std::vector<int32_t> new_index(nm, -1);
    Model out;
    out.name = m.name;
    out.source = m.source;
    out.arch = m.arch;
    out.arch.layers = block_end - block_begin;
    out.tp_plan = m.tp_plan;
    for (size_t i = 0; i < nm; ++i) {
        if (!keep_mod[i]) continue;
        new_index[i] = static_cast<int32_t>(out.modules.size());
        Module mod = m.modules[i];
        if (mod.parent >= 0) mod.parent = new_index[static_cast<size_t>(mod.parent)];
        out.modules.push_back(std::move(mod));
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
        if (!keep_param[i]) continue;
        Param p = m.params[i];
        p.module = new_index[static_cast<size_t>(p.module)];
        out.params.push_back(std::move(p));
    }
    for (size_t i = 0; i < m.buffers.size(); ++i) {
        if (!keep_buffer[i]) continue;
        BufferSpec b = m.buffers[i];
        b.module = new_index[static_cast<size_t>(b.module)];
        out.buffers.push_back(std::move(b));
    }
    for (size_t i = 0; i < m.ops.size(); ++i) {
        if (!keep_op[i]) continue;
        Op op = m.ops[i];
        op.module = new_index[static_cast<size_t>(op.module)];
        out.ops.push_back(std::move(op));
    }
    for (int32_t b = block_begin; b < block_end; ++b) out.blocks.push_back(new_index[static_cast<size_t>(m.blocks[static_cast<size_t>(b)])]);
    out.assignCostClasses();
    return out;
}

}  // namespace shardcast::core
