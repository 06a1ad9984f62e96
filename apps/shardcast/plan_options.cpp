#include "apps/shardcast/plan_options.hpp"

#include <exception>
#include <memory>
#include <string>

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "configs/config_import.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::cli {

namespace {

template <class T>
void addOpt(CLI::App& cmd, const std::string& name, std::optional<T>& target, const std::string& type_name,
            const std::string& description, const std::string& shown_default) {
    CLI::Option* opt = cmd.add_option_function<T>(
        name, [&target](const T& v) { target = v; }, description);
    opt->type_name(type_name);
    if (!shown_default.empty()) opt->default_str(shown_default);
}

}  // namespace

void addPlanOptions(CLI::App& cmd, core::PlanOverrides& o) {
    cmd.add_option("plan", o.plan_file, "Plan file (docs/plan-format.md); flags below override its fields")
        ->type_name("PLAN.json");
    cmd.add_option("--from-config", o.config_file,
                   "Start from a framework's training config instead of a plan file: a torchtitan job config (.toml) or an accelerate config (.yaml, with --model; "
                   "docs/configs.md). Flags below override its fields; how it mapped is said on stderr")
        ->type_name("FILE");

    addOpt(cmd, "--model", o.model, "NAME|CONFIG.json",
           "Bundled model name (see `shardcast models`) or a HuggingFace config.json / module-tree "
           "JSON; required without a plan file",
           "");
    addOpt(cmd, "--gpu", o.gpu, "NAME|GPU.json",
           "GPU preset (see `shardcast gpus`, case-insensitive) or a GPU JSON file ({\"base\": PRESET, any "
           "field: e.g. \"power_limit_w\": 500 for a power-capped card; docs/plan-format.md)",
           core::kDefaultGpu);
    addOpt(cmd, "--nodes", o.nodes, "N", "Number of nodes", std::to_string(core::kDefaultNodes));
    addOpt(cmd, "--gpus-per-node", o.gpus_per_node, "G", "GPUs per node",
           std::to_string(core::kDefaultGpusPerNode));
    addOpt(cmd, "--strategy", o.strategy, "S",
           "NO_SHARD | SHARD_GRAD_OP | FULL_SHARD | HYBRID_SHARD | _HYBRID_SHARD_ZERO2 "
           "(aliases ddp, zero2, zero3, hsdp, hsdp-zero2)",
           "FULL_SHARD");
    addOpt(cmd, "--shard-size", o.shard_size, "N",
           "Ranks a parameter is sharded over; 0: world size (GPUs per node for hybrid)", "0");
    addOpt(cmd, "--tp", o.tp, "T",
           "Tensor-parallel degree: torchtitan's Llama plan (Megatron-LM's for GPT-2) over T consecutive ranks inside a "
           "node, then fully_shard over the world / T data-parallel ranks; T divides the GPUs per node and the "
           "attention and KV heads",
           "1");
    addOpt(cmd, "--sequence-parallel", o.sequence_parallel, "true|false",
           "With --tp: norms and residual adds on sequence shards (all-gather / reduce-scatter around each "
           "block half); false: replicated, with all-reduces",
           "true");
    addOpt(cmd, "--loss-parallel", o.loss_parallel, "true|false",
           "With --tp: cross-entropy on vocab-sharded logits (torchtitan's default); false: the logits are "
           "all-gathered first",
           "true");
    addOpt(cmd, "--async-tp", o.async_tp, "true|false",
           "With --tp and --kernels compile: torch._inductor's micro-pipelined TP, each all-gather overlapped with "
           "the matmuls that read it and each reduce-scatter with the matmul that feeds it (with the copy into "
           "and the sum out of the symmetric-memory buffers)",
           "false");
    addOpt(cmd, "--pp", o.pp, "P",
           "Pipeline stages (torch.distributed.pipelining): the blocks split into P stages, outermost in the mesh, "
           "fully_shard inside each; the step's micro-batches (--grad-accum) run through the pipeline",
           "1");
    addOpt(cmd, "--pp-schedule", o.pp_schedule, "GPipe|1F1B|Interleaved1F1B",
           "With --pp: the pipeline schedule (torch.distributed.pipelining's ScheduleGPipe, Schedule1F1B, "
           "ScheduleInterleaved1F1B)",
           "1F1B");
    addOpt(cmd, "--pp-virtual-stages", o.pp_virtual_stages, "V",
           "With --pp-schedule Interleaved1F1B: stages per pipeline rank (2 or more); the blocks split into P x V "
           "stages, rank r holding stages r, r + P, ...",
           "1");
    addOpt(cmd, "--pp-stage-blocks", o.pp_stage_blocks, "N,N,...",
           "With --pp: blocks per stage, P (x V) counts summing to the model's blocks (default: torchtitan's balanced "
           "split, the embedding and the output counting as one block each)",
           "balanced");
    addOpt(cmd, "--cp", o.cp, "C", "Context-parallel degree (not modelled: only 1 is accepted)", "1");
    addOpt(cmd, "--fsdp", o.fsdp, "1|2", "FSDP flavour: 2 (fully_shard) or 1 (FullyShardedDataParallel)",
           "2");
    addOpt(cmd, "--wrap", o.wrap, "POLICY",
           "Wrap units: whole | block | every:K | min-params:N | modules:FILE", "block");
    addOpt(cmd, "--micro-batch", o.micro_batch, "B", "Sequences per micro-batch per GPU", "1");
    addOpt(cmd, "--seq-len", o.seq_len, "S", "Sequence length (tokens)", "4096");
    addOpt(cmd, "--grad-accum", o.grad_accum, "K", "Micro-batches per optimizer step", "1");
    cmd.add_flag_function(
        "--no-sync", [&o](int64_t) { o.no_sync = true; },
        "Reduce gradients only on the last micro-batch (no_sync / set_requires_gradient_sync)");
    addOpt(cmd, "--param-dtype", o.param_dtype, "DTYPE", "MixedPrecisionPolicy.param_dtype: fp32 | bf16 | fp16",
           "bf16");
    addOpt(cmd, "--reduce-dtype", o.reduce_dtype, "DTYPE",
           "MixedPrecisionPolicy.reduce_dtype: fp32 | bf16 | fp16", "fp32");
    addOpt(cmd, "--master-dtype", o.master_dtype, "DTYPE",
           "Dtype of sharded params, grads and optimizer state: fp32 | bf16 | fp16", "fp32");
    addOpt(cmd, "--optimizer", o.optimizer, "NAME", "adamw (foreach, PyTorch's default) | adamw-fused (AdamW(fused=True): one pass) | sgd | sgd-momentum", "adamw");
    addOpt(cmd, "--ac", o.ac, "MODE", "Activation checkpointing: " + std::string(core::kAcChoices), "none");
    addOpt(cmd, "--attention", o.attention, "KERNEL", "Attention kernel: flash | eager", "flash");
    addOpt(cmd, "--kernels", o.kernels, "IMPL",
           "Kernel implementation: eager (one kernel per PyTorch op) | fused (fused norm, SwiGLU, loss) | "
           "compile (torch.compile: fused kernels' memory, each elementwise chain one kernel)",
           "eager");
    addOpt(cmd, "--impl", o.impl, "CODE",
           "Modeling code: hf (HuggingFace transformers modules) | torchtitan (torchtitan's Llama: fused "
           "nn.RMSNorm, K/V repeated before SDPA; llama models only)",
           "hf");
    addOpt(cmd, "--allocator", o.allocator, "MODE",
           "PyTorch's CUDA caching allocator: caching (default) | expandable (PYTORCH_CUDA_ALLOC_CONF="
           "expandable_segments:True); reserved memory is modelled for it",
           "caching");
    addOpt(cmd, "--hf-mask", o.hf_mask, "VERSION",
           "transformers' causal mask under SDPA: 5.x (none: is_causal, native GQA) | 4.5x (a [b,1,s,s] "
           "mask saved per layer, K/V repeated to all heads)",
           "5.x");
    addOpt(cmd, "--offload", o.offload, "MODE", "Parameter/gradient/optimizer offload: none | cpu", "none");
    addOpt(cmd, "--reshard-after-forward", o.reshard_after_forward, "true|false|K",
           "true | false | K (re-shard to K ranks); default: per strategy", "");
    addOpt(cmd, "--prefetch-depth", o.prefetch_depth, "N",
           "FSDP2 units prefetched ahead, 1 to 1024 (1: FSDP2's implicit one-unit prefetch; N > 1: N-1 more "
           "through set_modules_to_forward_prefetch / set_modules_to_backward_prefetch)",
           "1");
    addOpt(cmd, "--forward-prefetch", o.forward_prefetch, "true|false",
           "FSDP1 forward_prefetch: issue the next unit's all-gather before this unit's forward compute", "false");
    addOpt(cmd, "--backward-prefetch", o.backward_prefetch, "pre|post|none",
           "FSDP1 backward_prefetch: BACKWARD_PRE, BACKWARD_POST or None", "pre");
    addOpt(cmd, "--scale", o.scale, "hidden=H,layers=L,seq=S",
           "Shrink the model keeping its shape of units (any subset of the keys): hidden size H (a multiple "
           "of the attention head count, of twice it with rotary embeddings; head counts and vocabulary "
           "kept, MLP width scaled alike), L blocks, sequence length S (= --seq-len); e.g. to run a 70B "
           "plan on a CPU. Written into --write-plan's file as \"scale\"",
           "");
    addOpt(cmd, "--frozen", o.frozen, "REGEX",
           "Regex (std::regex_search on parameter FQNs) of frozen parameters", "");
    addOpt(cmd, "--lora", o.lora, "RANK[:MODULES]",
           "LoRA fine-tuning as PEFT applies it: rank-RANK adapters (lora_A [RANK, in], lora_B [out, RANK]) on the "
           "linear modules named (comma-separated, PEFT's target_modules; default: the attention projections), "
           "every other parameter frozen; 0: none",
           "");
    addOpt(cmd, "--all-gather-dtype", o.all_gather_dtype, "param|fp8",
           "What FSDP2 all-gathers: parameters in param_dtype, or (fp8) torchao float8 training's "
           "enable_fsdp_float8_all_gather with precomputed scales: the Float8Linear weights (every linear but the "
           "output whose dims are multiples of 16) gathered and held unsharded in float8, one amax pass and "
           "all-reduce after the optimizer step, and their GEMMs in fp8 with the casts of inputs and gradients; "
           "with --tp, torchao's float8 TP styles (activations cast on their sequence shards, all-gathered in fp8)",
           "param");
    addOpt(cmd, "--clip-grad-norm", o.clip_grad_norm, "MAX_NORM",
           "clip_grad_norm_(max_norm) before each optimizer step: the gradients' norm (one pass over them), its "
           "all-reduce, and their scaling (another pass); torchtitan always clips (max_norm 1.0), as HF Trainer "
           "does by default (max_grad_norm 1.0); 0: no clipping",
           "0");
    addOpt(cmd, "--checkpoint", o.checkpoint, "none|full|sharded",
           "Plan checkpoint saves: full (FULL_STATE_DICT: the model and optimizer state gathered, rank 0 writes "
           "them) or sharded (torch.distributed.checkpoint: every rank writes its shards); the report gives the "
           "save's memory and time and the goodput against failures, with the best interval",
           "none");
    addOpt(cmd, "--checkpoint-every", o.checkpoint_every, "STEPS", "Optimizer steps between checkpoint saves",
           std::to_string(core::kDefaultCheckpointEverySteps));
    addOpt(cmd, "--checkpoint-offload-to-cpu", o.checkpoint_offload_to_cpu, "true|false",
           "Full save: move each gathered tensor to the host at once (FullStateDictConfig offload_to_cpu)", "false");
    addOpt(cmd, "--checkpoint-rank0-only", o.checkpoint_rank0_only, "true|false",
           "Full save: only rank 0 keeps the gathered state (FullStateDictConfig rank0_only)", "false");
}

