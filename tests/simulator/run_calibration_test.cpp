// Fitting a profile to one measured run (measured/run_calibration.hpp): the "measured" run is the
// prediction on a known profile, so the fit must find that profile's figures and reproduce its step.
#include "measured/run_calibration.hpp"

#include <cmath>
#include <memory>

#include <gtest/gtest.h>

#include "core/model/model_io.hpp"
#include "simulator/cost_model.hpp"
#include "simulator/evaluation.hpp"

namespace shardcast::sim {
namespace {

core::Plan cpuPlan() {
    auto m = core::resolveModel("tiny-llama");
    EXPECT_TRUE(m.ok());
    core::Plan plan;
    plan.model = std::make_shared<const core::Model>(std::move(*m));
    plan.model_ref = "tiny-llama";
    plan.cluster.gpu = *core::findGpuPreset("cpu");
    plan.cluster.gpus_per_node = 2;
    plan.training.seq_len = 128;
    plan.training.micro_batch = 2;
    plan.training.param_dtype = core::DType::F32;
    plan.sharding.wrap.kind = core::WrapKind::Block;
    return plan;
}

// `base` with its compute efficiencies scaled: GEMM and attention, forward and backward, and HBM.
HardwareProfile scaledCompute(const HardwareProfile& base, double gemm_fwd, double attention_fwd, double gemm_bwd,
                              double attention_bwd, double hbm) {
    HardwareProfile p = base;
    p.forward_efficiency_max *= gemm_fwd;
    p.attention_forward_efficiency *= attention_fwd;
    p.backward_efficiency_max *= gemm_bwd;
    p.attention_backward_efficiency *= attention_bwd;
    p.hbm_efficiency *= hbm;
    return p;
}

TEST(RunCalibrationTest, FindsTheProfileThatMadeTheRun) {
    const core::Plan plan = cpuPlan();
    const HardwareProfile base = HardwareProfile::fromCluster(plan.cluster);
    ASSERT_TRUE(base.gpu.host_device);
    HardwareProfile truth = scaledCompute(base, 0.5, 0.5, 0.4, 0.4, 0.3);
    truth.gpu.nvlink_bytes_per_s = 1e9;
    truth.nvlink_all_gather_efficiency = 1.0;
    truth.nvlink_reduce_scatter_efficiency = 0.5;
    truth.busbw_half_bytes = 0;
    truth.gpu.intra_node_latency_s = 20e-6;
    truth.unit_hook_ns = 2 * base.unit_hook_ns + 1'000'000;
    auto run = evaluatePlan(plan, &truth, {});
    ASSERT_TRUE(run) << run.error().message;

    auto fit = calibrateFromRun(plan, base, run->timeline, {}, "test");
    ASSERT_TRUE(fit) << fit.error().message;
    EXPECT_EQ(fit->measured_step_ns, run->timeline.step_ns);
    EXPECT_NE(fit->predicted_step_before_ns, run->timeline.step_ns);
    // The fitted profile predicts the run's step (the fit closes each work class's busy time).
    EXPECT_NEAR(static_cast<double>(fit->predicted_step_after_ns) / static_cast<double>(run->timeline.step_ns), 1.0, 0.01);
    EXPECT_NEAR(fit->profile.forward_efficiency_max / truth.forward_efficiency_max, 1.0, 0.05);
    EXPECT_NEAR(fit->profile.backward_efficiency_max / truth.backward_efficiency_max, 1.0, 0.05);
    EXPECT_NEAR(fit->profile.hbm_efficiency / truth.hbm_efficiency, 1.0, 0.05);
    // Collectives: exact times of two sizes per kind give the bandwidths back.
    EXPECT_NEAR(fit->profile.gpu.nvlink_bytes_per_s * fit->profile.nvlink_all_gather_efficiency / 1e9, 1.0, 0.02);
    EXPECT_NEAR(fit->profile.gpu.nvlink_bytes_per_s * fit->profile.nvlink_reduce_scatter_efficiency / 0.5e9, 1.0, 0.02);
    // Host time between tasks (hooks) is what the step has beyond its tasks: the truth's own.
    EXPECT_NEAR(static_cast<double>(fit->profile.unit_hook_ns) / static_cast<double>(truth.unit_hook_ns), 1.0, 0.05);
    // It says what it kept: nothing here measures an all-reduce or the network.
    bool kept_network = false;
    for (const RunFitLine& l : fit->lines) kept_network = kept_network || (l.figure == "network_efficiency" && !l.fitted);
    EXPECT_TRUE(kept_network);
}

// A run that breaks its compute tasks down by op kind (a trace's CPU ops) is fitted op by op: GEMM
// and attention efficiencies apart (a task-level fit can only scale them together) and the launch
// per op from what the tasks spend outside GEMMs and attention. Here the "measured" ops are the
// truth profile's own op times, less their launch, as the fit reads a trace's ops.
TEST(RunCalibrationTest, OpBreakdownSeparatesGemmAttentionAndLaunch) {
    const core::Plan plan = cpuPlan();
    const HardwareProfile base = HardwareProfile::fromCluster(plan.cluster);
    HardwareProfile truth = scaledCompute(base, 0.5, 0.2, 0.4, 0.9, 0.3);
    truth.kernel_launch_ns = 4 * base.kernel_launch_ns + 5000;
    auto run = evaluatePlan(plan, &truth, {});
    ASSERT_TRUE(run) << run.error().message;
    const core::Program& program = run->program;
    const CostModel cost(truth);
    const double launch = static_cast<double>(truth.kernel_launch_ns) * 1e-9;
    std::vector<core::MeasuredOps> ops(program.tasks.size());
    int broken_down = 0;
    for (size_t id = 0; id < program.tasks.size(); ++id) {
        const core::Task& t = program.tasks[id];
        if (t.kind != core::TaskKind::Forward && t.kind != core::TaskKind::Backward) continue;
        core::MeasuredOps& m = ops[id];
        m.measured = true;
        const core::OpShape* op = program.opsBegin(t);
        for (uint32_t i = 0; i < t.ops.count; ++i, ++op) {
            const auto ns = static_cast<int64_t>(std::llround((cost.opSeconds(*op, t.kind) - launch) * 1e9));
            (op->kind == core::OpShapeKind::Gemm ? m.gemm_ns
             : op->kind == core::OpShapeKind::Elementwise ? m.other_ns
                                                         : m.attention_ns) += ns;
            ++m.count;
        }
        broken_down += t.ops.count > 0 ? 1 : 0;
    }
    ASSERT_GT(broken_down, 8);

    auto fit = calibrateFromRun(plan, base, run->timeline, {}, "test", ops);
    ASSERT_TRUE(fit) << fit.error().message;
    EXPECT_NEAR(fit->profile.forward_efficiency_max / truth.forward_efficiency_max, 1.0, 0.02);
    EXPECT_NEAR(fit->profile.attention_forward_efficiency / truth.attention_forward_efficiency, 1.0, 0.02);
    EXPECT_NEAR(fit->profile.backward_efficiency_max / truth.backward_efficiency_max, 1.0, 0.02);
    EXPECT_NEAR(fit->profile.attention_backward_efficiency / truth.attention_backward_efficiency, 1.0, 0.02);
    EXPECT_NEAR(fit->profile.hbm_efficiency / truth.hbm_efficiency, 1.0, 0.02);
    EXPECT_NEAR(static_cast<double>(fit->profile.kernel_launch_ns) / static_cast<double>(truth.kernel_launch_ns), 1.0, 0.02);
    EXPECT_NEAR(static_cast<double>(fit->predicted_step_after_ns) / static_cast<double>(run->timeline.step_ns), 1.0, 0.01);
    bool launch_fitted = false;
    for (const RunFitLine& l : fit->lines) launch_fitted = launch_fitted || (l.figure == "kernel_launch_ns" && l.fitted);
    EXPECT_TRUE(launch_fitted);

    // Without the breakdown the fit scales GEMM and attention together: it cannot find both.
    auto whole = calibrateFromRun(plan, base, run->timeline, {}, "test");
    ASSERT_TRUE(whole);
    EXPECT_GT(std::fabs(whole->profile.attention_forward_efficiency / truth.attention_forward_efficiency - 1.0), 0.2);
}

TEST(RunCalibrationTest, ARunOfAnotherPlanIsAnError) {
    const core::Plan plan = cpuPlan();
    const HardwareProfile base = HardwareProfile::fromCluster(plan.cluster);
    core::Timeline wrong;
    wrong.tasks.resize(3);
    auto fit = calibrateFromRun(plan, base, wrong, {}, "test");
    ASSERT_FALSE(fit);
    EXPECT_NE(fit.error().message.find("not a run of this plan"), std::string::npos);
}

}  // namespace
}  // namespace shardcast::sim
