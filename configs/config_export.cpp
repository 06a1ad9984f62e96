#include "configs/config_export.hpp"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace shardcast::configs {
namespace {

core::Error cannotIn(std::string_view format, std::string_view field, const std::string& what) {
    return core::Error{fmt::format("--emit {}: {} {}", format, field, what)};
}
core::Error cannot(std::string_view field, const std::string& what) { return cannotIn("torchtitan", field, what); }

// What accelerate's FSDP plugin (and the HF Trainer, which builds one) can express of a plan; the
// first field it cannot is the error. Both reduce in the compute dtype and keep fp32 masters.
core::Status checkAccelerateExpressible(const core::Plan& plan, const core::Mesh& mesh, std::string_view format) {
    const core::ShardingSpec& s = plan.sharding;
    const core::TrainingSpec& t = plan.training;
    auto no = [&](std::string_view field, const std::string& what) -> core::Status { return cannotIn(format, field, what); };
    if (mesh.tp > 1) {
        return no("sharding.tp", "is more than 1; accelerate applies the model's own HF TP plan, not the one shardcast "
                                 "plans (torchtitan's, or Megatron-LM's for GPT-2)");
    }
    if (mesh.pp > 1) return no("sharding.pp", "is more than 1; accelerate has no pipeline parallelism");
    if (t.computeDtype() != t.reduceDtype()) {
        return no("training.reduce_dtype", "differs from param_dtype; accelerate's mixed precision reduces in the compute dtype");
    }
    if (t.master_dtype != core::DType::F32) return no("training.master_dtype", "is not fp32; accelerate keeps fp32 parameters");
    if (t.ac != core::Checkpointing::None && t.ac != core::Checkpointing::Full) {
        return no("training.ac", "is neither none nor full; accelerate's fsdp_activation_checkpointing checkpoints every block");
    }
    if (s.wrap.kind != core::WrapKind::Block && s.wrap.kind != core::WrapKind::MinParams && s.wrap.kind != core::WrapKind::Whole) {
        return no("sharding.wrap", "is not block, min-params:N or whole; accelerate wraps by layer class, by size or not at all");
    }
    if (!s.limit_all_gathers) return no("sharding.limit_all_gathers", "is false; written configs keep FSDP1's rate limiter");
    if (!t.frozen_regex.empty()) return no("training.frozen", "is set; freezing is the script's");
    if (t.lora.enabled()) return no("training.lora", "is set; the script applies PEFT (plan --pytorch writes the call)");
    if (t.all_gather_dtype != core::AllGatherDtype::Param) {
        return no("training.all_gather_dtype", "is fp8; the FSDP plugin has no float8 all-gather (plan --pytorch writes torchao's)");
    }
    if (t.no_sync) return no("training.no_sync", "is true; accelerate reduces gradients every micro-batch under FSDP");
    if (t.attention != core::AttentionKernel::Flash) return no("training.attention", "is eager; the script picks attn_implementation");
    if (t.kernels == core::KernelImpl::Fused) return no("training.kernels", "is fused; accelerate runs eager or compile (INDUCTOR)");
    if (t.impl != core::ModelImpl::Hf) return no("training.impl", "is not hf; accelerate trains HuggingFace models");
    if (t.optimizer == core::Optimizer::SgdMomentum) return no("training.optimizer", "is sgd-momentum; the Trainer's optim sgd has none");
    if (plan.checkpoint.mode != core::CheckpointMode::None) return no("checkpoint.mode", "is set; saves are the script's");
    if (!plan.scale.empty()) return no("scale", "is set; a scaled model is no HuggingFace checkpoint");
    if (s.fsdp_version == 2) {
        if (s.prefetch_depth != 1) return no("sharding.prefetch_depth", "is more than 1; accelerate keeps FSDP2's implicit prefetch");
        if (s.strategy == core::Strategy::HybridShardZero2 || s.strategy == core::Strategy::NoShard) {
            return no("sharding.strategy", "is HYBRID_SHARD_ZERO2 or NO_SHARD under FSDP2; accelerate's FSDP2 gives FULL_SHARD, "
                                           "SHARD_GRAD_OP and HSDP");
        }
    } else if (s.reshard_after_forward != core::ReshardMode::Default) {
        return no("sharding.reshard_after_forward", "is set under FSDP1; there the strategy decides it");
    }
    if (s.reshard_after_forward == core::ReshardMode::Count) return no("sharding.reshard_after_forward", "is a rank count");
    return core::Ok{};
}

const char* strategyUpper(core::Strategy s) {
    switch (s) {
        case core::Strategy::ShardGradOp: return "SHARD_GRAD_OP";
        case core::Strategy::NoShard: return "NO_SHARD";
        case core::Strategy::HybridShard: return "HYBRID_SHARD";
        case core::Strategy::HybridShardZero2: return "HYBRID_SHARD_ZERO2";
        default: return "FULL_SHARD";
    }
}

const char* precisionName(core::DType d) {
    if (d == core::DType::BF16) return "bf16";
    if (d == core::DType::F16) return "fp16";
    return "no";
}

// A TOML float that reads back to the same double: shortest round-trip digits, always with a '.'
// or an exponent (TOML's integers are another type).
std::string tomlFloat(double v) {
    std::string text = fmt::format("{}", v);
    if (text.find_first_of(".eEni") == std::string::npos) text += ".0";
    return text;
}

}  // namespace

