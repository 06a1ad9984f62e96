#include "core/plan/plan.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/base/json_text.hpp"
#include "core/base/limits.hpp"
#include "core/model/model_io.hpp"
#include "core/model/model_lora.hpp"
#include "core/plan/wrap.hpp"

namespace shardcast::core {

namespace {

using nlohmann::json;

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

std::string trim(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return std::string(s.substr(b, e - b));
}

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
    std::string out;
    for (const auto& s : items) {
        if (!out.empty()) out += sep;
        out += s;
    }
    return out;
}

// Parses a whole string as a non-negative decimal integer.
std::optional<int64_t> parseInt(std::string_view s) {
    int64_t v = 0;
    if (s.empty()) return std::nullopt;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
    return v;
}

constexpr const char* kStrategyChoices =
    "NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD, _HYBRID_SHARD_ZERO2 (aliases ddp, zero2, zero3, hsdp, "
    "hsdp-zero2)";
constexpr const char* kWrapChoices = "whole, block, every:K, min-params:N, modules:FILE";

size_t editDistance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

std::vector<std::string> closestModules(const Model& model, std::string_view fqn, size_t count) {
    std::vector<std::pair<size_t, std::string>> scored;
    for (const auto& m : model.modules) {
        if (m.name.empty()) continue;
        scored.emplace_back(editDistance(fqn, m.name), m.name);
    }
    const size_t n = std::min(count, scored.size());
    std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(n), scored.end());
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) out.push_back(scored[i].second);
    return out;
}

// Splits a "a+b" unit into trimmed FQNs; empty parts are returned as empty strings.
std::vector<std::string> unitModules(std::string_view unit) {
    std::vector<std::string> out;
    for (const std::string_view part : splitUnitEntry(unit)) out.push_back(trim(part));
    return out;
}

// Reads one section object of a plan file with type checks. The first error is kept (it names
// "<where>: <section>.<key>") and later reads are skipped, so a section reads as a flat list.
class SectionReader {
public:
    SectionReader(const json& j, std::string where, std::string section)
        : m_j(j), m_where(std::move(where)), m_section(std::move(section)) {}

    std::string field(std::string_view key) const { return m_section + "." + std::string(key); }
    bool failed() const { return m_error.has_value(); }
    Status status() const {
        if (m_error) return *m_error;
        return Ok{};
    }
    void fail(std::string_view key, const std::string& what) {
        if (!m_error) m_error = makeError(m_where + ": " + field(key) + " " + what);
    }

    void checkKeys(std::initializer_list<const char*> allowed) {
        for (const auto& [key, value] : m_j.items()) {
            const bool known = std::any_of(allowed.begin(), allowed.end(), [&k = key](const char* a) { return k == a; });
            if (!known && !m_error) {
                std::vector<std::string> names(allowed.begin(), allowed.end());
                m_error = makeError(m_where + ": unknown key '" + field(key) + "'; valid keys in " + m_section + ": " +
                                    join(names));
            }
        }
    }

    // The value of `key`, or null when it is absent or an earlier read failed.
    const json* find(std::string_view key) const {
        if (m_error) return nullptr;
        auto it = m_j.find(std::string(key));
        return it == m_j.end() ? nullptr : &*it;
    }

    // Integers keep their value; the range is checked by validatePlan.
    template <class T>
    void integer(std::string_view key, T& out, const char* what) {
        const json* v = find(key);
        if (!v) return;
        if (!v->is_number_integer()) return fail(key, std::string("must be ") + what + " (got " + jsonExcerpt(*v) + ")");
        const bool fits = v->is_number_unsigned() ? std::in_range<T>(v->get<uint64_t>())
                                                  : std::in_range<T>(v->get<int64_t>());
        if (!fits) return fail(key, "is out of range (got " + jsonExcerpt(*v) + ")");
        out = static_cast<T>(v->get<int64_t>());
    }

    // A finite number; the range is checked by validatePlan.
    void number(std::string_view key, double& out, const char* what) {
        const json* v = find(key);
        if (!v) return;
        if (!v->is_number() || !std::isfinite(v->get<double>())) {
            return fail(key, std::string("must be ") + what + " (got " + jsonExcerpt(*v) + ")");
        }
        out = v->get<double>();
    }

    void boolean(std::string_view key, bool& out) {
        const json* v = find(key);
        if (!v) return;
        if (!v->is_boolean()) return fail(key, "must be true or false (got " + jsonExcerpt(*v) + ")");
        out = v->get<bool>();
    }

    void string(std::string_view key, std::string& out) {
        const json* v = find(key);
        if (!v) return;
        if (!v->is_string()) return fail(key, "must be a string (got " + jsonExcerpt(*v) + ")");
        out = v->get<std::string>();
    }

    template <class E, class Parse>
    void enumeration(std::string_view key, E& out, Parse parse, const std::string& choices) {
        const json* v = find(key);
        if (!v) return;
        if (!v->is_string()) return fail(key, "must be one of " + choices + " (got " + jsonExcerpt(*v) + ")");
        auto parsed = parse(v->get<std::string>());
        if (!parsed) return fail(key, "'" + v->get<std::string>() + "' is not one of " + choices);
        out = *parsed;
    }

    // A dtype, or null for "no mixed precision for that role".
    void optionalDType(std::string_view key, std::optional<DType>& out) {
        const json* v = find(key);
        if (!v) return;
        if (v->is_null()) {
            out.reset();
            return;
        }
        DType t{};
        enumeration(key, t, parseDType, "fp32, bf16, fp16 or null");
        if (!m_error) out = t;
    }

private:
    const json& m_j;
    std::string m_where;
    std::string m_section;
    std::optional<Error> m_error;
};

Status readTraining(const json& j, const std::string& where, TrainingSpec& t) {
    SectionReader r(j, where, "training");
    r.checkKeys({"micro_batch", "seq_len", "grad_accum", "no_sync", "optimizer", "param_dtype", "reduce_dtype",
                 "master_dtype", "ac", "attention", "kernels", "impl", "offload", "hf_mask", "frozen", "allocator",
                 "clip_grad_norm", "lora", "all_gather_dtype"});
    r.integer("micro_batch", t.micro_batch, "a positive integer");
    r.integer("seq_len", t.seq_len, "a positive integer");
    r.integer("grad_accum", t.grad_accum, "a positive integer");
    r.boolean("no_sync", t.no_sync);
    r.enumeration("optimizer", t.optimizer, parseOptimizer, "adamw, adamw-fused, sgd, sgd-momentum");
    r.optionalDType("param_dtype", t.param_dtype);
    r.optionalDType("reduce_dtype", t.reduce_dtype);
    r.enumeration("master_dtype", t.master_dtype, parseDType, "fp32, bf16, fp16");
    AcSpec ac = acSpecOf(t);
    r.enumeration("ac", ac, parseAcSpec,
                  std::string(kAcChoices) +
                      " (\"selective\" is ambiguous: torchtitan's is layer:K or op, Megatron's attn-core)");
    applyAc(t, ac);
    r.enumeration("attention", t.attention, parseAttention, "flash, eager");
    r.enumeration("kernels", t.kernels, parseKernelImpl, "eager, fused, compile");
    r.enumeration("impl", t.impl, parseModelImpl, "hf, torchtitan");
    r.enumeration("offload", t.offload, parseOffload, "none, cpu");
    r.enumeration("hf_mask", t.hf_mask, parseHfMask, "5.x, 4.5x");
    r.string("frozen", t.frozen_regex);
    r.enumeration("allocator", t.allocator, parseAllocatorMode, "caching, expandable");
    r.number("clip_grad_norm", t.clip_grad_norm, "a number >= 0 (clip_grad_norm_'s max_norm; 0: no clipping)");
    r.enumeration("all_gather_dtype", t.all_gather_dtype, parseAllGatherDtype, "param, fp8");
    std::string lora = "0";
    r.string("lora", lora);
    if (!r.status()) return r.status();
    auto parsed = parseLora(lora, where + ": training.lora");
    if (!parsed) return parsed.error();
    t.lora = std::move(parsed).value();
    return Ok{};
}

