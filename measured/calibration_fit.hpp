#pragma once
// Fitting the cost models' curves (DESIGN.md section 4) to measured points, and turning the fits
// into a HardwareProfile. Pure functions over plain points: a backend's calibration measures, this
// file fits, so the fits are tested without MPI or a device.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/base/result.hpp"
#include "core/program/program.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {

// The statistic of every calibration timing: the lower quartile of the iterations (linear
// interpolation between order statistics); 0 for none. Another process descheduling the measuring
// one, or clock boosts settling, stretch some iterations; the quartile keeps up to three in four
// of them out of the figure, where a median keeps one in two.
double typicalSeconds(std::vector<double> seconds);

// One GEMM C[m, n] = A[m, k] B[k, n] (2 m n k FLOPs) and its median time. `backward`: the shape
// comes from a backward pass (dgrad / wgrad), fitted with its own eff_max.
struct GemmPoint {
    int64_t m = 0, n = 0, k = 0;
    bool backward = false;
    double seconds = 0;
    double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// rate(f) = rate_max * f / (f + half_flops), i.e. time = (f + half_flops) / rate_max: the cost
// model's eff(f) curve with peak * eff_max = rate_max. One half_flops for both passes, as the
// profile has one.
struct GemmFit {
    double forward_flops_per_s_max = 0;
    double backward_flops_per_s_max = 0;  // == forward when no backward point was given
    double half_flops = 0;
    double rms_relative_error = 0;        // of the fitted times against the measured ones
};

// Least squares on relative time errors, sum((t_fit - t) / t)^2, so that small shapes weigh as
// much as large ones. Needs forward points of at least two different FLOP counts.
core::Result<GemmFit> fitGemmCurve(std::span<const GemmPoint> points);
double gemmFitSeconds(const GemmFit& fit, const GemmPoint& point);

// One collective of size S (nccl-tests: the gathered size for all-gather and reduce-scatter, the
// buffer for all-reduce) over `group_size` ranks, and its median time.
struct CollectivePoint {
    core::TaskKind kind = core::TaskKind::AllGather;  // AllGather, ReduceScatter or AllReduce
    int group_size = 2;
    int64_t bytes = 0;
    double seconds = 0;
    double algBandwidth() const { return static_cast<double>(bytes) / seconds; }  // bytes/s
    double busBandwidth() const;                                                  // bytes/s
};

// t(S) = latency + S * factor / busbw(S), busbw(S) = busbw_max[kind] * S / (S + half_bytes): the
// cost model's collective time, one latency and one half size shared by the three collectives.
struct CollectiveFit {
    double all_gather_busbw_max = 0;      // bytes/s
    double reduce_scatter_busbw_max = 0;
    double all_reduce_busbw_max = 0;
    double half_bytes = 0;
    double latency_s = 0;
    double rms_relative_error = 0;
    double busbwMax(core::TaskKind kind) const;
};

// Least squares on relative time errors with latency >= 0 and half_bytes >= 0. Every kind with
// points needs them in at least two sizes; a kind without points is not fitted (busbw_max 0). With one group size, latency and half_bytes trade against each
// other (t is linear in S: the intercept is latency + factor * half / busbw_max), so only their
// differences between collectives tell them apart; predicted times are what the fit guarantees.
core::Result<CollectiveFit> fitCollectiveCurve(std::span<const CollectivePoint> points);
double collectiveFitSeconds(const CollectiveFit& fit, const CollectivePoint& point);

// What a calibration measured and fitted, turned into a profile over `base` (which supplies the
// fields nothing measured). Peak FLOP/s (every float dtype: the CPU backend computes in fp32
// whatever the plan's dtype) = the faster pass's rate_max, eff_max = rate_max / peak;
// hbm_bytes_per_s = memory_bytes_per_s with hbm_efficiency 1; the collectives' largest busbw_max
// becomes nvlink_bytes_per_s (one node: the "intra-node link") and the others efficiencies against
// it; no collective fit leaves base's collective fields as they are.
struct CalibrationFits {
    std::string name;        // the profile's GPU name, e.g. "cpu-myhost"
    std::string source;      // how and when it was calibrated
    int64_t memory_bytes = 0;
    GemmFit gemm;
    double memory_bytes_per_s = 0;  // bytes read + written per second by streaming kernels
    std::optional<CollectiveFit> collectives;
};
HardwareProfile calibratedProfile(const CalibrationFits& fits, const HardwareProfile& base);

}  // namespace shardcast::sim
