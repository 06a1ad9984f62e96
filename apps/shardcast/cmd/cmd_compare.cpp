// `shardcast compare PLAN|run RUN.json`: predicts exactly what a measured run ran (the run's own plan
// on the run's own hardware profile) and reports the prediction's errors (core/results/compare.hpp); a PLAN
// given is only checked to be the plan the run ran. docs/compare.md has the details.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/report.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "apps/shardcast/trace_import_cli.hpp"
#include "core/base/file_io.hpp"
#include "core/model/model_io.hpp"
#include "core/plan/plan.hpp"
#include "core/results/compare.hpp"
#include "core/results/run_record.hpp"
#include "core/results/step_io.hpp"
#include "measured/diagnosis.hpp"
#include "planstore/planstore.hpp"
#include "simulator/chrome_trace.hpp"
#include "simulator/evaluation.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::cli {
namespace {

namespace fs = std::filesystem;

struct CompareOptions {
    std::string prediction;  // a plan file, or "run": the run's own plan
    std::string run;
    std::string stored_run, stored_prediction;  // --run ID --prediction ID (the store)
    SaveRequest save;
    std::string trace;
    std::vector<std::string> torch_traces;  // --torch-trace: import these and compare in one step
    std::string profile;                    // --profile, with --torch-trace
    TraceImportFlags trace_flags;
    int top = 10;
    bool json = false;
};

// A plan as compared: its JSON with the model named by what it resolves to, not by how the file
// spelled the path.
nlohmann::json comparablePlan(const core::Plan& plan) {
    nlohmann::json j = core::planToJson(plan);
    j["model"] = plan.model ? plan.model->name : plan.model_ref;
    return j;
}

// The first difference between the plans `a` and `b` as "training.seq_len (512 here, 1024 in the
// run)", naming where each value comes from; empty when equal.
std::string firstDifference(const nlohmann::json& a, const nlohmann::json& b, std::string_view a_name,
                            std::string_view b_name) {
    const nlohmann::json patch = nlohmann::json::diff(a, b);
    if (patch.empty()) return {};
    const nlohmann::json::json_pointer pointer(patch[0].at("path").get<std::string>());
    const auto valueIn = [&](const nlohmann::json& j) {
        return j.contains(pointer) ? j.at(pointer).dump() : std::string("absent");
    };
    std::string path = pointer.to_string();
    if (!path.empty() && path.front() == '/') path.erase(0, 1);
    for (char& c : path) {
        if (c == '/') c = '.';
    }
    if (path.empty()) path = "(the whole plan)";
    return fmt::format("{} ({} in {}, {} in {})", path, valueIn(a), a_name, valueIn(b), b_name);
}

std::string percent(const std::optional<double>& e) { return e ? fmt::format("{:+.2f}%", *e * 100) : "n/a"; }
double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }
double us(int64_t ns) { return static_cast<double>(ns) / 1e3; }
double mib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 20); }

