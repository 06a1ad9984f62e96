#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardcast::core {

enum class Strategy : uint8_t { NoShard, ShardGradOp, FullShard, HybridShard, HybridShardZero2 };
std::string_view strategyName(Strategy s);  // "NO_SHARD", "SHARD_GRAD_OP", ..., "_HYBRID_SHARD_ZERO2"
// Case-insensitive; aliases ddp, zero2, zero3, hsdp (and hsdp-zero2).
std::optional<Strategy> parseStrategy(std::string_view s);
inline bool isHybrid(Strategy s) { return s == Strategy::HybridShard || s == Strategy::HybridShardZero2; }

enum class WrapKind : uint8_t { Whole, Block, EveryK, MinParams, Modules };

struct WrapPolicy {
    WrapKind kind = WrapKind::Block;
    int64_t k = 1;                     // EveryK: blocks per unit
    int64_t min_params = 0;            // MinParams: like size_based_auto_wrap_policy(min_num_params)
    std::vector<std::string> modules;  // Modules: FQNs; "a+b" groups several modules into one unit
    std::string modules_file;          // where `modules` came from (for messages and write-back)
};
// Text form: see parseWrapPolicy in plan.hpp; modules:FILE lists one FQN per line, # comments.


std::string wrapPolicyString(const WrapPolicy& w);

enum class ReshardMode : uint8_t { Default, True, False, Count };

// torch.distributed.pipelining's schedules (torchtitan's pipeline_parallel_schedule names):
// ScheduleGPipe (every forward, then every backward), Schedule1F1B (warm-up forwards, then one
// backward and one forward alternately, torchtitan's default) and ScheduleInterleaved1F1B
// (several virtual stages per rank; named, not modelled yet).
enum class PpSchedule : uint8_t { GPipe, OneFOneB, Interleaved1F1B };
std::string_view ppScheduleName(PpSchedule s);  // "GPipe", "1F1B", "Interleaved1F1B"
std::optional<PpSchedule> parsePpSchedule(std::string_view s);  // case-insensitive
inline constexpr std::string_view kPpScheduleChoices = "GPipe, 1F1B, Interleaved1F1B";

struct ShardingSpec {
    Strategy strategy = Strategy::FullShard;
    int shard_size = 0;       // 0: world size (or GPUs per node for hybrid strategies)
    int fsdp_version = 2;     // 2: fully_shard (FSDP2); 1: FullyShardedDataParallel
    WrapPolicy wrap;
    ReshardMode reshard_after_forward = ReshardMode::Default;  // Default: per strategy
    int reshard_after_forward_k = 0;  // Count: re-shard to this many ranks after forward
    // Prefetch. FSDP2: implicit one-unit-ahead prefetch in forward and backward (depth below).
    // FSDP1: forward_prefetch (default off), backward_prefetch PRE (default) / POST / NONE.
    int prefetch_depth = 1;
    bool forward_prefetch = false;
    enum class BackwardPrefetch : uint8_t { Pre, Post, None } backward_prefetch = BackwardPrefetch::Pre;
    bool limit_all_gathers = true;  // FSDP1 rate limiter
    // The device mesh's other dimensions, in PyTorch's init_device_mesh order (pp, dp_replicate,
    // dp_shard, cp, tp): tp ranks are consecutive, so a tp group sits inside a node.
    // Tensor parallelism (torchtitan's plan, Model::tp_plan): parallelize_module over tp ranks
    // first, then fully_shard over the dp dimensions, which shards each TP-local shard.
    int tp = 1;
    bool sequence_parallel = true;  // norms and residual adds on sequence shards (SequenceParallel)
    bool loss_parallel = true;      // cross-entropy on vocab-sharded logits (torchtitan's default)
    // torch._inductor's micro-pipelined ("async") TP: each all-gather overlapped with the matmuls that
    // read it, each reduce-scatter with the matmul that feeds it (needs sequence parallelism and
    // torch.compile).
    bool async_tp = false;
    // Pipeline parallelism (torch.distributed.pipelining as torchtitan applies it): pp stages
    // outermost in the mesh, each a slice of the blocks (pp_stage_blocks, or torchtitan's balanced
    // split that counts the embedding and the output as one block each), fully_shard inside each
    // stage; the step's micro-batches (training.grad_accum) are the pipeline's.
    int pp = 1;
    PpSchedule pp_schedule = PpSchedule::OneFOneB;
    // Interleaved1F1B: the stages each rank holds (torchtitan's stages per rank); the model is cut
    // into pp x pp_virtual_stages stages, rank r holding stages r, r + pp, r + 2 pp, ...
    int pp_virtual_stages = 1;
    std::vector<int> pp_stage_blocks;  // blocks per stage, pp x pp_virtual_stages entries; empty: balanced
    int cp = 1;  // context parallelism: named, not yet modelled (refused above 1)
};

// Whether non-root units reshard after forward (rule 5): per strategy (FULL_SHARD, HYBRID_SHARD
// and NO_SHARD's cast copies yes; SHARD_GRAD_OP and _HYBRID_SHARD_ZERO2 no; with pipeline stages
// no, torchtitan's default under pp: rule PP1) unless overridden;
// Count reshards to reshard_after_forward_k ranks. The root never reshards after forward.
bool reshardsAfterForward(const ShardingSpec& s);

// FSDP1's backward_prefetch: "pre", "post", "none" (BackwardPrefetch.BACKWARD_PRE / BACKWARD_POST
// are accepted as "backward_pre" / "backward_post", any case).
std::string_view backwardPrefetchName(ShardingSpec::BackwardPrefetch p);
std::optional<ShardingSpec::BackwardPrefetch> parseBackwardPrefetch(std::string_view s);

}  // namespace shardcast::core
