#pragma once
// Chrome Trace Event JSON (opens in Perfetto and chrome://tracing): one track per stream used,
// complete events named by Program::taskLabel, memory per category as counter tracks.
#include <filesystem>
#include <ostream>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/program/program.hpp"
#include "core/program/timeline.hpp"

namespace shardcast::sim {

// Appends to the trace-event array `events` one process `pid` named `process_name`: its metadata, one
// thread per stream the Program uses, a complete event per task, and `memory`'s curve (may be null)
// as counter tracks. Times are from the Timeline's step start.
void appendTraceProcess(nlohmann::json& events, int pid, std::string_view process_name, const core::Program& program,
                        const core::Timeline& timeline, const core::TimedMemory* memory);

// `memory` may be null; its curve (TimedMemory::curve) becomes the counter tracks.
nlohmann::json chromeTrace(const core::Program& program, const core::Timeline& timeline, const core::TimedMemory* memory);
core::Status writeChromeTrace(const std::filesystem::path& path, const core::Program& program,
                              const core::Timeline& timeline, const core::TimedMemory* memory);

// Prediction and measurement of one Program side by side, both aligned at their step's start:
// pid 0 "predicted", pid 1 "measured", each with one thread per stream. Memories may be null.
nlohmann::json comparisonChromeTrace(const core::Program& program, const core::Timeline& predicted,
                                     const core::TimedMemory* predicted_memory, const core::Timeline& measured,
                                     const core::TimedMemory* measured_memory);

}  // namespace shardcast::sim
