// `shardcast import-trace TRACE... --plan PLAN.json --out RUN.json`: reads torch.profiler traces of a
// real FSDP run (trace/) and writes them as a measured run of the plan, which `compare` takes as it
// takes a backend's run. docs/trace-import.md has the details.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "apps/shardcast/trace_import_cli.hpp"
#include "core/plan/plan.hpp"
#include "core/results/run_record.hpp"
#include "planstore/trace_run.hpp"
#include "trace/fsdp_import.hpp"

namespace shardcast::cli {

core::Result<ImportedRun> importTorchTraces(const std::vector<std::string>& traces, const std::string& plan_path,
                                            const std::string& profile_arg, const TraceImportFlags& flags) {
    auto store = storePath();
    if (!store) return store.error();
    const bool terminal = stderrIsTerminal();
    auto out = planstore::importTraceRun(
        traces, plan_path, profile_arg, *store, flags.options(),
        [terminal](const auto& f) {
            if (terminal) fmt::print(stderr, "\r\033[Kreading {} ...", f.string());
        },
        flags.memory_snapshot);
    if (terminal) fmt::print(stderr, "\r\033[K");
    return out;
}

void printImportSummary(const trace::TraceImport& imp, const core::Program& program) {
    fmt::print("Imported a {} run over {} ({} ranks): rank {}'s step {} ({} events in the step)\n", imp.flavour,
               imp.collectives, imp.run.world_size, imp.run.recorded_rank, imp.step_number, imp.events_in_step);
    fmt::print("Step time {:.3f} ms; tasks timed {} of {}", static_cast<double>(imp.run.timeline.step_ns) / 1e6,
               imp.measured_tasks, program.size());
    if (!imp.unmeasured_by_kind.empty()) {
        std::vector<std::string> kinds;
        for (const auto& k : imp.unmeasured_by_kind) kinds.push_back(fmt::format("{} {}", k.count, k.label));
        fmt::print(" (not in the trace: {})", fmt::join(kinds, ", "));
    }
    fmt::print("\nFSDP labels in the step: {}, mapped onto the plan's units: {}, unmapped: {}\n", imp.fsdp_labels,
               imp.fsdp_mapped, imp.fsdp_labels - imp.fsdp_mapped);
    for (const auto& u : imp.unmapped) fmt::print("  unmapped: {} x{}\n", u.label, u.count);
    const char* memory = imp.run.memory_kind == core::RunRecord::MemoryKind::None   ? "none measured"
                         : imp.run.memory_kind == core::RunRecord::MemoryKind::Rise ? "its rise above the step's start"
                                                                                     : "absolute";
    fmt::print("Peak allocated in the step: {:.3f} MiB, {}\n",
               static_cast<double>(imp.run.memory.peak_bytes) / static_cast<double>(1 << 20), memory);
    if (imp.run.reserved_peak_bytes > 0) {
        fmt::print("Caching allocator: reserved peak {:.3f} MiB, fragmentation at it {:.3f} MiB ({})\n",
                   static_cast<double>(imp.run.reserved_peak_bytes) / static_cast<double>(1 << 20),
                   static_cast<double>(imp.run.reserved_fragmentation_bytes) / static_cast<double>(1 << 20),
                   imp.run.reserved_source);
    }
    if (imp.ranks.size() > 1) {
        fmt::print("Step {} per rank (ms):", imp.step_number);
        for (const auto& r : imp.ranks) fmt::print(" {}: {:.3f}", r.rank, static_cast<double>(r.step_ns) / 1e6);
        fmt::print("\n");
    }
    for (const auto& n : imp.notes) fmt::print("note: {}\n", n);
}

nlohmann::json importSummaryJson(const trace::TraceImport& imp) {
    nlohmann::json j;
    j["flavour"] = imp.flavour;
    j["collectives"] = imp.collectives;
    j["step"] = imp.step_number;
    j["fsdp_labels"] = imp.fsdp_labels;
    j["fsdp_mapped"] = imp.fsdp_mapped;
    j["unmapped_events"] = nlohmann::json::object();
    for (const auto& u : imp.unmapped) j["unmapped_events"][u.label] = u.count;
    j["measured_tasks"] = imp.measured_tasks;
    j["unmeasured_tasks"] = nlohmann::json::object();
    for (const auto& u : imp.unmeasured_by_kind) j["unmeasured_tasks"][u.label] = u.count;
    j["rank_step_ns"] = nlohmann::json::object();
    for (const auto& r : imp.ranks) j["rank_step_ns"][std::to_string(r.rank)] = r.step_ns;
    j["notes"] = imp.notes;
    return j;
}

void addTraceImportOptions(CLI::App& cmd, TraceImportFlags& flags) {
    cmd.add_option("--rank", flags.rank, "Whose timeline and memory to record")->type_name("R")->default_str("0")
        ->check(CLI::Range(0, 10'000'000));
    cmd.add_option("--step", flags.step,
                   "The step to record: its ProfilerStep number, or (a trace without a schedule) its index from 0; "
                   "default: the step of median duration")
        ->type_name("N")
        ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}));
    cmd.add_option("--memory-snapshot", flags.memory_snapshot,
                   "A CUDA memory snapshot of that rank (torch.cuda.memory._dump_snapshot; read without executing "
                   "anything): its peak reserved memory and fragmentation join the run, held against the allocator model")
        ->type_name("PICKLE");
}

