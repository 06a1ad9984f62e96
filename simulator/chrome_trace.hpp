#pragma once
// Chrome Trace Event JSON (opens in Perfetto and chrome://tracing): one track per stream used,
// complete events named by Program::taskLabel, memory per category as counter tracks.
#include <filesystem>
#include <ostream>

#include <nlohmann/json_fwd.hpp>

#include "core/program.hpp"
#include "core/result.hpp"
#include "core/timed_memory.hpp"
#include "core/timeline.hpp"

namespace shardcast::sim {

// `memory` may be null; its curve (TimedMemory::curve) becomes the counter tracks.
nlohmann::json chromeTrace(const core::Program& program, const core::Timeline& timeline, const core::TimedMemory* memory);
core::Status writeChromeTrace(const std::filesystem::path& path, const core::Program& program,
                              const core::Timeline& timeline, const core::TimedMemory* memory);

}  // namespace shardcast::sim