void addWholeStepOption(CLI::App& cmd, bool& whole_step) {
    cmd.add_flag("--whole-step", whole_step,
                 fmt::format("Simulate every micro-batch of the step. By default a step of more than {} micro-batches is "
                             "simulated by its repeating period: the same figures, with the timeline and --trace holding "
                             "its first micro-batches and its last. --save always simulates the whole step",
                             sim::kPeriodOver));
}

void addHeadroomOption(CLI::App& cmd, double& headroom) {
    headroom = core::kDefaultHeadroom;
    cmd.add_option("--headroom", headroom,
                   "Fraction of GPU memory kept free when judging whether a plan fits (peak <= capacity x (1 - H))")
        ->type_name("H")
        ->check(CLI::Validator(
            [](std::string& value) -> std::string {
                double h = -1;
                try {
                    size_t used = 0;
                    h = std::stod(value, &used);
                    if (used != value.size()) h = -1;
                } catch (const std::exception&) {
                    h = -1;
                }
                if (h >= 0.0 && h < 1.0) return {};
                return "must be a fraction from 0 (inclusive) to 1 (exclusive), e.g. 0.05 (got '" + value + "')";
            },
            "H in [0, 1)"))
        ->capture_default_str();
}

core::Result<core::Plan> buildPlanFromFlags(const core::PlanOverrides& o) {
    if (o.config_file.empty()) return core::buildPlan(o);
    if (!o.plan_file.empty()) {
        return core::makeError(fmt::format("give a plan file ({}) or --from-config {}, not both", o.plan_file, o.config_file));
    }
    configs::ConfigContext context;
    if (o.gpus_per_node) context.gpus_per_node = *o.gpus_per_node;
    if (o.nodes) context.world = *o.nodes * context.gpus_per_node;
    auto imported = configs::importConfigFile(o.config_file, context);
    if (!imported) return imported.error();
    // accelerate's config names no model (the training script loads it): --model gives it.
    if (!imported->overrides.model) {
        if (!o.model) {
            return core::makeError(fmt::format("--from-config {}: an {} names no model; give --model NAME|CONFIG.json",
                                               o.config_file, imported->format));
        }
        imported->overrides.model = o.model;
    }
    auto base = core::buildPlan(imported->overrides);
    if (!base) return core::makeError(fmt::format("{}: {}", o.config_file, base.error().message));
    core::PlanOverrides flags = o;
    flags.base = std::make_shared<const core::Plan>(std::move(*base));
    auto plan = core::buildPlan(flags);
    if (!plan) return plan.error();
    // How the config mapped, once it gave a plan (an error stays the one line it is).
    fmt::print(stderr, "shardcast: --from-config {} ({}):\n", o.config_file, imported->format);
    for (const std::string& line : imported->mapped) fmt::print(stderr, "  {}\n", line);
    if (!imported->ignored.empty()) {
        std::string keys;
        for (const std::string& k : imported->ignored) keys += (keys.empty() ? "" : ", ") + k;
        fmt::print(stderr, "  read, no effect on memory or time: {}\n", keys);
    }
    return plan;
}

}  // namespace shardcast::cli
