#include "apps/shardcast/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "apps/shardcast/commands.hpp"
#include "core/base/units.hpp"
#include "core/lower/lower.hpp"
#include "core/model/model_lora.hpp"

namespace shardcast::cli {

namespace {

using core::MemCategory;

// Units shown in full before the table is abbreviated to the first and last kUnitEdge rows.
constexpr std::size_t kMaxUnitRows = 12;
constexpr std::size_t kUnitEdge = 4;
constexpr double kGB = 1e9;

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(core::kGiB); }
double gb(int64_t bytes) { return static_cast<double>(bytes) / kGB; }

int64_t modelLayers(const core::Model& m) {
    return m.arch.layers > 0 ? m.arch.layers : static_cast<int64_t>(m.blocks.size());
}

int64_t trainableParams(const core::Program& p) {
    int64_t n = 0;
    for (const auto& u : p.units) n += u.trainable_params;
    return n;
}

std::string reshardString(const core::ShardingSpec& s) {
    switch (s.reshard_after_forward) {
        case core::ReshardMode::Default: return "default";
        case core::ReshardMode::True: return "true";
        case core::ReshardMode::False: return "false";
        case core::ReshardMode::Count: return std::to_string(s.reshard_after_forward_k);
    }
    return "default";
}

std::string billions(int64_t n) { return fmt::format("{:.2f} billion", static_cast<double>(n) / 1e9); }

double ms(double seconds) { return seconds * 1e3; }
double ms(int64_t ns) { return static_cast<double>(ns) * 1e-6; }

// Where the step's time goes: per stream, then per unit (abbreviated like the units table).
// The device mesh in PyTorch's init_device_mesh order (outermost first), each dimension with its size.
nlohmann::json meshDims(const core::Mesh& mesh) {
    nlohmann::json dims = nlohmann::json::array();
    if (mesh.pp > 1) dims.push_back(nlohmann::json{{"name", "pp"}, {"size", mesh.pp}});
    dims.push_back(nlohmann::json{{"name", "dp_replicate"}, {"size", mesh.replicate_size}});
    dims.push_back(nlohmann::json{{"name", "dp_shard"}, {"size", mesh.shard_size}});
    dims.push_back(nlohmann::json{{"name", "tp"}, {"size", mesh.tp}});
    return dims;
}

std::string meshText(const core::Plan& plan, const core::Mesh& mesh) {
    const core::ShardingSpec& s = plan.sharding;
    const int per_node = plan.cluster.gpus_per_node;
    const int dp_in_node = std::max(1, per_node / mesh.tp);
    std::string text;
    if (mesh.pp > 1) {
        const int stride = mesh.world_size / mesh.pp;
        text = fmt::format("pp {} x dp_replicate {} x dp_shard {} x tp {} (init_device_mesh order); the {} {} {} "
                           "ranks apart ({}); ",
                           mesh.pp, mesh.replicate_size, mesh.shard_size, mesh.tp, mesh.pp,
                           mesh.virtual_stages > 1 ? fmt::format("pipeline ranks ({} stages each)", mesh.virtual_stages)
                                                   : std::string("stages"),
                           stride, stride >= per_node ? "across nodes" : "inside a node");
    } else {
        text = fmt::format("dp_replicate {} x dp_shard {} x tp {} (init_device_mesh order); ", mesh.replicate_size,
                           mesh.shard_size, mesh.tp);
    }
    if (mesh.tp == 1) return text + fmt::format("the {} dp ranks consecutive", mesh.dp());
    return text + fmt::format("tp inside a node over NVLink, the {} dp ranks {} apart ({} per node); sequence parallel "
                              "{}, loss parallel {}",
                              mesh.dp(), mesh.tp, std::min(dp_in_node, mesh.dp()), s.sequence_parallel ? "on" : "off",
                              s.loss_parallel ? "on" : "off");
}

// Pipeline stages: one row each (Evaluation::stages).
void appendPipelineSection(std::string& out, const core::Plan& plan, const sim::Evaluation& e) {
    if (e.stages.empty()) return;
    auto line = [&out](std::string_view text) {
        out.append(text);
        out.push_back('\n');
    };
    line("");
    const int v = e.mesh.virtual_stages;
    // Interleaved1F1B: one row per pipeline rank, which holds stages r, r + pp, ...
    const std::string what = v > 1 ? "rank" : "stage";
    line(fmt::format("Pipeline ({}, schedule {}, {} micro-batches; memory and timeline below: {} {}, {})",
                     v > 1 ? fmt::format("{} ranks x {} stages each = {} stages", e.stages.size(), v, e.mesh.stages())
                           : fmt::format("{} stages", e.stages.size()),
                     core::ppScheduleName(plan.sharding.pp_schedule), plan.training.grad_accum, what, e.stage,
                     e.stage == e.binding_stage ? std::string("whose memory binds")
                                                : fmt::format("as asked; {} {}'s memory binds", what, e.binding_stage)));
    line(fmt::format("  {:<6}{:>7}{:>8}{:>12}{:>13}{:>12}{:>12}{:>14}{:>15}", what, "blocks", "held", "step (ms)",
                     "compute (ms)", "idle (ms)", "p2p (ms)", "peak (GiB)", "reserved (GiB)"));
    for (const sim::StageFigures& f : e.stages) {
        line(fmt::format("  {:<6}{:>7}{:>8}{:>12.2f}{:>13.2f}{:>12.2f}{:>12.2f}{:>14.2f}{:>15}", f.stage, f.blocks,
                         f.micro_batches_held, ms(f.step_s), ms(f.compute_s), ms(f.idle_s), ms(f.p2p_s), gib(f.peak_bytes),
                         f.reserved_bytes > 0 ? fmt::format("{:.2f}", gib(f.reserved_bytes)) : std::string("-")));
    }
    if (v > 1) {
        line(fmt::format("  rank r holds stages {}; held: the most (stage, micro-batch) pairs between their forward and "
                         "their backward; idle: the compute stream waiting within the pipeline's step (the bubble and "
                         "exposed communication)",
                         v == 2 ? fmt::format("r and r + {}", e.mesh.pp)
                                : fmt::format("r, r + {}, ..., r + {}", e.mesh.pp, (v - 1) * e.mesh.pp)));
        line(fmt::format("  FSDP inside each stage: the schedule unshards a stage before it computes (at most {} stages "
                         "resident, torch's max_active_stages), gradients accumulate unsharded and each stage "
                         "reduce-scatters once per step, after its own last backward",
                         core::kPipelineMaxActiveStages));
        return;
    }
    line("  held: the most micro-batches between their forward and their backward (their activations held at once); "
         "idle: the compute stream waiting within the pipeline's step (the bubble and exposed communication)");
    const bool reshards = e.program.units.size() > 1 && e.program.units[1].reshard_after_forward;
    line(fmt::format("  FSDP inside each stage: parameters {} after forward{}; gradients accumulate unsharded and are "
                     "reduce-scattered once per step, after the stage's last backward",
                     reshards ? "resharded" : "kept unsharded",
                     plan.sharding.reshard_after_forward == core::ReshardMode::Default ? " (torchtitan's default under pp)" : ""));
}

// Checkpoint saves (Evaluation::checkpoint, simulator/checkpoint.hpp).
void appendCheckpointSection(std::string& out, const core::Plan& plan, const sim::Evaluation& e) {
    if (!e.checkpoint) return;
    const sim::CheckpointFigures& f = *e.checkpoint;
    auto line = [&out](std::string_view text) {
        out.append(text);
        out.push_back('\n');
    };
    const core::CheckpointSpec& k = plan.checkpoint;
    const bool full = f.mode == core::CheckpointMode::Full;
    line("");
    line(fmt::format("Checkpoint ({} save every {} steps{})", core::checkpointModeName(f.mode), f.every_steps,
                     full ? fmt::format(", offload_to_cpu {}, rank0_only {}", k.offload_to_cpu, k.rank0_only) : std::string()));
    line(fmt::format("  state saved       {:>10.2f} GB  (model {:.2f} GB + optimizer {:.2f} GB, {})", gb(f.model_bytes + f.optimizer_bytes),
                     gb(f.model_bytes), gb(f.optimizer_bytes), core::dtypeName(plan.training.master_dtype)));
    if (full) {
        line(fmt::format("  rank 0 device     {:>10.2f} GiB  of a {:.2f} GiB budget: {}", gib(f.rank0_peak_bytes), gib(f.budget_bytes),
                         f.rank0_fits ? std::string("fits")
                                      : std::string(k.offload_to_cpu ? "OUT OF MEMORY during the save"
                                                                     : "OUT OF MEMORY during the save (the gathered state "
                                                                       "stays on the device: --checkpoint-offload-to-cpu "
                                                                       "true moves it to the host piece by piece)")));
        if (k.offload_to_cpu) {
            line(fmt::format("  host memory       {:>10.2f} GB on rank 0, {:.2f} GB per node{}", gb(f.rank0_host_bytes),
                             gb(f.node_host_bytes), k.rank0_only ? "" : " (every rank keeps a copy: rank0_only false)"));
        }
    } else {
        line(fmt::format("  per rank          {:>10.2f} GB  written by every rank (torch.distributed.checkpoint)",
                         gb(f.per_rank_bytes)));
    }
    line(fmt::format("  save              {:>10.1f} s  (gather {:.1f} s, to host {:.1f} s, write {:.1f} s at {:.2f} GB/s per node)",
                     f.save_s, f.gather_s, f.to_host_s, f.write_s, plan.cluster.storage_bytes_per_s_per_node / 1e9));
    line(fmt::format("  failures          one every {:.1f} h on {} GPUs ({:.3g} per GPU-hour); a restart reads the "
                     "checkpoint back in {:.1f} s",
                     f.mtbf_s / 3600.0, plan.cluster.worldSize(), plan.cluster.failures_per_gpu_hour, f.restart_s));
    line(fmt::format("  goodput           {:>10.2f} %  every {} steps ({:.0f} s); best every {} steps: {:.2f} % (Young's "
                     "interval sqrt(2 x save x MTBF))",
                     100 * f.goodput, f.every_steps, f.interval_s, f.best_every_steps, 100 * f.best_goodput));
}

// Init and summon_full_params (Evaluation::lifecycle, simulator/lifecycle.hpp).
void appendLifecycleSection(std::string& out, const sim::Evaluation& e) {
    if (!e.lifecycle) return;
    const sim::LifecycleFigures& f = *e.lifecycle;
    auto line = [&out](std::string_view text) {
        out.append(text);
        out.push_back('\n');
    };
    auto verdict = [](bool fits) { return fits ? "fits" : "OUT OF MEMORY"; };
    line("");
    line(fmt::format("Init, eval and summon_full_params (rank 0's device, budget {:.2f} GiB)", gib(f.budget_bytes)));
    line(fmt::format("  init on the meta device      {:>10.2f} GiB  {} (fully_shard, then to_empty and init: only the shards)",
                     gib(f.init_meta_bytes), verdict(f.init_meta_fits)));
    line(fmt::format("  init materialised, sharded   {:>10.2f} GiB  {} (the whole model built on the GPU first)",
                     gib(f.init_materialized_bytes), verdict(f.init_materialized_fits)));
    if (f.eval_modelled) {
        line(fmt::format("  eval step (no_grad)          {:>10.2f} GiB  {} ({:.2f} ms: training's forward of one micro-batch, "
                         "nothing kept for backward)",
                         gib(f.eval_peak_bytes), verdict(f.eval_fits), ms(f.eval_ns)));
    } else {
        line("  eval step (no_grad)          not modelled under pipeline parallelism");
    }
    line(fmt::format("  summon_full_params           {:>10.2f} GiB  {} (every unit whole at once; gathers {:.2f} s)",
                     gib(f.summon_bytes), verdict(f.summon_fits), f.summon_gather_s));
    line(fmt::format("    with offload_to_cpu        {:>10.2f} GiB  {} (one unit whole at a time; {:.2f} GB to the host "
                     "of each rank, rank0_only: rank 0's alone; {:.2f} s to copy)",
                     gib(f.summon_offload_bytes), verdict(f.summon_offload_fits), gb(f.summon_host_bytes), f.summon_to_host_s));
}

void appendTimeSection(std::string& out, const sim::Evaluation& e) {
    const core::StepSummary& ts = e.summary;
    const core::Program& prog = e.program;
    auto line = [&out](std::string_view text) {
        out.append(text);
        out.push_back('\n');
    };
    line("");
    line("Time per step (simulated with the cost models; ms = 1e-3 s)");
    line(fmt::format("  step            {:>10.2f} ms   compute stream busy {:.2f} ms, exposed communication {:.2f} ms",
                     ms(ts.step_s), ms(ts.compute_s), ms(ts.exposed_comm_s)));
    if (const std::string period = periodText(e); !period.empty()) line("  " + period);
    if (prog.tp_size > 1) {
        line(fmt::format("  tensor parallel {:>10.2f} ms   of the compute stream's time: the tp group's collectives it waits for",
                         ms(e.tp_comm_s)));
    }
    if (e.core_slowdown > 1) {
        line(fmt::format("  shared cores    {:>10.2f} x    CPU work takes this many times its time with a core to itself: "
                         "the ranks computing at once share the node's {} cores (profile host_cores)",
                         e.core_slowdown, e.profile.host_cores));
    }
    line(fmt::format("  MFU             {:>10.3f}      over {} {} peak", ts.mfu, core::formatFlopRate(ts.peak_flops),
                     core::dtypeName(prog.compute_dtype)));
    line(fmt::format("  HFU             {:>10.3f}", ts.hfu));
    line(fmt::format("    {}", core::kMfuConvention));
    line(fmt::format("    {}", core::kHfuConvention));
    line(fmt::format("  throughput      {:>10.0f} tokens/s per GPU", ts.tokens_per_s_per_gpu));
    line(fmt::format("  {:<22}{:>12}", "stream", "busy (ms)"));
    for (int st = 0; st < core::kStreamCount; ++st) {
        if (ts.stream_busy_s[st] <= 0) continue;
        line(fmt::format("  {:<22}{:>12.2f}", core::streamName(static_cast<core::Stream>(st)), ms(ts.stream_busy_s[st])));
    }
    if (ts.units.empty()) return;
    line(fmt::format("  {:<28}{:>12}{:>12}{:>16}{:>12}", "unit (ms)", "compute", "all-gather", "reduce-scatter",
                     "all-reduce"));
    const std::size_t n = std::min(ts.units.size(), prog.units.size());
    for (std::size_t i = 0; i < n; ++i) {
        if (n > kMaxUnitRows && i == kUnitEdge) line("  ...");
        if (n > kMaxUnitRows && i >= kUnitEdge && i < n - kUnitEdge) continue;
        const core::UnitTime& u = ts.units[i];
        line(fmt::format("  {:<28}{:>12.2f}{:>12.2f}{:>16.2f}{:>12.2f}", prog.units[i].name, ms(u.compute_ns),
                         ms(u.all_gather_ns), ms(u.reduce_scatter_ns), ms(u.all_reduce_ns)));
    }
}

}  // namespace

