// `shardcast calibrate --backend cuda` (in shardcast-cuda): cuBLASLt GEMMs, HBM and NCCL over the
// local GPUs, measured and fitted from one process.
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/backends/calibrate_backend.hpp"
#include "backend_cuda/calibrate.hpp"
#include "backend_cuda/device_info.hpp"
#include "core/base/launch_env.hpp"
#include "core/base/units.hpp"
#include "core/plan/plan_build.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::cli {
namespace {

// The GEMM (forward / backward) and attention shapes of one rank of `--model` on one GPU, each
// once: FSDP shards parameters, not a rank's tokens, so the shapes are every plan's of that model,
// sequence length and micro-batch. Errors are the user's input (the model, the sequence length).
core::Status addPlanShapes(const CalibrateOptions& o, cuda::CudaCalibrationOptions& into) {
    core::PlanOverrides overrides;
    overrides.model = o.model;
    overrides.nodes = 1;
    overrides.gpus_per_node = 1;
    if (o.seq_len > 0) overrides.seq_len = o.seq_len;
    auto plan = core::buildPlan(overrides);
    if (!plan) return plan.error();
    sim::Evaluator evaluator;
    sim::Evaluation evaluation;
    if (auto s = evaluator.evaluate(*plan, nullptr, {}, evaluation); !s) return s.error();
    cuda::PlanShapes shapes = cuda::planShapes(evaluation.program);
    into.plan_gemms = std::move(shapes.gemms);
    into.plan_attention = std::move(shapes.attention);
    return core::Ok{};
}

void printCudaTables(const cuda::CudaCalibrationResult& r, const std::string& out) {
    const auto& m = r.measured;
    const sim::HardwareProfile& p = r.profile;
    fmt::print("shardcast calibrate --backend cuda: {} x {} (one process)\n\n", m.gpus, m.gpu_name);
    fmt::print("GEMM C[m,n] = A[m,k] B[k,n], cuBLASLt, fp32 accumulate (fitted: the bf16 curve; fp32 on its own)\n");
    fmt::print("{:<6}{:<9}{:<7}{:>7}{:>7}{:>7}{:>13}{:>12}{:>20}{:>18}{:>11}\n", "dtype", "pass", "from", "m", "n", "k",
               "work (GFLOP)", "time (us)", "measured (TFLOP/s)", "fitted (TFLOP/s)", "error (%)");
    for (const cuda::GemmMeasurement& g : m.gemm) {
        const sim::GemmFit& fit = g.dtype == core::DType::F32 ? r.fp32_fit : r.fits.gemm;
        const double fitted_s = sim::gemmFitSeconds(fit, g.point);
        fmt::print("{:<6}{:<9}{:<7}{:>7}{:>7}{:>7}{:>13.3f}{:>12.1f}{:>20.1f}{:>18.1f}{:>11.1f}\n", core::dtypeName(g.dtype),
                   g.point.backward ? "backward" : "forward", g.from_plan ? "plan" : "sweep", g.point.m, g.point.n,
                   g.point.k, g.point.flops() / 1e9, g.point.seconds * 1e6, g.point.flops() / g.point.seconds / 1e12,
                   g.point.flops() / fitted_s / 1e12, percentError(fitted_s, g.point.seconds));
    }
    if (!m.attention.empty()) {
        fmt::print("\nAttention per sequence and head as the backend runs it (two bf16 GEMMs, 4 s^2 d FLOPs; not fitted)\n");
        fmt::print("{:>8}{:>10}{:>12}{:>20}{:>24}\n", "seq", "head_dim", "time (us)", "measured (TFLOP/s)",
                   "bf16 curve (TFLOP/s)");
        for (const cuda::AttentionPoint& a : m.attention) {
            const sim::GemmPoint same{a.seq, a.seq, 2 * a.head_dim, false, a.seconds};  // 2 s s 2d = 4 s^2 d
            fmt::print("{:>8}{:>10}{:>12.1f}{:>20.1f}{:>24.1f}\n", a.seq, a.head_dim, a.seconds * 1e6,
                       a.flops() / a.seconds / 1e12, a.flops() / sim::gemmFitSeconds(r.fits.gemm, same) / 1e12);
        }
    }
    fmt::print("\nMemory (traffic = bytes read + written)\n");
    fmt::print("{:<22}{:>16}{:>12}{:>18}\n", "kernel", "traffic (B)", "time (us)", "bandwidth (GB/s)");
    for (const cuda::MemoryPoint& mp : m.memory) {
        fmt::print("{:<22}{:>16}{:>12.1f}{:>18.1f}\n", mp.kernel, mp.traffic_bytes, mp.seconds * 1e6, mp.bytesPerSecond() / 1e9);
    }
    if (r.fits.collectives) {
        fmt::print("\nCollectives, NCCL bf16 (nccl-tests doc/PERFORMANCE.md: algbw = S / t; busbw = algbw x (n-1)/n for "
                   "all-gather and reduce-scatter, x 2(n-1)/n for all-reduce)\n");
        fmt::print("{:<16}{:>6}{:>12}{:>12}{:>13}{:>14}{:>14}{:>22}{:>11}\n", "op", "ranks", "size (B)", "time (us)",
                   "fitted (us)", "algbw (GB/s)", "busbw (GB/s)", "fitted busbw (GB/s)", "error (%)");
        for (const sim::CollectivePoint& c : m.collectives) {
            const double fitted_s = sim::collectiveFitSeconds(*r.fits.collectives, c);
            const double factor = sim::busBandwidthFactor(c.kind, c.group_size);
            fmt::print("{:<16}{:>6}{:>12}{:>12.1f}{:>13.1f}{:>14.2f}{:>14.2f}{:>22.2f}{:>11.1f}\n", collectiveName(c.kind),
                       c.group_size, c.bytes, c.seconds * 1e6, fitted_s * 1e6, c.algBandwidth() / 1e9,
                       c.busBandwidth() / 1e9, static_cast<double>(c.bytes) * factor / fitted_s / 1e9,
                       percentError(fitted_s, c.seconds));
        }
    } else {
        fmt::print("\nCollectives: not measured (one GPU)\n");
    }
    if (m.overlap) {
        const cuda::OverlapPoint& o = *m.overlap;
        fmt::print("\nOverlap (GEMMs on GPU 0's compute stream, all-gathers on every GPU's communication stream)\n");
        fmt::print("{:<34}{:>14}{:>18}{:>10}\n", "", "alone (us)", "overlapped (us)", "slowdown");
        fmt::print("{:<34}{:>14.1f}{:>18.1f}{:>9.2f}x\n", fmt::format("GEMM {0}x{0}x{0} bf16", o.gemm_size),
                   o.gemm_alone_s * 1e6, o.gemm_overlapped_s * 1e6, o.computeSlowdown());
        fmt::print("{:<34}{:>14.1f}{:>18.1f}{:>9.2f}x\n", fmt::format("all-gather {} B", o.all_gather_bytes),
                   o.all_gather_alone_s * 1e6, o.all_gather_overlapped_s * 1e6, o.collectiveSlowdown());
    }
    fmt::print("\nFitted profile\n");
    fmt::print("  peak_flops_bf16                       {:10.1f} TFLOP/s\n", p.gpu.peak_flops_bf16 / 1e12);
    fmt::print("  peak_flops_fp32                       {:10.1f} TFLOP/s\n", p.gpu.peak_flops_fp32 / 1e12);
    fmt::print("  forward / backward_efficiency_max     {:.3f} / {:.3f}\n", p.forward_efficiency_max,
               p.backward_efficiency_max);
    fmt::print("  gemm_half_flops                       {:10.1f} GFLOP\n", p.gemm_half_flops / 1e9);
    fmt::print("  GEMM fit rms error (bf16)             {:10.1f} %\n", r.fits.gemm.rms_relative_error * 100);
    fmt::print("  hbm_bytes_per_s x hbm_efficiency      {:10.1f} GB/s x {:g}\n", p.gpu.hbm_bytes_per_s / 1e9, p.hbm_efficiency);
    fmt::print("  memory_bytes                          {:>10}\n", core::formatGiB(p.gpu.memory_bytes));
    fmt::print("  nvlink_bytes_per_s                    {:10.1f} GB/s{}\n", p.gpu.nvlink_bytes_per_s / 1e9,
               r.communication_measured ? "" : "  (preset, not measured)");
    fmt::print("  overlap compute / collective slowdown {:.3f} / {:.3f}{}\n", p.overlap_compute_slowdown,
               p.overlap_collective_slowdown, m.overlap ? "" : "  (preset, not measured)");
    for (const std::string& note : r.notes) fmt::print("Note: {}\n", note);
    fmt::print("Wrote {}\n", out);
}

nlohmann::ordered_json cudaResultJson(const cuda::CudaCalibrationResult& r, const std::string& out) {
    const auto& m = r.measured;
    nlohmann::ordered_json j;
    j["backend"] = "cuda";
    j["gpu"] = m.gpu_name;
    j["gpus"] = m.gpus;
    j["communication_measured"] = r.communication_measured;
    j["profile_file"] = out;
    nlohmann::ordered_json gemm = nlohmann::ordered_json::array();
    for (const cuda::GemmMeasurement& g : m.gemm) {
        const double fitted_s = sim::gemmFitSeconds(g.dtype == core::DType::F32 ? r.fp32_fit : r.fits.gemm, g.point);
        gemm.push_back({{"dtype", core::dtypeName(g.dtype)}, {"pass", g.point.backward ? "backward" : "forward"},
                        {"from_plan", g.from_plan}, {"m", g.point.m}, {"n", g.point.n}, {"k", g.point.k},
                        {"flops", g.point.flops()}, {"seconds", g.point.seconds}, {"fitted_seconds", fitted_s}});
    }
    nlohmann::ordered_json attention = nlohmann::ordered_json::array();
    for (const cuda::AttentionPoint& a : m.attention) {
        attention.push_back({{"seq", a.seq}, {"head_dim", a.head_dim}, {"flops", a.flops()}, {"seconds", a.seconds}});
    }
    nlohmann::ordered_json memory = nlohmann::ordered_json::array();
    for (const cuda::MemoryPoint& mp : m.memory) {
        memory.push_back({{"kernel", mp.kernel}, {"traffic_bytes", mp.traffic_bytes}, {"seconds", mp.seconds},
                          {"bytes_per_s", mp.bytesPerSecond()}});
    }
    nlohmann::ordered_json coll = nlohmann::ordered_json::array();
    for (const sim::CollectivePoint& c : m.collectives) {
        coll.push_back({{"op", collectiveName(c.kind)}, {"group_size", c.group_size}, {"bytes", c.bytes}, {"seconds", c.seconds},
                        {"fitted_seconds", sim::collectiveFitSeconds(*r.fits.collectives, c)},
                        {"algbw_bytes_per_s", c.algBandwidth()}, {"busbw_bytes_per_s", c.busBandwidth()}});
    }
    nlohmann::ordered_json overlap = nullptr;
    if (m.overlap) {
        const cuda::OverlapPoint& o = *m.overlap;
        overlap = {{"gemm_size", o.gemm_size}, {"all_gather_bytes", o.all_gather_bytes},
                   {"gemm_alone_seconds", o.gemm_alone_s}, {"gemm_overlapped_seconds", o.gemm_overlapped_s},
                   {"all_gather_alone_seconds", o.all_gather_alone_s},
                   {"all_gather_overlapped_seconds", o.all_gather_overlapped_s}};
    }
    j["measured"] = {{"gemm", gemm}, {"attention", attention}, {"memory", memory}, {"collectives", coll}, {"overlap", overlap}};
    j["fit"] = {{"gemm_bf16", {{"forward_flops_per_s_max", r.fits.gemm.forward_flops_per_s_max},
                               {"backward_flops_per_s_max", r.fits.gemm.backward_flops_per_s_max},
                               {"half_flops", r.fits.gemm.half_flops},
                               {"rms_relative_error", r.fits.gemm.rms_relative_error}}},
                {"gemm_fp32", {{"forward_flops_per_s_max", r.fp32_fit.forward_flops_per_s_max},
                               {"half_flops", r.fp32_fit.half_flops},
                               {"rms_relative_error", r.fp32_fit.rms_relative_error}}},
                {"memory_bytes_per_s", r.fits.memory_bytes_per_s}};
    j["profile"] = sim::profileToJson(r.profile);
    j["notes"] = r.notes;
    return j;
}

}  // namespace

