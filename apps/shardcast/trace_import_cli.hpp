#pragma once
// What `import-trace` and `compare --torch-trace` share: reading traces into a measured run of a plan.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/plan.hpp"
#include "core/result.hpp"
#include "simulator/evaluation.hpp"
#include "trace/fsdp_import.hpp"

namespace CLI {
class App;
}

namespace shardcast::cli {

struct TraceImportFlags {
    int32_t rank = 0;
    int64_t step = -1;  // -1: the median step
    trace::ImportOptions options() const;
};
void addTraceImportOptions(CLI::App& cmd, TraceImportFlags& flags);

struct ImportedRun {
    core::Plan plan;            // as loaded from the plan file
    sim::Evaluation predicted;  // the plan's prediction on the profile (its Program is what the run maps onto)
    trace::TraceImport import;  // run: plan, profile and environment filled
};

// Loads the plan, resolves --profile (empty: the plan's GPU preset), predicts it, reads the traces
// and maps them onto its Program. Every error is the user's input.
core::Result<ImportedRun> importTorchTraces(const std::vector<std::string>& traces, const std::string& plan_path,
                                            const std::string& profile_arg, const trace::ImportOptions& options);

void printImportSummary(const trace::TraceImport& imp, const core::Program& program);
nlohmann::json importSummaryJson(const trace::TraceImport& imp);

void registerImportTraceCommand(CLI::App& app, int& exit_code);

}  // namespace shardcast::cli