nlohmann::ordered_json planResultJson(const core::Plan& plan, const sim::Evaluation& e) {
    using json = nlohmann::ordered_json;
    const core::Model& model = *plan.model;
    const core::TrainingSpec& t = plan.training;
    const core::MemoryReport& mem = e.memory;
    const core::GpuSpec& gpu = e.profile.gpu;
    const int64_t capacity = gpu.memory_bytes;

    json j;
    j["model"] = {
        {"name", model.name},
        {"type", model.arch.model_type},
        {"params", model.numParams()},
        {"trainable_params", trainableParams(e.program)},
        {"layers", modelLayers(model)},
    };

    json units = json::array();
    for (const core::UnitInfo& u : e.program.units) {
        units.push_back({
            {"name", u.name},
            {"params", u.params},
            {"sharded_bytes", u.sharded_bytes},
            {"unsharded_bytes", u.unsharded_bytes},
            {"activation_bytes", u.activation_bytes},
        });
    }
    j["plan"] = {
        {"strategy", core::strategyName(plan.sharding.strategy)},
        {"fsdp", plan.sharding.fsdp_version},
        {"gpu", gpu.name},
        {"nodes", plan.cluster.nodes},
        {"gpus_per_node", plan.cluster.gpus_per_node},
        {"world_size", e.mesh.world_size},
        {"shard_size", e.mesh.shard_size},
        {"replicate_size", e.mesh.replicate_size},
        {"tp", e.mesh.tp},
        {"pp", e.mesh.pp},
        {"sequence_parallel", plan.sharding.sequence_parallel},
        {"loss_parallel", plan.sharding.loss_parallel},
        {"mesh", meshDims(e.mesh)},
        {"wrap", core::wrapPolicyString(plan.sharding.wrap)},
        {"reshard_after_forward", reshardString(plan.sharding)},
        {"units", static_cast<int64_t>(e.program.units.size())},
        {"unit_list", std::move(units)},
    };
    j["training"] = {
        {"micro_batch", t.micro_batch},
        {"seq_len", t.seq_len},
        {"grad_accum", t.grad_accum},
        {"no_sync", t.no_sync},
        {"optimizer", core::optimizerName(t.optimizer)},
        {"param_dtype", core::dtypeName(t.computeDtype())},
        {"reduce_dtype", core::dtypeName(t.reduceDtype())},
        {"master_dtype", core::dtypeName(t.master_dtype)},
        {"ac", core::acString(core::acSpecOf(t))},
        {"attention", core::attentionName(t.attention)},
        {"kernels", core::kernelImplName(t.kernels)},
        {"impl", core::modelImplName(t.impl)},
        {"offload", core::offloadName(t.offload)},
        {"hf_mask", core::hfMaskName(t.hf_mask)},
        {"frozen", t.frozen_regex},
        {"allocator", core::allocatorModeName(t.allocator)},
        {"clip_grad_norm", t.clip_grad_norm},  // 0: no clipping
        {"lora", nullptr},
        {"all_gather_dtype", core::allGatherDtypeName(t.all_gather_dtype)},
    };
    if (t.all_gather_dtype == core::AllGatherDtype::Fp8) {
        const core::Float8Summary f8 = core::float8Summary(*plan.model);
        j["training"]["float8"] = {{"weights", f8.weights}, {"params", f8.params}, {"amax_all_reduce_bytes", 4 * f8.weights}};
    }
    if (t.lora.enabled()) {
        const core::LoraSummary lora = core::loraSummary(*plan.model);
        j["training"]["lora"] = {{"rank", t.lora.rank}, {"targets", t.lora.targets}, {"modules", lora.modules},
                                 {"module_names", lora.names}, {"adapter_params", lora.adapter_params}};
    }

    json at_peak = json::object();
    json max_per = json::object();
    for (int i = 0; i < core::kMemCategoryCount; ++i) {
        const std::string name(core::categoryName(static_cast<MemCategory>(i)));
        at_peak[name] = mem.at_peak[i];
        max_per[name] = mem.max_per_category[i];
    }
    j["memory"] = {
        {"capacity_bytes", capacity},
        {"peak_bytes", mem.peak_bytes},
        {"fits", e.fit.fits},
        {"spare_bytes", capacity - mem.peak_bytes},
        {"peak_task", mem.peak_task >= 0 ? e.program.taskLabel(mem.peak_task) : std::string()},
        {"peak_source", "timed"},
        {"issue_order_peak_bytes", e.issue_order_peak_bytes},
        {"at_peak", std::move(at_peak)},
        {"max_per_category", std::move(max_per)},
        {"runtime_overhead_bytes", mem.max_per_category[core::index(MemCategory::RuntimeOverhead)]},
        {"model_states",
         {{"params", mem.model_states.params},
          {"grads", mem.model_states.grads},
          {"optimizer", mem.model_states.optimizer}}},
        {"host",
         {{"params", e.program.host_param_bytes},
          {"grads", e.program.host_grad_bytes},
          {"optimizer", e.program.host_optimizer_bytes}}},
        {"headroom", e.fit.headroom},
        {"budget_bytes", e.fit.budget_bytes},
        {"at_risk", e.fit.at_risk},
        {"reserved", reservedMemoryJson(plan, e)},
    };

    const core::CommTotals& c = e.comm;
    j["communication"] = {
        {"all_gather_bytes", c.all_gather_bytes},
        {"reduce_scatter_bytes", c.reduce_scatter_bytes},
        {"all_reduce_bytes", c.all_reduce_bytes},
        {"volume_bytes", c.volumeBytes()},
    };
    {
        const core::StepSummary& ts = e.summary;
        j["time"] = {
            {"step_s", ts.step_s},
            {"compute_s", ts.compute_s},
            {"exposed_comm_s", ts.exposed_comm_s},
            {"comm_s", {{"all_gather", ts.all_gather_s}, {"reduce_scatter", ts.reduce_scatter_s}, {"all_reduce", ts.all_reduce_s}}},
            {"tp_comm_s", e.tp_comm_s},
            {"core_slowdown", e.core_slowdown},
            {"mfu", ts.mfu},
            {"hfu", ts.hfu},
            {"tokens_per_s_per_gpu", ts.tokens_per_s_per_gpu},
            {"model_flops_per_step", e.program.model_flops_per_step},
            {"hardware_flops_per_step", e.program.hardware_flops_per_step},
            {"peak_flops", ts.peak_flops},
            {"flop_conventions", {{"mfu", core::kMfuConvention}, {"hfu", core::kHfuConvention}}},
        };
        json streams = json::object();
        for (int st = 0; st < core::kStreamCount; ++st) {
            if (ts.stream_busy_s[st] > 0) streams[std::string(core::streamName(static_cast<core::Stream>(st)))] = ts.stream_busy_s[st];
        }
        j["time"]["stream_busy_s"] = std::move(streams);
        json per_unit = json::array();
        for (std::size_t u = 0; u < ts.units.size() && u < e.program.units.size(); ++u) {
            const core::UnitTime& ut = ts.units[u];
            per_unit.push_back({{"name", e.program.units[u].name},
                                {"compute_s", static_cast<double>(ut.compute_ns) * 1e-9},
                                {"all_gather_s", static_cast<double>(ut.all_gather_ns) * 1e-9},
                                {"reduce_scatter_s", static_cast<double>(ut.reduce_scatter_ns) * 1e-9},
                                {"all_reduce_s", static_cast<double>(ut.all_reduce_ns) * 1e-9}});
        }
        j["time"]["units"] = std::move(per_unit);
        j["time"]["period"] = periodJson(e);
    }
    if (!e.stages.empty()) {
        json stages = json::array();
        for (const sim::StageFigures& f : e.stages) {
            // The pipeline stages the row's rank holds (one, but under Interleaved1F1B).
            json held = json::array();
            for (int k = 0; k < e.mesh.virtual_stages; ++k) held.push_back(e.mesh.rankStage(f.stage, k));
            stages.push_back({{"stage", f.stage},
                              {"pipeline_stages", std::move(held)},
                              {"blocks", f.blocks},
                              {"micro_batches_held", f.micro_batches_held},
                              {"step_s", f.step_s},
                              {"compute_s", f.compute_s},
                              {"idle_s", f.idle_s},
                              {"p2p_s", f.p2p_s},
                              {"peak_bytes", f.peak_bytes},
                              {"reserved_bytes", f.reserved_bytes}});
        }
        j["pipeline"] = {{"schedule", core::ppScheduleName(plan.sharding.pp_schedule)},
                         {"virtual_stages", e.mesh.virtual_stages},
                         {"micro_batches", plan.training.grad_accum},
                         {"binding_stage", e.binding_stage},
                         {"shown_stage", e.stage},
                         {"stages", std::move(stages)}};
    }
    if (e.lifecycle) {
        const sim::LifecycleFigures& f = *e.lifecycle;
        j["lifecycle"] = {{"budget_bytes", f.budget_bytes},
                          {"init_meta_bytes", f.init_meta_bytes},
                          {"init_meta_fits", f.init_meta_fits},
                          {"init_materialized_bytes", f.init_materialized_bytes},
                          {"init_materialized_fits", f.init_materialized_fits},
                          {"stage_param_bytes", f.stage_param_bytes},
                          {"largest_unit_bytes", f.largest_unit_bytes},
                          {"summon_bytes", f.summon_bytes},
                          {"summon_fits", f.summon_fits},
                          {"summon_offload_bytes", f.summon_offload_bytes},
                          {"summon_offload_fits", f.summon_offload_fits},
                          {"summon_host_bytes", f.summon_host_bytes},
                          {"summon_gather_s", f.summon_gather_s},
                          {"summon_to_host_s", f.summon_to_host_s},
                          {"eval_modelled", f.eval_modelled},
                          {"eval_peak_bytes", f.eval_peak_bytes},
                          {"eval_fits", f.eval_fits},
                          {"eval_ns", f.eval_ns}};
    }
    if (e.checkpoint) {
        const sim::CheckpointFigures& f = *e.checkpoint;
        j["checkpoint"] = {{"mode", core::checkpointModeName(f.mode)},
                           {"every_steps", f.every_steps},
                           {"offload_to_cpu", plan.checkpoint.offload_to_cpu},
                           {"rank0_only", plan.checkpoint.rank0_only},
                           {"model_bytes", f.model_bytes},
                           {"optimizer_bytes", f.optimizer_bytes},
                           {"rank0_peak_bytes", f.rank0_peak_bytes},
                           {"budget_bytes", f.budget_bytes},
                           {"rank0_fits", f.rank0_fits},
                           {"rank0_host_bytes", f.rank0_host_bytes},
                           {"node_host_bytes", f.node_host_bytes},
                           {"per_rank_bytes", f.per_rank_bytes},
                           {"gather_s", f.gather_s},
                           {"to_host_s", f.to_host_s},
                           {"write_s", f.write_s},
                           {"save_s", f.save_s},
                           {"restart_s", f.restart_s},
                           {"mtbf_s", std::isfinite(f.mtbf_s) ? json(f.mtbf_s) : json(nullptr)},
                           {"interval_s", f.interval_s},
                           {"goodput", f.goodput},
                           {"best_every_steps", f.best_every_steps},
                           {"best_goodput", f.best_goodput}};
    }
    return j;
}

