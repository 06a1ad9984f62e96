#include "configs/config_import.hpp"
#include "configs/try_assign.hpp"

// toml++ 3.3 (Debian 12's) asserts preconditions its parser does not check on some malformed input
// (found by fuzzing: "[" then a newline fails parse_key's), and under NDEBUG it turns those asserts
// into optimiser assumptions, which is undefined behaviour. Here its asserts throw instead, in every
// build, so that malformed TOML is an error naming the file. All of toml++ is used in this one
// source, so no other translation unit sees it otherwise.
#include <stdexcept>
namespace shardcast::configs {
struct TomlAssertion : std::logic_error {
    using std::logic_error::logic_error;
};
}  // namespace shardcast::configs
#ifdef NDEBUG
#define SHARDCAST_TOML_NDEBUG
#undef NDEBUG
#endif
#define TOML_ASSERT(expr) ((expr) ? static_cast<void>(0) : throw ::shardcast::configs::TomlAssertion(#expr))
// Some of its asserts sit in noexcept accessors (toml::path_component) this code never calls.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wterminate"
#endif
#include <toml++/toml.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#ifdef SHARDCAST_TOML_NDEBUG
#define NDEBUG
#undef SHARDCAST_TOML_NDEBUG
#endif

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "core/base/file_io.hpp"