Status readCheckpoint(const json& j, const std::string& where, CheckpointSpec& c) {
    SectionReader r(j, where, "checkpoint");
    r.checkKeys({"mode", "every_steps", "offload_to_cpu", "rank0_only"});
    r.enumeration("mode", c.mode, parseCheckpointMode, "none, full, sharded");
    r.integer("every_steps", c.every_steps, "a positive integer (optimizer steps between saves)");
    r.boolean("offload_to_cpu", c.offload_to_cpu);
    r.boolean("rank0_only", c.rank0_only);
    return r.status();
}

Status readSharding(const json& j, const std::string& where, const std::filesystem::path& base_dir,
                    ShardingSpec& s) {
    SectionReader r(j, where, "sharding");
    r.checkKeys({"strategy", "shard_size", "fsdp", "wrap", "reshard_after_forward", "prefetch_depth",
                 "forward_prefetch", "backward_prefetch", "limit_all_gathers", "tp", "sequence_parallel",
                 "loss_parallel", "async_tp", "pp", "pp_schedule", "pp_virtual_stages", "pp_stage_blocks", "cp"});
    r.integer("tp", s.tp, "a positive integer (tensor-parallel degree)");
    r.boolean("sequence_parallel", s.sequence_parallel);
    r.boolean("loss_parallel", s.loss_parallel);
    r.boolean("async_tp", s.async_tp);
    r.integer("pp", s.pp, "a positive integer (pipeline stages)");
    r.enumeration("pp_schedule", s.pp_schedule, parsePpSchedule, std::string(kPpScheduleChoices));
    r.integer("pp_virtual_stages", s.pp_virtual_stages, "a positive integer (stages per pipeline rank, Interleaved1F1B)");
    if (const json* v = r.find("pp_stage_blocks")) {
        bool ok = v->is_array() && v->size() <= static_cast<size_t>(limits::kMaxLayers);
        std::vector<int> blocks;
        for (size_t i = 0; ok && i < v->size(); ++i) {
            const json& e = (*v)[i];
            ok = e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= limits::kMaxLayers;
            if (ok) blocks.push_back(static_cast<int>(e.get<int64_t>()));
        }
        if (!ok) {
            return makeError(fmt::format("{}: sharding.pp_stage_blocks must be a list of block counts, one per pipeline "
                                         "stage (non-negative integers up to {}), e.g. [9, 10, 10, 3]",
                                         where, limits::kMaxLayers));
        }
        s.pp_stage_blocks = std::move(blocks);
    }
    r.integer("cp", s.cp, "a positive integer (context-parallel degree)");
    r.enumeration("strategy", s.strategy, parseStrategy, kStrategyChoices);
    r.integer("shard_size", s.shard_size, "a positive integer (or 0 for the default)");
    r.integer("fsdp", s.fsdp_version, "1 or 2");
    r.integer("prefetch_depth", s.prefetch_depth, "a non-negative integer");
    r.boolean("forward_prefetch", s.forward_prefetch);
    r.enumeration("backward_prefetch", s.backward_prefetch, parseBackwardPrefetch, "pre, post, none");
    r.boolean("limit_all_gathers", s.limit_all_gathers);

    if (const json* v = r.find("reshard_after_forward")) {
        if (v->is_boolean()) {
            s.reshard_after_forward = v->get<bool>() ? ReshardMode::True : ReshardMode::False;
        } else if (v->is_string() && lower(v->get<std::string>()) == "default") {
            s.reshard_after_forward = ReshardMode::Default;
        } else if (v->is_number_integer()) {
            r.integer("reshard_after_forward", s.reshard_after_forward_k, "a positive integer");
            s.reshard_after_forward = ReshardMode::Count;
        } else {
            r.fail("reshard_after_forward",
                   "must be true, false, \"default\" or a positive integer K (got " + jsonExcerpt(*v) + ")");
        }
    }

    if (const json* v = r.find("wrap")) {
        if (v->is_string()) {
            std::string text = v->get<std::string>();
            std::string file;
            if (lower(text).rfind("modules:", 0) == 0) {
                // The module list is relative to the plan's folder; keep the path as written.
                file = text.substr(std::string_view("modules:").size());
                const std::filesystem::path p(file);
                text = "modules:" + (p.is_absolute() || file.empty() ? p : base_dir / p).string();
            }
            auto w = parseWrapPolicy(text, where + ": " + r.field("wrap"));
            if (!w) return w.error();
            s.wrap = std::move(*w);
            if (s.wrap.kind == WrapKind::Modules) s.wrap.modules_file = file;
        } else if (v->is_array()) {
            WrapPolicy w;
            w.kind = WrapKind::Modules;
            for (const auto& item : *v) {
                if (!item.is_string()) {
                    r.fail("wrap", "module list entries must be strings (got " + jsonExcerpt(item) + ")");
                    break;
                }
                w.modules.push_back(item.get<std::string>());
            }
            s.wrap = std::move(w);
        } else {
            r.fail("wrap", std::string("must be one of ") + kWrapChoices + " or a list of module names (got " +
                               jsonExcerpt(*v) + ")");
        }
    }
    return r.status();
}

Status readCluster(const json& j, const std::string& where, const std::filesystem::path& base_dir,
                   ClusterSpec& c) {
    SectionReader r(j, where, "cluster");
    r.checkKeys({"gpu", "nodes", "gpus_per_node", "storage_bytes_per_s_per_node", "failures_per_gpu_hour"});
    r.integer("nodes", c.nodes, "a positive integer");
    r.integer("gpus_per_node", c.gpus_per_node, "a positive integer");
    r.number("storage_bytes_per_s_per_node", c.storage_bytes_per_s_per_node, "a positive number (bytes/s)");
    r.number("failures_per_gpu_hour", c.failures_per_gpu_hour, "a number >= 0 (failures per GPU and hour)");
    if (const json* v = r.find("gpu")) {
        if (v->is_object()) {
            auto gpu = gpuFromJson(*v, where + ": cluster.gpu");
            if (!gpu) return gpu.error();
            c.gpu = std::move(*gpu);
        } else if (v->is_string()) {
            const std::string name = v->get<std::string>();
            if (auto preset = findGpuPreset(name)) {
                c.gpu = *preset;
            } else {
                const std::filesystem::path p(name);
                const std::filesystem::path resolved = p.is_absolute() ? p : base_dir / p;
                std::error_code ec;
                if (!std::filesystem::is_regular_file(resolved, ec)) {
                    std::vector<std::string> presets;
                    for (const auto& g : gpuPresets()) presets.push_back(g.name);
                    r.fail("gpu", "'" + name + "' is neither a GPU preset (" + join(presets) +
                                      ") nor a GPU JSON file (looked for " + resolved.string() + ")");
                } else {
                    auto gpu = resolveGpu(resolved.string());
                    if (!gpu) return makeError(where + ": cluster.gpu: " + gpu.error().message);
                    c.gpu = std::move(*gpu);
                }
            }
        } else {
            r.fail("gpu", "must be a GPU preset name, a GPU JSON file or a GPU object (got " + jsonExcerpt(*v) + ")");
        }
    }
    return r.status();
}

