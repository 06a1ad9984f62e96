#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "apps/shardcast/report.hpp"
#include "core/lower.hpp"
#include "core/memory.hpp"
#include "simulator/hardware_profile.hpp"
#include "simulator/memory_curve.hpp"
#include "simulator/simulator.hpp"
#include "simulator/summary.hpp"

namespace shardcast::cli {

namespace {

struct PlanCommandOptions {
    PlanOptions plan;
    bool json = false;
    std::string write_plan;
    std::string profile;
};

int runPlan(const PlanCommandOptions& o) {
    auto validated = buildValidatedPlan(o.plan);
    if (!validated) return reportInputError(validated.error().message);
    const core::Plan& plan = validated->plan;
    const core::Mesh& mesh = validated->mesh;

    core::Program program;
    if (auto lowered = core::lower(plan, mesh, program); !lowered) {
        return reportInputError(lowered.error().message);
    }
    core::MemoryReport memory;
    core::replayMemory(program, memory);

    // Time the step; the reported peak is the timed curve's (prefetch and overlap move it).
    sim::HardwareProfile profile = sim::HardwareProfile::fromCluster(plan.cluster);
    if (!o.profile.empty()) {
        auto loaded = sim::loadProfile(o.profile, profile);
        if (!loaded) return reportInputError("--profile " + loaded.error().message);
        profile = std::move(*loaded);
    }
    sim::Simulator simulator(profile);
    core::Timeline timeline;
    simulator.run(program, timeline);
    sim::MemoryTimer timer;
    sim::TimedMemory timed;
    timer.compute(program, timeline, timed);
    const sim::StepSummary summary = sim::summarize(program, timeline, timed, profile);
    const int64_t issue_order_peak = memory.peak_bytes;
    memory.peak_bytes = timed.peak_bytes;
    memory.peak_task = timed.peak_task;
    memory.at_peak = timed.at_peak;
    memory.max_per_category = timed.max_per_category;

    if (!o.write_plan.empty()) {
        if (auto written = writePlanFile(plan, o.write_plan); !written) {
            return reportInputError(written.error().message);
        }
    }

    const PlanResultView view{plan, mesh, program, memory, &summary, issue_order_peak};
    if (o.json) {
        fmt::print("{}\n", planResultJson(view).dump(2));
    } else {
        fmt::print("{}", planReportText(view));
        if (!o.write_plan.empty()) fmt::print("\nPlan written to {}\n", o.write_plan);
    }
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

void registerPlanCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<PlanCommandOptions>();
    CLI::App* cmd = app.add_subcommand(
        "plan", "Per-GPU memory, communication and step time of one plan: will it fit, what each rank holds, where the time goes");
    addPlanOptions(*cmd, opts->plan);
    cmd->add_flag("--json", opts->json, "Print one JSON object instead of the text report");
    cmd->add_option("--write-plan", opts->write_plan,
                    "Also write the resulting plan (plan file + flags) to FILE")
        ->type_name("FILE");
    cmd->add_option("--profile", opts->profile, "Hardware profile JSON overriding the cost-model defaults")
        ->type_name("FILE");
    cmd->callback([opts, &exit_code] { exit_code = runPlan(*opts); });
}

}  // namespace shardcast::cli
