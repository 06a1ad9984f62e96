#include "measured/calibration_fit.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "simulator/cost_model.hpp"

namespace shardcast::sim {
namespace {

// Both curves are one model: t = latency + scale * u[group] * (x + half), with u = 1 / rate_max
// (GEMM: x = FLOPs, scale 1, no latency; collectives: x = bytes, scale = the bus factor). For a
// fixed `half` it is linear in latency and u, so the fit searches `half` alone and solves the
// rest by weighted linear least squares (variable projection).
struct Sample {
    double x = 0;
    double scale = 1;
    int group = 0;
    double t = 0;
};

struct SharedFit {
    double latency = 0;
    double half = 0;
    std::vector<double> u;
    double sum_sq = std::numeric_limits<double>::infinity();  // sum of squared relative errors
};

// Solves a x = b (n x n, row-major) by Gaussian elimination with partial pivoting; false when
// singular.
bool solve(std::vector<double> a, std::vector<double> b, int n, std::vector<double>& x) {
    for (int col = 0; col < n; ++col) {
        int pivot = col;
        for (int r = col + 1; r < n; ++r) {
            if (std::abs(a[r * n + col]) > std::abs(a[pivot * n + col])) pivot = r;
        }
        if (std::abs(a[pivot * n + col]) < 1e-300) return false;
        if (pivot != col) {
            for (int c = 0; c < n; ++c) std::swap(a[col * n + c], a[pivot * n + c]);
            std::swap(b[col], b[pivot]);
        }
        for (int r = col + 1; r < n; ++r) {
            const double f = a[r * n + col] / a[col * n + col];
            for (int c = col; c < n; ++c) a[r * n + c] -= f * a[col * n + c];
            b[r] -= f * b[col];
        }
    }
    x.assign(n, 0.0);
    for (int r = n - 1; r >= 0; --r) {
        double s = b[r];
        for (int c = r + 1; c < n; ++c) s -= a[r * n + c] * x[c];
        x[r] = s / a[r * n + r];
    }
    return true;
}

double sumSquares(const std::vector<Sample>& samples, double latency, double half, const std::vector<double>& u) {
    double s = 0;
    for (const Sample& p : samples) {
        const double r = (latency + p.scale * u[p.group] * (p.x + half) - p.t) / p.t;
        s += r * r;
    }
    return s;
}

// The best latency and u for a fixed `half`: rows (1/t, scale (x + half) / t in the group's
// column) against 1. A negative latency is refitted at 0.
SharedFit solveForHalf(const std::vector<Sample>& samples, int groups, bool with_latency, double half) {
    SharedFit best;
    for (bool latency_free : {with_latency, false}) {
        const int off = latency_free ? 1 : 0;
        const int n = groups + off;
        std::vector<double> ata(static_cast<size_t>(n) * n, 0.0), atb(n, 0.0);
        for (const Sample& p : samples) {
            std::array<std::pair<int, double>, 2> row{};
            int cols = 0;
            if (latency_free) row[cols++] = {0, 1.0 / p.t};
            row[cols++] = {off + p.group, p.scale * (p.x + half) / p.t};
            for (int i = 0; i < cols; ++i) {
                atb[row[i].first] += row[i].second;
                for (int j = 0; j < cols; ++j) ata[row[i].first * n + row[j].first] += row[i].second * row[j].second;
            }
        }
        std::vector<double> x;
        if (!solve(ata, atb, n, x)) continue;
        SharedFit fit;
        fit.latency = latency_free ? x[0] : 0.0;
        if (fit.latency < 0) continue;
        fit.half = half;
        fit.u.assign(x.begin() + off, x.end());
        fit.sum_sq = sumSquares(samples, fit.latency, half, fit.u);
        return fit;
    }
    return best;
}

// Searches half in [0, 1e3 * max x]: a log-spaced grid, then golden-section refinement around the
// best grid point (the objective is smooth in half).
SharedFit fitShared(const std::vector<Sample>& samples, int groups, bool with_latency) {
    double x_min = std::numeric_limits<double>::infinity(), x_max = 0;
    for (const Sample& p : samples) {
        if (p.x > 0) x_min = std::min(x_min, p.x);
        x_max = std::max(x_max, p.x);
    }
    std::vector<double> grid{0.0};
    const double lo = std::log(x_min * 1e-6), hi = std::log(x_max * 1e3);
    constexpr int kGridPoints = 400;
    for (int i = 0; i <= kGridPoints; ++i) grid.push_back(std::exp(lo + (hi - lo) * i / kGridPoints));
    size_t best_i = 0;
    SharedFit best = solveForHalf(samples, groups, with_latency, grid[0]);
    for (size_t i = 1; i < grid.size(); ++i) {
        SharedFit f = solveForHalf(samples, groups, with_latency, grid[i]);
        if (f.sum_sq < best.sum_sq) {
            best = std::move(f);
            best_i = i;
        }
    }
    double a = grid[best_i == 0 ? 0 : best_i - 1];
    double b = grid[std::min(best_i + 1, grid.size() - 1)];
    const double g = (std::sqrt(5.0) - 1) / 2;
    double c = b - g * (b - a), d = a + g * (b - a);
    SharedFit fc = solveForHalf(samples, groups, with_latency, c);
    SharedFit fd = solveForHalf(samples, groups, with_latency, d);
    for (int it = 0; it < 200 && b - a > 1e-12 * b; ++it) {
        if (fc.sum_sq < fd.sum_sq) {
            b = d;
            d = c;
            fd = std::move(fc);
            c = b - g * (b - a);
            fc = solveForHalf(samples, groups, with_latency, c);
        } else {
            a = c;
            c = d;
            fc = std::move(fd);
            d = a + g * (b - a);
            fd = solveForHalf(samples, groups, with_latency, d);
        }
    }
    if (fc.sum_sq < best.sum_sq) best = std::move(fc);
    if (fd.sum_sq < best.sum_sq) best = std::move(fd);
    return best;
}

double rmsRelative(const SharedFit& fit, size_t count) { return std::sqrt(fit.sum_sq / static_cast<double>(count)); }

int collectiveIndex(core::TaskKind kind) {
    switch (kind) {
        case core::TaskKind::AllGather: return 0;
        case core::TaskKind::ReduceScatter: return 1;
        case core::TaskKind::AllReduce: return 2;
        default: return -1;
    }
}

constexpr std::array<const char*, 3> kCollectiveNames = {"all-gather", "reduce-scatter", "all-reduce"};

}  // namespace

core::Result<GemmFit> fitGemmCurve(std::span<const GemmPoint> points) {
    std::array<std::set<double>, 2> sizes;
    std::vector<Sample> samples;
    for (const GemmPoint& p : points) {
        if (p.m <= 0 || p.n <= 0 || p.k <= 0 || !(p.seconds > 0) || !std::isfinite(p.seconds)) {
            return core::makeError("GEMM fit: every point needs positive m, n, k and time (got m=" + std::to_string(p.m) +
                                   " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                                   " seconds=" + std::to_string(p.seconds) + ")");
        }
        sizes[p.backward ? 1 : 0].insert(p.flops());
        samples.push_back({p.flops(), 1.0, p.backward ? 1 : 0, p.seconds});
    }
    if (sizes[0].size() < 2) return core::makeError("GEMM fit: needs forward points of at least two FLOP counts");
    if (sizes[1].size() == 1) return core::makeError("GEMM fit: backward points need at least two FLOP counts");
    const int groups = sizes[1].empty() ? 1 : 2;
    const SharedFit f = fitShared(samples, groups, /*with_latency=*/false);
    if (f.u.empty() || std::any_of(f.u.begin(), f.u.end(), [](double u) { return !(u > 0); })) {
        return core::makeError("GEMM fit: the times do not grow with the FLOPs; no rate fits them");
    }
    GemmFit fit;
    fit.forward_flops_per_s_max = 1.0 / f.u[0];
    fit.backward_flops_per_s_max = 1.0 / f.u[groups - 1];
    fit.half_flops = f.half;
    fit.rms_relative_error = rmsRelative(f, samples.size());
    return fit;
}

double gemmFitSeconds(const GemmFit& fit, const GemmPoint& point) {
    const double rate = point.backward ? fit.backward_flops_per_s_max : fit.forward_flops_per_s_max;
    return (point.flops() + fit.half_flops) / rate;
}

double CollectivePoint::busBandwidth() const { return algBandwidth() * busBandwidthFactor(kind, group_size); }

double CollectiveFit::busbwMax(core::TaskKind kind) const {
    switch (kind) {
        case core::TaskKind::AllGather: return all_gather_busbw_max;
        case core::TaskKind::ReduceScatter: return reduce_scatter_busbw_max;
        case core::TaskKind::AllReduce: return all_reduce_busbw_max;
        default: assert(false && "not a collective"); return 0;
    }
}

core::Result<CollectiveFit> fitCollectiveCurve(std::span<const CollectivePoint> points) {
    std::array<std::set<int64_t>, 3> sizes;
    std::vector<Sample> samples;
    for (const CollectivePoint& p : points) {
        const int g = collectiveIndex(p.kind);
        if (g < 0) {
            return core::makeError("collective fit: a point's kind must be all-gather, reduce-scatter or all-reduce (got " +
                                   std::string(core::taskKindName(p.kind)) + ")");
        }
        if (p.group_size < 2 || p.bytes <= 0 || !(p.seconds > 0) || !std::isfinite(p.seconds)) {
            return core::makeError("collective fit: every point needs a group of at least 2 ranks, positive bytes and time "
                                   "(got group " + std::to_string(p.group_size) + ", " + std::to_string(p.bytes) +
                                   " B, " + std::to_string(p.seconds) + " s)");
        }
        sizes[g].insert(p.bytes);
        samples.push_back({static_cast<double>(p.bytes), busBandwidthFactor(p.kind, p.group_size), g, p.seconds});
    }
    // Kinds without points are not fitted (busbw_max 0: a traced run may have no all-reduce); each
    // kind with points needs two sizes at least.
    std::array<int, 3> slot{-1, -1, -1};
    int kinds = 0;
    for (int g = 0; g < 3; ++g) {
        if (sizes[g].empty()) continue;
        if (sizes[g].size() < 2) {
            return core::makeError(std::string("collective fit: ") + kCollectiveNames[g] +
                                   " needs points of at least two sizes");
        }
        slot[static_cast<size_t>(g)] = kinds++;
    }
    if (kinds == 0) return core::makeError("collective fit: no points");
    for (Sample& sample : samples) sample.group = slot[static_cast<size_t>(sample.group)];
    const SharedFit f = fitShared(samples, kinds, /*with_latency=*/true);
    if (f.u.size() != static_cast<size_t>(kinds) || std::any_of(f.u.begin(), f.u.end(), [](double u) { return !(u > 0); })) {
        return core::makeError("collective fit: the times do not grow with the size; no bandwidth fits them");
    }
    CollectiveFit fit;
    const auto busbw = [&](int g) { return slot[static_cast<size_t>(g)] < 0 ? 0.0 : 1.0 / f.u[static_cast<size_t>(slot[static_cast<size_t>(g)])]; };
    fit.all_gather_busbw_max = busbw(0);
    fit.reduce_scatter_busbw_max = busbw(1);
    fit.all_reduce_busbw_max = busbw(2);
    fit.half_bytes = f.half;
    fit.latency_s = f.latency;
    fit.rms_relative_error = rmsRelative(f, samples.size());
    return fit;
}

double collectiveFitSeconds(const CollectiveFit& fit, const CollectivePoint& point) {
    const double s = static_cast<double>(point.bytes);
    const double busbw = fit.busbwMax(point.kind) * s / (s + fit.half_bytes);
    return fit.latency_s + s * busBandwidthFactor(point.kind, point.group_size) / busbw;
}

double typicalSeconds(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double pos = 0.25 * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

HardwareProfile calibratedProfile(const CalibrationFits& fits, const HardwareProfile& base) {
    HardwareProfile p = base;
    core::GpuSpec& gpu = p.gpu;
    gpu.name = fits.name;
    gpu.source = fits.source;
    gpu.memory_bytes = fits.memory_bytes;
    const double peak = std::max(fits.gemm.forward_flops_per_s_max, fits.gemm.backward_flops_per_s_max);
    gpu.peak_flops_bf16 = gpu.peak_flops_fp16 = gpu.peak_flops_tf32 = gpu.peak_flops_fp32 = peak;
    gpu.peak_flops_fp8 = 0;
    p.forward_efficiency_max = fits.gemm.forward_flops_per_s_max / peak;
    p.backward_efficiency_max = fits.gemm.backward_flops_per_s_max / peak;
    p.gemm_half_flops = fits.gemm.half_flops;
    gpu.hbm_bytes_per_s = fits.memory_bytes_per_s;
    p.hbm_efficiency = 1.0;
    // Measured rates already hold the device's clocks: no clock scaling, no wave quantisation over
    // a preset's SM count, and the backend launches no eager PyTorch kernels.
    gpu.sm_count = 0;
    gpu.boost_clock_mhz = gpu.sustained_clock_mhz = gpu.tdp_w = gpu.power_limit_w = 0;
    // Nor a preset's best-shape cap, FlashAttention-2 rate or NCCL SM count.
    gpu.max_matmul_flops_bf16 = gpu.mma_sync_fraction = 0;
    gpu.nccl_ctas = 0;
    p.kernel_launch_ns = 0;
    // No CUDA context, cuBLAS workspace or NCCL communicator buffers on the CPU backend.
    gpu.cuda_context_bytes = gpu.cublas_workspace_bytes = gpu.nccl_bytes_per_communicator = 0;
    if (fits.collectives) {
        const CollectiveFit& c = *fits.collectives;
        const double link = std::max({c.all_gather_busbw_max, c.reduce_scatter_busbw_max, c.all_reduce_busbw_max});
        gpu.nvlink_bytes_per_s = link;
        // A kind the calibration did not measure keeps base's efficiency.
        if (c.all_gather_busbw_max > 0) p.nvlink_all_gather_efficiency = c.all_gather_busbw_max / link;
        if (c.reduce_scatter_busbw_max > 0) p.nvlink_reduce_scatter_efficiency = c.reduce_scatter_busbw_max / link;
        if (c.all_reduce_busbw_max > 0) p.nvlink_all_reduce_efficiency = c.all_reduce_busbw_max / link;
        p.busbw_half_bytes = c.half_bytes;
        gpu.intra_node_latency_s = c.latency_s;
    }
    return p;
}

}  // namespace shardcast::sim
