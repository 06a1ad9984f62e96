#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "core/lower.hpp"
#include "simulator/chrome_trace.hpp"
#include "simulator/hardware_profile.hpp"
#include "simulator/memory_curve.hpp"
#include "simulator/simulator.hpp"
#include "simulator/summary.hpp"

namespace shardcast::cli {
namespace {

struct SimulateOptions {
    PlanOptions plan;
    std::string trace, profile, save_profile;
    bool json = false;
};

std::string gib(int64_t bytes) { return core::formatGiB(bytes); }

void printText(const core::Program& program, const sim::StepSummary& s, const core::Plan& plan) {
    fmt::print("Step time           {:10.2f} ms\n", s.step_s * 1e3);
    fmt::print("  compute (busy)    {:10.2f} ms\n", s.compute_s * 1e3);
    fmt::print("  exposed comm      {:10.2f} ms\n", s.exposed_comm_s * 1e3);
    fmt::print("Collectives (summed durations)\n");
    fmt::print("  all-gather        {:10.2f} ms\n", s.all_gather_s * 1e3);
    fmt::print("  reduce-scatter    {:10.2f} ms\n", s.reduce_scatter_s * 1e3);
    fmt::print("  all-reduce        {:10.2f} ms\n", s.all_reduce_s * 1e3);
    fmt::print("MFU                 {:10.3f}   (model FLOPs / step / {:.0f} TFLOP/s {} peak)\n", s.mfu,
               plan.cluster.gpu.peakFlops(program.compute_dtype) / 1e12, core::dtypeName(program.compute_dtype));
    fmt::print("HFU                 {:10.3f}\n", s.hfu);
    fmt::print("Tokens/s per GPU    {:10.0f}\n", s.tokens_per_s_per_gpu);
    fmt::print("Peak memory         {:>13}  of {} ({})\n", gib(s.peak_bytes), gib(plan.cluster.gpu.memory_bytes),
               s.peak_task >= 0 ? program.taskLabel(s.peak_task) : std::string("initial"));
    for (int c = 0; c < core::kMemCategoryCount; ++c) {
        if (s.at_peak[c] == 0) continue;
        fmt::print("  {:<18}{:>13}\n", core::categoryName(static_cast<core::MemCategory>(c)), gib(s.at_peak[c]));
    }
    fmt::print("Stream busy time\n");
    for (int st = 0; st < core::kStreamCount; ++st) {
        if (s.stream_busy_s[st] <= 0) continue;
        fmt::print("  {:<18}{:10.2f} ms\n", core::streamName(static_cast<core::Stream>(st)), s.stream_busy_s[st] * 1e3);
    }
}

int runSimulate(const SimulateOptions& o) {
    auto validated = buildValidatedPlan(o.plan);
    if (!validated) return reportInputError(validated.error().message);
    const core::Plan& plan = validated->plan;
    core::Program program;
    if (auto lowered = core::lower(plan, validated->mesh, program); !lowered) {
        return reportInputError(lowered.error().message);
    }
    sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plan.cluster);
    if (!o.profile.empty()) {
        auto loaded = sim::loadProfile(o.profile, profile);
        if (!loaded) return reportInputError("--profile " + loaded.error().message);
        profile = std::move(*loaded);
    }
    if (!o.save_profile.empty()) {
        if (auto saved = sim::saveProfile(o.save_profile, profile); !saved) return reportInputError(saved.error().message);
    }
    sim::Simulator simulator(profile);
    core::Timeline timeline;
    simulator.run(program, timeline);
    sim::MemoryTimer timer;
    sim::TimedMemory memory;
    timer.compute(program, timeline, memory, !o.trace.empty());
    const sim::StepSummary summary = sim::summarize(program, timeline, memory, profile);
    if (!o.trace.empty()) {
        if (auto written = sim::writeChromeTrace(o.trace, program, timeline, &memory); !written) {
            fmt::print(stderr, "shardcast: error: {}\n", written.error().message);
            return kExitRuntimeFailure;
        }
    }
    if (o.json) {
        nlohmann::json j = sim::summaryToJson(program, summary);
        j["fits"] = summary.peak_bytes <= plan.cluster.gpu.memory_bytes;
        j["capacity_bytes"] = plan.cluster.gpu.memory_bytes;
        if (!o.trace.empty()) j["trace"] = o.trace;
        fmt::print("{}\n", j.dump(2));
    } else {
        printText(program, summary, plan);
        if (!o.trace.empty()) fmt::print("\nChrome trace written to {} (open in https://ui.perfetto.dev)\n", o.trace);
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
    cmd->add_option("--trace", opts->trace, "Write a Chrome trace (Perfetto, chrome://tracing) to FILE")
        ->type_name("FILE");
    cmd->add_option("--profile", opts->profile, "Hardware profile JSON overriding the cost-model defaults")
        ->type_name("FILE");
    cmd->add_option("--save-profile", opts->save_profile, "Write the profile in effect (defaults + --profile) to FILE")
        ->type_name("FILE");
    cmd->add_flag("--json", opts->json, "Print one JSON object instead of the text report");
    cmd->callback([opts, &exit_code] { exit_code = runSimulate(*opts); });
}

}  // namespace shardcast::cli
