#pragma once
// The model as FSDP sees it: a module tree with parameters (PyTorch fully qualified names and
// shapes), registered buffers, and the forward ops in execution order with their costs.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/units.hpp"

namespace shardcast::core {

// A quantity that scales with the micro-batch: value = fixed + tokens * (per_token + per_token_seq * seq),
// tokens = micro_batch * seq_len. The per_token_seq term carries attention's s^2 parts; `fixed`
// what an op makes once per micro-batch whatever its tokens (DeepSeek-V3's router saves an fp32
// copy of its weight).
struct Coef {
    double per_token = 0;
    double per_token_seq = 0;
    double fixed = 0;
    double at(int64_t tokens, int64_t seq) const {
        return fixed + static_cast<double>(tokens) * (per_token + per_token_seq * static_cast<double>(seq));
    }
    bool zero() const { return per_token == 0 && per_token_seq == 0 && fixed == 0; }
};

struct Param {
    std::string name;            // "model.layers.0.self_attn.q_proj.weight"
    std::vector<int64_t> shape;  // as stored (GPT-2's Conv1D keeps [in, out]); dim 0 is sharded
    int32_t module = 0;          // owning module (index into Model::modules)
    std::optional<DType> dtype;  // unset: the training's master dtype
    // Tensor parallelism (Model::tp_plan): the dim the TP plan shards (the output features of a
    // ColwiseParallel weight and bias, an embedding's rows, the input features of a RowwiseParallel
    // weight: 0 or 1 as the weight is stored, [out, in] or Conv1D's [in, out]); -1 replicated.
    int8_t tp_dim = -1;
    bool lora = false;  // a LoRA adapter (core/model/model_lora.hpp): trainable while the rest is frozen
    int64_t numel() const;
    int64_t dim0() const { return shape.empty() ? 1 : shape[0]; }
    int64_t rowNumel() const;  // numel / dim0
};

struct BufferSpec {
    std::string name;  // "model.rotary_emb.inv_freq"
    int64_t numel = 0;
    DType dtype = DType::F32;
    int32_t module = 0;
    // Registered by transformers 4.x's modeling code only (TrainingSpec::hf_mask 4.5x): GPT-2's
    // per-layer causal mask `attn.bias` and `attn.masked_bias`, which transformers 5 no longer has.
    bool transformers4_only = false;
};

struct Module {
    std::string name;         // fully qualified; "" is the root module
    int32_t parent = -1;      // -1 for the root
    bool is_container = false;  // nn.ModuleList / ModuleDict: never wrapped by a size policy
    bool is_block = false;      // a transformer block: unit for wrap=block|every:K, checkpointed by AC
};

enum class OpKind : uint8_t { Matmul, Attention, Norm, Elementwise, Dropout, Embedding, Loss, Other };

// How a tensor-parallel plan (torchtitan's Llama plan, models/llama3/infra/parallelize.py
// apply_tp; Megatron-LM's for GPT-2) splits an op over the tp ranks. The importer sets it for
// architectures with a plan.
//  Sequence  on the residual stream (norms, residual adds): its tokens are sharded under
//            sequence parallelism (SequenceParallel, Shard(1)) and replicated without it
//  Heads     between a colwise and a rowwise linear (RoPE, attention core, the MLP activation):
//            on head- or feature-sharded tensors, so every per-token figure divides by tp
//  Colwise   ColwiseParallel linear: output features sharded; its input is all-gathered over
//            the sequence under SP (the saved input is the whole [tokens, in]) or replicated
//  Rowwise   RowwiseParallel linear: input features sharded; its partial output is
//            reduce-scattered to the sequence shards under SP, all-reduced without
//  Vocab     an embedding over a shard of its rows (RowwiseParallel on nn.Embedding: the token
//            table's vocabulary, GPT-2's position table): its partial output is reduce-scattered
//            (SP) or all-reduced
//  Loss      cross-entropy over the logits: vocab-sharded under loss_parallel, else over the
//            all-gathered logits
enum class TpRole : uint8_t { Replicated, Sequence, Heads, Colwise, Rowwise, Vocab, Loss };

std::string_view opKindName(OpKind k);

// Implementation choices an op exists under (bit masks).
namespace variant {
constexpr uint8_t kFlash = 1;         // attention: fused flash / SDPA kernel
constexpr uint8_t kEagerAttn = 2;     // attention: eager matmul + softmax (materialises s^2 scores)
constexpr uint8_t kAnyAttn = kFlash | kEagerAttn;
constexpr uint8_t kEagerKernels = 1;  // HuggingFace eager modules (fp32 RMSNorm copy, unfused loss)
constexpr uint8_t kFusedKernels = 2;  // fused kernels (fused RMSNorm, SwiGLU, linear+cross-entropy)
constexpr uint8_t kAnyKernels = kEagerKernels | kFusedKernels;
}  // namespace variant

// The kernels an op runs, which the lowering turns into OpShapes of real sizes (program.hpp).
enum class KernelShape : uint8_t {
    Elementwise,     // bandwidth-bound: moves io_act elements and does `flops`
    Linear,          // y = x W^T: a GEMM of [tokens * token_share, in_features] x [in_features, out_features]
    FlashAttention,  // a fused attention kernel over heads, kv_heads and head_dim
    AttnScores,      // eager Q K^T: batch x heads GEMMs of [seq, head_dim] x [head_dim, seq]
    AttnValues,      // eager P V: batch x heads GEMMs of [seq, seq] x [seq, head_dim]
};

// One forward op. Element counts are per token (see Coef); the activation dtype is the
// training's param_dtype (the compute dtype under mixed precision).
struct Op {
    std::string name;   // short, e.g. "q_proj", "attn.core", "loss"
    int32_t module = 0; // module that runs it; its FQN decides which FSDP unit the op belongs to
    OpKind kind = OpKind::Other;
    uint8_t attention_variants = variant::kAnyAttn;
    uint8_t kernel_variants = variant::kAnyKernels;
    Coef flops;         // forward FLOPs (2*m*n*k for a matmul; attention counted without causal halving)
    double bwd_flops_factor = 1.0;  // backward FLOPs / forward FLOPs (2 for a matmul with weights)
    bool causal = false;            // attention: a causal kernel does about half the s^2 work
    // Saved for backward, freed when this op's backward runs.
    Coef saved_act;     // elements in the activation dtype
    Coef saved_f32;     // fp32 elements
    Coef saved_u8;      // 1-byte elements (dropout masks; custom models give bytes here)
    Coef saved_i64;     // int64 elements (indices)
    // Saved in addition, in the activation dtype, when transformers 4.5x gives SDPA a
    // materialised mask (TrainingSpec::hf_mask): the converted mask, and saved_act_repeat_kv.
    Coef saved_act_hf_mask;
    // K and V repeated to all heads before SDPA (repeat_kv copies, which SDPA saves): transformers
    // 4.5x with a mask, and torchtitan's Llama always.
    Coef saved_act_repeat_kv;
    // What autograd saves depends on what requires grad (core/lower: rule G1, used once any
    // parameter is frozen, as under LoRA). An op saves only when it has a grad_fn (an input or a
    // weight requires grad), and these parts of saved_act / saved_f32 only for its own weights'
    // gradient: a linear's input (mm saves `self` for the weight's gradient only), eager Llama
    // RMSNorm's `weight * x` operand, Gemma's fp32 `x_normed`.
    Coef wgrad_saved_act, wgrad_saved_f32;
    // The op reads the input tensor of the op this many places before it (k and v after q, up
    // after gate, a LoRA adapter after its base layer): that tensor is saved once, by whichever
    // of them first needs it, and not in saved_act here (wgrad_saved_act gives its size).
    int16_t same_input_back = 0;
    // Attention variants under which the op's input is kept by the op before it whatever this op
    // needs: o_proj's input is the flash kernel's saved output (variant::kFlash).
    uint8_t input_kept_under = 0;
    // Transient while the forward op runs (outputs consumed by the next op, workspaces).
    Coef temp_act, temp_f32;
    // Transient while the backward op runs (gradients of outputs and inputs).
    Coef bwd_temp_act, bwd_temp_f32;
    // Of bwd_temp_act.per_token, the residual stream's [tokens, hidden] share: an op that tensor
    // parallelism splits by heads still holds it whole without sequence parallelism (tpLocalOp).
    double bwd_temp_residual = 0;
    // How many equal fp32 tensors temp_f32 and bwd_temp_f32 stand for: PyTorch's caching
    // allocator places each tensor on its own, so two 1 GiB temporaries fit two cached 1 GiB
    // blocks where one 2 GiB block would not.
    int16_t temp_f32_tensors = 1, bwd_temp_f32_tensors = 1;
    // Memory-bound work of an Elementwise kernel op, in activation-dtype elements read + written
    // (an fp32 element counts 2 for bf16 activations), over all the kernels eager PyTorch launches
    // for it: forward (io_act, fwd_kernels) and backward (io_bwd_act, bwd_kernels; unset: twice the
    // forward's bytes in one kernel).
    Coef io_act;
    Coef io_bwd_act;
    // An op with one variant but several eager kernels (RoPE): its bytes as one fused kernel
    // (kernels fused or compile), forward and backward alike; unset: io_act and io_bwd_act.
    Coef io_fused_act;
    int16_t fwd_kernels = 1;
    int16_t bwd_kernels = 1;
    bool selective_recompute = false;  // dropped and recomputed under selective AC (attention core)
    int32_t cost_class = -1;  // ops with identical costs share a class (Model::assignCostClasses); -1: unique
    TpRole tp = TpRole::Replicated;  // Model::tp_plan: how tensor parallelism splits it
    // Kernel shapes. Linear: flops = 2 * in_features * out_features * token_share per token and
    // bwd_flops_factor 2 (dgrad + wgrad); attention kernels: flops per token per position =
    // 4 (flash) or 2 (scores, values) * heads * head_dim, bwd_flops_factor 2.
    KernelShape kernel = KernelShape::Elementwise;
    int64_t in_features = 0, out_features = 0;  // Linear: the weight is [out_features, in_features]
    double token_share = 1;                     // Linear: share of the tokens it sees (an MoE expert: k/E)
    // The output is one sequence's, broadcast over the micro-batch (GPT-2's position embedding of
    // position ids [1, seq]): its tensor-parallel collectives move [seq, ...], not [tokens, ...].
    bool batch_shared = false;
    int32_t heads = 0, kv_heads = 0, head_dim = 0;  // attention kernels