core::Result<std::string> torchtitanToml(const core::Plan& plan, const core::Mesh& mesh) {
    const core::TrainingSpec& t = plan.training;
    const core::ShardingSpec& s = plan.sharding;
    static const std::map<std::string, std::string> flavors = {
        {"llama-3.1-8b", "8B"}, {"llama-3.1-70b", "70B"}, {"llama-3.1-405b", "405B"}};
    const auto flavor = flavors.find(plan.model_ref);
    if (flavor == flavors.end() || !plan.scale.empty()) {
        return cannot("model", fmt::format("'{}'{} has no torchtitan llama3 flavor; torchtitan's are 8B (llama-3.1-8b), 70B "
                                           "(llama-3.1-70b) and 405B (llama-3.1-405b), unscaled",
                                           plan.model_ref, plan.scale.empty() ? "" : " (scaled)"));
    }
    if (s.fsdp_version != 2) return cannot("sharding.fsdp", "is 1; torchtitan runs FSDP2 (fully_shard)");
    if (s.wrap.kind != core::WrapKind::Block) {
        return cannot("sharding.wrap", "is not block; torchtitan applies fully_shard to each transformer block and the root");
    }
    if (s.prefetch_depth != 1) {
        return cannot("sharding.prefetch_depth", fmt::format("is {}; torchtitan keeps FSDP2's implicit prefetch of one unit", s.prefetch_depth));
    }
    if (t.optimizer != core::Optimizer::AdamW && t.optimizer != core::Optimizer::AdamWFused) {
        return cannot("training.optimizer", "is not adamw or adamw-fused; torchtitan's optimizers here: AdamW, fused or foreach");
    }
    if (!t.frozen_regex.empty()) return cannot("training.frozen", "is set; torchtitan trains every parameter");
    if (t.lora.enabled()) return cannot("training.lora", "is set; torchtitan has no LoRA");
    if (t.no_sync) return cannot("training.no_sync", "is true; torchtitan reduces gradients every micro-batch");
    if (t.attention != core::AttentionKernel::Flash) return cannot("training.attention", "is eager; torchtitan runs SDPA (flash)");
    if (t.kernels == core::KernelImpl::Fused) return cannot("training.kernels", "is fused; torchtitan runs eager or compile");
    if (!(t.clip_grad_norm > 0)) {
        return cannot("training.clip_grad_norm", "is 0 (no clipping); torchtitan clips every step (training.max_norm, "
                                                 "default 1.0): plan with --clip-grad-norm 1.0");
    }

    // The data-parallel mesh and FSDP's reshard policy.
    int64_t replicate = mesh.replicate_size, shard = mesh.shard_size;
    std::string reshard;
    switch (s.reshard_after_forward) {
        case core::ReshardMode::Default: reshard = "default"; break;
        case core::ReshardMode::True: reshard = "always"; break;
        case core::ReshardMode::False: reshard = "never"; break;
        case core::ReshardMode::Count:
            return cannot("sharding.reshard_after_forward", "is a rank count; torchtitan offers default, always or never");
    }
    switch (s.strategy) {
        case core::Strategy::NoShard:
            replicate = mesh.dp();
            shard = 1;
            break;
        case core::Strategy::ShardGradOp:
        case core::Strategy::HybridShardZero2:
            reshard = "never";
            break;
        default: break;
    }
    if (s.tp > 1 && !s.sequence_parallel) {
        return cannot("sharding.sequence_parallel", "is false; torchtitan's tensor-parallel plan always shards the sequence");
    }

    std::string out = fmt::format(
        "# torchtitan job config written by shardcast {} (`plan --emit torchtitan`): {} on {} x {} GPUs.\n"
        "# torchtitan runs its own Llama implementation{}.\n\n",
        SHARDCAST_VERSION, plan.model_ref, mesh.world_size, plan.cluster.gpu.name,
        t.impl == core::ModelImpl::Hf ? " (this plan was made with impl hf, HuggingFace's modules)" : "");
    out += fmt::format("[model]\nname = \"llama3\"\nflavor = \"{}\"\n", flavor->second);
    if (t.all_gather_dtype == core::AllGatherDtype::Fp8) {
        out += "converters = [\"float8\"]\n\n[float8]\nenable_fsdp_float8_all_gather = true\n"
               "precompute_float8_dynamic_scale_for_fsdp = true\nfilter_fqns = [\"output\"]\n";
    }
    out += "\n";
    out += fmt::format("[optimizer]\nname = \"AdamW\"\nimplementation = \"{}\"\n\n",
                       t.optimizer == core::Optimizer::AdamWFused ? "fused" : "foreach");

    // Micro-batches: under pp the pipeline's (pipeline_parallel_microbatch_size), else the local batch.
    const int64_t dp = replicate * shard;
    const int64_t local = s.pp > 1 ? t.micro_batch * t.grad_accum : t.micro_batch;
    const int64_t global = t.micro_batch * t.grad_accum * dp;
    auto dtypeName = [](core::DType d) -> std::string {
        if (d == core::DType::F32) return "float32";
        if (d == core::DType::BF16) return "bfloat16";
        return {};
    };
    const std::string master = dtypeName(t.master_dtype), param = dtypeName(t.computeDtype());
    if (master.empty()) return cannot("training.master_dtype", "is not fp32 or bf16, torchtitan's training.dtype");
    if (param.empty()) return cannot("training.param_dtype", "is not bf16 or fp32, torchtitan's mixed_precision_param");
    if (t.reduceDtype() != core::DType::F32) return cannot("training.reduce_dtype", "is not fp32, torchtitan's mixed_precision_reduce");
    out += fmt::format(
        "[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\ndtype = \"{}\"\n"
        "mixed_precision_param = \"{}\"\nmixed_precision_reduce = \"float32\"\nenable_cpu_offload = {}\nmax_norm = {}\n\n",
        local, global, t.seq_len, master, param, t.offload == core::Offload::Cpu ? "true" : "false",
        tomlFloat(t.clip_grad_norm));

    out += fmt::format("[parallelism]\ndata_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n"
                       "fsdp_reshard_after_forward = \"{}\"\ntensor_parallel_degree = {}\n",
                       replicate, shard, reshard, s.tp);
    if (s.tp > 1) {
        out += fmt::format("disable_loss_parallel = {}\nenable_async_tensor_parallel = {}\n", s.loss_parallel ? "false" : "true",
                           s.async_tp ? "true" : "false");
    }
    out += fmt::format("pipeline_parallel_degree = {}\n", s.pp);
    if (s.pp > 1) {
        // torchtitan's split (embedding and output one layer each) is the default one here.
        const int64_t blocks = static_cast<int64_t>(plan.model->blocks.size());
        auto balanced = core::pipelineStageBlocks(s.pp, blocks, {}, s.pp_virtual_stages);
        if (!balanced || *balanced != mesh.stage_blocks) {
            return cannot("sharding.pp_stage_blocks", "is not torchtitan's balanced split; torchtitan's TOML sets stages by "
                                                      "pipeline_parallel_layers_per_stage only");
        }
        out += fmt::format("pipeline_parallel_schedule = \"{}\"\npipeline_parallel_microbatch_size = {}\n",
                           core::ppScheduleName(s.pp_schedule), t.micro_batch);
        // torchtitan gives a looped schedule 2 stages per rank by default; others need the layers per stage.
        if (s.pp_virtual_stages > 2) {
            const int64_t stages = int64_t{s.pp} * s.pp_virtual_stages;
            const int64_t per_stage = (blocks + 2 + stages - 1) / stages;
            if ((blocks + 2 + per_stage - 1) / per_stage != stages) {
                return cannot("sharding.pp_virtual_stages",
                              fmt::format("{} x pp {} = {} stages cannot be set through pipeline_parallel_layers_per_stage for "
                                          "{} blocks",
                                          s.pp_virtual_stages, s.pp, stages, blocks));
            }
            out += fmt::format("pipeline_parallel_layers_per_stage = {}\n", per_stage);
        }
    }
    out += "context_parallel_degree = 1\n\n";

    std::string ac;
    switch (t.ac) {
        case core::Checkpointing::None: ac = "mode = \"none\""; break;
        case core::Checkpointing::Full: ac = "mode = \"full\""; break;
        case core::Checkpointing::Op: ac = "mode = \"selective\"\nselective_ac_option = \"op\""; break;
        case core::Checkpointing::Layer: ac = fmt::format("mode = \"selective\"\nselective_ac_option = \"{}\"", t.ac_every); break;
        default:
            return cannot("training.ac", "is not none, full, op or layer:K, torchtitan's activation_checkpoint modes");
    }
    out += "[activation_checkpoint]\n" + ac + "\n\n";
    out += fmt::format("[compile]\nenable = {}\ncomponents = [\"model\", \"loss\"]\n\n",
                       t.kernels == core::KernelImpl::Compile ? "true" : "false");
    const core::CheckpointSpec& k = plan.checkpoint;
    if (k.mode == core::CheckpointMode::Full) {
        return cannot("checkpoint.mode", "is full; torchtitan saves through torch.distributed.checkpoint (mode sharded)");
    }
    out += fmt::format("[checkpoint]\nenable = {}\ninterval = {}\n", k.mode == core::CheckpointMode::Sharded ? "true" : "false",
                       k.every_steps);
    return out;
}

