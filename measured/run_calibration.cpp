#include "measured/run_calibration.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "measured/calibration_fit.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

using core::TaskKind;

enum Work : uint8_t { kForward, kBackward, kMemory, kWorkCount };

// Which compute factor a task's time answers to: GEMM-bound passes by direction (recompute runs
// forward kernels), memory-bound work (copies, casts, the optimizer) by HBM bandwidth.
int workOf(TaskKind k) {
    switch (k) {
    case TaskKind::Forward:
    case TaskKind::Recompute: return kForward;
    case TaskKind::Backward: return kBackward;
    case TaskKind::CopyIn:
    case TaskKind::CopyOut:
    case TaskKind::Cast:
    case TaskKind::ClipGrad:
    case TaskKind::OptimizerStep: return kMemory;
    default: return -1;
    }
}

// The largest efficiency a profile holds (hardware_profile.cpp's bound); beyond it the peak moves.
constexpr double kEfficiencyCap = 4.0;
constexpr int kIterations = 6;

void scaleEfficiency(HardwareProfile& p, double& eff, double k) {
    eff *= k;
    if (eff > kEfficiencyCap) {
        const double up = eff / kEfficiencyCap;
        p.gpu.peak_flops_bf16 *= up;
        p.gpu.peak_flops_fp16 *= up;
        p.gpu.peak_flops_tf32 *= up;
        p.gpu.peak_flops_fp32 *= up;
        p.gpu.peak_flops_fp8 *= up;
        eff = kEfficiencyCap;
    }
}

// A compute task's work, op by op, on one side (predicted or measured): GEMM and attention time
// by direction (0 forward and recompute, 1 backward), the rest, the tasks' whole time and the ops.
struct OpSums {
    std::array<double, 2> gemm_s{}, attention_s{};
    double other_s = 0, total_s = 0;
    int64_t ops = 0, tasks = 0;
};

// The predicted side: each op's time less its launch (the launch is what is fitted from the rest).
void addPredicted(const HardwareProfile& profile, const core::Program& program, const core::Task& task, OpSums& sums) {
    const CostModel cost(profile);
    const double launch = static_cast<double>(profile.kernel_launch_ns) * 1e-9;
    const int dir = task.kind == TaskKind::Backward ? 1 : 0;
    const core::OpShape* op = program.opsBegin(task);
    for (uint32_t i = 0; i < task.ops.count; ++i, ++op) {
        const double t = cost.opSeconds(*op, task.kind) - launch;
        switch (op->kind) {
        case core::OpShapeKind::Gemm: sums.gemm_s[static_cast<size_t>(dir)] += t; break;
        case core::OpShapeKind::Attention:
        case core::OpShapeKind::AttentionBackward: sums.attention_s[static_cast<size_t>(dir)] += t; break;
        case core::OpShapeKind::Elementwise: sums.other_s += t; break;
        case core::OpShapeKind::TpAllGather:
        case core::OpShapeKind::TpReduceScatter:
        case core::OpShapeKind::TpAllReduce: continue;  // communication: not a kernel figure
        }
        ++sums.ops;
    }
    ++sums.tasks;
}

}  // namespace

