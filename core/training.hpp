#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/caching_allocator.hpp"
#include "core/units.hpp"

namespace shardcast::core {

enum class Optimizer : uint8_t { AdamW, Sgd, SgdMomentum };
enum class Checkpointing : uint8_t { None, Full, Selective };
enum class AttentionKernel : uint8_t { Flash, Eager };
enum class KernelImpl : uint8_t { Eager, Fused };
enum class Offload : uint8_t { None, Cpu };

std::string_view optimizerName(Optimizer o);         // "adamw", "sgd", "sgd-momentum"
std::optional<Optimizer> parseOptimizer(std::string_view s);
std::string_view checkpointingName(Checkpointing c); // "none", "full", "selective"
std::optional<Checkpointing> parseCheckpointing(std::string_view s);
// Activation checkpointing as written in plans and flags: "none", "selective", "full", or
// "full:K" = full checkpointing of every K-th block (torchtitan's selective *layer* AC with
// selective_ac_option K checkpoints blocks whose index is a multiple of K).
struct AcSpec {
    Checkpointing mode = Checkpointing::None;
    int every = 1;
};
std::optional<AcSpec> parseAcSpec(std::string_view s);
std::string acString(Checkpointing mode, int every);
std::string_view attentionName(AttentionKernel a);   // "flash", "eager"
std::optional<AttentionKernel> parseAttention(std::string_view s);
std::string_view kernelImplName(KernelImpl k);       // "eager", "fused"
std::optional<KernelImpl> parseKernelImpl(std::string_view s);
std::string_view offloadName(Offload o);             // "none", "cpu"
std::optional<Offload> parseOffload(std::string_view s);

// Optimizer states per trainable element, in the master dtype (AdamW: exp_avg + exp_avg_sq).
int optimizerStatesPerParam(Optimizer o);

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
    int ac_every = 1;           // Full: checkpoint blocks whose index is a multiple of this
    AttentionKernel attention = AttentionKernel::Flash;
    KernelImpl kernels = KernelImpl::Eager;
    Offload offload = Offload::None;
    AllocatorMode allocator = AllocatorMode::Caching;  // PYTORCH_CUDA_ALLOC_CONF expandable_segments
    std::string frozen_regex;   // parameters whose FQN matches (std::regex_search) are frozen

    DType computeDtype() const { return param_dtype.value_or(master_dtype); }
    DType reduceDtype() const { return reduce_dtype.value_or(computeDtype()); }
    int64_t tokens() const { return micro_batch * seq_len; }
};

}  // namespace shardcast::core
