#include "core/model/model_scale.hpp"

#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/model/model_io.hpp"

namespace shardcast::core {

namespace {

constexpr int64_t kMaxScaleValue = int64_t{1} << 40;
constexpr int64_t kWidthMultiple = 8;  // MLP widths are kept multiples of 8 (tensor-core friendly)

// The config keys a model type names its sizes with.
struct SizeKeys {
    const char* hidden;
    const char* layers;
    const char* heads;
    const char* intermediate;  // may be absent or null in the config (gpt2's n_inner)
    bool rotary;               // head_dim must be even (rotary embeddings rotate pairs)
    bool width = true;         // hidden= applies (DeepSeek-V3's latent and head sizes do not follow it)
};

std::optional<SizeKeys> sizeKeys(const std::string& model_type) {
    if (model_type == "gpt2") return SizeKeys{"n_embd", "n_layer", "n_head", "n_inner", false};
    if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3" ||
        model_type == "gemma" || model_type == "gemma2" || model_type == "olmo2" || model_type == "phi3" ||
        model_type == "mixtral" || model_type == "gpt_neox") {
        return SizeKeys{"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", true};
    }
    if (model_type == "deepseek_v3") return SizeKeys{"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", true, false};
    return std::nullopt;
}

Result<int64_t> positiveInt(const nlohmann::json& config, const char* key, const std::string& where) {
    const auto it = config.find(key);
    if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) {
        return makeError(fmt::format("{}: field '{}' must be a positive integer to scale the model", where, key));
    }
    return it->get<int64_t>();
}

}  // namespace

Result<ScaleSpec> parseScale(std::string_view text, std::string_view where) {
    ScaleSpec spec;
    if (text.empty()) return makeError(fmt::format("{}: empty; expected KEY=N[,KEY=N...] with keys hidden, layers, seq", where));
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = text.find(',', pos);
        const std::string_view item = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos) {
            return makeError(fmt::format("{}: '{}' is not KEY=N; valid keys: hidden, layers, seq", where, item));
        }
        const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
        std::optional<int64_t>* target = key == "hidden"   ? &spec.model.hidden
                                         : key == "layers" ? &spec.model.layers
                                         : key == "seq"    ? &spec.seq_len
                                                           : nullptr;
        if (!target) return makeError(fmt::format("{}: unknown key '{}'; valid: hidden, layers, seq", where, key));
        if (target->has_value()) return makeError(fmt::format("{}: key '{}' is given twice", where, key));
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec != std::errc{} || end != value.data() + value.size() || v < 1 || v > kMaxScaleValue) {
            return makeError(fmt::format("{}: {} must be a positive integer (got '{}')", where, key, value));
        }
        *target = v;
        if (comma == std::string_view::npos) break;
        pos = comma + 1;
    }
    return spec;
}

std::string scaleString(const ModelScale& scale) {
    std::string s;
    if (scale.hidden) s += fmt::format("hidden={}", *scale.hidden);
    if (scale.layers) s += fmt::format("{}layers={}", s.empty() ? "" : ",", *scale.layers);
    return s;
}

Result<nlohmann::json> scaleHfConfig(const nlohmann::json& config, const ModelScale& scale, const std::string& where) {
    if (!config.is_object() || !config.contains("model_type") || !config.at("model_type").is_string()) {
        return makeError(where + ": not a HuggingFace config with a model_type; only those can be scaled");
    }
    const std::string type = config.at("model_type").get<std::string>();
    const auto keys = sizeKeys(type);
    if (!keys) return makeError(fmt::format("{}: model_type '{}' cannot be scaled", where, type));
    nlohmann::json out = config;
    if (scale.hidden && !keys->width) {
        return makeError(fmt::format("{}: model_type '{}' scales by layers only (its attention's latent and head sizes "
                                     "are not a share of hidden); use layers=L",
                                     where, type));
    }
    if (scale.hidden) {
        auto h0 = positiveInt(config, keys->hidden, where);
        if (!h0) return h0.error();
        auto heads = positiveInt(config, keys->heads, where);
        if (!heads) return heads.error();
        const int64_t h = *scale.hidden;
        const int64_t step = keys->rotary ? 2 * *heads : *heads;
        if (h % step != 0) {
            return makeError(fmt::format(
                "{}: hidden={} must be a positive multiple of {} ({} attention heads{}), e.g. {}", where, h, step,
                *heads, keys->rotary ? " x 2: rotary embeddings need an even head_dim" : "",
                std::max<int64_t>(step, h / step * step)));
        }
        out[keys->hidden] = h;
        if (config.contains("head_dim")) out["head_dim"] = h / *heads;
        const auto inter = config.find(keys->intermediate);
        if (inter != config.end() && !inter->is_null()) {
            auto i0 = positiveInt(config, keys->intermediate, where);
            if (!i0) return i0.error();
            const double scaled = static_cast<double>(*i0) * static_cast<double>(h) / static_cast<double>(*h0);
            const auto rounded = static_cast<int64_t>(std::llround(scaled / kWidthMultiple)) * kWidthMultiple;
            out[keys->intermediate] = std::max(kWidthMultiple, rounded);
        }
    }
    if (scale.layers) {
        auto l0 = positiveInt(config, keys->layers, where);
        if (!l0) return l0.error();
        out[keys->layers] = *scale.layers;
        // Per-layer lists (newer configs) keep their first L entries.
        if (const auto lt = config.find("layer_types"); lt != config.end() && lt->is_array()) {
            if (static_cast<int64_t>(lt->size()) < *scale.layers) {
                return makeError(fmt::format("{}: layers={} is more than the {} entries of 'layer_types'", where,
                                             *scale.layers, lt->size()));
            }
            out["layer_types"] = nlohmann::json(lt->begin(), lt->begin() + *scale.layers);
        }
    }
    return out;
}

Result<Model> scaleModel(const Model& model, const ModelScale& scale) {
    if (scale.empty()) return model;
    if (model.arch.model_type.empty()) {
        return makeError(fmt::format(
            "{}: a module-tree model cannot be scaled (its sizes are per module, not a hidden size and a "
            "block count); scale a HuggingFace config instead",
            model.source.empty() ? model.name : model.source));
    }
    auto config = readJsonFile(model.source);
    if (!config) return makeError("scaling " + model.name + ": " + config.error().message);
    auto scaled = scaleHfConfig(*config, scale, model.source);
    if (!scaled) return scaled.error();
    const std::string base_name = model.name.substr(0, model.name.find('@'));  // a scaled model's base
    return importHfConfig(*scaled, base_name + "@" + scaleString(scale), model.source);
}

}  // namespace shardcast::core