core::Result<RunCalibration> calibrateFromRun(const core::Plan& plan, const HardwareProfile& base,
                                              const core::Timeline& measured, const std::vector<uint8_t>& skip,
                                              const std::string& source, const std::vector<core::MeasuredOps>& ops) {
    RunCalibration out;
    out.profile = base;
    out.measured_step_ns = measured.step_ns;
    Evaluator evaluator;
    EvaluationOptions options;
    options.issue_order_memory = false;
    options.per_unit = false;
    options.reserved_memory = false;
    Evaluation e;
    if (auto s = evaluator.evaluate(plan, &base, options, e); !s) return s.error();
    if (measured.tasks.size() != e.program.tasks.size()) {
        return core::makeError(fmt::format("the run has {} tasks but the plan's program has {}: not a run of this plan",
                                           measured.tasks.size(), e.program.tasks.size()));
    }
    out.predicted_step_before_ns = e.timeline.step_ns;
    const auto timed = [&](int32_t id) { return skip.empty() || skip[static_cast<size_t>(id)] == 0; };

    std::array<int64_t, kWorkCount> measured_ns{};
    for (int32_t id = 0; id < e.program.size(); ++id) {
        const int w = workOf(e.program.tasks[static_cast<size_t>(id)].kind);
        if (w >= 0 && timed(id)) measured_ns[static_cast<size_t>(w)] += measured.tasks[static_cast<size_t>(id)].durationNs();
    }
    if (measured_ns[kForward] == 0 && measured_ns[kBackward] == 0) {
        return core::makeError("the run times no forward or backward task: nothing to fit compute from");
    }
    const HardwareProfile start = base;
    // The op-level side, where the run breaks its compute tasks down: which tasks, and what it
    // measured of them.
    const auto by_ops = [&](int32_t id) {
        const core::Task& t = e.program.tasks[static_cast<size_t>(id)];
        return static_cast<size_t>(id) < ops.size() && ops[static_cast<size_t>(id)].measured && timed(id) && t.ops.count > 0 &&
               (t.kind == TaskKind::Forward || t.kind == TaskKind::Backward || t.kind == TaskKind::Recompute);
    };
    OpSums op_measured;
    for (int32_t id = 0; id < e.program.size(); ++id) {
        if (!by_ops(id)) continue;
        const core::MeasuredOps& m = ops[static_cast<size_t>(id)];
        const size_t dir = e.program.tasks[static_cast<size_t>(id)].kind == TaskKind::Backward ? 1 : 0;
        op_measured.gemm_s[dir] += static_cast<double>(m.gemm_ns) * 1e-9;
        op_measured.attention_s[dir] += static_cast<double>(m.attention_ns) * 1e-9;
        op_measured.other_s += static_cast<double>(m.other_ns) * 1e-9;
        op_measured.total_s += static_cast<double>(measured.tasks[static_cast<size_t>(id)].durationNs()) * 1e-9;
        op_measured.ops += m.count;
        ++op_measured.tasks;
    }
    const bool op_fit = op_measured.tasks > 0;
    OpSums op_predicted;
    for (int iter = 0; iter < kIterations; ++iter) {
        std::array<int64_t, kWorkCount> predicted_ns{};
        for (int32_t id = 0; id < e.program.size(); ++id) {
            const int w = workOf(e.program.tasks[static_cast<size_t>(id)].kind);
            if (w >= 0 && timed(id)) predicted_ns[static_cast<size_t>(w)] += e.timeline.tasks[static_cast<size_t>(id)].durationNs();
        }
        // Time scales as 1 / efficiency for the work each factor governs: predicted / measured is the
        // efficiency change that closes the gap (the other factors' share of a task is fixed by the
        // iteration).
        std::array<double, kWorkCount> k{1.0, 1.0, 1.0};
        for (int w = 0; w < kWorkCount; ++w) {
            if (measured_ns[static_cast<size_t>(w)] > 0 && predicted_ns[static_cast<size_t>(w)] > 0) {
                k[static_cast<size_t>(w)] = static_cast<double>(predicted_ns[static_cast<size_t>(w)]) /
                                            static_cast<double>(measured_ns[static_cast<size_t>(w)]);
            }
        }
        scaleEfficiency(out.profile, out.profile.hbm_efficiency, k[kMemory]);
        if (!op_fit) {
            scaleEfficiency(out.profile, out.profile.forward_efficiency_max, k[kForward]);
            scaleEfficiency(out.profile, out.profile.attention_forward_efficiency, k[kForward]);
            scaleEfficiency(out.profile, out.profile.backward_efficiency_max, k[kBackward]);
            scaleEfficiency(out.profile, out.profile.attention_backward_efficiency, k[kBackward]);
        } else {
            // Op by op: each GEMM and attention efficiency closes its own ops' gap (time ~ 1 /
            // efficiency), then the launch takes what the tasks spend outside them.
            op_predicted = OpSums{};
            for (int32_t id = 0; id < e.program.size(); ++id) {
                if (by_ops(id)) addPredicted(out.profile, e.program, e.program.tasks[static_cast<size_t>(id)], op_predicted);
            }
            double fitted_s = op_predicted.other_s;
            for (size_t dir = 0; dir < 2; ++dir) {
                const auto fit = [&](double& eff, double predicted_s, double measured_s) {
                    if (predicted_s > 0 && measured_s > 0) {
                        scaleEfficiency(out.profile, eff, predicted_s / measured_s);
                        fitted_s += measured_s;
                    } else {
                        fitted_s += predicted_s;
                    }
                };
                fit(dir == 0 ? out.profile.forward_efficiency_max : out.profile.backward_efficiency_max, op_predicted.gemm_s[dir],
                    op_measured.gemm_s[dir]);
                fit(dir == 0 ? out.profile.attention_forward_efficiency : out.profile.attention_backward_efficiency,
                    op_predicted.attention_s[dir], op_measured.attention_s[dir]);
            }
            if (op_predicted.ops > 0) {
                const double launch_s = std::max(0.0, (op_measured.total_s - fitted_s) / static_cast<double>(op_predicted.ops));
                out.profile.kernel_launch_ns = static_cast<int64_t>(std::llround(launch_s * 1e9));
            }
        }
        if (auto s = evaluator.evaluate(plan, &out.profile, options, e); !s) return s.error();
    }
    const auto line = [&](const char* key, double before, double after, std::string from, bool fitted) {
        out.lines.push_back(RunFitLine{key, before, after, std::move(from), fitted});
    };
    const auto computeLine = [&](const char* key, double before, double after, int w, const char* what) {
        if (measured_ns[static_cast<size_t>(w)] > 0) {
            line(key, before, after, fmt::format("{} tasks: measured {:.3f} ms", what, static_cast<double>(measured_ns[static_cast<size_t>(w)]) / 1e6), true);
        } else {
            line(key, before, after, fmt::format("kept: the run times no {} task", what), false);
        }
    };
    if (!op_fit) {
        computeLine("forward_efficiency_max", start.forward_efficiency_max, out.profile.forward_efficiency_max, kForward, "forward");
        computeLine("attention_forward_efficiency", start.attention_forward_efficiency, out.profile.attention_forward_efficiency, kForward, "forward");
        computeLine("backward_efficiency_max", start.backward_efficiency_max, out.profile.backward_efficiency_max, kBackward, "backward");
        computeLine("attention_backward_efficiency", start.attention_backward_efficiency, out.profile.attention_backward_efficiency, kBackward, "backward");
    } else {
        const auto opLine = [&](const char* key, double before, double after, double predicted_s, double measured_s, const char* what) {
            if (predicted_s > 0 && measured_s > 0) {
                line(key, before, after, fmt::format("{} ops: measured {:.3f} ms in {} compute tasks", what, measured_s * 1e3, op_measured.tasks), true);
            } else if (predicted_s > 0) {
                line(key, before, after, fmt::format("kept: the run shows no {} op where the plan has some", what), false);
            } else {
                line(key, before, after, fmt::format("kept: the plan has no {} op", what), false);
            }
        };
        opLine("forward_efficiency_max", start.forward_efficiency_max, out.profile.forward_efficiency_max, op_predicted.gemm_s[0],
               op_measured.gemm_s[0], "forward GEMM");
        opLine("attention_forward_efficiency", start.attention_forward_efficiency, out.profile.attention_forward_efficiency,
               op_predicted.attention_s[0], op_measured.attention_s[0], "forward attention");
        opLine("backward_efficiency_max", start.backward_efficiency_max, out.profile.backward_efficiency_max, op_predicted.gemm_s[1],
               op_measured.gemm_s[1], "backward GEMM");
        opLine("attention_backward_efficiency", start.attention_backward_efficiency, out.profile.attention_backward_efficiency,
               op_predicted.attention_s[1], op_measured.attention_s[1], "backward attention");
    }
    computeLine("hbm_efficiency", start.hbm_efficiency, out.profile.hbm_efficiency, kMemory, "copy, cast and optimizer");
    if (out.profile.gpu.peak_flops_fp32 != start.gpu.peak_flops_fp32) {
        line("gpu.peak_flops_*", start.gpu.peak_flops_fp32, out.profile.gpu.peak_flops_fp32,
             "raised with the efficiencies past their bound of 4", true);
    }

    // Collectives: every measured all-gather and reduce-scatter inside one node is a point.
    std::vector<CollectivePoint> points;
    bool spans_nodes = false;
    for (int32_t id = 0; id < e.program.size(); ++id) {
        const core::Task& t = e.program.tasks[static_cast<size_t>(id)];
        if ((t.kind != TaskKind::AllGather && t.kind != TaskKind::ReduceScatter) || !timed(id)) continue;
        const int64_t d = measured.tasks[static_cast<size_t>(id)].durationNs();
        if (d <= 0 || t.comm_bytes <= 0) continue;
        if (t.group_nodes > 1) {
            spans_nodes = true;
            continue;
        }
        points.push_back(CollectivePoint{t.kind, t.group_size, t.comm_bytes, static_cast<double>(d) / 1e9});
    }
    std::string why_kept;
    if (points.empty()) {
        why_kept = spans_nodes ? "kept: the run's collectives span nodes (only intra-node groups are fitted)"
                               : "kept: the run times no all-gather or reduce-scatter";
    } else if (auto fit = fitCollectiveCurve(points); !fit) {
        why_kept = "kept: " + fit.error().message;
    } else {
        const double ag = fit->all_gather_busbw_max, rs = fit->reduce_scatter_busbw_max;
        const double link = std::max(ag, rs);
        const HardwareProfile before = out.profile;
        out.profile.gpu.nvlink_bytes_per_s = link;
        if (ag > 0) out.profile.nvlink_all_gather_efficiency = ag / link;
        if (rs > 0) out.profile.nvlink_reduce_scatter_efficiency = rs / link;
        out.profile.busbw_half_bytes = fit->half_bytes;
        out.profile.gpu.intra_node_latency_s = fit->latency_s;
        const std::string from = fmt::format("{} measured collectives (least squares, rms relative error {:.1f}%)",
                                             points.size(), 100.0 * fit->rms_relative_error);
        line("gpu.nvlink_bytes_per_s", before.gpu.nvlink_bytes_per_s, link, from, true);
        line("nvlink_all_gather_efficiency", before.nvlink_all_gather_efficiency, out.profile.nvlink_all_gather_efficiency, from, true);
        line("nvlink_reduce_scatter_efficiency", before.nvlink_reduce_scatter_efficiency,
             out.profile.nvlink_reduce_scatter_efficiency, from, true);
        line("busbw_half_bytes", before.busbw_half_bytes, fit->half_bytes, from, true);
        line("gpu.intra_node_latency_s", before.gpu.intra_node_latency_s, fit->latency_s, from, true);
    }
    if (!why_kept.empty()) {
        line("gpu.nvlink_bytes_per_s", out.profile.gpu.nvlink_bytes_per_s, out.profile.gpu.nvlink_bytes_per_s, why_kept, false);
        line("gpu.intra_node_latency_s", out.profile.gpu.intra_node_latency_s, out.profile.gpu.intra_node_latency_s, why_kept, false);
    }
    line("nvlink_all_reduce_efficiency", out.profile.nvlink_all_reduce_efficiency, out.profile.nvlink_all_reduce_efficiency,
         "kept: a trace's reductions are timed as reduce-scatters", false);
    line("network_efficiency", out.profile.network_efficiency, out.profile.network_efficiency,
         "kept: inter-node collectives are not fitted", false);
    line("overlap_compute_slowdown", out.profile.overlap_compute_slowdown, out.profile.overlap_compute_slowdown,
         out.profile.gpu.host_device ? "kept: a host device overlaps nothing" : "kept: not separable from one run's task sums", false);
    if (op_fit && op_predicted.ops > 0) {
        line("kernel_launch_ns", static_cast<double>(start.kernel_launch_ns), static_cast<double>(out.profile.kernel_launch_ns),
             fmt::format("the compute tasks' {:.3f} ms outside GEMM and attention ops ({:.3f} ms in {} other ops, the rest "
                         "between ops), less their elementwise bytes at hbm_efficiency, over the plan's {} ops",
                         (op_measured.total_s - op_measured.gemm_s[0] - op_measured.gemm_s[1] - op_measured.attention_s[0] -
                          op_measured.attention_s[1]) * 1e3,
                         op_measured.other_s * 1e3, op_measured.ops, op_predicted.ops),
             true);
    } else {
        line("kernel_launch_ns", static_cast<double>(out.profile.kernel_launch_ns), static_cast<double>(out.profile.kernel_launch_ns),
             "kept: the run is read per task, not per op", false);
    }

    out.profile.gpu.source = source;
    if (auto s = evaluator.evaluate(plan, &out.profile, options, e); !s) return s.error();
    // On a host device every task blocks the host, so what the tasks leave of the measured step is
    // host time between them: FSDP's hooks and the module code around the units. It is charged per
    // unit and pass (the cost model's unit_hook_ns); the step is linear in it, so a few secant
    // steps settle it. On a GPU the residual mixes overlap and launch effects, and it is kept.
    const int64_t hook_before = out.profile.unit_hook_ns;
    if (out.profile.gpu.host_device) {
        std::vector<std::tuple<int32_t, int16_t, bool>> passes;
        for (const core::Task& t : e.program.tasks) {
            if (t.unit >= 0 && (t.kind == TaskKind::Forward || t.kind == TaskKind::Backward)) {
                passes.emplace_back(t.unit, t.micro_batch, t.kind == TaskKind::Backward);
            }
        }
        std::sort(passes.begin(), passes.end());
        passes.erase(std::unique(passes.begin(), passes.end()), passes.end());
        const auto hooks = static_cast<int64_t>(std::max<size_t>(1, passes.size()));
        for (int iter = 0; iter < 4; ++iter) {
            const int64_t residual = measured.step_ns - e.timeline.step_ns;
            out.profile.unit_hook_ns = std::max<int64_t>(0, out.profile.unit_hook_ns + residual / hooks);
            if (auto s = evaluator.evaluate(plan, &out.profile, options, e); !s) return s.error();
        }
        line("unit_hook_ns", static_cast<double>(hook_before), static_cast<double>(out.profile.unit_hook_ns),
             fmt::format("the step's host time between tasks over {} unit passes", hooks), true);
    } else {
        line("unit_hook_ns", static_cast<double>(hook_before), static_cast<double>(hook_before),
             "kept: on a GPU the step's residual is not host time alone", false);
    }
    out.predicted_step_after_ns = e.timeline.step_ns;
    return out;
}

nlohmann::json runCalibrationToJson(const RunCalibration& c) {
    nlohmann::json j;
    j["measured_step_ns"] = c.measured_step_ns;
    j["predicted_step_before_ns"] = c.predicted_step_before_ns;
    j["predicted_step_after_ns"] = c.predicted_step_after_ns;
    j["figures"] = nlohmann::json::array();
    for (const RunFitLine& l : c.lines) {
        j["figures"].push_back({{"figure", l.figure}, {"before", l.before}, {"after", l.after}, {"fitted", l.fitted}, {"from", l.from}});
    }
    j["profile"] = profileToJson(c.profile);
    return j;
}

}  // namespace shardcast::sim
