#include "core/model/model_io.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/checked_math.hpp"
#include "core/base/file_io.hpp"
#include "core/base/json_text.hpp"
#include "core/base/limits.hpp"

namespace shardcast::core {

using nlohmann::json;

namespace {

// Building the module tree.

class Builder {
public:
    explicit Builder(Model& model) : m_model(model) {
        m_model.modules.clear();
        m_model.modules.push_back(Module{"", -1, false, false});
    }

    // Returns the module `fqn`, creating it and any missing parents (parents precede children).
    // Iterative: the number of dotted parts is the input's to choose (limits::kMaxNameParts).
    int32_t module(const std::string& fqn) {
        if (int32_t found = find(fqn); found >= 0) return found;
        // Walk up to the longest existing prefix ending before a dot (the root "" always exists)...
        int32_t parent = 0;
        size_t start = 0;
        for (size_t end = fqn.size(); end > 0;) {
            const size_t dot = fqn.rfind('.', end - 1);
            if (dot == std::string::npos) break;
            if (const int32_t found = find(fqn.substr(0, dot)); found >= 0) {
                parent = found;
                start = dot + 1;
                break;
            }
            end = dot;
        }
        // ...then create the missing prefixes downwards, each the parent of the next.
        for (size_t pos = start;;) {
            const size_t dot = fqn.find('.', pos);
            std::string prefix = fqn.substr(0, dot == std::string::npos ? fqn.size() : dot);
            m_model.modules.push_back(Module{prefix, parent, false, false});
            parent = static_cast<int32_t>(m_model.modules.size() - 1);
            m_index.emplace(std::move(prefix), parent);
            if (dot == std::string::npos) break;
            pos = dot + 1;
        }
        return parent;
    }
    int32_t container(const std::string& fqn) {
        const int32_t m = module(fqn);
        m_model.modules[static_cast<size_t>(m)].is_container = true;
        return m;
    }
    int32_t block(const std::string& fqn) {
        const int32_t m = module(fqn);
        m_model.modules[static_cast<size_t>(m)].is_block = true;
        m_model.blocks.push_back(m);
        return m;
    }
    int32_t find(const std::string& fqn) const {
        if (fqn.empty()) return 0;
        auto it = m_index.find(fqn);
        return it == m_index.end() ? -1 : it->second;
    }
    const std::string& name(int32_t m) const { return m_model.modules[static_cast<size_t>(m)].name; }
    std::string qualify(int32_t m, const std::string& leaf) const {
        return name(m).empty() ? leaf : name(m) + "." + leaf;
    }

