#pragma once
// `shardcast run`, shared by its backends. cmd_run.cpp parses the flags, prepares the plan and its
// prediction, and writes and prints what a backend measured; the backends run the Program:
// backends/run_cpu.cpp (MPI + Eigen; backends/cpu_missing.cpp in a build without MPI) and run_cuda.cpp (in
// shardcast-cuda; in shardcast, backends/cuda_exec.cpp hands the command line over). Each source is
// compiled once: the choice between them is made by what each executable links.
#include <cstdint>
#include <string>

#include "apps/shardcast/store_cli.hpp"
#include "core/base/result.hpp"
#include "core/plan/plan.hpp"
#include "core/plan/plan_build.hpp"
#include "core/results/run_record.hpp"
#include "executor/executor.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::cli {

struct RunOptions {
    core::PlanOverrides plan;
    std::string backend = "cpu", out, trace, profile;
    int32_t steps = 3, warmup = 1;
    int32_t emulate_rank = -1;  // --emulate-rank (cuda): -1 none
    int32_t gpus = 0;           // --gpus (cuda): ranks as threads of this process, one per GPU; 0 none
    bool verify = false;
    SaveRequest save;
};

// What every backend's run starts from: the plan with the flags applied, and its prediction on
// the --profile (or the plan's GPU preset), every micro-batch simulated. Errors are the user's
// input.
struct PreparedRun {
    core::Plan plan;
    sim::Evaluation predicted;
    ResolvedProfile profile;
};
core::Result<PreparedRun> prepareRun(const RunOptions& o);
// The Program world rank `rank` runs: the prediction's, or under pipeline parallelism its stage's
// (stages are the mesh's outermost dimension), then lowered into `storage`.
core::Result<const core::Program*> rankProgram(const PreparedRun& prepared, int32_t rank, core::Program& storage);

// What a backend's run prints besides the shared report.
struct FinishText {
    std::string ran;           // the first line: what ran where
    std::string profile_note;  // printed when no --profile was given
    std::string verify;        // printed when not empty
};

// The recording rank's end of a run: checks the counted memory, completes `record` (plan, profile,
// steps, timeline, memory), writes --out and --trace, saves (--save), and prints the report.
int finishRun(const RunOptions& o, const PreparedRun& prepared, const exec::Execution& run, core::RunRecord record,
              const FinishText& text);

// On a terminal: one line on stderr, rewritten after each step.
void progressOnTerminal(exec::Executor& executor);

// The backends: each runs the prepared Program on every rank and has the recording rank finish.
int runOnCpu(const RunOptions& o);   // run_cpu.cpp; backends/cpu_missing.cpp without MPI
int runOnCuda(const RunOptions& o);  // run_cuda.cpp in shardcast-cuda; backends/cuda_exec.cpp in shardcast

}  // namespace shardcast::cli
