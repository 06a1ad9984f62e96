#pragma once
// Shrinking a large model while keeping its shape of units (`--scale hidden=H,layers=L,seq=S`), so
// a plan for a 70B runs on a CPU: the same blocks, the same attention and MLP layout, the same
// head counts (so the same GQA ratio), the same vocabulary; fewer and narrower blocks.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/model/model.hpp"

namespace shardcast::core {

// What changes in the model: hidden size and block count (each optional).
struct ModelScale {
    std::optional<int64_t> hidden, layers;
    bool empty() const { return !hidden && !layers; }
    bool operator==(const ModelScale&) const = default;
};

// A parsed `--scale` value: the model part and the sequence length (a training field).
struct ScaleSpec {
    ModelScale model;
    std::optional<int64_t> seq_len;
};

// "hidden=512,layers=4,seq=256", any subset in any order, each key once, positive integers. Errors
// start with `where` (the flag or the plan file field) and name the valid keys.
Result<ScaleSpec> parseScale(std::string_view text, std::string_view where);

// Canonical spelling of the model part, "hidden=512,layers=4" (empty when nothing is scaled); what
// a plan file's "scale" holds and what follows '@' in a scaled model's name.
std::string scaleString(const ModelScale& scale);

// A HuggingFace config with hidden_size (n_embd) set to H, the MLP width scaled by the same ratio
// and rounded to a multiple of 8, head_dim = H / heads (head counts kept, so H must be a multiple of
// the attention head count), and num_hidden_layers (n_layer) set to L. Errors name `where`.
Result<nlohmann::json> scaleHfConfig(const nlohmann::json& config, const ModelScale& scale, const std::string& where);

// `model` re-imported from its config file (Model::source) scaled by `scale`, named
// "NAME@hidden=H,layers=L". Scaling starts from the config file, so scaling a scaled model replaces
// its scale. Module-tree models have no config to scale: an error says so.
Result<Model> scaleModel(const Model& model, const ModelScale& scale);

}  // namespace shardcast::core