    void param(int32_t m, const std::string& leaf, std::vector<int64_t> shape,
               std::optional<DType> dtype = std::nullopt) {
        m_model.params.push_back(Param{qualify(m, leaf), std::move(shape), m, dtype});
    }
    // nn.Linear: weight [out, in], bias [out].
    int32_t linear(const std::string& fqn, int64_t in, int64_t out, bool bias) {
        const int32_t m = module(fqn);
        param(m, "weight", {out, in});
        if (bias) param(m, "bias", {out});
        return m;
    }
    void buffer(int32_t m, const std::string& leaf, int64_t numel, DType dtype, bool transformers4_only = false) {
        m_model.buffers.push_back(BufferSpec{qualify(m, leaf), numel, dtype, m, transformers4_only});
    }
    Op& op(int32_t m, std::string name, OpKind kind) {
        Op o;
        o.name = std::move(name);
        o.module = m;
        o.kind = kind;
        m_model.ops.push_back(std::move(o));
        return m_model.ops.back();
    }

private:
    Model& m_model;
    std::map<std::string, int32_t> m_index;
};

// Op helpers: one description per op kind, shared by every architecture. Element counts are
// per token; `f` scales an op that only sees a fraction of the tokens (an MoE expert).

constexpr double kNormFlopsPerElem = 5;     // mean/variance, normalise, scale (and shift)
constexpr double kActFlopsPerElem = 8;      // silu / gelu: exp or tanh plus a few mul/add
constexpr double kSoftmaxFlopsPerElem = 5;  // max, sub, exp, sum, div

enum class NormImpl { LlamaRms, GemmaRms, LayerNorm };
enum class ActImpl { Silu, Gelu, GeluTanh, GeluNew };

// `input_shared`: the norm's input is already saved by another op (GPT-NeoX's parallel residual
// feeds the same hidden states to both norms), so it is not counted again.
// `rows`: the rows normalised per token (1; Qwen3's q_norm and k_norm normalise each head: heads).
void addNorm(Builder& b, int32_t m, int64_t h, NormImpl impl, bool input_shared = false, int64_t rows = 1) {
    const double hd = static_cast<double>(h);
    const double in = input_shared ? 0 : hd;
    const double rd = static_cast<double>(rows);
    if (impl == NormImpl::LayerNorm) {
        // LayerNorm also saves mean and rstd (2 fp32 per token); omitted so that two LayerNorms
        // give exactly Korthikanti et al.'s 4sbh.
        Op& o = b.op(m, "layer_norm", OpKind::Norm);
        o.flops.per_token = kNormFlopsPerElem * hd;
        o.saved_act.per_token = in;
        o.io_act.per_token = 2 * hd;
        // native_layer_norm_backward: dx reads x and dy, writes dx (3h); gamma/beta grads reread
        // x and dy (2h): two kernels.
        o.io_bwd_act.per_token = 5 * hd;
        o.bwd_kernels = 2;
        return;
    }
    // Eager HF RMSNorm: x.to(float32) is kept (pow and mul save it) with rsqrt per row. Llama's
    // `weight * x.to(dtype)` then saves the bf16 normalised tensor; Gemma's
    // `x_normed * (1 + weight.float())` saves the fp32 normalised tensor instead.
    Op& e = b.op(m, "rms_norm", OpKind::Norm);
    e.kernel_variants = variant::kEagerKernels;
    e.flops.per_token = kNormFlopsPerElem * hd;
    if (impl == NormImpl::LlamaRms) {
        e.saved_f32.per_token = hd + rd;
        e.saved_act.per_token = hd;
        e.wgrad_saved_act.per_token = hd;  // `weight * x.to(dtype)` keeps x for the weight's gradient
    } else {
        e.saved_f32.per_token = 2 * hd + rd;
        e.wgrad_saved_f32.per_token = hd;  // `x_normed * (1 + weight.float())` keeps x_normed for it
    }
    e.temp_f32.per_token = hd;
    // Backward (torch/csrc/autograd/FunctionsManual.cpp): the fp32 input gets two gradients, the
    // direct one from `x * rsqrt(..)` (mul_tensor_backward), held in the engine's input buffer,
    // and one through mean_backward (grad.expand(..) / h: a new h-sized fp32 tensor) and
    // pow_backward, `grad * (exp * self.pow(exp - 1))`, whose self.pow(1) copy, its product
    // with 2 and the result are alive together: 5 fp32 tensors of h per token at its peak.
    e.bwd_temp_f32.per_token = 5 * hd;
    e.bwd_temp_f32_tensors = 5;
    // Kernels and traffic of the eager forward, per element in bf16 units (fp32 = 2): to(fp32)
    // 1 + 2, pow 2 + 2, mean 2, add eps and rsqrt (per row), mul by rsqrt 2 + 2, to(bf16) 2 + 1,
    // mul by weight 1 + 1: 18 units, 8 kernels. Backward (the autograd formulas above): weight mul
    // backward (grad * weight 2, grad * normed summed 4), the casts (3 + 3), the rsqrt mul backward
    // (4, and grad * x summed 8), mean backward's expand (2), pow backward's three kernels (12) and
    // the accumulation of the fp32 input's two gradients (6): 44 units, 15 kernels.
    e.io_act.per_token = 18 * hd;
    e.fwd_kernels = 8;
    e.io_bwd_act.per_token = 44 * hd;
    e.bwd_kernels = 15;
    // Fused RMSNorm kernel: saves its input and one rstd per row.
    Op& f = b.op(m, "rms_norm", OpKind::Norm);
    f.kernel_variants = variant::kFusedKernels;
    f.flops.per_token = kNormFlopsPerElem * hd;
    f.saved_act.per_token = in;
    f.saved_f32.per_token = rd;
    f.io_act.per_token = 2 * hd;
    // Backward: dx reads x and dy and writes dx; the weight gradient rereads both: two kernels.
    f.io_bwd_act.per_token = 5 * hd;
    f.bwd_kernels = 2;
}

// A matmul with weights: 2*in*out FLOPs per token, backward = dgrad + wgrad.
Op& addMatmul(Builder& b, int32_t m, const std::string& name, int64_t in, int64_t out, bool saves_input,
              double f = 1) {
    Op& o = b.op(m, name, OpKind::Matmul);
    o = linearOp(name, m, in, out, saves_input, f);
    return o;
}

// A linear reading the input of the op `back` places before it (q's for k and v): saved once.
Op& addSiblingMatmul(Builder& b, int32_t m, const std::string& name, int64_t in, int64_t out, int16_t back,
                     double f = 1) {
    Op& o = addMatmul(b, m, name, in, out, false, f);
    o.same_input_back = back;
    return o;
}

// The linear after the attention core: under SDPA its input is the kernel's saved output.
Op& addAttnOutMatmul(Builder& b, int32_t m, const std::string& name, int64_t in, int64_t out) {
    Op& o = addMatmul(b, m, name, in, out, true);
    o.input_kept_under = variant::kFlash;
    return o;
}

Op& addElementwise(Builder& b, int32_t m, const std::string& name, double elems, double flops_per_elem,
                   double saved_act, double io_factor = 2) {
    Op& o = b.op(m, name, OpKind::Elementwise);
    o.flops.per_token = elems * flops_per_elem;
    o.saved_act.per_token = saved_act;
    o.io_act.per_token = elems * io_factor;
    return o;
}

// Dropout saves a 1-byte mask per element; with p == 0 PyTorch returns its input untouched.
void addDropout(Builder& b, int32_t m, const std::string& name, double elems, double p) {
    if (p <= 0) return;
    Op& o = b.op(m, name, OpKind::Dropout);
    o.flops.per_token = elems;
    o.saved_u8.per_token = elems;
    o.io_act.per_token = 2 * elems;
}

struct AttnShape {
    int64_t heads = 0, kv_heads = 0, head_dim = 0;
    bool softmax_f32 = true;  // HF eager softmax in fp32 (llama family); GPT-2 uses the act dtype
    bool softcap = false;     // Gemma 2 attention logit soft-capping (tanh saves its output)
    double dropout = 0;
    // Multi-head latent attention (DeepSeek-V3): q and k heads of qk_dim, v heads of v_dim (0:
    // head_dim), and v a view of a wider tensor of v_base elements per token that a kernel saving
    // v keeps whole (0: v is a tensor of its own).
    int64_t qk_dim = 0, v_dim = 0, v_base = 0;
};

// The attention core (after the projections and RoPE). Flash keeps q, k, v (GQA not expanded),
// the output and the logsumexp; eager materialises the s x s scores. The eager s^2 ops are the
// ones selective activation checkpointing (Korthikanti et al. 2022) drops and recomputes.
void addAttentionCore(Builder& b, int32_t m, const AttnShape& a) {
    const double heads = static_cast<double>(a.heads);
    const double kv_heads = static_cast<double>(a.kv_heads);
    const double qk = static_cast<double>(a.qk_dim > 0 ? a.qk_dim : a.head_dim);
    const double vd = static_cast<double>(a.v_dim > 0 ? a.v_dim : a.head_dim);
    const double qd = heads * qk;  // q, and k or v repeated to all heads
    const double kd = kv_heads * qk;
    const double v_saved = a.v_base > 0 ? static_cast<double>(a.v_base) : kv_heads * vd;
    const double out = heads * vd;

    auto attentionKernel = [&](Op& o, KernelShape kernel) {
        o.kernel = kernel;
        o.heads = static_cast<int32_t>(a.heads);
        o.kv_heads = static_cast<int32_t>(a.kv_heads);
        o.head_dim = static_cast<int32_t>(a.head_dim);
    };
    Op& flash = b.op(m, "attn.core", OpKind::Attention);
    attentionKernel(flash, KernelShape::FlashAttention);
    flash.attention_variants = variant::kFlash;
    flash.flops.per_token_seq = 2 * qd + 2 * out;  // QK^T + PV over all s x s; causal halves what runs (lowering)
    // FlashAttention-2's backward recomputes Q K^T: 5 GEMMs for the forward's 2 (flash-attention
    // benchmarks/benchmark_flash_attention.py, flops(): bwd = 2.5 * fwd).
    flash.bwd_flops_factor = 2.5;
    flash.causal = true;
    // Its output is saved too, but that storage is o_proj's saved input (HF's sdpa_attention_forward
    // transposes it back to [b, s, h, d], which the kernel wrote contiguously, so .contiguous() and
    // the reshape copy nothing): counted once, by o_proj.
    flash.saved_act.per_token = qd + kd + v_saved;
    flash.saved_f32.per_token = heads;
    // transformers 4.5x (sdpa_attention_forward): with a mask, use_gqa_in_sdpa() is false and
    // repeat_kv copies K and V to all heads ((heads - kv_heads) x (qk + v) more saved); the boolean [b, 1, s, s]
    // mask is converted to the query dtype inside scaled_dot_product_attention on every call and
    // saved by the kernel (one element per token per key position, per layer).
    flash.saved_act_repeat_kv.per_token = (heads - kv_heads) * (qk + vd);
    flash.saved_act_hf_mask.per_token_seq = 1;
    flash.io_act.per_token = qd + kd + kv_heads * vd + out;

    // Eager: q, and k and v expanded to all heads by repeat_kv (copies when kv_heads < heads).
    // These stay saved under selective recompute; the s^2 ops below do not. Eager kernels
    // compute the full s x s product, so the eager ops are not marked causal.
    Op& inputs = b.op(m, "attn.qkv", OpKind::Attention);
    inputs.attention_variants = variant::kEagerAttn;
    inputs.saved_act.per_token = 2 * qd + (a.kv_heads == a.heads ? v_saved : out);
    inputs.io_act.per_token = (heads - kv_heads) * (qk + vd);  // repeat_kv copies

    Op& scores = b.op(m, "attn.scores", OpKind::Attention);
    attentionKernel(scores, KernelShape::AttnScores);
    scores.attention_variants = variant::kEagerAttn;
    scores.flops.per_token_seq = 2 * qd;  // heads x qk per query and key
    scores.bwd_flops_factor = 2;
    scores.selective_recompute = true;
    scores.temp_act.per_token_seq = heads;
    scores.io_act.per_token_seq = heads;

    if (a.softcap) {
        Op& cap = b.op(m, "attn.softcap", OpKind::Elementwise);
        cap.attention_variants = variant::kEagerAttn;
        cap.flops.per_token_seq = 3 * heads;
        cap.selective_recompute = true;
        cap.saved_act.per_token_seq = heads;  // tanh saves its output
        cap.io_act.per_token_seq = 2 * heads;
    }

    Op& softmax = b.op(m, "attn.softmax", OpKind::Attention);
    softmax.attention_variants = variant::kEagerAttn;
    softmax.flops.per_token_seq = kSoftmaxFlopsPerElem * heads;
    softmax.selective_recompute = true;
    // softmax saves its output; the fp32 variant's .to(dtype) copy is what PV saves below.
    (a.softmax_f32 ? softmax.saved_f32 : softmax.saved_act).per_token_seq = heads;
    softmax.io_act.per_token_seq = 2 * heads;
    // Backward: _softmax_backward_data makes its s x s output while the incoming gradient is
    // alive, both in the softmax's dtype (fp32: the bf16 gradient's upcast, by ToCopyBackward,
    // whose bf16 input the engine has freed by then). Seen at FSDPMemTracker's peak in a Phi-3
    // block's backward (transformers 4.57, eager): two fp32 [b, heads, s, s] Temp tensors.
    if (a.softmax_f32) {
        softmax.bwd_temp_f32.per_token_seq = 2 * heads;
        softmax.bwd_temp_f32_tensors = 2;
    } else {
        softmax.bwd_temp_act.per_token_seq = 2 * heads;
    }

    if (a.dropout > 0) {
        Op& drop = b.op(m, "attn.dropout", OpKind::Dropout);
        drop.attention_variants = variant::kEagerAttn;
        drop.flops.per_token_seq = heads;
        drop.selective_recompute = true;
        drop.saved_u8.per_token_seq = heads;
        drop.io_act.per_token_seq = 2 * heads;
    }

    Op& pv = b.op(m, "attn.pv", OpKind::Attention);
    attentionKernel(pv, KernelShape::AttnValues);
    pv.attention_variants = variant::kEagerAttn;
    pv.flops.per_token_seq = 2 * out;
    pv.bwd_flops_factor = 2;
    pv.selective_recompute = true;
    pv.saved_act.per_token_seq = heads;  // the (dropped-out) probabilities in the act dtype
    pv.bwd_temp_act.per_token_seq = heads;  // their gradient, made beside them
    pv.io_act.per_token_seq = heads;
}

// RoPE: q*cos + rotate_half(q)*sin. cos/sin are computed once per forward and shared by all
// layers, so nothing per layer is saved.
// Eager traffic per rotated element (q and k each): x * cos 2, rotate_half's neg 1 and cat 2,
// * sin 2, the add 3: 10 units in 5 kernels per tensor. Backward: grad * cos, grad * sin, the
// rotate_half backward (neg, slice into place) and the add of the two paths: 9 units, 5 kernels.
// Fused (Liger's RoPE kernel, or compiled): read and write each element once, both ways.
void addRope(Builder& b, int32_t m, int64_t rotated_elems) {
    const double r = static_cast<double>(rotated_elems);
    Op& o = addElementwise(b, m, "rope", r, 3, 0, 10);
    o.fwd_kernels = 10;
    o.io_bwd_act.per_token = 9 * r;
    o.bwd_kernels = 10;
    o.io_fused_act.per_token = 2 * r;
}

struct GatedMlpModules {
    int32_t mlp, gate, up, down, act;
};

// A LlamaMLP-style module `m`: gate_proj, up_proj, down_proj (h -> size -> h), act_fn.
GatedMlpModules addGatedMlpModules(Builder& b, const std::string& m, int64_t h, int64_t size, bool bias) {
    GatedMlpModules g;
    g.mlp = b.module(m);
    g.gate = b.linear(m + ".gate_proj", h, size, bias);
    g.up = b.linear(m + ".up_proj", h, size, bias);
    g.down = b.linear(m + ".down_proj", size, h, bias);
    g.act = b.module(m + ".act_fn");
    return g;
}

// The gated activation act(gate) * up over I elements per token (eager: act_fn, then the product;
// fused: one kernel that saves gate and up). `act_saved` / `mul_saved`: what the two eager ops keep
// (they differ when gate and up are views of one fused output); `split_grads`: the two halves'
// gradients are concatenated back into one [tokens, 2 I] (a fused gate_up projection). `h`: the
// hidden size, of the residual stream's gradient.
void addGatedActivation(Builder& b, const GatedMlpModules& mm, double I, double act_saved, double mul_saved,
                        bool split_grads, double h) {
    Op& act = b.op(mm.act, "act_fn", OpKind::Elementwise);
    act.kernel_variants = variant::kEagerKernels;
    act.flops.per_token = kActFlopsPerElem * I;
    act.saved_act.per_token = act_saved;
    act.io_act.per_token = 2 * I;
    act.io_bwd_act.per_token = 3 * I;  // silu_backward: reads grad and input, writes grad
    Op& mul = b.op(mm.mlp, "mul", OpKind::Elementwise);
    mul.kernel_variants = variant::kEagerKernels;
    mul.flops.per_token = I;
    mul.saved_act.per_token = mul_saved;
    mul.io_act.per_token = 3 * I;
    // grad * up and grad * act: two kernels of 3 each (and the concatenation of the halves: 4 more).
    mul.io_bwd_act.per_token = (split_grads ? 10 : 6) * I;
    // Its backward holds the product's gradient (down_proj's input gradient) beside the two it
    // makes, three [tokens, I] tensors, while the block's output gradient [tokens, h] waits for
    // the skip connection (FSDPMemTracker, Mistral-7B at seq 4096 under AC full: there [tokens, I]
    // is as large as an MLP weight and this moment is the block's backward peak).
    mul.bwd_temp_act.per_token = 3 * I + h;
    mul.bwd_temp_residual = h;
    mul.bwd_kernels = split_grads ? 3 : 2;
    // Fused gated activation: saves the gate and up outputs only.
    Op& fused = b.op(mm.mlp, "gated_act", OpKind::Elementwise);
    fused.kernel_variants = variant::kFusedKernels;
    fused.flops.per_token = (kActFlopsPerElem + 1) * I;
    fused.saved_act.per_token = 2 * I;
    fused.io_act.per_token = 3 * I;
    fused.io_bwd_act.per_token = 5 * I;  // reads gate, up and grad, writes both gradients
}

// down(act(gate(x)) * up(x)): SwiGLU (silu) or GeGLU (gelu tanh). `f` = share of tokens routed here.
// Eager: act_fn saves its input (gate output), `act * up` saves both operands.
void addGatedMlp(Builder& b, const GatedMlpModules& mm, int64_t h, int64_t inter, double f = 1) {
    const double I = static_cast<double>(inter) * f;
    addMatmul(b, mm.gate, "gate_proj", h, inter, true, f);
    addSiblingMatmul(b, mm.up, "up_proj", h, inter, 1, f);  // same input as gate, saved once
    addGatedActivation(b, mm, I, I, 2 * I, false, static_cast<double>(h));
    addMatmul(b, mm.down, "down_proj", inter, h, true, f);
}

// Phi-3's MLP: one gate_up_proj, its output chunked into gate and up (views), up * act(gate), down.
// act saves its input, a view that keeps gate_up_proj's whole [tokens, 2 I] output; the product
// saves up (the same storage) and act's output.
void addFusedGatedMlp(Builder& b, const GatedMlpModules& mm, int64_t h, int64_t inter) {
    const double I = static_cast<double>(inter);
    addMatmul(b, mm.gate, "gate_up_proj", h, 2 * inter, true);
    addGatedActivation(b, mm, I, 2 * I, I, true, static_cast<double>(h));
    addMatmul(b, mm.down, "down_proj", inter, h, true);
}

// The activation of a plain (fc1 -> act -> fc2) MLP. GPT-2's "gelu_new" is a Python composite
// (NewGELUActivation) whose autograd keeps x, tanh(.), 0.5*x and 1+tanh(.): 4 tensors of I.
void addActivation(Builder& b, int32_t m, int64_t inter, ActImpl impl) {
    const double I = static_cast<double>(inter);
    if (impl == ActImpl::GeluNew) {
        Op& e = b.op(m, "act", OpKind::Elementwise);
        e.kernel_variants = variant::kEagerKernels;
        e.flops.per_token = kActFlopsPerElem * I;
        e.saved_act.per_token = 4 * I;
        e.temp_act.per_token = 2 * I;
        e.io_act.per_token = 6 * I;
        Op& f = b.op(m, "act", OpKind::Elementwise);
        f.kernel_variants = variant::kFusedKernels;
        f.flops.per_token = kActFlopsPerElem * I;
        f.saved_act.per_token = I;
        f.io_act.per_token = 2 * I;
        return;
    }
    addElementwise(b, m, "act", I, kActFlopsPerElem, I);
}

void addEmbedding(Builder& b, int32_t m, int64_t h, bool saves_indices) {
    Op& o = b.op(m, "embedding", OpKind::Embedding);
    o.saved_i64.per_token = saves_indices ? 1 : 0;
    o.batch_shared = !saves_indices;  // GPT-2's position ids [1, seq]: no indices kept for backward
    o.io_act.per_token = static_cast<double>(h);
}

// LM head and loss. Eager HF ForCausalLMLoss: bf16 logits and their fp32 copy are transient,
// log_softmax keeps its fp32 output. Backward: nll_loss_backward makes an fp32 V-sized gradient,
// _log_softmax_backward_data another while the first is still its input (2 fp32 V); the engine
// frees the first before ToCopyBackward0 casts the second to bf16 (fp32 + bf16 V, less): the
// bf16 gradient never coexists with both fp32 ones.
// A fused linear+cross-entropy kernel (Liger) keeps only the input gradient it computes in
// forward (h, the same size as the eager matmul's saved input) and no V-sized tensor.
void addHeadAndLoss(Builder& b, int32_t head, int64_t h, int64_t vocab, bool final_softcap) {
    const double V = static_cast<double>(vocab);
    addMatmul(b, head, "lm_head", h, vocab, true);
    if (final_softcap) {
        // Gemma 2: logits / cap, tanh, * cap in the top-level forward; tanh saves its output.
        Op& cap = b.op(0, "logit_softcap", OpKind::Elementwise);
        cap.kernel_variants = variant::kEagerKernels;
        cap.flops.per_token = 3 * V;
        cap.saved_act.per_token = V;
        cap.temp_act.per_token = V;
        cap.io_act.per_token = 2 * V;
    }
    Op& loss = b.op(0, "loss", OpKind::Loss);
    loss.kernel_variants = variant::kEagerKernels;
    loss.flops.per_token = kSoftmaxFlopsPerElem * V;
    loss.temp_act.per_token = V;
    loss.temp_f32.per_token = V;
    loss.saved_f32.per_token = V;
    loss.saved_i64.per_token = 1;  // the shifted labels, saved by nll_loss
    loss.bwd_temp_f32.per_token = 2 * V;
    loss.bwd_temp_f32_tensors = 2;
    // Forward: logits.float() 1 + 2, log_softmax 2 + 2 (fp32), nll_loss's gather: 7 units in 3
    // kernels. Backward: nll_loss_backward's zero-filled fp32 gradient 2 and its scatter,
    // _log_softmax_backward_data 2 + 2 + 2, the cast to bf16 2 + 1: 11 units in 4 kernels.
    loss.io_act.per_token = 7 * V;
    loss.fwd_kernels = 3;
    loss.io_bwd_act.per_token = 11 * V;
    loss.bwd_kernels = 4;
}

// The add reads two and writes one; in backward the gradient flows to both inputs as is, and where
// the residual stream meets the norm's input gradient autograd adds the two (3 per element).
// Before the blocks, as LlamaForCausalLM registers them: model, model.embed_tokens and the
// model.layers container. Returns the embedding module.
int32_t addEmbedTokens(Builder& b, int64_t vocab, int64_t h) {
    b.module("model");
    const int32_t embed = b.module("model.embed_tokens");
    b.param(embed, "weight", {vocab, h});
    b.container("model.layers");
    return embed;
}

struct HeadModules {
    int32_t final_norm, head;
};

// After the blocks, as LlamaForCausalLM registers them: model.norm, the rotary embedding's inv_freq
// buffer (rotary_dims / 2 fp32) and lm_head (its weight unless tied to the embedding).
HeadModules addNormRotaryHead(Builder& b, int64_t h, int64_t vocab, bool tied, int64_t rotary_dims) {
    HeadModules m{b.module("model.norm"), -1};
    b.param(m.final_norm, "weight", {h});
    b.buffer(b.module("model.rotary_emb"), "inv_freq", rotary_dims / 2, DType::F32);
    m.head = b.module("lm_head");
    if (!tied) b.param(m.head, "weight", {vocab, h});
    return m;
}

void addResidual(Builder& b, int32_t m, int64_t h) {
    Op& o = addElementwise(b, m, "residual", static_cast<double>(h), 1, 0, 3);
    o.io_bwd_act.per_token = 3 * static_cast<double>(h);
}

// Reading HF config fields with errors that name the file and the field.

const char* const kSupportedTypes = "llama, mistral, mixtral, qwen2, qwen3, gemma, gemma2, olmo2, phi3, deepseek_v3, gpt2, gpt_neox";

class ConfigReader {
public:
    ConfigReader(const json& j, std::string source, std::string type)
        : m_j(j), m_source(std::move(source)), m_type(std::move(type)) {}