namespace shardcast::configs {
namespace {

// What each section's keys are: read into the plan, or read and of no effect on memory or time.
// A section listed with an empty key set is ignored whole (logging, profiling, ...).
struct SectionKeys {
    std::set<std::string> used;
    std::set<std::string> ignored;
    bool whole_ignored = false;
};

const std::map<std::string, SectionKeys>& torchtitanSections() {
    static const std::map<std::string, SectionKeys> sections = {
        {"job", {{}, {}, true}},
        {"profiling", {{}, {}, true}},
        {"metrics", {{}, {}, true}},
        {"lr_scheduler", {{}, {}, true}},
        {"validation", {{}, {}, true}},
        {"comm", {{}, {}, true}},
        {"memory_estimation", {{}, {}, true}},
        {"fault_tolerance", {{}, {}, true}},
        {"experimental", {{}, {}, true}},
        {"model", {{"name", "flavor", "converters"}, {"hf_assets_path", "tokenizer_path", "print_after_conversion"}}},
        {"optimizer",
         {{"name", "early_step_in_backward", "implementation"}, {"lr", "eps", "weight_decay", "beta1", "beta2"}}},
        {"training",
         {{"local_batch_size", "batch_size", "global_batch_size", "seq_len", "dtype", "mixed_precision_param",
           "mixed_precision_reduce", "enable_cpu_offload", "compile", "max_norm"},
          {"dataset", "dataset_path", "steps", "gc_freq", "gc_debug", "seed", "deterministic", "dataloader",
           "warmup_steps"}}},
        {"parallelism",
         {{"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
           "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel", "pipeline_parallel_degree",
           "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
           "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
           "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size", "context_parallel_degree",
           "expert_parallel_degree", "expert_tensor_parallel_degree"},
          {"pipeline_parallel_expert_parallel_overlap", "context_parallel_load_balancer", "context_parallel_rotate_method",
           "expert_parallel_comm_backend", "pipeline_parallel_split_points", "enable_compiled_autograd"}}},
        {"checkpoint",
         {{"enable", "enable_checkpoint", "interval", "async_mode"},
          {"folder", "initial_load_path", "initial_load_model_only", "initial_load_in_hf", "initial_load_in_hf_quantized",
           "last_save_model_only", "last_save_in_hf", "export_dtype", "keep_latest_k", "load_step",
           "exclude_from_loading", "enable_first_step_checkpoint", "create_seed_checkpoint", "load_only",
           "model_weights_only", "enable_ft_dataloader_checkpoints", "interval_type"}}},
        {"activation_checkpoint",
         {{"mode", "selective_ac_option"},
          {"per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop", "memory_budget", "visualize_memory_budget_pareto",
           "preserve_rng_state", "determinism_check", "debug"}}},
        {"compile", {{"enable", "components"}, {"backend"}}},
        // float8 options: read when model.converters holds "float8" (torchao float8 training); the
        // others (emulate, moe_fqns_prototype, ...) are accepted unread. MX's are refused with it.
        {"float8",
         {{"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "recipe_name", "filter_fqns"},
          {},
          true}},
        {"quantize", {{}, {}, true}},
    };
    return sections;
}

class TomlReader {
public:
    TomlReader(const toml::table& root, const std::string& where, ImportedConfig& out)
        : m_root(root), m_where(where), m_out(out) {}

    // Every section and key accounted for (SectionKeys); the first unknown one is the error.
    core::Status checkKeys() {
        const auto& sections = torchtitanSections();
        for (auto&& [name, node] : m_root) {
            const std::string section(name.str());
            const auto found = sections.find(section);
            if (found == sections.end()) {
                std::vector<std::string> known;
                for (const auto& [k, v] : sections) known.push_back(k);
                return core::makeError(fmt::format("{}: unknown torchtitan section [{}]; known: {}", m_where, section,
                                                   fmt::join(known, ", ")));
            }
            if (found->second.whole_ignored) {
                m_out.ignored.push_back("[" + section + "]");
                continue;
            }
            const toml::table* t = node.as_table();
            if (t == nullptr) return core::makeError(fmt::format("{}: {} must be a table ([{}])", m_where, section, section));
            for (auto&& [key_name, value] : *t) {
                const std::string key(key_name.str());
                if (found->second.used.count(key) != 0) continue;
                if (found->second.ignored.count(key) != 0) {
                    m_out.ignored.push_back(section + "." + key);
                    continue;
                }
                std::vector<std::string> known(found->second.used.begin(), found->second.used.end());
                known.insert(known.end(), found->second.ignored.begin(), found->second.ignored.end());
                std::sort(known.begin(), known.end());
                return core::makeError(fmt::format("{}: unknown key {}.{}; torchtitan's [{}] keys shardcast knows: {}", m_where,
                                                   section, key, section, fmt::join(known, ", ")));
            }
        }
        return core::Ok{};
    }

    const toml::node* find(std::string_view section, std::string_view key) const {
        const toml::table* t = m_root[section].as_table();
        return t == nullptr ? nullptr : t->get(key);
    }

    // A value of `section.key`, or `fallback` (torchtitan's default) when absent; a value of the
    // wrong type is an error naming the key.
    core::Result<int64_t> integer(std::string_view section, std::string_view key, int64_t fallback) const {
        const toml::node* n = find(section, key);
        if (n == nullptr) return fallback;
        if (auto v = n->value_exact<int64_t>()) return *v;
        return typeError(section, key, "an integer");
    }
    // A float or an integer (torchtitan's `float | int` fields).
    core::Result<double> number(std::string_view section, std::string_view key, double fallback) const {
        const toml::node* n = find(section, key);
        if (n == nullptr) return fallback;
        if (auto v = n->value_exact<double>()) return *v;
        if (auto v = n->value_exact<int64_t>()) return static_cast<double>(*v);
        return typeError(section, key, "a number");
    }
    core::Result<bool> boolean(std::string_view section, std::string_view key, bool fallback) const {
        const toml::node* n = find(section, key);
        if (n == nullptr) return fallback;
        if (auto v = n->value_exact<bool>()) return *v;
        return typeError(section, key, "true or false");
    }
    core::Result<std::string> string(std::string_view section, std::string_view key, std::string fallback) const {
        const toml::node* n = find(section, key);
        if (n == nullptr) return fallback;
        if (auto v = n->value_exact<std::string>()) return *v;
        return typeError(section, key, "a string");
    }
    // A list of strings (a single string is a list of one, as torchtitan's parser accepts).
    core::Result<std::vector<std::string>> strings(std::string_view section, std::string_view key) const {
        std::vector<std::string> out;
        const toml::node* n = find(section, key);
        if (n == nullptr) return out;
        if (auto v = n->value_exact<std::string>()) {
            out.push_back(*v);
            return out;
        }
        const toml::array* a = n->as_array();
        if (a == nullptr) return typeError(section, key, "a list of strings");
        for (const toml::node& e : *a) {
            auto v = e.value_exact<std::string>();
            if (!v) return typeError(section, key, "a list of strings");
            out.push_back(*v);
        }
        return out;
    }
    core::Error error(std::string_view section, std::string_view key, const std::string& what) const {
        return core::Error{fmt::format("{}: {}.{} {}", m_where, section, key, what)};
    }

private:
    core::Error typeError(std::string_view section, std::string_view key, const char* what) const {
        const toml::node* n = find(section, key);
        const auto line = n != nullptr ? n->source().begin.line : 0;
        return error(section, key, fmt::format("must be {} (line {})", what, line));
    }

    const toml::table& m_root;
    const std::string& m_where;
    ImportedConfig& m_out;
};

core::Status mapTorchtitan(const TomlReader& r, const std::string& where, const ConfigContext& context, ImportedConfig& out) {
    core::PlanOverrides& o = out.overrides;
    auto mapped = [&out](std::string text) { out.mapped.push_back(std::move(text)); };

    // [model]
    SHARDCAST_TRY_ASSIGN(name, r.string("model", "name", "llama3"));
    SHARDCAST_TRY_ASSIGN(flavor, r.string("model", "flavor", "debugmodel"));
    if (name != "llama3") {
        return r.error("model", "name", fmt::format("is '{}'; shardcast reads torchtitan's llama3 (flavors 8B, 70B, 405B)", name));
    }
    static const std::map<std::string, std::string> flavors = {
        {"8B", "llama-3.1-8b"}, {"70B", "llama-3.1-70b"}, {"405B", "llama-3.1-405b"}};
    const auto model = flavors.find(flavor);
    if (model == flavors.end()) {
        return r.error("model", "flavor", fmt::format("is '{}'; valid: 8B, 70B, 405B (torchtitan's llama3 flavors with a "
                                                      "HuggingFace config bundled here)", flavor));
    }
    o.model = model->second;
    o.impl = "torchtitan";
    mapped(fmt::format("model llama3 {} -> --model {} --impl torchtitan", flavor, model->second));
    SHARDCAST_TRY_ASSIGN(converters, r.strings("model", "converters"));
    if (!converters.empty()) {
        if (converters != std::vector<std::string>{"float8"}) {
            return r.error("model", "converters",
                           fmt::format("is [{}]: shardcast models torchao float8 training ([\"float8\"]) only, not MX",
                                       fmt::join(converters, ", ")));
        }
        // torchtitan's Float8LinearConverter (torchtitan/components/quantization/float8.py).
        SHARDCAST_TRY_ASSIGN(fp8_gather, r.boolean("float8", "enable_fsdp_float8_all_gather", false));
        SHARDCAST_TRY_ASSIGN(precompute, r.boolean("float8", "precompute_float8_dynamic_scale_for_fsdp", false));
        SHARDCAST_TRY_ASSIGN(recipe, r.string("float8", "recipe_name", ""));
        SHARDCAST_TRY_ASSIGN(filters, r.strings("float8", "filter_fqns"));
        if (!fp8_gather) {
            return r.error("float8", "enable_fsdp_float8_all_gather",
                           "is false: float8 GEMMs with a bf16 all-gather are not modelled; set it true (--all-gather-dtype fp8)");
        }
        if (!precompute) {
            return r.error("float8", "precompute_float8_dynamic_scale_for_fsdp",
                           "is false: an amax all-reduce per weight before each all-gather is not modelled; set it true");
        }
        if (!recipe.empty() && recipe != "tensorwise") {
            return r.error("float8", "recipe_name",
                           fmt::format("is '{}'; shardcast models the tensorwise recipe (the one the float8 all-gather takes)",
                                       recipe));
        }
        if (!filters.empty() && filters != std::vector<std::string>{"output"}) {
            return r.error("float8", "filter_fqns",
                           fmt::format("is [{}]; shardcast converts every linear but the output (filter_fqns = [\"output\"])",
                                       fmt::join(filters, ", ")));
        }
        o.all_gather_dtype = "fp8";
        mapped("model.converters [\"float8\"] with float8.enable_fsdp_float8_all_gather and "
               "precompute_float8_dynamic_scale_for_fsdp -> --all-gather-dtype fp8");
    }

    // [optimizer]
    SHARDCAST_TRY_ASSIGN(optimizer, r.string("optimizer", "name", "AdamW"));
    if (optimizer != "AdamW" && optimizer != "Adam") {
        return r.error("optimizer", "name", fmt::format("is '{}'; shardcast models AdamW and Adam (two fp32 states per "
                                                        "parameter)", optimizer));
    }
    // torchtitan's default implementation is "fused" (job_config.py: Optimizer.implementation).
    SHARDCAST_TRY_ASSIGN(implementation, r.string("optimizer", "implementation", "fused"));
    if (implementation == "fused") {
        o.optimizer = "adamw-fused";
    } else if (implementation == "foreach") {
        o.optimizer = "adamw";
    } else {
        return r.error("optimizer", "implementation",
                       fmt::format("is '{}'; valid: fused (one kernel pass), foreach (the for-loop implementation, one "
                                   "kernel per tensor and op, is not modelled)",
                                   implementation));
    }
    mapped(fmt::format("optimizer {} ({}) -> --optimizer {}", optimizer, implementation, *o.optimizer));
    SHARDCAST_TRY_ASSIGN(early_step, r.boolean("optimizer", "early_step_in_backward", false));
    if (early_step) return r.error("optimizer", "early_step_in_backward", "is true: an optimizer step inside backward is not modelled");

    // [parallelism]
    SHARDCAST_TRY_ASSIGN(replicate, r.integer("parallelism", "data_parallel_replicate_degree", 1));
    SHARDCAST_TRY_ASSIGN(shard_given, r.integer("parallelism", "data_parallel_shard_degree", -1));
    SHARDCAST_TRY_ASSIGN(tp, r.integer("parallelism", "tensor_parallel_degree", 1));
    SHARDCAST_TRY_ASSIGN(pp, r.integer("parallelism", "pipeline_parallel_degree", 1));
    SHARDCAST_TRY_ASSIGN(cp, r.integer("parallelism", "context_parallel_degree", 1));
    SHARDCAST_TRY_ASSIGN(ep, r.integer("parallelism", "expert_parallel_degree", 1));
    SHARDCAST_TRY_ASSIGN(etp, r.integer("parallelism", "expert_tensor_parallel_degree", 1));
    for (auto [key, v] : {std::pair{"data_parallel_replicate_degree", replicate}, std::pair{"tensor_parallel_degree", tp},
                          std::pair{"pipeline_parallel_degree", pp}}) {
        if (v < 1 || v > 1'000'000) return r.error("parallelism", key, fmt::format("is {}; valid: a positive degree", v));
    }
    if (cp != 1) return r.error("parallelism", "context_parallel_degree", fmt::format("is {}: context parallelism is not modelled; valid: 1", cp));
    if (ep != 1 || etp != 1) {
        return r.error("parallelism", ep != 1 ? "expert_parallel_degree" : "expert_tensor_parallel_degree",
                       "must be 1: expert parallelism is not modelled");
    }
    if (shard_given == 0 || shard_given < -1 || shard_given > 1'000'000) {
        return r.error("parallelism", "data_parallel_shard_degree", fmt::format("is {}; valid: -1 (the ranks left) or a positive degree", shard_given));
    }
    int64_t shard = shard_given;
    int64_t world = 0;
    if (shard == -1) {
        if (!context.world) {
            return r.error("parallelism", "data_parallel_shard_degree",
                           "is -1 (the ranks left after the other degrees): give the GPUs with --nodes and --gpus-per-node");
        }
        world = *context.world;
        const int64_t others = replicate * tp * pp;
        if (world % others != 0) {
            return core::makeError(fmt::format("{}: the {} GPUs of --nodes x --gpus-per-node do not split over "
                                               "data_parallel_replicate_degree {} x tensor_parallel_degree {} x "
                                               "pipeline_parallel_degree {}",
                                               where, world, replicate, tp, pp));
        }
        shard = world / others;
    } else {
        world = replicate * shard * tp * pp;
        if (context.world && *context.world != world) {
            return core::makeError(fmt::format("{}: the config's mesh is {} GPUs (replicate {} x shard {} x tp {} x pp {}) but "
                                               "--nodes x --gpus-per-node gives {}",
                                               where, world, replicate, shard, tp, pp, *context.world));
        }
    }
    if (world % context.gpus_per_node != 0) {
        return core::makeError(fmt::format("{}: the config's {} GPUs are not whole nodes of --gpus-per-node {}", where, world,
                                           context.gpus_per_node));
    }
    o.nodes = world / context.gpus_per_node;
    o.gpus_per_node = context.gpus_per_node;
    o.fsdp = 2;
    if (replicate > 1 && shard > 1) {
        o.strategy = "HYBRID_SHARD";
        o.shard_size = shard;
    } else if (shard == 1 && replicate > 1) {
        o.strategy = "NO_SHARD";
    } else {
        o.strategy = "FULL_SHARD";
    }
    mapped(fmt::format("parallelism: replicate {} x shard {} x tp {} x pp {} = {} GPUs -> --nodes {} --gpus-per-node {} "
                       "--strategy {}{}",
                       replicate, shard, tp, pp, world, *o.nodes, *o.gpus_per_node, *o.strategy,
                       o.shard_size ? fmt::format(" --shard-size {}", *o.shard_size) : std::string()));
    SHARDCAST_TRY_ASSIGN(reshard, r.string("parallelism", "fsdp_reshard_after_forward", "default"));
    if (reshard == "always") {
        o.reshard_after_forward = "true";
    } else if (reshard == "never") {
        o.reshard_after_forward = "false";
    } else if (reshard != "default") {
        return r.error("parallelism", "fsdp_reshard_after_forward", fmt::format("is '{}'; valid: default, always, never", reshard));
    }
    if (tp > 1) {
        o.tp = tp;
        o.sequence_parallel = "true";  // torchtitan's TP plan always shards the norms' sequence
        SHARDCAST_TRY_ASSIGN(no_loss_parallel, r.boolean("parallelism", "disable_loss_parallel", false));
        SHARDCAST_TRY_ASSIGN(async_tp, r.boolean("parallelism", "enable_async_tensor_parallel", false));
        o.loss_parallel = no_loss_parallel ? "false" : "true";
        if (async_tp) o.async_tp = "true";
        mapped(fmt::format("tensor_parallel_degree {} -> --tp {} (sequence parallel, loss parallel {}{})", tp, tp,
                           *o.loss_parallel, async_tp ? ", async TP" : ""));
    }
    if (r.find("parallelism", "module_fqns_per_model_part") != nullptr) {
        return r.error("parallelism", "module_fqns_per_model_part", "is given: explicit stage modules are not read; use "
                                                                     "pipeline_parallel_layers_per_stage or --pp-stage-blocks");
    }
    SHARDCAST_TRY_ASSIGN(csv, r.string("parallelism", "pipeline_parallel_schedule_csv", ""));
    if (!csv.empty()) return r.error("parallelism", "pipeline_parallel_schedule_csv", "is given: a CSV schedule is not read");
    for (const char* key : {"pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"}) {
        SHARDCAST_TRY_ASSIGN(less, r.integer("parallelism", key, 1));
        if (less != 1) return r.error("parallelism", key, fmt::format("is {}; shardcast splits stages as torchtitan's default, 1", less));
    }
    SHARDCAST_TRY_ASSIGN(microbatch, r.integer("parallelism", "pipeline_parallel_microbatch_size", 1));
    if (pp > 1) {
        SHARDCAST_TRY_ASSIGN(schedule, r.string("parallelism", "pipeline_parallel_schedule", "1F1B"));
        if (schedule != "1F1B" && schedule != "GPipe" && schedule != "Interleaved1F1B") {
            return r.error("parallelism", "pipeline_parallel_schedule",
                           fmt::format("is '{}'; valid: 1F1B, GPipe, Interleaved1F1B", schedule));
        }
        o.pp = pp;
        o.pp_schedule = schedule;
        int64_t stages_per_rank = schedule == "Interleaved1F1B" ? 2 : 1;  // torchtitan's default for looped schedules
        const toml::node* lps = r.find("parallelism", "pipeline_parallel_layers_per_stage");
        if (lps != nullptr) {
            SHARDCAST_TRY_ASSIGN(per_stage, r.integer("parallelism", "pipeline_parallel_layers_per_stage", 1));
            if (per_stage < 1) return r.error("parallelism", "pipeline_parallel_layers_per_stage", "must be a positive integer");
            // torchtitan counts the embedding and the output as one layer each.
            static const std::map<std::string, int64_t> layers = {{"8B", 32}, {"70B", 80}, {"405B", 126}};
            const int64_t stages = (layers.at(flavor) + 2 + per_stage - 1) / per_stage;
            if (stages % pp != 0) {
                return r.error("parallelism", "pipeline_parallel_layers_per_stage",
                               fmt::format("is {}: {} stages do not split over pipeline_parallel_degree {} (torchtitan refuses it)",
                                           per_stage, stages, pp));
            }
            stages_per_rank = stages / pp;
            if ((schedule == "Interleaved1F1B") != (stages_per_rank > 1)) {
                return r.error("parallelism", "pipeline_parallel_layers_per_stage",
                               fmt::format("gives {} stages per rank, which schedule {} does not take", stages_per_rank, schedule));
            }
        }
        if (stages_per_rank > 1) o.pp_virtual_stages = stages_per_rank;
        mapped(fmt::format("pipeline_parallel_degree {} -> --pp {} --pp-schedule {}{}", pp, pp, schedule,
                           stages_per_rank > 1 ? fmt::format(" --pp-virtual-stages {}", stages_per_rank) : std::string()));
    }

    // [training]: the micro-batch and the step's micro-batches.
    const bool old_batch = r.find("training", "batch_size") != nullptr;
    SHARDCAST_TRY_ASSIGN(local, r.integer("training", old_batch ? "batch_size" : "local_batch_size", 8));
    SHARDCAST_TRY_ASSIGN(global_given, r.integer("training", "global_batch_size", -1));
    SHARDCAST_TRY_ASSIGN(seq_len, r.integer("training", "seq_len", 2048));
    if (local < 1) return r.error("training", old_batch ? "batch_size" : "local_batch_size", "must be a positive integer");
    const int64_t dp = replicate * shard;
    const int64_t global = global_given == -1 ? local * dp : global_given;
    if (global < 1 || global % (local * dp) != 0) {
        return r.error("training", "global_batch_size",
                       fmt::format("is {}: not a multiple of local_batch_size {} x {} data-parallel ranks", global_given, local, dp));
    }
    const int64_t micro = pp > 1 ? microbatch : local;
    if (micro < 1 || local % micro != 0) {
        return r.error("parallelism", "pipeline_parallel_microbatch_size",
                       fmt::format("is {}: it must divide local_batch_size {}", microbatch, local));
    }
    o.micro_batch = micro;
    o.grad_accum = global / dp / micro;
    o.seq_len = seq_len;
    mapped(fmt::format("training: local_batch_size {}, global_batch_size {}{} over {} data-parallel ranks -> --micro-batch {} "
                       "--grad-accum {} --seq-len {}",
                       local, global, global_given == -1 ? " (local x dp)" : "", dp, micro, *o.grad_accum, seq_len));
    SHARDCAST_TRY_ASSIGN(dtype, r.string("training", "dtype", "float32"));
    SHARDCAST_TRY_ASSIGN(param, r.string("training", "mixed_precision_param", "bfloat16"));
    SHARDCAST_TRY_ASSIGN(reduce, r.string("training", "mixed_precision_reduce", "float32"));
    static const std::map<std::string, std::string> dtypes = {{"float32", "fp32"}, {"bfloat16", "bf16"}};
    for (auto [key, value, target] : {std::tuple{"dtype", &dtype, &o.master_dtype},
                                      std::tuple{"mixed_precision_param", &param, &o.param_dtype},
                                      std::tuple{"mixed_precision_reduce", &reduce, &o.reduce_dtype}}) {
        const auto d = dtypes.find(*value);
        if (d == dtypes.end()) return r.error("training", key, fmt::format("is '{}'; valid: float32, bfloat16", *value));
        *target = d->second;
    }
    SHARDCAST_TRY_ASSIGN(offload, r.boolean("training", "enable_cpu_offload", false));
    if (offload) o.offload = "cpu";
    // torchtitan clips every step (trainer.py: dist_utils.clip_grad_norm_ with training.max_norm,
    // default 1.0, torchtitan/config/configs.py).
    SHARDCAST_TRY_ASSIGN(max_norm, r.number("training", "max_norm", 1.0));
    if (!(max_norm > 0) || !(max_norm <= 1e30)) {
        return r.error("training", "max_norm", fmt::format("is {}; valid: a positive number (torchtitan always clips)", max_norm));
    }
    o.clip_grad_norm = max_norm;
    mapped(fmt::format("training: max_norm {:g} -> --clip-grad-norm {:g} (torchtitan clips every step)", max_norm, max_norm));

    // [activation_checkpoint]: torchtitan's default is selective, every 2nd layer.
    SHARDCAST_TRY_ASSIGN(ac_mode, r.string("activation_checkpoint", "mode", "selective"));
    SHARDCAST_TRY_ASSIGN(ac_option, r.string("activation_checkpoint", "selective_ac_option", "2"));
    if (ac_mode == "none" || ac_mode == "full") {
        o.ac = ac_mode;
    } else if (ac_mode == "selective") {
        const bool digits = !ac_option.empty() && ac_option.size() < 6 &&
                            std::all_of(ac_option.begin(), ac_option.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (ac_option == "op") {
            o.ac = "op";
        } else if (digits && std::stoi(ac_option) >= 1) {
            o.ac = "layer:" + ac_option;
        } else {
            return r.error("activation_checkpoint", "selective_ac_option",
                           fmt::format("is '{}'; valid: op or a positive layer count K", ac_option));
        }
    } else {
        return r.error("activation_checkpoint", "mode",
                       fmt::format("is '{}'; valid: none, full, selective (memory_budget is not modelled)", ac_mode));
    }
    mapped(fmt::format("activation_checkpoint {}{} -> --ac {}", ac_mode,
                       ac_mode == "selective" ? " " + ac_option : std::string(), *o.ac));

    // [compile] (older configs: training.compile).
    SHARDCAST_TRY_ASSIGN(compile_old, r.boolean("training", "compile", false));
    SHARDCAST_TRY_ASSIGN(compile, r.boolean("compile", "enable", compile_old));
    SHARDCAST_TRY_ASSIGN(components, r.strings("compile", "components"));
    if (compile && (components.empty() || std::find(components.begin(), components.end(), "model") != components.end())) {
        o.kernels = "compile";
        mapped("compile enable -> --kernels compile");
    }

    // [checkpoint]: torchtitan saves through torch.distributed.checkpoint.
    const bool old_enable = r.find("checkpoint", "enable_checkpoint") != nullptr;
    SHARDCAST_TRY_ASSIGN(save, r.boolean("checkpoint", old_enable ? "enable_checkpoint" : "enable", false));
    SHARDCAST_TRY_ASSIGN(interval, r.integer("checkpoint", "interval", 500));
    SHARDCAST_TRY_ASSIGN(async_mode, r.string("checkpoint", "async_mode", "disabled"));
    if (save) {
        if (interval < 1) return r.error("checkpoint", "interval", fmt::format("is {}; valid: a positive number of steps", interval));
        o.checkpoint = "sharded";
        o.checkpoint_every = interval;
        mapped(fmt::format("checkpoint enable, interval {} -> --checkpoint sharded --checkpoint-every {}{}", interval, interval,
                           async_mode != "disabled" ? fmt::format(" (async_mode {} is planned as a blocking save)", async_mode)
                                                    : std::string()));
    }
    return core::Ok{};
}

}  // namespace

namespace {

// toml++ 3.3 also reaches code it marks unreachable when it classifies some non-ASCII characters
// (found by fuzzing: its generated Unicode tables), so it is given ASCII only. torchtitan's keys and
// the values read here are ASCII; other characters may sit in comments (each byte becomes a space)
// and in strings (each byte becomes '?', as no string read here holds any); anywhere else they are
// an error naming the line and column. Bytes keep their places, so the parser's positions hold.
core::Status asciiForToml(std::string_view text, const std::string& where, std::string& out) {
    enum class At { Code, Comment, Basic, Literal, MultiBasic, MultiLiteral };
    At at = At::Code;
    out.assign(text.begin(), text.end());
    int64_t line = 1, column = 1;
    auto starts = [&](size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x80) {
            if (at == At::Code) {
                return core::makeError(fmt::format("{}: malformed TOML at line {}, column {}: a non-ASCII character outside a "
                                                   "string or a comment",
                                                   where, line, column));
            }
            out[i] = at == At::Comment ? ' ' : '?';
        } else if (at == At::Code) {
            if (c == '#') {
                at = At::Comment;
            } else if (starts(i, "\"\"\"")) {
                at = At::MultiBasic;
                i += 2;
                column += 2;
            } else if (starts(i, "'''")) {
                at = At::MultiLiteral;
                i += 2;
                column += 2;
            } else if (c == '"') {
                at = At::Basic;
            } else if (c == '\'') {
                at = At::Literal;
            }
        } else if ((at == At::Basic || at == At::MultiBasic) && c == '\\' && i + 1 < text.size()) {
            ++i;  // an escaped character: not the string's end
            ++column;
            if (static_cast<unsigned char>(text[i]) >= 0x80) out[i] = '?';
        } else if ((at == At::Comment || at == At::Basic || at == At::Literal) && c == '\n') {
            at = At::Code;  // a single-line string cut by the line's end: toml++ reports it
        } else if ((at == At::Basic && c == '"') || (at == At::Literal && c == '\'')) {
            at = At::Code;
        } else if ((at == At::MultiBasic && starts(i, "\"\"\"")) || (at == At::MultiLiteral && starts(i, "'''"))) {
            at = At::Code;
            i += 2;
            column += 2;
        }
        if (text[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
    return core::Ok{};
}

}  // namespace

core::Result<ImportedConfig> importTorchtitanToml(std::string_view text, const std::string& where,
                                                  const ConfigContext& context) {
    ImportedConfig out;
    out.format = "torchtitan TOML";
    std::string ascii;
    if (auto st = asciiForToml(text, where, ascii); !st) return st.error();
    toml::table root;
    try {
        root = toml::parse(ascii, where);
    } catch (const toml::parse_error& e) {
        return core::makeError(fmt::format("{}: malformed TOML at line {}, column {}: {}", where, e.source().begin.line,
                                           e.source().begin.column, e.description()));
    } catch (const TomlAssertion& e) {
        return core::makeError(fmt::format("{}: malformed TOML (the parser stopped: {})", where, e.what()));
    }
    TomlReader reader(root, where, out);
    if (auto keys = reader.checkKeys(); !keys) return keys.error();
    if (auto mapped = mapTorchtitan(reader, where, context, out); !mapped) return mapped.error();
    return out;
}

namespace {

// accelerate's config YAML: every top-level key and fsdp_config key accounted for.
const std::set<std::string> kAccelerateIgnored = {
    "compute_environment", "debug", "downcast_bf16", "enable_cpu_affinity", "machine_rank", "main_training_function",
    "rdzv_backend", "same_network", "gpu_ids", "main_process_ip", "main_process_port", "tpu_env", "tpu_use_cluster",
    "tpu_use_sudo", "tpu_name", "tpu_zone", "command_file", "commands", "tpu_vm", "mpirun_config"};
const std::set<std::string> kAccelerateUsed = {"distributed_type", "mixed_precision", "num_machines", "num_processes",
                                               "use_cpu", "fsdp_config", "dynamo_config", "parallelism_config"};
const std::set<std::string> kFsdpIgnored = {"fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_use_orig_params",
                                            "fsdp_transformer_layer_cls_to_wrap", "fsdp_ignored_modules"};
const std::set<std::string> kFsdpUsed = {"fsdp_version", "fsdp_sharding_strategy", "fsdp_reshard_after_forward",
                                         "fsdp_auto_wrap_policy", "fsdp_min_num_params", "fsdp_backward_prefetch",
                                         "fsdp_backward_prefetch_policy", "fsdp_forward_prefetch", "fsdp_offload_params",
                                         "fsdp_activation_checkpointing", "fsdp_limit_all_gathers", "fsdp_state_dict_type"};

std::string joined(const std::set<std::string>& a, const std::set<std::string>& b) {
    std::set<std::string> all(a);
    all.insert(b.begin(), b.end());
    return fmt::format("{}", fmt::join(all, ", "));
}

class YamlReader {
public:
    YamlReader(const YAML::Node& root, const std::string& where) : m_root(root), m_where(where) {}
    // A scalar of `map.key` (the root when `map` is empty) as text, or unset when absent or null.
    std::optional<std::string> scalar(std::string_view map, std::string_view key) const {
        const YAML::Node parent = map.empty() ? YAML::Node(m_root) : m_root[std::string(map)];
        if (!parent || !parent.IsMap()) return std::nullopt;
        const YAML::Node node = parent[std::string(key)];
        if (!node || node.IsNull()) return std::nullopt;
        if (!node.IsScalar()) return std::string("\x01");  // not a scalar: refused by the typed readers
        return node.Scalar();
    }
    core::Result<std::optional<bool>> boolean(std::string_view map, std::string_view key) const {
        auto v = scalar(map, key);
        if (!v) return std::optional<bool>{};
        std::string low = *v;
        std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (low == "true" || low == "yes") return std::optional<bool>{true};
        if (low == "false" || low == "no") return std::optional<bool>{false};
        return error(map, key, fmt::format("must be true or false (got '{}')", printable(*v)));
    }
    core::Result<std::optional<int64_t>> integer(std::string_view map, std::string_view key) const {
        auto v = scalar(map, key);
        if (!v) return std::optional<int64_t>{};
        int64_t out = 0;
        const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
        if (ec != std::errc{} || end != v->data() + v->size()) {
            return error(map, key, fmt::format("must be an integer (got '{}')", printable(*v)));
        }
        return std::optional<int64_t>{out};
    }
    core::Error error(std::string_view map, std::string_view key, const std::string& what) const {
        return core::Error{fmt::format("{}: {}{}{} {}", m_where, map, map.empty() ? "" : ".", key, what)};
    }

private:
    static std::string printable(const std::string& v) { return v == "\x01" ? std::string("a list or a map") : v; }
    const YAML::Node& m_root;
    const std::string& m_where;
};

core::Status mapAccelerate(const YAML::Node& root, const std::string& where, ImportedConfig& out) {
    if (!root.IsMap()) return core::makeError(fmt::format("{}: not an accelerate config (a YAML mapping of its keys)", where));
    for (const auto& kv : root) {
        const std::string key = kv.first.as<std::string>();
        if (kAccelerateUsed.count(key) != 0) continue;
        if (kAccelerateIgnored.count(key) != 0) {
            out.ignored.push_back(key);
            continue;
        }
        if (key == "deepspeed_config" || key == "megatron_lm_config") {
            return core::makeError(fmt::format("{}: {} is given: shardcast reads accelerate's FSDP configs", where, key));
        }
        return core::makeError(fmt::format("{}: unknown accelerate key {}; keys shardcast knows: {}", where, key,
                                           joined(kAccelerateUsed, kAccelerateIgnored)));
    }
    const YAML::Node fsdp = root["fsdp_config"];
    if (fsdp && fsdp.IsMap()) {
        for (const auto& kv : fsdp) {
            const std::string key = kv.first.as<std::string>();
            if (kFsdpUsed.count(key) != 0) continue;
            if (kFsdpIgnored.count(key) != 0) {
                if (key == "fsdp_ignored_modules" && !kv.second.IsNull()) {
                    return core::makeError(fmt::format("{}: fsdp_config.fsdp_ignored_modules is given: ignored modules are "
                                                       "not modelled",
                                                       where));
                }
                out.ignored.push_back("fsdp_config." + key);
                continue;
            }
            return core::makeError(fmt::format("{}: unknown key fsdp_config.{}; keys shardcast knows: {}", where, key,
                                               joined(kFsdpUsed, kFsdpIgnored)));
        }
    } else if (fsdp && !fsdp.IsNull()) {
        return core::makeError(fmt::format("{}: fsdp_config must be a mapping", where));
    }
    const YamlReader r(root, where);
    core::PlanOverrides& o = out.overrides;
    auto mapped = [&out](std::string text) { out.mapped.push_back(std::move(text)); };

    const std::string type = r.scalar("", "distributed_type").value_or("NO");
    if (type != "FSDP") {
        return r.error("", "distributed_type", fmt::format("is '{}'; shardcast reads FSDP configs (distributed_type: FSDP)", type));
    }
    SHARDCAST_TRY_ASSIGN(use_cpu, r.boolean("", "use_cpu"));
    if (use_cpu.value_or(false)) return r.error("", "use_cpu", "is true: plan CPU runs with a plan file (gpu cpu)");

    // The GPUs.
    SHARDCAST_TRY_ASSIGN(machines, r.integer("", "num_machines"));
    SHARDCAST_TRY_ASSIGN(processes, r.integer("", "num_processes"));
    const int64_t nodes = machines.value_or(1);
    if (nodes < 1 || nodes > 1'000'000) return r.error("", "num_machines", "must be a positive integer");
    if (!processes || *processes < 1 || *processes % nodes != 0) {
        return r.error("", "num_processes", fmt::format("must be the GPUs of all {} machine(s), a positive multiple of num_machines", nodes));
    }
    o.nodes = nodes;
    o.gpus_per_node = *processes / nodes;
    mapped(fmt::format("num_machines {}, num_processes {} -> --nodes {} --gpus-per-node {}", nodes, *processes, nodes,
                       *o.gpus_per_node));

    const std::string precision = r.scalar("", "mixed_precision").value_or("no");
    static const std::map<std::string, std::string> precisions = {{"no", "fp32"}, {"bf16", "bf16"}, {"fp16", "fp16"}};
    const auto p = precisions.find(precision);
    if (p == precisions.end()) {
        return r.error("", "mixed_precision", fmt::format("is '{}'; valid: no, bf16, fp16 (fp8 is not modelled)", precision));
    }
    o.param_dtype = p->second;
    o.reduce_dtype = p->second;
    mapped(fmt::format("mixed_precision {} -> --param-dtype {} --reduce-dtype {} (accelerate reduces in the same dtype)",
                       precision, p->second, p->second));

    // FSDP.
    SHARDCAST_TRY_ASSIGN(version, r.integer("fsdp_config", "fsdp_version"));
    const int64_t v = version.value_or(1);
    if (v != 1 && v != 2) return r.error("fsdp_config", "fsdp_version", fmt::format("is {}; valid: 1, 2", v));
    o.fsdp = v;
    static const char* const kStrategies[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
    auto strategyName = [&](std::string_view key, const std::string& value) -> core::Result<std::string> {
        std::string up = value;
        std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
        if (up.size() == 1 && up[0] >= '1' && up[0] <= '5') up = kStrategies[up[0] - '1'];
        for (const char* s : kStrategies) {
            if (up == s) return up == "HYBRID_SHARD_ZERO2" ? std::string("_HYBRID_SHARD_ZERO2") : up;
        }
        return r.error("fsdp_config", key, fmt::format("is '{}'; valid: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                                                       "HYBRID_SHARD_ZERO2 or 1-5",
                                                       value));
    };
    const auto strategy_text = r.scalar("fsdp_config", "fsdp_sharding_strategy");
    const auto reshard_text = r.scalar("fsdp_config", "fsdp_reshard_after_forward");
    std::string strategy = "FULL_SHARD";
    if (strategy_text) {
        SHARDCAST_TRY_ASSIGN(s, strategyName("fsdp_sharding_strategy", *strategy_text));
        strategy = s;
    }
    if (v == 1 && reshard_text) {
        SHARDCAST_TRY_ASSIGN(s, strategyName("fsdp_reshard_after_forward", *reshard_text));
        strategy = s;
    }
    if (v == 2 && reshard_text) {
        SHARDCAST_TRY_ASSIGN(reshard, r.boolean("fsdp_config", "fsdp_reshard_after_forward"));
        o.reshard_after_forward = *reshard ? "true" : "false";
    }
    // HSDP under FSDP2: parallelism_config's replicate x shard sizes.
    SHARDCAST_TRY_ASSIGN(replicate, r.integer("parallelism_config", "parallelism_config_dp_replicate_size"));
    SHARDCAST_TRY_ASSIGN(shard, r.integer("parallelism_config", "parallelism_config_dp_shard_size"));
    SHARDCAST_TRY_ASSIGN(tp, r.integer("parallelism_config", "parallelism_config_tp_size"));
    SHARDCAST_TRY_ASSIGN(cp, r.integer("parallelism_config", "parallelism_config_cp_size"));
    if (cp.value_or(1) != 1) return r.error("parallelism_config", "parallelism_config_cp_size", "must be 1: context parallelism is not modelled");
    if (tp.value_or(1) != 1) {
        return r.error("parallelism_config", "parallelism_config_tp_size",
                       "must be 1: accelerate applies the model's own HuggingFace TP plan, which shardcast does not model (its "
                       "--tp is torchtitan's plan)");
    }
    if (replicate.value_or(1) > 1) {
        strategy = "HYBRID_SHARD";
        if (shard) o.shard_size = *shard;
    }
    o.strategy = strategy;
    if (strategy == "HYBRID_SHARD" && !o.shard_size) o.shard_size = *o.gpus_per_node;  // FSDP1's default: a node
    mapped(fmt::format("fsdp_version {}, {} -> --fsdp {} --strategy {}{}{}", v, strategy, v, strategy,
                       o.shard_size ? fmt::format(" --shard-size {}", *o.shard_size) : std::string(),
                       o.reshard_after_forward ? " --reshard-after-forward " + *o.reshard_after_forward : std::string()));

    const std::string wrap = r.scalar("fsdp_config", "fsdp_auto_wrap_policy").value_or("NO_WRAP");
    if (wrap == "TRANSFORMER_BASED_WRAP") {
        o.wrap = "block";
    } else if (wrap == "SIZE_BASED_WRAP") {
        SHARDCAST_TRY_ASSIGN(min_params, r.integer("fsdp_config", "fsdp_min_num_params"));
        // accelerate's default min_num_params is 1e8.
        o.wrap = fmt::format("min-params:{}", min_params.value_or(100'000'000));
    } else if (wrap == "NO_WRAP") {
        o.wrap = "whole";
    } else {
        return r.error("fsdp_config", "fsdp_auto_wrap_policy",
                       fmt::format("is '{}'; valid: TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP", wrap));
    }
    mapped(fmt::format("fsdp_auto_wrap_policy {} -> --wrap {}", wrap, *o.wrap));
    const auto prefetch = r.scalar("fsdp_config", "fsdp_backward_prefetch").has_value()
                              ? r.scalar("fsdp_config", "fsdp_backward_prefetch")
                              : r.scalar("fsdp_config", "fsdp_backward_prefetch_policy");
    if (prefetch && v == 1) {
        static const std::map<std::string, std::string> prefetches = {
            {"BACKWARD_PRE", "pre"}, {"BACKWARD_POST", "post"}, {"NO_PREFETCH", "none"}};
        const auto f = prefetches.find(*prefetch);
        if (f == prefetches.end()) {
            return r.error("fsdp_config", "fsdp_backward_prefetch",
                           fmt::format("is '{}'; valid: BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH", *prefetch));
        }
        o.backward_prefetch = f->second;
    }
    SHARDCAST_TRY_ASSIGN(forward_prefetch, r.boolean("fsdp_config", "fsdp_forward_prefetch"));
    if (forward_prefetch && v == 1) o.forward_prefetch = *forward_prefetch ? "true" : "false";
    SHARDCAST_TRY_ASSIGN(offload, r.boolean("fsdp_config", "fsdp_offload_params"));
    if (offload.value_or(false)) {
        o.offload = "cpu";
        mapped("fsdp_offload_params true -> --offload cpu");
    }
    SHARDCAST_TRY_ASSIGN(limit, r.boolean("fsdp_config", "fsdp_limit_all_gathers"));
    if (!limit.value_or(true)) {
        // No flag carries it: the plan file's sharding.limit_all_gathers does.
        return r.error("fsdp_config", "fsdp_limit_all_gathers",
                       "is false: give it as sharding.limit_all_gathers false in a plan file (--write-plan, then edit)");
    }
    SHARDCAST_TRY_ASSIGN(ac, r.boolean("fsdp_config", "fsdp_activation_checkpointing"));
    o.ac = ac.value_or(false) ? "full" : "none";
    mapped(fmt::format("fsdp_activation_checkpointing {} -> --ac {}", ac.value_or(false), *o.ac));
    if (const auto dump = r.scalar("fsdp_config", "fsdp_state_dict_type")) {
        mapped(fmt::format("fsdp_state_dict_type {}: how saves are written; plan them with --checkpoint {}", *dump,
                           *dump == "FULL_STATE_DICT" ? "full" : "sharded"));
    }
    const std::string backend = r.scalar("dynamo_config", "dynamo_backend").value_or("NO");
    if (backend == "INDUCTOR") {
        o.kernels = "compile";
        mapped("dynamo_config.dynamo_backend INDUCTOR -> --kernels compile");
    } else if (backend != "NO") {
        return r.error("dynamo_config", "dynamo_backend", fmt::format("is '{}'; valid: NO, INDUCTOR", backend));
    }
    return core::Ok{};
}

}  // namespace

core::Result<ImportedConfig> importAccelerateYaml(std::string_view text, const std::string& where) {
    ImportedConfig out;
    out.format = "accelerate YAML";
    YAML::Node root;
    try {
        root = YAML::Load(std::string(text));
        if (auto mapped = mapAccelerate(root, where, out); !mapped) return mapped.error();
        return out;
    } catch (const YAML::ParserException& e) {
        return core::makeError(fmt::format("{}: malformed YAML at line {}, column {}: {}", where, e.mark.line + 1,
                                           e.mark.column + 1, e.msg));
    } catch (const YAML::Exception& e) {
        return core::makeError(fmt::format("{}: not an accelerate config: {}", where, e.msg));
    }
}

core::Result<ImportedConfig> importConfigFile(const std::filesystem::path& path, const ConfigContext& context) {
    const std::string where = path.string();
    const std::string ext = path.extension().string();
    if (ext != ".toml" && ext != ".yaml" && ext != ".yml" && ext != ".json") {
        return core::makeError(fmt::format("--from-config {}: unknown config format '{}'; valid: a torchtitan job config "
                                           "(.toml), an accelerate or LightningCLI config (.yaml), an HF Trainer "
                                           "TrainingArguments or fsdp_config (.json)",
                                           where, ext));
    }
    const bool toml = ext == ".toml";
    auto text = core::readFileBounded(path, core::kMaxTextFileBytes,
                                      toml ? "torchtitan config" : ext == ".json" ? "HF Trainer config" : "accelerate config");
    if (!text) return text.error();
    if (toml) return importTorchtitanToml(*text, where, context);
    if (ext == ".json") return importHfTrainerJson(*text, where, path.parent_path());
    if (isLightningYaml(*text)) return importLightningYaml(*text, where);
    return importAccelerateYaml(*text, where);
}

}  // namespace shardcast::configs