bool isBundledModel(const std::string& name) {
    const auto names = bundledModelNames();
    return std::find(names.begin(), names.end(), name) != names.end();
}

bool sameGpu(const GpuSpec& a, const GpuSpec& b) { return gpuToJson(a) == gpuToJson(b); }

bool isFloatDType(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

Status validateWrap(const Plan& plan) {
    const WrapPolicy& w = plan.sharding.wrap;
    const Model& model = *plan.model;
    const bool needs_blocks = w.kind == WrapKind::Block || w.kind == WrapKind::EveryK;
    if (w.kind == WrapKind::EveryK && w.k < 1) {
        return makeError("sharding.wrap every:K needs K >= 1 (got " + std::to_string(w.k) + ")");
    }
    if (w.kind == WrapKind::MinParams && w.min_params < 1) {
        return makeError("sharding.wrap min-params:N needs N >= 1 (got " + std::to_string(w.min_params) + ")");
    }
    if (needs_blocks && model.blocks.empty()) {
        return makeError("sharding.wrap '" + wrapPolicyString(w) + "' needs transformer blocks, but model '" +
                         model.name + "' has none; use min-params:N, modules:FILE or whole");
    }
    if (w.kind == WrapKind::Modules) {
        const std::string src = w.modules_file.empty() ? std::string("sharding.wrap") : w.modules_file;
        if (w.modules.empty()) return makeError(src + ": the module list is empty");
        std::set<std::string> seen;
        for (const auto& unit : w.modules) {
            for (const auto& fqn : unitModules(unit)) {
                if (fqn.empty()) return makeError(src + ": empty module name in unit '" + unit + "'");
                if (model.findModule(fqn) < 0) {
                    return makeError(src + ": module '" + fqn + "' is not in model '" + model.name +
                                     "'; closest: " + join(closestModules(model, fqn, 3)));
                }
                if (!seen.insert(fqn).second) {
                    return makeError(src + ": module '" + fqn + "' is listed twice; a module belongs to one unit");
                }
            }
        }
    }
    return Ok{};
}

// An embedded model {"name": NAME, "config": OBJECT}: the config is a module tree when it has
// "format", else a HuggingFace config.json, as loadModelFile decides for a file.
Result<Model> readEmbeddedModel(const json& m, const std::string& where) {
    const std::string field = where + ": model";
    for (const auto& [key, value] : m.items()) {
        if (key != "name" && key != "config") {
            return makeError(field + ": unknown key '" + key + "' in an embedded model; valid keys: name, config");
        }
    }
    const auto name = m.find("name");
    if (name == m.end() || !name->is_string() || name->get<std::string>().empty()) {
        return makeError(field + ".name must be a non-empty string naming the embedded model (got " +
                         (name == m.end() ? std::string("nothing") : jsonExcerpt(*name)) + ")");
    }
    const auto config = m.find("config");
    if (config == m.end() || !config->is_object()) {
        return makeError(field + ".config must be the model's config.json or module-tree object (got " +
                         (config == m.end() ? std::string("nothing") : std::string(config->type_name())) + ")");
    }
    auto model = config->contains("format") ? importModuleTree(*config, name->get<std::string>(), field + ".config")
                                            : importHfConfig(*config, name->get<std::string>(), field + ".config");
    if (!model) return makeError(field + ".config: " + model.error().message);
    return model;
}

// "scale" applies on top of the model however the plan named it. An embedded config is scaled as
// it stands (scaleModel would read the model's file again, and an embedded model has none).
Status applyScale(const json& j, const std::string& where, Model model, Plan& plan) {
    if (const auto scale_it = j.find("scale"); scale_it != j.end()) {
        if (!scale_it->is_string()) {
            return makeError(where + ": scale must be a string like \"hidden=512,layers=4\" (got " + jsonExcerpt(*scale_it) +
                             ")");
        }
        auto spec = parseScale(scale_it->get<std::string>(), where + ": scale");
        if (!spec) return spec.error();
        if (spec->seq_len) return makeError(where + ": scale: seq is not a model size; set training.seq_len instead");
        plan.scale = spec->model;
        Result<Model> scaled = makeError("");
        if (plan.model_config && !plan.model_config->contains("format")) {
            auto config = scaleHfConfig(*plan.model_config, plan.scale, where + ": model.config");
            if (!config) return makeError(where + ": scale: " + config.error().message);
            scaled = importHfConfig(*config, model.name + "@" + scaleString(plan.scale), model.source);
        } else {
            scaled = scaleModel(model, plan.scale);
        }
        if (!scaled) return makeError(where + ": scale: " + scaled.error().message);
        model = std::move(*scaled);
    }
    plan.model = std::make_shared<const Model>(std::move(model));
    return Ok{};
}

std::string validShardSizes(int world) {
    std::vector<std::string> sizes;
    for (int d = 1; d <= world; ++d) {
        if (world % d == 0) sizes.push_back(std::to_string(d));
    }
    return join(sizes);
}

}  // namespace

namespace {

// One micro-batch's work on one rank, bounded so that a step's sums stay inside int64: forward,
// a recomputed forward and the backward FLOPs of every op, and the bytes it saves, holds
// temporarily and moves.
Status checkMicroBatchWork(const Model& model, const TrainingSpec& t) {
    const int64_t tokens = t.micro_batch * t.seq_len;
    double flops = 0, saved = 0;
    const uint8_t attn_bit = t.attention == AttentionKernel::Flash ? variant::kFlash : variant::kEagerAttn;
    const uint8_t kern_bit = t.kernels == KernelImpl::Eager ? variant::kEagerKernels : variant::kFusedKernels;
    for (const Op& o : model.ops) {
        if (!o.existsUnder(attn_bit, kern_bit)) continue;  // ops of the other implementation
        flops += o.flops.at(tokens, t.seq_len) * (2 + o.bwd_flops_factor);
        // Activation elements counted at 4 bytes (the widest activation dtype).
        for (const Coef* c : {&o.saved_act, &o.saved_f32, &o.saved_act_hf_mask, &o.temp_act, &o.temp_f32,
                              &o.bwd_temp_act, &o.bwd_temp_f32, &o.io_act})
            saved += 4 * c->at(tokens, t.seq_len);
        saved += o.saved_u8.at(tokens, t.seq_len) + 8 * o.saved_i64.at(tokens, t.seq_len);
    }
    if (flops > limits::kMaxFlopsPerMicroBatch) {
        return makeError(fmt::format(
            "training.micro_batch x training.seq_len: one micro-batch of {} x {} tokens is {:.3g} FLOPs of forward, "
            "recompute and backward for model '{}', above the limit of {:.3g} (docs/limits.md); use a smaller "
            "micro-batch or sequence",
            t.micro_batch, t.seq_len, flops, model.name, limits::kMaxFlopsPerMicroBatch));
    }
    if (saved > limits::kMaxSavedBytesPerMicroBatch) {
        return makeError(fmt::format(
            "training.micro_batch x training.seq_len: one micro-batch of {} x {} tokens saves, holds and moves {:.3g} "
            "bytes in model '{}', above the limit of 2^50 bytes (1 PiB, docs/limits.md)",
            t.micro_batch, t.seq_len, saved, model.name));
    }
    return Ok{};
}

}  // namespace