    bool has(const char* key) const { return m_j.contains(key) && !m_j.at(key).is_null(); }

    // A positive integer at most `max` (core/base/limits.hpp).
    int64_t required(const char* key, int64_t max) {
        if (!has(key)) {
            fail(std::string("field '") + key + "' is missing; a " + m_type +
                 " config needs it as a positive integer");
            return 1;
        }
        return positive(key, max);
    }
    int64_t optional(const char* key, int64_t def, int64_t max) { return has(key) ? positive(key, max) : def; }

    double probability(const char* key, double def) {
        if (!has(key)) return def;
        const json& v = m_j.at(key);
        if (!v.is_number() || v.get<double>() < 0 || v.get<double>() >= 1) {
            fail(std::string("field '") + key + "' must be a probability in [0, 1), got " + jsonExcerpt(v));
            return def;
        }
        return v.get<double>();
    }
    double fraction(const char* key, double def) {
        if (!has(key)) return def;
        const json& v = m_j.at(key);
        if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 1) {
            fail(std::string("field '") + key + "' must be a number in (0, 1], got " + jsonExcerpt(v));
            return def;
        }
        return v.get<double>();
    }
    bool flag(const char* key, bool def) {
        if (!has(key)) return def;
        const json& v = m_j.at(key);
        if (!v.is_boolean()) {
            fail(std::string("field '") + key + "' must be true or false, got " + jsonExcerpt(v));
            return def;
        }
        return v.get<bool>();
    }
    std::string text(const char* key, std::string def) {
        if (!has(key)) return def;
        const json& v = m_j.at(key);
        if (!v.is_string()) {
            fail(std::string("field '") + key + "' must be a string, got " + jsonExcerpt(v));
            return def;
        }
        return v.get<std::string>();
    }
    // An integer from 0 to max (0 allowed: DeepSeek's first_k_dense_replace), `def` when absent.
    int64_t nonNegative(const char* key, int64_t max, int64_t def = 0) {
        if (!has(key)) return def;
        const json& v = m_j.at(key);
        const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(max)
                              : v.is_number_integer() ? v.get<int64_t>() >= 0 && v.get<int64_t>() <= max
                                                      : false;
        if (!in_range) {
            fail(std::string("field '") + key + "' must be an integer from 0 to " + std::to_string(max) + ", got " +
                 jsonExcerpt(v));
            return def;
        }
        return v.get<int64_t>();
    }
    void check(bool ok, const std::string& message) {
        if (!ok) fail(message);
    }
    void fail(const std::string& message) {
        if (!m_error) m_error = makeError(m_source + ": " + message);
    }
    const std::optional<Error>& error() const { return m_error; }

private:
    int64_t positive(const char* key, int64_t max) {
        const json& v = m_j.at(key);
        // An unsigned value above INT64_MAX must not wrap to a negative one: test it as unsigned.
        const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= uint64_t(max)
                              : v.is_number_integer() ? v.get<int64_t>() >= 1 && v.get<int64_t>() <= max
                                                      : false;
        if (!in_range) {
            fail(std::string("field '") + key + "' must be a positive integer at most " + std::to_string(max) +
                 " (the limit; see docs/limits.md), got " + jsonExcerpt(v));
            return 1;
        }
        return v.get<int64_t>();
    }

