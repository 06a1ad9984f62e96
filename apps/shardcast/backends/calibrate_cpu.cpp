// `shardcast calibrate --backend cpu`: under `mpirun -np N`, Eigen GEMMs and MPI collectives
// measured and fitted; rank 0 writes the profile and prints the tables.
#include <exception>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/shardcast/backends/calibrate_backend.hpp"
#include "backend_cpu/calibrate.hpp"
#include "backend_cpu/mpi_session.hpp"
#include "core/base/launch_env.hpp"
#include "simulator/cost_model.hpp"

namespace shardcast::cli {
namespace {

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
    fmt::print("  host_cores                            {:10d} cores (shared by the ranks computing at once)\n",
               p.host_cores);
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
    j["gemm_turns"] = m.turns;
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

}  // namespace

int calibrateOnCpu(const CalibrateOptions& o) {
    // Checked on every rank before MPI starts and before minutes of measuring: a bad --out ends
    // the job with exit 2 (said once, by rank 0) and nothing written.
    const std::string out = o.out.empty() ? cpu::cpuProfileName() + ".json" : o.out;
    if (auto bad = outError(out, cpu::cpuProfileName())) return rankZeroInputError(*bad);
    auto session = cpu::MpiSession::start(nullptr, nullptr);
    if (!session) {
        return rankZeroInputError(session.error().message + ": " + installMpiHint("calibrate --backend cpu"));
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
}

}  // namespace shardcast::cli
