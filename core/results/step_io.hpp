#pragma once
// Versioned JSON of what one step produced — its Timeline, its timed memory and its summary — so
// that a store can keep them and `compare` can read a run written by another process. Each
// document reads back equal (operator==) to what was written; a newer format version is refused
// with a message naming the file and both versions (core/base/file_io.hpp).
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/base/result.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/program/timeline.hpp"
#include "core/results/step_summary.hpp"

namespace shardcast::core {

inline constexpr int kTimelineFormatVersion = 1;
inline constexpr int kTimedMemoryFormatVersion = 1;
inline constexpr int kStepSummaryFormatVersion = 1;

// {"format": "shardcast-timeline", "version": 1, "step_ns", "stream_busy_ns": {stream: ns},
//  "tasks": [[start_ns, end_ns, stream], ...]} (task i is the Program's task i).
nlohmann::json timelineToJson(const Timeline& timeline);
Result<Timeline> timelineFromJson(const nlohmann::json& j, const std::string& where);

// {"format": "shardcast-timed-memory", ..., "categories": [names], "curve": [[time_ns, task,
//  [bytes per category in that order]], ...]}.
nlohmann::json timedMemoryToJson(const TimedMemory& memory);
Result<TimedMemory> timedMemoryFromJson(const nlohmann::json& j, const std::string& where);

// {"format": "shardcast-step-summary", ...}: every StepSummary field, times in seconds as
// computed (doubles round-trip exactly), per-unit times in ns.
nlohmann::json stepSummaryToJson(const StepSummary& summary);
Result<StepSummary> stepSummaryFromJson(const nlohmann::json& j, const std::string& where);

}  // namespace shardcast::core