std::string periodText(const sim::Evaluation& e) {
    const sim::PeriodicStep& p = e.period;
    if (!p.byPeriod()) return {};
    return fmt::format(
        "simulated by its period: micro-batches 0-{} and {} of {}; {}-{} each repeat micro-batch {} (+{:.2f} ms each); the "
        "timeline and trace hold the simulated ones",
        p.simulated - 2, p.micro_batches - 1, p.micro_batches, p.simulated - 1, p.micro_batches - 2, p.simulated - 2,
        ms(p.period_ns));
}

nlohmann::ordered_json periodJson(const sim::Evaluation& e) {
    const sim::PeriodicStep& p = e.period;
    if (!p.byPeriod()) return nullptr;
    return {{"micro_batches", p.micro_batches},
            {"simulated_micro_batches", p.simulated},
            {"period_s", static_cast<double>(p.period_ns) * 1e-9}};
}

nlohmann::ordered_json reservedMemoryJson(const core::Plan& plan, const sim::Evaluation& e) {
    const core::AllocatorStats& a = e.reserved.stats;
    const int64_t overhead = e.program.initial[core::index(MemCategory::RuntimeOverhead)];
    if (e.fit.reserved_bytes == 0) return nlohmann::ordered_json(nullptr);
    nlohmann::ordered_json by_stream = nlohmann::ordered_json::object();
    nlohmann::ordered_json at_peak = nlohmann::ordered_json::object();
    for (int s = 0; s < core::kStreamCount; ++s) {
        const std::string name(core::streamName(static_cast<core::Stream>(s)));
        if (a.reserved_by_stream[s] > 0) by_stream[name] = a.reserved_by_stream[s];
        if (a.reserved_by_stream_at_peak[s] > 0) {
            at_peak[name] = {{"allocated_bytes", a.allocated_by_stream_at_peak[s]},
                             {"reserved_bytes", a.reserved_by_stream_at_peak[s]}};
        }
    }
    return {
        {"allocator", core::allocatorModeName(plan.training.allocator)},
        {"peak_allocated_bytes", a.peak_allocated_bytes + overhead},
        {"peak_reserved_bytes", a.peak_reserved_bytes + overhead},
        {"fragmentation_at_reserved_peak_bytes", a.fragmentation_at_reserved_peak},
        {"max_fragmentation_bytes", a.max_fragmentation_bytes},
        {"reserved_by_stream", std::move(by_stream)},
        {"by_stream_at_allocated_peak", std::move(at_peak)},
        {"segments", a.segments},
        {"cache_flushes", a.releases},
        {"out_of_memory", a.out_of_memory},
        {"spare_bytes", e.fit.capacity_bytes - (a.peak_reserved_bytes + overhead)},
    };
}

