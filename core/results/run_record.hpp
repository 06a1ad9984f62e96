#pragma once
// A measured run of a plan on a backend: what `shardcast run` writes, and what `compare` and the
// store read. Its timeline and memory have the same types as a prediction's, over the same task
// ids, so the two compare task by task, stream by stream, category by category.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/result.hpp"
#include "core/memory/timed_memory.hpp"
#include "core/program/timeline.hpp"
#include "core/results/compare.hpp"

namespace shardcast::core {

inline constexpr int kRunFormatVersion = 1;

struct RunRecord {
    std::string backend;           // "cpu", "cuda"
    int32_t world_size = 1;        // ranks that ran the step
    int32_t recorded_rank = 0;     // whose timeline and memory are recorded (rank 0)
    std::string compute_note;      // how compute ran, e.g. "Eigen GEMMs in fp32 (the plan's bf16 on a CPU)"
    nlohmann::json plan;           // planToJson of exactly what ran (after any --scale)
    nlohmann::json profile;        // the hardware profile a prediction of this run uses (profileToJson)
    nlohmann::json environment;    // host, processor, library versions: free-form, for people
    int32_t warmup_steps = 0;      // discarded
    std::vector<int64_t> step_ns;  // each measured step, in order
    int32_t median_step = 0;       // index into step_ns of the step whose timeline is recorded
    Timeline timeline;             // that step, times from its start, on the clock aligned across ranks
    TimedMemory memory;            // measured per-category high-water marks and the curve (counted allocations)
    // Task ids whose work was emulated rather than run (the CUDA backend's --emulate-rank: each
    // collective's output filled locally), ascending; their times are not measurements of that
    // work, so comparisons leave them out of time errors. JSON: "emulated_tasks", written only
    // when not empty (optional: version 1 records without it read as none emulated).
    std::vector<int32_t> emulated_tasks;
    // Task ids the measurement has no time for (a torch.profiler trace labels no cast or host copy),
    // ascending: left out of task and stream errors, while the step time, measured whole, is still
    // compared. JSON: "unmeasured_tasks", written only when not empty.
    std::vector<int32_t> unmeasured_tasks;
    // What the memory figures are. Categories: per category, as the backends count them. Total: one
    // total (memory.peak_bytes), no categories (a GPU trace's [memory] events). Rise: the peak's
    // rise above the level the step started from (a CPU trace: the profiler counts only what it saw
    // allocated, so its totals have no absolute level), compared with the prediction's peak less
    // its steady state. None: no memory was measured; nothing is compared. JSON: "memory_kind"
    // ("total", "rise", "none"), written only when not "categories".
    enum class MemoryKind : uint8_t { Categories, Total, Rise, None };
    MemoryKind memory_kind = MemoryKind::Categories;
    // The caching allocator's figures, where the measurement has them (a CUDA memory snapshot):
    // its peak reserved memory and the fragmentation (reserved - allocated) at that peak, over the
    // history the source recorded. 0: not measured. JSON: "reserved": {"peak_bytes",
    // "fragmentation_bytes", "source"}, written only when measured.
    int64_t reserved_peak_bytes = 0;
    int64_t reserved_fragmentation_bytes = 0;
    std::string reserved_source;
    // The measured total over the recorded step, where the measurement has no categories (kind
    // Total or Rise; for Rise, above the step's start): time from the step's start, bytes. At most
    // kMaxTotalCurvePoints (core::thinCurve). JSON: "memory_total_curve": [[time_ns, bytes], ...],
    // written only when not empty.
    std::vector<TotalPoint> memory_total_curve;

    int64_t medianStepNs() const { return step_ns.empty() ? 0 : step_ns[static_cast<size_t>(median_step)]; }
    bool operator==(const RunRecord&) const = default;
};

// {"format": "shardcast-run", "version": 1, ...}; the timeline and memory as core/results/step_io.hpp
// documents. Reading checks every field and names `where` on error.
nlohmann::json runRecordToJson(const RunRecord& run);
Result<RunRecord> runRecordFromJson(const nlohmann::json& j, const std::string& where);
Result<RunRecord> loadRunRecord(const std::filesystem::path& path);
// How `run` is compared with a prediction: its emulated and unmeasured tasks, and what its memory
// figures are (the CLI and the GUI compare runs the same way).
CompareOptions compareOptionsFor(const RunRecord& run, int32_t top_tasks);
inline constexpr size_t kMaxTotalCurvePoints = 4096;
// The predicted and the measured memory over the step, as totals comparable the way
// compareOptionsFor compares the peaks: the prediction's curve (`predicted`, recorded with its
// curve) less its steady state where the run measured a rise, and the run's curve (its categories
// summed, or memory_total_curve). Either is empty where there is no curve.
struct MemoryCurves {
    std::vector<TotalPoint> predicted;
    std::vector<TotalPoint> measured;
};
MemoryCurves comparableMemoryCurves(const Program& program, const TimedMemory& predicted, const RunRecord& run);
// Written atomically (core::writeFileAtomically).
Status saveRunRecord(const std::filesystem::path& path, const RunRecord& run);

}  // namespace shardcast::core