namespace {

std::string divisorsOf(int64_t n, int64_t cap, const std::function<bool(int64_t)>& also) {
    std::vector<std::string> out;
    for (int64_t d = 1; d <= std::min(n, cap); ++d)
        if (n % d == 0 && also(d)) out.push_back(std::to_string(d));
    return join(out);
}

}  // namespace

Result<std::vector<int>> pipelineStageBlocks(int pp, int64_t blocks, const std::vector<int>& given, int virtual_stages) {
    // How the messages name the stage count: pp, or pp x pp_virtual_stages under Interleaved1F1B.
    const std::string named = virtual_stages > 1 ? fmt::format("pp {} x pp_virtual_stages {}", pp, virtual_stages)
                                                 : fmt::format("pp {}", pp);
    pp *= virtual_stages;
    if (!given.empty()) {
        int64_t sum = 0;
        for (int b : given) sum += b;
        if (static_cast<int64_t>(given.size()) != pp || sum != blocks) {
            return makeError(fmt::format("sharding.pp_stage_blocks lists {} stages holding {} blocks; it must list {} = {} "
                                         "stages whose block counts sum to the model's {} blocks",
                                         given.size(), sum, named, pp, blocks));
        }
        for (int i = 1; i + 1 < pp; ++i) {
            if (given[static_cast<size_t>(i)] == 0) {
                return makeError(fmt::format("sharding.pp_stage_blocks: stage {} holds no block; every stage but the first "
                                             "(the embedding) and the last (the norm and output) needs at least one",
                                             i));
            }
        }
        return given;
    }
    // torchtitan's generate_llm_fqn_per_model_part with input_weight = output_weight = 1.
    const int64_t effective = blocks + 2;
    if (pp > effective) {
        return makeError(fmt::format("sharding.{} is more stages than the model's {} blocks plus the embedding and "
                                     "the output ({} in torchtitan's split); valid: 1 to {} stages",
                                     named, blocks, effective, effective));
    }
    const int64_t per = effective / pp, extra = effective % pp;
    if (per < 1) {
        return makeError(fmt::format("sharding.{}: torchtitan's split leaves empty stages; valid: 1 to {} stages", named, effective));
    }
    std::vector<int> out(static_cast<size_t>(pp), 0);
    int64_t left = blocks;
    for (int i = 0; i < pp; ++i) {
        int64_t take = per + (i < extra ? 1 : 0);
        if (i == 0) take -= 1;       // the embedding counts as one block
        if (i == pp - 1) take -= 1;  // the norm and the output count as one block
        take = std::max<int64_t>(0, std::min(take, left));
        out[static_cast<size_t>(i)] = static_cast<int>(take);
        left -= take;
    }
    if (left != 0) {
        return makeError(fmt::format("sharding.{}: torchtitan's split does not place all {} blocks; list them with "
                                     "sharding.pp_stage_blocks",
                                     named, blocks));
    }
    return out;
}

namespace {

// Pipeline parallelism: the stage split, the schedule's needs (torch.distributed.pipelining's
// Schedule1F1B refuses fewer micro-batches than stages) and what it is modelled with.
Status checkPipeline(const Plan& plan, int world) {
    const ShardingSpec& s = plan.sharding;
    const Model& m = *plan.model;
    if (world % s.pp != 0) {
        return makeError(fmt::format("sharding.pp {} must divide the world size {} (each stage holds world / pp ranks); "
                                     "valid: {}",
                                     s.pp, world, divisorsOf(world, static_cast<int64_t>(m.blocks.size()) + 2, [](int64_t) { return true; })));
    }
    if (s.pp_virtual_stages < 1) {
        return makeError(fmt::format("sharding.pp_virtual_stages must be a positive integer (got {})", s.pp_virtual_stages));
    }
    const int64_t mbs = plan.training.grad_accum;
    if (s.pp_schedule == PpSchedule::Interleaved1F1B) {
        if (s.pp_virtual_stages < 2) {
            return makeError("sharding.pp_schedule Interleaved1F1B needs sharding.pp_virtual_stages 2 or more (the stages "
                             "each rank holds); with one stage per rank use 1F1B");
        }
        // ScheduleInterleaved1F1B (torch 2.15 schedules.py): max(1, M // pp) rounds must divide M.
        const int64_t rounds = std::max<int64_t>(1, mbs / s.pp);
        if (mbs % rounds != 0) {
            std::vector<int64_t> valid;
            for (int64_t n = mbs - 1; n >= 1 && valid.size() < 2; --n) {
                if (n % std::max<int64_t>(1, n / s.pp) == 0) valid.insert(valid.begin(), n);
            }
            for (int64_t n = mbs + 1; valid.size() < 4; ++n) {
                if (n % std::max<int64_t>(1, n / s.pp) == 0) valid.push_back(n);
            }
            return makeError(fmt::format("sharding.pp_schedule Interleaved1F1B needs training.grad_accum (the pipeline's "
                                         "micro-batches) to be a multiple of its rounds, max(1, grad_accum / pp) = {}: "
                                         "grad_accum {} is not (torch's ScheduleInterleaved1F1B refuses it); valid near it: {}",
                                         rounds, mbs, fmt::join(valid, ", ")));
        }
    } else if (s.pp_virtual_stages != 1) {
        return makeError(fmt::format("sharding.pp_virtual_stages {} needs sharding.pp_schedule Interleaved1F1B ({} runs "
                                     "one stage per rank); set pp_virtual_stages 1 or the schedule Interleaved1F1B",
                                     s.pp_virtual_stages, ppScheduleName(s.pp_schedule)));
    }
    if (auto split = pipelineStageBlocks(s.pp, static_cast<int64_t>(m.blocks.size()), s.pp_stage_blocks, s.pp_virtual_stages);
        !split) {
        return split.error();
    }
    if (s.pp_schedule == PpSchedule::OneFOneB && plan.training.grad_accum < s.pp) {
        return makeError(fmt::format("sharding.pp_schedule 1F1B needs at least as many micro-batches as stages: "
                                     "training.grad_accum {} < pp {} (torch's Schedule1F1B refuses it); raise grad_accum to "
                                     "{} or more, or use GPipe",
                                     plan.training.grad_accum, s.pp, s.pp));
    }
    if (m.arch.tied_embeddings) {
        return makeError(fmt::format("sharding.pp {}: model '{}' ties its input and output embeddings, which sit on the "
                                     "first and the last stage; pipeline parallelism is not modelled for tied embeddings",
                                     s.pp, m.name));
    }
    if (s.strategy == Strategy::NoShard || s.fsdp_version != 2 || plan.training.offload == Offload::Cpu) {
        return makeError("sharding.pp > 1 is modelled with fully_shard (fsdp 2), a sharded strategy and no CPU offload, "
                         "as torchtitan applies it");
    }
    return Ok{};
}

// The mesh dimensions besides data parallelism: tp (with its sequence and loss parallelism),
// pp, and cp, which is named but not modelled yet.
Status checkParallelDims(const Plan& plan, int world) {
    const ShardingSpec& s = plan.sharding;
    const ClusterSpec& c = plan.cluster;
    const Model& m = *plan.model;
    if (s.pp < 1) return makeError(fmt::format("sharding.pp must be a positive integer (got {})", s.pp));
    if (s.pp > 1) {
        if (auto st = checkPipeline(plan, world); !st) return st;
    } else if (!s.pp_stage_blocks.empty()) {
        return makeError("sharding.pp_stage_blocks is set but sharding.pp is 1; set pp to the number of stages it lists");
    } else if (s.pp_virtual_stages != 1 || s.pp_schedule == PpSchedule::Interleaved1F1B) {
        return makeError("sharding.pp_virtual_stages and the Interleaved1F1B schedule need sharding.pp > 1 (pipeline ranks)");
    }
    if (s.cp != 1) {
        return makeError(fmt::format("sharding.cp {}: context parallelism is not modelled; use cp 1", s.cp));
    }
    if (s.tp < 1) return makeError(fmt::format("sharding.tp must be a positive integer (got {})", s.tp));
    if (s.async_tp) {
        if (s.tp == 1) return makeError("sharding.async_tp needs sharding.tp > 1 (it overlaps tensor-parallel collectives)");
        if (!s.sequence_parallel) {
            return makeError("sharding.async_tp needs sequence_parallel: it overlaps the all-gathers and reduce-scatters "
                             "of sequence parallelism with their matmuls");
        }
        if (plan.training.kernels != KernelImpl::Compile) {
            return makeError("sharding.async_tp needs training.kernels compile: async TP is torch._inductor's "
                             "micro-pipelined TP, which runs under torch.compile (torchtitan requires compile for it)");
        }
    }
    if (s.tp == 1) return Ok{};
    if (m.tp_plan.empty()) {
        return makeError(fmt::format(
            "sharding.tp {}: model '{}' has no tensor-parallel plan (torchtitan's Llama plan covers llama, mistral, "
            "qwen2 and qwen3 configs without experts or tied embeddings; GPT-2 has Megatron-LM's plan); use tp 1",
            s.tp, m.name));
    }
    const int64_t heads = m.arch.heads, kv = m.arch.kv_heads;
    auto valid = [&](int64_t d) {
        return c.gpus_per_node % d == 0 && heads % d == 0 && kv % d == 0 && world % d == 0;
    };
    const std::string choices = divisorsOf(c.gpus_per_node, c.gpus_per_node, valid);
    if (c.gpus_per_node % s.tp != 0) {
        return makeError(fmt::format("sharding.tp {} must divide the {} GPUs per node (a tp group runs inside a node "
                                     "over NVLink); valid: {}",
                                     s.tp, c.gpus_per_node, choices));
    }
    if (heads % s.tp != 0 || kv % s.tp != 0) {
        return makeError(fmt::format("sharding.tp {} must divide the attention heads ({}) and key-value heads ({}) of "
                                     "model '{}'; valid: {}",
                                     s.tp, heads, kv, m.name, choices));
    }
    if (world % (s.tp * s.pp) != 0) {
        if (s.pp > 1) {
            return makeError(fmt::format("sharding.tp {} times sharding.pp {} must divide the world size {}", s.tp, s.pp,
                                         world));
        }
        return makeError(fmt::format("sharding.tp {} must divide the world size {}; valid: {}", s.tp, world, choices));
    }
    if (s.sequence_parallel && plan.training.seq_len % s.tp != 0) {
        return makeError(fmt::format("sharding.tp {} with sequence_parallel must divide training.seq_len {} (each tp "
                                     "rank holds seq_len / tp tokens of the residual stream); change the sequence "
                                     "length or set sequence_parallel false",
                                     s.tp, plan.training.seq_len));
    }
    if (s.strategy == Strategy::NoShard) {
        return makeError("sharding.tp > 1 needs a sharded strategy (FULL_SHARD, SHARD_GRAD_OP or a hybrid one): "
                         "fully_shard over the dp mesh; NO_SHARD with tensor parallelism is not modelled");
    }
    if (s.fsdp_version != 2) {
        return makeError("sharding.tp > 1 needs fsdp 2: fully_shard composes with DTensor tensor parallelism, "
                         "FullyShardedDataParallel (fsdp 1) is not modelled with it");
    }
    if (plan.training.offload == Offload::Cpu) {
        return makeError("sharding.tp > 1 with training.offload cpu is not modelled; use offload none");
    }
    return Ok{};
}

}  // namespace

