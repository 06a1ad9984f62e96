#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/result.hpp"
#include "core/base/units.hpp"
#include "core/memory/caching_allocator.hpp"

namespace shardcast::core {

// AdamW: torch.optim.AdamW's foreach implementation (PyTorch's default on a GPU: a dozen passes);
// AdamWFused: AdamW(fused=True), one kernel pass (torchtitan's default, HF Trainer's adamw_torch_fused).
enum class Optimizer : uint8_t { AdamW, Sgd, SgdMomentum, AdamWFused };
// Activation checkpointing as users name it:
//  None     nothing recomputed.
//  Full     every block under checkpoint_wrapper: a block keeps only its input.
//  Layer    torchtitan's selective *layer* AC (selective_ac_option K): every K-th block fully
//           checkpointed, the others keep everything.
//  Op       torchtitan's selective *op* AC: every block checkpointed, but the outputs of the ops
//           in its save list (mm, except every second one; SDPA) are kept and not recomputed.
//  AttnCore Megatron's selective recompute (Korthikanti et al. 2022): only the s^2 attention core
//           is dropped and recomputed; with a flash kernel there is nothing s^2 to drop.
//  Blocks   a mode per block (none, op or full), given as runs in block order
//           (TrainingSpec::ac_blocks). Megatron's --recompute-granularity full --recompute-method
//           block --recompute-num-layers N recomputes the first N layers of each pipeline stage
//           and no others (megatron/core/transformer/transformer_config.py recompute_method; NeMo's
//           docs/source/features/optimizations/activation_recomputation.rst): without pipeline
//           stages, blocks:full*N,none*(L-N).
enum class Checkpointing : uint8_t { None, Full, Layer, Op, AttnCore, Blocks };
enum class AttentionKernel : uint8_t { Flash, Eager };
// Eager: each PyTorch op its own kernel(s). Fused: hand-fused kernels (fused RMSNorm, SwiGLU,
// linear + cross-entropy). Compile: torch.compile, which also keeps what the fused kernels keep and
// fuses each chain of elementwise ops between two matmuls into one kernel.
enum class KernelImpl : uint8_t { Eager, Fused, Compile };
// The modeling code: HuggingFace transformers' modules, or torchtitan's own Llama
// (torchtitan/models/llama3/model/model.py): nn.RMSNorm (PyTorch's fused CUDA rms_norm: saves
// its input and one rstd per row), repeat_kv copies of K and V to all heads before SDPA.
enum class ModelImpl : uint8_t { Hf, Torchtitan };
enum class Offload : uint8_t { None, Cpu };
// How HuggingFace transformers hands SDPA the causal mask of an unpacked training batch.
// V5: transformers 5.x returns no mask (is_causal, native GQA). V4: transformers 4.5x treats
// any position_ids as possibly packed, materialises a [b, 1, s, s] mask that SDPA converts to
// the activation dtype and saves in every layer, and repeats K and V to all heads (repeat_kv).
enum class HfMask : uint8_t { V5, V4 };
// What FSDP2 all-gathers: the parameters in param_dtype, or (torchao float8 training with
// enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp, as torchtitan's
// [float8] sets them) the weights of the Float8Linear layers in float8 e4m3 with a precomputed
// per-tensor scale; those layers then run their GEMMs in fp8 (torchao's tensorwise recipe).
enum class AllGatherDtype : uint8_t { Param, Fp8 };

std::string_view optimizerName(Optimizer o);         // "adamw", "sgd", "sgd-momentum"
std::optional<Optimizer> parseOptimizer(std::string_view s);
std::string_view checkpointingName(Checkpointing c); // "none", "full", "layer", "op", "attn-core"
// Activation checkpointing as written in plans and flags: "none", "full", "layer:K", "op",
// "attn-core". "full:K" is accepted as an alias of "layer:K", and "layer:1" / "full:1" mean
// "full". "selective" is refused: torchtitan users mean layer:K or op by it, Megatron users
// attn-core.
// "blocks:MODE*N,MODE*N,..." (MODE none, op or full) gives a mode per block in block order; the
// counts must sum to the model's block count, which the parse does not know: resolveAcBlocks
// checks it where the model is known. Adjacent runs of one mode are merged.
struct AcRun {
    Checkpointing mode = Checkpointing::None;  // None, Op or Full
    int64_t blocks = 0;
    bool operator==(const AcRun&) const = default;
};
struct AcSpec {
    AcSpec() = default;
    AcSpec(Checkpointing m, int k, std::vector<AcRun> r = {}) : mode(m), every(k), runs(std::move(r)) {}
    Checkpointing mode = Checkpointing::None;
    int every = 1;  // Layer: K
    std::vector<AcRun> runs;  // Blocks: the runs, at least two modes once resolved
    bool operator==(const AcSpec&) const = default;
};
std::optional<AcSpec> parseAcSpec(std::string_view s);
// Why `s` is not a checkpointing mode, with the valid spellings (for a flag or plan field error).
std::string acSpecError(std::string_view s);
// The valid spellings, for help texts.
inline constexpr std::string_view kAcChoices =
    "none | full | layer:K (every K-th block; full:K is an alias) | op (torchtitan per-op SAC) | "
    "attn-core (Megatron attention-core recompute) | blocks:MODE*N,... (a mode per block in block "
    "order, MODE none, op or full, the counts summing to the block count)";
// Whole-model modes only (Blocks needs its runs: use the AcSpec overloads).
std::string acString(Checkpointing mode, int every);
std::string acString(const AcSpec& ac);  // as parseAcSpec reads it: "layer:2", "blocks:full*8,none*24"
// The mode in words, for reports ("torchtitan selective layer AC (option 2): one block in 2 ...",
// "per block: full on blocks 0-7, none on 8-31").
std::string acDescription(Checkpointing mode, int every, bool flash_attention);
std::string acDescription(const AcSpec& ac, bool flash_attention);
// Layer mode: torchtitan's _apply_layer_sac counts blocks from 1 and wraps those where the count
// is a multiple of K, i.e. block indices K-1, 2K-1, ... (0-based).
inline bool layerAcCheckpoints(int64_t block_index, int every) { return (block_index + 1) % every == 0; }
std::string_view attentionName(AttentionKernel a);   // "flash", "eager"
std::optional<AttentionKernel> parseAttention(std::string_view s);
std::string_view kernelImplName(KernelImpl k);       // "eager", "fused", "compile"
std::string_view modelImplName(ModelImpl m);         // "hf", "torchtitan"
std::optional<ModelImpl> parseModelImpl(std::string_view s);
std::optional<KernelImpl> parseKernelImpl(std::string_view s);
std::string_view offloadName(Offload o);             // "none", "cpu"
std::optional<Offload> parseOffload(std::string_view s);
std::string_view hfMaskName(HfMask m);                // "5.x", "4.5x"
std::optional<HfMask> parseHfMask(std::string_view s);
std::string_view allGatherDtypeName(AllGatherDtype d);  // "param", "fp8"
std::optional<AllGatherDtype> parseAllGatherDtype(std::string_view s);

// Optimizer states per trainable element, in the master dtype (AdamW: exp_avg + exp_avg_sq).
int optimizerStatesPerParam(Optimizer o);

// Saving training checkpoints (issue 26; simulator/checkpoint.hpp): FSDP's FULL_STATE_DICT (the
// whole model and optimizer state gathered, rank 0 writes it) or a sharded save through
// torch.distributed.checkpoint (every rank writes its own shards).
enum class CheckpointMode : uint8_t { None, Full, Sharded };
std::string_view checkpointModeName(CheckpointMode m);  // "none", "full", "sharded"
std::optional<CheckpointMode> parseCheckpointMode(std::string_view s);
// torchtitan's default checkpoint interval ([checkpoint] interval = 500 steps,
// torchtitan/config/job_config.py).
inline constexpr int64_t kDefaultCheckpointEverySteps = 500;
struct CheckpointSpec {
    CheckpointMode mode = CheckpointMode::None;
    int64_t every_steps = kDefaultCheckpointEverySteps;  // optimizer steps between saves (>= 1)
    // Full saves, as FSDP's FullStateDictConfig (and FSDP2's StateDictOptions) offer them:
    // offload_to_cpu moves each gathered tensor to the host at once (cpu_offload); rank0_only keeps
    // the gathered state on rank 0 alone.
    bool offload_to_cpu = false;
    bool rank0_only = false;
    bool operator==(const CheckpointSpec&) const = default;
};

// LoRA fine-tuning (core/model/model_lora.hpp): rank-`rank` adapters on the `targets` linear
// modules (PEFT's target_modules; empty: the attention projections), every other parameter frozen.
struct LoraSpec {
    int rank = 0;  // 0: no LoRA
    std::vector<std::string> targets;
    bool enabled() const { return rank > 0; }
    bool operator==(const LoraSpec&) const = default;
};
inline constexpr int kMaxLoraRank = 65536;
// "RANK" or "RANK:MODULE,MODULE" (`--lora`); errors start with `where`.
Result<LoraSpec> parseLora(std::string_view text, std::string_view where);
// The spelling parseLora reads: "16" or "16:q_proj,v_proj".
std::string loraString(const LoraSpec& lora);

struct TrainingSpec {
    int64_t micro_batch = 1;
    int64_t seq_len = 4096;
    int64_t grad_accum = 1;     // micro-batches per optimizer step
    bool no_sync = false;       // reduce gradients only on the last micro-batch
    Optimizer optimizer = Optimizer::AdamW;
    DType master_dtype = DType::F32;        // dtype of the sharded parameters, grads and optimizer state
    std::optional<DType> param_dtype = DType::BF16;   // MixedPrecisionPolicy.param_dtype; unset: master
    std::optional<DType> reduce_dtype = DType::F32;   // MixedPrecisionPolicy.reduce_dtype; unset: param dtype
    Checkpointing ac = Checkpointing::None;
    int ac_every = 1;           // Layer: checkpoint every ac_every-th block (layerAcCheckpoints)
    std::vector<AcRun> ac_blocks;  // Blocks: the runs (AcSpec::runs); empty otherwise
    AttentionKernel attention = AttentionKernel::Flash;
    KernelImpl kernels = KernelImpl::Eager;
    ModelImpl impl = ModelImpl::Hf;
    Offload offload = Offload::None;
    AllocatorMode allocator = AllocatorMode::Caching;  // PYTORCH_CUDA_ALLOC_CONF expandable_segments
    // The current transformers release (5.x) by default; 4.5x for runs pinned to transformers 4.
    HfMask hf_mask = HfMask::V5;
    std::string frozen_regex;   // parameters whose FQN matches (std::regex_search) are frozen
    LoraSpec lora;              // LoRA adapters (the model gains them; the rest is frozen)
    AllGatherDtype all_gather_dtype = AllGatherDtype::Param;
    // torch.nn.utils.clip_grad_norm_(params, max_norm) before each optimizer step (torchtitan always,
    // default 1.0; HF Trainer's max_grad_norm, default 1.0); 0: no clipping.
    double clip_grad_norm = 0;

