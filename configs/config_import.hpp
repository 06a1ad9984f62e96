#pragma once
// Frameworks' training configs read into a plan (issue 26, `--from-config FILE`): torchtitan's TOML
// job config (the format torchtitan read until its February 2026 move to Python config registries,
// torchtitan/config/job_config.py), parsed with toml++; accelerate's config YAML (`accelerate
// config`'s file, accelerate/commands/config/config_args.py and FullyShardedDataParallelPlugin),
// parsed with yaml-cpp; and HF Trainer's TrainingArguments or fsdp_config JSON (hf_trainer.cpp),
// parsed with nlohmann-json.
//
// Every key is accounted for: the ones that shape memory or time become plan fields; the ones that
// do not (logging, paths, the learning rate, ...) are listed in `ignored`; the ones that ask for
// something shardcast does not model (float8, context or expert parallelism, a schedule it does not
// have) are errors that name the key and what is valid; a key it does not know is an error naming
// it and the section's known keys. Nothing is dropped silently.
//
// torchtitan's fields and how they map (job_config.py's dataclasses):
//   [model] name "llama3", flavor "8B" | "70B" | "405B"  -> model llama-3.1-*, impl torchtitan
//   [training] local_batch_size, global_batch_size (-1: local x dp), seq_len, dtype (master),
//     mixed_precision_param, mixed_precision_reduce, enable_cpu_offload
//     -> micro-batch (pipeline_parallel_microbatch_size under pp), grad_accum = global / dp / micro-batch
//   [parallelism] data_parallel_replicate_degree R, data_parallel_shard_degree S (-1: the ranks left),
//     tensor_parallel_degree, pipeline_parallel_degree, pipeline_parallel_schedule,
//     pipeline_parallel_layers_per_stage (stages per rank: ceil((layers + 2) / it) / pp, torchtitan's
//     default 2 for looped schedules), fsdp_reshard_after_forward, disable_loss_parallel,
//     enable_async_tensor_parallel -> strategy (R > 1 and S > 1: HYBRID_SHARD over S; S = 1: NO_SHARD;
//     else FULL_SHARD), tp, pp, schedule; the world R x S x tp x pp sets the nodes
//   [activation_checkpoint] mode none | full | selective (+ selective_ac_option "op" | K) -> ac
//   [compile] enable -> kernels compile
//   [checkpoint] enable, interval -> a sharded save (torch.distributed.checkpoint) every interval steps
//
// accelerate's YAML has no model and no batch (they are the script's): --model is required beside
// it, the batch comes from the flags. Its fields:
//   distributed_type FSDP; num_machines, num_processes -> --nodes, --gpus-per-node (processes / machines)
//   mixed_precision no | bf16 | fp16 -> param and reduce dtype both (FullyShardedDataParallelPlugin.
//     set_mixed_precision: MixedPrecision(param_dtype = reduce_dtype = that dtype))
//   fsdp_config: fsdp_version (1 when absent, accelerate's default); fsdp_sharding_strategy or, FSDP1,
//     fsdp_reshard_after_forward FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD |
//     HYBRID_SHARD_ZERO2 (or 1-5), FSDP2 fsdp_reshard_after_forward true | false; fsdp_auto_wrap_policy
//     TRANSFORMER_BASED_WRAP (block) | SIZE_BASED_WRAP (min-params:fsdp_min_num_params) | NO_WRAP
//     (whole); fsdp_backward_prefetch, fsdp_forward_prefetch, fsdp_offload_params,
//     fsdp_activation_checkpointing (full); parallelism_config_dp_replicate_size / dp_shard_size
//     (HSDP under FSDP2)
//   dynamo_config.dynamo_backend INDUCTOR -> --kernels compile
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/result.hpp"
#include "core/plan/plan_build.hpp"

namespace shardcast::configs {

struct ImportedConfig {
    std::string format;              // "torchtitan TOML"
    core::PlanOverrides overrides;   // the fields the config sets (model included)
    std::vector<std::string> mapped;   // "parallelism.tensor_parallel_degree 8 -> --tp 8", ...
    std::vector<std::string> ignored;  // keys read that change neither memory nor time
};

// The world the command line gives (--nodes x --gpus-per-node), needed when the config leaves the
// data-parallel shard degree to the ranks left (-1); unset otherwise.
struct ConfigContext {
    std::optional<int64_t> world;
    int64_t gpus_per_node = core::kDefaultGpusPerNode;
};

// `text` is the file's contents; `where` names it in errors.
core::Result<ImportedConfig> importTorchtitanToml(std::string_view text, const std::string& where,
                                                  const ConfigContext& context);
core::Result<ImportedConfig> importAccelerateYaml(std::string_view text, const std::string& where);
// Lightning (configs/lightning.cpp): a LightningCLI config YAML whose trainer.strategy is FSDPStrategy
// (or "fsdp"): its init_args and the Trainer's devices, num_nodes, precision, accumulate_grad_batches
// and gradient_clip_val. --model and the batch flags give the rest. isLightningYaml: a YAML mapping
// with a `trainer` key (what tells it from accelerate's YAML).
core::Result<ImportedConfig> importLightningYaml(std::string_view text, const std::string& where);
bool isLightningYaml(std::string_view text);
// HF Trainer (configs/hf_trainer.cpp): a TrainingArguments JSON (fsdp, fsdp_config as an object or a
// path resolved against `base_dir`, per_device_train_batch_size, gradient_accumulation_steps, bf16,
// fp16, max_grad_norm, gradient_checkpointing, optim, torch_compile; every other field listed as of
// no effect, a key that is no field an error), or a bare fsdp_config JSON. No model, sequence length
// or GPUs in either: --model and the flags give them.
core::Result<ImportedConfig> importHfTrainerJson(std::string_view text, const std::string& where,
                                                 const std::filesystem::path& base_dir = {});
// A config file by its extension: .toml (torchtitan), .yaml / .yml (accelerate), .json (HF Trainer).
// Errors name the file.
core::Result<ImportedConfig> importConfigFile(const std::filesystem::path& path, const ConfigContext& context);

}  // namespace shardcast::configs
