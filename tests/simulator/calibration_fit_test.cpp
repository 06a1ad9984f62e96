#include "measured/calibration_fit.hpp"

#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simulator/cost_model.hpp"

namespace shardcast::sim {
namespace {

using core::TaskKind;

// Times generated from the cost model's own curve: the fit must give the parameters back.
std::vector<GemmPoint> syntheticGemm(double fwd_rate, double bwd_rate, double half) {
    std::vector<GemmPoint> points;
    for (int64_t s : {64, 128, 256, 512, 1024, 2048}) {
        points.push_back({s, s, s, false, 0});
        points.push_back({512, s, 256, true, 0});
    }
    points.push_back({4096, 1024, 1024, false, 0});
    points.push_back({1024, 1024, 4096, true, 0});
    for (GemmPoint& p : points) p.seconds = (p.flops() + half) / (p.backward ? bwd_rate : fwd_rate);
    return points;
}

TEST(CalibrationFitTest, GemmCurveRecoversRatesAndHalfFlops) {
    const auto points = syntheticGemm(80e9, 60e9, 3.5e6);
    auto fit = fitGemmCurve(points);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_NEAR(fit->forward_flops_per_s_max / 80e9, 1.0, 1e-6);
    EXPECT_NEAR(fit->backward_flops_per_s_max / 60e9, 1.0, 1e-6);
    EXPECT_NEAR(fit->half_flops / 3.5e6, 1.0, 1e-6);
    EXPECT_LT(fit->rms_relative_error, 1e-9);
    for (const GemmPoint& p : points) EXPECT_NEAR(gemmFitSeconds(*fit, p) / p.seconds, 1.0, 1e-9);
}

TEST(CalibrationFitTest, GemmCurveThroughTwoPointsWorkedByHand) {
    // 100^3 and 200^3: 2e6 and 16e6 FLOPs in 3 ms and 17 ms. t = (f + half) / rate: the slope
    // gives rate = 14e6 / 14e-3 = 1e9 FLOP/s, the intercept half = 3e-3 * 1e9 - 2e6 = 1e6 FLOPs.
    const std::vector<GemmPoint> points = {{100, 100, 100, false, 3e-3}, {200, 200, 200, false, 17e-3}};
    auto fit = fitGemmCurve(points);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_NEAR(fit->forward_flops_per_s_max, 1e9, 1e3);
    EXPECT_NEAR(fit->half_flops, 1e6, 1.0);
    EXPECT_NEAR(gemmFitSeconds(*fit, {300, 300, 300, false, 0}), (54e6 + 1e6) / 1e9, 1e-9);
}

TEST(CalibrationFitTest, GemmCurveWithoutBackwardPointsUsesTheForwardRate) {
    std::vector<GemmPoint> points;
    for (GemmPoint p : syntheticGemm(50e9, 50e9, 0)) {
        if (!p.backward) points.push_back(p);
    }
    auto fit = fitGemmCurve(points);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_NEAR(fit->forward_flops_per_s_max / 50e9, 1.0, 1e-6);
    EXPECT_DOUBLE_EQ(fit->backward_flops_per_s_max, fit->forward_flops_per_s_max);
    EXPECT_NEAR(fit->half_flops, 0.0, 1.0);  // 1 FLOP against points of 5e5 and more
}

TEST(CalibrationFitTest, GemmCurveRefusesTooFewSizes) {
    std::vector<GemmPoint> points = {{256, 256, 256, false, 1e-3}, {256, 256, 256, false, 1.1e-3}};
    auto fit = fitGemmCurve(points);
    ASSERT_FALSE(fit.ok());
    EXPECT_NE(fit.error().message.find("two FLOP counts"), std::string::npos);
    points = {{256, 256, 256, false, 1e-3}, {0, 256, 256, false, 1e-3}};
    EXPECT_FALSE(fitGemmCurve(points).ok());
}

CollectiveFit knownCollectives() {
    CollectiveFit truth;
    truth.all_gather_busbw_max = 6e9;
    truth.reduce_scatter_busbw_max = 3e9;
    truth.all_reduce_busbw_max = 4e9;
    truth.half_bytes = 256 * 1024;
    truth.latency_s = 4e-6;
    return truth;
}

std::vector<CollectivePoint> syntheticCollectives(const CollectiveFit& truth, std::vector<int> groups) {
    std::vector<CollectivePoint> points;
    for (TaskKind kind : {TaskKind::AllGather, TaskKind::ReduceScatter, TaskKind::AllReduce}) {
        for (int n : groups) {
            for (int64_t s = 1024; s <= (int64_t{256} << 20); s *= 4) {
                CollectivePoint p{kind, n, s, 0};
                p.seconds = collectiveFitSeconds(truth, p);
                points.push_back(p);
            }
        }
    }
    return points;
}

TEST(CalibrationFitTest, CollectiveCurveRecoversBusBandwidthHalfSizeAndLatency) {
    const CollectiveFit truth = knownCollectives();
    // Two group sizes give different bus factors per collective, so latency and half size separate.
    const auto points = syntheticCollectives(truth, {2, 4});
    auto fit = fitCollectiveCurve(points);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_NEAR(fit->all_gather_busbw_max / 6e9, 1.0, 1e-6);
    EXPECT_NEAR(fit->reduce_scatter_busbw_max / 3e9, 1.0, 1e-6);
    EXPECT_NEAR(fit->all_reduce_busbw_max / 4e9, 1.0, 1e-6);
    EXPECT_NEAR(fit->half_bytes / truth.half_bytes, 1.0, 1e-5);
    EXPECT_NEAR(fit->latency_s / truth.latency_s, 1.0, 1e-5);
    EXPECT_LT(fit->rms_relative_error, 1e-8);
}

TEST(CalibrationFitTest, CollectiveCurveWithOneGroupSizeStillPredictsTheTimes) {
    const auto points = syntheticCollectives(knownCollectives(), {2});
    auto fit = fitCollectiveCurve(points);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_NEAR(fit->all_gather_busbw_max / 6e9, 1.0, 1e-6);
    for (const CollectivePoint& p : points) EXPECT_NEAR(collectiveFitSeconds(*fit, p) / p.seconds, 1.0, 1e-6);
}

TEST(CalibrationFitTest, CollectiveCurveAgreesWithTheCostModel) {
    // nccl-tests: an all-reduce of S bytes over n ranks moves 2(n-1)/n S per rank: at 1 GiB over 4
    // ranks and busbw 4 GB/s (half 0, latency 0) that is 1.5 GiB / 4 GB/s.
    CollectiveFit fit;
    fit.all_gather_busbw_max = fit.reduce_scatter_busbw_max = fit.all_reduce_busbw_max = 4e9;
    const CollectivePoint p{TaskKind::AllReduce, 4, int64_t{1} << 30, 0};
    EXPECT_DOUBLE_EQ(collectiveFitSeconds(fit, p), 1.5 * (1 << 30) / 4e9);
}

// A traced run has all-gathers and reduce-scatters but no all-reduce: the kinds with points are
// fitted (exactly, from exact synthetic times), the others stay unfitted (0); a kind with points of
// one size only is an error naming it.
TEST(CalibrationFitTest, CollectiveCurveFitsTheKindsItHasPointsOf) {
    auto points = syntheticCollectives(knownCollectives(), {2, 4});
    std::erase_if(points, [](const CollectivePoint& p) { return p.kind == TaskKind::AllReduce; });
    auto fit = fitCollectiveCurve(points);
    ASSERT_TRUE(fit.ok()) << fit.error().message;
    EXPECT_NEAR(fit->all_gather_busbw_max / 6e9, 1.0, 1e-6);
    EXPECT_NEAR(fit->reduce_scatter_busbw_max / 3e9, 1.0, 1e-6);
    EXPECT_EQ(fit->all_reduce_busbw_max, 0.0);

    auto one_size = syntheticCollectives(knownCollectives(), {2});
    const int64_t first_rs = [&] {
        for (const CollectivePoint& p : one_size) {
            if (p.kind == TaskKind::ReduceScatter) return p.bytes;
        }
        return int64_t{0};
    }();
    std::erase_if(one_size, [&](const CollectivePoint& p) { return p.kind == TaskKind::ReduceScatter && p.bytes != first_rs; });
    auto bad = fitCollectiveCurve(one_size);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("reduce-scatter needs points of at least two sizes"), std::string::npos);
}

TEST(CalibrationFitTest, CalibratedProfileSetsMeasuredFiguresAndRoundTrips) {
    core::ClusterSpec cluster;
    cluster.gpu = *core::findGpuPreset("H100-SXM");
    CalibrationFits fits;
    fits.name = "cpu-test";
    fits.source = "synthetic";
    fits.memory_bytes = int64_t{16} << 30;
    fits.gemm = {80e9, 60e9, 3.5e6, 0};
    fits.memory_bytes_per_s = 20e9;
    fits.collectives = knownCollectives();
    const HardwareProfile p = calibratedProfile(fits, HardwareProfile::fromCluster(cluster));
    EXPECT_EQ(p.gpu.name, "cpu-test");
    // The CPU backend computes fp32 whatever the plan's dtype: every float peak is the fp32 rate.
    EXPECT_DOUBLE_EQ(p.peakFlops(core::DType::BF16), 80e9);
    EXPECT_DOUBLE_EQ(p.peakFlops(core::DType::F32), 80e9);
    EXPECT_DOUBLE_EQ(p.forward_efficiency_max, 1.0);
    EXPECT_DOUBLE_EQ(p.backward_efficiency_max, 0.75);
    EXPECT_DOUBLE_EQ(p.gpu.hbm_bytes_per_s * p.hbm_efficiency, 20e9);
    EXPECT_DOUBLE_EQ(p.gpu.nvlink_bytes_per_s, 6e9);
    EXPECT_DOUBLE_EQ(p.nvlink_reduce_scatter_efficiency, 0.5);
    EXPECT_DOUBLE_EQ(p.gpu.intra_node_latency_s, 4e-6);
    EXPECT_EQ(p.gpu.cuda_context_bytes, 0);

    // The simulator's collective time over this profile is the fitted curve's.
    CostModel model(p);
    const CollectivePoint point{TaskKind::ReduceScatter, 2, 4 << 20, 0};
    EXPECT_NEAR(model.collectiveSeconds(TaskKind::ReduceScatter, point.bytes, 2, 1),
                collectiveFitSeconds(knownCollectives(), point), 1e-15);

    auto back = profileFromJson(profileToJson(p), "round trip", HardwareProfile::fromCluster(cluster));
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, p);
}

