#pragma once
// A "measured" run made from a prediction by known integer factors, so every error of a comparison
// is known exactly: a factor f on a measured value gives the relative error (p - f p) / (f p) =
// (1 - f) / f, e.g. -1/2 for f = 2 (exact in floating point). Used by compare_test and by the CLI
// tests' run-record writer (tests/cli/write_test_run.cpp).
#include <algorithm>
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/plan/plan.hpp"
#include "core/results/run_record.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim::testing {

struct Perturbation {
    int64_t stretch = 1;          // every start and end time (and memory point) times this: a slower machine
    int64_t compute_factor = 1;   // then each compute task (core::isCompute) lasts this times longer, same start
    int64_t memory_factor = 1;    // every category's bytes (peak, at peak, maxima, curve) times this
    std::optional<core::MemCategory> category{};  // and this one category's bytes times category_factor
    int64_t category_factor = 1;
};

// The expected relative error of a value measured `factor` times the prediction.
inline double errorOfFactor(int64_t factor) {
    return static_cast<double>(1 - factor) / static_cast<double>(factor);
}

inline core::RunRecord perturbedRun(const core::Plan& plan, const Evaluation& e, const Perturbation& p) {
    core::RunRecord run;
    run.backend = "test";
    run.world_size = e.mesh.world_size;
    run.compute_note = "a prediction perturbed by known factors";
    run.plan = core::planToJson(plan);
    run.profile = profileToJson(e.profile);
    run.environment = nlohmann::json::object();
    run.timeline = e.timeline;
    run.timeline.stream_busy_ns.fill(0);
    run.timeline.step_ns = 0;
    for (int32_t id = 0; id < e.program.size(); ++id) {
        core::TaskTime& t = run.timeline.tasks[static_cast<size_t>(id)];
        t.start_ns *= p.stretch;
        t.end_ns *= p.stretch;
        if (core::isCompute(e.program.tasks[static_cast<size_t>(id)].kind)) {
            t.end_ns = t.start_ns + t.durationNs() * p.compute_factor;
        }
        run.timeline.stream_busy_ns[static_cast<size_t>(t.stream)] += t.durationNs();
        run.timeline.step_ns = std::max(run.timeline.step_ns, t.end_ns);
    }
    run.step_ns = {run.timeline.step_ns};
    run.median_step = 0;

    core::TimedMemory& m = run.memory;
    m = e.timed;
    const auto scale = [&](core::CategoryBytes& bytes) {
        for (size_t c = 0; c < bytes.size(); ++c) {
            bytes[c] *= p.memory_factor;
            if (p.category && c == static_cast<size_t>(*p.category)) bytes[c] *= p.category_factor;
        }
    };
    scale(m.at_peak);
    scale(m.max_per_category);
    m.peak_bytes = 0;
    for (const int64_t b : m.at_peak) m.peak_bytes += b;
    m.peak_time_ns *= p.stretch;
    for (core::MemoryPoint& point : m.curve) {
        point.time_ns *= p.stretch;
        scale(point.bytes);
    }
    return run;
}

}  // namespace shardcast::sim::testing
