#include "core/plan/plan_build.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/base/json_text.hpp"
#include "core/base/limits.hpp"
#include "core/model/model_io.hpp"
#include "core/model/model_scale.hpp"

namespace shardcast::core {

namespace fs = std::filesystem;

namespace {

// For fields stored as int: keeps nodes * gpus_per_node well inside int range.
Status checkRange(const std::optional<int64_t>& v, int64_t min, int64_t max, std::string_view flag) {
    if (v && (*v < min || *v > max)) {
        return makeError(fmt::format("{}: must be an integer from {} to {} (got {})", flag, min, max, *v));
    }
    return Ok{};
}

constexpr int64_t kMaxNodes = 1'000'000;
constexpr int64_t kMaxGpusPerNode = 1024;
constexpr int64_t kMaxPrefetchDepth = 1024;  // units ahead; more than a model's units changes nothing

std::optional<DType> parseMixedDType(std::string_view s) {
    auto t = parseDType(s);
    if (t && (*t == DType::F32 || *t == DType::BF16 || *t == DType::F16)) return t;
    return std::nullopt;
}

// A model or modules-file reference that is a file (not a bundled name), made absolute so it
// still resolves after the plan is written elsewhere. Tries the working directory, then the
// plan file's folder.
std::string absolutizeRef(const std::string& ref, const fs::path& plan_dir) {
    if (ref.empty()) return ref;
    std::error_code ec;
    fs::path p(ref);
    if (p.is_relative() && !fs::exists(p, ec) && !plan_dir.empty() && fs::exists(plan_dir / p, ec)) {
        p = plan_dir / p;
    }
    if (!fs::exists(p, ec)) return ref;
    fs::path abs = fs::absolute(p, ec);
    return ec ? ref : abs.lexically_normal().string();
}

bool isBundledModel(const std::string& ref) {
    const auto names = bundledModelNames();
    return std::find(names.begin(), names.end(), ref) != names.end();
}

std::string relativeTo(const std::string& ref, const fs::path& dir) {
    fs::path p(ref);
    if (!p.is_absolute()) return ref;
    std::error_code ec;
    fs::path rel = fs::relative(p, dir, ec);
    return (ec || rel.empty()) ? ref : rel.generic_string();
}

}  // namespace

Result<Plan> buildPlan(const PlanOverrides& o) {
    Plan plan;
    fs::path plan_dir;
    if (o.base && !o.plan_file.empty()) {
        return makeError(fmt::format("give a plan file ({}) or --from-config FILE, not both", o.plan_file));
    }
    if (o.base) {
        plan = *o.base;
    } else if (!o.plan_file.empty()) {
        auto loaded = loadPlanFile(o.plan_file);
        if (!loaded) return loaded.error();
        plan = std::move(loaded).value();
        plan_dir = fs::path(o.plan_file).parent_path();
    } else {
        if (!o.model) {
            return makeError(
                "plan: give a plan file or --model NAME|CONFIG.json (bundled models: see `shardcast models`)");
        }
        auto gpu = resolveGpu(kDefaultGpu);
        if (!gpu) return gpu.error();
        plan.cluster.gpu = std::move(gpu).value();
        plan.cluster.nodes = kDefaultNodes;
        plan.cluster.gpus_per_node = kDefaultGpusPerNode;
    }
    // The model before any LoRA adapters: --model, --scale and --lora below start from it.
    if (plan.base_model) {
        plan.model = std::move(plan.base_model);
        plan.base_model.reset();
    }

    // Flag-level checks first, so the message names the flag rather than the plan field.
    for (auto status : {checkRange(o.nodes, 1, kMaxNodes, "--nodes"),
                        checkRange(o.gpus_per_node, 1, kMaxGpusPerNode, "--gpus-per-node"),
                        checkRange(o.shard_size, 0, kMaxNodes * kMaxGpusPerNode, "--shard-size"),
                        checkRange(o.micro_batch, 1, limits::kMaxMicroBatch, "--micro-batch"),
                        checkRange(o.seq_len, 1, limits::kMaxSeqLen, "--seq-len"),
                        checkRange(o.grad_accum, 1, limits::kMaxGradAccum, "--grad-accum"),
                        checkRange(o.prefetch_depth, 1, kMaxPrefetchDepth, "--prefetch-depth"),
                        checkRange(o.tp, 1, kMaxGpusPerNode, "--tp"), checkRange(o.pp, 1, limits::kMaxLayers, "--pp"),
                        checkRange(o.pp_virtual_stages, 1, limits::kMaxLayers, "--pp-virtual-stages"),
                        checkRange(o.cp, 1, kMaxGpusPerNode, "--cp")}) {
        if (!status) return status.error();
    }
    // File names and patterns end up in plans, traces and the store, which are UTF-8 JSON.
    struct TextFlag {
        const std::optional<std::string>& value;
        const char* flag;
    };
    for (const TextFlag& f : {TextFlag{o.model, "--model"}, TextFlag{o.gpu, "--gpu"}, TextFlag{o.wrap, "--wrap"},
                              TextFlag{o.scale, "--scale"}}) {
        if (!f.value) continue;
        if (auto utf8 = checkUtf8(*f.value, f.flag); !utf8) return utf8.error();
    }

    std::optional<ScaleSpec> scale;
    if (o.scale) {
        auto parsed = parseScale(*o.scale, "--scale");
        if (!parsed) return parsed.error();
        if (parsed->seq_len && o.seq_len && *parsed->seq_len != *o.seq_len) {
            return makeError(fmt::format("--scale: seq={} and --seq-len {} both set the sequence length; give one",
                                         *parsed->seq_len, *o.seq_len));
        }
        scale = std::move(parsed).value();
    }

    if (o.model) {
        auto model = resolveModel(*o.model);
        if (!model) return makeError("--model: " + model.error().message);
        plan.model = std::make_shared<const Model>(std::move(model).value());
        plan.model_ref = isBundledModel(*o.model) ? *o.model : absolutizeRef(*o.model, {});
        plan.scale = {};
    } else if (!isBundledModel(plan.model_ref)) {
        plan.model_ref = absolutizeRef(plan.model_ref, plan_dir);
    }
    // --scale keys override the plan file's one by one; scaling always starts from the config file.
    if (scale && !scale->model.empty()) {
        if (scale->model.hidden) plan.scale.hidden = scale->model.hidden;
        if (scale->model.layers) plan.scale.layers = scale->model.layers;
        auto scaled = scaleModel(*plan.model, plan.scale);
        if (!scaled) return makeError("--scale: " + scaled.error().message);
        plan.model = std::make_shared<const Model>(std::move(scaled).value());
    }
    if (o.gpu) {
        auto gpu = resolveGpu(*o.gpu);
        if (!gpu) return makeError("--gpu: " + gpu.error().message);
        plan.cluster.gpu = std::move(gpu).value();
    }
    if (o.nodes) plan.cluster.nodes = static_cast<int>(*o.nodes);
    if (o.gpus_per_node) plan.cluster.gpus_per_node = static_cast<int>(*o.gpus_per_node);

    ShardingSpec& s = plan.sharding;
    if (o.strategy) {
        auto strategy = parseStrategy(*o.strategy);
        if (!strategy) {
            return makeError(fmt::format(
                "--strategy: unknown strategy '{}'; valid: NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, "
                "HYBRID_SHARD, _HYBRID_SHARD_ZERO2 (aliases ddp, zero2, zero3, hsdp, hsdp-zero2)",
                textExcerpt(*o.strategy)));
        }
        s.strategy = *strategy;
    }
    if (o.shard_size) s.shard_size = static_cast<int>(*o.shard_size);
    if (o.fsdp) {
        if (*o.fsdp != 1 && *o.fsdp != 2) {
            return makeError(fmt::format("--fsdp: must be 1 or 2 (got {})", *o.fsdp));
        }
        s.fsdp_version = static_cast<int>(*o.fsdp);
    }
    if (o.wrap) {
        auto wrap = parseWrapPolicy(*o.wrap, "--wrap");
        if (!wrap) return wrap.error();
        s.wrap = std::move(wrap).value();
    }
    if (!s.wrap.modules_file.empty()) s.wrap.modules_file = absolutizeRef(s.wrap.modules_file, plan_dir);
    if (o.reshard_after_forward) {
        const std::string& v = *o.reshard_after_forward;
        if (v == "true") {
            s.reshard_after_forward = ReshardMode::True;
        } else if (v == "false") {
            s.reshard_after_forward = ReshardMode::False;
        } else {
            int k = 0;
            const bool digits = !v.empty() && v.size() < 9 &&
                                std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
            if (digits) k = std::stoi(v);
            if (k < 1) {
                return makeError(fmt::format(
                    "--reshard-after-forward: expected true, false or a positive rank count K (got '{}')", textExcerpt(v)));
            }
            s.reshard_after_forward = ReshardMode::Count;
            s.reshard_after_forward_k = k;
        }
    }

    if (o.prefetch_depth) s.prefetch_depth = static_cast<int>(*o.prefetch_depth);
    if (o.tp) s.tp = static_cast<int>(*o.tp);
    if (o.pp) s.pp = static_cast<int>(*o.pp);
    if (o.pp_virtual_stages) s.pp_virtual_stages = static_cast<int>(*o.pp_virtual_stages);
    if (o.pp_schedule) {
        const auto sched = parsePpSchedule(*o.pp_schedule);
        if (!sched) {
            return makeError(fmt::format("--pp-schedule: expected one of {} (got '{}')", kPpScheduleChoices,
                                         textExcerpt(*o.pp_schedule)));
        }
        s.pp_schedule = *sched;
    }
    if (o.pp_stage_blocks) {
        std::vector<int> blocks;
        std::string_view rest = *o.pp_stage_blocks;
        bool ok = !rest.empty();
        while (ok && !rest.empty()) {
            const size_t comma = rest.find(',');
            const std::string_view item = rest.substr(0, comma);
            int64_t v = -1;
            const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
            ok = ec == std::errc{} && end == item.data() + item.size() && v >= 0 && v <= limits::kMaxLayers &&
                 blocks.size() < static_cast<size_t>(limits::kMaxLayers);
            if (ok) blocks.push_back(static_cast<int>(v));
            rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
            if (ok && comma != std::string_view::npos && rest.empty()) ok = false;
        }
        if (!ok) {
            return makeError(fmt::format("--pp-stage-blocks: expected block counts per stage separated by commas, e.g. "
                                         "9,10,10,3 (got '{}')",
                                         textExcerpt(*o.pp_stage_blocks)));
        }
        s.pp_stage_blocks = std::move(blocks);
    }
    if (o.cp) s.cp = static_cast<int>(*o.cp);
    for (auto [value, flag, target] : {std::tuple{&o.sequence_parallel, "--sequence-parallel", &s.sequence_parallel},
                                       std::tuple{&o.loss_parallel, "--loss-parallel", &s.loss_parallel},
                                       std::tuple{&o.async_tp, "--async-tp", &s.async_tp}}) {
        if (!*value) continue;
        if (**value != "true" && **value != "false") {
            return makeError(fmt::format("{}: expected true or false (got '{}')", flag, textExcerpt(**value)));
        }
        *target = **value == "true";
    }
    if (o.forward_prefetch) {
        if (*o.forward_prefetch != "true" && *o.forward_prefetch != "false") {
            return makeError(fmt::format("--forward-prefetch: expected true or false (got '{}')", textExcerpt(*o.forward_prefetch)));
        }
        s.forward_prefetch = *o.forward_prefetch == "true";
    }
    if (o.backward_prefetch) {
        auto p = parseBackwardPrefetch(*o.backward_prefetch);
        if (!p) {
            return makeError(
                fmt::format("--backward-prefetch: expected pre, post or none (got '{}')", textExcerpt(*o.backward_prefetch)));
        }
        s.backward_prefetch = *p;
    }

    TrainingSpec& t = plan.training;
    if (o.micro_batch) t.micro_batch = *o.micro_batch;
    if (scale && scale->seq_len) t.seq_len = *scale->seq_len;
    if (o.seq_len) t.seq_len = *o.seq_len;
    if (o.grad_accum) t.grad_accum = *o.grad_accum;
    if (o.no_sync) t.no_sync = true;

    struct DTypeFlag {
        const std::optional<std::string>& value;
        std::string_view flag;
    };
    for (const DTypeFlag& f : {DTypeFlag{o.param_dtype, "--param-dtype"},
                               DTypeFlag{o.reduce_dtype, "--reduce-dtype"},
                               DTypeFlag{o.master_dtype, "--master-dtype"}}) {
        if (!f.value) continue;
        auto d = parseMixedDType(*f.value);
        if (!d) return makeError(fmt::format("{}: unknown dtype '{}'; valid: fp32, bf16, fp16", f.flag, textExcerpt(*f.value)));
        if (f.flag == "--param-dtype") t.param_dtype = *d;
        else if (f.flag == "--reduce-dtype") t.reduce_dtype = *d;
        else t.master_dtype = *d;
    }
    if (o.optimizer) {
        auto v = parseOptimizer(*o.optimizer);
        if (!v) return makeError(fmt::format("--optimizer: unknown optimizer '{}'; valid: adamw, adamw-fused, sgd, sgd-momentum", textExcerpt(*o.optimizer)));
        t.optimizer = *v;
    }
    if (o.ac) {
        auto v = parseAcSpec(*o.ac);
        if (!v) return makeError("--ac: " + acSpecError(*o.ac));
        if (plan.model) {
            if (auto e = resolveAcBlocks(*v, static_cast<int64_t>(plan.model->blocks.size()), "--ac")) return makeError(*e);
        }
        applyAc(t, *v);
    }
    if (o.attention) {
        auto v = parseAttention(*o.attention);
        if (!v) return makeError(fmt::format("--attention: unknown kernel '{}'; valid: flash, eager", textExcerpt(*o.attention)));
        t.attention = *v;
    }
    if (o.kernels) {
        auto v = parseKernelImpl(*o.kernels);
        if (!v) return makeError(fmt::format("--kernels: unknown implementation '{}'; valid: eager, fused, compile", textExcerpt(*o.kernels)));
        t.kernels = *v;
    }
    if (o.impl) {
        auto v = parseModelImpl(*o.impl);
        if (!v) return makeError(fmt::format("--impl: unknown implementation '{}'; valid: hf, torchtitan", textExcerpt(*o.impl)));
        t.impl = *v;
    }
    if (o.allocator) {
        auto v = parseAllocatorMode(*o.allocator);
        if (!v) return makeError(fmt::format("--allocator: unknown mode '{}'; valid: caching, expandable", textExcerpt(*o.allocator)));
        t.allocator = *v;
    }
    if (o.hf_mask) {
        auto v = parseHfMask(*o.hf_mask);
        if (!v) return makeError(fmt::format("--hf-mask: unknown transformers behaviour '{}'; valid: 5.x, 4.5x", textExcerpt(*o.hf_mask)));
        t.hf_mask = *v;
    }
    if (o.offload) {
        auto v = parseOffload(*o.offload);
        if (!v) return makeError(fmt::format("--offload: unknown offload '{}'; valid: none, cpu", textExcerpt(*o.offload)));
        t.offload = *v;
    }
    if (o.frozen) {
        if (auto pattern = limits::checkFrozenPattern(*o.frozen, "--frozen"); !pattern) return pattern.error();
        t.frozen_regex = *o.frozen;
    }
    if (o.clip_grad_norm) {
        if (!(*o.clip_grad_norm >= 0) || !(*o.clip_grad_norm <= 1e30)) {
            return makeError(fmt::format("--clip-grad-norm: {} is not a max_norm; valid: a number from 0 (no clipping) to 1e30",
                                         *o.clip_grad_norm));
        }
        t.clip_grad_norm = *o.clip_grad_norm;
    }
    CheckpointSpec& k = plan.checkpoint;
    if (o.checkpoint) {
        auto v = parseCheckpointMode(*o.checkpoint);
        if (!v) {
            return makeError(fmt::format("--checkpoint: unknown mode '{}'; valid: none, full, sharded", textExcerpt(*o.checkpoint)));
        }
        k.mode = *v;
    }
    if (o.checkpoint_every) {
        if (*o.checkpoint_every < 1) {
            return makeError(fmt::format("--checkpoint-every {}: the optimizer steps between saves must be 1 or more "
                                         "(torchtitan's default is {})",
                                         *o.checkpoint_every, kDefaultCheckpointEverySteps));
        }
        k.every_steps = *o.checkpoint_every;
    }
    for (auto [value, flag, field] : {std::tuple{&o.checkpoint_offload_to_cpu, "--checkpoint-offload-to-cpu", &k.offload_to_cpu},
                                      std::tuple{&o.checkpoint_rank0_only, "--checkpoint-rank0-only", &k.rank0_only}}) {
        if (!*value) continue;
        if (**value != "true" && **value != "false") {
            return makeError(fmt::format("{}: '{}' is not true or false", flag, textExcerpt(**value)));
        }
        *field = **value == "true";
    }
    if (o.all_gather_dtype) {
        auto v = parseAllGatherDtype(*o.all_gather_dtype);
        if (!v) {
            return makeError(fmt::format("--all-gather-dtype: unknown dtype '{}'; valid: param (param_dtype), fp8 (torchao "
                                         "float8 all-gather)",
                                         textExcerpt(*o.all_gather_dtype)));
        }
        t.all_gather_dtype = *v;
    }
    if (o.lora) {
        auto lora = parseLora(*o.lora, "--lora");
        if (!lora) return lora.error();
        t.lora = std::move(lora).value();
    }
    if (plan.model) {
        if (auto st = applyLora(plan, o.lora ? "--lora" : "training.lora"); !st) return st.error();
    }
    return plan;
}

Status writePlanFile(const Plan& plan, const fs::path& path) {
    std::error_code ec;
    const fs::path out_dir = fs::absolute(path, ec).parent_path();
    Plan copy = plan;
    if (!isBundledModel(copy.model_ref)) copy.model_ref = relativeTo(copy.model_ref, out_dir);
    if (!copy.sharding.wrap.modules_file.empty()) {
        copy.sharding.wrap.modules_file = relativeTo(copy.sharding.wrap.modules_file, out_dir);
    }
    return writeFileAtomically(path, planToJson(copy).dump(2) + "\n");
}

}  // namespace shardcast::core
