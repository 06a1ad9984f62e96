// HF Trainer's FSDP settings read into a plan (configs/config_import.hpp, importHfTrainerJson): a
// TrainingArguments JSON (the file HfArgumentParser.parse_json_file reads, or the dict a script
// passes) or a bare fsdp_config JSON (the file `--fsdp_config` names). What the Trainer does with them
// is transformers 5's (training_args.py as of 5.25): `fsdp` is true, or the legacy option string or
// list whose strategies and "offload" fill fsdp_config (_apply_legacy_fsdp_to_config), and
// fsdp_config becomes accelerate's FSDP plugin: version 2 (FSDP2) unless it says 1, every block
// wrapped unless auto_wrap_policy says otherwise (TRANSFORMER_BASED_WRAP by default),
// reshard_after_forward a bool under FSDP2 and the strategy's name under FSDP1, whose
// backward_prefetch defaults to NO_PREFETCH. transformers 4.x read the same files as FSDP1 with no
// wrapping unless `fsdp` said auto_wrap: give --fsdp 1 (and --wrap) for a 4.x run.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "configs/config_import.hpp"
#include "configs/try_assign.hpp"
#include "core/base/file_io.hpp"

namespace shardcast::configs {
namespace {

using json = nlohmann::json;

// Every field of TrainingArguments in transformers 4.57 or 5.25 (the dataclass's fields): a key
// outside these (and outside fsdp_config's) is an error naming it.
const std::set<std::string> kTrainingArguments = {
    "accelerator_config", "activation_checkpointing", "activation_checkpointing_kwargs", "adafactor", "adam_beta1",
    "adam_beta2", "adam_epsilon", "auto_find_batch_size", "average_tokens_across_devices", "batch_eval_metrics",
    "bf16", "bf16_full_eval", "data_seed", "dataloader_drop_last", "dataloader_in_order",
    "dataloader_multiprocessing_context", "dataloader_num_workers", "dataloader_persistent_workers",
    "dataloader_pin_memory", "dataloader_prefetch_factor", "ddp_backend", "ddp_broadcast_buffers",
    "ddp_bucket_cap_mb", "ddp_find_unused_parameters", "ddp_static_graph", "ddp_timeout", "debug", "deepspeed",
    "disable_tqdm", "do_eval", "do_predict", "do_train", "enable_jit_checkpoint", "eval_accumulation_steps",
    "eval_delay", "eval_do_concat_batches", "eval_on_start", "eval_steps", "eval_strategy", "eval_use_gather_object",
    "fp16", "fp16_backend", "fp16_full_eval", "fp16_opt_level", "fsdp", "fsdp_config", "fsdp_min_num_params",
    "fsdp_transformer_layer_cls_to_wrap", "full_determinism", "gradient_accumulation_steps", "gradient_checkpointing",
    "gradient_checkpointing_kwargs", "greater_is_better", "group_by_length", "half_precision_backend",
    "hub_always_push", "hub_model_id", "hub_private_repo", "hub_revision", "hub_strategy", "hub_token",
    "ignore_data_skip", "include_for_metrics", "include_inputs_for_metrics", "include_num_input_tokens_seen",
    "include_tokens_per_second", "jit_mode_eval", "label_names", "label_smoothing_factor", "learning_rate",
    "length_column_name", "liger_kernel_config", "load_best_model_at_end", "local_rank", "log_level",
    "log_level_replica", "log_on_each_node", "logging_dir", "logging_first_step", "logging_nan_inf_filter",
    "logging_steps", "logging_strategy", "lr_scheduler_kwargs", "lr_scheduler_type", "max_grad_norm", "max_steps",
    "metric_for_best_model", "mp_parameters", "neftune_noise_alpha", "no_cuda", "num_train_epochs", "optim",
    "optim_args", "optim_target_modules", "output_dir", "overwrite_output_dir", "parallelism_config", "past_index",
    "per_device_eval_batch_size", "per_device_train_batch_size", "per_gpu_eval_batch_size",
    "per_gpu_train_batch_size", "prediction_loss_only", "project", "push_to_hub", "push_to_hub_model_id",
    "push_to_hub_organization", "push_to_hub_token", "ray_scope", "remove_unused_columns", "report_to",
    "restore_callback_states_from_checkpoint", "resume_from_checkpoint", "run_name", "save_on_each_node",
    "save_only_model", "save_safetensors", "save_steps", "save_strategy", "save_total_limit", "seed",
    "skip_memory_metrics", "tf32", "torch_compile", "torch_compile_backend", "torch_compile_mode",
    "torch_empty_cache_steps", "torchdynamo", "tpu_metrics_debug", "tpu_num_cores", "trackio_bucket_id",
    "trackio_space_id", "trackio_static_space_id", "train_sampling_strategy", "use_cache", "use_cpu",
    "use_legacy_prediction_loop", "use_liger_kernel", "use_mps_device", "warmup_ratio", "warmup_steps",
    "weight_decay"
};

// The keys shardcast reads from TrainingArguments; the other fields change neither memory nor time.
const std::set<std::string> kTrainingArgumentsUsed = {
    "fsdp", "fsdp_config", "fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap", "per_device_train_batch_size",
    "per_gpu_train_batch_size", "gradient_accumulation_steps", "bf16", "fp16", "max_grad_norm", "gradient_checkpointing",
    "optim", "torch_compile", "use_cpu", "no_cuda", "deepspeed", "parallelism_config", "activation_checkpointing"};

// fsdp_config's keys (an "fsdp_" prefix is dropped first, as TrainingArguments does).
const std::set<std::string> kFsdpConfigUsed = {"version", "cpu_offload", "auto_wrap_policy", "min_num_params",
                                               "transformer_layer_cls_to_wrap", "reshard_after_forward", "backward_prefetch",
                                               "forward_prefetch", "limit_all_gathers", "activation_checkpointing",
                                               "state_dict_type", "xla", "xla_fsdp_v2", "xla_fsdp_grad_ckpt",
                                               "xla_fsdp_settings"};
const std::set<std::string> kFsdpConfigIgnored = {"use_orig_params", "sync_module_states", "cpu_ram_efficient_loading"};

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

std::string excerpt(const json& v) {
    std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return text;
}

class HfReader {
public:
    HfReader(const std::string& where, ImportedConfig& out) : m_where(where), m_out(out) {}

