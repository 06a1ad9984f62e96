// Lightning's FSDP settings read into a plan (configs/config_import.hpp, importLightningYaml): a
// LightningCLI config YAML (`python main.py fit --config config.yaml`) whose trainer.strategy is
// FSDPStrategy (lightning/pytorch/strategies/fsdp.py, 2.6: FullyShardedDataParallel, FSDP1) with its
// init_args, and the Trainer's devices, num_nodes, precision, accumulate_grad_batches and
// gradient_clip_val. Lightning's FSDPPrecision gives param, reduce and buffer dtype all of the
// precision's dtype ("bf16-mixed" and "bf16-true" alike; plugins/precision/fsdp.py).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "configs/config_import.hpp"
#include "configs/try_assign.hpp"

namespace shardcast::configs {
namespace {

// The Trainer's arguments (lightning/pytorch/trainer/trainer.py, 2.6).
const std::set<std::string> kTrainerUsed = {"accelerator", "strategy", "devices", "num_nodes", "precision",
                                            "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm"};
const std::set<std::string> kTrainerIgnored = {
    "logger", "callbacks", "fast_dev_run", "max_epochs", "min_epochs", "max_steps", "min_steps", "max_time",
    "limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches", "overfit_batches",
    "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps", "log_every_n_steps", "enable_checkpointing",
    "enable_progress_bar", "enable_model_summary", "deterministic", "benchmark", "inference_mode",
    "use_distributed_sampler", "profiler", "detect_anomaly", "barebones", "plugins", "sync_batchnorm",
    "reload_dataloaders_every_n_epochs", "default_root_dir", "model_registry"};
// FSDPStrategy's arguments (and the FullyShardedDataParallel keyword arguments it passes on).
const std::set<std::string> kStrategyUsed = {"sharding_strategy", "auto_wrap_policy", "activation_checkpointing",
                                             "activation_checkpointing_policy", "cpu_offload", "state_dict_type",
                                             "device_mesh", "limit_all_gathers", "forward_prefetch", "backward_prefetch",
                                             "mixed_precision"};
const std::set<std::string> kStrategyIgnored = {"use_orig_params", "sync_module_states", "process_group_backend", "timeout",
                                                "accelerator", "parallel_devices", "cluster_environment", "checkpoint_io",
                                                "precision_plugin"};
// LightningCLI's top-level keys besides the trainer.
const std::set<std::string> kTopIgnored = {"model", "data", "optimizer", "lr_scheduler", "seed_everything", "ckpt_path",
                                           "return_predictions", "verbose"};

std::string known(const std::set<std::string>& a, const std::set<std::string>& b) {
    std::set<std::string> all(a);
    all.insert(b.begin(), b.end());
    return fmt::format("{}", fmt::join(all, ", "));
}

class LightningReader {
public:
    explicit LightningReader(const std::string& where) : m_where(where) {}
    core::Error error(const std::string& key, const std::string& what) const {
        return core::Error{fmt::format("{}: {} {}", m_where, key, what)};
    }
    static bool present(const YAML::Node& n) { return n && !n.IsNull(); }
    core::Result<std::optional<std::string>> text(const YAML::Node& n, const std::string& key) const {
        if (!present(n)) return std::optional<std::string>{};
        if (!n.IsScalar()) return error(key, "must be a single value");
        return std::optional<std::string>{n.Scalar()};
    }
    core::Result<std::optional<int64_t>> integer(const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi) const {
        SHARDCAST_TRY_ASSIGN(v, text(n, key));
        if (!v) return std::optional<int64_t>{};
        try {
            size_t used = 0;
            const long long x = std::stoll(*v, &used);
            if (used == v->size() && x >= lo && x <= hi) return std::optional<int64_t>{x};
        } catch (const std::exception&) {
        }
        return error(key, fmt::format("is '{}'; valid: an integer from {} to {}", *v, lo, hi));
    }
    core::Result<std::optional<bool>> boolean(const YAML::Node& n, const std::string& key) const {
        SHARDCAST_TRY_ASSIGN(v, text(n, key));
        if (!v) return std::optional<bool>{};
        std::string low = *v;
        std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (low == "true") return std::optional<bool>{true};
        if (low == "false") return std::optional<bool>{false};
        return error(key, fmt::format("is '{}'; valid: true or false", *v));
    }
    // A set of layer classes (a list of class paths, or one): empty when absent.
    core::Result<std::vector<std::string>> classes(const YAML::Node& n, const std::string& key) const {
        std::vector<std::string> out;
        if (!present(n)) return out;
        if (n.IsScalar()) {
            out.push_back(n.Scalar());
        } else if (n.IsSequence()) {
            for (const YAML::Node& x : n) {
                if (!x.IsScalar()) return error(key, "must list layer classes by their import path");
                out.push_back(x.Scalar());
            }
        } else {
            return error(key, "must list layer classes by their import path (a callable policy is not read)");
        }
        return out;
    }

private:
    const std::string& m_where;
};

core::Status mapLightning(const YAML::Node& root, const std::string& where, ImportedConfig& out) {
    const LightningReader r(where);
    core::PlanOverrides& o = out.overrides;
    auto mapped = [&out](std::string text) { out.mapped.push_back(std::move(text)); };
    for (const auto& kv : root) {
        const std::string key = kv.first.as<std::string>();
        if (key == "trainer") continue;
        if (kTopIgnored.count(key) != 0) {
            out.ignored.push_back(key);
            continue;
        }
        return r.error(key, fmt::format("is not a LightningCLI key shardcast knows; known: trainer, {}", fmt::join(kTopIgnored, ", ")));
    }
    const YAML::Node trainer = root["trainer"];
    if (!LightningReader::present(trainer) || !trainer.IsMap()) return r.error("trainer", "must be a mapping of the Trainer's arguments");
    for (const auto& kv : trainer) {
        const std::string key = kv.first.as<std::string>();
        if (kTrainerUsed.count(key) != 0) continue;
        if (kTrainerIgnored.count(key) != 0) {
            out.ignored.push_back("trainer." + key);
            continue;
        }
        return r.error("trainer." + key, fmt::format("is not a Trainer argument; known: {}", known(kTrainerUsed, kTrainerIgnored)));
    }
    SHARDCAST_TRY_ASSIGN(accelerator, r.text(trainer["accelerator"], "trainer.accelerator"));
    if (accelerator && *accelerator != "gpu" && *accelerator != "cuda" && *accelerator != "auto") {
        return r.error("trainer.accelerator", fmt::format("is '{}'; shardcast plans GPU runs (gpu, cuda, auto)", *accelerator));
    }

    // The strategy: "fsdp", or FSDPStrategy with init_args.
    const YAML::Node strategy = trainer["strategy"];
    YAML::Node args;
    if (!LightningReader::present(strategy)) {
        return r.error("trainer.strategy", "is missing; shardcast reads FSDP runs (strategy: fsdp, or FSDPStrategy)");
    }
    if (strategy.IsScalar()) {
        if (strategy.Scalar() != "fsdp") {
            return r.error("trainer.strategy", fmt::format("is '{}'; shardcast reads FSDP runs: fsdp or FSDPStrategy", strategy.Scalar()));
        }
    } else if (strategy.IsMap()) {
        SHARDCAST_TRY_ASSIGN(cls, r.text(strategy["class_path"], "trainer.strategy.class_path"));
        const std::string name = cls.value_or("");
        if (name != "FSDPStrategy" && name != "lightning.pytorch.strategies.FSDPStrategy" &&
            name != "pytorch_lightning.strategies.FSDPStrategy" && name != "lightning.pytorch.strategies.fsdp.FSDPStrategy") {
            return r.error("trainer.strategy.class_path",
                           fmt::format("is '{}'; valid: lightning.pytorch.strategies.FSDPStrategy", name));
        }
        args = strategy["init_args"];
        if (LightningReader::present(args) && !args.IsMap()) return r.error("trainer.strategy.init_args", "must be a mapping");
    } else {
        return r.error("trainer.strategy", "is missing; shardcast reads FSDP runs (strategy: fsdp, or FSDPStrategy)");
    }
    if (LightningReader::present(args)) {
        for (const auto& kv : args) {
            const std::string key = kv.first.as<std::string>();
            if (kStrategyUsed.count(key) != 0) continue;
            if (kStrategyIgnored.count(key) != 0) {
                out.ignored.push_back("trainer.strategy.init_args." + key);
                continue;
            }
            return r.error("trainer.strategy.init_args." + key,
                           fmt::format("is not an FSDPStrategy argument shardcast knows; known: {}", known(kStrategyUsed, kStrategyIgnored)));
        }
    }
    const YAML::Node a = LightningReader::present(args) ? args : YAML::Node(YAML::NodeType::Map);
    const std::string p = "trainer.strategy.init_args.";
    o.fsdp = 1;
    SHARDCAST_TRY_ASSIGN(sharding, r.text(a["sharding_strategy"], p + "sharding_strategy"));
    std::string up = sharding.value_or("FULL_SHARD");
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    static const std::map<std::string, std::string> strategies = {{"FULL_SHARD", "FULL_SHARD"},
                                                                  {"SHARD_GRAD_OP", "SHARD_GRAD_OP"},
                                                                  {"NO_SHARD", "NO_SHARD"},
                                                                  {"HYBRID_SHARD", "HYBRID_SHARD"},
                                                                  {"_HYBRID_SHARD_ZERO2", "_HYBRID_SHARD_ZERO2"}};
    const auto s = strategies.find(up);
    if (s == strategies.end()) {
        return r.error(p + "sharding_strategy", fmt::format("is '{}'; valid: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                                                           "_HYBRID_SHARD_ZERO2", up));
    }
    o.strategy = s->second;

    // The GPUs.
    // devices "auto" (the Trainer's default) or "-1": every GPU the machine has, which the flags say.
    const YAML::Node devices_node = trainer["devices"];
    const bool auto_devices = LightningReader::present(devices_node) && devices_node.IsScalar() &&
                              (devices_node.Scalar() == "auto" || devices_node.Scalar() == "-1");
    SHARDCAST_TRY_ASSIGN(devices, auto_devices ? core::Result<std::optional<int64_t>>(std::optional<int64_t>{})
                                               : r.integer(trainer["devices"], "trainer.devices", 1, 65536));
    SHARDCAST_TRY_ASSIGN(nodes, r.integer(trainer["num_nodes"], "trainer.num_nodes", 1, 1'000'000));
    if (devices) o.gpus_per_node = *devices;
    o.nodes = nodes.value_or(1);
    mapped(fmt::format("trainer: devices {}, num_nodes {} -> {}--nodes {}", devices ? std::to_string(*devices) : "(auto)", *o.nodes,
                       devices ? fmt::format("--gpus-per-node {} ", *devices) : std::string(), *o.nodes));
    if (const YAML::Node mesh = a["device_mesh"]; LightningReader::present(mesh)) {
        if (!mesh.IsSequence() || mesh.size() != 2) return r.error(p + "device_mesh", "must be [replicate, shard] sizes");
        SHARDCAST_TRY_ASSIGN(shard, r.integer(mesh[1], p + "device_mesh[1]", 1, 1'000'000));
        o.shard_size = *shard;
    } else if (up.find("HYBRID") != std::string::npos && o.gpus_per_node) {
        o.shard_size = *o.gpus_per_node;  // FSDP1's hybrid default: a node per shard group
    }
    mapped(fmt::format("FSDPStrategy sharding_strategy {} -> --fsdp 1 --strategy {}{}", up, *o.strategy,
                       o.shard_size ? fmt::format(" --shard-size {}", *o.shard_size) : std::string()));

    SHARDCAST_TRY_ASSIGN(wrap_classes, r.classes(a["auto_wrap_policy"], p + "auto_wrap_policy"));
    o.wrap = wrap_classes.empty() ? "whole" : "block";
    mapped(wrap_classes.empty() ? std::string("no auto_wrap_policy -> --wrap whole (the LightningModule is one FSDP unit)")
                                : fmt::format("auto_wrap_policy {{{}}} -> --wrap block", fmt::join(wrap_classes, ", ")));
    SHARDCAST_TRY_ASSIGN(ac_old, r.classes(a["activation_checkpointing"], p + "activation_checkpointing"));
    SHARDCAST_TRY_ASSIGN(ac_policy, r.classes(a["activation_checkpointing_policy"], p + "activation_checkpointing_policy"));
    if (!ac_old.empty() && !ac_policy.empty()) {
        return r.error(p + "activation_checkpointing", "and activation_checkpointing_policy are both given: Lightning refuses that");
    }
    o.ac = ac_old.empty() && ac_policy.empty() ? "none" : "full";
    mapped(fmt::format("activation_checkpointing_policy -> --ac {}", *o.ac));
    SHARDCAST_TRY_ASSIGN(offload, r.boolean(a["cpu_offload"], p + "cpu_offload"));
    if (offload.value_or(false)) {
        o.offload = "cpu";
        mapped("cpu_offload true -> --offload cpu");
    }
    SHARDCAST_TRY_ASSIGN(limit, r.boolean(a["limit_all_gathers"], p + "limit_all_gathers"));
    if (!limit.value_or(true)) {
        return r.error(p + "limit_all_gathers", "is false: give it as sharding.limit_all_gathers false in a plan file");
    }
    SHARDCAST_TRY_ASSIGN(forward_prefetch, r.boolean(a["forward_prefetch"], p + "forward_prefetch"));
    o.forward_prefetch = forward_prefetch.value_or(false) ? "true" : "false";
    SHARDCAST_TRY_ASSIGN(prefetch, r.text(a["backward_prefetch"], p + "backward_prefetch"));
    static const std::map<std::string, std::string> prefetches = {
        {"BACKWARD_PRE", "pre"}, {"BACKWARDPREFETCH.BACKWARD_PRE", "pre"}, {"BACKWARD_POST", "post"},
        {"BACKWARDPREFETCH.BACKWARD_POST", "post"}, {"NONE", "none"}};
    std::string pre = prefetch.value_or("BACKWARD_PRE");
    std::transform(pre.begin(), pre.end(), pre.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    const auto f = prefetches.find(pre);
    if (f == prefetches.end()) return r.error(p + "backward_prefetch", fmt::format("is '{}'; valid: BACKWARD_PRE, BACKWARD_POST", *prefetch));
    o.backward_prefetch = f->second;
    if (LightningReader::present(a["mixed_precision"])) {
        return r.error(p + "mixed_precision", "is given: give the Trainer's precision instead (Lightning derives FSDP's from it)");
    }
    SHARDCAST_TRY_ASSIGN(state_dict, r.text(a["state_dict_type"], p + "state_dict_type"));
    if (state_dict) mapped(fmt::format("state_dict_type {}: how saves are written; plan them with --checkpoint {}", *state_dict,
                                       *state_dict == "full" ? "full" : "sharded"));

    // Precision, accumulation, clipping.
    SHARDCAST_TRY_ASSIGN(precision, r.text(trainer["precision"], "trainer.precision"));
    static const std::map<std::string, std::string> precisions = {
        {"32-true", "fp32"}, {"32", "fp32"}, {"bf16-mixed", "bf16"}, {"bf16-true", "bf16"}, {"bf16", "bf16"},
        {"16-mixed", "fp16"}, {"16-true", "fp16"}, {"16", "fp16"}};
    const std::string given = precision.value_or("32-true");
    const auto d = precisions.find(given);
    if (d == precisions.end()) {
        return r.error("trainer.precision", fmt::format("is '{}'; valid: 32-true, bf16-mixed, bf16-true, 16-mixed, 16-true", given));
    }
    o.param_dtype = d->second;
    o.reduce_dtype = d->second;
    mapped(fmt::format("precision {} -> --param-dtype {} --reduce-dtype {} (FSDPPrecision: param, reduce and buffer dtype alike)",
                       given, d->second, d->second));
    SHARDCAST_TRY_ASSIGN(accum, r.integer(trainer["accumulate_grad_batches"], "trainer.accumulate_grad_batches", 1, 4096));
    o.grad_accum = accum.value_or(1);
    SHARDCAST_TRY_ASSIGN(clip_text, r.text(trainer["gradient_clip_val"], "trainer.gradient_clip_val"));
    double clip = 0;
    if (clip_text) {
        try {
            size_t used = 0;
            clip = std::stod(*clip_text, &used);
            if (used != clip_text->size() || !(clip >= 0) || !(clip <= 1e30)) throw std::invalid_argument("range");
        } catch (const std::exception&) {
            return r.error("trainer.gradient_clip_val", fmt::format("is '{}'; valid: a number from 0 to 1e30", *clip_text));
        }
    }
    SHARDCAST_TRY_ASSIGN(algorithm, r.text(trainer["gradient_clip_algorithm"], "trainer.gradient_clip_algorithm"));
    if (clip > 0 && algorithm.value_or("norm") != "norm") {
        return r.error("trainer.gradient_clip_algorithm", fmt::format("is '{}'; modelled: norm (clip_grad_norm_)", *algorithm));
    }
    o.clip_grad_norm = clip;
    mapped(fmt::format("accumulate_grad_batches {}, gradient_clip_val {} -> --grad-accum {} --clip-grad-norm {:g} (the batch "
                       "size is the DataModule's: --micro-batch, --seq-len)",
                       *o.grad_accum, clip_text.value_or("None"), *o.grad_accum, clip));
    return core::Ok{};
}

}  // namespace

bool isLightningYaml(std::string_view text) {
    try {
        const YAML::Node root = YAML::Load(std::string(text));
        return root.IsMap() && root["trainer"];
    } catch (const YAML::Exception&) {
        return false;
    }
}

core::Result<ImportedConfig> importLightningYaml(std::string_view text, const std::string& where) {
    ImportedConfig out;
    out.format = "Lightning CLI YAML";
    try {
        const YAML::Node root = YAML::Load(std::string(text));
        if (!root.IsMap()) return core::makeError(fmt::format("{}: not a LightningCLI config (a YAML mapping)", where));
        if (auto st = mapLightning(root, where, out); !st) return st.error();
        return out;
    } catch (const YAML::ParserException& e) {
        return core::makeError(fmt::format("{}: malformed YAML at line {}, column {}: {}", where, e.mark.line + 1,
                                           e.mark.column + 1, e.msg));
    } catch (const YAML::Exception& e) {
        return core::makeError(fmt::format("{}: not a LightningCLI config: {}", where, e.msg));
    }
}

}  // namespace shardcast::configs
