// `shardcast optimize` (issue 13): parses the job and the constraints, calls sim::optimize and prints
// the winner, the top T, the Pareto front and what other choices lose.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "apps/shardcast/report.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "core/base/file_io.hpp"
#include "core/plan/plan_build.hpp"
#include "core/plan/wrap.hpp"
#include "search/optimize.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/pytorch_code.hpp"

namespace shardcast::cli {
namespace {

struct OptimizeCommandOptions {
    core::PlanOverrides plan;
    int64_t global_batch = 0;
    std::vector<std::string> strategies, wraps, acs, offloads, pp_schedules;
    std::vector<int> shard_sizes, fsdps, tps, pps;
    int64_t max_micro_batch = 0;
    bool no_partial_reshard = false, no_prefetch = false, ac_per_block = false;
    double headroom = core::kDefaultHeadroom;
    int top = 5;
    bool json = false, stats = false;
    std::string write_plan, pytorch, profile;
};

double toGiB(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(core::kGiB); }

std::string label(const sim::OptimizeChoice& c) {
    std::string out = fmt::format("{} {}", sim::choiceValue(c, sim::OptimizeDimension::Strategy),
                                  sim::choiceValue(c, sim::OptimizeDimension::Fsdp));
    out += fmt::format(", wrap {}, ac {}, micro-batch {}", sim::choiceValue(c, sim::OptimizeDimension::Wrap),
                       sim::choiceValue(c, sim::OptimizeDimension::Ac), sim::choiceValue(c, sim::OptimizeDimension::MicroBatch));
    if (c.reshard == core::ReshardMode::Count) out += fmt::format(", reshard to {} ranks", c.reshard_k);
    if (c.strategy != core::Strategy::NoShard) out += ", prefetch " + sim::choiceValue(c, sim::OptimizeDimension::Prefetch);
    if (c.offload != core::Offload::None) out += ", offload " + sim::choiceValue(c, sim::OptimizeDimension::Offload);
    if (c.tp > 1) out += ", tp " + sim::choiceValue(c, sim::OptimizeDimension::Tp);
    if (c.pp > 1) out += ", pp " + sim::choiceValue(c, sim::OptimizeDimension::Pp);
    return out;
}

// pytorchCode applies units, mesh and mixed precision; the optimizer's other choices are listed for
// the user to apply, with the PyTorch API that does it.
std::string winnerCode(const core::Plan& plan, const core::Mesh& mesh) {
    std::string code = sim::pytorchCode(plan, mesh, sim::unitsOfPlan(plan));
    const core::TrainingSpec& t = plan.training;
    code += "# Also apply the optimizer's other choices (not generated above):\n";
    code += fmt::format("#   micro-batch {} sequences, {} gradient accumulation steps\n", t.micro_batch, t.grad_accum);
    if (t.ac == core::Checkpointing::AttnCore) {
        code += "#   Megatron's attention-core recompute (not a checkpoint_wrapper setting; a no-op with flash attention)\n";
    }
    if (t.offload == core::Offload::Cpu) code += "#   offload_policy=CPUOffloadPolicy() in every fully_shard call\n";
    if (plan.sharding.fsdp_version == 2 && plan.sharding.prefetch_depth > 1) {
        code += fmt::format("#   prefetch {} units ahead: module.set_modules_to_forward_prefetch / "
                            "set_modules_to_backward_prefetch with the next {} units\n",
                            plan.sharding.prefetch_depth, plan.sharding.prefetch_depth);
    }
    if (plan.sharding.fsdp_version == 1) {
        code += fmt::format("#   FSDP1: backward_prefetch=BackwardPrefetch.BACKWARD_{}, forward_prefetch={}\n",
                            plan.sharding.backward_prefetch == core::ShardingSpec::BackwardPrefetch::Post ? "POST" : "PRE",
                            plan.sharding.forward_prefetch ? "True" : "False");
    }
    return code;
}

template <class T, class Parse>
int parseList(const std::vector<std::string>& in, std::vector<T>& out, const char* flag, const char* valid, Parse parse) {
    for (const std::string& s : in) {
        auto v = parse(s);
        if (!v) return reportInputError(fmt::format("{}: '{}' is not one of {}", flag, s, valid));
        out.push_back(*v);
    }
    return kExitOk;
}

int runOptimize(const OptimizeCommandOptions& o) {
    auto built = buildPlanFromFlags(o.plan);
    if (!built) return reportInputError(built.error().message);
    core::Plan base = std::move(*built);
    if (o.global_batch <= 0) {
        return reportInputError(fmt::format("--global-batch must be a positive number of sequences per step (got {})", o.global_batch));
    }
    if (o.top < 1) return reportInputError(fmt::format("--top must be at least 1 (got {})", o.top));
    if (o.max_micro_batch < 0) return reportInputError(fmt::format("--max-micro-batch must be positive (got {})", o.max_micro_batch));

    sim::OptimizeSpace space;
    if (int rc = parseList(o.strategies, space.strategies, "--strategy",
                           "NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD, _HYBRID_SHARD_ZERO2 (or ddp, zero2, zero3, hsdp, hsdp-zero2)",
                           core::parseStrategy);
        rc != kExitOk) {
        return rc;
    }
    for (const std::string& a : core::joinAcListItems(o.acs)) {
        if (a == "blocks") {  // as --ac-per-block
            space.ac_first_n = true;
            continue;
        }
        auto parsed = core::parseAcSpec(a);
        if (!parsed) return reportInputError("--ac: " + core::acSpecError(a));
        if (auto e = core::resolveAcBlocks(*parsed, static_cast<int64_t>(base.model->blocks.size()), "--ac")) {
            return reportInputError(*e);
        }
        space.acs.push_back(*parsed);
    }
    space.ac_first_n = space.ac_first_n || o.ac_per_block;
    if (int rc = parseList(o.offloads, space.offloads, "--offload", "none, cpu", core::parseOffload); rc != kExitOk) return rc;
    for (const std::string& w : o.wraps) {
        auto parsed = core::parseWrapPolicy(w, "--wrap");
        if (!parsed) return reportInputError(parsed.error().message);
        space.wraps.push_back(*parsed);
    }
    for (int f : o.fsdps) {
        if (f != 1 && f != 2) return reportInputError(fmt::format("--fsdp: {} is not 1 or 2", f));
    }
    space.fsdp_versions = o.fsdps;
    space.hybrid_shard_sizes = o.shard_sizes;
    space.tps = o.tps;
    space.pps = o.pps;
    for (const std::string& text : o.pp_schedules) {
        auto parsed = sim::parsePipelineScheduleChoice(text);
        if (!parsed) return reportInputError("--pp-schedules: " + parsed.error().message);
        space.pp_schedules.push_back(*parsed);
    }
    space.max_micro_batch = o.max_micro_batch;
    space.partial_reshard = !o.no_partial_reshard;
    space.prefetch = !o.no_prefetch;

    auto resolved = resolveProfileArg(base.cluster, o.profile);
    if (!resolved) return reportInputError("--profile " + resolved.error().message);
    const sim::HardwareProfile& profile = resolved->profile;
    base.cluster.gpu = profile.gpu;

    sim::OptimizeOptions options;
    options.global_batch = o.global_batch;
    options.headroom = o.headroom;
    options.top = o.top;
    const auto started = std::chrono::steady_clock::now();
    auto elapsed = [&started] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
    bool bar_shown = false;
    if (stderrIsTerminal()) {
        options.progress = [&](size_t done, size_t total) {
            if (!bar_shown && elapsed() < 1.0) return;  // only searches that take longer than a second
            bar_shown = true;
            constexpr int kWidth = 40;
            const int filled = static_cast<int>(kWidth * done / std::max<size_t>(1, total));
            fmt::print(stderr, "\r[{}{}] {}/{} configurations", std::string(filled, '#'), std::string(kWidth - filled, ' '),
                       done, total);
            if (done == total) fmt::print(stderr, "\n");
            std::fflush(stderr);
        };
    }
    auto searched = sim::optimize(base, space, profile, options);
    if (!searched) return reportInputError(searched.error().message);
    const sim::OptimizeResult& r = *searched;
    const double seconds = elapsed();

    // Full evaluations (time and memory objects as `plan --json` prints them) of what is shown.
    sim::Evaluator evaluator;
    sim::EvaluationOptions eo;
    eo.headroom = o.headroom;
    // A plan object as plan files hold it.
    auto planJson = [](const core::Plan& plan) { return nlohmann::ordered_json(core::planToJson(plan)); };
    auto entryJson = [&](const sim::OptimizeEntry& en) -> nlohmann::ordered_json {
        const core::Plan plan = sim::applyChoice(base, en.choice);
        sim::Evaluation e;
        nlohmann::ordered_json j;
        j["plan"] = planJson(plan);
        if (evaluator.evaluate(plan, &profile, eo, e)) {
            nlohmann::ordered_json full = planResultJson(plan, e);
            j["time"] = std::move(full["time"]);
            j["memory"] = std::move(full["memory"]);
        }
        return j;
    };

    const core::Plan winner = sim::applyChoice(base, r.best.choice);
    if (r.fits && !o.write_plan.empty()) {
        if (auto written = core::writePlanFile(winner, o.write_plan); !written) {
            return reportInputError("--write-plan: " + written.error().message);
        }
    }
    if (r.fits && !o.pytorch.empty()) {
        auto mesh = core::validatePlan(winner);  // the winner was evaluated: it validates
        if (!mesh) return reportInputError(mesh.error().message);
        if (auto written = core::writeFileAtomically(o.pytorch, winnerCode(winner, *mesh)); !written) {
            return reportInputError("--pytorch: " + written.error().message);
        }
    }

    if (o.json) {
        nlohmann::ordered_json j;
        j["best"] = entryJson(r.best);
        j["top"] = nlohmann::ordered_json::array();
        for (const auto& en : r.top) j["top"].push_back(entryJson(en));
        j["front"] = nlohmann::ordered_json::array();
        for (const auto& en : r.front) j["front"].push_back(entryJson(en));
        j["fits"] = r.fits;
        j["at_risk"] = nlohmann::ordered_json::array();
        for (const auto& en : r.at_risk) {
            j["at_risk"].push_back({{"plan", planJson(sim::applyChoice(base, en.choice))},
                                    {"step_s", en.step_s},
                                    {"allocated_bytes", en.allocated_bytes},
                                    {en.peak_is_bound ? "reserved_at_least_bytes" : "reserved_bytes", en.peak_bytes}});
        }
        if (!r.fits) j["no_fit"] = r.no_fit;
        j["losses"] = nlohmann::ordered_json::array();
        for (const auto& l : r.losses) {
            j["losses"].push_back({{"dimension", sim::dimensionName(l.dimension)},
                                   {"value", l.value},
                                   {"best_value", l.best_value},
                                   {"instead_of", l.winner_value},
                                   {"fits", l.fits},
                                   {"step_s", l.step_s},
                                   {"tokens_per_s_per_gpu", l.tokens_per_s_per_gpu},
                                   {"change", l.change}});
        }
        j["search"] = {{"space_size", r.space_size},     {"evaluated", r.evaluated},
                       {"invalid", r.invalid},           {"pruned", r.pruned},
                       {"cutoff_step_s", r.cutoff_step_s}, {"batch_per_rank", r.batch_per_rank},
                       {"headroom", o.headroom},         {"bound_restarted", r.bound_restarted},
                       {"seconds", seconds}};
        const sim::OptimizeStats& st = r.stats;
        j["search"]["stats"] = {{"bound_programs", st.bound_programs},
                                {"pruned_by_memory", st.pruned_by_memory},
                                {"pruned_by_time", st.pruned_by_time},
                                {"loss_evaluations", st.loss_evaluations},
                                {"front_evaluations", st.front_evaluations},
                                {"reserved_replays", st.reserved_replays},
                                {"reevaluations", st.reevaluations},
                                {"replays_reused", st.replays_reused},
                                {"bound_seconds", st.bound_seconds},
                                {"lower_seconds", st.lower_seconds},
                                {"simulate_seconds", st.simulate_seconds},
                                {"memory_seconds", st.memory_seconds},
                                {"other_evaluation_seconds", st.other_evaluation_seconds},
                                {"replay_seconds", st.replay_seconds}};
        j["not_searched"] = r.not_searched;
        if (!o.write_plan.empty() && r.fits) j["plan_file"] = o.write_plan;
        if (!o.pytorch.empty() && r.fits) j["pytorch_file"] = o.pytorch;
        fmt::print("{}\n", j.dump(2));
        std::fflush(stdout);
        return kExitOk;
    }

    const int world = base.cluster.nodes * base.cluster.gpus_per_node;
    fmt::print("shardcast optimize: {} on {} x {}, global batch {} x {} tokens ({} sequences per rank)\n", base.model->name,
               world, profile.gpu.name, o.global_batch, base.training.seq_len, r.batch_per_rank);
    fmt::print("Searched {} configurations in {:.1f} ms: {} evaluated ({} invalid plans), {} pruned by the proven bounds{}\n",
               r.space_size, seconds * 1e3, r.evaluated, r.invalid, r.pruned,
               r.bound_restarted ? " (bound violated: re-ran without pruning)" : "");
    if (o.stats) {
        const sim::OptimizeStats& st = r.stats;
        fmt::print("Search statistics:\n");
        fmt::print("  bounds: {} Programs lowered (not simulated) in {:.1f} ms\n", st.bound_programs, st.bound_seconds * 1e3);
        fmt::print("  pruned: {} by the peak-memory bound, {} by the step-time bound\n", st.pruned_by_memory,
                   st.pruned_by_time);
        fmt::print("  evaluated: {} ({} only to price the other choices, {} only to complete the Pareto front)\n",
                   r.evaluated, st.loss_evaluations, st.front_evaluations);
        fmt::print("  reserved memory: the caching allocator replayed for {} of them ({} evaluated again for it; {} the same "
                   "calls as an earlier replay, whose figures were reused) in {:.1f} ms; the rest cannot enter the answer or "
                   "are shown not to fit by lower bounds on reserved memory\n",
                   st.reserved_replays, st.reevaluations, st.replays_reused, st.replay_seconds * 1e3);
        fmt::print("  in evaluations: lower {:.1f} ms, simulate {:.1f} ms, memory {:.1f} ms, validate and summarize {:.1f} ms\n",
                   st.lower_seconds * 1e3, st.simulate_seconds * 1e3, st.memory_seconds * 1e3,
                   st.other_evaluation_seconds * 1e3);
    }
    if (!r.fits) {
        fmt::print("\n{}\n", r.no_fit);
    } else {
        const auto& b = r.best;
        fmt::print("\nBest: {}\n", label(b.choice));
        fmt::print("  step {:.2f} ms, {:.0f} tokens/s per GPU, MFU {:.3f}, peak {:.2f} GiB of a {:.2f} GiB budget\n",
                   b.step_s * 1e3, b.tokens_per_s_per_gpu, b.mfu, toGiB(b.peak_bytes), toGiB(b.budget_bytes));
        fmt::print("\nTop {}:\n{:>3} {:>12} {:>14} {:>11}  {}\n", r.top.size(), "#", "step (ms)", "tokens/s/GPU", "peak (GiB)",
                   "configuration");
        for (size_t i = 0; i < r.top.size(); ++i) {
            const auto& en = r.top[i];
            fmt::print("{:>3} {:>12.2f} {:>14.0f} {:>11.2f}  {}\n", i + 1, en.step_s * 1e3, en.tokens_per_s_per_gpu,
                       toGiB(en.peak_bytes), label(en.choice));
        }
        if (!r.at_risk.empty()) {
            // Shown so that a user who judged by allocated memory sees why they were passed over.
            constexpr size_t kShownAtRisk = 3;
            fmt::print("\nFaster, but AT RISK ({} configuration{}: the allocated peak fits, reserved memory does not; "
                       "the caching allocator's fragmentation can OOM them){}:\n{:>3} {:>12} {:>16} {:>15}  {}\n",
                       r.at_risk.size(), r.at_risk.size() == 1 ? "" : "s", r.at_risk.size() > kShownAtRisk ? fmt::format(", the {} fastest", kShownAtRisk) : "",
                       "#", "step (ms)", "allocated (GiB)", "reserved (GiB)", "configuration");
            for (size_t i = 0; i < r.at_risk.size() && i < kShownAtRisk; ++i) {
                const auto& en = r.at_risk[i];
                // A bound where the search showed it cannot fit without replaying its allocator.
                const std::string reserved = fmt::format("{}{:.2f}", en.peak_is_bound ? ">= " : "", toGiB(en.peak_bytes));
                fmt::print("{:>3} {:>12.2f} {:>16.2f} {:>15}  {}\n", i + 1, en.step_s * 1e3, toGiB(en.allocated_bytes),
                           reserved, label(en.choice));
            }
        }
        fmt::print("\nPareto front, peak memory against step time (fitting configurations{}):\n{:>11} {:>12}  {}\n",
                   r.cutoff_step_s > 0 ? fmt::format(" faster than {:.2f} ms; the bound pruned slower ones", r.cutoff_step_s * 1e3) : "",
                   "peak (GiB)", "step (ms)", "configuration");
        for (const auto& en : r.front) {
            fmt::print("{:>11.2f} {:>12.2f}  {}\n", toGiB(en.peak_bytes), en.step_s * 1e3, label(en.choice));
        }
        fmt::print("\nWhat another choice loses (best configuration with it, tokens/s per GPU against the best):\n");
        for (const auto& l : r.losses) {
            // A first-N checkpointing family (--ac-per-block) is priced by its best N.
            const std::string note = l.best_value != l.value && l.fits ? fmt::format("  [its best: {}]", l.best_value) : "";
            const std::string what =
                l.fits ? fmt::format("{:+.1f}% ({:.2f} ms)", l.change * 100, l.step_s * 1e3) : std::string("nothing fits");
            fmt::print("  {:<22} {} instead of {}: {}{}\n", sim::dimensionName(l.dimension), l.value, l.winner_value, what, note);
        }
    }
    fmt::print("\nNot searched:\n");
    for (const auto& n : r.not_searched) fmt::print("  - {}\n", n);
    if (r.fits && !o.write_plan.empty()) fmt::print("\nPlan written to {}\n", o.write_plan);
    if (r.fits && !o.pytorch.empty()) fmt::print("PyTorch code written to {}\n", o.pytorch);
    if (!r.fits && (!o.write_plan.empty() || !o.pytorch.empty())) fmt::print("\nNothing written: no configuration fits\n");
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

void registerOptimizeCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<OptimizeCommandOptions>();
    CLI::App* cmd = app.add_subcommand(
        "optimize",
        "The fastest configuration that fits (tokens/s per GPU) over strategies, hybrid shard sizes, FSDP1/2, wrap "
        "policies, activation checkpointing, micro-batch x accumulation, reshard_after_forward, prefetch and CPU "
        "offload; exact under the simulator (pruning only by proven lower bounds on step time and peak memory). Per-block "
        "checkpointing only with --ac-per-block (the first N blocks in one mode, the rest in another). Not searched: "
        "other per-block checkpointing, arbitrary block groupings (use `search` on the result), explicit FSDP2 prefetch lists");
    core::PlanOverrides& p = opts->plan;
    auto str = [cmd](const char* name, std::optional<std::string>& target, const char* type, const char* help) {
        cmd->add_option_function<std::string>(name, [&target](const std::string& v) { target = v; }, help)->type_name(type);
    };
    auto num = [cmd](const char* name, std::optional<int64_t>& target, const char* type, const char* help) {
        cmd->add_option_function<int64_t>(name, [&target](const int64_t& v) { target = v; }, help)->type_name(type);
    };
    cmd->add_option("plan", p.plan_file, "Plan file as the base job (model, cluster, training); flags override it")
        ->type_name("PLAN.json");
    str("--model", p.model, "NAME|CONFIG.json", "Bundled model name or a config.json; required without a plan file");
    str("--gpu", p.gpu, "NAME|GPU.json", "GPU preset or GPU JSON file (default H100-SXM)");
    num("--nodes", p.nodes, "N", "Number of nodes (default 1)");
    num("--gpus-per-node", p.gpus_per_node, "G", "GPUs per node (default 8)");
    num("--seq-len", p.seq_len, "S", "Sequence length in tokens (default 4096)");
    str("--param-dtype", p.param_dtype, "DTYPE", "MixedPrecisionPolicy.param_dtype (default bf16)");
    str("--reduce-dtype", p.reduce_dtype, "DTYPE", "MixedPrecisionPolicy.reduce_dtype (default fp32)");
    str("--master-dtype", p.master_dtype, "DTYPE", "Dtype of sharded params, grads, optimizer state (default fp32)");
    str("--optimizer", p.optimizer, "NAME", "adamw | adamw-fused | sgd | sgd-momentum (default adamw)");
    str("--attention", p.attention, "KERNEL", "flash | eager (default flash)");
    str("--kernels", p.kernels, "IMPL", "eager | fused (default eager)");
    str("--scale", p.scale, "hidden=H,layers=L,seq=S", "Shrink the model (as `plan --scale`)");
    cmd->add_option("--global-batch", opts->global_batch, "Sequences per optimizer step over all GPUs (a multiple of the GPU count)")
        ->type_name("B")
        ->required();
    cmd->add_option("--strategy", opts->strategies, "Strategies to consider, comma-separated (default all five)")
        ->type_name("S,...")
        ->delimiter(',');
    cmd->add_option("--shard-size", opts->shard_sizes,
                    "Hybrid shard group sizes to consider, comma-separated (default every divisor of the GPU count "
                    "between 1 and it)")
        ->type_name("N,...")
        ->delimiter(',');
    cmd->add_option("--fsdp", opts->fsdps, "FSDP flavours to consider: 1,2 (default both)")->type_name("1|2,...")->delimiter(',');
    cmd->add_option("--tp", opts->tps,
                    "Tensor-parallel degrees to consider, comma-separated (default 1, or the plan file's): each divides "
                    "the GPUs per node and the attention and KV heads; with tp > 1 the space is FSDP2, sharded "
                    "strategies, no offload, over the GPU count / tp data-parallel ranks")
        ->type_name("T,...")
        ->delimiter(',');
    cmd->add_option("--pp", opts->pps,
                    "Pipeline stage counts to consider, comma-separated (default 1, or the plan file's), with the plan's "
                    "--pp-schedule; with pp > 1 the space is FSDP2, sharded strategies, no offload, over the GPU count / "
                    "(tp x pp) data-parallel ranks, each step's micro-batches the pipeline's, searched with the same "
                    "proven bounds plus the pipeline's chain through micro-batch 0")
        ->type_name("P,...")
        ->delimiter(',');
    cmd->add_option("--pp-schedules", opts->pp_schedules,
                    "Pipeline schedules to consider with every --pp above 1, comma-separated: GPipe, 1F1B, "
                    "Interleaved1F1B:V (V stages per rank, 2 or more); default the plan's --pp-schedule")
        ->type_name("S,...")
        ->delimiter(',');
    cmd->add_option("--wrap", opts->wraps,
                    "Wrap policies to consider, comma-separated: whole | block | every:K | min-params:N | modules:FILE "
                    "(default whole, every:8, every:4, every:2, block)")
        ->type_name("POLICY,...")
        ->delimiter(',');
    cmd->add_option("--ac", opts->acs,
                    "Activation checkpointing modes to consider, comma-separated (default none, attn-core, op, layer:2, full): " +
                        std::string(core::kAcChoices) +
                        "; the entry `blocks` is --ac-per-block (`--ac none,full,blocks`: none, full and the first N "
                        "blocks full, the rest none)")
        ->type_name("MODE,...")
        ->delimiter(',');
    cmd->add_flag("--ac-per-block", opts->ac_per_block,
                  "Also search checkpointing per block: the first N blocks in one mode, the rest in another "
                  "(full then none, full then op, op then none, each pair whose two modes the checkpointing choices "
                  "hold; N = 1 .. blocks-1). Off by default: it multiplies the checkpointing choices by up to 3 x the "
                  "block count and the search time by about 30");
    cmd->add_option("--offload", opts->offloads, "CPU offload choices: none,cpu (default both)")->type_name("MODE,...")->delimiter(',');
    cmd->add_option("--max-micro-batch", opts->max_micro_batch, "Largest micro-batch (sequences per GPU) to consider")
        ->type_name("B");
    cmd->add_flag("--no-partial-reshard", opts->no_partial_reshard,
                  "Do not consider FSDP2 reshard_after_forward = GPUs per node");
    cmd->add_flag("--no-prefetch-search", opts->no_prefetch, "Keep the default prefetch (do not vary it)");
    addHeadroomOption(*cmd, opts->headroom);
    addProfileOption(*cmd, opts->profile);
    cmd->add_option("--top", opts->top, "Configurations in the ranking")->type_name("T")->capture_default_str();
    cmd->add_flag("--json", opts->json,
                  "Print one JSON object: {\"best\": {plan, time, memory}, \"top\": [...], \"front\": [...], ...}");
    cmd->add_flag("--stats", opts->stats,
                  "Also print where the search spent its work: bound Programs, what each bound pruned, evaluations "
                  "and allocator replays, time per stage (always in --json under search.stats)");
    cmd->add_option("--write-plan", opts->write_plan, "Write the winner as a plan file")->type_name("FILE");
    cmd->add_option("--pytorch", opts->pytorch, "Write the PyTorch code that applies the winner to FILE")->type_name("FILE");
    cmd->callback([opts, &exit_code] { exit_code = runOptimize(*opts); });
}

}  // namespace shardcast::cli