    bool existsUnder(uint8_t attention_bit, uint8_t kernel_bit) const {
        return (attention_variants & attention_bit) && (kernel_variants & kernel_bit);
    }
};

// A linear layer y = x W^T over `share` of the tokens: 2 * in * out FLOPs per token, backward dgrad
// + wgrad, its input saved for the weight's gradient (wgrad_saved_act; saved_act only when
// `saves_input`, false for a linear reading an input another op saves).
Op linearOp(std::string name, int32_t module, int64_t in, int64_t out, bool saves_input, double share = 1);

// Architecture facts of an imported HuggingFace model (zero for custom module trees).
struct ModelArch {
    std::string model_type;
    int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
    int64_t vocab = 0, experts = 0, experts_per_token = 0;
    bool tied_embeddings = false;
};

struct Model {
    std::string name;    // "llama-3.1-8b"
    std::string source;  // file it was read from
    ModelArch arch;
    std::vector<Module> modules;    // modules[0] is the root ""; parents precede children
    std::vector<Param> params;      // named_parameters() order, tied weights once
    std::vector<BufferSpec> buffers;
    std::vector<Op> ops;            // forward execution order
    std::vector<int32_t> blocks;    // indices of block modules, in forward order
    // The tensor-parallel plan Op::tp and Param::tp_dim follow ("torchtitan-llama",
    // "megatron-gpt2"); empty: the model has none and refuses tp > 1.
    std::string tp_plan;