    const json& m_j;
    std::string m_source;
    std::string m_type;
    std::optional<Error> m_error;
};

// The sizes every config with HuggingFace's common names has (Llama family, GPT-NeoX, DeepSeek-V3).
struct CoreSizes {
    int64_t hidden, layers, heads, intermediate, vocab;
};
CoreSizes readCoreSizes(ConfigReader& r) {
    return CoreSizes{r.required("hidden_size", limits::kMaxHidden), r.required("num_hidden_layers", limits::kMaxLayers),
                     r.required("num_attention_heads", limits::kMaxHeads),
                     r.required("intermediate_size", limits::kMaxIntermediate), r.required("vocab_size", limits::kMaxVocab)};
}

std::optional<ActImpl> parseAct(const std::string& s) {
    if (s == "silu" || s == "swish") return ActImpl::Silu;
    if (s == "gelu") return ActImpl::Gelu;
    if (s == "gelu_pytorch_tanh" || s == "gelu_fast") return ActImpl::GeluTanh;
    if (s == "gelu_new") return ActImpl::GeluNew;
    return std::nullopt;
}

ActImpl readAct(ConfigReader& r, const char* key, const char* def) {
    const std::string name = r.text(key, def);
    if (auto a = parseAct(name)) return *a;
    r.fail(std::string("field '") + key + "' is '" + name +
           "'; supported: silu, gelu, gelu_pytorch_tanh, gelu_fast, gelu_new");
    return ActImpl::Silu;
}

// What a tensor-parallel plan gives each parameter and op, from the role of the module that holds
// or runs it (`style`, on the module's last name). A linear's weight is [out, in] (nn.Linear), or
// [in, out] (`in_out`: transformers' Conv1D, which the plan runs as the nn.Linear holding its
// transpose: ColwiseParallel and RowwiseParallel take nn.Linear only); colwise weights and biases,
// and embeddings, are sharded along their output rows, rowwise weights along their input (their
// bias replicated). False (and nothing set) when an op the plan shards is not a linear.
template <typename Style>
bool applyTpRoles(Model& model, Style style, bool in_out) {
    auto leaf = [&](int32_t m) -> std::string_view {
        const std::string_view name = model.modules[static_cast<size_t>(m)].name;
        const size_t dot = name.rfind('.');
        return dot == std::string_view::npos ? name : name.substr(dot + 1);
    };
    for (const Op& op : model.ops) {
        if (op.kind == OpKind::Loss || op.name == "logit_softcap" || op.module == 0) continue;
        const TpRole r = style(leaf(op.module));
        if ((r == TpRole::Colwise || r == TpRole::Rowwise) && op.kernel != KernelShape::Linear) return false;
    }
    for (Param& p : model.params) {
        const TpRole r = style(leaf(p.module));
        const bool bias = p.shape.size() == 1;
        if (r == TpRole::Vocab) p.tp_dim = 0;
        if (r == TpRole::Colwise) p.tp_dim = static_cast<int8_t>(bias || !in_out ? 0 : 1);
        if (r == TpRole::Rowwise && !bias) p.tp_dim = static_cast<int8_t>(in_out ? 0 : 1);
    }
    for (Op& op : model.ops) {
        if (op.kind == OpKind::Loss || op.name == "logit_softcap") {
            op.tp = TpRole::Loss;
            continue;
        }
        op.tp = op.module == 0 ? TpRole::Sequence : style(leaf(op.module));
    }
    return true;
}

// torchtitan's tensor-parallel plan for Llama (torchtitan/models/llama3/infra/parallelize.py,
// apply_tp), on HuggingFace's module names: the token embedding RowwiseParallel (vocab rows
// sharded), q/k/v and gate/up ColwiseParallel, o_proj and down_proj RowwiseParallel, the norms
// SequenceParallel, lm_head ColwiseParallel (vocab rows sharded). Ops take their role from the
// module that runs them; what sits between a colwise and a rowwise linear (RoPE, the attention
// core, the MLP activation) runs on sharded heads or features. Models with experts (no expert
// parallelism here) or tied input and output embeddings (torchtitan unties them) get no plan.
void applyLlamaTpPlan(Model& model) {
    if (model.arch.experts > 0 || model.arch.tied_embeddings) return;
    auto style = [](std::string_view l) -> TpRole {
        if (l == "q_proj" || l == "k_proj" || l == "v_proj" || l == "gate_proj" || l == "up_proj" || l == "lm_head")
            return TpRole::Colwise;
        if (l == "o_proj" || l == "down_proj") return TpRole::Rowwise;
        if (l == "embed_tokens") return TpRole::Vocab;
        if (l == "self_attn" || l == "mlp" || l == "act_fn" || l == "q_norm" || l == "k_norm") return TpRole::Heads;
        return TpRole::Sequence;  // norms, residual adds (the block), the embedding scale (the model)
    };
    if (applyTpRoles(model, style, false)) model.tp_plan = "torchtitan-llama";
}

// GPT-2 has no torchtitan plan; this is Megatron-LM's layout (Shoeybi et al. 2019, section 3:
// the MLP's first GEMM column-parallel and its second row-parallel, attention split by heads,
// the vocabulary-parallel embedding shared with the output layer) as torch's parallel styles
// express it: transformer.wte and transformer.wpe RowwiseParallel (the position table sharded by
// rows like the token table), attn.c_attn and mlp.c_fc ColwiseParallel (c_attn's columns permuted
// so that rank i holds [q_i, k_i, v_i]), attn.c_proj and mlp.c_proj RowwiseParallel, ln_1, ln_2
// and ln_f SequenceParallel, lm_head ColwiseParallel. Both styles shard the tied [vocab, hidden]
// weight by rows, so it stays one parameter. The dropouts after c_proj run on sequence shards.
void applyGpt2TpPlan(Model& model) {
    auto style = [](std::string_view l) -> TpRole {
        if (l == "c_attn" || l == "c_fc" || l == "lm_head") return TpRole::Colwise;
        if (l == "c_proj") return TpRole::Rowwise;
        if (l == "wte" || l == "wpe") return TpRole::Vocab;
        if (l == "attn" || l == "act") return TpRole::Heads;
        return TpRole::Sequence;  // ln_1, ln_2, ln_f, the dropouts, residual adds, the position add
    };
    if (applyTpRoles(model, style, true)) model.tp_plan = "megatron-gpt2";
}

// Llama family: llama, mistral, qwen2, qwen3, gemma, gemma2, olmo2, phi3, mixtral (LlamaForCausalLM layout).

Result<Model> buildLlamaFamily(const json& cfg, Model model) {
    const std::string& type = model.arch.model_type;
    ConfigReader r(cfg, model.source, type);
    // Gemma (modeling_gemma.py) and Gemma 2: GemmaRMSNorm's (1 + weight) in fp32, the embedding
    // scaled by sqrt(hidden), GeGLU, tied embeddings; Gemma 2 adds two norms per block and softcaps.
    const bool gemma2 = type == "gemma2";
    const bool gemma = gemma2 || type == "gemma";
    const bool moe = type == "mixtral";
    const bool qk_norm = type == "qwen3";  // Qwen3Attention: RMSNorm over each head of q and k
    // OLMo 2 (modeling_olmo2.py): no pre-norms; RMSNorm after attention and after the MLP, and over
    // the whole q and k projections; Olmo2RMSNorm multiplies by the weight in fp32, as Gemma's does.
    const bool olmo2 = type == "olmo2";
    // Phi-3 (modeling_phi3.py): one qkv_proj and one gate_up_proj, their outputs split by views.
    const bool phi3 = type == "phi3";

    // Named locals, not a structured binding: lambdas below capture them (C++17 clang refuses a
    // captured binding).
    const CoreSizes sizes = readCoreSizes(r);
    const int64_t h = sizes.hidden, layers = sizes.layers, heads = sizes.heads, inter = sizes.intermediate,
                  vocab = sizes.vocab;
    const int64_t kv = r.optional("num_key_value_heads", heads, limits::kMaxHeads);
    if (!r.has("head_dim"))
        r.check(h % heads == 0, "field 'hidden_size' (" + std::to_string(h) +
                                    ") must be divisible by 'num_attention_heads' (" + std::to_string(heads) +
                                    ") when 'head_dim' is absent");
    const int64_t head_dim = r.optional("head_dim", h / heads, limits::kMaxHeadDim);
    r.check(heads % kv == 0, "field 'num_key_value_heads' (" + std::to_string(kv) +
                                 ") must divide 'num_attention_heads' (" + std::to_string(heads) + ")");
    const bool tied = r.flag("tie_word_embeddings", gemma);  // GemmaConfig ties by default
    const bool qkv_bias = type == "qwen2" || r.flag("attention_bias", false);
    const bool o_bias = type != "qwen2" && r.flag("attention_bias", false);
    const bool mlp_bias = r.flag("mlp_bias", false);
    const double attn_dropout = r.probability("attention_dropout", 0.0);
    const double resid_dropout = phi3 ? r.probability("resid_pdrop", 0.0) : 0.0;
    const ActImpl act = gemma ? readAct(r, "hidden_activation", "gelu_pytorch_tanh")
                              : readAct(r, "hidden_act", "silu");
    int64_t experts = 0, top_k = 0;
    if (moe) {
        experts = r.optional("num_local_experts", 8, limits::kMaxExperts);
        top_k = r.optional("num_experts_per_tok", 2, limits::kMaxExperts);
        r.check(top_k <= experts, "field 'num_experts_per_tok' (" + std::to_string(top_k) +
                                      ") must not exceed 'num_local_experts' (" + std::to_string(experts) + ")");
        // Checked before building: each expert is five modules per layer.
        r.check(layers * experts <= limits::kMaxLayerExperts,
                "'num_hidden_layers' x 'num_local_experts' (" + std::to_string(layers) + " x " +
                    std::to_string(experts) + ") must be at most " + std::to_string(limits::kMaxLayerExperts) +
                    " (the limit; see docs/limits.md)");
    }
    const bool attn_softcap = gemma2 && r.has("attn_logit_softcapping");
    const bool final_softcap = gemma2 && r.has("final_logit_softcapping");
    if (r.error()) return *r.error();
    (void)act;  // gated MLP cost is the same for silu and gelu-tanh

    model.arch = ModelArch{type, h, layers, heads, kv, head_dim, inter, vocab, experts, top_k, tied};
    const NormImpl norm = gemma || olmo2 ? NormImpl::GemmaRms : NormImpl::LlamaRms;
    const int64_t qd = heads * head_dim, kvd = kv * head_dim;

    Builder b(model);
    const int32_t embed = addEmbedTokens(b, vocab, h);

    struct LayerModules {
        int32_t layer, attn, q, k, v, o, in_norm, post_attn_norm, pre_ff_norm = -1, post_ff_norm = -1;
        int32_t q_norm = -1, k_norm = -1;
        int32_t resid_attn_drop = -1, resid_mlp_drop = -1;  // Phi-3
        GatedMlpModules mlp{};
        int32_t router = -1;
        std::vector<GatedMlpModules> experts;
    };
    std::vector<LayerModules> lm(static_cast<size_t>(layers));
    for (int64_t i = 0; i < layers; ++i) {
        LayerModules& L = lm[static_cast<size_t>(i)];
        const std::string p = "model.layers." + std::to_string(i);
        L.layer = b.block(p);
        L.attn = b.module(p + ".self_attn");
        if (phi3) {  // Phi3Attention registers o_proj first
            L.o = b.linear(p + ".self_attn.o_proj", qd, h, o_bias);
            L.q = L.k = L.v = b.linear(p + ".self_attn.qkv_proj", h, qd + 2 * kvd, qkv_bias);
        } else {
            L.q = b.linear(p + ".self_attn.q_proj", h, qd, qkv_bias);
            L.k = b.linear(p + ".self_attn.k_proj", h, kvd, qkv_bias);
            L.v = b.linear(p + ".self_attn.v_proj", h, kvd, qkv_bias);
            L.o = b.linear(p + ".self_attn.o_proj", qd, h, o_bias);
        }
        if (qk_norm || olmo2) {
            L.q_norm = b.module(p + ".self_attn.q_norm");
            b.param(L.q_norm, "weight", {olmo2 ? qd : head_dim});
            L.k_norm = b.module(p + ".self_attn.k_norm");
            b.param(L.k_norm, "weight", {olmo2 ? kvd : head_dim});
        }
        if (moe) {
            const std::string s = p + ".block_sparse_moe";
            L.mlp.mlp = b.module(s);
            L.router = b.linear(s + ".gate", h, experts, false);
            b.container(s + ".experts");
            for (int64_t j = 0; j < experts; ++j) {
                const std::string e = s + ".experts." + std::to_string(j);
                GatedMlpModules em;
                em.mlp = b.module(e);
                em.gate = b.linear(e + ".w1", h, inter, false);
                em.down = b.linear(e + ".w2", inter, h, false);
                em.up = b.linear(e + ".w3", h, inter, false);
                em.act = b.module(e + ".act_fn");
                L.experts.push_back(em);
            }
        } else if (phi3) {
            L.mlp.mlp = b.module(p + ".mlp");
            L.mlp.gate = L.mlp.up = b.linear(p + ".mlp.gate_up_proj", h, 2 * inter, mlp_bias);
            L.mlp.down = b.linear(p + ".mlp.down_proj", inter, h, mlp_bias);
            L.mlp.act = b.module(p + ".mlp.activation_fn");
        } else {
            L.mlp = addGatedMlpModules(b, p + ".mlp", h, inter, mlp_bias);
        }
        auto norm_module = [&](const std::string& leaf) {
            const int32_t m = b.module(p + "." + leaf);
            b.param(m, "weight", {h});
            return m;
        };
        if (!olmo2) L.in_norm = norm_module("input_layernorm");
        L.post_attn_norm = norm_module("post_attention_layernorm");
        if (olmo2) L.post_ff_norm = norm_module("post_feedforward_layernorm");
        if (phi3) {
            L.resid_attn_drop = b.module(p + ".resid_attn_dropout");
            L.resid_mlp_drop = b.module(p + ".resid_mlp_dropout");
        }
        if (gemma2) {
            L.pre_ff_norm = norm_module("pre_feedforward_layernorm");
            L.post_ff_norm = norm_module("post_feedforward_layernorm");
        }
    }
    const auto [final_norm, head] = addNormRotaryHead(b, h, vocab, tied, head_dim);

    // Forward ops.
    addEmbedding(b, embed, h, true);
    if (gemma) addElementwise(b, b.find("model"), "embed_scale", static_cast<double>(h), 1, 0);
    AttnShape shape{heads, kv, head_dim, true, attn_softcap, attn_dropout};
    for (const LayerModules& L : lm) {
        if (!olmo2) addNorm(b, L.in_norm, h, norm);
        // q/k/v share the norm output (OLMo 2: the block's input): saved once. Qwen3: q = q_norm(q_proj(x)), k = k_norm(k_proj(x))
        // per head before RoPE (modeling_qwen3.py, Qwen3Attention.forward).
        const size_t q_at = model.ops.size();
        if (phi3) {
            addMatmul(b, L.q, "qkv_proj", h, qd + 2 * kvd, true);
            // q, k and v are views of qkv's output; the attention kernel keeps v, so the whole output
            // stays: q's and k's parts beyond what the kernel's own saved tensors count.
            Op& kept = addElementwise(b, L.attn, "qkv.kept", 0, 0, static_cast<double>(qd + kvd), 0);
            kept.io_bwd_act.per_token = static_cast<double>(qd + 2 * kvd);  // the gradients' cat into one
            // And SDPA's output is not o_proj's input here: the transpose back copies it (seen with
            // saved-tensor hooks on CUDA and CPU, transformers 5.17 and 4.57), so the kernel's saved
            // output counts on its own.
            Op& out = addElementwise(b, L.attn, "attn.out", 0, 0, static_cast<double>(qd), 0);
            out.attention_variants = variant::kFlash;
        } else {
        addMatmul(b, L.q, "q_proj", h, qd, true);
        if (qk_norm || olmo2) addNorm(b, L.q_norm, qd, norm, false, olmo2 ? 1 : heads);
        addSiblingMatmul(b, L.k, "k_proj", h, kvd, static_cast<int16_t>(model.ops.size() - q_at));
        if (qk_norm || olmo2) addNorm(b, L.k_norm, kvd, norm, false, olmo2 ? 1 : kv);
        addSiblingMatmul(b, L.v, "v_proj", h, kvd, static_cast<int16_t>(model.ops.size() - q_at));
        }
        addRope(b, L.attn, qd + kvd);
        addAttentionCore(b, L.attn, shape);
        if (phi3) {
            addMatmul(b, L.o, "o_proj", qd, h, true);  // its own copy of the attention output
        } else {
            addAttnOutMatmul(b, L.o, "o_proj", qd, h);
        }
        if (gemma2 || olmo2) addNorm(b, L.post_attn_norm, h, norm);
        if (phi3) addDropout(b, L.resid_attn_drop, "dropout", static_cast<double>(h), resid_dropout);
        addResidual(b, L.layer, h);
        if (!olmo2) addNorm(b, gemma2 ? L.pre_ff_norm : L.post_attn_norm, h, norm);
        if (moe) {
            const double E = static_cast<double>(experts), k = static_cast<double>(top_k);
            addMatmul(b, L.router, "router", h, experts, true);
            // softmax(router_logits, fp32) saves E; topk indices; normalised top-k weights.
            Op& route = b.op(L.mlp.mlp, "routing", OpKind::Other);
            route.flops.per_token = kSoftmaxFlopsPerElem * E;
            route.saved_f32.per_token = E + k;
            route.saved_i64.per_token = k;
            route.io_act.per_token = E;
            // Uniform routing: each expert sees tokens * k / E. Each gathers its tokens (saved
            // as w1's input) and scales its output by the routing weight (saves both); index_add_
            // puts the product back into the layer's output and saves it too (IndexAddBackward0
            // keeps `source`, checked on torch 2.15; the tracker holds one [tokens * k / E, h] per
            // expert more than the two above).
            for (const GatedMlpModules& em : L.experts) {
                addGatedMlp(b, em, h, inter, k / E);
                Op& scale = b.op(em.mlp, "route_scale", OpKind::Elementwise);
                scale.flops.per_token = static_cast<double>(h) * k / E;
                scale.saved_act.per_token = (2 * static_cast<double>(h) + 1) * k / E;
                scale.io_act.per_token = 2 * static_cast<double>(h) * k / E;
            }
        } else if (phi3) {
            addFusedGatedMlp(b, L.mlp, h, inter);
        } else {
            addGatedMlp(b, L.mlp, h, inter);
        }
        if (phi3) addDropout(b, L.resid_mlp_drop, "dropout", static_cast<double>(h), resid_dropout);
        if (gemma2 || olmo2) addNorm(b, L.post_ff_norm, h, norm);
        addResidual(b, L.layer, h);
    }
    addNorm(b, final_norm, h, norm);
    addHeadAndLoss(b, head, h, vocab, final_softcap);
    // OLMo 2's q_norm and k_norm normalise across the heads tensor parallelism would shard: no plan.
    // Phi-3's fused qkv_proj and gate_up_proj have no plan either (torchtitan shards separate ones).
    if (!olmo2 && !phi3) applyLlamaTpPlan(model);
    return model;
}

// GPT-2 (GPT2LMHeadModel). Conv1D keeps weight as [in, out].

Result<Model> buildGpt2(const json& cfg, Model model) {
    ConfigReader r(cfg, model.source, "gpt2");
    const int64_t h = r.required("n_embd", limits::kMaxHidden);
    const int64_t layers = r.required("n_layer", limits::kMaxLayers);
    const int64_t heads = r.required("n_head", limits::kMaxHeads);
    const int64_t vocab = r.required("vocab_size", limits::kMaxVocab);
    const int64_t positions = r.optional("n_positions", 1024, limits::kMaxPositions);
    r.check(h % heads == 0, "field 'n_embd' (" + std::to_string(h) + ") must be divisible by 'n_head' (" +
                                std::to_string(heads) + ")");
    const int64_t inter = r.optional("n_inner", 4 * h, limits::kMaxIntermediate);
    const bool tied = r.flag("tie_word_embeddings", true);
    const double attn_p = r.probability("attn_pdrop", 0.1);
    const double resid_p = r.probability("resid_pdrop", 0.1);
    const double embd_p = r.probability("embd_pdrop", 0.1);
    const ActImpl act = readAct(r, "activation_function", "gelu_new");
    if (r.error()) return *r.error();

    model.arch = ModelArch{"gpt2", h, layers, heads, heads, h / heads, inter, vocab, 0, 0, tied};
    Builder b(model);
    const int32_t tr = b.module("transformer");
    const int32_t wte = b.module("transformer.wte");
    b.param(wte, "weight", {vocab, h});
    const int32_t wpe = b.module("transformer.wpe");
    b.param(wpe, "weight", {positions, h});
    const int32_t drop = b.module("transformer.drop");
    b.container("transformer.h");
    auto conv1d = [&](const std::string& fqn, int64_t in, int64_t out) {
        const int32_t m = b.module(fqn);
        b.param(m, "weight", {in, out});
        b.param(m, "bias", {out});
        return m;
    };
    auto layer_norm = [&](const std::string& fqn) {
        const int32_t m = b.module(fqn);
        b.param(m, "weight", {h});
        b.param(m, "bias", {h});
        return m;
    };
    struct LayerModules {
        int32_t layer, ln1, attn, c_attn, c_proj, attn_drop, resid_drop, ln2, fc, proj, act, mlp_drop;
    };
    std::vector<LayerModules> lm;
    for (int64_t i = 0; i < layers; ++i) {
        const std::string p = "transformer.h." + std::to_string(i);
        LayerModules L{};
        L.layer = b.block(p);
        L.ln1 = layer_norm(p + ".ln_1");
        L.attn = b.module(p + ".attn");
        // transformers 4.x's GPT2Attention registers a bool causal mask and a scalar (modeling_gpt2.py,
        // register_buffer "bias" and "masked_bias"); transformers 5 registers neither.
        b.buffer(L.attn, "bias", positions * positions, DType::U8, true);
        b.buffer(L.attn, "masked_bias", 1, DType::F32, true);
        L.c_attn = conv1d(p + ".attn.c_attn", h, 3 * h);
        L.c_proj = conv1d(p + ".attn.c_proj", h, h);
        L.attn_drop = b.module(p + ".attn.attn_dropout");
        L.resid_drop = b.module(p + ".attn.resid_dropout");
        L.ln2 = layer_norm(p + ".ln_2");
        b.module(p + ".mlp");
        L.fc = conv1d(p + ".mlp.c_fc", h, inter);
        L.proj = conv1d(p + ".mlp.c_proj", inter, h);
        L.act = b.module(p + ".mlp.act");
        L.mlp_drop = b.module(p + ".mlp.dropout");
        lm.push_back(L);
    }
    const int32_t ln_f = layer_norm("transformer.ln_f");
    const int32_t head = b.module("lm_head");
    if (!tied) b.param(head, "weight", {vocab, h});

    addEmbedding(b, wte, h, true);
    addEmbedding(b, wpe, h, false);  // position ids are shared across the batch
    addElementwise(b, tr, "add_positions", static_cast<double>(h), 1, 0, 3);
    addDropout(b, drop, "dropout", static_cast<double>(h), embd_p);
    // HF GPT-2 eager attention runs softmax in the activation dtype (Korthikanti's 2as^2b).
    AttnShape shape{heads, heads, h / heads, false, false, attn_p};
    for (const LayerModules& L : lm) {
        addNorm(b, L.ln1, h, NormImpl::LayerNorm);
        addMatmul(b, L.c_attn, "c_attn", h, 3 * h, true);
        addAttentionCore(b, L.attn, shape);
        (void)L.attn_drop;  // the attention-probability dropout runs inside attn.dropout
        addAttnOutMatmul(b, L.c_proj, "c_proj", h, h);
        addDropout(b, L.resid_drop, "dropout", static_cast<double>(h), resid_p);
        addResidual(b, L.layer, h);
        addNorm(b, L.ln2, h, NormImpl::LayerNorm);
        addMatmul(b, L.fc, "c_fc", h, inter, true);
        addActivation(b, L.act, inter, act);
        addMatmul(b, L.proj, "c_proj", inter, h, true);
        addDropout(b, L.mlp_drop, "dropout", static_cast<double>(h), resid_p);
        addResidual(b, L.layer, h);
    }
    addNorm(b, ln_f, h, NormImpl::LayerNorm);
    addHeadAndLoss(b, head, h, vocab, false);
    applyGpt2TpPlan(model);
    return model;
}

// GPT-NeoX (GPTNeoXForCausalLM, e.g. Pythia).

Result<Model> buildGptNeox(const json& cfg, Model model) {
    ConfigReader r(cfg, model.source, "gpt_neox");
    // Named locals, not a structured binding: lambdas below capture them (C++17 clang refuses a
    // captured binding).
    const CoreSizes sizes = readCoreSizes(r);
    const int64_t h = sizes.hidden, layers = sizes.layers, heads = sizes.heads, inter = sizes.intermediate,
                  vocab = sizes.vocab;
    r.check(h % heads == 0, "field 'hidden_size' (" + std::to_string(h) +
                                ") must be divisible by 'num_attention_heads' (" + std::to_string(heads) + ")");
    const double rotary_pct = r.fraction("rotary_pct", 0.25);
    const bool parallel = r.flag("use_parallel_residual", true);
    const bool tied = r.flag("tie_word_embeddings", false);
    const bool bias = r.flag("attention_bias", true);
    const double attn_p = r.probability("attention_dropout", 0.0);
    const double hidden_p = r.probability("hidden_dropout", 0.0);
    const ActImpl act = readAct(r, "hidden_act", "gelu");
    if (r.error()) return *r.error();

    const int64_t head_dim = h / heads;
    const auto rotary_ndims = static_cast<int64_t>(static_cast<double>(head_dim) * rotary_pct);
    model.arch = ModelArch{"gpt_neox", h, layers, heads, heads, head_dim, inter, vocab, 0, 0, tied};
    Builder b(model);
    b.module("gpt_neox");
    const int32_t embed = b.module("gpt_neox.embed_in");
    b.param(embed, "weight", {vocab, h});
    const int32_t emb_drop = b.module("gpt_neox.emb_dropout");
    b.container("gpt_neox.layers");
    auto layer_norm = [&](const std::string& fqn) {
        const int32_t m = b.module(fqn);
        b.param(m, "weight", {h});
        b.param(m, "bias", {h});
        return m;
    };
    struct LayerModules {
        int32_t layer, ln1, ln2, attn_drop, mlp_drop, attn, qkv, dense, fc, proj, act;
    };
    std::vector<LayerModules> lm;
    for (int64_t i = 0; i < layers; ++i) {
        const std::string p = "gpt_neox.layers." + std::to_string(i);
        LayerModules L{};
        L.layer = b.block(p);
        L.ln1 = layer_norm(p + ".input_layernorm");
        L.ln2 = layer_norm(p + ".post_attention_layernorm");
        L.attn_drop = b.module(p + ".post_attention_dropout");
        L.mlp_drop = b.module(p + ".post_mlp_dropout");
        L.attn = b.module(p + ".attention");
        L.qkv = b.linear(p + ".attention.query_key_value", h, 3 * h, bias);
        L.dense = b.linear(p + ".attention.dense", h, h, bias);
        b.module(p + ".mlp");
        L.fc = b.linear(p + ".mlp.dense_h_to_4h", h, inter, true);
        L.proj = b.linear(p + ".mlp.dense_4h_to_h", inter, h, true);
        L.act = b.module(p + ".mlp.act");
        lm.push_back(L);
    }
    const int32_t final_norm = layer_norm("gpt_neox.final_layer_norm");
    b.buffer(b.module("gpt_neox.rotary_emb"), "inv_freq", rotary_ndims / 2, DType::F32);
    const int32_t head = b.module("embed_out");
    if (!tied) b.param(head, "weight", {vocab, h});

    addEmbedding(b, embed, h, true);
    addDropout(b, emb_drop, "dropout", static_cast<double>(h), hidden_p);
    AttnShape shape{heads, heads, head_dim, true, false, attn_p};
    for (const LayerModules& L : lm) {
        addNorm(b, L.ln1, h, NormImpl::LayerNorm);
        addMatmul(b, L.qkv, "query_key_value", h, 3 * h, true);
        addRope(b, L.attn, 2 * heads * rotary_ndims);
        addAttentionCore(b, L.attn, shape);
        addAttnOutMatmul(b, L.dense, "dense", h, h);
        addDropout(b, L.attn_drop, "dropout", static_cast<double>(h), hidden_p);
        // Parallel residual: x + attn(ln1(x)) + mlp(ln2(x)); both norms read the same x.
        if (!parallel) addResidual(b, L.layer, h);
        addNorm(b, L.ln2, h, NormImpl::LayerNorm, parallel);
        addMatmul(b, L.fc, "dense_h_to_4h", h, inter, true);
        addActivation(b, L.act, inter, act);
        addMatmul(b, L.proj, "dense_4h_to_h", inter, h, true);
        addDropout(b, L.mlp_drop, "dropout", static_cast<double>(h), hidden_p);
        addResidual(b, L.layer, h);
    }
    addNorm(b, final_norm, h, NormImpl::LayerNorm);
    addHeadAndLoss(b, head, h, vocab, false);
    return model;
}

// Module-tree format helpers.

std::string where(const std::string& source, size_t index, const std::string& module) {
    return source + ": modules[" + std::to_string(index) + "] ('" + module + "')";
}

bool checkKeys(const json& obj, std::initializer_list<const char*> allowed, const std::string& ctx,
               std::optional<Error>& err) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (std::none_of(allowed.begin(), allowed.end(), [&](const char* k) { return it.key() == k; })) {
            std::string list;
            for (const char* k : allowed) list += (list.empty() ? "" : ", ") + std::string(k);
            err = makeError(ctx + ": unknown field '" + it.key() + "'; allowed: " + list);
            return false;
        }
    }
    return true;
}