// `calibrate --backend cuda`: input first (exit 2), then the GPUs (exit 1 without one, the same
// line as `run --backend cuda`), then minutes of measuring.
int calibrateOnCuda(const CalibrateOptions& o) {
    if (const core::LaunchEnv launch = core::processLaunchEnv(); launch.launched() && launch.world_size > 1) {
        return rankZeroInputError(fmt::format(
            "calibrate --backend cuda drives every local GPU from one process (--gpus N), but {} started {} processes: "
            "run it once per machine, without {}",
            core::launcherName(launch.launcher), launch.world_size, core::launcherName(launch.launcher)));
    }
    cuda::CudaCalibrationOptions options;
    options.quick = o.quick;
    if (auto shapes = addPlanShapes(o, options); !shapes) return reportInputError("--model " + o.model + ": " + shapes.error().message);
    auto devices = cuda::usableDevices();
    if (!devices) return reportNoUsableGpu(devices.error().message);
    options.gpus = o.gpus > 0 ? o.gpus : *devices;
    if (options.gpus > *devices) {
        return reportInputError(fmt::format("--gpus {}: this machine has {} CUDA device{}", o.gpus, *devices,
                                            *devices == 1 ? "" : "s"));
    }
    const std::string name = cuda::cudaProfileName(0);
    const std::string out = o.out.empty() ? name + ".json" : o.out;
    if (auto bad = outError(out, name)) return reportInputError(*bad);
    if (stderrIsTerminal()) options.progress = printProgress;
    const auto result = cuda::calibrateCuda(options);
    const int code = writeCalibration(result, out, o.save, name, o.json, cudaResultJson, printCudaTables);
    if (code == kExitOk && !result->communication_measured) {
        fmt::print(stderr, "shardcast: note: communication was not measured (one GPU): the profile's collective fields "
                           "are the preset's\n");
    }
    return code;
}

}  // namespace shardcast::cli
