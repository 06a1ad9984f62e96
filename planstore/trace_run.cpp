#include "planstore/trace_run.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/units.hpp"
#include "simulator/hardware_profile.hpp"
#include "trace/kineto_reader.hpp"

namespace shardcast::planstore {

core::Result<ImportedRun> importTraceRun(const std::vector<std::string>& traces, const std::filesystem::path& plan_path,
                                         const std::string& profile_arg, const std::filesystem::path& store_path,
                                         const trace::ImportOptions& options,
                                         const std::function<void(const std::filesystem::path&)>& reading) {
    auto plan = core::loadPlanFile(plan_path);
    if (!plan) return plan.error();
    auto profile = resolveProfile(plan->cluster, profile_arg, store_path);
    if (!profile) return core::makeError("--profile " + profile.error().message);
    auto files = trace::traceFiles(traces);
    if (!files) return files.error();
    std::vector<trace::RankTrace> ranks;
    for (const auto& f : *files) {
        if (reading) reading(f);
        auto t = trace::readKinetoTrace(f);
        if (!t) return t.error();
        ranks.push_back(std::move(*t));
    }
    ImportedRun out;
    sim::EvaluationOptions eval_options;
    eval_options.issue_order_memory = false;
    eval_options.per_unit = false;
    eval_options.record_curve = true;  // saved with the run (saveMeasuredRun)
    sim::Evaluator evaluator;
    if (auto s = evaluator.evaluate(*plan, &profile->profile, eval_options, out.predicted); !s) {
        return core::makeError(plan_path.string() + ": " + s.error().message);
    }
    auto imported = trace::importTraces(ranks, out.predicted.program, options);
    if (!imported) return imported.error();
    auto plan_json = core::selfContainedPlanJson(*plan);
    if (!plan_json) return plan_json.error();
    imported->run.plan = std::move(*plan_json);
    imported->run.profile = sim::profileToJson(out.predicted.profile);
    imported->run.compute_note = fmt::format("a real PyTorch {} run over {}, read from torch.profiler traces",
                                             imported->flavour, imported->collectives);
    nlohmann::json env;
    env["trace_files"] = nlohmann::json::array();
    for (const auto& f : *files) env["trace_files"].push_back(f.string());
    env["step"] = imported->step_number;
    imported->run.environment = std::move(env);
    out.import = std::move(*imported);
    out.plan = std::move(*plan);
    out.profile = std::move(*profile);
    return out;
}

core::Result<SavedRun> saveMeasuredRun(db::Store& store, const core::Plan& plan, const sim::Evaluation& predicted,
                                       const ResolvedProfile& profile, const core::RunRecord& record,
                                       const std::string& name) {
    auto prediction = savePrediction(store, plan, predicted, profile, name);
    if (!prediction) return prediction.error();
    auto plan_json = core::selfContainedPlanJson(plan);
    if (!plan_json) return plan_json.error();
    db::RunInput input;
    input.name = name;
    input.plan = std::move(*plan_json);
    input.record = core::runRecordToJson(record);
    input.summary_line = fmt::format("{}: {} on {} ranks, {:.2f} ms/step measured, peak {}", planSummaryLine(plan),
                                     record.backend, record.world_size, static_cast<double>(record.medianStepNs()) * 1e-6,
                                     core::formatGiB(record.memory.peak_bytes));
    auto run = store.saveRun(input);
    if (!run) return run.error();
    return SavedRun{*run, prediction->prediction, prediction->plan};
}

}  // namespace shardcast::planstore