void printText(const core::RunRecord& run, const core::Program& program, const core::Comparison& c) {
    fmt::print("Prediction vs the {} run ({} ranks, {} tasks); error = (predicted - measured) / measured\n",
               run.backend, run.world_size, c.task_count);
    fmt::print("Measured: rank {}'s timeline of the median of {} steps ({} warmup steps discarded)\n",
               run.recorded_rank, run.step_ns.size(), run.warmup_steps);
    if (!run.compute_note.empty()) fmt::print("Compute: {}\n", run.compute_note);
    if (run.environment.is_object() && run.environment.value("verify", false)) {
        fmt::print("Verified: the run checked every collective's data (--verify), CPU work the plan does not have: "
                   "its compute and step run longer than the prediction says; time a run without --verify\n");
    }
    if (c.excluded_task_count > 0) {
        fmt::print("Emulated: {} collective tasks were filled locally, not communicated (--emulate-rank): they are left "
                   "out of the stream and task errors, and the step time, which contains them, is not compared\n",
                   c.excluded_task_count);
    }
    if (c.unmeasured_task_count > 0) {
        fmt::print("Unmeasured: {} tasks have no time in the measurement (e.g. casts a trace does not label): they are "
                   "left out of the stream and task errors; the step time is compared\n",
                   c.unmeasured_task_count);
    }
    if (run.memory_kind == core::RunRecord::MemoryKind::None) {
        fmt::print("Memory: the run measured none: not compared\n");
    } else if (run.memory_kind == core::RunRecord::MemoryKind::Rise) {
        fmt::print("Memory: the peak's rise above the step's start, measured and predicted (the prediction's steady state "
                   "left out): a CPU trace counts only what the profiler saw allocated\n");
    } else if (run.memory_kind == core::RunRecord::MemoryKind::Total) {
        fmt::print("Memory: the measurement has a total, no categories\n");
    }
    fmt::print("\n");
    fmt::print("{:<24}{:>16}{:>16}{:>12}\n", "Step", "predicted (ms)", "measured (ms)", "error");
    fmt::print("{:<24}{:>16.3f}{:>16.3f}{:>12}\n", "step time", ms(c.predicted_step_ns), ms(c.measured_step_ns),
               percent(c.step_time_error));
    fmt::print("\n{:<24}{:>16}{:>16}{:>12}\n", "Stream busy time", "predicted (ms)", "measured (ms)", "error");
    for (const core::StreamComparison& s : c.streams) {
        fmt::print("{:<24}{:>16.3f}{:>16.3f}{:>12}\n", core::streamName(s.stream), ms(s.predicted_busy_ns),
                   ms(s.measured_busy_ns), percent(s.error));
    }
    fmt::print("\n{:<24}{:>16}{:>16}{:>16}{:>12}\n", "Peak memory", "predicted (MiB)", "measured (MiB)",
               "error (MiB)", "error");
    fmt::print("{:<24}{:>16.3f}{:>16.3f}{:>16.3f}{:>12}\n", "total", mib(c.predicted_peak_bytes),
               mib(c.measured_peak_bytes), mib(c.predicted_peak_bytes - c.measured_peak_bytes),
               percent(c.peak_memory_error));
    for (const core::CategoryComparison& k : c.categories) {
        fmt::print("  {:<22}{:>16.3f}{:>16.3f}{:>16.3f}{:>12}\n", core::categoryName(k.category),
                   mib(k.predicted_bytes), mib(k.measured_bytes), mib(k.errorBytes()), percent(k.error));
    }
    fmt::print("\nTasks with the largest duration error\n");
    fmt::print("{:>6}  {:<20}{:<9}{:<20}{:>16}{:>16}{:>12}\n", "id", "unit", "kind", "stream", "predicted (us)",
               "measured (us)", "error");
    for (const core::TaskComparison& t : c.tasks) {
        const core::Task& task = program.tasks[static_cast<size_t>(t.id)];
        fmt::print("{:>6}  {:<20}{:<9}{:<20}{:>16.1f}{:>16.1f}{:>12}\n", t.id, core::taskUnitName(program, t.id),
                   core::taskKindName(task.kind), core::streamName(task.stream), us(t.predicted_ns), us(t.measured_ns),
                   percent(t.error));
    }
}