    core::Error error(const std::string& key, const std::string& what) const {
        return core::Error{fmt::format("{}: {} {}", m_where, key, what)};
    }
    void mapped(std::string text) { m_out.mapped.push_back(std::move(text)); }
    void ignored(std::string key) { m_out.ignored.push_back(std::move(key)); }

    // A boolean, unset when absent or null; HF's string spellings ("true", "false") too.
    core::Result<std::optional<bool>> boolean(const json& obj, const std::string& key, const std::string& name) const {
        const auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) return std::optional<bool>{};
        if (it->is_boolean()) return std::optional<bool>{it->get<bool>()};
        if (it->is_string()) {
            const std::string v = lower(it->get<std::string>());
            if (v == "true") return std::optional<bool>{true};
            if (v == "false") return std::optional<bool>{false};
        }
        return error(name, fmt::format("is {}; valid: true or false", excerpt(*it)));
    }
    core::Result<std::optional<int64_t>> integer(const json& obj, const std::string& key, const std::string& name,
                                                 int64_t lo, int64_t hi) const {
        const auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) return std::optional<int64_t>{};
        if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
            return error(name, fmt::format("is {}; valid: an integer from {} to {}", excerpt(*it), lo, hi));
        }
        return std::optional<int64_t>{it->get<int64_t>()};
    }
    core::Result<std::optional<double>> number(const json& obj, const std::string& key, const std::string& name) const {
        const auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) return std::optional<double>{};
        if (!it->is_number() || !(it->get<double>() >= 0) || !(it->get<double>() <= 1e30)) {
            return error(name, fmt::format("is {}; valid: a number from 0 to 1e30", excerpt(*it)));
        }
        return std::optional<double>{it->get<double>()};
    }
    core::Result<std::optional<std::string>> string(const json& obj, const std::string& key, const std::string& name) const {
        const auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) return std::optional<std::string>{};
        if (!it->is_string()) return error(name, fmt::format("is {}; valid: a string", excerpt(*it)));
        return std::optional<std::string>{it->get<std::string>()};
    }

private:
    const std::string& m_where;
    ImportedConfig& m_out;
};