namespace {

Status validateCheckpoint(const CheckpointSpec& k, const ClusterSpec& c) {
    if (!(c.storage_bytes_per_s_per_node > 0) || !(c.storage_bytes_per_s_per_node <= 1e15)) {
        return makeError(fmt::format("cluster.storage_bytes_per_s_per_node must be a positive number of bytes/s up to 1e15 "
                                     "(got {})", c.storage_bytes_per_s_per_node));
    }
    if (!(c.failures_per_gpu_hour >= 0) || !(c.failures_per_gpu_hour <= 1)) {
        return makeError(fmt::format("cluster.failures_per_gpu_hour must be between 0 and 1 (got {}; Meta's Llama 3 "
                                     "cluster saw {:.3g})",
                                     c.failures_per_gpu_hour, kDefaultFailuresPerGpuHour));
    }
    if (k.mode == CheckpointMode::None) return Ok{};
    if (k.every_steps < 1 || k.every_steps > 100'000'000) {
        return makeError(fmt::format("checkpoint.every_steps must be a positive number of optimizer steps between saves, "
                                     "at most 1e8 (got {}); torchtitan's default is {}",
                                     k.every_steps, kDefaultCheckpointEverySteps));
    }
    if (k.mode == CheckpointMode::Sharded && (k.offload_to_cpu || k.rank0_only)) {
        return makeError("checkpoint.offload_to_cpu and checkpoint.rank0_only are options of a full save (mode full); a "
                         "sharded save writes every rank's own shards");
    }
    return Ok{};
}

}  // namespace

Result<Mesh> validatePlan(const Plan& plan) { return validatePlan(plan, nullptr); }

