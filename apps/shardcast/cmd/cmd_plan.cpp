#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "apps/shardcast/report.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "configs/config_export.hpp"
#include "core/base/file_io.hpp"
#include "core/plan/plan_build.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/pytorch_code.hpp"

namespace shardcast::cli {

namespace {

struct PlanCommandOptions {
    core::PlanOverrides plan;
    bool json = false;
    std::string write_plan;
    std::string pytorch;
    std::vector<std::string> emit;  // --emit FORMAT FILE
    std::string profile;
    double headroom = core::kDefaultHeadroom;
    bool whole_step = false;
    int stage = -1;  // --stage: the pipeline stage shown (-1: the one whose memory binds)
    SaveRequest save;
};

int runPlan(const PlanCommandOptions& o) {
    auto plan = buildPlanFromFlags(o.plan);
    if (!plan) return reportInputError(plan.error().message);
    auto profile = resolveProfileArg(plan->cluster, o.profile);
    if (!profile) return reportInputError("--profile " + profile.error().message);

    sim::EvaluationOptions options;
    options.headroom = o.headroom;
    options.record_curve = o.save.requested;
    options.period_over = o.save.requested || o.whole_step ? 0 : sim::kPeriodOver;  // saved: every micro-batch
    if (o.stage >= 0) {
        if (o.stage >= plan->sharding.pp) {
            // Under Interleaved1F1B a rank holds several stages; --stage names the rank.
            const bool interleaved = plan->sharding.pp_virtual_stages > 1;
            return reportInputError(fmt::format("--stage {}: the plan has {} pipeline {}{} (valid: 0 to {})", o.stage,
                                                plan->sharding.pp, interleaved ? "rank" : "stage",
                                                plan->sharding.pp == 1 ? "" : "s", plan->sharding.pp - 1));
        }
        options.pipeline_stage = o.stage;
    }
    StageProgress progress;
    options.progress = progress.callback();
    sim::Evaluator evaluator;
    sim::Evaluation evaluation;
    const core::Status evaluated = evaluator.evaluate(*plan, &profile->profile, options, evaluation);
    progress.done();
    if (!evaluated) return reportInputError(evaluated.error().message);

    if (!o.write_plan.empty()) {
        if (auto written = core::writePlanFile(*plan, o.write_plan); !written) {
            return reportInputError("--write-plan: " + written.error().message);
        }
    }
    if (!o.pytorch.empty()) {
        const std::string code = sim::pytorchCode(*plan, evaluation.mesh, sim::unitsOfPlan(*plan));
        if (auto written = core::writeFileAtomically(o.pytorch, code); !written) {
            return reportInputError("--pytorch: " + written.error().message);
        }
    }
    if (!o.emit.empty()) {
        const std::string format = o.emit.empty() ? std::string() : o.emit[0];
        if (o.emit.size() != 2 || (format != "torchtitan" && format != "accelerate" && format != "hf-trainer")) {
            return reportInputError(fmt::format("--emit {}: valid: --emit torchtitan|accelerate|hf-trainer FILE", format));
        }
        auto text = format == "torchtitan"   ? configs::torchtitanToml(*plan, evaluation.mesh)
                    : format == "accelerate" ? configs::accelerateYaml(*plan, evaluation.mesh)
                                             : configs::hfTrainerJson(*plan, evaluation.mesh);
        if (!text) return reportInputError(text.error().message);
        if (auto written = core::writeFileAtomically(o.emit[1], *text); !written) {
            return reportInputError("--emit: " + written.error().message);
        }
    }
    SaveOutcome saved;
    if (o.save.requested) {
        saved = savePredictionReported(*plan, evaluation, *profile, o.save);
        if (saved.exit_code != kExitOk) return saved.exit_code;
    }
    if (o.json) {
        nlohmann::ordered_json j = planResultJson(*plan, evaluation);
        if (o.save.requested) j["saved"] = saved.saved;
        fmt::print("{}\n", j.dump(2));
    } else {
        fmt::print("{}", planReportText(*plan, evaluation));
        if (!o.write_plan.empty()) fmt::print("\nPlan written to {}\n", o.write_plan);
        if (!o.pytorch.empty()) fmt::print("\nPyTorch code written to {}\n", o.pytorch);
        if (!o.emit.empty()) fmt::print("\n{} config written to {}\n", o.emit[0], o.emit[1]);
        if (o.save.requested) fmt::print("{}\n", saved.line);
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
    addHeadroomOption(*cmd, opts->headroom);
    addWholeStepOption(*cmd, opts->whole_step);
    cmd->add_flag("--json", opts->json, "Print one JSON object instead of the text report");
    cmd->add_option("--stage", opts->stage,
                    "With --pp: report this pipeline stage's memory and timeline (default: the stage whose memory binds); "
                    "with --pp-virtual-stages, this pipeline rank's (its stages together)")
        ->type_name("S")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--write-plan", opts->write_plan,
                    "Also write the resulting plan (plan file + flags) to FILE")
        ->type_name("FILE");
    cmd->add_option("--pytorch", opts->pytorch,
                    "Also write the PyTorch code that applies this plan to FILE: the device mesh, the tensor-parallel "
                    "plan (parallelize_module) with --tp, checkpoint_wrapper and fully_shard per unit")
        ->type_name("FILE");
    cmd->add_option("--emit", opts->emit,
                    "Also write the plan as a framework's config that --from-config reads back to this plan: torchtitan "
                    "FILE (a TOML job config), accelerate FILE (accelerate's config YAML; the model, batch and optimizer "
                    "stay the script's: their flags are in its first comment) or hf-trainer FILE (a TrainingArguments "
                    "JSON; the model and sequence length stay the script's). A plan the framework cannot express is "
                    "refused by field")
        ->type_name("FORMAT FILE")
        ->expected(2);
    addProfileOption(*cmd, opts->profile);
    addSaveOption(*cmd, opts->save, "the plan and its prediction");
    cmd->callback([opts, &exit_code] { exit_code = runPlan(*opts); });
}

}  // namespace shardcast::cli