// DeepSeek-V3 (DeepseekV3ForCausalLM, transformers' modeling_deepseek_v3.py; Kimi K2 shares it).
// Multi-head latent attention: q through a low-rank q_a_proj / q_a_layernorm / q_b_proj (or one
// q_proj without q_lora_rank), k and v from kv_a_proj_with_mqa's latent (kv_lora_rank, normed,
// expanded by kv_b_proj) plus one RoPE key head shared by every head; q and k heads of
// qk_nope + qk_rope, v heads of v_head_dim. The first first_k_dense_replace blocks have a dense
// MLP, the rest an MoE: a sigmoid router in fp32 over n_routed_experts, num_experts_per_tok of
// them per token, and n_shared_experts' MLP on every token.
Result<Model> buildDeepseekV3(const json& cfg, Model model) {
    ConfigReader r(cfg, model.source, "deepseek_v3");
    // Named locals, not a structured binding: lambdas below capture them (C++17 clang refuses a
    // captured binding).
    const CoreSizes sizes = readCoreSizes(r);
    const int64_t h = sizes.hidden, layers = sizes.layers, heads = sizes.heads, inter = sizes.intermediate,
                  vocab = sizes.vocab;
    const int64_t kv = r.optional("num_key_value_heads", heads, limits::kMaxHeads);
    // modeling_deepseek_v3.py repeats k and v by heads / kv, but kv_b_proj already makes every
    // head's: another count would not run.
    r.check(kv == heads, "field 'num_key_value_heads' (" + std::to_string(kv) + ") must equal 'num_attention_heads' (" +
                             std::to_string(heads) + "): multi-head latent attention makes every head's k and v");
    const int64_t moe_inter = r.required("moe_intermediate_size", limits::kMaxIntermediate);
    const int64_t experts = r.required("n_routed_experts", limits::kMaxExperts);
    const int64_t shared = r.nonNegative("n_shared_experts", limits::kMaxExperts);
    const int64_t top_k = r.required("num_experts_per_tok", limits::kMaxExperts);
    r.check(top_k <= experts, "field 'num_experts_per_tok' (" + std::to_string(top_k) +
                                  ") must not exceed 'n_routed_experts' (" + std::to_string(experts) + ")");
    // Blocks from first_k_dense_replace on are MoE (DeepseekV3DecoderLayer); past the last, none.
    const int64_t dense = std::min(layers, r.nonNegative("first_k_dense_replace", limits::kMaxLayers));
    const int64_t q_lora = r.nonNegative("q_lora_rank", limits::kMaxHidden);  // null or absent: one q_proj
    const int64_t kv_lora = r.required("kv_lora_rank", limits::kMaxHidden);
    const int64_t rope = r.required("qk_rope_head_dim", limits::kMaxHeadDim);
    const int64_t nope = r.required("qk_nope_head_dim", limits::kMaxHeadDim);
    const int64_t vdim = r.required("v_head_dim", limits::kMaxHeadDim);
    const bool tied = r.flag("tie_word_embeddings", false);
    const bool bias = r.flag("attention_bias", false);
    const double attn_dropout = r.probability("attention_dropout", 0.0);
    (void)readAct(r, "hidden_act", "silu");
    r.check((layers - dense) * experts <= limits::kMaxLayerExperts,
            "MoE layers x 'n_routed_experts' (" + std::to_string(layers - dense) + " x " + std::to_string(experts) +
                ") must be at most " + std::to_string(limits::kMaxLayerExperts) + " (the limit; see docs/limits.md)");
    if (r.error()) return *r.error();
    const int64_t qk = nope + rope;
    model.arch = ModelArch{"deepseek_v3", h, layers, heads, kv, qk, inter, vocab, experts, top_k, tied};

    Builder b(model);
    const int32_t embed = addEmbedTokens(b, vocab, h);
    struct LayerModules {
        int32_t layer, attn, q_a = -1, q_norm = -1, q_b, kv_a, kv_norm, kv_b, o, in_norm, post_norm;
        GatedMlpModules mlp{}, shared_mlp{};
        int32_t router = -1;
        std::vector<GatedMlpModules> experts;
    };
    std::vector<LayerModules> lm(static_cast<size_t>(layers));
    auto mlpModules = [&](const std::string& m, int64_t size) { return addGatedMlpModules(b, m, h, size, false); };
    for (int64_t i = 0; i < layers; ++i) {
        LayerModules& L = lm[static_cast<size_t>(i)];
        const std::string p = "model.layers." + std::to_string(i);
        L.layer = b.block(p);
        const std::string a = p + ".self_attn";
        L.attn = b.module(a);
        if (q_lora > 0) {
            L.q_a = b.linear(a + ".q_a_proj", h, q_lora, bias);
            L.q_norm = b.module(a + ".q_a_layernorm");
            b.param(L.q_norm, "weight", {q_lora});
            L.q_b = b.linear(a + ".q_b_proj", q_lora, heads * qk, false);
        } else {
            L.q_b = b.linear(a + ".q_proj", h, heads * qk, false);
        }
        L.kv_a = b.linear(a + ".kv_a_proj_with_mqa", h, kv_lora + rope, bias);
        L.kv_norm = b.module(a + ".kv_a_layernorm");
        b.param(L.kv_norm, "weight", {kv_lora});
        L.kv_b = b.linear(a + ".kv_b_proj", kv_lora, heads * (nope + vdim), false);
        L.o = b.linear(a + ".o_proj", heads * vdim, h, bias);
        if (i < dense) {
            L.mlp = mlpModules(p + ".mlp", inter);
        } else {
            L.mlp.mlp = b.module(p + ".mlp");
            b.container(p + ".mlp.experts");
            for (int64_t j = 0; j < experts; ++j) L.experts.push_back(mlpModules(p + ".mlp.experts." + std::to_string(j), moe_inter));
            L.router = b.module(p + ".mlp.gate");
            b.param(L.router, "weight", {experts, h});
            b.buffer(L.router, "e_score_correction_bias", experts, DType::F32);
            if (shared > 0) L.shared_mlp = mlpModules(p + ".mlp.shared_experts", moe_inter * shared);
        }
        L.in_norm = b.module(p + ".input_layernorm");
        b.param(L.in_norm, "weight", {h});
        L.post_norm = b.module(p + ".post_attention_layernorm");
        b.param(L.post_norm, "weight", {h});
    }
    const auto [final_norm, head] = addNormRotaryHead(b, h, vocab, tied, rope);

    // Forward ops.
    addEmbedding(b, embed, h, true);
    AttnShape shape{heads, kv, qk, true, false, attn_dropout};
    shape.qk_dim = qk;
    shape.v_dim = vdim;
    // v is a split view of kv_b_proj's [tokens, heads x (nope + v)] output: saving v keeps it all.
    shape.v_base = heads * (nope + vdim);
    const double E = static_cast<double>(experts), k = static_cast<double>(top_k);
    const double hd = static_cast<double>(h);
    for (const LayerModules& L : lm) {
        addNorm(b, L.in_norm, h, NormImpl::LlamaRms);
        const size_t q_at = model.ops.size();
        if (q_lora > 0) {
            addMatmul(b, L.q_a, "q_a_proj", h, q_lora, true);
            addNorm(b, L.q_norm, q_lora, NormImpl::LlamaRms);
            addMatmul(b, L.q_b, "q_b_proj", q_lora, heads * qk, true);
        } else {
            addMatmul(b, L.q_b, "q_proj", h, heads * qk, true);
        }
        // The latent and the RoPE key read the block's normed input, as q does: saved once.
        addSiblingMatmul(b, L.kv_a, "kv_a_proj_with_mqa", h, kv_lora + rope, static_cast<int16_t>(model.ops.size() - q_at));
        addNorm(b, L.kv_norm, kv_lora, NormImpl::LlamaRms);
        addMatmul(b, L.kv_b, "kv_b_proj", kv_lora, heads * (nope + vdim), true);
        // RoPE on every head's q_rot and on the one shared k_rot; q = cat(q_nope, q_rot) and
        // k = cat(k_nope, k_rot expanded to every head) are new tensors the kernel saves.
        addRope(b, L.attn, heads * rope + rope);
        addElementwise(b, L.attn, "qk.cat", static_cast<double>(2 * heads * qk), 0, 0);
        addAttentionCore(b, L.attn, shape);
        addAttnOutMatmul(b, L.o, "o_proj", heads * vdim, h);
        addResidual(b, L.layer, h);
        addNorm(b, L.post_norm, h, NormImpl::LlamaRms);
        if (L.router < 0) {
            addGatedMlp(b, L.mlp, h, inter);
        } else {
            // DeepseekV3TopkRouter: F.linear(x.float(), weight.float()) keeps both fp32 copies (the
            // weight's is E x h whatever the tokens), sigmoid its output; the top-k choice runs
            // under no_grad; gather keeps its index, the normalisation the weights.
            Op& router = addMatmul(b, L.router, "router", h, experts, false);
            router.saved_f32.per_token = hd + E;
            router.saved_f32.fixed = E * hd;
            Op& route = b.op(L.mlp.mlp, "routing", OpKind::Other);
            route.flops.per_token = kSoftmaxFlopsPerElem * E;
            route.saved_f32.per_token = k + 1;
            route.saved_i64.per_token = k;
            route.io_act.per_token = 2 * E;
            // DeepseekV3MoE.moe, uniform routing: each expert gathers tokens x k / E tokens, its MLP,
            // then output (bf16) x weight (fp32) is an fp32 product, which index_add_ puts into an
            // fp32 accumulator and keeps (IndexAddBackward0 saves `source`); the mul keeps both
            // operands; the gather and index_add_ keep the token indices, the weight lookup both.
            const double f = k / E;
            for (const GatedMlpModules& em : L.experts) {
                addGatedMlp(b, em, h, moe_inter, f);
                Op& scale = b.op(em.mlp, "route_scale", OpKind::Elementwise);
                scale.flops.per_token = hd * f;
                scale.saved_act.per_token = hd * f;
                scale.saved_f32.per_token = (hd + 1) * f;
                scale.saved_i64.per_token = 2 * f;
                scale.io_act.per_token = 4 * hd * f;
            }
            if (shared > 0) addGatedMlp(b, L.shared_mlp, h, moe_inter * shared);
        }
        addResidual(b, L.layer, h);
    }
    addNorm(b, final_norm, h, NormImpl::LlamaRms);
    addHeadAndLoss(b, head, h, vocab, false);
    return model;
}

}  // namespace