    DType computeDtype() const { return param_dtype.value_or(master_dtype); }
    DType reduceDtype() const { return reduce_dtype.value_or(computeDtype()); }
    int64_t tokens() const { return micro_batch * seq_len; }
};

// A list flag split at its commas ("--ac none,blocks:full*8,none*24"): each piece MODE*N is
// rejoined to the blocks: spec before it.
std::vector<std::string> joinAcListItems(const std::vector<std::string>& items);

// The checkpointing of a TrainingSpec as one value, and back.
inline AcSpec acSpecOf(const TrainingSpec& t) { return AcSpec{t.ac, t.ac_every, t.ac_blocks}; }
inline void applyAc(TrainingSpec& t, const AcSpec& ac) {
    t.ac = ac.mode;
    t.ac_every = ac.every;
    t.ac_blocks = ac.mode == Checkpointing::Blocks ? ac.runs : std::vector<AcRun>{};
}
// Blocks: checks that the runs cover exactly `block_count` blocks (the error names `field`, the
// total and the block count) and turns a spec of one mode into that whole-model mode. Other
// modes: unchanged.
std::optional<std::string> resolveAcBlocks(AcSpec& ac, int64_t block_count, std::string_view field);
// The mode of block `block_index` (0-based) under Blocks: None, Op or Full (a resolved spec).
Checkpointing blockAcMode(const std::vector<AcRun>& runs, int64_t block_index);
// The mode block `block_index` runs in under `t`'s checkpointing: its run's (Blocks), Full or None
// (Layer: layerAcCheckpoints), else the whole-model mode. The lowering and the generated PyTorch code
// both read it.
Checkpointing blockCheckpointing(const TrainingSpec& t, int64_t block_index);

}  // namespace shardcast::core