Result<Mesh> validatePlan(const Plan& plan, PlanCheckMemo* memo) {
    if (!plan.model) return makeError("model: no model loaded");
    const TrainingSpec& t = plan.training;
    const ClusterSpec& c = plan.cluster;
    const ShardingSpec& s = plan.sharding;

    auto positive = [](const char* field, int64_t v) -> Status {
        if (v >= 1) return Ok{};
        return makeError(std::string(field) + " must be a positive integer (got " + std::to_string(v) + ")");
    };
    if (auto st = positive("training.micro_batch", t.micro_batch); !st) return st.error();
    if (auto st = validateCheckpoint(plan.checkpoint, c); !st) return st.error();
    if (auto st = positive("training.seq_len", t.seq_len); !st) return st.error();
    if (auto st = positive("training.grad_accum", t.grad_accum); !st) return st.error();
    if (!(t.clip_grad_norm >= 0) || !(t.clip_grad_norm <= 1e30)) {
        return makeError(fmt::format("training.clip_grad_norm must be a number from 0 (no clipping) to 1e30, the max_norm "
                                     "of clip_grad_norm_ (got {})",
                                     t.clip_grad_norm));
    }
    if (auto st = positive("cluster.nodes", c.nodes); !st) return st.error();
    if (auto st = positive("cluster.gpus_per_node", c.gpus_per_node); !st) return st.error();
    // Upper bounds keep every byte count inside int64 and the Program a sane size.
    // Upper bounds (docs/limits.md) keep every figure of the lowering inside int64.
    if (t.seq_len > limits::kMaxSeqLen) {
        return makeError("training.seq_len must be at most 16,777,216 tokens (got " + std::to_string(t.seq_len) + ")");
    }
    if (t.micro_batch > limits::kMaxMicroBatch) {
        return makeError("training.micro_batch must be at most 65,536 sequences (got " + std::to_string(t.micro_batch) + ")");
    }
    if (t.micro_batch * t.seq_len > limits::kMaxTokensPerMicroBatch) {
        return makeError("training.micro_batch x training.seq_len must be at most 268,435,456 tokens per micro-batch (got " +
                         std::to_string(t.micro_batch * t.seq_len) + ")");
    }
    if (t.grad_accum > limits::kMaxGradAccum) {
        return makeError("training.grad_accum must be at most 4096 micro-batches per step (got " + std::to_string(t.grad_accum) + ")");
    }
    if (static_cast<int64_t>(c.nodes) * c.gpus_per_node > limits::kMaxWorld) {
        return makeError("cluster.nodes x cluster.gpus_per_node must be at most 1,048,576 GPUs");
    }
    if (t.ac == Checkpointing::Blocks) {
        AcSpec ac = acSpecOf(t);
        if (auto e = resolveAcBlocks(ac, static_cast<int64_t>(plan.model->blocks.size()), "training.ac")) return makeError(*e);
    }
    const bool work_known = memo && memo->model == plan.model && memo->micro_batch == t.micro_batch &&
                            memo->seq_len == t.seq_len && memo->attention == t.attention && memo->kernels == t.kernels;
    if (!work_known) {
        if (auto work = checkMicroBatchWork(*plan.model, t); !work) return work.error();
        if (memo) *memo = PlanCheckMemo{plan.model, t.micro_batch, t.seq_len, t.attention, t.kernels};
    }
    if (c.gpu.memory_bytes <= 0) {
        return makeError("cluster.gpu.memory_bytes must be positive (GPU '" + c.gpu.name + "')");
    }

    if (t.impl == ModelImpl::Torchtitan && plan.model->arch.model_type != "llama") {
        return makeError("training.impl torchtitan models torchtitan's Llama (torchtitan/models/llama3); model '" +
                         plan.model->name + "' has model_type '" + plan.model->arch.model_type +
                         "': use impl hf, or a llama model");
    }
    if (t.param_dtype && *t.param_dtype == DType::F8) {
        return makeError("training.param_dtype fp8 is not supported as a parameter dtype; use bf16, fp16 or fp32");
    }
    if (t.param_dtype && !isFloatDType(*t.param_dtype)) {
        return makeError("training.param_dtype '" + std::string(dtypeName(*t.param_dtype)) +
                         "' is not one of fp32, bf16, fp16 (or null)");
    }
    if (t.reduce_dtype && !isFloatDType(*t.reduce_dtype)) {
        return makeError("training.reduce_dtype '" + std::string(dtypeName(*t.reduce_dtype)) +
                         "' is not one of fp32, bf16, fp16 (or null)");
    }
    if (!isFloatDType(t.master_dtype)) {
        return makeError("training.master_dtype '" + std::string(dtypeName(t.master_dtype)) +
                         "' is not one of fp32, bf16, fp16");
    }
    if (!t.frozen_regex.empty()) {
        if (auto pattern = limits::checkFrozenPattern(t.frozen_regex, "training.frozen"); !pattern) return pattern.error();
    }
    if (t.lora.enabled()) {
        if (!plan.base_model) {
            return makeError("training.lora is set but the plan's model carries no adapters (core::applyLora was not run)");
        }
        if (s.tp > 1) {
            return makeError(fmt::format("training.lora with tensor parallelism (sharding.tp {}) is not modelled: the TP plan "
                                         "has no rule for the adapters; use tp 1",
                                         s.tp));
        }
    }
    if (t.all_gather_dtype == AllGatherDtype::Fp8) {
        auto refuse = [](const std::string& why) {
            return makeError("training.all_gather_dtype fp8 (torchao float8 training with FSDP2's float8 all-gather) " + why);
        };
        if (s.fsdp_version != 2) return refuse("needs FSDP2 (sharding.fsdp 2): torchao extends fully_shard's all-gather");
        if (s.strategy == Strategy::NoShard) return refuse("needs a sharded strategy: NO_SHARD gathers nothing");
        if (t.computeDtype() != DType::BF16) return refuse("needs training.param_dtype bf16: the other layers compute in bf16");
        if (t.lora.enabled()) return refuse("with training.lora is not modelled");
        if (!plan.cluster.gpu.host_device && plan.cluster.gpu.peak_flops_fp8 <= 0) {
            return refuse("needs a GPU with fp8 tensor cores; " + plan.cluster.gpu.name +
                          " has none (peak_flops_fp8 0): H100, H200, B200 or another with peak_flops_fp8 set");
        }
    }
    if (t.offload == Offload::Cpu && s.strategy == Strategy::NoShard) {
        return makeError("training.offload cpu needs a sharded strategy: FSDP CPU offload keeps sharded "
                         "parameters on the host; use FULL_SHARD, SHARD_GRAD_OP or a hybrid strategy");
    }

    if (s.fsdp_version != 1 && s.fsdp_version != 2) {
        return makeError("sharding.fsdp must be 1 (FullyShardedDataParallel) or 2 (fully_shard) (got " +
                         std::to_string(s.fsdp_version) + ")");
    }
    if (s.prefetch_depth < 0) {
        return makeError("sharding.prefetch_depth must be a non-negative integer (got " +
                         std::to_string(s.prefetch_depth) + ")");
    }

    Mesh mesh;
    mesh.world_size = c.worldSize();
    if (auto tp = checkParallelDims(plan, mesh.world_size); !tp) return tp.error();
    mesh.tp = s.tp;
    mesh.pp = s.pp;
    mesh.virtual_stages = s.pp > 1 ? s.pp_virtual_stages : 1;
    if (s.pp > 1) {
        mesh.stage_blocks =
            *pipelineStageBlocks(s.pp, static_cast<int64_t>(plan.model->blocks.size()), s.pp_stage_blocks, mesh.virtual_stages);
    }
    // The data-parallel ranks: FSDP's mesh is the world's dp part (world / (tp * pp)).
    const int world = mesh.world_size / (mesh.tp * mesh.pp);
    // How the messages below name that size.
    const std::string ranks_name =
        mesh.tp * mesh.pp > 1
            ? fmt::format("data-parallel size (world / {})", mesh.pp > 1 ? fmt::format("(tp {} x pp {})", mesh.tp, mesh.pp)
                                                                          : fmt::format("tp {}", mesh.tp))
            : std::string("world size");
    if (s.shard_size < 0) {
        return makeError("sharding.shard_size must be a positive integer or 0 for the default (got " +
                         std::to_string(s.shard_size) + ")");
    }
    switch (s.strategy) {
        case Strategy::NoShard:
            if (s.shard_size != 0 && s.shard_size != 1 && s.shard_size != world) {
                return makeError("sharding.shard_size " + std::to_string(s.shard_size) +
                                 " does not apply to NO_SHARD (it replicates over all " + std::to_string(world) +
                                 " ranks); use HYBRID_SHARD to shard over a subgroup");
            }
            mesh.shard_size = 1;
            break;
        case Strategy::ShardGradOp:
        case Strategy::FullShard:
            if (s.shard_size != 0 && s.shard_size != world) {
                return makeError("sharding.shard_size " + std::to_string(s.shard_size) + " differs from the " + ranks_name + " " +
                                 std::to_string(world) + ": " + std::string(strategyName(s.strategy)) +
                                 " shards over all ranks; use HYBRID_SHARD (or _HYBRID_SHARD_ZERO2) to shard over " +
                                 std::to_string(s.shard_size) + " ranks and replicate across groups");
            }
            mesh.shard_size = world;
            break;
        case Strategy::HybridShard:
        case Strategy::HybridShardZero2:
            mesh.shard_size = s.shard_size == 0 ? std::min(std::max(c.gpus_per_node / mesh.tp, 1), world) : s.shard_size;
            if (world % mesh.shard_size != 0) {
                return makeError("sharding.shard_size: " + ranks_name + " " + std::to_string(world) +
                                 " is not divisible by shard_size " + std::to_string(mesh.shard_size) +
                                 "; valid shard sizes: " + validShardSizes(world));
            }
            break;
    }
    mesh.replicate_size = world / mesh.shard_size;

    if (s.reshard_after_forward == ReshardMode::Count) {
        const int k = s.reshard_after_forward_k;
        if (s.fsdp_version != 2) {
            return makeError("sharding.reshard_after_forward " + std::to_string(k) +
                             ": an integer is only valid with fsdp 2 (fully_shard); use true or false with fsdp 1");
        }
        if (k < 1 || mesh.shard_size % k != 0) {
            return makeError("sharding.reshard_after_forward " + std::to_string(k) +
                             " must be a positive divisor of the shard size " + std::to_string(mesh.shard_size) +
                             "; valid: " + validShardSizes(mesh.shard_size));
        }
    }

    if (auto st = validateWrap(plan); !st) return st.error();
    return mesh;
}