// fsdp_config as TrainingArguments keeps it: "fsdp_" prefixes dropped, every key known.
core::Result<json> normalizedFsdpConfig(const json& given, const std::string& where) {
    if (!given.is_object()) return core::makeError(fmt::format("{}: fsdp_config is {}; valid: an object or a JSON file's path", where, excerpt(given)));
    json out = json::object();
    for (const auto& [key, value] : given.items()) {
        const std::string k = key.rfind("fsdp_", 0) == 0 ? key.substr(5) : key;
        if (kFsdpConfigUsed.count(k) == 0 && kFsdpConfigIgnored.count(k) == 0) {
            std::set<std::string> known(kFsdpConfigUsed);
            known.insert(kFsdpConfigIgnored.begin(), kFsdpConfigIgnored.end());
            return core::makeError(fmt::format("{}: unknown key fsdp_config.{} (transformers' Trainer does not read it); keys "
                                               "it reads: {}",
                                               where, key, fmt::join(known, ", ")));
        }
        out[k] = value;
    }
    return out;
}

// fsdp_config (prefixes dropped, the legacy options applied) into the overrides.
core::Status mapFsdpConfig(const json& c, HfReader& r, core::PlanOverrides& o) {
    for (const std::string& k : kFsdpConfigIgnored) {
        if (c.contains(k)) r.ignored("fsdp_config." + k);
    }
    SHARDCAST_TRY_ASSIGN(xla, r.boolean(c, "xla", "fsdp_config.xla"));
    if (xla.value_or(false)) return r.error("fsdp_config.xla", "is true: XLA's FSDP (TPUs) is not modelled");
    for (const char* k : {"xla_fsdp_v2", "xla_fsdp_grad_ckpt", "xla_fsdp_settings"}) {
        if (c.contains(k)) r.ignored(std::string("fsdp_config.") + k);
    }
    SHARDCAST_TRY_ASSIGN(version, r.integer(c, "version", "fsdp_config.version", 1, 2));
    o.fsdp = version.value_or(2);
    // The sharding: FSDP2's reshard_after_forward (true by default), FSDP1's strategy name.
    if (*o.fsdp == 2) {
        SHARDCAST_TRY_ASSIGN(reshard, r.boolean(c, "reshard_after_forward", "fsdp_config.reshard_after_forward"));
        o.strategy = reshard.value_or(true) ? "FULL_SHARD" : "SHARD_GRAD_OP";
        r.mapped(fmt::format("version 2{}, reshard_after_forward {} -> --fsdp 2 --strategy {}", version ? "" : " (the default)",
                             reshard.value_or(true), *o.strategy));
    } else {
        SHARDCAST_TRY_ASSIGN(name, r.string(c, "reshard_after_forward", "fsdp_config.reshard_after_forward"));
        static const std::map<std::string, std::string> strategies = {{"full_shard", "FULL_SHARD"},
                                                                      {"shard_grad_op", "SHARD_GRAD_OP"},
                                                                      {"no_shard", "NO_SHARD"},
                                                                      {"hybrid_shard", "HYBRID_SHARD"},
                                                                      {"hybrid_shard_zero2", "_HYBRID_SHARD_ZERO2"}};
        const std::string given = lower(name.value_or("full_shard"));
        const auto st = strategies.find(given);
        if (st == strategies.end()) {
            return r.error("fsdp_config.reshard_after_forward", fmt::format("is '{}'; valid under FSDP1: full_shard, shard_grad_op, "
                                                                            "no_shard, hybrid_shard, hybrid_shard_zero2", given));
        }
        o.strategy = st->second;
        r.mapped(fmt::format("version 1, reshard_after_forward {} -> --fsdp 1 --strategy {}{}", given, *o.strategy,
                             given.find("hybrid") != std::string::npos ? " (shard groups of a node: --shard-size = --gpus-per-node)" : ""));
    }
    SHARDCAST_TRY_ASSIGN(offload, r.boolean(c, "cpu_offload", "fsdp_config.cpu_offload"));
    if (offload.value_or(false)) {
        o.offload = "cpu";
        r.mapped("cpu_offload true -> --offload cpu");
    }
    // Wrapping: accelerate's policies, TRANSFORMER_BASED_WRAP unless it says otherwise.
    SHARDCAST_TRY_ASSIGN(policy, r.string(c, "auto_wrap_policy", "fsdp_config.auto_wrap_policy"));
    SHARDCAST_TRY_ASSIGN(min_params, r.integer(c, "min_num_params", "fsdp_config.min_num_params", 0, int64_t{1} << 50));
    std::vector<std::string> classes;
    if (const auto it = c.find("transformer_layer_cls_to_wrap"); it != c.end() && !it->is_null()) {
        if (it->is_string()) {
            classes.push_back(it->get<std::string>());
        } else if (it->is_array() && std::all_of(it->begin(), it->end(), [](const json& x) { return x.is_string(); })) {
            for (const json& x : *it) classes.push_back(x.get<std::string>());
        } else {
            return r.error("fsdp_config.transformer_layer_cls_to_wrap", fmt::format("is {}; valid: a class name or a list of them", excerpt(*it)));
        }
    }
    const std::string wrap = policy.value_or("TRANSFORMER_BASED_WRAP");
    if (wrap == "TRANSFORMER_BASED_WRAP") {
        o.wrap = "block";
        r.mapped(fmt::format("auto_wrap_policy TRANSFORMER_BASED_WRAP{} -> --wrap block ({})", policy ? "" : " (the default)",
                             classes.empty() ? std::string("the model's _no_split_modules, its decoder layers")
                                             : fmt::format("{}", fmt::join(classes, ", "))));
    } else if (wrap == "SIZE_BASED_WRAP") {
        o.wrap = fmt::format("min-params:{}", min_params.value_or(0) > 0 ? *min_params : 100'000'000);  // accelerate's default 1e8
        r.mapped(fmt::format("auto_wrap_policy SIZE_BASED_WRAP -> --wrap {}", *o.wrap));
    } else if (wrap == "NO_WRAP") {
        o.wrap = "whole";
        r.mapped("auto_wrap_policy NO_WRAP -> --wrap whole");
    } else {
        return r.error("fsdp_config.auto_wrap_policy", fmt::format("is '{}'; valid: TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP", wrap));
    }
    if (*o.fsdp == 1) {
        // FSDP1: the Trainer sets backward_prefetch NO_PREFETCH when absent.
        SHARDCAST_TRY_ASSIGN(prefetch, r.string(c, "backward_prefetch", "fsdp_config.backward_prefetch"));
        static const std::map<std::string, std::string> prefetches = {
            {"backward_pre", "pre"}, {"backward_post", "post"}, {"no_prefetch", "none"}};
        const std::string p = lower(prefetch.value_or("NO_PREFETCH"));
        const auto f = prefetches.find(p);
        if (f == prefetches.end()) {
            return r.error("fsdp_config.backward_prefetch", fmt::format("is '{}'; valid: backward_pre, backward_post, no_prefetch", *prefetch));
        }
        SHARDCAST_TRY_ASSIGN(forward_prefetch, r.boolean(c, "forward_prefetch", "fsdp_config.forward_prefetch"));
        o.backward_prefetch = f->second;
        o.forward_prefetch = forward_prefetch.value_or(false) ? "true" : "false";
        r.mapped(fmt::format("backward_prefetch {}{}, forward_prefetch {} -> --backward-prefetch {} --forward-prefetch {}",
                             prefetch.value_or("NO_PREFETCH"), prefetch ? "" : " (the Trainer's default)",
                             forward_prefetch.value_or(false), *o.backward_prefetch, *o.forward_prefetch));
        SHARDCAST_TRY_ASSIGN(limit, r.boolean(c, "limit_all_gathers", "fsdp_config.limit_all_gathers"));
        if (!limit.value_or(true)) {
            return r.error("fsdp_config.limit_all_gathers",
                           "is false: give it as sharding.limit_all_gathers false in a plan file (--write-plan, then edit)");
        }
    } else {
        for (const char* k : {"backward_prefetch", "forward_prefetch", "limit_all_gathers"}) {
            if (c.contains(k)) r.ignored(std::string("fsdp_config.") + k + " (FSDP1 only)");
        }
    }
    SHARDCAST_TRY_ASSIGN(ac, r.boolean(c, "activation_checkpointing", "fsdp_config.activation_checkpointing"));
    if (ac.value_or(false)) {
        o.ac = "full";
        r.mapped("activation_checkpointing true -> --ac full");
    }
    SHARDCAST_TRY_ASSIGN(state_dict, r.string(c, "state_dict_type", "fsdp_config.state_dict_type"));
    if (state_dict) {
        r.mapped(fmt::format("state_dict_type {}: how saves are written; plan them with --checkpoint {}", *state_dict,
                             *state_dict == "FULL_STATE_DICT" ? "full" : "sharded"));
    }
    return core::Ok{};
}

