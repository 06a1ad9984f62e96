#pragma once
// A Plan is the model, the cluster, the training setup and the sharding plan, validated.
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/model/model.hpp"
#include "core/model/model_scale.hpp"
#include "core/plan/cluster.hpp"
#include "core/plan/sharding.hpp"
#include "core/plan/training.hpp"

namespace shardcast::core {

struct Plan {
    std::shared_ptr<const Model> model;
    std::string model_ref;  // how the plan names the model: bundled name or path (or the embedded model's name)
    // The model's config (HF config.json or module tree) when the plan embedded it (a self-contained
    // plan); null when model_ref names a bundled model or a file. planToJson writes it back embedded.
    std::shared_ptr<const nlohmann::json> model_config;
    ModelScale scale;       // applied to model_ref's config (`--scale`); `model` is the scaled model
    // With LoRA (training.lora), `model` carries the adapters and this is the model before them;
    // null without LoRA. applyLora keeps the two in step.
    std::shared_ptr<const Model> base_model;
    ClusterSpec cluster;
    TrainingSpec training;
    ShardingSpec sharding;
    CheckpointSpec checkpoint;  // saving checkpoints (issue 26): none by default
};

// Derived sizes of a validated plan.
// PyTorch's init_device_mesh order (pp, dp_replicate, dp_shard, tp):
// rank = ((p * R + r) * W + s) * tp + t, so the tp ranks of a group are consecutive (inside a
// node), a dp group strides over them and the pipeline stages are the outermost blocks of ranks.
struct Mesh {
    int world_size = 1;
    int shard_size = 1;      // dp_shard: ranks a parameter is sharded over (1 for NO_SHARD)
    int replicate_size = 1;  // dp_replicate: world_size / (shard_size * tp * pp)
    int tp = 1;              // tensor-parallel ranks
    int pp = 1;              // pipeline stages
    int virtual_stages = 1;  // stages per pipeline rank (Interleaved1F1B); pp x virtual_stages stages in all
    std::vector<int> stage_blocks;  // pp > 1: the blocks of each stage, in order (they sum to the model's);
                                    // stage g runs on pipeline rank g mod pp
    int stages() const { return pp * virtual_stages; }
    // The pipeline stage pipeline rank `rank` holds in its place k (0 to virtual_stages - 1).
    int rankStage(int rank, int k) const { return k * pp + rank; }
    int dp() const { return shard_size * replicate_size; }
};

// The blocks of each of `pp` stages: `given` when it is set (checked: pp entries, summing to
// `blocks`, every middle stage holding one), else torchtitan's balanced split
// (generate_llm_fqn_per_model_part in torchtitan/distributed/pipeline_parallel.py): the embedding
// and the norm plus output each count as one block (pipeline_parallel_first/last_stage_less_layers
// = 1), blocks + 2 are split evenly and the first (blocks + 2) mod pp stages take one more.
// Errors name sharding.pp / sharding.pp_stage_blocks and what is valid.
// With virtual_stages V > 1 (Interleaved1F1B) the model is split into pp x V stages.
Result<std::vector<int>> pipelineStageBlocks(int pp, int64_t blocks, const std::vector<int>& given, int virtual_stages = 1);

// Puts training.lora's adapters on the plan's model (core/model/model_lora.hpp), starting from
// base_model when the model has them already, or takes them off when LoRA is off. Errors name
// training.lora (`where` first) and the valid module names.
Status applyLora(Plan& plan, const std::string& where);

// Checks every field against the others; the error names the field and what would be valid.
Result<Mesh> validatePlan(const Plan& plan);

// The last micro-batch work bound validatePlan found within limits: that check walks every op of
// the model, and depends only on the model object (immutable behind the Plan's shared_ptr; held
// here, so its address is not reused), the micro-batch, the sequence length and the op variants.
// An evaluator that validates many plans of one model passes one memo to skip repeating it.
struct PlanCheckMemo {
    std::shared_ptr<const Model> model;
    int64_t micro_batch = 0, seq_len = 0;
    AttentionKernel attention = AttentionKernel::Flash;
    KernelImpl kernels = KernelImpl::Eager;
};
Result<Mesh> validatePlan(const Plan& plan, PlanCheckMemo* memo);

// Plan files (docs/plan-format.md). Relative paths inside a plan file resolve against its folder.
// planToJson writes {"format": "shardcast-plan", "version": kPlanFormatVersion, ...}; planFromJson
// accepts files without that header (hand-written) and refuses a newer version.
inline constexpr int kPlanFormatVersion = 1;
Result<Plan> planFromJson(const nlohmann::json& j, const std::string& where,
                          const std::filesystem::path& base_dir);
Result<Plan> loadPlanFile(const std::filesystem::path& path);
nlohmann::json planToJson(const Plan& plan);

// planToJson with nothing left outside the document, for a store that must read it back anywhere,
// later: a model that is not bundled is embedded as {"name": NAME, "config": <its config.json or
// module-tree object>} (read again from the file it was loaded from), and a modules:FILE wrap policy
// becomes the inline module list. Bundled models stay by name. Errors name the file that cannot be read.
Result<nlohmann::json> selfContainedPlanJson(const Plan& plan);

// Wrap policy strings: "whole", "block", "every:K", "min-params:N", "modules:FILE".
Result<WrapPolicy> parseWrapPolicy(const std::string& text, const std::string& where);

}  // namespace shardcast::core