std::string fitVerdictText(const sim::Evaluation& e) {
    const core::FitVerdict& f = e.fit;
    const double capacity = static_cast<double>(f.capacity_bytes);
    if (f.fits) {
        if (f.reserved_bytes == 0) {
            return fmt::format("  => fits with {} to spare under the budget", core::formatGiB(f.marginBytes()));
        }
        return fmt::format("  => fits with {} to spare under the budget: reserved {} is {:.1f}% of capacity",
                           core::formatGiB(f.marginBytes()), core::formatGiB(f.reserved_bytes),
                           100.0 * static_cast<double>(f.reserved_bytes) / capacity);
    }
    if (f.at_risk && f.cache_flushed && f.reserved_bytes <= f.budget_bytes) {
        return fmt::format("  => AT RISK: allocated {} fits, but the caching allocator reaches the GPU's {} and must "
                           "free its cache to go on (cudaMalloc retries; try --allocator expandable)",
                           core::formatGiB(f.peak_bytes), core::formatGiB(f.capacity_bytes));
    }
    if (f.at_risk) {
        return fmt::format("  => AT RISK: allocated {} fits, but reserved {} ({:.1f}% of capacity) is over the "
                           "budget by {}: the caching allocator's fragmentation can OOM (try --allocator expandable)",
                           core::formatGiB(f.peak_bytes), core::formatGiB(f.reserved_bytes),
                           100.0 * static_cast<double>(f.reserved_bytes) / capacity, core::formatGiB(f.marginBytes()));
    }
    return fmt::format("  => does NOT fit: over by {} (the budget keeps {:g}% of the GPU free)",
                       core::formatGiB(f.marginBytes()), f.headroom * 100);
}

