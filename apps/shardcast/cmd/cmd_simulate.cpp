#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "apps/shardcast/report.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "core/plan/plan_build.hpp"
#include "simulator/chrome_trace.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::cli {
namespace {

struct SimulateOptions {
    core::PlanOverrides plan;
    std::string trace, profile, save_profile;
    bool json = false;
    double headroom = core::kDefaultHeadroom;
    bool whole_step = false;
    SaveRequest save;
};

std::string gib(int64_t bytes) { return core::formatGiB(bytes); }

void printText(const sim::Evaluation& e) {
    const core::StepSummary& s = e.summary;
    const core::Program& program = e.program;
    fmt::print("Step time           {:10.2f} ms\n", s.step_s * 1e3);
    if (const std::string period = periodText(e); !period.empty()) fmt::print("  {}\n", period);
    fmt::print("  compute (busy)    {:10.2f} ms\n", s.compute_s * 1e3);
    fmt::print("  exposed comm      {:10.2f} ms\n", s.exposed_comm_s * 1e3);
    if (e.core_slowdown > 1) {
        fmt::print("  shared cores      {:10.2f} x   (CPU work against a core to itself: the ranks computing at once "
                   "share the node's {} cores)\n",
                   e.core_slowdown, e.profile.host_cores);
    }
    fmt::print("Collectives (summed durations)\n");
    fmt::print("  all-gather        {:10.2f} ms\n", s.all_gather_s * 1e3);
    fmt::print("  reduce-scatter    {:10.2f} ms\n", s.reduce_scatter_s * 1e3);
    fmt::print("  all-reduce        {:10.2f} ms\n", s.all_reduce_s * 1e3);
    fmt::print("MFU                 {:10.3f}   (model FLOPs / step / {} {} peak)\n", s.mfu,
               core::formatFlopRate(s.peak_flops), core::dtypeName(program.compute_dtype));
    fmt::print("HFU                 {:10.3f}\n", s.hfu);
    fmt::print("  {}\n  {}\n", core::kMfuConvention, core::kHfuConvention);
    fmt::print("Tokens/s per GPU    {:10.0f}\n", s.tokens_per_s_per_gpu);
    fmt::print("Peak memory         {:>13}  of {} ({})\n", gib(s.peak_bytes), gib(e.profile.gpu.memory_bytes),
               s.peak_task >= 0 ? program.taskLabel(s.peak_task) : std::string("initial"));
    for (int c = 0; c < core::kMemCategoryCount; ++c) {
        if (s.at_peak[c] == 0) continue;
        fmt::print("  {:<18}{:>13}\n", core::categoryName(static_cast<core::MemCategory>(c)), gib(s.at_peak[c]));
    }
    if (e.fit.reserved_bytes > 0) {
        const core::AllocatorStats& a = e.reserved.stats;
        fmt::print("Peak reserved       {:>13}  (caching allocator, --allocator {}; Runtime Overhead included)\n",
                   gib(e.fit.reserved_bytes), core::allocatorModeName(e.reserved.config.mode));
        fmt::print("  fragmentation     {:>13}  at the reserved peak, largest {}\n", gib(a.fragmentation_at_reserved_peak),
                   gib(a.max_fragmentation_bytes));
    }
    fmt::print("Fits                {:>13}  (budget {} = capacity less {:g}% headroom)\n",
               e.fit.fits ? "yes" : (e.fit.at_risk ? "AT RISK" : "NO"), gib(e.fit.budget_bytes), e.fit.headroom * 100);
    fmt::print("Stream busy time\n");
    for (int st = 0; st < core::kStreamCount; ++st) {
        if (s.stream_busy_s[st] <= 0) continue;
        fmt::print("  {:<18}{:10.2f} ms\n", core::streamName(static_cast<core::Stream>(st)), s.stream_busy_s[st] * 1e3);
    }
}

int runSimulate(const SimulateOptions& o) {
    auto plan = buildPlanFromFlags(o.plan);
    if (!plan) return reportInputError(plan.error().message);
    auto resolved = resolveProfileArg(plan->cluster, o.profile);
    if (!resolved) return reportInputError("--profile " + resolved.error().message);
    const sim::HardwareProfile* profile = &resolved->profile;
    if (!o.save_profile.empty()) {
        if (auto saved = sim::saveProfile(o.save_profile, *profile); !saved) {
            return reportInputError("--save-profile: " + saved.error().message);
        }
    }
    sim::EvaluationOptions options;
    options.headroom = o.headroom;
    options.issue_order_memory = false;
    options.record_curve = !o.trace.empty() || o.save.requested;
    options.period_over = o.save.requested || o.whole_step ? 0 : sim::kPeriodOver;  // saved: every micro-batch
    StageProgress progress;
    options.progress = progress.callback();
    sim::Evaluator evaluator;
    sim::Evaluation e;
    const core::Status evaluated = evaluator.evaluate(*plan, profile, options, e);
    progress.done();
    if (!evaluated) return reportInputError(evaluated.error().message);
    if (!o.trace.empty()) {
        if (auto written = sim::writeChromeTrace(o.trace, e.program, e.timeline, &e.timed); !written) {
            return reportInputError("--trace: " + written.error().message);
        }
    }
    SaveOutcome saved;
    if (o.save.requested) {
        saved = savePredictionReported(*plan, e, *resolved, o.save);
        if (saved.exit_code != kExitOk) return saved.exit_code;
    }
    if (o.json) {
        nlohmann::json j = core::summaryReportJson(e.program, e.summary);
        if (o.save.requested) j["saved"] = saved.saved;
        j["fits"] = e.fit.fits;
        j["capacity_bytes"] = e.fit.capacity_bytes;
        j["headroom"] = e.fit.headroom;
        j["budget_bytes"] = e.fit.budget_bytes;
        j["at_risk"] = e.fit.at_risk;
        j["reserved"] = reservedMemoryJson(*plan, e);
        j["period"] = periodJson(e);
        if (!o.trace.empty()) j["trace"] = o.trace;
        fmt::print("{}\n", j.dump(2));
    } else {
        printText(e);
        if (!o.trace.empty()) fmt::print("\nChrome trace written to {} (open in https://ui.perfetto.dev)\n", o.trace);
        if (o.save.requested) fmt::print("{}\n", saved.line);
    }
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

void registerSimulateCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<SimulateOptions>();
    CLI::App* cmd = app.add_subcommand("simulate", "Time one plan's step with the cost models: step time, exposed "
                                                   "communication, MFU, memory over time");
    addPlanOptions(*cmd, opts->plan);
    addHeadroomOption(*cmd, opts->headroom);
    addWholeStepOption(*cmd, opts->whole_step);
    cmd->add_option("--trace", opts->trace, "Write a Chrome trace (Perfetto, chrome://tracing) to FILE")
        ->type_name("FILE");
    addProfileOption(*cmd, opts->profile);
    addSaveOption(*cmd, opts->save, "the plan and its prediction (summary, timeline, memory curve)");
    cmd->add_option("--save-profile", opts->save_profile, "Write the profile in effect (defaults + --profile) to FILE")
        ->type_name("FILE");
    cmd->add_flag("--json", opts->json, "Print one JSON object instead of the text report");
    cmd->callback([opts, &exit_code] { exit_code = runSimulate(*opts); });
}

}  // namespace shardcast::cli