// The Trainer's `fsdp`: true, or the legacy string of options ("full_shard auto_wrap") or list.
core::Result<std::vector<std::string>> fsdpOptions(const json& v, const HfReader& r, bool& enabled) {
    std::vector<std::string> out;
    enabled = false;
    if (v.is_boolean()) {
        enabled = v.get<bool>();
        return out;
    }
    auto add = [&](const std::string& text) {
        std::istringstream words(text);
        for (std::string w; words >> w;) out.push_back(lower(w));
    };
    if (v.is_string()) {
        add(v.get<std::string>());
    } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); })) {
        for (const json& x : v) add(x.get<std::string>());
    } else if (!v.is_null()) {
        return r.error("fsdp", fmt::format("is {}; valid: true, or the options such as \"full_shard auto_wrap\"", excerpt(v)));
    }
    enabled = !out.empty();
    return out;
}

// The legacy options into fsdp_config, as _apply_legacy_fsdp_to_config does (keys already set win):
// a strategy becomes reshard_after_forward (FSDP2: full_shard true, shard_grad_op false, the others
// refused; FSDP1: the strategy's name), offload cpu_offload, auto_wrap nothing (every block is
// wrapped by default).
core::Status applyLegacyOptions(const std::vector<std::string>& options, json& c, const HfReader& r) {
    static const std::set<std::string> strategies = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"};
    const bool fsdp2 = !c.contains("version") || (c["version"].is_number_integer() && c["version"].get<int64_t>() == 2);
    int named = 0;
    for (const std::string& opt : options) {
        if (strategies.count(opt) != 0) {
            if (++named > 1) return r.error("fsdp", "names more than one sharding strategy; give one");
            if (fsdp2 && opt != "full_shard" && opt != "shard_grad_op") {
                return r.error("fsdp", fmt::format("has '{}', which the Trainer gives only with FSDP1 (fsdp_config.version 1)", opt));
            }
            if (!c.contains("reshard_after_forward")) c["reshard_after_forward"] = fsdp2 ? json(opt == "full_shard") : json(opt);
        } else if (opt == "offload") {
            if (!c.contains("cpu_offload")) c["cpu_offload"] = true;
        } else if (opt != "auto_wrap") {
            return r.error("fsdp", fmt::format("has the option '{}'; valid: full_shard, shard_grad_op, no_shard, hybrid_shard, "
                                               "hybrid_shard_zero2, offload, auto_wrap",
                                               opt));
        }
    }
    return core::Ok{};
}