core::Result<std::string> accelerateYaml(const core::Plan& plan, const core::Mesh& mesh) {
    if (auto ok = checkAccelerateExpressible(plan, mesh, "accelerate"); !ok) return ok.error();
    const core::ShardingSpec& s = plan.sharding;
    const core::TrainingSpec& t = plan.training;
    const core::ClusterSpec& c = plan.cluster;
    if (s.strategy == core::Strategy::HybridShard && s.fsdp_version == 1 && mesh.shard_size != c.gpus_per_node) {
        return cannotIn("accelerate", "sharding.shard_size", "is not the GPUs per node; FSDP1's hybrid sharding shards within a node");
    }
    std::string out = fmt::format(
        "# accelerate config written by shardcast {} (`plan --emit accelerate`): {} on {} x {} GPUs.\n"
        "# The model, batch and optimizer are the training script's; this plan used: --model {} --micro-batch {} "
        "--grad-accum {} --seq-len {} --optimizer {} --clip-grad-norm {:g}\n",
        SHARDCAST_VERSION, plan.model_ref, mesh.world_size, c.gpu.name, plan.model_ref, t.micro_batch, t.grad_accum,
        t.seq_len, core::optimizerName(t.optimizer), t.clip_grad_norm);
    out += fmt::format("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: {}\nnum_machines: {}\n"
                       "num_processes: {}\nmachine_rank: 0\n",
                       precisionName(t.computeDtype()), c.nodes, mesh.world_size);
    out += fmt::format("fsdp_config:\n  fsdp_version: {}\n  fsdp_sharding_strategy: {}\n", s.fsdp_version, strategyUpper(s.strategy));
    if (s.fsdp_version == 2 && s.reshard_after_forward != core::ReshardMode::Default) {
        out += fmt::format("  fsdp_reshard_after_forward: {}\n", s.reshard_after_forward == core::ReshardMode::True ? "true" : "false");
    }
    if (s.wrap.kind == core::WrapKind::Block) {
        out += "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n";
    } else if (s.wrap.kind == core::WrapKind::MinParams) {
        out += fmt::format("  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: {}\n", s.wrap.min_params);
    } else {
        out += "  fsdp_auto_wrap_policy: NO_WRAP\n";
    }
    if (s.fsdp_version == 1) {
        const char* prefetch = s.backward_prefetch == core::ShardingSpec::BackwardPrefetch::Pre    ? "BACKWARD_PRE"
                               : s.backward_prefetch == core::ShardingSpec::BackwardPrefetch::Post ? "BACKWARD_POST"
                                                                                                    : "NO_PREFETCH";
        out += fmt::format("  fsdp_backward_prefetch: {}\n  fsdp_forward_prefetch: {}\n", prefetch, s.forward_prefetch);
    }
    out += fmt::format("  fsdp_offload_params: {}\n  fsdp_activation_checkpointing: {}\n",
                       t.offload == core::Offload::Cpu, t.ac == core::Checkpointing::Full);
    if (s.fsdp_version == 2 && s.strategy == core::Strategy::HybridShard) {
        out += fmt::format("parallelism_config:\n  parallelism_config_dp_replicate_size: {}\n  parallelism_config_dp_shard_size: {}\n",
                           mesh.replicate_size, mesh.shard_size);
    }
    if (t.kernels == core::KernelImpl::Compile) out += "dynamo_config:\n  dynamo_backend: INDUCTOR\n";
    return out;
}