std::string planReportText(const core::Plan& plan, const sim::Evaluation& e) {
    const core::Model& model = *plan.model;
    const core::TrainingSpec& t = plan.training;
    const core::ShardingSpec& s = plan.sharding;
    const core::GpuSpec& gpu = e.profile.gpu;
    const core::MemoryReport& mem = e.memory;
    const core::Program& prog = e.program;
    const int64_t capacity = gpu.memory_bytes;

    std::string out;
    auto line = [&out](std::string_view text) {
        out.append(text);
        out.push_back('\n');
    };

    // Header.
    const int64_t params = model.numParams();
    const int64_t trainable = trainableParams(prog);
    line(fmt::format("shardcast plan: {} on {} x {}", model.name, e.mesh.world_size, gpu.name));
    line(fmt::format("  model        {}{}: {} params ({}), {} trainable, {} layers", model.name,
                     model.arch.model_type.empty() ? "" : fmt::format(" ({})", model.arch.model_type),
                     core::formatCount(params), billions(params), core::formatCount(trainable),
                     modelLayers(model)));
    line(fmt::format("  cluster      {} node(s) x {} GPU(s) = world size {}; {} with {:.2f} GiB{}", plan.cluster.nodes,
                     plan.cluster.gpus_per_node, e.mesh.world_size, gpu.name, gib(capacity),
                     gpu.power_limit_w > 0 ? fmt::format(", power limit {:.0f} W (compute clock {:.0f}% of boost)",
                                                         gpu.power_limit_w, 100 * gpu.computeClockScale())
                                           : ""));
    line(fmt::format("  strategy     {} (FSDP{}), shard {} x replicate {}, reshard after forward: {}",
                     core::strategyName(s.strategy), s.fsdp_version, e.mesh.shard_size, e.mesh.replicate_size,
                     reshardString(s)));
    if (e.mesh.tp > 1 || e.mesh.pp > 1) {
        line(fmt::format("  mesh         {}", meshText(plan, e.mesh)));
    }
    line(fmt::format("  wrap         {} -> {} units", core::wrapPolicyString(s.wrap), prog.units.size()));
    line(fmt::format("  batch        micro-batch {} x seq {} = {} tokens; grad accum {}{}", t.micro_batch,
                     t.seq_len, core::formatCount(t.tokens()), t.grad_accum,
                     t.no_sync ? " (no_sync: reduce on the last micro-batch)" : ""));
    line(fmt::format("  dtypes       param {}, reduce {}, master {}; optimizer {}{}", core::dtypeName(t.computeDtype()),
                     core::dtypeName(t.reduceDtype()), core::dtypeName(t.master_dtype),
                     core::optimizerName(t.optimizer),
                     t.clip_grad_norm > 0 ? fmt::format(" after clip_grad_norm_(max_norm {:g})", t.clip_grad_norm) : ""));
    line(fmt::format("  compute      AC {}, attention {}, kernels {}, impl {}, offload {}{}{}", core::acString(core::acSpecOf(t)),
                     core::attentionName(t.attention), core::kernelImplName(t.kernels), core::modelImplName(t.impl),
                     core::offloadName(t.offload),
                     t.hf_mask == core::HfMask::V4 && t.impl == core::ModelImpl::Hf ? ", transformers 4.5x mask" : "",
                     t.frozen_regex.empty() ? "" : fmt::format(", frozen /{}/", t.frozen_regex)));
    line(fmt::format("  AC mode      {}",
                     core::acDescription(core::acSpecOf(t), t.attention == core::AttentionKernel::Flash)));
    if (t.all_gather_dtype == core::AllGatherDtype::Fp8) {
        const core::Float8Summary f8 = core::float8Summary(*plan.model);
        line(fmt::format("  float8       torchao Float8Linear on {} weights ({} params, {:.1f}% of the model): gathered and held "
                         "in fp8, GEMMs in fp8; after each optimizer step an amax pass and one all-reduce of {} B",
                         f8.weights, core::formatCount(f8.params),
                         100.0 * static_cast<double>(f8.params) / static_cast<double>(params), 4 * f8.weights));
    }
    if (t.lora.enabled()) {
        const core::LoraSummary lora = core::loraSummary(*plan.model);
        line(fmt::format("  LoRA         rank {} on {} linear modules ({}): {} adapter params ({:.2f}% of the model); the "
                         "base frozen, gathered but never reduced",
                         t.lora.rank, lora.modules, fmt::join(lora.names, ", "), core::formatCount(lora.adapter_params),
                         100.0 * static_cast<double>(lora.adapter_params) / static_cast<double>(plan.model->numParams())));
    }
    line("");

    // Units.
    line(fmt::format("Units ({}, forward order)", prog.units.size()));
    const std::string unit_fmt = "  {:<28} {:>16} {:>14} {:>12} {:>14}";
    line(fmt::format(fmt::runtime(unit_fmt), "unit", "params", "sharded/rank", "unsharded", "activations"));
    line(fmt::format(fmt::runtime(unit_fmt), "", "", "(GiB)", "(GiB)", "(GiB/micro-b)"));
    auto unitRow = [&](std::string_view name, int64_t p, int64_t sh, int64_t un, int64_t act) {
        line(fmt::format(fmt::runtime("  {:<28} {:>16} {:>14.3f} {:>12.3f} {:>14.3f}"), name, core::formatCount(p),
                         gib(sh), gib(un), gib(act)));
    };
    const std::size_t n_units = prog.units.size();
    int64_t tot_p = 0, tot_sh = 0, tot_un = 0, tot_act = 0;
    for (std::size_t i = 0; i < n_units; ++i) {
        const core::UnitInfo& u = prog.units[i];
        tot_p += u.params;
        tot_sh += u.sharded_bytes;
        tot_un += u.unsharded_bytes;
        tot_act += u.activation_bytes;
        const bool abbreviated = n_units > kMaxUnitRows;
        if (abbreviated && i == kUnitEdge) line("  ...");
        if (abbreviated && i >= kUnitEdge && i < n_units - kUnitEdge) continue;
        unitRow(u.name, u.params, u.sharded_bytes, u.unsharded_bytes, u.activation_bytes);
    }
    unitRow(fmt::format("total ({} units)", n_units), tot_p, tot_sh, tot_un, tot_act);
    line("");

    // Memory.
    line(fmt::format("Memory per GPU (GiB = 2^30 bytes); timed peak during {}",
                     mem.peak_task >= 0 ? prog.taskLabel(mem.peak_task) : std::string("(no tasks)")));
    const std::string mem_fmt = "  {:<20} {:>14} {:>18}";
    line(fmt::format(fmt::runtime(mem_fmt), "category", "at peak (GiB)", "max in step (GiB)"));
    for (int i = 0; i < core::kMemCategoryCount; ++i) {
        line(fmt::format(fmt::runtime("  {:<20} {:>14.2f} {:>18.2f}"), core::categoryName(static_cast<MemCategory>(i)),
                         gib(mem.at_peak[i]), gib(mem.max_per_category[i])));
    }
    line(fmt::format(fmt::runtime("  {:<20} {:>14.2f}"), "total (peak)", gib(mem.peak_bytes)));
    line(fmt::format(fmt::runtime("  {:<20} {:>14.2f}"), "capacity", gib(capacity)));
    line(fmt::format(fmt::runtime("  {:<20} {:>14.2f}   (capacity less {:g}% headroom, --headroom)"), "budget",
                     gib(e.fit.budget_bytes), e.fit.headroom * 100));
    if (e.fit.reserved_bytes > 0) {
        const core::AllocatorStats& a = e.reserved.stats;
        const int64_t overhead = e.program.initial[core::index(MemCategory::RuntimeOverhead)];
        line(fmt::format(fmt::runtime("  {:<20} {:>14.2f}   (PyTorch's caching allocator, --allocator {}; Runtime "
                                      "Overhead included)"),
                         "reserved (peak)", gib(a.peak_reserved_bytes + overhead),
                         core::allocatorModeName(e.reserved.config.mode)));
        line(fmt::format(fmt::runtime("  {:<20} {:>14.2f}   (reserved - allocated at the reserved peak; largest "
                                      "in step {:.2f})"),
                         "fragmentation", gib(a.fragmentation_at_reserved_peak), gib(a.max_fragmentation_bytes)));
        std::string streams, at_peak;
        for (int st = 0; st < core::kStreamCount; ++st) {
            const auto name = core::streamName(static_cast<core::Stream>(st));
            if (a.reserved_by_stream[st] > 0) {
                streams += fmt::format("{}{} {:.2f}", streams.empty() ? "" : ", ", name, gib(a.reserved_by_stream[st]));
            }
            if (a.reserved_by_stream_at_peak[st] > 0) {
                at_peak += fmt::format("{}{} {:.2f}/{:.2f}", at_peak.empty() ? "" : ", ", name,
                                       gib(a.allocated_by_stream_at_peak[st]), gib(a.reserved_by_stream_at_peak[st]));
            }
        }
        line(fmt::format("  reserved by stream (GiB, each stream caches its own blocks): {}", streams));
        line(fmt::format("  at the allocated peak, in use/reserved by stream (GiB): {}", at_peak));
    }
    line(fitVerdictText(e));
    line(fmt::format("  (allocator view in host issue order: peak {}; the timed curve places each "
                     "allocation at its simulated time)",
                     core::formatGiB(e.issue_order_peak_bytes)));
    line("");

    const core::ModelStates& ms = mem.model_states;
    line(fmt::format("Model states per GPU: params {}, grads {}, optimizer {} (total {})", core::formatGiB(ms.params),
                     core::formatGiB(ms.grads), core::formatGiB(ms.optimizer),
                     core::formatGiB(ms.params + ms.grads + ms.optimizer)));
    if (t.offload != core::Offload::None) {
        line(fmt::format("Host (pinned CPU) memory per rank: params {}, grads {}, optimizer {}",
                         core::formatGiB(prog.host_param_bytes), core::formatGiB(prog.host_grad_bytes),
                         core::formatGiB(prog.host_optimizer_bytes)));
    }
    line("");

    const core::CommTotals& c = e.comm;
    line("Communication per GPU per step (payload, GB = 1e9 bytes)");
    line(fmt::format("  all-gather      {:>10.2f} GB", gb(c.all_gather_bytes)));
    line(fmt::format("  reduce-scatter  {:>10.2f} GB", gb(c.reduce_scatter_bytes)));
    line(fmt::format("  all-reduce      {:>10.2f} GB", gb(c.all_reduce_bytes)));
    line(fmt::format("  volume          {:>10.2f} GB  (all-gather + reduce-scatter + 2 x all-reduce)",
                     gb(c.volumeBytes())));
    appendTimeSection(out, e);
    appendPipelineSection(out, plan, e);
    appendCheckpointSection(out, plan, e);
    appendLifecycleSection(out, e);
    return out;
}

