#pragma once
// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") as PEFT applies it
// to a model before FSDP wraps it: each targeted linear `M` becomes `M.base_layer` (the frozen
// original) beside two trainable adapters, `M.lora_A.default` ([rank, in]) and
// `M.lora_B.default` ([out, rank]), and its output becomes base(x) + lora_B(lora_A(x)) * scaling
// (peft/tuners/lora/layer.py, Linear.forward, lora_dropout 0).
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/model/model.hpp"

namespace shardcast::core {

// The linear modules `targets` selects, PEFT's rule for a list of target_modules: a module whose
// name equals a target or ends with "." + target. Empty `targets`: the attention projections (the
// linear modules whose parent's name contains "attn" or "attention": q/k/v/o_proj, GPT-2's c_attn
// and c_proj). Errors start with `where`: a target that matches no linear module names the
// linear module names that would.
Result<std::vector<int32_t>> loraTargetModules(const Model& model, const std::vector<std::string>& targets,
                                               const std::string& where);

// `base` with rank-`rank` adapters on `modules` (from loraTargetModules). Adapter parameters are
// marked Param::lora; the lowering freezes every other parameter. Op costs follow PEFT's forward:
// the adapter GEMMs read the base layer's input (saved once), lora_B keeps lora_A's [tokens, rank]
// output, and the scale and add run as two eager kernels.
Model addLoraAdapters(const Model& base, int rank, const std::vector<int32_t>& modules);

// What a model's adapters are (for reports and emitted code): the adapted modules' names in model
// order, their distinct last names ("q_proj", ...), whether a module not adapted shares one of those
// last names (then PEFT's target_modules must list full names), and the adapter parameters.
struct LoraSummary {
    int64_t modules = 0;
    int64_t adapter_params = 0;
    std::vector<std::string> names;
    std::vector<std::string> adapted;
    bool names_ambiguous = false;
};
LoraSummary loraSummary(const Model& model);

}  // namespace shardcast::core