// nccl-tests doc/PERFORMANCE.md: algbw = S / t; busbw = algbw x (n-1)/n for all-gather and
// reduce-scatter, x 2(n-1)/n for all-reduce. 1 GiB in 10 ms over 8 ranks: algbw 107.37 GB/s.
TEST(CalibrationFitTest, AlgAndBusBandwidthFollowNcclTests) {
    const int64_t s = int64_t{1} << 30;
    const CollectivePoint ag{core::TaskKind::AllGather, 8, s, 0.01};
    const CollectivePoint rs{core::TaskKind::ReduceScatter, 8, s, 0.01};
    const CollectivePoint ar{core::TaskKind::AllReduce, 8, s, 0.01};
    EXPECT_DOUBLE_EQ(ag.algBandwidth(), 107374182400.0);
    EXPECT_DOUBLE_EQ(ag.busBandwidth(), 107374182400.0 * 7 / 8);
    EXPECT_DOUBLE_EQ(rs.busBandwidth(), 107374182400.0 * 7 / 8);
    EXPECT_DOUBLE_EQ(ar.busBandwidth(), 107374182400.0 * 2 * 7 / 8);
    const CollectivePoint pair{core::TaskKind::AllReduce, 2, s, 0.01};
    EXPECT_DOUBLE_EQ(pair.busBandwidth(), pair.algBandwidth());  // 2 (2-1)/2 = 1
}

// The lower quartile with linear interpolation: position 0.25 (n - 1) in the sorted samples.
TEST(CalibrationFitTest, TypicalSecondsIsTheLowerQuartile) {
    EXPECT_DOUBLE_EQ(typicalSeconds({4, 1, 3, 2, 5}), 2.0);  // position 1
    EXPECT_DOUBLE_EQ(typicalSeconds({2, 1}), 1.25);          // position 0.25
    EXPECT_DOUBLE_EQ(typicalSeconds({7}), 7.0);
    EXPECT_DOUBLE_EQ(typicalSeconds({}), 0.0);
}

}  // namespace
}  // namespace shardcast::sim