namespace {
// Whole-model limits: every per-tensor figure is already in range, so the sums are checked.
Status checkModelSize(const Model& model) {
    if (static_cast<int64_t>(model.modules.size()) > limits::kMaxModules) {
        return makeError(model.source + ": the model has " + std::to_string(model.modules.size()) +
                         " modules; at most " + std::to_string(limits::kMaxModules) + " (the limit; see docs/limits.md)");
    }
    int64_t total = 0;
    for (const Param& p : model.params) {
        int64_t numel = 1;
        for (int64_t d : p.shape) {
            auto product = checkedMul(numel, d);
            numel = product && *product <= limits::kMaxTensorNumel ? *product : limits::kMaxParams + 1;
            if (numel > limits::kMaxTensorNumel) break;
        }
        auto sum = checkedAdd(total, numel);
        total = sum ? *sum : limits::kMaxParams + 1;
        if (total > limits::kMaxParams) {
            return makeError(model.source + ": the model has more than " + std::to_string(limits::kMaxParams) +
                             " parameters (2^42, the limit; see docs/limits.md); tensor '" + textExcerpt(p.name) +
                             "' passes it");
        }
    }
    return Ok{};
}
}  // namespace

Result<Model> importHfConfig(const json& config, std::string name, std::string source) {
    if (source.empty()) source = name.empty() ? "<config>" : name;
    if (!config.is_object()) return makeError(source + ": expected a JSON object (a HuggingFace config.json)");
    if (!config.contains("model_type"))
        return makeError(source + ": field 'model_type' is missing; supported: " + kSupportedTypes);
    if (!config.at("model_type").is_string())
        return makeError(source + ": field 'model_type' must be a string; supported: " + kSupportedTypes);
    const std::string type = config.at("model_type").get<std::string>();

    Model model;
    model.name = std::move(name);
    model.source = source;
    model.arch.model_type = type;
    Result<Model> built = makeError(source + ": unknown model_type '" + type + "'; supported: " + kSupportedTypes);
    if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" || type == "gemma" || type == "gemma2" ||
        type == "mixtral" ||
        type == "olmo2" || type == "phi3") {
        built = buildLlamaFamily(config, std::move(model));
    } else if (type == "gpt2") {
        built = buildGpt2(config, std::move(model));
    } else if (type == "gpt_neox") {
        built = buildGptNeox(config, std::move(model));
    } else if (type == "deepseek_v3") {
        built = buildDeepseekV3(config, std::move(model));
    }
    if (built) {
        if (auto sized = checkModelSize(*built); !sized) return sized.error();
        built->assignCostClasses();
    }
    return built;
}