Result<WrapPolicy> parseWrapPolicy(const std::string& text, const std::string& where) {
    const std::string t = trim(text);
    const std::string key = lower(t);
    WrapPolicy w;
    auto bad = [&](const std::string& why) {
        return makeError(where + ": wrap '" + text + "' " + why + "; valid forms: " + kWrapChoices);
    };
    if (key == "whole") {
        w.kind = WrapKind::Whole;
    } else if (key == "block") {
        w.kind = WrapKind::Block;
    } else if (key.rfind("every:", 0) == 0) {
        auto k = parseInt(std::string_view(t).substr(6));
        if (!k || *k < 1) return bad("needs a positive integer K in every:K");
        w.kind = WrapKind::EveryK;
        w.k = *k;
    } else if (key.rfind("min-params:", 0) == 0) {
        auto n = parseInt(std::string_view(t).substr(11));
        if (!n || *n < 1) return bad("needs a positive integer N in min-params:N");
        w.kind = WrapKind::MinParams;
        w.min_params = *n;
    } else if (key.rfind("modules:", 0) == 0) {
        const std::string file = t.substr(8);
        if (file.empty()) return bad("needs a file name in modules:FILE");
        auto list = readFileBounded(file, kMaxTextFileBytes, "module list");
        if (!list) return makeError(where + ": " + list.error().message);
        std::istringstream in(*list);
        w.kind = WrapKind::Modules;
        w.modules_file = file;
        std::string line;
        int line_no = 0;
        while (std::getline(in, line)) {
            ++line_no;
            if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
            const std::string unit = trim(line);
            if (unit.empty()) continue;
            std::vector<std::string> parts = unitModules(unit);
            for (const auto& p : parts) {
                if (p.empty()) {
                    return makeError(file + ":" + std::to_string(line_no) + ": empty module name in unit '" +
                                     unit + "' (join module names with '+')");
                }
            }
            w.modules.push_back(join(parts, "+"));
        }
        if (w.modules.empty()) return makeError(file + ": the module list is empty (one module name per line)");
    } else {
        return bad("is not a wrap policy");
    }
    return w;
}

Result<Plan> planFromJson(const nlohmann::json& j, const std::string& where,
                          const std::filesystem::path& base_dir) {
    if (!j.is_object()) return makeError(where + ": a plan must be a JSON object (got " + std::string(j.type_name()) + ")");
    for (const auto& [key, value] : j.items()) {
        if (key != "model" && key != "scale" && key != "cluster" && key != "training" && key != "sharding" &&
            key != "checkpoint" && key != "about" && key != "format" && key != "version") {
            return makeError(where + ": unknown key '" + key +
                             "'; valid keys: format, version, model, scale, cluster, training, sharding, checkpoint, about");
        }
    }
    // Hand-written plans may leave the header out; a written one carries it, and a newer version is refused.
    if (j.contains("format") || j.contains("version")) {
        if (auto s = checkDocumentHeader(j, "plan", kPlanFormatVersion, where); !s) return s.error();
    }
    Plan plan;
    plan.cluster.gpu = *findGpuPreset("H100-SXM");

    auto model_it = j.find("model");
    if (model_it == j.end()) {
        return makeError(where + ": model is required: a bundled model name (" + join(bundledModelNames()) +
                         ") or a path to a config.json / module-tree file");
    }
    if (model_it->is_object()) {
        auto embedded = readEmbeddedModel(*model_it, where);
        if (!embedded) return embedded.error();
        plan.model_ref = model_it->at("name").get<std::string>();
        plan.model_config = std::make_shared<const json>(model_it->at("config"));
        if (auto st = applyScale(j, where, std::move(*embedded), plan); !st) return st.error();
    } else if (model_it->is_string()) {
        plan.model_ref = model_it->get<std::string>();
        std::string ref = plan.model_ref;
        if (!isBundledModel(ref)) {
            const std::filesystem::path p(ref);
            const std::filesystem::path resolved = p.is_absolute() ? p : base_dir / p;
            std::error_code ec;
            if (std::filesystem::exists(resolved, ec)) ref = resolved.string();
        }
        auto model = resolveModel(ref);
        if (!model) return makeError(where + ": model: " + model.error().message);
        if (auto st = applyScale(j, where, std::move(*model), plan); !st) return st.error();
    } else {
        return makeError(where + ": model must be a string naming a bundled model or a file, or an embedded "
                         "model {\"name\": ..., \"config\": {...}} (got " + jsonExcerpt(*model_it) + ")");
    }

    auto section = [&](const char* name) -> Result<const json*> {
        auto it = j.find(name);
        if (it == j.end()) return static_cast<const json*>(nullptr);
        if (!it->is_object()) {
            return makeError(where + ": " + name + " must be a JSON object (got " + jsonExcerpt(*it) + ")");
        }
        return &*it;
    };
    auto cluster = section("cluster");
    if (!cluster) return cluster.error();
    if (*cluster) {
        if (auto st = readCluster(**cluster, where, base_dir, plan.cluster); !st) return st.error();
    }
    auto training = section("training");
    if (!training) return training.error();
    if (*training) {
        if (auto st = readTraining(**training, where, plan.training); !st) return st.error();
        AcSpec ac = acSpecOf(plan.training);
        if (plan.model) {
            if (auto e = resolveAcBlocks(ac, static_cast<int64_t>(plan.model->blocks.size()), "training.ac")) {
                return makeError(where + ": " + *e);
            }
        }
        applyAc(plan.training, ac);
    }
    auto sharding = section("sharding");
    if (!sharding) return sharding.error();
    if (*sharding) {
        if (auto st = readSharding(**sharding, where, base_dir, plan.sharding); !st) return st.error();
    }
    auto checkpoint = section("checkpoint");
    if (!checkpoint) return checkpoint.error();
    if (*checkpoint) {
        if (auto st = readCheckpoint(**checkpoint, where, plan.checkpoint); !st) return st.error();
    }

    if (auto st = applyLora(plan, where + ": training.lora"); !st) return st.error();
    auto mesh = validatePlan(plan);
    if (!mesh) return makeError(where + ": " + mesh.error().message);
    return plan;
}

