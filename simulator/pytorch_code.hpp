#pragma once
// The PyTorch (FSDP2, fully_shard) code that applies a plan's units (DESIGN.md section 5).
#include <string>
#include <string_view>
#include <vector>

#include "core/plan/plan.hpp"

namespace shardcast::sim {

// "model.layers.17" -> "model.model.layers[17]": a module FQN relative to the *ForCausalLM root
// as Python attribute access on the variable `root` (numeric components become indices).
std::string pythonModuleExpr(std::string_view fqn, std::string_view root = "model");

// A snippet that builds the device mesh (1-D ("shard",), or 2-D ("replicate", "shard") for hybrid
// strategies and NO_SHARD; with tensor parallelism ("dp_replicate", "dp_shard", "tp"), then
// torchtitan's Llama TP plan with parallelize_module, and fully_shard over the dp dimensions), the MixedPrecisionPolicy, checkpoint_wrapper on the blocks the plan's
// activation checkpointing wraps (full, layer:K, op, blocks:...; per block in its own mode), one
// fully_shard call per unit in `units`
// (each a list of module FQNs; one module is passed without list brackets), then the root.
std::string pytorchCode(const core::Plan& plan, const core::Mesh& mesh, const std::vector<std::vector<std::string>>& units);

// The module FQNs of each unit of `plan`'s wrap policy but the root (pytorchCode adds it); empty
// when the policy does not resolve.
std::vector<std::vector<std::string>> unitsOfPlan(const core::Plan& plan);

// Units of a Modules wrap policy: each entry split at '+'.
std::vector<std::vector<std::string>> unitsOfPolicy(const core::WrapPolicy& wrap);

}  // namespace shardcast::sim
