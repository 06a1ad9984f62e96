#pragma once
// Building a plan the way the command line and the GUI do: a plan file (or defaults) as the base,
// then each field the user set overrides the matching one; and writing a plan file that reads back
// from anywhere.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"

namespace shardcast::core {

// Each field is set only when the user gave it, so a plan file's value survives otherwise. Values
// are the command line's spellings; errors name the flag (`--micro-batch`, ...).
struct PlanOverrides {
    std::string plan_file;  // may be empty
    // A plan to start from instead of a plan file or the defaults (a framework's config read by
    // configs/: `--from-config FILE`, whose path the front-ends keep in config_file).
    std::shared_ptr<const Plan> base;
    std::string config_file;
    std::optional<std::string> model, gpu, strategy, wrap, param_dtype, reduce_dtype, master_dtype,
        optimizer, ac, attention, kernels, impl, offload, hf_mask, reshard_after_forward, frozen;
    std::optional<std::string> allocator;  // --allocator caching | expandable
    // Prefetch: FSDP2's units ahead (--prefetch-depth), FSDP1's forward_prefetch ("true"/"false")
    // and backward_prefetch ("pre", "post", "none").
    std::optional<int64_t> prefetch_depth;
    std::optional<std::string> forward_prefetch, backward_prefetch;
    std::optional<std::string> scale;  // "hidden=H,layers=L,seq=S" (core/model/model_scale.hpp)
    std::optional<int64_t> nodes, gpus_per_node, shard_size, fsdp, micro_batch, seq_len, grad_accum;
    bool no_sync = false;
    // Mesh dimensions besides dp: --tp, --pp, --cp; --sequence-parallel and --loss-parallel
    // ("true"/"false").
    std::optional<int64_t> tp, pp, cp;
    std::optional<int64_t> pp_virtual_stages;  // --pp-virtual-stages V (Interleaved1F1B)
    std::optional<std::string> sequence_parallel, loss_parallel, async_tp;
    // --pp-schedule GPipe|1F1B|Interleaved1F1B; --pp-stage-blocks "9,10,10,3" (blocks per stage).
    std::optional<std::string> pp_schedule, pp_stage_blocks;
    // Checkpoints: --checkpoint none|full|sharded, --checkpoint-every STEPS, and the full save's
    // --checkpoint-offload-to-cpu / --checkpoint-rank0-only ("true"/"false").
    std::optional<std::string> checkpoint, checkpoint_offload_to_cpu, checkpoint_rank0_only;
    std::optional<int64_t> checkpoint_every;
    std::optional<double> clip_grad_norm;  // --clip-grad-norm MAX_NORM (0: none)
    std::optional<std::string> lora;       // --lora RANK[:MODULES] (0: none)
    std::optional<std::string> all_gather_dtype;  // --all-gather-dtype param|fp8
};

// Defaults used when there is no plan file.
inline constexpr const char* kDefaultGpu = "H100-SXM";
inline constexpr int kDefaultNodes = 1;
inline constexpr int kDefaultGpusPerNode = 8;

// The plan file (if any) with the overrides applied. Not yet validated: see validatePlan (the
// evaluation API validates).
Result<Plan> buildPlan(const PlanOverrides& overrides);

// Writes planToJson(plan) atomically to `path`, rewriting file references (model config, wrap
// modules file) relative to the written file's folder so the plan reads back from anywhere.
Status writePlanFile(const Plan& plan, const std::filesystem::path& path);

}  // namespace shardcast::core