namespace {
Result<Model> buildModuleTree(const json& tree, std::string name, std::string source);
}  // namespace

Result<Model> importModuleTree(const json& tree, std::string name, std::string source) {
    Result<Model> built = buildModuleTree(tree, std::move(name), std::move(source));
    if (built) {
        if (auto sized = checkModelSize(*built); !sized) return sized.error();
        built->assignCostClasses();
    }
    return built;
}

namespace {

// Module trees give FLOPs, not shapes. A matmul op whose module owns a 2-D weight [rows, cols]
// with 2 * rows * cols FLOPs per token and a backward of 2x (dgrad + wgrad) runs as a Linear
// kernel over that weight; every other op stays a bandwidth-bound kernel carrying its FLOPs.
void deriveLinearKernels(Model& model) {
    std::vector<std::vector<size_t>> params_of(model.modules.size());
    for (size_t i = 0; i < model.params.size(); ++i) params_of[static_cast<size_t>(model.params[i].module)].push_back(i);
    for (Op& op : model.ops) {
        if (op.kind != OpKind::Matmul || op.bwd_flops_factor != 2 || op.flops.per_token_seq != 0) continue;
        for (size_t i : params_of[static_cast<size_t>(op.module)]) {
            const Param& prm = model.params[i];
            if (prm.shape.size() != 2) continue;
            if (2.0 * static_cast<double>(prm.shape[0]) * static_cast<double>(prm.shape[1]) != op.flops.per_token) continue;
            op.kernel = KernelShape::Linear;
            op.out_features = prm.shape[0];
            op.in_features = prm.shape[1];
            break;
        }
    }
}

Result<Model> buildModuleTree(const json& tree, std::string name, std::string source) {
    if (source.empty()) source = name.empty() ? "<module tree>" : name;
    std::optional<Error> err;
    if (!tree.is_object()) return makeError(source + ": expected a JSON object");
    if (!checkKeys(tree, {"format", "name", "modules"}, source, err)) return *err;
    if (!tree.contains("format") || tree.at("format") != "shardcast-module-tree/1")
        return makeError(source + ": field 'format' must be \"shardcast-module-tree/1\"");
    if (tree.contains("name")) {
        if (!tree.at("name").is_string() || tree.at("name").get<std::string>().empty())
            return makeError(source + ": field 'name' must be a non-empty string");
        name = tree.at("name").get<std::string>();
    }
    if (!tree.contains("modules") || !tree.at("modules").is_array() || tree.at("modules").empty())
        return makeError(source + ": field 'modules' must be a non-empty array of modules");
    if (static_cast<int64_t>(tree.at("modules").size()) > limits::kMaxModules)
        return makeError(source + ": field 'modules' lists " + std::to_string(tree.at("modules").size()) +
                         " modules; at most " + std::to_string(limits::kMaxModules) + " (the limit; see docs/limits.md)");

    Model model;
    model.name = std::move(name);
    model.source = source;
    Builder b(model);
    std::set<std::string> listed;
    std::set<std::string> param_names, buffer_names;

    const json& modules = tree.at("modules");
    for (size_t i = 0; i < modules.size(); ++i) {
        const json& jm = modules[i];
        const std::string at0 = source + ": modules[" + std::to_string(i) + "]";
        if (!jm.is_object()) return makeError(at0 + ": expected an object");
        if (!jm.contains("name") || !jm.at("name").is_string())
            return makeError(at0 + ": field 'name' is missing or not a string (the module's fully qualified name)");
        const std::string mname = jm.at("name").get<std::string>();
        if (auto named = limits::checkModuleName(mname, at0 + ": field 'name'"); !named) return named.error();
        const std::string at = where(source, i, mname);
        if (!checkKeys(jm, {"name", "container", "block", "params", "buffers", "ops"}, at, err)) return *err;
        if (!mname.empty() && (mname.front() == '.' || mname.back() == '.' || mname.find("..") != std::string::npos))
            return makeError(at + ": field 'name' must be a dotted module path like \"layers.0.fc1\"");
        if (!listed.insert(mname).second) return makeError(at + ": duplicate module name '" + mname + "'");
        const int32_t m = b.module(mname);

        auto boolField = [&](const char* key, bool& out) -> bool {
            if (!jm.contains(key)) return true;
            if (!jm.at(key).is_boolean()) {
                err = makeError(at + ": field '" + key + "' must be true or false");
                return false;
            }
            out = jm.at(key).get<bool>();
            return true;
        };
        bool is_container = false, is_block = false;
        if (!boolField("container", is_container) || !boolField("block", is_block)) return *err;
        if (is_container) b.container(mname);
        if (is_block) {
            if (mname.empty()) return makeError(at + ": the root module cannot be a block");
            b.block(mname);
        }

        if (jm.contains("params")) {
            if (!jm.at("params").is_array()) return makeError(at + ": field 'params' must be an array");
            for (size_t pi = 0; pi < jm.at("params").size(); ++pi) {
                const json& jp = jm.at("params")[pi];
                const std::string pat = at + ".params[" + std::to_string(pi) + "]";
                if (!jp.is_object()) return makeError(pat + ": expected an object");
                if (!checkKeys(jp, {"name", "shape", "dtype"}, pat, err)) return *err;
                if (!jp.contains("name") || !jp.at("name").is_string() || jp.at("name").get<std::string>().empty())
                    return makeError(pat + ": field 'name' must be a non-empty string");
                if (!jp.contains("shape") || !jp.at("shape").is_array())
                    return makeError(pat + ": field 'shape' must be an array of positive integers");
                if (static_cast<int64_t>(jp.at("shape").size()) > limits::kMaxTensorRank)
                    return makeError(pat + ": field 'shape' has at most " + std::to_string(limits::kMaxTensorRank) +
                                     " dimensions, got " + jsonExcerpt(jp.at("shape")));
                std::vector<int64_t> shape;
                int64_t numel = 1;
                for (const json& d : jp.at("shape")) {
                    // Non-negative literals parse as unsigned: compare before narrowing to int64.
                    const bool positive = d.is_number_unsigned() ? d.get<uint64_t>() > 0
                                                                 : d.is_number_integer() && d.get<int64_t>() > 0;
                    if (!positive)
                        return makeError(pat + ": field 'shape' must be an array of positive integers, got " +
                                         jsonExcerpt(jp.at("shape")));
                    const auto product = d.get<uint64_t>() > uint64_t(limits::kMaxTensorNumel)
                                             ? std::nullopt
                                             : checkedMul(numel, d.get<int64_t>());
                    if (!product || *product > limits::kMaxTensorNumel)
                        return makeError(pat + ": field 'shape' " + jsonExcerpt(jp.at("shape")) + " has more than " +
                                         std::to_string(limits::kMaxTensorNumel) +
                                         " elements (2^40, the limit; see docs/limits.md)");
                    numel = *product;
                    shape.push_back(d.get<int64_t>());
                }
                std::optional<DType> dtype;
                if (jp.contains("dtype")) {
                    if (jp.at("dtype").is_string()) dtype = parseDType(jp.at("dtype").get<std::string>());
                    if (!dtype)
                        return makeError(pat + ": field 'dtype' must be one of fp32, bf16, fp16, fp8, int64, uint8");
                }
                const std::string leaf = jp.at("name").get<std::string>();
                // --frozen matches parameter names with std::regex, which recurses per character.
                if (auto named = limits::checkModuleName(b.qualify(m, leaf), pat + ": field 'name'"); !named)
                    return named.error();
                if (!param_names.insert(b.qualify(m, leaf)).second)
                    return makeError(pat + ": duplicate parameter '" + b.qualify(m, leaf) + "'");
                b.param(m, leaf, std::move(shape), dtype);
            }
        }

        if (jm.contains("buffers")) {
            if (!jm.at("buffers").is_array()) return makeError(at + ": field 'buffers' must be an array");
            for (size_t bi = 0; bi < jm.at("buffers").size(); ++bi) {
                const json& jb = jm.at("buffers")[bi];
                const std::string bat = at + ".buffers[" + std::to_string(bi) + "]";
                if (!jb.is_object()) return makeError(bat + ": expected an object");
                if (!checkKeys(jb, {"name", "numel", "dtype"}, bat, err)) return *err;
                if (!jb.contains("name") || !jb.at("name").is_string() || jb.at("name").get<std::string>().empty())
                    return makeError(bat + ": field 'name' must be a non-empty string");
                if (!jb.contains("numel") || !jb.at("numel").is_number_unsigned() ||
                    jb.at("numel").get<uint64_t>() > uint64_t(limits::kMaxTensorNumel))
                    return makeError(bat + ": field 'numel' must be a non-negative integer at most " +
                                     std::to_string(limits::kMaxTensorNumel) + " (2^40, the limit; see docs/limits.md)");
                DType dtype = DType::F32;
                if (jb.contains("dtype")) {
                    std::optional<DType> d;
                    if (jb.at("dtype").is_string()) d = parseDType(jb.at("dtype").get<std::string>());
                    if (!d)
                        return makeError(bat + ": field 'dtype' must be one of fp32, bf16, fp16, fp8, int64, uint8");
                    dtype = *d;
                }
                const std::string leaf = jb.at("name").get<std::string>();
                if (auto named = limits::checkModuleName(b.qualify(m, leaf), bat + ": field 'name'"); !named)
                    return named.error();
                if (!buffer_names.insert(b.qualify(m, leaf)).second)
                    return makeError(bat + ": duplicate buffer '" + b.qualify(m, leaf) + "'");
                b.buffer(m, leaf, jb.at("numel").get<int64_t>(), dtype);
            }
        }

        if (jm.contains("ops")) {
            if (!jm.at("ops").is_array()) return makeError(at + ": field 'ops' must be an array");
            std::set<std::string> op_names;
            for (size_t oi = 0; oi < jm.at("ops").size(); ++oi) {
                const json& jo = jm.at("ops")[oi];
                const std::string oat = at + ".ops[" + std::to_string(oi) + "]";
                if (!jo.is_object()) return makeError(oat + ": expected an object");
                if (!checkKeys(jo,
                               {"name", "kind", "flops_per_token", "flops_per_token_seq", "bwd_flops_factor",
                                "saved_bytes_per_token", "saved_bytes_per_token_seq", "temp_bytes_per_token",
                                "selective_recompute"},
                               oat, err))
                    return *err;
                if (!jo.contains("name") || !jo.at("name").is_string() || jo.at("name").get<std::string>().empty())
                    return makeError(oat + ": field 'name' must be a non-empty string");
                const std::string oname = jo.at("name").get<std::string>();
                if (!op_names.insert(oname).second)
                    return makeError(oat + ": duplicate op name '" + oname + "' in this module");
                OpKind kind = OpKind::Other;
                if (jo.contains("kind")) {
                    bool found = false;
                    for (OpKind k : {OpKind::Matmul, OpKind::Attention, OpKind::Norm, OpKind::Elementwise,
                                     OpKind::Dropout, OpKind::Embedding, OpKind::Loss, OpKind::Other})
                        if (jo.at("kind").is_string() && jo.at("kind").get<std::string>() == opKindName(k)) {
                            kind = k;
                            found = true;
                        }
                    if (!found)
                        return makeError(oat + ": field 'kind' must be one of matmul, attention, norm, elementwise, "
                                               "dropout, embedding, loss, other");
                }
                auto number = [&](const char* key, bool required, double def, double max, double& out) -> bool {
                    if (!jo.contains(key)) {
                        if (required) {
                            err = makeError(oat + ": field '" + key + "' is missing (a non-negative number)");
                            return false;
                        }
                        out = def;
                        return true;
                    }
                    if (!jo.at(key).is_number() || !(jo.at(key).get<double>() >= 0 && jo.at(key).get<double>() <= max)) {
                        err = makeError(oat + ": field '" + key + "' must be a non-negative number at most " +
                                        fmt::format("{:g}", max) + " (the limit; see docs/limits.md), got " +
                                        jsonExcerpt(jo.at(key)));
                        return false;
                    }
                    out = jo.at(key).get<double>();
                    return true;
                };
                Op& o = b.op(m, oname, kind);
                double saved = 0, saved_seq = 0, temp = 0;
                using namespace limits;
                if (!number("flops_per_token", true, 0, kMaxOpFlopsPerToken, o.flops.per_token) ||
                    !number("flops_per_token_seq", false, 0, kMaxOpFlopsPerTokenSeq, o.flops.per_token_seq) ||
                    !number("bwd_flops_factor", false, kind == OpKind::Matmul ? 2.0 : 1.0, kMaxBwdFlopsFactor,
                            o.bwd_flops_factor) ||
                    !number("saved_bytes_per_token", true, 0, kMaxOpBytesPerToken, saved) ||
                    !number("saved_bytes_per_token_seq", false, 0, kMaxOpBytesPerTokenSeq, saved_seq) ||
                    !number("temp_bytes_per_token", false, 0, kMaxOpBytesPerToken, temp))
                    return *err;
                // Bytes are dtype independent: saved bytes are 1-byte elements, temp bytes fp32/4.
                o.saved_u8 = Coef{saved, saved_seq};
                o.temp_f32.per_token = temp / static_cast<double>(itemSize(DType::F32));
                if (jo.contains("selective_recompute")) {
                    if (!jo.at("selective_recompute").is_boolean())
                        return makeError(oat + ": field 'selective_recompute' must be true or false");
                    o.selective_recompute = jo.at("selective_recompute").get<bool>();
                }
            }
        }
    }
    deriveLinearKernels(model);
    return model;
}
}  // namespace