void printDiagnosis(const sim::Diagnosis& d, const core::Program& program, int top) {
    fmt::print("\nUnits, furthest off first (ms; wait: the compute stream waiting for the unit's all-gathers)\n");
    fmt::print("{:<20}{:>10}{:>10}{:>9}{:>10}{:>10}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}\n", "unit", "fwd pred", "fwd meas",
               "error", "bwd pred", "bwd meas", "error", "AG pred", "AG meas", "RS pred", "RS meas", "wait pr", "wait me");
    int shown = 0;
    for (const sim::UnitComparison& u : d.units) {
        if (shown++ >= top) break;
        fmt::print("{:<20}{:>10.3f}{:>10.3f}{:>9}{:>10.3f}{:>10.3f}{:>9}{:>9.3f}{:>9.3f}{:>9.3f}{:>9.3f}{:>9.3f}{:>9.3f}{}\n",
                   u.name, ms(u.predicted.forward_ns), ms(u.measured.forward_ns), percent(u.forward_error),
                   ms(u.predicted.backward_ns), ms(u.measured.backward_ns), percent(u.backward_error),
                   ms(u.predicted.all_gather_ns), ms(u.measured.all_gather_ns), ms(u.predicted.reduce_ns),
                   ms(u.measured.reduce_ns), ms(u.predicted.wait_ns), ms(u.measured.wait_ns),
                   u.measured_complete ? "" : "  (some tasks unmeasured)");
    }
    if (d.findings.empty()) {
        fmt::print("\nFindings: none (no all-gather waited on for over 1% of the step, no straggler)\n");
        return;
    }
    fmt::print("\nFindings\n");
    for (const sim::Finding& f : d.findings) {
        fmt::print("- {}: {}\n", sim::findingKindName(f.kind), f.message);
        if (f.remedy_step_ns) {
            fmt::print("  fix: {}: predicted step {:.3f} -> {:.3f} ms ({:+.1f}%)\n", f.remedy, ms(d.predicted_step_ns),
                       ms(*f.remedy_step_ns),
                       100.0 * (static_cast<double>(*f.remedy_step_ns) / static_cast<double>(d.predicted_step_ns) - 1.0));
        } else {
            fmt::print("  fix: {}\n", f.remedy);
        }
    }
    (void)program;
}

int reportComparison(const CompareOptions& o, const core::RunRecord& run_record, const core::Program& program,
                     const core::Timeline& predicted, const core::TimedMemory& predicted_memory, const std::string& run_name,
                     const std::optional<std::pair<db::ObjectId, db::ObjectId>>& stored, const core::Plan& plan,
                     const sim::HardwareProfile& profile, const core::ReservedMemory& predicted_reserved,
                     const trace::TraceImport* imported = nullptr);

// `compare --run ID --prediction ID`: a stored run against a stored prediction, as it was made
// (its timeline and memory as stored; the Program re-lowered from its stored plan and profile).
int runCompareStored(const CompareOptions& o) {
    if (o.stored_run.empty() || o.stored_prediction.empty()) {
        return reportInputError("--run and --prediction go together: `compare --run run-N --prediction pred-M` "
                                "(ids from `shardcast db list`)");
    }
    if (!o.prediction.empty() || !o.run.empty()) {
        return reportInputError("give either PLAN.json|run RUN.json or --run ID --prediction ID, not both");
    }
    auto run_id = db::parseId(o.stored_run);
    if (!run_id || run_id->kind != db::Kind::run) {
        return reportInputError("--run: '" + o.stored_run + "' is not a run id (run-N; `shardcast db list --kind runs`)");
    }
    auto pred_id = db::parseId(o.stored_prediction);
    if (!pred_id || pred_id->kind != db::Kind::prediction) {
        return reportInputError("--prediction: '" + o.stored_prediction +
                                "' is not a prediction id (pred-N; `shardcast db list --kind predictions`)");
    }
    auto store = openStore(false);
    if (!store) return reportInputError(store.error().message);
    const std::string run_name = (*store)->path().string() + ": " + o.stored_run;
    auto run_obj = (*store)->get(*run_id);
    if (!run_obj) return reportInputError(run_obj.error().message);
    auto run = core::runRecordFromJson(run_obj->body.at("record"), run_name);
    if (!run) return reportInputError(run.error().message);
    auto pred = planstore::loadStoredPrediction(**store, *pred_id);
    if (!pred) return reportInputError(pred.error().message);
    auto run_plan = core::planFromJson(run->plan, run_name + ": plan", fs::current_path());
    if (run_plan) {
        const std::string diff = firstDifference(comparablePlan(pred->plan), comparablePlan(*run_plan),
                                                 o.stored_prediction, o.stored_run);
        if (!diff.empty()) {
            return reportInputError(fmt::format("{} does not predict the plan {} ran: they differ first in {}",
                                                o.stored_prediction, o.stored_run, diff));
        }
    }
    return reportComparison(o, *run, pred->evaluation.program, pred->timeline, pred->memory, run_name,
                            std::make_pair(*run_id, *pred_id), pred->plan, pred->evaluation.profile,
                            pred->evaluation.reserved);
}