core::Result<std::string> hfTrainerJson(const core::Plan& plan, const core::Mesh& mesh) {
    if (auto ok = checkAccelerateExpressible(plan, mesh, "hf-trainer"); !ok) return ok.error();
    const core::ShardingSpec& s = plan.sharding;
    const core::TrainingSpec& t = plan.training;
    if ((s.strategy == core::Strategy::HybridShard || s.strategy == core::Strategy::HybridShardZero2) &&
        (s.fsdp_version == 2 || mesh.shard_size != plan.cluster.gpus_per_node)) {
        return cannotIn("hf-trainer", "sharding.strategy", "is hybrid over other than a node's GPUs, or under FSDP2; the Trainer's "
                                                          "hybrid_shard is FSDP1's, shard groups of a node");
    }
    if (s.fsdp_version == 2 && s.reshard_after_forward != core::ReshardMode::Default) {
        return cannotIn("hf-trainer", "sharding.reshard_after_forward", "is set; give the strategy (FULL_SHARD or SHARD_GRAD_OP)");
    }
    // transformers 5's form: fsdp true, everything in fsdp_config.
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    config["version"] = s.fsdp_version;
    std::string strategy = strategyUpper(s.strategy);
    std::transform(strategy.begin(), strategy.end(), strategy.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (s.fsdp_version == 2) {
        config["reshard_after_forward"] = s.strategy == core::Strategy::FullShard;
    } else {
        config["reshard_after_forward"] = strategy;
    }
    config["auto_wrap_policy"] = s.wrap.kind == core::WrapKind::Block       ? "TRANSFORMER_BASED_WRAP"
                                 : s.wrap.kind == core::WrapKind::MinParams ? "SIZE_BASED_WRAP"
                                                                            : "NO_WRAP";
    if (s.wrap.kind == core::WrapKind::MinParams) config["min_num_params"] = s.wrap.min_params;
    config["cpu_offload"] = t.offload == core::Offload::Cpu;
    config["activation_checkpointing"] = t.ac == core::Checkpointing::Full;
    if (s.fsdp_version == 1) {
        config["backward_prefetch"] = s.backward_prefetch == core::ShardingSpec::BackwardPrefetch::Pre    ? "backward_pre"
                                      : s.backward_prefetch == core::ShardingSpec::BackwardPrefetch::Post ? "backward_post"
                                                                                                           : "no_prefetch";
        config["forward_prefetch"] = s.forward_prefetch;
    }
    nlohmann::ordered_json j;
    j["fsdp"] = true;
    j["fsdp_config"] = std::move(config);
    j["per_device_train_batch_size"] = t.micro_batch;
    j["gradient_accumulation_steps"] = t.grad_accum;
    j["bf16"] = t.computeDtype() == core::DType::BF16;
    j["fp16"] = t.computeDtype() == core::DType::F16;
    j["max_grad_norm"] = t.clip_grad_norm;
    j["optim"] = t.optimizer == core::Optimizer::AdamWFused ? "adamw_torch_fused"
                 : t.optimizer == core::Optimizer::AdamW    ? "adamw_torch"
                                                            : "sgd";
    j["torch_compile"] = t.kernels == core::KernelImpl::Compile;
    return j.dump(2) + "\n";
}

}  // namespace shardcast::configs
