// The op-level compute model (CostModel::opSeconds) against values worked out by hand from the
// GPU presets' figures: GEMM shape efficiency (tiles, waves, k ramp), an eager elementwise kernel
// at bytes / bandwidth plus its launch, and the power limit's effect on compute-bound kernels.
#include <cmath>

#include <gtest/gtest.h>

#include "core/program.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/hardware_profile.hpp"

namespace shardcast::sim {
namespace {

HardwareProfile profileFor(const char* preset, double power_limit_w = 0) {
    auto gpu = core::findGpuPreset(preset);
    EXPECT_TRUE(gpu.has_value());
    core::ClusterSpec cluster;
    cluster.gpu = *gpu;
    cluster.gpu.power_limit_w = power_limit_w;
    return HardwareProfile::fromCluster(cluster);
}

core::OpShape gemm(int64_t m, int64_t n, int64_t k) {
    core::OpShape o;
    o.kind = core::OpShapeKind::Gemm;
    o.dtype = core::DType::BF16;
    o.m = m;
    o.n = n;
    o.k = k;
    o.batch = 1;
    return o;
}

TEST(OpTimeTest, GemmShapeEfficiencyByHand) {
    const HardwareProfile h100 = profileFor("H100-SXM");
    const HardwareProfile a100 = profileFor("A100-80G");
    const CostModel h(h100), a(a100);
    // Llama q_proj at 8,192 tokens: 8192 x 4096 x 4096. Tiles: 4096/128 = 32 by 8192/256 = 32 =
    // 1,024; on 132 SMs 8 waves = 1,056 slots: 1024/1056 = 32/33. k ramp 4096/(4096+128) = 32/33.
    EXPECT_NEAR(h.gemmShapeEfficiency(8192, 4096, 4096, 1), (32.0 / 33) * (32.0 / 33), 1e-12);
    // k_proj on A100: 8192 x 1024 x 4096: 1024/128 = 8 by 32 = 256 tiles, 3 waves of 108 = 324
    // slots: 256/324; ramp 32/33.
    EXPECT_NEAR(a.gemmShapeEfficiency(8192, 1024, 4096, 1), (256.0 / 324) * (32.0 / 33), 1e-12);
    // 100 tokens (a small micro-batch): one 128-row tile by 4096/256 = 16, a single partial wave on
    // 132 SMs: 100 * 4096 / (132 * 128 * 256) = 0.0946970; ramp 32/33.
    EXPECT_NEAR(h.gemmShapeEfficiency(100, 4096, 4096, 1), (100.0 * 4096 / (132.0 * 128 * 256)) * (32.0 / 33), 1e-12);
}

TEST(OpTimeTest, GemmTimeIsFlopsOverClockedPeakTimesShapeFactor) {
    const HardwareProfile p = profileFor("H100-SXM");
    const CostModel cost(p);
    // 989.4e12 * 1565/1830 * (32/33)^2 FLOP/s for 2 * 8192 * 4096 * 4096 FLOPs, plus 3 us launch.
    const double rate = 989.4e12 * (1565.0 / 1830) * (32.0 / 33) * (32.0 / 33);
    const double expected = 2.0 * 8192 * 4096 * 4096 / rate + 3e-6;
    EXPECT_NEAR(cost.opSeconds(gemm(8192, 4096, 4096), core::TaskKind::Forward), expected, 1e-12);
    // The small GEMM is still compute-bound: 2*100*4096*4096 = 3.355e9 FLOPs at 77.7 TFLOP/s =
    // 43.2 us against (100*4096*2 + 4096^2) * 2 bytes / (3.35e12 * 0.8) = 13.1 us.
    const double small_rate = 989.4e12 * (1565.0 / 1830) * (100.0 * 4096 / (132.0 * 128 * 256)) * (32.0 / 33);
    EXPECT_NEAR(cost.opSeconds(gemm(100, 4096, 4096), core::TaskKind::Forward),
                2.0 * 100 * 4096 * 4096 / small_rate + 3e-6, 1e-12);
    // A GEMM with a 16-wide dimension gets 16 x 256 tiles (16 of them, one partial wave: compute
    // 2*16*4096^2 / (846e12 * 16*4096/(132*16*256) * 32/33) = 4.4 us) and is bandwidth-bound: its
    // operands and output over 2.68 TB/s = 12.6 us.
    const double bytes = (16.0 * 4096 + 4096.0 * 4096 + 16.0 * 4096) * 2;
    EXPECT_NEAR(cost.opSeconds(gemm(16, 4096, 4096), core::TaskKind::Forward), bytes / (3.35e12 * 0.8) + 3e-6, 1e-12);
}

TEST(OpTimeTest, EagerElementwiseKernelIsBytesOverBandwidthPlusLaunch) {
    const HardwareProfile p = profileFor("A100-80G");
    const CostModel cost(p);
    core::OpShape o;
    o.kind = core::OpShapeKind::Elementwise;
    // An RMSNorm's to(fp32) at 8,192 tokens x 4,096: reads 2 and writes 4 bytes per element.
    o.bytes = int64_t{8192} * 4096 * 6;
    o.flops = 0;
    // 201,326,592 B / (2.039e12 * 0.8) = 123.42 us, plus the 3 us launch.
    EXPECT_NEAR(cost.opSeconds(o, core::TaskKind::Forward), 201326592.0 / (2.039e12 * 0.8) + 3e-6, 1e-12);
    // The H100's faster HBM moves the same kernel in 201,326,592 / 2.68e12 = 75.12 us: the launch
    // is a larger share of it there.
    const HardwareProfile h = profileFor("H100-SXM");
    EXPECT_NEAR(CostModel(h).opSeconds(o, core::TaskKind::Forward), 201326592.0 / (3.35e12 * 0.8) + 3e-6, 1e-12);
}

TEST(OpTimeTest, PowerLimitSlowsComputeByTheCubeRootOfThePowerRatio) {
    const HardwareProfile full = profileFor("H100-SXM");
    const HardwareProfile capped = profileFor("H100-SXM", 500);
    // Clock ~ cbrt(power): 1,565 MHz * cbrt(500/700) = 1,398.97 MHz = 0.76446 of the 1,830 boost.
    EXPECT_NEAR(capped.gpu.computeClockScale(), 1565.0 * std::cbrt(500.0 / 700) / 1830, 1e-12);
    const CostModel a(full), b(capped);
    const double launch = 3e-6;
    const double t700 = a.opSeconds(gemm(8192, 4096, 4096), core::TaskKind::Forward) - launch;
    const double t500 = b.opSeconds(gemm(8192, 4096, 4096), core::TaskKind::Forward) - launch;
    EXPECT_NEAR(t500 / t700, std::cbrt(700.0 / 500), 1e-9);
    // Bandwidth-bound kernels do not slow: HBM is not on the core clock.
    core::OpShape o;
    o.kind = core::OpShapeKind::Elementwise;
    o.bytes = int64_t{1} << 28;
    EXPECT_DOUBLE_EQ(b.opSeconds(o, core::TaskKind::Forward), a.opSeconds(o, core::TaskKind::Forward));
    // At the TDP the clock is the sustained figure; far above it, the boost clock at most.
    EXPECT_DOUBLE_EQ(profileFor("H100-SXM", 700).gpu.computeClockScale(), full.gpu.computeClockScale());
    EXPECT_DOUBLE_EQ(profileFor("H100-SXM", 5000).gpu.computeClockScale(), 1.0);
}

TEST(OpTimeTest, FlashAttentionSerialisesMatmulsWithExponentials) {
    // A100, causal, batch 1, 32 heads, seq 8192, head dim 128, at the sustained clock (1287/1410):
    // pairs = 32 * 8192^2 / 2; matmul FLOPs 4 * 128 per pair at 312e12 * c; one exponential per
    // pair on 108 * 16 SFUs at 1,410 MHz * c; 4 FP32 operations per pair at 19.5e12 * c.
    const HardwareProfile p = profileFor("A100-80G");
    core::OpShape o;
    o.kind = core::OpShapeKind::Attention;
    o.causal = true;
    o.batch = 1;
    o.heads = 32;
    o.kv_heads = 8;
    o.head_dim = 128;
    o.seq = 8192;
    const double c = 1287.0 / 1410;
    const double pairs = 32.0 * 8192 * 8192 / 2;
    const double expected = pairs * 512 / (312e12 * c) + pairs / (108 * 16 * 1410e6 * c) + pairs * 4 / (19.5e12 * c) + 3e-6;
    EXPECT_NEAR(CostModel(p).opSeconds(o, core::TaskKind::Forward), expected, 1e-12);
    // That is 66% of the A100's data-sheet peak, FlashAttention-2's published forward range.
    EXPECT_NEAR(pairs * 512 / 312e12 / expected, 0.66, 0.01);
}

}  // namespace
}  // namespace shardcast::sim
