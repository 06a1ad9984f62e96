#include "core/model/model.hpp"

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

namespace {

bool sameCoef(const Coef& a, const Coef& b) { return a.per_token == b.per_token && a.per_token_seq == b.per_token_seq; }

bool sameCosts(const Op& a, const Op& b) {
    return a.kind == b.kind && a.attention_variants == b.attention_variants && a.kernel_variants == b.kernel_variants &&
           a.bwd_flops_factor == b.bwd_flops_factor && a.causal == b.causal &&
           a.selective_recompute == b.selective_recompute && sameCoef(a.flops, b.flops) &&
           sameCoef(a.saved_act, b.saved_act) && sameCoef(a.saved_f32, b.saved_f32) && sameCoef(a.saved_u8, b.saved_u8) &&
           sameCoef(a.saved_act_hf_mask, b.saved_act_hf_mask) && sameCoef(a.saved_act_repeat_kv, b.saved_act_repeat_kv) &&
           sameCoef(a.io_bwd_act, b.io_bwd_act) && sameCoef(a.io_fused_act, b.io_fused_act) && a.fwd_kernels == b.fwd_kernels && a.bwd_kernels == b.bwd_kernels &&
           sameCoef(a.saved_i64, b.saved_i64) && sameCoef(a.temp_act, b.temp_act) && sameCoef(a.temp_f32, b.temp_f32) &&
           sameCoef(a.bwd_temp_act, b.bwd_temp_act) && sameCoef(a.bwd_temp_f32, b.bwd_temp_f32) &&
           a.temp_f32_tensors == b.temp_f32_tensors && a.bwd_temp_f32_tensors == b.bwd_temp_f32_tensors &&
           sameCoef(a.io_act, b.io_act) && a.kernel == b.kernel && a.in_features == b.in_features &&
           a.out_features == b.out_features && a.token_share == b.token_share && a.heads == b.heads &&
           a.kv_heads == b.kv_heads && a.head_dim == b.head_dim && a.tp == b.tp;
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

}  // namespace shardcast::core
