// `shardcast calibrate --backend cpu|cuda`: measure this machine, fit the cost curves, write a
// profile. cpu: run under `mpirun -np N` to measure collectives; rank 0 prints and writes, the
// others take part. cuda: one process drives --gpus local GPUs (in `shardcast-cuda`, which
// `shardcast` hands the command line to, as `run --backend cuda` does).

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/commands.hpp"
#include "apps/shardcast/store_cli.hpp"
#include "apps/shardcast/trace_import_cli.hpp"
#include "core/base/launch_env.hpp"
#include "core/base/result.hpp"
#include "measured/run_calibration.hpp"
#include "simulator/hardware_profile.hpp"
#ifdef SHARDCAST_WITH_CUDA_BACKEND
#include <utility>

#include "backend_cuda/calibrate.hpp"
#include "backend_cuda/device_info.hpp"
#include "core/base/units.hpp"
#include "core/plan/plan_build.hpp"
#include "core/program/program.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"
#endif
#ifdef SHARDCAST_WITH_CPU_BACKEND
#include "backend_cpu/calibrate.hpp"
#include "backend_cpu/mpi_session.hpp"
#include "core/program/program.hpp"
#include "simulator/cost_model.hpp"
#endif

namespace shardcast::cli {
namespace {

struct CalibrateOptions {
    std::string backend;                  // cpu | cuda; empty with --from-trace
    std::vector<std::string> from_trace;  // torch.profiler traces of a real run of --plan
    std::string plan;
    std::string profile;                  // --from-trace: the profile to start from (default: the plan's GPU preset)
    TraceImportFlags trace_flags;
    std::string out;
    bool json = false;
    bool quick = false;
    SaveRequest save;
    int32_t gpus = 0;                     // cuda: GPUs 0 .. gpus-1; 0: every visible one
    std::string model = "llama-3.1-8b";   // cuda: the plan whose GEMM and attention shapes are measured
    int64_t seq_len = 0;                  // cuda: its sequence length; 0: the plan's default
};

#if defined(SHARDCAST_WITH_CPU_BACKEND) || defined(SHARDCAST_WITH_CUDA_BACKEND)
// Errors of --out before minutes of measuring: its directory must exist and it must not be one.
std::optional<std::string> outError(const std::string& out, const std::string& default_name) {
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::absolute(out, ec).parent_path();
    if (ec || !std::filesystem::is_directory(parent, ec)) {
        return "--out " + out + ": directory " + parent.string() +
               " does not exist (create it, or give a file in an existing directory)";
    }
    if (std::filesystem::is_directory(out, ec)) {
        return "--out " + out + " is a directory; give the profile file's path, e.g. " +
               (std::filesystem::path(out) / (default_name + ".json")).string();
    }
    return std::nullopt;
}

void printProgress(int done, int total, std::string_view what) {
    constexpr int kWidth = 30;
    const int filled = done * kWidth / total;
    fmt::print(stderr, "\r[{}{}] {:3d}% {:<32.32}", std::string(static_cast<size_t>(filled), '#'),
               std::string(static_cast<size_t>(kWidth - filled), '.'), done * 100 / total, what);
    if (done == total) fmt::print(stderr, "\n");
    std::fflush(stderr);
}

double percentError(double fitted, double measured) { return (fitted - measured) / measured * 100; }

// The end of a calibration that succeeded or failed: the profile written atomically to `out`,
// then `to_json`'s object or `print`'s tables on stdout.
template <class Calibration, class ToJson, class Print>
int writeCalibration(const core::Result<Calibration>& result, const std::string& out, const SaveRequest& save,
                     const std::string& default_name, bool json, ToJson to_json, Print print) {
    if (!result) {
        fmt::print(stderr, "shardcast: error: calibrate: {}\n", result.error().message);
        return kExitRuntimeFailure;
    }
    if (auto saved = sim::saveProfile(out, result->profile); !saved) {
        return reportInputError("--out: " + saved.error().message);
    }
    std::string saved_line;
    if (save.requested) {
        auto stored = saveCalibratedProfile(save, result->profile, default_name);
        if (!stored) {
            fmt::print(stderr, "shardcast: error: --save: {}\n", stored.error().message);
            return kExitRuntimeFailure;
        }
        saved_line = *stored;
    }
    if (json) {
        auto j = to_json(*result, out);
        if (!saved_line.empty()) j["saved"] = saved_line;
        fmt::print("{}\n", j.dump(2));
    } else {
        print(*result, out);
        if (!saved_line.empty()) fmt::print("{}\n", saved_line);
    }
    return kExitOk;
}
#endif

#ifdef SHARDCAST_WITH_CPU_BACKEND

const char* collectiveName(core::TaskKind kind) {
    switch (kind) {
        case core::TaskKind::AllGather: return "all-gather";
        case core::TaskKind::ReduceScatter: return "reduce-scatter";
        default: return "all-reduce";
    }
}

void printTables(const cpu::CalibrationResult& r, const std::string& out) {
    const auto& m = r.measured;
    const auto& f = r.fits;
    const sim::HardwareProfile& p = r.profile;
    fmt::print("shardcast calibrate --backend cpu: {} ({} MPI rank(s), Eigen fp32 GEMM on {} thread per rank, "
               "SIMD {})\n\n",
               p.gpu.name, m.world_size, m.eigen_threads, m.simd);

    fmt::print("GEMM C[m,n] = A[m,k] B[k,n], fp32\n");
    fmt::print("{:<9}{:>6}{:>6}{:>6}{:>13}{:>13}{:>20}{:>18}{:>11}\n", "pass", "m", "n", "k", "work (GFLOP)",
               "time (us)", "measured (GFLOP/s)", "fitted (GFLOP/s)", "error (%)");
    for (const sim::GemmPoint& g : m.gemm) {
        const double fitted_s = sim::gemmFitSeconds(f.gemm, g);
        fmt::print("{:<9}{:>6}{:>6}{:>6}{:>13.4f}{:>13.1f}{:>20.2f}{:>18.2f}{:>11.1f}\n",
                   g.backward ? "backward" : "forward", g.m, g.n, g.k, g.flops() / 1e9, g.seconds * 1e6,
                   g.flops() / g.seconds / 1e9, g.flops() / fitted_s / 1e9, percentError(fitted_s, g.seconds));
    }

    fmt::print("\nMemory (memcpy; traffic = bytes read + written)\n");
    fmt::print("{:>16}{:>16}{:>13}{:>18}\n", "buffer (B)", "traffic (B)", "time (us)", "bandwidth (GB/s)");
    for (const cpu::MemoryPoint& mp : m.memory) {
        fmt::print("{:>16}{:>16}{:>13.1f}{:>18.2f}\n", mp.buffer_bytes, mp.traffic_bytes, mp.seconds * 1e6,
                   mp.bytesPerSecond() / 1e9);
    }

    if (f.collectives) {
        fmt::print("\nCollectives (nccl-tests: size = gathered size / all-reduce buffer, busbw = algbw x factor)\n");
        fmt::print("{:<16}{:>6}{:>12}{:>13}{:>13}{:>14}{:>14}{:>22}{:>11}\n", "op", "ranks", "size (B)", "time (us)",
                   "fitted (us)", "algbw (GB/s)", "busbw (GB/s)", "fitted busbw (GB/s)", "error (%)");
        for (const sim::CollectivePoint& c : m.collectives) {
            const double fitted_s = sim::collectiveFitSeconds(*f.collectives, c);
            const double factor = sim::busBandwidthFactor(c.kind, c.group_size);
            fmt::print("{:<16}{:>6}{:>12}{:>13.1f}{:>13.1f}{:>14.3f}{:>14.3f}{:>22.3f}{:>11.1f}\n",
                       collectiveName(c.kind),
                       c.group_size, c.bytes, c.seconds * 1e6, fitted_s * 1e6, c.algBandwidth() / 1e9,
                       c.busBandwidth() / 1e9, static_cast<double>(c.bytes) * factor / fitted_s / 1e9,
                       percentError(fitted_s, c.seconds));
        }
    }

    if (m.overlap) {
        const cpu::OverlapPoint& o = *m.overlap;
        fmt::print("\nOverlap (GEMM on the compute thread, all-gather loop on the communication thread, every rank)\n");
        fmt::print("{:<34}{:>14}{:>18}{:>10}\n", "", "alone (us)", "overlapped (us)", "slowdown");
        fmt::print("{:<34}{:>14.1f}{:>18.1f}{:>9.2f}x\n", fmt::format("GEMM {}x{}x{}", o.gemm_m, o.gemm_n, o.gemm_k),
                   o.gemm_alone_s * 1e6, o.gemm_overlapped_s * 1e6, o.computeSlowdown());
        fmt::print("{:<34}{:>14.1f}{:>18.1f}{:>9.2f}x\n", fmt::format("all-gather {} B", o.all_gather_bytes),
                   o.all_gather_alone_s * 1e6, o.all_gather_overlapped_s * 1e6, o.collectiveSlowdown());
    }

    fmt::print("\nFitted profile\n");
    fmt::print("  peak_flops_fp32 (= bf16, fp16, tf32)  {:10.2f} GFLOP/s\n", p.gpu.peak_flops_fp32 / 1e9);
    fmt::print("  forward_efficiency_max                {:10.3f}\n", p.forward_efficiency_max);
    fmt::print("  backward_efficiency_max               {:10.3f}\n", p.backward_efficiency_max);
    fmt::print("  gemm_half_flops                       {:10.3f} MFLOP\n", p.gemm_half_flops / 1e6);
    fmt::print("  GEMM fit rms error                    {:10.1f} %\n", f.gemm.rms_relative_error * 100);
    fmt::print("  hbm_bytes_per_s x hbm_efficiency      {:10.2f} GB/s x {:g}\n", p.gpu.hbm_bytes_per_s / 1e9,
               p.hbm_efficiency);
    fmt::print("  memory_bytes (MemTotal)               {:>10}\n", core::formatGiB(p.gpu.memory_bytes));
    fmt::print("  nvlink_bytes_per_s (intra-node link)  {:10.3f} GB/s{}\n", p.gpu.nvlink_bytes_per_s / 1e9,
               f.collectives ? "" : "  (placeholder, not measured)");
    fmt::print("  nvlink efficiency AG / RS / AR        {:.3f} / {:.3f} / {:.3f}\n", p.nvlink_all_gather_efficiency,
               p.nvlink_reduce_scatter_efficiency, p.nvlink_all_reduce_efficiency);
    fmt::print("  busbw_half_bytes                      {:10.0f} B\n", p.busbw_half_bytes);
    fmt::print("  intra_node_latency_s                  {:10.2f} us\n", p.gpu.intra_node_latency_s * 1e6);
    if (f.collectives) {
        fmt::print("  collective fit rms error              {:10.1f} %\n", f.collectives->rms_relative_error * 100);
    }
    fmt::print("  overlap_compute_slowdown              {:10.3f} x{}\n", p.overlap_compute_slowdown,
               m.overlap ? "" : "  (default, not measured)");
    fmt::print("  overlap_collective_slowdown           {:10.3f} x{}\n", p.overlap_collective_slowdown,
               m.overlap ? "" : "  (default, not measured)");
    for (const std::string& note : r.notes) fmt::print("Note: {}\n", note);
    fmt::print("Wrote {}\n", out);
}

nlohmann::ordered_json resultJson(const cpu::CalibrationResult& r, const std::string& out) {
    const auto& m = r.measured;
    const auto& f = r.fits;
    nlohmann::ordered_json j;
    j["backend"] = "cpu";
    j["world_size"] = m.world_size;
    j["eigen_threads"] = m.eigen_threads;
    j["simd"] = m.simd;
    if (m.load_at_start) {
        j["load_average_at_start"] = m.load_at_start->load_1min;
        j["cores"] = m.load_at_start->cores;
    }
    j["profile_file"] = out;
    nlohmann::ordered_json gemm = nlohmann::ordered_json::array();
    for (const sim::GemmPoint& g : m.gemm) {
        const double fitted_s = sim::gemmFitSeconds(f.gemm, g);
        gemm.push_back({{"pass", g.backward ? "backward" : "forward"}, {"m", g.m}, {"n", g.n}, {"k", g.k},
                        {"flops", g.flops()}, {"seconds", g.seconds}, {"fitted_seconds", fitted_s},
                        {"flops_per_s", g.flops() / g.seconds}, {"fitted_flops_per_s", g.flops() / fitted_s}});
    }
    nlohmann::ordered_json memory = nlohmann::ordered_json::array();
    for (const cpu::MemoryPoint& mp : m.memory) {
        memory.push_back({{"kernel", "memcpy"}, {"buffer_bytes", mp.buffer_bytes}, {"traffic_bytes", mp.traffic_bytes},
                          {"seconds", mp.seconds}, {"bytes_per_s", mp.bytesPerSecond()}});
    }
    nlohmann::ordered_json overlap = nullptr;
    if (m.overlap) {
        const cpu::OverlapPoint& o = *m.overlap;
        overlap = {{"gemm", {{"m", o.gemm_m}, {"n", o.gemm_n}, {"k", o.gemm_k}}},
                   {"all_gather_bytes", o.all_gather_bytes},
                   {"gemm_alone_seconds", o.gemm_alone_s},
                   {"gemm_overlapped_seconds", o.gemm_overlapped_s},
                   {"all_gather_alone_seconds", o.all_gather_alone_s},
                   {"all_gather_overlapped_seconds", o.all_gather_overlapped_s},
                   {"compute_slowdown", o.computeSlowdown()},
                   {"collective_slowdown", o.collectiveSlowdown()}};
    }
    nlohmann::ordered_json coll = nlohmann::ordered_json::array();
    for (const sim::CollectivePoint& c : m.collectives) {
        const double fitted_s = sim::collectiveFitSeconds(*f.collectives, c);
        coll.push_back({{"op", collectiveName(c.kind)}, {"group_size", c.group_size}, {"bytes", c.bytes},
                        {"seconds", c.seconds}, {"fitted_seconds", fitted_s},
                        {"algbw_bytes_per_s", c.algBandwidth()}, {"busbw_bytes_per_s", c.busBandwidth()}});
    }
    j["measured"] = {{"gemm", gemm}, {"memory", memory}, {"collectives", coll}, {"overlap", overlap}};
    nlohmann::ordered_json fit;
    fit["gemm"] = {{"forward_flops_per_s_max", f.gemm.forward_flops_per_s_max},
                   {"backward_flops_per_s_max", f.gemm.backward_flops_per_s_max},
                   {"half_flops", f.gemm.half_flops}, {"rms_relative_error", f.gemm.rms_relative_error}};
    fit["memory_bytes_per_s"] = f.memory_bytes_per_s;
    if (f.collectives) {
        const sim::CollectiveFit& c = *f.collectives;
        fit["collectives"] = {{"all_gather_busbw_max", c.all_gather_busbw_max},
                              {"reduce_scatter_busbw_max", c.reduce_scatter_busbw_max},
                              {"all_reduce_busbw_max", c.all_reduce_busbw_max}, {"half_bytes", c.half_bytes},
                              {"latency_s", c.latency_s}, {"rms_relative_error", c.rms_relative_error}};
    } else {
        fit["collectives"] = nullptr;
    }
    j["fit"] = fit;
    j["profile"] = sim::profileToJson(r.profile);
    j["notes"] = r.notes;
    return j;
}

#endif  // SHARDCAST_WITH_CPU_BACKEND

#ifdef SHARDCAST_WITH_CUDA_BACKEND
const char* kindName(core::TaskKind kind) {
    switch (kind) {
        case core::TaskKind::AllGather: return "all-gather";
        case core::TaskKind::ReduceScatter: return "reduce-scatter";
        default: return "all-reduce";
    }
}

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
            fmt::print("{:<16}{:>6}{:>12}{:>12.1f}{:>13.1f}{:>14.2f}{:>14.2f}{:>22.2f}{:>11.1f}\n", kindName(c.kind),
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
        coll.push_back({{"op", kindName(c.kind)}, {"group_size", c.group_size}, {"bytes", c.bytes}, {"seconds", c.seconds},
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

// `calibrate --backend cuda`: input first (exit 2), then the GPUs (exit 1 without one, the same
// line as `run --backend cuda`), then minutes of measuring.
int runCalibrateCuda(const CalibrateOptions& o) {
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
#endif  // SHARDCAST_WITH_CUDA_BACKEND

constexpr const char* kInstallMpi =
    "install MPI and Eigen (Debian/Ubuntu: apt-get install libopenmpi-dev openmpi-bin libeigen3-dev), "
    "rebuild shardcast (cmake finds them and builds the CPU backend), and launch one process per rank with "
    "`scripts/mpirun.sh -np N shardcast calibrate --backend cpu`";

// `calibrate --from-trace TRACE... --plan PLAN.json --out PROFILE.json`: the profile that makes the
// plan's prediction match the traced run (measured/run_calibration.hpp).
int runCalibrateFromTrace(const CalibrateOptions& o) {
    if (!o.backend.empty()) return reportInputError("--from-trace fits a profile to a traced run: it takes no --backend");
    if (o.plan.empty()) return reportInputError("--from-trace needs --plan PLAN.json: the plan the traced run trained with");
    if (o.out.empty()) return reportInputError("--from-trace needs --out PROFILE.json: where to write the fitted profile");
    auto imported = importTorchTraces(o.from_trace, o.plan, o.profile, o.trace_flags);
    if (!imported) return reportInputError(imported.error().message);
    std::vector<uint8_t> skip(imported->predicted.program.tasks.size(), 0);
    for (const int32_t id : imported->import.run.unmeasured_tasks) skip[static_cast<size_t>(id)] = 1;
    const std::string source = fmt::format("fitted to a traced {} run of {} (step {}, rank {})", imported->import.flavour,
                                           o.plan, imported->import.step_number, imported->import.run.recorded_rank);
    auto fit = sim::calibrateFromRun(imported->plan, imported->predicted.profile, imported->import.run.timeline, skip, source,
                                     imported->import.task_ops);
    if (!fit) return reportInputError(o.plan + ": " + fit.error().message);
    if (auto saved = sim::saveProfile(o.out, fit->profile); !saved) {
        fmt::print(stderr, "shardcast: error: {}\n", saved.error().message);
        return kExitRuntimeFailure;
    }
    if (o.json) {
        nlohmann::json j = sim::runCalibrationToJson(*fit);
        j["out"] = o.out;
        fmt::print("{}\n", j.dump(2));
        return kExitOk;
    }
    printImportSummary(imported->import, imported->predicted.program);
    fmt::print("\nStep: measured {:.3f} ms; predicted {:.3f} ms before the fit, {:.3f} ms after\n",
               static_cast<double>(fit->measured_step_ns) / 1e6, static_cast<double>(fit->predicted_step_before_ns) / 1e6,
               static_cast<double>(fit->predicted_step_after_ns) / 1e6);
    fmt::print("{:<34}{:>14}{:>14}  {}\n", "figure", "before", "after", "from");
    for (const sim::RunFitLine& l : fit->lines) {
        fmt::print("{:<34}{:>14.6g}{:>14.6g}  {}{}\n", l.figure, l.before, l.after, l.fitted ? "fitted: " : "", l.from);
    }
    fmt::print("Profile written to {}; predict other plans on this cluster with --profile {}\n", o.out, o.out);
    return kExitOk;
}

int runCalibrate(const CalibrateOptions& o) {
    if (!o.from_trace.empty()) return runCalibrateFromTrace(o);
    if (o.backend.empty()) return reportInputError("calibrate needs --backend cpu|cuda (measure this machine) or --from-trace TRACE... --plan PLAN.json (fit a traced run)");
    if (!o.plan.empty() || !o.profile.empty()) return reportInputError("--plan and --profile go with --from-trace");
    if (o.backend == "cuda") {
#ifdef SHARDCAST_WITH_CUDA_BACKEND
        return runCalibrateCuda(o);
#else
        return execCudaBinary();
#endif
    }
#ifndef SHARDCAST_WITH_CPU_BACKEND
    (void)o;
    return reportInputError(std::string("this shardcast was built without the MPI CPU backend that `calibrate "
                                        "--backend cpu` measures: ") + kInstallMpi);
#else
    // Checked on every rank before MPI starts and before minutes of measuring: a bad --out ends
    // the job with exit 2 (said once, by rank 0) and nothing written.
    const std::string out = o.out.empty() ? cpu::cpuProfileName() + ".json" : o.out;
    if (auto bad = outError(out, cpu::cpuProfileName())) return rankZeroInputError(*bad);
    auto session = cpu::MpiSession::start(nullptr, nullptr);
    if (!session) {
        return rankZeroInputError(session.error().message + ": " + kInstallMpi);
    }
    const cpu::MpiSession& mpi = **session;
    if (const auto load = cpu::hostLoad(); mpi.rank() == 0 && load && load->busy()) {
        fmt::print(stderr, "shardcast: warning: load average {:.1f} on {} cores: other processes will slow and scatter "
                           "the timings; calibrate on an idle machine\n", load->load_1min, load->cores);
    }
    cpu::CalibrationOptions options;
    options.quick = o.quick;
    if (mpi.rank() == 0 && stderrIsTerminal()) options.progress = printProgress;
    try {
        const auto result = cpu::calibrateCpu(mpi, options);
        if (mpi.rank() != 0) return kExitOk;
        return writeCalibration(result, out, o.save, cpu::cpuProfileName(), o.json, resultJson, printTables);
    } catch (const std::exception& e) {
        // The other ranks may be inside a collective: end them all rather than leave them waiting.
        mpi.abort(fmt::format("calibrate (rank {}): {}", mpi.rank(), e.what()));
    }
#endif
}

}  // namespace

void registerCalibrateCommand(CLI::App& app, int& exit_code) {
    auto opts = std::make_shared<CalibrateOptions>();
    CLI::App* cmd = app.add_subcommand(
        "calibrate", "Measure this machine (GEMM, memory, collectives, their overlap) and write a hardware profile "
                     "for --profile; run as `scripts/mpirun.sh -np N shardcast calibrate --backend cpu` with the N "
                     "ranks `run` will use (one rank alone measures no collectives). Or fit the profile to a real "
                     "PyTorch run of a plan: --from-trace TRACE... --plan PLAN.json");
    cmd->add_option("--backend", opts->backend,
                    "Backend to calibrate (required unless --from-trace): cpu (Eigen fp32 GEMMs and MPI) or cuda (cuBLASLt, HBM and NCCL over the local "
                    "GPUs; needs a build with the CUDA toolkit)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("--from-trace", opts->from_trace,
                    "Instead of measuring: fit a profile to a real PyTorch run of --plan, from its torch.profiler traces "
                    "(files or directories; docs/trace-import.md). Fits compute efficiencies and, where the run has "
                    "collectives of two sizes, their bandwidth and latency; says which figures it kept")
        ->type_name("TRACE");
    cmd->add_option("--plan", opts->plan, "With --from-trace: the plan the traced run trained with")->type_name("PLAN.json");
    cmd->add_option("--profile", opts->profile, "With --from-trace: the profile to start from (default: the plan's GPU preset)")
        ->type_name("NAME|FILE");
    addTraceImportOptions(*cmd, opts->trace_flags);
    cmd->add_option("--out", opts->out,
                    "Profile file to write, atomically (default: cpu-<hostname>.json, or cuda-<GPU name>.json)")
        ->type_name("FILE");
    cmd->add_flag("--json", opts->json, "Print the measured points, the fits and the profile as one JSON object");
    addSaveOption(*cmd, opts->save,
                  "the profile for `--profile NAME` (default NAME: cpu-HOST or the GPU's, as the default --out file is named)");
    cmd->add_flag("--quick", opts->quick,
                  "cpu: fewer, smaller GEMM shapes and collectives of 1 KiB - 16 MiB instead of 1 KiB - 256 MiB (for "
                  "tests); cuda: fewer repetitions, square sizes and HBM sizes, collectives of 1 KiB - 16 MiB");
    cmd->add_option("--gpus", opts->gpus, "cuda: calibrate GPUs 0 .. N-1 from this process (default: every visible GPU); "
                    "collectives and their overlap need N >= 2")
        ->check(CLI::Range(1, 1 << 16))->type_name("N");
    cmd->add_option("--model", opts->model, "cuda: the model whose GEMM and attention shapes are measured (a name or a "
                    "config file)")->capture_default_str();
    cmd->add_option("--seq-len", opts->seq_len, "cuda: the sequence length of those shapes (default: the model's)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    cmd->callback([opts, &exit_code] { exit_code = runCalibrate(*opts); });
}

}  // namespace shardcast::cli
