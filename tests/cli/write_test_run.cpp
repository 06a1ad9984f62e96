// Writes a measured-run record (core/results/run_record.hpp) for the compare CLI tests: the prediction of
// PLAN.json on a machine twice as slow in everything, with twice the bytes in every memory
// category (tests/simulator/perturbed_run.hpp), so every error compare reports is exactly -1/2.
//   write_test_run PLAN.json OUT.json [exact|drop-task|newer-version]
// drop-task: the timeline loses its last task; newer-version: the document claims a newer format.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/base/file_io.hpp"
#include "core/plan/plan.hpp"
#include "core/results/run_record.hpp"
#include "simulator/evaluation.hpp"
#include "tests/simulator/perturbed_run.hpp"

int main(int argc, char** argv) {
    using namespace shardcast;
    if (argc < 3 || argc > 4) {
        std::fprintf(stderr, "usage: write_test_run PLAN.json OUT.json [exact|drop-task|newer-version]\n");
        return 2;
    }
    const std::string mode = argc == 4 ? argv[3] : "exact";
    if (mode != "exact" && mode != "drop-task" && mode != "newer-version") {
        std::fprintf(stderr, "write_test_run: unknown mode '%s'\n", mode.c_str());
        return 2;
    }
    auto plan = core::loadPlanFile(argv[1]);
    if (!plan) {
        std::fprintf(stderr, "write_test_run: %s\n", plan.error().message.c_str());
        return 2;
    }
    auto e = sim::evaluatePlan(*plan, nullptr);
    if (!e) {
        std::fprintf(stderr, "write_test_run: %s\n", e.error().message.c_str());
        return 2;
    }
    core::RunRecord run = sim::testing::perturbedRun(*plan, *e, sim::testing::Perturbation{.stretch = 2, .memory_factor = 2});
    if (mode == "drop-task") run.timeline.tasks.pop_back();
    nlohmann::json j = core::runRecordToJson(run);
    if (mode == "newer-version") j["version"] = core::kRunFormatVersion + 1;
    if (auto s = core::writeFileAtomically(argv[2], j.dump() + "\n"); !s) {
        std::fprintf(stderr, "write_test_run: %s\n", s.error().message.c_str());
        return 1;
    }
    return 0;
}
