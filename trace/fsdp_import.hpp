#pragma once
// Maps the events of real PyTorch FSDP runs (torch.profiler traces, one per rank) onto the tasks of
// the plan's Program, as a measured run: the same RunRecord a backend writes, so `compare`, the
// store and the GUI take it unchanged. docs/trace-import.md says what is read and how.
//
// One training step of one rank is recorded: by ProfilerStep#N, or, where the profiler ran without
// a schedule, from one root pre-forward to the next. FSDP's own record_function labels give each
// unit's hooks (FSDP2: "FSDP::pre_forward (model.layers.0)", ...; FSDP1: "FullyShardedDataParallel.
// _pre_forward", ... in hook order); a unit's compute is the time between its pre- and post-hooks
// less that of the units nested in it; a collective is the execution (a gloo:* span on gloo's
// thread, an NCCL kernel on its stream) of an op issued inside the unit's all-gather or reduce label.
// On a GPU run (kernels linked to their launches by correlation) each such host span is timed by
// the GPU work launched from it; the hooks of backward are read on autograd's device thread too.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/program/program.hpp"
#include "core/results/run_record.hpp"
#include "trace/kineto_reader.hpp"

namespace shardcast::trace {

struct ImportOptions {
    // The step to record: a ProfilerStep number, or (no schedule) the index of the step from 0;
    // empty: the step of median duration among the complete steps of the recorded rank, leaving
    // out a run's first step (number 0) when there are others.
    std::optional<int64_t> step;
    int32_t rank = 0;  // whose timeline and memory are recorded
};

struct LabelCount {
    std::string label;  // unit names replaced by <unit>
    int64_t count = 0;
    bool operator==(const LabelCount&) const = default;
};

struct RankSteps {
    int32_t rank = 0;
    int64_t step_ns = 0;  // the recorded step's duration on this rank
};

struct TraceImport {
    core::RunRecord run;               // backend "torch"; plan and profile are the caller's to fill
    std::string flavour;               // "FSDP2" or "FSDP1"
    std::string collectives;           // "gloo", "nccl" or "none"
    bool device_time = false;          // a GPU run: tasks timed by the GPU work they launched (kernels,
                                       // copies, memsets linked to their launches by correlation)
    int64_t step_number = 0;           // the recorded step (ProfilerStep#N, or its index)
    int64_t fsdp_labels = 0;           // FSDP-labelled events in the recorded step
    int64_t fsdp_mapped = 0;           // of which mapped onto the Program
    std::vector<LabelCount> unmapped;  // FSDP labels not mapped, by label
    int64_t events_in_step = 0;        // events of the recorded rank inside the step
    int32_t measured_tasks = 0;        // tasks the trace times (the rest are run.unmeasured_tasks)
    std::vector<LabelCount> unmeasured_by_kind;  // "CAST" -> n: the tasks the trace cannot time
    std::vector<RankSteps> ranks;      // the same step on every rank given, for stragglers
    std::vector<std::string> notes;    // what the trace cannot show, for people
    // Per task id: the outermost CPU ops on the host threads inside a forward, backward or recompute
    // task's measured pieces, by kind (opKindOfTraceOp), timed by their CPU time or, on a GPU run, by
    // the GPU work each launched; other tasks not measured. For calibration (measured/run_calibration.hpp).
    std::vector<core::MeasuredOps> task_ops;
};

// What kind of work a CPU op of a trace is, by its name: a GEMM (aten::linear, mm, addmm, bmm,
// matmul and their autograd backward nodes), attention (scaled_dot_product_*, flash/efficient
// attention and their backward nodes), communication or FSDP's own bookkeeping (c10d::, fsdp::,
// record_param_comms, gloo:, nccl:), or other work (elementwise, reductions, indexing, views).
enum class TraceOpKind : uint8_t { Gemm, Attention, Communication, Other };
TraceOpKind opKindOfTraceOp(std::string_view name);

// `traces` are one file per rank (distributedInfo.rank, or their order). Errors name the file:
// a world size that is not the Program's, two files of one rank, files of different runs, a
// trace with no FSDP labels or no complete step, a step number not in the trace.
core::Result<TraceImport> importTraces(const std::vector<RankTrace>& traces, const core::Program& program,
                                       const ImportOptions& options = {});

// The trace files that `args` name: files as given, directories expanded to their *.json and
// *.json.gz files (sorted by name). Errors: a path that does not exist, a directory with no trace.
core::Result<std::vector<std::filesystem::path>> traceFiles(const std::vector<std::string>& args);

}  // namespace shardcast::trace