trace::ImportOptions TraceImportFlags::options() const {
    trace::ImportOptions o;
    o.rank = rank;
    if (step >= 0) o.step = step;
    return o;
}

namespace {

struct ImportTraceOptions {
    std::vector<std::string> traces;
    std::string plan, out, profile;
    SaveRequest save;
    TraceImportFlags flags;
    bool json = false;
};

int runImportTrace(const ImportTraceOptions& o) {
    if (o.plan.empty()) return reportInputError("import-trace needs --plan PLAN.json: the plan the traced run trained with");
    if (o.out.empty()) return reportInputError("import-trace needs --out RUN.json: where to write the measured run");
    auto imported = importTorchTraces(o.traces, o.plan, o.profile, o.flags);
    if (!imported) return reportInputError(imported.error().message);
    if (auto saved = core::saveRunRecord(o.out, imported->import.run); !saved) {
        fmt::print(stderr, "shardcast: error: {}\n", saved.error().message);
        return kExitRuntimeFailure;
    }
    std::string saved_line;
    if (o.save.requested) {
        auto store = openStore(true);
        if (!store) return reportInputError("--save: " + store.error().message);
        auto ids = planstore::saveMeasuredRun(**store, imported->plan, imported->predicted, imported->profile,
                                              imported->import.run, o.save.name);
        if (!ids) {
            fmt::print(stderr, "shardcast: error: --save: {}: {}\n", (*store)->path().string(), ids.error().message);
            return kExitRuntimeFailure;
        }
        saved_line = fmt::format("Saved {} (plan {}, prediction {}) in {}; `shardcast compare --run {} --prediction {}`",
                                 db::formatId(ids->run), db::formatId(ids->plan), db::formatId(ids->prediction),
                                 (*store)->path().string(), db::formatId(ids->run), db::formatId(ids->prediction));
    }
    if (o.json) {
        nlohmann::json j = importSummaryJson(imported->import);
        j["out"] = o.out;
        if (!saved_line.empty()) j["saved"] = saved_line;
        fmt::print("{}\n", j.dump(2));
    } else {
        printImportSummary(imported->import, imported->predicted.program);
        fmt::print("Run written to {}; `shardcast compare run {}` compares it with the prediction\n", o.out, o.out);
        if (!saved_line.empty()) fmt::print("{}\n", saved_line);
    }
    std::fflush(stdout);
    return kExitOk;
}

}  // namespace

void registerImportTraceCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<ImportTraceOptions>();
    CLI::App* cmd = app.add_subcommand(
        "import-trace",
        "Read torch.profiler traces of a real PyTorch FSDP run (Kineto JSON, .json or .json.gz, one per rank or a "
        "directory of them) and write one step as a measured run of the plan (format shardcast-run), for `compare`");
    cmd->add_option("traces", opts->traces, "Trace files, or directories of them (*.json.gz, *trace*.json)")
        ->type_name("TRACE")
        ->required();
    cmd->add_option("--plan", opts->plan, "The plan the traced run trained with (docs/plan-format.md)")
        ->type_name("PLAN.json");
    cmd->add_option("--out", opts->out, "Write the measured run here (atomically)")->type_name("RUN.json");
    addProfileOption(*cmd, opts->profile);
    addTraceImportOptions(*cmd, opts->flags);
    addSaveOption(*cmd, opts->save, "the run, with its plan and prediction (shown in the GUI's history)");
    cmd->add_flag("--json", opts->json, "Print what was imported as one JSON object");
    cmd->callback([opts, &exit_code] { exit_code = runImportTrace(*opts); });
}

}  // namespace shardcast::cli