StageProgress::StageProgress(std::string first_stage)
    : m_start(std::chrono::steady_clock::now()), m_stage(std::move(first_stage)) {
    if (stderrIsTerminal()) m_thread = std::thread([this] { tick(); });
}

void StageProgress::tick() {
    constexpr auto kShowAfter = std::chrono::milliseconds(500);
    constexpr auto kRedraw = std::chrono::milliseconds(200);
    std::unique_lock lock(m_mutex);
    while (!m_wake.wait_for(lock, kRedraw, [this] { return m_stop; })) {
        const auto elapsed = std::chrono::steady_clock::now() - m_start;
        if (elapsed < kShowAfter) continue;
        fmt::print(stderr, "\r\033[Kshardcast: {} ({:.1f} s so far)", m_stage,
                   std::chrono::duration<double>(elapsed).count());
        std::fflush(stderr);
        m_drawn = true;
    }
}

std::function<void(sim::EvaluationStage)> StageProgress::callback() {
    if (!m_thread.joinable()) return {};
    return [this](sim::EvaluationStage stage) { setStage(sim::stageName(stage)); };
}

void StageProgress::setStage(std::string_view stage) {
    std::lock_guard lock(m_mutex);
    m_stage = stage;
}

void StageProgress::done() {
    if (!m_thread.joinable()) return;
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_one();
    m_thread.join();
    if (m_drawn) {
        fmt::print(stderr, "\r\033[K");
        std::fflush(stderr);
    }
}

}  // namespace shardcast::cli
