#pragma once
// The flags that describe a plan, shared by `plan`, `simulate` and `sweep`: a plan file as the
// base, then every flag the user gave overrides the matching field.
#include <cstdint>
#include <optional>
#include <string>

#include "core/plan.hpp"
#include "core/result.hpp"

namespace CLI {
class App;
}

namespace shardcast::cli {

// Each field is set only when the user gave the flag, so a plan file's value survives otherwise.
struct PlanOptions {
    std::string plan_file;  // positional PLAN.json, may be empty
    std::optional<std::string> model, gpu, strategy, wrap, param_dtype, reduce_dtype, master_dtype,
        optimizer, ac, attention, kernels, offload, reshard_after_forward, frozen;
    std::optional<int64_t> nodes, gpus_per_node, shard_size, fsdp, micro_batch, seq_len, grad_accum;
    bool no_sync = false;
};

// Defaults used when there is no plan file (shown in --help).
inline constexpr const char* kDefaultGpu = "H100-SXM";
inline constexpr int kDefaultNodes = 1;
inline constexpr int kDefaultGpusPerNode = 8;

// Adds the positional PLAN.json and every plan flag to `cmd`; values land in `opts`.
void addPlanOptions(CLI::App& cmd, PlanOptions& opts);

// The plan file (if any) with the flags applied. Not yet validated: see validatePlan.
core::Result<core::Plan> buildPlan(const PlanOptions& opts);

struct ValidatedPlan {
    core::Plan plan;
    core::Mesh mesh;
};
// buildPlan followed by core::validatePlan.
core::Result<ValidatedPlan> buildValidatedPlan(const PlanOptions& opts);

// Writes core::planToJson(plan) to `path`, rewriting file references (model config, wrap
// modules file) relative to the written file's folder so the plan reads back from anywhere.
core::Status writePlanFile(const core::Plan& plan, const std::string& path);

}  // namespace shardcast::cli