    int64_t numParams() const;
    int32_t findModule(std::string_view fqn) const;  // -1 if absent
    // Is module `m` equal to or nested inside module `ancestor`?
    bool isWithin(int32_t m, int32_t ancestor) const;
    // Numbers ops whose costs (kind, variants, every Coef and flag) are identical, so the
    // lowering computes the costs of a repeated block once. The importers call it.
    void assignCostClasses();
    // Parameters of the modules that run an Embedding op (token and position embeddings).
    int64_t numEmbeddingParams() const;
    // Model FLOPs per token by torchtitan's MFU convention: 6 * (N - N_embedding) + 12 * L * h * s
    // (PaLM appendix B; torchtitan's get_num_flop_per_token / get_dense_model_nparams_and_flops).
    double modelFlopsPerToken(int64_t seq_len) const;
};

// Per module: the index of the first Linear-kernel op it runs, -1 when it runs none.
std::vector<int32_t> linearOpOfModule(const Model& m);

// Per parameter: 1 when it is the weight of a layer torchao's float8 training converts to
// Float8Linear as torchtitan applies it (Float8LinearConverter: every nn.Linear but the output
// layer, here the op named "lm_head", whose in and out features are multiples of 16, as
// _scaled_mm needs).
std::vector<uint8_t> float8Weights(const Model& m);
// Those weights counted, and their elements (for reports).
struct Float8Summary {
    int64_t weights = 0, params = 0;
};
Float8Summary float8Summary(const Model& m);

// What one pipeline stage holds of `m`, as torchtitan's pipeline split builds it (a copy of the
// model with the other stages' modules deleted): blocks [block_begin, block_end) of Model::blocks;
// the modules outside the blocks that run before them (the embedding) on the first stage only,
// those that run after them (the final norm, the output, the loss) on the last only. Modules
// without parameters that run before the blocks (rotary embeddings, the mask) and buffers outside
// the blocks stay on every stage. Module, op, parameter and buffer order is kept; indices are
// renumbered.
Model pipelineStageModel(const Model& m, int32_t block_begin, int32_t block_end, bool first, bool last);

}  // namespace shardcast::core
