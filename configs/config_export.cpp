#include "configs/config_export.hpp"

#include <map>

#include <fmt/format.h>

namespace shardcast::configs {
namespace {

core::Error cannot(std::string_view field, const std::string& what) {
    return core::Error{fmt::format("--emit torchtitan: {} {}", field, what)};
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
    if (t.optimizer != core::Optimizer::AdamW) return cannot("training.optimizer", "is not adamw; torchtitan's optimizers here: AdamW");
    if (!t.frozen_regex.empty()) return cannot("training.frozen", "is set; torchtitan trains every parameter");
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
    out += fmt::format("[model]\nname = \"llama3\"\nflavor = \"{}\"\n\n", flavor->second);
    out += "[optimizer]\nname = \"AdamW\"\n\n";

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

}  // namespace shardcast::configs
