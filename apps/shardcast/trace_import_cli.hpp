#pragma once
// What `import-trace` and `compare --torch-trace` share: reading traces into a measured run of a plan.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "planstore/trace_run.hpp"
#include "simulator/evaluation.hpp"
#include "trace/fsdp_import.hpp"

namespace CLI {
class App;
}

namespace shardcast::cli {

struct TraceImportFlags {
    int32_t rank = 0;
    int64_t step = -1;  // -1: the median step
    std::string memory_snapshot;  // --memory-snapshot: a CUDA memory snapshot pickle of that rank
    trace::ImportOptions options() const;
};
void addTraceImportOptions(CLI::App& cmd, TraceImportFlags& flags);

using planstore::ImportedRun;

// planstore::importTraceRun with the store in effect (--db), showing the file being read on a terminal.
core::Result<ImportedRun> importTorchTraces(const std::vector<std::string>& traces, const std::string& plan_path,
                                            const std::string& profile_arg, const TraceImportFlags& flags);

void printImportSummary(const trace::TraceImport& imp, const core::Program& program);
nlohmann::json importSummaryJson(const trace::TraceImport& imp);

void registerImportTraceCommand(CLI::App& app, int& exit_code);

}  // namespace shardcast::cli