// `compare PLAN.json --torch-trace TRACE...`: import-trace and compare in one step.
int runCompareTorchTrace(const CompareOptions& o) {
    if (o.prediction.empty() || o.prediction == "run" || !o.run.empty()) {
        return reportInputError("--torch-trace takes the plan the traced run trained with: "
                                "`compare PLAN.json --torch-trace TRACE...` (no RUN.json)");
    }
    if (o.save.requested) return reportInputError("--save stores comparisons of stored objects; it does not go with --torch-trace");
    auto imported = importTorchTraces(o.torch_traces, o.prediction, o.profile, o.trace_flags);
    if (!imported) return reportInputError(imported.error().message);
    if (!o.json) {
        printImportSummary(imported->import, imported->predicted.program);
        fmt::print("\n");
    }
    return reportComparison(o, imported->import.run, imported->predicted.program, imported->predicted.timeline,
                            imported->predicted.timed, o.prediction, std::nullopt, imported->plan,
                            imported->predicted.profile, imported->predicted.reserved, &imported->import);
}

int runCompare(const CompareOptions& o) {
    if (!o.torch_traces.empty()) return runCompareTorchTrace(o);
    if (!o.profile.empty()) return reportInputError("--profile goes with --torch-trace: a run record carries the profile it is predicted with");
    if (!o.stored_run.empty() || !o.stored_prediction.empty()) return runCompareStored(o);
    if (o.prediction.empty() || o.run.empty()) {
        return reportInputError("compare needs PLAN.json|run and RUN.json, or --run ID --prediction ID (stored)");
    }
    if (o.save.requested) {
        return reportInputError("--save stores comparisons of stored objects: `compare --run ID --prediction ID --save` "
                                "(save the run with `run --save`)");
    }
    auto run = core::loadRunRecord(o.run);
    if (!run) return reportInputError(run.error().message);
    const fs::path run_dir = fs::path(o.run).parent_path();
    auto plan = core::planFromJson(run->plan, o.run + ": plan", run_dir);
    if (!plan) return reportInputError(plan.error().message);
    if (o.prediction != "run") {
        auto given = core::loadPlanFile(o.prediction);
        if (!given) {
            // A `simulate --json` report carries figures, not the plan: it cannot be re-lowered.
            auto doc = core::readJsonFile(o.prediction);
            if (doc && doc->is_object() && doc->contains("step_s") && !doc->contains("model")) {
                return reportInputError(fmt::format(
                    "{}: a prediction report (`simulate --json`) does not carry the plan it predicts; pass the "
                    "plan file (`plan --write-plan`) or `run` to predict the run's own plan",
                    o.prediction));
            }
            return reportInputError(given.error().message);
        }
        const std::string diff =
            firstDifference(comparablePlan(*given), comparablePlan(*plan), o.prediction, o.run + "'s plan");
        if (!diff.empty()) {
            return reportInputError(fmt::format(
                "{} is not the plan {} ran: they differ first in {}; pass `run` to predict the run's own plan",
                o.prediction, o.run, diff));
        }
    }
    auto profile = sim::profileFromJson(run->profile, o.run + ": profile", sim::HardwareProfile::fromCluster(plan->cluster));
    if (!profile) return reportInputError(profile.error().message);

    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    options.per_unit = false;
    options.record_curve = !o.trace.empty();
    // A pipeline-parallel run: the stage of the rank it recorded (stages are the mesh's outermost
    // dimension).
    if (plan->sharding.pp > 1 && run->world_size > 0) {
        options.pipeline_stage = run->recorded_rank / std::max(1, run->world_size / plan->sharding.pp);
    }
    StageProgress progress;
    options.progress = progress.callback();
    sim::Evaluator evaluator;
    sim::Evaluation e;
    const core::Status evaluated = evaluator.evaluate(*plan, &*profile, options, e);
    progress.done();
    if (!evaluated) return reportInputError(o.run + ": plan: " + evaluated.error().message);
    return reportComparison(o, *run, e.program, e.timeline, e.timed, o.run, std::nullopt, *plan, e.profile, e.reserved);
}