Status applyLora(Plan& plan, const std::string& where) {
    if (plan.base_model) {
        plan.model = std::move(plan.base_model);
        plan.base_model.reset();
    }
    const LoraSpec& lora = plan.training.lora;
    if (!lora.enabled() || !plan.model) return Ok{};
    if (!plan.training.frozen_regex.empty()) {
        return makeError(where + ": LoRA freezes every parameter but the adapters; training.frozen (--frozen) cannot be "
                         "combined with it (give one of them)");
    }
    auto modules = loraTargetModules(*plan.model, lora.targets, where);
    if (!modules) return modules.error();
    plan.base_model = plan.model;
    plan.model = std::make_shared<const Model>(addLoraAdapters(*plan.base_model, lora.rank, *modules));
    return Ok{};
}

Result<Plan> loadPlanFile(const std::filesystem::path& path) {
    auto j = readJsonFile(path);
    if (!j) {
        const std::string& msg = j.error().message;
        if (msg.find(path.string()) != std::string::npos) return j.error();
        return makeError(path.string() + ": " + msg);
    }
    return planFromJson(*j, path.string(), path.parent_path());
}

nlohmann::json planToJson(const Plan& plan) {
    json j = documentHeader("plan", kPlanFormatVersion);
    if (plan.model_config) {
        j["model"] = json{{"name", plan.model_ref}, {"config", *plan.model_config}};
    } else {
        j["model"] = plan.model_ref;
    }
    if (!plan.scale.empty()) j["scale"] = scaleString(plan.scale);

    const ClusterSpec& c = plan.cluster;
    json cluster;
    auto preset = findGpuPreset(c.gpu.name);
    cluster["gpu"] = preset && sameGpu(*preset, c.gpu) ? json(c.gpu.name) : gpuToJson(c.gpu);
    cluster["nodes"] = c.nodes;
    cluster["gpus_per_node"] = c.gpus_per_node;
    // Written only when not the defaults (Meta's Llama 3 cluster), as plans before them read.
    if (c.storage_bytes_per_s_per_node != kDefaultStorageBytesPerSPerNode) {
        cluster["storage_bytes_per_s_per_node"] = c.storage_bytes_per_s_per_node;
    }
    if (c.failures_per_gpu_hour != kDefaultFailuresPerGpuHour) cluster["failures_per_gpu_hour"] = c.failures_per_gpu_hour;
    j["cluster"] = std::move(cluster);

    const TrainingSpec& t = plan.training;
    json training;
    training["micro_batch"] = t.micro_batch;
    training["seq_len"] = t.seq_len;
    training["grad_accum"] = t.grad_accum;
    training["no_sync"] = t.no_sync;
    training["optimizer"] = std::string(optimizerName(t.optimizer));
    training["param_dtype"] = t.param_dtype ? json(std::string(dtypeName(*t.param_dtype))) : json(nullptr);
    training["reduce_dtype"] = t.reduce_dtype ? json(std::string(dtypeName(*t.reduce_dtype))) : json(nullptr);
    training["master_dtype"] = std::string(dtypeName(t.master_dtype));
    training["ac"] = acString(acSpecOf(t));
    training["attention"] = std::string(attentionName(t.attention));
    training["kernels"] = std::string(kernelImplName(t.kernels));
    training["impl"] = std::string(modelImplName(t.impl));
    training["offload"] = std::string(offloadName(t.offload));
    training["hf_mask"] = std::string(hfMaskName(t.hf_mask));
    training["frozen"] = t.frozen_regex;
    training["allocator"] = std::string(allocatorModeName(t.allocator));
    if (t.clip_grad_norm > 0) training["clip_grad_norm"] = t.clip_grad_norm;
    if (t.lora.enabled()) training["lora"] = loraString(t.lora);
    if (t.all_gather_dtype != AllGatherDtype::Param) training["all_gather_dtype"] = std::string(allGatherDtypeName(t.all_gather_dtype));
    j["training"] = std::move(training);

    const ShardingSpec& s = plan.sharding;
    json sharding;
    sharding["strategy"] = std::string(strategyName(s.strategy));
    sharding["shard_size"] = s.shard_size;
    sharding["fsdp"] = s.fsdp_version;
    if (s.wrap.kind == WrapKind::Modules && s.wrap.modules_file.empty()) {
        sharding["wrap"] = s.wrap.modules;
    } else {
        sharding["wrap"] = wrapPolicyString(s.wrap);
    }
    switch (s.reshard_after_forward) {
        case ReshardMode::Default: sharding["reshard_after_forward"] = "default"; break;
        case ReshardMode::True: sharding["reshard_after_forward"] = true; break;
        case ReshardMode::False: sharding["reshard_after_forward"] = false; break;
        case ReshardMode::Count: sharding["reshard_after_forward"] = s.reshard_after_forward_k; break;
    }
    sharding["prefetch_depth"] = s.prefetch_depth;
    sharding["forward_prefetch"] = s.forward_prefetch;
    sharding["backward_prefetch"] = std::string(backwardPrefetchName(s.backward_prefetch));
    sharding["limit_all_gathers"] = s.limit_all_gathers;
    // Written when set, so that a plan without tensor parallelism keeps its document (and its
    // store hash) from before the field existed.
    if (s.tp != 1) {
        sharding["tp"] = s.tp;
        sharding["sequence_parallel"] = s.sequence_parallel;
        sharding["loss_parallel"] = s.loss_parallel;
        sharding["async_tp"] = s.async_tp;
    }
    if (s.pp != 1) {
        sharding["pp"] = s.pp;
        sharding["pp_schedule"] = std::string(ppScheduleName(s.pp_schedule));
        if (s.pp_virtual_stages != 1) sharding["pp_virtual_stages"] = s.pp_virtual_stages;
        if (!s.pp_stage_blocks.empty()) sharding["pp_stage_blocks"] = s.pp_stage_blocks;
    }
    if (s.cp != 1) sharding["cp"] = s.cp;
    j["sharding"] = std::move(sharding);
    if (plan.checkpoint.mode != CheckpointMode::None) {  // written only when checkpoints are planned
        const CheckpointSpec& k = plan.checkpoint;
        j["checkpoint"] = json{{"mode", std::string(checkpointModeName(k.mode))},
                               {"every_steps", k.every_steps},
                               {"offload_to_cpu", k.offload_to_cpu},
                               {"rank0_only", k.rank0_only}};
    }
    return j;
}

Result<nlohmann::json> selfContainedPlanJson(const Plan& plan) {
    json j = planToJson(plan);
    if (!plan.model_config && !isBundledModel(plan.model_ref)) {
        // Model::source is the resolved file the model was read from (scaling keeps it).
        const std::filesystem::path file = plan.model ? plan.model->source : plan.model_ref;
        auto config = readJsonFile(file);
        if (!config) return makeError("model: " + config.error().message);
        if (!config->is_object()) return makeError(file.string() + ": expected a JSON object at the top level");
        j["model"] = json{{"name", file.stem().string()}, {"config", std::move(*config)}};
    }
    const WrapPolicy& w = plan.sharding.wrap;
    if (w.kind == WrapKind::Modules) j["sharding"]["wrap"] = w.modules;
    return j;
}

}  // namespace shardcast::core