core::Status mapTrainingArguments(const json& root, const std::string& where, const std::filesystem::path& base,
                                  HfReader& r, ImportedConfig& out) {
    core::PlanOverrides& o = out.overrides;
    for (const auto& [key, value] : root.items()) {
        if (kTrainingArguments.count(key) == 0) {
            return r.error(key, "is not a TrainingArguments field (transformers 4.57 or 5.25); a TrainingArguments JSON holds "
                                "its fields, e.g. fsdp, fsdp_config, per_device_train_batch_size, gradient_accumulation_steps, bf16");
        }
        if (kTrainingArgumentsUsed.count(key) == 0) r.ignored(key);
    }
    SHARDCAST_TRY_ASSIGN(use_cpu, r.boolean(root, "use_cpu", "use_cpu"));
    SHARDCAST_TRY_ASSIGN(no_cuda, r.boolean(root, "no_cuda", "no_cuda"));
    if (use_cpu.value_or(false) || no_cuda.value_or(false)) return r.error("use_cpu", "is true: plan CPU runs with a plan file (gpu cpu)");
    if (const auto it = root.find("deepspeed"); it != root.end() && !it->is_null()) {
        return r.error("deepspeed", "is given: shardcast reads the Trainer's FSDP settings, not DeepSpeed's");
    }
    if (const auto it = root.find("parallelism_config"); it != root.end() && !it->is_null()) {
        return r.error("parallelism_config", "is given: accelerate's ParallelismConfig (TP, CP, HSDP sizes) is read from an "
                                             "accelerate config YAML (--from-config FILE.yaml)");
    }
    const auto fsdp_it = root.find("fsdp");
    bool enabled = false;
    SHARDCAST_TRY_ASSIGN(options, fsdpOptions(fsdp_it == root.end() ? json() : *fsdp_it, r, enabled));
    if (!enabled) return r.error("fsdp", "is not set: the run does not use FSDP (the Trainer's DDP); give true (or \"full_shard\")");
    json config = json::object();
    if (const auto it = root.find("fsdp_config"); it != root.end() && !it->is_null()) {
        if (it->is_string()) {
            const std::filesystem::path file = base / it->get<std::string>();
            auto text = core::readFileBounded(file, core::kMaxTextFileBytes, "fsdp_config");
            if (!text) return core::makeError(fmt::format("{}: fsdp_config: {}", where, text.error().message));
            json read = json::parse(*text, nullptr, false);
            if (read.is_discarded()) return core::makeError(fmt::format("{}: fsdp_config {}: malformed JSON", where, file.string()));
            config = std::move(read);
        } else {
            config = *it;
        }
    }
    SHARDCAST_TRY_ASSIGN(normalized, normalizedFsdpConfig(config, where));
    json c = normalized;
    // transformers 4.x's top-level fsdp_min_num_params and fsdp_transformer_layer_cls_to_wrap merge in.
    SHARDCAST_TRY_ASSIGN(old_min, r.integer(root, "fsdp_min_num_params", "fsdp_min_num_params", 0, int64_t{1} << 50));
    SHARDCAST_TRY_ASSIGN(config_min, r.integer(c, "min_num_params", "fsdp_config.min_num_params", 0, int64_t{1} << 50));
    if (old_min.value_or(0) > config_min.value_or(0)) c["min_num_params"] = *old_min;
    if (const auto it = root.find("fsdp_transformer_layer_cls_to_wrap"); it != root.end() && it->is_string()) {
        json list = c.contains("transformer_layer_cls_to_wrap") ? c["transformer_layer_cls_to_wrap"] : json::array();
        if (list.is_string()) list = json::array({list});
        if (list.is_array()) list.push_back(*it);
        c["transformer_layer_cls_to_wrap"] = list;
    }
    if (!options.empty()) {
        r.mapped(fmt::format("fsdp \"{}\": the legacy options fill fsdp_config (strategy -> reshard_after_forward, offload -> "
                             "cpu_offload, auto_wrap: the default)",
                             fmt::join(options, " ")));
    }
    if (auto st = applyLegacyOptions(options, c, r); !st) return st.error();
    if (auto st = mapFsdpConfig(c, r, o); !st) return st.error();

    // The batch, precision, clipping, checkpointing, optimizer and compile.
    SHARDCAST_TRY_ASSIGN(batch, r.integer(root, "per_device_train_batch_size", "per_device_train_batch_size", 1, 1 << 20));
    SHARDCAST_TRY_ASSIGN(old_batch, r.integer(root, "per_gpu_train_batch_size", "per_gpu_train_batch_size", 1, 1 << 20));
    SHARDCAST_TRY_ASSIGN(accum, r.integer(root, "gradient_accumulation_steps", "gradient_accumulation_steps", 1, 4096));
    o.micro_batch = old_batch.value_or(batch.value_or(8));
    o.grad_accum = accum.value_or(1);
    r.mapped(fmt::format("per_device_train_batch_size {}{}, gradient_accumulation_steps {} -> --micro-batch {} --grad-accum {} "
                         "(the sequence length is the data's: --seq-len)",
                         *o.micro_batch, batch || old_batch ? "" : " (default)", *o.grad_accum, *o.micro_batch, *o.grad_accum));
    SHARDCAST_TRY_ASSIGN(bf16, r.boolean(root, "bf16", "bf16"));
    SHARDCAST_TRY_ASSIGN(fp16, r.boolean(root, "fp16", "fp16"));
    if (bf16.value_or(false) && fp16.value_or(false)) return r.error("bf16", "and fp16 are both true; give one");
    const std::string dtype = bf16.value_or(false) ? "bf16" : fp16.value_or(false) ? "fp16" : "fp32";
    o.param_dtype = dtype;
    o.reduce_dtype = dtype;
    r.mapped(fmt::format("bf16 {}, fp16 {} -> --param-dtype {} --reduce-dtype {} (accelerate reduces in the same dtype)",
                         bf16.value_or(false), fp16.value_or(false), dtype, dtype));
    SHARDCAST_TRY_ASSIGN(clip, r.number(root, "max_grad_norm", "max_grad_norm"));
    o.clip_grad_norm = clip.value_or(1.0);
    r.mapped(fmt::format("max_grad_norm {}{} -> --clip-grad-norm {:g}", *o.clip_grad_norm, clip ? "" : " (default)", *o.clip_grad_norm));
    // TrainingArguments' activation_checkpointing (5.x; gradient_checkpointing its 4.x name): the model's
    // own checkpointing, every decoder layer; FSDP's (fsdp_config) is preferred by the Trainer.
    SHARDCAST_TRY_ASSIGN(ta_ac, r.boolean(root, "activation_checkpointing", "activation_checkpointing"));
    SHARDCAST_TRY_ASSIGN(checkpointing, r.boolean(root, "gradient_checkpointing", "gradient_checkpointing"));
    if (ta_ac.value_or(false) || checkpointing.value_or(false)) {
        o.ac = "full";
        r.mapped(fmt::format("{} true -> --ac full", ta_ac.value_or(false) ? "activation_checkpointing" : "gradient_checkpointing"));
    }
    if (!o.ac) o.ac = "none";
    SHARDCAST_TRY_ASSIGN(optim, r.string(root, "optim", "optim"));
    static const std::map<std::string, std::string> optimizers = {
        {"adamw_torch", "adamw"}, {"adamw_torch_fused", "adamw-fused"}, {"sgd", "sgd"}};
    const std::string given = optim.value_or("adamw_torch_fused");
    const auto opt = optimizers.find(given);
    if (opt == optimizers.end()) {
        return r.error("optim", fmt::format("is '{}'; modelled: adamw_torch (foreach), adamw_torch_fused, sgd", given));
    }
    o.optimizer = opt->second;
    r.mapped(fmt::format("optim {}{} -> --optimizer {}", given, optim ? "" : " (default)", *o.optimizer));
    SHARDCAST_TRY_ASSIGN(compile, r.boolean(root, "torch_compile", "torch_compile"));
    if (compile.value_or(false)) {
        o.kernels = "compile";
        r.mapped("torch_compile true -> --kernels compile");
    }
    return core::Ok{};
}

}  // namespace