Result<json> readJsonFile(const std::filesystem::path& path) {
    auto text = readFileBounded(path, kMaxJsonFileBytes, "JSON input file");
    if (!text) return text.error();
    return parseJsonText(*text, path.string());
}

Result<Model> loadModelFile(const std::filesystem::path& path) {
    auto j = readJsonFile(path);
    if (!j) return j.error();
    if (!j->is_object()) return makeError(path.string() + ": expected a JSON object at the top level");
    std::string name = path.stem().string();
    if (j->contains("format")) return importModuleTree(*j, std::move(name), path.string());
    return importHfConfig(*j, std::move(name), path.string());
}

namespace {

// <folder of this process's executable>/SHARDCAST_MODELS_DIR_FROM_BIN (../share/shardcast/models
// by default) when that folder exists, as it does beside an installed binary wherever the prefix
// was copied or moved to; empty otherwise (a build tree, or no /proc).
std::filesystem::path installedModelsDir() {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    const std::filesystem::path dir = (exe.parent_path() / SHARDCAST_MODELS_DIR_FROM_BIN).lexically_normal();
    return std::filesystem::is_directory(dir, ec) ? dir : std::filesystem::path{};
}

}  // namespace

std::filesystem::path bundledModelsDir() {
    if (const char* env = std::getenv("SHARDCAST_MODELS_DIR"); env && *env) return env;
    if (std::filesystem::path installed = installedModelsDir(); !installed.empty()) return installed;
    return SHARDCAST_SOURCE_MODELS_DIR;
}

std::vector<std::string> bundledModelNames() {
    std::vector<std::string> names;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(bundledModelsDir(), ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".json") names.push_back(it->path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

Result<Model> resolveModel(std::string_view name_or_path) {
    const std::filesystem::path p{std::string(name_or_path)};
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return loadModelFile(p);
    const std::vector<std::string> names = bundledModelNames();
    if (std::find(names.begin(), names.end(), name_or_path) != names.end())
        return loadModelFile(bundledModelsDir() / (std::string(name_or_path) + ".json"));
    // A path that exists but is no regular file (a directory, /dev/zero) gets readJsonFile's refusal.
    if (std::filesystem::exists(p, ec)) return loadModelFile(p);
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return makeError("unknown model '" + std::string(name_or_path) +
                     "': not a file and not a bundled model; bundled (" + bundledModelsDir().string() +
                     "): " + (list.empty() ? "none" : list));
}

}  // namespace shardcast::core
