#include "planstore/trace_run.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/base/units.hpp"
#include "simulator/hardware_profile.hpp"
#include "trace/kineto_reader.hpp"
#include "trace/memory_snapshot.hpp"

namespace shardcast::planstore {

core::Result<ImportedRun> importTraceRun(const std::vector<std::string>& traces, const std::filesystem::path& plan_path,
                                         const std::string& profile_arg, const std::filesystem::path& store_path,
                                         const trace::ImportOptions& options,
                                         const std::function<void(const std::filesystem::path&)>& reading,
                                         const std::filesystem::path& memory_snapshot) {
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
    if (!memory_snapshot.empty()) {
        if (reading) reading(memory_snapshot);
        auto snapshot = trace::readMemorySnapshot(memory_snapshot);
        if (!snapshot) return snapshot.error();
        // The device the snapshot recorded most on: one process drives one GPU.
        const trace::DeviceMemory* device = nullptr;
        for (const trace::DeviceMemory& d : snapshot->devices) {
            if (device == nullptr || d.events > device->events) device = &d;
        }
        if (device == nullptr || device->reserved_curve.empty()) {
            return core::makeError(memory_snapshot.string() + ": the snapshot holds no segments or trace of any device");
        }
        imported->run.reserved_peak_bytes = device->peak_reserved;
        imported->run.reserved_fragmentation_bytes = device->fragmentation_at_reserved_peak;
        imported->run.reserved_source = fmt::format(
            "{}: device {}, {} allocator events (the history it recorded, not the one step)", memory_snapshot.string(),
            device->device, device->events);
        if (!device->trace_consistent) {
            imported->notes.push_back(memory_snapshot.string() + ": its trace does not add up to its final segments "
                                                                  "(a ring buffer that wrapped?): the peaks are a lower bound");
        }
    }
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