// Compares, writes --trace, saves (--save, stored ids only) and prints.
int reportComparison(const CompareOptions& o, const core::RunRecord& run_record, const core::Program& program,
                     const core::Timeline& predicted, const core::TimedMemory& predicted_memory, const std::string& run_name,
                     const std::optional<std::pair<db::ObjectId, db::ObjectId>>& stored, const core::Plan& plan,
                     const sim::HardwareProfile& profile, const core::ReservedMemory& predicted_reserved,
                     const trace::TraceImport* imported) {
    const core::RunRecord* run = &run_record;
    auto c = core::compareStep(program, predicted, predicted_memory, run->timeline, run->memory,
                               core::compareOptionsFor(*run, o.top));
    if (!c) return reportInputError(run_name + ": timeline.tasks: " + c.error().message);

    std::vector<uint8_t> skip(program.tasks.size(), 0);
    for (const int32_t id : run->emulated_tasks) skip[static_cast<size_t>(id)] = 1;
    for (const int32_t id : run->unmeasured_tasks) skip[static_cast<size_t>(id)] = 1;
    std::vector<sim::RankStep> rank_steps;
    if (imported != nullptr) {
        for (const auto& r : imported->ranks) rank_steps.push_back(sim::RankStep{r.rank, r.step_ns});
    }
    const sim::Diagnosis diagnosis = sim::diagnose(plan, profile, program, predicted, run->timeline, skip, rank_steps);

    std::string saved_line;
    if (o.save.requested && stored) {
        auto store = openStore(true);
        if (!store) return reportInputError("--save: " + store.error().message);
        db::ComparisonInput input;
        input.name = o.save.name;
        input.run = stored->first;
        input.prediction = stored->second;
        input.report = core::comparisonToJson(program, *c);
        auto pct = [](const std::optional<double>& x) { return x ? fmt::format("{:+.1f}%", *x * 100) : std::string("n/a"); };
        input.summary_line = fmt::format("{} vs {}: step {}, peak {}", db::formatId(input.prediction),
                                         db::formatId(input.run), pct(c->step_time_error), pct(c->peak_memory_error));
        auto id = (*store)->saveComparison(input);
        if (!id) {
            fmt::print(stderr, "shardcast: error: --save: {}: {}\n", (*store)->path().string(), id.error().message);
            return kExitRuntimeFailure;
        }
        saved_line = fmt::format("Saved {} in {}", db::formatId(*id), (*store)->path().string());
    }

    if (!o.trace.empty()) {
        const nlohmann::json trace =
            sim::comparisonChromeTrace(program, predicted, &predicted_memory, run->timeline, &run->memory);
        if (auto written = core::writeFileAtomically(o.trace, trace.dump() + "\n"); !written) {
            return reportInputError("--trace: " + written.error().message);
        }
    }
    if (o.json) {
        nlohmann::json j = core::comparisonToJson(program, *c);
        if (!saved_line.empty()) j["saved"] = saved_line;
        j["backend"] = run->backend;
        j["world_size"] = run->world_size;
        j["compute_note"] = run->compute_note;
        if (!o.trace.empty()) j["trace"] = o.trace;
        if (run->reserved_peak_bytes > 0) {
            const core::AllocatorStats& a = predicted_reserved.stats;
            j["reserved"] = {{"predicted_peak_bytes", a.peak_reserved_bytes},
                             {"measured_peak_bytes", run->reserved_peak_bytes},
                             {"error", core::errorToJson(core::relativeError(a.peak_reserved_bytes, run->reserved_peak_bytes))},
                             {"predicted_fragmentation_bytes", a.fragmentation_at_reserved_peak},
                             {"measured_fragmentation_bytes", run->reserved_fragmentation_bytes},
                             {"source", run->reserved_source}};
        }
        j["units"] = sim::diagnosisUnitsToJson(diagnosis);
        j["findings"] = sim::diagnosisFindingsToJson(diagnosis, program);
        j["unmapped_events"] = nlohmann::json::object();
        if (imported != nullptr) {
            j["import"] = importSummaryJson(*imported);
            j["unmapped_events"] = j["import"]["unmapped_events"];
        }
        fmt::print("{}\n", j.dump(2));
    } else {
        printText(*run, program, *c);
        if (run->reserved_peak_bytes > 0) {
            const core::AllocatorStats& a = predicted_reserved.stats;
            fmt::print("\n{:<24}{:>16}{:>16}{:>16}{:>12}\n", "Caching allocator", "predicted (MiB)", "measured (MiB)",
                       "error (MiB)", "error");
            fmt::print("{:<24}{:>16.3f}{:>16.3f}{:>16.3f}{:>12}\n", "reserved (peak)", mib(a.peak_reserved_bytes),
                       mib(run->reserved_peak_bytes), mib(a.peak_reserved_bytes - run->reserved_peak_bytes),
                       percent(core::relativeError(a.peak_reserved_bytes, run->reserved_peak_bytes)));
            fmt::print("{:<24}{:>16.3f}{:>16.3f}{:>16.3f}{:>12}\n", "fragmentation at peak", mib(a.fragmentation_at_reserved_peak),
                       mib(run->reserved_fragmentation_bytes),
                       mib(a.fragmentation_at_reserved_peak - run->reserved_fragmentation_bytes),
                       percent(core::relativeError(a.fragmentation_at_reserved_peak, run->reserved_fragmentation_bytes)));
            fmt::print("  measured: {}\n", run->reserved_source);
        }
        printDiagnosis(diagnosis, program, o.top);
        if (!o.trace.empty()) {
            fmt::print("\nChrome trace (predicted and measured side by side) written to {}\n", o.trace);
        }
        if (!saved_line.empty()) fmt::print("{}\n", saved_line);
    }
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

void registerCompareCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<CompareOptions>();
    CLI::App* cmd = app.add_subcommand(
        "compare", "Compare a measured run with the prediction of exactly what it ran (its own plan on its own "
                   "hardware profile): step time, stream busy time, per-task durations, peak memory per category, "
                   "as signed relative errors (predicted - measured) / measured; per-unit times and findings (lazy "
                   "unshards, stragglers) with the plan change that would help. A real PyTorch run: --torch-trace");
    cmd->add_option("prediction_file", opts->prediction,
                    "The plan file the run ran (checked to be the run's own plan; exit 2 naming the first "
                    "difference), or `run`. Either way the prediction is re-computed from the run's plan and "
                    "hardware profile")
        ->type_name("PLAN.json|run");
    cmd->add_option("run_file", opts->run, "A measured run (`shardcast run` output, format shardcast-run)")
        ->type_name("RUN.json");
    cmd->add_option("--run", opts->stored_run, "A stored run (`run --save`; `db list --kind runs`), with --prediction")
        ->type_name("ID");
    cmd->add_option("--prediction", opts->stored_prediction,
                    "A stored prediction (`plan|simulate --save`), compared as it was made")
        ->type_name("ID");
    addSaveOption(*cmd, opts->save, "the comparison of --run and --prediction");
    cmd->add_option("--top", opts->top, "How many tasks with the largest duration error to list")
        ->type_name("N")
        ->default_str("10")
        ->check(CLI::Range(0, 1'000'000));
    cmd->add_option("--trace", opts->trace,
                    "Write a Chrome trace to FILE (atomically): process 'predicted' and process 'measured' side "
                    "by side, both from their step's start")
        ->type_name("FILE");
    cmd->add_option("--torch-trace", opts->torch_traces,
                    "Compare PLAN.json with a real PyTorch run: its torch.profiler traces (files or directories), "
                    "imported as `import-trace` does")
        ->type_name("TRACE");
    addTraceImportOptions(*cmd, opts->trace_flags);
    cmd->add_option("--profile", opts->profile,
                    "With --torch-trace: predict on this hardware profile (a stored profile's name or id, or a "
                    "profile JSON file, e.g. from `calibrate --from-trace`); default: the plan's GPU preset")
        ->type_name("NAME|FILE");
    cmd->add_flag("--json", opts->json, "Print one JSON object instead of the text report");
    cmd->callback([opts, &exit_code] { exit_code = runCompare(*opts); });
}

}  // namespace shardcast::cli