core::Result<ImportedConfig> importHfTrainerJson(std::string_view text, const std::string& where,
                                                 const std::filesystem::path& base_dir) {
    ImportedConfig out;
    const json root = json::parse(text, nullptr, false);
    if (root.is_discarded()) return core::makeError(fmt::format("{}: malformed JSON (an HF TrainingArguments or fsdp_config JSON)", where));
    if (!root.is_object()) return core::makeError(fmt::format("{}: not an HF Trainer config (a JSON object of its fields)", where));
    HfReader r(where, out);
    // A TrainingArguments JSON has the Trainer's own fields; a bare fsdp_config only fsdp_config's keys.
    const bool training_args = std::any_of(root.items().begin(), root.items().end(), [](const auto& kv) {
        const std::string k = kv.key().rfind("fsdp_", 0) == 0 ? kv.key().substr(5) : kv.key();
        return kFsdpConfigUsed.count(k) == 0 && kFsdpConfigIgnored.count(k) == 0;
    }) || root.empty();
    if (training_args) {
        out.format = "HF TrainingArguments JSON";
        if (auto st = mapTrainingArguments(root, where, base_dir, r, out); !st) return st.error();
        return out;
    }
    out.format = "HF fsdp_config JSON";
    auto c = normalizedFsdpConfig(root, where);
    if (!c) return c.error();
    r.mapped("an fsdp_config alone, read as the Trainer reads it with fsdp true");
    if (auto st = mapFsdpConfig(*c, r, out.overrides); !st) return st.error();
    return out;
}

}  // namespace shardcast::configs
