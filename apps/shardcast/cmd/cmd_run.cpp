// `shardcast run`: execute a plan's Program for real on a backend and write the measured run
// (core::RunRecord). Launched once per rank: `mpirun -np N shardcast run PLAN --backend cpu`, or
// `srun -n N ...`; `--backend cuda --gpus N` runs every rank as a thread of one process. This file:
// the flags, the prepared plan and the finished run's report; the backends are named in
// apps/shardcast/backends/run_backend.hpp.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/shardcast/backends/run_backend.hpp"
#include "core/lower/lower.hpp"
#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/plan_options.hpp"
#include "planstore/trace_run.hpp"
#include "simulator/chrome_trace.hpp"

namespace shardcast::cli {

core::Result<PreparedRun> prepareRun(const RunOptions& o) {
    auto plan = buildPlanFromFlags(o.plan);
    if (!plan) return plan.error();
    auto profile = resolveProfileArg(plan->cluster, o.profile);
    if (!profile) return core::makeError("--profile " + profile.error().message);
    sim::EvaluationOptions options;
    options.issue_order_memory = false;
    options.record_curve = o.save.requested;  // the prediction saved beside the run
    // The recording rank's stage (as compare predicts it): rank 0's, or an emulated rank's own.
    options.pipeline_stage = 0;
    const int64_t world = plan->cluster.nodes * plan->cluster.gpus_per_node;
    if (o.emulate_rank > 0 && plan->sharding.pp > 1 && world % plan->sharding.pp == 0) {
        options.pipeline_stage = static_cast<int>(o.emulate_rank / (world / plan->sharding.pp));
    }
    sim::Evaluator evaluator;
    PreparedRun prepared{std::move(*plan), {}, std::move(*profile)};
    if (auto s = evaluator.evaluate(prepared.plan, &prepared.profile.profile, options, prepared.predicted); !s) {
        return s.error();
    }
    return prepared;
}

core::Result<const core::Program*> rankProgram(const PreparedRun& prepared, int32_t rank, core::Program& storage) {
    const sim::Evaluation& predicted = prepared.predicted;
    if (predicted.mesh.pp <= 1) return &predicted.program;
    const int stage = rank / (predicted.mesh.world_size / predicted.mesh.pp);
    if (stage == predicted.stage) return &predicted.program;
    core::Plan on_profile = prepared.plan;
    on_profile.cluster.gpu = predicted.profile.gpu;
    core::Lowerer lowerer;
    if (auto lowered = lowerer.lowerStage(on_profile, predicted.mesh, stage, storage); !lowered) return lowered.error();
    return &storage;
}

namespace {

// --save: the run, its plan and the prediction it is compared with, in one store.
SaveOutcome saveRun(const SaveRequest& request, const core::Plan& plan, const sim::Evaluation& predicted,
                    const ResolvedProfile& profile, const core::RunRecord& record) {
    SaveOutcome out;
    auto store = openStoreToSave(out);
    if (!store) return out;
    const std::string db_path = store->path().string();
    auto saved = planstore::saveMeasuredRun(*store, plan, predicted, profile, record, request.name);
    if (!saved) {
        reportSaveFailure(out, *store, saved.error().message);
        return out;
    }
    out.line = fmt::format("Saved {} (plan {}, prediction {}) in {}; `shardcast compare --run {} --prediction {}`",
                           db::formatId(saved->run), db::formatId(saved->plan), db::formatId(saved->prediction), db_path,
                           db::formatId(saved->run), db::formatId(saved->prediction));
    return out;
}

}  // namespace

int finishRun(const RunOptions& o, const PreparedRun& prepared, const exec::Execution& run, core::RunRecord record,
              const FinishText& text) {
    const core::Plan& plan = prepared.plan;
    const sim::Evaluation& predicted = prepared.predicted;
    // Every allocation was counted by buffer id where the Program says: the counted high-water
    // marks are the Program's events placed on the measured timeline. Anything else is a bug of
    // the executor, and the record would not describe the run: none is written.
    if (run.counted_high_water != run.memory.max_per_category) {
        for (int c = 0; c < core::kMemCategoryCount; ++c) {
            const auto k = static_cast<size_t>(c);
            if (run.counted_high_water[k] == run.memory.max_per_category[k]) continue;
            fmt::print(stderr, "shardcast: error: rank {} counted a {} high-water mark of {} bytes but the Program's events "
                       "on the measured timeline reach {} bytes (an executor bug); no run record written\n",
                       record.recorded_rank, core::categoryName(static_cast<core::MemCategory>(c)), run.counted_high_water[k],
                       run.memory.max_per_category[k]);
        }
        return kExitRuntimeFailure;
    }

    record.plan = core::planToJson(plan);
    record.profile = sim::profileToJson(predicted.profile);
    record.warmup_steps = o.warmup;
    record.step_ns = run.step_ns;
    record.median_step = run.median_step;
    record.timeline = run.timeline;
    record.memory = run.memory;
    if (!o.out.empty()) {
        if (auto saved = core::saveRunRecord(o.out, record); !saved) {
            fmt::print(stderr, "shardcast: error: {}\n", saved.error().message);
            return kExitRuntimeFailure;
        }
    }
    if (!o.trace.empty()) {
        if (auto written = sim::writeChromeTrace(o.trace, predicted.program, run.timeline, &run.memory); !written) {
            return reportInputError("--trace: " + written.error().message);
        }
    }

    SaveOutcome saved;
    if (o.save.requested) {
        saved = saveRun(o.save, plan, predicted, prepared.profile, record);
        if (saved.exit_code != kExitOk) return saved.exit_code;
    }

    const auto [lo, hi] = std::minmax_element(run.step_ns.begin(), run.step_ns.end());
    fmt::print("{}\n", text.ran);
    fmt::print("Compute             {}\n", record.compute_note);
    fmt::print("Step time (median)  {:10.2f} ms   spread {:.2f} .. {:.2f} ms (min .. max of {} steps)\n",
               static_cast<double>(record.medianStepNs()) * 1e-6, static_cast<double>(*lo) * 1e-6,
               static_cast<double>(*hi) * 1e-6, o.steps);
    fmt::print("Predicted step      {:10.2f} ms   on profile {}\n", predicted.summary.step_s * 1e3, predicted.profile.gpu.name);
    if (o.profile.empty()) fmt::print("{}\n", text.profile_note);
    fmt::print("Stream busy (median step, rank {})\n", record.recorded_rank);
    for (int st = 0; st < core::kStreamCount; ++st) {
        const int64_t busy = run.timeline.stream_busy_ns[static_cast<size_t>(st)];
        if (busy == 0) continue;
        fmt::print("  {:<18}{:10.2f} ms\n", core::streamName(static_cast<core::Stream>(st)), static_cast<double>(busy) * 1e-6);
    }
    fmt::print("Peak memory         {:>12} (counted allocations, rank {})   predicted {}\n",
               core::formatBytes(run.memory.peak_bytes), record.recorded_rank, core::formatBytes(predicted.summary.peak_bytes));
    bool timing_differs = false;
    for (int c = 0; c < core::kMemCategoryCount; ++c) {
        const auto cat = static_cast<size_t>(c);
        const int64_t high = run.counted_high_water[cat];
        const int64_t want = predicted.timed.max_per_category[cat];
        if (high == 0 && want == 0) continue;
        std::string delta;
        if (high != want) {
            timing_differs = true;
            delta = fmt::format("   ({}{} from timing)", high > want ? "+" : "-", core::formatBytes(high > want ? high - want : want - high));
        }
        fmt::print("  {:<18}{:>12} max   predicted {}{}\n", core::categoryName(static_cast<core::MemCategory>(c)),
                   core::formatBytes(high), core::formatBytes(want), delta);
    }
    if (timing_differs) {
        // Checked above: the counted marks are the Program's own events on the measured timeline.
        fmt::print("  (the counted figures are the plan's allocations placed on the measured timeline: a category that\n"
                   "   differs peaks with what the run overlapped, e.g. the next unit's all-gather issued earlier\n"
                   "   relative to compute than predicted)\n");
    }
    fmt::print("Tasks               {} per step on rank {}, every one run in {} steps\n", predicted.program.size(),
               record.recorded_rank,
               o.warmup + o.steps);
    if (!record.emulated_tasks.empty()) {
        fmt::print("Emulated            {} collective tasks: output filled locally, no communication (their times are "
                   "not measurements)\n",
                   record.emulated_tasks.size());
    }
    if (!text.verify.empty()) fmt::print("{}\n", text.verify);
    if (!o.out.empty()) fmt::print("Run record written to {}\n", o.out);
    if (!o.trace.empty()) fmt::print("Chrome trace written to {}\n", o.trace);
    if (o.save.requested) fmt::print("{}\n", saved.line);
    std::fflush(stdout);
    return kExitOk;
}

void progressOnTerminal(exec::Executor& executor) {
    if (!stderrIsTerminal()) return;
    executor.onStep([](int32_t done, int32_t total) {
        fmt::print(stderr, "\rstep {}/{}{}", done, total, done == total ? "\r            \r" : "");
        std::fflush(stderr);
    });
}

namespace {

int runRun(const RunOptions& o) {
    if (o.backend == "cuda") return runOnCuda(o);
    if (o.backend != "cpu") {
        return reportInputError("--backend " + o.backend + ": valid backends are cpu and cuda");
    }
    if (o.emulate_rank >= 0) {
        return reportInputError("--emulate-rank: only --backend cuda emulates a rank (the cpu backend runs every rank)");
    }
    if (o.gpus > 0) {
        return reportInputError("--gpus: only --backend cuda runs ranks as threads (the cpu backend runs one process per "
                                "rank under mpirun)");
    }
    return runOnCpu(o);
}

}  // namespace

void registerRunCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<RunOptions>();
    CLI::App* cmd = app.add_subcommand("run", "Execute the plan for real on a backend, one process per rank "
                                              "(`mpirun -np N shardcast run PLAN`), and measure its step");
    addPlanOptions(*cmd, opts->plan);
    cmd->add_option("--backend", opts->backend, "Backend that runs the Program: cpu (MPI + Eigen, one process per rank) or cuda (one GPU per "
                    "rank, NCCL; needs a build with the CUDA toolkit)")->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    cmd->add_option("--steps", opts->steps, "Measured steps (the median one is recorded)")
        ->check(CLI::Range(1, 100000))->capture_default_str();
    cmd->add_option("--warmup", opts->warmup, "Steps run first and discarded")->check(CLI::Range(0, 100000))
        ->capture_default_str();
    cmd->add_option("--emulate-rank", opts->emulate_rank,
                    "cuda: run rank R of the plan alone on one GPU, every allocation and kernel for real, each "
                    "collective's output filled locally (marked emulated in the run record)")
        ->check(CLI::Range(0, 1 << 30))->type_name("R");
    cmd->add_option("--gpus", opts->gpus,
                    "cuda: run every rank of the plan in this one process, a thread per local GPU (GPUs 0 .. N-1, "
                    "NCCL between them, no MPI); N must be the plan's world size")
        ->check(CLI::Range(1, 1 << 16))->type_name("N");
    cmd->add_flag("--verify", opts->verify, "Check every collective's data: gathered parameters equal the originals, reduced gradients the mean over the group's ranks (docs/running.md)");
    cmd->add_option("--out", opts->out, "Write the measured run (core::RunRecord JSON) to FILE")->type_name("FILE");
    cmd->add_option("--trace", opts->trace, "Write the measured step as a Chrome trace to FILE")->type_name("FILE");
    addProfileOption(*cmd, opts->profile);
    addSaveOption(*cmd, opts->save, "the measured run, its plan and its prediction (rank 0 saves)");
    cmd->callback([opts, &exit_code] { exit_code = runRun(*opts); });
}

}  // namespace shardcast::cli

